//! `use_skill{name}`: the instructions of a skill.

use serde::Deserialize;

use crate::skills;
use crate::tool::{parse_args, Tool, ToolCtx, ToolFuture, ToolOutput};

/// Returns a skill's SKILL.md body; a project skill overrides a global one of the same name.
pub struct UseSkill;

#[derive(Deserialize)]
struct Args {
    name: String,
}

impl Tool for UseSkill {
    fn spec(&self) -> pegasus_proto::llm::ToolSpec {
        super::spec(
            "use_skill",
            "Load the instructions of a skill listed under ## Skills in your system prompt.",
            serde_json::json!({
                "type": "object",
                "properties": {"name": {"type": "string"}},
                "required": ["name"]
            }),
        )
    }

    fn concurrent(&self) -> bool {
        true
    }

    fn call<'a>(&'a self, input: serde_json::Value, ctx: &'a ToolCtx) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: Args = match parse_args("use_skill", input) {
                Ok(a) => a,
                Err(e) => return e,
            };
            let allowed = |name: &str| {
                ctx.settings
                    .skills
                    .as_ref()
                    .is_none_or(|list| list.iter().any(|s| s == name))
            };
            match skills::find(&ctx.skill_dirs, &args.name) {
                Some(s) if allowed(&s.name) => ToolOutput::ok(s.body),
                found => {
                    let names: Vec<String> = skills::discover(&ctx.skill_dirs)
                        .into_keys()
                        .filter(|n| allowed(n))
                        .collect();
                    let why = match found {
                        Some(_) => "your role may not use the skill",
                        None => "no skill named",
                    };
                    ToolOutput::error(format!(
                        "{why} `{}`; available: {}",
                        args.name,
                        if names.is_empty() {
                            "(none)".to_string()
                        } else {
                            names.join(", ")
                        }
                    ))
                }
            }
        })
    }
}
