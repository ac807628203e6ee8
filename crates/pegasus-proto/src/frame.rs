//! Length-prefixed framing: a 4-byte big-endian payload length, then the payload.
//!
//! The length is checked against [`MAX_FRAME`] before a single payload byte is read, so a peer
//! that sends `ff ff ff ff` costs us four bytes of reading, not four gigabytes of memory; and
//! the payload buffer grows as its bytes arrive, so a peer that announces 16 MiB and sends
//! nothing pins a few KiB, not 16 MiB. A reader may also bound how long a started frame may take
//! to finish ([`FrameReader::with_frame_timeout`]).

use crate::{codec, ProtoError};
use serde::{de::DeserializeOwned, Serialize};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};

/// What a frame's buffer starts at; it grows with the bytes that actually arrive.
const INITIAL_BUFFER: usize = 64 * 1024;

/// Hard upper bound of one frame's payload (16 MiB): far above any message we send (session
/// loads stay in the worker), far below what would hurt the daemon.
pub const MAX_FRAME: usize = 16 * 1024 * 1024;

/// Checks a length prefix against the limit.
fn checked_len(prefix: [u8; 4]) -> Result<usize, ProtoError> {
    check_len(u32::from_be_bytes(prefix) as usize)
}

/// Checks a payload length against the limit.
fn check_len(len: usize) -> Result<usize, ProtoError> {
    if len > MAX_FRAME {
        return Err(ProtoError::TooLarge {
            len,
            max: MAX_FRAME,
        });
    }
    Ok(len)
}

/// Splits one complete frame off the front of `buf`: `Ok(Some((payload, consumed)))`, or
/// `Ok(None)` when more bytes are needed. The synchronous twin of [`FrameReader::read`], used by
/// tests and tools that hold bytes in memory.
pub fn split_frame(buf: &[u8]) -> Result<Option<(&[u8], usize)>, ProtoError> {
    let Some(prefix) = buf.first_chunk::<4>() else {
        return Ok(None);
    };
    let len = checked_len(*prefix)?;
    Ok(buf.get(4..4 + len).map(|payload| (payload, 4 + len)))
}

/// Reads typed frames from one side of a socket.
pub struct FrameReader<R> {
    inner: BufReader<R>,
    buf: Vec<u8>,
    frame_timeout: Option<Duration>,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// A reader of `inner` (buffered here) with no limit on how long a frame may take.
    pub fn new(inner: R) -> Self {
        FrameReader {
            inner: BufReader::new(inner),
            buf: Vec::new(),
            frame_timeout: None,
        }
    }

    /// Bounds how long a frame may take from its first byte to its last: a peer that starts a
    /// frame and stalls loses its connection instead of holding it forever. Waiting *between*
    /// frames stays unbounded (an idle client is cheap).
    pub fn with_frame_timeout(mut self, timeout: Duration) -> Self {
        self.frame_timeout = Some(timeout);
        self
    }

    /// Reads the next message. `Ok(None)` is a clean end of stream at a frame boundary (the peer
    /// closed); an end of stream inside a frame is an error.
    ///
    /// Cancel safety: not cancel safe (a partly read frame is lost), so callers keep one read
    /// future alive across `select!` iterations or only race it against "stop everything".
    pub async fn read<T: DeserializeOwned>(&mut self) -> Result<Option<T>, ProtoError> {
        let mut prefix = [0u8; 4];
        let first = self.inner.read(&mut prefix).await?;
        if first == 0 {
            return Ok(None);
        }
        let timeout = self.frame_timeout;
        let rest = self.finish_frame(prefix, first);
        match timeout {
            None => rest.await?,
            Some(t) => tokio::time::timeout(t, rest)
                .await
                .map_err(|_| ProtoError::Io(std::io::ErrorKind::TimedOut.into()))??,
        }
        let msg = codec::decode(&self.buf)?;
        // Do not keep a large buffer alive for an idle connection.
        if self.buf.capacity() > 64 * 1024 {
            self.buf = Vec::new();
        }
        Ok(Some(msg))
    }

