//! The two connections of the e-mail channel: IMAP (async-imap over a TCP, TLS or STARTTLS
//! stream) and SMTP (lettre), each as `email.imap` / `email.smtp` say, TLS with the webpki
//! roots (and the CA of `tls_ca_file`) and the same rustls (ring) the rest of pegasusd links.
//! Where TLS is asked for it is never skipped: a certificate that fails the check, or a
//! server without STARTTLS, ends the connection before anything else is sent.

use crate::mail::Head;
use async_imap::types::UnsolicitedResponse;
use futures_util::TryStreamExt;
use lettre::address::Envelope;
use lettre::message::header::ContentType;
use lettre::message::Mailbox;
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::Certificate;
use lettre::transport::smtp::client::{Tls, TlsParameters};
use lettre::transport::smtp::extension::ClientId;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use pegasus_store::email::{read_ca_file, ImapConfig, Security, SmtpConfig};
use rustls::pki_types::CertificateDer;
use std::fmt::Debug;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// Any stream an IMAP session runs over.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send + Debug {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + Debug> Io for T {}

/// A logged-in IMAP session.
pub type ImapSession = async_imap::Session<Box<dyn Io>>;

/// How long connecting and each command may take before the connection counts as lost.
pub const IO_TIMEOUT: Duration = Duration::from_secs(60);

/// The CA certificates of `email.<side>.tls_ca_file`, none when it is not set; a file that
/// became unreadable since the config was loaded says so with its key.
fn extra_roots(side: &str, file: Option<&Path>) -> Result<Vec<CertificateDer<'static>>, String> {
    match file {
        None => Ok(Vec::new()),
        Some(f) => read_ca_file(f).map_err(|e| format!("email.{side}.tls_ca_file: {e}")),
    }
}

/// The TLS client of `email.imap`: the webpki roots and the certificates of its
/// `tls_ca_file`, with the same rustls (ring) the rest of pegasusd links.
pub fn imap_tls(cfg: &ImapConfig) -> Result<TlsConnector, String> {
    let mut roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    for cert in extra_roots("imap", cfg.tls_ca_file.as_deref())? {
        roots.add(cert).map_err(|e| {
            format!("email.imap.tls_ca_file: a certificate in it cannot be trusted ({e}); it must hold your CA's certificate")
        })?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(TlsConnector::from(Arc::new(config)))
}

async fn tls(tls: &TlsConnector, host: &str, tcp: TcpStream) -> Result<Box<dyn Io>, String> {
    let name = rustls::pki_types::ServerName::try_from(host.to_string())
        .map_err(|e| format!("{host} is not a host name TLS can check: {e}"))?;
    let stream = tls.connect(name, tcp).await.map_err(|e| {
        untrusted("imap", host, &e).unwrap_or_else(|| format!("TLS with {host}: {e}"))
    })?;
    Ok(Box::new(stream))
}

/// What to say when `e` (or an error it wraps) is the server's certificate failing the check:
/// not signed by a trusted CA, or not for `host`; `None` for any other error.
fn untrusted(side: &str, host: &str, e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut next = Some(e);
    while let Some(err) = next {
        let inner = err
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|i| i.downcast_ref::<rustls::Error>());
        if let Some(rustls::Error::InvalidCertificate(why)) =
            err.downcast_ref::<rustls::Error>().or(inner)
        {
            let what = match why {
                rustls::CertificateError::NotValidForName
                | rustls::CertificateError::NotValidForNameContext { .. } => format!(
                    "is not valid for {host}; set email.{side}.host to a name the certificate carries"
                ),
                rustls::CertificateError::UnknownIssuer => format!(
                    "is not signed by a trusted CA; if your own CA signed it, set email.{side}.tls_ca_file to that CA's PEM file"
                ),
                _ => format!(
                    "was refused (expired, revoked or malformed?); renew it, or set email.{side}.tls_ca_file to the CA that signed it"
                ),
            };
            return Some(format!(
                "the TLS certificate of {host} {what} (nothing was sent without TLS; {why:?})"
            ));
        }
        next = err.source();
    }
    None
}

