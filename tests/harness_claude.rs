//! Claude Code as a project's agent (DESIGN.md §15), end to end: the real `claude` binary run by
//! a real worker under a real pegasusd, its model the in-repo fake LLM over real HTTP, driven
//! through `pegasusctl` like any project.
//!
//! Needs `claude` on PATH or `PEGASUS_TEST_CLAUDE` (`.ci/run` installs
//! `@anthropic-ai/claude-code@2.1.332`); without it each test skips with one line, and under
//! `CI=true` fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use pegasus_fakellm::{FakeLlm, Match, Reply, Rule, ToolCall};
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

/// The `claude` binary, or `None` (after one line) when there is none and `CI` is not `true`.
fn claude_bin() -> Option<String> {
    match common::claude::find() {
        Ok(bin) => Some(bin.display().to_string()),
        Err(why) => {
            if std::env::var("CI").as_deref() == Ok("true") {
                panic!("CI=true and {why}");
            }
            eprintln!("skipped: {why}");
            None
        }
    }
}

/// A home on the fake (provider `fa`, kind `anthropic`) whose harness is `bin`, plus `extra`.
fn harness_home(fake: &FakeLlm, bin: &str, extra: &str) -> Home {
    fake_home(
        fake,
        &format!("harnesses: {{claude-code: {{command: \"{bin}\"}}}}\n{extra}"),
    )
}

/// Creates project `name` with `keys` in its PROJECT.md and waits for its worker.
fn project_with(home: &Home, name: &str, keys: &str) -> u32 {
    let first = home.create(name);
    home.ctl_ok(&["project", "suspend", name]);
    configure(home, name, keys);
    home.ctl_ok(&["project", "resume", name]);
    home.ready_worker(name, Some(u64::from(first)))
}

/// Creates project `name` with `agent: claude-code` (and `keys`) and waits for its worker.
fn harness_project(home: &Home, name: &str, keys: &str) -> u32 {
    project_with(home, name, &format!("agent: claude-code\n{keys}"))
}

/// The usual start of a test: the fake (with the MainAgent's rule), a home on it whose
/// config.yml has `extra`, pegasusd, and project `cc` with `agent: claude-code` and `keys`
/// (its worker's pid last). `None` (after one line) when there is no `claude`.
fn started(extra: &str, keys: &str) -> Option<(FakeLlm, Home, Daemon, u32)> {
    let bin = claude_bin()?;
    let fake = FakeLlm::start().unwrap();
    main_agent_rule(&fake);
    let home = harness_home(&fake, &bin, extra);
    let daemon = home.start_fake();
    let worker = harness_project(&home, "cc", keys);
    Some((fake, home, daemon, worker))
}

/// Processes (other than workers) working anywhere in `dir`: a harness and what it started.
fn harness_processes(dir: &Path) -> Vec<(u32, String)> {
    let dir = dir.canonicalize().unwrap_or(dir.to_path_buf());
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).ok()?;
            let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
            (cwd.starts_with(&dir) && !exe.to_string_lossy().contains("project-worker"))
                .then(|| (pid, exe.display().to_string()))
        })
        .collect()
}

fn bash(command: &str) -> ToolCall {
    ToolCall::new("Bash", json!({"command": command, "description": "Run it"}))
}

/// Waits until `said` (a spawned `pegasusctl`'s output, read by another thread) contains `text`.
fn printed(said: &std::sync::Mutex<String>, text: &str) {
    poll(Duration::from_secs(5), text, || {
        said.lock().unwrap().contains(text).then_some(())
    });
}

/// The approval request waiting in the home (there must be one soon).
fn waiting(home: &Home) -> Value {
    poll(Duration::from_secs(60), "an approval request", || {
        home.json(&["approvals"]).as_array()?.first().cloned()
    })
}

fn tasks(home: &Home, project: &str) -> Vec<Value> {
    home.json(&["task", "list", project])
        .as_array()
        .unwrap()
        .clone()
}

/// A message is answered by Claude Code: it writes a file with its `Write` tool and reads it
/// with `Bash`, and the project's session shows its text and both calls with their results,
/// its task is done, and nothing of it is left running.
#[test]
fn a_message_is_answered_by_claude_code_and_mirrored_into_the_session() {
    let Some((fake, home, _d, _worker)) = started("", "") else {
        return;
    };
    // Every request reaches the provider with pegasusd's key, never one the harness holds.
    fake.require_api_key(Some(FAKE_KEY.into()));
    let work = home.project_dir("cc").join("workdir");
    fake.add_rule(
        Rule::new(
            Match::All(vec![
                Match::NewPrompt,
                Match::LastUserTextContains("Create greeting.txt".into()),
            ]),
            Reply::TextThenTools(
                "I will write the file.".into(),
                vec![ToolCall::new(
                    "Write",
                    json!({"file_path": work.join("greeting.txt"), "content": "hello from claude\n"}),
                )],
            ),
        )
        .times(1),
    );
    fake.add_rule(
        Rule::new(
            Match::LastToolResultContains("File created successfully".into()),
            Reply::Tools(vec![bash("cat greeting.txt")]),
        )
        .times(1),
    );
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("hello from claude".into()),
        Reply::Text("greeting.txt says hello from claude".into()),
    ));

    let (mut follower, followed) = spawn_ctl(&home, &["project", "log", "cc", "-f"]);
    let out = home.ctl(&[
        "project",
        "send",
        "cc",
        "Create greeting.txt and show it to me",
        "--wait",
        "--stream",
    ]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // Streamed as Claude Code's model wrote it (its first words too, not only the answer),
    // each once.
    for said in [
        "I will write the file.",
        "greeting.txt says hello from claude",
    ] {
        assert_eq!(
            stdout.matches(said).count(),
            1,
            "{said:?} in {stdout}\n{stderr}"
        );
    }
    // A follower saw the calls and the answer.
    poll(Duration::from_secs(10), "the turn at log -f", || {
        let seen = followed.lock().unwrap().clone();
        (seen.contains("Write") && seen.contains("greeting.txt says hello from claude"))
            .then_some(())
    });
    let _ = follower.kill();
    let _ = follower.wait();
    assert_eq!(
        std::fs::read_to_string(work.join("greeting.txt")).unwrap(),
        "hello from claude\n"
    );
    let log = home.ctl_ok(&["project", "log", "cc"]);
    for want in [
        "Create greeting.txt and show it to me",
        "I will write the file.",
        "→ Write",
        "→ Bash",
        "File created successfully",
        "← hello from claude",
        "greeting.txt says hello from claude",
    ] {
        assert!(log.contains(want), "{want:?} in the log:\n{log}");
    }
    let t = tasks(&home, "cc");
    assert_eq!(t.len(), 1, "{t:?}");
    assert_eq!(t[0]["state"], "done", "{t:?}");
    // Its three model calls went through pegasusd: metered in the ledger for the task.
    let ledger = std::fs::read_to_string(home.path().join("costs/ledger.jsonl")).unwrap();
    let lines: Vec<Value> = ledger
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l["project"] == "cc")
        .collect();
    assert_eq!(lines.len(), 3, "{ledger}");
    assert!(
        lines
            .iter()
            .all(|l| l["task"] == t[0]["id"] && l["usd"].as_f64().unwrap() > 0.0),
        "{ledger}"
    );
    assert!(home.ctl_ok(&["cost", "--project", "cc"]).contains('$'));
    // Search finds what Claude Code said, like anything a project's agent said.
    let hits = home.json(&["search", "greeting.txt says hello", "--project", "cc"]);
    assert!(
        hits.as_array()
            .unwrap()
            .iter()
            .any(|h| h["kind"] == "session"),
        "{hits}"
    );
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
    // Claude Code kept its session in the project, and nothing of it runs on.
    let sessions = home
        .project_dir("cc")
        .join("harness/claude-code/sessions.json");
    let kept: Value = serde_json::from_str(&std::fs::read_to_string(&sessions).unwrap()).unwrap();
    assert!(kept["project"].as_str().is_some(), "{kept}");
    assert_eq!(harness_processes(home.path()), vec![]);
    // A second message continues the same Claude Code session (its earlier turns are sent).
    fake.add_rule(Rule::new(
        Match::All(vec![
            Match::NewPrompt,
            Match::LastUserTextContains("What did you write".into()),
            Match::AnyTextContains("greeting.txt says hello from claude".into()),
        ]),
        Reply::Text("I wrote greeting.txt before".into()),
    ));
    let again = home.ctl_ok(&["project", "send", "cc", "What did you write?", "--wait"]);
    assert!(again.contains("I wrote greeting.txt before"), "{again}");
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

