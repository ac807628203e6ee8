//! Where a verified code task is in its merge (DESIGN.md §10): [`MergeState`], the task's `merge`
//! field. It lives only while the task is `verified`: every move out of `verified` ends it.
//!
//! Task files written before the field existed kept the merge in `stop_reason` ("merge
//! pending", "merge requested", "merged, cleaning up"); [`MergeState::from_legacy`] reads those
//! words, so the fold of an old event file and an old index line give the same task as a new
//! one.

use serde::{Deserialize, Serialize};
use std::fmt;

use crate::{TaskEvent, TaskState};

/// Where a verified code task is in its merge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MergeState {
    /// `merge: manual`: waits for `pegasusctl task merge`.
    Pending,
    /// `pegasusctl task merge` asked for it: the worker merges it next.
    Requested,
    /// Merged into every base; the cleanup (worktree, branch) is left. Written before the
    /// cleanup, so a crash inside it finishes the cleanup instead of merging again (the branch
    /// may be gone by then).
    Merged,
}

impl MergeState {
    /// Every state, for exhaustive tests.
    pub const ALL: [MergeState; 3] = [
        MergeState::Pending,
        MergeState::Requested,
        MergeState::Merged,
    ];

    /// The name written in task files (`"merge": "pending"`).
    pub fn as_str(self) -> &'static str {
        match self {
            MergeState::Pending => "pending",
            MergeState::Requested => "requested",
            MergeState::Merged => "merged",
        }
    }

    /// How listings show it, where a stop reason would be; also the words older task files
    /// kept in `stop_reason`.
    pub fn label(self) -> &'static str {
        match self {
            MergeState::Pending => "merge pending",
            MergeState::Requested => "merge requested",
            MergeState::Merged => "merged, cleaning up",
        }
    }

    /// The merge state an older task file wrote as its `stop_reason`, if `reason` is one.
    pub fn from_legacy(reason: &str) -> Option<MergeState> {
        Self::ALL.into_iter().find(|m| m.label() == reason)
    }

    /// Whether the worker merges a verified task in this state now (a pending one waits for
    /// the user).
    pub fn is_due(self) -> bool {
        self != MergeState::Pending
    }
}

