//! Reading a streamed (server-sent events) response, for both wire formats.
//!
//! The SSE framing and the stall timeout are the same for Anthropic and OpenAI; only the
//! meaning of each event differs, which each format supplies as a [`StreamParser`]. A stream
//! that goes silent longer than the timeout is abandoned as stalled (and retried), while a
//! long answer that keeps producing is not cut.

use std::time::Duration;

use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use tokio::sync::mpsc::UnboundedSender;

use crate::reply::{Progress, ProviderReply, SeenUsage};
use crate::retry::{AttemptError, Cause};

/// One wire format's interpretation of stream events.
pub trait StreamParser {
    /// Feeds one event (`name` is `message` when the server gave none). Returns `Ok(true)` when
    /// this event ends the stream; `Err` for an error event or an unreadable payload. Text
    /// deltas are forwarded to `deltas` as they come.
    fn event(&mut self, name: &str, data: &str, deltas: Option<&Deltas>) -> Result<bool, String>;

    /// What has arrived so far: bytes of answer, the usage reported, the response id and the
    /// model the provider says it used (each empty until seen).
    fn progress(&self) -> (u64, SeenUsage, &str, &str);

    /// The assembled reply once the byte stream ended; `Err` when it ended too early (a cut
    /// stream), so the caller retries instead of returning half an answer.
    fn finish(self: Box<Self>) -> Result<ProviderReply, String>;
}

/// Why a stream was not read to its end.
#[derive(Debug)]
pub enum ReadError {
    /// Its bytes passed the limit (`llm.max_response_bytes`); not worth a retry.
    TooLarge,
    /// Stalled, cut or unreadable: worth a retry (or fatal, as the parser says).
    Attempt(AttemptError),
}

/// Drives `response`'s body through `parser`. `idle` bounds the silence between two chunks;
/// `limit` the bytes of the whole body.
pub async fn read(
    response: reqwest::Response,
    mut parser: Box<dyn StreamParser + Send>,
    idle: Duration,
    limit: usize,
    deltas: Option<&Deltas>,
    progress: &Progress,
) -> Result<ProviderReply, ReadError> {
    let mut total = 0usize;
    let counted = response.bytes_stream().map(move |chunk| match chunk {
        Ok(bytes) => {
            total = total.saturating_add(bytes.len());
            if total > limit {
                Err(TOO_LARGE.to_string())
            } else {
                Ok(bytes)
            }
        }
        Err(e) => Err(e.to_string()),
    });
    let mut events = counted.eventsource();
    let retry = |m: String| ReadError::Attempt(AttemptError::retry(m));
    loop {
        let next = tokio::time::timeout(idle, events.next())
            .await
            .map_err(|_| {
                ReadError::Attempt(AttemptError::because(
                    Cause::Timeout,
                    format!("stream stalled: nothing for {} s", idle.as_secs_f64()),
                ))
            })?;
        match next {
            None => break,
            Some(Err(eventsource_stream::EventStreamError::Transport(e))) if e == TOO_LARGE => {
                return Err(ReadError::TooLarge)
            }
            Some(Err(e)) => return Err(retry(format!("stream broken: {e}"))),
            Some(Ok(ev)) => {
                let done = parser.event(&ev.event, &ev.data, deltas);
                let (bytes, usage, id, model) = parser.progress();
                progress.update(bytes, usage, id, model);
                if done.map_err(retry)? {
                    break;
                }
            }
        }
    }
    parser.finish().map_err(retry)
}

/// The transport error a stream past its byte limit ends with.
const TOO_LARGE: &str = "the stream passed its byte limit";

/// Where the text of a call's answers goes as it arrives, counting the bytes that went: an
/// answer that restarts (a retry, a fallback model) after text reached the caller is marked
/// as such in the text first, so whoever follows it is not left with two answers run together.
#[derive(Debug)]
pub struct Deltas {
    tx: UnboundedSender<String>,
    sent: std::sync::atomic::AtomicU64,
}

impl Deltas {
    /// Text goes to `tx`.
    pub fn new(tx: UnboundedSender<String>) -> Deltas {
        Deltas {
            tx,
            sent: Default::default(),
        }
    }

    /// Sends `text` if anyone listens; a consumer that went away must not fail the call.
    pub fn send(&self, text: &str) {
        if !text.is_empty() {
            self.sent
                .fetch_add(text.len() as u64, std::sync::atomic::Ordering::Relaxed);
            let _ = self.tx.send(text.to_string());
        }
    }

    /// Bytes of text sent so far.
    pub fn sent(&self) -> u64 {
        self.sent.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Sends a text delta if anyone listens ([`Deltas::send`]).
pub fn forward(deltas: Option<&Deltas>, text: &str) {
    if let Some(d) = deltas {
        d.send(text);
    }
}

/// Test helper: feeds canned SSE text (`event:`/`data:` lines, blank-line separated) to a
/// parser the way [`read`] would, without a socket.
#[cfg(test)]
pub fn feed<P: StreamParser>(
    mut parser: P,
    text: &str,
    deltas: Option<&Deltas>,
) -> Result<ProviderReply, String> {
    for raw in text.split("\n\n") {
        let mut name = "message".to_string();
        let mut data = Vec::new();
        for line in raw.lines() {
            if let Some(v) = line.strip_prefix("event:") {
                name = v.trim().to_string();
            } else if let Some(v) = line.strip_prefix("data:") {
                data.push(v.strip_prefix(' ').unwrap_or(v).to_string());
            }
        }
        if data.is_empty() {
            continue;
        }
        if parser.event(&name, &data.join("\n"), deltas)? {
            break;
        }
    }
    Box::new(parser).finish()
}

/// Test helper: [`feed`] with a listener; also returns the text deltas it forwarded.
#[cfg(test)]
pub fn feed_deltas<P: StreamParser>(
    parser: P,
    text: &str,
) -> Result<(ProviderReply, Vec<String>), String> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let sink = Deltas::new(tx);
    let reply = feed(parser, text, Some(&sink))?;
    let mut deltas = Vec::new();
    while let Ok(d) = rx.try_recv() {
        deltas.push(d);
    }
    let bytes: u64 = deltas.iter().map(|d| d.len() as u64).sum();
    assert_eq!(sink.sent(), bytes, "every byte sent is counted");
    Ok((reply, deltas))
}

/// Test helper: a tool call block.
#[cfg(test)]
pub fn tool_use(id: &str, name: &str, input_json: &str) -> pegasus_proto::llm::Block {
    pegasus_proto::llm::Block::ToolUse {
        id: id.into(),
        name: name.into(),
        input_json: input_json.into(),
    }
}

/// Test helper: a whole usage report, as [`SeenUsage::complete`] gives it.
#[cfg(test)]
pub fn usage(
    input: u64,
    output: u64,
    cache_read: u64,
    cache_write: u64,
) -> Option<pegasus_proto::llm::Usage> {
    Some(pegasus_proto::llm::Usage {
        input_tokens: input,
        output_tokens: output,
        cache_read_tokens: cache_read,
        cache_write_tokens: cache_write,
    })
}
