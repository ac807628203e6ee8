//! The agent under `kill -9`: of its worker in the middle of a long `exec`, and of pegasusd in
//! the middle of a model call; plus path escapes and the MainAgent (DESIGN.md §3 sessions, §4, §6).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use pegasus_fakellm::{FakeLlm, Fault, Match, Reply, Rule, ToolCall};
use serde_json::json;
use std::time::Duration;

const KEY_ENV: &str = "PEGASUS_FAKE_KEY";
const KEY: &str = "sk-fake-crash-0c1d2e3f";

fn llm_home(fake: &FakeLlm) -> Home {
    Home::with_config(&format!(
        "default_model: fa/test-model\n\
         providers:\n  fa: {{kind: anthropic, base_url: \"{a}\", api_key_env: {KEY_ENV}}}\n\
         prices:\n  \"fa/*\": {{input: 1.0, output: 2.0}}\n\
         llm: {{retry_base_ms: 10, max_retries: 1, timeout_s: 20}}\n\
         workers: {{shutdown_timeout_s: 5}}\n\
         agent: {{reflection: false}}\n\
         notify: {{recovered_crashes: true, crash_window_s: 0.5}}\n",
        a = fake.anthropic_base_url(),
    ))
}

fn session_text(home: &Home, name: &str) -> String {
    std::fs::read_to_string(home.project_dir(name).join("session/current.jsonl"))
        .unwrap_or_default()
}

fn processes_with_cmdline(needle: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| {
                    String::from_utf8_lossy(&c)
                        .replace('\0', " ")
                        .contains(needle)
                })
                .unwrap_or(false)
                && alive(*pid)
        })
        .collect()
}

