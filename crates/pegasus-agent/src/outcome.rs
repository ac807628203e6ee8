//! How a run ended.

use pegasus_tasks::TaskState;

/// Why a run stopped.
#[derive(Debug, Clone, PartialEq)]
pub enum StopKind {
    /// The model gave a final answer (a response without tool calls).
    Answered,
    /// `max_turns` model calls went by without a final answer.
    TurnCapped,
    /// The same tool call was repeated `loop_repeat_limit` times in a row.
    LoopCapped,
    /// The gateway refused the call: a budget is spent. Carries its message.
    Budget(String),
    /// The model call failed for another reason. Carries the error's one-line message.
    ModelError(String),
    /// The task was cancelled from outside (seen at the top of a turn).
    Cancelled,
    /// The role's time limit (`model.timeout_s`) ran out. Carries the limit in seconds.
    TimedOut(u64),
    /// The request did not fit the model's context window, even after compacting. Carries
    /// the provider's message.
    ContextTooLong(String),
    /// The agent asked the user a question (`ask_user`); the task waits for the answer.
    Question(String),
    /// The process is stopping while a call waits for its approval: the task stays blocked
    /// and the call open, for the next start (DESIGN.md §11).
    Held,
    /// A lifecycle hook (DESIGN.md §16) stopped the task (`continue: false`) or refused its
    /// message (`UserPromptSubmit`). Carries the line that says so.
    Hook(String),
}

impl StopKind {
    /// The task state and reason this stop is recorded with: an answer is `done`, a spent
    /// budget `blocked` (DESIGN.md §5: it can go on once the budget is raised), anything else
    /// `failed`.
    pub fn task_state(&self, token_capped: bool) -> (TaskState, Option<&'static str>) {
        match self {
            StopKind::Answered if token_capped => (TaskState::Done, Some("token_capped")),
            StopKind::Answered => (TaskState::Done, None),
            StopKind::TurnCapped => (TaskState::Failed, Some("turn_capped")),
            StopKind::LoopCapped => (TaskState::Failed, Some("loop_capped")),
            StopKind::Budget(_) => (TaskState::Blocked, Some("budget")),
            StopKind::ModelError(_) => (TaskState::Failed, Some("model_error")),
            StopKind::Cancelled => (TaskState::Cancelled, Some("cancelled")),
            StopKind::TimedOut(_) => (TaskState::Failed, Some("timeout")),
            StopKind::ContextTooLong(_) => (TaskState::Failed, Some("context_too_long")),
            StopKind::Question(_) => (TaskState::Blocked, Some("question")),
            StopKind::Held => (TaskState::Blocked, Some(crate::approvals::APPROVAL_REASON)),
            StopKind::Hook(_) => (TaskState::Failed, Some("hook")),
        }
    }
}

/// The result of [`crate::Agent::run`].
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutcome {
    /// The task the run was recorded as.
    pub task_id: String,
    /// The final answer, or a one-line explanation of the stop.
    pub text: String,
    /// Why it stopped.
    pub stop: StopKind,
    /// Model calls of the loop (not counting reflection and compaction).
    pub turns: u32,
    /// Sum of the known costs of this run's responses, including reflection and compaction;
    /// subagent spend is in the ledger under the same task but not in this sum.
    pub cost_usd: f64,
}

impl RunOutcome {
    /// Task `task_id` never ran: a `UserPromptSubmit` hook refused its message (`why`).
    pub(crate) fn refused_by_hook(task_id: String, why: String) -> RunOutcome {
        RunOutcome {
            task_id,
            text: why.clone(),
            stop: StopKind::Hook(why),
            turns: 0,
            cost_usd: 0.0,
        }
    }

    /// The outcome of task `task_id`'s loop that ended as `end`, with its whole cost.
    pub(crate) fn of(
        task_id: String,
        end: crate::agent_loop::LoopEnd,
        cost_usd: f64,
    ) -> RunOutcome {
        RunOutcome {
            task_id,
            text: end.text,
            stop: end.stop,
            turns: end.turns,
            cost_usd,
        }
    }
}
