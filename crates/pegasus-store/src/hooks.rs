//! `hooks:` (DESIGN.md §16), lifecycle hooks in Claude Code's settings format, so a user's
//! existing hook blocks and scripts work unchanged: in config.yml (every project) and in
//! PROJECT.md (run after config.yml's). One type and one check for both files; what a hook
//! is given and what its answer means is `pegasus-agent`'s (`hooks`).
//!
//! ```yaml
//! hooks:
//!   PreToolUse:
//!     - matcher: "exec|write_file"     # absent, "" or "*": every tool
//!       hooks: [{type: command, command: "/home/me/bin/check.sh", timeout: 30}]
//! ```
//!
//! A matcher reads as Claude Code reads it: only letters, digits, `_`, `-`, spaces, `|` and
//! `,` make a list of exact names (`Write|Edit`, `exec, write_file`); anything else is an
//! unanchored regular expression (`mcp__github__.*`, `^write`).

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The events Pegasus fires, spelled as Claude Code spells them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum HookEvent {
    /// Before a tool call runs; may block it, allow it, ask a person, or change its input.
    PreToolUse,
    /// After a tool call ran; may tell the model something about its result.
    PostToolUse,
    /// Before a message is taken up; may refuse it or add context.
    UserPromptSubmit,
    /// When the agent is about to give its final answer; may make it go on.
    Stop,
    /// When a subagent is about to give its answer; may make it go on.
    SubagentStop,
    /// Before a worker's first task (`startup` or `resume`) and after a compaction
    /// (`compact`); may add context.
    SessionStart,
    /// Before the session is compacted.
    PreCompact,
    /// When the agent wants a person: an approval, a question, a `notify`.
    Notification,
}

impl HookEvent {
    /// Every event, in the order the docs list them.
    pub const ALL: [HookEvent; 8] = [
        HookEvent::PreToolUse,
        HookEvent::PostToolUse,
        HookEvent::UserPromptSubmit,
        HookEvent::Stop,
        HookEvent::SubagentStop,
        HookEvent::SessionStart,
        HookEvent::PreCompact,
        HookEvent::Notification,
    ];

    /// The name as written in the settings and in `hook_event_name`.
    pub fn name(self) -> &'static str {
        match self {
            HookEvent::PreToolUse => "PreToolUse",
            HookEvent::PostToolUse => "PostToolUse",
            HookEvent::UserPromptSubmit => "UserPromptSubmit",
            HookEvent::Stop => "Stop",
            HookEvent::SubagentStop => "SubagentStop",
            HookEvent::SessionStart => "SessionStart",
            HookEvent::PreCompact => "PreCompact",
            HookEvent::Notification => "Notification",
        }
    }
}

impl std::fmt::Display for HookEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Event name → its matcher groups, in the order written.
pub type HooksConfig = BTreeMap<HookEvent, Vec<HookGroup>>;

/// One `{matcher, hooks}` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookGroup {
    /// Which calls (tool name; `source` of SessionStart, `trigger` of PreCompact,
    /// `notification_type` of Notification) the hooks run for; other events ignore it.
    #[serde(default)]
    pub matcher: Matcher,
    /// The hooks to run.
    pub hooks: Vec<HookHandler>,
}

/// One hook. Claude Code's other kinds (`http`, `prompt`, `agent`) are refused by name; its
/// other fields of a command (`statusMessage`, `async`, `once`, ...) are accepted and have no
/// effect here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum HookHandler {
    /// `{type: command, command, timeout?}`: `sh -c command`, the event as JSON on stdin.
    Command {
        /// The shell command line.
        command: String,
        /// Seconds before it is killed, its whole process group with it; default
        /// [`DEFAULT_HOOK_TIMEOUT_S`].
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout: Option<u64>,
    },
}

/// A hook's time limit when `timeout` is not given (Claude Code's).
pub const DEFAULT_HOOK_TIMEOUT_S: u64 = 60;
/// The largest `timeout` accepted.
pub const MAX_HOOK_TIMEOUT_S: u64 = 3600;

impl HookHandler {
    /// The command line.
    pub fn command(&self) -> &str {
        match self {
            HookHandler::Command { command, .. } => command,
        }
    }

    /// Its time limit.
    pub fn timeout(&self) -> std::time::Duration {
        match self {
            HookHandler::Command { timeout, .. } => {
                std::time::Duration::from_secs(timeout.unwrap_or(DEFAULT_HOOK_TIMEOUT_S))
            }
        }
    }
}

