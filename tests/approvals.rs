//! Approvals through the real binaries (DESIGN.md §11, issue 26): a call the policy asks about
//! blocks its task with a durable request; `pegasusctl approvals`, `approve`, `deny` answer
//! it; it survives kill -9 of the worker and of pegasusd; it times out; it never runs without
//! its approval and never twice.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use pegasus_fakellm::{FakeLlm, Match, Reply, Rule, ToolCall};
use serde_json::json;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

/// On a message holding `word`, the model runs `cmd` with exec once, then says what its
/// result was: "ran" when it ran, else the tool result's text after "result: ".
fn script(fake: &FakeLlm, word: &str, cmd: &str) {
    fake.add_rule(
        Rule::new(
            Match::All(vec![
                Match::LastUserTextContains(word.into()),
                Match::NewPrompt,
            ]),
            Reply::Tools(vec![ToolCall::new("exec", json!({"command": cmd}))]),
        )
        .times(1),
    );
    for (seen, say) in [
        ("denied by the user: not today", "saw: denied with a reason"),
        ("denied by the user", "saw: denied"),
        ("denied: no answer within", "saw: timed out"),
    ] {
        fake.add_rule(Rule::new(
            Match::All(vec![
                Match::LastUserTextContains(word.into()),
                Match::LastToolResultContains(seen.into()),
            ]),
            Reply::Text(say.into()),
        ));
    }
    fake.add_rule(Rule::new(
        Match::LastUserTextContains(word.into()),
        Reply::Text("saw: ran".into()),
    ));
}

fn home_asking(fake: &FakeLlm, extra: &str) -> Home {
    main_agent_rule(fake);
    fake_home(fake, &format!("approvals: {{exec: ask{extra}}}\n"))
}

/// The one waiting request (polled until there is one).
fn waiting(home: &Home) -> serde_json::Value {
    poll(WAIT, "an approval request", || {
        let list = home.json(&["approvals"]);
        list.as_array()
            .filter(|a| a.len() == 1)
            .map(|a| a[0].clone())
    })
}

fn runs(home: &Home, project: &str) -> usize {
    std::fs::read_to_string(home.project_dir(project).join("workdir/runs.txt"))
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

fn task_state(home: &Home, project: &str, id: &str) -> (String, String) {
    let tasks = home.json(&["task", "list", project]);
    let t = tasks
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == id)
        .cloned()
        .unwrap_or_default();
    (
        t["state"].as_str().unwrap_or_default().to_string(),
        t["stop_reason"].as_str().unwrap_or_default().to_string(),
    )
}

#[test]
fn a_call_waits_for_approve_runs_once_and_send_wait_says_what_it_waits_for() {
    let fake = FakeLlm::start().unwrap();
    fake.require_api_key(Some(FAKE_KEY.into()));
    script(&fake, "deploy", "echo ran >> runs.txt");
    let home = home_asking(&fake, "");
    let _d = home.start_fake();
    home.create("web");
    let send = std::process::Command::new(env!("CARGO_BIN_EXE_pegasusctl"))
        .args(["--home"])
        .arg(home.path())
        .args(["project", "send", "web", "deploy now", "--wait"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();

    let req = waiting(&home);
    let id = req["id"].as_str().unwrap().to_string();
    assert_eq!(req["project"], "web");
    assert_eq!(req["tool"], "exec");
    assert_eq!(req["summary"], "echo ran >> runs.txt");
    assert!(
        chrono::DateTime::parse_from_rfc3339(req["asked_at"].as_str().unwrap()).is_ok(),
        "{req}"
    );
    let task = req["task"].as_str().unwrap().to_string();
    assert_eq!(
        task_state(&home, "web", &task),
        ("blocked".into(), "approval".into())
    );
    assert_eq!(runs(&home, "web"), 0, "nothing runs before the answer");
    // Counted where people look.
    let row = |v: serde_json::Value| {
        v.as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "web")
            .cloned()
            .unwrap()
    };
    assert_eq!(row(home.json(&["project", "list"]))["approvals"], 1);
    assert_eq!(
        row(home.json(&["status"])["projects"].clone())["approvals"],
        1
    );
    assert!(home
        .ctl_ok(&["status"])
        .contains("1 tool call waiting for approval"));
    assert!(home
        .ctl_ok(&["approvals", "web"])
        .contains("echo ran >> runs.txt"));

    assert!(home.ctl_ok(&["approve", &id]).contains("approved"));
    let out = send.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout} {stderr}");
    assert_eq!(stdout.trim(), "saw: ran");
    assert!(
        stderr.contains(&format!("pegasusctl approve {id}")),
        "send --wait names the request: {stderr}"
    );
    assert_eq!(runs(&home, "web"), 1);
    assert_eq!(task_state(&home, "web", &task).0, "done");
    assert!(home.json(&["approvals"]).as_array().unwrap().is_empty());
    // A second answer is refused in one line.
    let again = home.ctl_fails(&["deny", &id]);
    assert!(
        again.contains("already answered: approved by cli"),
        "{again}"
    );
    assert!(home
        .ctl_fails(&["approve", "ap-doesnotexist"])
        .contains("no approval request ap-doesnotexist"));
}

