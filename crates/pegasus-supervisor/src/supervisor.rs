//! The daemon's shared state: which projects have a supervised worker, the event bus, the
//! shutdown token, and the ways into the MainAgent. What each control verb does with it lives
//! in [`crate::handlers`], whose dispatch hands each handler only the parts it uses; a slot
//! gets only what it uses ([`SlotCtx`]).

use crate::{
    bus::EventBus,
    error::RequestError,
    handlers::{approvals::Approvals, project::Listing},
    pending::PendingSpawns,
    slot::{self, SlotCmd, SlotCtx, SlotEvent, SlotHandle},
    watchdog::Watchdogs,
};
use pegasus_llm::Gateway;
use pegasus_proto::{ctl::ProjectInfo, Channel, WorkerState};
use pegasus_store::{Config, Home, ProjectStatus};
use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{Arc, Mutex, MutexGuard},
    time::Instant,
};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// What the daemon answers requests with. Not a locator: the handlers, the slots and the
/// daemon's own tasks are each given the parts they use, never the whole.
pub(crate) struct Supervisor {
    pub home: Home,
    pub config: Config,
    /// When pegasusd started, for `status`.
    started: Instant,
    /// The supervised workers.
    pub slots: Arc<Slots>,
    /// Serialises every read-modify-write of a PROJECT.md and the slot change that goes with it,
    /// so two clients suspending and resuming at once cannot interleave.
    pub lifecycle_lock: tokio::sync::Mutex<()>,
    /// The one shutdown signal: every long-lived task (accept loops, connections, followers,
    /// the MainAgent, the bus consumers) watches it and drains when it fires.
    pub shutdown: CancellationToken,
    /// The LLM gateway: every model call of every worker and of the MainAgent goes through it.
    pub gateway: Gateway,
    /// Every event of every worker, for every consumer.
    pub bus: EventBus,
    /// What the listing rows are made of (the projects' files, the live workers, their
    /// activity, waiting approvals and limits).
    pub listing: Listing,
    /// The approvals pegasusd answers, and expires by its own clock.
    pub approvals: Arc<Approvals>,
    /// What of each project waits for the user, for `status` (read again when its index changes).
    pub(crate) waiting: pegasus_tasks::WaitingCache,
    /// The MainAgent's inbox (crash notices, project notifies and replies, chat).
    pub main: MainInbox,
    /// Project messages the MainAgent holds until the user speaks (for `status`).
    pub(crate) main_held: Arc<crate::main_agent::Held>,
    /// What keeps models from answering, found at start (see [`crate::model_check`]).
    problems: Mutex<Vec<String>>,
}

/// The parts of the daemon that the slots share with the daemon's own tasks only (the worker
/// sockets, the sweeper, the watchdog): made by [`Supervisor::new`] and handed back, not kept
/// in the [`Supervisor`], since no request uses them.
pub(crate) struct Background {
    /// The spawns waiting for their worker's hello (claimed by the worker sockets).
    pub spawns: Arc<PendingSpawns>,
    /// The watchdogs of all workers (fed from the bus); the LLM proxy asks them for refusals.
    pub watchdogs: Arc<Watchdogs>,
    /// Sweeps of escaped processes, coalesced (see [`crate::sweeper`]).
    pub sweeper: Arc<crate::sweeper::Sweeper>,
}

/// Something for the MainAgent: a text on a channel, and maybe somebody waiting for its answer.
pub(crate) struct MainInput {
    pub channel: Channel,
    pub text: String,
    pub answer: Option<oneshot::Sender<Result<String, String>>>,
}

/// The MainAgent's inbox: what it is told, and asked (crash notices, a worker's notifies and
/// replies, chat). Cheap to clone.
#[derive(Clone)]
pub(crate) struct MainInbox(mpsc::UnboundedSender<MainInput>);

impl MainInbox {
    /// The inbox whose messages `tx`'s receiver (the MainAgent) takes.
    pub fn new(tx: mpsc::UnboundedSender<MainInput>) -> MainInbox {
        MainInbox(tx)
    }

    /// Hands something to the MainAgent (it answers in its own time).
    pub fn tell(&self, channel: Channel, text: String) {
        let _ = self.0.send(MainInput {
            channel,
            text,
            answer: None,
        });
    }

