//! The kill -9 campaign (issues 8 and 22): random `kill -9` of workers and of the daemon while
//! projects run tool calls and model calls, code tasks (worktree, hydrate, verify, the staging
//! merge) and MCP calls, with the invariants checked after every kill and at the end:
//!
//! * nothing a model started (every descendant of the killed worker, or of the killed daemon:
//!   commands, what they started in the background, MCP servers) is alive 1 s after its
//!   worker died — also while the daemon stays down (some daemon kills wait 5 s to restart);
//! * every project is back (a ready worker) within 5 s of a kill (or of the restart), while
//!   the model server holds its context-window endpoint for 30 s (issue 32 item 9: a worker's
//!   Ready never waits on the network);
//! * every acknowledged message is in its project's session;
//! * every JSONL file (sessions, task logs, the ledger) loads, with nothing skipped but a torn
//!   last line;
//! * after a clean restart no task is left `running`/`verifying` without a worker;
//! * the ledger sums equal what `pegasusctl cost` and `project list` report;
//! * every answer the fake LLM began has exactly one ledger line, matched by the call id its
//!   request carried and, where the line has one, by its request id (issue 32 item 10); no
//!   request id is on two lines;
//! * no process a model started outlives its worker;
//! * no task file without its `created` record; the code project's repository has a clean
//!   checkout, no leftover worktree of a finished task, and a `main` whose every commit passed.
//!
//! The short form (30 kills) runs in `cargo test`. The long form is run by hand and recorded in
//! `docs/RELIABILITY.md`:
//! `PEGASUS_CHAOS_KILLS=1000 cargo test --release --test chaos -- --nocapture`
//! (`PEGASUS_CHAOS_SEED=N` replays a campaign).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use pegasus_fakellm::{FakeLlm, Match, Reply, Rule, ToolCall};
use serde_json::json;
use std::{
    collections::HashMap,
    path::Path,
    time::{Duration, Instant},
};

const PROJECTS: [&str; 4] = ["alpha", "bravo", "code", "mcp"];
/// A string only the campaign's commands carry, to find their processes.
const MARKER: &str = "chaos-7f3e";

/// A tiny deterministic generator (xorshift), so a failing campaign can be replayed by seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// What a model started below `root` (a worker, or pegasusd with its workers), by parent links,
/// with start times (so a reused pid is not taken for it): every process below a command
/// launcher — a fork of a worker (or of pegasusd, for the MainAgent) that did not exec, so its
/// command line is its parent's, and that has a child. Pegasus's own children (`git` in the user's checkout, which
/// is left to finish) are not what a model started.
fn model_started(root: u32) -> Vec<(u32, u64)> {
    let mut procs = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if let (Some(ppid), Some(start)) = (
            f.get(1).and_then(|p| p.parse::<u32>().ok()),
            f.get(19).and_then(|s| s.parse::<u64>().ok()),
        ) {
            procs.push((pid, ppid, start, cmdline));
        }
    }
    let cmdline_of = |pid: u32| procs.iter().find(|p| p.0 == pid).map(|p| p.3.clone());
    let mut out: Vec<(u32, u64)> = Vec::new();
    // (pid, inside a launcher's tree)
    let mut frontier = vec![(root, false)];
    while let Some((parent, inside)) = frontier.pop() {
        let parent_cmdline = cmdline_of(parent);
        for (pid, ppid, start, cmdline) in &procs {
            if *ppid != parent || out.iter().any(|(p, _)| p == pid) {
                continue;
            }
            // A launcher always has its namespace's init below it; a fork that is about to
            // exec (Pegasus's own git) has no child yet.
            let launcher = !inside
                && Some(cmdline) == parent_cmdline.as_ref()
                && procs.iter().any(|p| p.1 == *pid);
            let model = inside || launcher;
            if model {
                out.push((*pid, *start));
            }
            frontier.push((*pid, model));
        }
    }
    out
}

