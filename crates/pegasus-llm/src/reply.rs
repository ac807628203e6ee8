//! What a provider answered, in neutral form, before the gateway prices and records it; and
//! how to read a provider's error body.
//!
//! Both wire formats parse into [`ProviderReply`], so retries, pricing and the ledger are
//! written once. Usage is an `Option` on purpose: a reply without usage is *unknown* cost,
//! which must not be mistaken for a free call.

use pegasus_proto::llm::{Block, StopReason, Usage};

/// One successful answer as the provider gave it.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderReply {
    /// The provider's response id (`msg_...`, `chatcmpl-...`).
    pub id: String,
    /// The model the provider says it used (no provider prefix); may be empty.
    pub model: String,
    pub content: Vec<Block>,
    pub stop_reason: StopReason,
    /// `None` when the provider reported no (or incomplete) usage.
    pub usage: Option<Usage>,
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
/// code and the "maximum context length" wording of compatible servers.
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
    ]
    .iter()
    .any(|p| lower.contains(p))
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
        assert!(!is_context_overflow(
            400,
            r#"{"error":{"message":"max_tokens: Field required"}}"#
        ));
        assert!(!is_context_overflow(500, anthropic));
    }
}
