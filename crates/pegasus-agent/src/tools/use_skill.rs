//! `use_skill{name}`: the instructions of a skill.

use serde::Deserialize;

use crate::skills;
use crate::tool::{ToolCtx, ToolOutput};

/// Returns a skill's SKILL.md body; a project skill overrides a global one of the same name.
pub struct UseSkill;

#[derive(Deserialize)]
pub(crate) struct Args {
    name: String,
}

impl super::Builtin for UseSkill {
    const NAME: &'static str = "use_skill";
    const DESCRIPTION: &'static str =
        "Load the instructions of a skill listed under ## Skills in your system prompt.";
    const CONCURRENT: bool = true;
    type Args = Args;

    fn schema() -> serde_json::Value {
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
