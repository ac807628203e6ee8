//! The worker socket `<home>/run/w.sock`: every spawned worker connects here and proves which
//! spawn it is (a remote worker comes through [`crate::remote`] and says the same hello). Only
//! a process pegasusd spawned as a worker and still waits to hear from may talk here (its pid,
//! `SO_PEERCRED`): any other peer (a command a model ran, another program of the user's) is
//! refused before it says anything, with one logged line. Anything else — garbage, an
//! oversized frame, a wrong version, an unknown or reused token, a pid that is not the peer's —
//! loses its connection and is logged; the daemon and every other worker carry on.

use crate::{
    gate::{Caps, Gate, RefusalLog},
    pending::PendingSpawns,
    slot::{LinkRead, LinkWrite, WorkerConn},
};
use interprocess::local_socket::tokio::{Listener, Stream};
use pegasus_proto::{worker::FromWorker, FrameReader, FrameWriter, PROTOCOL_VERSION};
use std::{sync::Arc, time::Duration};
use tokio_util::sync::CancellationToken;

/// How long a new connection may take to say hello before it is dropped.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one frame from a worker may take from its first byte to its last. A worker writes
/// whole frames to a local socket; one that stalls mid-frame is hung, and its slot restarts it.
const FRAME_TIMEOUT: Duration = Duration::from_secs(30);
/// A connection counts until its hello hands it to its slot. Workers are pegasusd's children,
/// so one uid, and every project may be starting at once (1,000 at a daemon start): the total
/// is bounded only by the descriptors pegasusd may open ([`Caps::within_fd_limit`]). That is
/// safe because a connection whose pid pegasusd does not await is closed before anything is
/// read from it; one worker process opens one link.
const CAPS: Caps = Caps {
    total: usize::MAX,
    per_peer: usize::MAX,
    per_process: 4,
};

/// Accepts worker connections until `shutdown`; each hello claims one of `spawns`.
pub(crate) async fn serve(
    spawns: Arc<PendingSpawns>,
    shutdown: CancellationToken,
    listener: Listener,
) {
    let gate = Gate::new("worker socket", CAPS);
    let log = gate.log().clone();
    crate::accept::serve(gate, listener, shutdown, move |stream, _| {
        handshake(spawns.clone(), stream, log.clone())
    })
    .await
}

async fn handshake(spawns: Arc<PendingSpawns>, stream: Stream, log: Arc<RefusalLog>) {
    let pid = crate::peer::pid_of(&stream);
    match pid {
        Some(p) if p != 0 && spawns.awaits_hello_from(p) => {}
        Some(p) if p != 0 => {
            log.refused(
                &format!("pid {p}"),
                "not a worker pegasusd spawned (only its own workers may connect here)",
            );
            return;
        }
        _ => {
            log.refused(
                "an unnamed process",
                "the kernel does not name its process, so it cannot be a worker pegasusd spawned",
            );
            return;
        }
    }
    let peer = Peer::Local(pid);
    let (recv, send) = tokio::io::split(stream);
    hello(&spawns, Box::new(recv), Box::new(send), peer, &log).await;
}

/// Who is on the other end of a worker link.
pub(crate) enum Peer {
    /// A process on this machine: the pid the kernel reports, when it can.
    Local(Option<u32>),
    /// A worker on another host: its address and what its certificate was issued for.
    Remote {
        addr: std::net::SocketAddr,
        certified: pegasus_remote::Certified,
    },
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Peer::Local(Some(pid)) => write!(f, "pid {pid}"),
            Peer::Local(None) => write!(f, "an unknown local process"),
            Peer::Remote { addr, certified } => {
                write!(f, "{addr} (certified for {})", certified.project)
            }
        }
    }
}

/// Reads a worker's hello on a new link and hands the link to the slot of the spawn it proves;
/// a refusal goes to its listener's `log`.
pub(crate) async fn hello(
    spawns: &PendingSpawns,
    recv: LinkRead,
    send: LinkWrite,
    peer: Peer,
    log: &RefusalLog,
) {
    let mut reader = FrameReader::new(recv).with_frame_timeout(FRAME_TIMEOUT);
    let reject = |why: &str| log.refused(&peer.to_string(), why);
    let hello = match tokio::time::timeout(HELLO_TIMEOUT, reader.read::<FromWorker>()).await {
        Ok(Ok(Some(FromWorker::Hello(hello)))) => hello,
        Ok(Ok(Some(other))) => return reject(&format!("first frame is not a hello: {other:?}")),
        Ok(Ok(None)) => return reject("closed before hello"),
        Ok(Err(e)) => return reject(&e.to_string()),
        Err(_) => return reject("no hello within 5 s"),
    };
    if hello.protocol_version != PROTOCOL_VERSION {
        return reject(&format!(
            "protocol version {} (this daemon speaks {PROTOCOL_VERSION})",
            hello.protocol_version
        ));
    }
    let pid = match &peer {
        Peer::Local(Some(p)) if *p != hello.pid => {
            return reject(&format!("claims pid {}", hello.pid))
        }
        Peer::Local(p) => p.unwrap_or(hello.pid),
        // A remote worker's identity is its certificate: it speaks for its project only, and
        // only with the token its certificate was enrolled with.
        Peer::Remote { certified, .. } => {
            if let Err(refusal) = certified.check_hello(&hello.project, &hello.token) {
                return reject(&refusal.to_string());
            }
            hello.pid
        }
    };
    let Some(pending) = spawns.take(&hello.token) else {
        return reject(&format!(
            "unknown spawn token for project {}",
            hello.project
        ));
    };
    if pending.project != hello.project {
        return reject(&format!(
            "token of project {} used for {}",
            pending.project, hello.project
        ));
    }
    // A local spawn's token is its process's alone; a remote launch's comes over TLS only.
    match (&peer, pending.pid) {
        (Peer::Local(Some(p)), Some(spawned)) if *p == spawned => {}
        (Peer::Remote { .. }, None) => {}
        _ => return reject("the token of another spawn"),
    }
    let host = match &peer {
        Peer::Remote { addr, .. } => Some(addr.ip().to_string()),
        Peer::Local(_) => None,
    };
    let conn = WorkerConn {
        reader,
        writer: FrameWriter::new(send),
        pid,
        host,
    };
    // The slot may have given up on this spawn in the meantime; then the connection just drops.
    let _ = pending.tx.send(conn);
}
