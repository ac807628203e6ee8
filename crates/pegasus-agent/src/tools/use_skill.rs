//! `use_skill{name}`: the instructions of a skill.

use serde::Deserialize;

use crate::skills;
use crate::tool::{ToolCtx, ToolOutput, TypedTool};

/// Returns a skill's SKILL.md body; a project skill overrides a global one of the same name.
pub struct UseSkill;

/// The arguments of `use_skill`, as its schema describes them.
#[derive(Deserialize)]
pub struct Args {
    name: String,
}

impl TypedTool for UseSkill {
    type Args = Args;

    fn name(&self) -> &str {
        "use_skill"
    }

    fn description(&self) -> &str {
        "Load the instructions of a skill listed under ## Skills in your system prompt."
    }

    fn concurrent(&self) -> bool {
        true
    }

    fn schema(&self) -> serde_json::Value {
        super::string_args(&[("name", "")], &[])
    }

    async fn run(&self, args: Args, ctx: &ToolCtx) -> Result<ToolOutput, String> {
        let allowed = |name: &str| {
            ctx.settings
                .skills
                .as_ref()
                .is_none_or(|list| list.iter().any(|s| s == name))
        };
        let found = skills::find(&ctx.skill_dirs, &args.name);
        let why = match found {
            Some(s) if allowed(&s.name) => return Ok(ToolOutput::ok(s.body)),
            Some(_) => "your role may not use the skill",
            None => "no skill named",
        };
        let names: Vec<String> = skills::discover(&ctx.skill_dirs)
            .into_keys()
            .filter(|n| allowed(n))
            .collect();
        let names = if names.is_empty() {
            "(none)".to_string()
        } else {
            names.join(", ")
        };
        Err(format!("{why} `{}`; available: {names}", args.name))
    }
}
