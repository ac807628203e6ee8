//! How many tool calls of each project wait for a person's yes (DESIGN.md §11), for `status`,
//! `project list` and the dashboard, without a directory read per project per listing.
//!
//! The requests are files under each project's `approvals/` (written by its worker, answered
//! by pegasusd's handler); this keeps each project's count as the files said at the last
//! moment they could have changed: counted once at start, and again for a project whenever its
//! bus carries an approval or an answer, its worker changes state (a worker that died before
//! its event reached us is counted when the next one starts), or a handler answers one.

use crate::supervisor::lock;
use pegasus_proto::{ctl::ProjectInfo, BusBody, BusEvent, WorkerEvent};
use std::{collections::HashMap, path::PathBuf, sync::Mutex};

/// Waiting approvals per project.
pub(crate) struct ApprovalCounts {
    projects: PathBuf,
    counts: Mutex<HashMap<String, u32>>,
}

impl ApprovalCounts {
    /// Counts every project under `projects` once.
    pub fn new(projects: PathBuf) -> ApprovalCounts {
        let mut counts = HashMap::new();
        if let Ok(entries) = std::fs::read_dir(&projects) {
            for e in entries.flatten() {
                let n = pegasus_approvals::count_pending(&e.path());
                if n > 0 {
                    if let Some(name) = e.file_name().to_str() {
                        counts.insert(name.to_string(), n);
                    }
                }
            }
        }
        ApprovalCounts {
            projects,
            counts: Mutex::new(counts),
        }
    }

    /// Counts `project`'s waiting requests again, from its files.
    pub fn recount(&self, project: &str) {
        if pegasus_store::validate_name(project).is_err() {
            return;
        }
        let n = pegasus_approvals::count_pending(&self.projects.join(project));
        let mut counts = lock(&self.counts);
        if n == 0 {
            counts.remove(project);
        } else {
            counts.insert(project.to_string(), n);
        }
    }

    pub fn apply(&self, event: &BusEvent) {
        match &event.body {
            BusBody::Worker(WorkerEvent::Approval { .. })
            | BusBody::Worker(WorkerEvent::ApprovalAnswered { .. })
            | BusBody::WorkerState { .. } => self.recount(&event.project),
            _ => {}
        }
    }

    /// Writes the counts into listing rows.
    pub fn fill(&self, infos: &mut [ProjectInfo]) {
        let counts = lock(&self.counts);
        for info in infos.iter_mut() {
            info.approvals = counts.get(&info.name).copied().unwrap_or(0);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pegasus_approvals::{self as store, Answer, ApprovalRequest, Decision};

    fn request(id: &str) -> ApprovalRequest {
        ApprovalRequest {
            id: id.into(),
            project: "web".into(),
            task: "t-1".into(),
            tool: "exec".into(),
            summary: "ls".into(),
            asked_at: chrono::Utc::now(),
            call_id: "c".into(),
            input_json: "{}".into(),
            timeout_s: 60,
            always: "ls".into(),
        }
    }

    fn row(name: &str) -> ProjectInfo {
        pegasus_store::project_info::from_entry(
            &pegasus_store::ScanEntry {
                name: name.into(),
                dir: PathBuf::new(),
                project: Err(pegasus_store::StoreError::Invalid("x".into())),
            },
            0.0,
        )
    }

    fn event(project: &str, body: BusBody) -> BusEvent {
        BusEvent {
            seq: 1,
            ts_ms: 0,
            project: project.into(),
            body,
        }
    }

    #[test]
    fn counts_follow_the_files_at_start_and_at_each_approval_event() {
        let home = tempfile::tempdir().unwrap();
        let web = home.path().join("web");
        std::fs::create_dir_all(home.path().join("api")).unwrap();
        store::write_request(&web, &request("ap-one")).unwrap();
        let c = ApprovalCounts::new(home.path().to_path_buf());
        let mut rows = vec![row("web"), row("api")];
        c.fill(&mut rows);
        assert_eq!((rows[0].approvals, rows[1].approvals), (1, 0));

        store::write_request(&web, &request("ap-two")).unwrap();
        c.apply(&event(
            "web",
            BusBody::Worker(WorkerEvent::Approval {
                request: request("ap-two").info(),
            }),
        ));
        c.fill(&mut rows);
        assert_eq!(rows[0].approvals, 2);

        // An answer from a handler: counted when it says so.
        let a = Answer {
            decision: Decision::Denied { reason: None },
            by: "cli".into(),
            at: chrono::Utc::now(),
        };
        store::answer(&web, "ap-one", &a).unwrap();
        c.recount("web");
        c.fill(&mut rows);
        assert_eq!(rows[0].approvals, 1);
        // Other events change nothing.
        store::answer(&web, "ap-two", &a).unwrap();
        c.apply(&event("web", BusBody::Notify { text: "x".into() }));
        c.fill(&mut rows);
        assert_eq!(rows[0].approvals, 1);
        c.apply(&event(
            "web",
            BusBody::WorkerState {
                state: pegasus_proto::WorkerState::Ready,
                pid: Some(1),
            },
        ));
        c.fill(&mut rows);
        assert_eq!(rows[0].approvals, 0);
    }
}
