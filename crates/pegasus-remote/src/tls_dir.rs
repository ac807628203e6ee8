//! The TLS folder (`<home>/tls/`): the CA and the server certificate, made on first use and
//! reloaded after.
//!
//! Layout: `ca.key`, `ca.pem`, `server.key`, `server.pem` (PKCS#8 and X.509 PEM, readable with
//! `openssl`). The folder is 0700 and every file 0600; each file is written atomically
//! (`pegasus_store::write_atomic`: temp, fsync, rename, fsync dir), the key before its
//! certificate, so a crash at any point leaves either a pair that belongs together or a
//! missing certificate, which the next start makes again.

use crate::certs;
use crate::LinkError;
use rcgen::{KeyPair, PublicKeyData};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use std::fs;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

const CA_KEY: &str = "ca.key";
const CA_CERT: &str = "ca.pem";
const SERVER_KEY: &str = "server.key";
const SERVER_CERT: &str = "server.pem";

/// What the folder holds once loaded: the CA (as an issuer, for client certificates) and the
/// server's certificate and key.
pub(crate) struct TlsFiles {
    pub(crate) ca_cert: CertificateDer<'static>,
    pub(crate) issuer: rcgen::Issuer<'static, KeyPair>,
    pub(crate) server_cert: CertificateDer<'static>,
    pub(crate) server_key: KeyPair,
}

/// Loads the folder, making what is missing: a CA if there is none, a server certificate if
/// there is none or the one there does not serve `server_names` (plus loopback) for at least
/// [`certs::SERVER_CERT_MARGIN`] more, under the CA.
pub(crate) fn open_or_create(dir: &Path, server_names: &[String]) -> Result<TlsFiles, LinkError> {
    private_dir(dir)?;
    // Leftovers of a write that a kill interrupted; a minute old, so not a write in progress.
    pegasus_store::remove_stale_temps(dir, std::time::Duration::from_secs(60));

    let (ca_cert, ca_key) = match (read_key(dir, CA_KEY)?, read_cert(dir, CA_CERT)?) {
        (Some(key), Some(cert)) => {
            let spki = webpki::EndEntityCert::try_from(&cert)
                .map(|c| c.subject_public_key_info())
                .map_err(|_| LinkError::BadFile {
                    path: dir.join(CA_CERT),
                    what: "certificate",
                })?;
            if spki.as_ref() != key.subject_public_key_info().as_slice() {
                return Err(LinkError::CaMismatch {
                    dir: dir.to_path_buf(),
                });
            }
            (cert, key)
        }
        _ => {
            // A certificate left without its key goes first: a crash after the new key is
            // written must not leave an old certificate beside it, which would read as a
            // mismatch instead of as a CA to finish making.
            remove_if_present(&dir.join(CA_CERT))?;
            make_pair(dir, CA_KEY, CA_CERT, certs::make_ca)?
        }
    };
    let issuer = rcgen::Issuer::new(certs::ca_params(), ca_key);

    let names = certs::all_server_names(server_names);
    let existing = match (
        read_key(dir, SERVER_KEY).ok().flatten(),
        read_cert(dir, SERVER_CERT).ok().flatten(),
    ) {
        (Some(key), Some(cert)) if certs::server_cert_serves(&ca_cert, &cert, &key, &names) => {
            Some((cert, key))
        }
        // Missing, unreadable, for other names, near its end or of another CA: the server
        // certificate is ours to remake at any time.
        _ => None,
    };
    let (server_cert, server_key) = match existing {
        Some(pair) => pair,
        None => make_pair(dir, SERVER_KEY, SERVER_CERT, |key| {
            certs::make_server_cert(key, &issuer, &names)
        })?,
    };
    Ok(TlsFiles {
        ca_cert,
        issuer,
        server_cert,
        server_key,
    })
}

/// Makes `dir` (and missing parents) and makes sure it is 0700 even if it already existed:
/// the CA key inside is what lets anyone serve as any project's worker.
fn private_dir(dir: &Path) -> Result<(), LinkError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(LinkError::io(dir))?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(LinkError::io(dir))
}

/// Removes `path` if it exists.
fn remove_if_present(path: &Path) -> Result<(), LinkError> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(LinkError::io(path)(e)),
        _ => Ok(()),
    }
}

/// Reads `dir/name`, `None` if it does not exist.
fn read(dir: &Path, name: &str) -> Result<Option<(PathBuf, Vec<u8>)>, LinkError> {
    let path = dir.join(name);
    match fs::read(&path) {
        Ok(bytes) => Ok(Some((path, bytes))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(LinkError::io(path)(e)),
    }
}

/// Reads a private key, tightening a file someone loosened back to 0600.
fn read_key(dir: &Path, name: &str) -> Result<Option<KeyPair>, LinkError> {
    let Some((path, bytes)) = read(dir, name)? else {
        return Ok(None);
    };
    let loose = fs::metadata(&path)
        .map_err(LinkError::io(&path))?
        .permissions()
        .mode()
        & 0o077
        != 0;
    if loose {
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600))
            .map_err(LinkError::io(&path))?;
    }
    let bad = || LinkError::BadFile {
        path: path.clone(),
        what: "private key",
    };
    let text = std::str::from_utf8(&bytes).map_err(|_| bad())?;
    KeyPair::from_pem(text).map(Some).map_err(|_| bad())
}

/// Reads a PEM certificate.
fn read_cert(dir: &Path, name: &str) -> Result<Option<CertificateDer<'static>>, LinkError> {
    let Some((path, bytes)) = read(dir, name)? else {
        return Ok(None);
    };
    CertificateDer::from_pem_slice(&bytes)
        .map(Some)
        .map_err(|_| LinkError::BadFile {
            path,
            what: "certificate",
        })
}

/// A new key and its certificate (`make`), written key first, the certificate as PEM as
/// `openssl x509` reads it; returns the certificate's DER and the key.
fn make_pair(
    dir: &Path,
    key_name: &str,
    cert_name: &str,
    make: impl FnOnce(&KeyPair) -> Result<rcgen::Certificate, LinkError>,
) -> Result<(CertificateDer<'static>, KeyPair), LinkError> {
    let key = certs::new_key()?;
    let cert = make(&key)?;
    write(&dir.join(key_name), key.serialize_pem().as_bytes())?;
    write(&dir.join(cert_name), cert.pem().as_bytes())?;
    Ok((cert.der().clone(), key))
}

/// Writes through the one atomic-write helper of the workspace (files 0600).
fn write(path: &Path, bytes: &[u8]) -> Result<(), LinkError> {
    pegasus_store::write_atomic(path, bytes)
        .map_err(|e| LinkError::io(path)(std::io::Error::other(e.to_string())))
}
