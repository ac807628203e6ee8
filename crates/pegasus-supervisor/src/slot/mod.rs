//! The life of one project's worker: spawn, handshake, restart after a crash with exponential
//! backoff, give up after too many crashes in a window, stop on request.
//!
//! Each active project has one slot task. Everything about its worker — the child handle, the
//! connection, queued and in-flight messages — is owned by that task alone, so there is no lock
//! around process state; the rest of the daemon talks to it through [`SlotCmd`]s and reads a
//! snapshot ([`SlotInfo`]) for listings. Which event of that life does what (start, backoff,
//! crash loop, stop) is [`life`]'s to decide; what happens while the worker is connected is in
//! [`connected`]; which message gets which answer in [`routing`]; model calls in
//! [`crate::llm_proxy`].

mod connected;
mod ctx;
mod launch;
mod life;
mod link;
mod process;
mod routing;

pub(crate) use ctx::{SlotCtx, StartError};
pub(crate) use launch::Launch;
pub(crate) use routing::Delivery;

use crate::{error::RequestError, spawn};
use life::{Event, Life, Note, State};
use pegasus_proto::{
    ctl::ProjectInfo, worker::ToWorker, BusBody, FrameReader, FrameWriter, WorkerState,
};
use process::WorkerProcess;
use std::{
    collections::VecDeque,
    sync::{Arc, Mutex},
    time::Duration,
};
use tokio::{
    io::{AsyncRead, AsyncWrite},
    process::Child,
    sync::{mpsc, oneshot},
    task::JoinHandle,
    time::{sleep_until, Instant},
};

/// One direction of a worker link: the Unix socket's half, or a TLS stream's (DESIGN.md §14).
pub(crate) type LinkRead = Box<dyn AsyncRead + Send + Unpin>;
pub(crate) type LinkWrite = Box<dyn AsyncWrite + Send + Unpin>;

/// A worker connection that passed the handshake, handed from an accept loop to its slot.
pub(crate) struct WorkerConn {
    pub reader: FrameReader<LinkRead>,
    pub writer: FrameWriter<LinkWrite>,
    /// The pid the kernel reports for a local peer (or, failing that, the one it claimed); a
    /// remote worker's own pid on its host.
    pub pid: u32,
    /// The address a remote worker's link comes from; `None` on this machine.
    pub host: Option<String>,
}

/// How long a freshly spawned worker may take to connect and say hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

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
    /// Kill the worker with this pid (the watchdog found it silent); the exit counts as a
    /// crash with `reason`. Ignored when the slot's worker has another pid by now.
    Kill { pid: u32, reason: String },
}

/// What a slot tells the daemon instead of acting on it itself: a slot runs one worker and
/// never calls a handler (a suspend stops the very slot that would be running it).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum SlotEvent {
    /// The project's worker did nothing for `workers.idle_suspend_s`: suspend the project.
    Idle(String),
}

/// A snapshot of the slot for listings.
#[derive(Debug, Clone)]
pub(crate) struct SlotInfo {
    pub pid: Option<u32>,
    /// Where a remote worker runs.
    pub host: Option<String>,
    pub state: WorkerState,
    pub restarts: u32,
    pub last_crash: Option<String>,
    pub last_crash_at: Option<chrono::DateTime<chrono::Utc>>,
    /// Why the current worker runs without its cgroup (DESIGN.md §12 limits), if it does.
    pub limits_problem: Option<String>,
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

    /// Why the current worker runs without its limits, if it does.
    pub fn limits_problem(&self) -> Option<String> {
        self.info
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .limits_problem
            .clone()
    }

    /// Copies the live worker facts into a listing row.
    pub fn fill(&self, info: &mut ProjectInfo) {
        let s = self.info.lock().unwrap_or_else(|p| p.into_inner()).clone();
        info.worker_pid = s.pid;
        info.worker_host = s.host;
        info.worker_state = s.state;
        info.restarts = s.restarts;
        info.last_crash = s.last_crash;
        info.last_crash_at = s
            .last_crash_at
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
    }
}

/// Starts the slot task of project `name`.
pub(crate) fn start(ctx: Arc<SlotCtx>, name: String) -> SlotHandle {
    let (tx, rx) = mpsc::channel(64);
    let info = Arc::new(Mutex::new(SlotInfo {
        pid: None,
        host: None,
        state: WorkerState::Starting,
        restarts: 0,
        last_crash: None,
        last_crash_at: None,
        limits_problem: None,
    }));
    let slot = Slot {
        life: Life::new(life::Rules::of(&ctx.config.workers)),
        ctx,
        name,
        cgroup: None,
        info: info.clone(),
        queued: VecDeque::new(),
        stop_reply: None,
    };
    let task = tokio::spawn(slot.run(rx));
    SlotHandle {
        cmd: tx,
        info,
        task,
    }
}

