//! PROJECT.md's `roles:` key: the role assignments of a project, as written in the file, read
//! once when the file is parsed.
//!
//! It is a list, one entry per assignment:
//!
//! ```yaml
//! roles:
//!   - coder                                    # shorthand: the role as is
//!   - role: reviewer
//!     model: anthropic/claude-opus-4-1         # overrides the role's model
//!     thinking: high
//!     tools: [read_file, list_dir]             # narrows the role's tools
//!     variables: {focus: "security"}
//! ```
//!
//! A bad `roles:` does not make the file invalid: it is kept as its [`RolesProblem`], reported
//! by whoever uses the assignments (the worker when it starts, `role assign`). What an
//! assignment does to a role is `pegasus-roles`'s.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_norway::{Mapping, Value};

/// A reasoning level. `Off` is the default: a role that does not ask for reasoning should not
/// pay for it, and not every model accepts a reasoning setting.
///
/// Roles speak in four levels so a role file never depends on a provider; what a level means
/// on each wire (Anthropic's token budget, OpenAI's effort name) is decided in one place, the
/// gateway's providers (`pegasus-llm`), which see the model it goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Thinking {
    /// No reasoning setting is sent.
    #[default]
    Off,
    /// A little reasoning.
    Low,
    /// Moderate reasoning.
    Medium,
    /// As much reasoning as the level scale allows.
    High,
}

impl Thinking {
    /// Every level, lowest first.
    pub const ALL: [Thinking; 4] = [
        Thinking::Off,
        Thinking::Low,
        Thinking::Medium,
        Thinking::High,
    ];

    /// The name used in role files, PROJECT.md and on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Thinking::Off => "off",
            Thinking::Low => "low",
            Thinking::Medium => "medium",
            Thinking::High => "high",
        }
    }
}

impl fmt::Display for Thinking {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Thinking {
    type Err = String;

    /// Parses a level name; the error is a full sentence for a CLI flag.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Thinking::ALL
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| format!("unknown thinking level `{s}`: use off, low, medium or high"))
    }
}

/// One assignment of a role to a project.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Assignment {
    /// The role's id.
    pub role: String,
    /// Overrides the role's model (`provider/model`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Overrides the role's thinking level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<Thinking>,
    /// Narrows the role's tools to these; tools the role does not allow are not granted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// Values for the role's template variables.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub variables: BTreeMap<String, String>,
    /// The agent that does this role's work (DESIGN.md §15); `None`: the project's `agent:`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<crate::harness::AgentKind>,
}

impl Assignment {
    /// An assignment of `role` with no overrides.
    pub fn new(role: impl Into<String>) -> Self {
        Assignment {
            role: role.into(),
            ..Assignment::default()
        }
    }
}

/// A string used as a role id that cannot be one (also keeps ids from becoming paths).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a role id: use 1-63 lowercase letters, digits and dashes, starting with a letter or digit")]
pub struct BadRoleId(pub String);

/// Checks that `id` can name a role (and its file `roles/<id>.md`): 1-63 lowercase letters,
/// digits and dashes, starting with a letter or digit.
pub fn validate_role_id(id: &str) -> Result<(), BadRoleId> {
    let mut bytes = id.bytes();
    let first_ok = matches!(bytes.next(), Some(b) if b.is_ascii_lowercase() || b.is_ascii_digit());
    let rest_ok = bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if first_ok && rest_ok && id.len() <= 63 {
        Ok(())
    } else {
        Err(BadRoleId(id.to_string()))
    }
}

/// What is wrong with PROJECT.md's `roles:` value (or one entry of it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("PROJECT.md {at}: {message}")]
pub struct RolesProblem {
    /// Where: `roles` or `roles[2]`.
    pub at: String,
    /// What is wrong and what to do.
    pub message: String,
}

/// The `roles:` of a PROJECT.md: its assignments, or what is wrong with them.
pub type Roles = Result<Vec<Assignment>, RolesProblem>;

/// Reads a `roles:` value; absent or `null` means no assignments. Each entry is a role id
/// (shorthand) or a mapping; a bad entry is a problem naming its position.
pub(super) fn read(v: Option<&Value>) -> Roles {
    let items = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Sequence(items)) => items,
        Some(_) => {
            return Err(RolesProblem {
                at: "roles".into(),
                message: "must be a list: write one `- role: <id>` entry per assignment".into(),
            })
        }
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| read_item(i, item))
        .collect()
}

fn read_item(index: usize, item: &Value) -> Result<Assignment, RolesProblem> {
    let bad = |message: String| RolesProblem {
        at: format!("roles[{index}]"),
        message,
    };
    // serde_norway's from_value loses the key path, so name the usual culprit here.
    if let Some(t) = item.get("thinking").and_then(Value::as_str) {
        if t.parse::<Thinking>().is_err() {
            return Err(bad(format!(
                "thinking `{t}` is not a level: use off, low, medium or high"
            )));
        }
    }
    if let Some(word) = item.get("agent").and_then(Value::as_str) {
        if let Err(why) = crate::harness::AgentKind::parse(word) {
            return Err(bad(format!("agent {why}")));
        }
    }
    let a = match item {
        Value::String(id) => Assignment::new(id.clone()),
        Value::Mapping(_) => serde_norway::from_value::<Assignment>(item.clone()).map_err(|e| {
            bad(format!(
                "{e}: write it as `{{role: <id>, model: <provider/model>, thinking: off|low|medium|high, tools: [...], variables: {{name: value}}, agent: builtin|claude-code|codex}}`"
            ))
        })?,
        _ => {
            return Err(bad(
                "must be a role id or a mapping with a `role:` key".into(),
            ))
        }
    };
    validate_role_id(&a.role).map_err(|e| bad(e.to_string()))?;
    if let Some(model) = &a.model {
        let ok = model
            .split_once('/')
            .is_some_and(|(p, m)| !p.is_empty() && !m.is_empty());
        if !ok {
            return Err(bad(format!(
                "model `{model}` is not provider/model: write e.g. anthropic/claude-sonnet-4-5"
            )));
        }
    }
    Ok(a)
}

