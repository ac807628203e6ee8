//! Why pegasusd refused a connection on its worker listener.
//!
//! A refusal is not a failure of pegasusd: the connection is dropped (closed within
//! [`crate::ACCEPT_TIMEOUT`] of its start), the daemon goes on, and the caller logs one warning
//! with the peer's address and this reason's one-line text.

/// Why [`crate::Authority::accept`] (or [`crate::Certified::check_hello`]) refused a peer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The peer does not speak TLS at all (a frame, HTTP, a port scanner).
    #[error(
        "plain TCP, not TLS (first byte {first_byte:#04x}): remote workers must use mutual TLS"
    )]
    PlainTcp {
        /// The first byte the peer sent (a TLS handshake starts with `0x16`).
        first_byte: u8,
    },

    /// The peer closed before it finished what it had to say.
    #[error("the peer closed the connection during {during}")]
    Closed {
        /// The step it was in (`the TLS handshake`, `the enrollment`, ...).
        during: &'static str,
    },

    /// The peer did not finish a step within [`crate::ACCEPT_TIMEOUT`].
    #[error("timed out after {} s during {during}", crate::ACCEPT_TIMEOUT.as_secs())]
    Timeout {
        /// The step it was in (`the TLS handshake`, `the enrollment`, ...).
        during: &'static str,
    },

    /// The peer presented a client certificate this CA did not sign, or one no longer valid.
    #[error("bad client certificate: {0}")]
    BadCertificate(String),

    /// The TLS handshake failed for another reason (TLS 1.2 only, garbage, a reset).
    #[error("TLS handshake failed: {0}")]
    Handshake(String),

    /// A valid certificate of this CA that names no project (not one the enrollment issued).
    #[error("the client certificate names no project")]
    NoProject,

    /// A client without a certificate sent no enrollment, or one that does not decode or whose
    /// key does not check out.
    #[error("bad enrollment: {0}")]
    Enrollment(String),

    /// The enrollment's token was refused.
    #[error("enrollment token refused: {0}")]
    Token(TokenRefusal),

    /// The worker's Hello names another project than its certificate
    /// ([`crate::check_hello_project`]).
    #[error("the certificate is for project `{certified}` but the hello says `{hello}`")]
    OtherProject {
        /// The project the certificate was issued for.
        certified: String,
        /// The project the Hello names.
        hello: String,
    },

    /// A certificate of this CA for `project`, but not the one its latest enrollment was issued
    /// (an earlier link's, or one from before pegasusd restarted): revoked.
    #[error("the client certificate for project `{project}` is revoked (only the certificate of its latest enrollment is valid, for one link): the worker must enroll again")]
    CertificateRevoked {
        /// The project the certificate names.
        project: String,
    },

    /// The project's current certificate, presented again after its link started.
    #[error("the client certificate for project `{project}` already served a link (a certificate serves one): the worker must enroll again")]
    CertificateUsed {
        /// The project the certificate names.
        project: String,
    },

    /// The hello's token is not the one the link's certificate was enrolled with
    /// ([`crate::Certified::check_hello`]).
    #[error("the hello's token is not the one this certificate of project `{project}` was enrolled with")]
    HelloNotBound {
        /// The project the certificate names.
        project: String,
    },
}

/// Why an enrollment token was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenRefusal {
    /// Never issued by this pegasusd (or forgotten long after it expired).
    #[error("unknown token")]
    Unknown,
    /// Already traded for a certificate: tokens are single use.
    #[error("token already used")]
    Replayed,
    /// Presented more than [`crate::TOKEN_VALIDITY`] after it was issued.
    #[error("token expired")]
    Expired,
    /// Issued for another project than the one the worker enrolls for.
    #[error("token is for project `{issued_for}`, not `{asked}`")]
    OtherProject {
        /// The project the token was issued for.
        issued_for: String,
        /// The project the enrollment asks a certificate for.
        asked: String,
    },
}

/// Checks the project a connected worker names in its Hello against the one its certificate was
/// issued for: a certificate is one project's, and a worker may not serve another with it.
///
/// Part of [`crate::Certified::check_hello`], which pegasusd calls when the Hello arrives (and
/// which also wants the very token the certificate was enrolled with); it refuses the
/// connection (logged as any refusal) on `Err`.
pub fn check_hello_project(certified: &str, hello: &str) -> Result<(), Refusal> {
    if certified == hello {
        Ok(())
    } else {
        Err(Refusal::OtherProject {
            certified: certified.to_string(),
            hello: hello.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hello_for_another_project_is_refused_and_named() {
        assert_eq!(check_hello_project("web", "web"), Ok(()));
        let refusal = check_hello_project("web", "billing").err();
        assert_eq!(
            refusal.map(|r| r.to_string()).as_deref(),
            Some("the certificate is for project `web` but the hello says `billing`")
        );
    }

    #[test]
    fn every_refusal_is_one_line() {
        let all = [
            Refusal::PlainTcp { first_byte: 0x47 },
            Refusal::Closed {
                during: "the TLS handshake",
            },
            Refusal::Timeout {
                during: "the enrollment",
            },
            Refusal::BadCertificate("unknown issuer".into()),
            Refusal::Handshake("peer is incompatible".into()),
            Refusal::NoProject,
            Refusal::CertificateRevoked {
                project: "web".into(),
            },
            Refusal::CertificateUsed {
                project: "web".into(),
            },
            Refusal::HelloNotBound {
                project: "web".into(),
            },
            Refusal::Enrollment("no request".into()),
            Refusal::Token(TokenRefusal::Unknown),
            Refusal::Token(TokenRefusal::Replayed),
            Refusal::Token(TokenRefusal::Expired),
            Refusal::Token(TokenRefusal::OtherProject {
                issued_for: "a".into(),
                asked: "b".into(),
            }),
        ];
        for r in all {
            let text = r.to_string();
            assert!(!text.contains('\n') && !text.is_empty(), "{text:?}");
        }
    }
}
