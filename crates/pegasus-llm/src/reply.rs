//! What a provider answered, in neutral form, before the gateway prices and records it; how
//! to read a provider's error body; and a tool's schema as both wire formats send it.
//!
//! Both wire formats parse into [`ProviderReply`], so retries, pricing and the ledger are
//! written once. Usage is an `Option` on purpose: a reply without usage is *unknown* cost,
//! which must not be mistaken for a free call.

use crate::lock;
use pegasus_proto::llm::{Block, LlmError, StopReason, ToolSpec, Usage};

/// One successful answer as the provider gave it.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderReply {
    /// The provider's response id (`msg_...`, `chatcmpl-...`).
    pub id: String,
    /// The model the provider says it used (no provider prefix); may be empty.
    pub model: String,
    /// The answer's blocks (text, tool calls, thinking), in the order given.
    pub content: Vec<Block>,
    /// Why the model stopped (end of turn, a tool call, the token limit...).
    pub stop_reason: StopReason,
    /// The token counts the provider reported, as far as it did.
    pub usage: SeenUsage,
}

/// Token counts as far as a provider reported them: a field it left out is `None`, so a
/// missing count is estimated, never taken as zero (a free call).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SeenUsage {
    /// Prompt tokens billed at the input price; `None` until reported.
    pub input: Option<u64>,
    /// Completion tokens; `None` until reported.
    pub output: Option<u64>,
    /// Prompt tokens served from the provider cache (0 when not reported).
    pub cache_read: u64,
    /// Prompt tokens written to the provider cache (0 when not reported).
    pub cache_write: u64,
}

impl SeenUsage {
    /// The whole usage, when both the input and the output count were reported.
    pub fn complete(&self) -> Option<Usage> {
        Some(Usage {
            input_tokens: self.input?,
            output_tokens: self.output?,
            cache_read_tokens: self.cache_read,
            cache_write_tokens: self.cache_write,
        })
    }

    /// The usage of a call, a count the provider did not report filled in from the estimates
    /// (`input` from the request, `output` from the text received). Whether anything was
    /// estimated is returned too: such a ledger line says `estimated: true`.
    pub fn or_estimate(&self, input: u64, output: u64) -> (Usage, bool) {
        match self.complete() {
            Some(u) => (u, false),
            None => (
                Usage {
                    input_tokens: self.input.unwrap_or(input),
                    // A count reported before the answer was whole (Anthropic's
                    // `message_start` says 1) is a floor, not the count.
                    output_tokens: self.output.unwrap_or(0).max(output),
                    cache_read_tokens: self.cache_read,
                    cache_write_tokens: self.cache_write,
                },
                true,
            ),
        }
    }
}

/// How far an answer got, shared between the attempt reading it and the call that owns it: if
/// the caller goes away (its future dropped) while the answer arrives, the call is still
/// metered from what had arrived.
#[derive(Default)]
pub struct Progress {
    state: std::sync::Mutex<Arrived>,
    /// Told the provider's response id once, when it is first seen (the call journal keeps
    /// it, so a call whose pegasusd dies before its ledger line is replayed with it).
    on_id: Option<OnId>,
}

/// What [`Progress`] tells the response id.
type OnId = Box<dyn Fn(&str) + Send + Sync>;

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Progress")
            .field("state", &self.get())
            .finish_non_exhaustive()
    }
}

/// What of an answer has arrived.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Arrived {
    /// The provider answered 200: it bills the call, whatever happens next.
    pub answered: bool,
    /// Bytes of answer (text, tool calls, thinking) received.
    pub bytes: u64,
    /// Usage reported so far.
    pub usage: SeenUsage,
    /// The provider's response id, once seen.
    pub id: String,
    /// The model the provider says it used (no provider prefix), once seen: an estimated line
    /// is priced by it as a whole answer's line would be.
    pub model: String,
}