/// Those of `procs` still running (same pid, same start time, not a zombie).
fn still_running(procs: &[(u32, u64)]) -> Vec<u32> {
    procs
        .iter()
        .filter(|(pid, start)| {
            alive(*pid)
                && std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .ok()
                    .and_then(|s| {
                        s.rsplit_once(')')?
                            .1
                            .split_whitespace()
                            .nth(19)?
                            .parse::<u64>()
                            .ok()
                    })
                    == Some(*start)
        })
        .map(|(pid, _)| *pid)
        .collect()
}

/// Waits for `dead` (the killed processes) to be gone, then gives what they had started 1 s;
/// a violation names what outlived them. Returns how long the last one took after its worker.
fn outlived(
    dead: &[u32],
    started: &[(u32, u64)],
    what: &str,
    violations: &mut Vec<String>,
) -> Duration {
    poll(
        Duration::from_secs(5),
        "the killed processes to die",
        || dead.iter().all(|p| !alive(*p)).then_some(()),
    );
    let died = Instant::now();
    loop {
        let left = still_running(started);
        if left.is_empty() {
            return died.elapsed();
        }
        if died.elapsed() > Duration::from_secs(1) {
            let names: Vec<String> = left
                .iter()
                .map(|p| {
                    let c = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
                    format!("{p} {}", String::from_utf8_lossy(&c).replace('\0', " "))
                })
                .collect();
            violations.push(format!("alive 1 s after {what}: {names:?}"));
            return died.elapsed();
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Every `*.jsonl` below `dir`.
fn jsonl_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = entry.path();
        if p.is_dir() {
            jsonl_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "jsonl") {
            out.push(p);
        }
    }
}

/// The whole session history of a project (current file and archives) as text.
fn session_history(home: &Home, project: &str) -> String {
    let mut files = Vec::new();
    jsonl_files(&home.project_dir(project).join("session"), &mut files);
    files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap_or_default())
        .collect()
}

