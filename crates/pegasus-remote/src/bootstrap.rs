//! A remote worker's side of the link: the bootstrap values (the two public ones from its
//! environment, the one-time token from its standard input or a file), and the connect that
//! turns them into a mutual-TLS stream to pegasusd.

use crate::certs;
use crate::enroll::{EnrollRequest, EnrollResponse};
use crate::verifier::PinnedCa;
use crate::LinkError;
use pegasus_proto::{FrameReader, FrameWriter, ProtoError};
use rcgen::KeyPair;
use rustls::client::Resumption;
use rustls::crypto::CryptoProvider;
use rustls::{CertificateError, ClientConfig, OtherError};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use std::ffi::OsString;
use std::io::{BufRead, Read};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::{sleep, timeout, Instant};
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

/// Where pegasusd listens for this worker, `host:port`. Its presence is what makes a worker
/// remote.
pub const ENV_CONNECT: &str = "PEGASUS_CONNECT";
/// The one-time enrollment token of this launch: never an environment variable (another user
/// of the host may read a process's environment), but the key of the one line the launched
/// command gets on its standard input, `PEGASUS_ENROLL=<token>` ([`Bootstrap::enroll_line`]).
pub const ENV_ENROLL: &str = "PEGASUS_ENROLL";
/// Where a launched worker reads its enrollment line instead of standard input: a file only it
/// can read (a Kubernetes Secret's volume). Its path is no secret.
pub const ENV_ENROLL_FILE: &str = "PEGASUS_ENROLL_FILE";

/// The most an enrollment line may take (`PEGASUS_ENROLL=` and 64 hex characters, a newline).
const MAX_ENROLL_LINE: u64 = 256;
/// Lowercase hex SHA-256 of the CA certificate's DER: how the worker recognises pegasusd.
pub const ENV_CA_SHA256: &str = "PEGASUS_CA_SHA256";

/// How long a launched worker keeps trying to reach pegasusd over TCP before it gives up
/// (DESIGN.md §14): long enough for a pod's network to come up, short enough that a launch into a
/// broken network fails while pegasusd still remembers it.
pub const CONNECT_PATIENCE: Duration = Duration::from_secs(15);

/// How long the worker waits for one TLS handshake plus its exchange. pegasusd gives a
/// connection [`crate::ACCEPT_TIMEOUT`]; this is longer so that pegasusd's refusal, not the
/// worker's impatience, is what a slow link reports.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest pause between two TCP connect attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// What a launched worker needs to reach the pegasusd that launched it: the address, a token
/// and the CA fingerprint. pegasusd makes one per launch ([`crate::Authority::bootstrap`]) and
/// passes the public values as environment ([`Bootstrap::public_env`]) and the token on the
/// launched command's standard input ([`Bootstrap::enroll_line`]); the worker reads them back
/// ([`Bootstrap::from_launch`]).
#[derive(Clone, PartialEq, Eq)]
pub struct Bootstrap {
    connect: String,
    token: String,
    ca_sha256: String,
}

/// The token is a credential: it never goes into a log line, even by `{:?}`.
impl std::fmt::Debug for Bootstrap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bootstrap")
            .field("connect", &self.connect)
            .field("token", &"<redacted>")
            .field("ca_sha256", &self.ca_sha256)
            .finish()
    }
}

/// The host part of `host:port` (`10.0.0.1`, `pegasusd.pegasus.svc`, `::1` from `[::1]:7475`),
/// or `None` if `connect` is not of that form. The hosts of the launchers' `connect` values are
/// the names pegasusd's server certificate should carry.
pub fn host_of(connect: &str) -> Option<&str> {
    let (host, port) = connect.rsplit_once(':')?;
    port.parse::<u16>().ok().filter(|p| *p != 0)?;
    let host = match host.strip_prefix('[') {
        Some(bracketed) => bracketed.strip_suffix(']')?,
        None if host.contains(':') => return None,
        None => host,
    };
    (!host.is_empty() && !host.contains(char::is_whitespace)).then_some(host)
}