/// With `approvals: {exec: ask}`, Claude Code's `Bash` waits for a person: approved, it runs
/// once; denied, it does not run and Claude Code's model is told so with the reason.
#[test]
fn claude_codes_shell_waits_for_a_persons_approval() {
    let Some((fake, home, _d, _worker)) = started("approvals: {exec: ask}\n", "") else {
        return;
    };
    let runs = home.project_dir("cc").join("workdir/runs.txt");
    fake.add_rule(Rule::new(
        Match::All(vec![
            Match::NewPrompt,
            Match::LastUserTextContains("Run the first".into()),
        ]),
        Reply::Tools(vec![bash("echo first >> runs.txt && echo wrote-it")]),
    ));
    fake.add_rule(Rule::new(
        Match::All(vec![
            Match::NewPrompt,
            Match::LastUserTextContains("Run the second".into()),
        ]),
        Reply::Tools(vec![bash("echo second >> runs.txt && echo wrote-it")]),
    ));
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("wrote-it".into()),
        Reply::Text("the command ran".into()),
    ));
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("denied by the user: not today".into()),
        Reply::Text("the command was refused".into()),
    ));

    // Settings a model could have written into the workdir loosen nothing.
    let dot = home.project_dir("cc").join("workdir/.claude");
    std::fs::create_dir_all(&dot).unwrap();
    let loose = r#"{"disableAllHooks": true, "permissions": {"allow": ["Bash(*)"], "defaultMode": "bypassPermissions"}}"#;
    std::fs::write(dot.join("settings.json"), loose).unwrap();
    std::fs::write(dot.join("settings.local.json"), loose).unwrap();

    // Approved.
    let (send, said) = spawn_ctl(&home, &["project", "send", "cc", "Run the first", "--wait"]);
    let req = waiting(&home);
    assert_eq!(req["tool"], "exec", "{req}");
    assert_eq!(
        req["summary"], "echo first >> runs.txt && echo wrote-it",
        "{req}"
    );
    let task = req["task"].as_str().unwrap().to_string();
    let t = home.json(&["task", "show", &task])["task"].clone();
    assert_eq!(
        (t["state"].as_str(), t["stop_reason"].as_str()),
        (Some("blocked"), Some("approval")),
        "{t}"
    );
    assert!(!runs.exists(), "nothing runs before the answer");
    home.ctl_ok(&["approve", req["id"].as_str().unwrap()]);
    let out = send.wait_with_output().unwrap();
    assert!(out.status.success());
    // The reader of its output may still be at work when it exits.
    poll(Duration::from_secs(5), "the answer printed", || {
        said.lock()
            .unwrap()
            .contains("the command ran")
            .then_some(())
    });
    assert_eq!(std::fs::read_to_string(&runs).unwrap(), "first\n");

    // Denied, with a reason.
    let (send, said) = spawn_ctl(
        &home,
        &["project", "send", "cc", "Run the second", "--wait"],
    );
    let req = waiting(&home);
    home.ctl_ok(&["deny", req["id"].as_str().unwrap(), "--reason", "not today"]);
    let out = send.wait_with_output().unwrap();
    assert!(out.status.success());
    poll(
        Duration::from_secs(5),
        "the refusal's answer printed",
        || {
            said.lock()
                .unwrap()
                .contains("the command was refused")
                .then_some(())
        },
    );
    assert_eq!(
        std::fs::read_to_string(&runs).unwrap(),
        "first\n",
        "the denied call did not run"
    );
    let log = home.ctl_ok(&["project", "log", "cc"]);
    assert!(log.contains("denied by the user: not today"), "{log}");
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
    assert_eq!(harness_processes(home.path()), vec![]);
}

