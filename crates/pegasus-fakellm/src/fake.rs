//! [`FakeLlm`]: the handle tests hold on to.
//!
//! The server runs on its own std thread with its own single-threaded tokio
//! runtime ([`crate::background`]). Dropping the last handle stops the thread
//! and closes every connection, including stalled ones.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

use crate::background::Background;
use crate::record::Recorded;
use crate::script::Rule;
use crate::server::{self, CountedRule, Shared};

/// A running fake server; dropping the last clone stops it.
#[derive(Clone)]
pub struct FakeLlm {
    inner: Arc<Inner>,
}

struct Inner {
    shared: Arc<Shared>,
    server: Background,
}

impl fmt::Debug for FakeLlm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FakeLlm")
            .field("addr", &self.inner.server.addr())
            .finish_non_exhaustive()
    }
}

impl FakeLlm {
    /// Binds 127.0.0.1:0 and serves on a background std thread with its own
    /// tokio runtime, so sync tests, async tests and the demo can all use it.
    pub fn start() -> std::io::Result<FakeLlm> {
        let shared = Arc::new(Shared::default());
        let thread_shared = Arc::clone(&shared);
        let server = Background::start("fakellm", move |stream| {
            thread_shared.lock().connections += 1;
            server::handle(Arc::clone(&thread_shared), stream)
        })?;
        Ok(FakeLlm {
            inner: Arc::new(Inner { shared, server }),
        })
    }

    /// The bound socket address (always on 127.0.0.1).
    pub fn addr(&self) -> SocketAddr {
        self.inner.server.addr()
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.inner.server.addr())
    }

    /// Same as [`FakeLlm::base_url`]; Anthropic clients POST `{base}/v1/messages`.
    pub fn anthropic_base_url(&self) -> String {
        self.base_url()
    }

    /// `{base}/v1`; OpenAI clients POST `{base}/v1/chat/completions`.
    pub fn openai_base_url(&self) -> String {
        format!("{}/v1", self.base_url())
    }

    /// Rules are tried in insertion order; the first that matches and is not
    /// used up answers.
    pub fn add_rule(&self, rule: Rule) {
        self.inner
            .shared
            .lock()
            .rules
            .push(CountedRule { rule, used: 0 });
    }

    /// Removes every rule (recorded requests and violations are kept).
    pub fn clear_rules(&self) {
        self.inner.shared.lock().rules.clear();
    }

    /// When `Some(k)`: requests without the right key get 401 in the provider's
    /// error shape (Anthropic header `x-api-key: k`; OpenAI
    /// `Authorization: Bearer k`). Default `None` = any key or none accepted.
    pub fn require_api_key(&self, key: Option<String>) {
        self.inner.shared.lock().api_key = key;
    }

    /// Sets the context window of every model, in the fake's tokens (characters of the JSON
    /// system prompt, messages and tools / 4). A longer prompt, or prompt plus `max_tokens`,
    /// is refused with the provider's real 400 (Anthropic `prompt is too long: N tokens > M
    /// maximum`; OpenAI `context_length_exceeded`). `None` restores the default, 200,000.
    pub fn set_context_window(&self, tokens: Option<u64>) {
        self.inner.shared.lock().context_window = tokens;
    }

    /// Answers from now on carry no usage at all, as many OpenAI-compatible servers, proxies
    /// and gateways do when streaming (`stream_options.include_usage` is a request they may
    /// ignore): no usage chunk, no `usage` in a body, none in Anthropic's `message_start` or
    /// `message_delta`. `false` restores the real APIs' usage.
    pub fn omit_usage(&self, omit: bool) {
        self.inner.shared.lock().omit_usage = omit;
    }

    /// Every request received, in order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.inner.shared.lock().requests.clone()
    }

    /// The most recent request, if any.
    pub fn last_request(&self) -> Option<Recorded> {
        self.inner.shared.lock().requests.last().cloned()
    }

    /// Number of requests received so far.
    pub fn request_count(&self) -> usize {
        self.inner.shared.lock().requests.len()
    }

    /// TCP connections accepted so far. Connections persist as the real APIs' do, so a client
    /// that pools them makes fewer connections than requests.
    pub fn connection_count(&self) -> usize {
        self.inner.shared.lock().connections
    }

    /// Context-window probes received (`GET /props`, `GET /v1/models`, `POST /api/show`): a
    /// worker's gateway asks a server on a loopback address for its window when no table
    /// knows the model. Each is answered 404, as the hosted APIs do (unless
    /// [`FakeLlm::report_window`]), and is neither counted in [`FakeLlm::request_count`] nor a
    /// violation.
    pub fn window_probes(&self) -> usize {
        self.inner.shared.lock().window_probes
    }

    /// Answers `GET /props` from now on as a llama.cpp server started with `n_ctx` does
    /// (`default_generation_settings.n_ctx`); `None` (the default) answers 404, as the hosted
    /// APIs the fake stands in for.
    pub fn report_window(&self, n_ctx: Option<u64>) {
        self.inner.shared.lock().report_window = n_ctx;
    }

    /// Holds every context-window probe (`/props`, `/v1/models`, `/api/show`) this long before
    /// answering, as a slow or busy server does; a hold longer than the client waits is a
    /// server that never answers. `None` answers at once again.
    pub fn hold_window_probes(&self, hold: Option<std::time::Duration>) {
        self.inner.shared.lock().probe_hold = hold;
    }

    /// Every well-formed answer begun so far, in order: the calls a provider would bill.
    pub fn answered(&self) -> Vec<crate::Answered> {
        self.inner.shared.lock().answered.clone()
    }

    /// Transcript-validity problems and unmatched requests seen so far
    /// (empty = all good). Tests should usually end by asserting this is empty.
    pub fn violations(&self) -> Vec<String> {
        self.inner.shared.lock().violations.clone()
    }
}
