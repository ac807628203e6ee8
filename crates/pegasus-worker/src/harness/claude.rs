//! Claude Code as a harness (DESIGN.md §15): `claude -p PROMPT --output-format stream-json
//! --verbose`, its session chosen by Pegasus (`--session-id`, then
//! `--resume`), its configuration in the project's `harness/claude-code/` (`CLAUDE_CONFIG_DIR`),
//! every tool call put to Pegasus's approval policy through a `PreToolUse` hook given with
//! `--settings` (and no settings file read: `--setting-sources ""`), and nothing that could
//! wait on a terminal (`--permission-prompts none`).
//!
//! The shapes read here are the real binary's (2.1.332, run against the fake LLM): a `system`
//! `init` line with `session_id`; an `assistant` line per content block (the same
//! `message.id` for the blocks of one model message, `usage` on each); a `user` line with the
//! `tool_result` blocks; a `result` line last (`subtype`, `is_error`, `result`).
//! Lines of a subagent carry a `parent_tool_use_id` and are not mirrored.

use std::collections::HashMap;
use std::path::Path;

use pegasus_proto::llm::{Block, Usage};
use pegasus_store::AgentKind;
use serde_json::Value;

use super::{failure, Driver, Event, Launch, Parser, Plan, Work};

/// Claude Code.
pub struct ClaudeCode;

/// Its config folder below the harness's state folder.
const CONFIG_DIR: &str = "config";

impl Driver for ClaudeCode {
    fn kind(&self) -> AgentKind {
        AgentKind::ClaudeCode
    }

    fn api(&self) -> pegasus_proto::worker::RelayApi {
        pegasus_proto::worker::RelayApi::Anthropic
    }

    fn new_session_id(&self) -> Option<String> {
        let hex = super::random_hex()?;
        // A version-4 UUID: Claude Code takes nothing else.
        Some(format!(
            "{}-{}-4{}-{}{}-{}",
            &hex[0..8],
            &hex[8..12],
            &hex[13..16],
            ["8", "9", "a", "b"][usize::from(hex.as_bytes()[16] % 4)],
            &hex[17..20],
            &hex[20..32]
        ))
    }

    fn launch(&self, plan: &Plan<'_>) -> Result<Launch, String> {
        let config_dir = plan.state_dir.join(CONFIG_DIR);
        let hook = &plan.hook;
        let settings = serde_json::json!({
            "hooks": {"PreToolUse": [{
                "matcher": "*",
                "hooks": [{"type": "command", "command": hook.command, "timeout": hook.timeout_s}],
            }]},
        });
        let mut args = vec![
            "-p".to_string(),
            plan.prompt.to_string(),
            "--output-format".into(),
            "stream-json".into(),
            "--verbose".into(),
            "--model".into(),
            plan.model.to_string(),
            "--settings".into(),
            settings.to_string(),
            // No settings file at all (user, project or local): a model can write the
            // workdir's `.claude/` and the harness's own folder, and what it writes there must
            // not loosen a later call. Only `--settings` (the hook) applies.
            "--setting-sources".into(),
            String::new(),
            "--permission-prompts".into(),
            "none".into(),
        ];
        match (plan.session, plan.new_session) {
            (Some(id), _) if has_session(&config_dir, id) => {
                args.extend(["--resume".to_string(), id.to_string()]);
            }
            (Some(id), _) | (None, Some(id)) => {
                args.extend(["--session-id".to_string(), id.to_string()]);
            }
            (None, None) => {}
        }
        if plan.work == Work::Consult {
            // Read-only: its editing tools are not even offered (the sandbox would refuse their
            // writes anyway; DESIGN.md §15).
            args.extend([
                "--disallowed-tools".to_string(),
                "Edit Write NotebookEdit".to_string(),
            ]);
        }
        let mut system = plan.system.trim().to_string();
        if let Some(note) = plan.work.note() {
            system.push_str("\n\n");
            system.push_str(note);
        }
        if !system.trim().is_empty() {
            args.extend(["--append-system-prompt".to_string(), system]);
        }
        if let Some(effort) = &plan.config.effort {
            args.extend(["--effort".to_string(), effort.clone()]);
        }
        args.extend(plan.config.args.iter().cloned());
        let mut env = vec![
            (
                "CLAUDE_CONFIG_DIR".to_string(),
                config_dir.display().to_string(),
            ),
            ("ANTHROPIC_BASE_URL".into(), plan.endpoint.base_url.clone()),
            ("ANTHROPIC_API_KEY".into(), plan.endpoint.key.clone()),
            ("DISABLE_TELEMETRY".into(), "1".into()),
            ("DISABLE_ERROR_REPORTING".into(), "1".into()),
            ("DISABLE_AUTOUPDATER".into(), "1".into()),
            (
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".into(),
                "1".into(),
            ),
        ];
        env.extend(hook.env.iter().cloned());
        Ok(Launch {
            args,
            env,
            files: Vec::new(),
        })
    }

