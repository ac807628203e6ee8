//! What the link's certificates say: the CA, pegasusd's server certificate and a worker's
//! client certificate, and how a project is read back out of a client certificate.
//!
//! All keys are ECDSA P-256: small, fast to make on a worker's start, and what every TLS 1.3
//! stack accepts.

use crate::LinkError;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, PublicKeyData, SanType, SignatureAlgorithm,
};
use rustls::crypto::CryptoProvider;
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use std::sync::Arc;
use std::time::Duration;

/// The one key algorithm of the link.
pub(crate) static KEY_ALG: &SignatureAlgorithm = &rcgen::PKCS_ECDSA_P256_SHA256;

/// A client certificate names its project as the URI SAN `pegasus-project:NAME`: a name no
/// DNS or IP check can confuse with a host, read back when the worker connects with it.
pub const PROJECT_URI_PREFIX: &str = "pegasus-project:";

/// How long a worker's client certificate is valid: long enough for the one connection that
/// follows its enrollment (a TLS session is not re-checked after its handshake). pegasusd
/// accepts it only once, and only until the project's next launch; a relaunch enrolls again.
pub const CLIENT_CERT_VALIDITY: Duration = Duration::from_secs(5 * 60);

/// How long the server certificate is valid; it is re-issued at a start that finds less than
/// [`SERVER_CERT_MARGIN`] left.
const SERVER_CERT_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);

/// A server certificate with less than this left is re-issued at pegasusd's start.
pub(crate) const SERVER_CERT_MARGIN: Duration = Duration::from_secs(30 * 24 * 3600);

/// How long the CA certificate says it is valid. (webpki does not check a trust anchor's dates,
/// so this is for people reading the file.)
const CA_VALIDITY: Duration = Duration::from_secs(20 * 365 * 24 * 3600);

/// Certificates start an hour in the past, so a worker host whose clock is a little behind
/// pegasusd's still accepts them.
const CLOCK_SKEW: Duration = Duration::from_secs(3600);

/// The names every server certificate carries besides the configured ones, so a worker on the
/// same host (and the tests) can connect by loopback.
const ALWAYS_SERVER_NAMES: [&str; 2] = ["localhost", "127.0.0.1"];

/// The ring provider, the one crypto library of the workspace; passed explicitly so no
/// process-wide default has to be installed first.
pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Makes a fresh key pair.
pub(crate) fn new_key() -> Result<KeyPair, LinkError> {
    KeyPair::generate_for(KEY_ALG).map_err(LinkError::cert)
}

/// Lowercase hex SHA-256 of `bytes`: the CA fingerprint a worker is given, and the form
/// tokens are remembered in.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex(ring::digest::digest(&ring::digest::SHA256, bytes).as_ref())
}

/// Lowercase hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// A certificate's `not_before` and `not_after`: valid from a little before now, for `for_`.
fn validity(for_: Duration) -> (time::OffsetDateTime, time::OffsetDateTime) {
    let now = time::OffsetDateTime::now_utc();
    (now - CLOCK_SKEW, now + for_)
}

/// The CA's parameters without dates: also what rebuilds the CA's [`rcgen::Issuer`] from its
/// key at a later start, so the subject written into issued certificates must never change.
pub(crate) fn ca_params() -> CertificateParams {
    let mut p = CertificateParams::default();
    p.distinguished_name = DistinguishedName::new();
    p.distinguished_name
        .push(DnType::CommonName, "Pegasus link CA");
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    p
}

/// A new self-signed CA certificate for `key`.
pub(crate) fn make_ca(key: &KeyPair) -> Result<rcgen::Certificate, LinkError> {
    let mut p = ca_params();
    (p.not_before, p.not_after) = validity(CA_VALIDITY);
    p.self_signed(key).map_err(LinkError::cert)
}

/// The configured names plus [`ALWAYS_SERVER_NAMES`], without repeats.
pub(crate) fn all_server_names(names: &[String]) -> Vec<String> {
    let mut all: Vec<String> = Vec::new();
    for n in names.iter().map(String::as_str).chain(ALWAYS_SERVER_NAMES) {
        if !all.iter().any(|a| a == n) {
            all.push(n.to_string());
        }
    }
    all
}

/// A server certificate for `key`, signed by the CA, for `names` (already completed by
/// [`all_server_names`]).
pub(crate) fn make_server_cert(
    key: &KeyPair,
    issuer: &rcgen::Issuer<'_, KeyPair>,
    names: &[String],
) -> Result<rcgen::Certificate, LinkError> {
    for n in names {
        if ServerName::try_from(n.as_str()).is_err() {
            return Err(LinkError::ServerName { name: n.clone() });
        }
    }
    let mut p = CertificateParams::new(names.to_vec()).map_err(LinkError::cert)?;
    p.distinguished_name = DistinguishedName::new();
    p.distinguished_name.push(DnType::CommonName, "pegasusd");
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    (p.not_before, p.not_after) = validity(SERVER_CERT_VALIDITY);
    p.signed_by(key, issuer).map_err(LinkError::cert)
}

