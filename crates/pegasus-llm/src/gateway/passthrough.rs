//! The passthrough path of the gateway (DESIGN.md §18): a harness's own request (Anthropic
//! Messages, OpenAI Responses), relayed by its worker, forwarded to the project's provider as
//! it came (only `model` is mapped; the real key added), its answer streamed back as it
//! arrives, and metered like every other call.
//!
//! What it shares with [`Gateway::chat`]: the budgets (checked first, then a reservation
//! admitted after the queue wait), the semaphore and the provider's rate gate, the call
//! journal, retries with backoff (only before a byte of the answer went to the harness), the
//! ledger line from the answer's usage or estimated. What differs is the reservation (see
//! [`reserved_output`]) and that the answer is not parsed into blocks: its bytes go back
//! unchanged, and only its usage, id, model and text are read on the way.

use std::time::Duration;

use futures_util::StreamExt;
use pegasus_proto::llm::{tokens_of_bytes, CallMeta, LlmError};
use pegasus_proto::worker::{RelayApi, RelayPart, RelayRequest};
use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;

use super::{Abandon, Gateway, NotAdmitted, Reservation};
use crate::anthropic;
use crate::journal;
use crate::provider::{self, Kind, Target};
use crate::reply::{Progress, SeenUsage};
use crate::retry::{self, Cause};
use crate::sse::{self, Deltas, StreamParser};

/// The most output tokens a harness's call reserves, whatever its `max_tokens` says
/// (DESIGN.md §18): Claude Code asks for 128,000 on every call, which at full price alone would
/// exceed a small task budget although a call rarely writes more than a few thousand.
pub const RELAY_OUTPUT_RESERVE: u32 = 8192;

/// The output tokens a harness's call reserves: its `max_tokens` (`max_output_tokens` for
/// OpenAI Responses), capped by the model's own output limit and by [`RELAY_OUTPUT_RESERVE`];
/// [`RELAY_OUTPUT_RESERVE`] when the request sets none.
pub fn reserved_output(body: &Value, model_max_output: u32) -> u32 {
    let asked = ["max_tokens", "max_output_tokens"]
        .iter()
        .find_map(|k| body.get(*k).and_then(Value::as_u64))
        .map_or(RELAY_OUTPUT_RESERVE, |n| {
            u32::try_from(n).unwrap_or(u32::MAX)
        });
    asked.clamp(1, model_max_output.clamp(1, RELAY_OUTPUT_RESERVE))
}

/// Response headers the harness sees besides the body.
const ANSWER_HEADERS: &[&str] = &["content-type", "request-id", "x-request-id", "retry-after"];

/// What a relayed request is, as the gateway treats it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    /// A model call: budgets, reservation, ledger line.
    Metered,
    /// `count_tokens`: free at the provider; forwarded with the key, not metered.
    Free,
    /// `GET /v1/models`: no model to map; forwarded with the key.
    List,
}

/// A call pegasusd refuses itself, before anything is sent: the status the harness gets (in
/// its API's error shape), the message, and the typed reason its worker keeps.
struct Refusal {
    status: u16,
    message: String,
    error: LlmError,
}

impl Refusal {
    fn new(status: u16, error: LlmError) -> Refusal {
        Refusal {
            status,
            message: format!("Pegasus: {error}"),
            error,
        }
    }
}

/// Where the answer's parts go, in order.
struct Answer<'a> {
    out: &'a UnboundedSender<RelayPart>,
    api: RelayApi,
}

