//! The request pipeline: record, authenticate, validate, pick a rule, answer.
//!
//! Deciding what to do happens synchronously under one lock (so rule
//! consumption and request numbering are race-free); sending the answer,
//! including delays, stalls and cuts, happens afterwards without the lock.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::answer::Answer;
use crate::http::{self, Framing, Request};
use crate::record::{Format, Recorded};
use crate::script::{Fault, MatchContext, Reply, Rule, ToolCall, UsageSpec};
use crate::sse::SseEvent;
use crate::transcript::Transcript;
use crate::{anthropic, anthropic_request, openai, responses, responses_request, validate};

/// Message of the 500 sent when no rule matches.
pub(crate) const NO_SCRIPTED_REPLY: &str = "fake-llm: no scripted reply";

/// Text used for faults that need some content to break or to carry.
const PLACEHOLDER_TEXT: &str = "fake-llm: this reply is deliberately broken, do not trust it";

/// A rule and how often it has answered.
#[derive(Debug)]
pub(crate) struct CountedRule {
    pub rule: Rule,
    pub used: usize,
}

impl CountedRule {
    fn available(&self) -> bool {
        self.rule.times.is_none_or(|t| self.used < t)
    }
}

/// Everything the test thread and the server share.
#[derive(Debug, Default)]
pub(crate) struct State {
    pub rules: Vec<CountedRule>,
    pub api_key: Option<String>,
    /// Context window of every model, in the fake's tokens ([`prompt_tokens`]); `None` =
    /// [`DEFAULT_CONTEXT_WINDOW`].
    pub context_window: Option<u64>,
    /// Answer without any usage, as many OpenAI-compatible servers and proxies do.
    pub omit_usage: bool,
    pub requests: Vec<Recorded>,
    pub violations: Vec<String>,
    /// Connections accepted so far.
    pub connections: usize,
    /// Context-window probes received (see [`crate::FakeLlm::window_probes`]).
    pub window_probes: usize,
    /// `GET /props` answers as llama.cpp with this `n_ctx` (see
    /// [`crate::FakeLlm::report_window`]); `None`: 404, as the hosted APIs.
    pub report_window: Option<u64>,
    /// How long a window probe is held before its answer (see
    /// [`crate::FakeLlm::hold_window_probes`]).
    pub probe_hold: Option<Duration>,
    /// Every answer sent whole (see [`crate::FakeLlm::answered`]).
    pub answered: Vec<crate::Answered>,
}

#[derive(Debug, Default)]
pub(crate) struct Shared {
    state: Mutex<State>,
}

