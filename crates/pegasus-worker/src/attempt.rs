//! A code task's attempt as a state machine: what comes next is
//! [`step`]`(state, event, max_attempts) -> next`, a pure function tested for every state and
//! every event below; [`crate::code_task::run`] only does the work of the state it is in
//! (create the worktrees, run the agent, commit and verify, ask the reviewer, move the task,
//! merge) and feeds back what came of it as an [`Event`]. The [`End`] it reaches is turned into
//! the task's last move and the reply at one place, the edge.
//!
//! ```text
//! Preparing ─► Working(n) ─► Verifying(n) ─► Reviewing(n) ─► Recording ─► Merging ─► Verified
//!                  ▲              │               │
//!                  └─ SendingBack(n) ◄────────────┘  (sent back: n+1, or OutOfAttempts at max)
//! ```
//!
//! Errors stay typed until the edge: a replaced `.git` is [`CodeError::Tampered`], whatever its
//! message says.

use pegasus_agent::AgentError;
use pegasus_code::CodeError;

/// Why the work goes back to the agent: a failed verify, a conflict with the base (new or not
/// resolved), entries Pegasus does not commit, a rejecting review.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Back {
    /// One line: the reason recorded with the move back to `running`.
    pub reason: String,
    /// What the agent is shown.
    pub feedback: String,
}

/// Where a code task's attempt is.
#[derive(Debug)]
pub(crate) enum State {
    /// Its worktrees are created (or resumed) and new ones hydrated.
    Preparing,
    /// The agent works on attempt `attempt` (from 1); `back` says why the last one came back.
    Working { attempt: u32, back: Option<Back> },
    /// The agent answered: its work is committed, the base merged in, `verify` run.
    Verifying { attempt: u32 },
    /// Verify passed: the review gate (passes at once without `review: ROLE`).
    Reviewing { attempt: u32 },
    /// Back to the agent: `verifying → running` is being recorded.
    SendingBack { attempt: u32, back: Back },
    /// Approved: `verifying → verified` is being recorded with `passed` as its reason.
    Recording { passed: &'static str },
    /// Verified: merged now, held for `pegasusctl task merge`, or asked of a person.
    Merging,
}

/// How an attempt ends.
#[derive(Debug)]
pub(crate) enum End {
    /// Its worktrees could not be made or hydrated: the task fails as unstartable.
    Unstartable(StepError),
    /// The agent's loop failed.
    AgentFailed(AgentError),
    /// The agent stopped without handing its work over (the task failed, is blocked on a
    /// question, was cancelled); `answered`: whether it gave an answer.
    Stopped { answered: bool },
    /// Committing, merging the base in or verifying failed (git, or a replaced `.git`).
    Broken(StepError),
    /// Nobody could review the change.
    Unreviewed(String),
    /// Sent back for the `attempt`th time, the last one `max_attempts` allows.
    OutOfAttempts { attempt: u32, back: Back },
    /// The move back to `running` could not be recorded.
    NotSentBack(AgentError),
    /// The move to `verified` could not be recorded.
    NotVerified(AgentError),
    /// Verified, then merged, held or asked: the line saying which.
    Verified(String),
    /// An event the state cannot produce (a bug): the attempt stops where it is.
    Unexpected {
        state: &'static str,
        event: &'static str,
    },
}

/// What came of the work of a state.
#[derive(Debug)]
pub(crate) enum Event {
    /// The worktrees are ready.
    Prepared,
    /// They could not be made or hydrated.
    PrepareFailed(StepError),
    /// The agent's loop failed.
    AgentFailed(AgentError),
    /// The agent stopped without handing its work over.
    AgentStopped { answered: bool },
    /// The agent answered and its task is `verifying`.
    AgentAnswered,
    /// Committed, merged with the base and verified.
    ChecksPassed,
    /// Back to the agent (from the checks or the review).
    SentBack(Back),
    /// Committing, merging or verifying failed.
    ChecksFailed(StepError),
    /// The review approved (or none is asked for): the reason for the move to `verified`.
    Approved(&'static str),
    /// Nobody could review the change.
    ReviewFailed(String),
    /// The move asked for is recorded.
    Moved,
    /// It could not be recorded.
    MoveFailed(AgentError),
    /// The verified task was merged, held or asked: the line saying which.
    MergeDone(String),
}

/// What comes after a step.
#[derive(Debug)]
pub(crate) enum Next {
    /// Another state, whose work is done next.
    Then(State),
    /// The attempt is over.
    End(End),
}

/// A git step's failure, typed until the edge that prints it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StepError {
    /// git, or a repository not usable as declared; [`CodeError::Tampered`] for a replaced
    /// `.git`.
    #[error(transparent)]
    Code(#[from] CodeError),
    /// A new worktree's `hydrate` failed.
    #[error("hydrate failed in repo {repo} ({status}): {output}")]
    Hydrate {
        /// The repo's id.
        repo: String,
        /// How the command ended.
        status: String,
        /// The end of its output, on one line.
        output: String,
    },
    /// The blocking thread running the step did not finish (it panicked).
    #[error("{0}")]
    Panicked(String),
}

impl StepError {
    /// Whether the `.git` of a folder Pegasus made was replaced.
    pub(crate) fn is_tampered(&self) -> bool {
        match self {
            StepError::Code(CodeError::Tampered { .. }) => true,
            StepError::Code(_) | StepError::Hydrate { .. } | StepError::Panicked(_) => false,
        }
    }
}

impl State {
    /// The state's name, for logs and the tests.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            State::Preparing => "preparing",
            State::Working { .. } => "working",
            State::Verifying { .. } => "verifying",
            State::Reviewing { .. } => "reviewing",
            State::SendingBack { .. } => "sending-back",
            State::Recording { .. } => "recording",
            State::Merging => "merging",
        }
    }
}

