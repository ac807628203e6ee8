//! Lifecycle hooks in Claude Code's format (DESIGN.md §16): the `hooks:` of config.yml, then
//! of PROJECT.md, fired at the matching points of the agent. A hook gets the event as JSON on
//! stdin, with the fields Claude Code gives (`session_id`, `transcript_path`, `cwd`,
//! `hook_event_name`, `permission_mode` and the event's own) plus `project`; the hooks of one
//! event run side by side, contained like `exec` ([`run`]), and what they said is read into one
//! [`Verdict`] ([`outcome`]). Whatever goes wrong with a hook (it fails, hangs, floods) is one
//! line in the session, never a stuck project.
//!
//! Where each event fires: `PreToolUse` and `PostToolUse` around every tool call
//! (`crate::actor`), `Stop` and `SubagentStop` at a loop's final answer
//! (`crate::agent_loop`), `UserPromptSubmit` and `SessionStart` when a message's task starts
//! (`crate::Agent::run`), `PreCompact` before a compaction (`crate::compaction`), and
//! `Notification` when a person is wanted (an approval request, `ask_user`, `notify`).

pub mod outcome;
pub mod run;

use std::path::{Path, PathBuf};

use futures_util::future::join_all;
use pegasus_store::hooks::{HookEvent, HookGroup, HooksConfig};
use pegasus_store::SessionRecord;
use serde_json::{json, Value};

pub use outcome::{Ended, Permission, Verdict};

use crate::session_writer::{persist, SessionHandle};

/// The `agent_type` Claude Code gives its default subagent, which a `SubagentStop` matcher
/// written for it names; Pegasus's subagents are all of that kind.
pub const SUBAGENT_TYPE: &str = "general-purpose";

/// One event as it happens, with its own fields.
#[derive(Debug, Clone)]
pub enum Input<'a> {
    /// A tool call is about to run.
    PreToolUse {
        /// The tool's name (`exec`, `write_file`, `mcp__server__tool`).
        tool_name: &'a str,
        /// Its arguments.
        tool_input: &'a Value,
        /// The call's id.
        tool_use_id: &'a str,
    },
    /// A tool call ran.
    PostToolUse {
        /// The tool's name.
        tool_name: &'a str,
        /// Its arguments.
        tool_input: &'a Value,
        /// What it gave back: `{content, is_error}`.
        tool_response: Value,
        /// The call's id.
        tool_use_id: &'a str,
    },
    /// A message is about to be taken up.
    UserPromptSubmit {
        /// Its text.
        prompt: &'a str,
    },
    /// The agent is about to give its final answer.
    Stop {
        /// A Stop hook already made it go on in this task.
        stop_hook_active: bool,
        /// The answer.
        last_assistant_message: &'a str,
    },
    /// A subagent is about to give its answer.
    SubagentStop {
        /// A SubagentStop hook already made it go on.
        stop_hook_active: bool,
        /// Its answer.
        last_assistant_message: &'a str,
        /// Which subagent (its task and number).
        agent_id: &'a str,
    },
    /// A worker's first task (`startup` for a new session, `resume` for one that goes on),
    /// or the task after a compaction (`compact`).
    SessionStart {
        /// `startup`, `resume` or `compact`.
        source: &'a str,
    },
    /// The session is about to be compacted.
    PreCompact {
        /// `auto`: Pegasus compacts on its own.
        trigger: &'a str,
    },
    /// A person is wanted.
    Notification {
        /// What they are told.
        message: &'a str,
        /// `permission_prompt` (an approval), `idle_prompt` (a question), `notify`.
        notification_type: &'a str,
    },
}