/// Connects, logs in and selects the mailbox; the session, the mailbox's UIDVALIDITY and
/// UIDNEXT, and whether the server offers IDLE.
pub async fn imap_open(
    cfg: &ImapConfig,
    tls_client: &TlsConnector,
    password: &str,
) -> Result<(ImapSession, u32, u32, bool), String> {
    let run = async {
        let tcp = TcpStream::connect((cfg.host.as_str(), cfg.port))
            .await
            .map_err(|e| format!("cannot connect to {}:{}: {e}", cfg.host, cfg.port))?;
        let stream: Box<dyn Io> = match cfg.security {
            Security::Tls => tls(tls_client, &cfg.host, tcp).await?,
            Security::None => Box::new(tcp),
            Security::Starttls => {
                let mut client = async_imap::Client::new(tcp);
                greeting(&mut client).await?;
                // Asked whatever the server's CAPABILITY says: without STARTTLS's OK nothing
                // else is sent, so a server that dropped it (or a man in the middle who
                // removed it) never sees the password in the clear.
                client
                    .run_command_and_check_ok("STARTTLS", None)
                    .await
                    .map_err(|e| {
                        format!(
                            "the server did not accept STARTTLS ({e}), and Pegasus does not log in without TLS; use `security: tls` (port 993) if the server offers that"
                        )
                    })?;
                tls(tls_client, &cfg.host, client.into_inner()).await?
            }
        };
        let mut client = async_imap::Client::new(stream);
        if cfg.security != Security::Starttls {
            greeting(&mut client).await?;
        }
        let mut session = client.login(&cfg.user, password).await.map_err(|(e, _)| {
            format!(
                "login as {} refused ({e}); check email.imap.user and the password in ${}",
                cfg.user, cfg.password_env
            )
        })?;
        let caps = session
            .capabilities()
            .await
            .map_err(|e| format!("CAPABILITY failed: {e}"))?;
        let idle = caps.has_str("IDLE");
        let mailbox = session
            .select(&cfg.mailbox)
            .await
            .map_err(|e| format!("cannot select mailbox {:?}: {e}", cfg.mailbox))?;
        let validity = mailbox
            .uid_validity
            .ok_or_else(|| format!("mailbox {:?} has no UIDVALIDITY", cfg.mailbox))?;
        let next = mailbox.uid_next.unwrap_or(1);
        Ok((session, validity, next, idle))
    };
    tokio::time::timeout(IO_TIMEOUT, run).await.map_err(|_| {
        format!(
            "{}:{} did not answer within {} s",
            cfg.host,
            cfg.port,
            IO_TIMEOUT.as_secs()
        )
    })?
}

async fn greeting<T: AsyncRead + AsyncWrite + Unpin + Send + Debug>(
    client: &mut async_imap::Client<T>,
) -> Result<(), String> {
    match client.read_response().await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err("the server closed the connection before greeting".into()),
        Err(e) => Err(format!("no IMAP greeting: {e}")),
    }
}

/// The UIDs above `after` and their sizes, lowest first.
pub async fn new_uids(session: &mut ImapSession, after: u32) -> Result<Vec<(u32, u32)>, String> {
    let run = async {
        let fetches: Vec<_> = session
            .uid_fetch(
                format!("{}:*", after.saturating_add(1)),
                "(UID RFC822.SIZE)",
            )
            .await
            .map_err(|e| format!("UID FETCH failed: {e}"))?
            .try_collect()
            .await
            .map_err(|e| format!("UID FETCH failed: {e}"))?;
        let mut out: Vec<(u32, u32)> = fetches
            .iter()
            .filter_map(|f| Some((f.uid?, f.size.unwrap_or(0))))
            .filter(|(uid, _)| *uid > after)
            .collect();
        out.sort_unstable();
        out.dedup();
        Ok(out)
    };
    tokio::time::timeout(IO_TIMEOUT, run)
        .await
        .map_err(|_| "UID FETCH took too long".to_string())?
}

/// One mail's bytes: the whole of it, or only its header (`whole` false, for one too large
/// to read).
pub async fn fetch(session: &mut ImapSession, uid: u32, whole: bool) -> Result<Vec<u8>, String> {
    let query = if whole {
        "BODY.PEEK[]"
    } else {
        "BODY.PEEK[HEADER]"
    };
    let run = async {
        let fetches: Vec<_> = session
            .uid_fetch(uid.to_string(), query)
            .await
            .map_err(|e| format!("UID FETCH {uid} failed: {e}"))?
            .try_collect()
            .await
            .map_err(|e| format!("UID FETCH {uid} failed: {e}"))?;
        let f = fetches
            .iter()
            .find(|f| f.uid == Some(uid))
            .ok_or_else(|| format!("mail {uid} is gone"))?;
        let bytes = if whole { f.body() } else { f.header() };
        Ok(bytes.unwrap_or_default().to_vec())
    };
    tokio::time::timeout(IO_TIMEOUT, run)
        .await
        .map_err(|_| format!("UID FETCH {uid} took too long"))?
}

