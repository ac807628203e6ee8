//! The daemon's one event bus: every worker's agent events, worker state changes, crashes,
//! model calls and notifies are published here once, and every consumer reads them from here —
//! the activity tracker behind `status`, the watchdog, `pegasusctl ... -f` followers, the
//! dashboard and Telegram.
//!
//! Two kinds of consumer. *Observers* (the activity tracker, the watchdogs, the dashboard's
//! replay ring) keep in-memory state: they are called inside `publish`, in bus order, and never
//! lag. They cost the publisher a few lock-protected map updates and no wake-up of another
//! task. *Subscribers* (`pegasusctl ... -f`, the
//! dashboard's SSE clients, Telegram) get a broadcast channel: publishing never waits for them;
//! one that falls behind loses the oldest events (it is told how many, and resyncs from the
//! files), so a slow follower can never block a worker or the daemon.

use pegasus_proto::{BusBody, BusEvent};
use std::sync::{Arc, Mutex, RwLock};
use tokio::sync::broadcast;

/// An observer: called with every event, in bus order, while the bus's lock is held. It must be
/// quick and must not publish.
pub(crate) type Observer = Box<dyn Fn(&Arc<BusEvent>) + Send + Sync>;

/// How many events a subscriber may fall behind before it lags and must resync.
pub const CAPACITY: usize = 4096;

/// The sending side; cheap to clone.
#[derive(Clone)]
pub(crate) struct EventBus {
    tx: broadcast::Sender<Arc<BusEvent>>,
    /// The last sequence number given; held while sending so that bus order is seq order.
    seq: Arc<Mutex<u64>>,
    observers: Arc<RwLock<Vec<Observer>>>,
}

impl EventBus {
    pub fn new() -> Self {
        EventBus {
            tx: broadcast::channel(CAPACITY).0,
            seq: Arc::new(Mutex::new(0)),
            observers: Arc::default(),
        }
    }

    /// Adds an observer: from now on it sees every event, before any subscriber does.
    pub fn observe(&self, observer: impl Fn(&Arc<BusEvent>) + Send + Sync + 'static) {
        self.observers
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push(Box::new(observer));
    }

    /// Makes `observe` see every event with `target`, for as long as `target` lives (the bus
    /// does not keep it alive).
    pub fn observe_weak<T: Send + Sync + 'static>(
        &self,
        target: &Arc<T>,
        observe: impl Fn(&T, &BusEvent) + Send + Sync + 'static,
    ) {
        let target = Arc::downgrade(target);
        self.observe(move |event| {
            if let Some(target) = target.upgrade() {
                observe(&target, event);
            }
        });
    }

    /// Publishes one event about `project`; never blocks, and nobody listening is fine.
    pub fn publish(&self, project: &str, body: BusBody) {
        let mut seq = self.seq.lock().unwrap_or_else(|p| p.into_inner());
        *seq += 1;
        let event = Arc::new(BusEvent {
            seq: *seq,
            ts_ms: chrono::Utc::now().timestamp_millis(),
            project: project.to_string(),
            body,
        });
        for observe in self
            .observers
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            observe(&event);
        }
        let _ = self.tx.send(event);
    }

    /// A new consumer: it sees every event published from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<BusEvent>> {
        self.tx.subscribe()
    }
}

/// What a consumer gets from [`next`]: an event, or how many it missed by lagging.
pub enum Received {
    /// The next event published.
    Event(Arc<BusEvent>),
    /// This many events were dropped before the consumer read them; it should resync.
    Lagged(u64),
}

/// The next item for a consumer; `None` once the bus is gone (the daemon is stopping).
pub async fn next(rx: &mut broadcast::Receiver<Arc<BusEvent>>) -> Option<Received> {
    match rx.recv().await {
        Ok(event) => Some(Received::Event(event)),
        Err(broadcast::error::RecvError::Lagged(n)) => Some(Received::Lagged(n)),
        Err(broadcast::error::RecvError::Closed) => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn a_slow_consumer_lags_and_is_told_how_much_it_missed_while_publishing_never_blocks() {
        let bus = EventBus::new();
        let mut slow = bus.subscribe();
        for i in 0..(CAPACITY as u64 + 10) {
            bus.publish(
                "p",
                BusBody::Notify {
                    text: i.to_string(),
                },
            );
        }
        match next(&mut slow).await {
            Some(Received::Lagged(n)) => assert_eq!(n, 10),
            _ => panic!("expected a lag"),
        }
        match next(&mut slow).await {
            Some(Received::Event(e)) => assert_eq!(e.seq, 11),
            _ => panic!("expected the oldest kept event"),
        }
    }

    #[tokio::test]
    async fn observers_see_every_later_event_in_order_before_any_subscriber() {
        let bus = EventBus::new();
        let mut rx = bus.subscribe();
        bus.publish(
            "p",
            BusBody::Notify {
                text: "before".into(),
            },
        );
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        bus.observe(move |e| log.lock().unwrap().push(e.seq));
        // An observer runs inside publish: nothing to await, nothing to lag.
        for _ in 0..(CAPACITY + 10) {
            bus.publish("p", BusBody::Crash { reason: "x".into() });
        }
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen, (2..=(CAPACITY as u64 + 11)).collect::<Vec<_>>());
        // The subscriber, meanwhile, lagged.
        assert!(matches!(next(&mut rx).await, Some(Received::Lagged(_))));
    }

    #[tokio::test]
    async fn every_consumer_sees_every_event_in_order() {
        let bus = EventBus::new();
        let (mut a, mut b) = (bus.subscribe(), bus.subscribe());
        bus.publish("p", BusBody::Crash { reason: "x".into() });
        bus.publish("q", BusBody::Notify { text: "y".into() });
        for rx in [&mut a, &mut b] {
            let seqs: Vec<u64> = [next(rx).await, next(rx).await]
                .into_iter()
                .map(|r| match r {
                    Some(Received::Event(e)) => e.seq,
                    _ => 0,
                })
                .collect();
            assert_eq!(seqs, [1, 2]);
        }
    }
}