#[test]
fn kill_9_of_the_worker_during_a_long_exec_closes_the_call_as_cancelled() {
    let fake = FakeLlm::start().unwrap();
    let home = llm_home(&fake);
    fake.add_rule(Rule::new(
        Match::SystemContains("MainAgent".into()),
        Reply::Text("noted".into()),
    ));
    let marker = format!("sleep 37.{}", std::process::id());
    fake.add_rule(
        Rule::new(
            Match::LastUserTextContains("long job".into()),
            Reply::Tools(vec![ToolCall::new("exec", json!({"command": marker}))]),
        )
        .times(1),
    );
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("Pegasus restarted".into()),
        Reply::Text("resumed: the long job was cut off".into()),
    ));
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("are you back".into()),
        Reply::Text("back and well".into()),
    ));
    let _d = home.start_with_env(&[(KEY_ENV, KEY)]);
    let pid = home.create("longrun");
    home.ctl_ok(&["project", "send", "longrun", "start the long job"]);
    // The assistant turn with the exec call is durable before the command runs.
    poll(
        Duration::from_secs(10),
        "the exec call in the session",
        || {
            session_text(&home, "longrun")
                .contains("\"exec\"")
                .then_some(())
        },
    );
    poll(Duration::from_secs(10), "the exec child to run", || {
        (!processes_with_cmdline(&marker).is_empty()).then_some(())
    });
    // The worker records the command's process group right after starting it; the kill must
    // come after that (a kill within that millisecond would orphan the command).
    let registry = home.path().join("run/exec-longrun.jsonl");
    poll(
        Duration::from_secs(10),
        "the exec group to be recorded",
        || {
            std::fs::read_to_string(&registry)
                .ok()
                .filter(|s| !s.trim().is_empty())
                .map(|_| ())
        },
    );
    let task = home.json(&["task", "list", "longrun"])[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    kill9(pid);
    let back = home.ready_worker("longrun", Some(pid as u64));
    assert!(alive(back));
    // The exec child died with its worker (no orphan keeps running the old command).
    poll(Duration::from_secs(5), "the exec child to die", || {
        processes_with_cmdline(&marker).is_empty().then_some(())
    });
    // The acknowledged message runs again after the restart, and is answered.
    let shown = poll(Duration::from_secs(15), "the message to run again", || {
        let t = home.json(&["task", "show", &task])["task"].clone();
        (t["state"] == "done").then_some(t)
    });
    assert_eq!(shown["result_summary"], "resumed: the long job was cut off");
    // The repair is in the file, not only in memory: the synthetic cancelled result and a
    // crash record, written once (loading again repairs nothing).
    let loaded = pegasus_store::load_session(&home.project_dir("longrun")).unwrap();
    assert_eq!(loaded.skipped, 0);
    assert_eq!(loaded.repaired_tool_uses, 0);
    let crashes: Vec<String> = loaded
        .records
        .iter()
        .filter_map(|r| match r {
            pegasus_store::SessionRecord::Crash { reason, .. } => Some(reason.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(crashes.len(), 1, "{crashes:?}");
    assert!(
        crashes[0].contains("1 tool call cut off") && crashes[0].contains("re-run after restart"),
        "{crashes:?}"
    );
    let text = session_text(&home, "longrun");
    assert_eq!(
        text.matches(
            pegasus_store::CANCELLED_TOOL_RESULT
                .replace('"', "\\\"")
                .as_str()
        )
        .count(),
        1,
        "{text}"
    );
    // `project log` shows the call as cut off, and why.
    let log = home.ctl_ok(&["project", "log", "longrun"]);
    assert!(log.contains("← cancelled: cut off"), "{log}");
    assert!(log.contains("crash: the process stopped"), "{log}");
    // The next message works, and the transcript the provider gets is valid: the dangling call
    // is answered by the synthetic cancelled result.
    let answer = home.ctl_ok(&["project", "send", "longrun", "are you back?", "--wait"]);
    assert_eq!(answer.trim(), "back and well");
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
    // The project's last request (the MainAgent, told of the crash, may call after it).
    let last = fake
        .requests()
        .iter()
        .rev()
        .find(|r| !r.body["system"].to_string().contains("MainAgent"))
        .unwrap()
        .body
        .to_string();
    assert!(
        last.contains("process restarted") && last.contains("cancelled"),
        "{last}"
    );
    // The MainAgent heard about the crash (recovered crashes are told in this home).
    poll(
        Duration::from_secs(10),
        "the crash notice at the MainAgent",
        || {
            fake.requests()
                .iter()
                .any(|r| {
                    r.body
                        .to_string()
                        .contains("project longrun: the worker crashed with signal 9")
                })
                .then_some(())
        },
    );
}

/// A message whose work takes the worker down every time: it runs again once after the first
/// crash, and after the second it is failed as "crashed the worker twice" and the MainAgent is
/// told (DESIGN.md §6).
#[test]
fn a_message_that_crashes_the_worker_twice_is_failed_and_the_main_agent_told() {
    let fake = FakeLlm::start().unwrap();
    let home = llm_home(&fake);
    fake.add_rule(Rule::new(
        Match::SystemContains("MainAgent".into()),
        Reply::Text("noted".into()),
    ));
    let marker = format!("sleep 38.{}", std::process::id());
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("ping".into()),
        Reply::Text("pong".into()),
    ));
    for trigger in ["deadly job", "Pegasus restarted"] {
        fake.add_rule(Rule::new(
            Match::LastUserTextContains(trigger.into()),
            Reply::Tools(vec![ToolCall::new("exec", json!({"command": marker}))]),
        ));
    }
    let _d = home.start_with_env(&[(KEY_ENV, KEY)]);
    let mut pid = home.create("deadly");
    home.ctl_ok(&["project", "send", "deadly", "run the deadly job"]);
    let registry = home.path().join("run/exec-deadly.jsonl");
    for round in 0..2 {
        // Its exec runs (the first time, or again after the restart) and its process group
        // is recorded; then the worker dies, and the command with it.
        let running = poll(
            Duration::from_secs(15),
            "the exec to run and be recorded",
            || {
                let pids = processes_with_cmdline(&marker);
                let recorded = std::fs::read_to_string(&registry).unwrap_or_default();
                // The command runs below its launcher, in the launcher's process group.
                let group = |p: &u32| -> Option<u32> {
                    let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
                    stat.rsplit_once(')')?
                        .1
                        .split_whitespace()
                        .nth(2)?
                        .parse()
                        .ok()
                };
                pids.iter()
                    .filter_map(group)
                    .any(|g| recorded.contains(&format!("\"pgid\":{g},")))
                    .then_some(pids)
            },
        );
        kill9(pid);
        pid = home.ready_worker("deadly", Some(pid as u64));
        poll(Duration::from_secs(5), "the killed exec to die", || {
            running.iter().all(|p| !alive(*p)).then_some(())
        });
        let tasks = home.json(&["task", "list", "deadly"]);
        assert_eq!(tasks.as_array().unwrap().len(), 1, "round {round}: {tasks}");
    }
    let id = home.json(&["task", "list", "deadly"])[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let shown = poll(Duration::from_secs(10), "the task to fail", || {
        let t = home.json(&["task", "show", &id])["task"].clone();
        (t["state"] == "failed").then_some(t)
    });
    assert_eq!(shown["stop_reason"], "crashed the worker twice");
    poll(
        Duration::from_secs(10),
        "the MainAgent told of the crashed-twice message",
        || {
            fake.requests()
                .iter()
                .any(|r| {
                    r.body["system"].to_string().contains("MainAgent")
                        && r.body.to_string().contains("crashed the worker twice")
                })
                .then_some(())
        },
    );
    // It does not run a third time by itself: the worker, back, answers the next message
    // instead, and the provider saw the exec asked for exactly twice.
    let answer = home.ctl_ok(&["project", "send", "deadly", "ping", "--wait"]);
    assert_eq!(answer.trim(), "pong");
    assert!(processes_with_cmdline(&marker).is_empty());
    let execs = fake
        .requests()
        .iter()
        .filter(|r| !r.body["system"].to_string().contains("MainAgent"))
        .count();
    assert_eq!(execs, 3, "two exec turns and the ping");
    let log = home.ctl_ok(&["project", "log", "deadly"]);
    assert_eq!(log.matches("crash: ").count(), 2, "{log}");
}

#[test]
fn kill_9_of_pegasusd_during_a_call_loses_nothing_and_bills_nothing_twice() {
    let fake = FakeLlm::start().unwrap();
    let home = llm_home(&fake);
    fake.add_rule(Rule::new(
        Match::SystemContains("MainAgent".into()),
        Reply::Text("noted".into()),
    ));
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("quick".into()),
        Reply::Text("quick answer".into()),
    ));
    fake.add_rule(
        Rule::new(
            Match::LastUserTextContains("slow".into()),
            Reply::Fault(Fault::Delay {
                ms: 3_000,
                then: Box::new(Reply::Text("slow answer".into())),
            }),
        )
        .times(1),
    );
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("slow".into()),
        Reply::Text("slow answer".into()),
    ));
    let mut d = home.start_with_env(&[(KEY_ENV, KEY)]);
    home.create("steady");
    assert_eq!(
        home.ctl_ok(&["project", "send", "steady", "quick one", "--wait"])
            .trim(),
        "quick answer"
    );
    home.ctl_ok(&["project", "send", "steady", "slow one"]);
    poll(
        Duration::from_secs(10),
        "the slow call to reach the provider",
        || (fake.request_count() >= 2).then_some(()),
    );
    d.kill9();
    let _d = home.start_with_env(&[(KEY_ENV, KEY)]);
    home.ready_worker("steady", None);
    // Both messages are in the session, it loads clean, and the project still works.
    let loaded = pegasus_store::load_session(&home.project_dir("steady")).unwrap();
    assert_eq!(loaded.skipped, 0);
    let text = session_text(&home, "steady");
    assert!(text.contains("quick one") && text.contains("slow one"));
    assert_eq!(
        home.ctl_ok(&["project", "send", "steady", "quick again", "--wait"])
            .trim(),
        "quick answer"
    );
    let lines: Vec<serde_json::Value> =
        std::fs::read_to_string(home.path().join("costs/ledger.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
    // The call the kill cut off may have been billed: it counts once, at its worst case
    // (recorded from the call journal when pegasusd came back).
    let estimated: Vec<_> = lines.iter().filter(|l| l["estimated"] == true).collect();
    assert_eq!(estimated.len(), 1, "{lines:?}");
    assert!(estimated[0]["usd"].as_f64().unwrap() > 0.0);
    // `pegasusctl cost` counts it and says so.
    let cost = home.json(&["cost"]);
    assert_eq!(cost["total"]["estimated_calls"], 1, "{cost}");
    assert_eq!(
        cost["total"]["calls"].as_u64().unwrap() as usize,
        lines.len()
    );
    assert!(home
        .ctl_ok(&["cost"])
        .contains("1 call is counted at an estimated cost"));
    let mut ids: Vec<&str> = lines
        .iter()
        .filter(|l| l["estimated"] != true)
        .map(|l| l["request_id"].as_str().unwrap())
        .collect();
    let n = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), n, "duplicate ledger lines: {lines:?}");
    let mut calls: Vec<&str> = lines.iter().map(|l| l["call"].as_str().unwrap()).collect();
    calls.sort();
    calls.dedup();
    assert_eq!(calls.len(), lines.len(), "one line per call: {lines:?}");
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