/// kill -9 of pegasusd while Claude Code's call waits for its approval: the worker and Claude
/// Code go with it, at once; the next start resumes the Claude Code session, the message's
/// task runs again once (its request withdrawn and asked anew), and the command runs once.
#[test]
fn kill_9_of_pegasusd_mid_turn_resumes_the_session_and_runs_the_message_once() {
    let Some((fake, home, mut d, _worker)) = started("approvals: {exec: ask}\n", "") else {
        return;
    };
    let runs = home.project_dir("cc").join("workdir/runs.txt");
    // After the restart the request says so (however Claude Code closed its cut-off call).
    fake.add_rule(
        Rule::new(
            Match::LastUserTextContains("Pegasus restarted".into()),
            Reply::Tools(vec![bash("echo run >> runs.txt && echo recorded")]),
        )
        .times(1),
    );
    fake.add_rule(
        Rule::new(
            Match::All(vec![
                Match::NewPrompt,
                Match::LastUserTextContains("Record one run".into()),
            ]),
            Reply::Tools(vec![bash("echo run >> runs.txt && echo recorded")]),
        )
        .times(1),
    );
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("recorded".into()),
        Reply::Text("recorded it once".into()),
    ));

    let (_send, _said) = spawn_ctl(
        &home,
        &["project", "send", "cc", "Record one run", "--id", "rec-1"],
    );
    let first = waiting(&home);
    assert!(
        !harness_processes(home.path()).is_empty(),
        "Claude Code is running"
    );
    d.kill9();
    poll(
        Duration::from_secs(5),
        "Claude Code to die with its worker",
        || harness_processes(home.path()).is_empty().then_some(()),
    );
    assert!(!runs.exists());

    let _d = home.start_fake();
    // The same message again (the CLI's retry): recognised, not recorded twice.
    home.ctl_ok(&["project", "send", "cc", "Record one run", "--id", "rec-1"]);
    let second = poll(Duration::from_secs(60), "the call asked again", || {
        home.json(&["approvals"])
            .as_array()?
            .iter()
            .find(|r| r["id"] != first["id"])
            .cloned()
    });
    home.ctl_ok(&["approve", second["id"].as_str().unwrap()]);
    let t = poll(Duration::from_secs(60), "the task done", || {
        let t = tasks(&home, "cc");
        (t.len() == 1 && t[0]["state"] == "done").then_some(t)
    });
    assert_eq!(std::fs::read_to_string(&runs).unwrap(), "run\n", "{t:?}");
    let session =
        std::fs::read_to_string(home.project_dir("cc").join("session/current.jsonl")).unwrap();
    assert_eq!(
        session.matches("\"Record one run\"").count(),
        1,
        "the message is recorded once:\n{session}"
    );
    let log = home.ctl_ok(&["project", "log", "cc"]);
    assert!(log.contains("recorded it once"), "{log}");
    // The Claude Code session was resumed, not started anew: its transcript holds both runs.
    let kept: Value = serde_json::from_str(
        &std::fs::read_to_string(
            home.project_dir("cc")
                .join("harness/claude-code/sessions.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let id = kept["project"].as_str().unwrap();
    let resumed = fake
        .requests()
        .iter()
        .filter(|r| r.body.to_string().contains("Pegasus restarted"))
        .count();
    assert!(resumed >= 1, "the restarted run was told so");
    assert!(
        fake.requests()
            .iter()
            .any(|r| r.header("x-claude-code-session-id") == Some(id)
                || r.body["metadata"].to_string().contains(id)),
        "every request names session {id}"
    );
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
    assert_eq!(harness_processes(home.path()), vec![]);
}

/// A code task with Claude Code as its agent: it edits in the task's worktree, Pegasus commits,
/// verifies and merges into main.
#[test]
fn a_code_task_with_claude_code_reaches_a_verified_merge() {
    if claude_bin().is_none() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let app = repo(tmp.path(), "app");
    let keys = format!(
        "{}verify:\n  - grep -q shipped feature.txt\n",
        repos_yaml(&[("app", &app)])
    );
    let Some((fake, home, _d, _worker)) = started("", &keys) else {
        return;
    };
    fake.add_rule(Rule::new(
        Match::All(vec![
            Match::NewPrompt,
            Match::LastUserTextContains("Add the feature file".into()),
        ]),
        Reply::Tools(vec![bash("echo shipped > feature.txt && echo made-it")]),
    ));
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("made-it".into()),
        Reply::Text("feature.txt is there".into()),
    ));
    let id = add_code_task(&home, "cc", "Add the feature file");
    let t = poll(Duration::from_secs(90), "the code task done", || {
        let t = home.json(&["task", "show", &id])["task"].clone();
        matches!(t["state"].as_str(), Some("done" | "failed" | "blocked")).then_some(t)
    });
    assert_eq!(t["state"], "done", "{t}");
    assert_eq!(sh(&app, "cat feature.txt"), "shipped");
    assert!(sh(&app, "git log --format=%s -1").starts_with("Merge pegasus/task-"));
    assert_eq!(sh(&app, "git status --porcelain"), "");
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
    assert_eq!(harness_processes(home.path()), vec![]);
    assert_eq!(harness_processes(&app), vec![]);
}

/// A project whose harness binary is missing does not start: one line naming the key.
#[test]
fn a_missing_harness_binary_is_one_error_naming_the_key() {
    let fake = FakeLlm::start().unwrap();
    main_agent_rule(&fake);
    let home = harness_home(&fake, "/nonexistent/claude", "");
    let _d = home.start_fake();
    let first = home.create("cc");
    home.ctl_ok(&["project", "suspend", "cc"]);
    configure(&home, "cc", "agent: claude-code\n");
    home.ctl_ok(&["project", "resume", "cc"]);
    let _ = first;
    let log = poll(Duration::from_secs(20), "the worker's refusal", || {
        let dir = home.path().join("logs");
        let text: String = std::fs::read_dir(&dir)
            .ok()?
            .flatten()
            .filter_map(|e| std::fs::read_to_string(e.path()).ok())
            .collect();
        text.contains("harnesses.claude-code.command")
            .then_some(text)
    });
    assert!(log.contains("/nonexistent/claude"), "{log}");
    // pegasusd was told why (the worker's Fatal) and says it where people look.
    let shown = poll(
        Duration::from_secs(20),
        "the reason at project show",
        || {
            let out = home.ctl(&["project", "show", "cc"]);
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            text.contains("harnesses.claude-code.command")
                .then_some(text)
        },
    );
    assert!(shown.contains("not an executable file"), "{shown}");
}

/// Claude Code runs contained like `exec`: its shell cannot write outside the workdir, cannot
/// read the Pegasus home, sees only its own processes, and has no provider key in its
/// environment.
#[test]
fn claude_code_is_contained_like_exec() {
    let Some((fake, home, _d, _worker)) = started("", "") else {
        return;
    };
    let outside = tempfile::tempdir().unwrap();
    let escaped = outside.path().join("escaped.txt");
    let command = format!(
        "touch {} 2>/dev/null; echo touch=$?; cat {} >/dev/null 2>&1; echo read=$?; echo procs=$(ls /proc | grep -c '^[0-9]*$'); env | grep -c {FAKE_KEY} | sed 's/^/keys=/'",
        escaped.display(),
        home.path().join("config.yml").display(),
    );
    fake.add_rule(Rule::new(
        Match::All(vec![
            Match::NewPrompt,
            Match::LastUserTextContains("Try to get out".into()),
        ]),
        Reply::Tools(vec![bash(&command)]),
    ));
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("touch=".into()),
        Reply::Text("tried".into()),
    ));
    let said = home.ctl_ok(&["project", "send", "cc", "Try to get out", "--wait"]);
    assert!(said.contains("tried"), "{said}");
    assert!(
        !escaped.exists(),
        "a write outside the workdir went through"
    );
    let log = home.ctl_ok(&["project", "log", "cc"]);
    let result = log
        .lines()
        .find(|l| l.trim_start().starts_with("← ") && l.contains("touch="))
        .unwrap_or_else(|| panic!("the result in the log:\n{log}"));
    assert!(!result.contains("touch=0"), "{result}");
    assert!(!result.contains("read=0"), "the home is readable: {result}");
    assert!(result.contains("keys=0"), "{result}");
    let procs: u32 = result
        .split("procs=")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(999);
    assert!(procs < 30, "a PID namespace of its own: {result}");
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

/// A budget reached mid-task: the harness's next model call is refused by pegasusd, Claude Code
/// stops, and the task ends blocked on `budget` with the reason (`send --wait` exits 1).
#[test]
fn a_budget_reached_mid_task_stops_claude_code() {
    // The first call fits the project's $0.08 (its reservation is bounded, DESIGN.md §15)
    // and costs $0.10 (100k input tokens at $1/M): the next one has no room.
    let Some((fake, home, _d, _worker)) = started("", "budget_usd: 0.08\n") else {
        return;
    };
    fake.add_rule(
        Rule::new(
            Match::All(vec![
                Match::NewPrompt,
                Match::LastUserTextContains("Spend it".into()),
            ]),
            Reply::Tools(vec![bash("echo step-one")]),
        )
        .usage(pegasus_fakellm::UsageSpec {
            input: 100_000,
            output: 10,
            ..Default::default()
        }),
    );
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("step-one".into()),
        Reply::Text("should not get here".into()),
    ));
    let out = home.ctl(&["project", "send", "cc", "Spend it", "--wait"]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stderr.contains("budget"), "{stdout}\n{stderr}");
    let t = tasks(&home, "cc");
    assert_eq!(t.len(), 1, "{t:?}");
    assert_eq!(
        (t[0]["state"].as_str(), t[0]["stop_reason"].as_str()),
        (Some("blocked"), Some("budget")),
        "{t:?}"
    );
    // (The MainAgent, told of the stop, may call the fake too.)
    let of_claude = fake
        .requests()
        .iter()
        .filter(|r| r.body.to_string().contains("Spend it"))
        .count();
    assert_eq!(of_claude, 1, "the refused call never reached the provider");
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
    assert_eq!(harness_processes(home.path()), vec![]);
}

