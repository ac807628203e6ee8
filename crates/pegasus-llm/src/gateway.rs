//! The gateway: the one door every model call of pegasusd goes through.
//!
//! Workers and the MainAgent never talk to a provider themselves; they hand a [`ChatRequest`]
//! to [`Gateway::chat`], which decides whether the call may happen (budgets), when (the global
//! semaphore, the per-provider rate gate), with which key, how often to try, and what it cost.
//! Keeping all of that in one place is what makes the limits global: two projects cannot each
//! use "their" four slots, and one project's 429 slows every caller of that provider down.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use chrono::Utc;
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::{Semaphore, SemaphorePermit};
use tokio::time::Instant;

use pegasus_proto::llm::{
    tokens_of_bytes, Block, CallMeta, ChatRequest, ChatResponse, LlmError, Usage,
};
use pegasus_store::{Config, Home, LedgerEntry, ProjectRegistry};

use crate::budget::{self, Limits, MAIN_PROJECT};
use crate::fallback::{self, Why};
use crate::journal::{self, Journal, PendingCall, Reserved};
use crate::ledger::Ledger;
use crate::lock;
use crate::models::{ModelInfo, ModelTable};
use crate::prices::PriceTable;
use crate::provider::{self, Kind, Target};
use crate::reply::{self, Progress, ProviderReply, SeenUsage};
use crate::retry::{self, AttemptError, Cause};
use crate::sse::Deltas;
use crate::window::RememberedWindow;
use crate::{anthropic, openai, sse};

mod passthrough;

/// A snapshot of the gateway's load, for benchmarks, tests and the dashboard.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GatewayStats {
    /// Requests being sent to a provider right now (each holds a semaphore permit).
    pub in_flight: usize,
    /// The most that were ever in flight at once; never above `llm.max_concurrency`.
    pub max_in_flight: usize,
    /// `chat` calls made, including refused and failed ones.
    pub calls: u64,
}

/// The LLM gateway. Cheap to clone: every clone shares the same semaphore, rate gates, totals
/// and ledger.
#[derive(Clone)]
pub struct Gateway {
    inner: Arc<Inner>,
}

/// A task's own spending cap, by (project, task id): see [`Gateway::set_task_budgets`].
pub type TaskBudgets = Arc<dyn Fn(&str, &str) -> Option<f64> + Send + Sync>;

struct Inner {
    config: Config,
    prices: PriceTable,
    models: ModelTable,
    /// Context windows learned from the serving software, for models no table knows (see
    /// [`Learned`]).
    learned: Mutex<HashMap<String, Learned>>,
    /// One probe at a time: a thousand workers starting on one unknown model ask its server
    /// once.
    probing: tokio::sync::Mutex<()>,
    /// Models whose server is being asked in the background now.
    learning: Mutex<std::collections::HashSet<String>>,
    /// What the servers said, as `windows.state.json` holds it (see [`crate::window`]).
    remembered: Mutex<std::collections::BTreeMap<String, RememberedWindow>>,
    /// One writer of `windows.state.json` at a time, so the last write holds the last state.
    saving: Mutex<()>,
    windows_file: std::path::PathBuf,
    /// `(provider/model, window)` each time a server's window is settled: learned, changed,
    /// or given up on (then the default); connected workers take it (`ToWorker::ContextWindow`).
    window_tx: tokio::sync::broadcast::Sender<(String, u64)>,
    /// The model id each configured model's server last reported (`provider/model` → the id,
    /// no prefix): what a call is priced by before its answer says (admission) or when its
    /// answer never did (an estimated line), so every line follows one pricing rule.
    reported: Mutex<HashMap<String, String>>,
    /// The fallback models that answered, for `status` (DESIGN.md §5 fallback models).
    recent: fallback::Recent,
    /// Models already logged as running without the thinking a role asked for.
    thinking_refused: Mutex<std::collections::HashSet<String>>,
    http: reqwest::Client,
    /// `llm.max_concurrency` slots shared by every caller.
    slots: Semaphore,
    /// A task's own cap (its frozen spec's `budget_usd`), asked by (project, task); set by
    /// pegasusd, which reads task files ([`Gateway::set_task_budgets`]).
    task_budgets: std::sync::RwLock<Option<TaskBudgets>>,
    /// Per provider: no request before this instant (set from `retry-after`).
    gates: Mutex<HashMap<String, Instant>>,
    ledger: Ledger,
    /// The projects as their PROJECT.md say now (each call's `budget_usd`); shared with the
    /// rest of pegasusd, the one reader of those files.
    projects: Arc<ProjectRegistry>,
    /// Calls sent and not yet settled, on disk (hard budgets, DESIGN.md §5).
    journal: Journal,
    /// What the calls in flight may cost at worst; admission reads it with the totals.
    reserved: Mutex<Reserved>,
    /// Numbers the calls of this process (with its pid and start, a unique call id).
    call_seq: AtomicU64,
    started_ms: i64,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    calls: AtomicU64,
}

/// A model's window as its server said it.
#[derive(Debug, Clone, Copy)]
struct Learned {
    /// `None`: the server did not say (asked again after [`PROBE_AGAIN`]).
    window: Option<u64>,
    /// When it was learned or last asked.
    at: Instant,
    /// Asked by this process (`false`: remembered from an earlier one, asked again in the
    /// background at the first worker start, while the remembered window is used).
    asked_here: bool,
}

/// A model's context window as the gateway knows it now, without waiting for anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowNow {
    /// The window to use now: the table's, the server's (learned or remembered), else
    /// `default_context_window`.
    pub window: u64,
    /// The model's server is asked and has not answered yet: `window` is the default, and the
    /// server's answer follows on [`Gateway::subscribe_windows`]. The first call waits for it.
    pub pending: bool,
}

/// One place under the concurrency limit (a semaphore permit), counted in the stats while held. Dropping it (also when the call's
/// future is dropped) frees the place.
struct CallPermit<'a> {
    _permit: SemaphorePermit<'a>,
    in_flight: &'a AtomicUsize,
}

impl<'a> CallPermit<'a> {
    fn new(permit: SemaphorePermit<'a>, inner: &'a Inner) -> CallPermit<'a> {
        let now = inner.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        inner.max_in_flight.fetch_max(now, Ordering::SeqCst);
        CallPermit {
            _permit: permit,
            in_flight: &inner.in_flight,
        }
    }
}

