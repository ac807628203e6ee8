//! Codex (OpenAI's Codex CLI) as a harness (DESIGN.md §15): `codex exec --json PROMPT`, then
//! `codex exec resume SESSION PROMPT` for every later message; its home (`CODEX_HOME`: its
//! config, sessions and logs) in the project's `harness/codex/home/`; its model provider the
//! worker's loopback endpoint (an OpenAI Responses `base_url`, the per-spawn key in the
//! variable its `env_key` names); every tool call put to Pegasus's approval policy through a
//! `PreToolUse` hook (Codex runs hooks in Claude Code's format: `tool_name` `Bash` with
//! `tool_input.command` for its shell, `apply_patch`, `mcp__SERVER__TOOL`; a `deny` reaches
//! the model as `Command blocked by PreToolUse hook: REASON`), and its own approvals off
//! (`approval_policy = "never"`): nothing ever waits on a terminal. Its own sandbox is off
//! (`sandbox_mode = "danger-full-access"`): the run is contained by Pegasus as `exec` is, and
//! Codex's bubblewrap cannot set up its namespaces inside that containment.
//!
//! The hook is given on the command line (`-c hooks.PreToolUse=...`), so nothing a run writes
//! into its home can remove it; such hooks run only when trusted, which
//! `--dangerously-bypass-hook-trust` grants for the run (Codex then says so in an `error`
//! item, which is not mirrored).
//!
//! The shapes read here are the real binary's (0.171.0, run against the fake LLM):
//! `thread.started` with `thread_id` (the session), `turn.started`, `item.started` /
//! `item.completed` with an `item` of type `agent_message` (`text`), `command_execution`
//! (`command`, `aggregated_output`, `exit_code`, `status`), `file_change` (`changes`:
//! `path`, `kind`), `mcp_tool_call` (`server`, `tool`, `arguments`, `result`, `error`),
//! `web_search` (`query`), `reasoning`, `todo_list`, `error` (a warning); then
//! `turn.completed` (`usage`) or `turn.failed` (`error.message`); a top-level `error` is a
//! retry's notice or the failure `turn.failed` repeats.

use std::collections::HashSet;
use std::path::Path;

use pegasus_proto::llm::Block;
use pegasus_store::AgentKind;
use serde_json::{json, Value};

use super::{failure, Driver, Event, Launch, Parser, Plan};

/// Codex.
pub struct Codex;

/// Its home below the harness's state folder (`CODEX_HOME`).
const HOME_DIR: &str = "home";
/// The environment variable its provider's `env_key` names: the endpoint's per-spawn key.
const KEY_ENV: &str = "PEGASUS_CODEX_ENDPOINT_KEY";
/// The id of the provider Pegasus defines in its config.
const PROVIDER: &str = "pegasus";
/// The `error` item Codex writes for `--dangerously-bypass-hook-trust`.
const BYPASS_NOTICE: &str = "`--dangerously-bypass-hook-trust`";

