//! The link over real loopback TCP: a pegasusd-side accept loop around [`Authority::accept`]
//! and workers that connect with [`Bootstrap::connect`] or as hand-made (hostile) clients.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use pegasus_proto::worker::{FromWorker, Hello, ToWorker};
use pegasus_proto::{FrameReader, FrameWriter};
use pegasus_remote::{
    Accepted, Authority, Bootstrap, LinkError, Refusal, TokenRefusal, ACCEPT_TIMEOUT,
    TOKEN_VALIDITY,
};
use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// A pegasusd stand-in: every connection's outcome and how long its accept took.
struct Server {
    addr: SocketAddr,
    authority: Arc<Authority>,
    outcomes: mpsc::UnboundedReceiver<(Result<Accepted, Refusal>, Duration)>,
    _dir: tempfile::TempDir,
}

impl Server {
    async fn start() -> Server {
        let dir = tempfile::tempdir().unwrap();
        let authority = Arc::new(Authority::open_or_create(&dir.path().join("tls"), &[]).unwrap());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, outcomes) = mpsc::unbounded_channel();
        let a = authority.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _peer)) = listener.accept().await {
                let (a, tx) = (a.clone(), tx.clone());
                tokio::spawn(async move {
                    let started = Instant::now();
                    let outcome = a.accept(tcp).await;
                    let _ = tx.send((outcome, started.elapsed()));
                });
            }
        });
        Server {
            addr,
            authority,
            outcomes,
            _dir: dir,
        }
    }

    fn tls_dir(&self) -> std::path::PathBuf {
        self._dir.path().join("tls")
    }

    fn connect(&self) -> String {
        self.addr.to_string()
    }

    async fn next(&mut self) -> (Result<Accepted, Refusal>, Duration) {
        tokio::time::timeout(Duration::from_secs(20), self.outcomes.recv())
            .await
            .expect("an accept outcome within 20 s")
            .expect("the accept loop is alive")
    }

    async fn next_refusal(&mut self) -> Refusal {
        match self.next().await.0 {
            Err(r) => r,
            Ok(a) => panic!("expected a refusal, got {a:?}"),
        }
    }
}

/// A plain rustls client trusting the server's CA from its folder, by the name `localhost`:
/// what a hostile or broken client could do, outside [`Bootstrap`].
async fn tls_client(
    server: &Server,
    identity: Option<(CertificateDer<'static>, PrivateKeyDer<'static>)>,
) -> tokio_rustls::client::TlsStream<TcpStream> {
    let ca = CertificateDer::from_pem_file(server.tls_dir().join("ca.pem")).unwrap();
    let mut roots = RootCertStore::empty();
    roots.add(ca).unwrap();
    let builder =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_root_certificates(roots);
    let config = match identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => builder.with_client_auth_cert(vec![cert], key).unwrap(),
    };
    let tcp = TcpStream::connect(server.addr).await.unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap()
}

/// Reads until the server closes; panics if it does not within `within`.
async fn closed_within(stream: &mut (impl AsyncReadExt + Unpin), within: Duration) -> Duration {
    let started = Instant::now();
    let mut buf = [0u8; 256];
    loop {
        match tokio::time::timeout(within, stream.read(&mut buf)).await {
            Err(_) => panic!("still open after {within:?}"),
            Ok(Ok(0)) | Ok(Err(_)) => return started.elapsed(),
            Ok(Ok(_)) => continue,
        }
    }
}

fn hello(project: &str, token: &str) -> FromWorker {
    FromWorker::Hello(Hello {
        protocol_version: pegasus_proto::PROTOCOL_VERSION,
        project: project.into(),
        pid: std::process::id(),
        token: token.into(),
    })
}

