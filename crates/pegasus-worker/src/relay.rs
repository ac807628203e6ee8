//! The model endpoint of a harness (Claude Code, Codex; DESIGN.md §18): a loopback HTTP
//! server the worker runs for one harness spawn, with a credential of its own, which relays
//! every request over the worker's link to pegasusd and streams the answer back as it arrives.
//!
//! pegasusd does the rest (the budgets, the real key, the provider, the ledger): the endpoint
//! only checks the credential, reads the body, sends it as one [`FromWorker::RelayRequest`] and
//! writes the [`RelayPart`]s that answer it. The harness never sees a provider key, and it can
//! only spend for the project and task the endpoint was started for.
//!
//! Use: [`Relay::start`] when the harness is spawned; give it [`RelayEndpoint::base_url`] and
//! [`RelayEndpoint::key`] (Claude Code: `ANTHROPIC_BASE_URL` and `ANTHROPIC_API_KEY` or
//! `ANTHROPIC_AUTH_TOKEN`; Codex: its provider's `base_url` and `env_key`); after it exits, ask
//! [`RelayEndpoint::budget_refusal`] whether a budget stopped it (then the task ends `budget`).
//! Dropping the endpoint closes it and every connection to it.

use hyper::body::{Body, Bytes, Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use pegasus_proto::llm::LlmError;
use pegasus_proto::worker::{FromWorker, RelayApi, RelayPart, RelayRequest};
use std::collections::HashMap;
use std::convert::Infallible;
use std::io::{self, Read};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// The largest request body the endpoint relays: a frame to pegasusd holds at most
/// [`pegasus_proto::MAX_FRAME`], and the rest of the request needs some of it.
const MAX_BODY: usize = pegasus_proto::MAX_FRAME - 64 * 1024;

/// Request headers relayed to the provider (by lowercase name): what the API reads besides the
/// body. Never a credential: pegasusd adds the real key.
const RELAYED_HEADERS: &[&str] = &["anthropic-version", "anthropic-beta", "openai-beta"];

/// The relayed calls waiting for their answer's parts, by id.
type Calls = Arc<Mutex<HashMap<u64, mpsc::UnboundedSender<RelayPart>>>>;

/// The worker's side of the relay: sends `RelayRequest` frames and hands the `RelayAnswer`
/// parts that come back to the endpoint that waits for them. One per worker (cheap to clone);
/// it starts one [`RelayEndpoint`] per harness spawn.
#[derive(Clone)]
pub struct Relay {
    out: mpsc::UnboundedSender<FromWorker>,
    calls: Calls,
    next_id: Arc<AtomicU64>,
}

/// One harness spawn's model endpoint, on `127.0.0.1`. Dropping it closes the endpoint and
/// every connection to it (an answer in flight is cancelled upstream).
pub struct RelayEndpoint {
    /// What the harness is given as its API's base URL: `http://127.0.0.1:PORT` for Anthropic
    /// (Claude Code's `ANTHROPIC_BASE_URL`), `http://127.0.0.1:PORT/v1` for OpenAI (Codex's
    /// provider `base_url`).
    pub base_url: String,
    /// The credential of this spawn (random, 256 bits): the endpoint answers only requests
    /// that carry it as `x-api-key` or `Authorization: Bearer`.
    pub key: String,
    shared: Arc<Endpoint>,
    server: JoinHandle<()>,
}

/// What every connection of one endpoint shares.
struct Endpoint {
    api: RelayApi,
    key: String,
    task: Option<String>,
    role: Option<String>,
    relay: Relay,
    /// The first budget refusal pegasusd answered (sticky: a budget does not come back).
    budget: Mutex<Option<LlmError>>,
    /// The last refusal of any kind.
    last: Mutex<Option<LlmError>>,
}

impl Relay {
    /// The relay of a worker whose frames to pegasusd go to `out`.
    pub(crate) fn new(out: mpsc::UnboundedSender<FromWorker>) -> Relay {
        Relay {
            out,
            calls: Arc::default(),
            next_id: Arc::new(AtomicU64::new(1)),
        }
    }

    /// Starts the model endpoint of one harness spawn: it speaks `api`, and every call made
    /// through it is billed to this worker's project and to `task` (its budget applies; `role`
    /// is written on the ledger lines). Needs a Tokio runtime.
    pub fn start(
        &self,
        api: RelayApi,
        task: Option<String>,
        role: Option<String>,
    ) -> io::Result<RelayEndpoint> {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let key = new_key()?;
        let base_url = match api {
            RelayApi::Anthropic => format!("http://127.0.0.1:{port}"),
            RelayApi::OpenAi => format!("http://127.0.0.1:{port}/v1"),
        };
        let shared = Arc::new(Endpoint {
            api,
            key: key.clone(),
            task,
            role,
            relay: self.clone(),
            budget: Mutex::new(None),
            last: Mutex::new(None),
        });
        let server = tokio::spawn(serve(listener, shared.clone()));
        Ok(RelayEndpoint {
            base_url,
            key,
            shared,
            server,
        })
    }

    /// Hands a part of pegasusd's answer to the call waiting for it (if it still waits).
    pub(crate) fn deliver(&self, id: u64, part: RelayPart) {
        let mut calls = lock(&self.calls);
        let end = matches!(part, RelayPart::End { .. });
        let sent = calls.get(&id).map(|tx| tx.send(part).is_ok());
        if end || sent == Some(false) {
            calls.remove(&id);
        }
        if sent.is_none() {
            tracing::debug!(id, "relay answer for a call nobody waits for");
        }
    }

    /// Ends every waiting call: the connection to pegasusd is gone.
    pub(crate) fn fail_all(&self) {
        lock(&self.calls).clear();
    }
}

impl RelayEndpoint {
    /// The budget refusal pegasusd answered a call of this endpoint with, if any: the harness
    /// was told (in its API's error shape) and stops; its task ends `budget` with this reason.
    pub fn budget_refusal(&self) -> Option<LlmError> {
        lock(&self.shared.budget).clone()
    }

    /// The last call pegasusd refused itself (a budget, an unpriced model, a provider of the
    /// wrong kind, a task the watchdog stopped), if any.
    pub fn last_refusal(&self) -> Option<LlmError> {
        lock(&self.shared.last).clone()
    }
}

impl Drop for RelayEndpoint {
    fn drop(&mut self) {
        // The accept loop owns the connections' tasks: they go with it.
        self.server.abort();
    }
}

/// A lock of the relay's (a panic elsewhere does not lose what it holds).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A fresh credential (256 bits, hex) from the kernel's generator.
fn new_key() -> io::Result<String> {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Accepts connections until the endpoint is dropped (which aborts this task and, with its
/// `JoinSet`, every connection's).
async fn serve(listener: tokio::net::TcpListener, shared: Arc<Endpoint>) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!("relay endpoint: accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let shared = shared.clone();
        connections.spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let shared = shared.clone();
                async move { Ok::<_, Infallible>(handle(&shared, req).await) }
            });
            let served = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
            if let Err(e) = served {
                tracing::debug!("relay endpoint: connection ended: {e}");
            }
        });
    }
}

