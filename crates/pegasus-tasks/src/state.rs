//! The task state machine (DESIGN.md §7), as one enum and one function.
//!
//! [`check_transition`] is the only place that knows which moves are allowed; the store, the
//! recovery rule and every caller go through it, so a state name can never drift between the
//! code that writes it and the code that checks it.

use crate::board::BoardColumn;
use crate::error::TaskError;

pub use pegasus_proto::TaskState;

/// The board column a state is shown in (DESIGN.md §7: todo / in progress / review / done).
pub fn column(state: TaskState) -> BoardColumn {
    match state {
        TaskState::Draft | TaskState::Planned | TaskState::Ready | TaskState::Blocked => {
            BoardColumn::Todo
        }
        TaskState::Running => BoardColumn::InProgress,
        TaskState::Verifying | TaskState::Verified => BoardColumn::Review,
        TaskState::Done | TaskState::Failed | TaskState::Cancelled => BoardColumn::Done,
    }
}

/// Whether nobody works on a task in `state` until a person asks: `done`, `cancelled`, or
/// `failed` (only a retry takes it back). A code task that is over has its worktree removed at
/// the next boot, and its branch kept and listed when it holds unmerged commits.
pub fn is_over(state: TaskState) -> bool {
    state.is_terminal() || state == TaskState::Failed
}

/// Decides whether task `id` may move from `from` to `to`; the single source of truth for the
/// transition table of DESIGN.md §7:
///
/// * the happy path `draft → planned → ready → running → verifying → verified → done`;
/// * `running → done`, for a task with no verification step (a chat answer has nothing to
///   verify, and forcing it through verifying/verified would only add noise to its log);
/// * `running → failed`, `verifying → failed`, and `failed → ready` (an explicit retry);
/// * `running → blocked` and `blocked → ready`;
/// * for code tasks (DESIGN.md §10): `verifying → running` (verify failed or the base conflicted:
///   back to the agent), `verified → blocked` (the safe merge could not land) and
///   `blocked → verified` (`task merge` after the user fixed what blocked it);
/// * any non-terminal state `→ cancelled`.
///
/// Nothing else, not even staying in the same state: a no-op transition would put a line in
/// the audit log that records nothing. Gates that depend on the task (a frozen spec,
/// finished dependencies) are checked by the store, not here.
pub fn check_transition(id: &str, from: TaskState, to: TaskState) -> Result<(), TaskError> {
    use TaskState::*;
    let allowed = match (from, to) {
        (Draft, Planned)
        | (Planned, Ready)
        | (Ready, Running)
        | (Running, Verifying)
        | (Verifying, Verified)
        | (Verified, Done)
        | (Running, Done)
        | (Running, Failed)
        | (Verifying, Failed)
        | (Failed, Ready)
        | (Running, Blocked)
        | (Blocked, Ready)
        | (Verifying, Running)
        | (Verified, Blocked)
        | (Blocked, Verified) => true,
        (from, Cancelled) => !from.is_terminal(),
        _ => false,
    };
    if allowed {
        Ok(())
    } else {
        Err(TaskError::InvalidTransition {
            id: id.to_string(),
            from,
            to,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use TaskState::*;

    /// The whole table written out as a matrix, independently of `check_transition`'s match:
    /// rows are `from`, columns are `to`, both in `TaskState::ALL` order.
    /// Columns: draft planned ready running verifying verified done failed cancelled blocked.
    const TABLE: [[u8; 10]; 10] = [
        /* draft     */ [0, 1, 0, 0, 0, 0, 0, 0, 1, 0],
        /* planned   */ [0, 0, 1, 0, 0, 0, 0, 0, 1, 0],
        /* ready     */ [0, 0, 0, 1, 0, 0, 0, 0, 1, 0],
        /* running   */ [0, 0, 0, 0, 1, 0, 1, 1, 1, 1],
        /* verifying */ [0, 0, 0, 1, 0, 1, 0, 1, 1, 0],
        /* verified  */ [0, 0, 0, 0, 0, 0, 1, 0, 1, 1],
        /* done      */ [0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        /* failed    */ [0, 0, 1, 0, 0, 0, 0, 0, 1, 0],
        /* cancelled */ [0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        /* blocked   */ [0, 0, 1, 0, 0, 1, 0, 0, 1, 0],
    ];

    #[test]
    fn every_pair_of_the_ten_by_ten_table_is_decided_as_specified() {
        let mut allowed = 0;
        for (i, from) in TaskState::ALL.into_iter().enumerate() {
            for (j, to) in TaskState::ALL.into_iter().enumerate() {
                let got = check_transition("t-1", from, to);
                if TABLE[i][j] == 1 {
                    assert!(got.is_ok(), "{from} -> {to} should be allowed");
                    allowed += 1;
                } else {
                    let err = got.expect_err("refused");
                    assert_eq!(
                        err.to_string(),
                        format!("cannot move task t-1 from {from} to {to}")
                    );
                    assert!(matches!(
                        err,
                        TaskError::InvalidTransition { ref id, from: f, to: t }
                            if id == "t-1" && f == from && t == to
                    ));
                }
            }
        }
        // 15 listed moves + 8 non-terminal states that may be cancelled.
        assert_eq!(allowed, 23);
    }

    #[test]
    fn terminal_states_have_no_way_out() {
        for from in [Done, Cancelled] {
            assert!(from.is_terminal());
            for to in TaskState::ALL {
                assert!(check_transition("x", from, to).is_err());
            }
        }
        assert!(!Failed.is_terminal());
        assert!(!Blocked.is_terminal());
    }

    #[test]
    fn names_round_trip_and_match_serde() {
        for s in TaskState::ALL {
            assert_eq!(TaskState::parse(s.as_str()), Some(s));
            assert_eq!(
                serde_json::to_string(&s).unwrap(),
                format!("\"{}\"", s.as_str())
            );
            assert_eq!(s.to_string(), s.as_str());
        }
        assert_eq!(TaskState::parse("created"), None);
        assert_eq!(TaskState::parse("Running"), None);
    }

    #[test]
    fn columns_group_states_as_the_board_shows_them() {
        use BoardColumn as C;
        let expected = [
            (Draft, C::Todo),
            (Planned, C::Todo),
            (Ready, C::Todo),
            (Running, C::InProgress),
            (Verifying, C::Review),
            (Verified, C::Review),
            (Done, C::Done),
            (Failed, C::Done),
            (Cancelled, C::Done),
            (Blocked, C::Todo),
        ];
        for (s, c) in expected {
            assert_eq!(column(s), c, "{s}");
        }
    }

    #[test]
    fn only_running_and_verifying_are_interrupted_by_a_restart() {
        let hit: Vec<_> = TaskState::ALL
            .into_iter()
            .filter(|s| s.is_interrupted_by_restart())
            .collect();
        assert_eq!(hit, vec![Running, Verifying]);
        // The recovery move must itself be legal, or recovery would be refused.
        for s in hit {
            check_transition("x", s, Failed).unwrap();
        }
    }

    #[test]
    fn a_task_is_over_when_done_cancelled_or_failed() {
        for s in TaskState::ALL {
            assert_eq!(is_over(s), matches!(s, Done | Cancelled | Failed), "{s}");
        }
    }
}