/// How one worker process ended.
enum Outcome {
    /// We asked it to stop; the slot ends.
    Stopped(Option<oneshot::Sender<()>>),
    /// It ended without being asked (any exit, a bad frame, a hung handshake).
    Crashed(String),
    /// A launched worker never reached pegasusd (its host or the network is down): backed off
    /// like a crash, but never counted towards crash-looping (DESIGN.md §14).
    Unreached(String),
    /// The project must not start as it is (its paths reach the home, or its shared folder
    /// changed what only pegasusd decides): reported, then nothing until `project resume`.
    Refused(String),
}

struct Slot {
    /// What the slot uses of the daemon.
    ctx: Arc<SlotCtx>,
    name: String,
    info: Arc<Mutex<SlotInfo>>,
    /// Where the slot is in its restart life, and what its rules remember.
    life: Life,
    queued: VecDeque<Delivery>,
    /// Who asked the slot to stop, answered once it has.
    stop_reply: Option<oneshot::Sender<()>>,
    /// The cgroup of the current local worker (DESIGN.md §12 limits), removed once it has ended.
    cgroup: Option<pegasus_sandbox::cgroups::ProjectCgroup>,
}

impl Slot {
    fn set(&self, f: impl FnOnce(&mut SlotInfo)) {
        f(&mut self.info.lock().unwrap_or_else(|p| p.into_inner()));
    }

    /// Moves the worker to `state` (with its pid, or none) and tells the bus.
    fn set_state(&self, state: WorkerState, pid: Option<u32>) {
        self.set(|i| {
            i.state = state;
            i.pid = pid;
            if pid.is_none() {
                i.host = None;
            }
        });
        let body = BusBody::WorkerState { state, pid };
        self.ctx.bus.publish(&self.name, body);
    }

    /// The slot's life: each state waits for its next event, and [`Life::step`] says what
    /// the event does.
    async fn run(mut self, mut rx: mpsc::Receiver<SlotCmd>) {
        loop {
            let (event, message) = match self.life.state() {
                // A worker runs from its start to its end (its hello moves the life to
                // `Linked`, the link runs it from there).
                State::Starting | State::Linked => {
                    self.sweep_exec_groups();
                    let outcome = self.run_once(&mut rx).await;
                    (self.ended(outcome), None)
                }
                State::Backoff { until } => self.wait(&mut rx, Some(until)).await,
                State::CrashLooping | State::Refused => self.wait(&mut rx, None).await,
                State::Stopped => return,
            };
            self.on(event, message).await;
        }
    }

    /// Steps the life with `event` (`message` is the delivery that came with
    /// [`Event::Message`]) and carries out what it says.
    async fn on(&mut self, event: Event, mut message: Option<Delivery>) {
        for action in self.life.step(event, Instant::now()) {
            match action {
                life::Action::CleanUp => {
                    self.remove_cgroup().await;
                    if let Some(pid) = self.info.lock().unwrap_or_else(|p| p.into_inner()).pid {
                        pegasus_sandbox::adopted::forget(pid);
                    }
                    self.sweep_exec_groups();
                    self.ctx.sweeper.request();
                }
                life::Action::Log(note) => self.log(note),
                life::Action::RecordCrash(reason) => self.record_crash(&reason),
                life::Action::NoteUnreached(why) => self.set(|i| i.last_crash = Some(why)),
                life::Action::SetState(state) => self.set_state(state, None),
                life::Action::FailQueued(why) => self.fail_queued(&why),
                life::Action::QueueMessage => self.queued.extend(message.take()),
                life::Action::RefuseMessage => {
                    if let Some(d) = message.take() {
                        let refusal = RequestError::refused(self.crash_loop_refusal());
                        let _ = d.persisted.send(Err(refusal));
                    }
                }
                life::Action::Finish => {
                    let reply = self.stop_reply.take();
                    self.finish(reply);
                }
            }
        }
    }

    /// The event of a worker's end; a stop's reply is kept for [`life::Action::Finish`].
    fn ended(&mut self, outcome: Outcome) -> Event {
        match outcome {
            Outcome::Stopped(reply) => {
                self.stop_reply = reply;
                Event::StopAsked
            }
            Outcome::Crashed(reason) => Event::Crashed(reason),
            Outcome::Unreached(why) => Event::Unreached(why),
            Outcome::Refused(why) => Event::Refused(why),
        }
    }

    fn log(&self, note: Note) {
        match note {
            Note::NotStarted(why) => tracing::error!(project = %self.name, "not started: {why}"),
            Note::Unreached { why, delay } => {
                tracing::warn!(project = %self.name, ?delay, "the launched worker did not reach pegasusd ({why}); launching again after the delay")
            }
            Note::CrashLooping { crashes } => {
                tracing::error!(project = %self.name, crashes, "worker is crash-looping; not restarting until `pegasusctl project resume {}`", self.name)
            }
            Note::Restarting { delay } => {
                tracing::info!(project = %self.name, ?delay, "restarting worker after backoff")
            }
        }
    }

