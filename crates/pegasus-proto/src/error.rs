//! The one error type of the protocol crate.

/// Why a frame could not be read, decoded or written. Every variant means "drop this
/// connection": the stream is no longer at a frame boundary or the peer is not speaking our
/// protocol.
#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    /// The socket failed, or closed inside a frame.
    #[error("socket error: {0}")]
    Io(#[from] std::io::Error),
    /// A frame's length (read from its prefix, or of a message about to be sent) is over
    /// [`crate::MAX_FRAME`].
    #[error("frame of {len} bytes is over the {max}-byte limit")]
    TooLarge {
        /// The frame's payload length, in bytes.
        len: usize,
        /// The limit, in bytes.
        max: usize,
    },
    /// The payload is not a message of the expected type (or has bytes left over); the
    /// decoder's reason.
    #[error("undecodable frame: {0}")]
    Decode(String),
    /// A message could not be encoded; the encoder's reason.
    #[error("cannot encode frame: {0}")]
    Encode(String),
    /// The peer's first frame (hello or init) carries another [`crate::PROTOCOL_VERSION`].
    #[error("peer speaks protocol version {got}, this build speaks {want}: restart pegasusd and its workers from the same build")]
    Version {
        /// The version the peer sent.
        got: u32,
        /// This build's version.
        want: u32,
    },
    /// A well-formed message that the connection does not allow at this point; what it was.
    #[error("unexpected message: {0}")]
    Unexpected(String),
}
