//! `pegasusctl project log NAME -f`: a connection that follows the
//! event bus. After its `Follow` request the connection only streams: first
//! `CtlResponse::Resync{missed: 0}` once the subscription stands, then one `CtlResponse::Event`
//! per event (of one project, or all), and a `CtlResponse::Resync` whenever this follower fell
//! behind and events were dropped for it.
//!
//! A follower that stops reading is never waited for: the bus drops what it cannot keep for
//! it, and a write that cannot complete within [`WRITE_TIMEOUT`] ends the connection.

use crate::{
    bus::{self, Received},
    front_door::FrontDoor,
};
use pegasus_proto::{
    ctl::{CtlRequest, CtlResponse},
    FrameReader, FrameWriter,
};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};

/// How long one frame may take to reach a follower before it is given up on.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Streams bus events until the client hangs up, a write stalls, or the daemon stops.
pub(crate) async fn follow<R, W>(
    door: &FrontDoor,
    project: Option<String>,
    reader: &mut FrameReader<R>,
    writer: &mut FrameWriter<W>,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut rx = door.subscribe();
    // The first frame says the subscription stands (nothing missed yet): a follower that reads
    // the files after it and then applies events misses nothing in between.
    let subscribed = CtlResponse::Resync { missed: 0 };
    if !matches!(
        tokio::time::timeout(WRITE_TIMEOUT, writer.write(&subscribed)).await,
        Ok(Ok(()))
    ) {
        return;
    }
    // The client sends nothing more; a read that ends means it hung up.
    let hung_up = async { while let Ok(Some(_)) = reader.read::<CtlRequest>().await {} };
    tokio::pin!(hung_up);
    loop {
        let frame = tokio::select! {
            _ = door.shutdown().cancelled() => return,
            _ = &mut hung_up => return,
            got = bus::next(&mut rx) => match got {
                None => return,
                Some(Received::Lagged(missed)) => CtlResponse::Resync { missed },
                Some(Received::Event(event)) => {
                    if project.as_deref().is_some_and(|p| p != event.project) {
                        continue;
                    }
                    CtlResponse::Event((*event).clone())
                }
            },
        };
        match tokio::time::timeout(WRITE_TIMEOUT, writer.write(&frame)).await {
            Ok(Ok(())) => {}
            _ => return,
        }
    }
}