/// A TOML basic string of `s` (a JSON string literal is one).
fn toml_string(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

impl Driver for Codex {
    fn kind(&self) -> AgentKind {
        AgentKind::Codex
    }

    fn api(&self) -> pegasus_proto::worker::RelayApi {
        pegasus_proto::worker::RelayApi::OpenAi
    }

    fn new_session_id(&self) -> Option<String> {
        // Codex names its thread itself (`thread.started`).
        None
    }

    fn launch(&self, plan: &Plan<'_>) -> Result<Launch, String> {
        let home = plan.state_dir.join(HOME_DIR);
        let hook = &plan.hook;
        let mut args = vec!["exec".to_string()];
        let resume = plan.session.filter(|id| has_session(&home, id));
        if resume.is_some() {
            args.push("resume".into());
        }
        args.extend([
            "--json".to_string(),
            "--skip-git-repo-check".into(),
            "--dangerously-bypass-hook-trust".into(),
            "-m".into(),
            plan.model.to_string(),
        ]);
        let mut config = vec![
            format!("model_provider={}", toml_string(PROVIDER)),
            "approval_policy=\"never\"".to_string(),
            // Pegasus contains the run as it contains `exec` (its Landlock rules, PID
            // namespace and limits); Codex's own sandbox (bubblewrap) cannot nest inside it.
            "sandbox_mode=\"danger-full-access\"".to_string(),
            // The hosted web search runs on OpenAI's side: out of reach of the approval policy
            // and billed apart from the tokens Pegasus meters. Off unless the project's
            // `harnesses.codex.args` turn it on (`-c web_search="live"`; the last one wins).
            "web_search=\"disabled\"".to_string(),
            "features.hooks=true".to_string(),
            format!(
                "hooks.PreToolUse=[{{matcher=\"*\",hooks=[{{type=\"command\",command={},timeout={}}}]}}]",
                toml_string(&hook.command),
                hook.timeout_s
            ),
        ];
        let mut system = plan.system.trim().to_string();
        if let Some(note) = plan.work.note() {
            system.push_str("\n\n");
            system.push_str(note);
        }
        if !system.trim().is_empty() {
            config.push(format!(
                "developer_instructions={}",
                toml_string(system.trim())
            ));
        }
        if let Some(effort) = &plan.config.effort {
            config.push(format!("model_reasoning_effort={}", toml_string(effort)));
        }
        for c in config {
            args.extend(["-c".to_string(), c]);
        }
        args.extend(plan.config.args.iter().cloned());
        args.push("--".into());
        if let Some(id) = resume {
            args.push(id.to_string());
        }
        args.push(plan.prompt.to_string());
        let mut env = vec![
            ("CODEX_HOME".to_string(), home.display().to_string()),
            (KEY_ENV.to_string(), plan.endpoint.key.clone()),
        ];
        env.extend(hook.env.iter().cloned());
        Ok(Launch {
            args,
            env,
            // Rewritten before every run: whatever a run before changed in it is undone.
            files: vec![(
                home.join("config.toml"),
                config_toml(&plan.endpoint.base_url),
            )],
        })
    }

    fn parser(&self) -> Box<dyn Parser> {
        Box::new(ExecJson::default())
    }
}

/// Codex's `config.toml`: the one provider it may use (the endpoint, its key in [`KEY_ENV`]),
/// no update checks, no analytics.
fn config_toml(base_url: &str) -> String {
    format!(
        "# Written by Pegasus before every run; edits are lost.\n\
         model_provider = \"{PROVIDER}\"\n\
         check_for_update_on_startup = false\n\
         \n\
         [analytics]\n\
         enabled = false\n\
         \n\
         [model_providers.{PROVIDER}]\n\
         name = \"Pegasus\"\n\
         base_url = {}\n\
         env_key = \"{KEY_ENV}\"\n\
         wire_api = \"responses\"\n",
        toml_string(base_url)
    )
}

/// Whether Codex has session `id` on disk (`sessions/YYYY/MM/DD/rollout-...-<id>.jsonl` in its
/// home): a session killed before its first line was kept is started anew.
fn has_session(home: &Path, id: &str) -> bool {
    let suffix = format!("{id}.jsonl");
    let mut dirs = vec![home.join("sessions")];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("rollout-") && n.ends_with(&suffix))
            {
                return true;
            }
        }
    }
    false
}

/// The reader of `codex exec --json`.
#[derive(Default)]
struct ExecJson {
    /// Items whose call was mirrored when they started.
    started: HashSet<String>,
    /// The last agent message: the answer when the turn completes.
    answer: String,
}

/// A tool item as Pegasus mirrors it.
struct Tool {
    /// Its name as the approval hook names it (`Bash`, `apply_patch`, `mcp__S__T`).
    name: String,
    /// Its input.
    input: Value,
    /// Its output and whether it failed; `None` while it runs.
    result: Option<(String, bool)>,
}

