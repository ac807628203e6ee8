//! Phase 2 of a worker's life: it is connected. The slot sends it `Init` and its messages,
//! routes what it says (persisted, replies, notifies, events, model calls), and watches the
//! process and the clocks until it exits.
//!
//! Frames to the worker go through their own writer task and frames from it through their own
//! reader task: a worker that stops reading (stopped, hung) must never block this loop, and a
//! frame read is not cancel safe where a channel is.

use super::{
    routing::{ReplyTo, Routing},
    Outcome, Slot, SlotCmd, WorkerConn,
};
use crate::{llm_proxy::LlmProxy, spawn};
use pegasus_proto::{
    worker::{FromWorker, Init, ToWorker},
    BusBody, PROTOCOL_VERSION,
};
use pegasus_proto::{Channel, WorkerState};
use std::time::Duration;
use tokio::{
    process::Child,
    sync::{mpsc, oneshot},
    time::{sleep_until, Instant},
};

/// How long a connected worker may take to load its project and say `Ready`.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Liveness of a ready worker: it says something (a heartbeat at least) every
/// `heartbeat_interval_s`. Silent for [`PING_AFTER`] beats, it is pinged; silent for
/// [`DEAD_AFTER`] beats (and at least [`DEAD_MIN`]), it is hung — its loop no longer runs — and
/// it is killed and restarted like a crash. (A busy agent still beats: this is not the
/// watchdog's silent-task check.)
const PING_AFTER: u32 = 2;
const DEAD_AFTER: u32 = 6;
const DEAD_MIN: Duration = Duration::from_secs(3);

/// When a ready worker counts as hung, given the last time it said anything.
fn liveness_deadlines(last_heard: Instant, beat: Duration) -> (Instant, Instant) {
    let ping = last_heard + beat * PING_AFTER;
    let dead = last_heard + (beat * DEAD_AFTER).max(DEAD_MIN);
    (ping, dead)
}