impl Input<'_> {
    /// The event.
    pub fn event(&self) -> HookEvent {
        match self {
            Input::PreToolUse { .. } => HookEvent::PreToolUse,
            Input::PostToolUse { .. } => HookEvent::PostToolUse,
            Input::UserPromptSubmit { .. } => HookEvent::UserPromptSubmit,
            Input::Stop { .. } => HookEvent::Stop,
            Input::SubagentStop { .. } => HookEvent::SubagentStop,
            Input::SessionStart { .. } => HookEvent::SessionStart,
            Input::PreCompact { .. } => HookEvent::PreCompact,
            Input::Notification { .. } => HookEvent::Notification,
        }
    }

    /// What a matcher is compared with, as in Claude Code; `None`: every matcher matches.
    fn match_value(&self) -> Option<&str> {
        match self {
            Input::PreToolUse { tool_name, .. } | Input::PostToolUse { tool_name, .. } => {
                Some(tool_name)
            }
            Input::SessionStart { source } => Some(source),
            Input::PreCompact { trigger } => Some(trigger),
            Input::Notification {
                notification_type, ..
            } => Some(notification_type),
            Input::SubagentStop { .. } => Some(SUBAGENT_TYPE),
            Input::UserPromptSubmit { .. } | Input::Stop { .. } => None,
        }
    }

    /// The event's own fields.
    fn fields(&self, model: &str, transcript: &Path) -> Value {
        match self {
            Input::PreToolUse {
                tool_name,
                tool_input,
                tool_use_id,
            } => {
                json!({"tool_name": tool_name, "tool_input": tool_input, "tool_use_id": tool_use_id})
            }
            Input::PostToolUse {
                tool_name,
                tool_input,
                tool_response,
                tool_use_id,
            } => {
                json!({"tool_name": tool_name, "tool_input": tool_input, "tool_response": tool_response, "tool_use_id": tool_use_id})
            }
            Input::UserPromptSubmit { prompt } => json!({"prompt": prompt}),
            Input::Stop {
                stop_hook_active,
                last_assistant_message,
            } => {
                json!({"stop_hook_active": stop_hook_active, "last_assistant_message": last_assistant_message})
            }
            Input::SubagentStop {
                stop_hook_active,
                last_assistant_message,
                agent_id,
            } => json!({
                "stop_hook_active": stop_hook_active,
                "last_assistant_message": last_assistant_message,
                "agent_id": agent_id,
                "agent_type": SUBAGENT_TYPE,
                "agent_transcript_path": transcript,
            }),
            Input::SessionStart { source } => json!({"source": source, "model": model}),
            Input::PreCompact { trigger } => {
                json!({"trigger": trigger, "custom_instructions": Value::Null})
            }
            Input::Notification {
                message,
                notification_type,
            } => {
                json!({"message": message, "notification_type": notification_type, "title": "Pegasus"})
            }
        }
    }
}

/// One project's hooks and what they are told.
pub struct Hooks {
    /// Every group, config.yml's first, each with its event.
    groups: Vec<(HookEvent, HookGroup)>,
    project: String,
    /// The project's workdir (`CLAUDE_PROJECT_DIR`).
    project_dir: PathBuf,
    /// `session/current.jsonl` (`transcript_path`).
    transcript: PathBuf,
    model: String,
    session: SessionHandle,
    sandbox: Option<pegasus_sandbox::SandboxPaths>,
    registry: Option<PathBuf>,
}

/// Where the hooks of a project run and what they are told of it.
pub struct HookPlace {
    /// The project's name (`project`, `PEGASUS_PROJECT`, and `session_id`: a project has one
    /// session, which compactions continue).
    pub project: String,
    /// The project's folder (its session is under it).
    pub project_dir: PathBuf,
    /// The project's workdir (`CLAUDE_PROJECT_DIR`).
    pub workdir: PathBuf,
    /// The project's model (`SessionStart`'s `model`).
    pub model: String,
    /// How they are confined (as `exec`).
    pub sandbox: Option<pegasus_sandbox::SandboxPaths>,
    /// Where their process groups are recorded (as `exec`'s).
    pub registry: Option<PathBuf>,
}

