//! `email:` in config.yml (DESIGN.md §17): the e-mail channel's mailbox (IMAP), its way out
//! (SMTP), who is heard and how large a mail may be. This module only reads and checks them;
//! `pegasus-email` does the talking. The passwords are never here: `password_env` names the
//! variable pegasusd takes them from at start, as for the Telegram token.

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// `email:` as written; absent = no e-mail channel.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EmailConfig {
    /// Pegasus's own address (`pegasus@example.com`): mails to it, or to `pegasus+PROJECT@…`,
    /// are read; answers are sent from it.
    pub address: String,
    /// Where mail arrives.
    pub imap: ImapConfig,
    /// Where Pegasus's mail leaves.
    pub smtp: SmtpConfig,
    /// Senders heard (addresses, compared without case); empty = nobody.
    #[serde(default)]
    pub allowed_senders: Vec<String>,
    /// The authserv-id of your mail server's `Authentication-Results` header
    /// (`mx.google.com`, your own MX's name): when set, a mail counts only when the topmost such
    /// header carries this id and says `dkim=pass` for the sender's domain (or `dmarc=pass`
    /// for it), so a forged `From:` alone is not heard. Unset = the From address alone decides
    /// (warned about at start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authserv_id: Option<String>,
    /// Largest mail read, in bytes (default 1 MB); a larger one gets one short answer.
    #[serde(default = "default_max_bytes")]
    pub max_bytes: u64,
    /// Seconds between two looks at the mailbox when the server has no IDLE (default 30).
    #[serde(default = "default_poll_s")]
    pub poll_s: u64,
}

fn default_max_bytes() -> u64 {
    1_000_000
}

fn default_poll_s() -> u64 {
    30
}

/// How a connection is protected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Security {
    /// TLS from the first byte (IMAP 993, SMTP 465).
    Tls,
    /// Plain first, then `STARTTLS` (IMAP 143, SMTP 587); refused when the server lacks it.
    Starttls,
    /// No encryption at all: only to a loopback host.
    None,
}

/// `email.imap`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ImapConfig {
    /// The IMAP server's host name.
    pub host: String,
    /// Its port (default 993).
    #[serde(default = "default_imap_port")]
    pub port: u16,
    /// `tls` (default), `starttls` or `none` (loopback only).
    #[serde(default = "default_security")]
    pub security: Security,
    /// The login name.
    pub user: String,
    /// The variable holding the password (read by pegasusd at start, then removed from its
    /// environment).
    pub password_env: String,
    /// The mailbox read (default `INBOX`).
    #[serde(default = "default_mailbox")]
    pub mailbox: String,
    /// A PEM file of CA certificates trusted besides the public (webpki) roots: for a server
    /// whose certificate your own CA signed. An absolute path, read at load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_ca_file: Option<PathBuf>,
}

/// `email.smtp`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SmtpConfig {
    /// The SMTP server's host name.
    pub host: String,
    /// Its port (default 587).
    #[serde(default = "default_smtp_port")]
    pub port: u16,
    /// `tls`, `starttls` (default) or `none` (loopback only).
    #[serde(default = "default_starttls")]
    pub security: Security,
    /// The login name; empty = send without logging in (a relay that trusts this host).
    #[serde(default)]
    pub user: String,
    /// The variable holding the password (read by pegasusd at start, then removed from its
    /// environment); needed when `user` is set.
    #[serde(default)]
    pub password_env: String,
    /// As `email.imap.tls_ca_file`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_ca_file: Option<PathBuf>,
}

fn default_imap_port() -> u16 {
    993
}

fn default_smtp_port() -> u16 {
    587
}

fn default_security() -> Security {
    Security::Tls
}

fn default_starttls() -> Security {
    Security::Starttls
}

fn default_mailbox() -> String {
    "INBOX".into()
}

/// Largest CA file read: a bundle of a few hundred certificates fits.
const CA_FILE_CAP: u64 = 4 << 20;

/// The certificates of the PEM file `path` (an `email.*.tls_ca_file`), or why there are none:
/// the one reader of that file, for the check at load and for the channel that trusts them.
pub fn read_ca_file(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let shown = path.display();
    if !path.is_absolute() {
        return Err(format!(
            "`{shown}` is not an absolute path; write the whole path of the CA's PEM file, e.g. /etc/ssl/my-ca.pem"
        ));
    }
    let text = crate::read::read_text_limited(path, CA_FILE_CAP).map_err(|e| {
        let what = match e {
            crate::read::ReadError::Io(io) => format!("cannot be read ({io})"),
            other => other.to_string(),
        };
        format!("`{shown}` {what}; name a readable PEM file of your CA's certificate")
    })?;
    let certs = CertificateDer::pem_slice_iter(text.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("`{shown}` is not valid PEM ({e}); it must hold your CA's certificate (-----BEGIN CERTIFICATE-----)"))?;
    if certs.is_empty() {
        return Err(format!(
            "`{shown}` holds no certificate; it must hold your CA's certificate in PEM (-----BEGIN CERTIFICATE-----)"
        ));
    }
    Ok(certs)
}