/// `approvals.tools` globs match Claude Code's own tool names: `Write: deny` refuses its
/// `Write` by policy (the model is told the key), without asking anyone.
#[test]
fn approvals_tools_globs_match_claude_codes_tool_names() {
    let Some((fake, home, _d, _worker)) = started("approvals: {tools: {\"Wri*\": deny}}\n", "")
    else {
        return;
    };
    let file = home.project_dir("cc").join("workdir/kept-out.txt");
    fake.add_rule(Rule::new(
        Match::All(vec![
            Match::NewPrompt,
            Match::LastUserTextContains("Write it".into()),
        ]),
        Reply::Tools(vec![ToolCall::new(
            "Write",
            json!({"file_path": file, "content": "no\n"}),
        )]),
    ));
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("denied by policy: approvals.tools[Wri*]".into()),
        Reply::Text("the policy refused the write".into()),
    ));
    let said = home.ctl_ok(&["project", "send", "cc", "Write it", "--wait"]);
    assert!(said.contains("the policy refused the write"), "{said}");
    assert!(!file.exists());
    assert_eq!(home.json(&["approvals"]), json!([]), "nobody was asked");
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

/// kill -9 of the worker while Claude Code runs a command: Claude Code and the command go with
/// it within a second; pegasusd starts a new worker, which runs the message again once,
/// resuming the same Claude Code session.
#[test]
fn kill_9_of_the_worker_mid_command_leaves_nothing_and_the_message_runs_again_once() {
    let Some((fake, home, _d, worker)) = started("", "") else {
        return;
    };
    let marks = home.project_dir("cc").join("workdir/marks.txt");
    // The first run starts a long command; the run after the restart a short one.
    fake.add_rule(
        Rule::new(
            Match::LastUserTextContains("Pegasus restarted".into()),
            Reply::Tools(vec![bash("echo again >> marks.txt && echo finished")]),
        )
        .times(1),
    );
    fake.add_rule(
        Rule::new(
            Match::All(vec![
                Match::NewPrompt,
                Match::LastUserTextContains("Mark and wait".into()),
            ]),
            Reply::Tools(vec![bash("echo first >> marks.txt && sleep 600")]),
        )
        .times(1),
    );
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("finished".into()),
        Reply::Text("marked after the restart".into()),
    ));
    home.ctl_ok(&["project", "send", "cc", "Mark and wait"]);
    poll(Duration::from_secs(60), "the long command to run", || {
        std::fs::read_to_string(&marks)
            .ok()
            .filter(|m| m == "first\n")
    });
    assert!(!harness_processes(home.path()).is_empty());
    kill9(worker);
    poll(
        Duration::from_secs(2),
        "Claude Code and its command to die with the worker",
        || harness_processes(home.path()).is_empty().then_some(()),
    );
    home.ready_worker("cc", Some(u64::from(worker)));
    let t = poll(Duration::from_secs(60), "the message's task done", || {
        let t = tasks(&home, "cc");
        (t.len() == 1 && t[0]["state"] == "done").then_some(t)
    });
    assert_eq!(
        std::fs::read_to_string(&marks).unwrap(),
        "first\nagain\n",
        "{t:?}"
    );
    let log = home.ctl_ok(&["project", "log", "cc"]);
    assert!(log.contains("marked after the restart"), "{log}");
    assert!(
        log.contains("cut off"),
        "the cut-off call shows as cancelled: {log}"
    );
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
    assert_eq!(harness_processes(home.path()), vec![]);
}

/// A role may have its own agent: in a built-in project, a task for role `coder` (assigned with
/// `agent: claude-code`) is worked by Claude Code, told the role's prompt.
#[test]
fn a_roles_agent_can_be_claude_code_in_a_builtin_project() {
    let Some(bin) = claude_bin() else { return };
    let fake = FakeLlm::start().unwrap();
    main_agent_rule(&fake);
    let home = harness_home(&fake, &bin, "");
    let _d = home.start_fake();
    project_with(
        &home,
        "mixed",
        "roles:\n  - {role: coder, agent: claude-code}\n",
    );
    fake.add_rule(Rule::new(
        Match::All(vec![
            Match::NewPrompt,
            Match::LastUserTextContains("Role work".into()),
        ]),
        Reply::Text("done as the coder".into()),
    ));
    let id = home.json(&[
        "task",
        "add",
        "mixed",
        "--goal",
        "Role work",
        "--role",
        "coder",
    ])["id"]
        .as_str()
        .unwrap()
        .to_string();
    let t = poll(Duration::from_secs(60), "the role's task done", || {
        let t = home.json(&["task", "show", &id])["task"].clone();
        matches!(t["state"].as_str(), Some("done" | "failed" | "blocked")).then_some(t)
    });
    assert_eq!(t["state"], "done", "{t}");
    // Claude Code made the call (its own tools offered), with the role's prompt.
    let call = fake
        .requests()
        .into_iter()
        .find(|r| r.body.to_string().contains("Role work"))
        .unwrap();
    let tools: Vec<String> = call.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_string))
        .collect();
    assert!(tools.contains(&"Bash".to_string()), "{tools:?}");
    assert!(
        call.body["system"].to_string().contains("coder")
            || call.body["system"].to_string().contains("Coder")
    );
    assert!(home
        .project_dir("mixed")
        .join("harness/claude-code/sessions.json")
        .exists());
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

/// A project suspended while Claude Code's call waits for approval stops at once (the call is
/// held, Claude Code goes); resumed, the task runs again, the call is asked anew and runs once.
#[test]
fn a_suspend_while_a_call_waits_holds_it_and_the_resumed_task_asks_again() {
    let Some((fake, home, _d, _worker)) = started("approvals: {exec: ask}\n", "") else {
        return;
    };
    let runs = home.project_dir("cc").join("workdir/held.txt");
    fake.add_rule(
        Rule::new(
            Match::LastUserTextContains("Pegasus restarted".into()),
            Reply::Tools(vec![bash("echo once >> held.txt && echo held-ran")]),
        )
        .times(1),
    );
    fake.add_rule(
        Rule::new(
            Match::All(vec![
                Match::NewPrompt,
                Match::LastUserTextContains("Hold this".into()),
            ]),
            Reply::Tools(vec![bash("echo once >> held.txt && echo held-ran")]),
        )
        .times(1),
    );
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("held-ran".into()),
        Reply::Text("ran it after the pause".into()),
    ));
    home.ctl_ok(&["project", "send", "cc", "Hold this"]);
    let first = waiting(&home);
    let task = first["task"].as_str().unwrap().to_string();
    home.ctl_ok(&["project", "suspend", "cc"]);
    poll(
        Duration::from_secs(10),
        "Claude Code gone with the suspend",
        || harness_processes(home.path()).is_empty().then_some(()),
    );
    let t = home.json(&["task", "show", &task])["task"].clone();
    assert_eq!(t["state"], "blocked", "the task waits, held: {t}");
    home.ctl_ok(&["project", "resume", "cc"]);
    let second = poll(Duration::from_secs(60), "the call asked again", || {
        home.json(&["approvals"])
            .as_array()?
            .iter()
            .find(|r| r["id"] != first["id"])
            .cloned()
    });
    home.ctl_ok(&["approve", second["id"].as_str().unwrap()]);
    poll(Duration::from_secs(60), "the task done", || {
        let t = home.json(&["task", "show", &task])["task"].clone();
        (t["state"] == "done").then_some(())
    });
    assert_eq!(std::fs::read_to_string(&runs).unwrap(), "once\n");
    assert!(home
        .ctl_ok(&["project", "log", "cc"])
        .contains("ran it after the pause"));
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
    assert_eq!(harness_processes(home.path()), vec![]);
}

