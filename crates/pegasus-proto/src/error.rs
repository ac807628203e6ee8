//! The one error type of the protocol crate.

/// Why a frame could not be read, decoded or written. Every variant means "drop this
/// connection": the stream is no longer at a frame boundary or the peer is not speaking our
/// protocol.
#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    #[error("socket error: {0}")]
    Io(#[from] std::io::Error),
    #[error("frame of {len} bytes is over the {max}-byte limit")]
    TooLarge { len: usize, max: usize },
    #[error("undecodable frame: {0}")]
    Decode(String),
    #[error("cannot encode frame: {0}")]
    Encode(String),
    #[error("peer speaks protocol version {got}, this build speaks {want}: restart pegasusd and its workers from the same build")]
    Version { got: u32, want: u32 },
    #[error("unexpected message: {0}")]
    Unexpected(String),
}
