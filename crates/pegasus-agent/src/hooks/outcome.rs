//! What a hook's end means (DESIGN.md §16), as Claude Code's hooks reference says: exit 0 goes
//! on, its stdout read as JSON when it is JSON (and, for `UserPromptSubmit` and
//! `SessionStart`, as context when it is not); exit 2 blocks, its stderr the reason; any
//! other end is an error that blocks nothing. [`decode`] reads one hook's end, [`combine`]
//! the ends of every hook of one event (any block wins, `deny` over `ask` over `allow`).

use pegasus_store::hooks::HookEvent;
use serde::Deserialize;

/// How one hook process ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Ended {
    /// It exited with `code`; `stdout` and `stderr` as kept (each capped).
    Exited {
        /// The exit code (a signal N is 128 + N, as the shell says it).
        code: i32,
        /// Its standard output.
        stdout: String,
        /// Its standard error.
        stderr: String,
        /// Output past the cap was dropped.
        flooded: bool,
    },
    /// It ran past its timeout and was killed, everything it started with it.
    TimedOut {
        /// The timeout, in seconds.
        secs: u64,
    },
    /// It could not be started; one line.
    NotStarted(String),
}

/// A `PreToolUse` hook's say on the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Permission {
    /// Go on (the approval policy still applies: DESIGN.md §16).
    Allow,
    /// Ask a person: an approval request.
    Ask,
    /// Do not run it.
    Deny,
}

/// What the hooks of one event said, all together.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Verdict {
    /// Blocked (exit 2, `decision: block`, `permissionDecision: deny`), with the reason for
    /// the model (or, for a refused message, for its sender).
    pub block: Option<String>,
    /// `permissionDecision` of `PreToolUse` (`deny` also sets [`Verdict::block`]).
    pub permission: Option<Permission>,
    /// `permissionDecisionReason` of an `ask`: shown to the person asked.
    pub ask_reason: Option<String>,
    /// `updatedInput` of `PreToolUse`: the call's new arguments.
    pub updated_input: Option<serde_json::Value>,
    /// Context for the model: `additionalContext`, or plain stdout of `UserPromptSubmit` and
    /// `SessionStart`.
    pub context: Vec<String>,
    /// `continue: false`: the task stops, with `stopReason`.
    pub stop: Option<String>,
    /// Lines for people (the session): errors, timeouts, floods, `systemMessage`.
    pub notes: Vec<String>,
}

/// The JSON a hook may print on stdout, as documented (every field optional; others ignored).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Output {
    #[serde(rename = "continue")]
    go_on: Option<bool>,
    stop_reason: Option<String>,
    system_message: Option<String>,
    decision: Option<String>,
    reason: Option<String>,
    hook_specific_output: Option<Specific>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Specific {
    permission_decision: Option<String>,
    permission_decision_reason: Option<String>,
    updated_input: Option<serde_json::Value>,
    additional_context: Option<String>,
}

/// The first line of `text`, cut to 300 characters, for a one-line note.
fn first_line(text: &str) -> String {
    let line = text.trim().lines().next().unwrap_or("").trim();
    match line.char_indices().nth(300) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.to_string(),
    }
}

/// Reads the end of the hook `command` of `event`.
pub fn decode(event: HookEvent, command: &str, ended: &Ended) -> Verdict {
    let mut v = Verdict::default();
    let (code, stdout, stderr) = match ended {
        Ended::TimedOut { secs } => {
            v.notes.push(format!(
                "hook `{command}` did not finish within {secs} s and was killed"
            ));
            return v;
        }
        Ended::NotStarted(why) => {
            v.notes
                .push(format!("hook `{command}` could not start: {why}"));
            return v;
        }
        Ended::Exited {
            code,
            stdout,
            stderr,
            flooded,
        } => {
            if *flooded {
                v.notes.push(format!(
                    "hook `{command}` wrote more than {} KiB; the rest was dropped",
                    super::run::OUTPUT_CAP / 1024
                ));
            }
            (*code, stdout, stderr)
        }
    };
    match code {
        0 => read_stdout(event, stdout, &mut v),
        2 => {
            let reason = match stderr.trim() {
                "" => format!("a {event} hook (`{command}`) blocked this without a reason"),
                why => why.to_string(),
            };
            match event {
                HookEvent::PreToolUse
                | HookEvent::PostToolUse
                | HookEvent::UserPromptSubmit
                | HookEvent::Stop
                | HookEvent::SubagentStop => {
                    if event == HookEvent::PreToolUse {
                        v.permission = Some(Permission::Deny);
                    }
                    v.block = Some(reason);
                }
                // Nothing to block: a person is told (Claude Code shows it to the user).
                HookEvent::SessionStart | HookEvent::PreCompact | HookEvent::Notification => {
                    v.notes.push(format!(
                        "hook `{command}` exited with 2: {}",
                        first_line(&reason)
                    ));
                }
            }
        }
        other => {
            let said = match first_line(stderr) {
                s if s.is_empty() => String::new(),
                s => format!(": {s}"),
            };
            v.notes
                .push(format!("hook `{command}` failed (exit code {other}){said}"));
        }
    }
    v
}