impl Answer<'_> {
    fn head(&self, status: u16, headers: Vec<(String, String)>) {
        let _ = self.out.send(RelayPart::Head { status, headers });
    }

    fn chunk(&self, bytes: &[u8]) {
        if !bytes.is_empty() {
            let _ = self.out.send(RelayPart::Chunk(bytes.to_vec()));
        }
    }

    fn end(&self, refusal: Option<LlmError>) {
        let _ = self.out.send(RelayPart::End { refusal });
    }

    fn cut(&self, why: String) {
        let _ = self.out.send(RelayPart::Cut(why));
    }

    /// A whole answer pegasusd makes itself: the API's error shape, and the typed reason.
    fn refuse(&self, refusal: Refusal) {
        for part in self
            .api
            .refusal(refusal.status, &refusal.message, refusal.error)
        {
            let _ = self.out.send(part);
        }
    }
}

impl Gateway {
    /// Relays one request of a harness of `project` (DESIGN.md §18): every part of its answer
    /// (head, chunks, end) goes to `out` in order; the text of a streamed answer to `deltas`
    /// as it arrives. Returns what the call cost, when it was metered. Dropping the future
    /// cancels the call upstream (what arrived is metered, as for any call).
    pub async fn relay(
        &self,
        project: &str,
        request: RelayRequest,
        out: &UnboundedSender<RelayPart>,
        deltas: Option<UnboundedSender<String>>,
    ) -> Option<f64> {
        let answer = Answer {
            out,
            api: request.api,
        };
        let deltas = deltas.map(Deltas::new);
        match self
            .relay_call(project, &request, &answer, deltas.as_ref())
            .await
        {
            Ok(cost) => cost,
            Err(refusal) => {
                tracing::info!(project, path = %request.path, error = %refusal.error,
                    "a harness's call was refused");
                answer.refuse(refusal);
                None
            }
        }
    }

    /// [`Gateway::relay`] up to a refusal made before anything was sent (which the caller
    /// answers).
    async fn relay_call(
        &self,
        project: &str,
        request: &RelayRequest,
        answer: &Answer<'_>,
        deltas: Option<&Deltas>,
    ) -> Result<Option<f64>, Refusal> {
        let route = route(request)?;
        let body: Value = match route {
            Route::List => Value::Null,
            _ => serde_json::from_str(&request.body).map_err(|e| {
                Refusal::new(400, LlmError::Other(format!("the body is not JSON: {e}")))
            })?,
        };
        let target = self.relay_target(project, request.api, route, &body)?;
        let key = provider::credential(&target).map_err(|e| Refusal::new(400, e))?;
        let meta = CallMeta {
            project: Some(project.to_string()),
            task: request.task.clone(),
            role: request.role.clone(),
        };
        if route != Route::Metered {
            self.relay_free(&target, key.as_deref(), request, answer)
                .await;
            return Ok(None);
        }
        let inner = &*self.inner;
        let mut limits = Some(
            self.check_budgets(&meta)
                .map_err(|e| admission_refusal(request.api, e))?,
        );
        let info = self.model_info(&target.full);
        let output = reserved_output(&body, info.max_output_tokens);
        let input_estimate = journal::estimate_input_tokens(&body);
        let timeout = Duration::from_secs(inner.config.llm.timeout_s.max(1));
        let base = Duration::from_millis(inner.config.llm.retry_base_ms);
        let attempts = inner.config.llm.max_retries.saturating_add(1);
        let mut retry_after = None;
        for n in 0..attempts {
            if n > 0 {
                tokio::time::sleep(retry::retry_wait(base, n - 1, retry_after)).await;
            }
            let permit = self
                .permit(&target.provider)
                .await
                .map_err(|e| Refusal::new(500, e))?;
            let limits = limits.take().unwrap_or_else(|| self.limits(&meta));
            let reservation = self
                .admit(&meta, &limits, &target, &body, output, input_estimate, None)
                .map_err(|e| admission_refusal(request.api, e))?;
            if let Err(e) = self.journal_sent(&reservation.call).await {
                reservation.abandon(Abandon::NotJournaled).await;
                return Err(Refusal::new(500, e));
            }
            let last = n + 1 == attempts;
            let sent = self
                .send_relayed(
                    &target,
                    key.as_deref(),
                    &reservation.call.call,
                    request,
                    timeout,
                )
                .await;
            let response = match sent {
                Ok(r) if r.status().is_success() => r,
                Ok(r) if !last && retry::is_retryable_status(r.status().as_u16()) => {
                    let status = r.status().as_u16();
                    retry_after = header(&r, "retry-after")
                        .and_then(|v| retry::parse_retry_after(&v, std::time::SystemTime::now()));
                    if let Some(wait) = retry_after {
                        self.hold_provider(&target.provider, wait);
                    }
                    drop(permit);
                    reservation.abandon(Abandon::Failed).await;
                    tracing::warn!(model = %target.full, attempt = n + 1, of = attempts,
                        status, "a harness's call failed; retrying");
                    continue;
                }
                // Not retried (or the last attempt): the provider's own answer, as it is.
                Ok(r) => {
                    let status = r.status().as_u16();
                    forward_unmetered(r, answer, timeout).await;
                    drop(permit);
                    reservation.abandon(Abandon::Failed).await;
                    tracing::info!(model = %target.full, status, "the provider refused a harness's call");
                    return Ok(None);
                }
                Err((cause, message)) => {
                    drop(permit);
                    reservation.abandon(Abandon::Failed).await;
                    if last {
                        let error = LlmError::Exhausted {
                            provider: target.provider.clone(),
                            attempts,
                            last: message,
                        };
                        let status = if cause == Cause::Timeout { 504 } else { 502 };
                        return Err(Refusal::new(status, error));
                    }
                    tracing::warn!(model = %target.full, attempt = n + 1, of = attempts,
                        error = %message, "a harness's call failed; retrying");
                    retry_after = None;
                    continue;
                }
            };
            reservation.progress.answered();
            let cost = self
                .stream_back(
                    &target,
                    request.api,
                    response,
                    reservation,
                    answer,
                    deltas,
                    timeout,
                )
                .await;
            drop(permit);
            return Ok(cost);
        }
        Err(Refusal::new(
            502,
            LlmError::Exhausted {
                provider: target.provider.clone(),
                attempts,
                last: String::new(),
            },
        ))
    }