impl Shared {
    /// Locks the state; a panic elsewhere must not make the fake unusable.
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Serves the requests of one connection, one after another, until the client closes it,
/// asks to, or an answer ends it (a cut or stalled stream).
pub(crate) async fn handle(shared: Arc<Shared>, stream: TcpStream) {
    let mut conn = http::Conn::new(stream);
    while let Some(request) = conn.next_request().await {
        let keep_alive = request.keep_alive;
        let plan = decide(&shared, request);
        // A held probe keeps its connection, as a busy server does; the client times out.
        if let Plan::Probe { hold, code, body } = plan {
            tokio::time::sleep(hold).await;
            match http::write_json(&mut conn.stream, code, &[], &body).await {
                Ok(()) if keep_alive => continue,
                _ => return,
            }
        }
        match execute(&mut conn.stream, plan).await {
            Ok(Next::Request) if keep_alive => {}
            Ok(_) => {
                let _ = conn.stream.shutdown().await;
                return;
            }
            Err(_) => return,
        }
    }
}

/// What becomes of a connection after an answer.
enum Next {
    /// The answer was complete: the connection can carry another request.
    Request,
    /// The answer broke it off (a cut body, a stall the client gave up on): close.
    Close,
}

/// What to send back, decided under the lock.
enum Plan {
    /// A refusal (not a provider endpoint, an error in the provider's shape): its status and
    /// JSON body.
    Json(u16, Value),
    /// A scripted reply (possibly a fault).
    Reply(ReplyPlan),
    /// A context-window probe's answer, sent after `hold`.
    Probe {
        hold: Duration,
        code: u16,
        body: Value,
    },
}

/// The context window of every model unless a test sets another (the size `data/models.yml`
/// gives `fake/*`).
pub(crate) const DEFAULT_CONTEXT_WINDOW: u64 = 200_000;

/// The fake's token count of a request's prompt: the characters of its JSON system prompt
/// (`system`, `instructions`), messages (`messages`, `input`) and tools, divided by 4 (rounded up). Real tokenizers differ, which is the point:
/// a client must survive a provider that counts more than it estimated.
pub(crate) fn prompt_tokens(body: &Value) -> u64 {
    let chars: usize = ["system", "instructions", "messages", "input", "tools"]
        .iter()
        .filter_map(|k| body.get(*k))
        .map(|v| v.to_string().chars().count())
        .sum();
    (chars as u64).div_ceil(4)
}

/// The provider's refusal of a request whose prompt, or prompt plus `max_tokens`, is larger
/// than `window`, worded as the real API words it.
fn context_overflow(format: Format, body: &Value, window: u64) -> Option<String> {
    let prompt = prompt_tokens(body);
    let max = ["max_tokens", "max_completion_tokens", "max_output_tokens"]
        .iter()
        .find_map(|k| body.get(*k).and_then(Value::as_u64))
        .unwrap_or(0);
    match format {
        Format::Anthropic if prompt > window => Some(format!(
            "prompt is too long: {prompt} tokens > {window} maximum"
        )),
        Format::Anthropic if prompt + max > window => Some(format!(
            "input length and `max_tokens` exceed context limit: {prompt} + {max} > {window}, \
             decrease input length or `max_tokens` and try again"
        )),
        Format::OpenAi if prompt > window => Some(format!(
            "This model's maximum context length is {window} tokens. However, your messages \
             resulted in {prompt} tokens. Please reduce the length of the messages."
        )),
        Format::Responses if prompt + max > window => Some(format!(
            "Your input exceeds the context window of this model: {prompt} + {max} > {window}"
        )),
        Format::OpenAi if prompt + max > window => Some(format!(
            "This model's maximum context length is {window} tokens. However, you requested \
             {} tokens ({prompt} in the messages, {max} in the completion). Please reduce the \
             length of the messages or completion.",
            prompt + max
        )),
        _ => None,
    }
}

struct ReplyPlan {
    /// Where a whole answer is recorded.
    shared: Arc<Shared>,
    /// The request's number (1-based, as in violations).
    nth: usize,
    /// The client's `X-Client-Request-Id`, if it sent one.
    client_request_id: Option<String>,
    format: Format,
    stream: bool,
    include_usage: bool,
    /// Send no usage at all (see [`crate::FakeLlm::omit_usage`]).
    omit_usage: bool,
    model: String,
    reply: Reply,
    usage: Option<UsageSpec>,
    input_chars: usize,
    /// Anthropic extended thinking was on (a budget or adaptive): answers start with
    /// thinking blocks.
    thinking: bool,
    /// `thinking.display: omitted`: the thinking blocks come without their text.
    thinking_omitted: bool,
    /// The request carried `context_management`: the answer reports the edits applied.
    context_management: bool,
    /// What a Responses answer echoes of its request (default for the other formats).
    echo: Box<responses::Echo>,
}

/// The error body of `format` for `code`.
fn error_body(format: Format, code: u16, message: &str) -> Value {
    match format {
        Format::Anthropic => anthropic::error_body(code, message),
        Format::OpenAi | Format::Responses => openai::error_body(code, message),
    }
}

fn error(format: Format, code: u16, message: &str) -> Plan {
    Plan::Json(code, error_body(format, code, message))
}

/// The 404 of a path that is not a provider endpoint.
fn not_found(what: &str) -> Plan {
    let message = format!("fake-llm: no endpoint {what}");
    Plan::Json(
        404,
        serde_json::json!({"error": {"type": "not_found_error", "message": message}}),
    )
}

fn decide(shared: &Arc<Shared>, req: Request) -> Plan {
    let format = match (req.method.as_str(), req.path()) {
        ("POST", "/v1/messages/count_tokens") => return count_tokens(shared, req),
        ("POST", "/v1/messages") => Format::Anthropic,
        ("POST", "/v1/chat/completions") => Format::OpenAi,
        ("POST", "/v1/responses") => Format::Responses,
        // Pegasus asks a server on this machine for its context window (llama.cpp `/props`,
        // vLLM `/v1/models`, Ollama `/api/show`), and the fake listens on 127.0.0.1. It stands
        // in for the hosted APIs, which serve none of these: 404, as they answer, counted
        // apart (neither a request of the API nor a violation).
        // A test can make it answer `/props` as llama.cpp does, and hold every probe (a slow
        // or hung server).
        ("GET", "/props") | ("GET", "/v1/models") | ("POST", "/api/show") => {
            let mut st = shared.lock();
            st.window_probes += 1;
            let hold = st.probe_hold.unwrap_or_default();
            let (code, body) = match (req.path(), st.report_window) {
                ("/props", Some(n_ctx)) => (
                    200,
                    serde_json::json!({"default_generation_settings": {"n_ctx": n_ctx}, "total_slots": 1}),
                ),
                _ => match not_found(&format!("{} {}", req.method, req.target)) {
                    Plan::Json(code, body) => (code, body),
                    _ => (404, Value::Null),
                },
            };
            return Plan::Probe { hold, code, body };
        }
        (method, _) => {
            let what = format!("{method} {}", req.target);
            shared
                .lock()
                .violations
                .push(format!("request to unknown endpoint {what}"));
            return not_found(&what);
        }
    };

    let parsed: Result<Value, _> = serde_json::from_slice(&req.body);
    let body = match &parsed {
        Ok(v) => v.clone(),
        Err(_) => Value::String(String::from_utf8_lossy(&req.body).into_owned()),
    };
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);