    /// A message to the MainAgent on `channel`, answered with its reply.
    pub async fn ask(&self, channel: Channel, text: String) -> Result<String, RequestError> {
        let (tx, rx) = oneshot::channel();
        self.0
            .send(MainInput {
                channel,
                text,
                answer: Some(tx),
            })
            .map_err(|_| {
                RequestError::unavailable("the MainAgent is not running; see the pegasusd log")
            })?;
        rx.await
            .map_err(|_| {
                RequestError::unavailable(
                    "the MainAgent stopped before answering; see the pegasusd log",
                )
            })?
            .map_err(RequestError::Unavailable)
    }
}

/// A poisoned lock only means another task panicked while holding it; the maps stay usable.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Supervisor {
    #[allow(clippy::too_many_arguments)] // each is a part of the daemon made before it starts
    pub fn new(
        home: Home,
        config: Config,
        worker_bin: PathBuf,
        gateway: Gateway,
        main: MainInbox,
        slot_events: mpsc::UnboundedSender<SlotEvent>,
        elsewhere: crate::remote::Elsewhere,
        limits: Arc<crate::limits::Limits>,
    ) -> (Arc<Self>, Background) {
        let approval_counts = Arc::new(crate::approval_counts::ApprovalCounts::new(
            home.projects_dir(),
        ));
        let approval_clock = Arc::new(crate::approval_clock::ApprovalClock::new(&home));
        let watchdogs = Arc::new(Watchdogs::new(&config.watchdog));
        let spawns = Arc::new(PendingSpawns::default());
        let (bus, activity, sweeper) = (EventBus::new(), Arc::default(), Arc::default());
        let projects = gateway.projects();
        let shutdown = CancellationToken::new();
        let slot_ctx = Arc::new(SlotCtx {
            home: home.clone(),
            config: config.clone(),
            config_json: serde_json::to_string(&config).unwrap_or_else(|e| {
                tracing::error!("cannot encode the settings for the workers: {e}");
                String::new()
            }),
            worker_bin,
            gateway: gateway.clone(),
            bus: bus.clone(),
            activity: Arc::clone(&activity),
            watchdogs: watchdogs.clone(),
            projects: projects.clone(),
            limits: limits.clone(),
            sweeper: Arc::clone(&sweeper),
            spawns: spawns.clone(),
            remote: elsewhere.remote,
            pods: elsewhere.pods,
            main: main.clone(),
            slot_events,
            stopping: shutdown.clone(),
        });
        let slots = Arc::new(Slots {
            by_project: Mutex::new(HashMap::new()),
            ctx: slot_ctx,
            shutdown: shutdown.clone(),
        });
        let listing = Listing {
            home: home.clone(),
            config: config.clone(),
            projects,
            gateway: gateway.clone(),
            slots: slots.clone(),
            activity,
            approval_counts: approval_counts.clone(),
            limits,
        };
        let approvals = Arc::new(Approvals {
            home: home.clone(),
            clock: approval_clock,
            counts: approval_counts,
            slots: slots.clone(),
        });
        let sup = Arc::new(Supervisor {
            gateway,
            main,
            main_held: Arc::default(),
            problems: Mutex::default(),
            home,
            config,
            started: Instant::now(),
            slots,
            lifecycle_lock: tokio::sync::Mutex::new(()),
            shutdown,
            bus,
            listing,
            approvals,
            waiting: Default::default(),
        });
        let background = Background {
            spawns,
            watchdogs,
            sweeper,
        };
        (sup, background)
    }

    /// The restart scan: a worker for every active project, the invalid ones reported.
    pub fn restart_scan(self: &Arc<Self>) -> Result<(), pegasus_store::StoreError> {
        // First what escaped its worker while no daemon was there to sweep (see
        // `pegasus_sandbox::adopted::kill_marked`).
        match pegasus_sandbox::adopted::kill_marked(self.home.root()) {
            0 => {}
            n => tracing::warn!(
                killed = n,
                "killed commands that outlived their worker while pegasusd was down"
            ),
        }
        let entries = pegasus_store::scan_projects(&self.home)?;
        // Before any worker asks: a model that cannot answer is said now, once per problem.
        let (problems, any_works) = crate::model_check::check(&self.config, &entries);
        for line in &problems {
            if any_works {
                tracing::warn!("{line}");
            } else {
                tracing::error!("{line}");
            }
        }
        if !any_works {
            tracing::error!("no model can answer: pegasusd serves, but every message will fail until this is fixed");
        }
        *lock(&self.problems) = problems;
        let (mut active, mut invalid) = (0, 0);
        for entry in &entries {
            match &entry.project {
                Ok(p) if p.status() == ProjectStatus::Active => {
                    active += 1;
                    self.slots.start(&entry.name);
                }
                Ok(_) => {}
                Err(e) => {
                    invalid += 1;
                    tracing::warn!(project = %entry.name, "invalid project, not started: {e}");
                }
            }
        }
        tracing::info!(
            projects = entries.len(),
            active,
            invalid,
            "restart scan done"
        );
        Ok(())
    }

    /// How long pegasusd has been serving, in seconds.
    pub fn uptime_s(&self) -> u64 {
        self.started.elapsed().as_secs()
    }

    /// What keeps models from answering, as the restart scan found it.
    pub fn problems(&self) -> Vec<String> {
        lock(&self.problems).clone()
    }
}