    /// The provider and model a harness's request goes to: the project's provider (from its
    /// PROJECT.md `model:`, else `default_model`), which must speak `api`, and the model the
    /// request names there, which must be priced (or unpriced models allowed).
    fn relay_target(
        &self,
        project: &str,
        api: RelayApi,
        route: Route,
        body: &Value,
    ) -> Result<Target, Refusal> {
        let config = &self.inner.config;
        let project_model =
            self.resolve_model(&self.inner.projects.model(project).unwrap_or_default());
        let project_target =
            provider::resolve(config, &project_model).map_err(|e| Refusal::new(400, e))?;
        let (kind, wants) = match api {
            RelayApi::Anthropic => (Kind::Anthropic, "anthropic"),
            RelayApi::OpenAi => (Kind::OpenAi, "openai"),
        };
        if project_target.kind != kind {
            return Err(Refusal::new(
                400,
                LlmError::Other(format!(
                    "project {project}'s model {project_model} is served by provider {}, which \
                     is not of kind `{wants}`, the API this harness speaks: set the project's \
                     `model:` in PROJECT.md (or `default_model` in config.yml) to a model of a \
                     provider of kind `{wants}`",
                    project_target.provider
                )),
            ));
        }
        if route == Route::List {
            return Ok(project_target);
        }
        let asked = body
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or("")
            .trim();
        if asked.is_empty() {
            return Err(Refusal::new(
                400,
                LlmError::Other("model: field required".into()),
            ));
        }
        let full = format!("{}/{asked}", project_target.provider);
        let target = provider::resolve(config, &full).map_err(|e| Refusal::new(400, e))?;
        // 400, not the 404 of a model the API does not serve: Claude Code replaces a 404's
        // message with its own ("may not exist"), and this one says what to set.
        super::priced_or_allowed(config, &self.inner.prices, &target)
            .map_err(|e| Refusal::new(400, e))?;
        Ok(target)
    }