/// Which of `ids` (Message-IDs without angle brackets) are in the mailbox: Pegasus's own
/// copies of what it sent (DESIGN.md §17).
pub async fn present(session: &mut ImapSession, ids: &[String]) -> Result<Vec<String>, String> {
    let mut found = Vec::new();
    for id in ids {
        let query = format!("HEADER Message-ID \"<{}>\"", id.replace(['"', '\\'], ""));
        let hits = tokio::time::timeout(IO_TIMEOUT, session.uid_search(query))
            .await
            .map_err(|_| "UID SEARCH took too long".to_string())?
            .map_err(|e| format!("UID SEARCH failed: {e}"))?;
        if !hits.is_empty() {
            found.push(id.clone());
        }
    }
    Ok(found)
}

/// Waits for the mailbox to change (IDLE, at most `wait`), or just `wait` without IDLE; the
/// session back, or why it broke. A new mail the server announced between commands, or while
/// IDLE was being entered (async-imap hands those to `unsolicited_responses`, not to the IDLE
/// wait), ends the wait at once.
pub async fn wait(session: ImapSession, idle: bool, wait: Duration) -> Result<ImapSession, String> {
    if news(|| session.unsolicited_responses.try_recv().ok()) {
        return Ok(session);
    }
    if !idle {
        tokio::time::sleep(wait).await;
        return Ok(session);
    }
    let said = session.unsolicited_responses.clone();
    let mut handle = session.idle();
    tokio::time::timeout(IO_TIMEOUT, handle.init())
        .await
        .map_err(|_| "IDLE was not accepted in time".to_string())?
        .map_err(|e| format!("IDLE failed: {e}"))?;
    if !news(|| said.try_recv().ok()) {
        let (fut, _stop) = handle.wait_with_timeout(wait);
        fut.await.map_err(|e| format!("IDLE broke: {e}"))?;
    }
    tokio::time::timeout(IO_TIMEOUT, handle.done())
        .await
        .map_err(|_| "DONE was not answered in time".to_string())?
        .map_err(|e| format!("leaving IDLE failed: {e}"))
}

/// Whether the server announced a new mail since last asked (what else it said is dropped).
fn news(mut next: impl FnMut() -> Option<UnsolicitedResponse>) -> bool {
    let mut news = false;
    while let Some(r) = next() {
        news |= matches!(
            r,
            UnsolicitedResponse::Exists(_) | UnsolicitedResponse::Recent(_)
        );
    }
    news
}

/// The SMTP side.
pub struct Smtp {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: Mailbox,
    /// `email.smtp.host` and `security`, for what an error says.
    host: String,
    security: Security,
}

impl Smtp {
    /// A transport as `cfg` says, sending as `address`.
    pub fn new(cfg: &SmtpConfig, password: Option<&str>, address: &str) -> Result<Smtp, String> {
        let from: Mailbox = address
            .parse()
            .map_err(|e| format!("email.address {address:?}: {e}"))?;
        let roots = extra_roots("smtp", cfg.tls_ca_file.as_deref())?;
        let params = || {
            let mut b = TlsParameters::builder(cfg.host.clone());
            for der in &roots {
                let cert = Certificate::from_der(der.to_vec())
                    .map_err(|e| format!("email.smtp.tls_ca_file: {e}"))?;
                b = b.add_root_certificate(cert);
            }
            b.build_rustls()
                .map_err(|e| format!("TLS for {}: {e}", cfg.host))
        };
        let tls = match cfg.security {
            Security::Tls => Tls::Wrapper(params()?),
            Security::Starttls => Tls::Required(params()?),
            Security::None => Tls::None,
        };
        // EHLO with the address's domain: a server may refuse a bare `localhost`.
        let domain = address
            .rsplit_once('@')
            .map(|(_, d)| d)
            .unwrap_or("localhost");
        let mut b = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(cfg.host.as_str())
            .port(cfg.port)
            .hello_name(ClientId::Domain(domain.to_string()))
            .tls(tls)
            .timeout(Some(IO_TIMEOUT));
        if !cfg.user.is_empty() {
            b = b.credentials(Credentials::new(
                cfg.user.clone(),
                password.unwrap_or_default().to_string(),
            ));
        }
        Ok(Smtp {
            transport: b.build(),
            from,
            host: cfg.host.clone(),
            security: cfg.security,
        })
    }

