//! Which buttons a page offers: only the actions the daemon would accept in the present state.
//! Nothing here decides a transition itself: a project's verbs are asked of the lifecycle's
//! one function ([`pegasus_store::transition`], DESIGN.md §4), a task's of the task table
//! ([`pegasus_tasks::check_transition`], DESIGN.md §7) with the move the daemon's handler makes
//! for that verb (`crates/pegasus-supervisor/src/handlers/task.rs`), and whether a blocked
//! task is blocked in its merge by the rule the handler uses
//! ([`pegasus_tasks::blocked_from_verified`]).

use pegasus_store::{ProjectStatus, Verb};
use pegasus_tasks::{check_transition, MergeState, Task, TaskState};

/// The lifecycle verbs a project in `status` takes, in the lifecycle's order; none for a
/// project whose PROJECT.md does not load.
pub(crate) fn lifecycle_verbs(status: Option<ProjectStatus>) -> Vec<Verb> {
    let Some(status) = status else {
        return Vec::new();
    };
    Verb::ALL
        .into_iter()
        .filter(|v| pegasus_store::transition("", status, *v).is_ok())
        .collect()
}

/// A lifecycle verb as its button says it.
pub(crate) fn verb_label(verb: Verb) -> &'static str {
    match verb {
        Verb::Suspend => "Suspend",
        Verb::Resume => "Resume",
        Verb::Complete => "Mark complete",
        Verb::Archive => "Archive",
    }
}

/// What a verb does that cannot be undone, asked before it is sent.
pub(crate) fn verb_confirm(verb: Verb, project: &str) -> Option<String> {
    match verb {
        Verb::Complete => Some(format!(
            "Mark {project} complete? Its worker stops for good."
        )),
        Verb::Archive => Some(format!("Archive {project}? It leaves the everyday lists.")),
        Verb::Suspend | Verb::Resume => None,
    }
}

/// A button on a task card; the path segment of its `POST /api/tasks/:id/<verb>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TaskAction {
    Answer,
    Approve,
    Merge,
    Retry,
    Cancel,
}

impl TaskAction {
    pub(crate) const ALL: [TaskAction; 5] = [
        TaskAction::Answer,
        TaskAction::Approve,
        TaskAction::Merge,
        TaskAction::Retry,
        TaskAction::Cancel,
    ];

    pub(crate) fn verb(self) -> &'static str {
        match self {
            TaskAction::Answer => "answer",
            TaskAction::Approve => "approve",
            TaskAction::Merge => "merge",
            TaskAction::Retry => "retry",
            TaskAction::Cancel => "cancel",
        }
    }

    pub(crate) fn label(self) -> &'static str {
        match self {
            TaskAction::Answer => "Answer",
            TaskAction::Approve => "Start it",
            TaskAction::Merge => "Merge",
            TaskAction::Retry => "Retry",
            TaskAction::Cancel => "Cancel",
        }
    }

    /// Whether the daemon takes this action on `task` now. `merge_blocked`: the task's last
    /// move into `blocked` came from `verified` (its merge could not land; see
    /// [`pegasus_tasks::blocked_from_verified`]).
    fn allowed(self, task: &Task, merge_blocked: bool) -> bool {
        use TaskState::*;
        let moves = |from: TaskState, to: TaskState| {
            task.state == from && check_transition(&task.id, from, to).is_ok()
        };
        match self {
            // `task answer`: a blocked task with a question goes back to ready.
            TaskAction::Answer => task.question.is_some() && moves(Blocked, Ready),
            // `task approve`: planned → ready.
            TaskAction::Approve => moves(Planned, Ready),
            // `task merge`: a verified task whose merge is not under way already, or one whose
            // merge was blocked (blocked → verified).
            TaskAction::Merge => {
                (task.state == Verified && !task.merge.is_some_and(MergeState::is_due))
                    || (merge_blocked && moves(Blocked, Verified))
            }
            // `task retry`: failed → ready.
            TaskAction::Retry => moves(Failed, Ready),
            TaskAction::Cancel => check_transition(&task.id, task.state, Cancelled).is_ok(),
        }
    }
}

/// The actions a task card offers, in [`TaskAction::ALL`] order.
pub(crate) fn task_actions(task: &Task, merge_blocked: bool) -> Vec<TaskAction> {
    TaskAction::ALL
        .into_iter()
        .filter(|a| a.allowed(task, merge_blocked))
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn a_project_offers_only_the_verbs_its_status_allows() {
        use ProjectStatus::*;
        let want = [
            (Active, vec![Verb::Suspend, Verb::Complete]),
            (Suspended, vec![Verb::Resume, Verb::Complete]),
            (Completed, vec![Verb::Archive]),
            (Archived, vec![]),
        ];
        for (status, verbs) in want {
            assert_eq!(lifecycle_verbs(Some(status)), verbs, "{status}");
        }
        assert!(lifecycle_verbs(None).is_empty());
    }

    fn task(state: TaskState) -> Task {
        let now = chrono::Utc::now();
        serde_json::from_value(serde_json::json!({
            "id": "t-20260101-abcdef", "project": "p", "title": "t", "type": "task",
            "state": state, "created": now, "updated": now,
        }))
        .unwrap()
    }

    #[test]
    fn a_task_offers_only_the_actions_its_state_allows() {
        use TaskAction::*;
        use TaskState::*;
        let want = [
            (Draft, vec![Cancel]),
            (Planned, vec![Approve, Cancel]),
            (Ready, vec![Cancel]),
            (Running, vec![Cancel]),
            (Verifying, vec![Cancel]),
            (Verified, vec![Merge, Cancel]),
            (Done, vec![]),
            (Failed, vec![Retry, Cancel]),
            (Cancelled, vec![]),
            (Blocked, vec![Cancel]),
        ];
        for (state, actions) in want {
            assert_eq!(task_actions(&task(state), false), actions, "{state}");
        }
        // A blocked task with a question is answered; one whose merge was blocked is merged.
        let mut asked = task(Blocked);
        asked.question = Some("which colour?".into());
        assert_eq!(task_actions(&asked, false), vec![Answer, Cancel]);
        assert_eq!(task_actions(&task(Blocked), true), vec![Merge, Cancel]);
        // A merge already asked for is not offered again.
        let mut merging = task(Verified);
        merging.merge = Some(MergeState::Requested);
        assert_eq!(task_actions(&merging, false), vec![Cancel]);
        merging.merge = Some(MergeState::Pending);
        assert_eq!(task_actions(&merging, false), vec![Merge, Cancel]);
    }
}
