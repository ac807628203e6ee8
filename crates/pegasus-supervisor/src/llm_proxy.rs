//! Where a worker's model calls go: the LLM proxy of one worker connection. A worker sends
//! `LlmRequest{id, request, deltas}`; the proxy runs it through the gateway (which owns the
//! keys, the semaphore, the budgets and the ledger) on its own task, which publishes the
//! answer's text deltas on the event bus itself as they arrive (when the worker asked: its
//! task's own loop) and hands the answer to the connection's frame writer.
//!
//! The worker's project pays for every call, whatever the request claims. A call is refused up
//! front when the watchdog stopped its task. Every start and end is published on the bus (with
//! the cost), which is how the watchdog knows a busy worker is waiting on the gateway rather
//! than silent. Calls are cancelled (their tasks aborted) when the worker asks or exits.

use crate::{bus::EventBus, watchdog::Watchdogs};
use pegasus_llm::Gateway;
use pegasus_proto::{
    llm::{ChatRequest, ChatResponse},
    worker::{RelayPart, RelayRequest, ToWorker},
    BusBody, WorkerEvent,
};
use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicU32, Ordering},
        Arc,
    },
};
use tokio::{sync::mpsc, task::JoinHandle};

/// The model calls of one worker connection.
pub(crate) struct LlmProxy {
    gateway: Gateway,
    bus: EventBus,
    /// Asked whether the watchdog stopped a call's task.
    watchdogs: Arc<Watchdogs>,
    project: String,
    to_worker: mpsc::UnboundedSender<ToWorker>,
    calls: HashMap<u64, JoinHandle<()>>,
    /// A harness's calls relayed by the worker (DESIGN.md §18), by the worker's id for them.
    relays: HashMap<u64, JoinHandle<()>>,
    in_flight: Arc<AtomicU32>,
}

/// Counts a call as in flight for as long as its task lives, however it ends (answered,
/// cancelled, aborted with its worker).
struct InFlight(Arc<AtomicU32>);

impl InFlight {
    fn enter(count: &Arc<AtomicU32>) -> (Self, u32) {
        let now = count.fetch_add(1, Ordering::SeqCst) + 1;
        (InFlight(count.clone()), now)
    }