/// A matcher as Claude Code reads one (see the module doc), compiled once.
#[derive(Debug, Clone, Default)]
pub struct Matcher {
    written: String,
    rule: Rule,
}

#[derive(Debug, Clone, Default)]
enum Rule {
    /// Absent, `""` or `"*"`.
    #[default]
    All,
    /// A list of exact names.
    Names(Vec<String>),
    /// An unanchored regular expression.
    Regex(regex::Regex),
}

impl Matcher {
    /// Reads a matcher; `Err` says why the regular expression does not compile.
    pub fn parse(written: &str) -> Result<Matcher, String> {
        let simple = |c: char| c.is_ascii_alphanumeric() || "_|, -".contains(c);
        let rule = if written.is_empty() || written == "*" {
            Rule::All
        } else if written.chars().all(simple) {
            Rule::Names(
                written
                    .split(['|', ','])
                    .map(str::trim)
                    .filter(|n| !n.is_empty())
                    .map(str::to_string)
                    .collect(),
            )
        } else {
            Rule::Regex(regex::Regex::new(written).map_err(|e| {
                let why = e.to_string();
                let last = why.lines().last().unwrap_or("").trim().to_string();
                format!("matcher `{written}` is not a regular expression Pegasus can read ({last}); write tool names separated by `|`, or a regex such as `mcp__github__.*`")
            })?)
        };
        Ok(Matcher {
            written: written.to_string(),
            rule,
        })
    }

    /// Whether it matches `value` (a tool name, a source, a trigger); `None` (an event without
    /// a value to match) matches every matcher.
    pub fn matches(&self, value: Option<&str>) -> bool {
        let Some(value) = value else { return true };
        match &self.rule {
            Rule::All => true,
            Rule::Names(names) => names.iter().any(|n| n == value),
            Rule::Regex(re) => re.is_match(value),
        }
    }

    /// As written.
    pub fn as_str(&self) -> &str {
        &self.written
    }
}

impl PartialEq for Matcher {
    fn eq(&self, other: &Self) -> bool {
        self.written == other.written
    }
}

impl Serialize for Matcher {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.written)
    }
}

impl<'de> Deserialize<'de> for Matcher {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let written = Option::<String>::deserialize(d)?.unwrap_or_default();
        Matcher::parse(&written).map_err(serde::de::Error::custom)
    }
}