impl fmt::Display for MergeState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// Whether a task's last move into `blocked` came from `verified` (its merge could not land),
/// as opposed to a question or a stop while it was still being worked on; read from its
/// history. `pegasusctl task merge` takes such a task back to `verified`, and the dashboard
/// offers Merge by the same rule.
pub fn blocked_from_verified(history: &[TaskEvent]) -> bool {
    history
        .iter()
        .rev()
        .find_map(|e| match e {
            TaskEvent::Transition {
                from,
                to: TaskState::Blocked,
                ..
            } => Some(*from == TaskState::Verified),
            _ => None,
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn each_state_has_one_file_name_and_reads_back_from_its_old_stop_reason() {
        for m in MergeState::ALL {
            let json = serde_json::to_string(&m).unwrap();
            assert_eq!(json, format!("\"{}\"", m.as_str()));
            assert_eq!(serde_json::from_str::<MergeState>(&json).unwrap(), m);
            assert_eq!(MergeState::from_legacy(m.label()), Some(m));
        }
        assert_eq!(
            MergeState::from_legacy("merge pending"),
            Some(MergeState::Pending)
        );
        assert_eq!(
            MergeState::from_legacy("merge requested"),
            Some(MergeState::Requested)
        );
        assert_eq!(
            MergeState::from_legacy("merged, cleaning up"),
            Some(MergeState::Merged)
        );
        assert_eq!(MergeState::from_legacy("budget"), None);
        assert!(serde_json::from_str::<MergeState>("\"merge pending\"").is_err());
    }

    /// The lines an older version wrote for a `merge: manual` task: verified with "merge
    /// pending", then `task merge`, then merged.
    const OLD_FILE: &str = r#"{"type":"created","ts":"2026-01-02T10:00:00Z","task":{"id":"t-20260102-abcdef","project":"p","title":"t","type":"code","state":"draft","created":"2026-01-02T10:00:00Z","updated":"2026-01-02T10:00:00Z"}}
{"type":"transition","ts":"2026-01-02T10:00:01Z","from":"draft","to":"verifying","actor":"pegasus","reason":""}
{"type":"update","ts":"2026-01-02T10:00:02Z","field":"stop_reason","value":"merge pending","actor":"pegasus"}
{"type":"transition","ts":"2026-01-02T10:00:02Z","from":"verifying","to":"verified","actor":"pegasus","reason":"verify passed"}
{"type":"update","ts":"2026-01-02T10:00:03Z","field":"stop_reason","value":"merge requested","actor":"cli"}
{"type":"update","ts":"2026-01-02T10:00:04Z","field":"stop_reason","value":"merged, cleaning up","actor":"pegasus"}
{"type":"update","ts":"2026-01-02T10:00:05Z","field":"stop_reason","value":null,"actor":"pegasus"}
{"type":"transition","ts":"2026-01-02T10:00:05Z","from":"verified","to":"done","actor":"pegasus","reason":"merged (app at 0123456789ab)"}
"#;

    fn fold_first(n: usize) -> crate::Task {
        let events: Vec<crate::TaskEvent> = OLD_FILE
            .lines()
            .take(n)
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        crate::fold(&events).unwrap()
    }

    #[test]
    fn an_old_event_file_folds_its_merge_words_into_the_merge_state() {
        let expect = [
            (4, Some(MergeState::Pending)),
            (5, Some(MergeState::Requested)),
            (6, Some(MergeState::Merged)),
            (8, None),
        ];
        for (n, merge) in expect {
            let t = fold_first(n);
            assert_eq!(
                (t.merge, t.stop_reason.as_deref()),
                (merge, None),
                "{n} lines"
            );
            assert_eq!(t.shown_reason(), merge.map(MergeState::label), "{n} lines");
        }
        assert_eq!(fold_first(8).state, crate::TaskState::Done);
    }

    #[test]
    fn the_merge_state_is_its_own_field_and_ends_with_the_verified_state() {
        let mut t = fold_first(4);
        let u = crate::TaskUpdate::Merge(Some(MergeState::Requested));
        assert_eq!(
            (u.field(), u.value()),
            ("merge", serde_json::json!("requested"))
        );
        t.apply_update(&u).unwrap();
        let v = serde_json::to_value(&t).unwrap();
        assert_eq!(
            (&v["merge"], &v["stop_reason"]),
            (&serde_json::json!("requested"), &serde_json::Value::Null)
        );
        assert_eq!(serde_json::from_value::<crate::Task>(v).unwrap(), t);
        // A move out of verified (a merge that cannot land) ends it; the reason is the block's.
        crate::event::apply(
            &mut t,
            &crate::TaskEvent::Transition {
                ts: chrono::Utc::now(),
                from: crate::TaskState::Verified,
                to: crate::TaskState::Blocked,
                actor: "pegasus".into(),
                reason: "merge conflict in app: a.txt".into(),
            },
        );
        assert_eq!(t.merge, None);
        assert_eq!(t.shown_reason(), Some("merge conflict in app: a.txt"));
        // A task without a merge state writes no `merge` key at all.
        assert!(serde_json::to_value(&t).unwrap().get("merge").is_none());
    }

    #[test]
    fn the_last_move_into_blocked_says_whether_a_merge_was_blocked() {
        let now = chrono::Utc::now();
        let mv = |from: TaskState, to: TaskState| -> TaskEvent {
            serde_json::from_value(serde_json::json!({
                "type": "transition", "ts": now, "actor": "x", "reason": "", "from": from, "to": to,
            }))
            .unwrap()
        };
        use TaskState::*;
        assert!(blocked_from_verified(&[
            mv(Verifying, Verified),
            mv(Verified, Blocked)
        ]));
        assert!(!blocked_from_verified(&[
            mv(Verified, Blocked),
            mv(Blocked, Verified),
            mv(Verified, Done),
            mv(Running, Blocked),
        ]));
        assert!(!blocked_from_verified(&[]));
    }
}