#[tokio::test]
async fn a_worker_enrolls_then_speaks_worker_frames_over_mutual_tls_as_its_project() {
    let mut server = Server::start().await;
    let bootstrap = server
        .authority
        .bootstrap(&server.connect(), "web")
        .unwrap();
    assert_eq!(bootstrap.ca_sha256(), server.authority.ca_sha256_hex());
    let token = bootstrap.token().to_string();
    let worker = tokio::spawn(async move {
        let mut stream = bootstrap.connect("web").await.unwrap();
        FrameWriter::new(&mut stream)
            .write(&hello("web", bootstrap.token()))
            .await
            .unwrap();
        FrameReader::new(&mut stream)
            .read::<ToWorker>()
            .await
            .unwrap()
    });

    match server.next().await.0 {
        Ok(Accepted::Enrolled { project }) => assert_eq!(project, "web"),
        other => panic!("expected an enrollment, got {other:?}"),
    }
    let (certified, mut stream) = match server.next().await.0 {
        Ok(Accepted::Worker { certified, stream }) => (certified, stream),
        other => panic!("expected a worker, got {other:?}"),
    };
    assert_eq!(certified.project, "web");
    let Some(FromWorker::Hello(h)) = FrameReader::new(&mut stream).read().await.unwrap() else {
        panic!("expected a hello");
    };
    assert_eq!(h.token, token);
    assert_eq!(certified.check_hello(&h.project, &h.token), Ok(()));
    assert!(certified.check_hello("billing", &h.token).is_err());
    FrameWriter::new(&mut stream)
        .write(&ToWorker::Ping { nonce: 7 })
        .await
        .unwrap();
    assert_eq!(worker.await.unwrap(), Some(ToWorker::Ping { nonce: 7 }));
}

/// Waits for the accept of a connection with a client certificate: its certificate's claims.
async fn next_worker(server: &mut Server) -> pegasus_remote::Certified {
    match server.next().await.0 {
        Ok(Accepted::Worker { certified, .. }) => certified,
        other => panic!("expected a worker, got {other:?}"),
    }
}

#[tokio::test]
async fn a_hello_is_bound_to_the_certificate_of_its_own_enrollment() {
    let mut server = Server::start().await;
    let connect = server.connect();
    let first = server.authority.bootstrap(&connect, "web").unwrap();
    // A second launch's token, seen by someone who holds the first launch's certificate.
    let second = server.authority.bootstrap(&connect, "web").unwrap();
    let identity = first.enroll("web").await.unwrap();
    assert!(matches!(
        server.next().await.0,
        Ok(Accepted::Enrolled { .. })
    ));
    let _stream = first.connect_with(&identity).await.unwrap();
    let certified = next_worker(&mut server).await;
    let refusal = certified.check_hello("web", second.token()).unwrap_err();
    assert_eq!(
        refusal,
        Refusal::HelloNotBound {
            project: "web".into()
        }
    );
    assert_eq!(
        refusal.to_string(),
        "the hello's token is not the one this certificate of project `web` was enrolled with"
    );
    assert_eq!(certified.check_hello("web", first.token()), Ok(()));
}

#[tokio::test]
async fn a_certificate_serves_one_link_and_an_earlier_one_is_revoked() {
    let mut server = Server::start().await;
    let connect = server.connect();
    let first = server.authority.bootstrap(&connect, "web").unwrap();
    let identity = first.enroll("web").await.unwrap();
    server.next().await.0.unwrap();
    let _link = first.connect_with(&identity).await.unwrap();
    next_worker(&mut server).await;

    // The same certificate again, while its link is up: refused, and closed.
    let mut again = first.connect_with(&identity).await.unwrap();
    assert_eq!(
        server.next_refusal().await,
        Refusal::CertificateUsed {
            project: "web".into()
        }
    );
    closed_within(&mut again, Duration::from_secs(2)).await;

    // The project's next launch: the earlier certificate is revoked from its token on, and
    // the new certificate once issued is the one valid one.
    let second = server.authority.bootstrap(&connect, "web").unwrap();
    let _ = first.connect_with(&identity).await;
    assert_eq!(
        server.next_refusal().await,
        Refusal::CertificateRevoked {
            project: "web".into()
        }
    );
    let current = second.enroll("web").await.unwrap();
    server.next().await.0.unwrap();
    let mut old = first.connect_with(&identity).await.unwrap();
    let refusal = server.next_refusal().await;
    assert_eq!(
        refusal,
        Refusal::CertificateRevoked {
            project: "web".into()
        }
    );
    assert!(refusal.to_string().contains("revoked"), "{refusal}");
    closed_within(&mut old, Duration::from_secs(2)).await;
    let _link = second.connect_with(&current).await.unwrap();
    assert_eq!(next_worker(&mut server).await.project, "web");

    // A launch that never connected leaves its certificate revoked by the next one.
    let third = server.authority.bootstrap(&connect, "web").unwrap();
    let unused = third.enroll("web").await.unwrap();
    server.next().await.0.unwrap();
    server.authority.bootstrap(&connect, "web").unwrap();
    let _ = third.connect_with(&unused).await;
    assert!(matches!(
        server.next_refusal().await,
        Refusal::CertificateRevoked { .. }
    ));
}

