//! Unique, provider-looking identifiers (`msg_…`, `toolu_…`, `chatcmpl-…`, `call_…`).
//!
//! Clients sometimes key state by these ids (tool call ids in particular), so
//! they must never repeat within a process, even across several servers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

static COUNTER: AtomicU64 = AtomicU64::new(0);

fn seed() -> u64 {
    static SEED: OnceLock<u64> = OnceLock::new();
    *SEED.get_or_init(|| {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        nanos ^ (u64::from(std::process::id()) << 32)
    })
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// `prefix` followed by 24 base62 characters. The first 11 characters are a
/// bijective encoding of a per-call counter, which guarantees uniqueness.
pub(crate) fn unique(prefix: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut out = String::from(prefix);
    let mut x = splitmix(seed().wrapping_add(n));
    for _ in 0..11 {
        out.push(ALPHABET[(x % 62) as usize] as char);
        x /= 62;
    }
    let mut y = splitmix(seed() ^ n.rotate_left(17));
    for _ in 0..13 {
        out.push(ALPHABET[(y % 62) as usize] as char);
        y = splitmix(y);
    }
    out
}

/// Seconds since the Unix epoch, for OpenAI's `created`.
pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A per-process secret the fake signs thinking blocks with, so a signature cannot be made up
/// by a client and an altered block is caught, as the real API does.
fn secret() -> u64 {
    static SECRET: OnceLock<u64> = OnceLock::new();
    *SECRET.get_or_init(|| splitmix(seed() ^ 0x005E_C2E7))
}

fn fnv(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ secret();
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    splitmix(h)
}

/// The signature of a thinking block's text (what the real API puts in `signature`).
pub(crate) fn thinking_signature(thinking: &str) -> String {
    format!(
        "fakesig{:016x}{:016x}",
        fnv(thinking.as_bytes()),
        fnv(b"v1")
    )
}

/// An opaque `redacted_thinking` payload the fake will recognise as its own.
pub(crate) fn redacted_data(seed_text: &str) -> String {
    let body = format!("{:016x}", fnv(seed_text.as_bytes()));
    format!("fakeredacted{body}{:016x}", fnv(body.as_bytes()))
}

/// Whether `data` is a redacted payload this process issued, unchanged.
pub(crate) fn redacted_is_genuine(data: &str) -> bool {
    data.strip_prefix("fakeredacted")
        .and_then(|rest| Some((rest.get(..16)?, rest.get(16..)?)))
        .is_some_and(|(body, mac)| format!("{:016x}", fnv(body.as_bytes())) == mac)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique() {
        let ids: std::collections::HashSet<String> =
            (0..10_000).map(|_| unique("toolu_")).collect();
        assert_eq!(ids.len(), 10_000);
        assert!(ids.iter().all(|i| i.len() == "toolu_".len() + 24));
    }
}