    fn parser(&self) -> Box<dyn Parser> {
        Box::new(StreamJson::default())
    }
}

/// Whether Claude Code has session `id` on disk (`projects/<its name for the cwd>/<id>.jsonl`).
fn has_session(config_dir: &Path, id: &str) -> bool {
    let file = format!("{id}.jsonl");
    std::fs::read_dir(config_dir.join("projects"))
        .map(|dirs| dirs.flatten().any(|d| d.path().join(&file).is_file()))
        .unwrap_or(false)
}

/// The reader of `--output-format stream-json`.
#[derive(Default)]
struct StreamJson {
    /// The model message being received: its id, model, usage and blocks so far.
    pending: Option<(String, String, Option<Usage>, Vec<Block>)>,
    /// Tool names by call id, for the results.
    names: HashMap<String, String>,
}

impl StreamJson {
    /// The pending message as an event.
    fn flush(&mut self, out: &mut Vec<Event>) {
        let Some((_, model, usage, blocks)) = self.pending.take() else {
            return;
        };
        out.push(Event::Assistant {
            blocks,
            model,
            usage,
        });
    }

    fn assistant(&mut self, message: &Value, out: &mut Vec<Event>) {
        let id = message["id"].as_str().unwrap_or_default().to_string();
        if self.pending.as_ref().is_some_and(|p| p.0 != id) {
            self.flush(out);
        }
        let pending = self.pending.get_or_insert_with(|| {
            (
                id,
                message["model"].as_str().unwrap_or_default().to_string(),
                usage_of(&message["usage"]),
                Vec::new(),
            )
        });
        for block in message["content"].as_array().into_iter().flatten() {
            match block["type"].as_str() {
                Some("text") => pending.3.push(Block::Text {
                    text: block["text"].as_str().unwrap_or_default().to_string(),
                }),
                Some("tool_use") => {
                    let id = block["id"].as_str().unwrap_or_default().to_string();
                    let name = block["name"].as_str().unwrap_or_default().to_string();
                    self.names.insert(id.clone(), name.clone());
                    pending.3.push(Block::ToolUse {
                        id,
                        name,
                        input_json: block["input"].to_string(),
                    });
                }
                // Thinking is the harness's own; it is not kept.
                _ => {}
            }
        }
    }

