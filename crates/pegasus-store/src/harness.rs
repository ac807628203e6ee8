//! Which agent runs a project's work (DESIGN.md §15): Pegasus's own loop, or a third-party
//! coding harness (Claude Code, Codex) run by the worker as a contained command.
//!
//! * PROJECT.md `agent:` (and a `roles:` entry's `agent:`) names the kind, [`AgentKind`];
//! * config.yml `harnesses:` says how each harness is started, [`HarnessesConfig`].
//!
//! This module only reads and checks them; the runner is the worker's
//! (`crates/pegasus-worker/src/harness/`).

use serde::{Deserialize, Serialize};

/// The agent of a project (PROJECT.md `agent:`) or of a role's work (`roles[].agent`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum AgentKind {
    /// Pegasus's own agent loop (the default).
    #[default]
    Builtin,
    /// Claude Code (`claude -p --output-format stream-json`), on an `anthropic` provider.
    ClaudeCode,
    /// OpenAI's Codex CLI, on an `openai` provider.
    Codex,
}

impl AgentKind {
    /// Every kind, the default first.
    pub const ALL: [AgentKind; 3] = [AgentKind::Builtin, AgentKind::ClaudeCode, AgentKind::Codex];

    /// The word PROJECT.md uses.
    pub fn as_str(self) -> &'static str {
        match self {
            AgentKind::Builtin => "builtin",
            AgentKind::ClaudeCode => "claude-code",
            AgentKind::Codex => "codex",
        }
    }

    /// Reads PROJECT.md's word; the error is the sentence after "key `agent` ".
    pub fn parse(word: &str) -> Result<AgentKind, String> {
        AgentKind::ALL
            .into_iter()
            .find(|k| k.as_str() == word)
            .ok_or_else(|| {
                format!(
                    "is `{}`: use builtin, claude-code or codex",
                    word.escape_debug()
                )
            })
    }

    /// The provider `kind` this harness speaks to (`None` for the built-in loop, which speaks
    /// to any).
    pub fn provider_kind(self) -> Option<&'static str> {
        match self {
            AgentKind::Builtin => None,
            AgentKind::ClaudeCode => Some("anthropic"),
            AgentKind::Codex => Some("openai"),
        }
    }

    /// The effort levels the harness takes (`harnesses.<kind>.effort`).
    pub fn efforts(self) -> &'static [&'static str] {
        match self {
            AgentKind::Builtin => &[],
            AgentKind::ClaudeCode => &["low", "medium", "high", "xhigh", "max"],
            AgentKind::Codex => &["minimal", "low", "medium", "high", "xhigh"],
        }
    }
}

impl std::fmt::Display for AgentKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `harnesses:` in config.yml: how each harness is started.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct HarnessesConfig {
    /// Claude Code.
    #[serde(rename = "claude-code")]
    pub claude_code: HarnessConfig,
    /// Codex.
    pub codex: HarnessConfig,
}

impl Default for HarnessesConfig {
    fn default() -> Self {
        HarnessesConfig {
            claude_code: HarnessConfig::named("claude"),
            codex: HarnessConfig::named("codex"),
        }
    }
}

impl HarnessesConfig {
    /// The entry of `kind` (`None` for the built-in loop).
    pub fn of(&self, kind: AgentKind) -> Option<&HarnessConfig> {
        match kind {
            AgentKind::Builtin => None,
            AgentKind::ClaudeCode => Some(&self.claude_code),
            AgentKind::Codex => Some(&self.codex),
        }
    }

    /// The config key of `kind`'s entry, as errors name it (`harnesses.claude-code`).
    pub fn key(kind: AgentKind) -> String {
        format!("harnesses.{kind}")
    }

    /// Range checks: `(dotted key, what is wrong)`.
    pub fn check(&self) -> Result<(), (String, String)> {
        for kind in [AgentKind::ClaudeCode, AgentKind::Codex] {
            let Some(h) = self.of(kind) else { continue };
            let key = Self::key(kind);
            let command = h.command.trim();
            if command.is_empty() || command != h.command {
                return Err((
                    format!("{key}.command"),
                    "must be a program name on PATH or an absolute path, without spaces around it"
                        .into(),
                ));
            }
            if command.contains('/') && !command.starts_with('/') {
                return Err((
                    format!("{key}.command"),
                    format!(
                        "`{command}` is a relative path: give a name on PATH or an absolute path"
                    ),
                ));
            }
            if let Some(effort) = &h.effort {
                if !kind.efforts().contains(&effort.as_str()) {
                    return Err((
                        format!("{key}.effort"),
                        format!(
                            "is `{}`: use one of {}",
                            effort.escape_debug(),
                            kind.efforts().join(", ")
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// One harness's entry of `harnesses:`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct HarnessConfig {
    /// The program: a name looked up on PATH, or an absolute path.
    pub command: String,
    /// Arguments added after Pegasus's own on every run (e.g. `["--fallback-model", "x"]`).
    #[serde(default)]
    pub args: Vec<String>,
    /// The harness's effort level (Claude Code `--effort`, Codex `model_reasoning_effort`);
    /// `None`: the harness's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<String>,
}

impl HarnessConfig {
    fn named(command: &str) -> HarnessConfig {
        HarnessConfig {
            command: command.into(),
            args: Vec::new(),
            effort: None,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn kinds_read_their_words_and_refuse_others_with_the_choices() {
        for k in AgentKind::ALL {
            assert_eq!(AgentKind::parse(k.as_str()), Ok(k));
        }
        assert_eq!(
            AgentKind::parse("claude").unwrap_err(),
            "is `claude`: use builtin, claude-code or codex"
        );
        assert_eq!(AgentKind::ClaudeCode.provider_kind(), Some("anthropic"));
        assert_eq!(AgentKind::Codex.provider_kind(), Some("openai"));
    }

    #[test]
    fn the_entries_are_checked_with_their_keys() {
        let mut h = HarnessesConfig::default();
        assert_eq!(h.check(), Ok(()));
        h.claude_code.command = "bin/claude".into();
        assert_eq!(h.check().unwrap_err().0, "harnesses.claude-code.command");
        h.claude_code.command = "/opt/claude/bin/claude".into();
        h.codex.effort = Some("max".into());
        let (key, why) = h.check().unwrap_err();
        assert_eq!(key, "harnesses.codex.effort");
        assert!(why.contains("minimal, low"), "{why}");
        h.codex.effort = Some("high".into());
        h.claude_code.command = String::new();
        assert_eq!(h.check().unwrap_err().0, "harnesses.claude-code.command");
    }
}
