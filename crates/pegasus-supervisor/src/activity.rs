//! What each project's worker is doing now — the task it runs and that task's cognitive stage —
//! kept from the event bus for `status` and listings (DESIGN.md §7).
//!
//! It observes the event bus (see `crate::bus`): every event is folded in inside `publish`, in
//! bus order, so it never lags and never needs a task of its own.

use crate::supervisor::lock;
use pegasus_proto::{
    ctl::ProjectInfo, BusBody, BusEvent, Stage, TaskState, WorkerEvent, WorkerState,
};
use std::{collections::HashMap, sync::Mutex};

/// The running task and its stage, per project.
#[derive(Default)]
pub(crate) struct Activity {
    now: Mutex<HashMap<String, Doing>>,
}

#[derive(Default, Clone)]
struct Doing {
    task: Option<String>,
    stage: Option<Stage>,
}

impl Activity {
    /// Folds one event in.
    pub fn apply(&self, event: &BusEvent) {
        let mut now = lock(&self.now);
        match &event.body {
            BusBody::Worker(WorkerEvent::Task {
                task,
                state,
                reason,
                ..
            }) => {
                let doing = now.entry(event.project.clone()).or_default();
                // A task waiting for a person's yes (DESIGN.md §11) still occupies its worker: the
                // idle suspend must not stop the call that waits.
                if *state == TaskState::Blocked && reason.as_deref() == Some("approval") {
                    doing.stage = None;
                } else if *state == TaskState::Running {
                    *doing = Doing {
                        task: Some(task.clone()),
                        stage: None,
                    };
                } else if doing.task.as_deref() == Some(task.as_str()) || doing.task.is_none() {
                    *doing = Doing::default();
                }
            }
            // A subagent's stages are its parent's: only the task's own agent (depth 0) counts.
            BusBody::Worker(WorkerEvent::Stage {
                depth: 0, stage, ..
            }) => {
                now.entry(event.project.clone()).or_default().stage = Some(*stage);
            }
            BusBody::WorkerState { state, .. } if *state != WorkerState::Ready => {
                now.remove(&event.project);
            }
            BusBody::Crash { .. } => {
                now.remove(&event.project);
            }
            _ => {}
        }
    }

    /// Copies the task and stage into listing rows.
    /// Whether `project`'s worker is running a task now (the one answer the slot's idle
    /// suspend and `status` both read).
    pub fn running(&self, project: &str) -> bool {
        lock(&self.now)
            .get(project)
            .is_some_and(|d| d.task.is_some())
    }

    pub fn fill(&self, infos: &mut [ProjectInfo]) {
        let now = lock(&self.now);
        for info in infos.iter_mut() {
            if let Some(d) = now.get(&info.name) {
                info.task = d.task.clone();
                info.stage = d.stage;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(body: BusBody) -> BusEvent {
        BusEvent {
            seq: 1,
            ts_ms: 0,
            project: "p".into(),
            body,
        }
    }

    fn row() -> ProjectInfo {
        pegasus_store::project_info::from_entry(
            &pegasus_store::ScanEntry {
                name: "p".into(),
                dir: std::path::PathBuf::new(),
                project: Err(pegasus_store::StoreError::Invalid("x".into())),
            },
            0.0,
        )
    }

    #[test]
    fn the_running_task_and_its_top_level_stage_are_shown_until_the_task_stops() {
        let a = Activity::default();
        a.apply(&ev(BusBody::Worker(WorkerEvent::Task {
            task: "t1".into(),
            title: None,
            state: TaskState::Running,
            reason: None,
        })));
        a.apply(&ev(BusBody::Worker(WorkerEvent::Stage {
            task: Some("t1".into()),
            depth: 0,
            stage: Stage::Acting,
        })));
        a.apply(&ev(BusBody::Worker(WorkerEvent::Stage {
            task: Some("t1".into()),
            depth: 1,
            stage: Stage::Reasoning,
        })));
        let mut rows = [row()];
        a.fill(&mut rows);
        assert_eq!(rows[0].task.as_deref(), Some("t1"));
        assert_eq!(rows[0].stage, Some(Stage::Acting));
        a.apply(&ev(BusBody::Worker(WorkerEvent::Task {
            task: "t1".into(),
            title: None,
            state: TaskState::Done,
            reason: None,
        })));
        let mut rows = [row()];
        a.fill(&mut rows);
        assert_eq!((rows[0].task.as_deref(), rows[0].stage), (None, None));
    }

    #[test]
    fn a_task_waiting_for_approval_still_occupies_its_worker() {
        let a = Activity::default();
        let task = |state, reason: Option<&str>| {
            ev(BusBody::Worker(WorkerEvent::Task {
                task: "t1".into(),
                title: None,
                state,
                reason: reason.map(str::to_string),
            }))
        };
        a.apply(&task(TaskState::Running, None));
        a.apply(&task(TaskState::Blocked, Some("approval")));
        assert!(
            a.running("p"),
            "idle suspend must not stop the waiting call"
        );
        a.apply(&task(TaskState::Blocked, Some("question")));
        assert!(!a.running("p"));
    }
}
