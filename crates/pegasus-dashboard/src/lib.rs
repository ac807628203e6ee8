//! The web dashboard and REST API, served beside pegasusd's core on `dashboard.listen`: a client
//! of the core's [`FrontDoor`] (requests and the event bus) like the control socket, never a
//! part of it.
//!
//! * [`auth`]: the token in `run/dashboard.token`, the session cookie it is exchanged for, the
//!   `Host` check (DNS rebinding) and the `Origin` check on mutations; everything else is 401.
//! * [`api`]: `/api/...`, JSON in the shapes `pegasusctl --json` prints; every change goes
//!   through the daemon's front door, as the control socket's do ([`FrontDoor::request`]). Every
//!   error answer is `{"error": "..."}` ([`api::json_errors`], around everything).
//! * [`events`]: `GET /api/events`, the event bus as Server-Sent Events, resumable from a ring
//!   buffer with `Last-Event-ID`; a client that falls behind gets `resync` and is dropped.
//! * [`pages`]: server-rendered HTML (maud: every value escaped; model text as Markdown with
//!   its raw HTML shown as text, [`markdown`]), one stylesheet and one small script, no build
//!   step, nothing fetched from elsewhere; only the actions the state allows ([`actions`]),
//!   states in words ([`words`]), tool calls folded with their results ([`transcript`]), costs
//!   as inline SVG ([`chart`]).

mod actions;
mod api;
mod auth;
mod chart;
mod events;
mod markdown;
mod pages;
mod transcript;
mod words;

use axum::routing::{get, post};
use axum::Router;
use pegasus_supervisor::gate::{Caps, Gate, Idle, Peer};
use pegasus_supervisor::FrontDoor;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// What every request handler may use.
#[derive(Clone)]
pub(crate) struct Dash {
    pub door: FrontDoor,
    pub token: Arc<String>,
    /// Session ids handed out as cookies (in memory: a daemon restart logs browsers out).
    pub sessions: Arc<Mutex<std::collections::HashSet<String>>>,
    /// The bound address, for the `Host` and `Origin` checks.
    pub addr: SocketAddr,
    pub ring: Arc<events::Ring>,
}

/// The dashboard as a client of pegasusd's core ([`pegasus_supervisor::DaemonOptions`]); it
/// has nothing to do when `dashboard.enabled` is false.
pub fn client() -> pegasus_supervisor::Client {
    Box::new(|door: FrontDoor| {
        if !door.config().dashboard.enabled {
            return None;
        }
        Some(Box::pin(serve(door)) as _)
    })
}

/// Serves the dashboard until the daemon's shutdown token fires. A dashboard that cannot bind
/// (the port is taken) is logged and skipped: the daemon runs on without it.
async fn serve(door: FrontDoor) {
    let home = door.home().clone();
    let want = door.config().dashboard.listen.clone();
    let listener = match tokio::net::TcpListener::bind(&want).await {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!("the dashboard cannot listen on {want}: {e}; running without it (set `dashboard.listen` in config.yml)");
            return;
        }
    };
    let addr = match listener.local_addr() {
        Ok(a) => a,
        Err(e) => return tracing::warn!("the dashboard has no address: {e}"),
    };
    let token = match auth::ensure_token(&home.dashboard_token_file()) {
        Ok(t) => t,
        Err(e) => return tracing::warn!("the dashboard has no token, so it does not start: {e}"),
    };
    if let Err(e) =
        pegasus_store::write_atomic(&home.dashboard_addr_file(), addr.to_string().as_bytes())
    {
        tracing::warn!("cannot write {}: {e}", home.dashboard_addr_file().display());
    }
    let ring = Arc::new(events::Ring::default());
    events::observe(&door, ring.clone());
    let dash = Dash {
        door: door.clone(),
        token: Arc::new(token),
        sessions: Arc::default(),
        addr,
        ring,
    };
    let app = Router::new()
        .route("/", get(pages::projects))
        .route("/projects/{name}", get(pages::project))
        .route("/costs", get(pages::costs))
        .route("/crashes", get(pages::crashes))
        .route("/search", get(pages::search))
        .route("/approvals", get(pages::approvals))
        .route("/approvals/{id}", get(pages::approval))
        .route("/static/app.js", get(pages::script))
        .route("/static/app.css", get(pages::stylesheet))
        .route("/api/session", post(auth::session))
        .route("/api/status", get(api::status))
        .route(
            "/api/projects",
            get(api::projects).post(api::create_project),
        )
        .route("/api/projects/{name}", get(api::project))
        .route("/api/projects/{name}/{verb}", post(api::lifecycle))
        .route("/api/projects/{name}/messages", post(api::send))
        .route("/api/projects/{name}/session", get(api::session))
        .route(
            "/api/projects/{name}/tasks",
            get(api::tasks).post(api::add_task),
        )
        .route("/api/tasks/{id}", get(api::task))
        .route("/api/tasks/{id}/{verb}", post(api::task_verb))
        .route("/api/roles", get(api::roles))
        .route("/api/costs", get(api::costs))
        .route("/api/search", get(api::search))
        .route("/api/approvals", get(api::approvals))
        .route("/api/approvals/{id}/{verb}", post(api::approval_answer))
        .route("/api/events", get(events::stream))
        .layer(axum::middleware::from_fn_with_state(
            dash.clone(),
            auth::guard,
        ))
        .with_state(dash);
    // Around the whole router, so every answer passes through it: the guard's, and axum's own
    // (an unknown route, a wrong method with its `Allow` header, a body or query it cannot
    // read), which a layer on the routes would see only in part.
    let app = Router::new()
        .fallback_service(app)
        .layer(axum::middleware::from_fn(api::json_errors));
    tracing::info!(%addr, "dashboard listening");
    accept(listener, app, door.shutdown().clone()).await;
    let _ = std::fs::remove_file(home.dashboard_addr_file());
}

/// How many connections the dashboard admits: a browser opens a handful per tab (one of them
/// the event stream), so a peer (one user of this host, or one address) gets 64.
const CAPS: Caps = Caps {
    total: 512,
    per_peer: 64,
    per_process: 64,
};
/// How long a request's headers may take from the moment the connection waits for them (so
/// also how long a kept-alive connection may sit idle between requests).
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection may move no byte at all (a response nobody reads, a stalled body);
/// the event stream says something every 15 s.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// The dashboard's accept loop (DESIGN.md §12, Listeners): each connection is admitted under
/// [`CAPS`] (a connection past them is closed at once, the refusal logged at a bounded rate)
/// and served on its own task with the header deadline and the idle timeout, until `stop`.
async fn accept(listener: tokio::net::TcpListener, app: Router, stop: CancellationToken) {
    let gate = Gate::new("dashboard", CAPS);
    tokio::spawn(gate.log().clone().run(stop.clone()));
    loop {
        let (tcp, peer) = tokio::select! {
            _ = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    gate.log().refused("(accept)", &format!("accept failed: {e}"));
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Some(ticket) = gate.admit(Peer::of_tcp(&tcp, peer)) else {
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let (app, stop) = (app.clone(), stop.clone());
        tokio::spawn(async move {
            let _ticket = ticket;
            let (io, activity) = Idle::new(tcp);
            let service = hyper_util::service::TowerToHyperService::new(app);
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(hyper_util::rt::TokioIo::new(io), service);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = activity.idle_for(IDLE_TIMEOUT) => {}
                _ = stop.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(Duration::from_secs(1), conn).await;
                }
            }
        });
    }
}