impl Hooks {
    /// config.yml's hooks, then the project's; `None` when there are none at all.
    pub fn new(
        config: &HooksConfig,
        project: &HooksConfig,
        place: HookPlace,
        session: SessionHandle,
    ) -> Option<Hooks> {
        let groups: Vec<(HookEvent, HookGroup)> = [config, project]
            .into_iter()
            .flat_map(|c| {
                c.iter()
                    .flat_map(|(e, groups)| groups.iter().map(move |g| (*e, g.clone())))
            })
            .collect();
        if groups.is_empty() {
            return None;
        }
        Some(Hooks {
            groups,
            transcript: pegasus_store::session_file(&place.project_dir),
            project: place.project,
            project_dir: place.workdir,
            model: place.model,
            session,
            sandbox: place.sandbox,
            registry: place.registry,
        })
    }

    /// Whether any hook is set for `event` (so the caller can skip building its input).
    pub fn has(&self, event: HookEvent) -> bool {
        self.groups.iter().any(|(e, _)| *e == event)
    }

    /// The commands that run for `input`, in order, each once (Claude Code runs an identical
    /// command once), with its timeout.
    fn matching(&self, input: &Input<'_>) -> Vec<(String, std::time::Duration)> {
        let event = input.event();
        let value = input.match_value();
        let mut out: Vec<(String, std::time::Duration)> = Vec::new();
        for (e, group) in &self.groups {
            if *e != event || !group.matcher.matches(value) {
                continue;
            }
            for h in &group.hooks {
                if !out.iter().any(|(c, _)| c == h.command()) {
                    out.push((h.command().to_string(), h.timeout()));
                }
            }
        }
        out
    }

    /// The JSON a hook of `input` reads on stdin.
    pub fn input_json(&self, input: &Input<'_>, cwd: &Path) -> Value {
        let mut v = json!({
            "session_id": self.project,
            "transcript_path": self.transcript,
            "cwd": cwd,
            "hook_event_name": input.event().name(),
            "permission_mode": "default",
            "project": self.project,
        });
        if let (Some(all), Value::Object(own)) = (
            v.as_object_mut(),
            input.fields(&self.model, &self.transcript),
        ) {
            all.extend(own);
        }
        v
    }

    /// Runs the hooks of `input` (side by side) in `cwd` and says what they said together;
    /// their notes are written to the session.
    pub async fn fire(&self, input: Input<'_>, cwd: &Path) -> Verdict {
        let commands = self.matching(&input);
        if commands.is_empty() {
            return Verdict::default();
        }
        let event = input.event();
        let stdin = self.input_json(&input, cwd).to_string().into_bytes();
        let env = [
            ("CLAUDE_PROJECT_DIR", self.project_dir.display().to_string()),
            ("PEGASUS_PROJECT", self.project.clone()),
        ];
        let runs = commands.iter().map(|(command, timeout)| {
            let spec = run::Spec {
                command,
                input: &stdin,
                cwd,
                env: &env,
                timeout: *timeout,
                sandbox: self.sandbox.as_ref(),
                registry: self.registry.as_deref(),
            };
            async move { outcome::decode(event, command, &run::run(spec).await) }
        });
        let verdict = outcome::combine(join_all(runs).await);
        for note in &verdict.notes {
            self.note(event, note, Vec::new()).await;
        }
        verdict
    }

    /// Writes one hook line to the session (and the worker's log).
    pub async fn note(&self, event: HookEvent, text: &str, refused: Vec<String>) {
        tracing::info!(project = %self.project, %event, "hook: {text}");
        let record = SessionRecord::Hook {
            event: event.name().to_string(),
            text: text.to_string(),
            refused,
            ts: chrono::Utc::now(),
        };
        if let Err(e) = persist(&self.session, vec![record], true).await {
            tracing::warn!("cannot write the hook's line to the session: {e}");
        }
    }
}

/// What the model is told of hooks' context (`additionalContext`, plain stdout).
pub fn context_text(event: HookEvent, context: &[String]) -> Option<String> {
    if context.is_empty() {
        return None;
    }
    Some(format!(
        "{event} hook additional context:\n{}",
        context.join("\n")
    ))
}

