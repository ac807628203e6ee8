//! Workers on other hosts (SPEC §14): the TCP listener on `workers.listen` (mutual TLS only)
//! and what a launch needs from it. A connection is enrollment (a token traded for a client
//! certificate) or a worker link (a certificate, then the same hello as on the Unix socket,
//! see [`crate::worker_server::hello`]); everything else is refused, logged with the peer's
//! address and the reason, and closed within [`pegasus_link::ACCEPT_TIMEOUT`].

use crate::{
    slot::{LinkRead, LinkWrite},
    supervisor::Supervisor,
    worker_server::{hello, Peer},
};
use pegasus_link::{Accepted, Authority};
use pegasus_store::{launcher::LauncherConfig, Config, Home};
use std::{net::SocketAddr, sync::Arc};
use tokio::net::{TcpListener, TcpStream};

/// How many connections may be in their TLS handshake, enrollment or hello at once.
const MAX_OPEN: usize = 256;

/// pegasusd's side of remote links: its certificate authority and where it listens.
pub(crate) struct Remote {
    pub authority: Authority,
}

impl Remote {
    /// The authority under `<home>/tls/`, with a server certificate for every name a launcher
    /// connects to (and the listen address).
    pub fn open(home: &Home, config: &Config, listen: SocketAddr) -> Result<Remote, String> {
        let mut names: Vec<String> = config
            .launchers
            .values()
            .filter_map(|l| match l {
                LauncherConfig::Command(c) => Some(c.connect.clone()),
                LauncherConfig::Kubernetes(v) => v
                    .get("connect")
                    .and_then(|c| c.as_str())
                    .map(str::to_string),
            })
            .filter_map(|c| pegasus_link::host_of(&c).map(str::to_string))
            .collect();
        if !listen.ip().is_unspecified() {
            names.push(listen.ip().to_string());
        }
        names.sort();
        names.dedup();
        let authority = Authority::open_or_create(&home.root().join("tls"), &names)
            .map_err(|e| e.to_string())?;
        Ok(Remote { authority })
    }
}

/// Binds `workers.listen`; a refusal names the key.
pub(crate) async fn bind(listen: &str) -> Result<(SocketAddr, TcpListener), String> {
    let addr: SocketAddr = listen
        .parse()
        .map_err(|_| format!("workers.listen: `{listen}` must be IP:PORT, e.g. 0.0.0.0:7475"))?;
    let listener = TcpListener::bind(addr).await.map_err(|e| {
        format!("workers.listen: cannot listen on {addr}: {e}; pick a free port or an address of this host")
    })?;
    let bound = listener.local_addr().unwrap_or(addr);
    Ok((bound, listener))
}

/// Accepts remote worker connections until the daemon stops.
pub(crate) async fn serve(sup: Arc<Supervisor>, listener: TcpListener) {
    let shutdown = sup.shutdown.clone();
    crate::accept::serve("remote worker", listener, MAX_OPEN, shutdown, move |conn| {
        connection(sup.clone(), conn)
    })
    .await
}

async fn connection(sup: Arc<Supervisor>, (tcp, addr): (TcpStream, SocketAddr)) {
    let Some(remote) = sup.remote.as_ref() else {
        return;
    };
    let _ = tcp.set_nodelay(true);
    match remote.authority.accept(tcp).await {
        Ok(Accepted::Enrolled { project }) => {
            tracing::info!(peer = %addr, %project, "remote worker enrolled");
        }
        Ok(Accepted::Worker { project, stream }) => {
            let (recv, send) = tokio::io::split(stream);
            let peer = Peer::Remote { addr, project };
            hello(
                &sup,
                Box::new(recv) as LinkRead,
                Box::new(send) as LinkWrite,
                peer,
            )
            .await;
        }
        Err(refusal) => {
            tracing::warn!(peer = %addr, "refusing a remote worker connection: {refusal}");
        }
    }
}