impl Bootstrap {
    /// Checks and keeps the three values: `connect` is `host:port`, `token` is one pegasusd
    /// issued (64 hex characters), `ca_sha256` is a SHA-256 in hex.
    pub fn new(connect: &str, token: &str, ca_sha256: &str) -> Result<Bootstrap, LinkError> {
        let bad = |var, problem: String| LinkError::Bootstrap { var, problem };
        if host_of(connect).is_none() {
            return Err(bad(ENV_CONNECT, format!("is `{connect}`, not host:port")));
        }
        if !is_hex(token, 64) {
            return Err(bad(
                ENV_ENROLL,
                "is not a token pegasusd issued (64 hex characters)".into(),
            ));
        }
        if !is_hex(ca_sha256, 64) {
            return Err(bad(
                ENV_CA_SHA256,
                format!("is `{ca_sha256}`, not a SHA-256 in hex (64 characters)"),
            ));
        }
        Ok(Bootstrap {
            connect: connect.to_string(),
            token: token.to_string(),
            ca_sha256: ca_sha256.to_ascii_lowercase(),
        })
    }

    /// Reads the bootstrap a launch gave this process: `None` when `PEGASUS_CONNECT` is not
    /// set (a local worker, on the Unix socket); else the public values from the environment
    /// and the token from the file `PEGASUS_ENROLL_FILE` names or, without it, from the first
    /// line of standard input (waiting up to [`CONNECT_PATIENCE`] for it). An error names what
    /// is missing or malformed, and a token found in the environment is refused.
    pub fn from_launch() -> Option<Result<Bootstrap, LinkError>> {
        Bootstrap::from_sources(|var| std::env::var_os(var), read_enroll_source)
    }

    /// [`Bootstrap::from_launch`] over any environment and token source, so it is testable
    /// without touching the process's own.
    fn from_sources(
        get: impl Fn(&str) -> Option<OsString>,
        read_line: impl FnOnce(Option<OsString>) -> Result<String, LinkError>,
    ) -> Option<Result<Bootstrap, LinkError>> {
        let connect = get(ENV_CONNECT)?;
        let bad = |var, problem: &str| LinkError::Bootstrap {
            var,
            problem: problem.into(),
        };
        let utf8 = |var, raw: OsString| raw.into_string().map_err(|_| bad(var, "is not UTF-8"));
        let value = |var| utf8(var, get(var).ok_or_else(|| bad(var, "is not set"))?);
        Some((|| {
            if get(ENV_ENROLL).is_some() {
                return Err(bad(
                    ENV_ENROLL,
                    "is in the environment, where other users of this host can read it: the token goes on the worker's standard input",
                ));
            }
            let connect = utf8(ENV_CONNECT, connect)?;
            let ca_sha256 = value(ENV_CA_SHA256)?;
            let line = read_line(get(ENV_ENROLL_FILE))?;
            Bootstrap::new(&connect, &parse_enroll_line(&line)?, &ca_sha256)
        })())
    }

