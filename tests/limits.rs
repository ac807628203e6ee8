//! No project can starve the others (issue 32 item 11, DESIGN.md §12 per-project limits): a
//! scripted model runs a memory hog and a fork bomb with `exec` in one project, through the
//! real daemon, worker and tools, while another project keeps answering and pegasusd stays
//! responsive. The limits are small (64M, 64 processes), so the attacks stay cheap and bounded
//! on a small machine. Where the kernel does not let pegasusd use cgroups, `project show` says
//! why and these tests stop there.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use pegasus_fakellm::{FakeLlm, Match, Reply, Rule, ToolCall};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Duration;

const LIMITS: &str = "limits: {memory: 64M, pids: 64, cpu: 1.0}\n";
const MEMORY_KILLED: &str = "killed: the project's memory limit (64M) was reached";

/// On a message containing `trigger`, the model runs `exec` with `args` once, then answers
/// `answer` when the tool result contains `seen`, else `unexpected: <trigger>`.
fn script(fake: &FakeLlm, trigger: &str, args: serde_json::Value, seen: &str, answer: &str) {
    fake.add_rule(Rule::new(
        Match::All(vec![
            Match::LastUserTextContains(trigger.into()),
            Match::NewPrompt,
        ]),
        Reply::Tools(vec![ToolCall::new("exec", args)]),
    ));
    fake.add_rule(Rule::new(
        Match::All(vec![
            Match::LastUserTextContains(trigger.into()),
            Match::LastToolResultContains(seen.into()),
        ]),
        Reply::Text(answer.into()),
    ));
    fake.add_rule(Rule::new(
        Match::LastUserTextContains(trigger.into()),
        Reply::Text(format!("unexpected: {trigger}")),
    ));
}

/// Where `controller`'s hierarchy is mounted (v1), or the unified one (`None`).
fn mount_of(controller: Option<&str>) -> Option<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    info.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let point = left.split(' ').nth(4)?;
        let mut r = right.split(' ');
        let fstype = r.next()?;
        let options = r.nth(1)?;
        let hit = match controller {
            Some(c) => fstype == "cgroup" && options.split(',').any(|o| o == c),
            None => fstype == "cgroup2",
        };
        hit.then(|| PathBuf::from(point))
    })
}

/// The directory of the cgroup process `pid` is in for `controller` (v1, or the v2 one).
fn cgroup_dir(pid: u32, controller: &str) -> PathBuf {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    for line in text.lines() {
        let mut it = line.splitn(3, ':');
        let (_, ctrls, path) = (it.next().unwrap(), it.next().unwrap(), it.next().unwrap());
        if ctrls.split(',').any(|c| c == controller) {
            return mount_of(Some(controller))
                .unwrap()
                .join(path.trim_start_matches('/'));
        }
    }
    let path = text.lines().find_map(|l| l.strip_prefix("0::")).unwrap();
    mount_of(None).unwrap().join(path.trim_start_matches('/'))
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

/// The project's limits as `project show` gives them, or why they do not apply (skip).
fn applied_limits(home: &Home, name: &str) -> Result<serde_json::Value, String> {
    let limits = home.json(&["project", "show", name])["limits"].clone();
    if limits["applied"] == true {
        Ok(limits)
    } else {
        Err(limits["note"]
            .as_str()
            .unwrap_or("no limits shown")
            .to_string())
    }
}

/// A memory hog in one project is killed inside it, the model is told so in its exact words
/// (and the session keeps it), its worker lives on, and another project answers throughout;
/// pegasusd's own cgroups do not change.
#[test]
fn a_memory_hog_is_killed_in_its_project_while_another_keeps_answering() {
    let fake = FakeLlm::start().unwrap();
    main_agent_rule(&fake);
    // `tail` keeps the current line in memory, and /dev/zero never ends one.
    script(
        &fake,
        "eat memory",
        json!({"command": "head -c 1G /dev/zero | tail"}),
        MEMORY_KILLED,
        "the hog was stopped",
    );
    fake.add_rule(Rule::new(Match::Any, Reply::Text("ok".into())));
    let home = fake_home(&fake, LIMITS);
    let d = home.start_fake();
    let ours = read(Path::new(&format!("/proc/{}/cgroup", d.pid)));
    let hog = home.create("hog");
    let calm = home.create("calm");
    let limits = match applied_limits(&home, "hog") {
        Ok(l) => l,
        Err(why) => return eprintln!("skipped: no limits here ({why})"),
    };
    assert_eq!(
        (&limits["memory"], &limits["pids"], &limits["cpu"]),
        (&json!("64M"), &json!(64), &json!(1.0))
    );
    let shown = home.ctl_ok(&["project", "show", "hog"]);
    assert!(
        shown.contains("limits       memory 64M, pids 64, cpu 1.0 (cgroup v"),
        "{shown}"
    );
    // The worker is in its project's cgroup, pegasusd is not.
    let worker_cg = cgroup_dir(hog, "memory");
    assert!(worker_cg.ends_with("hog/worker"), "{}", worker_cg.display());
    let project_cg = worker_cg.parent().unwrap().to_path_buf();
    assert_ne!(cgroup_dir(d.pid, "memory"), worker_cg);
    assert!(!cgroup_dir(d.pid, "memory").starts_with(&project_cg));

    let h = home.path().to_path_buf();
    let hogging = std::thread::spawn(move || {
        std::process::Command::new(PEGASUSCTL)
            .arg("--home")
            .arg(h)
            .args(["project", "send", "hog", "eat memory", "--wait"])
            .output()
            .unwrap()
    });
    let mut answered = 0;
    while !hogging.is_finished() || answered == 0 {
        assert_eq!(
            home.ctl_ok(&["project", "send", "calm", "hello", "--wait"])
                .trim(),
            "ok"
        );
        answered += 1;
    }
    let out = hogging.join().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "the hog was stopped"
    );
    // Recorded in the session, as the tool result the model got.
    let session = read(&home.project_dir("hog").join("session/current.jsonl"));
    assert!(session.contains(MEMORY_KILLED), "{session}");
    // The kernel's own count, in the project's cgroup.
    let kills = ["", "commands", "worker"]
        .iter()
        .map(|leaf| read(&project_cg.join(leaf).join("memory.oom_control")))
        .chain([read(&project_cg.join("memory.events"))])
        .any(|t| {
            t.lines()
                .any(|l| l.starts_with("oom_kill ") && l != "oom_kill 0")
        });
    assert!(kills, "no oom kill counted in {}", project_cg.display());
    // Nothing else was killed: both workers, pegasusd, and pegasusd's cgroups as they were.
    assert_eq!(home.ready_worker("hog", None), hog);
    assert_eq!(home.ready_worker("calm", None), calm);
    assert!(home.ctl(&["status"]).status.success());
    assert_eq!(read(Path::new(&format!("/proc/{}/cgroup", d.pid))), ours);
}

