//! Whether a ready task may start: every task it depends on must be done (DESIGN.md §7, seed 001).

use crate::state::TaskState;

/// Why a ready task may or may not start.
#[derive(Debug, Clone, PartialEq)]
pub enum Readiness {
    /// Every dependency is done (or there are none).
    Go,
    /// Some dependency is not done; the scheduler skips the task and says why.
    Skip {
        /// Each unfinished dependency as `id (state)`, or `id (not found)`, in `depends_on`
        /// order.
        waiting_on: Vec<String>,
    },
}

/// Decides readiness from each dependency's id and state (`None` when it no longer exists:
/// a missing dependency can never become done, so it blocks rather than being ignored).
pub fn readiness_of<'a>(deps: impl IntoIterator<Item = (&'a str, Option<TaskState>)>) -> Readiness {
    let waiting_on: Vec<String> = deps
        .into_iter()
        .filter_map(|(id, state)| match state {
            Some(TaskState::Done) => None,
            Some(s) => Some(format!("{id} ({s})")),
            None => Some(format!("{id} (not found)")),
        })
        .collect();
    if waiting_on.is_empty() {
        Readiness::Go
    } else {
        Readiness::Skip { waiting_on }
    }
}
