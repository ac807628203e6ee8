//! Lifecycle hooks in Claude Code's format through the real binaries (DESIGN.md §16, issue 35):
//! hook scripts written as a Claude Code user writes them (bash reading the event from stdin,
//! `python3 -c` for the JSON), set in config.yml and PROJECT.md, fired by the project's agent
//! while the fake LLM scripts its tool calls. Needs `python3` (as CI has).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use pegasus_fakellm::{FakeLlm, Match, Reply, Rule, ToolCall};
use serde_json::json;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

/// A folder of hook scripts outside the home, as a user keeps them.
struct Scripts {
    dir: tempfile::TempDir,
}

impl Scripts {
    fn new() -> Scripts {
        Scripts {
            dir: tempfile::Builder::new()
                .prefix("pghooks")
                .tempdir_in("/tmp")
                .unwrap(),
        }
    }

    /// Writes an executable script and gives its path.
    fn add(&self, name: &str, body: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, body).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }
}

/// The JSON a hook saved of its stdin into the project's workdir, once it is there.
fn saved(home: &Home, project: &str, file: &str) -> serde_json::Value {
    let path = home.project_dir(project).join("workdir").join(file);
    poll(WAIT, &format!("{file} written by a hook"), || {
        let text = std::fs::read_to_string(&path).ok()?;
        serde_json::from_str(text.lines().next()?).ok()
    })
}