#[tokio::test]
async fn plain_tcp_is_refused_by_name_and_closed() {
    let mut server = Server::start().await;

    // A worker frame, as a worker built for the Unix socket would send.
    let mut tcp = TcpStream::connect(server.addr).await.unwrap();
    FrameWriter::new(&mut tcp)
        .write(&hello("web", ""))
        .await
        .unwrap();
    assert_eq!(
        server.next_refusal().await,
        Refusal::PlainTcp { first_byte: 0x00 }
    );
    closed_within(&mut tcp, Duration::from_secs(2)).await;

    // HTTP.
    let mut tcp = TcpStream::connect(server.addr).await.unwrap();
    tcp.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let refusal = server.next_refusal().await;
    assert_eq!(refusal, Refusal::PlainTcp { first_byte: b'G' });
    assert!(
        refusal.to_string().starts_with("plain TCP, not TLS"),
        "{refusal}"
    );
    closed_within(&mut tcp, Duration::from_secs(2)).await;
}

#[tokio::test]
async fn a_client_without_certificate_must_enroll_or_is_refused() {
    let mut server = Server::start().await;

    // Says nothing after the handshake and closes.
    let mut tls = tls_client(&server, None).await;
    tls.shutdown().await.unwrap();
    let refusal = server.next_refusal().await;
    assert_eq!(
        refusal,
        Refusal::Enrollment("no certificate and no enrollment request".into())
    );

    // Sends a frame that is no enrollment request.
    let mut tls = tls_client(&server, None).await;
    FrameWriter::new(&mut tls)
        .write(&hello("web", ""))
        .await
        .unwrap();
    let refusal = server.next_refusal().await;
    assert!(
        matches!(&refusal, Refusal::Enrollment(why) if why.starts_with("not an enrollment request")),
        "{refusal}"
    );
    closed_within(&mut tls, Duration::from_secs(2)).await;

    // Announces a huge frame: refused without pegasusd buffering it.
    let mut tls = tls_client(&server, None).await;
    tls.write_all(&(8u32 << 20).to_be_bytes()).await.unwrap();
    tls.write_all(&[0u8; 8192]).await.unwrap();
    tls.flush().await.unwrap();
    let refusal = server.next_refusal().await;
    assert!(matches!(refusal, Refusal::Enrollment(_)), "{refusal}");
}

#[tokio::test]
async fn a_silent_client_is_refused_and_closed_within_the_accept_timeout() {
    let mut server = Server::start().await;
    let mut tcp = TcpStream::connect(server.addr).await.unwrap();
    let took = closed_within(&mut tcp, ACCEPT_TIMEOUT + Duration::from_secs(2)).await;
    assert!(
        took >= ACCEPT_TIMEOUT - Duration::from_millis(500),
        "{took:?}"
    );
    let (outcome, accept_took) = server.next().await;
    assert_eq!(
        outcome.err(),
        Some(Refusal::Timeout {
            during: "the TLS handshake"
        })
    );
    assert!(accept_took <= ACCEPT_TIMEOUT + Duration::from_millis(500));

    // A TLS client that never sends its enrollment: the same 5 s from the connection's start.
    let mut tls = tls_client(&server, None).await;
    closed_within(&mut tls, ACCEPT_TIMEOUT + Duration::from_secs(2)).await;
    let (outcome, accept_took) = server.next().await;
    assert_eq!(
        outcome.err(),
        Some(Refusal::Timeout {
            during: "the enrollment"
        })
    );
    assert!(accept_took <= ACCEPT_TIMEOUT + Duration::from_millis(500));
}

/// Connects a worker with `bootstrap` and returns its error and pegasusd's refusal.
async fn refused(server: &mut Server, bootstrap: Bootstrap, project: &str) -> (LinkError, Refusal) {
    let project = project.to_string();
    let worker = tokio::spawn(async move { bootstrap.connect(&project).await.map(|_| ()) });
    let refusal = server.next_refusal().await;
    let err = worker.await.unwrap().expect_err("the worker is refused");
    (err, refusal)
}

#[tokio::test]
async fn a_token_works_once() {
    let mut server = Server::start().await;
    let bootstrap = server
        .authority
        .bootstrap(&server.connect(), "web")
        .unwrap();
    let again = bootstrap.clone();
    let first = tokio::spawn(async move { bootstrap.connect("web").await.map(|_| ()) });
    assert!(matches!(
        server.next().await.0,
        Ok(Accepted::Enrolled { .. })
    ));
    assert!(matches!(server.next().await.0, Ok(Accepted::Worker { .. })));
    first.await.unwrap().unwrap();

    let (err, refusal) = refused(&mut server, again, "web").await;
    assert_eq!(refusal, Refusal::Token(TokenRefusal::Replayed));
    assert!(
        matches!(&err, LinkError::Refused { reason, .. } if reason == "enrollment token refused: token already used"),
        "{err}"
    );
}

