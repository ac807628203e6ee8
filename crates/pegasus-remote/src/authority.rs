//! pegasusd's side of the link: the CA, the tokens it issues, and the accept of one connection
//! on the worker listener.

use crate::certs::{self, EnrolledKey};
use crate::enroll::{EnrollRequest, EnrollResponse, ENROLL_VERSION};
use crate::tokens::TokenBook;
use crate::{tls_dir, Bootstrap, LinkError, Refusal};
use pegasus_proto::{FrameReader, FrameWriter};
use rustls::server::{NoServerSessionStorage, WebPkiClientVerifier};
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout_at;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// How long a connection has, from its start, to finish the TLS handshake and (without a
/// certificate) its enrollment. A peer that is slower, or says nothing, is refused and closed
/// by then, so a stalled or hostile peer holds a connection for at most this long.
pub const ACCEPT_TIMEOUT: Duration = Duration::from_secs(5);

/// The first byte of every TLS connection: a handshake record (RFC 8446 §5.1). Anything else
/// is a peer speaking something other than TLS, refused by name without a handshake attempt.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// The step a refusal names while TLS is being set up.
const HANDSHAKE: &str = "the TLS handshake";

/// The most an enrollment request may take on the wire (one is about 300 bytes).
const MAX_ENROLL_REQUEST: u64 = 4096;

/// pegasusd's authority over the link: its CA, its server certificate and the tokens it issued.
/// One per pegasusd, shared (it is `Sync`) by the accept loop and the launchers.
pub struct Authority {
    acceptor: TlsAcceptor,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    ca_sha256: String,
    tokens: TokenBook,
    /// The one valid client certificate of each project: the one its latest enrollment was
    /// issued. Any other certificate of the CA, earlier ones of the same project included, is
    /// refused ([`Refusal::CertificateRevoked`]); this one serves one link only.
    issued: Mutex<HashMap<String, Issued>>,
}

/// The certificate a project's latest enrollment was issued, kept in memory only: a
/// certificate never outlives the pegasusd that issued it.
struct Issued {
    /// Hex SHA-256 of the certificate's DER.
    fingerprint: String,
    /// Hex SHA-256 of the token it was enrolled with: the token its hello must carry.
    token_sha256: String,
    /// Whether a connection already presented it (a certificate serves one link).
    used: bool,
}

/// What a worker's client certificate proves, from [`Accepted::Worker`]: the project it was
/// issued for and the enrollment it was issued at. The hello on that link must match both
/// ([`Certified::check_hello`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Certified {
    /// The project the certificate names: the only one this connection may serve.
    pub project: String,
    /// Hex SHA-256 of the enrollment token the certificate was issued for.
    token_sha256: String,
}

impl Certified {
    /// Checks a connected worker's hello against its certificate: the hello must name the
    /// certificate's project and carry the very token that certificate was enrolled with. A
    /// token seen elsewhere, said over a link with any other certificate (an earlier one of the
    /// same project too), is refused.
    pub fn check_hello(&self, project: &str, token: &str) -> Result<(), Refusal> {
        crate::check_hello_project(&self.project, project)?;
        if certs::sha256_hex(token.as_bytes()) != self.token_sha256 {
            return Err(Refusal::HelloNotBound {
                project: self.project.clone(),
            });
        }
        Ok(())
    }
}

/// A connection [`Authority::accept`] let through.
pub enum Accepted {
    /// A worker without a certificate traded its token for one; this connection is over (it
    /// was closed), and the worker reconnects with the certificate.
    Enrolled {
        /// The project the certificate was issued for.
        project: String,
    },
    /// A worker presented the certificate its project's latest enrollment was issued, for the
    /// first time. `stream` is ready for the worker frames (Hello first); check the Hello with
    /// [`Certified::check_hello`].
    Worker {
        /// The project and enrollment the certificate was issued for.
        certified: Certified,
        /// The server side of the mutual-TLS stream (boxed: a TLS state is large).
        stream: Box<TlsStream<TcpStream>>,
    },
}

/// Only the outcome: the stream's TLS state is nothing a log line needs.
impl std::fmt::Debug for Accepted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Accepted::Enrolled { project } => f
                .debug_struct("Enrolled")
                .field("project", project)
                .finish(),
            Accepted::Worker { certified, .. } => f
                .debug_struct("Worker")
                .field("project", &certified.project)
                .finish(),
        }
    }
}