/// Every line a hook appended to a file of the workdir.
fn lines(home: &Home, project: &str, file: &str) -> Vec<String> {
    std::fs::read_to_string(home.project_dir(project).join("workdir").join(file))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// On a message holding `word`, the model runs `cmd` with exec once; then, when the last tool
/// result holds one of `seen`, it says the paired words.
fn exec_then(fake: &FakeLlm, word: &str, cmd: &str, seen: &[(&str, &str)]) {
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
    for (in_result, say) in seen {
        fake.add_rule(Rule::new(
            Match::All(vec![
                Match::LastUserTextContains(word.into()),
                Match::LastToolResultContains((*in_result).into()),
            ]),
            Reply::Text((*say).into()),
        ));
    }
}

/// A home on the fake provider with `hooks` (YAML under `hooks:`) in its config.yml.
fn home_with_hooks(fake: &FakeLlm, hooks: &str) -> Home {
    fake.require_api_key(Some(FAKE_KEY.into()));
    main_agent_rule(fake);
    fake_home(fake, &format!("hooks:\n{hooks}"))
}

/// `pegasusctl project send NAME TEXT --wait`, running.
fn send_waiting(home: &Home, project: &str, text: &str) -> std::process::Child {
    Command::new(PEGASUSCTL)
        .arg("--home")
        .arg(home.path())
        .args(["project", "send", project, text, "--wait"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The text of every tool result and user message the model was sent, all requests.
fn all_sent(fake: &FakeLlm) -> String {
    fake.requests()
        .iter()
        .map(|r| r.body["messages"].to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// A bash hook as people write them: reads the event, takes a field out with python3, decides.
const BLOCK_RM: &str = r#"#!/bin/bash
input=$(cat)
echo "$input" >> "$CLAUDE_PROJECT_DIR/pre.json"
echo "$CLAUDE_PROJECT_DIR $PEGASUS_PROJECT" > "$CLAUDE_PROJECT_DIR/env.txt"
cmd=$(echo "$input" | python3 -c 'import json,sys; print(json.load(sys.stdin)["tool_input"].get("command",""))')
if [[ "$cmd" == rm* ]]; then
  echo "rm is not allowed here: $cmd" >&2
  exit 2
fi
exit 0
"#;

#[test]
fn a_pre_tool_use_hook_blocks_rm_with_exit_2_and_the_model_reads_its_stderr() {
    let scripts = Scripts::new();
    let hook = scripts.add("block-rm.sh", BLOCK_RM);
    let fake = FakeLlm::start().unwrap();
    exec_then(
        &fake,
        "clean up",
        "rm -rf data",
        &[
            (
                "blocked by a PreToolUse hook: rm is not allowed here: rm -rf data",
                "saw: blocked",
            ),
            ("exit code", "saw: ran"),
        ],
    );
    exec_then(&fake, "list", "ls", &[("exit code: 0", "saw: listed")]);
    let home = home_with_hooks(
        &fake,
        &format!(
            "  PreToolUse:\n    - matcher: \"exec\"\n      hooks: [{{type: command, command: \"{}\", timeout: 20}}]\n",
            hook.display()
        ),
    );
    let _d = home.start_fake();
    home.create("web");
    let data = home.project_dir("web").join("workdir/data");
    std::fs::create_dir_all(&data).unwrap();

    let out = home.ctl_ok(&["project", "send", "web", "clean up please", "--wait"]);
    assert_eq!(out.trim(), "saw: blocked");
    assert!(data.is_dir(), "the blocked command did not run");

    // What the hook read on stdin: Claude Code's fields, plus `project`.
    let input = saved(&home, "web", "pre.json");
    let workdir = home.project_dir("web").join("workdir");
    assert_eq!(input["hook_event_name"], "PreToolUse");
    assert_eq!(input["tool_name"], "exec");
    assert_eq!(input["tool_input"], json!({"command": "rm -rf data"}));
    assert!(
        input["tool_use_id"].as_str().is_some_and(|s| !s.is_empty()),
        "{input}"
    );
    assert_eq!(input["session_id"], "web");
    assert_eq!(input["project"], "web");
    assert_eq!(input["permission_mode"], "default");
    assert_eq!(
        Path::new(input["cwd"].as_str().unwrap())
            .canonicalize()
            .unwrap(),
        workdir.canonicalize().unwrap()
    );
    assert_eq!(
        Path::new(input["transcript_path"].as_str().unwrap()),
        home.project_dir("web").join("session/current.jsonl")
    );
    let env = lines(&home, "web", "env.txt");
    assert!(env[0].ends_with("/workdir web"), "{env:?}");

    // A command the hook lets through runs as usual.
    let out = home.ctl_ok(&["project", "send", "web", "list the files", "--wait"]);
    assert_eq!(out.trim(), "saw: listed");
    assert_eq!(lines(&home, "web", "pre.json").len(), 2);
}

/// A python hook deciding with JSON on stdout: `ask` for deploys, `deny` for anything
/// dangerous, nothing said otherwise.
const DECIDE: &str = r#"#!/bin/bash
python3 -c '
import json, sys
event = json.load(sys.stdin)
cmd = event["tool_input"].get("command", "")
if "deploy" in cmd:
    decision = {"permissionDecision": "ask", "permissionDecisionReason": "deploys need a person"}
elif "danger" in cmd:
    decision = {"permissionDecision": "deny", "permissionDecisionReason": "not on Fridays"}
else:
    sys.exit(0)
decision["hookEventName"] = "PreToolUse"
print(json.dumps({"hookSpecificOutput": decision}))
'
"#;

const NOTIFY: &str = r#"#!/bin/bash
python3 -c 'import json,sys; e=json.load(sys.stdin); print(e["notification_type"], e["message"])' >> "$CLAUDE_PROJECT_DIR/notified.txt"
"#;

#[test]
fn permission_decisions_deny_and_ask_and_an_asked_call_runs_once_approved() {
    let scripts = Scripts::new();
    let decide = scripts.add("decide.sh", DECIDE);
    let notify = scripts.add("notify.sh", NOTIFY);
    let fake = FakeLlm::start().unwrap();
    exec_then(
        &fake,
        "ship",
        "echo deployed >> deploys.txt",
        &[("exit code: 0", "saw: deployed")],
    );
    exec_then(
        &fake,
        "risky",
        "echo danger",
        &[(
            "blocked by a PreToolUse hook: not on Fridays",
            "saw: denied",
        )],
    );
    let home = home_with_hooks(
        &fake,
        &format!(
            "  PreToolUse:\n    - matcher: \"exec|write_file\"\n      hooks: [{{type: command, command: \"{}\"}}]\n  Notification:\n    - matcher: permission_prompt\n      hooks: [{{type: command, command: \"{}\"}}]\n",
            decide.display(),
            notify.display()
        ),
    );
    let _d = home.start_fake();
    home.create("ops");

    let denied = home.ctl_ok(&["project", "send", "ops", "risky move", "--wait"]);
    assert_eq!(denied.trim(), "saw: denied");

    // `ask` makes an approval request, although the policy allows exec.
    let send = send_waiting(&home, "ops", "ship it");
    let request = poll(WAIT, "an approval request", || {
        let list = home.json(&["approvals"]);
        list.as_array()
            .filter(|a| a.len() == 1)
            .map(|a| a[0].clone())
    });
    assert_eq!(request["tool"], "exec");
    assert_eq!(request["summary"], "echo deployed >> deploys.txt");
    assert!(
        lines(&home, "ops", "deploys.txt").is_empty(),
        "nothing runs before the answer"
    );
    let notified = poll(WAIT, "the Notification hook", || {
        let l = lines(&home, "ops", "notified.txt");
        (!l.is_empty()).then_some(l)
    });
    assert!(
        notified[0].starts_with(
            "permission_prompt Pegasus needs your approval to use exec: echo deployed"
        ),
        "{notified:?}"
    );
    home.ctl_ok(&["approve", request["id"].as_str().unwrap()]);
    let out = send.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "saw: deployed");
    assert_eq!(lines(&home, "ops", "deploys.txt"), ["deployed"]);
}

const POST: &str = r#"#!/bin/bash
input=$(cat)
echo "$input" > "$CLAUDE_PROJECT_DIR/post.json"
echo "remember the changelog" >&2
exit 2
"#;

#[test]
fn a_post_tool_use_hook_sees_the_tool_response_and_its_reason_reaches_the_model() {
    let scripts = Scripts::new();
    let post = scripts.add("post.sh", POST);
    let fake = FakeLlm::start().unwrap();
    exec_then(
        &fake,
        "build",
        "echo built-ok",
        &[(
            "PostToolUse hook feedback:\nremember the changelog",
            "saw: feedback",
        )],
    );
    let home = home_with_hooks(
        &fake,
        &format!(
            "  PostToolUse:\n    - hooks: [{{type: command, command: \"{}\"}}]\n",
            post.display()
        ),
    );
    let _d = home.start_fake();
    home.create("app");
    let out = home.ctl_ok(&["project", "send", "app", "build it", "--wait"]);
    assert_eq!(out.trim(), "saw: feedback");
    let input = saved(&home, "app", "post.json");
    assert_eq!(input["hook_event_name"], "PostToolUse");
    assert_eq!(input["tool_name"], "exec");
    assert_eq!(input["tool_input"]["command"], "echo built-ok");
    let response = &input["tool_response"];
    assert!(
        response["content"].as_str().unwrap().contains("built-ok"),
        "{input}"
    );
    assert_eq!(response["is_error"], false);
    // The command ran (its output is in the result), then the feedback followed it.
    assert!(all_sent(&fake).contains("built-ok"));
}

const PROMPT_GUARD: &str = r#"#!/bin/bash
prompt=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["prompt"])')
if [[ "$prompt" == *secret* ]]; then
  echo "no secrets in prompts, please" >&2
  exit 2
fi
echo "Today is hook day."
"#;

#[test]
fn a_user_prompt_submit_hook_refuses_a_message_and_adds_context_to_others() {
    let scripts = Scripts::new();
    let guard = scripts.add("guard.sh", PROMPT_GUARD);
    let start = scripts.add(
        "start.sh",
        "#!/bin/bash\npython3 -c 'import json,sys; print(\"session source: \" + json.load(sys.stdin)[\"source\"])'\n",
    );
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(
        Match::All(vec![
            Match::AnyTextContains("Today is hook day.".into()),
            Match::AnyTextContains("session source: startup".into()),
        ]),
        Reply::Text("saw: context".into()),
    ));
    fake.add_rule(Rule::new(Match::Any, Reply::Text("saw: no context".into())));
    let home = home_with_hooks(
        &fake,
        &format!(
            "  UserPromptSubmit:\n    - hooks: [{{type: command, command: \"{}\"}}]\n  SessionStart:\n    - matcher: startup\n      hooks: [{{type: command, command: \"{}\"}}]\n",
            guard.display(),
            start.display()
        ),
    );
    let _d = home.start_fake();
    home.create("notes");

    let out = home.ctl(&[
        "project",
        "send",
        "notes",
        "here is my secret: hunter2",
        "--wait",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "the sender is told: {stderr}");
    assert!(
        stderr.contains("Refused by a UserPromptSubmit hook: no secrets in prompts, please"),
        "{stderr}"
    );
    assert_eq!(
        fake.request_count(),
        0,
        "a refused message never reaches the model"
    );
    let tasks = home.json(&["task", "list", "notes"]);
    assert_eq!(tasks[0]["state"], "failed", "{tasks}");

    let out = home.ctl_ok(&["project", "send", "notes", "what day is it?", "--wait"]);
    assert_eq!(out.trim(), "saw: context");
    assert!(
        !all_sent(&fake).contains("hunter2"),
        "the refused message stays out"
    );
    // The session says what the hook did; the file keeps what was sent.
    let log = home.ctl_ok(&["project", "log", "notes"]);
    assert!(
        log.contains("hook UserPromptSubmit: Refused by a UserPromptSubmit hook: no secrets"),
        "{log}"
    );

    // After a restart the refused message is still left out of what the model sees.
    let pid = home.ready_worker("notes", None);
    kill9(pid);
    home.ready_worker("notes", Some(pid as u64));
    home.ctl_ok(&["project", "send", "notes", "and now?", "--wait"]);
    let last = fake.last_request().unwrap();
    assert!(!last.body["messages"].to_string().contains("hunter2"));
}

const STOP_ONCE: &str = r#"#!/bin/bash
active=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["stop_hook_active"])')
echo "$active" >> "$CLAUDE_PROJECT_DIR/stops.txt"
if [ "$active" = "False" ]; then
  echo '{"decision": "block", "reason": "run the tests before you stop"}'
fi
"#;

#[test]
fn a_stop_hook_sends_the_agent_back_once_and_stop_hook_active_ends_it() {
    let scripts = Scripts::new();
    let stop = scripts.add("stop.sh", STOP_ONCE);
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("Stop hook feedback:\nrun the tests before you stop".into()),
        Reply::Text("tests ran, done".into()),
    ));
    fake.add_rule(Rule::new(Match::Any, Reply::Text("done".into())));
    let home = home_with_hooks(
        &fake,
        &format!(
            "  Stop:\n    - hooks: [{{type: command, command: \"{}\"}}]\n",
            stop.display()
        ),
    );
    let _d = home.start_fake();
    home.create("lib");
    let out = home.ctl_ok(&["project", "send", "lib", "finish the work", "--wait"]);
    assert_eq!(out.trim(), "tests ran, done");
    assert_eq!(lines(&home, "lib", "stops.txt"), ["False", "True"]);
    assert_eq!(fake.request_count(), 2);
}

#[test]
fn a_hanging_hook_is_killed_at_its_timeout_with_a_line_and_the_project_goes_on() {
    let scripts = Scripts::new();
    let hang = scripts.add(
        "hang.sh",
        // The child it waits for carries a marker of its own (its argument): killing only
        // bash would leave it behind.
        "#!/bin/bash\ncat > /dev/null\nsleep 600.4417 &\nwait\n",
    );
    let fake = FakeLlm::start().unwrap();
    exec_then(&fake, "probe", "echo probed", &[("probed", "saw: ran")]);
    fake.add_rule(Rule::new(Match::Any, Reply::Text("still here".into())));
    let home = home_with_hooks(
        &fake,
        &format!(
            "  PreToolUse:\n    - matcher: exec\n      hooks: [{{type: command, command: \"{} hang-marker-4417\", timeout: 2}}]\n",
            hang.display()
        ),
    );
    let _d = home.start_fake();
    home.create("svc");
    let out = home.ctl_ok(&["project", "send", "svc", "probe it", "--wait"]);
    assert_eq!(out.trim(), "saw: ran", "a hook that hangs blocks nothing");
    let log = home.ctl_ok(&["project", "log", "svc"]);
    assert!(
        log.contains("hook PreToolUse: hook `")
            && log.contains("did not finish within 2 s and was killed"),
        "{log}"
    );
    assert!(
        processes_with("hang-marker-4417").is_empty() && processes_with("600.4417").is_empty(),
        "the hook and what it started were killed"
    );
    assert_eq!(
        home.ctl_ok(&["project", "send", "svc", "are you there?", "--wait"])
            .trim(),
        "still here"
    );
}

#[test]
fn hooks_of_config_yml_and_of_project_md_both_run_config_first() {
    let scripts = Scripts::new();
    let global = scripts.add(
        "global.sh",
        "#!/bin/bash\ncat > /dev/null\necho 'context from config.yml'\n",
    );
    let own = scripts.add(
        "own.sh",
        "#!/bin/bash\ncat > /dev/null\necho 'context from PROJECT.md'\n",
    );
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(
        Match::AnyTextContains("context from config.yml\ncontext from PROJECT.md".into()),
        Reply::Text("saw: both, in order".into()),
    ));
    fake.add_rule(Rule::new(Match::Any, Reply::Text("saw: not both".into())));
    let home = home_with_hooks(
        &fake,
        &format!(
            "  UserPromptSubmit:\n    - hooks: [{{type: command, command: \"{}\"}}]\n",
            global.display()
        ),
    );
    let _d = home.start_fake();
    let first = home.create("site");
    configure(
        &home,
        "site",
        &format!(
            "hooks:\n  UserPromptSubmit:\n    - hooks: [{{type: command, command: \"{}\"}}]\n",
            own.display()
        ),
    );
    home.ctl_ok(&["project", "suspend", "site"]);
    home.ctl_ok(&["project", "resume", "site"]);
    home.ready_worker("site", Some(first as u64));
    let out = home.ctl_ok(&["project", "send", "site", "hello", "--wait"]);
    assert_eq!(out.trim(), "saw: both, in order");

    // A bad hook in PROJECT.md makes it invalid, with one line naming the file and the key.
    let path = home.project_dir("site").join("PROJECT.md");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("UserPromptSubmit:", "UserPromtSubmit:")).unwrap();
    let error = poll(WAIT, "the project to show as invalid", || {
        let list = home.json(&["project", "list"]);
        let row = list
            .as_array()?
            .iter()
            .find(|p| p["name"] == "site")?
            .clone();
        (row["status"] == "invalid").then(|| row["error"].as_str().unwrap_or_default().to_string())
    });
    assert!(
        error.contains("PROJECT.md:")
            && error.contains("key `hooks`")
            && error.contains("unknown variant `UserPromtSubmit`"),
        "{error}"
    );
}