#[test]
fn a_pending_request_survives_kill9_of_the_worker_and_of_pegasusd() {
    let fake = FakeLlm::start().unwrap();
    fake.require_api_key(Some(FAKE_KEY.into()));
    script(&fake, "migrate", "echo ran >> runs.txt");
    let home = home_asking(&fake, "");
    let mut d = home.start_fake();
    let first = home.create("db");
    home.ctl_ok(&["project", "send", "db", "migrate the schema"]);
    let id = waiting(&home)["id"].as_str().unwrap().to_string();

    // The worker dies: the next one holds the same request, and runs nothing.
    kill9(first);
    let second = home.ready_worker("db", Some(first as u64));
    assert_eq!(waiting(&home)["id"], id.as_str());
    assert_eq!(runs(&home, "db"), 0);

    // pegasusd dies (its worker with it): the request is listed without a daemon.
    d.kill9();
    poll(WAIT, "the worker to die with pegasusd", || {
        (!alive(second)).then_some(())
    });
    let list = home.json(&["approvals"]);
    assert_eq!(list[0]["id"], id.as_str(), "{list}");
    assert_eq!(runs(&home, "db"), 0);

    let _d = home.start_fake();
    home.ready_worker("db", None);
    assert_eq!(waiting(&home)["id"], id.as_str());
    home.ctl_ok(&["approve", &id]);
    poll(WAIT, "the approved call to run", || {
        (runs(&home, "db") == 1).then_some(())
    });
    let task = poll(WAIT, "the task to finish", || {
        let tasks = home.json(&["task", "list", "db"]);
        tasks
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["state"] == "done")
            .map(|t| t["id"].as_str().unwrap().to_string())
    });
    assert!(!task.is_empty());
    // Once more down and up: it never runs again.
    let pid = home.ready_worker("db", None);
    kill9(pid);
    home.ready_worker("db", Some(pid as u64));
    assert_eq!(runs(&home, "db"), 1);
    assert!(home.json(&["approvals"]).as_array().unwrap().is_empty());
}

#[test]
fn denials_and_timeouts_reach_the_model_in_spec_words_and_always_allows_the_line() {
    let fake = FakeLlm::start().unwrap();
    fake.require_api_key(Some(FAKE_KEY.into()));
    script(&fake, "first", "echo one >> runs.txt");
    script(&fake, "second", "echo two >> runs.txt");
    script(&fake, "third", "echo three >> runs.txt");
    script(&fake, "fourth", "echo three >> runs.txt");
    let home = home_asking(&fake, ", timeout_s: 3");
    let _d = home.start_fake();
    home.create("ops");

    // Denied with a reason.
    let ctl = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_pegasusctl"))
            .arg("--home")
            .arg(home.path())
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let send = ctl(&["project", "send", "ops", "first job", "--wait"]);
    let id = waiting(&home)["id"].as_str().unwrap().to_string();
    home.ctl_ok(&["deny", &id, "--reason", "not today"]);
    let out = send.wait_with_output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "saw: denied with a reason"
    );

    // Nobody answers: denied after timeout_s.
    let out = home.ctl_ok(&["project", "send", "ops", "second job", "--wait"]);
    assert_eq!(out.trim(), "saw: timed out");
    assert_eq!(runs(&home, "ops"), 0);

    // Approved with --always: the exact line is allowed from then on, nothing else.
    let send = ctl(&["project", "send", "ops", "third job", "--wait"]);
    let id = waiting(&home)["id"].as_str().unwrap().to_string();
    home.ctl_ok(&["approve", &id, "--always"]);
    assert_eq!(
        String::from_utf8_lossy(&send.wait_with_output().unwrap().stdout).trim(),
        "saw: ran"
    );
    assert!(home.project_md("ops").contains("echo three >> runs.txt"));
    assert_eq!(
        home.ctl_ok(&["project", "send", "ops", "fourth job", "--wait"])
            .trim(),
        "saw: ran",
        "the same line runs without asking"
    );
    assert_eq!(runs(&home, "ops"), 2);
    assert!(home.json(&["approvals"]).as_array().unwrap().is_empty());
}

