//! The daemon's shared state: which projects have a supervised worker, which spawns are waiting
//! for their worker to call back, the event bus, the shutdown token, and the ways into the
//! MainAgent. What each control verb does with it lives in [`crate::handlers`].

use crate::{
    activity::Activity,
    bus::EventBus,
    error::RequestError,
    slot::{self, SlotCmd, SlotEvent, SlotHandle, WorkerConn},
    watchdog::Watchdogs,
};
use pegasus_llm::Gateway;
use pegasus_proto::{ctl::ProjectInfo, Channel, WorkerState};
use pegasus_store::{Config, Home, ProjectRegistry, ProjectStatus};
use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{Arc, Mutex, MutexGuard},
    time::Instant,
};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// A spawn whose worker has not said hello yet, keyed by its token.
pub(crate) struct PendingSpawn {
    pub project: String,
    pub tx: oneshot::Sender<WorkerConn>,
    /// A local worker's pid, once spawned: the only process that may say this spawn's hello
    /// on the worker socket. `None` for a launch elsewhere (it comes over TLS).
    pub pid: Option<u32>,
}

/// Why a project's worker is not started now.
#[derive(Debug)]
pub enum StartError {
    /// Something that may pass (a missing client, a config to fix): counted like a crash.
    Crash(String),
    /// The project must not start as it is (SPEC §12): not retried until `project resume`.
    Refused(String),
}

pub(crate) struct Supervisor {
    pub home: Home,
    pub config: Config,
    /// `config`, as the JSON every worker gets in its `Init` (pegasusd is the one reader of
    /// config.yml).
    pub config_json: String,
    pub worker_bin: PathBuf,
    pub started: Instant,
    slots: Mutex<HashMap<String, SlotHandle>>,
    pending: Mutex<HashMap<String, PendingSpawn>>,
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
    /// What each worker is doing now (from the bus), for `status`.
    pub activity: Arc<Activity>,
    /// Waiting approvals per project, for listings.
    pub(crate) approval_counts: Arc<crate::approval_counts::ApprovalCounts>,
    /// When pegasusd first saw each waiting approval: its expiry is judged from there.
    pub(crate) approval_clock: crate::approval_clock::ApprovalClock,
    /// What of each project waits for the user, for `status` (read again when its index changes).
    pub(crate) waiting: pegasus_tasks::WaitingCache,
    /// The watchdogs of all workers (fed from the bus); the LLM proxy asks them for refusals.
    pub watchdogs: Watchdogs,
    /// Sweeps of escaped processes, coalesced (see [`crate::sweeper`]).
    pub sweeper: Arc<crate::sweeper::Sweeper>,
    /// Every project as its PROJECT.md says now: pegasusd's one reader of those files (listing
    /// rows, budgets, models), shared with the gateway.
    pub projects: Arc<ProjectRegistry>,
    /// The MainAgent's inbox (crash notices, project notifies and replies, chat).
    main_tx: mpsc::UnboundedSender<MainInput>,
    /// Project messages the MainAgent holds until the user speaks (for `status`).
    pub(crate) main_held: Arc<crate::main_agent::Held>,
    /// What keeps models from answering, found at start (see [`crate::model_check`]).
    pub(crate) problems: Mutex<Vec<String>>,
    /// What the slots ask of the daemon (see [`SlotEvent`]).
    slot_events: mpsc::UnboundedSender<SlotEvent>,
    /// Workers on other hosts (`workers.listen`), when configured.
    pub remote: Option<Arc<crate::remote::Remote>>,
    /// The Kubernetes launchers, by name (SPEC §14).
    pub pods: HashMap<String, Arc<pegasus_kube::PodLauncher>>,
    /// Per-project limits (SPEC §12): the home's cgroups, or why there are none.
    pub limits: crate::limits::Limits,
}

