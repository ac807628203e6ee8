//! The provider-neutral chat types: what a worker (or the MainAgent) asks the LLM gateway in
//! pegasusd, and what it gets back.
//!
//! They cross the worker socket inside frames, so they follow the codec's rules: plain structs
//! and externally tagged enums, no `serde_json::Value` (raw JSON travels as `String`), no
//! `skip_serializing_if`. The gateway maps them to and from the Anthropic Messages API and the
//! OpenAI Chat Completions API; the agent code only ever sees these.

use serde::{Deserialize, Serialize};

/// One model call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    /// `provider/model`, e.g. `anthropic/claude-sonnet-4-5`, `ollama/llama3.1`. Empty = the
    /// project's model, else the config's `default_model` (resolved by the gateway).
    pub model: String,
    /// System prompt.
    pub system: String,
    /// The transcript so far, oldest first; the model answers its last user message (text or
    /// tool results).
    pub messages: Vec<Message>,
    /// Tools the model may call; empty = none.
    pub tools: Vec<ToolSpec>,
    /// The most tokens the answer may have (the provider's output limit for this call).
    pub max_tokens: u32,
    /// Sampling temperature; `None` leaves the provider's default (Anthropic calls with
    /// thinking on leave it out).
    pub temperature: Option<f32>,
    /// Reasoning effort (`off`, `low`, `medium`, `high`); mapped to the provider's setting.
    pub thinking: Option<String>,
    /// Per-call timeout override in seconds (else `llm.timeout_s`).
    pub timeout_s: Option<u64>,
    /// Stream from the provider (SSE) and forward text deltas as they come.
    pub stream: bool,
    /// Who pays: the ledger line and the budgets are keyed by this.
    pub meta: CallMeta,
}

/// Tokens of `bytes` bytes of text, rounded up: 3.5 bytes per token, pessimistic (real
/// tokenizers average about 4 on prose; llama.cpp's counted 3.3 on a long English message, and
/// the context check compacts at 80% of the window, which covers that).
pub fn tokens_of_bytes(bytes: usize) -> u64 {
    (bytes as u64 * 2).div_ceil(7)
}

/// Tokens added per message and per tool for the wire format's structure.
const OVERHEAD_TOKENS: u64 = 8;

impl ToolSpec {
    /// Tokens this spec adds to every request it is sent with, as
    /// [`ChatRequest::estimated_input_tokens`] counts them.
    pub fn estimated_tokens(&self) -> u64 {
        OVERHEAD_TOKENS
            + tokens_of_bytes(
                self.name.len() + self.description.len() + self.input_schema_json.len(),
            )
    }
}

impl ChatRequest {
    /// A pessimistic estimate of the prompt tokens of this request: system prompt, every block
    /// of every message (thinking and its signature included: they are sent back) and the tool
    /// specs. The one estimator of Pegasus: the agent's context check and the gateway's
    /// estimated ledger lines (an answer without usage) both use it.
    pub fn estimated_input_tokens(&self) -> u64 {
        let mut tokens = tokens_of_bytes(self.system.len());
        for m in &self.messages {
            tokens += OVERHEAD_TOKENS;
            for b in &m.content {
                tokens += tokens_of_bytes(b.bytes());
                if matches!(b, Block::ToolUse { .. } | Block::ToolResult { .. }) {
                    tokens += OVERHEAD_TOKENS;
                }
            }
        }
        for t in &self.tools {
            tokens += t.estimated_tokens();
        }
        tokens
    }
}

/// Accounting identity of a call.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CallMeta {
    /// Project name; `None` for the MainAgent (ledger project `main`). Set by the gateway from the
    /// connection for worker calls: a worker cannot bill another project.
    pub project: Option<String>,
    /// Task id the spend counts towards (a subagent's spend is its parent task's).
    pub task: Option<String>,
    /// The role the task runs as, written on the ledger line; `None` when it has none.
    pub role: Option<String>,
}

/// Who wrote a message of the transcript.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    /// The user's side: the user's text and tool results.
    User,
    /// The model's side: its text, thinking and tool calls.
    Assistant,
}

/// One message of the transcript.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Who wrote it.
    pub role: Role,
    /// Its content blocks, in order.
    pub content: Vec<Block>,
}