/// `approvals.merge: ask`: a verified code task waits (blocked, approval) before it merges;
/// approved, it merges; denied, it stays verified with its merge pending for `task merge`.
#[test]
fn merge_ask_holds_a_verified_task_until_a_person_says_yes() {
    let tmp = tempfile::tempdir().unwrap();
    let app = repo(tmp.path(), "app");
    let fake = FakeLlm::start().unwrap();
    fake.require_api_key(Some(FAKE_KEY.into()));
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("wrote".into()),
        Reply::Text("changed the files".into()),
    ));
    for (word, content) in [("change alpha", "approved\n"), ("change beta", "denied\n")] {
        fake.add_rule(Rule::new(
            Match::LastUserTextContains(word.into()),
            Reply::Tools(vec![ToolCall::new(
                "write_file",
                json!({"path": if word.ends_with("alpha") { "a.txt" } else { "b.txt" }, "content": content}),
            )]),
        ));
    }
    main_agent_rule(&fake);
    let home = fake_home(&fake, "approvals: {merge: ask}\n");
    let _d = home.start_fake();
    home.create("cp");
    configure(&home, "cp", &repos_yaml(&[("app", &app)]));
    let add = |goal: &str| {
        home.json(&["task", "add", "cp", "--goal", goal, "--repo", "app"])["id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let state = |id: &str| home.json(&["task", "show", id])["task"]["state"].clone();

    let first = add("change alpha");
    let req = waiting(&home);
    assert_eq!(req["tool"], "merge");
    assert_eq!(req["task"], first.as_str());
    assert!(
        req["summary"]
            .as_str()
            .unwrap()
            .contains("main of repo app"),
        "{req}"
    );
    assert_eq!(state(&first), "blocked");
    assert_eq!(sh(&app, "cat a.txt"), "alpha", "not merged before the yes");
    home.ctl_ok(&["approve", req["id"].as_str().unwrap()]);
    poll(WAIT, "the approved merge", || {
        (state(&first) == "done").then_some(())
    });
    assert_eq!(sh(&app, "cat a.txt"), "approved");

    let second = add("change beta");
    let req = waiting(&home);
    assert_eq!(req["task"], second.as_str());
    home.ctl_ok(&["deny", req["id"].as_str().unwrap()]);
    let t = poll(WAIT, "the denied merge to wait", || {
        let t = home.json(&["task", "show", &second])["task"].clone();
        (t["state"] == "verified").then_some(t)
    });
    assert_eq!(t["merge"], "pending", "{t}");
    assert_eq!(sh(&app, "cat b.txt"), "beta");
    // A person's own `task merge` is that yes: it merges without asking again.
    home.ctl_ok(&["task", "merge", &second]);
    poll(WAIT, "the requested merge", || {
        (state(&second) == "done").then_some(())
    });
    assert_eq!(sh(&app, "cat b.txt"), "denied");
}

/// The spawned `project send NAME TEXT --wait`, its output read once it exits.
fn send_waiting(home: &Home, project: &str, text: &str) -> std::process::Child {
    std::process::Command::new(env!("CARGO_BIN_EXE_pegasusctl"))
        .args(["--home"])
        .arg(home.path())
        .args(["project", "send", project, text, "--wait"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Whether `s` holds a character that would not show as itself (CR, ESC, bidi, zero-width).
fn hides(s: &str) -> bool {
    s.chars().any(|c| {
        c.is_control() && c != '\n' || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    })
}

/// Issue 32 (4): what a person approves is what runs. A command line that would rewrite its
/// own display (`\r`, an escape sequence, a right-to-left override, a zero-width space) is
/// shown escaped by `approvals`, `approvals --json`, `--full` and the `send --wait` line, its
/// input whole and raw in `--json`; a `write_file` request names its path before 10 kB of
/// content.
#[test]
fn what_a_person_approves_is_shown_as_it_runs() {
    let fake = FakeLlm::start().unwrap();
    fake.require_api_key(Some(FAKE_KEY.into()));
    let sneaky = "touch X #\r\x1b[2Kls -la";
    let bidi = "echo \u{202e}txt.exe\u{200b} >> runs.txt";
    script(&fake, "sneaky", sneaky);
    script(&fake, "bidi", bidi);
    let content = "y".repeat(10 * 1024);
    fake.add_rule(
        Rule::new(
            Match::All(vec![
                Match::LastUserTextContains("bigfile".into()),
                Match::NewPrompt,
            ]),
            Reply::Tools(vec![ToolCall::new(
                "write_file",
                json!({"content": content, "path": "notes/big.txt"}),
            )]),
        )
        .times(1),
    );
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("bigfile".into()),
        Reply::Text("saw: file answered".into()),
    ));
    let home = home_asking(&fake, ", tools: {write_file: ask}");
    let _d = home.start_fake();
    home.create("web");

    let send = send_waiting(&home, "web", "sneaky please");
    let req = waiting(&home);
    let id = req["id"].as_str().unwrap().to_string();
    assert_eq!(req["summary"], "touch X #\\r\\x1b[2Kls -la", "{req}");
    assert_eq!(
        req["input"]["command"], sneaky,
        "the raw input is whole: {req}"
    );
    let table = home.ctl_ok(&["approvals"]);
    assert!(table.contains("touch X #\\r\\x1b[2Kls -la"), "{table}");
    assert!(!hides(&table), "{table:?}");
    let full = home.ctl_ok(&["approvals", "--full"]);
    assert!(
        full.contains("whole input") && full.contains("\"command\""),
        "{full}"
    );
    assert!(!hides(&full), "{full:?}");
    home.ctl_ok(&["approve", &id]);
    let out = send.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "waiting for approval {id}: exec `touch X #\\r\\x1b[2Kls -la`"
        )),
        "{stderr}"
    );
    assert!(!hides(&stderr), "{stderr:?}");

    let send = send_waiting(&home, "web", "bidi please");
    let req = waiting(&home);
    let summary = req["summary"].as_str().unwrap();
    assert_eq!(summary, "echo \\u{202e}txt.exe\\u{200b} >> runs.txt");
    assert_eq!(req["input"]["command"], bidi);
    let table = home.ctl_ok(&["approvals", "web"]);
    assert!(
        table.contains("\\u{202e}txt.exe\\u{200b}") && !hides(&table),
        "{table:?}"
    );
    home.ctl_ok(&["deny", req["id"].as_str().unwrap()]);
    let out = send.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("\\u{202e}txt.exe") && !hides(&stderr),
        "{stderr:?}"
    );

    let send = send_waiting(&home, "web", "bigfile please");
    let req = waiting(&home);
    assert_eq!(req["tool"], "write_file");
    let summary = req["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("write_file path=\"notes/big.txt\" {\"content\":\"yyy"),
        "the target comes first: {summary}"
    );
    assert!(summary.chars().count() < 700, "{}", summary.len());
    assert!(summary.contains("approvals --full"), "{summary}");
    assert_eq!(req["input"]["content"].as_str().unwrap().len(), 10 * 1024);
    assert!(home
        .ctl_ok(&["approvals"])
        .contains("write_file path=\"notes/big.txt\""));
    home.ctl_ok(&["deny", req["id"].as_str().unwrap()]);
    let out = send.wait_with_output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "saw: file answered"
    );
    assert!(!home
        .project_dir("web")
        .join("workdir/notes/big.txt")
        .exists());
}