    /// Leaves early (before the end is published); returns how many remain.
    fn leave(self) -> u32 {
        let left = self.0.fetch_sub(1, Ordering::SeqCst).saturating_sub(1);
        std::mem::forget(self);
        left
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl LlmProxy {
    pub fn new(
        gateway: Gateway,
        bus: EventBus,
        watchdogs: Arc<Watchdogs>,
        project: String,
        to_worker: mpsc::UnboundedSender<ToWorker>,
    ) -> Self {
        LlmProxy {
            gateway,
            bus,
            watchdogs,
            project,
            to_worker,
            calls: HashMap::new(),
            relays: HashMap::new(),
            in_flight: Arc::new(AtomicU32::new(0)),
        }
    }

    /// Starts call `id` of the worker (or refuses it at once); with `deltas`, the answer's
    /// text goes on the bus as it arrives.
    pub fn request(&mut self, id: u64, mut request: ChatRequest, deltas: bool) {
        self.calls.retain(|_, call| !call.is_finished());
        let task = request.meta.task.clone();
        if let Some(refusal) = self.watchdogs.refusal(&self.project, task.as_deref()) {
            let _ = self.to_worker.send(ToWorker::LlmResponse {
                id,
                result: Err(refusal),
            });
            return;
        }
        request.meta.project = Some(self.project.clone());
        let gateway = self.gateway.clone();
        let bus = self.bus.clone();
        let project = self.project.clone();
        let to_worker = self.to_worker.clone();
        let (guard, in_flight) = InFlight::enter(&self.in_flight);
        let call = tokio::spawn(async move {
            // Start and end are published by this one task, so a consumer always sees the start
            // first.
            let start = BusBody::LlmCall {
                task: task.clone(),
                ended: false,
                in_flight,
                cost_usd: None,
            };
            bus.publish(&project, start);
            // Deltas go on the bus in order and before the answer reaches the worker (so
            // before anything the worker says after it): the call and its deltas are drained
            // on this one task.
            let result = if request.stream && deltas {
                let (tx, mut rx) = mpsc::unbounded_channel::<String>();
                let chat = gateway.chat(request, Some(tx));
                tokio::pin!(chat);
                let delta = |text: String| {
                    bus.publish(
                        &project,
                        BusBody::Worker(WorkerEvent::TextDelta {
                            task: task.clone(),
                            text,
                        }),
                    );
                };
                let result = loop {
                    tokio::select! {
                        biased;
                        Some(text) = rx.recv() => delta(text),
                        result = &mut chat => break result,
                    }
                };
                while let Ok(text) = rx.try_recv() {
                    delta(text);
                }
                result
            } else {
                gateway.chat(request, None).await
            };
            let cost_usd = match &result {
                Ok(ChatResponse { cost_usd, .. }) => *cost_usd,
                Err(_) => None,
            };
            let _ = to_worker.send(ToWorker::LlmResponse { id, result });
            let in_flight = guard.leave();
            let end = BusBody::LlmCall {
                task,
                ended: true,
                in_flight,
                cost_usd,
            };
            bus.publish(&project, end);
        });
        self.calls.insert(id, call);
    }

    /// Starts relayed call `id` of a harness of the worker (DESIGN.md §18): the answer's parts
    /// go to the worker as they come, its text on the bus as the task's deltas. Refused up
    /// front, in the API's error shape, when the watchdog stopped its task.
    pub fn relay(&mut self, id: u64, request: RelayRequest) {
        self.relays.retain(|_, call| !call.is_finished());
        let task = request.task.clone();
        let to_worker = self.to_worker.clone();
        let answer = move |part: RelayPart| {
            let _ = to_worker.send(ToWorker::RelayAnswer { id, part });
        };
        if let Some(refusal) = self.watchdogs.refusal(&self.project, task.as_deref()) {
            let body = request.api.error_body(400, &refusal.to_string());
            answer(RelayPart::Head {
                status: 400,
                headers: vec![("content-type".into(), "application/json".into())],
            });
            answer(RelayPart::Chunk(body.into_bytes()));
            answer(RelayPart::End {
                refusal: Some(refusal),
            });
            return;
        }
        let gateway = self.gateway.clone();
        let bus = self.bus.clone();
        let project = self.project.clone();
        let (guard, in_flight) = InFlight::enter(&self.in_flight);
        let call = tokio::spawn(async move {
            let start = BusBody::LlmCall {
                task: task.clone(),
                ended: false,
                in_flight,
                cost_usd: None,
            };
            bus.publish(&project, start);
            let (parts_tx, mut parts) = mpsc::unbounded_channel::<RelayPart>();
            let (deltas_tx, mut deltas) = mpsc::unbounded_channel::<String>();
            let relayed = gateway.relay(&project, request, &parts_tx, Some(deltas_tx));
            tokio::pin!(relayed);
            let delta = |text: String| {
                bus.publish(
                    &project,
                    BusBody::Worker(WorkerEvent::TextDelta {
                        task: task.clone(),
                        text,
                    }),
                );
            };
            // Parts and deltas are passed on as they come, in order, by this one task.
            let cost_usd = loop {
                tokio::select! {
                    biased;
                    Some(part) = parts.recv() => answer(part),
                    Some(text) = deltas.recv() => delta(text),
                    cost = &mut relayed => break cost,
                }
            };
            while let Ok(part) = parts.try_recv() {
                answer(part);
            }
            while let Ok(text) = deltas.try_recv() {
                delta(text);
            }
            let in_flight = guard.leave();
            let end = BusBody::LlmCall {
                task,
                ended: true,
                in_flight,
                cost_usd,
            };
            bus.publish(&project, end);
        });
        self.relays.insert(id, call);
    }

    /// The harness went away before the answer to relayed call `id` ended: cancelled upstream
    /// (what arrived is metered by the gateway).
    pub fn cancel_relay(&mut self, id: u64) {
        if let Some(call) = self.relays.remove(&id) {
            call.abort();
        }
    }

    /// The worker no longer wants the answer to call `id`.
    pub fn cancel(&mut self, id: u64) {
        if let Some(call) = self.calls.remove(&id) {
            call.abort();
        }
    }
}

impl Drop for LlmProxy {
    /// The worker is gone: nobody is left to read the answers.
    fn drop(&mut self) {
        for (_, call) in self.calls.drain().chain(self.relays.drain()) {
            call.abort();
        }
    }
}