/// An exit-0 hook's stdout: JSON as documented, else (for the two events that take it) context.
fn read_stdout(event: HookEvent, stdout: &str, v: &mut Verdict) {
    let text = stdout.trim();
    let out = if text.starts_with('{') {
        serde_json::from_str::<Output>(text).ok()
    } else {
        None
    };
    let Some(out) = out else {
        if !text.is_empty()
            && matches!(event, HookEvent::UserPromptSubmit | HookEvent::SessionStart)
        {
            v.context.push(text.to_string());
        }
        return;
    };
    if out.go_on == Some(false) {
        v.stop = Some(
            out.stop_reason
                .clone()
                .unwrap_or_else(|| format!("a {event} hook said not to continue")),
        );
    }
    if let Some(m) = out
        .system_message
        .as_deref()
        .filter(|m| !m.trim().is_empty())
    {
        v.notes.push(first_line(m));
    }
    let specific = out.hook_specific_output.unwrap_or_default();
    if let Some(c) = specific.additional_context.filter(|c| !c.trim().is_empty()) {
        v.context.push(c);
    }
    let reason = || {
        out.reason
            .clone()
            .filter(|r| !r.trim().is_empty())
            .unwrap_or_else(|| format!("a {event} hook blocked this"))
    };
    match event {
        HookEvent::PreToolUse => {
            // `decision: approve | block` is the older spelling of allow and deny.
            let decision =
                specific
                    .permission_decision
                    .as_deref()
                    .or(match out.decision.as_deref() {
                        Some("approve") => Some("allow"),
                        Some("block") => Some("deny"),
                        _ => None,
                    });
            let why = specific
                .permission_decision_reason
                .clone()
                .filter(|r| !r.trim().is_empty());
            match decision {
                Some("allow") => v.permission = Some(Permission::Allow),
                Some("ask") => {
                    v.permission = Some(Permission::Ask);
                    v.ask_reason = why;
                }
                Some("deny") => {
                    v.permission = Some(Permission::Deny);
                    v.block = Some(why.unwrap_or_else(reason));
                }
                _ => {}
            }
            if v.permission != Some(Permission::Deny) {
                v.updated_input = specific.updated_input.filter(|i| i.is_object());
            }
        }
        HookEvent::PostToolUse
        | HookEvent::UserPromptSubmit
        | HookEvent::Stop
        | HookEvent::SubagentStop => {
            if out.decision.as_deref() == Some("block") {
                v.block = Some(reason());
            }
        }
        HookEvent::SessionStart | HookEvent::PreCompact | HookEvent::Notification => {}
    }
}

