//! Server-sent events: the framing both providers use for streaming.
//!
//! Anthropic names every event (`event: message_start`), OpenAI sends bare
//! `data:` lines ending with `data: [DONE]`. Both are modelled by [`SseEvent`]
//! with an optional name.

use serde_json::Value;

/// One SSE event as it goes on the wire.
#[derive(Debug, Clone)]
pub(crate) struct SseEvent {
    pub event: Option<&'static str>,
    /// A single line (compact JSON never contains raw newlines).
    pub data: String,
}

impl SseEvent {
    /// A named event carrying JSON (Anthropic style).
    pub fn named(event: &'static str, data: &Value) -> SseEvent {
        SseEvent {
            event: Some(event),
            data: data.to_string(),
        }
    }

    /// An unnamed event carrying JSON (OpenAI style).
    pub fn data(data: &Value) -> SseEvent {
        SseEvent {
            event: None,
            data: data.to_string(),
        }
    }

    /// An unnamed event with raw text, e.g. `[DONE]` or deliberately broken JSON.
    pub fn raw(event: Option<&'static str>, data: &str) -> SseEvent {
        SseEvent {
            event,
            data: data.replace(['\r', '\n'], " "),
        }
    }

    /// The wire bytes: optional `event:` line, `data:` line, blank line.
    pub fn to_wire(&self) -> String {
        match self.event {
            Some(name) => format!("event: {name}\ndata: {}\n\n", self.data),
            None => format!("data: {}\n\n", self.data),
        }
    }
}

/// Splits `s` into up to `n` non-empty pieces on char boundaries, so clients
/// are forced to concatenate deltas. An empty string yields one empty piece.
pub(crate) fn split_pieces(s: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    if chars.is_empty() {
        return vec![String::new()];
    }
    let n = n.clamp(1, chars.len());
    let size = chars.len().div_ceil(n);
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_concatenate_back() {
        for s in ["", "a", "ab", "héllo wörld", "{\"city\":\"Paris\"}"] {
            let p = split_pieces(s, 3);
            assert_eq!(p.concat(), s);
            assert!(p.len() <= 3);
            if s.chars().count() >= 3 {
                assert_eq!(p.len(), 3, "{s}");
            }
        }
    }

    #[test]
    fn wire_format() {
        let e = SseEvent::named("ping", &serde_json::json!({"type": "ping"}));
        assert_eq!(e.to_wire(), "event: ping\ndata: {\"type\":\"ping\"}\n\n");
        assert_eq!(SseEvent::raw(None, "[DONE]").to_wire(), "data: [DONE]\n\n");
    }
}
