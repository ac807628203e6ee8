//! The worker socket `<home>/run/w.sock`: every spawned worker connects here and proves which
//! spawn it is. Anything else — garbage, an oversized frame, a wrong version, an unknown or
//! reused token, a pid that is not the peer's — loses its connection and is logged; the daemon
//! and every other worker carry on.

use crate::{
    slot::{LinkRead, LinkWrite, WorkerConn},
    supervisor::Supervisor,
};
use interprocess::local_socket::tokio::{Listener, Stream};
use pegasus_proto::{worker::FromWorker, FrameReader, FrameWriter, PROTOCOL_VERSION};
use std::{sync::Arc, time::Duration};

/// How long a new connection may take to say hello before it is dropped.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one frame from a worker may take from its first byte to its last. A worker writes
/// whole frames to a local socket; one that stalls mid-frame is hung, and its slot restarts it.
const FRAME_TIMEOUT: Duration = Duration::from_secs(30);

/// How many handshakes may be in flight at once (a connection leaves the count once it is
/// handed to its slot). Far above what a burst of restarts needs, low enough to bound a flood.
const MAX_OPEN: usize = 256;

/// Accepts worker connections until the daemon stops.
pub(crate) async fn serve(sup: Arc<Supervisor>, listener: Listener) {
    let shutdown = sup.shutdown.clone();
    crate::accept::serve("worker", listener, MAX_OPEN, shutdown, move |stream| {
        handshake(sup.clone(), stream)
    })
    .await
}

async fn handshake(sup: Arc<Supervisor>, stream: Stream) {
    let peer_pid = crate::peer::pid_of(&stream);
    let (recv, send) = tokio::io::split(stream);
    let mut reader = FrameReader::new(Box::new(recv) as LinkRead).with_frame_timeout(FRAME_TIMEOUT);
    let hello = match tokio::time::timeout(HELLO_TIMEOUT, reader.read::<FromWorker>()).await {
        Ok(Ok(Some(FromWorker::Hello(hello)))) => hello,
        Ok(Ok(Some(other))) => {
            return reject(peer_pid, &format!("first frame is not a hello: {other:?}"))
        }
        Ok(Ok(None)) => return reject(peer_pid, "closed before hello"),
        Ok(Err(e)) => return reject(peer_pid, &e.to_string()),
        Err(_) => return reject(peer_pid, "no hello within 5 s"),
    };
    if hello.protocol_version != PROTOCOL_VERSION {
        return reject(
            peer_pid,
            &format!(
                "protocol version {} (this daemon speaks {PROTOCOL_VERSION})",
                hello.protocol_version
            ),
        );
    }
    if peer_pid.is_some_and(|p| p != hello.pid) {
        return reject(peer_pid, &format!("claims pid {}", hello.pid));
    }
    let Some(pending) = sup.take_spawn(&hello.token) else {
        return reject(
            peer_pid,
            &format!("unknown spawn token for project {}", hello.project),
        );
    };
    if pending.project != hello.project {
        return reject(
            peer_pid,
            &format!(
                "token of project {} used for {}",
                pending.project, hello.project
            ),
        );
    }
    let conn = WorkerConn {
        reader,
        writer: FrameWriter::new(Box::new(send) as LinkWrite),
        pid: peer_pid.unwrap_or(hello.pid),
    };
    // The slot may have given up on this spawn in the meantime; then the connection just drops.
    let _ = pending.tx.send(conn);
}

fn reject(peer_pid: Option<u32>, why: &str) {
    tracing::warn!(?peer_pid, "dropping worker connection: {why}");
}
