//! Phase 2 of a worker's life: it is connected. The slot sends it `Init` and its messages,
//! routes what it says (persisted, replies, notifies, events, model calls), and watches the
//! process and the clocks until it exits. Which event does what is [`super::link`]'s to decide.
//!
//! Frames to the worker go through their own writer task and frames from it through their own
//! reader task: a worker that stops reading (stopped, hung) must never block this loop, and a
//! frame read is not cancel safe where a channel is.

use super::{
    link::{Action, Event, Link, Timer},
    process::WorkerProcess,
    routing::{ReplyTo, Routing},
    Outcome, Slot, SlotCmd, SlotEvent, WorkerConn,
};
use crate::llm_proxy::LlmProxy;
use pegasus_proto::{
    worker::{FromWorker, Init, ToWorker},
    BusBody, Channel, PROTOCOL_VERSION,
};
use std::time::Duration;
use tokio::{
    sync::{mpsc, oneshot},
    time::{sleep_until, Instant},
};

impl Slot {
    /// Runs until the worker exits; says whether it was asked to. What each event does is the
    /// link's to decide ([`Link::step`]); this loop waits for the next one and carries out the
    /// actions.
    pub(super) async fn run_connected(
        &mut self,
        conn: WorkerConn,
        mut process: WorkerProcess,
        rx: &mut mpsc::Receiver<SlotCmd>,
    ) -> Outcome {
        let pid = process.pid();
        // A remote worker's end is its link's end (see `WorkerProcess`).
        let gone = match &process {
            WorkerProcess::Remote { gone, .. } => Some(gone.clone()),
            WorkerProcess::Local { .. } => None,
        };
        let WorkerConn {
            mut reader,
            mut writer,
            ..
        } = conn;
        let model = self.ctx.project_model(&self.name);
        // A model no table knows: its server says its window, asked in the background (DESIGN.md
        // §12: a worker's Ready never waits on the network). What it said before a restart is
        // known at once; until it has said it, the worker is told the window is pending, and
        // its first model call waits for the `ContextWindow` frame that follows.
        let gateway = &self.ctx.gateway;
        let mut windows = gateway.subscribe_windows();
        let window = gateway.window_now(&model);
        gateway.spawn_learn(&model);
        let init = ToWorker::Init(Init {
            protocol_version: PROTOCOL_VERSION,
            config_json: self.ctx.config_json.clone(),
            heartbeat_ms: (self.ctx.config.workers.heartbeat_interval_s * 1000.0) as u64,
            context_window: Some(window.window),
            window_pending: window.pending,
            model: model.clone(),
            // A remote worker has only its project folder (DESIGN.md §14).
            home_files: process
                .is_remote()
                .then(|| crate::remote::home_files(&self.ctx.home)),
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
        // Every window settled for this model from now on reaches the worker: the answer to a
        // pending Init (learned, or the default when the server would not say), or a change.
        let window_task = {
            let (to_worker, gateway) = (to_worker.clone(), gateway.clone());
            tokio::spawn(async move {
                let mut told = window.window;
                let mut owed = window.pending;
                if owed {
                    // Settled between `window_now` and the subscription: not missed.
                    let now = gateway.window_now(&model);
                    if !now.pending {
                        told = now.window;
                        owed = false;
                        let _ = to_worker.send(ToWorker::ContextWindow { window: told });
                    }
                }
                loop {
                    let w = match windows.recv().await {
                        Ok((m, w)) if m == model => w,
                        Ok(_) => continue,
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                            gateway.window_now(&model).window
                        }
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                    };
                    if w != told || owed {
                        (told, owed) = (w, false);
                        if to_worker
                            .send(ToWorker::ContextWindow { window: w })
                            .is_err()
                        {
                            break;
                        }
                    }
                }
            })
        };
        let (ev_tx, mut ev_rx) = mpsc::channel::<Result<FromWorker, String>>(64);
        // Model calls start right here, on the reader task, instead of crossing to this loop
        // first. The proxy lives as long as the reader task, so aborting that task (the worker
        // exited) or the connection ending cancels the calls.
        let mut proxy = LlmProxy::new(
            self.ctx.gateway.clone(),
            self.ctx.bus.clone(),
            self.ctx.watchdogs.clone(),
            self.name.clone(),
            to_worker.clone(),
        );
        let link_gone = gone.clone();
        let searches = crate::web_search::WebSearches::new(
            self.ctx.web_search.clone(),
            self.name.clone(),
            to_worker.clone(),
        );
        let reader_task = tokio::spawn(async move {
            let mut searches = searches;
            loop {
                let read = async {
                    match &link_gone {
                        Some(gone) => tokio::select! {
                            _ = gone.cancelled() => Ok(None),
                            read = reader.read::<FromWorker>() => read,
                        },
                        None => reader.read::<FromWorker>().await,
                    }
                };
                let ev = match read.await {
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
                    Ok(Some(FromWorker::RelayRequest { id, request })) => {
                        proxy.relay(id, request);
                        continue;
                    }
                    Ok(Some(FromWorker::RelayCancel { id })) => {
                        proxy.cancel_relay(id);
                        continue;
                    }
                    Ok(Some(FromWorker::WebSearch { id, query, count })) => {
                        searches.search(id, query, count);
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
            if let Some(gone) = link_gone {
                gone.cancel();
            }
        });
        let workers = &self.ctx.config.workers;
        let mut link = Link::new(
            pid,
            Instant::now(),
            Duration::from_secs_f64(workers.heartbeat_interval_s),
            Duration::from_secs_f64(workers.shutdown_timeout_s),
            // Idle auto-suspend (`workers.idle_suspend_s`).
            workers.idle_suspend_s.map(Duration::from_secs),
            process.is_remote(),
        );
        let mut routing = Routing::default();
        let channel = Channel::Project(self.name.clone());
        let outcome = 'link: loop {
            // Whether a task runs is the activity tracker's to say (it folds the same events,
            // published below before this is read again).
            let may_idle = !self.ctx.activity.running(&self.name) && routing.is_idle();
            let timer = link.next_timer(may_idle);
            let event = tokio::select! {
                ev = ev_rx.recv(), if link.reading() => match ev {
                    Some(Ok(frame)) => Event::Frame(frame),
                    Some(Err(why)) => Event::ConnectionEnded(why),
                    None => Event::ConnectionEnded("connection closed".into()),
                },
                desc = process.wait() => Event::Exited(desc),
                cmd = rx.recv(), if link.taking_commands() => match cmd {
                    Some(cmd) => Event::Cmd(cmd),
                    // Every sender is gone: the daemon is going away.
                    None => Event::Cmd(SlotCmd::Stop(oneshot::channel().0)),
                },
                _ = sleep_until(timer.map_or_else(Instant::now, |t| t.0)), if timer.is_some() => {
                    Event::Timer(timer.map_or(Timer::Kill, |t| t.1))
                }
            };
            for action in link.step(event, Instant::now()) {
                match action {
                    Action::SetState(state) => self.set_state(state, Some(pid)),
                    Action::Send(frame) => {
                        let _ = to_worker.send(frame);
                    }
                    Action::Shutdown => {
                        if to_worker.send(ToWorker::Shutdown).is_err() {
                            process.kill();
                        }
                    }
                    Action::Deliver(d) => routing.deliver(&self.name, &to_worker, d),
                    Action::Queue(d) => self.queued.push_back(d),
                    Action::DeliverQueued => {
                        while let Some(d) = self.queued.pop_front() {
                            routing.deliver(&self.name, &to_worker, d);
                        }
                    }
                    Action::Persisted(id) => routing.persisted(id),
                    Action::Repeated {
                        id,
                        original,
                        same_text,
                    } => routing.repeated(&self.name, &id, original, same_text),
                    Action::Reply {
                        message_id,
                        text,
                        answered,
                    } => {
                        let (to, repeats) = routing.reply_to(&message_id);
                        // A task that stopped without an answer (failed, or stopped by a
                        // budget, the watchdog, a cap) is an error for a waiting client
                        // (exit 1), with the agent's line saying why.
                        let answer = || {
                            if answered {
                                Ok(text.clone())
                            } else {
                                Err(crate::error::RequestError::refused(format!(
                                    "project {} did not answer: {}",
                                    self.name,
                                    text.replace('\n', " ")
                                )))
                            }
                        };
                        for tx in repeats {
                            let _ = tx.send(answer());
                        }
                        match to {
                            Some(ReplyTo::Waiter(tx)) => {
                                let _ = tx.send(answer());
                            }
                            Some(ReplyTo::MainAgent) => self.ctx.main.tell(channel.clone(), text),
                            Some(ReplyTo::Nobody) | None => {
                                // The words are the user's conversation: not in the log.
                                tracing::debug!(project = %self.name, bytes = text.len(), "reply with nobody waiting");
                            }
                        }
                    }
                    Action::Notify(text) => {
                        let notify = BusBody::Notify { text: text.clone() };
                        self.ctx.bus.publish(&self.name, notify);
                        self.ctx.main.tell(
                            channel.clone(),
                            format!("[notify from project {}] {text}", self.name),
                        );
                    }
                    Action::Publish(event) => {
                        self.ctx.bus.publish(&self.name, BusBody::Worker(event));
                    }
                    Action::KillGroup => process.kill(),
                    Action::IdleSuspend => {
                        tracing::info!(project = %self.name, "idle: asking for a suspend (workers.idle_suspend_s)");
                        self.ctx.slot_event(SlotEvent::Idle(self.name.clone()));
                    }
                    Action::End(outcome) => {
                        // Anything the worker started in its group goes with it (KillGroup came
                        // first), and so do its pending model calls: the aborted reader task
                        // drops the proxy, which aborts them.
                        reader_task.abort();
                        writer_task.abort();
                        break 'link outcome;
                    }
                }
            }
        };
        window_task.abort();
        routing.fail_all(&self.name);
        outcome
    }
}