#[tokio::test]
async fn an_expired_token_is_refused() {
    let mut server = Server::start().await;
    let issued = Instant::now()
        .checked_sub(TOKEN_VALIDITY + Duration::from_secs(1))
        .expect("the monotonic clock is past a minute");
    let token = server.authority.issue_token_at("web", issued).unwrap();
    let bootstrap =
        Bootstrap::new(&server.connect(), &token, server.authority.ca_sha256_hex()).unwrap();
    let (err, refusal) = refused(&mut server, bootstrap, "web").await;
    assert_eq!(refusal, Refusal::Token(TokenRefusal::Expired));
    assert!(err.to_string().contains("token expired"), "{err}");
}

#[tokio::test]
async fn another_projects_token_and_an_unknown_token_are_refused() {
    let mut server = Server::start().await;
    let bootstrap = server
        .authority
        .bootstrap(&server.connect(), "billing")
        .unwrap();
    let (err, refusal) = refused(&mut server, bootstrap, "web").await;
    assert_eq!(
        refusal,
        Refusal::Token(TokenRefusal::OtherProject {
            issued_for: "billing".into(),
            asked: "web".into()
        })
    );
    assert!(
        err.to_string().contains("token is for project `billing`"),
        "{err}"
    );

    let unknown = "ab".repeat(32);
    let bootstrap = Bootstrap::new(
        &server.connect(),
        &unknown,
        server.authority.ca_sha256_hex(),
    )
    .unwrap();
    let (_, refusal) = refused(&mut server, bootstrap, "web").await;
    assert_eq!(refusal, Refusal::Token(TokenRefusal::Unknown));
}

#[tokio::test]
async fn a_certificate_of_another_ca_is_refused_by_the_tls_layer() {
    let mut server = Server::start().await;
    // Another CA, and a client certificate from it that names a project exactly as ours would.
    let other_ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::default();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let issuer = rcgen::Issuer::new(ca_params, other_ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::default();
    params.subject_alt_names = vec![rcgen::SanType::URI(
        "pegasus-project:web".to_string().try_into().unwrap(),
    )];
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let cert = params.signed_by(&key, &issuer).unwrap();
    let identity = (
        cert.der().clone(),
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
    );

    // TLS 1.3: the client finishes first, the server then refuses its certificate.
    let mut tls = tls_client(&server, Some(identity)).await;
    let refusal = server.next_refusal().await;
    assert_eq!(refusal, Refusal::BadCertificate("UnknownIssuer".into()));
    assert!(
        refusal.to_string().starts_with("bad client certificate"),
        "{refusal}"
    );
    closed_within(&mut tls, Duration::from_secs(2)).await;
}

#[tokio::test]
async fn a_worker_refuses_a_server_whose_ca_is_not_the_pinned_one() {
    let server = Server::start().await;
    let other = Server::start().await;
    let token = server.authority.issue_token("web").unwrap();
    // The token is right for `server`, but the fingerprint is `other`'s.
    let bootstrap =
        Bootstrap::new(&server.connect(), &token, other.authority.ca_sha256_hex()).unwrap();
    let err = bootstrap.connect("web").await.unwrap_err();
    match &err {
        LinkError::UntrustedServer { reason, .. } => assert_eq!(
            reason,
            "no certificate in its chain has the SHA-256 given in PEGASUS_CA_SHA256"
        ),
        other => panic!("expected an untrusted server, got {other}"),
    }
    assert!(!err.to_string().contains('\n'));
}

#[tokio::test]
async fn a_worker_started_before_pegasusd_listens_connects_once_it_does() {
    let dir = tempfile::tempdir().unwrap();
    let authority = Arc::new(Authority::open_or_create(dir.path(), &[]).unwrap());
    // A free port, released; the listener comes a second after the worker starts trying.
    let addr = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let bootstrap = authority.bootstrap(&addr.to_string(), "web").unwrap();
    let worker = tokio::spawn(async move { bootstrap.connect("web").await.map(|_| ()) });
    tokio::time::sleep(Duration::from_secs(1)).await;
    let listener = TcpListener::bind(addr).await.unwrap();
    for _ in 0..2 {
        let (tcp, _) = listener.accept().await.unwrap();
        authority.accept(tcp).await.unwrap();
    }
    worker.await.unwrap().unwrap();
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn the_tls_folder_is_private_and_its_ca_survives_restarts() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("tls");
    let first = Authority::open_or_create(&dir, &["10.0.0.1".into()]).unwrap();
    assert_eq!(mode(&dir), 0o700);
    for name in ["ca.key", "ca.pem", "server.key", "server.pem"] {
        assert_eq!(mode(&dir.join(name)), 0o600, "{name}");
    }
    let fp = first.ca_sha256_hex().to_string();
    assert_eq!(fp.len(), 64);
    assert!(fp.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')));
    let server_pem = std::fs::read(dir.join("server.pem")).unwrap();

    // A restart with the same names keeps everything; loosened modes are tightened back.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(dir.join("ca.key"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let again = Authority::open_or_create(&dir, &["10.0.0.1".into()]).unwrap();
    assert_eq!(again.ca_sha256_hex(), fp);
    assert_eq!(std::fs::read(dir.join("server.pem")).unwrap(), server_pem);
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&dir.join("ca.key")), 0o600);

    // A name the server certificate does not cover: re-issued, under the same CA.
    let renamed =
        Authority::open_or_create(&dir, &["10.0.0.1".into(), "pegasusd.pegasus.svc".into()])
            .unwrap();
    assert_eq!(renamed.ca_sha256_hex(), fp);
    assert_ne!(std::fs::read(dir.join("server.pem")).unwrap(), server_pem);
    assert_eq!(mode(&dir.join("server.key")), 0o600);
}

