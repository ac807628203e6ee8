//! Assignments: a role put to work on one project, with per-project overrides.
//!
//! They live in PROJECT.md under `roles:` as a list, one entry per assignment:
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
//! The store crate owns PROJECT.md and hands this crate the `roles:` value; this module only
//! reads and writes that value and applies it to a [`Role`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_norway::{Mapping, Value};

use crate::error::RoleError;
use crate::role::{validate_id, Role};
use crate::thinking::Thinking;

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
}

impl Assignment {
    /// An assignment of `role` with no overrides.
    pub fn new(role: impl Into<String>) -> Self {
        Assignment {
            role: role.into(),
            ..Assignment::default()
        }
    }

    /// Checks the assignment against its role before it is stored or used: every variable it
    /// sets is declared, every required one is set, and it asks for no tool the role lacks.
    /// [`apply_assignment`] would silently drop such tools; this is for the places (`role
    /// assign`, the MainAgent's tool) where the user should hear about it instead.
    pub fn validate(&self, role: &Role) -> Result<(), RoleError> {
        if let Some(tool) = self.tools.iter().flatten().find(|t| !role.allows_tool(t)) {
            return Err(RoleError::ToolNotAllowed {
                role: role.id.clone(),
                tool: tool.clone(),
            });
        }
        role.render(&self.variables).map(|_| ())
    }
}

/// The role with an assignment's overrides applied: model and thinking replace the role's;
/// tools narrow the allowlist (an override can only remove tools the role allows, never add
/// one); declared variables the assignment sets become their defaults, so rendering the result
/// needs no further values. The id, prompt and source stay the role's.
pub fn apply_assignment(role: &Role, a: &Assignment) -> Role {
    let mut out = role.clone();
    if let Some(model) = &a.model {
        out.model.model = Some(model.clone());
    }
    if let Some(thinking) = a.thinking {
        out.model.thinking = thinking;
    }
    if let Some(wanted) = &a.tools {
        let narrowed = match &role.tools {
            Some(allowed) => allowed
                .iter()
                .filter(|t| wanted.contains(t))
                .cloned()
                .collect(),
            None => {
                let mut list: Vec<String> = Vec::with_capacity(wanted.len());
                for t in wanted {
                    if !list.contains(t) {
                        list.push(t.clone());
                    }
                }
                list
            }
        };
        out.tools = Some(narrowed);
    }
    for v in &mut out.variables {
        if let Some(value) = a.variables.get(&v.name) {
            v.default = Some(value.clone());
        }
    }
    out
}

/// Parses the `roles:` value of a PROJECT.md; absent or `null` means no assignments. Each
/// entry is a role id (shorthand) or a mapping; a bad entry is an error naming its position.
pub fn assignments_from_yaml(v: Option<&Value>) -> Result<Vec<Assignment>, RoleError> {
    let items = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Sequence(items)) => items,
        Some(_) => {
            return Err(RoleError::Assignment {
                at: "roles".into(),
                message: "must be a list: write one `- role: <id>` entry per assignment".into(),
            })
        }
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| assignment_from_item(i, item))
        .collect()
}

