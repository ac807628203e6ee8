//! The two enrollment frames: the only messages that cross the link before a worker has a
//! certificate, carried by pegasus-proto's frame codec like every other frame.
//!
//! They live here rather than in pegasus-proto because nothing but this crate speaks them, on a
//! connection that carries nothing else and closes after one exchange. Plain structs and an
//! externally tagged enum, as the codec requires (`pegasus_proto::codec`).

use crate::certs::KEY_ALG;
use rcgen::{KeyPair, PublicKeyData, SigningKey};
use serde::{Deserialize, Serialize};

/// The version of these two frames. A worker of another version is refused by name instead
/// of by a decode error, since a remote host may run an older build than pegasusd.
pub const ENROLL_VERSION: u32 = 1;

/// What a worker without a certificate sends first: its token and a fresh public key.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnrollRequest {
    /// [`ENROLL_VERSION`] of the worker's build.
    pub version: u32,
    /// The project the worker was launched for; must be the one its token was issued for.
    pub project: String,
    /// The one-time token from `PEGASUS_ENROLL`.
    pub token: String,
    /// The worker's P-256 public key, as an uncompressed point (65 bytes).
    pub public_key: Vec<u8>,
    /// The worker's signature (ECDSA P-256 SHA-256, ASN.1) over a fixed label, the project and
    /// the token (NUL-separated): proof that it holds the private key and that the key is a
    /// real point, before the CA signs anything for it.
    pub proof: Vec<u8>,
}

/// The token is a credential for 60 s: it never goes into a log line, even by `{:?}`.
impl std::fmt::Debug for EnrollRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnrollRequest")
            .field("version", &self.version)
            .field("project", &self.project)
            .field("token", &"<redacted>")
            .field("public_key_len", &self.public_key.len())
            .finish()
    }
}

/// pegasusd's one answer to an [`EnrollRequest`]; the connection closes after it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum EnrollResponse {
    /// The worker's client certificate (DER), signed by the CA, naming its project.
    Certificate {
        /// The certificate, DER.
        cert_der: Vec<u8>,
    },
    /// Refused, with the one-line reason pegasusd logs too, so the worker can print it.
    Refused {
        /// The [`crate::Refusal`]'s text.
        reason: String,
    },
}

/// What a worker signs to prove it holds its key: bound to this protocol, the project and
/// the token, so a proof cannot be reused for anything else.
fn proof_message(project: &str, token: &str) -> Vec<u8> {
    let mut m = b"pegasus-remote enroll v1\0".to_vec();
    m.extend_from_slice(project.as_bytes());
    m.push(0);
    m.extend_from_slice(token.as_bytes());
    m
}

impl EnrollRequest {
    /// The request a worker holding `key` sends.
    pub(crate) fn new(
        project: &str,
        token: &str,
        key: &KeyPair,
    ) -> Result<EnrollRequest, crate::LinkError> {
        let proof = key
            .sign(&proof_message(project, token))
            .map_err(crate::LinkError::cert)?;
        Ok(EnrollRequest {
            version: ENROLL_VERSION,
            project: project.to_string(),
            token: token.to_string(),
            public_key: key.der_bytes().to_vec(),
            proof,
        })
    }

    /// Whether [`EnrollRequest::proof`] is a valid signature by [`EnrollRequest::public_key`].
    /// ring refuses a key that is not a point on the curve, so this also checks the key.
    pub(crate) fn proof_holds(&self) -> bool {
        debug_assert!(std::ptr::eq(KEY_ALG, &rcgen::PKCS_ECDSA_P256_SHA256));
        ring::signature::UnparsedPublicKey::new(
            &ring::signature::ECDSA_P256_SHA256_ASN1,
            &self.public_key,
        )
        .verify(&proof_message(&self.project, &self.token), &self.proof)
        .is_ok()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn a_proof_holds_only_for_its_key_project_and_token() {
        let key = crate::certs::new_key().unwrap();
        let req = EnrollRequest::new("web", "t0k", &key).unwrap();
        assert!(req.proof_holds());
        let other = EnrollRequest {
            project: "billing".into(),
            ..req.clone()
        };
        assert!(!other.proof_holds());
        let other = EnrollRequest {
            token: "t1k".into(),
            ..req.clone()
        };
        assert!(!other.proof_holds());
        let garbage = EnrollRequest {
            public_key: vec![4; 65],
            ..req.clone()
        };
        assert!(!garbage.proof_holds());
    }

    #[test]
    fn the_frames_round_trip_through_the_codec_and_debug_hides_the_token() {
        let key = crate::certs::new_key().unwrap();
        let req = EnrollRequest::new("web", "secret-token", &key).unwrap();
        let back: EnrollRequest =
            pegasus_proto::decode(&pegasus_proto::encode(&req).unwrap()).unwrap();
        assert_eq!(back, req);
        assert!(!format!("{req:?}").contains("secret-token"));
        let resp = EnrollResponse::Refused {
            reason: "token expired".into(),
        };
        let back: EnrollResponse =
            pegasus_proto::decode(&pegasus_proto::encode(&resp).unwrap()).unwrap();
        assert_eq!(back, resp);
    }
}