impl Authority {
    /// Loads the CA and server certificate from `tls_dir`, making them on first use (folder
    /// 0700, files 0600, written atomically). `server_names` are the DNS names and IP addresses
    /// workers reach pegasusd by (the launchers' `connect` hosts, [`crate::host_of`]);
    /// `localhost` and `127.0.0.1` are always added. A server certificate that does not cover
    /// them, or is near its end, is re-issued; the CA is kept, so launched workers' fingerprint
    /// stays the same across restarts.
    pub fn open_or_create(tls_dir: &Path, server_names: &[String]) -> Result<Authority, LinkError> {
        let files = tls_dir::open_or_create(tls_dir, server_names)?;
        let provider = certs::provider();

        let mut roots = RootCertStore::empty();
        roots.add(files.ca_cert.clone()).map_err(LinkError::cert)?;
        // Client certificates are optional at the TLS layer (a worker enrolls without one) but
        // checked against the CA whenever one is presented.
        let client_verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .allow_unauthenticated()
                .build()
                .map_err(LinkError::cert)?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(files.server_key.serialize_der()));
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(LinkError::cert)?
            .with_client_cert_verifier(client_verifier)
            .with_single_cert(vec![files.server_cert, files.ca_cert.clone()], key)
            .map_err(LinkError::cert)?;
        // No resumption: every connection shows its certificate, and nothing about a worker
        // outlives its connection in pegasusd's memory.
        config.session_storage = Arc::new(NoServerSessionStorage {});
        config.send_tls13_tickets = 0;

