//! What each project's worker is doing now — the task it runs and that task's cognitive stage —
//! kept from the event bus for `status` and listings (SPEC §7).
//!
//! It is a bus consumer like any other: if it lags, it forgets stages (the next stage event
//! restores them) and re-reads which task is running from the task files.

use crate::{
    bus::{self, Received},
    supervisor::{lock, Supervisor},
};
use pegasus_proto::{ctl::ProjectInfo, BusBody, BusEvent, TaskState, WorkerEvent};
use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

/// The running task and its stage, per project.
#[derive(Default)]
pub(crate) struct Activity {
    now: Mutex<HashMap<String, Doing>>,
}

#[derive(Default, Clone)]
struct Doing {
    task: Option<String>,
    stage: Option<String>,
}

impl Activity {
    /// Folds one event in.
    fn apply(&self, event: &BusEvent) {
        let mut now = lock(&self.now);
        match &event.body {
            BusBody::Worker(WorkerEvent::Task { task, state, .. }) => {
                let doing = now.entry(event.project.clone()).or_default();
                if *state == TaskState::Running {
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
                now.entry(event.project.clone()).or_default().stage =
                    Some(stage.as_str().to_string());
            }
            BusBody::WorkerState { state, .. } if state != "ready" => {
                now.remove(&event.project);
            }
            BusBody::Crash { .. } => {
                now.remove(&event.project);
            }
            _ => {}
        }
    }

    /// Copies the task and stage into listing rows.
    pub fn fill(&self, infos: &mut [ProjectInfo]) {
        let now = lock(&self.now);
        for info in infos.iter_mut() {
            if let Some(d) = now.get(&info.name) {
                info.task = d.task.clone();
                info.stage = d.stage.clone();
            }
        }
    }

    /// After a lag: stages are dropped, running tasks re-read from the projects' task files.
    fn resync(&self, running: HashMap<String, String>) {
        let mut now = lock(&self.now);
        now.clear();
        for (project, task) in running {
            now.insert(
                project,
                Doing {
                    task: Some(task),
                    stage: None,
                },
            );
        }
    }
}

/// The consumer task: runs until the daemon stops.
pub(crate) async fn run(sup: Arc<Supervisor>) {
    let mut rx = sup.bus.subscribe();
    loop {
        let got = tokio::select! {
            _ = sup.shutdown.cancelled() => return,
            got = bus::next(&mut rx) => got,
        };
        match got {
            None => return,
            Some(Received::Event(event)) => sup.activity.apply(&event),
            Some(Received::Lagged(missed)) => {
                tracing::debug!(missed, "activity tracker lagged; re-reading running tasks");
                let home = sup.home.clone();
                let running = tokio::task::spawn_blocking(move || running_tasks(&home))
                    .await
                    .unwrap_or_default();
                sup.activity.resync(running);
            }
        }
    }
}

/// The running task of every project, from the task files (off the async runtime).
fn running_tasks(home: &pegasus_store::Home) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let Ok(entries) = pegasus_store::scan_projects(home) else {
        return out;
    };
    for entry in entries {
        let dir = home.project_dir(&entry.name);
        let Ok(store) = pegasus_tasks::TaskStore::open(&dir, &entry.name) else {
            continue;
        };
        if let Some(task) = store
            .list()
            .unwrap_or_default()
            .into_iter()
            .find(|t| t.state == TaskState::Running)
        {
            out.insert(entry.name, task.id);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pegasus_proto::Stage;

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
        assert_eq!(rows[0].stage.as_deref(), Some("acting"));
        a.apply(&ev(BusBody::Worker(WorkerEvent::Task {
            task: "t1".into(),
            title: None,
            state: TaskState::Done,
            reason: None,
        })));
        let mut rows = [row()];
        a.fill(&mut rows);
        assert_eq!(
            (rows[0].task.as_deref(), rows[0].stage.as_deref()),
            (None, None)
        );
    }
}
