//! What the agent tells its supervisor while it works.

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
    /// A machine-readable event for logs and the dashboard: task transitions and stages
    /// (`task`, `task_stage`), tool calls (`tool_call`) and model responses (`model_response`).
    Event {
        /// The event name.
        kind: String,
        /// Its data, a JSON object as text (frames cannot carry `serde_json::Value`).
        data_json: String,
    },
}

/// Sends an event, ignoring a receiver that has gone away.
pub(crate) fn send_event(
    notices: &tokio::sync::mpsc::UnboundedSender<Notice>,
    kind: &str,
    data: serde_json::Value,
) {
    let _ = notices.send(Notice::Event {
        kind: kind.to_string(),
        data_json: data.to_string(),
    });
}
