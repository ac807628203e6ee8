//! The life of one approval request, as a state machine: written (pending), answered once
//! (approved, denied, expired or withdrawn), run once if approved, closed once its call has
//! its result. [`step`] is the one place its rules live; [`crate::read_state`] reads the
//! state from the files, and every write of them ([`crate::answer`], [`crate::mark_ran`],
//! [`crate::close`]) is a step that must be allowed first.

use std::fmt;

use crate::request::Decision;

/// Where one request is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestState {
    /// Written by its worker; no answer yet.
    Pending,
    /// A person said yes; its call has not started.
    Approved {
        /// `--always`: the line or tool was added to the project's allow list too.
        always: bool,
    },
    /// Approved, and marked as run: its call started, and never runs again.
    Ran,
    /// A person said no.
    Denied {
        /// What they said, if anything.
        reason: Option<String>,
    },
    /// Nobody answered in time.
    Expired {
        /// The timeout it had, in seconds.
        after_s: u64,
    },
    /// Its task ended (or moved on) while it waited.
    Withdrawn {
        /// Why, in words.
        why: String,
    },
    /// Its answer file is there but does not load. Answers are written whole and linked into
    /// place, so Pegasus never leaves one so; it is answered (no second answer can be linked)
    /// and never runs.
    Unreadable,
    /// Its call has its result: its files are in `closed/`.
    Closed,
}

impl RequestState {
    /// The state an answer with `decision` puts a pending request in.
    pub fn answered(decision: &Decision) -> RequestState {
        match decision {
            Decision::Approved { always } => RequestState::Approved { always: *always },
            Decision::Denied { reason } => RequestState::Denied {
                reason: reason.clone(),
            },
            Decision::Expired { after_s } => RequestState::Expired { after_s: *after_s },
            Decision::Withdrawn { why } => RequestState::Withdrawn { why: why.clone() },
        }
    }
}

impl fmt::Display for RequestState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RequestState::Pending => "pending",
            RequestState::Approved { .. } => "approved",
            RequestState::Ran => "run",
            RequestState::Denied { .. } => "denied",
            RequestState::Expired { .. } => "expired",
            RequestState::Withdrawn { .. } => "withdrawn",
            RequestState::Unreadable => "answered (its answer does not load)",
            RequestState::Closed => "closed",
        })
    }
}

/// What can happen to a request.
#[derive(Debug, Clone, PartialEq)]
pub enum RequestEvent {
    /// An answer is recorded (a person's, the timeout's, a withdrawal).
    Answered(Decision),
    /// Its approved call is about to run.
    MarkedRan,
    /// Its call has its result: the files move to `closed/`.
    Closed,
}

/// Why a step is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// There is no such request.
    #[error("there is no such request")]
    Unknown,
    /// It has an answer already: exactly one answer ever wins.
    #[error("it was already answered")]
    AlreadyAnswered,
    /// Only an approved call runs.
    #[error("it was not approved")]
    NotApproved,
    /// Its call started already: it never runs twice.
    #[error("its call already ran")]
    AlreadyRan,
    /// It waits for its answer: it is answered (withdrawn, if nothing else) before it closes.
    #[error("it has no answer yet")]
    Unanswered,
    /// It is closed: nothing more happens to it.
    #[error("it is closed")]
    Closed,
}