/// The tool names a request offered its model.
fn offered_tools(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The calls a role made, as the ledger metered them for project `project`: `(task, role)`.
fn metered(home: &Home, project: &str) -> Vec<(String, String)> {
    let ledger = std::fs::read_to_string(home.path().join("costs/ledger.jsonl")).unwrap();
    ledger
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l["project"] == project)
        .map(|l| {
            let s = |k: &str| l[k].as_str().unwrap_or_default().to_string();
            (s("task"), s("role"))
        })
        .collect()
}

/// A code task's state once it is over (or `verified` and waiting for nothing).
fn task_over(home: &Home, id: &str) -> Value {
    poll(Duration::from_secs(120), &format!("task {id} over"), || {
        let t = home.json(&["task", "show", id])["task"].clone();
        matches!(t["state"].as_str(), Some("done" | "failed" | "blocked")).then_some(t)
    })
}

/// Adds a code task with `goal` to `project` on its repo `app`; its id.
fn add_code_task(home: &Home, project: &str, goal: &str) -> String {
    home.json(&["task", "add", project, "--goal", goal, "--repo", "app"])["id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The built-in agent's rule: asked something with `when` in it, it writes `content` to a.txt.
fn agent_writes(when: &str, content: &str) -> Rule {
    Rule::new(
        Match::LastUserTextContains(when.into()),
        Reply::Tools(vec![ToolCall::new(
            "write_file",
            json!({"path": "a.txt", "content": content}),
        )]),
    )
}

/// pegasusd on a home where Claude Code is `bin`, and built-in project `name` on a fresh repo
/// `app` (returned with its temp dir), with `keys` and `review: reviewer`, that role assigned to
/// Claude Code.
fn reviewed_by_claude_code(
    fake: &FakeLlm,
    bin: &str,
    name: &str,
    keys: &str,
) -> (tempfile::TempDir, std::path::PathBuf, Home, Daemon) {
    let tmp = tempfile::tempdir().unwrap();
    let app = repo(tmp.path(), "app");
    let home = harness_home(fake, bin, "");
    let d = home.start_fake();
    project_with(
        &home,
        name,
        &format!(
            "{}{keys}review: reviewer\nroles:\n  - {{role: reviewer, agent: claude-code}}\n",
            repos_yaml(&[("app", &app)])
        ),
    );
    (tmp, app, home, d)
}

/// A built-in project whose review role is assigned to Claude Code (`roles: [{role: reviewer,
/// agent: claude-code}]`): the review of each attempt is Claude Code's, run in the task's
/// worktree and unable to change it. Its first review tries to write into the worktree (refused
/// by the sandbox), then rejects; the change goes back to the built-in agent once, the second
/// review approves, and the task is merged. Every review call was Claude Code's (its own tools,
/// not the editing ones), through the relay, metered to the task as the reviewer's.
#[test]
fn a_review_role_assigned_to_claude_code_sends_back_then_approves() {
    const REVIEWER: &str = "You are the Reviewer";
    let Some(bin) = claude_bin() else { return };
    let fake = FakeLlm::start().unwrap();
    let reviewer = |m: Match| Match::All(vec![Match::SystemContains(REVIEWER.into()), m]);
    // Claude Code's first review: it tries to change what it reviews, then rejects.
    fake.add_rule(
        Rule::new(
            reviewer(Match::NewPrompt),
            Reply::Tools(vec![bash("echo tampered >> a.txt; echo wrote=$?; pwd")]),
        )
        .times(1),
    );
    fake.add_rule(
        Rule::new(
            reviewer(Match::LastToolResultContains("wrote=".into())),
            Reply::Text("REJECTED: the greeting has no name\nWrite `hello Bob`.".into()),
        )
        .times(1),
    );
    fake.add_rule(Rule::new(
        reviewer(Match::NewPrompt),
        Reply::Text("APPROVED\nGood.".into()),
    ));
    // The project's own (built-in) agent.
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("wrote".into()),
        Reply::Text("changed the files".into()),
    ));
    fake.add_rule(agent_writes("rejected your change", "hello Bob\n"));
    fake.add_rule(agent_writes("greet", "hello\n"));
    main_agent_rule(&fake);
    let (_tmp, app, home, _d) =
        reviewed_by_claude_code(&fake, &bin, "cr", "verify: test -s a.txt\n");
    let id = add_code_task(&home, "cr", "greet in a.txt");
    let t = task_over(&home, &id);
    assert_eq!(t["state"], "done", "{t}");
    assert_eq!(
        sh(&app, "cat a.txt"),
        "hello Bob",
        "the approved change, untampered"
    );
    assert_eq!(sh(&app, "git status --porcelain"), "");
    let history = home.json(&["task", "show", &id])["history"].to_string();
    for reason in [
        "review rejected: the greeting has no name",
        "verify passed, review approved",
    ] {
        assert_eq!(history.matches(reason).count(), 1, "{reason}: {history}");
    }
    // Both reviews were Claude Code's: its own tools offered, not the built-in's, and not its
    // editing ones; it was told the diff and where the worktree is.
    let reviews: Vec<Value> = fake
        .requests()
        .into_iter()
        .filter(|r| r.body["system"].to_string().contains(REVIEWER))
        .map(|r| r.body)
        .collect();
    assert_eq!(
        reviews.len(),
        3,
        "two reviews, the first with one tool call"
    );
    for body in &reviews {
        let tools = offered_tools(body);
        assert!(
            tools.contains(&"Bash".to_string()) && tools.contains(&"Read".to_string()),
            "{tools:?}"
        );
        for not in ["read_file", "Edit", "Write"] {
            assert!(
                !tools.contains(&not.to_string()),
                "{not} offered: {tools:?}"
            );
        }
    }
    let first = reviews[0]["messages"].to_string();
    assert!(
        first.contains("+hello") && first.contains(".pegasus/worktrees/task-"),
        "{first}"
    );
    assert!(reviews[2]["messages"].to_string().contains("+hello Bob"));
    // Its write was refused, in the worktree it ran in.
    let tried = reviews[1]["messages"].to_string();
    assert!(
        tried.contains("wrote=1") || tried.contains("wrote=2"),
        "{tried}"
    );
    // Metered to the task, as the reviewer's calls.
    let reviewer_calls = metered(&home, "cr")
        .into_iter()
        .filter(|(task, role)| *task == id && role == "reviewer")
        .count();
    assert_eq!(reviewer_calls, 3);
    // Nothing of a reviewer's session is kept, and nothing of it runs on.
    let sessions = home
        .project_dir("cr")
        .join("harness/claude-code/sessions.json");
    assert!(!sessions.exists(), "a consultation keeps no session");
    assert_eq!(harness_processes(&app), vec![]);
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

/// A built-in project whose plan role is assigned to Claude Code: Claude Code's answer is the
/// plan, read as the built-in planner's is; the task is split into its two subtasks, which the
/// built-in agent works and merges in order.
#[test]
fn a_plan_role_assigned_to_claude_code_splits_the_task() {
    const PLANNER: &str = "You are the Planner";
    let Some(bin) = claude_bin() else { return };
    let fake = FakeLlm::start().unwrap();
    let plan = json!({"subtasks": [
        {"title": "one", "goal": "create one.txt"},
        {"title": "two", "goal": "create two.txt", "depends_on": [1]}
    ]});
    fake.add_rule(Rule::new(
        Match::SystemContains(PLANNER.into()),
        Reply::Text(format!("Here is the plan:\n```json\n{plan}\n```")),
    ));
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("wrote".into()),
        Reply::Text("created it".into()),
    ));
    for name in ["one", "two"] {
        fake.add_rule(Rule::new(
            Match::LastUserTextContains(format!("create {name}.txt")),
            Reply::Tools(vec![ToolCall::new(
                "write_file",
                json!({"path": format!("{name}.txt"), "content": format!("{name}\n")}),
            )]),
        ));
    }
    main_agent_rule(&fake);
    let tmp = tempfile::tempdir().unwrap();
    let app = repo(tmp.path(), "app");
    let home = harness_home(&fake, &bin, "");
    let _d = home.start_fake();
    project_with(
        &home,
        "cp",
        &format!(
            "{}plan: planner\nroles:\n  - {{role: planner, agent: claude-code}}\n",
            repos_yaml(&[("app", &app)])
        ),
    );
    let id = add_code_task(&home, "cp", "create one.txt and two.txt");
    let t = task_over(&home, &id);
    assert_eq!(t["state"], "done", "{t}");
    assert_eq!(t["subtasks"].as_array().map(Vec::len), Some(2), "{t}");
    assert_eq!(sh(&app, "cat one.txt two.txt"), "one\ntwo");
    assert!(t["artifacts"].to_string().contains("plan.md"), "{t}");
    // The plan was Claude Code's (its tools), asked once, run in the repo, metered to the task.
    let plans: Vec<Value> = fake
        .requests()
        .into_iter()
        .filter(|r| r.body["system"].to_string().contains(PLANNER))
        .map(|r| r.body)
        .collect();
    assert_eq!(plans.len(), 1, "subtasks are not planned again");
    assert!(offered_tools(&plans[0]).contains(&"Bash".to_string()));
    assert!(plans[0]["messages"]
        .to_string()
        .contains(&app.canonicalize().unwrap().display().to_string()));
    assert!(metered(&home, "cp").contains(&(id.clone(), "planner".to_string())));
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