    /// Sends one attempt of a relayed request: the body as the harness sent it, its relayed
    /// headers, the real key. The error is the cause and one line.
    async fn send_relayed(
        &self,
        target: &Target,
        key: Option<&str>,
        call: &str,
        request: &RelayRequest,
        timeout: Duration,
    ) -> Result<reqwest::Response, (Cause, String)> {
        let url = upstream_url(target, &request.path);
        let http = &self.inner.http;
        let mut builder = match request.method.as_str() {
            "GET" => http.get(url),
            _ => http
                .post(url)
                .header("content-type", "application/json")
                .body(request.body.clone()),
        };
        for (name, value) in &request.headers {
            builder = builder.header(name.as_str(), value.as_str());
        }
        if target.kind == Kind::Anthropic
            && !request
                .headers
                .iter()
                .any(|(n, _)| n == "anthropic-version")
        {
            builder = builder.header("anthropic-version", anthropic::API_VERSION);
        }
        // The call id travels with a metered call, as on the normal path (`Gateway::attempt`).
        let mut builder = provider::authorize(builder, target.kind, key);
        if !call.is_empty() {
            builder = builder.header("x-client-request-id", call);
        }
        match tokio::time::timeout(timeout, builder.send()).await {
            Err(_) => Err((
                Cause::Timeout,
                format!("no answer within {} s", timeout.as_secs_f64()),
            )),
            Ok(Err(e)) => {
                let cause = if e.is_connect() {
                    Cause::Connect
                } else {
                    Cause::Broken
                };
                Err((cause, e.to_string()))
            }
            Ok(Ok(r)) => Ok(r),
        }
    }

    /// A request that costs nothing (`count_tokens`, the model list): one attempt, its answer
    /// forwarded as it is.
    async fn relay_free(
        &self,
        target: &Target,
        key: Option<&str>,
        request: &RelayRequest,
        answer: &Answer<'_>,
    ) {
        let timeout = Duration::from_secs(self.inner.config.llm.timeout_s.max(1));
        match self.send_relayed(target, key, "", request, timeout).await {
            Ok(response) => forward_unmetered(response, answer, timeout).await,
            Err((_, message)) => answer.refuse(Refusal::new(
                502,
                LlmError::Exhausted {
                    provider: target.provider.clone(),
                    attempts: 1,
                    last: message,
                },
            )),
        }
    }

    /// Streams a 200 answer back to the harness as its bytes arrive, reading its usage, id,
    /// model and text on the way, and settles the reservation with its ledger line (from the
    /// usage, else estimated). A stream cut or stalled is cut for the harness too, and metered
    /// from what arrived. Its bytes pass through without being held, so no size limit applies
    /// (a 128,000-token answer's stream is far beyond `llm.max_response_bytes`); what is held
    /// to read it (a plain body, an unfinished event) is bounded by that limit.
    #[allow(clippy::too_many_arguments)] // one answer's whole context; a struct would only rename it
    async fn stream_back(
        &self,
        target: &Target,
        api: RelayApi,
        response: reqwest::Response,
        reservation: Reservation,
        answer: &Answer<'_>,
        deltas: Option<&Deltas>,
        idle: Duration,
    ) -> Option<f64> {
        answer.head(response.status().as_u16(), answer_headers(&response));
        let is_sse =
            header(&response, "content-type").is_some_and(|v| v.starts_with("text/event-stream"));
        let limit = self.inner.config.llm.max_response_bytes as usize;
        let mut meter = Meter::new(api, is_sse, limit);
        let mut body = response.bytes_stream();
        let broke = loop {
            let chunk = match tokio::time::timeout(idle, body.next()).await {
                Err(_) => break Some(format!("stream stalled: nothing for {} s", idle.as_secs())),
                Ok(None) => break None,
                Ok(Some(Err(e))) => break Some(format!("stream broken: {e}")),
                Ok(Some(Ok(chunk))) => chunk,
            };
            answer.chunk(&chunk);
            meter.feed(&chunk, deltas, &reservation.progress);
        };
        if let Some(why) = broke {
            tracing::warn!(model = %target.full, "a harness's answer broke off: {why}");
            answer.cut(why);
            reservation.abandon(Abandon::Failed).await;
            return None;
        }
        let (seen, received, id, model) = meter.finish();
        let (_, cost) = self
            .meter(
                target,
                &seen,
                tokens_of_bytes(received as usize),
                &model,
                &id,
                reservation,
            )
            .await;
        answer.end(None);
        cost
    }
}

