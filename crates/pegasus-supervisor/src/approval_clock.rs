//! pegasusd's clock for approvals (DESIGN.md §11: "expiry is judged by pegasusd's clock from the
//! moment pegasusd first saw the request"). A request's `asked_at` is its worker's clock; a
//! remote host whose clock is hours behind would make every request look expired here (not
//! listed, not answerable), one ahead would make them wait too long. So pegasusd remembers
//! when it first saw each waiting request (`<home>/approvals.seen`, durably: a restart does
//! not give a request a new hour) and judges listing, answering and expiry by that moment and
//! its own clock. Once a second it looks over the waiting requests: it notes the new ones,
//! forgets the answered ones, and denies (as the policy's timeout, `by: policy`) those whose
//! time ran out, telling their worker as a person's answer would.

use crate::{
    approval_counts::ApprovalCounts,
    supervisor::{lock, Slots},
};
use chrono::{DateTime, Utc};
use pegasus_approvals::{self as store, Answer, AnswerError, ApprovalRequest, Decision, Seen};
use pegasus_proto::{ctl::ApprovalInfo, worker::ToWorker};
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often the waiting requests are looked over.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// When pegasusd first saw each waiting request.
pub(crate) struct ApprovalClock {
    root: PathBuf,
    projects: PathBuf,
    seen: Mutex<Seen>,
}

impl ApprovalClock {
    pub fn new(home: &pegasus_store::Home) -> ApprovalClock {
        ApprovalClock {
            root: home.root().to_path_buf(),
            projects: home.projects_dir(),
            seen: Mutex::new(Seen::load(home.root())),
        }
    }

    /// Notes the first sight of `ids`, durably when one is new.
    fn note<'a>(&self, ids: impl IntoIterator<Item = &'a str>, now: DateTime<Utc>) {
        let mut seen = lock(&self.seen);
        let mut new = false;
        for id in ids {
            new |= seen.note(id, now);
        }
        if new {
            self.save(&seen);
        }
    }

    fn save(&self, seen: &Seen) {
        if let Err(e) = seen.save(&self.root) {
            tracing::warn!("cannot remember when approval requests were first seen ({e}); after a restart their time starts again");
        }
    }

    /// When `request` runs out of time by pegasusd's clock (noting it as seen now if it is new).
    pub fn expires_at(&self, request: &ApprovalRequest) -> DateTime<Utc> {
        let now = Utc::now();
        self.note([request.id.as_str()], now);
        lock(&self.seen).expires_at(request, now)
    }

    /// The waiting requests (every project's, or `project`'s), each noted as seen, without
    /// those whose time ran out.
    pub fn waiting(&self, project: Option<&str>) -> Vec<ApprovalInfo> {
        let now = Utc::now();
        let pending = store::list_pending(&self.projects, project);
        self.note(pending.iter().map(|r| r.id.as_str()), now);
        let seen = lock(&self.seen);
        pending
            .into_iter()
            .filter(|r| now < seen.expires_at(r, now))
            .map(|r| r.info())
            .collect()
    }

    /// One look over every waiting request: notes, forgets, and returns those whose time ran
    /// out with their project folder.
    fn overdue(&self) -> Vec<(PathBuf, ApprovalRequest)> {
        let now = Utc::now();
        let pending = store::pending_with_dirs(&self.projects);
        let mut seen = lock(&self.seen);
        let mut changed = false;
        for (_, r) in &pending {
            changed |= seen.note(&r.id, now);
        }
        let ids: HashSet<&str> = pending.iter().map(|(_, r)| r.id.as_str()).collect();
        changed |= seen.keep_only(&ids);
        if changed {
            self.save(&seen);
        }
        pending
            .into_iter()
            .filter(|(_, r)| now >= seen.expires_at(r, now))
            .collect()
    }
}

/// Denies the requests whose time ran out by `clock`, once a second, until `shutdown` fires;
/// each denial is counted in `counts` and told to its worker in `slots`.
pub(crate) async fn run(
    clock: Arc<ApprovalClock>,
    counts: Arc<ApprovalCounts>,
    slots: Arc<Slots>,
    shutdown: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(LOOK_EVERY) => {}
        }
        let c = clock.clone();
        let expired = pegasus_fs::blocking(move || expire(&c))
            .await
            .unwrap_or_default();
        for (project, id) in expired {
            counts.recount(&project);
            slots.nudge(&project, ToWorker::ApprovalAnswered { id });
        }
    }
}

/// Answers every overdue request as expired; `(project, id)` of those this answer won.
fn expire(clock: &ApprovalClock) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (dir, r) in clock.overdue() {
        let answer = Answer {
            decision: Decision::Expired {
                after_s: r.timeout_s,
            },
            by: "policy".into(),
            at: Utc::now(),
        };
        match store::answer(&dir, &r.id, &answer) {
            Ok(()) => {
                let project = dir
                    .file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or_default()
                    .to_string();
                tracing::info!(id = %r.id, project = %project, after_s = r.timeout_s, "approval expired by pegasusd's clock: denied");
                out.push((project, r.id));
            }
            // Answered in between (a person, its worker's own timer): theirs stands.
            Err(AnswerError::Already(_)) | Err(AnswerError::NotFound) => {}
            Err(AnswerError::Store(e)) => {
                tracing::warn!(id = %r.id, "cannot deny the overdue approval: {e}");
            }
        }
    }
    out
}