#[test]
fn a_bad_hook_in_config_yml_stops_pegasusd_with_one_line_naming_the_key() {
    let home = Home::with_config(
        "hooks:\n  PreToolUse:\n    - matcher: \"(exec\"\n      hooks: [{type: command, command: x}]\n",
    );
    let out = Command::new(PEGASUSD)
        .arg("--home")
        .arg(home.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("config.yml:")
            && stderr.contains("matcher `(exec` is not a regular expression"),
        "{stderr}"
    );
}

/// The hook script of the comparison: it keeps every event it reads (one JSON line each) in
/// `$CLAUDE_PROJECT_DIR/events.jsonl`, blocks `rm` with exit 2, and denies with JSON what says
/// `deny-me` — as a Claude Code user writes one.
const SHARED_HOOK: &str = r#"#!/bin/bash
input=$(cat)
echo "$input" | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)))' >> "$CLAUDE_PROJECT_DIR/events.jsonl"
cmd=$(echo "$input" | python3 -c 'import json,sys; print(json.load(sys.stdin)["tool_input"].get("command",""))')
case "$cmd" in
  rm*) echo "rm is not allowed here: $cmd" >&2; exit 2 ;;
  *deny-me*) echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"denied-by-the-shared-hook"}}' ;;
esac
exit 0
"#;