/// Which requests are relayed, and how: a path the API does not have is refused (the worker's
/// endpoint already answers only these).
fn route(request: &RelayRequest) -> Result<Route, Refusal> {
    let path = request.path.split('?').next().unwrap_or("");
    match (request.api, request.method.as_str(), path) {
        (RelayApi::Anthropic, "POST", "/v1/messages") => Ok(Route::Metered),
        (RelayApi::Anthropic, "POST", "/v1/messages/count_tokens") => Ok(Route::Free),
        (RelayApi::OpenAi, "POST", "/v1/responses") => Ok(Route::Metered),
        (RelayApi::OpenAi, "GET", "/v1/models") => Ok(Route::List),
        (_, method, _) => Err(Refusal::new(
            404,
            LlmError::Other(format!("no endpoint {method} {}", request.path)),
        )),
    }
}

/// The provider's URL of a relayed path: Anthropic's base URL is the host (`/v1/...` is
/// appended as it came); an OpenAI base URL ends with its `/v1`, so the path's is dropped.
fn upstream_url(target: &Target, path: &str) -> String {
    match target.kind {
        Kind::Anthropic => format!("{}{path}", target.base_url),
        Kind::OpenAi => {
            let rest = path.strip_prefix("/v1").unwrap_or(path);
            format!("{}{rest}", target.base_url)
        }
    }
}

/// An admission's refusal as the harness gets it. A budget refusal says which budget and how
/// to raise it, with the status of the API's own "no money left" (OpenAI: 429
/// `insufficient_quota`, which Codex does not retry; Anthropic: 400, as for a credit balance
/// too low, which Claude Code does not retry). Any other is the model's (unpriced: 400, whose
/// message the harness shows as it is).
fn admission_refusal(api: RelayApi, refused: NotAdmitted) -> Refusal {
    let (how, error) = match refused {
        NotAdmitted::Budget(r) => (r.cap.how_to_raise(), r.error),
        NotAdmitted::Unpriced(e) => return Refusal::new(400, e),
    };
    Refusal {
        status: api.no_money_status(),
        message: format!("Pegasus: {error} ({how})"),
        error,
    }
}