/// Whether `cert` (with `key`) can go on serving: it is `key`'s, chains to `ca`, is still valid
/// [`SERVER_CERT_MARGIN`] from now, and covers every name in `names`.
pub(crate) fn server_cert_serves(
    ca: &CertificateDer<'_>,
    cert: &CertificateDer<'_>,
    key: &KeyPair,
    names: &[String],
) -> bool {
    let Ok(ee) = webpki::EndEntityCert::try_from(cert) else {
        return false;
    };
    if ee.subject_public_key_info().as_ref() != key.subject_public_key_info().as_slice() {
        return false;
    }
    let Ok(anchor) = webpki::anchor_from_trusted_cert(ca) else {
        return false;
    };
    let Some(later) = UnixTime::now()
        .as_secs()
        .checked_add(SERVER_CERT_MARGIN.as_secs())
    else {
        return false;
    };
    let chains = ee
        .verify_for_usage(
            provider().signature_verification_algorithms.all,
            &[anchor],
            &[],
            UnixTime::since_unix_epoch(Duration::from_secs(later)),
            webpki::KeyUsage::server_auth(),
            None,
            None,
        )
        .is_ok();
    chains
        && names.iter().all(|n| {
            ServerName::try_from(n.as_str())
                .is_ok_and(|sn| ee.verify_is_valid_for_subject_name(&sn).is_ok())
        })
}

/// A public key a worker sent in its enrollment, already checked by its proof
/// (`EnrollRequest::proof_holds`): an uncompressed P-256 point.
pub(crate) struct EnrolledKey<'a>(pub(crate) &'a [u8]);

impl PublicKeyData for EnrolledKey<'_> {
    fn der_bytes(&self) -> &[u8] {
        self.0
    }

    fn algorithm(&self) -> &'static SignatureAlgorithm {
        KEY_ALG
    }
}

/// A client certificate for `project`'s worker key, signed by the CA.
pub(crate) fn make_client_cert(
    key: &impl PublicKeyData,
    issuer: &rcgen::Issuer<'_, KeyPair>,
    project: &str,
) -> Result<CertificateDer<'static>, LinkError> {
    let uri = rcgen::string::Ia5String::try_from(format!("{PROJECT_URI_PREFIX}{project}"))
        .map_err(LinkError::cert)?;
    let mut p = CertificateParams::default();
    p.subject_alt_names = vec![SanType::URI(uri)];
    p.distinguished_name = DistinguishedName::new();
    p.distinguished_name.push(DnType::CommonName, project);
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    (p.not_before, p.not_after) = validity(CLIENT_CERT_VALIDITY);
    Ok(p.signed_by(key, issuer)
        .map_err(LinkError::cert)?
        .der()
        .clone())
}

/// The project a client certificate was issued for, if it names a valid one. Only called on a
/// certificate the TLS layer already verified against the CA, so what it names is ours.
pub(crate) fn project_of(cert: &CertificateDer<'_>) -> Option<String> {
    let ee = webpki::EndEntityCert::try_from(cert).ok()?;
    let project = ee
        .valid_uri_names()
        .find_map(|uri| uri.strip_prefix(PROJECT_URI_PREFIX))?;
    pegasus_store::validate_name(project).ok()?;
    Some(project.to_string())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn a_client_certificate_names_its_project_and_chains_to_the_ca() {
        let ca_key = new_key().unwrap();
        let ca = make_ca(&ca_key).unwrap().der().clone();
        let issuer = rcgen::Issuer::new(ca_params(), ca_key);
        let worker = new_key().unwrap();
        let cert = make_client_cert(&worker, &issuer, "web-2").unwrap();
        assert_eq!(project_of(&cert).as_deref(), Some("web-2"));

        let ee = webpki::EndEntityCert::try_from(&cert).unwrap();
        let anchor = webpki::anchor_from_trusted_cert(&ca).unwrap();
        ee.verify_for_usage(
            provider().signature_verification_algorithms.all,
            &[anchor],
            &[],
            UnixTime::now(),
            webpki::KeyUsage::client_auth(),
            None,
            None,
        )
        .unwrap();
    }

    #[test]
    fn the_issuer_rebuilt_from_params_signs_certificates_that_chain_to_the_old_ca() {
        let ca_key = new_key().unwrap();
        let pem = ca_key.serialize_pem();
        let ca = make_ca(&ca_key).unwrap().der().clone();
        // A later start: the key from its file, the parameters from code.
        let issuer = rcgen::Issuer::new(ca_params(), KeyPair::from_pem(&pem).unwrap());
        let key = new_key().unwrap();
        let names = all_server_names(&["10.0.0.1".into(), "pegasusd.pegasus.svc".into()]);
        let cert = make_server_cert(&key, &issuer, &names)
            .unwrap()
            .der()
            .clone();
        assert!(server_cert_serves(&ca, &cert, &key, &names));
        assert!(!server_cert_serves(
            &ca,
            &cert,
            &key,
            &["10.0.0.2".to_string()]
        ));
        let other_key = new_key().unwrap();
        assert!(!server_cert_serves(&ca, &cert, &other_key, &names));
    }

    #[test]
    fn a_certificate_without_a_valid_project_uri_names_no_project() {
        let ca_key = new_key().unwrap();
        let issuer = rcgen::Issuer::new(ca_params(), ca_key);
        let key = new_key().unwrap();
        let server = make_server_cert(&key, &issuer, &all_server_names(&[]))
            .unwrap()
            .der()
            .clone();
        assert_eq!(project_of(&server), None);
        let bad_name = make_client_cert(&key, &issuer, "Not/A/Project").unwrap();
        assert_eq!(project_of(&bad_name), None);
    }

    #[test]
    fn server_names_always_include_loopback_once() {
        assert_eq!(
            all_server_names(&["localhost".into(), "10.0.0.1".into()]),
            vec!["localhost", "10.0.0.1", "127.0.0.1"]
        );
    }

    #[test]
    fn a_name_with_a_port_is_refused_as_a_server_name() {
        let ca_key = new_key().unwrap();
        let issuer = rcgen::Issuer::new(ca_params(), ca_key);
        let err = make_server_cert(&new_key().unwrap(), &issuer, &["host:7475".into()]);
        assert!(matches!(err, Err(LinkError::ServerName { .. })), "{err:?}");
    }
}
