//! The session appender, shared: the loop appends its turns, and the host appends inbound
//! messages the moment they arrive, even while a run is going on, so nothing a user sent is
//! lost if the worker dies before the run gets to it.

use std::sync::{Arc, Mutex};

use pegasus_proto::Channel;
use pegasus_store::{Session, SessionRecord};

use crate::error::AgentError;
use crate::transcript::{sent_record, user_record};

/// The shared session appender of one agent (see [`crate::Agent::session_handle`]).
pub type SessionHandle = Arc<Mutex<Session>>;

/// Appends records as one durable turn. Blocking (one fdatasync); async code goes through
/// [`persist`].
pub fn append_blocking(
    session: &SessionHandle,
    records: &[SessionRecord],
) -> Result<(), AgentError> {
    // A poisoned lock only means another thread panicked mid-append; the appender repairs a
    // torn tail itself, so going on is safe.
    let mut s = session.lock().unwrap_or_else(|p| p.into_inner());
    s.append_turn(records)?;
    Ok(())
}

/// Durably appends an inbound message as a user record (id, from, text). Call it as soon as a
/// message arrives, then [`crate::Agent::enqueue`] it when the agent is free.
pub fn record_inbound(
    session: &SessionHandle,
    id: &str,
    from: &Channel,
    text: &str,
) -> Result<(), AgentError> {
    append_blocking(session, &[user_record(id, from, text)])
}

/// [`record_inbound`] of a message that carries its sender's own id for it (DESIGN.md §11): the id
/// is in the same durable line as the message, so "was it recorded" and "is its id known"
/// can never disagree, whatever crash comes between.
pub fn record_sent(
    session: &SessionHandle,
    id: &str,
    from: &Channel,
    text: &str,
    client_id: Option<&str>,
) -> Result<(), AgentError> {
    append_blocking(session, &[sent_record(id, from, text, client_id)])
}

/// Appends on tokio's blocking pool, so an fdatasync does not stall the runtime. `durable`:
/// end of a turn (one fdatasync); otherwise the records are only written (see
/// [`pegasus_store::Session::append_unsynced`]).
pub async fn persist(
    session: &SessionHandle,
    records: Vec<SessionRecord>,
    durable: bool,
) -> Result<(), AgentError> {
    let session = session.clone();
    pegasus_fs::blocking(move || {
        if durable {
            return append_blocking(&session, &records);
        }
        let mut s = session.lock().unwrap_or_else(|p| p.into_inner());
        s.append_unsynced(&records)?;
        Ok(())
    })
    .await?
}
