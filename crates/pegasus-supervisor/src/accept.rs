//! The one accept loop of pegasusd's own sockets (the control socket, the worker socket, the
//! remote workers' TCP port; the dashboard has its own, over the same [`Gate`]): each
//! connection is admitted under its listener's caps ([`crate::gate`]) and handed to its handler
//! on its own task; the loop stops accepting when the daemon stops.
//!
//! The loop never waits on a peer: a connection past a cap is closed at once (and logged at a
//! bounded rate), so a flood of silent connections from one peer neither holds descriptors nor
//! queues ahead of another peer's connection in the kernel's backlog.

use crate::gate::{Gate, Peer, Ticket};
use interprocess::local_socket::tokio::{prelude::*, Listener, Stream};
use std::{future::Future, net::SocketAddr, sync::Arc, time::Duration};
use tokio_util::sync::CancellationToken;

/// A listener the loop can take connections from.
pub(crate) trait Acceptor {
    type Conn;
    fn accept_one(&self) -> impl Future<Output = std::io::Result<Self::Conn>> + Send;
    /// Who the peer of `conn` is counted as.
    fn peer(conn: &Self::Conn) -> Peer;
}

impl Acceptor for Listener {
    type Conn = Stream;
    fn accept_one(&self) -> impl Future<Output = std::io::Result<Stream>> + Send {
        self.accept()
    }
    fn peer(conn: &Stream) -> Peer {
        Peer::of_unix(conn)
    }
}

impl Acceptor for tokio::net::TcpListener {
    type Conn = (tokio::net::TcpStream, SocketAddr);
    fn accept_one(&self) -> impl Future<Output = std::io::Result<Self::Conn>> + Send {
        self.accept()
    }
    fn peer((tcp, addr): &Self::Conn) -> Peer {
        Peer::of_tcp(tcp, *addr)
    }
}

/// Accepts connections on `listener` until `shutdown`, running `handle` for each admitted one
/// on its own task; the connection holds its place under `gate`'s caps until `handle` returns
/// (a worker's leaves the count once it is handed to its slot).
pub(crate) async fn serve<L, F, Fut>(
    gate: Arc<Gate>,
    listener: L,
    shutdown: CancellationToken,
    handle: F,
) where
    L: Acceptor,
    F: Fn(L::Conn, Peer) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    tokio::spawn(gate.log().clone().run(shutdown.clone()));
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => return,
            accepted = listener.accept_one() => accepted,
        };
        match accepted {
            Ok(conn) => {
                let peer = L::peer(&conn);
                // Past a cap the connection is dropped here: closed at once.
                let Some(ticket) = gate.admit(peer.clone()) else {
                    continue;
                };
                let conn = handle(conn, peer);
                tokio::spawn(async move {
                    conn.await;
                    drop::<Ticket>(ticket);
                });
            }
            Err(e) => {
                gate.log()
                    .refused("(accept)", &format!("accept failed: {e}"));
                // Out of descriptors or similar: do not spin.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}