    /// Reads the rest of a frame whose first `got` prefix bytes are in `prefix` into `buf`.
    async fn finish_frame(
        &mut self,
        mut prefix: [u8; 4],
        mut got: usize,
    ) -> Result<(), ProtoError> {
        let eof = || ProtoError::Io(std::io::ErrorKind::UnexpectedEof.into());
        while got < 4 {
            let n = self.inner.read(&mut prefix[got..]).await?;
            if n == 0 {
                return Err(eof());
            }
            got += n;
        }
        let len = checked_len(prefix)?;
        self.buf.clear();
        self.buf.reserve(len.min(INITIAL_BUFFER));
        let read = (&mut self.inner)
            .take(len as u64)
            .read_to_end(&mut self.buf)
            .await?;
        if read != len {
            return Err(eof());
        }
        Ok(())
    }
}

/// Writes typed frames to one side of a socket.
pub struct FrameWriter<W> {
    inner: W,
    buf: Vec<u8>,
}

impl<W: AsyncWrite + Unpin> FrameWriter<W> {
    /// A writer to `inner`; each [`FrameWriter::write`] flushes its frame.
    pub fn new(inner: W) -> Self {
        FrameWriter {
            inner,
            buf: Vec::new(),
        }
    }

    /// Writes one message as one frame and flushes it. Refuses (before writing anything) a
    /// message whose encoding is over the limit, so the peer never has to drop us for it.
    pub async fn write<T: Serialize>(&mut self, msg: &T) -> Result<(), ProtoError> {
        let payload = codec::encode(msg)?;
        let len = check_len(payload.len())?;
        self.buf.clear();
        self.buf.extend_from_slice(&(len as u32).to_be_bytes());
        self.buf.extend_from_slice(&payload);
        self.inner.write_all(&self.buf).await?;
        self.inner.flush().await?;
        Ok(())
    }

