//! The agent's only way to reach a model.

use std::future::Future;
use std::pin::Pin;

use pegasus_proto::llm::{ChatRequest, ChatResponse, LlmError};

/// The future a [`ChatModel`] returns; boxed so the trait stays object safe.
pub type ChatFuture<'a> = Pin<Box<dyn Future<Output = Result<ChatResponse, LlmError>> + Send + 'a>>;

/// How the agent reaches a model: in a worker a proxy over the socket to pegasusd, in pegasusd
/// the gateway itself. The agent cannot tell which, so credentials, budgets and retries stay in
/// one place (the gateway) and the loop here is the same for projects and the MainAgent.
pub trait ChatModel: Send + Sync {
    /// One model call. Budget refusals come back as [`LlmError::BudgetExceeded`].
    fn chat(&self, req: ChatRequest) -> ChatFuture<'_>;
}