#[test]
fn path_escapes_are_refused_and_told_to_the_model() {
    let fake = FakeLlm::start().unwrap();
    let home = llm_home(&fake);
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "top secret").unwrap();
    fake.add_rule(
        Rule::new(
            Match::LastUserTextContains("escape".into()),
            Reply::Tools(vec![
                ToolCall::new("read_file", json!({"path": "../PROJECT.md"})),
                ToolCall::new("read_file", json!({"path": "/etc/passwd"})),
                ToolCall::new("read_file", json!({"path": "link/secret.txt"})),
                ToolCall::new(
                    "write_file",
                    json!({"path": "link/planted.txt", "content": "x"}),
                ),
            ]),
        )
        .times(1),
    );
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("escape".into()),
        Reply::Text("refused as expected".into()),
    ));
    let _d = home.start_with_env(&[(KEY_ENV, KEY)]);
    home.create("jail");
    let workdir = home.project_dir("jail").join("workdir");
    std::fs::create_dir_all(&workdir).unwrap();
    std::os::unix::fs::symlink(outside.path(), workdir.join("link")).unwrap();
    assert_eq!(
        home.ctl_ok(&["project", "send", "jail", "try to escape", "--wait"])
            .trim(),
        "refused as expected"
    );
    let last = fake.requests().last().unwrap().body.clone();
    let results: Vec<serde_json::Value> = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|b| b["type"] == "tool_result")
        .collect();
    assert_eq!(results.len(), 4, "{last}");
    for r in &results {
        assert_eq!(r["is_error"], true, "{r}");
        assert!(
            !r.to_string().contains("top secret") && !r.to_string().contains("root:"),
            "{r}"
        );
    }
    assert!(!outside.path().join("planted.txt").exists());
}