impl Event {
    /// The event's name, for logs and the tests.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Event::Prepared => "prepared",
            Event::PrepareFailed(_) => "prepare-failed",
            Event::AgentFailed(_) => "agent-failed",
            Event::AgentStopped { .. } => "agent-stopped",
            Event::AgentAnswered => "agent-answered",
            Event::ChecksPassed => "checks-passed",
            Event::SentBack(_) => "sent-back",
            Event::ChecksFailed(_) => "checks-failed",
            Event::Approved(_) => "approved",
            Event::ReviewFailed(_) => "review-failed",
            Event::Moved => "moved",
            Event::MoveFailed(_) => "move-failed",
            Event::MergeDone(_) => "merge-done",
        }
    }
}

/// The one transition function of an attempt (see the module doc). `max_attempts`: how many
/// times the agent may try before a change sent back fails the task.
pub(crate) fn step(state: State, event: Event, max_attempts: u32) -> Next {
    use Event as E;
    use Next::{End as Over, Then};
    use State as S;
    match (state, event) {
        (S::Preparing, E::Prepared) => Then(S::Working {
            attempt: 1,
            back: None,
        }),
        (S::Preparing, E::PrepareFailed(e)) => Over(End::Unstartable(e)),
        (S::Working { .. }, E::AgentFailed(e)) => Over(End::AgentFailed(e)),
        (S::Working { .. }, E::AgentStopped { answered }) => Over(End::Stopped { answered }),
        (S::Working { attempt, .. }, E::AgentAnswered) => Then(S::Verifying { attempt }),
        (S::Verifying { attempt }, E::ChecksPassed) => Then(S::Reviewing { attempt }),
        (S::Verifying { attempt } | S::Reviewing { attempt }, E::SentBack(back)) => {
            send_back(attempt, back, max_attempts)
        }
        (S::Verifying { .. }, E::ChecksFailed(e)) => Over(End::Broken(e)),
        (S::Reviewing { .. }, E::Approved(passed)) => Then(S::Recording { passed }),
        (S::Reviewing { .. }, E::ReviewFailed(why)) => Over(End::Unreviewed(why)),
        (S::SendingBack { attempt, back }, E::Moved) => Then(S::Working {
            attempt: attempt + 1,
            back: Some(back),
        }),
        (S::SendingBack { .. }, E::MoveFailed(e)) => Over(End::NotSentBack(e)),
        (S::Recording { .. }, E::Moved) => Then(S::Merging),
        (S::Recording { .. }, E::MoveFailed(e)) => Over(End::NotVerified(e)),
        (S::Merging, E::MergeDone(line)) => Over(End::Verified(line)),
        // Every other pair: an event the state's work cannot produce. Every state and every
        // event is named here, so a new one is a compile error until it is placed above.
        (
            state @ (S::Preparing
            | S::Working { .. }
            | S::Verifying { .. }
            | S::Reviewing { .. }
            | S::SendingBack { .. }
            | S::Recording { .. }
            | S::Merging),
            event @ (E::Prepared
            | E::PrepareFailed(_)
            | E::AgentFailed(_)
            | E::AgentStopped { .. }
            | E::AgentAnswered
            | E::ChecksPassed
            | E::SentBack(_)
            | E::ChecksFailed(_)
            | E::Approved(_)
            | E::ReviewFailed(_)
            | E::Moved
            | E::MoveFailed(_)
            | E::MergeDone(_)),
        ) => Over(End::Unexpected {
            state: state.name(),
            event: event.name(),
        }),
    }
}