    /// Waits while no worker runs, for the backoff's end (`until`; `None`: none runs) or a
    /// command; a message comes with its event.
    async fn wait(
        &mut self,
        rx: &mut mpsc::Receiver<SlotCmd>,
        until: Option<Instant>,
    ) -> (Event, Option<Delivery>) {
        loop {
            let sleep = async {
                match until {
                    Some(t) => sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = sleep => return (Event::BackoffElapsed, None),
                // The daemon stops: no worker is started again (`stop_all`'s own stop may
                // come later, or find the slot ended).
                _ = self.ctx.stopping.cancelled() => return (Event::StopAsked, None),
                cmd = rx.recv() => match cmd {
                    None => return (Event::StopAsked, None),
                    Some(SlotCmd::Stop(reply)) => {
                        self.stop_reply = Some(reply);
                        return (Event::StopAsked, None);
                    }
                    Some(SlotCmd::Restart) => return (Event::RestartAsked, None),
                    Some(SlotCmd::Notify(_) | SlotCmd::Kill { .. }) => {}
                    Some(SlotCmd::Deliver(d)) => return (Event::Message, Some(d)),
                },
            }
        }
    }

    /// Kills what the last worker's `exec` calls left running (see `pegasus_sandbox::exec_groups`):
    /// after every exit, and before every spawn for what a previous daemon left.
    /// What escaped those groups and was re-parented to pegasusd (a child subreaper) when the
    /// worker died is left to the daemon's one sweeper, asked for after each exit.
    fn sweep_exec_groups(&self) {
        match pegasus_sandbox::kill_exec_groups(&self.ctx.home.exec_registry(&self.name)) {
            Ok(0) => {}
            Ok(n) => {
                tracing::info!(project = %self.name, groups = n, "killed commands left by the worker")
            }
            Err(e) => tracing::warn!(project = %self.name, "cannot sweep exec groups: {e}"),
        }
    }

    /// Makes the cgroup the next local worker is put in; without one (no cgroups here, or it
    /// cannot be made: said in `project show`) the worker runs without limits.
    fn make_cgroup(&mut self) {
        let project = self.ctx.projects.project(&self.name);
        let limits = crate::limits::Limits::effective(&self.ctx.config, project.as_deref());
        match self.ctx.limits.create(&self.name, &limits) {
            Ok(cgroup) => {
                if cgroup.is_some() {
                    tracing::debug!(project = %self.name, "limits: {}", limits.describe());
                }
                self.cgroup = cgroup;
                self.set(|i| i.limits_problem = None);
            }
            Err(e) => {
                tracing::warn!(project = %self.name, "the worker runs without its limits: {e}");
                self.cgroup = None;
                self.set(|i| i.limits_problem = Some(e));
            }
        }
    }

    /// Removes the last worker's cgroup, killing what is left in it, once the worker ended.
    async fn remove_cgroup(&mut self) {
        let Some(cgroup) = self.cgroup.take() else {
            return;
        };
        match tokio::task::spawn_blocking(move || cgroup.remove()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(project = %self.name, "cannot remove the worker's cgroup: {e}")
            }
            Err(e) => {
                tracing::warn!(project = %self.name, "cannot remove the worker's cgroup: {e}")
            }
        }
    }

    /// Where the worker (or its launcher command) writes what it prints outside its log.
    fn stderr_log(&self) -> std::path::PathBuf {
        let file = format!("worker-{}.stderr", self.name);
        self.ctx.home.logs_dir().join(file)
    }

    fn crash_loop_refusal(&self) -> String {
        format!(
            "project {0} is crash-looping: read its log in {1}, then `pegasusctl project resume {0}`",
            self.name,
            self.ctx.home.logs_dir().display()
        )
    }

    fn finish(&mut self, reply: Option<oneshot::Sender<()>>) {
        self.set_state(WorkerState::Stopped, None);
        self.fail_queued("stopped");
        if let Some(reply) = reply {
            let _ = reply.send(());
        }
    }

    fn fail_queued(&mut self, why: &str) {
        for d in self.queued.drain(..) {
            let _ = d.persisted.send(Err(RequestError::unavailable(format!(
                "project {} {why}; the message was not delivered",
                self.name
            ))));
        }
    }