fn assignment_from_item(index: usize, item: &Value) -> Result<Assignment, RoleError> {
    let bad = |message: String| RoleError::Assignment {
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
    let a = match item {
        Value::String(id) => Assignment::new(id.clone()),
        Value::Mapping(_) => serde_norway::from_value::<Assignment>(item.clone()).map_err(|e| {
            bad(format!(
                "{e}: write it as `{{role: <id>, model: <provider/model>, thinking: off|low|medium|high, tools: [...], variables: {{name: value}}}}`"
            ))
        })?,
        _ => {
            return Err(bad(
                "must be a role id or a mapping with a `role:` key".into(),
            ))
        }
    };
    validate_id(&a.role).map_err(|e| bad(e.to_string()))?;
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
/// overrides, a mapping otherwise. [`assignments_from_yaml`] reads it back unchanged.
pub fn assignments_to_yaml(assignments: &[Assignment]) -> Value {
    Value::Sequence(assignments.iter().map(assignment_to_item).collect())
}

fn assignment_to_item(a: &Assignment) -> Value {
    let plain = a.model.is_none() && a.thinking.is_none() && a.tools.is_none();
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
    use crate::catalog::builtin_roles;

    fn builtin(id: &str) -> Role {
        builtin_roles().into_iter().find(|r| r.id == id).unwrap()
    }

    fn yaml(text: &str) -> Value {
        serde_norway::from_str(text).unwrap()
    }

    #[test]
    fn overrides_replace_model_and_thinking() {
        let coder = builtin("coder");
        let a = Assignment {
            model: Some("openai/gpt-5".into()),
            thinking: Some(Thinking::High),
            ..Assignment::new("coder")
        };
        let r = apply_assignment(&coder, &a);
        assert_eq!(r.model.model.as_deref(), Some("openai/gpt-5"));
        assert_eq!(r.model.thinking, Thinking::High);
        assert_eq!(r.model.timeout_s, coder.model.timeout_s);
        assert_eq!(r.template, coder.template);
        assert_eq!(apply_assignment(&coder, &Assignment::new("coder")), coder);
    }

    #[test]
    fn tool_override_narrows_and_cannot_add() {
        let reviewer = builtin("reviewer");
        assert!(!reviewer.allows_tool("exec"));
        let a = Assignment {
            tools: Some(vec!["read_file".into(), "exec".into()]),
            ..Assignment::new("reviewer")
        };
        let r = apply_assignment(&reviewer, &a);
        assert_eq!(r.tools, Some(vec!["read_file".to_string()]));
        assert!(!r.allows_tool("exec"));
        assert!(!r.allows_tool("list_dir"));
        let e = a.validate(&reviewer).unwrap_err();
        assert!(
            matches!(&e, RoleError::ToolNotAllowed { tool, .. } if tool == "exec"),
            "{e}"
        );

        let mut open = builtin("coder");
        open.tools = None;
        let a = Assignment {
            tools: Some(vec!["read_file".into(), "read_file".into()]),
            ..Assignment::new("coder")
        };
        assert_eq!(
            apply_assignment(&open, &a).tools,
            Some(vec!["read_file".to_string()])
        );
    }

    #[test]
    fn assignment_variables_become_defaults_and_are_checked() {
        let coder = builtin("coder");
        let name = coder.variables[0].name.clone();
        let a = Assignment {
            variables: BTreeMap::from([(name.clone(), "Zig".to_string())]),
            ..Assignment::new("coder")
        };
        a.validate(&coder).unwrap();
        let prompt = apply_assignment(&coder, &a)
            .render(&BTreeMap::new())
            .unwrap();
        assert!(prompt.contains("Zig"), "{prompt}");
        let typo = Assignment {
            variables: BTreeMap::from([("langauge".to_string(), "Zig".to_string())]),
            ..Assignment::new("coder")
        };
        assert!(matches!(
            typo.validate(&coder),
            Err(RoleError::UnknownVariable { .. })
        ));
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
        ];
        let v = assignments_to_yaml(&list);
        assert_eq!(assignments_from_yaml(Some(&v)).unwrap(), list);
        // Through text too, as the store writes and reads it.
        let text = serde_norway::to_string(&v).unwrap();
        assert_eq!(assignments_from_yaml(Some(&yaml(&text))).unwrap(), list);
        // The derived serde form reads back as well.
        let derived = serde_norway::to_value(&list).unwrap();
        assert_eq!(assignments_from_yaml(Some(&derived)).unwrap(), list);
    }

    #[test]
    fn absent_or_null_roles_are_empty() {
        assert!(assignments_from_yaml(None).unwrap().is_empty());
        assert!(assignments_from_yaml(Some(&Value::Null))
            .unwrap()
            .is_empty());
        let v = yaml("- coder\n- {role: tester, thinking: high}\n");
        let got = assignments_from_yaml(Some(&v)).unwrap();
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
            let e = assignments_from_yaml(Some(&yaml(text)))
                .unwrap_err()
                .to_string();
            assert!(e.starts_with(&format!("PROJECT.md {at}")), "{text}: {e}");
            assert!(e.contains(what), "{text}: {e}");
        }
    }
}