impl Progress {
    /// A progress that calls `on_id` with the provider's response id when it is first seen.
    pub fn reporting_id(on_id: impl Fn(&str) + Send + Sync + 'static) -> Progress {
        Progress {
            state: Default::default(),
            on_id: Some(Box::new(on_id)),
        }
    }

    /// Records that the provider answered 200: from here on the call is billed.
    pub fn answered(&self) {
        lock(&self.state).answered = true;
    }

    /// Records what a stream parser has assembled so far.
    pub fn update(&self, bytes: u64, usage: SeenUsage, id: &str, model: &str) {
        let mut s = lock(&self.state);
        s.bytes = bytes;
        s.usage = usage;
        let first_id = s.id.is_empty() && !id.is_empty();
        if first_id {
            s.id = id.to_string();
        }
        if s.model.is_empty() && !model.is_empty() {
            s.model = model.to_string();
        }
        drop(s);
        if let (true, Some(on_id)) = (first_id, &self.on_id) {
            on_id(id);
        }
    }

    /// A copy of what has arrived so far.
    pub fn get(&self) -> Arrived {
        lock(&self.state).clone()
    }
}

/// The human-readable message of an error body. Anthropic and OpenAI both send
/// `{"error": {"message": ...}}`; Ollama and others send `{"error": "..."}` or
/// `{"message": ...}`; anything else is shown as (shortened) text so the user still sees what
/// the server said.
pub fn error_message(body: &str) -> String {
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(body) {
        let found = v
            .pointer("/error/message")
            .or_else(|| v.get("error").filter(|e| e.is_string()))
            .or_else(|| v.get("message"))
            .and_then(|m| m.as_str());
        if let Some(m) = found {
            return m.to_string();
        }
    }
    let text = body.trim();
    if text.is_empty() {
        return "(empty response body)".into();
    }
    const MAX: usize = 500;
    match text.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text.to_string(),
    }
}

/// Whether an error answer says the request is longer than the model's context window:
/// Anthropic's `prompt is too long: N tokens > M maximum` and `input length and max_tokens
/// exceed context limit` (400) or `request_too_large` (413); OpenAI's `context_length_exceeded`
/// code and the "maximum context length" wording (vLLM's too); llama.cpp's
/// `exceed_context_size_error` ("request (N tokens) exceeds the available context size (M
/// tokens)", on both of its APIs); vLLM's "The decoder prompt (length N) is longer than the
/// maximum model length of M"; Ollama's chat refusal "the prompt is longer than the context
/// length currently available to the model; ..." (llm/llama_server.go, 400; `{"error": "..."}`
/// on its own API, wrapped in the OpenAI or Anthropic error shape on `/v1/chat/completions` and
/// `/v1/messages`) and its embeddings one, "the input length exceeds the context length".
pub fn is_context_overflow(status: u16, body: &str) -> bool {
    if status == 413 {
        return true;
    }
    if status != 400 {
        return false;
    }
    let lower = body.to_ascii_lowercase();
    [
        "prompt is too long",
        "exceed context limit",
        "context_length_exceeded",
        "maximum context length",
        "context window",
        "exceed_context_size_error",
        "exceeds the available context size",
        "maximum model length",
        "exceeds the context length",
        "longer than the context length",
    ]
    .iter()
    .any(|p| lower.contains(p))
}

/// Puts `tools` in a request `body` (none: no `tools` key), each as `wire` shapes it with its
/// input schema as the JSON object both APIs want; the error names a tool whose schema is not
/// one.
pub fn insert_tools(
    body: &mut serde_json::Map<String, serde_json::Value>,
    tools: &[ToolSpec],
    wire: impl Fn(&ToolSpec, serde_json::Value) -> serde_json::Value,
) -> Result<(), LlmError> {
    if tools.is_empty() {
        return Ok(());
    }
    let tools = tools
        .iter()
        .map(|t| {
            serde_json::from_str::<serde_json::Value>(&t.input_schema_json)
                .ok()
                .filter(serde_json::Value::is_object)
                .map(|schema| wire(t, schema))
                .ok_or_else(|| {
                    LlmError::Other(format!(
                        "tool {} has an input schema that is not a JSON object",
                        t.name
                    ))
                })
        })
        .collect::<Result<_, _>>()?;
    body.insert("tools".into(), serde_json::Value::Array(tools));
    Ok(())
}

