//! Codex as a project's agent (`agent: codex`, DESIGN.md §15), through the real binaries:
//! pegasusd, its worker, pegasusctl, and the real `codex` (OpenAI's Codex CLI 0.171.0) against
//! the fake LLM's Responses API. A message is answered and mirrored into the session; a shell
//! command waits for a person's approval (`exec: ask`) and a denial reaches Codex as one; the
//! Codex thread continues from message to message and after `kill -9` of pegasusd.
//!
//! Needs `codex` on PATH (`.ci/run` installs `@openai/codex@0.171.0`); without it each test
//! skips with one line, and under `CI=true` fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use pegasus_fakellm::{FakeLlm, Format, Match, Reply, Rule, ToolCall};
use serde_json::json;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

/// A home whose default model is `fo/gpt-5.5` on an `openai` provider at the fake, priced and
/// known as a reasoning model (the MainAgent's own calls go to it too), with `extra` YAML
/// appended; `None` (after one line) when there is no `codex` and `CI` is not
/// `true`.
fn codex_home(fake: &FakeLlm, extra: &str) -> Option<Home> {
    required(common::codex::find())?;
    main_agent_rule(fake);
    Some(Home::with_config(&format!(
        "default_model: fo/{model}\n\
         providers:\n  fo: {{kind: openai, base_url: \"{o}\", api_key_env: {FAKE_KEY_ENV}}}\n\
         prices:\n  \"fo/*\": {{input: 1.0, output: 2.0}}\n\
         models:\n  \"fo/*\": {{context_window: 400000, max_output_tokens: 16000, reasoning: true}}\n\
         llm: {{retry_base_ms: 10, max_retries: 1, timeout_s: 60}}\n\
         workers: {{shutdown_timeout_s: 5}}\n\
         agent: {{reflection: false}}\n\
         {extra}\n",
        model = common::codex::MODEL,
        o = fake.openai_base_url(),
    )))
}

/// Creates project `name` with `agent: codex` and waits for its worker (started again, so it
/// reads the key).
fn codex_project(home: &Home, name: &str) -> u32 {
    let first = home.create(name);
    configure(home, name, "agent: codex\n");
    home.ctl_ok(&["project", "suspend", name]);
    home.ctl_ok(&["project", "resume", name]);
    home.ready_worker(name, Some(u64::from(first)))
}

/// Only the Responses API's requests (Codex's), not the MainAgent's.
fn codex_requests(fake: &FakeLlm) -> Vec<pegasus_fakellm::Recorded> {
    fake.requests()
        .into_iter()
        .filter(|r| r.format == Format::Responses)
        .collect()
}

/// The live processes of Codex (its command line names it) working in `dir` or below.
fn codex_in(dir: &std::path::Path) -> Vec<u32> {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    procs
        .flatten()
        .filter_map(|p| p.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap_or_default();
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            cwd.starts_with(dir) && String::from_utf8_lossy(&cmd).contains("codex")
        })
        .collect()
}

/// Creates project `name` with `keys` in its PROJECT.md and waits for its worker (started
/// again, so it reads them).
fn project_with(home: &Home, name: &str, keys: &str) {
    home.create(name);
    configure(home, name, keys);
    home.ctl_ok(&["project", "suspend", name]);
    home.ctl_ok(&["project", "resume", name]);
    home.ready_worker(name, None);
}

/// Adds a code task with `goal` on repo `app` to `project` and returns it once it is over.
fn code_task_over(home: &Home, project: &str, goal: &str) -> serde_json::Value {
    let id = home.json(&["task", "add", project, "--goal", goal, "--repo", "app"])["id"]
        .as_str()
        .unwrap()
        .to_string();
    poll(WAIT, "the code task done", || {
        let t = home.json(&["task", "show", &id])["task"].clone();
        matches!(t["state"].as_str(), Some("done" | "failed" | "blocked")).then_some(t)
    })
}

fn responses(rule: Match, reply: Reply) -> Rule {
    Rule::new(
        Match::All(vec![Match::Format(Format::Responses), rule]),
        reply,
    )
}