    /// Writes raw bytes, bypassing the codec. Only for tests that must send what a broken or
    /// hostile peer would send.
    pub async fn write_raw(&mut self, bytes: &[u8]) -> Result<(), ProtoError> {
        self.inner.write_all(bytes).await?;
        self.inner.flush().await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::worker::{FromWorker, Hello, ToWorker};
    use proptest::prelude::*;

    #[tokio::test]
    async fn an_announced_frame_pins_only_the_bytes_that_arrived() {
        use tokio::io::AsyncWriteExt;
        let (mut a, b) = tokio::io::duplex(1 << 20);
        let mut r = FrameReader::new(b);
        a.write_all(&(MAX_FRAME as u32).to_be_bytes())
            .await
            .unwrap();
        a.write_all(&[7u8; 100]).await.unwrap();
        drop(a);
        assert!(r.read::<FromWorker>().await.is_err(), "end inside a frame");
        assert!(
            r.buf.capacity() <= 2 * INITIAL_BUFFER,
            "a 16 MiB announcement allocated {} bytes",
            r.buf.capacity()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_started_frame_that_stalls_times_out_while_idling_between_frames_does_not() {
        use tokio::io::AsyncWriteExt;
        let (mut a, b) = tokio::io::duplex(1024);
        let mut r = FrameReader::new(b).with_frame_timeout(Duration::from_secs(5));
        let read = tokio::spawn(async move {
            let first = r.read::<FromWorker>().await;
            (first.map(|m| m.is_some()), r)
        });
        // Idle for a minute between frames: fine.
        tokio::time::sleep(Duration::from_secs(60)).await;
        let payload = crate::encode(&FromWorker::Heartbeat).unwrap();
        a.write_all(&(payload.len() as u32).to_be_bytes())
            .await
            .unwrap();
        a.write_all(&payload).await.unwrap();
        let (first, mut r) = read.await.unwrap();
        assert!(first.unwrap());
        // Start a frame and stall.
        a.write_all(&[0, 0]).await.unwrap();
        let err = r.read::<FromWorker>().await.unwrap_err();
        assert!(
            matches!(&err, ProtoError::Io(e) if e.kind() == std::io::ErrorKind::TimedOut),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn round_trip_over_a_pipe() {
        let (a, b) = tokio::io::duplex(1024);
        let mut w = FrameWriter::new(a);
        let mut r = FrameReader::new(b);
        let hello = FromWorker::Hello(Hello {
            protocol_version: 1,
            project: "alpha".into(),
            pid: 42,
            token: "t".into(),
        });
        w.write(&hello).await.unwrap();
        w.write(&FromWorker::Heartbeat).await.unwrap();
        drop(w);
        assert_eq!(r.read::<FromWorker>().await.unwrap(), Some(hello));
        assert_eq!(
            r.read::<FromWorker>().await.unwrap(),
            Some(FromWorker::Heartbeat)
        );
        assert_eq!(r.read::<FromWorker>().await.unwrap(), None);
    }

    #[tokio::test]
    async fn oversized_prefix_is_refused_before_reading_the_payload() {
        let (a, b) = tokio::io::duplex(64);
        let mut w = FrameWriter::new(a);
        w.write_raw(&[0xff, 0xff, 0xff, 0xff]).await.unwrap();
        let mut r = FrameReader::new(b);
        let err = r.read::<ToWorker>().await.unwrap_err();
        assert!(matches!(err, ProtoError::TooLarge { .. }), "{err}");
    }

    #[tokio::test]
    async fn eof_inside_a_frame_is_an_error_not_a_clean_close() {
        let (a, b) = tokio::io::duplex(64);
        let mut w = FrameWriter::new(a);
        w.write_raw(&[0, 0, 0, 10, 1, 2]).await.unwrap();
        drop(w);
        let mut r = FrameReader::new(b);
        assert!(r.read::<ToWorker>().await.is_err());
    }

    #[test]
    fn split_frame_needs_whole_frames() {
        assert!(split_frame(&[0, 0]).unwrap().is_none());
        assert!(split_frame(&[0, 0, 0, 3, 1]).unwrap().is_none());
        let (p, n) = split_frame(&[0, 0, 0, 1, 7, 9]).unwrap().unwrap();
        assert_eq!((p, n), (&[7u8][..], 5));
    }

    proptest! {
        /// Whatever a peer sends, the decoder answers with a message or an error, never a panic.
        #[test]
        fn decoder_never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = codec::decode::<ToWorker>(&bytes);
            let _ = codec::decode::<FromWorker>(&bytes);
            let _ = codec::decode::<crate::ctl::CtlRequest>(&bytes);
            let _ = codec::decode::<crate::ctl::CtlResponse>(&bytes);
            if let Ok(Some((payload, used))) = split_frame(&bytes) {
                prop_assert!(used <= bytes.len());
                let _ = codec::decode::<FromWorker>(payload);
            }
        }

        /// The async reader on arbitrary bytes ends in a message, a clean close or an error.
        #[test]
        fn frame_reader_never_panics_on_arbitrary_streams(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            rt.block_on(async {
                let mut r = FrameReader::new(&bytes[..]);
                for _ in 0..64 {
                    match r.read::<FromWorker>().await {
                        Ok(Some(_)) => continue,
                        Ok(None) | Err(_) => break,
                    }
                }
            });
        }

        #[test]
        fn messages_round_trip(project in "[a-z0-9-]{1,20}", text in any::<String>(), nonce in any::<u64>()) {
            let msgs = vec![
                ToWorker::Message(crate::worker::InboundMessage { id: nonce.to_string(), from: crate::Channel::Project(project.clone()), text: text.clone(), client_id: Some(format!("cli-{nonce}")) }),
                ToWorker::Ping { nonce },
                ToWorker::Shutdown,
            ];
            for m in msgs {
                let bytes = codec::encode(&m).unwrap();
                prop_assert_eq!(codec::decode::<ToWorker>(&bytes).unwrap(), m);
            }
        }
    }
}