        Ok(Authority {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            issuer: files.issuer,
            ca_sha256: certs::sha256_hex(files.ca_cert.as_ref()),
            tokens: TokenBook::default(),
            issued: Mutex::new(HashMap::new()),
        })
    }

    /// Lowercase hex SHA-256 of the CA certificate's DER: what a launched worker gets as
    /// `PEGASUS_CA_SHA256`, the one thing it trusts pegasusd by.
    pub fn ca_sha256_hex(&self) -> &str {
        &self.ca_sha256
    }

    /// A one-time enrollment token for `project`, valid [`crate::TOKEN_VALIDITY`] from now,
    /// kept in memory only. A new launch of the project revokes the certificate of its last
    /// one. Fails only if the OS random source does.
    pub fn issue_token(&self, project: &str) -> Result<String, LinkError> {
        self.issue_token_at(project, Instant::now())
    }

    /// [`Authority::issue_token`] as if issued at `issued`: for tests of expiry, and for a
    /// caller that wants the validity to count from when it decided to launch.
    pub fn issue_token_at(&self, project: &str, issued: Instant) -> Result<String, LinkError> {
        let token = self.tokens.issue(project, issued)?;
        self.revoke(project);
        Ok(token)
    }

    /// Revokes `project`'s certificate: until its next enrollment, no certificate of it is
    /// accepted. (A link already up is not cut: its certificate was checked once, at its start.)
    pub fn revoke(&self, project: &str) {
        self.issued_map().remove(project);
    }

    fn issued_map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Issued>> {
        // Every change to the map is one insert, remove or flag: never left half-made.
        self.issued.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Everything one launch of `project`'s worker needs to reach this pegasusd at `connect`
    /// (`host:port`): a fresh token and the CA fingerprint. Put [`Bootstrap::public_env`] into
    /// the launched command's environment and [`Bootstrap::enroll_line`] on its standard input.
    pub fn bootstrap(&self, connect: &str, project: &str) -> Result<Bootstrap, LinkError> {
        Bootstrap::new(connect, &self.issue_token(project)?, &self.ca_sha256)
    }

    /// Takes one TCP connection from the worker listener through TLS and, for a worker without
    /// a certificate, through enrollment. Never takes longer than [`ACCEPT_TIMEOUT`]; on a
    /// refusal the connection is closed (dropped) before this returns, and the caller logs the
    /// refusal with the peer's address. Run it on its own task per connection.
    pub async fn accept(&self, tcp: TcpStream) -> Result<Accepted, Refusal> {
        let deadline = tokio::time::Instant::now() + ACCEPT_TIMEOUT;

        let timed_out = |_| Refusal::Timeout { during: HANDSHAKE };
        let mut first = [0u8; 1];
        let peeked = timeout_at(deadline, tcp.peek(&mut first))
            .await
            .map_err(timed_out)?
            .map_err(|e| Refusal::Handshake(e.to_string()))?;
        if peeked == 0 {
            return Err(Refusal::Closed { during: HANDSHAKE });
        }
        if first[0] != TLS_HANDSHAKE_RECORD {
            return Err(Refusal::PlainTcp {
                first_byte: first[0],
            });
        }

        let tls = timeout_at(deadline, self.acceptor.accept(tcp))
            .await
            .map_err(timed_out)?
            .map_err(handshake_refusal)?;

        let presented = tls
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| c.clone().into_owned());
        match presented {
            Some(cert) => match certs::project_of(&cert) {
                Some(project) => Ok(Accepted::Worker {
                    certified: self.take_certificate(&project, &cert)?,
                    stream: Box::new(tls),
                }),
                None => Err(Refusal::NoProject),
            },
            None => self.enroll(tls, deadline).await,
        }
    }

    /// Lets `cert` (a certificate of this CA naming `project`) through once: only if it is the
    /// one the project's latest enrollment was issued, and not presented before.
    fn take_certificate(
        &self,
        project: &str,
        cert: &CertificateDer<'_>,
    ) -> Result<Certified, Refusal> {
        let fingerprint = certs::sha256_hex(cert.as_ref());
        let mut issued = self.issued_map();
        match issued.get_mut(project) {
            Some(i) if i.fingerprint == fingerprint && !i.used => {
                i.used = true;
                Ok(Certified {
                    project: project.to_string(),
                    token_sha256: i.token_sha256.clone(),
                })
            }
            Some(i) if i.fingerprint == fingerprint => Err(Refusal::CertificateUsed {
                project: project.to_string(),
            }),
            _ => Err(Refusal::CertificateRevoked {
                project: project.to_string(),
            }),
        }
    }

    /// Reads one enrollment request, answers it, and closes the connection.
    async fn enroll(
        &self,
        mut tls: TlsStream<TcpStream>,
        deadline: tokio::time::Instant,
    ) -> Result<Accepted, Refusal> {
        let during = "the enrollment";
        let request = {
            // A peer without a certificate is anyone on the network: it may not make pegasusd
            // buffer a 16 MiB frame, only the few hundred bytes a request takes.
            let mut reader = FrameReader::new((&mut tls).take(MAX_ENROLL_REQUEST));
            match timeout_at(deadline, reader.read::<EnrollRequest>()).await {
                Err(_) => return Err(Refusal::Timeout { during }),
                Ok(Ok(Some(request))) => request,
                Ok(Ok(None)) => {
                    return Err(Refusal::Enrollment(
                        "no certificate and no enrollment request".into(),
                    ))
                }
                Ok(Err(e)) => {
                    return Err(Refusal::Enrollment(format!(
                        "not an enrollment request ({e})"
                    )))
                }
            }
        };
        let outcome = self.sign(&request, Instant::now());
        let response = match &outcome {
            Ok(cert) => EnrollResponse::Certificate {
                cert_der: cert.as_ref().to_vec(),
            },
            Err(refusal) => EnrollResponse::Refused {
                reason: refusal.to_string(),
            },
        };
        let answered = timeout_at(deadline, async {
            FrameWriter::new(&mut tls).write(&response).await.ok()?;
            tls.shutdown().await.ok()
        })
        .await;
        outcome?;
        match answered {
            Ok(Some(())) => Ok(Accepted::Enrolled {
                project: request.project,
            }),
            Ok(None) => Err(Refusal::Closed {
                during: "the enrollment answer",
            }),
            Err(_) => Err(Refusal::Timeout {
                during: "the enrollment answer",
            }),
        }
    }

    /// Checks an enrollment request at `now` and signs its key's certificate. The proof is
    /// checked before the token, so a request that could never be served does not spend it.
    fn sign(
        &self,
        request: &EnrollRequest,
        now: Instant,
    ) -> Result<CertificateDer<'static>, Refusal> {
        if request.version != ENROLL_VERSION {
            return Err(Refusal::Enrollment(format!(
                "enrollment version {} but this pegasusd speaks {ENROLL_VERSION}: run the same Pegasus version on both hosts",
                request.version
            )));
        }
        if let Err(e) = pegasus_store::validate_name(&request.project) {
            return Err(Refusal::Enrollment(e.to_string()));
        }
        if !request.proof_holds() {
            return Err(Refusal::Enrollment(
                "the public key's proof of possession does not verify".into(),
            ));
        }
        self.tokens
            .redeem(&request.token, &request.project, now)
            .map_err(Refusal::Token)?;
        let cert = certs::make_client_cert(
            &EnrolledKey(&request.public_key),
            &self.issuer,
            &request.project,
        )
        .map_err(|e| Refusal::Enrollment(e.to_string()))?;
        // From now on this is the project's one valid certificate: every earlier one is revoked.
        self.issued_map().insert(
            request.project.clone(),
            Issued {
                fingerprint: certs::sha256_hex(cert.as_ref()),
                token_sha256: certs::sha256_hex(request.token.as_bytes()),
                used: false,
            },
        );
        Ok(cert)
    }
}

/// Names a failed TLS handshake: a client certificate the verifier refused, a peer that went
/// away, or anything else rustls said.
fn handshake_refusal(e: std::io::Error) -> Refusal {
    let tls_error = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>());
    match tls_error {
        Some(rustls::Error::InvalidCertificate(why)) => Refusal::BadCertificate(why.to_string()),
        Some(other) => Refusal::Handshake(other.to_string()),
        None if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            Refusal::Closed { during: HANDSHAKE }
        }
        None => Refusal::Handshake(e.to_string()),
    }
}
