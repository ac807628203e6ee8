//! What does the work of a phase.

use std::future::Future;
use std::pin::Pin;

/// The future a [`PhaseExecutor`] returns; boxed so the trait stays object safe.
pub type ExecuteFuture<'a> = Pin<Box<dyn Future<Output = Result<String, ExecError>> + Send + 'a>>;

/// Why an attempt of a phase did not produce its output. The engine matches on the kind: a
/// budget refusal pauses the run (the attempt does not count), anything else fails it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ExecError {
    /// A budget refused a model call; raise it, then `run resume`.
    #[error("{0}")]
    Budget(String),
    /// The attempt failed; the line says why.
    #[error("{0}")]
    Failed(String),
}

/// What does the work of a phase: in the worker, the project agent with its tools. A trait so
/// the engine can be tested with a scripted executor and so this crate needs no agent wiring.
///
/// Returns the phase's output text, or an [`ExecError`]: a budget refusal pauses the run, any
/// other error fails the phase and the run.
pub trait PhaseExecutor: Send + Sync {
    /// Does one attempt of a phase. `task_id` must be put in the meta of every model call it
    /// makes, so the ledger can be summed per phase.
    fn execute<'a>(&'a self, prompt: String, task_id: String) -> ExecuteFuture<'a>;
}
