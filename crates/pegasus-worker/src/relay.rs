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
    /// The relay of a worker whose frames to pegasusd go to `out` (the worker makes one; so
    /// may another link of the worker protocol, a benchmark's). The `RelayAnswer` parts that
    /// come back are handed to [`Relay::deliver`].
    pub fn new(out: mpsc::UnboundedSender<FromWorker>) -> Relay {
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

    /// Hands a part of pegasusd's answer (`ToWorker::RelayAnswer`) to the call waiting for it
    /// (if it still waits).
    pub fn deliver(&self, id: u64, part: RelayPart) {
        let mut calls = lock(&self.calls);
        let end = matches!(part, RelayPart::End { .. } | RelayPart::Cut(_));
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
        // A streamed answer is many small writes: each goes out at once, not held for the
        // last one's acknowledgement.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!("relay endpoint: TCP_NODELAY: {e}");
        }
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
        Some(RelayPart::Cut(why)) => return error(api, 500, &why),
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

/// An answer cut before its end (upstream, or the link to pegasusd went away), why: the
/// harness sees its connection cut.
#[derive(Debug)]
struct Cut(String);

impl std::fmt::Display for Cut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
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
                    Poll::Ready(Some(RelayPart::Cut(why))) => {
                        guard.done = true;
                        Poll::Ready(Some(Err(Cut(why))))
                    }
                    // The link went away: the harness sees a cut answer (no cancel to send).
                    Poll::Ready(None) => {
                        guard.done = true;
                        Poll::Ready(Some(Err(Cut(
                            "the worker's link to pegasusd went away mid-answer".into(),
                        ))))
                    }
                };
            },
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A relay whose frames to pegasusd come out of the returned receiver.
    fn relay() -> (Relay, mpsc::UnboundedReceiver<FromWorker>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Relay::new(tx), rx)
    }

    /// The next relayed request, within a deadline.
    async fn next_request(rx: &mut mpsc::UnboundedReceiver<FromWorker>) -> (u64, RelayRequest) {
        match tokio::time::timeout(Duration::from_secs(10), rx.recv()).await {
            Ok(Some(FromWorker::RelayRequest { id, request })) => (id, request),
            other => panic!("expected a relayed request, got {other:?}"),
        }
    }

    fn post(endpoint: &RelayEndpoint, path: &str) -> reqwest::RequestBuilder {
        let url = format!(
            "http://{}{path}",
            endpoint
                .base_url
                .trim_start_matches("http://")
                .trim_end_matches("/v1")
        );
        reqwest::Client::new()
            .post(url)
            .header("content-type", "application/json")
            .body(r#"{"model":"claude-x","messages":[]}"#)
    }

    #[tokio::test]
    async fn a_request_without_the_spawn_s_credential_is_refused_in_the_api_s_shape() {
        let (relay, mut frames) = relay();
        let endpoint = relay
            .start(RelayApi::Anthropic, Some("t-1".into()), None)
            .unwrap();
        for key in [None, Some("wrong"), Some(&endpoint.key[1..])] {
            let mut req = post(&endpoint, "/v1/messages");
            if let Some(key) = key {
                req = req.header("x-api-key", key);
            }
            let r = req.send().await.unwrap();
            assert_eq!(r.status(), 401);
            let v: serde_json::Value = r.json().await.unwrap();
            assert_eq!(v["type"], "error");
            assert_eq!(v["error"]["type"], "authentication_error");
        }
        let r = post(&endpoint, "/v1/complete")
            .header("x-api-key", &endpoint.key)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404);
        assert!(frames.try_recv().is_err(), "nothing reached pegasusd");

        let openai = relay.start(RelayApi::OpenAi, None, None).unwrap();
        assert!(openai.base_url.ends_with("/v1"));
        let r = reqwest::Client::new()
            .post(format!("{}/responses", openai.base_url))
            .bearer_auth("sk-not-it")
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401);
        let v: serde_json::Value = r.json().await.unwrap();
        assert_eq!(v["error"]["code"], "invalid_api_key");
    }

    /// The request goes to pegasusd as it came (path and query, body, the API's headers, the
    /// spawn's task; never a credential), and the answer streams back part by part.
    #[tokio::test]
    async fn a_request_is_relayed_and_its_answer_streams_back() {
        let (relay, mut frames) = relay();
        let endpoint = relay
            .start(RelayApi::Anthropic, Some("t-1".into()), Some("dev".into()))
            .unwrap();
        let call = tokio::spawn(
            post(&endpoint, "/v1/messages?beta=true")
                .header("authorization", format!("Bearer {}", endpoint.key))
                .header("anthropic-beta", "a-1,b-2")
                .header("anthropic-version", "2023-06-01")
                .send(),
        );
        let (id, request) = next_request(&mut frames).await;
        assert_eq!(request.api, RelayApi::Anthropic);
        assert_eq!(
            (request.method.as_str(), request.path.as_str()),
            ("POST", "/v1/messages?beta=true")
        );
        assert_eq!(request.body, r#"{"model":"claude-x","messages":[]}"#);
        assert_eq!(
            request.headers,
            vec![
                ("anthropic-version".to_string(), "2023-06-01".to_string()),
                ("anthropic-beta".to_string(), "a-1,b-2".to_string()),
            ]
        );
        assert_eq!(
            (request.task.as_deref(), request.role.as_deref()),
            (Some("t-1"), Some("dev"))
        );
        relay.deliver(
            id,
            RelayPart::Head {
                status: 200,
                headers: vec![("content-type".into(), "text/event-stream".into())],
            },
        );
        let mut response = call.await.unwrap().unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        // Each chunk arrives as it is delivered, before the next exists.
        relay.deliver(id, RelayPart::Chunk(b"data: one\n\n".to_vec()));
        assert_eq!(
            &response.chunk().await.unwrap().unwrap()[..],
            b"data: one\n\n"
        );
        relay.deliver(id, RelayPart::Chunk(b"data: two\n\n".to_vec()));
        assert_eq!(
            &response.chunk().await.unwrap().unwrap()[..],
            b"data: two\n\n"
        );
        relay.deliver(id, RelayPart::End { refusal: None });
        assert!(response.chunk().await.unwrap().is_none());
        assert!(endpoint.budget_refusal().is_none());
        assert!(
            frames.try_recv().is_err(),
            "an answer that ended is not cancelled"
        );
    }

    #[tokio::test]
    async fn a_budget_refusal_is_kept_for_the_runner() {
        let (relay, mut frames) = relay();
        let endpoint = relay
            .start(RelayApi::Anthropic, Some("t-1".into()), None)
            .unwrap();
        let call = tokio::spawn(
            post(&endpoint, "/v1/messages")
                .header("x-api-key", &endpoint.key)
                .send(),
        );
        let (id, _) = next_request(&mut frames).await;
        let error = LlmError::BudgetExceeded {
            scope: "task t-1".into(),
            limit: 2.0,
            spent: 2.1,
        };
        let body = RelayApi::Anthropic.error_body(400, &error.to_string());
        relay.deliver(
            id,
            RelayPart::Head {
                status: 400,
                headers: vec![],
            },
        );
        relay.deliver(id, RelayPart::Chunk(body.into_bytes()));
        relay.deliver(
            id,
            RelayPart::End {
                refusal: Some(error.clone()),
            },
        );
        let response = call.await.unwrap().unwrap();
        assert_eq!(response.status(), 400);
        let v: serde_json::Value = response.json().await.unwrap();
        assert!(v["error"]["message"].as_str().unwrap().contains("task t-1"));
        assert_eq!(endpoint.budget_refusal(), Some(error.clone()));
        assert_eq!(endpoint.last_refusal(), Some(error));
    }

    /// A harness that goes away mid-answer: pegasusd is told to cancel the call upstream. And
    /// a dropped endpoint takes no more connections.
    #[tokio::test]
    async fn a_harness_gone_mid_answer_cancels_the_call() {
        let (relay, mut frames) = relay();
        let endpoint = relay.start(RelayApi::Anthropic, None, None).unwrap();
        let addr = endpoint.base_url.trim_start_matches("http://").to_string();
        let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let body = "{}";
        let head = format!(
            "POST /v1/messages HTTP/1.1\r\nhost: {addr}\r\nx-api-key: {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            endpoint.key,
            body.len()
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        let (id, _) = next_request(&mut frames).await;
        relay.deliver(
            id,
            RelayPart::Head {
                status: 200,
                headers: vec![],
            },
        );
        relay.deliver(id, RelayPart::Chunk(b"data: first\n\n".to_vec()));
        let mut buf = [0u8; 512];
        let n = stream.read(&mut buf).await.unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).contains("200 OK"));
        drop(stream);
        match tokio::time::timeout(Duration::from_secs(10), frames.recv()).await {
            Ok(Some(FromWorker::RelayCancel { id: cancelled })) => assert_eq!(cancelled, id),
            other => panic!("expected a cancel, got {other:?}"),
        }
        drop(endpoint);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while tokio::net::TcpStream::connect(&addr).await.is_ok() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the endpoint still listens"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