/// A review role assigned to Claude Code whose model call a budget refuses: no review, so the
/// task fails saying so (as when the built-in reviewer's call is refused), and nothing is
/// merged. The refused call never reached the provider.
#[test]
fn a_budget_that_refuses_a_claude_code_reviewer_fails_the_task_unmerged() {
    const REVIEWER: &str = "You are the Reviewer";
    let Some(bin) = claude_bin() else { return };
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(
        Match::SystemContains(REVIEWER.into()),
        Reply::Text("APPROVED".into()),
    ));
    // The built-in agent's last call spends the project's $0.08 ($0.10: 100k input tokens at
    // $1/M); the reviewer's first call has no room left.
    fake.add_rule(
        Rule::new(
            Match::LastToolResultContains("wrote".into()),
            Reply::Text("changed the files".into()),
        )
        .usage(pegasus_fakellm::UsageSpec {
            input: 100_000,
            output: 10,
            ..Default::default()
        }),
    );
    fake.add_rule(agent_writes("greet", "hello\n"));
    main_agent_rule(&fake);
    let (_tmp, app, home, _d) = reviewed_by_claude_code(&fake, &bin, "cb", "budget_usd: 0.08\n");
    let before = sh(&app, "git rev-parse main");
    let id = add_code_task(&home, "cb", "greet in a.txt");
    let t = task_over(&home, &id);
    assert_eq!(t["state"], "failed", "{t}");
    let reason = t["stop_reason"].as_str().unwrap();
    assert!(
        reason.starts_with("the reviewer (reviewer) did not answer: Stopped:")
            && reason.contains("budget"),
        "{reason}"
    );
    assert_eq!(sh(&app, "git rev-parse main"), before, "nothing merged");
    assert!(fake
        .requests()
        .iter()
        .all(|r| !r.body["system"].to_string().contains(REVIEWER)));
    assert_eq!(harness_processes(&app), vec![]);
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

/// The pids of the processes descending from `ancestor` whose program is `project-worker` run
/// as `harness-hook`: Claude Code's permission hooks asking the worker.
fn hooks_under(ancestor: u32) -> Vec<u32> {
    let parent = |pid: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit(')')
            .next()?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    processes_with("harness-hook")
        .into_iter()
        .filter(|pid| {
            let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
            let mut p = *pid;
            exe.to_string_lossy().contains("project-worker")
                && std::iter::from_fn(|| {
                    p = parent(p)?;
                    (p > 1).then_some(p)
                })
                .any(|p| p == ancestor)
        })
        .collect()
}

/// Request `id` of project `cc` is soon closed as withdrawn because Claude Code stopped
/// waiting, and `approve` is refused with one line saying so.
fn assert_withdrawn(home: &Home, id: &str) {
    let closed = home
        .project_dir("cc")
        .join(format!("approvals/closed/{id}.answer.json"));
    let answer: Value = poll(Duration::from_secs(20), "the request closed", || {
        serde_json::from_slice(&std::fs::read(&closed).ok()?).ok()
    });
    assert_eq!(answer["decision"], "withdrawn", "{answer}");
    assert_eq!(
        answer["why"], "Claude Code stopped waiting for the answer",
        "{answer}"
    );
    let refused = home.ctl_fails(&["approve", id]);
    assert!(
        refused.starts_with(&format!(
            "pegasusctl: approval {id} was already answered: withdrawn by policy at "
        )),
        "{refused}"
    );
}