impl Drop for CallPermit<'_> {
    fn drop(&mut self) {
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Gateway {
    /// Builds the gateway for `home`: the shipped price table extended by `config.prices`, and
    /// the spend totals rebuilt from the existing ledger (which is created if missing).
    pub fn new(home: &Home, config: &Config) -> Result<Gateway, LlmError> {
        let prices = PriceTable::new(&config.prices)?;
        let models = ModelTable::new(config)?;
        // A fallback model that could never answer is refused now, not in the middle of an
        // outage (DESIGN.md §5 fallback models).
        for model in &config.fallback {
            if let Err(e) = provider::resolve(config, model)
                .and_then(|t| priced_or_allowed(config, &prices, &t))
            {
                return Err(LlmError::Other(format!(
                    "config.yml key `fallback`: {model} cannot be a fallback model: {e}"
                )));
            }
        }
        let (ledger, settled) = Ledger::open(home)?;
        // Calls journaled by an earlier pegasusd that died before recording them: the
        // provider may have billed them, so they count at their worst case.
        let (journal, unsettled) = Journal::recover(home, &settled)
            .map_err(|e| LlmError::Other(format!("cannot read the call journal: {e}")))?;
        for u in &unsettled {
            let p = &u.call;
            tracing::warn!(call = %p.call, project = %p.project, model = %p.model, usd = ?p.usd,
                request_id = ?u.request_id,
                "a call sent before pegasusd stopped has no ledger line; recording its worst case");
            ledger.record_blocking(p.estimated_entry(u.request_id.clone()));
        }
        journal
            .reset(home)
            .map_err(|e| LlmError::Other(format!("cannot reset the call journal: {e}")))?;
        let http = reqwest::Client::builder()
            .user_agent(concat!("pegasus/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| LlmError::Other(format!("cannot build the HTTP client: {e}")))?;
        // What the servers said before a restart is known at once (asked again in the
        // background): a worker's Ready never waits for a model server (DESIGN.md §12).
        let windows_file = home.context_windows_file();
        let remembered = crate::window::load_remembered(&windows_file);
        let mut learned = HashMap::new();
        for (model, r) in &remembered {
            let same_server = provider::resolve(config, model)
                .is_ok_and(|t| t.base_url == r.base_url && crate::window::asked(&t));
            if same_server
                && !models
                    .info(model, prices.context_window(model))
                    .window_known
            {
                // `window: 0` is a server that did not say (too slow, or no such endpoint):
                // the default applies at once, and the server is asked again in the background
                // at the first worker start, as if its last "no" were a minute old.
                let (window, at) = match r.window {
                    0 => (
                        None,
                        Instant::now()
                            .checked_sub(PROBE_AGAIN)
                            .unwrap_or_else(Instant::now),
                    ),
                    w => (Some(w), Instant::now()),
                };
                learned.insert(
                    model.clone(),
                    Learned {
                        window,
                        at,
                        asked_here: false,
                    },
                );
            }
        }
        Ok(Gateway {
            inner: Arc::new(Inner {
                config: config.clone(),
                prices,
                models,
                learned: Mutex::new(learned),
                probing: tokio::sync::Mutex::new(()),
                learning: Mutex::new(Default::default()),
                remembered: Mutex::new(remembered),
                saving: Mutex::new(()),
                windows_file,
                window_tx: tokio::sync::broadcast::channel(256).0,
                reported: Mutex::new(HashMap::new()),
                recent: Default::default(),
                thinking_refused: Mutex::new(Default::default()),
                http,
                slots: Semaphore::new(config.llm.max_concurrency.max(1)),
                task_budgets: std::sync::RwLock::new(None),
                gates: Mutex::new(HashMap::new()),
                ledger,
                projects: Arc::new(ProjectRegistry::new(home.clone())),
                journal,
                reserved: Mutex::new(Reserved::default()),
                call_seq: AtomicU64::new(0),
                started_ms: Utc::now().timestamp_millis(),
                in_flight: AtomicUsize::new(0),
                max_in_flight: AtomicUsize::new(0),
                calls: AtomicU64::new(0),
            }),
        })
    }

    /// One model call, start to finish: the model asked for, then its fallback models in
    /// order while a model cannot answer (DESIGN.md §5 fallback models); each model is tried
    /// as [`Gateway::chat_model`] says.
    ///
    /// With `deltas` and `req.stream`, text is forwarded as it arrives. The deltas are a
    /// preview: when an answer breaks after its text went out and is retried, or another
    /// model takes over, a line saying so goes out first and the new answer's text follows
    /// from its start; the returned response is the authoritative text.
    ///
    /// Dropping the future cancels the call: the HTTP request is aborted, the permit is freed and
    /// nothing is written to the ledger (unless the answer had already fully arrived: then it
    /// was billed, and its line is written anyway).
    pub async fn chat(
        &self,
        req: ChatRequest,
        deltas: Option<UnboundedSender<String>>,
    ) -> Result<ChatResponse, LlmError> {
        self.inner.calls.fetch_add(1, Ordering::Relaxed);
        let deltas = deltas.map(Deltas::new);
        let first = self.resolve_model(&req.model);
        let models = fallback::chain(&first, &self.fallback_models(req.meta.project.as_deref()));
        // Why the model asked for did not answer: what `status` says of the fallback that did.
        let mut first_why: Option<Why> = None;
        let mut tried: Vec<(String, LlmError)> = Vec::new();
        // Bytes of text followers had when the answer now arriving began.
        let mut shown = 0;
        for (i, model) in models.iter().enumerate() {
            let from = (i > 0).then_some(first.as_str());
            let (error, why) = match self
                .chat_model(&req, model, from, deltas.as_ref(), &mut shown)
                .await
            {
                Ok(answer) => {
                    if let (Some(from), Some(why)) = (from, &first_why) {
                        let project = req.meta.project.as_deref().unwrap_or(MAIN_PROJECT);
                        self.inner
                            .recent
                            .record(project, from, model, why, Utc::now());
                    }
                    return Ok(answer);
                }
                Err(failed) => failed,
            };
            let next = models.get(i + 1).filter(|_| why.falls_back());
            if first_why.is_none() {
                first_why = Some(why.clone());
            }
            match (next, tried.is_empty()) {
                // The model asked for failed in a way no other model would fix: its own error.
                (None, true) => return Err(error),
                // A budget refusal or a cancel stays what it is, whichever model it met.
                (None, false) if matches!(why, Why::Budget | Why::Cancelled) => return Err(error),
                (None, false) => {
                    tried.push((model.clone(), error));
                    return Err(fallback::none_answered(tried));
                }
                (Some(next), _) => {
                    tracing::warn!(model = %model, fallback = %next, why = %why, error = %error,
                        "the model cannot answer; its fallback model takes the call");
                    if let Some(d) = deltas.as_ref().filter(|d| d.sent() > shown) {
                        d.send(&fallback::restart_mark(model, next, &why.to_string()));
                        shown = d.sent();
                    }
                    tried.push((model.clone(), error));
                }
            }
        }
        Err(fallback::none_answered(tried))
    }

    /// The fallback models of a call of `project` (`None`: the MainAgent): its PROJECT.md
    /// `fallback:` as the file says now, else config.yml's.
    pub fn fallback_models(&self, project: Option<&str>) -> Vec<String> {
        project
            .and_then(|p| self.inner.projects.fallback(p))
            .unwrap_or_else(|| self.inner.config.fallback.clone())
    }

    /// Why `model` could not answer a call as configured now, if it could not: a provider
    /// config.yml lacks, an unset key, or no price (unless unpriced models are allowed). The
    /// start-up check asks it of each PROJECT.md's fallback models.
    pub fn cannot_answer(&self, model: &str) -> Option<LlmError> {
        let config = &self.inner.config;
        provider::resolve(config, model)
            .and_then(|t| {
                provider::credential(&t)?;
                priced_or_allowed(config, &self.inner.prices, &t)
            })
            .err()
    }

    /// The fallback models that answered in the last hour, of `project` (`main` for the
    /// MainAgent) or of all (`None`).
    pub fn fallbacks_served(&self, project: Option<&str>) -> Vec<pegasus_proto::ctl::FallbackInfo> {
        self.inner.recent.list(project, Utc::now())
    }

    /// One model of a call's chain: resolve it, check budgets, wait for a permit and the
    /// provider's rate gate, send with retries and a timeout per attempt, price the answer and
    /// write its ledger line (naming `from`, the model asked for, when this is its fallback).
    /// A fallback gets the request fitted to its own window, output limit and thinking. An
    /// error comes with why, which decides whether the next model is tried.
    async fn chat_model(
        &self,
        req: &ChatRequest,
        model: &str,
        from: Option<&str>,
        deltas: Option<&Deltas>,
        shown: &mut u64,
    ) -> Result<ChatResponse, (LlmError, Why)> {
        let inner = &*self.inner;
        let failed = |e: LlmError| {
            let why = Why::of(&e, None);
            (e, why)
        };
        let target = provider::resolve(&inner.config, model).map_err(failed)?;
        // PROJECT.md is read once here; a retry, which may come much later, reads it again.
        let mut limits = Some(
            self.check_budgets(&req.meta)
                .map_err(|e| failed(e.into()))?,
        );
        let key = provider::credential(&target).map_err(failed)?;
        let info = self.model_info(&target.full);
        let mut req = req.clone();
        req.model = target.full.clone();
        let mut req = self.adapt(req, &target.full, &info);
        if from.is_some() {
            req = self.fit_window(req, &target)?;
        }
        let body = match target.kind {
            Kind::Anthropic => anthropic::request_body(&req, &target.model, req.stream),
            Kind::OpenAi => openai::request_body(&req, &target.model, req.stream, info.reasoning),
        }
        .map_err(failed)?;
        let timeout =
            Duration::from_secs(req.timeout_s.unwrap_or(inner.config.llm.timeout_s).max(1));
        let base = Duration::from_millis(inner.config.llm.retry_base_ms);
        let attempts = inner.config.llm.max_retries.saturating_add(1);
        // The one estimator (the agent's context check uses it too): an answer without usage
        // is metered from it.
        let input_estimate = req.estimated_input_tokens();
        let mut last = String::new();
        let mut last_cause = None;
        let mut retry_after = None;
        for n in 0..attempts {
            if n > 0 {
                tokio::time::sleep(retry::retry_wait(base, n - 1, retry_after)).await;
            }
            let permit = self.permit(&target.provider).await.map_err(failed)?;
            // Admitted only now, after the wait, against what is spent and held (DESIGN.md §5).
            let limits = limits.take().unwrap_or_else(|| self.limits(&req.meta));
            let reservation = self
                .admit(
                    &req.meta,
                    &limits,
                    &target,
                    &body,
                    req.max_tokens,
                    input_estimate,
                    from,
                )
                .map_err(|e| failed(e.into()))?;
            if let Err(e) = self.journal_sent(&reservation.call).await {
                reservation.abandon(Abandon::NotJournaled).await;
                return Err(failed(e));
            }
            let sent = self
                .attempt(
                    &target,
                    key.as_deref(),
                    &reservation.call.call,
                    &body,
                    req.stream,
                    timeout,
                    deltas,
                    &reservation.progress,
                )
                .await;
            drop(permit);
            let sent = match sent {
                Ok(reply) => return Ok(self.settle(&target, reply, reservation).await),
                Err(e) => e,
            };
            // An answer that began (200) and broke, or whose body was unusable: the provider
            // billed it. Metered from what arrived before anything else happens.
            reservation.abandon(Abandon::Failed).await;
            match sent {
                AttemptError::Fatal(e) => return Err(failed(e)),
                AttemptError::Retry {
                    message,
                    retry_after: wait,
                    cause,
                } => {
                    if let Some(wait) = wait {
                        self.hold_provider(&target.provider, wait);
                    }
                    tracing::warn!(
                        model = %target.full,
                        attempt = n + 1,
                        of = attempts,
                        error = %message,
                        "LLM call attempt failed"
                    );
                    // Text of the broken answer reached followers: the retry's answer starts
                    // over, and they are told so first.
                    if let Some(d) = deltas.filter(|d| d.sent() > *shown && n + 1 < attempts) {
                        let why = Why::of(&exhausted(&target, 1, ""), Some(cause));
                        d.send(&fallback::restart_mark(
                            &target.full,
                            &target.full,
                            &why.to_string(),
                        ));
                        *shown = d.sent();
                    }
                    last = message;
                    last_cause = Some(cause);
                    retry_after = wait;
                }
            }
        }
        let error = exhausted(&target, attempts, &last);
        let why = Why::of(&error, last_cause);
        Err((error, why))
    }

    /// A request built for another model, fitted to the window of `target`, its fallback
    /// (DESIGN.md §5 fallback models): refused when the prompt leaves less than
    /// [`MIN_ANSWER`] tokens for an answer; otherwise its answer (and an Anthropic thinking
    /// budget, which comes on top) capped to what is left, thinking dropped when its budget
    /// would leave less than [`MIN_ANSWER`].
    fn fit_window(
        &self,
        mut req: ChatRequest,
        target: &Target,
    ) -> Result<ChatRequest, (LlmError, Why)> {
        let window = self.window_now(&target.full).window;
        let needed = req.estimated_input_tokens();
        let room = window.saturating_sub(needed);
        if room < u64::from(MIN_ANSWER) {
            let why = Why::TooSmall { needed, window };
            let error = LlmError::ContextTooLong {
                provider: target.provider.clone(),
                message: format!("{} is {why}", target.full),
            };
            return Err((error, why));
        }
        let room = u32::try_from(room).unwrap_or(u32::MAX);
        let thinking = match target.kind {
            Kind::Anthropic => anthropic::thinking_budget(req.thinking.as_deref()).unwrap_or(0),
            Kind::OpenAi => 0,
        };
        if thinking > 0 && room.saturating_sub(thinking) < MIN_ANSWER {
            tracing::info!(model = %target.full,
                "thinking off for this call: its budget does not fit the fallback model's window");
            req.thinking = None;
            req.max_tokens = req.max_tokens.min(room);
        } else {
            req.max_tokens = req.max_tokens.min(room - thinking);
        }
        Ok(req)
    }

    /// Context window of a model (empty = the default model): the model table (or an older
    /// `prices` entry), else what its server reported (see [`Gateway::learn_context_window`]),
    /// else `default_context_window`; the agent compacts its session at 80% of it. Always
    /// known: an unknown model gets the conservative default.
    pub fn context_window(&self, model: &str) -> Option<u64> {
        Some(self.window_now(model).window)
    }

    /// What is known of a model's window now, never waiting for the network: the model table,
    /// else what its server said (in this process, or remembered from an earlier one), else
    /// `default_context_window` — `pending` when the server is one that is asked (see
    /// [`crate::window::asked`]) and has not answered yet (see [`Gateway::spawn_learn`]).
    pub fn window_now(&self, model: &str) -> WindowNow {
        let full = self.resolve_model(model);
        let info = self.model_info(&full);
        let known = |window| WindowNow {
            window,
            pending: false,
        };
        if info.window_known {
            return known(info.context_window);
        }
        if !self.asks_server(&full) {
            return known(info.context_window);
        }
        match lock(&self.inner.learned).get(&full) {
            Some(Learned {
                window: Some(w), ..
            }) => known(*w),
            Some(Learned { window: None, .. }) => known(info.context_window),
            None => WindowNow {
                window: info.context_window,
                pending: true,
            },
        }
    }

    /// Whether `full`'s server is asked for its window (a server of the user's own: the
    /// hosted APIs do not say, and a request they do not serve is not worth making).
    fn asks_server(&self, full: &str) -> bool {
        provider::resolve(&self.inner.config, full).is_ok_and(|t| crate::window::asked(&t))
    }

    /// Every window settled from now on, as `(provider/model, window)`: learned from a server,
    /// changed (a server restarted with another size, a refusal that names it), or given up
    /// on (the default). A connected worker of that model takes it.
    pub fn subscribe_windows(&self) -> tokio::sync::broadcast::Receiver<(String, u64)> {
        self.inner.window_tx.subscribe()
    }

    /// Asks the model's server for its window in the background when it has not been asked by
    /// this process yet (or said nothing a minute ago); a remembered window stays in use
    /// meanwhile. Returns at once. Needs a Tokio runtime.
    pub fn spawn_learn(&self, model: &str) {
        let full = self.resolve_model(model);
        if self.model_info(&full).window_known || !self.asks_server(&full) {
            return;
        }
        let fresh = match lock(&self.inner.learned).get(&full) {
            Some(l) if l.window.is_some() => l.asked_here,
            Some(l) => l.at.elapsed() < PROBE_AGAIN,
            None => false,
        };
        if fresh || !lock(&self.inner.learning).insert(full.clone()) {
            return;
        }
        let gateway = self.clone();
        tokio::spawn(async move {
            gateway.learn_context_window(&full).await;
            lock(&gateway.inner.learning).remove(&full);
        });
    }

    /// The window for a first call: [`Gateway::window_now`], and when the server is still to
    /// answer, its answer, waited for at most `wait` (then the default: a server too slow to
    /// say its window is treated as one that does not say it; a refusal that names the window
    /// still shrinks it).
    pub async fn window_soon(&self, model: &str, wait: Duration) -> u64 {
        let full = self.resolve_model(model);
        let mut updates = self.subscribe_windows();
        let now = self.window_now(&full);
        if !now.pending {
            return now.window;
        }
        self.spawn_learn(&full);
        let settled = async {
            loop {
                match updates.recv().await {
                    Ok((m, w)) if m == full => return Some(w),
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        // Missed or someone else's: it may be settled already.
                        let now = self.window_now(&full);
                        if !now.pending {
                            return Some(now.window);
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
                }
            }
        };
        match tokio::time::timeout(wait, settled).await {
            Ok(Some(w)) => w,
            _ => self.window_now(&full).window,
        }
    }

    /// [`Gateway::context_window`], asking the model's server first when no table knows the
    /// model, the server is the user's own (`local: true`, or on a loopback address: see
    /// [`crate::window::asked`]), and this process has not asked it yet (llama.cpp `/props`,
    /// vLLM `/v1/models`, Ollama `/api/show`; see [`crate::window`]). A server that does not
    /// say is asked again after a minute at most; one that said before (remembered) and does
    /// not answer now keeps what it said. What it says is remembered in `windows.state.json`
    /// and announced on [`Gateway::subscribe_windows`].
    pub async fn learn_context_window(&self, model: &str) -> Option<u64> {
        let full = self.resolve_model(model);
        let info = self.model_info(&full);
        if info.window_known {
            return Some(info.context_window);
        }
        let target = match provider::resolve(&self.inner.config, &full) {
            Ok(t) if crate::window::asked(&t) => t,
            _ => return Some(info.context_window),
        };
        let _one = self.inner.probing.lock().await;
        let before = lock(&self.inner.learned).get(&full).copied();
        match before {
            Some(Learned {
                window: Some(w),
                asked_here: true,
                ..
            }) => return Some(w),
            Some(Learned {
                window: None, at, ..
            }) if at.elapsed() < PROBE_AGAIN => return Some(info.context_window),
            _ => {}
        }
        let key = provider::credential(&target).ok().flatten();
        let found = crate::window::probe(&self.inner.http, &target, key.as_deref()).await;
        let had = before.and_then(|l| l.window);
        match (found, had) {
            (Some(w), _) => tracing::info!(model = %full, window = w,
                "context window as the model's server reports it"),
            (None, Some(w)) => tracing::info!(model = %full, window = w,
                "the model's server does not say its context window now; keeping the one it said before"),
            (None, None) => tracing::info!(model = %full, default = info.context_window,
                "the model's server does not say its context window; using default_context_window"),
        }
        let window = found.or(had);
        lock(&self.inner.learned).insert(
            full.clone(),
            Learned {
                window,
                at: Instant::now(),
                asked_here: true,
            },
        );
        if let Some(w) = found.filter(|w| had != Some(*w)) {
            self.remember(&full, &target.base_url, w).await;
        } else if window.is_none() {
            // A server that does not say is remembered as such (`0`), so the next pegasusd
            // knows at once that the default applies instead of holding its workers' first
            // calls for a probe again.
            let known_silent = lock(&self.inner.remembered)
                .get(&full)
                .is_some_and(|r| r.window == 0 && r.base_url == target.base_url);
            if !known_silent {
                self.remember(&full, &target.base_url, 0).await;
            }
        }
        let settled = window.unwrap_or(info.context_window);
        let _ = self.inner.window_tx.send((full, settled));
        Some(settled)
    }

    /// Keeps what `model`'s server at `base_url` said in `windows.state.json` (atomically,
    /// off the async threads). A failed write is logged: the server is only asked again.
    async fn remember(&self, model: &str, base_url: &str, window: u64) {
        lock(&self.inner.remembered).insert(
            model.to_string(),
            RememberedWindow {
                base_url: base_url.to_string(),
                window,
                learned: Utc::now(),
            },
        );
        let inner = self.inner.clone();
        let saved = pegasus_fs::blocking(move || {
            let _one = lock(&inner.saving);
            let windows = lock(&inner.remembered).clone();
            crate::window::save_remembered(&inner.windows_file, &windows)
        })
        .await;
        match saved {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(model, "cannot remember the context window: {e}"),
            Err(e) => tracing::warn!(model, "cannot remember the context window: {e}"),
        }
    }

    /// What a `provider/model` can do (DESIGN.md §5 model table).
    pub fn model_info(&self, model: &str) -> ModelInfo {
        let inner = &*self.inner;
        inner.models.info(model, inner.prices.context_window(model))
    }

    /// Fits a request to what its model can do: `max_tokens` capped by the model's output
    /// limit; thinking asked of a model that neither thinks nor reasons is dropped (the call
    /// runs without it and one log line per model says so, instead of a 400).
    fn adapt(&self, mut req: ChatRequest, model: &str, info: &ModelInfo) -> ChatRequest {
        req.max_tokens = req.max_tokens.clamp(1, info.max_output_tokens.max(1));
        let wants = req
            .thinking
            .as_deref()
            .is_some_and(|t| matches!(t, "low" | "medium" | "high"));
        if wants && !(info.thinking || info.reasoning) {
            req.thinking = None;
            let first = lock(&self.inner.thinking_refused).insert(model.to_string());
            if first {
                tracing::info!(%model, "the role asks for thinking, but this model has none (data/models.yml); running without it");
            }
        }
        req
    }

    /// The model a request would use: `model`, or the config's `default_model` when empty.
    pub fn resolve_model(&self, model: &str) -> String {
        provider::resolve_model(&self.inner.config, model)
    }

    /// Calls in flight now, the most ever in flight at once, and calls made.
    pub fn stats(&self) -> GatewayStats {
        let inner = &*self.inner;
        GatewayStats {
            in_flight: inner.in_flight.load(Ordering::SeqCst),
            max_in_flight: inner.max_in_flight.load(Ordering::SeqCst),
            calls: inner.calls.load(Ordering::Relaxed),
        }
    }

    /// USD spent today (UTC), all projects together.
    pub fn spent_today(&self) -> f64 {
        let today = Utc::now().date_naive();
        self.inner.ledger.with_totals(|t| t.day(today))
    }

    /// USD spent by `project` (`main` = the MainAgent) over the whole ledger.
    pub fn spent_by_project(&self, project: &str) -> f64 {
        self.inner.ledger.with_totals(|t| t.project(project))
    }

    /// USD spent on `task` over the whole ledger.
    pub fn spent_by_task(&self, task: &str) -> f64 {
        self.inner.ledger.with_totals(|t| t.task(task))
    }

    /// Admits one attempt of a call (DESIGN.md §5 hard budgets): its worst case — estimated input
    /// plus `max_tokens` at the table price — must fit every cap together with what is spent
    /// and what the calls in flight hold, checked and reserved under one lock. A model with no
    /// price is refused unless `llm.allow_unpriced_models`.
    #[allow(clippy::too_many_arguments)] // one attempt's accounting; a struct would only rename it
    fn admit(
        &self,
        meta: &CallMeta,
        limits: &Limits,
        target: &Target,
        body: &serde_json::Value,
        max_tokens: u32,
        input_estimate: u64,
        fallback_from: Option<&str>,
    ) -> Result<Reservation, NotAdmitted> {
        let inner = &*self.inner;
        let project = meta.project.as_deref().unwrap_or(MAIN_PROJECT);
        let usage = pegasus_proto::llm::Usage {
            input_tokens: journal::estimate_input_tokens(body),
            output_tokens: u64::from(max_tokens),
            ..Default::default()
        };
        let worst = inner.price(target, "", &usage);
        if worst.is_none() && !inner.config.llm.allow_unpriced_models {
            return Err(NotAdmitted::Unpriced(LlmError::Unpriced {
                model: target.full.clone(),
            }));
        }
        let today = Utc::now().date_naive();
        let usd = worst.unwrap_or(0.0);
        let mut reserved = lock(&inner.reserved);
        inner
            .ledger
            .with_totals(|t| {
                budget::admit(
                    t,
                    &reserved,
                    limits,
                    project,
                    meta.task.as_deref(),
                    today,
                    usd,
                )
            })
            .map_err(NotAdmitted::Budget)?;
        reserved.add(today, project, meta.task.as_deref(), usd);
        drop(reserved);
        let n = inner.call_seq.fetch_add(1, Ordering::Relaxed);
        let call = format!("c{}-{}-{n}", std::process::id(), inner.started_ms);
        // The answer's id goes to the journal the moment it is seen: a pegasusd killed before
        // the ledger line is replayed with it (see `journal`).
        let (journal, id_of) = (self.inner.clone(), call.clone());
        let progress = Progress::reporting_id(move |id| journal.journal.answered(&id_of, id));
        Ok(Reservation {
            inner: self.inner.clone(),
            target: target.clone(),
            input_estimate,
            progress: Arc::new(progress),
            ended: false,
            day: today,
            call: PendingCall {
                call,
                ts: Utc::now(),
                project: project.to_string(),
                task: meta.task.clone(),
                role: meta.role.clone(),
                model: target.full.clone(),
                input_tokens: usage.input_tokens,
                output_tokens: usage.output_tokens,
                usd: worst,
                fallback_from: fallback_from.map(str::to_string),
            },
        })
    }

    /// Journals a call durably before it is sent (an fsync, off the async threads).
    async fn journal_sent(&self, call: &PendingCall) -> Result<(), LlmError> {
        let inner = self.inner.clone();
        let call = call.clone();
        pegasus_fs::blocking(move || inner.journal.sent(&call))
            .await
            .map_err(|e| LlmError::Other(format!("the call journal failed: {e}")))?
            .map_err(|e| {
                LlmError::Other(format!(
                    "cannot journal the call, so it was not sent (no spend could be lost): {e}"
                ))
            })
    }

    /// Refuses the call if the day, the project or the task has already spent its cap;
    /// returns the caps it checked.
    fn check_budgets(&self, meta: &CallMeta) -> Result<Limits, NotAdmitted> {
        let limits = self.limits(meta);
        let project = meta.project.as_deref().unwrap_or(MAIN_PROJECT);
        let today = Utc::now().date_naive();
        self.inner
            .ledger
            .with_totals(|t| budget::check(t, &limits, project, meta.task.as_deref(), today))
            .map_err(NotAdmitted::Budget)?;
        Ok(limits)
    }

    /// The caps of a call: the day's from the config, a task's own budget or else the config's
    /// `budget.task_usd`, the project's `budget_usd`
    /// as its PROJECT.md says at this call (an edit applies at once; the file is parsed again
    /// only when it changed, see [`ProjectRegistry`]).
    fn limits(&self, meta: &CallMeta) -> Limits {
        let config = &self.inner.config;
        let limits = Limits {
            daily: config.budget.daily_usd,
            project: meta
                .project
                .as_deref()
                .and_then(|p| self.inner.projects.budget_usd(p)),
            ..Limits::default()
        };
        let own = match (meta.project.as_deref(), meta.task.as_deref()) {
            (Some(project), Some(task)) => self.task_budget(project, task),
            _ => None,
        };
        Limits {
            task: own.or(config.budget.task_usd),
            task_is_own: own.is_some(),
            ..limits
        }
    }

    /// Where a task's own cap is read from (DESIGN.md §17: an Asana task's Max Cost): asked
    /// with (project, task id) before each of its calls; `None` leaves config.yml's
    /// `budget.task_usd`.
    pub fn set_task_budgets(&self, lookup: TaskBudgets) {
        if let Ok(mut slot) = self.inner.task_budgets.write() {
            *slot = Some(lookup);
        }
    }

    fn task_budget(&self, project: &str, task: &str) -> Option<f64> {
        let lookup = self.inner.task_budgets.read().ok()?.clone()?;
        lookup(project, task)
    }

    /// The project registry the gateway reads budgets from: pegasusd's one reader of
    /// PROJECT.md, for listings and models too.
    pub fn projects(&self) -> Arc<ProjectRegistry> {
        self.inner.projects.clone()
    }

    /// Waits for the provider's rate gate, then for a semaphore permit. Re-checks the gate after
    /// getting the permit: a 429 seen by another caller while this one queued must be honoured
    /// too, and without holding a permit that other providers' calls could use.
    async fn permit(&self, provider: &str) -> Result<CallPermit<'_>, LlmError> {
        loop {
            if let Some(at) = self.gate(provider) {
                tokio::time::sleep_until(at).await;
            }
            let permit = self
                .inner
                .slots
                .acquire()
                .await
                .map_err(|_| LlmError::Other("the LLM gateway is shutting down".into()))?;
            if self.gate(provider).is_none() {
                return Ok(CallPermit::new(permit, &self.inner));
            }
        }
    }

    /// The instant before which `provider` must not be called, if still in the future.
    fn gate(&self, provider: &str) -> Option<Instant> {
        let gates = lock(&self.inner.gates);
        gates
            .get(provider)
            .copied()
            .filter(|at| *at > Instant::now())
    }

    /// Holds every call to `provider` for `wait` (never shortening an existing hold).
    fn hold_provider(&self, provider: &str, wait: Duration) {
        let at = Instant::now() + wait;
        let mut gates = lock(&self.inner.gates);
        let gate = gates.entry(provider.to_string()).or_insert(at);
        *gate = (*gate).max(at);
    }

    /// One HTTP attempt. `timeout` bounds the wait for the response headers and, for a plain
    /// response, the whole body; for a stream it bounds each silence between chunks.
    #[allow(clippy::too_many_arguments)] // one attempt's whole context; a struct would only rename it
    async fn attempt(
        &self,
        target: &Target,
        key: Option<&str>,
        call: &str,
        body: &serde_json::Value,
        stream: bool,
        timeout: Duration,
        deltas: Option<&Deltas>,
        progress: &Progress,
    ) -> Result<ProviderReply, AttemptError> {
        let http = &self.inner.http;
        let request = match target.kind {
            Kind::Anthropic => http
                .post(format!("{}/v1/messages", target.base_url))
                .header("anthropic-version", anthropic::API_VERSION),
            Kind::OpenAi => http.post(format!("{}/chat/completions", target.base_url)),
        };
        // The call id travels with the request (OpenAI's documented `X-Client-Request-Id`;
        // other servers ignore it): the provider's record of an answer names its ledger line
        // even when pegasusd died before reading a byte of it.
        let request = provider::authorize(request, target.kind, key)
            .header("x-client-request-id", call)
            .json(body);
        let deadline = Instant::now() + timeout;
        let timed_out = || {
            AttemptError::because(
                Cause::Timeout,
                format!("no answer within {} s", timeout.as_secs_f64()),
            )
        };
        let response = tokio::time::timeout_at(deadline, request.send())
            .await
            .map_err(|_| timed_out())?
            .map_err(transport_error)?;
        let status = response.status();
        if !status.is_success() {
            let retry_after = response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| retry::parse_retry_after(v, SystemTime::now()));
            // Only the start of an error body is kept: its message is all we show.
            let mut response = response;
            let text =
                tokio::time::timeout_at(deadline, read_capped(&mut response, ERROR_BODY_CAP))
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .map(|(bytes, _)| String::from_utf8_lossy(&bytes).into_owned())
                    .unwrap_or_default();
            let message = reply::error_message(&text);
            return Err(if retry::is_retryable_status(status.as_u16()) {
                AttemptError::Retry {
                    message: format!("HTTP {}: {message}", status.as_u16()),
                    retry_after,
                    cause: Cause::Status(status.as_u16()),
                }
            } else if reply::is_context_overflow(status.as_u16(), &text) {
                // llama.cpp names its window in the refusal: remembered, and every worker
                // of the model takes it.
                if let Some(w) = crate::window::from_refusal(&text) {
                    let info = self.model_info(&target.full);
                    if !info.window_known {
                        lock(&self.inner.learned).insert(
                            target.full.clone(),
                            Learned {
                                window: Some(w),
                                at: Instant::now(),
                                asked_here: true,
                            },
                        );
                        self.remember(&target.full, &target.base_url, w).await;
                        let _ = self.inner.window_tx.send((target.full.clone(), w));
                    }
                }
                AttemptError::Fatal(LlmError::ContextTooLong {
                    provider: target.provider.clone(),
                    message,
                })
            } else {
                AttemptError::Fatal(LlmError::Refused {
                    provider: target.provider.clone(),
                    status: status.as_u16(),
                    message,
                })
            });
        }
        // From here the provider answered 200: it billed the call whatever happens next.
        progress.answered();
        // A server that ignores `stream: true` answers with plain JSON; read it as such.
        let is_sse = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let limit = self.inner.config.llm.max_response_bytes as usize;
        let too_large = |what: &str| {
            AttemptError::Fatal(LlmError::BadResponse {
                provider: target.provider.clone(),
                message: format!(
                    "the {what} is larger than llm.max_response_bytes ({limit} bytes); \
                     lower the role's or agent's max_tokens, or raise the limit in config.yml"
                ),
            })
        };
        if response.content_length().is_some_and(|n| n > limit as u64) {
            return Err(too_large("answer"));
        }
        if stream && is_sse {
            let parser: Box<dyn sse::StreamParser + Send> = match target.kind {
                Kind::Anthropic => Box::<anthropic::Stream>::default(),
                Kind::OpenAi => Box::<openai::Stream>::default(),
            };
            let read = sse::read(response, parser, timeout, limit, deltas, progress).await;
            return read.map_err(|e| match e {
                sse::ReadError::TooLarge => too_large("streamed answer"),
                sse::ReadError::Attempt(e) => e,
            });
        }
        let mut response = response;
        let (bytes, complete) =
            tokio::time::timeout_at(deadline, read_capped(&mut response, limit))
                .await
                .map_err(|_| timed_out())?
                .map_err(transport_error)?;
        // Unparsed, the body's size is all that is known of the answer.
        progress.update(bytes.len() as u64, Default::default(), "", "");
        if !complete {
            return Err(too_large("answer"));
        }
        let parsed = match target.kind {
            Kind::Anthropic => anthropic::parse_response(&bytes),
            Kind::OpenAi => openai::parse_response(&bytes),
        };
        let reply = parsed.map_err(AttemptError::retry)?;
        if stream {
            // The caller asked for deltas; give it the whole text as one.
            for block in &reply.content {
                if let Block::Text { text } = block {
                    sse::forward(deltas, text);
                }
            }
        }
        Ok(reply)
    }

    /// Prices a successful answer, writes its ledger line and builds the response. The line
    /// names the model as the user configured it (a local server reports a file path); usage
    /// the provider left out is estimated, and the line says so.
    async fn settle(
        &self,
        target: &Target,
        reply: ProviderReply,
        reservation: Reservation,
    ) -> ChatResponse {
        let output_estimate = tokens_of_bytes(reply.content.iter().map(Block::bytes).sum());
        let (usage, cost) = self
            .meter(
                target,
                &reply.usage,
                output_estimate,
                &reply.model,
                &reply.id,
                reservation,
            )
            .await;
        ChatResponse {
            request_id: reply.id,
            model: target.full.clone(),
            content: reply.content,
            stop_reason: reply.stop_reason,
            usage,
            cost_usd: cost,
        }
    }

    /// Settles an answered call from what its answer reported: `seen`, the usage (a count
    /// left out is estimated, from the request and `output_estimate`, and the line says so),
    /// priced by `reported_model` (the id the server said it used; may be empty), `id` the
    /// answer's id. Returns the usage and its cost as the ledger line has them.
    async fn meter(
        &self,
        target: &Target,
        seen: &SeenUsage,
        output_estimate: u64,
        reported_model: &str,
        id: &str,
        reservation: Reservation,
    ) -> (Usage, Option<f64>) {
        let (usage, estimated) = seen.or_estimate(reservation.input_estimate, output_estimate);
        if estimated {
            tracing::debug!(model = %target.full, request_id = %id,
                "the provider reported no (or partial) usage; the ledger line is estimated");
        }
        let cost = self.inner.price(target, reported_model, &usage);
        if cost.is_none() {
            tracing::warn!(model = %target.full,
                "no price for this model; add it under prices: in config.yml");
        }
        let request_id = (!id.is_empty()).then(|| id.to_string());
        // A plain (unstreamed) answer's id is known only now: journaled before the ledger
        // line, so a kill between the two still replays the call with it.
        if let Some(id) = &request_id {
            self.inner.journal.answered(&reservation.call.call, id);
        }
        let entry = reservation.call.entry(&usage, cost, request_id, estimated);
        reservation.settle(entry).await;
        (usage, cost)
    }
}

/// One admitted attempt: what it holds of the budgets and its open journal entry. It ends by
/// value, one of two ways: [`Reservation::settle`] with its answer's ledger line, or
/// [`Reservation::abandon`] when there is no answer to settle. Either writes the line first, then
/// releases the hold and closes the journal entry. An attempt whose answer began to arrive (the
/// provider billed it) and that ends without its ledger line — a stream cut, an unusable body, a
/// caller that went away — gets one, estimated from the request and what arrived (DESIGN.md §5: every
/// answered call is metered).
///
/// Its `Drop` is only the fallback for a caller that went away mid-attempt (its future dropped:
/// a worker that died, a task cancelled), where no code of the attempt runs any more: it logs
/// that the attempt ended unsettled and does what [`Reservation::abandon`] does.
struct Reservation {
    inner: Arc<Inner>,
    target: Target,
    /// Prompt tokens by the shared estimator.
    input_estimate: u64,
    progress: Arc<Progress>,
    /// Ended by value (settled or abandoned): the drop has nothing left to do.
    ended: bool,
    day: chrono::NaiveDate,
    call: PendingCall,
}

/// Why an attempt is abandoned instead of settled: what [`Reservation::abandon`] is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Abandon {
    /// The call could not be journaled, so it was never sent.
    NotJournaled,
    /// The attempt failed: refused, timed out, cut mid-answer, or its body unusable.
    Failed,
}

impl Reservation {
    /// The estimated ledger line of what arrived, if an answer began.
    fn unbilled(&self) -> Option<LedgerEntry> {
        let arrived = self.progress.get();
        if !arrived.answered {
            return None;
        }
        // The answer never finished, so an output count reported so far is a floor, not the
        // count (Anthropic's `message_start` says 0 or 1 before the text comes): the text
        // received is counted whenever it says more.
        let reported_output = arrived.usage.output.unwrap_or(0);
        let seen = SeenUsage {
            output: None,
            ..arrived.usage
        };
        let (mut usage, _) =
            seen.or_estimate(self.input_estimate, tokens_of_bytes(arrived.bytes as usize));
        usage.output_tokens = usage.output_tokens.max(reported_output);
        let usd = self.inner.price(&self.target, &arrived.model, &usage);
        let request_id = (!arrived.id.is_empty()).then_some(arrived.id);
        Some(self.call.entry(&usage, usd, request_id, true))
    }

    /// Ends an answered attempt: `entry`, its answer's ledger line, is written, then the hold
    /// released and the journal entry closed.
    async fn settle(self, entry: LedgerEntry) {
        self.end(Some(entry)).await;
    }

    /// Ends an attempt with no answer to settle: the estimated line of what arrived is written
    /// if an answer began (nothing if none did), then the hold released and the journal entry
    /// closed.
    async fn abandon(self, reason: Abandon) {
        let entry = self.unbilled();
        tracing::debug!(call = %self.call.call, model = %self.call.model, ?reason,
            billed = entry.is_some(), "LLM call attempt abandoned");
        self.end(entry).await;
    }

    /// Writes `entry` as the call's ledger line (if any), then closes the call (its hold
    /// released, the journal told), in that order, on a blocking thread that finishes whatever
    /// becomes of the caller. A caller dropped while the line is being written (a worker that
    /// died, a task cancelled) must neither lose it nor make the drop write a second,
    /// estimated one (the 100-kill campaign saw such a pair), nor close the call in the
    /// journal before the line is on disk.
    async fn end(self, entry: Option<LedgerEntry>) {
        let write = tokio::task::spawn_blocking(move || self.end_blocking(entry));
        if let Err(e) = write.await {
            tracing::error!(error = %e, "ledger writer task failed");
        }
    }

    /// [`Reservation::end`] on the calling thread: marked ended first, so its drop does nothing.
    fn end_blocking(mut self, entry: Option<LedgerEntry>) {
        self.ended = true;
        close(&self.inner, self.day, &self.call, entry);
    }
}

/// Closes an admitted call: writes its ledger line (if any), then releases what it held of the
/// budgets and tells the journal it is done — the line first, so a kill between the two
/// replays the call from the journal instead of losing it.
fn close(inner: &Inner, day: chrono::NaiveDate, call: &PendingCall, entry: Option<LedgerEntry>) {
    if let Some(entry) = entry {
        inner.ledger.record_blocking(entry);
    }
    lock(&inner.reserved).remove(
        day,
        &call.project,
        call.task.as_deref(),
        call.usd.unwrap_or(0.0),
    );
    inner.journal.done(&call.call);
}

/// Why an attempt was not admitted (see [`Gateway::admit`]).
#[derive(Debug)]
pub(crate) enum NotAdmitted {
    /// A cap has no room for it.
    Budget(budget::Refused),
    /// The model has no price and `llm.allow_unpriced_models` is off.
    Unpriced(LlmError),
}

impl From<NotAdmitted> for LlmError {
    fn from(n: NotAdmitted) -> LlmError {
        match n {
            NotAdmitted::Budget(r) => r.into(),
            NotAdmitted::Unpriced(e) => e,
        }
    }
}

impl Drop for Reservation {
    /// The fallback for an attempt neither settled nor abandoned (its caller went away): what
    /// [`Reservation::abandon`] does, with a warning.
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        let entry = self.unbilled();
        tracing::warn!(call = %self.call.call, model = %self.call.model,
            billed = entry.is_some(),
            "an LLM call ended without being settled (its caller went away): what arrived is \
             billed as estimated and its budget hold released");
        let writes_line = entry.is_some();
        let (inner, day, call) = (self.inner.clone(), self.day, self.call.clone());
        let finish = move || close(&inner, day, &call, entry);
        if !writes_line {
            finish();
            return;
        }
        // A ledger line is an fsync: off the async threads when there are any.
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn_blocking(finish);
            }
            Err(_) => finish(),
        }
    }
}