/// Writes a request into `project`'s approvals as a worker on another host would, its
/// `asked_at` by that host's clock.
fn remote_request(
    home: &Home,
    project: &str,
    id: &str,
    asked_at: chrono::DateTime<chrono::Utc>,
    timeout_s: u64,
) {
    let dir = home.project_dir(project).join("approvals");
    std::fs::create_dir_all(&dir).unwrap();
    let req = json!({
        "id": id, "project": project, "task": "", "tool": "exec",
        "summary": "make deploy", "asked_at": asked_at.to_rfc3339(),
        "call_id": "toolu_far", "input_json": "{\"command\":\"make deploy\"}",
        "timeout_s": timeout_s, "always": "make deploy",
    });
    let tmp = dir.join(format!(".{id}.tmp"));
    std::fs::write(&tmp, serde_json::to_vec(&req).unwrap()).unwrap();
    std::fs::rename(&tmp, dir.join(format!("{id}.json"))).unwrap();
}

/// Issue 32 (4): a request from a host whose clock is hours behind is listed and answerable,
/// and expires by pegasusd's own clock, counted from when pegasusd first saw it.
#[test]
fn a_request_from_a_host_whose_clock_is_behind_is_judged_by_pegasusds_clock() {
    let fake = FakeLlm::start().unwrap();
    let home = home_asking(&fake, "");
    let _d = home.start_fake();
    home.create("far");
    let behind = chrono::Utc::now() - chrono::Duration::hours(5);
    remote_request(&home, "far", "ap-behindlong", behind, 3600);
    remote_request(&home, "far", "ap-behindshort", behind, 4);
    let ids = |home: &Home| -> Vec<String> {
        home.json(&["approvals"])
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_string())
            .collect()
    };
    let listed = ids(&home);
    assert!(
        listed.contains(&"ap-behindlong".to_string())
            && listed.contains(&"ap-behindshort".to_string()),
        "five hours behind, still listed: {listed:?}"
    );
    assert!(home.ctl_ok(&["approvals"]).contains("make deploy"));
    // pegasusd notes its first sight of each (its look once a second), durably.
    poll(WAIT, "pegasusd to note the requests", || {
        let seen = std::fs::read_to_string(home.path().join("approvals.seen")).unwrap_or_default();
        (seen.contains("ap-behindlong") && seen.contains("ap-behindshort")).then_some(())
    });
    let ok = home.ctl_ok(&["approve", "ap-behindlong"]);
    assert!(ok.contains("approved"), "{ok}");
    // The short one runs out 4 s after pegasusd saw it, by pegasusd's clock.
    poll(WAIT, "the short request to expire", || {
        (!ids(&home).contains(&"ap-behindshort".to_string())).then_some(())
    });
    // Denied by pegasusd as the timeout (within its look once a second).
    let answer: serde_json::Value = poll(WAIT, "the expiry recorded", || {
        let path = home
            .project_dir("far")
            .join("approvals/ap-behindshort.answer.json");
        serde_json::from_slice(&std::fs::read(path).ok()?).ok()
    });
    assert_eq!(answer["decision"], "expired", "{answer}");
    let late = home.ctl_fails(&["approve", "ap-behindshort"]);
    assert!(late.contains("already answered: expired"), "{late}");
}