/// The routes of each API: which requests are relayed.
fn routed(api: RelayApi, method: &hyper::Method, path: &str) -> bool {
    match api {
        RelayApi::Anthropic => {
            method == hyper::Method::POST
                && matches!(path, "/v1/messages" | "/v1/messages/count_tokens")
        }
        RelayApi::OpenAi => {
            (method == hyper::Method::POST && path == "/v1/responses")
                || (method == hyper::Method::GET && path == "/v1/models")
        }
    }
}

/// Whether `req` carries the endpoint's credential (`x-api-key`, or `Authorization: Bearer`),
/// compared in constant time.
fn authorized(req: &Request<Incoming>, key: &str) -> bool {
    let given = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok());
    let bearer = given("authorization").and_then(|v| v.strip_prefix("Bearer "));
    [given("x-api-key"), bearer]
        .into_iter()
        .flatten()
        .any(|k| same(k.trim().as_bytes(), key.as_bytes()))
}

/// `a == b` without an early exit on the first difference.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// An answer the endpoint gives itself, in the API's error shape.
fn error(api: RelayApi, status: u16, message: &str) -> Response<RelayBody> {
    let body = api.error_body(status, message);
    let mut response = Response::new(RelayBody::full(body.into_bytes()));
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

/// One request of the harness, start to end of its answer's head (the body streams on).
async fn handle(shared: &Arc<Endpoint>, req: Request<Incoming>) -> Response<RelayBody> {
    let api = shared.api;
    let path = req.uri().path().to_string();
    if !routed(api, req.method(), &path) {
        let what = format!("{} {path}", req.method());
        return error(
            api,
            404,
            &format!("Not found: this endpoint serves no {what}"),
        );
    }
    if !authorized(&req, &shared.key) {
        return error(
            api,
            401,
            "invalid x-api-key: this endpoint takes only the key Pegasus gave this harness",
        );
    }
    let path_and_query = req
        .uri()
        .path_and_query()
        .map_or(path.clone(), |p| p.as_str().to_string());
    let method = req.method().to_string();
    let headers: Vec<(String, String)> = RELAYED_HEADERS
        .iter()
        .flat_map(|name| {
            req.headers()
                .get_all(*name)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .map(|v| (name.to_string(), v.to_string()))
                .collect::<Vec<_>>()
        })
        .collect();
    let body = match read_body(req.into_body()).await {
        Ok(body) => body,
        Err(BodyError::TooLarge) => {
            return error(
                api,
                413,
                &format!("request too large: this endpoint relays at most {MAX_BODY} bytes"),
            )
        }
        Err(BodyError::NotText) => return error(api, 400, "the request body is not UTF-8 JSON"),
        Err(BodyError::Broken(e)) => return error(api, 400, &format!("cannot read the body: {e}")),
    };
    let relay = &shared.relay;
    let id = relay.next_id.fetch_add(1, Ordering::Relaxed);
    let (tx, mut rx) = mpsc::unbounded_channel();
    lock(&relay.calls).insert(id, tx);
    let guard = CancelOnDrop {
        id,
        done: false,
        relay: relay.clone(),
    };
    let request = RelayRequest {
        api,
        method,
        path: path_and_query,
        body,
        headers,
        task: shared.task.clone(),
        role: shared.role.clone(),
    };
    if relay
        .out
        .send(FromWorker::RelayRequest { id, request })
        .is_err()
    {
        return error(api, 500, "the worker's link to pegasusd is gone");
    }
    // The head comes first; a refusal comes as a head, its body and its end.
    let (status, head) = match rx.recv().await {
        Some(RelayPart::Head { status, headers }) => (status, headers),
        Some(RelayPart::End { refusal }) => {
            shared.refused(refusal);
            return error(api, 500, "pegasusd ended the answer before its head");
        }
        Some(RelayPart::Chunk(_)) | None => {
            return error(api, 500, "the worker's link to pegasusd is gone");
        }
    };
    let mut response = Response::new(RelayBody::Stream {
        rx,
        guard,
        endpoint: shared.clone(),
    });
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    for (name, value) in head {
        if let (Ok(name), Ok(value)) = (
            hyper::header::HeaderName::from_bytes(name.as_bytes()),
            hyper::header::HeaderValue::from_str(&value),
        ) {
            response.headers_mut().append(name, value);
        }
    }
    response
}

impl Endpoint {
    /// Keeps what pegasusd said when it refused a call.
    fn refused(&self, refusal: Option<LlmError>) {
        let Some(refusal) = refusal else {
            return;
        };
        tracing::info!(error = %refusal, "pegasusd refused a call of the harness");
        if matches!(refusal, LlmError::BudgetExceeded { .. }) {
            lock(&self.budget).get_or_insert_with(|| refusal.clone());
        }
        *lock(&self.last) = Some(refusal);
    }
}

/// Why a request body was not relayed.
enum BodyError {
    TooLarge,
    NotText,
    Broken(hyper::Error),
}

/// Reads a request body whole, up to [`MAX_BODY`].
async fn read_body(mut body: Incoming) -> Result<String, BodyError> {
    let mut bytes = Vec::new();
    while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
        let frame = frame.map_err(BodyError::Broken)?;
        if let Ok(data) = frame.into_data() {
            if bytes.len() + data.len() > MAX_BODY {
                return Err(BodyError::TooLarge);
            }
            bytes.extend_from_slice(&data);
        }
    }
    String::from_utf8(bytes).map_err(|_| BodyError::NotText)
}

