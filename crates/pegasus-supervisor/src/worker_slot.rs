//! Supervision of one project's worker: spawn, handshake, run, restart after a crash with
//! exponential backoff, give up after too many crashes in a window, stop on request.
//!
//! Each active project has one slot task. Everything about its worker — the child handle, the
//! connection, queued and in-flight messages — is owned by that task alone, so there is no lock
//! around process state; the rest of the daemon talks to it through [`SlotCmd`]s and reads a
//! snapshot ([`SlotInfo`]) for listings.

use crate::{
    spawn,
    supervisor::{Supervisor, WorkerConn},
    watchdog::Watchdog,
};
use pegasus_proto::{
    ctl::ProjectInfo,
    llm::{ChatRequest, ChatResponse, LlmError},
    worker::{FromWorker, InboundMessage, Init, ToWorker},
    TaskState, WorkerEvent, PROTOCOL_VERSION,
};
use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex},
    time::Duration,
};
use tokio::{
    process::Child,
    sync::{mpsc, oneshot},
    task::JoinHandle,
    time::{sleep_until, Instant},
};

/// How long a freshly spawned worker may take to connect and say hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connected worker may take to load its project and say `Ready`.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Upper bound of the restart backoff.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// What the rest of the daemon can ask of a slot.
pub(crate) enum SlotCmd {
    /// Stop the worker (gracefully, then by force) and end the slot; answered when it is reaped.
    Stop(oneshot::Sender<()>),
    /// Deliver a message; `persisted` is answered with its id once it is durable, or why not.
    Deliver(Delivery),
    /// Pass a nudge to the worker (tasks changed, start a run); dropped when no worker is
    /// connected, since a starting worker looks for ready tasks and unfinished runs anyway.
    Notify(ToWorker),
    /// Leave the crash-looping state (or skip a backoff) and start the worker now.
    Restart,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WorkerState {
    Starting,
    Ready,
    Stopping,
    Backoff,
    CrashLooping,
    Stopped,
}

impl WorkerState {
    fn as_str(self) -> &'static str {
        match self {
            WorkerState::Starting => "starting",
            WorkerState::Ready => "ready",
            WorkerState::Stopping => "stopping",
            WorkerState::Backoff => "backoff",
            WorkerState::CrashLooping => "crash-looping",
            WorkerState::Stopped => "stopped",
        }
    }
}

/// A snapshot of the slot for listings.
#[derive(Debug, Clone)]
pub(crate) struct SlotInfo {
    pub pid: Option<u32>,
    pub state: WorkerState,
    pub restarts: u32,
    pub last_crash: Option<String>,
    pub last_crash_at: Option<chrono::DateTime<chrono::Utc>>,
    /// The task the worker runs now and its stage, from the worker's events.
    pub task: Option<String>,
    pub stage: Option<String>,
}

/// The daemon's handle on a slot task.
pub(crate) struct SlotHandle {
    pub cmd: mpsc::Sender<SlotCmd>,
    info: Arc<Mutex<SlotInfo>>,
    task: JoinHandle<()>,
}

impl SlotHandle {
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    pub fn state(&self) -> WorkerState {
        self.info.lock().unwrap_or_else(|p| p.into_inner()).state
    }

    /// Asks the slot to stop and waits until its worker is reaped.
    pub async fn stop(self) {
        let (tx, rx) = oneshot::channel();
        if self.cmd.send(SlotCmd::Stop(tx)).await.is_ok() {
            let _ = rx.await;
        }
        let _ = self.task.await;
    }

    /// Copies the live worker facts into a listing row.
    pub fn fill(&self, info: &mut ProjectInfo) {
        let s = self.info.lock().unwrap_or_else(|p| p.into_inner()).clone();
        info.worker_pid = s.pid;
        info.worker_state = s.state.as_str().to_string();
        info.restarts = s.restarts;
        info.last_crash = s.last_crash;
        info.task = s.task;
        info.stage = s.stage;
        info.last_crash_at = s
            .last_crash_at
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
    }
}

