//! Fallback models (DESIGN.md §5): which models a call may try, in which order, which failures
//! move it on to the next, and which fallbacks answered recently (for `status`, `project show`
//! and the dashboard).
//!
//! A call asks for one model; `fallback:` (config.yml for every project and the MainAgent, a
//! PROJECT.md's replacing it for that project) names the models that answer, in order, when it
//! cannot. "Cannot" is a property of the model, not of the request: its provider stays
//! overloaded, rate-limited, failing or unreachable through every retry, or refuses its key, or
//! does not know it, or it is not usable as configured. A request the provider refuses as
//! malformed, one too long for its model, and every budget refusal end the call as they are:
//! another model would be refused the same, or would spend money the budget did not allow.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use pegasus_proto::ctl::FallbackInfo;
use pegasus_proto::llm::LlmError;

use crate::lock;
use crate::retry::Cause;

/// How long a fallback that answered stays in `status` after its last call.
pub const RECENT: Duration = Duration::from_secs(3600);

/// Why a model of a call's chain did not answer, which decides whether the next one is tried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Why {
    /// Overloaded through every retry: 529 (Anthropic) or 503.
    Overloaded(u16),
    /// Rate-limited (429) through every retry.
    RateLimited,
    /// Another 5xx (or 408) through every retry.
    ServerError(u16),
    /// No connection could be made through every retry.
    Unreachable,
    /// No answer within the timeout through every retry.
    TimedOut,
    /// Every answer broke off or could not be read.
    Broken,
    /// The provider refused the key (401, 403): another provider's key may work.
    KeyRefused(u16),
    /// The provider does not know the model (404).
    NotFound,
    /// The model cannot be called as configured (no key, unknown provider, no price); the
    /// one-line reason.
    NotUsable(String),
    /// A fallback whose context window cannot hold the request with room for an answer.
    TooSmall {
        /// The request's estimated prompt tokens.
        needed: u64,
        /// The model's context window.
        window: u64,
    },
    /// The request's own fault (400, 413, 422, too long for the window, an answer over the
    /// byte limit): another model would be refused the same.
    Request,
    /// A budget has no room: another model would spend what the budget did not allow.
    Budget,
    /// The caller gave the call up.
    Cancelled,
    /// Pegasus's own failure (the call journal): nothing another model could fix.
    Internal,
}

impl Why {
    /// Whether the next model of the chain is tried after this.
    pub fn falls_back(&self) -> bool {
        match self {
            Why::Overloaded(_)
            | Why::RateLimited
            | Why::ServerError(_)
            | Why::Unreachable
            | Why::TimedOut
            | Why::Broken
            | Why::KeyRefused(_)
            | Why::NotFound
            | Why::NotUsable(_)
            | Why::TooSmall { .. } => true,
            Why::Request | Why::Budget | Why::Cancelled | Why::Internal => false,
        }
    }

    /// Why a model's call ended in `error`; `cause` is the kind of the last retryable failure,
    /// when the retries were used up.
    pub fn of(error: &LlmError, cause: Option<Cause>) -> Why {
        match error {
            LlmError::Exhausted { .. } => match cause {
                Some(Cause::Status(s @ (529 | 503))) => Why::Overloaded(s),
                Some(Cause::Status(429)) => Why::RateLimited,
                Some(Cause::Status(s)) => Why::ServerError(s),
                Some(Cause::Connect) => Why::Unreachable,
                Some(Cause::Timeout) => Why::TimedOut,
                Some(Cause::Broken) | None => Why::Broken,
            },
            LlmError::Refused {
                status: s @ (401 | 403),
                ..
            } => Why::KeyRefused(*s),
            LlmError::Refused { status: 404, .. } => Why::NotFound,
            LlmError::Refused { .. }
            | LlmError::ContextTooLong { .. }
            | LlmError::BadResponse { .. } => Why::Request,
            LlmError::MissingKey { .. }
            | LlmError::UnknownProvider { .. }
            | LlmError::BadModel(_)
            | LlmError::Unpriced { .. } => Why::NotUsable(error.to_string()),
            LlmError::BudgetExceeded { .. } => Why::Budget,
            LlmError::Cancelled => Why::Cancelled,
            LlmError::NoModelAnswered { .. } | LlmError::Other(_) => Why::Internal,
        }
    }
}

impl std::fmt::Display for Why {
    /// The reason as `status` shows it after the model's name: `overloaded (529)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Why::Overloaded(s) => write!(f, "overloaded ({s})"),
            Why::RateLimited => write!(f, "rate-limited (429)"),
            Why::ServerError(s) => write!(f, "failing ({s})"),
            Why::Unreachable => write!(f, "unreachable"),
            Why::TimedOut => write!(f, "timed out"),
            Why::Broken => write!(f, "answer broke off"),
            Why::KeyRefused(s) => write!(f, "refused the key ({s})"),
            Why::NotFound => write!(f, "not found (404)"),
            Why::NotUsable(why) => write!(f, "not usable: {why}"),
            Why::TooSmall { needed, window } => write!(
                f,
                "too small for the request (about {needed} tokens, window {window})"
            ),
            Why::Request => write!(f, "refused the request"),
            Why::Budget => write!(f, "over budget"),
            Why::Cancelled => write!(f, "cancelled"),
            Why::Internal => write!(f, "failed inside pegasusd"),
        }
    }
}