/// The value of a response header, as text.
fn header(response: &reqwest::Response, name: &str) -> Option<String> {
    response
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// The headers of an answer the harness sees ([`ANSWER_HEADERS`]).
fn answer_headers(response: &reqwest::Response) -> Vec<(String, String)> {
    ANSWER_HEADERS
        .iter()
        .filter_map(|name| header(response, name).map(|v| (name.to_string(), v)))
        .collect()
}

/// Forwards an answer that is not metered (a refusal of the provider's, a free call) as it is.
async fn forward_unmetered(response: reqwest::Response, answer: &Answer<'_>, idle: Duration) {
    answer.head(response.status().as_u16(), answer_headers(&response));
    let mut body = response.bytes_stream();
    loop {
        match tokio::time::timeout(idle, body.next()).await {
            Ok(Some(Ok(chunk))) => answer.chunk(&chunk),
            Ok(None) => return answer.end(None),
            Ok(Some(Err(e))) => return answer.cut(format!("stream broken: {e}")),
            Err(_) => return answer.cut("stream stalled".into()),
        }
    }
}

/// Reads an answer's usage, id, model and text as its bytes go by, without holding it: a
/// stream's events are parsed as they complete, a plain JSON body is kept (up to `limit`
/// bytes; a larger one is metered as estimated from its size) and read at its end.
enum Meter {
    /// Server-sent events, split into events as the bytes come.
    Sse {
        parser: Box<dyn StreamParser + Send>,
        lines: SseLines,
    },
    /// A plain JSON body.
    Json {
        api: RelayApi,
        bytes: Vec<u8>,
        /// Bytes of the whole body.
        total: u64,
        limit: usize,
    },
}

impl Meter {
    fn new(api: RelayApi, sse: bool, limit: usize) -> Meter {
        match sse {
            true => Meter::Sse {
                parser: match api {
                    RelayApi::Anthropic => Box::<anthropic::Stream>::default(),
                    RelayApi::OpenAi => Box::<ResponsesStream>::default(),
                },
                lines: SseLines {
                    limit,
                    ..SseLines::default()
                },
            },
            false => Meter::Json {
                api,
                bytes: Vec::new(),
                total: 0,
                limit,
            },
        }
    }

    /// Takes the next bytes of the answer.
    fn feed(&mut self, chunk: &[u8], deltas: Option<&Deltas>, progress: &Progress) {
        match self {
            Meter::Sse { parser, lines } => {
                for (name, data) in lines.push(chunk) {
                    // A passthrough reads what it can; the harness judges the stream itself.
                    if let Err(e) = parser.event(&name, &data, deltas) {
                        tracing::debug!("a harness's stream event not read: {e}");
                    }
                }
                let (bytes, usage, id, model) = parser.progress();
                progress.update(bytes, usage, id, model);
            }
            Meter::Json {
                bytes,
                total,
                limit,
                ..
            } => {
                *total += chunk.len() as u64;
                if bytes.len() + chunk.len() <= *limit {
                    bytes.extend_from_slice(chunk);
                }
                progress.update(*total, SeenUsage::default(), "", "");
            }
        }
    }

    /// The usage reported, the bytes of answer received (for an estimate), the answer's id
    /// and the model the provider says it used.
    fn finish(self) -> (SeenUsage, u64, String, String) {
        match self {
            Meter::Sse { parser, .. } => {
                let (bytes, usage, id, model) = parser.progress();
                (usage, bytes, id.to_string(), model.to_string())
            }
            Meter::Json {
                api, bytes, total, ..
            } => {
                // A body past the limit was not kept whole: it does not parse, and is estimated.
                let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                let text = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                let usage = match api {
                    RelayApi::Anthropic => anthropic::seen_usage(v.get("usage")),
                    RelayApi::OpenAi => responses_usage(v.get("usage")),
                };
                (usage, total, text("id"), text("model"))
            }
        }
    }
}

/// Splits a byte stream into server-sent events (`event:` and `data:` lines, a blank line
/// ends one), keeping only the unfinished event between chunks; one longer than `limit` bytes
/// is skipped (the harness still gets it: only its metering is lost, and estimated).
#[derive(Default)]
struct SseLines {
    partial: Vec<u8>,
    event: String,
    data: Vec<String>,
    /// Bytes of `data` held.
    held: usize,
    limit: usize,
    /// The current event passed `limit`: its lines are dropped up to its end.
    skipping: bool,
}

impl SseLines {
    /// The events `chunk` completes, as (name, data); `message` when the event has no name.
    fn push(&mut self, chunk: &[u8]) -> Vec<(String, String)> {
        self.partial.extend_from_slice(chunk);
        let mut done = Vec::new();
        while let Some(end) = self.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                if std::mem::take(&mut self.skipping) {
                    self.data.clear();
                } else if !self.data.is_empty() {
                    let name = match std::mem::take(&mut self.event) {
                        e if e.is_empty() => "message".to_string(),
                        e => e,
                    };
                    done.push((name, std::mem::take(&mut self.data).join("\n")));
                }
                self.event.clear();
                self.held = 0;
            } else if self.skipping {
                // The rest of an event past the limit.
                continue;
            } else if let Some(v) = line.strip_prefix("event:") {
                self.event = v.trim().to_string();
            } else if let Some(v) = line.strip_prefix("data:") {
                self.held += v.len();
                if self.held > self.limit {
                    self.skipping = true;
                    self.data.clear();
                } else {
                    self.data.push(v.strip_prefix(' ').unwrap_or(v).to_string());
                }
            }
        }
        if self.partial.len() > self.limit {
            // A line without its end past the limit: dropped, and so is its event.
            self.partial.clear();
            self.skipping = true;
        }
        done
    }
}

