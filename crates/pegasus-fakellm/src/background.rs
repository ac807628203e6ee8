//! Where a fake server runs: its own std thread with its own single-threaded tokio runtime,
//! on 127.0.0.1, until the handle is dropped.
//!
//! Its own thread and runtime make a fake work the same from sync tests, async tests (of
//! either runtime flavour) and the demo binary, and never compete with the caller's runtime.
//! Dropping the handle stops the accept loop and joins the thread; the runtime goes with it,
//! which closes every connection, including stalled ones.

use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

/// A server running on its own thread; dropping it stops the server.
pub(crate) struct Background {
    addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Background {
    /// Binds 127.0.0.1:0 and serves on a thread named `{name}-{port}`: each connection accepted
    /// is handed to `connection` and its future spawned, until the handle is dropped.
    pub(crate) fn start<F, Fut>(name: &str, mut connection: F) -> std::io::Result<Background>
    where
        F: FnMut(TcpStream) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let std_listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let listener = {
            let _guard = runtime.enter();
            TcpListener::from_std(std_listener)?
        };
        let (tx, mut stop) = oneshot::channel::<()>();
        let serve = async move {
            loop {
                tokio::select! {
                    _ = &mut stop => break,
                    accepted = listener.accept() => match accepted {
                        Ok((stream, _)) => {
                            tokio::spawn(connection(stream));
                        }
                        // e.g. out of file descriptors: back off instead of spinning.
                        Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                    },
                }
            }
        };
        let thread = std::thread::Builder::new()
            .name(format!("{name}-{}", addr.port()))
            .spawn(move || {
                runtime.block_on(serve);
                // Dropping the runtime here cancels in-flight (e.g. stalled) connections.
                drop(runtime);
            })?;
        Ok(Background {
            addr,
            shutdown: Some(tx),
            thread: Some(thread),
        })
    }

    /// The bound socket address (always on 127.0.0.1).
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
