//! The payload encoding of a frame: `bincode` 2 through its serde API.
//!
//! Kept behind these two functions so the encoding can change in one place. bincode cannot carry
//! `serde_json::Value`, internally tagged enums or `skip_serializing_if`, so message types are
//! plain structs and externally tagged enums, and raw JSON travels as `String`.

use crate::{frame::MAX_FRAME, ProtoError};
use serde::{de::DeserializeOwned, Serialize};

/// The bincode configuration of both links. The limit makes the decoder refuse a length claim
/// inside a payload (a string or vector "of 4 GiB") before it allocates for it.
fn config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<MAX_FRAME>()
}

/// Encodes one message as a frame payload.
pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, ProtoError> {
    bincode::serde::encode_to_vec(msg, config()).map_err(|e| ProtoError::Encode(e.to_string()))
}

/// Decodes one frame payload. Trailing bytes are an error: a frame is exactly one message.
pub fn decode<T: DeserializeOwned>(payload: &[u8]) -> Result<T, ProtoError> {
    let (msg, used) = bincode::serde::decode_from_slice(payload, config())
        .map_err(|e| ProtoError::Decode(e.to_string()))?;
    if used != payload.len() {
        return Err(ProtoError::Decode(format!(
            "{} trailing bytes after the message",
            payload.len() - used
        )));
    }
    Ok(msg)
}
