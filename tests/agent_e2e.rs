//! End to end through real HTTP to the fake LLM server, for both wire formats: pegasusd,
//! its workers and pegasusctl as real processes, the gateway in pegasusd calling the fake
//! server over 127.0.0.1, the agent loop in the worker (DESIGN.md §5, §6).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use pegasus_fakellm::{FakeLlm, Fault, Format, Match, Reply, Rule, ToolCall};
use serde_json::json;
use std::time::Duration;

const KEY_ENV: &str = "PEGASUS_FAKE_KEY";
const KEY: &str = "sk-fake-9d41c7e2b05a4f3e";

/// A home whose config points both providers at the fake server; `fa/...` speaks Anthropic,
/// `fo/...` OpenAI. Reflection is off unless a test turns it on (each call must be scripted).
fn llm_home(fake: &FakeLlm, format: Format, extra: &str) -> Home {
    let model = match format {
        Format::Anthropic => "fa/test-model",
        Format::OpenAi | Format::Responses => "fo/test-model",
    };
    Home::with_config(&format!(
        "default_model: {model}\n\
         providers:\n  \
           fa: {{kind: anthropic, base_url: \"{a}\", api_key_env: {KEY_ENV}}}\n  \
           fo: {{kind: openai, base_url: \"{o}\", api_key_env: {KEY_ENV}}}\n\
         prices:\n  \"fa/*\": {{input: 1.0, output: 2.0}}\n  \"fo/*\": {{input: 1.0, output: 2.0}}\n\
         llm: {{retry_base_ms: 10, max_retries: 2, timeout_s: 20}}\n\
         workers: {{shutdown_timeout_s: 5}}\n\
         {extra}\n",
        a = fake.anthropic_base_url(),
        o = fake.openai_base_url(),
    ))
}

fn agent_off() -> &'static str {
    "agent: {reflection: false}"
}

fn send_wait(home: &Home, project: &str, text: &str) -> String {
    home.ctl_ok(&["project", "send", project, text, "--wait"])
        .trim()
        .to_string()
}

fn ledger(home: &Home) -> Vec<serde_json::Value> {
    std::fs::read_to_string(home.path().join("costs/ledger.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Answers the first request of a step with tool calls; later rules answer the rest.
fn tool_rule(user: &str, calls: Vec<ToolCall>) -> Rule {
    Rule::new(
        Match::LastUserTextContains(user.into()),
        Reply::Tools(calls),
    )
    .times(1)
}

fn reads_and_writes_files_and_answers(format: Format) {
    let fake = FakeLlm::start().unwrap();
    fake.require_api_key(Some(KEY.into()));
    let home = llm_home(&fake, format, agent_off());
    fake.add_rule(tool_rule(
        "write hello",
        vec![ToolCall::new(
            "write_file",
            json!({"path": "notes/hello.txt", "content": "hi there"}),
        )],
    ));
    fake.add_rule(tool_rule(
        "write hello",
        vec![ToolCall::new(
            "read_file",
            json!({"path": "notes/hello.txt"}),
        )],
    ));
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("hi there".into()),
        Reply::Text("the file says hi there".into()),
    ));
    let _d = home.start_with_env(&[(KEY_ENV, KEY)]);
    home.create("files");
    assert_eq!(
        send_wait(&home, "files", "please write hello"),
        "the file says hi there"
    );
    let written =
        std::fs::read_to_string(home.project_dir("files").join("workdir/notes/hello.txt")).unwrap();
    assert_eq!(written, "hi there");
    // The message ran as a task that records what it changed.
    let task = home.json(&["task", "list", "files"])[0].clone();
    assert_eq!(task["state"], "done");
    assert_eq!(task["files_changed"], json!(["notes/hello.txt"]));
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
    let requests = fake.requests();
    assert_eq!(requests.len(), 3);
    assert!(requests.iter().all(|r| r.format == format));
    // The key reached the provider in the provider's header...
    let header = match format {
        Format::Anthropic => requests[0].header("x-api-key").map(str::to_string),
        Format::OpenAi | Format::Responses => {
            requests[0].header("authorization").map(str::to_string)
        }
    };
    assert!(header.unwrap().contains(KEY));
    // ... and one ledger line per call, for this project, priced.
    let lines = ledger(&home);
    assert_eq!(lines.len(), 3);
    for l in &lines {
        assert_eq!(l["project"], "files");
        assert!(l["usd"].as_f64().unwrap() > 0.0);
        assert!(l["model"].as_str().unwrap().ends_with("test-model"));
    }
    // The transcript is on disk and `project log` shows it.
    let log = home.ctl_ok(&["project", "log", "files"]);
    assert!(
        log.contains("write_file") && log.contains("the file says hi there"),
        "{log}"
    );
    assert_no_key_anywhere(&home);
}

/// DESIGN.md §12: the key never reaches a worker, a log line or a file.
fn assert_no_key_anywhere(home: &Home) {
    for entry in walk(home.path()) {
        if let Ok(bytes) = std::fs::read(&entry) {
            assert!(
                !String::from_utf8_lossy(&bytes).contains(KEY),
                "the API key leaked into {}",
                entry.display()
            );
        }
    }
    for p in home.json(&["project", "list"]).as_array().unwrap() {
        if let Some(pid) = p["worker_pid"].as_u64() {
            let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
            assert!(
                !String::from_utf8_lossy(&environ).contains(KEY),
                "the API key is in worker {pid}'s environment"
            );
        }
    }
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

fn memory_survives_suspend_and_resume(format: Format) {
    let fake = FakeLlm::start().unwrap();
    let home = llm_home(&fake, format, agent_off());
    fake.add_rule(tool_rule(
        "remember",
        vec![ToolCall::new(
            "memory_write",
            json!({"path": "facts/code.md", "content": "The door code is 4711."}),
        )],
    ));
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("remember".into()),
        Reply::Text("remembered".into()),
    ));
    fake.add_rule(tool_rule(
        "door code",
        vec![ToolCall::new(
            "memory_read",
            json!({"path": "facts/code.md"}),
        )],
    ));
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("4711".into()),
        Reply::Text("it is 4711".into()),
    ));
    let _d = home.start_with_env(&[(KEY_ENV, KEY)]);
    home.create("mem");
    assert_eq!(
        send_wait(&home, "mem", "remember the door code"),
        "remembered"
    );
    home.ctl_ok(&["project", "suspend", "mem"]);
    home.ctl_ok(&["project", "resume", "mem"]);
    home.ready_worker("mem", None);
    assert_eq!(
        send_wait(&home, "mem", "what is the door code?"),
        "it is 4711"
    );
    // The new worker's system prompt carries the memory index.
    let last = fake.requests().last().unwrap().body.to_string();
    assert!(
        last.contains("facts/code.md"),
        "memory index missing from {last}"
    );
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

