//! The one accept loop of pegasusd, used by every listener (the control socket, the worker
//! socket, the remote workers' TCP port): it caps how many connections are open at once, hands
//! each to its handler on its own task, and stops accepting when the daemon stops.
//!
//! Why a cap: every connection holds buffers and a task; without a bound, a local client that
//! opens connections in a loop could take the daemon's memory. Past the cap, new connections
//! wait in the kernel's backlog until one closes.

use interprocess::local_socket::tokio::{prelude::*, Listener, Stream};
use std::{future::Future, net::SocketAddr, sync::Arc, time::Duration};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// A listener the loop can take connections from.
pub(crate) trait Acceptor {
    type Conn;
    fn accept_one(&self) -> impl Future<Output = std::io::Result<Self::Conn>> + Send;
}

impl Acceptor for Listener {
    type Conn = Stream;
    fn accept_one(&self) -> impl Future<Output = std::io::Result<Stream>> + Send {
        self.accept()
    }
}

impl Acceptor for tokio::net::TcpListener {
    type Conn = (tokio::net::TcpStream, SocketAddr);
    fn accept_one(&self) -> impl Future<Output = std::io::Result<Self::Conn>> + Send {
        self.accept()
    }
}

/// How many connections of one listener may be open at once (a worker's leaves the count once
/// it is handed to its slot): far above what a burst of restarts needs, low enough to bound a
/// flood; more wait in the kernel's backlog.
const MAX_OPEN: usize = 256;

/// Accepts connections on `listener` until `shutdown`, running `handle` for each on its own
/// task with at most [`MAX_OPEN`] running at once. `what` names the socket in log lines.
pub(crate) async fn serve<L, F, Fut>(
    what: &'static str,
    listener: L,
    shutdown: CancellationToken,
    handle: F,
) where
    L: Acceptor,
    F: Fn(L::Conn) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let permits = Arc::new(Semaphore::new(MAX_OPEN));
    loop {
        let permit = tokio::select! {
            _ = shutdown.cancelled() => return,
            permit = permits.clone().acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => return,
            },
        };
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => return,
            accepted = listener.accept_one() => accepted,
        };
        match accepted {
            Ok(stream) => {
                let conn = handle(stream);
                tokio::spawn(async move {
                    conn.await;
                    drop(permit);
                });
            }
            Err(e) => {
                tracing::warn!("{what} socket accept failed: {e}");
                // Out of descriptors or similar: do not spin.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}