    let mut st = shared.lock();
    st.requests.push(Recorded {
        format,
        path: req.target.clone(),
        headers: req.headers.clone(),
        body: body.clone(),
        stream,
        at: Instant::now(),
    });
    let nth = st.requests.len();

    if let Err(e) = parsed {
        let msg = format!("request body is not valid JSON: {e}");
        st.violations.push(format!("request #{nth}: {msg}"));
        return error(format, 400, &msg);
    }

    // The Responses API never answers without a key (the other formats keep the fake's
    // historical leniency unless a key is required).
    if format == Format::Responses {
        if let Some(refusal) = responses::unauthorized(&req.headers, st.api_key.as_deref()) {
            return Plan::Json(401, refusal);
        }
    }
    if let Some(key) = &st.api_key {
        let ok = match format {
            Format::Anthropic => anthropic::authorized(&req.headers, key),
            Format::OpenAi | Format::Responses => openai::authorized(&req.headers, key),
        };
        if !ok {
            let msg = match format {
                Format::Anthropic => "invalid x-api-key",
                Format::OpenAi | Format::Responses => "Incorrect API key provided.",
            };
            return error(format, 401, msg);
        }
    }

    let problems = match format {
        Format::Anthropic => {
            let mut problems = anthropic_request::check_headers(&req.headers);
            let betas = anthropic_request::betas(&req.headers);
            problems.extend(anthropic_request::check_fields(&body, &betas));
            problems.extend(validate::anthropic(&body));
            problems
        }
        Format::OpenAi => validate::openai(&body),
        Format::Responses => {
            // The API names the first problem only, with its parameter and code.
            let problems = responses_request::check(&body);
            if let Some(first) = problems.first() {
                for p in &problems {
                    st.violations.push(format!("request #{nth}: {}", p.message));
                }
                return Plan::Json(400, first.body());
            }
            Vec::new()
        }
    };
    if !problems.is_empty() {
        for p in &problems {
            st.violations.push(format!("request #{nth}: {p}"));
        }
        return error(format, 400, &problems.join("; "));
    }