/// The permission hook killed while its call waits for approval: the request is withdrawn at
/// once (no longer waiting, closed as withdrawn), a later `approve` is refused with one line,
/// the command never runs, and Claude Code goes on to answer the message.
#[test]
fn a_hook_killed_while_its_call_waits_withdraws_the_request() {
    let Some((fake, home, _d, worker)) = started("approvals: {exec: ask}\n", "") else {
        return;
    };
    let marker = home.project_dir("cc").join("workdir/hook-killed.txt");
    fake.add_rule(
        Rule::new(
            Match::All(vec![
                Match::NewPrompt,
                Match::LastUserTextContains("Kill its hook".into()),
            ]),
            Reply::Tools(vec![bash("echo ran > hook-killed.txt")]),
        )
        .times(1),
    );
    fake.add_rule(Rule::new(
        Match::AnyTextContains("Kill its hook".into()),
        Reply::Text("went on without it".into()),
    ));
    let (send, said) = spawn_ctl(&home, &["project", "send", "cc", "Kill its hook", "--wait"]);
    let req = waiting(&home);
    let id = req["id"].as_str().unwrap().to_string();
    let hook = poll(Duration::from_secs(10), "the hook process", || {
        hooks_under(worker).first().copied()
    });
    kill9(hook);
    poll(
        Duration::from_secs(10),
        "the request no longer waiting",
        || {
            let listed = home.json(&["approvals"]);
            (!listed.as_array()?.iter().any(|r| r["id"] == id.as_str())).then_some(())
        },
    );
    assert_withdrawn(&home, &id);
    let out = send.wait_with_output().unwrap();
    assert!(out.status.success());
    poll(Duration::from_secs(5), "the answer printed", || {
        said.lock()
            .unwrap()
            .contains("went on without it")
            .then_some(())
    });
    let task = req["task"].as_str().unwrap();
    let t = home.json(&["task", "show", task])["task"].clone();
    assert_eq!(t["state"], "done", "{t}");
    assert!(!marker.exists(), "the command never ran");
    assert!(!home
        .project_dir("cc")
        .join(format!("approvals/closed/{id}.ran"))
        .exists());
    assert!(home
        .ctl_ok(&["project", "log", "cc"])
        .contains("went on without it"));
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
    assert_eq!(harness_processes(home.path()), vec![]);
}