fn subagent_spend_lands_on_the_parent_task(format: Format) {
    let fake = FakeLlm::start().unwrap();
    let home = llm_home(&fake, format, agent_off());
    fake.add_rule(Rule::new(
        Match::SystemContains("sub-agent".into()),
        Reply::Text("sub result 99".into()),
    ));
    fake.add_rule(tool_rule(
        "delegate",
        vec![ToolCall::new(
            "spawn_subagent",
            json!({"task": "count to 99"}),
        )],
    ));
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("sub result 99".into()),
        Reply::Text("delegated: 99".into()),
    ));
    let _d = home.start_with_env(&[(KEY_ENV, KEY)]);
    home.create("boss");
    assert_eq!(send_wait(&home, "boss", "delegate this"), "delegated: 99");
    let lines = ledger(&home);
    assert_eq!(lines.len(), 3, "{lines:?}");
    let task = lines[0]["task"]
        .as_str()
        .expect("calls carry their task")
        .to_string();
    assert!(
        lines
            .iter()
            .all(|l| l["task"] == task.as_str() && l["project"] == "boss"),
        "{lines:?}"
    );
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

fn rate_limit_is_retried_after_retry_after(format: Format) {
    let fake = FakeLlm::start().unwrap();
    let home = llm_home(&fake, format, agent_off());
    fake.add_rule(
        Rule::new(
            Match::Any,
            Reply::Fault(Fault::Status {
                code: 429,
                message: "slow down".into(),
                retry_after_s: Some(1),
            }),
        )
        .times(1),
    );
    fake.add_rule(Rule::new(Match::Any, Reply::Text("after the wait".into())));
    let _d = home.start_with_env(&[(KEY_ENV, KEY)]);
    home.create("patient");
    assert_eq!(send_wait(&home, "patient", "hello"), "after the wait");
    let r = fake.requests();
    assert_eq!(r.len(), 2);
    let gap = r[1].at.duration_since(r[0].at);
    assert!(
        gap >= Duration::from_millis(950),
        "retried after {gap:?}, before retry-after"
    );
    assert_eq!(ledger(&home).len(), 1, "only the successful call is billed");
}

fn client_errors_are_not_retried_and_reach_the_user(format: Format) {
    let fake = FakeLlm::start().unwrap();
    let home = llm_home(&fake, format, agent_off());
    fake.add_rule(Rule::new(
        Match::Any,
        Reply::Fault(Fault::Status {
            code: 400,
            message: "max_tokens is too large".into(),
            retry_after_s: None,
        }),
    ));
    let _d = home.start_with_env(&[(KEY_ENV, KEY)]);
    home.create("refused");
    // The task failed: `send --wait` exits 1 with the reason.
    let answer = home.ctl_fails(&["project", "send", "refused", "hello", "--wait"]);
    assert!(answer.contains("max_tokens is too large"), "{answer}");
    assert_eq!(fake.request_count(), 1, "a 400 must not be retried");
}

