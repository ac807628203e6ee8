//! Which message gets which answer: a message delivered to a worker is answered twice — once
//! when the worker has it durably (its id, for the sender), and once when the project's agent
//! replies (for whoever waits: a `send --wait` client, the MainAgent, or nobody).
//!
//! The routing lives as long as one worker connection; when the worker ends, everybody still
//! waiting is told why ([`Routing::fail_all`]).

use crate::error::RequestError;
use pegasus_proto::{
    worker::{InboundMessage, ToWorker},
    Channel,
};
use std::collections::HashMap;
use tokio::sync::{mpsc, oneshot};

/// Where a message's id, or its answer, goes (or why there is none).
pub(crate) type Answer = oneshot::Sender<Result<String, RequestError>>;

/// A message for the worker, with who waits for what.
pub(crate) struct Delivery {
    /// Where it comes from.
    pub from: Channel,
    pub text: String,
    /// The sender's own id for it (DESIGN.md §11): the worker answers a repeat with the first
    /// message's id and runs nothing again.
    pub client_id: Option<String>,
    /// Answered once the worker has the message durably (its id, or the first one's for a
    /// repeat), or why not.
    pub persisted: Answer,
    /// Answered with the project agent's reply, when somebody waits for it.
    pub answer: Option<Answer>,
}

/// Who gets the project's reply to a delivered message.
pub(crate) enum ReplyTo {
    Waiter(Answer),
    MainAgent,
    Nobody,
}

/// The messages of one worker connection that are not persisted or not answered yet.
#[derive(Default)]
pub(crate) struct Routing {
    persisting: HashMap<String, Answer>,
    awaiting: HashMap<String, ReplyTo>,
    /// Waiters of repeats (DESIGN.md §11), by the first message's id: they get its reply too.
    repeats: HashMap<String, Vec<Answer>>,
}

/// Message ids: unique across restarts of the daemon (time) and within one (counter).
fn message_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed) + 1;
    format!("{}-{n}", chrono::Utc::now().timestamp_millis())
}

impl Routing {
    /// Sends `d` to the worker and remembers who waits for what.
    pub fn deliver(
        &mut self,
        project: &str,
        to_worker: &mpsc::UnboundedSender<ToWorker>,
        d: Delivery,
    ) {
        let id = message_id();
        let msg = ToWorker::Message(InboundMessage {
            id: id.clone(),
            from: d.from.clone(),
            text: d.text,
            client_id: d.client_id,
        });
        match to_worker.send(msg) {
            Ok(()) => {
                self.persisting.insert(id.clone(), d.persisted);
                let to = match (d.answer, &d.from) {
                    (Some(tx), _) => ReplyTo::Waiter(tx),
                    (None, Channel::Main) => ReplyTo::MainAgent,
                    (None, _) => ReplyTo::Nobody,
                };
                self.awaiting.insert(id, to);
            }
            Err(_) => {
                let _ = d.persisted.send(Err(RequestError::unavailable(format!(
                    "cannot reach the worker of project {project}; try again"
                ))));
            }
        }
    }

    /// The worker has message `id` on disk.
    pub fn persisted(&mut self, id: String) {
        if let Some(reply) = self.persisting.remove(&id) {
            let _ = reply.send(Ok(id));
        }
    }

    /// Message `id` repeats the client id of message `original`, which the worker already had
    /// (DESIGN.md §11), so it was not recorded: its sender gets `original`, and its waiter the
    /// reply to `original` when it comes (the worker sends it again if it is already known).
    /// With another text than the first, it is refused.
    pub fn repeated(&mut self, project: &str, id: &str, original: String, same_text: bool) {
        let waiter = match self.awaiting.remove(id) {
            Some(ReplyTo::Waiter(tx)) => Some(tx),
            _ => None,
        };
        let Some(reply) = self.persisting.remove(id) else {
            return;
        };
        if !same_text {
            let _ = reply.send(Err(RequestError::Conflict(format!(
                "this id was already used for another message to project {project} (message {original}): send a new text with a new id"
            ))));
            return;
        }
        if let Some(tx) = waiter {
            self.repeats.entry(original.clone()).or_default().push(tx);
        }
        let _ = reply.send(Ok(original));
    }

    /// Who gets the agent's reply to message `id` (it is forgotten here), and the waiters of
    /// its repeats.
    pub fn reply_to(&mut self, id: &str) -> (Option<ReplyTo>, Vec<Answer>) {
        (
            self.awaiting.remove(id),
            self.repeats.remove(id).unwrap_or_default(),
        )
    }

    /// Nothing is waiting for this worker: no message to persist, no reply to route.
    pub fn is_idle(&self) -> bool {
        self.persisting.is_empty() && self.awaiting.is_empty() && self.repeats.is_empty()
    }

    /// The worker is gone: everybody still waiting hears why.
    pub fn fail_all(&mut self, project: &str) {
        let gone = format!("the worker of project {project} ended before it");
        for (_, reply) in self.persisting.drain() {
            let _ = reply.send(Err(RequestError::unavailable(format!(
                "{gone} persisted the message; send it again"
            ))));
        }
        let waiters = self
            .awaiting
            .drain()
            .filter_map(|(_, to)| match to {
                ReplyTo::Waiter(tx) => Some(tx),
                ReplyTo::MainAgent | ReplyTo::Nobody => None,
            })
            .chain(self.repeats.drain().flat_map(|(_, txs)| txs));
        for tx in waiters {
            let _ = tx.send(Err(RequestError::unavailable(format!("{gone} answered; the message is in its session and runs again when the worker is back (see `pegasusctl project log`)"))));
        }
    }
}