/// One content block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Block {
    /// Text the user or the model wrote.
    Text {
        /// The text.
        text: String,
    },
    /// The model asks for a tool call; `input_json` is a JSON object as text.
    ToolUse {
        /// The provider's id for the call, echoed by its [`Block::ToolResult`].
        id: String,
        /// The tool's name, as in its [`ToolSpec`].
        name: String,
        /// The call's arguments: a JSON object as text.
        input_json: String,
    },
    /// Answer to an earlier `ToolUse` (in a `User` message).
    ToolResult {
        /// The [`Block::ToolUse`] id it answers.
        tool_use_id: String,
        /// The tool's output, as the model reads it.
        content: String,
        /// Whether the output is an error (the tool refused or failed).
        is_error: bool,
    },
    /// The model's visible reasoning (Anthropic extended thinking), with the signature the
    /// provider checks when it is sent back: kept in the transcript unchanged, in its place.
    Thinking {
        /// The reasoning text.
        thinking: String,
        /// The provider's signature over it.
        signature: String,
    },
    /// Reasoning the provider encrypted; sent back exactly as received.
    RedactedThinking {
        /// The encrypted reasoning, opaque.
        data: String,
    },
}

impl Block {
    /// The bytes of text the block carries, ids and names included: what a token estimate
    /// counts.
    pub fn bytes(&self) -> usize {
        match self {
            Block::Text { text } => text.len(),
            Block::ToolUse {
                id,
                name,
                input_json,
            } => id.len() + name.len() + input_json.len(),
            Block::ToolResult {
                tool_use_id,
                content,
                ..
            } => tool_use_id.len() + content.len(),
            Block::Thinking {
                thinking,
                signature,
            } => thinking.len() + signature.len(),
            Block::RedactedThinking { data } => data.len(),
        }
    }
}

/// The tool calls in `content`, in order: each one's id, tool name and input JSON.
pub fn tool_uses(content: &[Block]) -> impl Iterator<Item = (&str, &str, &str)> {
    content.iter().filter_map(|b| match b {
        Block::ToolUse {
            id,
            name,
            input_json,
        } => Some((id.as_str(), name.as_str(), input_json.as_str())),
        _ => None,
    })
}

/// A tool the model may call; `input_schema_json` is a JSON Schema object as text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The name the model calls it by (`exec`, `mcp__NAME__TOOL`, ...).
    pub name: String,
    /// What the tool does and when to use it, for the model.
    pub description: String,
    /// The JSON Schema of its arguments, as text.
    pub input_schema_json: String,
}

/// Why the model stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum StopReason {
    /// The model finished its answer.
    EndTurn,
    /// The model asks for the tool calls in its answer.
    ToolUse,
    /// The answer hit `max_tokens` and is cut off.
    MaxTokens,
    /// Anything else the provider said (stop sequence, content filter, ...).
    Other,
}

/// Token counts as the provider reported them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens read without the cache (cached tokens are counted apart, also for OpenAI).
    pub input_tokens: u64,
    /// Tokens of the answer.
    pub output_tokens: u64,
    /// Prompt tokens read from the provider's prompt cache.
    pub cache_read_tokens: u64,
    /// Prompt tokens written to the provider's prompt cache.
    pub cache_write_tokens: u64,
}

/// A finished call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatResponse {
    /// The provider's id for the response (`msg_...`, `chatcmpl-...`); the ledger's request_id.
    pub request_id: String,
    /// `provider/model` as configured (the id the ledger line names).
    pub model: String,
    /// The answer's content blocks: text, thinking and tool calls, in order.
    pub content: Vec<Block>,
    /// Why the model stopped.
    pub stop_reason: StopReason,
    /// Tokens used, as the provider reported them.
    pub usage: Usage,
    /// What this call cost; `None` when the model has no price (flagged in the ledger, not 0).
    pub cost_usd: Option<f64>,
}