    fn results(&mut self, message: &Value) -> Vec<(String, String, String, bool)> {
        message["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|b| b["type"] == "tool_result")
            .map(|b| {
                let id = b["tool_use_id"].as_str().unwrap_or_default().to_string();
                let name = self.names.get(&id).cloned().unwrap_or_default();
                (id, name, result_text(&b["content"]), b["is_error"] == true)
            })
            .collect()
    }
}

impl Parser for StreamJson {
    fn line(&mut self, line: &str) -> Vec<Event> {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        // A subagent's lines stay inside its `Task` call.
        if !v["parent_tool_use_id"].is_null() {
            return out;
        }
        match v["type"].as_str() {
            Some("system") if v["subtype"] == "init" => {
                if let Some(id) = v["session_id"].as_str() {
                    out.push(Event::Session(id.to_string()));
                }
            }
            Some("assistant") => self.assistant(&v["message"], &mut out),
            Some("user") => {
                let results = self.results(&v["message"]);
                if !results.is_empty() {
                    self.flush(&mut out);
                    out.push(Event::Results(results));
                }
            }
            Some("result") => {
                self.flush(&mut out);
                let text = v["result"].as_str().unwrap_or_default().to_string();
                let ok = v["subtype"] == "success" && v["is_error"] != true;
                out.push(Event::Done(if ok {
                    Ok(text)
                } else {
                    let why = if text.is_empty() {
                        format!(
                            "Claude Code ended with `{}`",
                            v["subtype"].as_str().unwrap_or("an error")
                        )
                    } else {
                        text
                    };
                    Err(failure(why))
                }));
            }
            _ => {}
        }
        out
    }
}

/// A tool result's content as text: a string, or the text of its blocks.
fn result_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn usage_of(u: &Value) -> Option<Usage> {
    u.is_object().then(|| Usage {
        input_tokens: u["input_tokens"].as_u64().unwrap_or(0),
        output_tokens: u["output_tokens"].as_u64().unwrap_or(0),
        cache_read_tokens: u["cache_read_input_tokens"].as_u64().unwrap_or(0),
        cache_write_tokens: u["cache_creation_input_tokens"].as_u64().unwrap_or(0),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::super::Failure;
    use super::*;

    /// Lines as Claude Code 2.1.332 wrote them against the fake LLM (cut to what is read).
    const RUN: &[&str] = &[
        r#"{"type":"system","subtype":"init","session_id":"7d6c2a52-1f0e-4c55-9d43-0a3c7b1e2f11","model":"claude-sonnet-4-5","cwd":"/w"}"#,
        r#"{"type":"system","subtype":"thinking_tokens","estimated_tokens":7,"session_id":"x"}"#,
        r#"{"message":{"content":[{"signature":"s","thinking":"Reasoning","type":"thinking"}],"id":"msg_1","model":"claude-sonnet-4-5","role":"assistant","usage":{"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"input_tokens":9686,"output_tokens":1}},"parent_tool_use_id":null,"type":"assistant"}"#,
        r#"{"message":{"content":[{"text":"Writing.","type":"text"}],"id":"msg_1","model":"claude-sonnet-4-5","role":"assistant","usage":{"input_tokens":9686,"output_tokens":1}},"parent_tool_use_id":null,"type":"assistant"}"#,
        r#"{"message":{"content":[{"id":"toolu_1","input":{"command":"echo hi > a.txt; cat a.txt","description":"w"},"name":"Bash","type":"tool_use"}],"id":"msg_1","model":"claude-sonnet-4-5","role":"assistant","usage":{"input_tokens":9686,"output_tokens":1}},"parent_tool_use_id":null,"type":"assistant"}"#,
        r#"{"message":{"content":[{"content":"hi","is_error":false,"tool_use_id":"toolu_1","type":"tool_result"}],"role":"user"},"parent_tool_use_id":null,"type":"user"}"#,
        r#"{"message":{"content":[{"text":"done first","type":"text"}],"id":"msg_2","model":"claude-sonnet-4-5","role":"assistant","usage":{"input_tokens":9725,"output_tokens":1}},"parent_tool_use_id":null,"type":"assistant"}"#,
        r#"{"type":"result","subtype":"success","is_error":false,"result":"done first","session_id":"7d6c2a52-1f0e-4c55-9d43-0a3c7b1e2f11","total_cost_usd":0.05}"#,
    ];

    #[test]
    fn a_run_reads_as_session_messages_results_and_its_answer() {
        let mut p = StreamJson::default();
        let events: Vec<Event> = RUN.iter().flat_map(|l| p.line(l)).collect();
        assert_eq!(
            events[0],
            Event::Session("7d6c2a52-1f0e-4c55-9d43-0a3c7b1e2f11".into())
        );
        let Event::Assistant {
            blocks,
            model,
            usage,
        } = &events[1]
        else {
            panic!("{events:?}")
        };
        assert_eq!(model, "claude-sonnet-4-5");
        assert_eq!(usage.unwrap().input_tokens, 9686);
        assert_eq!(blocks.len(), 2, "thinking is not kept: {blocks:?}");
        assert!(matches!(&blocks[0], Block::Text { text } if text == "Writing."));
        assert!(matches!(&blocks[1], Block::ToolUse { name, .. } if name == "Bash"));
        assert_eq!(
            events[2],
            Event::Results(vec![("toolu_1".into(), "Bash".into(), "hi".into(), false)])
        );
        assert!(matches!(&events[3], Event::Assistant { blocks, .. } if blocks.len() == 1));
        assert_eq!(events[4], Event::Done(Ok("done first".into())));
        assert_eq!(events.len(), 5);
    }

    #[test]
    fn subagents_are_left_out_and_a_budget_error_reads_as_one() {
        let mut p = StreamJson::default();
        let whole = r#"{"message":{"content":[{"text":"Hello","type":"text"}],"id":"msg_1","model":"m"},"parent_tool_use_id":null,"type":"assistant"}"#;
        let sub = r#"{"message":{"content":[{"text":"inside","type":"text"}],"id":"msg_9","model":"m"},"parent_tool_use_id":"toolu_5","type":"assistant"}"#;
        let failed = r#"{"type":"result","subtype":"success","is_error":true,"result":"API Error: 402 the task's budget of $0.01 is spent"}"#;
        let other = r#"{"type":"result","subtype":"error_max_turns","is_error":true}"#;
        let mut events = Vec::new();
        for l in [whole, sub, failed, "not json", other] {
            events.extend(p.line(l));
        }
        assert!(matches!(&events[0], Event::Assistant { blocks, .. } if blocks.len() == 1));
        assert!(matches!(&events[1], Event::Done(Err(Failure::Budget(_)))));
        assert_eq!(
            events[2],
            Event::Done(Err(Failure::Error(
                "Claude Code ended with `error_max_turns`".into()
            )))
        );
        assert_eq!(events.len(), 3, "{events:?}");
        assert_eq!(
            result_text(
                &serde_json::json!([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}])
            ),
            "a\nb"
        );
    }

    #[test]
    fn session_ids_are_uuids_and_a_kept_session_is_resumed() {
        let id = ClaudeCode.new_session_id().unwrap();
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "4");
        let dir = tempfile::tempdir().unwrap();
        let hook = super::super::hook::HookCommand {
            command: "'/bin/hook' harness-hook".into(),
            env: vec![],
            timeout_s: 3700,
        };
        let endpoint = super::super::Endpoint {
            base_url: "http://127.0.0.1:1".into(),
            key: "k".into(),
        };
        let config = pegasus_store::HarnessConfig {
            command: "claude".into(),
            args: vec!["--fallback-model".into(), "x".into()],
            effort: Some("high".into()),
        };
        let plan_for = |session: Option<&'static str>, work: Work| Plan {
            prompt: "hi",
            system: "About the project",
            model: "claude-x",
            config: &config,
            session,
            new_session: Some("new-id"),
            state_dir: dir.path(),
            endpoint: &endpoint,
            hook: &hook,
            work,
        };
        let plan = |session| plan_for(session, Work::Project);
        let args = ClaudeCode.launch(&plan(Some("old"))).unwrap().args;
        let at = args.iter().position(|a| a == "--session-id").unwrap();
        assert_eq!(args[at + 1], "old", "not on disk yet: started under its id");
        let folder = dir.path().join("config/projects/-w");
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join("old.jsonl"), "").unwrap();
        let launch = ClaudeCode.launch(&plan(Some("old"))).unwrap();
        let at = launch.args.iter().position(|a| a == "--resume").unwrap();
        assert_eq!(launch.args[at + 1], "old");
        assert!(launch
            .args
            .ends_with(&["--fallback-model".into(), "x".into()]));
        assert!(launch.args.windows(2).any(|w| w == ["--effort", "high"]));
        assert!(launch
            .args
            .windows(2)
            .any(|w| w == ["--setting-sources", ""]));
        assert!(launch
            .args
            .windows(2)
            .any(|w| w == ["--permission-prompts", "none"]));
        assert!(launch.args.windows(2).any(|w| w == ["--model", "claude-x"]));
        let settings =
            &launch.args[launch.args.iter().position(|a| a == "--settings").unwrap() + 1];
        assert!(
            settings.contains("PreToolUse") && settings.contains("harness-hook"),
            "{settings}"
        );
        assert!(launch
            .env
            .iter()
            .any(|(k, v)| k == "ANTHROPIC_API_KEY" && v == "k"));
        let args = ClaudeCode.launch(&plan(None)).unwrap().args;
        assert!(args.windows(2).any(|w| w == ["--session-id", "new-id"]));
        assert!(!args.iter().any(|a| a == "--disallowed-tools"));
        // A consulted role (a reviewer, a planner) is not offered its editing tools and is
        // told it reads only; a code task is told to edit only.
        let consult = ClaudeCode
            .launch(&plan_for(None, Work::Consult))
            .unwrap()
            .args;
        assert!(consult
            .windows(2)
            .any(|w| w == ["--disallowed-tools", "Edit Write NotebookEdit"]));
        let system = |args: &[String]| {
            args[args
                .iter()
                .position(|a| a == "--append-system-prompt")
                .unwrap()
                + 1]
            .clone()
        };
        assert!(system(&consult).starts_with("About the project\n\nYou are consulted"));
        let code = ClaudeCode
            .launch(&plan_for(None, Work::CodeTask))
            .unwrap()
            .args;
        assert!(system(&code).contains("do not commit"));
        assert!(!code.iter().any(|a| a == "--disallowed-tools"));
        assert_eq!(system(&args), "About the project");
    }
}
