//! `GET /api/events`: the bus as Server-Sent Events. Each event has `id:` (its bus sequence
//! number), `event:` (its kind: `task`, `text_delta`, `worker_state`, `crash`, ...) and a JSON
//! `data:` line. A client reconnecting with `Last-Event-ID` gets what it missed from a ring of
//! the last [`RING`] events (or `resync` when that is not enough); a client that falls behind
//! the bus gets `resync` and is dropped — it never slows the daemon.

use crate::Dash;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use pegasus_proto::{BusBody, BusEvent, WorkerEvent};
use pegasus_supervisor::front_door::{self as bus, Received};
use pegasus_supervisor::FrontDoor;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

/// Events kept for resuming clients.
const RING: usize = 2048;

#[derive(Default)]
pub(crate) struct Ring(Mutex<VecDeque<Arc<BusEvent>>>);

impl Ring {
    fn push(&self, e: Arc<BusEvent>) {
        let mut q = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if q.len() == RING {
            q.pop_front();
        }
        q.push_back(e);
    }

    /// Events after `seq`, and whether the ring reaches back that far.
    fn after(&self, seq: u64) -> (Vec<Arc<BusEvent>>, bool) {
        let q = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let complete = q.front().is_none_or(|f| f.seq <= seq + 1);
        (
            q.iter().filter(|e| e.seq > seq).cloned().collect(),
            complete,
        )
    }
}

/// Keeps the ring filled: it observes the bus, so it holds every event up to the last one
/// published (a subscriber reading it never misses what falls between the two).
pub(crate) fn observe(door: &FrontDoor, ring: Arc<Ring>) {
    door.observe(move |e| ring.push(e.clone()));
}

/// The JSON of one event: where, what, and the fields a page needs without digging.
pub(crate) fn event_json(e: &BusEvent) -> serde_json::Value {
    let mut v = serde_json::json!({
        "seq": e.seq,
        "ts_ms": e.ts_ms,
        "project": e.project,
        "kind": e.body.kind(),
        "body": serde_json::to_value(&e.body).unwrap_or(serde_json::Value::Null),
    });
    match &e.body {
        BusBody::Worker(WorkerEvent::TextDelta { task, text }) => {
            v["text"] = serde_json::json!(text);
            v["task"] = serde_json::json!(task);
        }
        BusBody::Worker(WorkerEvent::Task { task, state, .. }) => {
            v["task"] = serde_json::json!(task);
            v["state"] = serde_json::json!(state.as_str());
        }
        BusBody::Crash { reason } => v["reason"] = serde_json::json!(reason),
        BusBody::WorkerState { state, pid } => {
            v["state"] = serde_json::json!(state);
            v["pid"] = serde_json::json!(pid);
        }
        _ => {}
    }
    v
}

/// The JSON text of the last event sent, shared by every follower: with many followers an
/// event is serialized once, not once per follower.
static LAST: Mutex<Option<(u64, Arc<str>)>> = Mutex::new(None);

fn sse(e: &BusEvent) -> Event {
    let data = {
        let mut last = LAST.lock().unwrap_or_else(|p| p.into_inner());
        match last.as_ref() {
            Some((seq, text)) if *seq == e.seq => text.clone(),
            _ => {
                let text: Arc<str> = event_json(e).to_string().into();
                *last = Some((e.seq, text.clone()));
                text
            }
        }
    };
    Event::default()
        .id(e.seq.to_string())
        .event(e.body.kind())
        .data(&*data)
}

fn resync(why: &str) -> Event {
    Event::default()
        .event("resync")
        .data(serde_json::json!({"reason": why}).to_string())
}

#[derive(serde::Deserialize)]
pub(crate) struct Filter {
    project: Option<String>,
}

pub(crate) async fn stream(
    State(d): State<Dash>,
    Query(f): Query<Filter>,
    headers: HeaderMap,
) -> Sse<impl futures_util::Stream<Item = Result<Event, Infallible>>> {
    // Subscribe before reading the ring, so nothing falls between the two.
    let rx = d.door.subscribe();
    let last: Option<u64> = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.parse().ok());
    let mut first: VecDeque<Event> = VecDeque::new();
    let mut sent = 0u64;
    if let Some(seq) = last {
        let (missed, complete) = d.ring.after(seq);
        if !complete {
            first.push_back(resync("events were lost since your Last-Event-ID: reload"));
        }
        for e in missed {
            sent = e.seq;
            if f.project.as_ref().is_none_or(|p| *p == e.project) {
                first.push_back(sse(&e));
            }
        }
    }
    let stop = d.door.shutdown().clone();
    let state = (rx, first, sent, f.project, false);
    let s = futures_util::stream::unfold(state, move |(mut rx, mut first, sent, project, done)| {
        let stop = stop.clone();
        async move {
            if done {
                return None;
            }
            if let Some(e) = first.pop_front() {
                return Some((Ok(e), (rx, first, sent, project, false)));
            }
            loop {
                let got = tokio::select! {
                    _ = stop.cancelled() => return None,
                    got = bus::next(&mut rx) => got,
                };
                match got {
                    Some(Received::Event(e)) => {
                        if e.seq <= sent || project.as_ref().is_some_and(|p| *p != e.project) {
                            continue;
                        }
                        let ev = sse(&e);
                        return Some((Ok(ev), (rx, first, e.seq, project, false)));
                    }
                    Some(Received::Lagged(n)) => {
                        let ev = resync(&format!("{n} events dropped: you fell behind; reconnect"));
                        return Some((Ok(ev), (rx, first, sent, project, true)));
                    }
                    None => return None,
                }
            }
        }
    });
    Sse::new(s).keep_alive(KeepAlive::default())
}