/// A hard budget (DESIGN.md §5): $0.012 fits the worst case of the first call (about $0.01: its
/// estimated input and max_tokens), not that of a second on top of the first's $0.0052.
fn a_budget_stops_calls_and_says_so(format: Format) {
    let fake = FakeLlm::start().unwrap();
    let home = llm_home(
        &fake,
        format,
        &format!(
            "{}\nbudget: {{daily_usd: 0.012, task_usd: null}}",
            agent_off()
        ),
    );
    // Each answer costs $0.0052 ($1/M input, $2/M output).
    fake.add_rule(
        Rule::new(Match::Any, Reply::Text("first answer".into())).usage(
            pegasus_fakellm::UsageSpec {
                input: 5000,
                output: 100,
                cache_read: 0,
                cache_write: 0,
            },
        ),
    );
    let _d = home.start_with_env(&[(KEY_ENV, KEY)]);
    home.create("thrifty");
    assert_eq!(send_wait(&home, "thrifty", "one"), "first answer");
    let answer = home.ctl_fails(&["project", "send", "thrifty", "two", "--wait"]);
    assert!(answer.to_lowercase().contains("budget"), "{answer}");
    assert_eq!(
        fake.request_count(),
        1,
        "the over-budget call reached the provider"
    );
}

/// DESIGN.md §5: every answered call is metered. A server that sends no usage at all (as many
/// OpenAI-compatible servers and proxies do) still gets priced, estimated ledger lines; the
/// task's cost, `pegasusctl cost` and the budgets count them.
fn answers_without_usage_are_metered_and_counted(format: Format) {
    let fake = FakeLlm::start().unwrap();
    fake.omit_usage(true);
    let home = llm_home(&fake, format, agent_off());
    fake.add_rule(Rule::new(
        Match::Any,
        Reply::Text("an answer the server did not count".into()),
    ));
    let _d = home.start_with_env(&[(KEY_ENV, KEY)]);
    home.create("uncounted");
    assert_eq!(
        send_wait(&home, "uncounted", "count me"),
        "an answer the server did not count"
    );
    let lines = ledger(&home);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let line = &lines[0];
    assert_eq!(line["estimated"], true, "{line}");
    let usd = line["usd"].as_f64().expect("an estimated line has a cost");
    assert!(usd > 0.0, "{line}");
    assert!(line["input_tokens"].as_u64().unwrap() > 100, "{line}");
    assert!(line["output_tokens"].as_u64().unwrap() > 0, "{line}");
    let tasks = home.json(&["task", "list", "uncounted"]);
    let task_cost = tasks[0]["cost_usd"].as_f64().unwrap_or_default();
    assert!((task_cost - usd).abs() < 1e-9, "{tasks}");
    // `cost` counts it: its amount, not only the project's name.
    let report = home.json(&["cost"]);
    let counted = report["by_project"]["uncounted"]["usd"].as_f64();
    assert!(counted.is_some_and(|c| (c - usd).abs() < 1e-12), "{report}");
    assert_eq!(report["total"]["estimated_calls"], 1, "{report}");
    let cost = home.ctl_ok(&["cost"]);
    assert!(cost.contains(&format!("total ${usd:.4}")), "{cost}");
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

macro_rules! both_formats {
    ($($name:ident),* $(,)?) => {
        mod anthropic {
            $( #[test] fn $name() { super::$name(pegasus_fakellm::Format::Anthropic) } )*
        }
        mod openai {
            $( #[test] fn $name() { super::$name(pegasus_fakellm::Format::OpenAi) } )*
        }
    };
}

both_formats!(
    answers_without_usage_are_metered_and_counted,
    reads_and_writes_files_and_answers,
    memory_survives_suspend_and_resume,
    subagent_spend_lands_on_the_parent_task,
    rate_limit_is_retried_after_retry_after,
    client_errors_are_not_retried_and_reach_the_user,
    a_budget_stops_calls_and_says_so,
);

/// A provider on 127.0.0.1 without `local: true` (the fake, whose models no table knows) is
/// still asked for its model's window when a worker starts: a server on this machine is the
/// user's own. The fake says nothing (404, as a hosted API would): the default window holds.
#[test]
fn a_server_on_this_machine_is_asked_for_its_window() {
    let fake = FakeLlm::start().unwrap();
    let home = llm_home(&fake, Format::OpenAi, agent_off());
    fake.add_rule(Rule::new(Match::Any, Reply::Text("asked".into())));
    let _d = home.start_with_env(&[(KEY_ENV, KEY)]);
    home.create("probed");
    assert_eq!(send_wait(&home, "probed", "hi"), "asked");
    assert!(fake.window_probes() >= 1, "the server was not asked");
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}