impl Inner {
    /// [`price`] with the id the server reported for this answer (`reported`; empty when it
    /// did not say, or has not yet: the admission, a cut stream), else the id it reported last
    /// for `target`'s model. The one rule of the admission, the ledger line and an estimated
    /// line: a model priced only under the id its server reports costs the same in each.
    fn price(&self, target: &Target, reported: &str, usage: &Usage) -> Option<f64> {
        let reported = {
            let mut known = lock(&self.reported);
            if reported.is_empty() {
                known.get(&target.full).cloned()
            } else {
                if known.get(&target.full).map(String::as_str) != Some(reported) {
                    known.insert(target.full.clone(), reported.to_string());
                }
                Some(reported.to_string())
            }
        };
        price(&self.prices, target, reported.as_deref(), usage)
    }
}

/// What `usage` of `target` costs: the configured id's price (an alias the user priced), else
/// the id the server reported (a dated snapshot priced differently), else 0 on a local
/// provider; `None` = unpriced. The one pricing rule of the admission, the ledger line and an
/// estimated line (through [`Inner::price`]).
fn price(
    prices: &PriceTable,
    target: &Target,
    reported: Option<&str>,
    usage: &Usage,
) -> Option<f64> {
    prices
        .cost(&target.full, usage)
        .or_else(|| {
            reported
                .filter(|r| !r.is_empty())
                .and_then(|r| prices.cost(&format!("{}/{r}", target.provider), usage))
        })
        .or(target.local.then_some(0.0))
}

