//! Which message gets which answer: a message delivered to a worker is answered twice — once
//! when the worker has it durably (its id, for the sender), and once when the project's agent
//! replies (for whoever waits: a `send --wait` client, the MainAgent, or nobody).
//!
//! The routing lives as long as one worker connection; when the worker ends, everybody still
//! waiting is told why ([`Routing::fail_all`]).

use pegasus_proto::{
    worker::{InboundMessage, ToWorker},
    Channel,
};
use std::collections::HashMap;
use tokio::sync::{mpsc, oneshot};

/// A message for the worker, with who waits for what.
pub(crate) struct Delivery {
    /// Where it comes from.
    pub from: Channel,
    pub text: String,
    /// Answered once the worker has the message durably (its id), or why not.
    pub persisted: oneshot::Sender<Result<String, String>>,
    /// Answered with the project agent's reply, when somebody waits for it.
    pub answer: Option<oneshot::Sender<Result<String, String>>>,
}

/// Who gets the project's reply to a delivered message.
pub(crate) enum ReplyTo {
    Waiter(oneshot::Sender<Result<String, String>>),
    MainAgent,
    Nobody,
}

/// The messages of one worker connection that are not persisted or not answered yet.
#[derive(Default)]
pub(crate) struct Routing {
    persisting: HashMap<String, oneshot::Sender<Result<String, String>>>,
    awaiting: HashMap<String, ReplyTo>,
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
                let _ = d.persisted.send(Err(format!(
                    "cannot reach the worker of project {project}; try again"
                )));
            }
        }
    }

    /// The worker has message `id` on disk.
    pub fn persisted(&mut self, id: String) {
        if let Some(reply) = self.persisting.remove(&id) {
            let _ = reply.send(Ok(id));
        }
    }

    /// Who gets the agent's reply to message `id` (it is forgotten here).
    pub fn reply_to(&mut self, id: &str) -> Option<ReplyTo> {
        self.awaiting.remove(id)
    }

    /// Nothing is waiting for this worker: no message to persist, no reply to route.
    pub fn is_idle(&self) -> bool {
        self.persisting.is_empty() && self.awaiting.is_empty()
    }

    /// The worker is gone: everybody still waiting hears why.
    pub fn fail_all(&mut self, project: &str) {
        let gone = format!("the worker of project {project} ended before it");
        for (_, reply) in self.persisting.drain() {
            let _ = reply.send(Err(format!("{gone} persisted the message; send it again")));
        }
        for (_, to) in self.awaiting.drain() {
            if let ReplyTo::Waiter(tx) = to {
                let _ = tx.send(Err(format!("{gone} answered; the message is in its session and runs again when the worker is back (see `pegasusctl project log`)")));
            }
        }
    }
}