/// The verdicts of every hook of one event, in their order, as one: any block wins (the
/// reasons joined), `deny` over `ask` over `allow`, the last `updatedInput`, every context
/// and note in order.
pub fn combine(verdicts: Vec<Verdict>) -> Verdict {
    let mut all = Verdict::default();
    for v in verdicts {
        all.block = match (all.block.take(), v.block) {
            (Some(a), Some(b)) => Some(format!("{a}\n{b}")),
            (a, b) => a.or(b),
        };
        if v.permission > all.permission {
            all.permission = v.permission;
            all.ask_reason = v.ask_reason.or(all.ask_reason.take());
        }
        all.updated_input = v.updated_input.or(all.updated_input.take());
        all.context.extend(v.context);
        all.stop = all.stop.take().or(v.stop);
        all.notes.extend(v.notes);
    }
    if all.permission == Some(Permission::Deny) {
        all.updated_input = None;
    }
    all
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use HookEvent::*;

    fn exited(code: i32, stdout: &str, stderr: &str) -> Ended {
        Ended::Exited {
            code,
            stdout: stdout.into(),
            stderr: stderr.into(),
            flooded: false,
        }
    }

    /// Exit code × stdout × event: what the hook's end means.
    #[test]
    fn exit_codes_and_stdout_read_as_claude_code_documents() {
        struct Case {
            event: HookEvent,
            ended: Ended,
            block: Option<&'static str>,
            permission: Option<Permission>,
            context: &'static [&'static str],
            notes: usize,
        }
        let c = |event, ended, block, permission, context, notes| Case {
            event,
            ended,
            block,
            permission,
            context,
            notes,
        };
        let deny = r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"no rm here"}}"#;
        let ask = r#"{"hookSpecificOutput":{"permissionDecision":"ask","permissionDecisionReason":"sure?"}}"#;
        let allow = r#"{"hookSpecificOutput":{"permissionDecision":"allow"}}"#;
        let block = r#"{"decision":"block","reason":"fix the tests first"}"#;
        let context = r#"{"hookSpecificOutput":{"additionalContext":"today is Friday"}}"#;
        let table = [
            // exit 0, nothing said: go on.
            c(PreToolUse, exited(0, "", ""), None, None, &[], 0),
            c(Stop, exited(0, "", ""), None, None, &[], 0),
            // exit 0, plain text: context only where Claude Code takes it.
            c(
                UserPromptSubmit,
                exited(0, "ctx\n", ""),
                None,
                None,
                &["ctx"],
                0,
            ),
            c(SessionStart, exited(0, "ctx", ""), None, None, &["ctx"], 0),
            c(PreToolUse, exited(0, "ctx", ""), None, None, &[], 0),
            c(PostToolUse, exited(0, "ctx", ""), None, None, &[], 0),
            // exit 0, JSON.
            c(
                PreToolUse,
                exited(0, deny, ""),
                Some("no rm here"),
                Some(Permission::Deny),
                &[],
                0,
            ),
            c(
                PreToolUse,
                exited(0, ask, ""),
                None,
                Some(Permission::Ask),
                &[],
                0,
            ),
            c(
                PreToolUse,
                exited(0, allow, ""),
                None,
                Some(Permission::Allow),
                &[],
                0,
            ),
            c(
                PreToolUse,
                exited(0, r#"{"decision":"block","reason":"old"}"#, ""),
                Some("old"),
                Some(Permission::Deny),
                &[],
                0,
            ),
            c(
                PreToolUse,
                exited(0, r#"{"decision":"approve"}"#, ""),
                None,
                Some(Permission::Allow),
                &[],
                0,
            ),
            c(
                PostToolUse,
                exited(0, block, ""),
                Some("fix the tests first"),
                None,
                &[],
                0,
            ),
            c(
                Stop,
                exited(0, block, ""),
                Some("fix the tests first"),
                None,
                &[],
                0,
            ),
            c(
                SubagentStop,
                exited(0, block, ""),
                Some("fix the tests first"),
                None,
                &[],
                0,
            ),
            c(
                UserPromptSubmit,
                exited(0, block, ""),
                Some("fix the tests first"),
                None,
                &[],
                0,
            ),
            c(
                UserPromptSubmit,
                exited(0, context, ""),
                None,
                None,
                &["today is Friday"],
                0,
            ),
            c(
                PostToolUse,
                exited(0, context, ""),
                None,
                None,
                &["today is Friday"],
                0,
            ),
            c(Notification, exited(0, block, ""), None, None, &[], 0),
            c(
                Stop,
                exited(0, r#"{"systemMessage":"tests pass"}"#, ""),
                None,
                None,
                &[],
                1,
            ),
            // Not JSON after all: ignored (or context).
            c(Stop, exited(0, "{nope", ""), None, None, &[], 0),
            // exit 2: block, stderr the reason; nothing to block for the others.
            c(
                PreToolUse,
                exited(2, deny, "rm is not allowed\n"),
                Some("rm is not allowed"),
                Some(Permission::Deny),
                &[],
                0,
            ),
            c(
                PostToolUse,
                exited(2, "", "lint failed"),
                Some("lint failed"),
                None,
                &[],
                0,
            ),
            c(
                UserPromptSubmit,
                exited(2, "", "no secrets"),
                Some("no secrets"),
                None,
                &[],
                0,
            ),
            c(Stop, exited(2, "", "go on"), Some("go on"), None, &[], 0),
            c(SessionStart, exited(2, "", "x"), None, None, &[], 1),
            c(PreCompact, exited(2, "", "x"), None, None, &[], 1),
            c(Notification, exited(2, "", "x"), None, None, &[], 1),
            // Other codes: an error that blocks nothing, stdout ignored.
            c(PreToolUse, exited(1, deny, "oops"), None, None, &[], 1),
            c(
                UserPromptSubmit,
                exited(127, "ctx", "sh: x: not found"),
                None,
                None,
                &[],
                1,
            ),
            c(Stop, Ended::TimedOut { secs: 1 }, None, None, &[], 1),
            c(
                PreToolUse,
                Ended::NotStarted("no sh".into()),
                None,
                None,
                &[],
                1,
            ),
        ];
        for (i, case) in table.into_iter().enumerate() {
            let v = decode(case.event, "hook.sh", &case.ended);
            assert_eq!(v.block.as_deref(), case.block, "case {i}: {v:?}");
            assert_eq!(v.permission, case.permission, "case {i}: {v:?}");
            assert_eq!(v.context, case.context, "case {i}: {v:?}");
            assert_eq!(v.notes.len(), case.notes, "case {i}: {v:?}");
        }
    }

    #[test]
    fn notes_say_what_happened_in_one_line() {
        let note = |e: &Ended| decode(Stop, "./stop.sh", e).notes.join("|");
        assert_eq!(
            note(&Ended::TimedOut { secs: 5 }),
            "hook `./stop.sh` did not finish within 5 s and was killed"
        );
        assert_eq!(
            note(&exited(1, "", "line one\nline two")),
            "hook `./stop.sh` failed (exit code 1): line one"
        );
        let flooded = Ended::Exited {
            code: 0,
            stdout: String::new(),
            stderr: String::new(),
            flooded: true,
        };
        assert!(note(&flooded).contains("wrote more than"));
        let v = decode(Stop, "x", &exited(2, "", ""));
        assert_eq!(
            v.block.as_deref(),
            Some("a Stop hook (`x`) blocked this without a reason")
        );
        let v = decode(
            Stop,
            "x",
            &exited(0, r#"{"continue":false,"stopReason":"done for today"}"#, ""),
        );
        assert_eq!(v.stop.as_deref(), Some("done for today"));
    }

    #[test]
    fn updated_input_and_ask_reason_are_read() {
        let v = decode(
            PreToolUse,
            "x",
            &exited(
                0,
                r#"{"hookSpecificOutput":{"permissionDecision":"ask","permissionDecisionReason":"check it","updatedInput":{"command":"ls -la"}}}"#,
                "",
            ),
        );
        assert_eq!(v.permission, Some(Permission::Ask));
        assert_eq!(v.ask_reason.as_deref(), Some("check it"));
        assert_eq!(
            v.updated_input,
            Some(serde_json::json!({"command": "ls -la"}))
        );
    }

    #[test]
    fn any_block_wins_and_deny_beats_ask_beats_allow() {
        let v = |permission, block: Option<&str>| Verdict {
            permission,
            block: block.map(str::to_string),
            updated_input: Some(serde_json::json!({"a": 1})),
            context: vec!["c".into()],
            ..Verdict::default()
        };
        let all = combine(vec![
            v(Some(Permission::Allow), None),
            v(Some(Permission::Ask), None),
            v(None, None),
        ]);
        assert_eq!(all.permission, Some(Permission::Ask));
        assert_eq!(all.block, None);
        assert_eq!(all.context, ["c", "c", "c"]);
        assert!(all.updated_input.is_some());
        let all = combine(vec![
            v(Some(Permission::Deny), Some("one")),
            v(Some(Permission::Allow), None),
            v(None, Some("two")),
        ]);
        assert_eq!(all.permission, Some(Permission::Deny));
        assert_eq!(all.block.as_deref(), Some("one\ntwo"));
        assert_eq!(all.updated_input, None);
        assert_eq!(combine(Vec::new()), Verdict::default());
    }
}