    /// The public values for the launched command's environment (or `{env}` argv), in the
    /// form [`Bootstrap::from_launch`] reads back: where pegasusd listens and the CA's
    /// fingerprint. Never the token.
    pub fn public_env(&self) -> [(&'static str, String); 2] {
        [
            (ENV_CONNECT, self.connect.clone()),
            (ENV_CA_SHA256, self.ca_sha256.clone()),
        ]
    }

    /// The one line the launched command gets on its standard input (or a worker pod in its
    /// Secret): `PEGASUS_ENROLL=<token>` and a newline. A credential until it is spent.
    pub fn enroll_line(&self) -> String {
        format!("{ENV_ENROLL}={}\n", self.token)
    }

    /// The enrollment token. A credential until it is spent: never log it. (pegasusd may also
    /// use it to recognise the launch when the worker says hello.)
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The pinned CA fingerprint, lowercase hex.
    pub fn ca_sha256(&self) -> &str {
        &self.ca_sha256
    }

    /// Reaches pegasusd as `project`'s worker: keeps trying TCP for up to
    /// [`CONNECT_PATIENCE`], trusts the server only by the CA fingerprint, makes a fresh key,
    /// trades the token for a client certificate on a first connection ([`Bootstrap::enroll`]),
    /// and returns a second connection that presents it (mutual TLS,
    /// [`Bootstrap::connect_with`]), ready for the worker frames; the hello on it must carry
    /// this token.
    ///
    /// Any refusal is an error naming it; the worker exits non-zero on it at once. (In TLS 1.3
    /// the server checks a client certificate after the client finished its handshake, so a
    /// refusal of the certificate itself shows at the first read of the returned stream, as a
    /// TLS alert or a close. The certificate is the one pegasusd just signed, so that is not
    /// expected.)
    pub async fn connect(&self, project: &str) -> Result<TlsStream<TcpStream>, LinkError> {
        let deadline = Instant::now() + CONNECT_PATIENCE;
        let identity = self.enroll_until(project, deadline).await?;
        self.connect_until(&identity, deadline).await
    }

    /// Trades the token for a client certificate of `project` (a fresh key, kept in memory):
    /// the first half of [`Bootstrap::connect`]. The token is spent, whatever the answer.
    pub async fn enroll(&self, project: &str) -> Result<Identity, LinkError> {
        self.enroll_until(project, Instant::now() + CONNECT_PATIENCE)
            .await
    }

    /// Connects with a certificate [`Bootstrap::enroll`] got: the second half of
    /// [`Bootstrap::connect`]. pegasusd accepts a certificate once, and only while it is its
    /// project's latest.
    pub async fn connect_with(
        &self,
        identity: &Identity,
    ) -> Result<TlsStream<TcpStream>, LinkError> {
        self.connect_until(identity, Instant::now() + CONNECT_PATIENCE)
            .await
    }

    async fn enroll_until(&self, project: &str, deadline: Instant) -> Result<Identity, LinkError> {
        let provider = certs::provider();
        let verifier = Arc::new(PinnedCa::new(&self.ca_sha256, provider.clone()));
        let key = certs::new_key()?;
        let config = client_config(&provider, verifier, None)?;
        let tcp = self.tcp(deadline).await?;
        let cert = timeout(EXCHANGE_TIMEOUT, self.enroll_on(config, tcp, project, &key))
            .await
            .map_err(|_| self.link_error("no enrollment answer in time".into()))??;
        Ok(Identity { cert, key })
    }

    async fn connect_until(
        &self,
        identity: &Identity,
        deadline: Instant,
    ) -> Result<TlsStream<TcpStream>, LinkError> {
        let provider = certs::provider();
        let verifier = Arc::new(PinnedCa::new(&self.ca_sha256, provider.clone()));
        let config = client_config(
            &provider,
            verifier,
            Some((identity.cert.clone(), &identity.key)),
        )?;
        let tcp = self.tcp(deadline).await?;
        timeout(
            EXCHANGE_TIMEOUT,
            TlsConnector::from(config).connect(self.server_name(), tcp),
        )
        .await
        .map_err(|_| self.link_error("the TLS handshake did not finish in time".into()))?
        .map_err(|e| self.handshake_error(e))
    }

    /// One enrollment: TLS without a client certificate, the request, the answer.
    async fn enroll_on(
        &self,
        config: Arc<ClientConfig>,
        tcp: TcpStream,
        project: &str,
        key: &KeyPair,
    ) -> Result<CertificateDer<'static>, LinkError> {
        let mut tls = TlsConnector::from(config)
            .connect(self.server_name(), tcp)
            .await
            .map_err(|e| self.handshake_error(e))?;
        let request = EnrollRequest::new(project, &self.token, key)?;
        FrameWriter::new(&mut tls)
            .write(&request)
            .await
            .map_err(|e| self.frame_error(e))?;
        match FrameReader::new(&mut tls).read::<EnrollResponse>().await {
            Ok(Some(EnrollResponse::Certificate { cert_der })) => {
                Ok(CertificateDer::from(cert_der))
            }
            Ok(Some(EnrollResponse::Refused { reason })) => Err(LinkError::Refused {
                addr: self.connect.clone(),
                reason,
            }),
            Ok(None) => {
                Err(self.link_error("pegasusd closed the enrollment without an answer".into()))
            }
            Err(e) => Err(self.frame_error(e)),
        }
    }

