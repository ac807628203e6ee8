//! The daemon's shared state: which projects have a supervised worker, which spawns are waiting
//! for their worker to call back, and the lifecycle operations that tie PROJECT.md to processes.

use crate::{
    info,
    worker_slot::{self, Delivery, SlotCmd, SlotHandle, WorkerState},
};
use interprocess::local_socket::tokio::Stream;
use pegasus_llm::Gateway;
use pegasus_proto::{
    ctl::{CreateProject, DaemonStatus, ProjectInfo},
    FrameReader, FrameWriter,
};
use pegasus_store::{Config, Home, NewProject, ProjectFile, ProjectStatus, Verb};
use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{Arc, Mutex, MutexGuard},
    time::Instant,
};
use tokio::io::{ReadHalf, WriteHalf};
use tokio::sync::{mpsc, oneshot, watch};

/// A worker connection that passed the handshake, handed from the accept loop to its slot.
pub(crate) struct WorkerConn {
    pub reader: FrameReader<ReadHalf<Stream>>,
    pub writer: FrameWriter<WriteHalf<Stream>>,
    /// The pid the kernel reports for the peer (or, failing that, the one it claimed).
    pub pid: u32,
}

/// A spawn whose worker has not said hello yet, keyed by its token.
pub(crate) struct PendingSpawn {
    pub project: String,
    pub tx: oneshot::Sender<WorkerConn>,
}

pub(crate) struct Supervisor {
    pub home: Home,
    pub config: Config,
    pub config_path: PathBuf,
    pub worker_bin: PathBuf,
    pub started: Instant,
    slots: Mutex<HashMap<String, SlotHandle>>,
    pending: Mutex<HashMap<String, PendingSpawn>>,
    /// Serialises every read-modify-write of a PROJECT.md and the slot change that goes with it,
    /// so two clients suspending and resuming at once cannot interleave.
    lifecycle: tokio::sync::Mutex<()>,
    pub shutdown: watch::Sender<bool>,
    /// The LLM gateway: every model call of every worker and of the MainAgent goes through it.
    pub gateway: Gateway,
    /// The MainAgent's inbox (crash notices, project notifies and replies, chat).
    main_tx: mpsc::UnboundedSender<MainInput>,
}

/// Something for the MainAgent: a text on a channel, and maybe somebody waiting for its answer.
pub(crate) struct MainInput {
    pub channel: String,
    pub text: String,
    pub answer: Option<oneshot::Sender<Result<String, String>>>,
}