/// A change sent back after attempt `attempt`: to the agent again, or, at the last attempt
/// allowed, the end.
fn send_back(attempt: u32, back: Back, max_attempts: u32) -> Next {
    if attempt >= max_attempts {
        Next::End(End::OutOfAttempts { attempt, back })
    } else {
        Next::Then(State::SendingBack { attempt, back })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn back() -> Back {
        Back {
            reason: "verify failed in app".into(),
            feedback: "The checks failed".into(),
        }
    }

    /// One of every state, in the table's row order (attempt 1 of 3).
    fn states() -> Vec<State> {
        vec![
            State::Preparing,
            State::Working {
                attempt: 1,
                back: None,
            },
            State::Verifying { attempt: 1 },
            State::Reviewing { attempt: 1 },
            State::SendingBack {
                attempt: 1,
                back: back(),
            },
            State::Recording {
                passed: "verify passed",
            },
            State::Merging,
        ]
    }

    /// One of every event, in the table's column order.
    fn events() -> Vec<Event> {
        vec![
            Event::Prepared,
            Event::PrepareFailed(StepError::Panicked("a git step panicked: boom".into())),
            Event::AgentFailed(AgentError::NothingQueued),
            Event::AgentStopped { answered: true },
            Event::AgentAnswered,
            Event::ChecksPassed,
            Event::SentBack(back()),
            Event::ChecksFailed(StepError::Code(CodeError::Tampered {
                dir: "/r/.pegasus/worktrees/task-x".into(),
            })),
            Event::Approved("verify passed"),
            Event::ReviewFailed("the reviewer did not answer".into()),
            Event::Moved,
            Event::MoveFailed(AgentError::Tasks("task t moved meanwhile".into())),
            Event::MergeDone("Merged: app at 0123456789ab.".into()),
        ]
    }

    /// A short name for where a step leads.
    fn name(next: &Next) -> &'static str {
        match next {
            Next::Then(s) => s.name(),
            Next::End(End::Unstartable(_)) => "END unstartable",
            Next::End(End::AgentFailed(_)) => "END agent-failed",
            Next::End(End::Stopped { .. }) => "END stopped",
            Next::End(End::Broken(_)) => "END broken",
            Next::End(End::Unreviewed(_)) => "END unreviewed",
            Next::End(End::OutOfAttempts { .. }) => "END out-of-attempts",
            Next::End(End::NotSentBack(_)) => "END not-sent-back",
            Next::End(End::NotVerified(_)) => "END not-verified",
            Next::End(End::Verified(_)) => "END verified",
            Next::End(End::Unexpected { .. }) => "-",
        }
    }

    /// Every state x every event. Rows: [`states`]; columns: [`events`] (prepared,
    /// prepare-failed, agent-failed, agent-stopped, agent-answered, checks-passed, sent-back,
    /// checks-failed, approved, review-failed, moved, move-failed, merge-done). `-`: the state
    /// cannot produce that event, and the attempt stops as unexpected.
    #[rustfmt::skip]
    const TABLE: [[&str; 13]; 7] = [
        /* preparing    */ ["working", "END unstartable", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-"],
        /* working      */ ["-", "-", "END agent-failed", "END stopped", "verifying", "-", "-", "-", "-", "-", "-", "-", "-"],
        /* verifying    */ ["-", "-", "-", "-", "-", "reviewing", "sending-back", "END broken", "-", "-", "-", "-", "-"],
        /* reviewing    */ ["-", "-", "-", "-", "-", "-", "sending-back", "-", "recording", "END unreviewed", "-", "-", "-"],
        /* sending-back */ ["-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "working", "END not-sent-back", "-"],
        /* recording    */ ["-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "merging", "END not-verified", "-"],
        /* merging      */ ["-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "END verified"],
    ];

    #[test]
    fn every_state_and_event_leads_where_the_table_says() {
        assert_eq!(states().len(), TABLE.len());
        for (row, want_row) in TABLE.iter().enumerate() {
            assert_eq!(events().len(), want_row.len());
            for (col, want) in want_row.iter().enumerate() {
                let state = states().remove(row);
                let event = events().remove(col);
                let (s, e) = (state.name(), event.name());
                let next = step(state, event, 3);
                assert_eq!(name(&next), *want, "{s} x {e}");
                if let Next::End(End::Unexpected { state, event }) = next {
                    assert_eq!((state, event), (s, e), "the unexpected pair is named");
                }
            }
        }
    }

    #[test]
    fn a_change_sent_back_counts_attempts_up_to_the_last_one() {
        // Sent back after attempt 1 of 2: back to the agent as attempt 2, with the reason.
        let next = step(State::Verifying { attempt: 1 }, Event::SentBack(back()), 2);
        let Next::Then(sending) = next else {
            panic!("not sent back: {next:?}");
        };
        let next = step(sending, Event::Moved, 2);
        match next {
            Next::Then(State::Working { attempt, back: b }) => {
                assert_eq!((attempt, b), (2, Some(back())));
            }
            other => panic!("not working again: {other:?}"),
        }
        // Sent back after the last attempt (from the checks or the review): the end, naming it.
        for state in [
            State::Verifying { attempt: 2 },
            State::Reviewing { attempt: 2 },
        ] {
            match step(state, Event::SentBack(back()), 2) {
                Next::End(End::OutOfAttempts { attempt, back: b }) => {
                    assert_eq!((attempt, b), (2, back()));
                }
                other => panic!("not out of attempts: {other:?}"),
            }
        }
    }

    #[test]
    fn what_an_event_carries_reaches_the_next_state_or_the_end() {
        match step(State::Preparing, Event::Prepared, 3) {
            Next::Then(State::Working { attempt, back }) => assert_eq!((attempt, back), (1, None)),
            other => panic!("{other:?}"),
        }
        match step(
            State::Working {
                attempt: 2,
                back: Some(back()),
            },
            Event::AgentAnswered,
            3,
        ) {
            Next::Then(State::Verifying { attempt }) => assert_eq!(attempt, 2),
            other => panic!("{other:?}"),
        }
        match step(
            State::Reviewing { attempt: 1 },
            Event::Approved("verify passed, review approved"),
            3,
        ) {
            Next::Then(State::Recording { passed }) => {
                assert_eq!(passed, "verify passed, review approved")
            }
            other => panic!("{other:?}"),
        }
        match step(
            State::Working {
                attempt: 1,
                back: None,
            },
            Event::AgentStopped { answered: false },
            3,
        ) {
            Next::End(End::Stopped { answered }) => assert!(!answered),
            other => panic!("{other:?}"),
        }
        match step(State::Merging, Event::MergeDone("held".into()), 3) {
            Next::End(End::Verified(line)) => assert_eq!(line, "held"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_replaced_git_is_told_by_its_variant_not_its_words() {
        let tampered = StepError::Code(CodeError::Tampered {
            dir: "/r/.pegasus/worktrees/task-x".into(),
        });
        assert!(tampered.is_tampered());
        // An error whose words start like it is not tampered.
        assert!(!StepError::Panicked("tampered: no".into()).is_tampered());
        assert!(!StepError::Code(CodeError::NoGit("tampered:".into())).is_tampered());
        let hydrate = StepError::Hydrate {
            repo: "app".into(),
            status: "exit 1".into(),
            output: "npm: not found".into(),
        };
        assert!(!hydrate.is_tampered());
        assert_eq!(
            hydrate.to_string(),
            "hydrate failed in repo app (exit 1): npm: not found"
        );
        match step(
            State::Verifying { attempt: 1 },
            Event::ChecksFailed(tampered),
            3,
        ) {
            Next::End(End::Broken(e)) => assert!(e.is_tampered()),
            other => panic!("{other:?}"),
        }
    }
}
