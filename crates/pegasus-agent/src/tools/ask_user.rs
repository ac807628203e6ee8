//! `ask_user{question}`: the clarification loop (DESIGN.md §6). The task stops after this turn,
//! `blocked` with reason `question` and the question recorded on it; `pegasusctl task answer`
//! puts it back to ready, and its next run starts with the answer.

use serde::Deserialize;

use crate::tool::{ToolCtx, ToolOutput, TypedTool};

/// Name of the tool; the loop stops a task after a successful call of it.
pub const NAME: &str = "ask_user";

/// Longest question recorded (characters).
const MAX_CHARS: usize = 2000;

/// Asks the user a question the task cannot go on without; the task waits, `blocked`, for the answer.
pub struct AskUser;

/// The arguments of `ask_user`, as its schema describes them.
#[derive(Deserialize)]
pub struct Args {
    question: String,
}

/// The question of an `ask_user` call's arguments, if they hold a usable one.
pub fn question_of(input_json: &str) -> Option<String> {
    let args: Args = serde_json::from_str(input_json).ok()?;
    let q = args.question.trim();
    (!q.is_empty()).then(|| q.chars().take(MAX_CHARS).collect())
}

impl TypedTool for AskUser {
    type Args = Args;

    fn name(&self) -> &str {
        NAME
    }

    fn description(&self) -> &str {
        "Ask the user a question you cannot answer yourself and that blocks the task (a \
         missing requirement, a choice only they can make). The task pauses after this \
         turn until they answer; you then continue with the answer. Do not use it for \
         things you can find out with your other tools."
    }

    fn schema(&self) -> serde_json::Value {
        super::string_args(&[("question", "")], &[])
    }

    async fn run(&self, args: Args, ctx: &ToolCtx) -> Result<ToolOutput, String> {
        if args.question.trim().is_empty() {
            return Err("`question` is empty: say what you need to know".into());
        }
        if ctx.task_id.is_none() || ctx.depth > 0 {
            return Err(
                "only a task's own agent can ask the user; report what you need to \
                        know in your answer instead"
                    .into(),
            );
        }
        crate::hooks::notify(ctx, &args.question, "idle_prompt");
        Ok(ToolOutput::ok(
            "Your question was sent to the user. This task now waits for the answer; end \
             your turn.",
        ))
    }
}