/// The `roles:` value to store for `assignments`: the shorthand for an assignment with no
/// overrides, a mapping otherwise; it reads back unchanged.
pub(super) fn to_yaml(assignments: &[Assignment]) -> Value {
    Value::Sequence(assignments.iter().map(item_to_yaml).collect())
}

fn item_to_yaml(a: &Assignment) -> Value {
    let plain = a.model.is_none() && a.thinking.is_none() && a.tools.is_none() && a.agent.is_none();
    if plain && a.variables.is_empty() {
        return Value::String(a.role.clone());
    }
    let s = |x: &str| Value::String(x.to_string());
    let mut m = Mapping::new();
    m.insert(s("role"), s(&a.role));
    if let Some(model) = &a.model {
        m.insert(s("model"), s(model));
    }
    if let Some(t) = a.thinking {
        m.insert(s("thinking"), s(t.as_str()));
    }
    if let Some(tools) = &a.tools {
        m.insert(
            s("tools"),
            Value::Sequence(tools.iter().map(|t| s(t)).collect()),
        );
    }
    if let Some(agent) = a.agent {
        m.insert(s("agent"), s(agent.as_str()));
    }
    if !a.variables.is_empty() {
        let vars = a.variables.iter().map(|(k, v)| (s(k), s(v))).collect();
        m.insert(s("variables"), Value::Mapping(vars));
    }
    Value::Mapping(m)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn yaml(text: &str) -> Value {
        serde_norway::from_str(text).unwrap()
    }

    #[test]
    fn thinking_names_round_trip_through_str_and_serde() {
        for t in Thinking::ALL {
            assert_eq!(t.as_str().parse::<Thinking>().unwrap(), t);
            assert_eq!(serde_json::to_string(&t).unwrap(), format!("\"{t}\""));
        }
        assert!("extreme"
            .parse::<Thinking>()
            .unwrap_err()
            .contains("extreme"));
    }

    #[test]
    fn yaml_round_trip() {
        let list = vec![
            Assignment::new("coder"),
            Assignment {
                model: Some("anthropic/claude-opus-4-1".into()),
                thinking: Some(Thinking::Low),
                tools: Some(vec!["read_file".into()]),
                variables: BTreeMap::from([("focus".to_string(), "security".to_string())]),
                ..Assignment::new("reviewer")
            },
            Assignment {
                thinking: Some(Thinking::Off),
                ..Assignment::new("tester")
            },
            Assignment {
                agent: Some(crate::harness::AgentKind::ClaudeCode),
                ..Assignment::new("coder")
            },
        ];
        let v = to_yaml(&list);
        assert_eq!(read(Some(&v)).unwrap(), list);
        // Through text too, as the store writes and reads it.
        let text = serde_norway::to_string(&v).unwrap();
        assert_eq!(read(Some(&yaml(&text))).unwrap(), list);
        // The derived serde form reads back as well.
        let derived = serde_norway::to_value(&list).unwrap();
        assert_eq!(read(Some(&derived)).unwrap(), list);
    }

    #[test]
    fn absent_or_null_roles_are_empty() {
        assert!(read(None).unwrap().is_empty());
        assert!(read(Some(&Value::Null)).unwrap().is_empty());
        let v = yaml("- coder\n- {role: tester, thinking: high}\n");
        let got = read(Some(&v)).unwrap();
        assert_eq!(got[0], Assignment::new("coder"));
        assert_eq!(got[1].thinking, Some(Thinking::High));
    }

    #[test]
    fn bad_entries_name_their_position() {
        let cases = [
            (
                "- coder\n- {role: tester, thinking: extreme}\n",
                "roles[1]",
                "thinking `extreme`",
            ),
            ("- {role: coder, toolz: [exec]}\n", "roles[0]", "toolz"),
            ("- {model: openai/gpt-5}\n", "roles[0]", "role"),
            ("- Coder\n", "roles[0]", "not a role id"),
            (
                "- {role: coder, model: gpt-5}\n",
                "roles[0]",
                "provider/model",
            ),
            ("- [coder]\n", "roles[0]", "mapping"),
            ("coder\n", "roles:", "must be a list"),
        ];
        for (text, at, what) in cases {
            let e = read(Some(&yaml(text))).unwrap_err().to_string();
            assert!(e.starts_with(&format!("PROJECT.md {at}")), "{text}: {e}");
            assert!(e.contains(what), "{text}: {e}");
        }
    }

    #[test]
    fn role_ids() {
        for ok in ["coder", "a", "9lives", "code-reviewer"] {
            assert_eq!(validate_role_id(ok), Ok(()));
        }
        for bad in ["", "Coder", "-x", "a/b", "a_b", &"a".repeat(64)] {
            assert_eq!(
                validate_role_id(bad).unwrap_err().to_string(),
                format!("`{bad}` is not a role id: use 1-63 lowercase letters, digits and dashes, starting with a letter or digit")
            );
        }
    }
}