/// Something for the MainAgent: a text on a channel, and maybe somebody waiting for its answer.
pub(crate) struct MainInput {
    pub channel: Channel,
    pub text: String,
    pub answer: Option<oneshot::Sender<Result<String, String>>>,
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
        main_tx: mpsc::UnboundedSender<MainInput>,
        slot_events: mpsc::UnboundedSender<SlotEvent>,
        elsewhere: crate::remote::Elsewhere,
        limits: crate::limits::Limits,
    ) -> Arc<Self> {
        let approval_counts = Arc::new(crate::approval_counts::ApprovalCounts::new(
            home.projects_dir(),
        ));
        let approval_clock = crate::approval_clock::ApprovalClock::new(&home);
        Arc::new(Supervisor {
            projects: gateway.projects(),
            gateway,
            main_tx,
            main_held: Arc::default(),
            problems: Mutex::default(),
            slot_events,
            remote: elsewhere.remote.map(Arc::new),
            pods: elsewhere.pods,
            limits,
            watchdogs: Watchdogs::new(&config.watchdog),
            home,
            config_json: serde_json::to_string(&config).unwrap_or_else(|e| {
                tracing::error!("cannot encode the settings for the workers: {e}");
                String::new()
            }),
            config,
            worker_bin,
            started: Instant::now(),
            slots: Mutex::new(HashMap::new()),
            pending: Mutex::new(HashMap::new()),
            lifecycle_lock: tokio::sync::Mutex::new(()),
            shutdown: CancellationToken::new(),
            bus: EventBus::new(),
            activity: Arc::default(),
            approval_counts,
            approval_clock,
            waiting: Default::default(),
            sweeper: Default::default(),
        })
    }

    /// Announces a spawn; the accept loop completes the receiver when its worker says hello.
    pub fn register_spawn(&self, token: &str, project: &str) -> oneshot::Receiver<WorkerConn> {
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(
            token.to_string(),
            PendingSpawn {
                project: project.to_string(),
                tx,
                pid: None,
            },
        );
        rx
    }

    /// Records the pid of a local spawn's worker, before it is handed its token: from then on
    /// the worker socket lets that process (and only it) say the spawn's hello.
    pub fn spawned(&self, token: &str, pid: u32) {
        if let Some(p) = lock(&self.pending).get_mut(token) {
            p.pid = Some(pid);
        }
    }

    /// Whether `pid` is a worker pegasusd spawned that has not said hello yet: the only peers
    /// the worker socket serves.
    pub fn awaits_hello_from(&self, pid: u32) -> bool {
        lock(&self.pending).values().any(|p| p.pid == Some(pid))
    }

    /// Forgets a spawn that will never say hello (it died or timed out).
    pub fn cancel_spawn(&self, token: &str) {
        lock(&self.pending).remove(token);
    }

    /// Claims a spawn by token; each token works once.
    pub fn take_spawn(&self, token: &str) -> Option<PendingSpawn> {
        lock(&self.pending).remove(token)
    }

    /// Starts supervising `name` unless it already is.
    pub fn start_slot(self: &Arc<Self>, name: &str) {
        let mut slots = lock(&self.slots);
        // Once the daemon is stopping, no new worker may start behind the drain of stop_all.
        if self.shutdown.is_cancelled() || slots.get(name).is_some_and(|s| !s.is_finished()) {
            return;
        }
        slots.insert(
            name.to_string(),
            slot::start(self.clone(), name.to_string()),
        );
    }

    /// Stops the worker of `name` gracefully (or by force after the timeout) and forgets it.
    pub async fn stop_slot(&self, name: &str) {
        let handle = lock(&self.slots).remove(name);
        if let Some(handle) = handle {
            handle.stop().await;
        }
    }

    /// Stops every worker at once; used by the graceful daemon shutdown.
    pub async fn stop_all(&self) {
        let handles: Vec<SlotHandle> = lock(&self.slots).drain().map(|(_, h)| h).collect();
        let stops = handles
            .into_iter()
            .map(|h| tokio::spawn(async move { h.stop().await }));
        for stop in stops {
            let _ = stop.await;
        }
    }

    pub fn is_crash_looping(&self, name: &str) -> bool {
        lock(&self.slots)
            .get(name)
            .is_some_and(|h| h.state() == WorkerState::CrashLooping)
    }

    pub fn slot_cmd(&self, name: &str) -> Option<tokio::sync::mpsc::Sender<SlotCmd>> {
        lock(&self.slots).get(name).map(|h| h.cmd.clone())
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
                    self.start_slot(&entry.name);
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

    /// Tells the daemon what a slot asks of it.
    pub fn slot_event(&self, event: SlotEvent) {
        let _ = self.slot_events.send(event);
    }

    /// Hands something to the MainAgent (it answers in its own time).
    pub fn to_main(&self, channel: Channel, text: String) {
        let _ = self.main_tx.send(MainInput {
            channel,
            text,
            answer: None,
        });
    }

    /// A message to the MainAgent on `channel`, answered with its reply.
    pub async fn ask_main(&self, channel: Channel, text: String) -> Result<String, RequestError> {
        let (tx, rx) = oneshot::channel();
        self.main_tx
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

    /// Copies the live facts (worker, its state, its running task and stage) into listing rows.
    pub fn fill_live(&self, infos: &mut [ProjectInfo]) {
        let slots = lock(&self.slots);
        for info in infos.iter_mut() {
            if let Some(slot) = slots.get(&info.name) {
                slot.fill(info);
            }
        }
        drop(slots);
        self.activity.fill(infos);
        self.approval_counts.fill(infos);
    }

    /// Adds each project's limits (SPEC §12) and whether they apply to listing rows: for
    /// `project list` and `show`, not `status` (one more look at each PROJECT.md).
    pub fn fill_limits(&self, infos: &mut [ProjectInfo]) {
        use pegasus_store::launcher::LOCAL;
        let slots = lock(&self.slots);
        for info in infos.iter_mut().filter(|i| i.status.is_some()) {
            let problem = slots.get(&info.name).and_then(|s| s.limits_problem());
            let project = self.projects.project(&info.name);
            let limits = crate::limits::Limits::effective(&self.config, project.as_deref());
            let launcher = project.as_deref().and_then(|p| p.launcher());
            let remote = launcher.unwrap_or(&self.config.default_launcher) != LOCAL;
            info.limits = Some(self.limits.info(&limits, remote, problem.as_deref()));
        }
    }

    /// The model a project's worker uses: its PROJECT.md `model`, else the default.
    pub fn project_model(&self, name: &str) -> String {
        let model = self.projects.model(name).unwrap_or_default();
        self.gateway.resolve_model(&model)
    }

    /// Where project `name`'s worker runs: `None` for this machine (`local`), else the name of
    /// its launcher and how it launches; an error says what to fix, and whether to retry.
    ///
    /// Checked first, the project is never started (a [`StartError::Refused`]) when one of its
    /// paths reaches the home (SPEC §12: a PROJECT.md edited by hand), or when it is a remote
    /// project whose PROJECT.md changed its launcher, workdir or commands outside pegasusd
    /// (its folder is on storage the worker's host writes): a remote project is launched only
    /// where pegasusd's own record says (`pegasus_store::remote_record`), kept at its first
    /// launch.
    pub fn launcher_of(
        &self,
        name: &str,
    ) -> Result<Option<(String, crate::slot::Launch)>, StartError> {
        use crate::slot::Launch;
        use pegasus_store::launcher::{LauncherConfig, LOCAL};
        use pegasus_store::remote_record::{self, RemoteRecord};
        let dir = self.home.project_dir(name);
        // An unloadable PROJECT.md is reported by the worker that loads it.
        let file = pegasus_store::ProjectFile::load(&dir).ok();
        if let Some(f) = &file {
            pegasus_store::home_guard::check_project(&self.home, &dir, f)
                .map_err(StartError::Refused)?;
        }
        let record = remote_record::read(&self.home, name).map_err(StartError::Refused)?;
        let said = file
            .as_ref()
            .and_then(|p| p.launcher().map(str::to_string))
            .unwrap_or_else(|| self.config.default_launcher.clone());
        let launcher = match (&record, &file) {
            (Some(rec), Some(f)) => {
                let changed = rec.changed(&said, f);
                if !changed.is_empty() {
                    return Err(StartError::Refused(format!(
                        "PROJECT.md of remote project {name} changed `{}` outside pegasusd (its worker's host can write that folder); if you made that change, remove {} and run `pegasusctl project resume {name}`",
                        changed.join("`, `"),
                        remote_record::path(&self.home, name).display()
                    )));
                }
                rec.launcher.clone()
            }
            // Unreadable PROJECT.md: where the record says; the worker reports the file.
            (Some(rec), None) => rec.launcher.clone(),
            (None, _) => said,
        };
        if launcher == LOCAL {
            return Ok(None);
        }
        let launch = match self.config.launchers.get(&launcher) {
            Some(LauncherConfig::Command(c)) => Launch::Command(c.clone()),
            Some(LauncherConfig::Kubernetes(_)) => match self.pods.get(&launcher) {
                Some(pods) => Launch::Pod(pods.clone()),
                None => {
                    return Err(StartError::Crash(format!(
                        "launcher {launcher} has no Kubernetes client; see the pegasusd log"
                    )))
                }
            },
            None => return Err(StartError::Crash(format!(
                "project {name} names launcher {launcher}, which config.yml does not have under `launchers:`; fix PROJECT.md or config.yml, then `pegasusctl project resume {name}`"
            ))),
        };
        if let (None, Some(f)) = (&record, &file) {
            remote_record::write(&self.home, name, &RemoteRecord::of(&launcher, f)).map_err(
                |e| {
                    StartError::Crash(format!(
                        "cannot keep the record of remote project {name}: {e}"
                    ))
                },
            )?;
        }
        Ok(Some((launcher, launch)))
    }

    /// Nudges a project's worker (if it has one running); see [`SlotCmd::Notify`].
    pub fn nudge(&self, name: &str, frame: pegasus_proto::worker::ToWorker) {
        if let Some(cmd) = self.slot_cmd(name) {
            let _ = cmd.try_send(SlotCmd::Notify(frame));
        }
    }

    /// Sends a command to a project's slot without waiting; dropped when it has none.
    pub fn try_slot_cmd(&self, name: &str, cmd: SlotCmd) {
        if let Some(tx) = self.slot_cmd(name) {
            let _ = tx.try_send(cmd);
        }
    }
}