/// Starts the slot task of project `name`.
pub(crate) fn start(sup: Arc<Supervisor>, name: String) -> SlotHandle {
    let (tx, rx) = mpsc::channel(64);
    let info = Arc::new(Mutex::new(SlotInfo {
        pid: None,
        state: WorkerState::Starting,
        restarts: 0,
        last_crash: None,
        last_crash_at: None,
        task: None,
        stage: None,
    }));
    let slot = Slot {
        sup,
        name,
        info: info.clone(),
        crashes: VecDeque::new(),
        queued: VecDeque::new(),
        next_id: 0,
    };
    let task = tokio::spawn(slot.run(rx));
    SlotHandle {
        cmd: tx,
        info,
        task,
    }
}

/// A message for the worker, with who waits for what.
pub(crate) struct Delivery {
    /// Channel of the sender: `cli`, `main`, ...
    pub from: String,
    pub text: String,
    /// Answered once the worker has the message durably (its id), or why not.
    pub persisted: oneshot::Sender<Result<String, String>>,
    /// Answered with the project agent's reply, when somebody waits for it.
    pub answer: Option<oneshot::Sender<Result<String, String>>>,
}

/// Who gets the project's reply to a delivered message.
enum ReplyTo {
    Waiter(oneshot::Sender<Result<String, String>>),
    MainAgent,
    Nobody,
}

/// What a gateway call task reports back to the slot.
enum LlmOut {
    Delta {
        id: u64,
        text: String,
    },
    Done {
        id: u64,
        task: Option<String>,
        result: Result<ChatResponse, LlmError>,
    },
}

/// How one worker process ended.
enum Outcome {
    /// We asked it to stop; the slot ends.
    Stopped(Option<oneshot::Sender<()>>),
    /// It ended without being asked (any exit, a bad frame, a hung handshake).
    Crashed(String),
}

struct Slot {
    sup: Arc<Supervisor>,
    name: String,
    info: Arc<Mutex<SlotInfo>>,
    /// When the recent crashes happened, for the crash-loop window.
    crashes: VecDeque<std::time::Instant>,
    queued: VecDeque<Delivery>,
    next_id: u64,
}

impl Slot {
    fn set(&self, f: impl FnOnce(&mut SlotInfo)) {
        f(&mut self.info.lock().unwrap_or_else(|p| p.into_inner()));
    }

    async fn run(mut self, mut rx: mpsc::Receiver<SlotCmd>) {
        loop {
            self.sweep_exec_groups();
            let outcome = self.run_once(&mut rx).await;
            self.sweep_exec_groups();
            let reason = match outcome {
                Outcome::Stopped(reply) => return self.finish(reply),
                Outcome::Crashed(reason) => reason,
            };
            self.record_crash(&reason);
            let workers = &self.sup.config.workers;
            let window = Duration::from_secs(workers.crash_loop_window_s);
            let now = std::time::Instant::now();
            self.crashes.push_back(now);
            while self
                .crashes
                .front()
                .is_some_and(|t| now.duration_since(*t) > window)
            {
                self.crashes.pop_front();
            }
            let recent = self.crashes.len() as u32;
            if recent > workers.crash_loop_max {
                tracing::error!(project = %self.name, crashes = recent, "worker is crash-looping; not restarting until `pegasusctl project resume {}`", self.name);
                self.set(|i| {
                    i.state = WorkerState::CrashLooping;
                    i.pid = None;
                });
                self.fail_queued("is crash-looping");
                match self.wait_for_restart(&mut rx, None).await {
                    Some(reply) => return self.finish(reply),
                    None => self.crashes.clear(),
                }
            } else {
                let factor = 1u64 << (recent.saturating_sub(1)).min(16);
                let delay =
                    Duration::from_millis(workers.restart_backoff_ms.saturating_mul(factor))
                        .min(MAX_BACKOFF);
                tracing::info!(project = %self.name, ?delay, "restarting worker after backoff");
                self.set(|i| {
                    i.state = WorkerState::Backoff;
                    i.pid = None;
                });
                if let Some(reply) = self
                    .wait_for_restart(&mut rx, Some(Instant::now() + delay))
                    .await
                {
                    return self.finish(reply);
                }
            }
        }
    }

