//! Assignments: a role put to work on one project, with per-project overrides.
//!
//! They live in PROJECT.md under `roles:`; the store crate owns that file, so it reads them
//! into [`Assignment`]s once, with the file (`ProjectFile::roles`), and writes them back
//! (`ProjectFile::set_roles`). This module checks an assignment against its role and applies
//! it to a [`Role`].

use crate::error::RoleError;
use crate::role::Role;
pub use pegasus_store::project::Assignment;

/// Checks an assignment against its role before it is stored or used: every variable it sets
/// is declared, every required one is set, and it asks for no tool the role lacks.
/// [`apply_assignment`] would silently drop such tools; this is for the places (`role
/// assign`, the MainAgent's tool) where the user should hear about it instead.
pub fn validate_assignment(a: &Assignment, role: &Role) -> Result<(), RoleError> {
    if let Some(tool) = a.tools.iter().flatten().find(|t| !role.allows_tool(t)) {
        return Err(RoleError::ToolNotAllowed {
            role: role.id.clone(),
            tool: tool.clone(),
        });
    }
    role.render(&a.variables).map(|_| ())
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::catalog::builtin_roles;
    use crate::Thinking;
    use std::collections::BTreeMap;

    fn builtin(id: &str) -> Role {
        builtin_roles().into_iter().find(|r| r.id == id).unwrap()
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
        let e = validate_assignment(&a, &reviewer).unwrap_err();
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
        validate_assignment(&a, &coder).unwrap();
        let prompt = apply_assignment(&coder, &a)
            .render(&BTreeMap::new())
            .unwrap();
        assert!(prompt.contains("Zig"), "{prompt}");
        let typo = Assignment {
            variables: BTreeMap::from([("langauge".to_string(), "Zig".to_string())]),
            ..Assignment::new("coder")
        };
        assert!(matches!(
            validate_assignment(&typo, &coder),
            Err(RoleError::UnknownVariable { .. })
        ));
    }
}