/// An OpenAI Responses stream as metering reads it: the response's id and model
/// (`response.created`), the text deltas, and the usage of its last event
/// (`response.completed`, `response.incomplete` or `response.failed`).
#[derive(Default)]
struct ResponsesStream {
    id: String,
    model: String,
    usage: SeenUsage,
    received: u64,
}

impl StreamParser for ResponsesStream {
    fn event(&mut self, _name: &str, data: &str, deltas: Option<&Deltas>) -> Result<bool, String> {
        let v: Value =
            serde_json::from_str(data).map_err(|e| format!("unreadable stream event: {e}"))?;
        let kind = v.get("type").and_then(Value::as_str).unwrap_or("");
        if let Some(r) = v.get("response") {
            if let Some(id) = r.get("id").and_then(Value::as_str) {
                self.id = id.to_string();
            }
            if let Some(model) = r.get("model").and_then(Value::as_str) {
                self.model = model.to_string();
            }
            if r.get("usage").is_some_and(Value::is_object) {
                self.usage = responses_usage(r.get("usage"));
            }
        }
        if let Some(piece) = v.get("delta").and_then(Value::as_str) {
            self.received += piece.len() as u64;
            if kind == "response.output_text.delta" {
                sse::forward(deltas, piece);
            }
        }
        Ok(matches!(
            kind,
            "response.completed" | "response.incomplete" | "response.failed"
        ))
    }

    fn progress(&self) -> (u64, SeenUsage, &str, &str) {
        (self.received, self.usage, &self.id, &self.model)
    }

    fn finish(self: Box<Self>) -> Result<crate::reply::ProviderReply, String> {
        Err("a relayed stream is metered, not assembled".into())
    }
}