    /// Waits out a backoff (`until`) or a crash loop (`None`: until `Restart`). Returns the stop
    /// reply if a stop came first.
    async fn wait_for_restart(
        &mut self,
        rx: &mut mpsc::Receiver<SlotCmd>,
        until: Option<Instant>,
    ) -> Option<Option<oneshot::Sender<()>>> {
        loop {
            let sleep = async {
                match until {
                    Some(t) => sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = sleep => return None,
                cmd = rx.recv() => match cmd {
                    None => return Some(None),
                    Some(SlotCmd::Stop(reply)) => return Some(Some(reply)),
                    Some(SlotCmd::Restart) => return None,
                    Some(SlotCmd::Notify(_)) => {}
                    Some(SlotCmd::Deliver(d)) => {
                        if until.is_none() {
                            let _ = d.persisted.send(Err(self.crash_loop_refusal()));
                        } else {
                            self.queued.push_back(d);
                        }
                    }
                },
            }
        }
    }

    /// Keeps the running task and its cognitive stage for `status` (top-level tasks only: a
    /// subagent's stages are its parent's).
    fn track_task(&self, event: &WorkerEvent) {
        match event {
            WorkerEvent::Task { task, state, .. } => {
                let running = *state == TaskState::Running;
                self.set(|i| {
                    i.task = running.then(|| task.clone());
                    i.stage = None;
                });
            }
            WorkerEvent::Stage {
                depth: 0, stage, ..
            } => self.set(|i| i.stage = Some(stage.as_str().to_string())),
            _ => {}
        }
    }

    /// Records on the task that the watchdog stopped it (the task store's compare-and-set makes
    /// this safe against the worker writing at the same time).
    fn record_task_stop(&self, task: &str, reason: &str) {
        let dir = self.sup.home.project_dir(&self.name);
        let result = pegasus_tasks::TaskStore::open(&dir, &self.name).and_then(|store| {
            store.transition(
                task,
                pegasus_tasks::TaskState::Running,
                pegasus_tasks::TaskState::Failed,
                "watchdog",
                reason,
            )
        });
        if let Err(e) = result {
            tracing::warn!(project = %self.name, %task, "cannot record the watchdog's stop: {e}");
        }
    }

    /// Kills what the last worker's `exec` calls left running (see `pegasus_store::exec_groups`):
    /// after every exit, and before every spawn for what a previous daemon left.
    fn sweep_exec_groups(&self) {
        match pegasus_store::kill_exec_groups(&self.sup.home.exec_registry(&self.name)) {
            Ok(0) => {}
            Ok(n) => {
                tracing::info!(project = %self.name, groups = n, "killed commands left by the worker")
            }
            Err(e) => tracing::warn!(project = %self.name, "cannot sweep exec groups: {e}"),
        }
    }

    fn crash_loop_refusal(&self) -> String {
        format!(
            "project {0} is crash-looping: read its log in {1}, then `pegasusctl project resume {0}`",
            self.name,
            self.sup.home.logs_dir().display()
        )
    }

    fn finish(&mut self, reply: Option<oneshot::Sender<()>>) {
        self.set(|i| {
            i.state = WorkerState::Stopped;
            i.pid = None;
        });
        self.fail_queued("stopped");
        if let Some(reply) = reply {
            let _ = reply.send(());
        }
    }

    fn fail_queued(&mut self, why: &str) {
        for d in self.queued.drain(..) {
            let _ = d.persisted.send(Err(format!(
                "project {} {why}; the message was not delivered",
                self.name
            )));
        }
    }

    fn record_crash(&self, reason: &str) {
        let now = chrono::Utc::now();
        let notice = format!("[Project Worker crashed with {reason}]");
        tracing::warn!(project = %self.name, "{notice}");
        self.sup.to_main(&format!("project/{}", self.name), notice);
        self.set(|i| {
            i.task = None;
            i.stage = None;
            i.restarts += 1;
            i.last_crash = Some(reason.to_string());
            i.last_crash_at = Some(now);
        });
        let record = serde_json::json!({"ts": now, "project": self.name, "reason": reason});
        let path = self.sup.home.project_dir(&self.name).join("crashes.jsonl");
        if let Err(e) =
            pegasus_store::JsonlAppender::open(&path).and_then(|mut a| a.append_durable(&record))
        {
            tracing::warn!(project = %self.name, "cannot record crash: {e}");
        }
    }

    /// Spawns one worker and supervises it until it ends.
    async fn run_once(&mut self, rx: &mut mpsc::Receiver<SlotCmd>) -> Outcome {
        self.set(|i| i.state = WorkerState::Starting);
        let token = match spawn::new_token() {
            Ok(t) => t,
            Err(e) => return Outcome::Crashed(format!("cannot make a spawn token: {e}")),
        };
        let mut conn_rx = self.sup.register_spawn(&token, &self.name);
        let dir = self.sup.home.project_dir(&self.name);
        let stderr_log = self
            .sup
            .home
            .logs_dir()
            .join(format!("worker-{}.stderr", self.name));
        let mut child =
            match spawn::spawn_worker(&self.sup.worker_bin, &dir, &token, &stderr_log).await {
                Ok(c) => c,
                Err(e) => {
                    self.sup.cancel_spawn(&token);
                    return Outcome::Crashed(format!(
                        "cannot start {}: {e}",
                        self.sup.worker_bin.display()
                    ));
                }
            };
        let Some(pid) = child.id() else {
            self.sup.cancel_spawn(&token);
            let status = child
                .wait()
                .await
                .map(spawn::describe_exit)
                .unwrap_or_default();
            return Outcome::Crashed(format!("worker exited at once ({status})"));
        };
        self.set(|i| i.pid = Some(pid));
        tracing::debug!(project = %self.name, pid, "worker spawned");

        // Phase 1: the handshake.
        let deadline = Instant::now() + HELLO_TIMEOUT;
        let conn = loop {
            tokio::select! {
                conn = &mut conn_rx => match conn {
                    Ok(conn) if conn.pid == pid => break conn,
                    Ok(conn) => {
                        tracing::warn!(project = %self.name, pid, claimed = conn.pid, "hello from the wrong process; killing the spawn");
                        return self.kill_and_reap(child, pid, "handshake from the wrong process").await;
                    }
                    Err(_) => return self.kill_and_reap(child, pid, "handshake lost").await,
                },
                status = child.wait() => {
                    self.sup.cancel_spawn(&token);
                    spawn::kill_group(pid);
                    let status = status.map(spawn::describe_exit).unwrap_or_else(|e| e.to_string());
                    return Outcome::Crashed(format!("{status} before the handshake"));
                }
                _ = sleep_until(deadline) => {
                    self.sup.cancel_spawn(&token);
                    return self.kill_and_reap(child, pid, "no hello within 10 s").await;
                }
                cmd = rx.recv() => match cmd {
                    None | Some(SlotCmd::Stop(_)) => {
                        self.sup.cancel_spawn(&token);
                        let reply = match cmd { Some(SlotCmd::Stop(r)) => Some(r), _ => None };
                        spawn::kill_group(pid);
                        let _ = child.wait().await;
                        return Outcome::Stopped(reply);
                    }
                    Some(SlotCmd::Deliver(d)) => self.queued.push_back(d),
                    Some(SlotCmd::Notify(_)) => {}
                    Some(SlotCmd::Restart) => {}
                },
            }
        };
        self.run_connected(conn, child, pid, rx).await
    }

    async fn kill_and_reap(&self, mut child: Child, pid: u32, reason: &str) -> Outcome {
        spawn::kill_group(pid);
        let _ = child.wait().await;
        Outcome::Crashed(reason.to_string())
    }

    fn message_id(&mut self) -> String {
        self.next_id += 1;
        format!("{}-{}", chrono::Utc::now().timestamp_millis(), self.next_id)
    }

    /// Phase 2: the worker is connected. Runs until it exits.
    async fn run_connected(
        &mut self,
        conn: WorkerConn,
        mut child: Child,
        pid: u32,
        rx: &mut mpsc::Receiver<SlotCmd>,
    ) -> Outcome {
        let WorkerConn {
            mut reader,
            mut writer,
            ..
        } = conn;
        let model = self.sup.project_model(&self.name);
        let init = ToWorker::Init(Init {
            protocol_version: PROTOCOL_VERSION,
            config_path: self.sup.config_path.display().to_string(),
            heartbeat_ms: (self.sup.config.workers.heartbeat_interval_s * 1000.0) as u64,
            context_window: self.sup.gateway.context_window(&model),
            model,
        });
        // Frames to the worker go through their own task: a worker that stops reading (stopped,
        // hung) must never block this loop, which has to keep watching the child and the clocks.
        let (to_worker, mut to_worker_rx) = mpsc::unbounded_channel::<ToWorker>();
        let writer_task = tokio::spawn(async move {
            while let Some(frame) = to_worker_rx.recv().await {
                if let Err(e) = writer.write(&frame).await {
                    tracing::debug!("worker socket write failed: {e}");
                    break;
                }
            }
        });
        let _ = to_worker.send(init);
        // Frames are read by their own task: a frame read is not cancel safe, a channel is.
        let (ev_tx, mut ev_rx) = mpsc::channel::<Result<FromWorker, String>>(64);
        let reader_task = tokio::spawn(async move {
            loop {
                let ev = match reader.read::<FromWorker>().await {
                    Ok(Some(msg)) => Ok(msg),
                    Ok(None) => Err("connection closed".to_string()),
                    Err(e) => Err(e.to_string()),
                };
                let end = ev.is_err();
                if ev_tx.send(ev).await.is_err() || end {
                    break;
                }
            }
        });
        let mut ready = false;
        let mut fatal: Option<String> = None;
        let mut stopping: Option<Option<oneshot::Sender<()>>> = None;
        let mut inflight: HashMap<String, oneshot::Sender<Result<String, String>>> = HashMap::new();
        let mut awaiting: HashMap<String, ReplyTo> = HashMap::new();
        // Gateway calls of this worker: aborted (cancelled) when it exits or asks to.
        let mut llm_calls: HashMap<u64, JoinHandle<()>> = HashMap::new();
        let (llm_tx, mut llm_rx) = mpsc::unbounded_channel::<LlmOut>();
        // When to give up on the worker and kill its group: first the ready deadline, then,
        // once stopping, the shutdown timeout. `None` once ready and not stopping.
        let mut kill_at = Some(Instant::now() + READY_TIMEOUT);
        let shutdown_timeout = Duration::from_secs_f64(self.sup.config.workers.shutdown_timeout_s);
        let mut conn_open = true;
        let mut dog = Watchdog::new(&self.sup.config.watchdog);
        let channel = format!("project/{}", self.name);
        let outcome = loop {
            let silent_at = dog.silent_deadline();
            tokio::select! {
                ev = ev_rx.recv(), if conn_open => match ev.unwrap_or_else(|| Err("connection closed".into())) {
                    Ok(FromWorker::Ready) => {
                        ready = true;
                        if stopping.is_none() {
                            kill_at = None;
                        }
                        self.set(|i| i.state = WorkerState::Ready);
                        tracing::info!(project = %self.name, pid, "worker ready");
                        while let Some(d) = self.queued.pop_front() {
                            self.deliver(&to_worker, d, &mut inflight, &mut awaiting);
                        }
                    }
                    Ok(FromWorker::MessagePersisted { id }) => {
                        if let Some(reply) = inflight.remove(&id) {
                            let _ = reply.send(Ok(id));
                        }
                    }
                    Ok(FromWorker::Reply { message_id, text }) => match awaiting.remove(&message_id) {
                        Some(ReplyTo::Waiter(tx)) => {
                            let _ = tx.send(Ok(text));
                        }
                        Some(ReplyTo::MainAgent) => self.sup.to_main(&format!("project/{}", self.name), text),
                        Some(ReplyTo::Nobody) | None => {
                            tracing::info!(project = %self.name, "reply: {text}");
                        }
                    },
                    Ok(FromWorker::LlmRequest { id, request }) => match dog.refusal(request.meta.task.as_deref()) {
                        Some(refusal) => {
                            let _ = llm_tx.send(LlmOut::Done { id, task: None, result: Err(refusal) });
                        }
                        None => {
                            llm_calls.insert(id, self.start_llm_call(id, request, llm_tx.clone()));
                        }
                    },
                    Ok(FromWorker::LlmCancel { id }) => {
                        if let Some(call) = llm_calls.remove(&id) {
                            call.abort();
                        }
                    }
                    Ok(FromWorker::Heartbeat | FromWorker::Pong { .. } | FromWorker::ShutdownComplete) => {}
                    Ok(FromWorker::Fatal { reason }) => {
                        tracing::error!(project = %self.name, "worker cannot run: {reason}");
                        fatal = Some(reason);
                    }
                    Ok(FromWorker::Notify { text, kind }) => {
                        tracing::info!(project = %self.name, %kind, "notify: {text}");
                        self.sup.to_main(&format!("project/{}", self.name), format!("[notify from project {}] {text}", self.name));
                    }
                    Ok(FromWorker::Event(event)) => {
                        tracing::debug!(project = %self.name, "event: {event:?}");
                        self.track_task(&event);
                        if let Some(stop) = dog.on_event(&event) {
                            self.sup.to_main(&channel, format!("[task {} of project {} stopped: {}]", stop.task, self.name, stop.reason));
                        }
                    }
                    Ok(FromWorker::Hello(_)) => {
                        tracing::warn!(project = %self.name, pid, "second hello on a worker connection; dropping it");
                        conn_open = false;
                        spawn::kill_group(pid);
                    }
                    Err(why) => {
                        conn_open = false;
                        // A worker without its connection can do nothing useful. A worker that
                        // is exiting closes its socket first: give it a moment so its real exit
                        // status is what gets recorded, then end it; the exit arm restarts it.
                        if stopping.is_none() {
                            tracing::warn!(project = %self.name, pid, "worker connection ended: {why}");
                            kill_at = Some(Instant::now() + Duration::from_secs(2));
                        }
                    }
                },
                Some(out) = llm_rx.recv() => {
                    let frame = match out {
                        LlmOut::Delta { id, text } => ToWorker::LlmDelta { id, text },
                        LlmOut::Done { id, task, result } => {
                            llm_calls.remove(&id);
                            // An answer from our own gateway is a sign of life: a worker waiting
                            // on a slow provider is not silent.
                            dog.touch();
                            if let (Some(task), Ok(ChatResponse { cost_usd: Some(usd), .. })) = (&task, &result) {
                                if let Some(why) = dog.on_cost(task, *usd) {
                                    tracing::warn!(project = %self.name, "{why}");
                                }
                            }
                            ToWorker::LlmResponse { id, result }
                        }
                    };
                    if conn_open {
                        let _ = to_worker.send(frame);
                    }
                }
                status = child.wait() => {
                    reader_task.abort();
                    writer_task.abort();
                    // Anything the worker started in its group goes with it, and so do its
                    // pending model calls: nobody is left to read their answers.
                    spawn::kill_group(pid);
                    for (_, call) in llm_calls.drain() {
                        call.abort();
                    }
                    let desc = status.map(spawn::describe_exit).unwrap_or_else(|e| e.to_string());
                    match stopping.take() {
                        Some(reply) => {
                            tracing::info!(project = %self.name, pid, "worker stopped ({desc})");
                            break Outcome::Stopped(reply);
                        }
                        None => break Outcome::Crashed(match fatal.take() {
                            Some(f) => format!("{desc}: {f}"),
                            None => desc,
                        }),
                    }
                }
                cmd = rx.recv(), if stopping.is_none() => match cmd {
                    None | Some(SlotCmd::Stop(_)) => {
                        let reply = match cmd { Some(SlotCmd::Stop(r)) => Some(r), _ => None };
                        self.set(|i| i.state = WorkerState::Stopping);
                        if !conn_open || to_worker.send(ToWorker::Shutdown).is_err() {
                            spawn::kill_group(pid);
                        }
                        stopping = Some(reply);
                        kill_at = Some(Instant::now() + shutdown_timeout);
                    }
                    Some(SlotCmd::Deliver(d)) => {
                        if ready {
                            self.deliver(&to_worker, d, &mut inflight, &mut awaiting)
                        } else {
                            self.queued.push_back(d)
                        }
                    }
                    Some(SlotCmd::Restart) => {}
                    Some(SlotCmd::Notify(frame)) => {
                        if ready && conn_open {
                            let _ = to_worker.send(frame);
                        }
                    }
                },
                _ = sleep_until(silent_at.unwrap_or_else(Instant::now)), if silent_at.is_some() && stopping.is_none() && llm_calls.is_empty() => {
                    if let Some(task) = dog.take_silent() {
                        let secs = self.sup.config.watchdog.silent_timeout_s;
                        tracing::warn!(project = %self.name, pid, %task, "watchdog: no event for {secs} s from a busy worker; failing the task and restarting the worker");
                        self.record_task_stop(&task, "silent");
                        self.sup.to_main(&channel, format!("[task {task} of project {} stopped: silent for {secs} s; the worker is restarted]", self.name));
                        fatal = Some(format!("watchdog: silent for {secs} s while running task {task}"));
                        spawn::kill_group(pid);
                    }
                }
                _ = sleep_until(kill_at.unwrap_or_else(Instant::now)), if kill_at.is_some() => {
                    if stopping.is_some() {
                        tracing::warn!(project = %self.name, pid, "worker did not stop within {shutdown_timeout:?}; killing its process group");
                    } else {
                        tracing::warn!(project = %self.name, pid, "worker not ready within {READY_TIMEOUT:?}; killing it");
                    }
                    spawn::kill_group(pid);
                    kill_at = None;
                }
            }
        };
        let gone = format!("the worker of project {} ended before it", self.name);
        for (_, reply) in inflight.drain() {
            let _ = reply.send(Err(format!("{gone} persisted the message; send it again")));
        }
        for (_, to) in awaiting.drain() {
            if let ReplyTo::Waiter(tx) = to {
                let _ = tx.send(Err(format!("{gone} answered; the message is in its session, and its agent sees it with the next message")));
            }
        }
        outcome
    }

    /// Runs one gateway call for the worker on its own task; the worker's project pays for it,
    /// whatever the request claims.
    fn start_llm_call(
        &self,
        id: u64,
        mut request: ChatRequest,
        out: mpsc::UnboundedSender<LlmOut>,
    ) -> JoinHandle<()> {
        request.meta.project = Some(self.name.clone());
        let task = request.meta.task.clone();
        let gateway = self.sup.gateway.clone();
        tokio::spawn(async move {
            let deltas = if request.stream {
                let (tx, mut rx) = mpsc::unbounded_channel::<String>();
                let out = out.clone();
                tokio::spawn(async move {
                    while let Some(text) = rx.recv().await {
                        if out.send(LlmOut::Delta { id, text }).is_err() {
                            break;
                        }
                    }
                });
                Some(tx)
            } else {
                None
            };
            let result = gateway.chat(request, deltas).await;
            let _ = out.send(LlmOut::Done { id, task, result });
        })
    }

    fn deliver(
        &mut self,
        to_worker: &mpsc::UnboundedSender<ToWorker>,
        d: Delivery,
        inflight: &mut HashMap<String, oneshot::Sender<Result<String, String>>>,
        awaiting: &mut HashMap<String, ReplyTo>,
    ) {
        let id = self.message_id();
        let msg = ToWorker::Message(InboundMessage {
            id: id.clone(),
            from: d.from.clone(),
            text: d.text,
        });
        match to_worker.send(msg) {
            Ok(()) => {
                inflight.insert(id.clone(), d.persisted);
                let to = match (d.answer, d.from.as_str()) {
                    (Some(tx), _) => ReplyTo::Waiter(tx),
                    (None, "main") => ReplyTo::MainAgent,
                    (None, _) => ReplyTo::Nobody,
                };
                awaiting.insert(id, to);
            }
            Err(_) => {
                let _ = d.persisted.send(Err(format!(
                    "cannot reach the worker of project {}; try again",
                    self.name
                )));
            }
        }
    }
}