    fn record_crash(&self, reason: &str) {
        let now = chrono::Utc::now();
        tracing::warn!(project = %self.name, "[Project Worker crashed with {reason}]");
        // The MainAgent hears of it from the bus, batched (`crate::crash_notices`).
        let crash = BusBody::Crash {
            reason: reason.to_string(),
        };
        self.ctx.bus.publish(&self.name, crash);
        self.set(|i| {
            i.restarts += 1;
            i.last_crash = Some(reason.to_string());
            i.last_crash_at = Some(now);
        });
        let record = pegasus_store::CrashRecord {
            ts: now,
            project: self.name.clone(),
            reason: reason.to_string(),
        };
        let dir = self.ctx.home.project_dir(&self.name);
        if let Err(e) = pegasus_store::record_crash(&dir, &record) {
            tracing::warn!(project = %self.name, "cannot record crash: {e}");
        }
    }

    /// Starts one worker where its launcher says and supervises it until it ends.
    async fn run_once(&mut self, rx: &mut mpsc::Receiver<SlotCmd>) -> Outcome {
        if self.ctx.stopping.is_cancelled() {
            return Outcome::Stopped(None);
        }
        self.set_state(WorkerState::Starting, None);
        match self.ctx.launcher_of(&self.name) {
            Err(StartError::Crash(why)) => Outcome::Crashed(why),
            Err(StartError::Refused(why)) => Outcome::Refused(why),
            Ok(None) => self.run_local(rx).await,
            Ok(Some((name, launch))) => self.run_launched(rx, &name, launch).await,
        }
    }

    /// Spawns one local worker and supervises it until it ends.
    async fn run_local(&mut self, rx: &mut mpsc::Receiver<SlotCmd>) -> Outcome {
        let token = match spawn::new_token() {
            Ok(t) => t,
            Err(e) => return Outcome::Crashed(format!("cannot make a spawn token: {e}")),
        };
        let mut conn_rx = self.ctx.spawns.register(&token, &self.name);
        let dir = self.ctx.home.project_dir(&self.name);
        let stderr_log = self.stderr_log();
        self.make_cgroup();
        let spawned = spawn::spawn_worker(
            &self.ctx.worker_bin,
            &dir,
            &token,
            &stderr_log,
            self.cgroup.as_ref(),
            |pid| self.ctx.spawns.spawned(&token, pid),
        )
        .await;
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                self.ctx.spawns.cancel(&token);
                return Outcome::Crashed(format!(
                    "cannot start {}: {e}",
                    self.ctx.worker_bin.display()
                ));
            }
        };
        let Some(pid) = child.id() else {
            self.ctx.spawns.cancel(&token);
            let status = child
                .wait()
                .await
                .map(spawn::describe_exit)
                .unwrap_or_default();
            return Outcome::Crashed(format!("worker exited at once ({status})"));
        };
        self.set_state(WorkerState::Starting, Some(pid));
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
                    self.ctx.spawns.cancel(&token);
                    spawn::kill_group(pid);
                    if self.ctx.stopping.is_cancelled() {
                        // It found the worker socket closed: not a crash.
                        return Outcome::Stopped(None);
                    }
                    let status = status.map(spawn::describe_exit).unwrap_or_else(|e| e.to_string());
                    return Outcome::Crashed(format!("{status} before the handshake"));
                }
                // The daemon stops before this worker said hello: it could not link any more.
                _ = self.ctx.stopping.cancelled() => {
                    self.ctx.spawns.cancel(&token);
                    spawn::kill_group(pid);
                    let _ = child.wait().await;
                    return Outcome::Stopped(None);
                }
                _ = sleep_until(deadline) => {
                    self.ctx.spawns.cancel(&token);
                    return self.kill_and_reap(child, pid, "no hello within 10 s").await;
                }
                cmd = rx.recv() => if let Some(stopped) = self.unlinked_cmd(cmd).await {
                    self.ctx.spawns.cancel(&token);
                    spawn::kill_group(pid);
                    let _ = child.wait().await;
                    return stopped;
                },
            }
        };
        self.on(Event::Hello, None).await;
        self.run_connected(conn, WorkerProcess::Local { child, pid }, rx)
            .await
    }

    /// A command while the worker starts: a stop (or the daemon dropping the slot) is the
    /// outcome; a message is the life's to place (it waits in the queue); the rest mean
    /// nothing yet.
    async fn unlinked_cmd(&mut self, cmd: Option<SlotCmd>) -> Option<Outcome> {
        match cmd {
            None => Some(Outcome::Stopped(None)),
            Some(SlotCmd::Stop(reply)) => Some(Outcome::Stopped(Some(reply))),
            Some(SlotCmd::Deliver(d)) => {
                self.on(Event::Message, Some(d)).await;
                None
            }
            Some(SlotCmd::Notify(_) | SlotCmd::Restart | SlotCmd::Kill { .. }) => None,
        }
    }

    async fn kill_and_reap(&self, mut child: Child, pid: u32, reason: &str) -> Outcome {
        spawn::kill_group(pid);
        let _ = child.wait().await;
        Outcome::Crashed(reason.to_string())
    }
}