/// The fields every tool event carries in both (Claude Code's common fields and the tool's).
const COMMON_FIELDS: [&str; 8] = [
    "session_id",
    "transcript_path",
    "cwd",
    "hook_event_name",
    "permission_mode",
    "tool_name",
    "tool_input",
    "tool_use_id",
];

/// On `prompt`, the model calls `tool` with `rm -rf data`, then (seeing the hook's stderr)
/// with `echo deny-me`, then (seeing the denial's reason) answers `both blocked`.
fn shared_script(fake: &FakeLlm, prompt: &str, tool: &str) {
    let call = |command: &str| {
        let mut input = json!({"command": command});
        if tool == "Bash" {
            input["description"] = json!("run it");
        }
        Reply::Tools(vec![ToolCall::new(tool, input)])
    };
    fake.add_rule(
        Rule::new(
            Match::All(vec![
                Match::NewPrompt,
                Match::LastUserTextContains(prompt.into()),
            ]),
            call("rm -rf data"),
        )
        .times(1),
    );
    fake.add_rule(
        Rule::new(
            Match::LastToolResultContains("rm is not allowed here: rm -rf data".into()),
            call("echo deny-me"),
        )
        .times(1),
    );
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("denied-by-the-shared-hook".into()),
        Reply::Text("both blocked".into()),
    ));
}