fn all_ready(home: &Home, within: Duration, what: &str) {
    let deadline = Instant::now() + within;
    loop {
        let list = home.json(&["project", "list"]);
        if list
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["worker_state"] == "ready")
        {
            return;
        }
        if Instant::now() > deadline {
            let states: Vec<String> = list
                .as_array()
                .unwrap()
                .iter()
                .map(|p| format!("{} {} {}", p["name"], p["worker_state"], p["last_crash"]))
                .collect();
            panic!("timed out after {within:?} waiting for {what}: {states:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn kill_9_campaign_keeps_every_invariant() {
    let kills: usize = std::env::var("PEGASUS_CHAOS_KILLS")
        .ok()
        .and_then(|k| k.parse().ok())
        .unwrap_or(30);
    let seed: u64 = std::env::var("PEGASUS_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("chaos: {kills} kills, PEGASUS_CHAOS_SEED={seed}");
    let mut rng = Rng(seed);

    let fake = FakeLlm::start().unwrap();
    // A slow model server: its window endpoints (`/props`, `/v1/models`, `/api/show`; the fake
    // is on 127.0.0.1, and `fa/test-model` is in no table, so pegasusd asks) answer after
    // 30 s, long past pegasusd's deadline: no worker's Ready may wait for them.
    fake.hold_window_probes(Some(Duration::from_secs(30)));
    // A turn that ends in a tool result is answered; each new message (its session holds the
    // tool results of the messages before it) makes one call.
    for ran in ["job-ran", "slept 1 s"] {
        fake.add_rule(Rule::new(
            Match::LastToolResultContains(ran.into()),
            Reply::Text("job done".into()),
        ));
    }
    // A code task: the agent writes a file of its own (a kill may cut it), then answers.
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("code job".into()),
        Reply::Tools(vec![ToolCall::new(
            "exec",
            json!({"command": format!("date +%s%N > f-$(date +%s%N).txt; sleep 0.0$((RANDOM % 9 + 1)); true {MARKER}; echo job-ran")}),
        )]),
    ));
    // An MCP call that a kill may cut mid-call.
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("mcp job".into()),
        Reply::Tools(vec![ToolCall::new("mcp__t__sleep", json!({"seconds": 1}))]),
    ));
    // Every other message: one exec call (a short command that a kill may cut, leaving one
    // process in its own session behind it, as a daemonizing command would), then an answer.
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("job".into()),
        Reply::Tools(vec![ToolCall::new(
            "exec",
            json!({"command": format!("setsid sh -c 'sleep 30; true {MARKER}' >/dev/null 2>&1 & sleep 0.0$((RANDOM % 9 + 1)); true {MARKER}; echo job-ran")}),
        )]),
    ));
    fake.add_rule(Rule::new(Match::Any, Reply::Text("job done".into())));
    // Fast restarts, and neither a crash-loop stop nor a growing backoff (a 1 s crash window):
    // the campaign kills far more often than a real crash loop, and measures recovery, not
    // backoff. Reflection off (each call is scripted). A daily cap far above the default: each
    // crash notice is a MainAgent call over its growing session (issue 26), which reaches $20
    // after some hundreds of kills and would block every task from then on.
    let home = Home::with_config(&format!(
        "default_model: fa/test-model\n\
         providers:\n  fa: {{kind: anthropic, base_url: \"{a}\", api_key_env: {FAKE_KEY_ENV}}}\n\
         prices:\n  \"fa/*\": {{input: 1.0, output: 2.0}}\n\
         llm: {{retry_base_ms: 10, max_retries: 1, timeout_s: 60}}\n\
         workers: {{shutdown_timeout_s: 5, restart_backoff_ms: 20, crash_loop_max: 1000, crash_loop_window_s: 1}}\n\
         agent: {{reflection: false}}\n\
         budget: {{daily_usd: 10000}}\n\
         mcp_servers:\n  t: {{command: '{mcp}', args: ['{MARKER}'], timeout_s: 10}}\n",
        a = fake.anthropic_base_url(),
        mcp = example_bin("mcp_test_server").display(),
    ));
    let repos = tempfile::tempdir().unwrap();
    let app = repo(repos.path(), "app");
    let mut daemon = home.start_fake();
    for p in PROJECTS {
        home.create(p);
    }
    // The code project hydrates and verifies with short commands a kill may cut, in the task's
    // worktree and again in the staging worktree of the merge.
    configure(
        &home,
        "code",
        &format!(
            "{}hydrate: \"sleep 0.0$((RANDOM % 5 + 1)); true {MARKER}\"\nverify:\n  - \"sleep 0.$((RANDOM % 3)); test -f a.txt; true {MARKER}\"\n",
            repos_yaml(&[("app", &app)])
        ),
    );

    // pegasusd asks the held server once, gives up at its probe deadline (the default window
    // applies) and remembers that the server does not say: from then on no worker, of this
    // pegasusd or of any restarted one, holds its first model call for the window, and the
    // campaign's kills meet work in flight.
    poll(
        Duration::from_secs(15),
        "pegasusd remembering that the held server does not say its window",
        || {
            std::fs::read_to_string(home.path().join("windows.state.json"))
                .ok()
                .filter(|s| s.contains("fa/test-model"))
        },
    );

    let mut acked: HashMap<&str, Vec<String>> = HashMap::new();
    let mut code_tasks = Vec::new();
    let mut violations = Vec::new();
    let mut worst_back = Duration::ZERO;
    let mut worst_death = Duration::ZERO;
    let mut daemon_kills = 0;
    // When each worker was killed: a model call of its own that the provider had begun to
    // answer as the kill landed may be cancelled before pegasusd saw the answer begin (DESIGN.md
    // §5: a dead worker's call is cancelled; only an answer seen to begin is billed).
    let mut worker_kills: Vec<Instant> = Vec::new();
    let mut long_downs = 0;
    // How many model-started processes the kills caught alive (and then watched die).
    let mut watched = 0;
    for round in 0..kills {
        // Some work in flight: a few messages, acknowledged (durably persisted) or refused,
        // and now and then a code task.
        for _ in 0..1 + rng.below(3) {
            let p = PROJECTS[rng.below(PROJECTS.len() as u64) as usize];
            // A code task takes seconds (worktree, hydrate, verify, staging merge): one round
            // in three adds one, so they do not pile up behind the kills.
            if p == "code" && round % 3 != 0 {
                continue;
            }
            if p == "code" {
                let out = home.ctl(&[
                    "--json",
                    "task",
                    "add",
                    "code",
                    "--goal",
                    &format!("code job {round}"),
                    "--repo",
                    "app",
                ]);
                if out.status.success() {
                    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
                    code_tasks.push(v["id"].as_str().unwrap().to_string());
                }
                continue;
            }
            let text = if p == "mcp" {
                format!("mcp job {round}")
            } else {
                format!("job {round}")
            };
            let out = home.ctl(&["--json", "project", "send", p, &text]);
            if out.status.success() {
                let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
                acked
                    .entry(p)
                    .or_default()
                    .push(v["id"].as_str().unwrap().to_string());
            }
        }
        std::thread::sleep(Duration::from_millis(rng.below(150)));
        let started = Instant::now();
        if rng.below(8) == 0 {
            daemon_kills += 1;
            let before = model_started(daemon.pid);
            watched += before.len();
            let workers: Vec<u32> = home.json(&["status"])["projects"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|p| p["worker_pid"].as_u64().map(|p| p as u32))
                .collect();
            daemon.kill9();
            let mut dead = workers;
            dead.push(daemon.pid);
            let took = outlived(&dead, &before, "the daemon was killed", &mut violations);
            worst_death = worst_death.max(took);
            // Now and then the daemon stays down for 5 s: nobody is there to sweep.
            let mut back_from = started;
            if rng.below(3) == 0 {
                long_downs += 1;
                let down = Duration::from_secs(5).saturating_sub(started.elapsed());
                std::thread::sleep(down);
                if !still_running(&before).is_empty() {
                    violations.push(
                        "something a model started lived on while the daemon was down".into(),
                    );
                }
                back_from = Instant::now();
            }
            daemon = home.start_fake();
            all_ready(
                &home,
                Duration::from_secs(5),
                "every project back within 5 s",
            );
            worst_back = worst_back.max(back_from.elapsed());
            continue;
        } else {
            let p = PROJECTS[rng.below(PROJECTS.len() as u64) as usize];
            if let Some(pid) = home.json(&["project", "show", p])["worker_pid"].as_u64() {
                let pid = pid as u32;
                let before = model_started(pid);
                watched += before.len();
                worker_kills.push(Instant::now());
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
                let took = outlived(
                    &[pid],
                    &before,
                    &format!("the worker of {p} was killed"),
                    &mut violations,
                );
                worst_death = worst_death.max(took);
                poll(
                    Duration::from_secs(5),
                    "the killed worker to be replaced",
                    || {
                        (home.json(&["project", "show", p])["worker_pid"].as_u64()
                            != Some(pid as u64))
                        .then_some(())
                    },
                );
            }
        }
        all_ready(
            &home,
            Duration::from_secs(5),
            "every project back within 5 s",
        );
        worst_back = worst_back.max(started.elapsed());
    }

    // Let the last messages finish, then stop cleanly and check the files at rest.
    poll(
        Duration::from_secs(30),
        "the campaign's work to settle",
        || {
            let list = home.json(&["status"]);
            list["projects"]
                .as_array()
                .unwrap()
                .iter()
                .all(|p| p["task"].is_null())
                .then_some(())
        },
    );
    // Code tasks end (done, or failed by a kill) before the daemon stops.
    for id in &code_tasks {
        poll(Duration::from_secs(60), "the code tasks to end", || {
            let t = &home.json(&["task", "show", id])["task"];
            matches!(
                t["state"].as_str(),
                Some("done" | "failed" | "cancelled" | "blocked")
            )
            .then_some(())
        });
    }
    let stopped_at = Instant::now();
    home.ctl_ok(&["stop"]);
    daemon.wait_exit(Duration::from_secs(30));

    // Acknowledged messages are in their sessions.
    for (p, ids) in &acked {
        let history = session_history(&home, p);
        for id in ids {
            if !history.contains(id.as_str()) {
                violations.push(format!(
                    "acknowledged message {id} of {p} is not in its session"
                ));
            }
        }
    }
    // Every JSONL file loads; only a torn last line may be skipped.
    let mut files = Vec::new();
    jsonl_files(home.path(), &mut files);
    for f in &files {
        match pegasus_store::read_jsonl::<serde_json::Value>(f) {
            Ok(r) if r.skipped > 1 => {
                violations.push(format!("{}: {} lines skipped", f.display(), r.skipped))
            }
            Ok(_) => {}
            Err(e) => violations.push(format!("{}: does not load: {e}", f.display())),
        }
    }
    for p in PROJECTS {
        if let Err(e) = pegasus_store::load_session(&home.project_dir(p)) {
            violations.push(format!("session of {p} does not load: {e}"));
        }
    }
    // No process a model started outlives its worker.
    let strays = processes_with(MARKER);
    if !strays.is_empty() {
        violations.push(format!("commands outlived their workers: {strays:?}"));
    }
    // No task file without its created record (a kill right after an acknowledgement once
    // left an empty one that no index knew).
    for p in PROJECTS {
        let mut files = Vec::new();
        jsonl_files(&home.project_dir(p).join("tasks"), &mut files);
        for f in files.iter().filter(|f| !f.ends_with("index.jsonl")) {
            let first = std::fs::read_to_string(f)
                .unwrap_or_default()
                .lines()
                .next()
                .and_then(|l| serde_json::from_str::<serde_json::Value>(l).ok());
            if first.as_ref().map(|v| v["type"].clone()) != Some(json!("created")) {
                violations.push(format!("{}: no created record first", f.display()));
            }
        }
    }
    // The user's checkout is clean; main moved only by merges whose checks passed (every
    // commit on main is the initial one or a merge of a task branch).
    let status = sh(&app, "git status --porcelain");
    if !status.is_empty() {
        violations.push(format!("the main checkout is dirty: {status}"));
    }
    let subjects = sh(&app, "git log --first-parent --format=%s main");
    for s in subjects.lines().filter(|l| *l != "init") {
        if !s.starts_with("Merge pegasus/task-") {
            violations.push(format!(
                "main has a commit that was not a verified merge: {s}"
            ));
        }
    }
    // After a clean restart, nothing is left running without a worker; the ledger adds up.
    let _d = home.start_fake();
    all_ready(
        &home,
        Duration::from_secs(5),
        "every project back after the restart",
    );
    // Every answer the fake began is metered exactly once (the journal's replay after a
    // daemon kill and the line of the daemon that read the answer never both), found by the
    // call id the request carried; a line with a request id names that answer's.
    let ledger =
        pegasus_store::read_jsonl::<serde_json::Value>(&home.path().join("costs/ledger.jsonl"))
            .unwrap()
            .records;
    let mut by_call: HashMap<&str, Vec<&serde_json::Value>> = HashMap::new();
    let mut by_request: HashMap<&str, usize> = HashMap::new();
    for line in &ledger {
        by_call
            .entry(line["call"].as_str().unwrap_or_default())
            .or_default()
            .push(line);
        if let Some(id) = line["request_id"].as_str() {
            *by_request.entry(id).or_default() += 1;
        }
    }
    let answered = fake.answered();
    let mut cancelled = 0;
    for a in &answered {
        let Some(call) = a.client_request_id.as_deref() else {
            violations.push(format!(
                "answer {} to a request without a call id",
                a.request_id
            ));
            continue;
        };
        match by_call.get(call).map(Vec::as_slice) {
            Some([line]) => {
                if line["request_id"]
                    .as_str()
                    .is_some_and(|id| id != a.request_id)
                {
                    violations.push(format!(
                        "the ledger line of {call} names {}, the answer was {}",
                        line["request_id"], a.request_id
                    ));
                }
            }
            Some(lines) => violations.push(format!(
                "answer {} ({call}) has {} ledger lines",
                a.request_id,
                lines.len()
            )),
            None => {
                // Cancelled with its caller: a worker killed (or the daemon stopping) right
                // as the answer began, before pegasusd read its first byte.
                let near = |at: Instant| {
                    a.at + Duration::from_secs(2) >= at && a.at <= at + Duration::from_secs(1)
                };
                if worker_kills.iter().any(|k| near(*k))
                    || a.at + Duration::from_secs(2) >= stopped_at
                {
                    cancelled += 1;
                } else {
                    violations.push(format!(
                        "answer {} ({call}) has no ledger line",
                        a.request_id
                    ));
                }
            }
        }
    }
    for (id, n) in by_request.iter().filter(|(_, n)| **n > 1) {
        violations.push(format!("request {id} is on {n} ledger lines"));
    }
    eprintln!(
        "chaos: {} answers, {} ledger lines, {cancelled} answers cancelled with a killed worker",
        answered.len(),
        ledger.len()
    );
    let mut stuck = Vec::new();
    for p in PROJECTS {
        for t in home.json(&["task", "list", p]).as_array().unwrap() {
            if t["state"] == "running" || t["state"] == "verifying" {
                violations.push(format!("task {} of {p} left {}", t["id"], t["state"]));
            }
            // A message's task stuck before `ready` would never run and never fail.
            if t["state"] == "draft" || t["state"] == "planned" {
                stuck.push(format!("task {} of {p} left {}", t["id"], t["state"]));
            }
        }
    }
    // The ledger adds up: what `cost` sums from the file per project is what the daemon
    // reports (the MainAgent's own spend, on `main`, is in the file too).
    let cost = home.json(&["cost"]);
    for p in home.json(&["project", "list"]).as_array().unwrap() {
        let name = p["name"].as_str().unwrap();
        let from_file = cost["by_project"][name]["usd"].as_f64().unwrap_or(0.0);
        let listed = p["cost_usd"].as_f64().unwrap_or(0.0);
        if (from_file - listed).abs() > 1e-9 {
            violations.push(format!(
                "the ledger says ${from_file} for {name} but project list says ${listed}"
            ));
        }
    }
    // Known and open (issue 8, item 9 and the campaign's finding): a kill between a message's
    // task creation and its `ready` leaves it in draft/planned. Reported, not yet enforced.
    if !stuck.is_empty() {
        eprintln!("chaos: {} tasks stuck before ready: {stuck:?}", stuck.len());
    }
    let sent: usize = acked.values().map(Vec::len).sum();
    let mut ends: HashMap<String, usize> = HashMap::new();
    for id in &code_tasks {
        let t = &home.json(&["task", "show", id])["task"];
        let end = format!(
            "{} {}",
            t["state"].as_str().unwrap_or("?"),
            t["stop_reason"].as_str().unwrap_or("")
        );
        *ends.entry(end.trim().to_string()).or_default() += 1;
    }
    eprintln!("chaos: code tasks ended {ends:?}");
    let merged = sh(
        &app,
        "git log --first-parent --format=%s main | grep -c '^Merge' || true",
    );
    // The worktrees of ended tasks go when their worker boots again (a blocked task keeps
    // its own, to go on from it).
    let ended: Vec<&String> = code_tasks
        .iter()
        .filter(|id| {
            let t = &home.json(&["task", "show", id])["task"];
            matches!(t["state"].as_str(), Some("done" | "failed" | "cancelled"))
        })
        .collect();
    let leftover = || -> Vec<String> {
        let list = sh(&app, "git worktree list --porcelain");
        ended
            .iter()
            .filter(|id| list.contains(&format!("/task-{id}\n")))
            .map(|id| id.to_string())
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !leftover().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    // Known and open (found by the 1,000-kill runs, docs/RELIABILITY.md): a kill inside a
    // task's cleanup can leave its worktree. Reported, not yet enforced.
    let left = leftover();
    if !left.is_empty() {
        eprintln!("chaos: worktrees of ended tasks left after a clean restart: {left:?}");
    }
    eprintln!(
        "chaos: {kills} kills ({daemon_kills} of the daemon, {long_downs} down for 5 s), \
         {sent} acknowledged messages, {} code tasks ({merged} merged), {} model calls, \
         worst recovery {worst_back:?}, {watched} model-started processes caught by kills, \
         the slowest dead {worst_death:?} after its worker, {} violations",
        code_tasks.len(),
        fake.request_count(),
        violations.len()
    );
    assert!(
        watched > 0,
        "no kill caught a model-started process: the lifetime check saw nothing"
    );
    assert!(violations.is_empty(), "seed {seed}: {violations:#?}");
}
