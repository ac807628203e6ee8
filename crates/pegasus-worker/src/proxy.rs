//! The worker's model: a [`ChatModel`] that forwards every call to the LLM gateway in pegasusd
//! over the worker socket. The agent code cannot tell it from a direct client; the worker never
//! sees a credential. Web searches go the same way ([`WebSearch`]: pegasusd holds the search
//! backend's key, DESIGN.md §16 "The web").

use pegasus_agent::tools::web_search::{SearchFuture, WebSearch};
use pegasus_agent::{ChatFuture, ChatModel};
use pegasus_proto::{
    llm::{ChatRequest, ChatResponse, LlmError},
    worker::{FromWorker, SearchHit},
};
use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex, MutexGuard,
    },
};
use tokio::sync::{mpsc, oneshot};

/// The calls waiting for their answer, by id.
type Waiters = HashMap<u64, oneshot::Sender<Result<ChatResponse, LlmError>>>;
type Pending = Arc<Mutex<Waiters>>;
/// The web searches waiting for their results, by id.
type Searches = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Vec<SearchHit>, String>>>>>;

/// Sends `LlmRequest` frames and matches `LlmResponse` frames to them by id; likewise
/// `WebSearch` and `WebSearchResult`.
#[derive(Clone)]
pub struct ProxyModel {
    out: mpsc::UnboundedSender<FromWorker>,
    pending: Pending,
    searches: Searches,
    next_id: Arc<AtomicU64>,
}

impl ProxyModel {
    /// `out` is the worker's frame writer queue.
    pub fn new(out: mpsc::UnboundedSender<FromWorker>) -> Self {
        ProxyModel {
            out,
            pending: Arc::default(),
            searches: Arc::default(),
            next_id: Arc::new(AtomicU64::new(1)),
        }
    }

    /// Delivers the gateway's answer to the call waiting for it (if it still waits).
    pub fn complete(&self, id: u64, result: Result<ChatResponse, LlmError>) {
        let waiter = waiters(&self.pending).remove(&id);
        match waiter {
            Some(tx) => {
                let _ = tx.send(result);
            }
            None => tracing::debug!(id, "LLM answer for a call nobody waits for"),
        }
    }

    /// Delivers pegasusd's search results to the search waiting for them (if it still waits).
    pub fn complete_search(&self, id: u64, result: Result<Vec<SearchHit>, String>) {
        let waiter = lock(&self.searches).remove(&id);
        match waiter {
            Some(tx) => {
                let _ = tx.send(result);
            }
            None => tracing::debug!(id, "search results nobody waits for"),
        }
    }

    /// Fails every waiting call and search: the supervisor connection is gone.
    pub fn fail_all(&self) {
        let failed: Vec<_> = waiters(&self.pending).drain().collect();
        for (_, tx) in failed {
            let _ = tx.send(Err(LlmError::Cancelled));
        }
        let failed: Vec<_> = lock(&self.searches).drain().collect();
        for (_, tx) in failed {
            let _ = tx.send(Err("the connection to pegasusd is gone".into()));
        }
    }
}

/// A lock of the proxy's (a panic elsewhere does not lose what it holds).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl WebSearch for ProxyModel {
    /// One search over the socket, made by pegasusd. A search whose caller went away is
    /// simply forgotten: its results are dropped when they come.
    fn search(&self, query: String, count: Option<u32>) -> SearchFuture<'_> {
        Box::pin(async move {
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            let (tx, rx) = oneshot::channel();
            lock(&self.searches).insert(id, tx);
            if self
                .out
                .send(FromWorker::WebSearch { id, query, count })
                .is_err()
            {
                lock(&self.searches).remove(&id);
                return Err("the connection to pegasusd is gone".into());
            }
            rx.await
                .unwrap_or_else(|_| Err("the connection to pegasusd is gone".into()))
        })
    }
}

/// The waiting calls (a panic elsewhere does not lose them).
fn waiters(pending: &Pending) -> MutexGuard<'_, Waiters> {
    lock(pending)
}

/// Tells the gateway to drop a call whose caller went away (its future was dropped).
struct CancelOnDrop {
    id: u64,
    done: bool,
    out: mpsc::UnboundedSender<FromWorker>,
    pending: Pending,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if !self.done {
            waiters(&self.pending).remove(&self.id);
            let _ = self.out.send(FromWorker::LlmCancel { id: self.id });
        }
    }
}

impl ChatModel for ProxyModel {
    fn chat(&self, request: ChatRequest) -> ChatFuture<'_> {
        self.call(request, false)
    }

    /// The text of the answer is published on the project's event bus by pegasusd itself as
    /// it arrives (it never travels to the worker and back); `deltas` gets nothing.
    fn chat_streaming(
        &self,
        request: ChatRequest,
        deltas: mpsc::UnboundedSender<String>,
    ) -> ChatFuture<'_> {
        drop(deltas);
        self.call(request, true)
    }
}

impl ProxyModel {
    /// One call over the socket; with `deltas`, pegasusd publishes its text on the bus.
    fn call(&self, request: ChatRequest, deltas: bool) -> ChatFuture<'_> {
        Box::pin(async move {
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            let (tx, rx) = oneshot::channel();
            waiters(&self.pending).insert(id, tx);
            let mut guard = CancelOnDrop {
                id,
                done: false,
                out: self.out.clone(),
                pending: self.pending.clone(),
            };
            if self
                .out
                .send(FromWorker::LlmRequest {
                    id,
                    request,
                    deltas,
                })
                .is_err()
            {
                // The guard takes the call off the list (its cancel frame goes nowhere either).
                return Err(LlmError::Other("the connection to pegasusd is gone".into()));
            }
            let result = rx.await.unwrap_or(Err(LlmError::Cancelled));
            guard.done = true;
            result
        })
    }
}