    /// A TCP connection to pegasusd, tried until `deadline` (at least once), backing off from
    /// 100 ms to [`MAX_BACKOFF`] between attempts.
    async fn tcp(&self, deadline: Instant) -> Result<TcpStream, LinkError> {
        let started = Instant::now();
        let mut pause = Duration::from_millis(100);
        loop {
            // An attempt to a host that drops packets would hang for minutes: bound it too.
            let budget = deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_secs(1));
            let last = match timeout(budget, TcpStream::connect(&self.connect)).await {
                Ok(Ok(tcp)) => {
                    // Frames are small requests and answers: Nagle would only delay them.
                    let _ = tcp.set_nodelay(true);
                    return Ok(tcp);
                }
                Ok(Err(e)) => e.to_string(),
                Err(_) => "connect timed out".to_string(),
            };
            if Instant::now() + pause >= deadline {
                return Err(LinkError::Unreachable {
                    addr: self.connect.clone(),
                    waited_s: started.elapsed().as_secs(),
                    last,
                });
            }
            sleep(pause).await;
            pause = (pause * 2).min(MAX_BACKOFF);
        }
    }

    /// The name the TLS client sends (SNI): the connect host. It is not what the worker trusts
    /// ([`PinnedCa`] ignores it), so a host rustls cannot take as a name (`Bootstrap::new`
    /// already checked the form) goes as an address, which sends no SNI at all.
    fn server_name(&self) -> ServerName<'static> {
        host_of(&self.connect)
            .and_then(|h| ServerName::try_from(h.to_string()).ok())
            .unwrap_or(ServerName::IpAddress(
                std::net::IpAddr::from(std::net::Ipv4Addr::LOCALHOST).into(),
            ))
    }

    fn link_error(&self, reason: String) -> LinkError {
        LinkError::Link {
            addr: self.connect.clone(),
            reason,
        }
    }

    /// Names a failed client handshake (or a failed read or write after it, where TLS alerts
    /// arrive): a server not trusted, a refusal by pegasusd, or a broken link.
    fn handshake_error(&self, e: std::io::Error) -> LinkError {
        let tls_error = e
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>());
        let addr = self.connect.clone();
        match tls_error {
            Some(rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(why)))) => {
                LinkError::UntrustedServer {
                    addr,
                    reason: why.to_string(),
                }
            }
            Some(rustls::Error::InvalidCertificate(why)) => LinkError::UntrustedServer {
                addr,
                reason: why.to_string(),
            },
            Some(rustls::Error::InvalidMessage(_)) => LinkError::UntrustedServer {
                addr,
                reason: "it does not speak TLS".into(),
            },
            Some(rustls::Error::AlertReceived(alert)) => LinkError::Refused {
                addr,
                reason: format!("TLS alert {alert:?}"),
            },
            Some(other) => self.link_error(other.to_string()),
            None => self.link_error(e.to_string()),
        }
    }

    fn frame_error(&self, e: ProtoError) -> LinkError {
        match e {
            ProtoError::Io(io) => self.handshake_error(io),
            other => self.link_error(other.to_string()),
        }
    }
}

/// Whether `s` is exactly `len` hex digits.
fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A worker's client certificate and its private key, from [`Bootstrap::enroll`]; in memory
/// only.
pub struct Identity {
    cert: CertificateDer<'static>,
    key: KeyPair,
}

/// The key is a credential: never in a log line.
impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity")
            .field("cert_len", &self.cert.as_ref().len())
            .finish_non_exhaustive()
    }
}

