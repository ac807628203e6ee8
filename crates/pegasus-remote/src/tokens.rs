//! One-time enrollment tokens, kept in pegasusd's memory only.
//!
//! A token is 32 bytes from the OS's random source, written as 64 hex characters (safe in argv
//! and environment values, DESIGN.md §14). It is remembered by its SHA-256, so the lookup compares
//! digests, not the secret itself, and a memory dump lists no live token.

use crate::certs::{hex, sha256_hex};
use crate::{LinkError, TokenRefusal};
use ring::rand::SecureRandom;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a token is valid after it was issued: the launch has to reach pegasusd by then.
pub const TOKEN_VALIDITY: Duration = Duration::from_secs(60);

/// How long a token is remembered past its validity, so a late replay is named as one
/// instead of as unknown; past this it is forgotten and the book stays small.
const REMEMBERED: Duration = Duration::from_secs(600);

/// One issued token.
struct Entry {
    project: String,
    issued: Instant,
    spent: bool,
}

/// The tokens issued and not yet forgotten, by the hex SHA-256 of the token.
#[derive(Default)]
pub(crate) struct TokenBook {
    entries: Mutex<HashMap<String, Entry>>,
}

impl TokenBook {
    /// Issues a token for `project`, counted as issued at `issued`.
    pub(crate) fn issue(&self, project: &str, issued: Instant) -> Result<String, LinkError> {
        let mut bytes = [0u8; 32];
        ring::rand::SystemRandom::new()
            .fill(&mut bytes)
            .map_err(|_| LinkError::cert("the OS random source failed"))?;
        let token = hex(&bytes);
        let mut entries = self.lock();
        forget_old(&mut entries, Instant::now());
        entries.insert(
            sha256_hex(token.as_bytes()),
            Entry {
                project: project.to_string(),
                issued,
                spent: false,
            },
        );
        Ok(token)
    }

    /// Spends `token` for `project` at `now`. Any presented token that was issued is spent,
    /// whatever the outcome: a token shown for the wrong project or too late has leaked or
    /// misfired, and must not be tried again.
    pub(crate) fn redeem(
        &self,
        token: &str,
        project: &str,
        now: Instant,
    ) -> Result<(), TokenRefusal> {
        let mut entries = self.lock();
        forget_old(&mut entries, now);
        let Some(entry) = entries.get_mut(&sha256_hex(token.as_bytes())) else {
            return Err(TokenRefusal::Unknown);
        };
        if entry.spent {
            return Err(TokenRefusal::Replayed);
        }
        entry.spent = true;
        if now.saturating_duration_since(entry.issued) > TOKEN_VALIDITY {
            return Err(TokenRefusal::Expired);
        }
        if entry.project != project {
            return Err(TokenRefusal::OtherProject {
                issued_for: entry.project.clone(),
                asked: project.to_string(),
            });
        }
        Ok(())
    }

    /// The map, even if a thread panicked while holding it: every write to it is a single
    /// insert or flag, so it is never left half-changed.
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Drops tokens whose validity ended more than [`REMEMBERED`] before `now`.
fn forget_old(entries: &mut HashMap<String, Entry>, now: Instant) {
    entries.retain(|_, e| now.saturating_duration_since(e.issued) <= TOKEN_VALIDITY + REMEMBERED);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn a_token_works_once_for_its_project_within_its_validity() {
        let book = TokenBook::default();
        let t0 = Instant::now();
        let token = book.issue("web", t0).unwrap();
        assert_eq!(token.len(), 64);
        assert!(token.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(
            book.redeem(&token, "web", t0 + Duration::from_secs(59)),
            Ok(())
        );
        assert_eq!(
            book.redeem(&token, "web", t0 + Duration::from_secs(59)),
            Err(TokenRefusal::Replayed)
        );
        assert_eq!(
            book.redeem("not-a-token", "web", t0),
            Err(TokenRefusal::Unknown)
        );
    }

    #[test]
    fn a_late_or_misdirected_token_is_refused_and_spent() {
        let book = TokenBook::default();
        let t0 = Instant::now();
        let late = book.issue("web", t0).unwrap();
        let at = t0 + TOKEN_VALIDITY + Duration::from_millis(1);
        assert_eq!(book.redeem(&late, "web", at), Err(TokenRefusal::Expired));
        assert_eq!(book.redeem(&late, "web", at), Err(TokenRefusal::Replayed));

        let other = book.issue("web", t0).unwrap();
        assert_eq!(
            book.redeem(&other, "billing", t0),
            Err(TokenRefusal::OtherProject {
                issued_for: "web".into(),
                asked: "billing".into()
            })
        );
        assert_eq!(book.redeem(&other, "web", t0), Err(TokenRefusal::Replayed));
    }

    #[test]
    fn tokens_are_forgotten_long_after_they_expired() {
        let book = TokenBook::default();
        let t0 = Instant::now();
        let token = book.issue("web", t0).unwrap();
        let much_later = t0 + TOKEN_VALIDITY + REMEMBERED + Duration::from_secs(1);
        assert_eq!(
            book.redeem(&token, "web", much_later),
            Err(TokenRefusal::Unknown)
        );
        assert!(book.lock().is_empty());
    }
}
