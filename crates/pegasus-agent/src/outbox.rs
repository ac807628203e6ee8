//! The agent's outbox: what it tells its host while it works — notifies for the MainAgent and
//! typed events for the supervisor's bus. The worker turns each into a frame; the MainAgent's
//! host handles them in process.

use pegasus_proto::WorkerEvent;

/// Something the agent wants its supervisor to know. The worker forwards these as
/// `Notify`/`Event` frames; the MainAgent's host handles them in process. Sending never blocks
/// the loop, and a closed receiver is ignored: the agent's work does not depend on being watched.
#[derive(Debug, Clone)]
pub enum Notice {
    /// A message for the MainAgent (the `notify` tool).
    Notify {
        /// What to tell it.
        text: String,
    },
    /// A typed event for the supervisor's event bus: task transitions and stages, tool calls,
    /// model usage, text deltas, compactions.
    Event(WorkerEvent),
}

/// Sends an event, ignoring a receiver that has gone away.
pub(crate) fn send_event(notices: &tokio::sync::mpsc::UnboundedSender<Notice>, event: WorkerEvent) {
    let _ = notices.send(Notice::Event(event));
}
