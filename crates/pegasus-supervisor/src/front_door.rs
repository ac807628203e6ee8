//! The daemon's one front door: requests (the control protocol's [`CtlRequest`], answered with
//! one [`CtlResponse`]) and subscriptions to the event bus. Every client of the core goes
//! through it — the control socket, the dashboard (`pegasus-dashboard`), Telegram
//! (`pegasus-telegram`), the MainAgent's tools, the scheduler and a slot's idle suspend — so a
//! verb behaves the same whoever asks, and what it records names who asked (the [`Channel`]
//! given with the request).
//!
//! What it is not: a way to reach the daemon's internals. A client sees the home's files
//! (read-only by convention: every change is a request), the validated settings, the bus and the
//! shutdown signal, nothing else.

use crate::{
    handlers::{self, Request},
    supervisor::Supervisor,
};
use pegasus_proto::{
    ctl::{CtlRequest, CtlResponse},
    BusEvent, Channel,
};
use pegasus_store::{Config, Home};
use std::{
    collections::HashMap,
    future::Future,
    pin::Pin,
    sync::{Arc, Weak},
};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

pub use crate::bus::{next, Received, CAPACITY};

/// A client of the core that runs beside it for the daemon's life (the dashboard, Telegram):
/// started once the core serves, with its own door, and awaited (briefly) when the daemon
/// stops. `None` when it has nothing to do (disabled in config.yml, no token).
pub type Client =
    Box<dyn FnOnce(FrontDoor) -> Option<Pin<Box<dyn Future<Output = ()> + Send>>> + Send>;

/// The door a client holds; cheap to clone. It holds the core weakly: a client that outlives
/// the daemon's drain cannot keep it alive.
#[derive(Clone)]
pub struct FrontDoor {
    sup: Weak<Supervisor>,
    home: Home,
    config: Arc<Config>,
    shutdown: CancellationToken,
    secrets: Arc<HashMap<String, String>>,
}

impl FrontDoor {
    pub(crate) fn new(sup: &Arc<Supervisor>, secrets: HashMap<String, String>) -> Self {
        FrontDoor {
            sup: Arc::downgrade(sup),
            home: sup.home.clone(),
            config: Arc::new(sup.config.clone()),
            shutdown: sup.shutdown.clone(),
            secrets: Arc::new(secrets),
        }
    }

    /// A door whose daemon is gone (every request is refused as stopping), for tests of its
    /// clients.
    #[cfg(test)]
    pub(crate) fn detached(home: Home) -> Self {
        FrontDoor {
            sup: Weak::new(),
            home,
            config: Arc::new(Config::default()),
            shutdown: CancellationToken::new(),
            secrets: Arc::default(),
        }
    }

    /// One request from `from`, one response (a refusal is [`CtlResponse::Failed`] with the
    /// line a user reads). `Follow` is a subscription, not a request: see [`Self::subscribe`].
    pub async fn request(&self, from: &Channel, req: CtlRequest) -> CtlResponse {
        self.ask(from, Request::Ctl(req)).await
    }

    /// [`Self::request`], for the daemon's own clients, which may also ask what no control
    /// request says (a `planned` task for a scheduled job).
    pub(crate) async fn ask(&self, from: &Channel, req: Request) -> CtlResponse {
        match self.sup.upgrade() {
            Some(sup) => handlers::dispatch(&sup, from, req).await,
            None => CtlResponse::Failed {
                kind: pegasus_proto::ctl::ErrorKind::Unavailable,
                message: "pegasusd is stopping; try again when it is back".into(),
            },
        }
    }

    /// Every bus event published from now on (see [`next`] for reading it, lag included).
    /// Once the daemon is gone it is closed at once.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<BusEvent>> {
        match self.sup.upgrade() {
            Some(sup) => sup.bus.subscribe(),
            None => broadcast::channel(1).1,
        }
    }

    /// Adds an observer of the bus: called with every later event, in bus order, inside the
    /// publish (it must be quick and must not publish); it never lags.
    pub fn observe(&self, observer: impl Fn(&Arc<BusEvent>) + Send + Sync + 'static) {
        if let Some(sup) = self.sup.upgrade() {
            sup.bus.observe(observer);
        }
    }

    /// The home: clients read its files (sessions, tasks, the ledger); they change nothing
    /// there but through requests.
    pub fn home(&self) -> &Home {
        &self.home
    }

    /// The validated settings (config.yml as pegasusd read it at start).
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Fires when the daemon starts to stop: a client drains and returns.
    pub fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }

    /// A secret pegasusd took from its environment at start for a client (the Telegram bot
    /// token, by the variable named in config.yml), so no child process ever inherits it.
    pub fn secret(&self, env_name: &str) -> Option<&str> {
        self.secrets.get(env_name).map(String::as_str)
    }
}

/// Reads a response a client expects to be one kind, or the refusal's line.
pub fn refusal(resp: CtlResponse) -> String {
    match resp {
        CtlResponse::Failed { message, .. } | CtlResponse::Error { message } => message,
        _ => "pegasusd gave an answer of another kind; see its log".into(),
    }
}