/// The fewest tokens a fallback model's window must leave for the answer (DESIGN.md §5
/// fallback models).
const MIN_ANSWER: u32 = 1024;

/// `Unpriced` when `target` has no price (as configured, or free on a local provider) and
/// config.yml does not allow unpriced models: what the admission refuses, known before a call.
fn priced_or_allowed(
    config: &Config,
    prices: &PriceTable,
    target: &Target,
) -> Result<(), LlmError> {
    let one = Usage {
        input_tokens: 1,
        output_tokens: 1,
        ..Default::default()
    };
    if config.llm.allow_unpriced_models || price(prices, target, None, &one).is_some() {
        Ok(())
    } else {
        Err(LlmError::Unpriced {
            model: target.full.clone(),
        })
    }
}

/// The error of a model whose `attempts` all failed, the last with `last`.
fn exhausted(target: &Target, attempts: u32, last: &str) -> LlmError {
    LlmError::Exhausted {
        provider: target.provider.clone(),
        attempts,
        last: last.to_string(),
    }
}

/// How long a server that did not say its context window is not asked again.
const PROBE_AGAIN: Duration = Duration::from_secs(60);

/// Bytes of a provider's error body kept for its message.
const ERROR_BODY_CAP: usize = 64 * 1024;

/// Reads a body chunk by chunk up to `limit` bytes, never holding more: the bytes, and whether
/// the body ended within the limit (`false`: it is larger, and the rest was not read).
async fn read_capped(
    response: &mut reqwest::Response,
    limit: usize,
) -> Result<(Vec<u8>, bool), reqwest::Error> {
    let mut out = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if out.len() + chunk.len() > limit {
            let room = limit - out.len();
            out.extend_from_slice(&chunk[..room]);
            return Ok((out, false));
        }
        out.extend_from_slice(&chunk);
    }
    Ok((out, true))
}