/// Whether `host` is this machine (`localhost` or a loopback address).
pub fn is_loopback_host(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    bare.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

impl EmailConfig {
    /// The range checks serde cannot express: `(key, what is wrong)`.
    pub fn check(&self) -> Result<(), (String, String)> {
        let bad = |k: &str, m: &str| Err((format!("email.{k}"), m.to_string()));
        let Some((local, domain)) = self.address.rsplit_once('@') else {
            return bad(
                "address",
                "must be an e-mail address such as pegasus@example.com",
            );
        };
        if local.is_empty() || domain.is_empty() || local.contains('+') {
            return bad(
                "address",
                "must be a plain address such as pegasus@example.com (no +tag: Pegasus adds its own)",
            );
        }
        for (side, host, security, ca) in [
            (
                "imap",
                &self.imap.host,
                self.imap.security,
                &self.imap.tls_ca_file,
            ),
            (
                "smtp",
                &self.smtp.host,
                self.smtp.security,
                &self.smtp.tls_ca_file,
            ),
        ] {
            if let Some(Err(m)) = ca.as_deref().map(read_ca_file) {
                return bad(&format!("{side}.tls_ca_file"), &m);
            }
            if host.trim().is_empty() {
                return bad(&format!("{side}.host"), "must name the server");
            }
            if security == Security::None && !is_loopback_host(host) {
                return bad(
                    &format!("{side}.security"),
                    "is `none` for a host that is not this machine: the password and the mail would cross the network in the clear; use `tls` or `starttls` (`none` only to localhost)",
                );
            }
        }
        if self.imap.user.is_empty() || self.imap.password_env.is_empty() {
            return bad(
                "imap",
                "needs `user` and `password_env` (the variable holding the password)",
            );
        }
        if !self.smtp.user.is_empty() && self.smtp.password_env.is_empty() {
            return bad(
                "smtp.password_env",
                "must name the variable holding the password of `smtp.user`",
            );
        }
        if self.max_bytes < 1024 {
            return bad("max_bytes", "must be at least 1024 (bytes)");
        }
        if !(1..=3600).contains(&self.poll_s) {
            return bad("poll_s", "must be from 1 to 3600 seconds");
        }
        if let Some(a) = self.allowed_senders.iter().find(|a| !a.contains('@')) {
            return bad(
                "allowed_senders",
                &format!("{a:?} is not an e-mail address"),
            );
        }
        Ok(())
    }

    /// The variables holding the passwords (IMAP's, and SMTP's when it logs in).
    pub fn password_envs(&self) -> Vec<String> {
        let mut out = vec![self.imap.password_env.clone()];
        if !self.smtp.password_env.is_empty() && !out.contains(&self.smtp.password_env) {
            out.push(self.smtp.password_env.clone());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn cfg(yaml: &str) -> Result<EmailConfig, String> {
        let c: EmailConfig = serde_norway::from_str(yaml).map_err(|e| e.to_string())?;
        c.check().map_err(|(k, m)| format!("{k}: {m}"))?;
        Ok(c)
    }

    const BASE: &str = "address: pegasus@example.com\nimap: {host: imap.example.com, user: p, password_env: PW}\nsmtp: {host: smtp.example.com}\n";

    #[test]
    fn defaults_and_refusals() {
        let c = cfg(BASE).unwrap();
        assert_eq!((c.imap.port, c.imap.security), (993, Security::Tls));
        assert_eq!((c.smtp.port, c.smtp.security), (587, Security::Starttls));
        assert_eq!((c.imap.mailbox.as_str(), c.max_bytes), ("INBOX", 1_000_000));
        assert!(c.allowed_senders.is_empty() && c.authserv_id.is_none());
        assert_eq!(c.password_envs(), vec!["PW".to_string()]);
        let none_remote = BASE.replace("user: p,", "user: p, security: none,");
        assert!(cfg(&none_remote)
            .unwrap_err()
            .contains("email.imap.security"));
        let none_local = none_remote.replace("imap.example.com", "127.0.0.1");
        assert!(cfg(&none_local).is_ok());
        assert!(cfg(&BASE.replace("pegasus@", "pegasus+x@"))
            .unwrap_err()
            .contains("email.address"));
        assert!(cfg(&format!("{BASE}allowed_senders: [nobody]\n"))
            .unwrap_err()
            .contains("allowed_senders"));
        assert!(cfg(&BASE.replace(
            "{host: smtp.example.com}",
            "{host: smtp.example.com, user: u}"
        ))
        .unwrap_err()
        .contains("smtp.password_env"));
        assert!(is_loopback_host("localhost") && is_loopback_host("[::1]"));
        assert!(!is_loopback_host("127.example.com"));
    }

    #[test]
    fn a_ca_file_is_read_at_load_and_a_bad_one_is_named_by_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let pem = dir.path().join("ca.pem");
        std::fs::write(
            &pem,
            "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let with = |side: &str, path: &Path| {
            let key = format!("host: {side}.example.com");
            BASE.replace(&key, &format!("{key}, tls_ca_file: {}", path.display()))
        };
        let c = cfg(&with("imap", &pem)).unwrap();
        assert_eq!(c.imap.tls_ca_file.as_deref(), Some(pem.as_path()));
        assert_eq!(read_ca_file(&pem).unwrap().len(), 1);
        let err = cfg(&with("smtp", &dir.path().join("gone.pem"))).unwrap_err();
        assert!(
            err.starts_with("email.smtp.tls_ca_file: `") && err.contains("does not exist"),
            "{err}"
        );
        assert!(cfg(&with("imap", Path::new("ca.pem")))
            .unwrap_err()
            .contains("not an absolute path"));
        let text = dir.path().join("notes.txt");
        std::fs::write(&text, "not a certificate\n").unwrap();
        assert!(cfg(&with("imap", &text))
            .unwrap_err()
            .contains("holds no certificate"));
        assert!(cfg(&with("imap", dir.path()))
            .unwrap_err()
            .contains("not a regular file"));
    }
}
