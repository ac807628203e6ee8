//! What the fake remembers about each request, for assertions after the fact.

use std::time::Instant;

/// Which provider wire format a request used (decided by its path).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// Anthropic Messages API: `POST /v1/messages`.
    Anthropic,
    /// OpenAI Chat Completions API: `POST /v1/chat/completions`.
    OpenAi,
    /// OpenAI Responses API: `POST /v1/responses` (what Codex calls).
    Responses,
}

/// One request as the server received it, so tests can assert on what the
/// client actually sent (headers, prompt, tools, streaming flag, timing).
#[derive(Debug, Clone)]
pub struct Recorded {
    /// Which API it spoke, from its path.
    pub format: Format,
    /// Request target as sent, e.g. `/v1/messages`.
    pub path: String,
    /// Header names lowercased, in the order received.
    pub headers: Vec<(String, String)>,
    /// The parsed JSON body; a body that was not JSON is kept as a JSON string.
    pub body: serde_json::Value,
    /// `body.stream == true`.
    pub stream: bool,
    /// When the full request had arrived.
    pub at: Instant,
}

impl Recorded {
    /// First value of a header, by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One well-formed answer the fake began to send (its status line went out, or was about to):
/// a call the real provider bills, whatever becomes of the connection.
#[derive(Debug, Clone, PartialEq)]
pub struct Answered {
    /// The answer's id (`msg_…`, `chatcmpl-…`, `resp_…`): the request id a client records.
    pub request_id: String,
    /// The `X-Client-Request-Id` the client sent with the request, if any.
    pub client_request_id: Option<String>,
    /// The request's number among [`crate::FakeLlm::requests`] (1-based).
    pub request: usize,
    /// When it began.
    pub at: Instant,
}
