//! What does the work of a phase.

use std::future::Future;
use std::pin::Pin;

/// The future a [`PhaseExecutor`] returns; boxed so the trait stays object safe.
pub type ExecuteFuture<'a> = Pin<Box<dyn Future<Output = Result<String, String>> + Send + 'a>>;

/// What does the work of a phase: in the worker, the project agent with its tools. A trait so
/// the engine can be tested with a scripted executor and so this crate needs no agent wiring.
///
/// Returns the phase's output text, or an error message (one line) that fails the phase and
/// the run. An error that is a budget refusal from the gateway (its text contains
/// `budget exceeded:`, the wording of `LlmError::BudgetExceeded`) pauses the run instead.
pub trait PhaseExecutor: Send + Sync {
    /// Does one attempt of a phase. `task_id` must be put in the meta of every model call it
    /// makes, so the ledger can be summed per phase.
    fn execute<'a>(&'a self, prompt: String, task_id: String) -> ExecuteFuture<'a>;
}