/// The token out of an enrollment line, `PEGASUS_ENROLL=<token>` (its newline, if any, taken
/// off); its form is checked by [`Bootstrap::new`].
fn parse_enroll_line(line: &str) -> Result<String, LinkError> {
    let line = line.strip_suffix('\n').unwrap_or(line);
    let line = line.strip_suffix('\r').unwrap_or(line);
    match line.split_once('=') {
        Some((ENV_ENROLL, token)) => Ok(token.to_string()),
        _ if line.is_empty() => Err(LinkError::Bootstrap {
            var: ENV_ENROLL,
            problem: "did not come: standard input held no enrollment line (a launcher must forward its standard input: ssh without -n, srun)".into(),
        }),
        _ => Err(LinkError::Bootstrap {
            var: ENV_ENROLL,
            problem: "did not come: the first line of standard input is not `PEGASUS_ENROLL=<token>`".into(),
        }),
    }
}

/// Reads the enrollment line: from the file `file` names (a Secret's volume), else from standard
/// input, waiting at most [`CONNECT_PATIENCE`] for it (a launcher that keeps its input open but
/// sends nothing must not hang the worker).
fn read_enroll_source(file: Option<OsString>) -> Result<String, LinkError> {
    let bad = |problem: String| LinkError::Bootstrap {
        var: ENV_ENROLL,
        problem,
    };
    if let Some(path) = file {
        let path = std::path::PathBuf::from(path);
        return pegasus_store::read_text_limited(&path, MAX_ENROLL_LINE).map_err(|e| {
            bad(format!(
                "cannot be read from {} ({ENV_ENROLL_FILE}): {e}",
                path.display()
            ))
        });
    }
    let (tx, rx) = std::sync::mpsc::channel();
    // A thread of its own, so the wait is bounded; it is left blocked if nothing comes, and
    // goes with the process.
    std::thread::spawn(move || {
        let mut line = String::new();
        let read = std::io::stdin()
            .lock()
            .take(MAX_ENROLL_LINE)
            .read_line(&mut line)
            .map(|_| line);
        let _ = tx.send(read);
    });
    match rx.recv_timeout(CONNECT_PATIENCE) {
        Ok(Ok(line)) => Ok(line),
        Ok(Err(e)) => Err(bad(format!("cannot be read from standard input: {e}"))),
        Err(_) => Err(bad(format!(
            "did not come on standard input within {} s",
            CONNECT_PATIENCE.as_secs()
        ))),
    }
}

