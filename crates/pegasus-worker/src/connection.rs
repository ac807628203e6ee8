//! The worker's end of its link: connect (the Unix socket of a local pegasusd, or mutual TLS to
//! a remote one, DESIGN.md §14), hello, wait for `Init`.

use crate::WorkerError;
use interprocess::local_socket::{
    tokio::{prelude::*, Stream},
    GenericFilePath, ToFsName,
};
use pegasus_proto::{
    worker::{FromWorker, Hello, Init, ToWorker},
    FrameReader, FrameWriter, PROTOCOL_VERSION,
};
use std::{path::Path, time::Duration};
use tokio::io::{AsyncRead, AsyncWrite};

/// One direction of the link, whichever it is.
pub type LinkRead = Box<dyn AsyncRead + Send + Unpin>;
pub type LinkWrite = Box<dyn AsyncWrite + Send + Unpin>;

/// A connection that finished the handshake.
pub struct Connection {
    pub reader: FrameReader<LinkRead>,
    pub writer: FrameWriter<LinkWrite>,
    pub init: Init,
}

/// Reaches a pegasusd on another host with the bootstrap values it launched us with (mutual
/// TLS), says who we are and waits for `Init`.
pub async fn connect_remote(
    bootstrap: &pegasus_remote::Bootstrap,
    project: &str,
) -> Result<Connection, WorkerError> {
    let stream = bootstrap
        .connect(project)
        .await
        .map_err(|e| WorkerError::Link(e.to_string()))?;
    // The hello carries the token the certificate was enrolled with: pegasusd binds the two.
    let token = bootstrap.token().to_string();
    let (recv, send) = tokio::io::split(stream);
    handshake(Box::new(recv), Box::new(send), project, token).await
}

/// Connects to pegasusd's worker socket, says who we are and waits for `Init`.
pub async fn connect(
    socket: &Path,
    project: &str,
    token: String,
) -> Result<Connection, WorkerError> {
    let connect_err = |source| WorkerError::Connect {
        path: socket.display().to_string(),
        source,
    };
    let name = socket
        .to_fs_name::<GenericFilePath>()
        .map_err(connect_err)?;
    let stream = Stream::connect(name).await.map_err(connect_err)?;
    let (recv, send) = tokio::io::split(stream);
    handshake(Box::new(recv), Box::new(send), project, token).await
}

/// Says hello on a fresh link and waits for `Init`.
async fn handshake(
    recv: LinkRead,
    send: LinkWrite,
    project: &str,
    token: String,
) -> Result<Connection, WorkerError> {
    let mut reader = FrameReader::new(recv);
    let mut writer = FrameWriter::new(send);
    let hello = Hello {
        protocol_version: PROTOCOL_VERSION,
        project: project.to_string(),
        pid: std::process::id(),
        token,
    };
    writer.write(&FromWorker::Hello(hello)).await?;
    let init = match tokio::time::timeout(Duration::from_secs(10), reader.read::<ToWorker>()).await
    {
        Ok(Ok(Some(ToWorker::Init(init)))) => init,
        Ok(Ok(Some(other))) => {
            return Err(WorkerError::Handshake(format!(
                "expected init, got {other:?}"
            )))
        }
        Ok(Ok(None)) => {
            return Err(WorkerError::Handshake(
                "connection closed (token refused?)".into(),
            ))
        }
        Ok(Err(e)) => return Err(e.into()),
        Err(_) => return Err(WorkerError::Handshake("no init within 10 s".into())),
    };
    if init.protocol_version != PROTOCOL_VERSION {
        return Err(pegasus_proto::ProtoError::Version {
            got: init.protocol_version,
            want: PROTOCOL_VERSION,
        }
        .into());
    }
    Ok(Connection {
        reader,
        writer,
        init,
    })
}