#[tokio::test]
async fn a_reissued_server_certificate_carries_the_new_names() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("tls");
    Authority::open_or_create(&dir, &[]).unwrap();
    let authority =
        Arc::new(Authority::open_or_create(&dir, &["pegasusd.pegasus.svc".into()]).unwrap());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let a = authority.clone();
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let _ = a.accept(tcp).await;
    });
    // An ordinary webpki client that checks the name: the new one is in the certificate.
    let ca = CertificateDer::from_pem_file(dir.join("ca.pem")).unwrap();
    let mut roots = RootCertStore::empty();
    roots.add(ca).unwrap();
    let config =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
    let tcp = TcpStream::connect(addr).await.unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("pegasusd.pegasus.svc").unwrap(), tcp)
        .await
        .unwrap();
}

#[test]
fn a_server_name_that_is_no_host_is_refused_at_open() {
    let home = tempfile::tempdir().unwrap();
    let err = Authority::open_or_create(home.path(), &["10.0.0.1:7475".into()])
        .err()
        .expect("a name with a port is refused");
    assert!(matches!(err, LinkError::ServerName { .. }), "{err}");
}

#[test]
fn a_ca_key_and_certificate_that_do_not_match_are_refused() {
    let home = tempfile::tempdir().unwrap();
    let (a, b) = (home.path().join("a"), home.path().join("b"));
    Authority::open_or_create(&a, &[]).unwrap();
    Authority::open_or_create(&b, &[]).unwrap();
    std::fs::copy(b.join("ca.key"), a.join("ca.key")).unwrap();
    let err = Authority::open_or_create(&a, &[])
        .err()
        .expect("a mismatched CA is refused");
    assert!(matches!(err, LinkError::CaMismatch { .. }), "{err}");
}

#[test]
fn a_ca_left_half_made_by_a_crash_is_made_anew() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("tls");
    let first = Authority::open_or_create(&dir, &[]).unwrap();
    let old = first.ca_sha256_hex().to_string();

    // The key without its certificate (killed between the two writes).
    std::fs::remove_file(dir.join("ca.pem")).unwrap();
    let second = Authority::open_or_create(&dir, &[]).unwrap();
    assert_ne!(second.ca_sha256_hex(), old);

    // The certificate without its key: the old certificate goes too, so a crash while the new
    // pair is written cannot leave a mismatch behind.
    let before = second.ca_sha256_hex().to_string();
    std::fs::remove_file(dir.join("ca.key")).unwrap();
    let third = Authority::open_or_create(&dir, &[]).unwrap();
    assert_ne!(third.ca_sha256_hex(), before);
    // And the server certificate follows the new CA.
    let reloaded = Authority::open_or_create(&dir, &[]).unwrap();
    assert_eq!(reloaded.ca_sha256_hex(), third.ca_sha256_hex());
}