#[test]
fn the_main_agent_creates_a_project_when_asked() {
    let fake = FakeLlm::start().unwrap();
    let home = llm_home(&fake);
    fake.add_rule(
        Rule::new(
            Match::SystemContains("MainAgent".into()),
            Reply::Tools(vec![ToolCall::new(
                "create_project",
                json!({"name": "garden", "goal": "Plan the vegetable garden"}),
            )]),
        )
        .times(1),
    );
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("garden".into()),
        Reply::Text("Created project garden.".into()),
    ));
    let _d = home.start_with_env(&[(KEY_ENV, KEY)]);
    let out = home.ctl_ok(&["chat", "Please start a project for my garden"]);
    assert_eq!(out.trim(), "Created project garden.");
    home.ready_worker("garden", None);
    assert!(home
        .project_md("garden")
        .contains("Plan the vegetable garden"));
    // Its spend is metered under `main`.
    let cost = home.json(&["cost"]);
    assert_eq!(cost["by_project"]["main"]["calls"], 2);
    assert!(home.path().join("main/session/current.jsonl").exists());
}

#[test]
fn a_missing_api_key_is_one_clear_error_at_the_first_call() {
    let fake = FakeLlm::start().unwrap();
    let home = llm_home(&fake);
    let _d = home.start();
    home.create("keyless");
    // The task failed, so `send --wait` fails (exit 1) with the reason on one stderr line.
    let out = home.ctl(&["project", "send", "keyless", "hello", "--wait"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(KEY_ENV), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert_eq!(fake.request_count(), 0);
}