    let known = match format {
        Format::Anthropic => body
            .get("model")
            .and_then(Value::as_str)
            .and_then(anthropic_request::known_model),
        Format::OpenAi | Format::Responses => None,
    };
    let window = st
        .context_window
        .or(known.map(|m| m.window))
        .unwrap_or(DEFAULT_CONTEXT_WINDOW);
    if let Some(message) = context_overflow(format, &body, window) {
        st.violations
            .push(format!("request #{nth}: context too long: {message}"));
        let body = match format {
            Format::Anthropic => anthropic::error_body(400, &message),
            Format::OpenAi => openai::context_error_body(&message),
            Format::Responses => responses::context_error_body(),
        };
        return Plan::Json(400, body);
    }

    let transcript = Transcript::from_body(format, &body);
    let model = body.get("model").and_then(Value::as_str);
    let client_request_id = req
        .headers
        .iter()
        .find(|(n, _)| n == "x-client-request-id")
        .map(|(_, v)| v.clone());
    let cx = MatchContext {
        format,
        model,
        nth,
        transcript: &transcript,
    };
    let omit_usage = st.omit_usage;
    let Some(counted) = st
        .rules
        .iter_mut()
        .find(|s| s.available() && s.rule.when.matches(&cx))
    else {
        let last = transcript.last_user_text().unwrap_or_default();
        st.violations
            .push(format!("unmatched request #{nth}: {last}"));
        return error(format, 500, NO_SCRIPTED_REPLY);
    };
    counted.used += 1;

    Plan::Reply(ReplyPlan {
        shared: shared.clone(),
        nth,
        client_request_id,
        format,
        stream,
        // A server that omits usage ignores `stream_options.include_usage`: no usage chunk.
        include_usage: !omit_usage
            && body
                .pointer("/stream_options/include_usage")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        omit_usage,
        model: model.unwrap_or_default().to_string(),
        reply: counted.rule.reply.clone(),
        usage: counted.rule.usage,
        input_chars: transcript.char_count(),
        thinking: format == Format::Anthropic
            && matches!(
                body.pointer("/thinking/type").and_then(Value::as_str),
                Some("enabled" | "adaptive")
            ),
        thinking_omitted: body.pointer("/thinking/display").and_then(Value::as_str)
            == Some("omitted"),
        context_management: format == Format::Anthropic && body.get("context_management").is_some(),
        echo: match format {
            Format::Responses => Box::new(responses::Echo::from_body(&body)),
            _ => Box::default(),
        },
    })
}

/// Anthropic's `POST /v1/messages/count_tokens`: the prompt's tokens as the fake counts them
/// ([`prompt_tokens`]), `{"input_tokens": N}`. As strict as the real one: the key, a JSON body
/// with `model` and `messages`, and none of the fields of a call only (`max_tokens`, `stream`:
/// "Extra inputs are not permitted").
fn count_tokens(shared: &Arc<Shared>, req: Request) -> Plan {
    let format = Format::Anthropic;
    let parsed: Result<Value, _> = serde_json::from_slice(&req.body);
    let mut st = shared.lock();
    st.requests.push(Recorded {
        format,
        path: req.target.clone(),
        headers: req.headers.clone(),
        body: parsed.as_ref().cloned().unwrap_or(Value::Null),
        stream: false,
        at: Instant::now(),
    });
    if let Some(key) = &st.api_key {
        if !anthropic::authorized(&req.headers, key) {
            return error(format, 401, "invalid x-api-key");
        }
    }
    let body = match parsed {
        Ok(v) => v,
        Err(e) => return error(format, 400, &format!("request body is not valid JSON: {e}")),
    };
    let mut problems = Vec::new();
    if !body.get("model").is_some_and(Value::is_string) {
        problems.push("model: Field required".to_string());
    }
    if !body.get("messages").is_some_and(Value::is_array) {
        problems.push("messages: Field required".to_string());
    }
    for extra in ["max_tokens", "stream"] {
        if body.get(extra).is_some() {
            problems.push(format!("{extra}: Extra inputs are not permitted"));
        }
    }
    if !problems.is_empty() {
        let nth = st.requests.len();
        for p in &problems {
            st.violations.push(format!("request #{nth}: {p}"));
        }
        return error(format, 400, &problems.join("; "));
    }
    Plan::Json(
        200,
        serde_json::json!({"input_tokens": prompt_tokens(&body)}),
    )
}

