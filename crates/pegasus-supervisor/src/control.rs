//! The control socket `<home>/run/pegasusd.sock` (mode 0600), for `pegasusctl`: a client of the
//! front door like the dashboard and Telegram. Each connection says hello, then sends requests
//! and gets one response each (or, after `Follow`, a stream of events). A connection that
//! misbehaves is dropped and logged; the daemon lives on. Verbs are handled in
//! [`crate::handlers`].

use crate::gate::{Caps, Gate, Peer, RefusalLog};
use crate::{front_door::FrontDoor, handlers};
use interprocess::local_socket::tokio::{Listener, Stream};
use pegasus_proto::{
    ctl::{CtlRequest, CtlResponse},
    Channel, FrameReader, FrameWriter, PROTOCOL_VERSION,
};
use std::{sync::Arc, time::Duration};

const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one request frame may take from its first byte to its last: a client that starts
/// a frame and stalls loses its connection (an idle one between requests is fine).
const FRAME_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection may wait between two requests before it is closed (`pegasusctl chat`
/// reconnects after a long pause; a follower is never idle, it is written to).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(15 * 60);
/// The control socket is the user's alone (mode 0600 in a 0700 home): its peers are the user's
/// `pegasusctl`s, and commands a model runs (each in a PID namespace of its own, so counted
/// apart and refused). One process never needs more than a few connections.
const CAPS: Caps = Caps {
    total: 512,
    per_peer: 256,
    per_process: 16,
};

/// Accepts control connections until the daemon stops.
pub(crate) async fn serve(door: FrontDoor, listener: Listener) {
    let shutdown = door.shutdown().clone();
    let gate = Gate::new("control socket", CAPS);
    let log = gate.log().clone();
    crate::accept::serve(gate, listener, shutdown, move |stream, who| {
        connection(door.clone(), stream, who, log.clone())
    })
    .await
}

async fn connection(door: FrontDoor, stream: Stream, who: Peer, log: Arc<RefusalLog>) {
    let peer = crate::peer::pid_of(&stream);
    let drop_it = |why: &str| log.refused(&who.to_string(), why);
    let (recv, send) = tokio::io::split(stream);
    let mut reader = FrameReader::new(recv).with_frame_timeout(FRAME_TIMEOUT);
    let mut writer = FrameWriter::new(send);
    let hello = tokio::time::timeout(HELLO_TIMEOUT, reader.read::<CtlRequest>()).await;
    // Refused after its hello, so the client reads why instead of a bare hang-up.
    // A peer whose credentials cannot be read cannot be told from a model-run command.
    let refused = match peer {
        Some(p) => crate::peer::refusal(p).map(|why| (p, why)),
        None => Some((0, "whose credentials cannot be read")),
    };
    if let Some((pid, why)) = refused {
        drop_it(&format!("pid {pid}: a process {why}"));
        let message = "pegasusctl cannot be used from inside a Pegasus project: a project talks to other projects through the MainAgent (notify)".to_string();
        let _ = writer.write(&CtlResponse::Error { message }).await;
        return;
    }
    match hello {
        Ok(Ok(Some(CtlRequest::Hello { protocol_version })))
            if protocol_version == PROTOCOL_VERSION =>
        {
            let welcome = CtlResponse::Welcome {
                daemon_pid: std::process::id(),
                protocol_version,
            };
            if writer.write(&welcome).await.is_err() {
                return;
            }
        }
        Ok(Ok(Some(CtlRequest::Hello { protocol_version }))) => {
            drop_it(&format!("protocol version {protocol_version}"));
            let message = format!(
                "pegasusctl speaks protocol {protocol_version}, pegasusd speaks {PROTOCOL_VERSION}: use the pegasusctl of the same build"
            );
            let _ = writer.write(&CtlResponse::Error { message }).await;
            return;
        }
        Ok(Ok(Some(_))) => return drop_it("request before hello"),
        Ok(Ok(None)) => return,
        Ok(Err(e)) => return drop_it(&e.to_string()),
        Err(_) => return drop_it("no hello within 5 s"),
    }
    loop {
        // An idle connection ends with the daemon: shutdown drains open connections.
        let req = tokio::select! {
            _ = door.shutdown().cancelled() => return,
            req = tokio::time::timeout(IDLE_TIMEOUT, reader.read::<CtlRequest>()) => match req {
                Ok(Ok(Some(req))) => req,
                Ok(Ok(None)) => return,
                Ok(Err(e)) => return drop_it(&e.to_string()),
                // Not a refusal worth a line: the client just stayed silent too long.
                Err(_) => return,
            },
        };
        if let CtlRequest::Follow { project } = req {
            return handlers::follow::follow(&door, project, &mut reader, &mut writer).await;
        }
        let resp = door.request(&Channel::Cli, req).await;
        if writer.write(&resp).await.is_err() {
            return;
        }
    }
}