/// The models a call may try, in order: `first` (the model asked for), then each of
/// `fallback` not already in the list.
pub fn chain(first: &str, fallback: &[String]) -> Vec<String> {
    let mut models = vec![first.to_string()];
    for m in fallback {
        let m = m.trim();
        if !m.is_empty() && !models.iter().any(|x| x == m) {
            models.push(m.to_string());
        }
    }
    models
}

/// The line followers of a streamed answer see when it restarts after text already reached
/// them: on another model (`to` differs from `from`) or on the same one (a retry).
pub fn restart_mark(from: &str, to: &str, why: &str) -> String {
    if from == to {
        format!("\n\n[the answer restarts: {from} {why}; trying it again]\n\n")
    } else {
        format!("\n\n[the answer restarts on {to}: {from} {why}]\n\n")
    }
}

/// The error of a call whose every model failed: each model tried, with its own error.
pub fn none_answered(tried: Vec<(String, LlmError)>) -> LlmError {
    LlmError::NoModelAnswered {
        tried: tried
            .into_iter()
            .map(|(model, e)| format!("{model}: {e}"))
            .collect(),
    }
}

/// The fallbacks that answered, per project and pair of models, since pegasusd started.
#[derive(Debug, Default)]
pub struct Recent {
    served: Mutex<HashMap<(String, String, String), Served>>,
}

/// What one fallback did for one project.
#[derive(Debug, Clone)]
struct Served {
    why: String,
    calls: u64,
    since: DateTime<Utc>,
    last: DateTime<Utc>,
}

impl Recent {
    /// Notes that `model` answered a call of `project` that asked for `from`, which did not
    /// answer because of `why`. A fallback quiet for longer than [`RECENT`] starts counting
    /// again.
    pub fn record(&self, project: &str, from: &str, model: &str, why: &Why, now: DateTime<Utc>) {
        let key = (project.to_string(), from.to_string(), model.to_string());
        let mut served = lock(&self.served);
        let fresh = Served {
            why: why.to_string(),
            calls: 1,
            since: now,
            last: now,
        };
        match served.get_mut(&key) {
            Some(s) if !stale(s.last, now) => {
                s.calls += 1;
                s.last = now;
                s.why = fresh.why;
            }
            _ => {
                served.insert(key, fresh);
            }
        }
    }

    /// The fallbacks that answered in the last [`RECENT`] as of `now`, of `project` or of
    /// every project (`None`), by project, then by when they began.
    pub fn list(&self, project: Option<&str>, now: DateTime<Utc>) -> Vec<FallbackInfo> {
        let ts = |t: DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::Secs, true);
        let mut served = lock(&self.served);
        served.retain(|_, s| !stale(s.last, now));
        let mut out: Vec<(DateTime<Utc>, FallbackInfo)> = served
            .iter()
            .filter(|((p, _, _), _)| project.is_none_or(|want| want == p))
            .map(|((p, from, model), s)| {
                let info = FallbackInfo {
                    project: p.clone(),
                    model: model.clone(),
                    from: from.clone(),
                    why: s.why.clone(),
                    calls: s.calls,
                    since: ts(s.since),
                    last: ts(s.last),
                };
                (s.since, info)
            })
            .collect();
        out.sort_by(|(a, x), (b, y)| x.project.cmp(&y.project).then(a.cmp(b)));
        out.into_iter().map(|(_, info)| info).collect()
    }
}

