//! The LLM gateway of pegasusd.
//!
//! This crate is for making model calls on behalf of every project worker and the MainAgent,
//! through one [`Gateway`]: it maps the provider-neutral [`ChatRequest`] onto the Anthropic
//! Messages API or the OpenAI Chat Completions API (and compatible servers: Ollama, vLLM,
//! OpenRouter, ...), streams where asked, and enforces what must be global: one semaphore for
//! all calls, a per-provider rate gate that honours `retry-after`, retries with jittered
//! backoff, a timeout on every attempt, budgets (daily, per project, per task) checked before a
//! call, and one durable cost-ledger line after it (DESIGN.md §5).
//!
//! It is not for deciding *what* to ask: prompts, tools, sessions, compaction and roles belong
//! to the agent crate; the worker socket and its frames to the supervisor. It holds API keys
//! only for the instant of a request (read from the environment), which is why it runs in
//! pegasusd and never in a worker.
//!
//! One concern per module: [`provider`] (model ids, endpoints, keys), [`anthropic`] and
//! [`openai`] (the wire formats), [`sse`] (streams), [`retry`] (when and how long to wait),
//! [`prices`] (costs), [`fallback`] (which models a call may try, and when), [`budget`] (totals and caps; a project's cap from pegasus-store's project
//! registry), [`ledger`] (the cost record), and
//! [`gateway`], which ties them together.

pub mod anthropic;
pub mod budget;
pub mod fallback;
pub mod gateway;
pub mod journal;
pub mod ledger;
pub mod models;
pub mod openai;
pub mod prices;
pub mod provider;
pub mod reply;
pub mod retry;
pub mod sse;
pub mod window;

pub use gateway::{Gateway, GatewayStats, TaskBudgets, WindowNow};
pub use pegasus_proto::llm::*;
pub use provider::take_keys_from_env;

/// Locks `m`; a panic elsewhere while it was held must not take the gateway down with it.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
