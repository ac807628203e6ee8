//! A task's event log (`tasks/<YYYY-MM-DD>/<id>.jsonl`) and how it folds into a [`Task`].
//!
//! The event file is the truth: the index is a cache of the fold. The store applies a new
//! event to its in-memory task with the same [`apply`] that [`fold`] uses on reload, so what a
//! caller gets back from a write is exactly what a later read will see.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::state::TaskState;
use crate::task::{Task, TaskSpec, TaskUpdate};

/// One line of a task's event file, tagged by `type`.
// `Created` holds a whole task and dwarfs the other variants; it stays unboxed because events
// are read and written a handful at a time and a plain `task: Task` is what callers match on.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TaskEvent {
    /// The first line: the task as created.
    Created {
        /// When.
        ts: DateTime<Utc>,
        /// The task in `draft`.
        task: Task,
    },
    /// A spec frozen as `version` (1, 2, ...); every version stays in the file.
    Spec {
        /// When.
        ts: DateTime<Utc>,
        /// The spec version this freezes.
        version: u32,
        /// The spec, with repo HEADs filled in.
        spec: TaskSpec,
        /// Who froze it.
        actor: String,
    },
    /// A state change, as checked by [`crate::check_transition`].
    Transition {
        /// When.
        ts: DateTime<Utc>,
        /// The state before.
        from: TaskState,
        /// The state after.
        to: TaskState,
        /// Who moved it (`user`, `agent`, `recovery`, ...).
        actor: String,
        /// Why; becomes `stop_reason` for failed/blocked/cancelled.
        reason: String,
    },
    /// One field changed: a [`TaskUpdate`] as its field name and value (see
    /// [`crate::task::UPDATABLE_FIELDS`]), so a field this version does not know is skipped
    /// on fold instead of making the whole line unreadable.
    Update {
        /// When.
        ts: DateTime<Utc>,
        /// The field.
        field: String,
        /// Its new value.
        value: serde_json::Value,
        /// Who changed it.
        actor: String,
    },
}

impl TaskEvent {
    /// When the event was written.
    pub fn ts(&self) -> DateTime<Utc> {
        match self {
            TaskEvent::Created { ts, .. }
            | TaskEvent::Spec { ts, .. }
            | TaskEvent::Transition { ts, .. }
            | TaskEvent::Update { ts, .. } => *ts,
        }
    }

    /// The update an `update` event of task `id` records, when it is one this version reads.
    pub fn update(&self, id: &str) -> Option<TaskUpdate> {
        match self {
            TaskEvent::Update { field, value, .. } => TaskUpdate::parse(id, field, value).ok(),
            _ => None,
        }
    }
}

/// Applies one event (after the first) to `task`. Never fails: the file is the truth, so an
/// event that disagrees with the fold so far (which the store's lock makes impossible unless
/// someone edited the file) is applied anyway and logged, rather than hiding a state the log
/// records.
pub fn apply(task: &mut Task, event: &TaskEvent) {
    match event {
        TaskEvent::Created { .. } => {
            tracing::warn!(task = %task.id, "ignoring a second created record in the event file");
            return;
        }
        TaskEvent::Spec { version, spec, .. } => {
            task.spec_version = *version;
            task.spec = Some(spec.clone());
        }
        TaskEvent::Transition {
            from, to, reason, ..
        } => {
            if *from != task.state {
                tracing::warn!(
                    task = %task.id, recorded = %from, folded = %task.state,
                    "transition recorded from a state the task was not in; following the log"
                );
            }
            let left = task.state;
            task.state = *to;
            if left == TaskState::Running && *to != TaskState::Running {
                task.stage = None;
            }
            if left == TaskState::Blocked && *to != TaskState::Blocked {
                task.question = None;
            }
            if *to != TaskState::Verified {
                task.merge = None;
            }
            match to {
                TaskState::Failed | TaskState::Blocked | TaskState::Cancelled
                    if !reason.is_empty() =>
                {
                    task.stop_reason = Some(reason.clone());
                }
                TaskState::Ready => task.stop_reason = None,
                _ => {}
            }
        }
        TaskEvent::Update { field, value, .. } => {
            let applied = TaskUpdate::parse(&task.id, field, value)
                .and_then(|update| task.apply_update(&update));
            if let Err(e) = applied {
                tracing::warn!(task = %task.id, "skipping an update in the event file: {e}");
                return;
            }
        }
    }
    task.updated = event.ts();
}

/// Folds a whole event file into the task it describes; `None` when it does not start with a
/// `created` record (an empty file from a crash during creation, or not a task file at all).
pub fn fold(events: &[TaskEvent]) -> Option<Task> {
    let (first, rest) = events.split_first()?;
    let TaskEvent::Created { task, .. } = first else {
        return None;
    };
    let mut task = task.clone();
    task.upgrade_legacy();
    for e in rest {
        apply(&mut task, e);
    }
    Some(task)
}