/// Checks what serde cannot: a command is not empty, a timeout is in range. The error names
/// the entry (`hooks.Stop[0].hooks[1].timeout ...`).
pub fn check_hooks(hooks: &HooksConfig) -> Result<(), String> {
    for (event, groups) in hooks {
        for (g, group) in groups.iter().enumerate() {
            for (h, hook) in group.hooks.iter().enumerate() {
                let at = format!("hooks.{event}[{g}].hooks[{h}]");
                match hook {
                    HookHandler::Command { command, timeout } => {
                        if command.trim().is_empty() {
                            return Err(format!("{at}.command is empty: give the command to run"));
                        }
                        if timeout.is_some_and(|t| !(1..=MAX_HOOK_TIMEOUT_S).contains(&t)) {
                            return Err(format!(
                                "{at}.timeout must be from 1 to {MAX_HOOK_TIMEOUT_S} seconds"
                            ));
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

/// What a serde error about `hooks` says, with what to write: an unknown event or hook type
/// names the ones Pegasus has.
fn explain(e: impl std::fmt::Display) -> String {
    let e = e.to_string();
    if e.contains("unknown variant") && e.contains("PreToolUse") {
        let names: Vec<&str> = HookEvent::ALL.iter().map(|e| e.name()).collect();
        return format!(
            "{e} (Pegasus fires {}; remove the others)",
            names.join(", ")
        );
    }
    if e.contains("unknown variant") && e.contains("`command`") {
        return format!("{e} (Pegasus runs `type: command` hooks only)");
    }
    e
}

/// Parses and checks the `hooks` value of a PROJECT.md (absent or null: none).
pub fn parse_hooks(value: Option<&serde_norway::Value>) -> Result<HooksConfig, String> {
    let hooks: HooksConfig = match value {
        None | Some(serde_norway::Value::Null) => BTreeMap::new(),
        Some(v) => serde_norway::from_value(v.clone()).map_err(|e| {
            format!(
                "must map event names to lists of {{matcher, hooks: [{{type: command, command, timeout}}]}}: {}",
                explain(e)
            )
        })?,
    };
    check_hooks(&hooks)?;
    Ok(hooks)
}

/// config.yml's `hooks` problem, said with what to write (see [`parse_hooks`]).
pub fn explain_config_error(message: &str) -> String {
    explain(message)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn hooks(yaml: &str) -> Result<HooksConfig, String> {
        let v: serde_norway::Value = serde_norway::from_str(yaml).unwrap();
        parse_hooks(Some(&v))
    }

    #[test]
    fn claude_codes_shape_reads_with_its_defaults() {
        let h = hooks(
            r#"
PreToolUse:
  - matcher: "exec|write_file"
    hooks: [{type: command, command: "/bin/check.sh", timeout: 30}]
  - hooks:
      - {type: command, command: "log.sh", statusMessage: "logging"}
Stop:
  - matcher: ""
    hooks: [{type: command, command: "stop.sh"}]
"#,
        )
        .unwrap();
        let pre = &h[&HookEvent::PreToolUse];
        assert_eq!(pre.len(), 2);
        assert_eq!(pre[0].matcher.as_str(), "exec|write_file");
        assert_eq!(pre[0].hooks[0].command(), "/bin/check.sh");
        assert_eq!(pre[0].hooks[0].timeout().as_secs(), 30);
        assert_eq!(pre[1].matcher.as_str(), "");
        assert_eq!(pre[1].hooks[0].timeout().as_secs(), 60);
        assert!(h[&HookEvent::Stop][0].matcher.matches(Some("anything")));
        // It goes to the worker as JSON and comes back the same.
        let json = serde_json::to_string(&h).unwrap();
        assert_eq!(serde_json::from_str::<HooksConfig>(&json).unwrap(), h);
        assert_eq!(hooks("{}\n").unwrap(), BTreeMap::new());
        assert_eq!(parse_hooks(None).unwrap(), BTreeMap::new());
    }

    #[test]
    fn matchers_read_as_claude_code_reads_them() {
        let m = |s: &str| Matcher::parse(s).unwrap();
        // (matcher, value, matches)
        let table = [
            ("", "exec", true),
            ("*", "exec", true),
            ("exec", "exec", true),
            ("exec", "exec_more", false),
            ("Write|Edit", "Edit", true),
            ("Write|Edit", "write_file", false),
            ("exec, write_file", "write_file", true),
            ("write", "write_file", false),
            ("write.*", "write_file", true),
            ("^write", "write_file", true),
            ("^write", "rewrite", false),
            ("file$", "edit_file", true),
            ("mcp__github__.*", "mcp__github__create_issue", true),
            ("mcp__github__.*", "mcp__gitlab__x", false),
            // A bare prefix is a name, and matches no tool (as in Claude Code).
            ("mcp__github", "mcp__github__create_issue", false),
        ];
        for (matcher, value, want) in table {
            assert_eq!(
                m(matcher).matches(Some(value)),
                want,
                "{matcher} on {value}"
            );
        }
        assert!(m("exec").matches(None));
        assert!(Matcher::parse("(exec")
            .unwrap_err()
            .contains("matcher `(exec`"));
    }

    #[test]
    fn each_bad_entry_is_one_line_naming_it() {
        let e = hooks("SessionEnd:\n  - hooks: [{type: command, command: x}]\n").unwrap_err();
        assert!(e.contains("unknown variant `SessionEnd`"), "{e}");
        assert!(e.contains("Pegasus fires PreToolUse, PostToolUse"), "{e}");
        let e = hooks("Stop:\n  - hooks: [{type: prompt, prompt: x}]\n").unwrap_err();
        assert!(e.contains("unknown variant `prompt`"), "{e}");
        assert!(e.contains("`type: command` hooks only"), "{e}");
        let e = hooks("Stop:\n  - matcher: \"[\"\n    hooks: []\n").unwrap_err();
        assert!(e.contains("matcher `[` is not a regular expression"), "{e}");
        let e = hooks("Stop:\n  - hooks: [{type: command, command: \" \"}]\n").unwrap_err();
        assert_eq!(
            e,
            "hooks.Stop[0].hooks[0].command is empty: give the command to run"
        );
        let e = hooks("PreCompact:\n  - hooks: [{type: command, command: x, timeout: 0}]\n")
            .unwrap_err();
        assert_eq!(
            e,
            "hooks.PreCompact[0].hooks[0].timeout must be from 1 to 3600 seconds"
        );
        let e =
            hooks("Stop:\n  - hooks: [{type: command, command: x}]\n    match: x\n").unwrap_err();
        assert!(e.contains("unknown field `match`"), "{e}");
        let e = hooks("Stop: 5\n").unwrap_err();
        assert!(e.starts_with("must map event names"), "{e}");
    }
}