/// Issue 32 (4): `approve --always` on a merge keeps its word: the next merge of that project
/// goes through without asking.
#[test]
fn approve_always_on_a_merge_lets_the_next_merge_through() {
    let tmp = tempfile::tempdir().unwrap();
    let app = repo(tmp.path(), "app");
    let fake = FakeLlm::start().unwrap();
    fake.require_api_key(Some(FAKE_KEY.into()));
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("wrote".into()),
        Reply::Text("changed the files".into()),
    ));
    for (word, path) in [("change alpha", "a.txt"), ("change beta", "b.txt")] {
        fake.add_rule(Rule::new(
            Match::LastUserTextContains(word.into()),
            Reply::Tools(vec![ToolCall::new(
                "write_file",
                json!({"path": path, "content": "changed\n"}),
            )]),
        ));
    }
    main_agent_rule(&fake);
    let home = fake_home(&fake, "approvals: {merge: ask}\n");
    let _d = home.start_fake();
    home.create("cp");
    configure(&home, "cp", &repos_yaml(&[("app", &app)]));
    let add = |goal: &str| {
        home.json(&["task", "add", "cp", "--goal", goal, "--repo", "app"])["id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let state = |id: &str| home.json(&["task", "show", id])["task"]["state"].clone();
    let first = add("change alpha");
    let req = waiting(&home);
    assert_eq!(req["tool"], "merge");
    let said = home.ctl_ok(&["approve", req["id"].as_str().unwrap(), "--always"]);
    assert!(said.contains("merges in cp no longer ask"), "{said}");
    poll(WAIT, "the approved merge", || {
        (state(&first) == "done").then_some(())
    });
    assert!(
        home.project_md("cp").contains("merge: auto"),
        "{}",
        home.project_md("cp")
    );
    let second = add("change beta");
    poll(WAIT, "the next merge, unasked", || {
        assert!(
            home.json(&["approvals"]).as_array().unwrap().is_empty(),
            "the next merge asked again"
        );
        (state(&second) == "done").then_some(())
    });
    assert_eq!(sh(&app, "cat b.txt"), "changed");
}
