//! # pegasus-fakellm
//!
//! A fake LLM HTTP server that speaks the real **Anthropic Messages API**
//! (`POST /v1/messages`), **OpenAI Chat Completions API**
//! (`POST /v1/chat/completions`) and **OpenAI Responses API** (`POST /v1/responses`) wire
//! formats, both as plain JSON and as server-sent-event streams.
//!
//! ## What it is for
//!
//! * Integration tests of Pegasus' LLM clients and agent loop, without
//!   network access, API keys or cost: a test scripts the conversation with
//!   [`Rule`]s ("when the last user text contains X, call tool Y") and points
//!   the client at [`FakeLlm::anthropic_base_url`] / [`FakeLlm::openai_base_url`].
//! * Fault injection ([`Fault`]): rate limits with `retry-after`, overload
//!   (529), stalls, connections cut mid-stream, malformed JSON, missing usage,
//!   slow answers.
//! * Catching client bugs the real APIs would reject: every request's
//!   transcript is validated like the providers do (tool calls and tool
//!   results must pair up, roles must alternate, thinking blocks come back
//!   signed and unchanged, thinking and reasoning parameters fit the model, the
//!   prompt fits the context window ([`FakeLlm::set_context_window`])...).
//!   Problems are answered with the provider's real 400 and listed by
//!   [`FakeLlm::violations`], as are requests no rule answered.
//! * Checking a request's envelope as strictly as the Anthropic API: the
//!   `anthropic-version` header is required; an unknown `anthropic-beta` value is refused
//!   (``Unexpected value(s) `x` for the `anthropic-beta` header``); a top-level field the API
//!   does not know, or one whose beta the request did not name (`context_management`
//!   without `context-management-2025-06-27`, a tool's `defer_loading` without
//!   `advanced-tool-use-2025-11-20`, ...), is refused as `<path>: Extra inputs are not
//!   permitted`; `thinking` (`enabled`, `adaptive` with its `display`, `disabled`),
//!   `output_config.effort`, `metadata` and `context_management.edits` are checked, and for
//!   the Claude models it knows, `max_tokens` against the model's output limit and the
//!   thinking type against what the model supports.
//! * Serving **Claude Code** (2.1.332, `claude -p`) as the Anthropic API does: its
//!   `POST /v1/messages?beta=true` requests with their nine betas, adaptive thinking
//!   (answered with signed thinking blocks it must send back unchanged), mid-conversation
//!   `system` messages, deferred tools and the `tool_reference` results of its `ToolSearch`
//!   (each must name a tool the request offers), and `context_management` (answered with
//!   the edits applied). Its recorded requests are the fixtures of
//!   `tests/claude_code_requests.rs`; the workspace's `tests/common/claude.rs` runs the real
//!   `claude` against the fake. Claude Code's prompt is the last text of its first user
//!   message, after a `<system-reminder>` block: [`Match::LastUserTextContains`] finds it.
//! * Serving **Codex** (OpenAI's Codex CLI 0.171.0, `codex exec`) as the Responses API does:
//!   its streamed `POST /v1/responses` requests (`store: false`, `client_metadata`,
//!   `prompt_cache_key`, `namespace` and `custom` tools, message items with their ids) are
//!   checked as strictly as the API checks them (an unknown parameter is refused as
//!   `Unknown parameter: 'x'.` with its `param` and `code`; every `function_call_output` must
//!   answer a call and every call be answered; a request without a bearer key is OpenAI's
//!   401), answered with the API's named events (`response.created` ... `response.completed`
//!   with its usage); a scripted call of a tool the request declares `custom` (Codex's
//!   `apply_patch`) is a `custom_tool_call` whose input is the call's string; a reasoning
//!   request gets a signed `reasoning` item it must send back unchanged. Its recorded requests
//!   are the fixtures of `tests/codex_requests.rs`; the workspace's `tests/common/codex.rs`
//!   runs the real `codex` against the fake.
//! * The Pegasus demo, which runs a scripted agent session against it.
//!
//! ## What it is not for
//!
//! * It is not a model: replies are exactly what the script says; token
//!   counts are a crude estimate (characters / 4) unless scripted.
//! * It is not a general HTTP server: HTTP/1.1 with persistent connections
//!   (as the real APIs keep them), `Content-Length` request bodies only,
//!   bound to 127.0.0.1, no TLS.
//! * It does not cover the whole API surface: no images,
//!   batches, embeddings, `/v1/models`, server tools (their `type`d specs are accepted
//!   unchecked, never run), the Responses API's stored state (`previous_response_id`, `GET
//!   /v1/responses/ID`, `/v1/responses/compact`). (`/v1/messages/count_tokens` is served,
//!   strict, its count the fake's estimate: a harness's relay forwards it.) The context-window
//!   probes Pegasus makes of a server on this machine (`/props`, `/v1/models`, `/api/show`)
//!   get a 404, as from a hosted API, counted by `FakeLlm::window_probes`.
//!
//! ## Example
//!
//! ```
//! use pegasus_fakellm::{FakeLlm, Match, Reply, Rule, ToolCall};
//!
//! let fake = FakeLlm::start().unwrap();
//! fake.add_rule(
//!     Rule::new(
//!         Match::NoToolResultYet,
//!         Reply::Tools(vec![ToolCall::new("read_file", serde_json::json!({"path": "a.txt"}))]),
//!     )
//!     .times(1),
//! );
//! fake.add_rule(Rule::new(Match::LastToolResultContains("hello".into()), Reply::Text("It says hello.".into())));
//! // Point an Anthropic client at fake.anthropic_base_url(), run the agent, then:
//! assert!(fake.violations().is_empty());
//! assert_eq!(fake.request_count(), 0);
//! ```

mod answer;
mod anthropic;
mod anthropic_request;
pub mod asana;
mod background;
mod fake;
mod http;
mod ids;
mod openai;
mod record;
mod responses;
mod responses_request;
mod script;
mod server;
mod sse;
pub mod telegram;
mod transcript;
mod validate;
pub mod websearch;
pub mod website;

pub use asana::FakeAsana;
pub use fake::FakeLlm;
pub use record::{Answered, Format, Recorded};
pub use script::{Fault, Match, Reply, Rule, ToolCall, UsageSpec};
pub use telegram::{FakeTelegram, SentMessage};
pub use websearch::{FakeBrave, FakeHit, FakeSearxng, SearchRequest};
pub use website::{FakeSite, SitePage};

/// The stamps in a [`Fault::Clock`] answer's text (or any piece of it): the fake's wall clock,
/// in microseconds since the Unix epoch, when each piece was written.
pub fn clock_stamps(text: &str) -> impl Iterator<Item = u64> + '_ {
    text.split(' ')
        .filter(|w| w.len() == 16)
        .filter_map(|w| w.parse().ok())
}

/// The text of the reply sent for [`Fault::WrongUsage`], so tests can check
/// that the content still got through even though the usage was broken.
pub const WRONG_USAGE_TEXT: &str = "fake-llm: reply with missing usage";

/// The error message of the 500 sent when no rule matches a request.
pub const NO_SCRIPTED_REPLY: &str = server::NO_SCRIPTED_REPLY;