/// The state `event` moves a request in `state` to, or why it cannot happen.
pub fn step(state: &RequestState, event: &RequestEvent) -> Result<RequestState, Refusal> {
    use RequestEvent as E;
    use RequestState as S;
    match (state, event) {
        (S::Pending, E::Answered(decision)) => Ok(S::answered(decision)),
        (S::Pending, E::MarkedRan) => Err(Refusal::NotApproved),
        (S::Pending, E::Closed) => Err(Refusal::Unanswered),

        (S::Approved { .. }, E::Answered(_)) => Err(Refusal::AlreadyAnswered),
        (S::Approved { .. }, E::MarkedRan) => Ok(S::Ran),
        (S::Approved { .. }, E::Closed) => Ok(S::Closed),

        (S::Ran, E::Answered(_)) => Err(Refusal::AlreadyAnswered),
        (S::Ran, E::MarkedRan) => Err(Refusal::AlreadyRan),
        (S::Ran, E::Closed) => Ok(S::Closed),

        (
            S::Denied { .. } | S::Expired { .. } | S::Withdrawn { .. } | S::Unreadable,
            E::Answered(_),
        ) => Err(Refusal::AlreadyAnswered),
        (
            S::Denied { .. } | S::Expired { .. } | S::Withdrawn { .. } | S::Unreadable,
            E::MarkedRan,
        ) => Err(Refusal::NotApproved),
        (S::Denied { .. } | S::Expired { .. } | S::Withdrawn { .. } | S::Unreadable, E::Closed) => {
            Ok(S::Closed)
        }

        (S::Closed, E::Answered(_) | E::MarkedRan | E::Closed) => Err(Refusal::Closed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn states() -> Vec<RequestState> {
        vec![
            RequestState::Pending,
            RequestState::Approved { always: true },
            RequestState::Ran,
            RequestState::Denied {
                reason: Some("no".into()),
            },
            RequestState::Expired { after_s: 60 },
            RequestState::Withdrawn { why: "gone".into() },
            RequestState::Unreadable,
            RequestState::Closed,
        ]
    }

    fn events() -> Vec<RequestEvent> {
        vec![
            RequestEvent::Answered(Decision::Approved { always: true }),
            RequestEvent::Answered(Decision::Denied {
                reason: Some("no".into()),
            }),
            RequestEvent::Answered(Decision::Expired { after_s: 60 }),
            RequestEvent::Answered(Decision::Withdrawn { why: "gone".into() }),
            RequestEvent::MarkedRan,
            RequestEvent::Closed,
        ]
    }

    /// Every state against every event: what the life of a request allows, written out whole.
    #[test]
    fn every_state_and_event() {
        use RequestState as S;
        let approved = || Ok(S::Approved { always: true });
        let denied = || {
            Ok(S::Denied {
                reason: Some("no".into()),
            })
        };
        let expired = || Ok(S::Expired { after_s: 60 });
        let withdrawn = || Ok(S::Withdrawn { why: "gone".into() });
        let answered = || Err(Refusal::AlreadyAnswered);
        let not_approved = || Err(Refusal::NotApproved);
        let closes = || Ok(S::Closed);
        let closed = || Err(Refusal::Closed);
        // Rows: states() in order; columns: approve, deny, expire, withdraw, mark ran, close.
        // Answered and not approved (denied, expired, withdrawn, unreadable): it only closes.
        let refused = || {
            [
                answered(),
                answered(),
                answered(),
                answered(),
                not_approved(),
                closes(),
            ]
        };
        let table: Vec<[Result<RequestState, Refusal>; 6]> = vec![
            // Pending
            [
                approved(),
                denied(),
                expired(),
                withdrawn(),
                not_approved(),
                Err(Refusal::Unanswered),
            ],
            // Approved
            [
                answered(),
                answered(),
                answered(),
                answered(),
                Ok(S::Ran),
                closes(),
            ],
            // Ran
            [
                answered(),
                answered(),
                answered(),
                answered(),
                Err(Refusal::AlreadyRan),
                closes(),
            ],
            refused(), // Denied
            refused(), // Expired
            refused(), // Withdrawn
            refused(), // Unreadable
            // Closed
            [closed(), closed(), closed(), closed(), closed(), closed()],
        ];
        let (states, events) = (states(), events());
        assert_eq!(table.len(), states.len());
        for (state, row) in states.iter().zip(&table) {
            assert_eq!(row.len(), events.len());
            for (event, want) in events.iter().zip(row) {
                assert_eq!(&step(state, event), want, "{state:?} x {event:?}");
            }
        }
    }
}