/// Whether a fallback last seen at `last` is no longer recent at `now`.
fn stale(last: DateTime<Utc>, now: DateTime<Utc>) -> bool {
    (now - last).to_std().is_ok_and(|age| age > RECENT)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn exhausted() -> LlmError {
        LlmError::Exhausted {
            provider: "fa".into(),
            attempts: 3,
            last: "x".into(),
        }
    }

    fn refused(status: u16) -> LlmError {
        LlmError::Refused {
            provider: "fa".into(),
            status,
            message: "x".into(),
        }
    }

    /// Every failure, what it is called and whether the next model answers: the rule, whole.
    #[test]
    fn which_failures_fall_back() {
        let table: Vec<(LlmError, Option<Cause>, Why, bool)> = vec![
            (
                exhausted(),
                Some(Cause::Status(529)),
                Why::Overloaded(529),
                true,
            ),
            (
                exhausted(),
                Some(Cause::Status(503)),
                Why::Overloaded(503),
                true,
            ),
            (
                exhausted(),
                Some(Cause::Status(429)),
                Why::RateLimited,
                true,
            ),
            (
                exhausted(),
                Some(Cause::Status(500)),
                Why::ServerError(500),
                true,
            ),
            (
                exhausted(),
                Some(Cause::Status(408)),
                Why::ServerError(408),
                true,
            ),
            (exhausted(), Some(Cause::Connect), Why::Unreachable, true),
            (exhausted(), Some(Cause::Timeout), Why::TimedOut, true),
            (exhausted(), Some(Cause::Broken), Why::Broken, true),
            (refused(401), None, Why::KeyRefused(401), true),
            (refused(403), None, Why::KeyRefused(403), true),
            (refused(404), None, Why::NotFound, true),
            (refused(400), None, Why::Request, false),
            (refused(413), None, Why::Request, false),
            (refused(422), None, Why::Request, false),
            (
                LlmError::ContextTooLong {
                    provider: "fa".into(),
                    message: "x".into(),
                },
                None,
                Why::Request,
                false,
            ),
            (
                LlmError::BadResponse {
                    provider: "fa".into(),
                    message: "too large".into(),
                },
                None,
                Why::Request,
                false,
            ),
            (
                LlmError::BudgetExceeded {
                    scope: "daily".into(),
                    limit: 1.0,
                    spent: 1.0,
                },
                None,
                Why::Budget,
                false,
            ),
            (LlmError::Cancelled, None, Why::Cancelled, false),
            (
                LlmError::Other("journal".into()),
                None,
                Why::Internal,
                false,
            ),
            (
                LlmError::NoModelAnswered { tried: vec![] },
                None,
                Why::Internal,
                false,
            ),
        ];
        for (error, cause, why, falls) in table {
            let got = Why::of(&error, cause);
            assert_eq!(got, why, "{error:?} {cause:?}");
            assert_eq!(got.falls_back(), falls, "{error:?}");
        }
        for error in [
            LlmError::MissingKey {
                provider: "fb".into(),
                env: "FB_KEY".into(),
            },
            LlmError::UnknownProvider {
                provider: "fz".into(),
                model: "fz/x".into(),
            },
            LlmError::BadModel("x".into()),
            LlmError::Unpriced {
                model: "fb/x".into(),
            },
        ] {
            let why = Why::of(&error, None);
            assert_eq!(why, Why::NotUsable(error.to_string()));
            assert!(why.falls_back());
        }
        assert!(Why::TooSmall {
            needed: 9,
            window: 8
        }
        .falls_back());
        assert_eq!(Why::Overloaded(529).to_string(), "overloaded (529)");
    }

    #[test]
    fn the_chain_is_the_model_asked_for_then_each_fallback_once() {
        let list = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(chain("fa/a", &[]), list(&["fa/a"]));
        assert_eq!(
            chain("fa/a", &list(&["fa/b", "fa/a", "fo/c", "fa/b"])),
            list(&["fa/a", "fa/b", "fo/c"])
        );
    }

    #[test]
    fn a_fallback_is_recent_for_an_hour_after_its_last_call() {
        let r = Recent::default();
        let t0 = DateTime::parse_from_rfc3339("2026-11-29T12:04:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let min = |m: i64| t0 + chrono::Duration::minutes(m);
        r.record("web", "fa/a", "fa/b", &Why::Overloaded(529), t0);
        r.record("web", "fa/a", "fa/b", &Why::RateLimited, min(30));
        r.record("main", "fa/a", "fa/b", &Why::Unreachable, min(31));
        let web = r.list(Some("web"), min(31));
        assert_eq!(web.len(), 1);
        assert_eq!(
            web[0].line(),
            "fallback fa/b served 2 calls since 12:04 UTC: fa/a rate-limited (429)"
        );
        assert_eq!(web[0].last, "2026-11-29T12:34:00Z");
        let all = r.list(None, min(31));
        assert_eq!(
            all.iter().map(|f| f.project.as_str()).collect::<Vec<_>>(),
            ["main", "web"]
        );
        // An hour after its last call it is gone; a new one counts from 1 again.
        assert!(r.list(Some("web"), min(91)).is_empty());
        r.record("web", "fa/a", "fa/b", &Why::Overloaded(503), min(200));
        let again = r.list(Some("web"), min(200));
        assert_eq!(
            (again[0].calls, again[0].since.as_str()),
            (1, "2026-11-29T15:24:00Z")
        );
    }

    #[test]
    fn a_restart_says_where_and_why() {
        assert_eq!(
            restart_mark("fa/a", "fa/b", "overloaded (529)"),
            "\n\n[the answer restarts on fa/b: fa/a overloaded (529)]\n\n"
        );
        assert!(restart_mark("fa/a", "fa/a", "answer broke off").contains("trying it again"));
    }
}
