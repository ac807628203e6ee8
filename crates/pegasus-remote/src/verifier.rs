//! How a worker trusts pegasusd: by the fingerprint of the CA it was launched with, not by a
//! host name.
//!
//! The launcher knows the CA (`PEGASUS_CA_SHA256`) but the worker may reach pegasusd by any
//! address (an IP, a Kubernetes service, a tunnel), so names prove nothing here. The server
//! sends its certificate and the CA certificate; the CA must hash to the pinned value, and the
//! server certificate must chain to it (signature, dates, server-auth usage) as any webpki
//! check would, with the pinned CA as the only trust anchor.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::server::ParsedCertificate;
use rustls::{CertificateError, DigitallySignedStruct, OtherError, RootCertStore, SignatureScheme};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use std::sync::Arc;

/// A [`ServerCertVerifier`] that trusts the chain whose CA hashes to one pinned SHA-256.
#[derive(Debug)]
pub(crate) struct PinnedCa {
    /// Lowercase hex SHA-256 of the CA certificate's DER.
    sha256_hex: String,
    provider: Arc<CryptoProvider>,
}

/// The server sent no certificate with the pinned fingerprint: another pegasusd (another home,
/// a CA made anew since the launch) or not pegasusd at all.
#[derive(Debug, thiserror::Error)]
#[error("no certificate in its chain has the SHA-256 given in PEGASUS_CA_SHA256")]
pub(crate) struct NotThePinnedCa;

impl PinnedCa {
    pub(crate) fn new(sha256_hex: &str, provider: Arc<CryptoProvider>) -> PinnedCa {
        PinnedCa {
            sha256_hex: sha256_hex.to_ascii_lowercase(),
            provider,
        }
    }
}

impl ServerCertVerifier for PinnedCa {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let ca = intermediates
            .iter()
            .find(|c| crate::certs::sha256_hex(c.as_ref()) == self.sha256_hex)
            .ok_or_else(|| {
                rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(
                    NotThePinnedCa,
                ))))
            })?;
        let mut roots = RootCertStore::empty();
        roots.add(ca.clone().into_owned())?;
        let parsed = ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_cert_signed_by_trust_anchor(
            &parsed,
            &roots,
            &[],
            now,
            self.provider.signature_verification_algorithms.all,
        )?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
