//! When to try a failed call again, and how long to wait first.
//!
//! Providers shed load with 429/529/5xx and drop connections under pressure; a retry a moment
//! later usually succeeds. Waits grow exponentially with *full jitter* (a uniform draw between
//! 0 and the exponential bound) so that many workers hit by the same outage do not all come back
//! at the same instant, and a `retry-after` from the provider is the minimum: retrying earlier
//! only earns another 429.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pegasus_proto::llm::LlmError;

/// No wait between attempts is ever longer than this (unless the provider asks for longer).
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// How one attempt failed, which decides whether there is another.
#[derive(Debug, Clone, PartialEq)]
pub enum AttemptError {
    /// Worth another attempt: rate limit, overload, 5xx, timeout, transport error, a stream cut
    /// mid-way, a body we could not read. `retry_after` is the provider's minimum wait.
    Retry {
        /// What went wrong, for the log and for the error if no attempt is left.
        message: String,
        /// The provider's `retry-after`; `None` when it gave none.
        retry_after: Option<Duration>,
        /// What kind of failure it was: what a fallback model's reason says (see
        /// [`crate::fallback::Why`]).
        cause: Cause,
    },
    /// Final: retrying cannot help (a 4xx other than 429, a request we cannot even build).
    Fatal(LlmError),
}

/// The kinds of failure worth another attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// The provider answered with this retryable HTTP status (429, 529, 5xx, 408).
    Status(u16),
    /// No connection could be made (refused, no route, DNS, TLS handshake).
    Connect,
    /// No answer, or no next chunk of a stream, within the timeout.
    Timeout,
    /// The answer began and broke off, or could not be read.
    Broken,
}

impl AttemptError {
    /// A retryable failure of an answer that broke off or could not be read, without a
    /// provider-requested wait.
    pub fn retry(message: impl Into<String>) -> AttemptError {
        AttemptError::because(Cause::Broken, message)
    }

    /// A retryable failure of kind `cause`, without a provider-requested wait.
    pub fn because(cause: Cause, message: impl Into<String>) -> AttemptError {
        AttemptError::Retry {
            message: message.into(),
            retry_after: None,
            cause,
        }
    }
}

/// True for HTTP statuses that mean "try again later": 429 (rate limit), 529 (Anthropic
/// overloaded), every 5xx, and 408 (the server timed the request out: a timeout like ours).
pub fn is_retryable_status(status: u16) -> bool {
    matches!(status, 408 | 429 | 529) || (500..600).contains(&status)
}

/// The exponential bound for the wait before retry number `retry` (0 = the first retry):
/// `base * 2^retry`, capped at [`MAX_BACKOFF`].
pub fn backoff_bound(base: Duration, retry: u32) -> Duration {
    let factor = 1u32.checked_shl(retry.min(20)).unwrap_or(u32::MAX);
    base.checked_mul(factor)
        .unwrap_or(MAX_BACKOFF)
        .min(MAX_BACKOFF)
}

/// The wait before retry number `retry`: a uniform draw in `[0, backoff_bound]` (full jitter),
/// but never less than the provider's `retry_after`.
pub fn retry_wait(base: Duration, retry: u32, retry_after: Option<Duration>) -> Duration {
    let bound = backoff_bound(base, retry);
    let jittered = bound.mul_f64(unit_random());
    jittered.max(retry_after.unwrap_or(Duration::ZERO))
}

/// A number in `[0, 1]` good enough for jitter. `RandomState` is seeded randomly per process;
/// hashing the clock and a counter through it gives a fresh value per call without a `rand`
/// dependency.
fn unit_random() -> f64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = RandomState::new().build_hasher();
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    h.write_u128(nanos);
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    // 53 random bits fill an f64 mantissa exactly.
    (h.finish() >> 11) as f64 / ((1u64 << 53) - 1) as f64
}

/// Parses a `retry-after` header: delta-seconds (`"2"`, also `"1.5"` as some servers send) or
/// an HTTP-date (`"Wed, 21 Oct 2015 07:28:00 GMT"`) relative to `now`. A date in the past is
/// a zero wait; garbage is `None`.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(1e9)));
    }
    let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let at: SystemTime = at.with_timezone(&chrono::Utc).into();
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn retryable_statuses() {
        for s in [408, 429, 500, 502, 503, 504, 529] {
            assert!(is_retryable_status(s), "{s}");
        }
        for s in [400, 401, 403, 404, 413, 422] {
            assert!(!is_retryable_status(s), "{s}");
        }
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        let base = Duration::from_millis(1000);
        assert_eq!(backoff_bound(base, 0), Duration::from_secs(1));
        assert_eq!(backoff_bound(base, 1), Duration::from_secs(2));
        assert_eq!(backoff_bound(base, 4), Duration::from_secs(16));
        assert_eq!(backoff_bound(base, 5), MAX_BACKOFF);
        assert_eq!(backoff_bound(base, 200), MAX_BACKOFF);
        assert_eq!(
            backoff_bound(Duration::from_secs(u64::MAX / 2), 3),
            MAX_BACKOFF
        );
    }

    #[test]
    fn jitter_stays_within_bounds_and_varies() {
        let base = Duration::from_millis(100);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..1000 {
            let w = retry_wait(base, 2, None);
            assert!(w <= Duration::from_millis(400), "{w:?}");
            seen.insert(w);
        }
        assert!(
            seen.len() > 900,
            "jitter should rarely repeat: {}",
            seen.len()
        );
        let mean: f64 = (0..2000).map(|_| unit_random()).sum::<f64>() / 2000.0;
        assert!((0.4..0.6).contains(&mean), "{mean}");
    }

    #[test]
    fn retry_after_is_the_minimum_wait() {
        let base = Duration::from_millis(10);
        for _ in 0..100 {
            let w = retry_wait(base, 0, Some(Duration::from_secs(3)));
            assert_eq!(w, Duration::from_secs(3));
        }
        // A long retry-after beats even the cap.
        let w = retry_wait(base, 0, Some(Duration::from_secs(60)));
        assert_eq!(w, Duration::from_secs(60));
    }

    #[test]
    fn parses_retry_after_seconds_and_http_dates() {
        let now = UNIX_EPOCH + Duration::from_secs(1_445_412_480); // 2015-10-21 07:28:00 UTC
        assert_eq!(parse_retry_after("2", now), Some(Duration::from_secs(2)));
        assert_eq!(parse_retry_after(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after("1.5", now),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:05 GMT", now),
            Some(Duration::from_secs(5))
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:27:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-3", now), None);
    }
}