/// A poisoned lock only means another task panicked while holding it; the maps stay usable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Supervisor {
    pub fn new(
        home: Home,
        config: Config,
        config_path: PathBuf,
        worker_bin: PathBuf,
        gateway: Gateway,
        main_tx: mpsc::UnboundedSender<MainInput>,
    ) -> Arc<Self> {
        Arc::new(Supervisor {
            gateway,
            main_tx,
            home,
            config,
            config_path,
            worker_bin,
            started: Instant::now(),
            slots: Mutex::new(HashMap::new()),
            pending: Mutex::new(HashMap::new()),
            lifecycle: tokio::sync::Mutex::new(()),
            shutdown: watch::channel(false).0,
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
            },
        );
        rx
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
        if *self.shutdown.borrow() || slots.get(name).is_some_and(|s| !s.is_finished()) {
            return;
        }
        slots.insert(
            name.to_string(),
            worker_slot::start(self.clone(), name.to_string()),
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

    fn is_crash_looping(&self, name: &str) -> bool {
        lock(&self.slots)
            .get(name)
            .is_some_and(|h| h.state() == WorkerState::CrashLooping)
    }

    fn slot_cmd(&self, name: &str) -> Option<tokio::sync::mpsc::Sender<SlotCmd>> {
        lock(&self.slots).get(name).map(|h| h.cmd.clone())
    }

    /// The restart scan: a worker for every active project, the invalid ones reported.
    pub fn restart_scan(self: &Arc<Self>) -> Result<(), pegasus_store::StoreError> {
        let entries = pegasus_store::scan_projects(&self.home)?;
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

    /// Every project as listings show it, from the files plus the live slot state.
    pub fn project_infos(&self) -> Result<Vec<ProjectInfo>, String> {
        let entries = pegasus_store::scan_projects(&self.home).map_err(|e| e.to_string())?;
        let costs = pegasus_store::project_costs(&self.home).unwrap_or_default();
        let slots = lock(&self.slots);
        Ok(entries
            .iter()
            .map(|e| {
                let cost = costs.get(&e.name).copied().unwrap_or(0.0);
                let mut info = info::from_entry(e, cost);
                if let Some(slot) = slots.get(&e.name) {
                    slot.fill(&mut info);
                }
                info
            })
            .collect())
    }

    pub fn project_info(&self, name: &str) -> Result<ProjectInfo, String> {
        pegasus_store::validate_name(name).map_err(|e| e.to_string())?;
        self.project_infos()?
            .into_iter()
            .find(|p| p.name == name)
            .ok_or_else(|| format!("project {name} not found: see `pegasusctl project list`"))
    }

    pub fn status(&self) -> Result<DaemonStatus, String> {
        Ok(DaemonStatus {
            pid: std::process::id(),
            uptime_s: self.started.elapsed().as_secs(),
            home: self.home.root().display().to_string(),
            cost_today_usd: pegasus_store::cost_today(&self.home).unwrap_or(0.0),
            projects: self.project_infos()?,
        })
    }

    /// `project create`: folders + PROJECT.md, then a worker.
    pub async fn create(self: &Arc<Self>, req: CreateProject) -> Result<ProjectInfo, String> {
        let _guard = self.lifecycle.lock().await;
        let new = NewProject {
            name: req.name.clone(),
            goal: req.goal,
            background: req.background,
            constraints: req.constraints,
            model: req.model,
            workdir: req.workdir.map(PathBuf::from),
        };
        pegasus_store::create_project(&self.home, &new, chrono::Utc::now())
            .map_err(|e| e.to_string())?;
        tracing::info!(project = %req.name, "project created");
        self.start_slot(&req.name);
        drop(_guard);
        self.project_info(&req.name)
    }

    /// One lifecycle verb: PROJECT.md is written first (the durable intent), then the worker is
    /// started or stopped to match. A crash in between leaves a file that says what to do on boot.
    pub async fn lifecycle(
        self: &Arc<Self>,
        name: &str,
        verb: Verb,
    ) -> Result<ProjectInfo, String> {
        pegasus_store::validate_name(name).map_err(|e| e.to_string())?;
        let _guard = self.lifecycle.lock().await;
        let dir = self.home.project_dir(name);
        if !dir.join("PROJECT.md").exists() {
            return Err(format!(
                "project {name} not found: see `pegasusctl project list`"
            ));
        }
        let mut project =
            ProjectFile::load(&dir).map_err(|e| format!("project {name} is invalid: {e}"))?;
        // `resume` of an active project whose worker gave up (crash loop) restarts the worker;
        // any other resume of an active project is refused by the state machine below.
        if verb == Verb::Resume
            && project.status() == ProjectStatus::Active
            && self.is_crash_looping(name)
        {
            if let Some(cmd) = self.slot_cmd(name) {
                let _ = cmd.send(SlotCmd::Restart).await;
                tracing::info!(project = %name, "resumed after crash loop");
                drop(_guard);
                return self.project_info(name);
            }
        }
        let to = project
            .apply(verb, chrono::Utc::now())
            .map_err(|e| e.to_string())?;
        project.save(&dir).map_err(|e| e.to_string())?;
        tracing::info!(project = %name, %verb, status = %to, "lifecycle");
        if to == ProjectStatus::Active {
            self.start_slot(name);
        } else {
            self.stop_slot(name).await;
        }
        drop(_guard);
        self.project_info(name)
    }

    /// `project send`: deliver a message from `from`. Answered with the message id once the
    /// worker has it durably, or — with `wait` — with the project agent's reply.
    pub async fn send(
        &self,
        name: &str,
        from: &str,
        text: String,
        wait: bool,
    ) -> Result<(String, Option<String>), String> {
        pegasus_store::validate_name(name).map_err(|e| e.to_string())?;
        let Some(cmd) = self.slot_cmd(name) else {
            let dir = self.home.project_dir(name);
            if !dir.join("PROJECT.md").exists() {
                return Err(format!(
                    "project {name} not found: see `pegasusctl project list`"
                ));
            }
            return Err(match ProjectFile::load(&dir) {
                Ok(p) if p.status() == ProjectStatus::Suspended => format!(
                    "cannot send to project {name}: it is suspended; resume it with `pegasusctl project resume {name}`"
                ),
                Ok(p) => format!("cannot send to project {name}: it is {}", p.status()),
                Err(e) => format!("cannot send to project {name}: it is invalid: {e}"),
            });
        };
        let (persisted, persisted_rx) = oneshot::channel();
        let (answer, answer_rx) = if wait {
            let (tx, rx) = oneshot::channel();
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        let delivery = Delivery {
            from: from.to_string(),
            text,
            persisted,
            answer,
        };
        cmd.send(SlotCmd::Deliver(delivery))
            .await
            .map_err(|_| format!("project {name} is stopping; try again"))?;
        let id = persisted_rx.await.map_err(|_| {
            format!("project {name} stopped before taking the message; try again")
        })??;
        let reply = match answer_rx {
            Some(rx) => Some(
                rx.await
                    .map_err(|_| format!("project {name} stopped before answering"))??,
            ),
            None => None,
        };
        Ok((id, reply))
    }

    /// Hands something to the MainAgent (it answers in its own time).
    pub fn to_main(&self, channel: &str, text: String) {
        let _ = self.main_tx.send(MainInput {
            channel: channel.to_string(),
            text,
            answer: None,
        });
    }

    /// `chat`: a message to the MainAgent, answered with its reply.
    pub async fn chat(&self, text: String) -> Result<String, String> {
        let (tx, rx) = oneshot::channel();
        self.main_tx
            .send(MainInput {
                channel: "cli".into(),
                text,
                answer: Some(tx),
            })
            .map_err(|_| "the MainAgent is not running; see the pegasusd log".to_string())?;
        rx.await.map_err(|_| {
            "the MainAgent stopped before answering; see the pegasusd log".to_string()
        })?
    }

    /// The model a project's worker uses: its PROJECT.md `model`, else the default.
    pub fn project_model(&self, name: &str) -> String {
        let model = ProjectFile::load(&self.home.project_dir(name))
            .ok()
            .and_then(|p| p.model().map(str::to_string))
            .unwrap_or_default();
        self.gateway.resolve_model(&model)
    }

    /// Nudges a project's worker (if it has one running); see [`SlotCmd::Notify`].
    fn nudge(&self, name: &str, frame: pegasus_proto::worker::ToWorker) {
        if let Some(cmd) = self.slot_cmd(name) {
            let _ = cmd.try_send(SlotCmd::Notify(frame));
        }
    }

    /// `task cancel|retry|replay ID`.
    pub fn task_verb(&self, id: &str, verb: &str) -> Result<String, String> {
        use pegasus_tasks::TaskState;
        let (project, store) =
            pegasus_tasks::find_task(&self.home.projects_dir(), id).map_err(|e| e.to_string())?;
        let task = store.get(id).map_err(|e| e.to_string())?;
        let message = match verb {
            "cancel" => {
                if task.state.is_terminal() {
                    return Err(format!(
                        "task {id} is {}: nothing to cancel",
                        task.state.as_str()
                    ));
                }
                store
                    .transition(
                        id,
                        task.state,
                        TaskState::Cancelled,
                        "cli",
                        "cancelled by the user",
                    )
                    .map_err(|e| e.to_string())?;
                format!("task {id} cancelled (it stops at its next step)")
            }
            "retry" => {
                store
                    .transition(
                        id,
                        TaskState::Failed,
                        TaskState::Ready,
                        "cli",
                        "retried by the user",
                    )
                    .map_err(|e| e.to_string())?;
                format!("task {id} is ready again")
            }
            "replay" => {
                let new = store.replay(id, "cli").map_err(|e| e.to_string())?;
                store
                    .transition(
                        &new.id,
                        TaskState::Planned,
                        TaskState::Ready,
                        "cli",
                        &format!("replay of {id}"),
                    )
                    .map_err(|e| e.to_string())?;
                format!(
                    "task {} replays {id} from its frozen spec (version {})",
                    new.id, new.spec_version
                )
            }
            other => {
                return Err(format!(
                    "unknown task verb `{other}`: use cancel, retry or replay"
                ))
            }
        };
        self.nudge(&project, pegasus_proto::worker::ToWorker::TasksChanged);
        Ok(message)
    }

    /// `task answer ID TEXT`: the answer is recorded on the task, which goes back to ready.
    pub fn task_answer(&self, id: &str, text: &str) -> Result<String, String> {
        use pegasus_tasks::TaskState;
        let (project, store) =
            pegasus_tasks::find_task(&self.home.projects_dir(), id).map_err(|e| e.to_string())?;
        let task = store.get(id).map_err(|e| e.to_string())?;
        if task.state != TaskState::Blocked {
            return Err(format!(
                "task {id} is {}, not blocked: there is no question to answer",
                task.state.as_str()
            ));
        }
        store
            .update(id, "answer", serde_json::json!(text), "cli")
            .map_err(|e| e.to_string())?;
        store
            .transition(id, TaskState::Blocked, TaskState::Ready, "cli", "answered")
            .map_err(|e| e.to_string())?;
        self.nudge(&project, pegasus_proto::worker::ToWorker::TasksChanged);
        Ok(format!("task {id} answered; it is ready again"))
    }

    /// `role assign PROJECT ROLE [--var k=v]`: recorded in PROJECT.md `roles:` (replacing an
    /// earlier assignment of the same role); the worker picks it up when it next starts.
    pub async fn role_assign(
        &self,
        project: &str,
        role: &str,
        variables: Vec<(String, String)>,
    ) -> Result<String, String> {
        pegasus_store::validate_name(project).map_err(|e| e.to_string())?;
        let found =
            pegasus_roles::find_role(&self.home.roles_dir(), role).map_err(|e| e.to_string())?;
        let mut assignment = pegasus_roles::Assignment::new(&found.id);
        assignment.variables = variables.into_iter().collect();
        assignment.validate(&found).map_err(|e| e.to_string())?;
        let _guard = self.lifecycle.lock().await;
        let dir = self.home.project_dir(project);
        let mut file = ProjectFile::load(&dir).map_err(|e| e.to_string())?;
        let mut list = pegasus_roles::assignments_from_yaml(file.get("roles").as_ref())
            .map_err(|e| e.to_string())?;
        list.retain(|a| a.role != assignment.role);
        list.push(assignment);
        file.set("roles", &pegasus_roles::assignments_to_yaml(&list))
            .map_err(|e| e.to_string())?;
        file.save(&dir).map_err(|e| e.to_string())?;
        Ok(format!(
            "role {} assigned to project {project}; its worker uses it from its next start (`pegasusctl project suspend/resume {project}`)",
            found.id
        ))
    }

    /// `project run NAME --brief TEXT`: the run is created on disk, then driven by the worker.
    pub fn run_start(
        &self,
        project: &str,
        brief: &str,
        max_attempts: u32,
    ) -> Result<String, String> {
        pegasus_store::validate_name(project).map_err(|e| e.to_string())?;
        if brief.trim().is_empty() {
            return Err("the brief is empty: say what the run should achieve with --brief".into());
        }
        if max_attempts == 0 {
            return Err("--max-attempts must be at least 1".into());
        }
        if self.slot_cmd(project).is_none() {
            return Err(format!("project {project} has no worker: resume it with `pegasusctl project resume {project}`"));
        }
        let store = pegasus_runs::RunStore::open(&self.home.project_dir(project))
            .map_err(|e| e.to_string())?;
        if let Some(run) = store.latest().map_err(|e| e.to_string())? {
            use pegasus_runs::RunStatus::*;
            if matches!(run.status, Planning | Executing | Paused) {
                return Err(format!(
                    "project {project} already has run {} ({:?}): cancel it first with `pegasusctl run cancel {project}`",
                    run.id, run.status
                ));
            }
        }
        let run = store
            .create(project, brief, max_attempts)
            .map_err(|e| e.to_string())?;
        self.nudge(
            project,
            pegasus_proto::worker::ToWorker::RunStart {
                run_id: run.id.clone(),
            },
        );
        Ok(format!(
            "run {} started on project {project}: follow it with `pegasusctl run status {project}`",
            run.id
        ))
    }

    /// `run cancel|pause|resume NAME`: on the project's latest run.
    pub fn run_control(&self, project: &str, action: &str) -> Result<String, String> {
        pegasus_store::validate_name(project).map_err(|e| e.to_string())?;
        let store = pegasus_runs::RunStore::open(&self.home.project_dir(project))
            .map_err(|e| e.to_string())?;
        let run = store
            .latest()
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("project {project} has no run: start one with `pegasusctl project run {project} --brief TEXT`"))?;
        match action {
            "cancel" | "pause" => {
                let req = if action == "cancel" {
                    pegasus_runs::RunRequest::Cancel
                } else {
                    pegasus_runs::RunRequest::Pause
                };
                store.request(&run.id, req).map_err(|e| e.to_string())?;
                Ok(format!(
                    "run {}: {action} requested; it takes effect at the run's next step",
                    run.id
                ))
            }
            "resume" => {
                store.resume(&run.id).map_err(|e| e.to_string())?;
                self.nudge(
                    project,
                    pegasus_proto::worker::ToWorker::RunStart {
                        run_id: run.id.clone(),
                    },
                );
                Ok(format!("run {} resumed", run.id))
            }
            other => Err(format!(
                "unknown run action `{other}`: use cancel, pause or resume"
            )),
        }
    }
}