/// `pegasusctl project send --wait` prints Codex's answer; the session shows the message and
/// the answer; Codex ran with its home in the project (`harness/codex/home`), its key the
/// endpoint's, never the provider's.
#[test]
fn a_message_is_answered_by_codex_and_mirrored() {
    let fake = FakeLlm::start().unwrap();
    fake.require_api_key(Some(FAKE_KEY.into()));
    let Some(home) = codex_home(&fake, "") else {
        return;
    };
    fake.add_rule(responses(
        Match::LastUserTextContains("hello codex".into()),
        Reply::Text("Hello from Codex through Pegasus.".into()),
    ));
    let _d = home.start_fake();
    codex_project(&home, "cx");

    // Followers see the answer stream as it comes, once.
    let out = home.ctl_ok(&["project", "send", "cx", "hello codex", "--wait", "--stream"]);
    assert_eq!(
        out.matches("Hello from Codex through Pegasus.").count(),
        1,
        "{out}"
    );
    let log = home.ctl_ok(&["project", "log", "cx"]);
    assert!(log.contains("hello codex"), "{log}");
    assert!(log.contains("Hello from Codex through Pegasus."), "{log}");
    let requests = codex_requests(&fake);
    assert_eq!(requests.len(), 1, "{:?}", fake.violations());
    assert_eq!(requests[0].body["model"], common::codex::MODEL);
    // Codex's hosted web search (beyond the approval policy and the metered tokens) is off.
    let tools = requests[0].body["tools"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(!tools.is_empty());
    assert!(
        !tools.iter().any(|t| t["type"] == "web_search"),
        "{tools:?}"
    );
    // pegasusd added the provider's key on the way; Codex had only its endpoint's.
    assert_eq!(
        requests[0].header("authorization"),
        Some(format!("Bearer {FAKE_KEY}").as_str())
    );
    let codex_config = std::fs::read_to_string(
        home.project_dir("cx")
            .join("harness/codex/home/config.toml"),
    )
    .unwrap();
    assert!(!codex_config.contains(FAKE_KEY), "{codex_config}");
    // Its model call went through pegasusd: metered in the ledger for the project.
    let ledger = std::fs::read_to_string(home.path().join("costs/ledger.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = ledger
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|l: &serde_json::Value| l["project"] == "cx")
        .collect();
    assert_eq!(lines.len(), 1, "{ledger}");
    assert!(lines[0]["usd"].as_f64().unwrap() > 0.0, "{ledger}");
    assert!(home
        .project_dir("cx")
        .join("harness/codex/home/sessions")
        .is_dir());
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
    poll(WAIT, "codex gone after its answer", || {
        codex_in(home.path()).is_empty().then_some(())
    });
}

/// Under `exec: ask`, Codex's shell command waits for a person: approved, it runs and its
/// output goes back to Codex; denied, it does not run and Codex's model is told so.
#[test]
fn codex_commands_wait_for_a_person() {
    let fake = FakeLlm::start().unwrap();
    let Some(home) = codex_home(&fake, "approvals: {exec: ask}") else {
        return;
    };
    for (word, file) in [("make yes", "yes.txt"), ("make no", "no.txt")] {
        fake.add_rule(
            responses(
                Match::All(vec![
                    Match::NewPrompt,
                    Match::LastUserTextContains(word.into()),
                ]),
                Reply::Tools(vec![ToolCall::new(
                    "exec_command",
                    json!({"cmd": format!("echo made > {file} && cat {file}")}),
                )]),
            )
            .times(1),
        );
    }
    fake.add_rule(responses(
        Match::LastToolResultContains("Process exited with code 0".into()),
        Reply::Text("The file is made.".into()),
    ));
    fake.add_rule(responses(
        Match::LastToolResultContains("blocked".into()),
        Reply::Text("I was not allowed to.".into()),
    ));
    let _d = home.start_fake();
    codex_project(&home, "cx");
    let workdir = home.project_dir("cx").join("workdir");

    let (mut sender, seen) = spawn_ctl(&home, &["project", "send", "cx", "make yes", "--wait"]);
    let req = poll(WAIT, "an approval request", || {
        let list = home.json(&["approvals"]);
        list.as_array()
            .filter(|a| a.len() == 1)
            .map(|a| a[0].clone())
    });
    assert!(
        req.to_string().contains("echo made > yes.txt"),
        "the request shows the command: {req}"
    );
    assert!(!workdir.join("yes.txt").exists(), "it waited");
    home.ctl_ok(&["approve", req["id"].as_str().unwrap()]);
    assert!(sender.wait().unwrap().success(), "{:?}", fake.violations());
    // Its output is read by another thread: wait for it rather than race it.
    poll(WAIT, "the answer on send's output", || {
        seen.lock()
            .unwrap()
            .contains("The file is made.")
            .then_some(())
    });
    assert_eq!(
        std::fs::read_to_string(workdir.join("yes.txt")).unwrap(),
        "made\n"
    );
    // The command and its output are in the session, as Pegasus's own tool calls are.
    let log = home.ctl_ok(&["project", "log", "cx"]);
    assert!(log.contains("echo made > yes.txt"), "{log}");

    let (mut sender, seen) = spawn_ctl(&home, &["project", "send", "cx", "make no", "--wait"]);
    let req = poll(WAIT, "a second approval request", || {
        let list = home.json(&["approvals"]);
        list.as_array()
            .filter(|a| a.len() == 1)
            .map(|a| a[0].clone())
    });
    home.ctl_ok(&["deny", req["id"].as_str().unwrap(), "--reason", "not today"]);
    assert!(sender.wait().unwrap().success());
    // Its output is read by another thread: wait for it rather than race it.
    poll(WAIT, "the answer on send's output", || {
        seen.lock()
            .unwrap()
            .contains("I was not allowed to.")
            .then_some(())
    });
    assert!(!workdir.join("no.txt").exists());
    let last = codex_requests(&fake).last().unwrap().body["input"].to_string();
    assert!(
        last.contains("not today"),
        "the denial reached codex: {last}"
    );
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

/// Each message continues Codex's thread, also after `kill -9` of pegasusd (and so of its
/// worker and of Codex): the next message's request carries the earlier exchange, and no Codex
/// process is left.
#[test]
fn the_codex_thread_continues_after_kill_9_of_pegasusd() {
    let fake = FakeLlm::start().unwrap();
    let Some(home) = codex_home(&fake, "") else {
        return;
    };
    fake.add_rule(responses(
        Match::LastUserTextContains("first question".into()),
        Reply::Text("first answer".into()),
    ));
    fake.add_rule(responses(
        Match::All(vec![
            Match::LastUserTextContains("second question".into()),
            Match::AnyTextContains("first answer".into()),
        ]),
        Reply::Text("second answer, with the first in mind".into()),
    ));
    let mut d = home.start_fake();
    codex_project(&home, "cx");
    let out = home.ctl_ok(&["project", "send", "cx", "first question", "--wait"]);
    assert!(out.contains("first answer"), "{out}");

    d.kill9();
    poll(WAIT, "no codex left after kill -9", || {
        codex_in(home.path()).is_empty().then_some(())
    });
    let _d = home.start_fake();
    home.ready_worker("cx", None);
    let out = home.ctl_ok(&["project", "send", "cx", "second question", "--wait"]);
    assert!(
        out.contains("second answer, with the first in mind"),
        "{out}"
    );
    let requests = codex_requests(&fake);
    assert_eq!(requests.len(), 2, "{:?}", fake.violations());
    assert_eq!(
        requests[0].header("session-id"),
        requests[1].header("session-id"),
        "one Codex thread"
    );
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

/// `kill -9` of pegasusd while Codex waits for its model: Codex goes with it, and after the
/// restart the message is run again once (not lost, not twice), answered in the same session.
#[test]
fn a_message_cut_off_by_kill_9_mid_turn_is_answered_once_after_the_restart() {
    let fake = FakeLlm::start().unwrap();
    let Some(home) = codex_home(&fake, "") else {
        return;
    };
    // The first try hangs on its model call until the crash; the next one is answered.
    fake.add_rule(
        responses(
            Match::LastUserTextContains("slow question".into()),
            Reply::Fault(pegasus_fakellm::Fault::Delay {
                ms: 120_000,
                then: Box::new(Reply::Text("too late".into())),
            }),
        )
        .times(1),
    );
    fake.add_rule(responses(
        Match::LastUserTextContains("slow question".into()),
        Reply::Text("answered after the crash".into()),
    ));
    let mut d = home.start_fake();
    codex_project(&home, "cx");
    let (_sender, _) = spawn_ctl(&home, &["project", "send", "cx", "slow question"]);
    poll(WAIT, "codex's first model call", || {
        (!codex_requests(&fake).is_empty()).then_some(())
    });
    assert!(!codex_in(home.path()).is_empty(), "codex runs");

    d.kill9();
    poll(WAIT, "no codex left after kill -9", || {
        codex_in(home.path()).is_empty().then_some(())
    });
    let _d = home.start_fake();
    let log = poll(WAIT, "the answer after the restart", || {
        let log = home.ctl_ok(&["project", "log", "cx"]);
        log.contains("answered after the crash").then_some(log)
    });
    assert_eq!(log.matches("slow question").count(), 1, "{log}");
    assert_eq!(log.matches("answered after the crash").count(), 1, "{log}");
    assert!(!log.contains("too late"), "{log}");
    let requests = codex_requests(&fake);
    assert_eq!(requests.len(), 2, "{:?}", fake.violations());
    assert_eq!(
        requests[0].header("session-id"),
        requests[1].header("session-id"),
        "the restart resumed Codex's thread"
    );
    poll(WAIT, "codex gone after its answer", || {
        codex_in(home.path()).is_empty().then_some(())
    });
}

/// Codex as the agent of a code task: it patches the task's worktree, and Pegasus verifies,
/// commits and merges (DESIGN.md §10 unchanged around it).
#[test]
fn codex_works_a_code_task_to_a_verified_merge() {
    let tmp = tempfile::tempdir().unwrap();
    let app = repo(tmp.path(), "app");
    let fake = FakeLlm::start().unwrap();
    let Some(home) = codex_home(&fake, "") else {
        return;
    };
    fake.add_rule(
        responses(
            Match::All(vec![
                Match::NewPrompt,
                Match::LastUserTextContains("add made.txt".into()),
            ]),
            Reply::Tools(vec![ToolCall::new(
                "apply_patch",
                json!("*** Begin Patch\n*** Add File: made.txt\n+made by codex\n*** End Patch\n"),
            )]),
        )
        .times(1),
    );
    fake.add_rule(responses(
        Match::LastToolResultContains("Success".into()),
        Reply::Text("added made.txt".into()),
    ));
    let _d = home.start_fake();
    project_with(
        &home,
        "cx",
        &format!(
            "agent: codex\n{}verify: test -f made.txt\n",
            repos_yaml(&[("app", &app)])
        ),
    );
    let task = code_task_over(&home, "cx", "add made.txt");
    assert_eq!(task["state"], "done", "{task}\n{:?}", fake.violations());
    assert_eq!(sh(&app, "cat made.txt"), "made by codex");
    assert_eq!(sh(&app, "git status --porcelain"), "");
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

/// A budget reached mid-task: Codex's next model call is refused by pegasusd, Codex stops, and
/// the task ends blocked on `budget` with the reason (`send --wait` exits 1).
#[test]
fn a_budget_reached_mid_task_stops_codex() {
    let fake = FakeLlm::start().unwrap();
    let Some(home) = codex_home(&fake, "") else {
        return;
    };
    let _d = home.start_fake();
    let first = home.create("cx");
    configure(&home, "cx", "agent: codex\nbudget_usd: 0.08\n");
    home.ctl_ok(&["project", "suspend", "cx"]);
    home.ctl_ok(&["project", "resume", "cx"]);
    home.ready_worker("cx", Some(u64::from(first)));
    // The first call fits the project's $0.08 and costs $0.10 (100k input tokens at $1/M):
    // the next one has no room.
    fake.add_rule(
        responses(
            Match::All(vec![
                Match::NewPrompt,
                Match::LastUserTextContains("Spend it".into()),
            ]),
            Reply::Tools(vec![ToolCall::new(
                "exec_command",
                json!({"cmd": "echo step-one"}),
            )]),
        )
        .usage(pegasus_fakellm::UsageSpec {
            input: 100_000,
            output: 10,
            ..Default::default()
        }),
    );
    fake.add_rule(responses(
        Match::LastToolResultContains("step-one".into()),
        Reply::Text("should not get here".into()),
    ));
    let out = home.ctl(&["project", "send", "cx", "Spend it", "--wait"]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stderr.contains("budget"), "{stdout}\n{stderr}");
    let tasks = home.json(&["task", "list", "cx"]);
    let t = tasks.as_array().unwrap();
    assert_eq!(t.len(), 1, "{t:?}");
    assert_eq!(
        (t[0]["state"].as_str(), t[0]["stop_reason"].as_str()),
        (Some("blocked"), Some("budget")),
        "{t:?}"
    );
    assert_eq!(
        codex_requests(&fake).len(),
        1,
        "the refused call never reached the provider"
    );
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
    poll(WAIT, "codex gone", || {
        codex_in(home.path()).is_empty().then_some(())
    });
}

/// Codex runs contained like `exec`: its shell cannot write outside the workdir nor into the
/// workdir's `.git`, cannot read the Pegasus home, sees only its own processes, and has no
/// provider key in its environment.
#[test]
fn codex_is_contained_like_exec() {
    let outside = tempfile::tempdir().unwrap();
    let fake = FakeLlm::start().unwrap();
    let Some(home) = codex_home(&fake, "") else {
        return;
    };
    let _d = home.start_fake();
    codex_project(&home, "cx");
    let workdir = home.project_dir("cx").join("workdir");
    sh(&workdir, "git init -q");
    let escaped = outside.path().join("escaped.txt");
    let command = format!(
        "touch {} 2>/dev/null; echo touch=$?; touch .git/hooked 2>/dev/null; echo git=$?; cat {} >/dev/null 2>&1; echo read=$?; echo procs=$(ls /proc | grep -c '^[0-9]*$'); env | grep -c {FAKE_KEY} | sed 's/^/keys=/'",
        escaped.display(),
        home.path().join("config.yml").display(),
    );
    fake.add_rule(responses(
        Match::All(vec![
            Match::NewPrompt,
            Match::LastUserTextContains("Try to get out".into()),
        ]),
        Reply::Tools(vec![ToolCall::new("exec_command", json!({"cmd": command}))]),
    ));
    fake.add_rule(responses(
        Match::LastToolResultContains("touch=".into()),
        Reply::Text("tried".into()),
    ));
    let said = home.ctl_ok(&["project", "send", "cx", "Try to get out", "--wait"]);
    assert!(said.contains("tried"), "{said}");
    assert!(
        !escaped.exists(),
        "a write outside the workdir went through"
    );
    assert!(!workdir.join(".git/hooked").exists(), ".git is writable");
    let result = codex_requests(&fake).last().unwrap().body["input"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|i| i["type"] == "function_call_output")
        .unwrap()["output"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!result.contains("touch=0"), "{result}");
    assert!(!result.contains("git=0"), "{result}");
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

/// A project whose Codex binary is missing does not start: one line naming the key.
#[test]
fn a_missing_codex_binary_is_one_error_naming_the_key() {
    let fake = FakeLlm::start().unwrap();
    let Some(home) = codex_home(&fake, "harnesses: {codex: {command: /nonexistent/codex}}") else {
        return;
    };
    let _d = home.start_fake();
    home.create("cx");
    home.ctl_ok(&["project", "suspend", "cx"]);
    configure(&home, "cx", "agent: codex\n");
    home.ctl_ok(&["project", "resume", "cx"]);
    let log = poll(WAIT, "the worker's refusal", || {
        let text: String = std::fs::read_dir(home.path().join("logs"))
            .ok()?
            .flatten()
            .filter_map(|e| std::fs::read_to_string(e.path()).ok())
            .collect();
        text.contains("harnesses.codex.command").then_some(text)
    });
    assert!(log.contains("/nonexistent/codex"), "{log}");
}

/// `approvals.tools` globs match Codex's own tool names as its hook gives them: with
/// `apply_*: deny`, its patch is refused (the file is not written) and Codex's model is told.
#[test]
fn a_tools_glob_denies_codexs_patch() {
    let fake = FakeLlm::start().unwrap();
    let Some(home) = codex_home(&fake, "approvals: {tools: {\"apply_*\": deny}}") else {
        return;
    };
    fake.add_rule(
        responses(
            Match::All(vec![
                Match::NewPrompt,
                Match::LastUserTextContains("patch it".into()),
            ]),
            Reply::Tools(vec![ToolCall::new(
                "apply_patch",
                json!("*** Begin Patch\n*** Add File: patched.txt\n+no\n*** End Patch\n"),
            )]),
        )
        .times(1),
    );
    fake.add_rule(responses(
        Match::LastToolResultContains("blocked".into()),
        Reply::Text("The patch was refused.".into()),
    ));
    let _d = home.start_fake();
    codex_project(&home, "cx");
    let out = home.ctl_ok(&["project", "send", "cx", "patch it", "--wait"]);
    assert!(out.contains("The patch was refused."), "{out}");
    assert!(!home.project_dir("cx").join("workdir/patched.txt").exists());
    assert!(home.json(&["approvals"]).as_array().unwrap().is_empty());
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

/// A review role assigned to Codex in a built-in project: Codex reviews the change in the
/// task's worktree, told it reads only; its answer is read as the built-in reviewer's
/// (`APPROVED`), and the task is merged. Its calls are metered to the task as the reviewer's.
#[test]
fn a_review_role_assigned_to_codex_approves_and_the_task_is_merged() {
    let tmp = tempfile::tempdir().unwrap();
    let app = repo(tmp.path(), "app");
    let fake = FakeLlm::start().unwrap();
    let Some(home) = codex_home(&fake, "") else {
        return;
    };
    fake.add_rule(responses(
        Match::LastUserTextContains("Review the change of code task".into()),
        Reply::Text("APPROVED\nThe greeting is there.".into()),
    ));
    // The project's own agent is the built-in one.
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("wrote".into()),
        Reply::Text("changed the files".into()),
    ));
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("greet".into()),
        Reply::Tools(vec![ToolCall::new(
            "write_file",
            json!({"path": "a.txt", "content": "hello\n"}),
        )]),
    ));
    let _d = home.start_fake();
    project_with(
        &home,
        "cr",
        &format!(
            "{}review: reviewer\nroles:\n  - {{role: reviewer, agent: codex}}\n",
            repos_yaml(&[("app", &app)])
        ),
    );
    let task = code_task_over(&home, "cr", "greet in a.txt");
    let id = task["id"].as_str().unwrap();
    assert_eq!(task["state"], "done", "{task}\n{:?}", fake.violations());
    assert_eq!(sh(&app, "cat a.txt"), "hello");
    let reviews = codex_requests(&fake);
    assert_eq!(reviews.len(), 1, "one review, by Codex");
    let body = reviews[0].body.to_string();
    assert!(
        body.contains("+hello") && body.contains(".pegasus/worktrees/task-"),
        "{body}"
    );
    assert!(
        body.contains("You are consulted about a Pegasus code task"),
        "{body}"
    );
    let ledger = std::fs::read_to_string(home.path().join("costs/ledger.jsonl")).unwrap();
    assert!(
        ledger.lines().any(|l| {
            let l: serde_json::Value = serde_json::from_str(l).unwrap();
            l["task"] == id && l["role"] == "reviewer"
        }),
        "{ledger}"
    );
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}
