//! One control connection to pegasusd: connect, hello, request/response.

use crate::CtlError;
use interprocess::local_socket::{
    tokio::{prelude::*, Stream},
    GenericFilePath, ToFsName,
};
use pegasus_proto::{
    ctl::{CtlRequest, CtlResponse},
    FrameReader, FrameWriter, PROTOCOL_VERSION,
};
use pegasus_store::Home;

/// A connection to pegasusd's control socket that said hello and was welcomed: each
/// [`Client::request`] gets exactly one response.
pub struct Client {
    reader: FrameReader<tokio::io::ReadHalf<Stream>>,
    writer: FrameWriter<tokio::io::WriteHalf<Stream>>,
    /// The home, to tell a connection lost because pegasusd is stopping from another loss.
    home: Home,
}

/// Why nobody answers on the control socket: no daemon, or one that holds the home while it
/// stops or starts (its pid file says which).
pub fn not_answering(home: &Home) -> CtlError {
    let label = home.root().display().to_string();
    match pegasus_store::daemon_lock::peek(&home.pid_file()) {
        pegasus_store::daemon_lock::DaemonLock::Free => CtlError::NotRunning { home: label },
        pegasus_store::daemon_lock::DaemonLock::Held { pid, stopping } => CtlError::NotServing {
            home: label,
            pid: pid.map_or_else(|| "unknown".into(), |p| p.to_string()),
            stopping,
        },
    }
}

impl Client {
    /// Connects to the daemon of `home`. No socket or nobody listening = [`CtlError::NotRunning`].
    pub async fn connect(home: &Home) -> Result<Client, CtlError> {
        let path = home.control_socket();
        let name = path
            .as_path()
            .to_fs_name::<GenericFilePath>()
            .map_err(|e| CtlError::Failed(format!("bad socket path {}: {e}", path.display())))?;
        let stream = Stream::connect(name).await.map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
                not_answering(home)
            }
            _ => CtlError::Failed(format!("cannot connect to {}: {e}", path.display())),
        })?;
        let (recv, send) = tokio::io::split(stream);
        let mut client = Client {
            reader: FrameReader::new(recv),
            writer: FrameWriter::new(send),
            home: home.clone(),
        };
        // A daemon that accepts but never answers (hung, stopped) must not hang the client.
        let hello = client.request(CtlRequest::Hello {
            protocol_version: PROTOCOL_VERSION,
        });
        let answer = tokio::time::timeout(std::time::Duration::from_secs(10), hello)
            .await
            .map_err(|_| {
                CtlError::Failed(format!(
                    "pegasusd on {} did not answer within 10 s: it may be hung; see its log in {}",
                    home.root().display(),
                    home.logs_dir().display()
                ))
            })
            .and_then(|answer| answer)?;
        match answer {
            CtlResponse::Welcome { .. } => Ok(client),
            CtlResponse::Error { message } => Err(CtlError::Failed(message)),
            other => Err(CtlError::Failed(format!(
                "unexpected answer to hello: {other:?}"
            ))),
        }
    }

    /// Sends one request and waits for its response. A connection lost because pegasusd is
    /// stopping (it drains its connections) says so, as `status` will.
    pub async fn request(&mut self, req: CtlRequest) -> Result<CtlResponse, CtlError> {
        let answer = async {
            self.writer.write(&req).await?;
            let closed = || {
                CtlError::Failed("pegasusd closed the connection; check `pegasusctl status`".into())
            };
            self.reader.read::<CtlResponse>().await?.ok_or_else(closed)
        }
        .await;
        answer.map_err(|e| match not_answering(&self.home) {
            stopping @ CtlError::NotServing { stopping: true, .. } => stopping,
            _ => e,
        })
    }

    /// Waits until the daemon closes the connection (it exits).
    pub async fn wait_closed(&mut self) {
        while let Ok(Some(_)) = self.reader.read::<CtlResponse>().await {}
    }

    /// Turns this connection into a follower of the daemon's event bus (one project, or all):
    /// read what comes with [`Client::next_event`].
    pub async fn follow(&mut self, project: Option<String>) -> Result<(), CtlError> {
        Ok(self.writer.write(&CtlRequest::Follow { project }).await?)
    }

    /// The next frame of a follower: an event, or a resync after a gap. `None` once the daemon
    /// closed the connection (it stopped).
    pub async fn next_event(&mut self) -> Option<CtlResponse> {
        self.reader.read::<CtlResponse>().await.ok().flatten()
    }
}

/// Turns an error response into an error, anything else passes.
pub fn ok(resp: CtlResponse) -> Result<CtlResponse, CtlError> {
    match resp {
        CtlResponse::Error { message } | CtlResponse::Failed { message, .. } => {
            Err(CtlError::Failed(message))
        }
        other => Ok(other),
    }
}