/// A transport failure (connect, reset, TLS, body read) with its causes, all retryable: a
/// connection never made is [`Cause::Connect`], one that broke [`Cause::Broken`].
fn transport_error(e: reqwest::Error) -> AttemptError {
    let cause = if e.is_connect() {
        Cause::Connect
    } else if e.is_timeout() {
        Cause::Timeout
    } else {
        Cause::Broken
    };
    let mut message = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        message.push_str(": ");
        message.push_str(&s.to_string());
        source = s.source();
    }
    AttemptError::because(cause, message)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::sse::StreamParser;
    use pegasus_store::{PriceConfig, ProviderConfig};
    use std::collections::BTreeMap;

    /// A gateway whose provider `srv` (hosted, not local) prices its model only under the id
    /// its server reports (`served-2025`), not the alias the user configured (`srv/alias`).
    fn priced_by_reported_id(dir: &std::path::Path) -> (Gateway, Target) {
        let home = Home::new(dir);
        let mut config = Config::default();
        config.providers.insert(
            "srv".into(),
            ProviderConfig {
                kind: "openai".into(),
                base_url: "https://models.example.com/v1".into(),
                api_key_env: None,
                local: false,
            },
        );
        config.prices = BTreeMap::from([(
            "srv/served-2025".to_string(),
            PriceConfig {
                input: 1.0,
                output: 2.0,
                cache_read: None,
                cache_write: None,
                context_window: None,
            },
        )]);
        config.llm.allow_unpriced_models = true;
        config.budget.daily_usd = None;
        config.budget.task_usd = None;
        let gw = Gateway::new(&home, &config).unwrap();
        let target = provider::resolve(&config, "srv/alias").unwrap();
        (gw, target)
    }

    fn admit(gw: &Gateway, target: &Target) -> Reservation {
        let meta = CallMeta {
            project: Some("alpha".into()),
            ..Default::default()
        };
        let body = serde_json::json!({"model": "alias", "messages": [
            {"role": "user", "content": "a question of some length ".repeat(20)}]});
        gw.admit(&meta, &gw.limits(&meta), target, &body, 200, 150, None)
            .unwrap()
    }

    fn usage_of(line: &LedgerEntry) -> Usage {
        Usage {
            input_tokens: line.input_tokens,
            output_tokens: line.output_tokens,
            cache_read_tokens: line.cache_read_tokens,
            cache_write_tokens: line.cache_write_tokens,
        }
    }

    /// An estimated line (a stream cut after its first chunk) is priced by the same rule as a
    /// whole answer's: the model id the stream reported, when only it has a price; and once
    /// the server has said it, the admission's worst case (and a line whose answer never said)
    /// is priced by it too, instead of `null`.
    #[tokio::test]
    async fn estimated_lines_are_priced_by_the_id_the_server_reports() {
        let dir = tempfile::tempdir().unwrap();
        let (gw, target) = priced_by_reported_id(dir.path());
        let first = admit(&gw, &target);
        assert_eq!(
            first.call.usd, None,
            "nothing reported yet: the alias has no price"
        );

        // The first chunk of an OpenAI stream names the served model; then the stream breaks.
        let mut stream = crate::openai::Stream::default();
        let chunk = r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","model":"served-2025","choices":[{"index":0,"delta":{"content":"Part of an answer"},"finish_reason":null}]}"#;
        stream.event("message", chunk, None).unwrap();
        let (bytes, seen, id, model) = stream.progress();
        first.progress.answered();
        first.progress.update(bytes, seen, id, model);
        let line = first.unbilled().unwrap();
        assert!(line.estimated);
        assert_eq!(line.model, "srv/alias", "the line names the configured id");
        let usage = usage_of(&line);
        let whole = price(&gw.inner.prices, &target, Some("served-2025"), &usage);
        assert!(whole.is_some_and(|u| u > 0.0));
        assert_eq!(
            line.usd, whole,
            "priced as the whole answer's line would be"
        );
        drop(first);

        // A whole answer's line and an estimated line with nothing reported agree too.
        let second = admit(&gw, &target);
        assert!(
            second.call.usd.is_some_and(|u| u > 0.0),
            "the admission prices by the reported id: {:?}",
            second.call
        );
        second.progress.answered();
        second.progress.update(40, Default::default(), "", "");
        let line = second.unbilled().unwrap();
        assert_eq!(
            line.usd,
            price(
                &gw.inner.prices,
                &target,
                Some("served-2025"),
                &usage_of(&line)
            )
        );
        drop(second);
        let reply = ProviderReply {
            id: "chatcmpl-2".into(),
            model: "served-2025".into(),
            content: vec![pegasus_proto::llm::Block::Text {
                text: "A whole answer.".into(),
            }],
            stop_reason: pegasus_proto::llm::StopReason::EndTurn,
            usage: Default::default(),
        };
        let settled = gw.settle(&target, reply, admit(&gw, &target)).await;
        assert_eq!(
            settled.cost_usd,
            price(
                &gw.inner.prices,
                &target,
                Some("served-2025"),
                &settled.usage
            )
        );
        assert!(settled.cost_usd.is_some_and(|u| u > 0.0));
    }

    /// An attempt ends by value. `settle` writes exactly its one line; `abandon` writes what
    /// the drop fallback writes for the same attempt: nothing when no answer began, the
    /// estimated line of what arrived when one did. Each gives its budget hold back and closes
    /// its journal entry.
    #[test]
    fn a_settled_attempt_writes_one_line_and_an_abandoned_one_what_its_drop_would() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::new(dir.path());
        let (gw, target) = priced_by_reported_id(dir.path());
        // The server has named the model it serves, so admissions hold a priced worst case.
        let _ = gw.inner.price(&target, "served-2025", &Usage::default());
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let lines = || {
            pegasus_store::read_ledger(&home.ledger_file())
                .unwrap()
                .records
        };
        let held = || lock(&gw.inner.reserved).project("alpha");
        let closed = |call: &str| {
            std::fs::read_to_string(home.pending_calls_file())
                .unwrap()
                .contains(&format!(r#"{{"done":"{call}"}}"#))
        };

        let settled = admit(&gw, &target);
        assert!(held() > 0.0, "admitted: its worst case is held");
        let call = settled.call.call.clone();
        let usage = Usage {
            input_tokens: 100,
            output_tokens: 20,
            ..Default::default()
        };
        let line = settled
            .call
            .entry(&usage, Some(0.25), Some("req-1".into()), false);
        rt.block_on(settled.settle(line.clone()));
        assert_eq!(lines(), vec![line], "exactly its one line");
        assert_eq!(held(), 0.0);
        assert!(closed(&call));

        // Never answered (refused, or not journaled): no line, whichever way it ends.
        let abandoned = admit(&gw, &target);
        let call = abandoned.call.call.clone();
        rt.block_on(abandoned.abandon(Abandon::Failed));
        drop(admit(&gw, &target));
        assert_eq!(lines().len(), 1, "no line for an attempt never answered");
        assert_eq!(held(), 0.0);
        assert!(closed(&call));

        // An answer that began and broke: one estimated line of what arrived, whichever way.
        let answered = || {
            let r = admit(&gw, &target);
            r.progress.answered();
            let seen = SeenUsage {
                input: Some(121),
                ..Default::default()
            };
            r.progress.update(400, seen, "msg_9", "served-2025");
            r
        };
        let abandoned = answered();
        let call = abandoned.call.call.clone();
        rt.block_on(abandoned.abandon(Abandon::Failed));
        // Outside the runtime the drop writes on this thread, so its line is there at once.
        drop(answered());
        let all = lines();
        assert_eq!(all.len(), 3, "one line each: {all:?}");
        let (by_abandon, by_drop) = (&all[1], &all[2]);
        assert_eq!(by_abandon.call.as_deref(), Some(call.as_str()));
        assert!(by_abandon.estimated);
        assert!(by_abandon.usd.is_some_and(|u| u > 0.0), "{by_abandon:?}");
        let but_call_and_time = |e: &LedgerEntry| LedgerEntry {
            ts: by_drop.ts,
            call: None,
            ..e.clone()
        };
        assert_eq!(but_call_and_time(by_abandon), but_call_and_time(by_drop));
        assert_eq!(held(), 0.0);
        assert!(closed(&call));
    }

    /// An Anthropic stream cut after some text: `message_start` reported the input and an
    /// output of 0 (llama.cpp) or 1 (Anthropic); the line counts the text received, and the
    /// input as reported.
    #[test]
    fn a_cut_streams_early_output_count_is_a_floor() {
        let dir = tempfile::tempdir().unwrap();
        let (gw, target) = priced_by_reported_id(dir.path());
        let mut stream = crate::anthropic::Stream::default();
        for event in [
            r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"served-2025","content":[],"stop_reason":null,"usage":{"input_tokens":121,"output_tokens":0}}}"#,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Once upon a time, a dragon lived in a cave by the sea."}}"#,
        ] {
            stream.event("message", event, None).unwrap();
        }
        let (bytes, seen, id, model) = stream.progress();
        let r = admit(&gw, &target);
        r.progress.answered();
        r.progress.update(bytes, seen, id, model);
        let line = r.unbilled().unwrap();
        assert_eq!(line.input_tokens, 121, "the input as reported");
        assert_eq!(line.output_tokens, tokens_of_bytes(bytes as usize));
        assert!(line.output_tokens > 10, "{line:?}");
        // A count above the text's estimate stands.
        let r2 = admit(&gw, &target);
        r2.progress.answered();
        let more = SeenUsage {
            input: Some(121),
            output: Some(500),
            ..Default::default()
        };
        r2.progress.update(bytes, more, id, model);
        assert_eq!(r2.unbilled().unwrap().output_tokens, 500);
    }
}