/// The tool call of an item, if it is one.
fn tool_of(item: &Value) -> Option<Tool> {
    let done = item["status"] != "in_progress";
    let failed = item["status"] == "failed" || item["status"] == "declined";
    let (name, input, output, error) = match item["type"].as_str()? {
        "command_execution" => (
            "Bash".to_string(),
            json!({"command": item["command"]}),
            item["aggregated_output"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            failed || item["exit_code"].as_i64().is_some_and(|c| c != 0),
        ),
        "file_change" => {
            let changes: Vec<String> = item["changes"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| {
                    format!(
                        "{} {}",
                        c["kind"].as_str().unwrap_or("update"),
                        c["path"].as_str().unwrap_or_default()
                    )
                })
                .collect();
            (
                "apply_patch".to_string(),
                json!({"changes": item["changes"]}),
                changes.join("\n"),
                failed,
            )
        }
        "mcp_tool_call" => {
            let output = if item["error"].is_object() {
                item["error"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            } else {
                mcp_text(&item["result"])
            };
            (
                format!(
                    "mcp__{}__{}",
                    item["server"].as_str().unwrap_or_default(),
                    item["tool"].as_str().unwrap_or_default()
                ),
                item["arguments"].clone(),
                output,
                failed || item["error"].is_object(),
            )
        }
        "web_search" => (
            "web_search".to_string(),
            json!({"query": item["query"]}),
            String::new(),
            failed,
        ),
        _ => return None,
    };
    Some(Tool {
        name,
        input,
        result: done.then_some((output, error)),
    })
}

/// An MCP result's text: its text content blocks.
fn mcp_text(result: &Value) -> String {
    result["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| b["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

impl ExecJson {
    fn call(id: &str, name: &str, input: &Value) -> Event {
        Event::Assistant {
            blocks: vec![Block::ToolUse {
                id: id.to_string(),
                name: name.to_string(),
                input_json: input.to_string(),
            }],
            model: String::new(),
            usage: None,
        }
    }

    fn item(&mut self, item: &Value, completed: bool, out: &mut Vec<Event>) {
        let id = item["id"].as_str().unwrap_or_default().to_string();
        if item["type"] == "agent_message" {
            if completed {
                // Its text reached followers as it streamed, from the relay (the Responses
                // stream's deltas); here it is the whole message, for the session.
                let text = item["text"].as_str().unwrap_or_default().to_string();
                out.push(Event::Assistant {
                    blocks: vec![Block::Text { text: text.clone() }],
                    model: String::new(),
                    usage: None,
                });
                self.answer = text;
            }
            return;
        }
        let Some(Tool {
            name,
            input,
            result,
        }) = tool_of(item)
        else {
            // Reasoning and plans are the harness's own; an `error` item is a warning.
            if item["type"] == "error"
                && !item["message"]
                    .as_str()
                    .unwrap_or_default()
                    .starts_with(BYPASS_NOTICE)
            {
                tracing::warn!("codex: {}", item["message"]);
            }
            return;
        };
        if !self.started.contains(&id) {
            out.push(Self::call(&id, &name, &input));
            self.started.insert(id.clone());
        }
        if let (true, Some((output, error))) = (completed, result) {
            out.push(Event::Results(vec![(id, name, output, error)]));
        }
    }
}

impl Parser for ExecJson {
    fn line(&mut self, line: &str) -> Vec<Event> {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        match v["type"].as_str() {
            Some("thread.started") => {
                if let Some(id) = v["thread_id"].as_str() {
                    out.push(Event::Session(id.to_string()));
                }
            }
            Some("item.started") => self.item(&v["item"], false, &mut out),
            Some("item.completed") => self.item(&v["item"], true, &mut out),
            Some("turn.completed") => {
                out.push(Event::Done(Ok(std::mem::take(&mut self.answer))));
            }
            Some("turn.failed") => {
                let why = v["error"]["message"]
                    .as_str()
                    .unwrap_or("Codex's turn failed")
                    .to_string();
                out.push(Event::Done(Err(failure(why))));
            }
            _ => {}
        }
        out
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::super::{Failure, Work};
    use super::*;

    /// `codex exec --json` as Codex 0.171.0 wrote it against the fake LLM: a command, a
    /// patch, the answer.
    const RUN: &[&str] = &[
        r#"{"type":"thread.started","thread_id":"01a227c4-94b0-7dd1-baf7-5688600ff7f9"}"#,
        r#"{"type":"item.completed","item":{"id":"item_0","type":"error","message":"`--dangerously-bypass-hook-trust` is enabled. Enabled hooks may run without review for this invocation."}}"#,
        r#"{"type":"turn.started"}"#,
        r#"{"type":"item.started","item":{"id":"item_1","type":"command_execution","command":"/bin/bash -lc 'echo hi > f.txt; cat f.txt'","aggregated_output":"","exit_code":null,"status":"in_progress"}}"#,
        r#"{"type":"item.completed","item":{"id":"item_1","type":"command_execution","command":"/bin/bash -lc 'echo hi > f.txt; cat f.txt'","aggregated_output":"hi\n","exit_code":0,"status":"completed"}}"#,
        r#"{"type":"item.started","item":{"id":"item_2","type":"file_change","changes":[{"path":"/w/g.txt","kind":"add"}],"status":"in_progress"}}"#,
        r#"{"type":"item.completed","item":{"id":"item_2","type":"file_change","changes":[{"path":"/w/g.txt","kind":"add"}],"status":"completed"}}"#,
        r#"{"type":"item.completed","item":{"id":"item_3","type":"agent_message","text":"done it"}}"#,
        r#"{"type":"turn.completed","usage":{"input_tokens":30,"cached_input_tokens":0,"cache_write_input_tokens":0,"output_tokens":9,"reasoning_output_tokens":0}}"#,
    ];

    #[test]
    fn a_run_reads_as_session_calls_results_and_its_answer() {
        let mut p = ExecJson::default();
        let events: Vec<Event> = RUN.iter().flat_map(|l| p.line(l)).collect();
        assert_eq!(
            events[0],
            Event::Session("01a227c4-94b0-7dd1-baf7-5688600ff7f9".into())
        );
        let Event::Assistant { blocks, .. } = &events[1] else {
            panic!("{events:?}")
        };
        assert!(
            matches!(&blocks[0], Block::ToolUse { id, name, input_json }
                if id == "item_1" && name == "Bash" && input_json.contains("echo hi")),
            "{blocks:?}"
        );
        assert_eq!(
            events[2],
            Event::Results(vec![("item_1".into(), "Bash".into(), "hi\n".into(), false)])
        );
        assert!(matches!(&events[3], Event::Assistant { blocks, .. }
            if matches!(&blocks[0], Block::ToolUse { name, .. } if name == "apply_patch")));
        assert_eq!(
            events[4],
            Event::Results(vec![(
                "item_2".into(),
                "apply_patch".into(),
                "add /w/g.txt".into(),
                false
            )])
        );
        assert!(matches!(&events[5], Event::Assistant { blocks, .. }
            if blocks == &vec![Block::Text { text: "done it".into() }]));
        assert_eq!(events[6], Event::Done(Ok("done it".into())));
        assert_eq!(events.len(), 7, "{events:?}");
    }

    #[test]
    fn failures_and_budget_refusals_end_the_run() {
        // As Codex wrote it when the endpoint refused with a 402.
        let lines = [
            r#"{"type":"thread.started","thread_id":"t1"}"#,
            r#"{"type":"turn.started"}"#,
            r#"{"type":"error","message":"unexpected status 402 Payment Required: the task's budget of $0.01 is spent, url: http://127.0.0.1:1/v1/responses"}"#,
            r#"{"type":"turn.failed","error":{"message":"unexpected status 402 Payment Required: the task's budget of $0.01 is spent, url: http://127.0.0.1:1/v1/responses"}}"#,
        ];
        let mut p = ExecJson::default();
        let events: Vec<Event> = lines.iter().flat_map(|l| p.line(l)).collect();
        assert!(
            matches!(events.last(), Some(Event::Done(Err(Failure::Budget(why)))) if why.contains("402")),
            "{events:?}"
        );
        let mut p = ExecJson::default();
        let e = p.line(r#"{"type":"turn.failed","error":{"message":"stream disconnected"}}"#);
        assert_eq!(
            e,
            vec![Event::Done(Err(Failure::Error(
                "stream disconnected".into()
            )))]
        );
        // A failed command is an error result; a call seen only completed is mirrored whole.
        let e = p.line(r#"{"type":"item.completed","item":{"id":"item_9","type":"command_execution","command":"false","aggregated_output":"","exit_code":1,"status":"failed"}}"#);
        assert_eq!(e.len(), 2, "{e:?}");
        assert_eq!(
            e[1],
            Event::Results(vec![("item_9".into(), "Bash".into(), String::new(), true)])
        );
        let e = p.line(r#"{"type":"item.completed","item":{"id":"item_8","type":"mcp_tool_call","server":"mini","tool":"ping","arguments":{"word":"x"},"result":{"content":[{"type":"text","text":"pong x"}]},"error":null,"status":"completed"}}"#);
        assert_eq!(
            e[1],
            Event::Results(vec![(
                "item_8".into(),
                "mcp__mini__ping".into(),
                "pong x".into(),
                false
            )])
        );
    }

    #[test]
    fn a_kept_session_is_resumed_and_the_hook_and_endpoint_are_configured() {
        let dir = tempfile::tempdir().unwrap();
        let hook = super::super::hook::HookCommand {
            command: "'/bin/hook' harness-hook".into(),
            env: vec![("PEGASUS_HARNESS_HOOK_ADDR".into(), "127.0.0.1:9".into())],
            timeout_s: 3700,
        };
        let endpoint = super::super::Endpoint {
            base_url: "http://127.0.0.1:1/v1".into(),
            key: "k".into(),
        };
        let config = pegasus_store::HarnessConfig {
            command: "codex".into(),
            args: vec!["-c".into(), "web_search=\"live\"".into()],
            effort: Some("high".into()),
        };
        let plan = |session: Option<&'static str>| Plan {
            prompt: "-hi",
            system: "About \"the\" project",
            model: "gpt-5.5",
            config: &config,
            session,
            new_session: None,
            state_dir: dir.path(),
            endpoint: &endpoint,
            hook: &hook,
            work: Work::Project,
        };
        let launch = Codex.launch(&plan(Some("t-old"))).unwrap();
        assert_eq!(launch.args[0], "exec");
        assert_ne!(launch.args[1], "resume", "not on disk yet: a new session");
        assert!(launch.args.ends_with(&["--".into(), "-hi".into()]));
        let day = dir.path().join("home/sessions/2026/11/29");
        std::fs::create_dir_all(&day).unwrap();
        std::fs::write(day.join("rollout-2026-11-29T15-11-22-t-old.jsonl"), "").unwrap();
        let launch = Codex.launch(&plan(Some("t-old"))).unwrap();
        assert_eq!(launch.args[..2], ["exec".to_string(), "resume".into()]);
        assert!(launch
            .args
            .ends_with(&["--".into(), "t-old".into(), "-hi".into()]));
        let a = &launch.args;
        assert!(a.windows(2).any(|w| w == ["-m", "gpt-5.5"]));
        assert!(a.contains(&"--dangerously-bypass-hook-trust".to_string()));
        assert!(a.contains(&"approval_policy=\"never\"".to_string()));
        assert!(a.contains(&"model_reasoning_effort=\"high\"".to_string()));
        assert!(a.contains(&"developer_instructions=\"About \\\"the\\\" project\"".to_string()));
        let hooks = a
            .iter()
            .find(|x| x.starts_with("hooks.PreToolUse="))
            .unwrap();
        assert_eq!(
            hooks,
            "hooks.PreToolUse=[{matcher=\"*\",hooks=[{type=\"command\",command=\"'/bin/hook' harness-hook\",timeout=3700}]}]"
        );
        // The hosted web search is off, and the project's own args come after (and so win).
        let off = a
            .iter()
            .position(|x| x == "web_search=\"disabled\"")
            .unwrap();
        let on = a.iter().position(|x| x == "web_search=\"live\"").unwrap();
        assert!(off < on, "{a:?}");
        assert!(launch.env.iter().any(|(k, v)| k == KEY_ENV && v == "k"));
        assert!(launch
            .env
            .iter()
            .any(|(k, v)| k == "CODEX_HOME" && v.ends_with("/home")));
        assert!(launch
            .env
            .iter()
            .any(|(k, _)| k == "PEGASUS_HARNESS_HOOK_ADDR"));
        let (path, text) = &launch.files[0];
        assert!(path.ends_with("home/config.toml"));
        assert!(
            text.contains("base_url = \"http://127.0.0.1:1/v1\""),
            "{text}"
        );
        assert!(text.contains(&format!("env_key = \"{KEY_ENV}\"")), "{text}");
        assert!(!text.contains("\"k\""), "no key in its files: {text}");
    }
}