    /// Connects and greets (over TLS as configured) without sending: what pegasusd checks at
    /// start, so a server it cannot use is named before the first mail waits on it.
    pub async fn check(&self) -> Result<(), String> {
        match self.transport.test_connection().await {
            Ok(true) => Ok(()),
            Ok(false) => Err("the server did not answer the greeting".into()),
            Err(e) => Err(self.describe(&e)),
        }
    }

    /// One line for an SMTP error: a certificate or a missing STARTTLS said plainly.
    fn describe(&self, e: &lettre::transport::smtp::Error) -> String {
        if let Some(m) = untrusted("smtp", &self.host, e) {
            return m;
        }
        // lettre's own refusal when the server's EHLO lacks STARTTLS under `Tls::Required`.
        if self.security == Security::Starttls
            && e.is_client()
            && e.to_string().contains("STARTTLS is not supported")
        {
            return "the server does not offer STARTTLS, and Pegasus does not send without TLS; use `security: tls` (port 465) if the server offers that".into();
        }
        e.to_string()
    }

    /// Sends one plain-text mail with `head`; `Ok` once the server accepted it. The envelope
    /// also names Pegasus's own address (a blind copy, no header), so what was sent can be
    /// found in its mailbox by Message-ID after a crash ([`present`]).
    pub async fn send(&self, head: &Head, text: &str) -> Result<(), SendError> {
        let to: Mailbox = head
            .to
            .parse()
            .map_err(|e| SendError::Refused(format!("{:?} is no address: {e}", head.to)))?;
        let envelope = Envelope::new(
            Some(self.from.email.clone()),
            vec![to.email.clone(), self.from.email.clone()],
        )
        .map_err(|e| SendError::Refused(format!("no envelope for {:?}: {e}", head.to)))?;
        let mut b = Message::builder()
            .from(self.from.clone())
            .to(to)
            .subject(head.subject.clone())
            .message_id(Some(format!("<{}>", head.message_id)))
            .header(ContentType::TEXT_PLAIN)
            .envelope(envelope);
        if let Some(id) = &head.in_reply_to {
            b = b.in_reply_to(format!("<{id}>"));
        }
        if !head.references.is_empty() {
            let refs: Vec<String> = head.references.iter().map(|r| format!("<{r}>")).collect();
            b = b.references(refs.join(" "));
        }
        let body = if text.trim().is_empty() {
            "(empty)"
        } else {
            text
        };
        let message = b
            .body(body.to_string())
            .map_err(|e| SendError::Refused(format!("cannot build the mail: {e}")))?;
        match self.transport.send(message).await {
            Ok(_) => Ok(()),
            Err(e) if e.is_permanent() => Err(SendError::Refused(self.describe(&e))),
            Err(e) => Err(SendError::Failed(self.describe(&e))),
        }
    }
}

/// Why a mail did not go.
#[derive(Debug)]
pub enum SendError {
    /// For good (a 5xx, a bad address): retrying does not help.
    Refused(String),
    /// For now (connection, 4xx): tried again.
    Failed(String),
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SendError::Refused(e) => write!(f, "refused: {e}"),
            SendError::Failed(e) => write!(f, "failed: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_certificate_is_named_with_what_to_set() {
        let wrapped = |e: rustls::CertificateError| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                rustls::Error::InvalidCertificate(e),
            )
        };
        let said = |e: &std::io::Error| untrusted("smtp", "mail.home.lan", e);
        let unknown = said(&wrapped(rustls::CertificateError::UnknownIssuer));
        assert!(
            unknown.as_deref().is_some_and(|m| m
                .starts_with("the TLS certificate of mail.home.lan is not signed by a trusted CA")
                && m.contains("set email.smtp.tls_ca_file")),
            "{unknown:?}"
        );
        let name = said(&wrapped(rustls::CertificateError::NotValidForName));
        assert!(
            name.as_deref()
                .is_some_and(|m| m.contains("is not valid for mail.home.lan; set email.smtp.host")),
            "{name:?}"
        );
        let expired = said(&wrapped(rustls::CertificateError::Expired));
        assert!(
            expired.as_deref().is_some_and(|m| m.contains("renew it")),
            "{expired:?}"
        );
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        assert_eq!(said(&refused), None);
    }
}