impl Slot {
    /// Runs until the worker exits; says whether it was asked to.
    pub(super) async fn run_connected(
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
        // A model no table knows: its server is asked once (and the answer kept).
        let context_window = self.sup.gateway.learn_context_window(&model).await;
        let init = ToWorker::Init(Init {
            protocol_version: PROTOCOL_VERSION,
            config_json: self.sup.config_json.clone(),
            heartbeat_ms: (self.sup.config.workers.heartbeat_interval_s * 1000.0) as u64,
            context_window,
            model,
        });
        let (to_worker, mut to_worker_rx) = mpsc::unbounded_channel::<ToWorker>();
        let writer_task = tokio::spawn(async move {
            while let Some(frame) = to_worker_rx.recv().await {
                match writer.write(&frame).await {
                    Ok(()) => {}
                    // Nothing was sent (the size is checked before a byte is written), so the
                    // link is intact: a model answer that does not fit becomes an error for
                    // the task that asked, never a silent hang.
                    Err(pegasus_proto::ProtoError::TooLarge { len, max }) => {
                        tracing::warn!(
                            "a frame of {len} bytes for the worker is over the {max}-byte limit"
                        );
                        if let ToWorker::LlmResponse { id, .. } = frame {
                            let refusal = ToWorker::LlmResponse {
                                id,
                                result: Err(pegasus_proto::llm::LlmError::Other(format!(
                                    "the model's answer is {len} bytes, over the {max}-byte limit a worker can take; ask for a shorter answer"
                                ))),
                            };
                            if writer.write(&refusal).await.is_err() {
                                break;
                            }
                        }
                    }
                    Err(e) => {
                        tracing::debug!("worker socket write failed: {e}");
                        break;
                    }
                }
            }
        });
        let _ = to_worker.send(init);
        let (ev_tx, mut ev_rx) = mpsc::channel::<Result<FromWorker, String>>(64);
        // Model calls start right here, on the reader task, instead of crossing to this loop
        // first. The proxy lives as long as the reader task, so aborting that task (the worker
        // exited) or the connection ending cancels the calls.
        let mut proxy = LlmProxy::new(self.sup.clone(), self.name.clone(), to_worker.clone());
        let reader_task = tokio::spawn(async move {
            loop {
                let ev = match reader.read::<FromWorker>().await {
                    Ok(Some(FromWorker::LlmRequest {
                        id,
                        request,
                        deltas,
                    })) => {
                        proxy.request(id, request, deltas);
                        continue;
                    }
                    Ok(Some(FromWorker::LlmCancel { id })) => {
                        proxy.cancel(id);
                        continue;
                    }
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
        let mut routing = Routing::default();
        // When to give up on the worker and kill its group: first the ready deadline, then,
        // once stopping, the shutdown timeout. `None` once ready and not stopping.
        let mut kill_at = Some(Instant::now() + READY_TIMEOUT);
        let shutdown_timeout = Duration::from_secs_f64(self.sup.config.workers.shutdown_timeout_s);
        let mut conn_open = true;
        let channel = Channel::Project(self.name.clone());
        let beat = Duration::from_secs_f64(self.sup.config.workers.heartbeat_interval_s);
        let mut last_heard = Instant::now();
        let mut pinged = false;
        // Idle auto-suspend (`workers.idle_suspend_s`): a ready worker with no task running, no
        // message in flight and nothing said but heartbeats for that long is suspended.
        let idle_limit = self
            .sup
            .config
            .workers
            .idle_suspend_s
            .map(Duration::from_secs);
        let mut last_busy = Instant::now();
        let mut idle_suspending = false;
        let outcome = loop {
            let (ping_at, dead_at) = liveness_deadlines(last_heard, beat);
            let watch_liveness = ready && conn_open && stopping.is_none();
            // Whether a task runs is the activity tracker's to say (it folds the same events,
            // published below before this is read again).
            let idle_at = idle_limit
                .filter(|_| {
                    watch_liveness
                        && !self.sup.activity.running(&self.name)
                        && routing.is_idle()
                        && !idle_suspending
                })
                .map(|limit| last_busy + limit);
            tokio::select! {
                ev = ev_rx.recv(), if conn_open => {
                    last_heard = Instant::now();
                    pinged = false;
                    if let Some(Ok(frame)) = &ev {
                        if !matches!(frame, FromWorker::Heartbeat | FromWorker::Pong { .. }) {
                            last_busy = last_heard;
                        }
                    }
                    match ev.unwrap_or_else(|| Err("connection closed".into())) {
                    Ok(FromWorker::Ready) => {
                        ready = true;
                        if stopping.is_none() {
                            kill_at = None;
                        }
                        self.set_state(WorkerState::Ready, Some(pid));
                        tracing::info!(project = %self.name, pid, "worker ready");
                        while let Some(d) = self.queued.pop_front() {
                            routing.deliver(&self.name, &to_worker, d);
                        }
                    }
                    Ok(FromWorker::MessagePersisted { id }) => routing.persisted(id),
                    Ok(FromWorker::Reply { message_id, text, answered }) => match routing.reply_to(&message_id) {
                        Some(ReplyTo::Waiter(tx)) => {
                            // A task that stopped without an answer is an error for a waiting
                            // client (exit 1), with the agent's line saying why.
                            let _ = tx.send(if answered {
                                Ok(text)
                            } else {
                                Err(format!("project {} did not answer: {}", self.name, text.replace('\n', " ")))
                            });
                        }
                        Some(ReplyTo::MainAgent) => self.sup.to_main(channel.clone(), text),
                        Some(ReplyTo::Nobody) | None => {
                            tracing::info!(project = %self.name, "reply: {text}");
                        }
                    },
                    // Handled on the reader task (see above).
                    Ok(FromWorker::LlmRequest { .. } | FromWorker::LlmCancel { .. }) => {}
                    Ok(FromWorker::Heartbeat | FromWorker::Pong { .. } | FromWorker::ShutdownComplete) => {}
                    Ok(FromWorker::Fatal { reason }) => {
                        tracing::error!(project = %self.name, "worker cannot run: {reason}");
                        fatal = Some(reason);
                    }
                    Ok(FromWorker::Notify { text, kind }) => {
                        tracing::info!(project = %self.name, %kind, "notify: {text}");
                        self.sup.bus.publish(&self.name, BusBody::Notify { text: text.clone() });
                        self.sup.to_main(channel.clone(), format!("[notify from project {}] {text}", self.name));
                    }
                    Ok(FromWorker::Event(event)) => {
                        tracing::debug!(project = %self.name, "event: {event:?}");
                        self.sup.bus.publish(&self.name, BusBody::Worker(event));
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
                }},
                _ = sleep_until(ping_at), if watch_liveness && !pinged => {
                    pinged = true;
                    let _ = to_worker.send(ToWorker::Ping { nonce: pid as u64 });
                }
                _ = sleep_until(dead_at), if watch_liveness => {
                    let silent = last_heard.elapsed().as_secs();
                    tracing::warn!(project = %self.name, pid, "worker said nothing for {silent} s, not even a heartbeat or a pong: it is hung; killing it");
                    fatal = Some(format!("hung: no heartbeat for {silent} s"));
                    conn_open = false;
                    spawn::kill_group(pid);
                }
                _ = sleep_until(idle_at.unwrap_or_else(Instant::now)), if idle_at.is_some() => {
                    idle_suspending = true;
                    tracing::info!(project = %self.name, "idle for {:?}: suspending (workers.idle_suspend_s)", idle_limit.unwrap_or_default());
                    let (sup, name) = (self.sup.clone(), self.name.clone());
                    // Its own task: suspending stops this very slot, which must keep running.
                    tokio::spawn(async move {
                        let verb = pegasus_store::Verb::Suspend;
                        if let Err(e) = crate::handlers::project::lifecycle(&sup, &name, verb).await {
                            tracing::warn!(project = %name, "idle suspend failed: {e}");
                        }
                    });
                }
                status = child.wait() => {
                    reader_task.abort();
                    writer_task.abort();
                    // Anything the worker started in its group goes with it, and so do its
                    // pending model calls (the aborted reader task drops the proxy, which
                    // aborts them).
                    spawn::kill_group(pid);
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
                        self.set_state(WorkerState::Stopping, Some(pid));
                        if !conn_open || to_worker.send(ToWorker::Shutdown).is_err() {
                            spawn::kill_group(pid);
                        }
                        stopping = Some(reply);
                        kill_at = Some(Instant::now() + shutdown_timeout);
                    }
                    Some(SlotCmd::Deliver(d)) => {
                        last_busy = Instant::now();
                        if ready {
                            routing.deliver(&self.name, &to_worker, d)
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
                    Some(SlotCmd::Kill { pid: target, reason }) => {
                        if target == pid {
                            fatal = Some(reason);
                            spawn::kill_group(pid);
                        }
                    }
                },
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
        routing.fail_all(&self.name);
        outcome
    }
}