/// A fork bomb in one project runs into its process limit there: forks fail inside it, the
/// other project answers and pegasusd stays responsive meanwhile, and the bomb's worker ends
/// its command and goes on.
#[test]
fn a_fork_bomb_fails_inside_its_project_while_the_others_answer() {
    let fake = FakeLlm::start().unwrap();
    main_agent_rule(&fake);
    script(
        &fake,
        "fork bomb",
        // The bomb starts in a subshell (the one fork the command's shell makes, while the
        // table is empty: a fork refused to the shell itself would end it early), then the
        // shell waits without a fork of its own (`exec`), until the call's timeout.
        json!({"command": "(b() { b | b & }; b); exec sleep 60", "timeout_s": 4}),
        "timed out after 4 s",
        "the bomb is over",
    );
    fake.add_rule(Rule::new(Match::Any, Reply::Text("ok".into())));
    // Memory enough that 64 shells never reach it: this is about processes.
    let home = fake_home(&fake, "limits: {memory: 256M, pids: 64, cpu: 1.0}");
    let d = home.start_fake();
    let ours = read(Path::new(&format!("/proc/{}/cgroup", d.pid)));
    let bomb = home.create("bomb");
    home.create("calm");
    if let Err(why) = applied_limits(&home, "bomb") {
        return eprintln!("skipped: no limits here ({why})");
    }
    let commands = cgroup_dir(bomb, "pids").parent().unwrap().join("commands");
    assert_eq!(read(&commands.join("pids.max")).trim(), "64");

    let h = home.path().to_path_buf();
    let bombing = std::thread::spawn(move || {
        std::process::Command::new(PEGASUSCTL)
            .arg("--home")
            .arg(h)
            .args(["project", "send", "bomb", "fork bomb", "--wait"])
            .output()
            .unwrap()
    });
    // The bomb fills its project's process table, and no more: the kernel refuses its forks
    // there (counted in pids.events); it may die out between two looks, so the count is what
    // is waited for.
    let refused = |events: &str| -> u64 {
        events
            .lines()
            .find_map(|l| l.strip_prefix("max ")?.trim().parse().ok())
            .unwrap_or(0)
    };
    poll(
        Duration::from_secs(20),
        "a fork refused in the bomb's project",
        || {
            let current: u64 = read(&commands.join("pids.current")).trim().parse().ok()?;
            assert!(current <= 64, "{current} processes in a project allowed 64");
            (refused(&read(&commands.join("pids.events"))) > 0).then_some(())
        },
    );
    let mut answered = 0;
    while !bombing.is_finished() || answered == 0 {
        assert_eq!(
            home.ctl_ok(&["project", "send", "calm", "hello", "--wait"])
                .trim(),
            "ok"
        );
        assert!(home.ctl(&["status"]).status.success());
        answered += 1;
    }
    let out = bombing.join().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen = fake
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .rfind(|b| b.contains("fork bomb") && b.contains("tool_result"))
        .unwrap_or_default();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "the bomb is over",
        "the model saw: {}",
        &seen[seen
            .find("tool_result")
            .map_or(0, |i| i.saturating_sub(400))..]
            .chars()
            .take(800)
            .collect::<String>()
    );
    // The bomb is gone with its call.
    poll(
        Duration::from_secs(10),
        "the bomb's processes to be gone",
        || (read(&commands.join("pids.current")).trim() == "0").then_some(()),
    );
    assert_eq!(home.ready_worker("bomb", None), bomb);
    assert_eq!(read(Path::new(&format!("/proc/{}/cgroup", d.pid))), ours);
}