/// Fires the `Notification` hooks of `ctx`'s project, if it has any: a person is wanted
/// (`notification_type`: `permission_prompt`, `idle_prompt`, `notify`).
///
/// Nothing waits for them (their answer changes nothing): a notifier that blocks (`notify-send
/// --wait`) must not hold up the approval, question or notice it tells of.
pub fn notify(ctx: &crate::tool::ToolCtx, message: &str, notification_type: &'static str) {
    if let Some(hooks) = ctx
        .hooks
        .as_ref()
        .filter(|h| h.has(HookEvent::Notification))
    {
        let (hooks, message, workdir) = (hooks.clone(), message.to_string(), ctx.workdir.clone());
        tokio::spawn(async move {
            hooks
                .fire(
                    Input::Notification {
                        message: &message,
                        notification_type,
                    },
                    &workdir,
                )
                .await;
        });
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::sync::{Arc, Mutex};

    fn config(yaml: &str) -> HooksConfig {
        let v: serde_norway::Value = serde_norway::from_str(yaml).unwrap();
        pegasus_store::hooks::parse_hooks(Some(&v)).unwrap()
    }

    fn build(global: &HooksConfig, own: &HooksConfig, dir: &Path) -> Option<Hooks> {
        let session = Arc::new(Mutex::new(
            pegasus_store::Session::open(dir, "web").unwrap(),
        ));
        let place = HookPlace {
            project: "web".into(),
            project_dir: dir.to_path_buf(),
            workdir: dir.join("workdir"),
            model: "fa/m".into(),
            sandbox: None,
            registry: None,
        };
        Hooks::new(global, own, place, session)
    }

    fn hooks(global: &str, own: &str, dir: &Path) -> Hooks {
        build(&config(global), &config(own), dir).unwrap()
    }

    #[test]
    fn matching_hooks_run_config_first_each_command_once() {
        let dir = tempfile::tempdir().unwrap();
        let h = hooks(
            "PreToolUse:\n  - matcher: exec\n    hooks: [{type: command, command: a}, {type: command, command: b, timeout: 5}]\n  - matcher: write_file\n    hooks: [{type: command, command: w}]\nStop:\n  - matcher: exec\n    hooks: [{type: command, command: s}]\n",
            "PreToolUse:\n  - hooks: [{type: command, command: a}, {type: command, command: p}]\n",
            dir.path(),
        );
        let input = json!({"command": "ls"});
        let pre = |tool: &'static str| Input::PreToolUse {
            tool_name: tool,
            tool_input: &input,
            tool_use_id: "t1",
        };
        let names =
            |i: &Input<'_>| -> Vec<String> { h.matching(i).into_iter().map(|(c, _)| c).collect() };
        assert_eq!(names(&pre("exec")), ["a", "b", "p"]);
        assert_eq!(names(&pre("write_file")), ["w", "a", "p"]);
        assert_eq!(names(&pre("read_file")), ["a", "p"]);
        assert_eq!(h.matching(&pre("exec"))[1].1.as_secs(), 5);
        assert_eq!(h.matching(&pre("exec"))[0].1.as_secs(), 60);
        // Stop has no value to match: every group of it runs, whatever its matcher says.
        let stop = Input::Stop {
            stop_hook_active: false,
            last_assistant_message: "done",
        };
        assert_eq!(names(&stop), ["s"]);
        assert!(h.has(HookEvent::Stop) && !h.has(HookEvent::PreCompact));
        let none = HooksConfig::new();
        assert!(build(&none, &none, dir.path()).is_none());
    }

    #[test]
    fn each_event_gets_claude_codes_fields_plus_project() {
        let dir = tempfile::tempdir().unwrap();
        let h = hooks(
            "Stop:\n  - hooks: [{type: command, command: x}]\n",
            "",
            dir.path(),
        );
        let cwd = Path::new("/w");
        let tool_input = json!({"command": "ls"});
        let common = |v: &Value, event: &str| {
            assert_eq!(v["hook_event_name"], event);
            assert_eq!(v["session_id"], "web");
            assert_eq!(v["project"], "web");
            assert_eq!(v["cwd"], "/w");
            assert_eq!(v["permission_mode"], "default");
            assert!(v["transcript_path"]
                .as_str()
                .unwrap()
                .ends_with("session/current.jsonl"));
        };
        let cases: Vec<(Input<'_>, &str, Value)> = vec![
            (
                Input::PreToolUse {
                    tool_name: "exec",
                    tool_input: &tool_input,
                    tool_use_id: "t1",
                },
                "PreToolUse",
                json!({"tool_name": "exec", "tool_input": {"command": "ls"}, "tool_use_id": "t1"}),
            ),
            (
                Input::PostToolUse {
                    tool_name: "exec",
                    tool_input: &tool_input,
                    tool_response: json!({"content": "x", "is_error": false}),
                    tool_use_id: "t1",
                },
                "PostToolUse",
                json!({"tool_response": {"content": "x", "is_error": false}}),
            ),
            (
                Input::UserPromptSubmit { prompt: "hi" },
                "UserPromptSubmit",
                json!({"prompt": "hi"}),
            ),
            (
                Input::Stop {
                    stop_hook_active: true,
                    last_assistant_message: "a",
                },
                "Stop",
                json!({"stop_hook_active": true, "last_assistant_message": "a"}),
            ),
            (
                Input::SubagentStop {
                    stop_hook_active: false,
                    last_assistant_message: "a",
                    agent_id: "t-1",
                },
                "SubagentStop",
                json!({"stop_hook_active": false, "agent_id": "t-1", "agent_type": "general-purpose"}),
            ),
            (
                Input::SessionStart { source: "resume" },
                "SessionStart",
                json!({"source": "resume", "model": "fa/m"}),
            ),
            (
                Input::PreCompact { trigger: "auto" },
                "PreCompact",
                json!({"trigger": "auto", "custom_instructions": null}),
            ),
            (
                Input::Notification {
                    message: "m",
                    notification_type: "idle_prompt",
                },
                "Notification",
                json!({"message": "m", "notification_type": "idle_prompt"}),
            ),
        ];
        for (input, event, own) in cases {
            let v = h.input_json(&input, cwd);
            common(&v, event);
            for (k, want) in own.as_object().unwrap() {
                assert_eq!(&v[k], want, "{event}.{k}: {v}");
            }
        }
    }

    #[tokio::test]
    async fn a_hook_reads_the_event_and_its_answer_is_read() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("workdir")).unwrap();
        let h = hooks(
            "PreToolUse:\n  - hooks:\n      - {type: command, command: \"cat > seen.json; echo \\\"$PEGASUS_PROJECT $CLAUDE_PROJECT_DIR\\\" > env.txt; echo no >&2; exit 2\"}\n      - {type: command, command: \"cat >/dev/null; echo '{\\\"hookSpecificOutput\\\":{\\\"permissionDecision\\\":\\\"ask\\\"}}'\"}\n",
            "",
            dir.path(),
        );
        let workdir = dir.path().join("workdir");
        let input = json!({"command": "rm -rf /"});
        let v = h
            .fire(
                Input::PreToolUse {
                    tool_name: "exec",
                    tool_input: &input,
                    tool_use_id: "t9",
                },
                &workdir,
            )
            .await;
        assert_eq!(v.block.as_deref(), Some("no"));
        assert_eq!(v.permission, Some(Permission::Deny));
        let seen: Value =
            serde_json::from_str(&std::fs::read_to_string(workdir.join("seen.json")).unwrap())
                .unwrap();
        assert_eq!(seen["tool_input"], input);
        assert_eq!(seen["tool_use_id"], "t9");
        let env = std::fs::read_to_string(workdir.join("env.txt")).unwrap();
        assert_eq!(env.trim(), format!("web {}", workdir.display()));
    }
}