/// A TLS 1.3 client config trusting only the pinned CA, with `identity` as the client
/// certificate if given. No resumption: each connection shows what it is.
fn client_config(
    provider: &Arc<CryptoProvider>,
    verifier: Arc<PinnedCa>,
    identity: Option<(CertificateDer<'static>, &KeyPair)>,
) -> Result<Arc<ClientConfig>, LinkError> {
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(LinkError::cert)?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let mut config = match identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => builder
            .with_client_auth_cert(
                vec![cert],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )
            .map_err(LinkError::cert)?,
    };
    config.resumption = Resumption::disabled();
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::collections::HashMap;

    const SHA: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    const TOKEN: &str = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";

    fn lookup(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let map: HashMap<String, OsString> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        move |k| map.get(k).cloned()
    }

    /// The token source of a launch whose standard input held `line`.
    fn stdin(line: &str) -> impl FnOnce(Option<OsString>) -> Result<String, LinkError> {
        let line = line.to_string();
        move |file| {
            assert_eq!(file, None, "no PEGASUS_ENROLL_FILE was set");
            Ok(line)
        }
    }

    #[test]
    fn no_connect_variable_means_a_local_worker() {
        let line = format!("PEGASUS_ENROLL={TOKEN}\n");
        assert!(Bootstrap::from_sources(lookup(&[]), stdin(&line)).is_none());
    }

    #[test]
    fn a_bootstrap_round_trips_through_its_public_environment_and_its_enroll_line() {
        let b = Bootstrap::new("10.0.0.1:7475", TOKEN, &SHA.to_uppercase()).unwrap();
        assert_eq!(b.ca_sha256(), SHA);
        let env = b.public_env();
        let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        assert!(
            pairs
                .iter()
                .all(|(k, v)| *k != ENV_ENROLL && !v.contains(TOKEN)),
            "no token in the environment: {pairs:?}"
        );
        let line = b.enroll_line();
        assert_eq!(line, format!("PEGASUS_ENROLL={TOKEN}\n"));
        let back = Bootstrap::from_sources(lookup(&pairs), stdin(&line))
            .unwrap()
            .unwrap();
        assert_eq!(back, b);
        assert!(!format!("{b:?}").contains(TOKEN));
    }

    #[test]
    fn the_enroll_line_may_come_from_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, format!("PEGASUS_ENROLL={TOKEN}\n")).unwrap();
        let vars = [
            (ENV_CONNECT, "h:1"),
            (ENV_CA_SHA256, SHA),
            (ENV_ENROLL_FILE, path.to_str().unwrap()),
        ];
        let b = Bootstrap::from_sources(lookup(&vars), read_enroll_source)
            .unwrap()
            .unwrap();
        assert_eq!(b.token(), TOKEN);
        let missing = dir.path().join("gone");
        let vars = [
            (ENV_CONNECT, "h:1"),
            (ENV_CA_SHA256, SHA),
            (ENV_ENROLL_FILE, missing.to_str().unwrap()),
        ];
        let err = Bootstrap::from_sources(lookup(&vars), read_enroll_source)
            .unwrap()
            .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("PEGASUS_ENROLL cannot be read from"),
            "{err}"
        );
    }

    #[test]
    fn a_missing_or_malformed_value_is_named_and_a_token_in_the_environment_refused() {
        let good = format!("PEGASUS_ENROLL={TOKEN}\n");
        /// The environment, standard input's line, and the error's start.
        type Case<'a> = (&'a [(&'a str, &'a str)], &'a str, &'a str);
        let cases: [Case; 7] = [
            (
                &[(ENV_CONNECT, "h:1"), (ENV_CA_SHA256, SHA)],
                "",
                "PEGASUS_ENROLL did not come: standard input held no enrollment line",
            ),
            (
                &[(ENV_CONNECT, "h:1"), (ENV_CA_SHA256, SHA)],
                TOKEN,
                "PEGASUS_ENROLL did not come: the first line of standard input is not",
            ),
            (
                &[(ENV_CONNECT, "h:1"), (ENV_CA_SHA256, SHA)],
                "PEGASUS_ENROLL=abc\n",
                "PEGASUS_ENROLL is not a token pegasusd issued",
            ),
            (
                &[
                    (ENV_CONNECT, "h:1"),
                    (ENV_CA_SHA256, SHA),
                    (ENV_ENROLL, TOKEN),
                ],
                &good,
                "PEGASUS_ENROLL is in the environment, where other users",
            ),
            (
                &[(ENV_CONNECT, "h:1")],
                &good,
                "PEGASUS_CA_SHA256 is not set",
            ),
            (
                &[(ENV_CONNECT, "h:1"), (ENV_CA_SHA256, "abc")],
                &good,
                "PEGASUS_CA_SHA256 is `abc`",
            ),
            (
                &[(ENV_CONNECT, "h"), (ENV_CA_SHA256, SHA)],
                &good,
                "PEGASUS_CONNECT is `h`, not host:port",
            ),
        ];
        for (vars, line, want) in cases {
            let err = Bootstrap::from_sources(lookup(vars), stdin(line))
                .unwrap()
                .unwrap_err();
            assert!(err.to_string().starts_with(want), "{err}");
        }
    }

    #[test]
    fn host_of_takes_the_host_of_host_port() {
        assert_eq!(host_of("10.0.0.1:7475"), Some("10.0.0.1"));
        assert_eq!(
            host_of("pegasusd.pegasus.svc:7475"),
            Some("pegasusd.pegasus.svc")
        );
        assert_eq!(host_of("[::1]:7475"), Some("::1"));
        assert_eq!(host_of("::1:7475"), None);
        assert_eq!(host_of("host"), None);
        assert_eq!(host_of("host:0"), None);
        assert_eq!(host_of(":7475"), None);
    }
}