/// Tells pegasusd to cancel a relayed call whose harness went away before its answer ended.
struct CancelOnDrop {
    id: u64,
    done: bool,
    relay: Relay,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if !self.done {
            lock(&self.relay.calls).remove(&self.id);
            let _ = self.relay.out.send(FromWorker::RelayCancel { id: self.id });
        }
    }
}

/// The body of an answer: one the endpoint made itself, or pegasusd's parts as they come.
enum RelayBody {
    /// A whole body (taken by the first poll).
    Full(Option<Bytes>),
    /// pegasusd's chunks, to its end.
    Stream {
        rx: mpsc::UnboundedReceiver<RelayPart>,
        /// Cancels the call upstream if the body is dropped before its end (the harness went
        /// away mid-answer).
        guard: CancelOnDrop,
        endpoint: Arc<Endpoint>,
    },
}

impl RelayBody {
    fn full(bytes: Vec<u8>) -> RelayBody {
        RelayBody::Full(Some(Bytes::from(bytes)))
    }
}

/// A stream cut before its end: the link to pegasusd went away mid-answer.
#[derive(Debug)]
struct Cut;

impl std::fmt::Display for Cut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the worker's link to pegasusd went away mid-answer")
    }
}

impl std::error::Error for Cut {}

impl Body for RelayBody {
    type Data = Bytes;
    type Error = Cut;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Cut>>> {
        match self.get_mut() {
            RelayBody::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            RelayBody::Stream {
                rx,
                guard,
                endpoint,
            } => loop {
                if guard.done {
                    return Poll::Ready(None);
                }
                return match rx.poll_recv(cx) {
                    Poll::Pending => Poll::Pending,
                    Poll::Ready(Some(RelayPart::Chunk(bytes))) => {
                        if bytes.is_empty() {
                            continue;
                        }
                        Poll::Ready(Some(Ok(Frame::data(Bytes::from(bytes)))))
                    }
                    Poll::Ready(Some(RelayPart::End { refusal })) => {
                        guard.done = true;
                        endpoint.refused(refusal);
                        Poll::Ready(None)
                    }
                    Poll::Ready(Some(RelayPart::Head { .. })) => continue,
                    // The link went away: the harness sees a cut answer (no cancel to send).
                    Poll::Ready(None) => {
                        guard.done = true;
                        Poll::Ready(Some(Err(Cut)))
                    }
                };
            },
        }
    }
}