/// Claude Code itself killed while its call waits for approval: the run ends, and with it the
/// request (withdrawn, a later `approve` refused); the task fails saying Claude Code exited,
/// and the command never runs.
#[test]
fn claude_code_killed_while_its_call_waits_withdraws_the_request() {
    let Some((fake, home, _d, _worker)) = started("approvals: {exec: ask}\n", "") else {
        return;
    };
    let marker = home.project_dir("cc").join("workdir/harness-killed.txt");
    fake.add_rule(Rule::new(
        Match::All(vec![
            Match::NewPrompt,
            Match::LastUserTextContains("Kill Claude Code".into()),
        ]),
        Reply::Tools(vec![bash("echo ran > harness-killed.txt")]),
    ));
    home.ctl_ok(&["project", "send", "cc", "Kill Claude Code"]);
    let req = waiting(&home);
    let id = req["id"].as_str().unwrap().to_string();
    for (pid, _) in harness_processes(home.path()) {
        // One may be gone with the ones before it.
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert_withdrawn(&home, &id);
    let task = req["task"].as_str().unwrap();
    let t = poll(Duration::from_secs(20), "the task over", || {
        let t = home.json(&["task", "show", task])["task"].clone();
        (t["state"] == "failed").then_some(t)
    });
    assert_eq!(t["stop_reason"], "model_error", "{t}");
    assert!(
        t["result_summary"]
            .as_str()
            .is_some_and(|r| r.contains("Claude Code exited")),
        "{t}"
    );
    assert!(home.json(&["approvals"]).as_array().unwrap().is_empty());
    assert!(!marker.exists(), "the command never ran");
    assert_eq!(harness_processes(home.path()), vec![]);
}

/// The in-repo MCP test server (`examples/mcp_test_server.rs`), built by `cargo test`.
fn mcp_server_bin() -> String {
    let bin = example_bin("mcp_test_server");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build --example mcp_test_server` (plain `cargo test` builds it)",
        bin.display()
    );
    bin.display().to_string()
}

/// config.yml's `mcp_servers`: the test server `t`, tagged `tag` (so its processes are found),
/// with `secret` in its `env`.
fn mcp_servers(tag: &str, secret: &str) -> String {
    format!(
        "mcp_servers:\n  t: {{command: '{}', args: ['{tag}'], timeout_s: 10, env: {{MCP_TEST_SECRET: '{secret}'}}}}\n",
        mcp_server_bin()
    )
}

/// Processes working in `dir` (a harness, the MCP proxies it started, the MCP servers the
/// worker runs), with their command line and environment.
fn processes_in(dir: &Path) -> Vec<(u32, String, String)> {
    let dir = dir.canonicalize().unwrap_or(dir.to_path_buf());
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).ok()?;
            let read = |f: &str| -> Option<String> {
                let bytes = std::fs::read(format!("/proc/{pid}/{f}")).ok()?;
                Some(String::from_utf8_lossy(&bytes).replace('\0', " "))
            };
            (cwd.starts_with(&dir) && alive(pid))
                .then(|| Some((pid, read("cmdline")?, read("environ")?)))
                .flatten()
        })
        .collect()
}

/// A project's MCP server is Claude Code's tool: the model's `mcp__t__echo` call reaches the
/// server the worker runs (Claude Code gets a proxy, not the server), its answer reaches the
/// model's next request, and the session shows the call and its result.
#[test]
fn claude_code_calls_a_project_mcp_tool_run_by_the_worker() {
    let tag = "tag-cc-mcp-call";
    let Some((fake, home, _d, _worker)) = started(&mcp_servers(tag, "sekrit-call"), "") else {
        return;
    };
    fake.add_rule(Rule::new(
        Match::All(vec![
            Match::NewPrompt,
            Match::LastUserTextContains("Echo through the server".into()),
        ]),
        Reply::Tools(vec![ToolCall::new(
            "mcp__t__echo",
            json!({"text": "hello"}),
        )]),
    ));
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("echo: hello".into()),
        Reply::Text("the server said echo: hello".into()),
    ));
    let said = home.ctl_ok(&["project", "send", "cc", "Echo through the server", "--wait"]);
    assert!(said.contains("the server said echo: hello"), "{said}");
    // Claude Code knew every tool of the server, under the built-in agent's names (its own
    // tool search defers them: it names them to its model, and loads one when called).
    let requests = fake.requests();
    let first = requests
        .iter()
        .find(|r| r.body.to_string().contains("Echo through the server"))
        .unwrap();
    let body = first.body.to_string();
    for want in [
        "mcp__t__echo",
        "mcp__t__write",
        "mcp__t__sleep",
        "mcp__t__big",
    ] {
        assert!(body.contains(want), "{want} in {body}");
    }
    let log = home.ctl_ok(&["project", "log", "cc"]);
    assert!(log.contains("→ mcp__t__echo"), "{log}");
    assert!(log.contains("echo: hello"), "{log}");
    // The server runs under the worker, which keeps it for the next turn; the proxies went
    // with Claude Code.
    assert_eq!(processes_with(tag).len(), 1, "{:?}", processes_with(tag));
    let show = home.json(&["project", "show", "cc"]);
    assert_eq!(show["mcp_servers"][0]["state"], "running", "{show}");
    poll(Duration::from_secs(10), "the proxies to exit", || {
        processes_with("mcp-proxy")
            .iter()
            .all(|pid| {
                std::fs::read_link(format!("/proc/{pid}/cwd"))
                    .map_or(true, |cwd| !cwd.starts_with(home.path()))
            })
            .then_some(())
    });
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

/// With `approvals: {tools: {"mcp__t__*": ask}}`, Claude Code's MCP call waits for a person
/// (asked once, at the worker's MCP endpoint): nothing runs before the answer, approved it
/// runs once, denied it does not run and the model is told why. While it waits, the server's
/// `env` secret is in the server's environment and in no other process of the run (Claude
/// Code, its proxies): not in an environment, not on a command line.
#[test]
fn claude_codes_mcp_call_waits_for_approval_and_the_servers_secret_stays_with_it() {
    let tag = "tag-cc-mcp-ask";
    let secret = "sekrit-4711-never-shown";
    let extra = format!(
        "{}approvals: {{tools: {{\"mcp__t__*\": ask}}}}\n",
        mcp_servers(tag, secret)
    );
    let Some((fake, home, _d, _worker)) = started(&extra, "") else {
        return;
    };
    let work = home.project_dir("cc").join("workdir");
    for (said, file) in [
        ("Write the first", "first.txt"),
        ("Write the second", "second.txt"),
    ] {
        fake.add_rule(Rule::new(
            Match::All(vec![
                Match::NewPrompt,
                Match::LastUserTextContains(said.into()),
            ]),
            Reply::Tools(vec![ToolCall::new(
                "mcp__t__write",
                json!({"path": work.join(file)}),
            )]),
        ));
    }
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("wrote ".into()),
        Reply::Text("the server wrote it".into()),
    ));
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("denied by the user: not now".into()),
        Reply::Text("the write was refused".into()),
    ));

    let (send, said) = spawn_ctl(
        &home,
        &["project", "send", "cc", "Write the first", "--wait"],
    );
    let req = waiting(&home);
    assert_eq!(req["tool"], "mcp__t__write", "{req}");
    assert!(
        !work.join("first.txt").exists(),
        "nothing runs before the answer"
    );
    // Asked once: by the endpoint, not again by Claude Code's hook.
    assert_eq!(home.json(&["approvals"]).as_array().unwrap().len(), 1);
    // The secret: with the server, nowhere else.
    let procs = processes_in(home.path());
    let server: Vec<_> = procs.iter().filter(|p| p.1.contains(tag)).collect();
    assert_eq!(server.len(), 1, "{procs:?}");
    assert!(server[0].2.contains(secret), "the server has its env");
    let claude_bin = claude_bin().unwrap();
    assert!(
        procs
            .iter()
            .any(|p| p.1.contains(&claude_bin) || p.1.starts_with("claude")),
        "Claude Code runs while its call waits: {procs:?}"
    );
    assert!(
        procs.iter().any(|p| p.1.contains("mcp-proxy t")),
        "its proxy runs: {procs:?}"
    );
    for (pid, cmdline, environ) in &procs {
        if cmdline.contains(tag) {
            continue;
        }
        assert!(
            !cmdline.contains(secret) && !environ.contains(secret),
            "process {pid} ({cmdline}) holds the server's secret"
        );
    }
    home.ctl_ok(&["approve", req["id"].as_str().unwrap()]);
    let out = send.wait_with_output().unwrap();
    assert!(out.status.success());
    printed(&said, "the server wrote it");
    assert_eq!(
        std::fs::read_to_string(work.join("first.txt")).unwrap(),
        "mcp\n"
    );

    // Denied, with a reason: not run, and the model is told.
    let (send, said) = spawn_ctl(
        &home,
        &["project", "send", "cc", "Write the second", "--wait"],
    );
    let req = waiting(&home);
    assert_eq!(req["tool"], "mcp__t__write", "{req}");
    home.ctl_ok(&["deny", req["id"].as_str().unwrap(), "--reason", "not now"]);
    let out = send.wait_with_output().unwrap();
    assert!(out.status.success());
    printed(&said, "the write was refused");
    assert!(
        !work.join("second.txt").exists(),
        "the denied call did not run"
    );
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

/// The MCP endpoint trusts no hook: with `approvals: {tools: {"mcp__t__*": deny}}`, Claude
/// Code's own call is refused, and so is one its model makes by running a proxy itself from
/// its shell (the token is in its environment), past Claude Code and its hook. The server
/// never writes.
#[test]
fn the_policy_holds_at_the_mcp_endpoint_even_past_claude_codes_hook() {
    let tag = "tag-cc-mcp-deny";
    let extra = format!(
        "{}approvals: {{tools: {{\"mcp__t__*\": deny}}}}\n",
        mcp_servers(tag, "sekrit-deny")
    );
    let Some((fake, home, _d, _worker)) = started(&extra, "") else {
        return;
    };
    let work = home.project_dir("cc").join("workdir");
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "write", "arguments": {"path": work.join("sneaky.txt")}}});
    let sneak = format!(
        "printf '%s\\n' '{call}' | '{}' mcp-proxy t",
        env!("CARGO_BIN_EXE_project-worker")
    );
    fake.add_rule(Rule::new(
        Match::All(vec![
            Match::NewPrompt,
            Match::LastUserTextContains("Sneak past".into()),
        ]),
        Reply::Tools(vec![bash(&sneak)]),
    ));
    fake.add_rule(Rule::new(
        Match::All(vec![
            Match::NewPrompt,
            Match::LastUserTextContains("Write it plainly".into()),
        ]),
        Reply::Tools(vec![ToolCall::new(
            "mcp__t__write",
            json!({"path": work.join("plain.txt")}),
        )]),
    ));
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("denied by policy".into()),
        Reply::Text("refused, as it should be".into()),
    ));
    for said in ["Sneak past", "Write it plainly"] {
        let out = home.ctl_ok(&["project", "send", "cc", said, "--wait"]);
        assert!(out.contains("refused, as it should be"), "{said}: {out}");
    }
    let log = home.ctl_ok(&["project", "log", "cc"]);
    assert!(log.contains("→ Bash"), "{log}");
    assert!(log.contains("→ mcp__t__write"), "{log}");
    assert!(!work.join("sneaky.txt").exists() && !work.join("plain.txt").exists());
    // Nothing was asked of a person.
    assert_eq!(home.json(&["approvals"]).as_array().unwrap().len(), 0);
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

/// Claude Code killed while its MCP call waits for approval: its proxy goes with it, and so
/// does the request (withdrawn, a later `approve` refused); the server never runs the call.
#[test]
fn claude_code_killed_while_its_mcp_call_waits_withdraws_the_request() {
    let tag = "tag-cc-mcp-kill";
    let extra = format!(
        "{}approvals: {{tools: {{\"mcp__t__*\": ask}}}}\n",
        mcp_servers(tag, "sekrit-kill")
    );
    let Some((fake, home, _d, _worker)) = started(&extra, "") else {
        return;
    };
    let marker = home.project_dir("cc").join("workdir/mcp-killed.txt");
    fake.add_rule(Rule::new(
        Match::All(vec![
            Match::NewPrompt,
            Match::LastUserTextContains("Kill it mid-call".into()),
        ]),
        Reply::Tools(vec![ToolCall::new(
            "mcp__t__write",
            json!({"path": marker}),
        )]),
    ));
    home.ctl_ok(&["project", "send", "cc", "Kill it mid-call"]);
    let req = waiting(&home);
    assert_eq!(req["tool"], "mcp__t__write", "{req}");
    let id = req["id"].as_str().unwrap().to_string();
    // Claude Code and what it started; the server is the worker's and stays.
    for (pid, exe) in harness_processes(home.path()) {
        if !exe.contains("mcp_test_server") {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
    assert_withdrawn(&home, &id);
    assert!(home.json(&["approvals"]).as_array().unwrap().is_empty());
    assert!(!marker.exists(), "the call never ran");
    assert_eq!(processes_with(tag).len(), 1, "the worker's server stays");
}