async fn execute(stream: &mut TcpStream, plan: Plan) -> io::Result<Next> {
    match plan {
        Plan::Json(code, body) => {
            http::write_json(stream, code, &[], &body).await?;
            Ok(Next::Request)
        }
        Plan::Reply(p) => {
            let reply = p.reply.clone();
            send_reply(stream, &p, reply, None).await
        }
        Plan::Probe { code, body, .. } => {
            http::write_json(stream, code, &[], &body).await?;
            Ok(Next::Request)
        }
    }
}

/// Starts a streamed answer: the head, then `events`.
async fn start_stream(stream: &mut TcpStream, events: &[SseEvent]) -> io::Result<()> {
    http::write_head(stream, 200, "text/event-stream", &[], Framing::Chunked).await?;
    for e in events {
        http::write_chunk(stream, e.to_wire().as_bytes()).await?;
    }
    Ok(())
}

type BoxFuture<'a> = Pin<Box<dyn Future<Output = io::Result<Next>> + Send + 'a>>;

/// Sends a reply; boxed because `Delay` recurses into its inner reply.
fn send_reply<'a>(
    stream: &'a mut TcpStream,
    p: &'a ReplyPlan,
    reply: Reply,
    gap: Option<Duration>,
) -> BoxFuture<'a> {
    Box::pin(async move {
        let answer = |text: Option<String>, tools: &[ToolCall]| {
            let mut a = Answer::new(p.format, &p.model, text, tools, p.usage, p.input_chars);
            if p.omit_usage {
                a = a.without_usage();
            }
            a.context_management = p.context_management;
            if p.thinking {
                a.with_thinking(p.thinking_omitted)
            } else {
                a
            }
        };
        let placeholder = || answer(Some(PLACEHOLDER_TEXT.to_string()), &[]);
        let done = Ok(Next::Request);
        match reply {
            Reply::Text(t) => send_answer(stream, p, &answer(Some(t), &[]), gap).await,
            Reply::Tools(tools) => send_answer(stream, p, &answer(None, &tools), gap).await,
            Reply::TextThenTools(t, tools) => {
                send_answer(stream, p, &answer(Some(t), &tools), gap).await
            }
            Reply::Fault(fault) => match fault {
                Fault::Status {
                    code,
                    message,
                    retry_after_s,
                } => {
                    let extra: Vec<_> = retry_after_s
                        .map(|s| ("retry-after", s.to_string()))
                        .into_iter()
                        .collect();
                    let body = error_body(p.format, code, &message);
                    http::write_json(stream, code, &extra, &body).await?;
                    done
                }
                Fault::Delay { ms, then } => {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    send_reply(stream, p, *then, gap).await
                }
                Fault::Paced { gap_ms, then } => {
                    send_reply(stream, p, *then, Some(Duration::from_millis(gap_ms))).await
                }
                Fault::Clock { deltas, gap_ms } => {
                    let a = answer(None, &[]).clock(deltas);
                    send_answer(stream, p, &a, Some(Duration::from_millis(gap_ms))).await
                }
                Fault::WrongUsage => {
                    let a = answer(Some(crate::WRONG_USAGE_TEXT.to_string()), &[]).without_usage();
                    send_answer(stream, p, &a, gap).await
                }
                Fault::Stall => {
                    http::hold_until_client_leaves(stream).await;
                    Ok(Next::Close)
                }
                Fault::StallStream => {
                    if p.stream {
                        let events = events(p, &placeholder());
                        start_stream(stream, &events[..events.len().min(3)]).await?;
                    }
                    http::hold_until_client_leaves(stream).await;
                    Ok(Next::Close)
                }
                Fault::CutStream => {
                    if p.stream {
                        let events = events(p, &placeholder());
                        start_stream(stream, &events[..events.len() / 2]).await?;
                    } else {
                        let body = json_body(p, &placeholder());
                        let half = &body.as_bytes()[..body.len() / 2];
                        http::write_head(
                            stream,
                            200,
                            "application/json",
                            &[],
                            Framing::Length(body.len()),
                        )
                        .await?;
                        stream.write_all(half).await?;
                        stream.flush().await?;
                    }
                    // Close without finishing the body.
                    Ok(Next::Close)
                }
                Fault::MalformedJson => {
                    let a = placeholder();
                    if p.stream {
                        // The first event, then one that is not JSON.
                        let mut events = events(p, &a);
                        events.truncate(1);
                        events.push(match p.format {
                            Format::Anthropic => anthropic::malformed_event(),
                            Format::OpenAi => openai::malformed_event(),
                            Format::Responses => responses::malformed_event(),
                        });
                        start_stream(stream, &events).await?;
                        http::finish_chunks(stream).await?;
                    } else {
                        let body = match p.format {
                            Format::Anthropic => anthropic::malformed_body(&a),
                            Format::OpenAi => openai::malformed_body(&a),
                            Format::Responses => responses::malformed_body(&a, &p.echo),
                        };
                        http::write_full(stream, 200, "application/json", &[], body.as_bytes())
                            .await?;
                    }
                    done
                }
            },
        }
    })
}