/// The text blocks of `content`, joined by newlines (tool calls and thinking left out).
pub fn text_of(content: &[Block]) -> String {
    content
        .iter()
        .filter_map(|b| match b {
            Block::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

impl ChatResponse {
    /// The answer's text ([`text_of`] its content).
    pub fn text(&self) -> String {
        text_of(&self.content)
    }
}

/// Dollars with the precision small amounts need (`$5.00`, `$0.0030`).
pub fn usd(x: f64) -> String {
    if x != 0.0 && x.abs() < 1.0 {
        format!("${x:.4}")
    } else {
        format!("${x:.2}")
    }
}

/// Why a call failed. Each is one line a user can act on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
pub enum LlmError {
    /// A budget (daily, project or task) has no room for the call's worst case; not sent.
    #[error("budget exceeded: {scope} limit {} has no room left for this call (spent {} so far, calls in flight counted at their worst case); raise it in config.yml or PROJECT.md", usd(*.limit), usd(*.spent))]
    BudgetExceeded {
        /// Which budget: `daily`, `project NAME` or `task ID`.
        scope: String,
        /// The budget's limit, in USD.
        limit: f64,
        /// What it has spent so far, in USD.
        spent: f64,
    },
    /// The provider's API key is not in pegasusd's environment.
    #[error("no API key for provider {provider}: set the environment variable {env} for pegasusd")]
    MissingKey {
        /// The provider's name.
        provider: String,
        /// The environment variable its key is read from.
        env: String,
    },
    /// The model names a provider config.yml does not have.
    #[error(
        "unknown provider `{provider}` in model `{model}`: add it under providers: in config.yml"
    )]
    UnknownProvider {
        /// The provider part of the model id.
        provider: String,
        /// The whole model id, as given.
        model: String,
    },
    /// A model id that is not `provider/model`; the id as given.
    #[error("bad model id `{0}`: use provider/model, e.g. anthropic/claude-sonnet-4-5")]
    BadModel(String),
    /// The provider refused the request (a 4xx other than 429); not retried.
    #[error("provider {provider} refused the request (HTTP {status}): {message}")]
    Refused {
        /// The provider's name.
        provider: String,
        /// The HTTP status it answered.
        status: u16,
        /// The provider's error message.
        message: String,
    },
    /// 429/529/5xx/timeouts/transport errors after every retry.
    #[error("provider {provider} failed after {attempts} attempts: {last}")]
    Exhausted {
        /// The provider's name.
        provider: String,
        /// How many attempts were made.
        attempts: u32,
        /// The last attempt's error.
        last: String,
    },
    /// The provider answered with a body that does not parse as its API's response.
    #[error("provider {provider} sent a response we cannot read: {message}")]
    BadResponse {
        /// The provider's name.
        provider: String,
        /// What could not be read.
        message: String,
    },
    /// The model has no price and `llm.allow_unpriced_models` is off: no budget could hold it.
    #[error("model {model} has no price, so no budget could hold its spend: add it under prices: in config.yml, e.g. prices: {{\"{model}\": {{input: 3.0, output: 15.0}}}} (USD per million tokens), or set llm.allow_unpriced_models: true")]
    Unpriced {
        /// `provider/model`, as configured.
        model: String,
    },
    /// The provider refused the request as longer than the model's context window; the
    /// caller can make it shorter (compact) and try again.
    #[error(
        "the request does not fit the model's context window (provider {provider}): {message}"
    )]
    ContextTooLong {
        /// The provider's name.
        provider: String,
        /// The provider's error message.
        message: String,
    },
    /// The model asked for and each of its fallback models (DESIGN.md §5) failed: each
    /// entry is one model tried, in order, with why it did not answer.
    #[error("no model could answer: {}", .tried.join("; "))]
    NoModelAnswered {
        /// `provider/model: why`, one per model tried, in order.
        tried: Vec<String>,
    },
    /// The caller gave the call up (its task was cancelled, or the worker's connection ended)
    /// before an answer.
    #[error("the call was cancelled")]
    Cancelled,
    /// Any other failure (the call journal, the HTTP client, the link to pegasusd), one line.
    #[error("{0}")]
    Other(String),
}

/// The future a [`ChatModel`] returns; boxed so the trait stays object safe.
pub type ChatFuture<'a> = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<ChatResponse, LlmError>> + Send + 'a>,
>;

/// How an agent (or a run's planner and reviewer) reaches a model: in a worker a proxy over the
/// socket to pegasusd, in pegasusd the gateway itself. The caller cannot tell which, so
/// credentials, budgets and retries stay in one place (the gateway). Defined here, beside the
/// types it carries, so every user reaches it without depending on the agent.
pub trait ChatModel: Send + Sync {
    /// One model call. Budget refusals come back as [`LlmError::BudgetExceeded`].
    fn chat(&self, req: ChatRequest) -> ChatFuture<'_>;

    /// One model call whose text is also sent to `deltas` as it arrives (with
    /// `req.stream`). The deltas are a preview; the response is the authoritative text. A
    /// model that cannot stream answers as [`ChatModel::chat`] and sends nothing.
    fn chat_streaming(
        &self,
        req: ChatRequest,
        deltas: tokio::sync::mpsc::UnboundedSender<String>,
    ) -> ChatFuture<'_> {
        drop(deltas);
        self.chat(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_refusals_show_small_amounts_and_do_not_claim_the_limit_was_reached() {
        let e = LlmError::BudgetExceeded {
            scope: "task t1".into(),
            limit: 0.003,
            spent: 0.0012,
        };
        assert_eq!(
            e.to_string(),
            "budget exceeded: task t1 limit $0.0030 has no room left for this call (spent $0.0012 so far, calls in flight counted at their worst case); raise it in config.yml or PROJECT.md"
        );
        assert_eq!(usd(5.0), "$5.00");
        assert_eq!(usd(0.0), "$0.00");
    }
}