/// Drops empty text blocks: providers emit them around tool calls, and Anthropic refuses
/// empty text blocks when the transcript is sent back.
pub fn without_empty_text(content: Vec<Block>) -> Vec<Block> {
    content
        .into_iter()
        .filter(|b| !matches!(b, Block::Text { text } if text.is_empty()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_messages_of_the_common_shapes() {
        assert_eq!(
            error_message(
                r#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: too big"}}"#
            ),
            "max_tokens: too big"
        );
        assert_eq!(
            error_message(
                r#"{"error":{"message":"Invalid model","type":"invalid_request_error"}}"#
            ),
            "Invalid model"
        );
        assert_eq!(
            error_message(r#"{"error":"model not found"}"#),
            "model not found"
        );
        assert_eq!(error_message("  Bad Gateway \n"), "Bad Gateway");
        assert_eq!(error_message(""), "(empty response body)");
        assert_eq!(error_message(&"x".repeat(600)).len(), 503);
    }

    #[test]
    fn context_overflow_answers_of_both_providers_are_recognised() {
        let anthropic = r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#;
        assert!(is_context_overflow(400, anthropic));
        let openai = r#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#;
        assert!(is_context_overflow(400, openai));
        assert!(is_context_overflow(413, ""));
        // llama.cpp (the body of a real server, b0 via xllamacpp), on both of its APIs.
        let llama = r#"{"error":{"code":400,"message":"request (3031 tokens) exceeds the available context size (1024 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":3031,"n_ctx":1024}}"#;
        assert!(is_context_overflow(400, llama));
        let vllm = r#"{"object":"error","message":"The decoder prompt (length 8825) is longer than the maximum model length of 8192.","type":"BadRequestError","param":null,"code":400}"#;
        assert!(is_context_overflow(400, vllm));
        let vllm2 = r#"{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}"#;
        assert!(is_context_overflow(400, vllm2));
        // Ollama's chat refusal (llm/llama_server.go, HTTP 400), as its own API sends it
        // (server/routes.go: `{"error": msg}`) and as its OpenAI and Anthropic endpoints wrap it
        // (middleware/openai.go, middleware/anthropic.go).
        let refusal = "the prompt is longer than the context length currently available to the model; shorten the prompt, adjust the context length in settings, or use a model with a longer context length";
        let ollama = format!(r#"{{"error":"{refusal}"}}"#);
        assert!(is_context_overflow(400, &ollama));
        assert_eq!(error_message(&ollama), refusal);
        let ollama_openai = format!(
            r#"{{"error":{{"message":"{refusal}","type":"invalid_request_error","param":null,"code":null}}}}"#
        );
        assert!(is_context_overflow(400, &ollama_openai));
        assert_eq!(error_message(&ollama_openai), refusal);
        let ollama_anthropic = format!(
            r#"{{"type":"error","error":{{"type":"invalid_request_error","message":"{refusal}"}},"request_id":"req_1"}}"#
        );
        assert!(is_context_overflow(400, &ollama_anthropic));
        assert_eq!(error_message(&ollama_anthropic), refusal);
        // Its embeddings refusal.
        let ollama_embed = r#"{"error":"the input length exceeds the context length"}"#;
        assert!(is_context_overflow(400, ollama_embed));
        assert!(!is_context_overflow(
            400,
            r#"{"error":{"message":"max_tokens: Field required"}}"#
        ));
        assert!(!is_context_overflow(500, anthropic));
    }
}