/// The usage an OpenAI Responses `usage` object reports, normalised to Anthropic's meaning
/// as the Chat Completions reader does: its `input_tokens` include the cached ones
/// (`input_tokens_details.cached_tokens`), which are split out.
fn responses_usage(usage: Option<&Value>) -> SeenUsage {
    let Some(u) = usage else {
        return SeenUsage::default();
    };
    let count = |path: &str| u.pointer(path).and_then(Value::as_u64);
    let cached = count("/input_tokens_details/cached_tokens").unwrap_or(0);
    SeenUsage {
        input: count("/input_tokens").map(|i| i.saturating_sub(cached)),
        output: count("/output_tokens"),
        cache_read: cached,
        cache_write: 0,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    /// The reservation rule (DESIGN.md §18): the request's own limit, capped by the model's
    /// output limit and by [`RELAY_OUTPUT_RESERVE`]; the cap when the request sets none.
    #[test]
    fn the_output_reserved_is_bounded() {
        let table = [
            (json!({"max_tokens": 128000}), 64_000, RELAY_OUTPUT_RESERVE),
            (json!({"max_tokens": 1000}), 64_000, 1000),
            (json!({"max_tokens": 128000}), 4096, 4096),
            (json!({"max_output_tokens": 2000}), 64_000, 2000),
            (json!({}), 64_000, RELAY_OUTPUT_RESERVE),
            (json!({"max_tokens": 0}), 64_000, 1),
            (
                json!({"max_tokens": u64::MAX}),
                64_000,
                RELAY_OUTPUT_RESERVE,
            ),
        ];
        for (body, model_max, want) in table {
            assert_eq!(
                reserved_output(&body, model_max),
                want,
                "{body} / {model_max}"
            );
        }
    }

    #[test]
    fn server_sent_events_are_split_across_chunks() {
        let mut lines = SseLines {
            limit: 64,
            ..SseLines::default()
        };
        assert!(lines
            .push(b"event: message_start\r\ndata: {\"a\"")
            .is_empty());
        assert_eq!(
            lines.push(b":1}\r\n\r\ndata: x\n"),
            vec![("message_start".to_string(), "{\"a\":1}".to_string())]
        );
        assert_eq!(
            lines.push(b"data: y\n\n: a comment\n\n"),
            vec![("message".to_string(), "x\ny".to_string())]
        );
        // An event past the limit is skipped whole; the next one is read.
        let long = format!("data: {}\n", "z".repeat(100));
        assert!(lines.push(long.as_bytes()).is_empty());
        assert_eq!(
            lines.push(b"data: tail\n\nevent: e\ndata: ok\n\n"),
            vec![("e".to_string(), "ok".to_string())]
        );
    }

    /// An OpenAI Responses stream as Codex gets it: the id and model, the text, and the usage
    /// of `response.completed` with its cached tokens split out.
    #[test]
    fn a_responses_stream_is_metered_from_its_completed_usage() {
        let mut p = ResponsesStream::default();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let deltas = Deltas::new(tx);
        let events = [
            json!({"type": "response.created", "response": {"id": "resp_1", "model": "gpt-5", "usage": null}}),
            json!({"type": "response.output_text.delta", "delta": "Hel"}),
            json!({"type": "response.function_call_arguments.delta", "delta": "{\"a\":1}"}),
            json!({"type": "response.output_text.delta", "delta": "lo"}),
            json!({"type": "response.completed", "response": {"id": "resp_1", "model": "gpt-5",
                "usage": {"input_tokens": 1000, "input_tokens_details": {"cached_tokens": 600},
                          "output_tokens": 50, "output_tokens_details": {"reasoning_tokens": 20}}}}),
        ];
        let mut done = false;
        for e in &events {
            done = p.event("message", &e.to_string(), Some(&deltas)).unwrap();
        }
        assert!(done, "response.completed ends the stream");
        let (bytes, usage, id, model) = p.progress();
        assert_eq!((id, model), ("resp_1", "gpt-5"));
        assert_eq!(bytes, 3 + 7 + 2);
        assert_eq!(
            usage,
            SeenUsage {
                input: Some(400),
                output: Some(50),
                cache_read: 600,
                cache_write: 0,
            }
        );
        let mut text = String::new();
        while let Ok(d) = rx.try_recv() {
            text.push_str(&d);
        }
        assert_eq!(text, "Hello");
    }

    #[test]
    fn paths_map_onto_the_provider_base_url() {
        let target = |kind, base: &str| Target {
            provider: "p".into(),
            model: "m".into(),
            full: "p/m".into(),
            kind,
            base_url: base.into(),
            api_key_env: None,
            local: false,
        };
        assert_eq!(
            upstream_url(
                &target(Kind::Anthropic, "https://api.anthropic.com"),
                "/v1/messages?beta=true"
            ),
            "https://api.anthropic.com/v1/messages?beta=true"
        );
        assert_eq!(
            upstream_url(
                &target(Kind::OpenAi, "https://api.openai.com/v1"),
                "/v1/responses"
            ),
            "https://api.openai.com/v1/responses"
        );
    }
}