fn events(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The same hook script, with the same `hooks` block, under Claude Code (its `--settings`
/// file) and under Pegasus (config.yml): each model, scripted by the fake, calls a tool the
/// matcher names (`Bash` there, `exec` here); in both the script reads the same common fields,
/// its exit 2 keeps `rm` from running with its stderr reaching the model, and its JSON `deny`
/// keeps the next call from running with its reason reaching the model. Needs `claude` (as
/// `tests/claude_code.rs`; skipped with one line without it, failing under `CI=true`).
#[test]
fn the_same_hook_script_blocks_the_same_way_under_claude_code_and_under_pegasus() {
    let scripts = Scripts::new();
    let hook = scripts.add("shared.sh", SHARED_HOOK);
    let block = json!({"PreToolUse": [{"matcher": "Bash|exec", "hooks": [{"type": "command", "command": hook, "timeout": 30}]}]});

    // Claude Code.
    let cc_fake = FakeLlm::start().unwrap();
    cc_fake.require_api_key(Some(common::claude::API_KEY.to_string()));
    let Some(cc) = common::claude::Claude::new(&cc_fake) else {
        return;
    };
    shared_script(&cc_fake, "clean up the data folder", "Bash");
    let settings = cc.home().join("hooks-settings.json");
    std::fs::write(&settings, json!({"hooks": block}).to_string()).unwrap();
    let cc_data = cc.dir().join("data");
    std::fs::create_dir_all(&cc_data).unwrap();
    let cc = cc.args([
        "--settings",
        settings.to_str().unwrap(),
        "--allowedTools",
        "Bash",
    ]);
    let run = cc.run("clean up the data folder");
    assert_eq!(run.result_text(), Some("both blocked"), "{}", run.dump());
    assert!(cc_data.is_dir(), "rm did not run under Claude Code");
    let cc_events = events(&cc.dir().join("events.jsonl"));
    assert_eq!(cc_events.len(), 2, "{cc_events:?}");

    // Pegasus, the same block (YAML reads JSON).
    let fake = FakeLlm::start().unwrap();
    shared_script(&fake, "clean up the data folder", "exec");
    fake.require_api_key(Some(FAKE_KEY.into()));
    main_agent_rule(&fake);
    let home = fake_home(&fake, &format!("hooks: {block}"));
    let _d = home.start_fake();
    home.create("shared");
    let workdir = home.project_dir("shared").join("workdir");
    std::fs::create_dir_all(workdir.join("data")).unwrap();
    let out = home.ctl_ok(&[
        "project",
        "send",
        "shared",
        "clean up the data folder",
        "--wait",
    ]);
    assert_eq!(out.trim(), "both blocked");
    assert!(
        workdir.join("data").is_dir(),
        "rm did not run under Pegasus"
    );
    let ours = events(&workdir.join("events.jsonl"));
    assert_eq!(ours.len(), 2, "{ours:?}");

    // The same common fields, the same event, the same commands.
    for (theirs, mine) in cc_events.iter().zip(&ours) {
        for field in COMMON_FIELDS {
            assert!(
                theirs.get(field).is_some(),
                "Claude Code gave no `{field}`: {theirs}"
            );
            assert!(
                mine.get(field).is_some(),
                "Pegasus gave no `{field}`: {mine}"
            );
        }
        assert_eq!(theirs["hook_event_name"], mine["hook_event_name"]);
        assert_eq!(
            theirs["tool_input"]["command"],
            mine["tool_input"]["command"]
        );
        assert_eq!(theirs["permission_mode"], mine["permission_mode"]);
        for (name, v) in [("Claude Code", theirs), ("Pegasus", mine)] {
            let cwd = Path::new(v["cwd"].as_str().unwrap());
            assert!(
                cwd.is_absolute() && v["session_id"].as_str().is_some_and(|s| !s.is_empty()),
                "{name}: {v}"
            );
        }
    }
    // Beyond those, Claude Code adds only fields its schema marks optional (`prompt_id`,
    // `effort`), Pegasus only `project`.
    let keys = |v: &serde_json::Value| -> std::collections::BTreeSet<String> {
        v.as_object().unwrap().keys().cloned().collect()
    };
    let (theirs, mine) = (keys(&cc_events[0]), keys(&ours[0]));
    let only_theirs: Vec<&String> = theirs.difference(&mine).collect();
    let only_mine: Vec<&String> = mine.difference(&theirs).collect();
    assert!(
        only_theirs
            .iter()
            .all(|k| ["prompt_id", "effort", "agent_id", "agent_type"].contains(&k.as_str())),
        "Claude Code gave fields Pegasus does not: {only_theirs:?}"
    );
    assert_eq!(only_mine, ["project"]);
    assert_eq!(cc_events[0]["tool_name"], "Bash");
    assert_eq!(ours[0]["tool_name"], "exec");
}

const GUARD_THAT_HANGS_ONCE: &str = r#"#!/bin/bash
prompt=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["prompt"])')
echo run >> "$CLAUDE_PROJECT_DIR/guard-runs.txt"
if [ -f "$CLAUDE_PROJECT_DIR/hang" ]; then sleep 600; fi
if [[ "$prompt" == *secret* ]]; then
  echo "no secrets in prompts, please" >&2
  exit 2
fi
"#;

/// A worker killed while a UserPromptSubmit hook decides on a message: the message's task runs
/// again after the restart, and the hook is asked again before the model sees anything.
#[test]
fn a_message_whose_hook_was_cut_off_by_a_crash_is_checked_again() {
    let scripts = Scripts::new();
    let guard = scripts.add("guard.sh", GUARD_THAT_HANGS_ONCE);
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(Match::Any, Reply::Text("ok".into())));
    let home = home_with_hooks(
        &fake,
        &format!(
            "  UserPromptSubmit:\n    - hooks: [{{type: command, command: \"{}\", timeout: 120}}]\n",
            guard.display()
        ),
    );
    let _d = home.start_fake();
    let first = home.create("vault");
    let workdir = home.project_dir("vault").join("workdir");
    std::fs::write(workdir.join("hang"), "").unwrap();
    home.ctl_ok(&["project", "send", "vault", "my secret is hunter2"]);
    poll(WAIT, "the hook to start", || {
        (lines(&home, "vault", "guard-runs.txt").len() == 1).then_some(())
    });
    std::fs::remove_file(workdir.join("hang")).unwrap();
    kill9(first);
    home.ready_worker("vault", Some(first as u64));
    let task = poll(WAIT, "the message's task to fail", || {
        let tasks = home.json(&["task", "list", "vault"]);
        tasks
            .as_array()?
            .iter()
            .find(|t| t["state"] == "failed")
            .cloned()
    });
    assert_eq!(lines(&home, "vault", "guard-runs.txt").len(), 2, "{task}");
    assert!(
        !all_sent(&fake).contains("hunter2"),
        "the model never saw the message"
    );
    let log = home.ctl_ok(&["project", "log", "vault"]);
    assert!(
        log.contains("Refused by a UserPromptSubmit hook: no secrets in prompts, please"),
        "{log}"
    );
}
