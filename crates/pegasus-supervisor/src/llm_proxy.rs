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
//!
//! A harness's own requests, relayed by the worker's endpoint (`RelayRequest`, DESIGN.md
//! §18), go the same way through the gateway's passthrough path: their answer's parts go back
//! to the worker as they come (`RelayAnswer`), their text on the bus like any call's.

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

/// What one call publishes on the bus: its start, its text deltas (as its task's), its end
/// with the cost.
struct OnBus {
    bus: EventBus,
    project: String,
    task: Option<String>,
}

impl OnBus {
    fn start(&self, in_flight: u32) {
        let start = BusBody::LlmCall {
            task: self.task.clone(),
            ended: false,
            in_flight,
            cost_usd: None,
        };
        self.bus.publish(&self.project, start);
    }

    fn delta(&self, text: String) {
        let delta = WorkerEvent::TextDelta {
            task: self.task.clone(),
            text,
        };
        self.bus.publish(&self.project, BusBody::Worker(delta));
    }

    /// The call is over: it leaves the in-flight count, then its end is published.
    fn end(self, in_flight: InFlight, cost_usd: Option<f64>) {
        let in_flight = in_flight.leave();
        let end = BusBody::LlmCall {
            task: self.task,
            ended: true,
            in_flight,
            cost_usd,
        };
        self.bus.publish(&self.project, end);
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
            let on_bus = OnBus { bus, project, task };
            on_bus.start(in_flight);
            // Deltas go on the bus in order and before the answer reaches the worker (so
            // before anything the worker says after it): the call and its deltas are drained
            // on this one task.
            let result = if request.stream && deltas {
                let (tx, mut rx) = mpsc::unbounded_channel::<String>();
                let chat = gateway.chat(request, Some(tx));
                tokio::pin!(chat);
                let result = loop {
                    tokio::select! {
                        biased;
                        Some(text) = rx.recv() => on_bus.delta(text),
                        result = &mut chat => break result,
                    }
                };
                while let Ok(text) = rx.try_recv() {
                    on_bus.delta(text);
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
            on_bus.end(guard, cost_usd);
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
            let message = format!(
                "Pegasus: {refusal} (the watchdog stopped the task: raise \
                 watchdog.max_usd_per_minute in config.yml, then `pegasusctl task retry`)"
            );
            request
                .api
                .refusal(request.api.no_money_status(), &message, refusal)
                .into_iter()
                .for_each(answer);
            return;
        }
        let gateway = self.gateway.clone();
        let bus = self.bus.clone();
        let project = self.project.clone();
        let (guard, in_flight) = InFlight::enter(&self.in_flight);
        let call = tokio::spawn(async move {
            let on_bus = OnBus {
                bus,
                project: project.clone(),
                task,
            };
            on_bus.start(in_flight);
            let (parts_tx, mut parts) = mpsc::unbounded_channel::<RelayPart>();
            let (deltas_tx, mut deltas) = mpsc::unbounded_channel::<String>();
            let relayed = gateway.relay(&project, request, &parts_tx, Some(deltas_tx));
            tokio::pin!(relayed);
            // Parts and deltas are passed on as they come, in order, by this one task.
            let cost_usd = loop {
                tokio::select! {
                    biased;
                    Some(part) = parts.recv() => answer(part),
                    Some(text) = deltas.recv() => on_bus.delta(text),
                    cost = &mut relayed => break cost,
                }
            };
            while let Ok(part) = parts.try_recv() {
                answer(part);
            }
            while let Ok(text) = deltas.try_recv() {
                on_bus.delta(text);
            }
            on_bus.end(guard, cost_usd);
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use pegasus_fakellm::{FakeLlm, Match, Reply, Rule, UsageSpec};
    use pegasus_proto::worker::RelayApi;
    use pegasus_store::{Config, Home, NewProject, PriceConfig, ProviderConfig};

    /// A harness's call relayed for project `web`: its answer's parts go to the worker as
    /// `RelayAnswer` frames in order, its text on the bus as the task's deltas between the
    /// call's start and its end (with the cost).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_relayed_call_streams_to_the_worker_and_its_text_to_the_bus() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::new(dir.path());
        let fake = FakeLlm::start().unwrap();
        fake.add_rule(
            Rule::new(Match::Any, Reply::Text("streamed text".into())).usage(UsageSpec {
                input: 100,
                output: 10,
                ..UsageSpec::default()
            }),
        );
        let mut config = Config::default();
        config.providers.insert(
            "fa".into(),
            ProviderConfig {
                kind: "anthropic".into(),
                base_url: fake.anthropic_base_url(),
                api_key_env: None,
                local: true,
            },
        );
        config.default_model = "fa/claude-opus-4-7".into();
        config.prices.insert(
            "fa/claude-opus-4-7".into(),
            PriceConfig {
                input: 1.0,
                output: 2.0,
                cache_read: None,
                cache_write: None,
                context_window: None,
            },
        );
        pegasus_store::create_project(
            &home,
            &NewProject {
                name: "web".into(),
                goal: "Relay.".into(),
                ..NewProject::default()
            },
            chrono::Utc::now(),
        )
        .unwrap();
        let gateway = Gateway::new(&home, &config).unwrap();
        let bus = EventBus::new();
        let mut events = bus.subscribe();
        let (to_worker, mut frames) = mpsc::unbounded_channel();
        let mut proxy = LlmProxy::new(
            gateway,
            bus,
            Arc::new(Watchdogs::new(&config.watchdog)),
            "web".into(),
            to_worker,
        );
        let body = serde_json::json!({
            "model": "claude-opus-4-7", "max_tokens": 1000, "stream": true,
            "messages": [{"role": "user", "content": "hi"}],
        });
        proxy.relay(
            7,
            RelayRequest {
                api: RelayApi::Anthropic,
                method: "POST".into(),
                path: "/v1/messages?beta=true".into(),
                body: body.to_string(),
                headers: vec![],
                task: Some("t-1".into()),
                role: None,
            },
        );
        let mut parts = Vec::new();
        loop {
            let frame = tokio::time::timeout(std::time::Duration::from_secs(10), frames.recv())
                .await
                .unwrap()
                .unwrap();
            let ToWorker::RelayAnswer { id: 7, part } = frame else {
                panic!("not an answer of call 7: {frame:?}");
            };
            let end = matches!(part, RelayPart::End { .. });
            parts.push(part);
            if end {
                break;
            }
        }
        assert!(
            matches!(parts[0], RelayPart::Head { status: 200, .. }),
            "{parts:?}"
        );
        assert_eq!(parts.last(), Some(&RelayPart::End { refusal: None }));
        let body: Vec<u8> = parts
            .iter()
            .filter_map(|p| match p {
                RelayPart::Chunk(b) => Some(b.clone()),
                _ => None,
            })
            .flatten()
            .collect();
        assert!(String::from_utf8(body).unwrap().contains("message_stop"));
        let (mut text, mut ended_cost) = (String::new(), None);
        while ended_cost.is_none() {
            let e = events.recv().await.unwrap();
            match &e.body {
                BusBody::Worker(WorkerEvent::TextDelta { task, text: piece }) => {
                    assert_eq!(task.as_deref(), Some("t-1"));
                    text.push_str(piece);
                }
                BusBody::LlmCall {
                    ended: true,
                    cost_usd,
                    ..
                } => ended_cost = Some(*cost_usd),
                _ => {}
            }
        }
        assert_eq!(text, "streamed text");
        assert_eq!(ended_cost, Some(Some((100.0 * 1.0 + 10.0 * 2.0) / 1e6)));
    }
}