fn events(p: &ReplyPlan, a: &Answer) -> Vec<SseEvent> {
    match p.format {
        Format::Anthropic => anthropic::events(a),
        Format::OpenAi => openai::events(a, p.include_usage),
        Format::Responses => responses::events(a, &p.echo),
    }
}

fn json_body(p: &ReplyPlan, a: &Answer) -> String {
    match p.format {
        Format::Anthropic => anthropic::message(a).to_string(),
        Format::OpenAi => openai::completion(a).to_string(),
        Format::Responses => responses::body(a, &p.echo).to_string(),
    }
}

/// Sends a well-formed answer, streamed or not as the client asked; a streamed one waits `gap`
/// between its events (a slow model).
async fn send_answer(
    stream: &mut TcpStream,
    p: &ReplyPlan,
    a: &Answer,
    gap: Option<Duration>,
) -> io::Result<Next> {
    // From its first byte the answer is billed, as a provider bills it (and as Pegasus meters
    // it): recorded before it goes out.
    p.shared.lock().answered.push(crate::Answered {
        request_id: a.id.clone(),
        client_request_id: p.client_request_id.clone(),
        request: p.nth,
        at: Instant::now(),
    });
    if p.stream {
        start_stream(stream, &[]).await?;
        for (i, e) in events(p, a).into_iter().enumerate() {
            if let (Some(gap), true) = (gap, i > 0) {
                tokio::time::sleep(gap).await;
            }
            let mut wire = e.to_wire();
            if a.clock {
                wire = crate::answer::stamp(wire, Some(1));
            }
            http::write_chunk(stream, wire.as_bytes()).await?;
        }
        http::finish_chunks(stream).await?;
    } else {
        let mut body = json_body(p, a);
        if a.clock {
            body = crate::answer::stamp(body, None);
        }
        http::write_full(stream, 200, "application/json", &[], body.as_bytes()).await?;
    }
    Ok(Next::Request)
}