/// A project's cgroup goes when its worker ends (suspend), and the cgroups a killed daemon
/// left (its workers died with it) are swept by the next daemon before it starts any worker.
#[test]
fn cgroups_go_with_their_workers_and_a_killed_daemons_are_swept() {
    let fake = FakeLlm::start().unwrap();
    main_agent_rule(&fake);
    fake.add_rule(Rule::new(Match::Any, Reply::Text("ok".into())));
    let home = fake_home(&fake, LIMITS);
    let mut d = home.start_fake();
    let a = home.create("a");
    let b = home.create("b");
    if let Err(why) = applied_limits(&home, "a") {
        return eprintln!("skipped: no limits here ({why})");
    }
    let a_cg = cgroup_dir(a, "memory").parent().unwrap().to_path_buf();
    let b_cg = cgroup_dir(b, "memory").parent().unwrap().to_path_buf();
    home.ctl_ok(&["project", "suspend", "a"]);
    poll(Duration::from_secs(10), "a's cgroup to be removed", || {
        (!a_cg.exists()).then_some(())
    });
    // kill -9: the daemon cannot clean up, and its workers die with it.
    d.kill9();
    poll(Duration::from_secs(10), "b's worker to die", || {
        (!alive(b)).then_some(())
    });
    assert!(b_cg.exists(), "{} should be left behind", b_cg.display());
    // b is suspended by hand while no daemon runs: the next one starts no worker for it.
    let md = home
        .project_md("b")
        .replace("status: active", "status: suspended");
    std::fs::write(home.project_dir("b").join("PROJECT.md"), md).unwrap();
    let _d = home.start_fake();
    assert!(!b_cg.exists(), "{} was not swept", b_cg.display());
}

/// Where the kernel does not let pegasusd use cgroups (here: pegasusd runs as an unprivileged
/// user, who may not make cgroups where it sits), it says so once at start, in one line, and
/// runs its projects without limits; `project show` says why.
#[test]
fn without_cgroups_pegasusd_warns_once_and_runs_without_limits() {
    // SAFETY: geteuid only reads the process's credentials.
    if unsafe { nix::libc::geteuid() } != 0 {
        return eprintln!("skipped: needs root to become another user");
    }
    let home = Home::new();
    let nobody = Some(65534);
    std::os::unix::fs::chown(home.path(), nobody, nobody).unwrap();
    std::fs::write(home.path().join("config.yml"), LIMITS).unwrap();
    std::os::unix::fs::chown(home.path().join("config.yml"), nobody, nobody).unwrap();
    let as_nobody = |program: &str| {
        let mut cmd = std::process::Command::new("setpriv");
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", program])
            .arg("--home")
            .arg(home.path());
        cmd
    };
    let stderr = home.path().join("stderr.log");
    let mut daemon = as_nobody(PEGASUSD)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    poll(Duration::from_secs(10), "pegasusd to serve", || {
        read(&stderr).contains("pegasusd serving").then_some(())
    });
    let created = as_nobody(PEGASUSCTL)
        .args(["project", "create", "free", "--goal", "g"])
        .output()
        .unwrap();
    let out = as_nobody(PEGASUSCTL)
        .args(["--json", "project", "show", "free"])
        .output()
        .unwrap();
    let _ = daemon.kill();
    let _ = daemon.wait();
    let log = read(&stderr);
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("per-project limits"))
        .collect();
    assert_eq!(warnings.len(), 1, "{log}");
    assert!(
        warnings[0].contains("cannot be applied here") && warnings[0].contains("WARN"),
        "{log}"
    );
    for o in [&created, &out] {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(info["limits"]["applied"], false, "{info}");
    assert_eq!(info["limits"]["memory"], "64M", "{info}");
}