/// The supervised workers: one slot per active project, started with what a slot uses.
pub(crate) struct Slots {
    by_project: Mutex<HashMap<String, SlotHandle>>,
    /// What every slot is given of the daemon.
    ctx: Arc<SlotCtx>,
    /// Once it fires, no new slot starts.
    shutdown: CancellationToken,
}

impl Slots {
    /// Starts supervising `name` unless it already is.
    pub fn start(&self, name: &str) {
        let mut slots = lock(&self.by_project);
        // Once the daemon is stopping, no new worker may start behind the drain of stop_all.
        if self.shutdown.is_cancelled() || slots.get(name).is_some_and(|s| !s.is_finished()) {
            return;
        }
        slots.insert(
            name.to_string(),
            slot::start(self.ctx.clone(), name.to_string()),
        );
    }

    /// Stops the worker of `name` gracefully (or by force after the timeout) and forgets it.
    pub async fn stop(&self, name: &str) {
        let handle = lock(&self.by_project).remove(name);
        if let Some(handle) = handle {
            handle.stop().await;
        }
    }

    /// Stops every worker at once; used by the graceful daemon shutdown.
    pub async fn stop_all(&self) {
        let handles: Vec<SlotHandle> = lock(&self.by_project).drain().map(|(_, h)| h).collect();
        // Every stop is under way before the first is awaited (a lazy `map` here would stop
        // the slots one after another).
        let stops: Vec<_> = handles
            .into_iter()
            .map(|h| tokio::spawn(async move { h.stop().await }))
            .collect();
        for stop in stops {
            let _ = stop.await;
        }
    }

    /// Whether `name`'s worker gave up (too many crashes, or not startable as it is).
    pub fn is_crash_looping(&self, name: &str) -> bool {
        lock(&self.by_project)
            .get(name)
            .is_some_and(|h| h.state() == WorkerState::CrashLooping)
    }

    /// The way to `name`'s slot, when it has one.
    pub fn cmd(&self, name: &str) -> Option<mpsc::Sender<SlotCmd>> {
        lock(&self.by_project).get(name).map(|h| h.cmd.clone())
    }

    /// Nudges a project's worker (if it has one running); see [`SlotCmd::Notify`].
    pub fn nudge(&self, name: &str, frame: pegasus_proto::worker::ToWorker) {
        if let Some(cmd) = self.cmd(name) {
            let _ = cmd.try_send(SlotCmd::Notify(frame));
        }
    }

    /// Sends a command to a project's slot without waiting; dropped when it has none.
    pub fn try_cmd(&self, name: &str, cmd: SlotCmd) {
        if let Some(tx) = self.cmd(name) {
            let _ = tx.try_send(cmd);
        }
    }

    /// Copies the live worker facts into listing rows.
    pub fn fill(&self, infos: &mut [ProjectInfo]) {
        let slots = lock(&self.by_project);
        for info in infos.iter_mut() {
            if let Some(slot) = slots.get(&info.name) {
                slot.fill(info);
            }
        }
    }

    /// Why `name`'s worker runs without its limits, if it does.
    pub fn limits_problem(&self, name: &str) -> Option<String> {
        lock(&self.by_project)
            .get(name)
            .and_then(|s| s.limits_problem())
    }
}
