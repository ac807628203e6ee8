//! `pegasusctl approvals [NAME]`, `approve ID [--always]`, `deny ID [--reason T]` (DESIGN.md §11):
//! the tool calls waiting for a person. The requests are files under each project's
//! `approvals/` (written by its worker); pegasusd only answers them — the first answer wins,
//! whoever gives it — and tells the worker, which runs or refuses the call.

use crate::{
    approval_clock::ApprovalClock, approval_counts::ApprovalCounts, error::RequestError,
    supervisor::Slots,
};
use pegasus_approvals::{self as store, Answer, AnswerError, Decision, RequestState};
use pegasus_proto::{ctl::ApprovalInfo, worker::ToWorker, Channel};
use pegasus_store::{Home, ProjectFile};
use std::sync::Arc;
use tokio::sync::Mutex;

/// What answering an approval touches: the requests under the home's projects, pegasusd's
/// clock for them, the counts in the listings, and the worker told of the answer.
pub(crate) struct Approvals {
    pub home: Home,
    /// When pegasusd first saw each waiting request: its expiry is judged from there.
    pub clock: Arc<ApprovalClock>,
    /// Waiting approvals per project, for listings.
    pub counts: Arc<ApprovalCounts>,
    pub slots: Arc<Slots>,
}

/// The waiting requests, oldest first (every project's, or `project`'s), without those whose
/// time ran out by pegasusd's clock (from when it first saw them).
pub(crate) fn list(
    approvals: &Approvals,
    project: Option<&str>,
) -> Result<Vec<ApprovalInfo>, RequestError> {
    if let Some(name) = project {
        pegasus_store::validate_name(name)?;
        if !approvals.home.project_dir(name).is_dir() {
            return Err(RequestError::ProjectNotFound(name.to_string()));
        }
    }
    Ok(approvals.clock.waiting(project))
}

/// Approves or denies request `id` for `from`; the line says what happens next. An "always"
/// changes PROJECT.md under `lifecycle_lock`, as every change of that file is.
pub(crate) async fn answer(
    approvals: &Approvals,
    lifecycle_lock: &Mutex<()>,
    id: &str,
    approve: bool,
    always: bool,
    reason: Option<String>,
    from: &Channel,
) -> Result<String, RequestError> {
    let not_found = || {
        RequestError::NotFound(format!(
            "no approval request {id}: see `pegasusctl approvals` for the waiting ones"
        ))
    };
    let Some((dir, request)) = store::find(&approvals.home.projects_dir(), id) else {
        return Err(
            match store::closed_answer(&approvals.home.projects_dir(), id) {
                Some(a) => already(id, &a),
                None => not_found(),
            },
        );
    };
    match store::read_state(&dir, id) {
        Some(RequestState::Pending) => {}
        // Found open a moment ago: closed since, so answered.
        None | Some(RequestState::Closed) => {
            return Err(
                match store::closed_answer(&approvals.home.projects_dir(), id) {
                    Some(a) => already(id, &a),
                    None => not_found(),
                },
            )
        }
        Some(
            RequestState::Approved { .. }
            | RequestState::Ran
            | RequestState::Denied { .. }
            | RequestState::Expired { .. }
            | RequestState::Withdrawn { .. }
            | RequestState::Unreadable,
        ) => {
            return Err(match store::read_answer(&dir, id) {
                Some(a) => already(id, &a),
                None => RequestError::Refused(format!(
                    "approval {id} was already answered, but its answer does not load"
                )),
            })
        }
    }
    if chrono::Utc::now() >= approvals.clock.expires_at(&request) {
        // pegasusd's clock denies it within a second (its worker's too).
        return Err(RequestError::Refused(format!(
            "approval {id} timed out after {} s and is denied: ask the project again if the call is still wanted",
            request.timeout_s
        )));
    }
    let project = request.project.clone();
    let decision = if approve {
        Decision::Approved { always }
    } else {
        Decision::Denied {
            reason: reason.filter(|r| !r.trim().is_empty()),
        }
    };
    let answer = Answer {
        decision,
        by: from.to_string(),
        at: chrono::Utc::now(),
    };
    match store::answer(&dir, id, &answer) {
        Ok(()) => {}
        Err(AnswerError::Already(a)) => return Err(already(id, &a)),
        Err(AnswerError::NotFound) => return Err(not_found()),
        Err(AnswerError::Store(e)) => return Err(e.into()),
    }
    // Only once this answer won: a call that was refused never adds to the allow list.
    let kept = if approve && always {
        // pegasusd is PROJECT.md's one writer; the worker reads the policy again once it changed.
        let _guard = lifecycle_lock.lock().await;
        allow_always(&dir, &project, &request).err()
    } else {
        None
    };
    tracing::info!(id, project = %project, decision = answer.decision.word(), by = %from, "approval answered");
    approvals.counts.recount(&project);
    approvals
        .slots
        .nudge(&project, ToWorker::ApprovalAnswered { id: id.to_string() });
    let what = match (&answer.decision, always) {
        (Decision::Approved { .. }, true) if request.tool == "exec" => format!(
            "approved: the call runs now, and `{}` runs without asking from now on in {project}",
            request.always
        ),
        (Decision::Approved { .. }, true)
            if request.tool == store::MERGE_TOOL && request.call_id.is_empty() =>
        {
            format!(
                "approved: the merge goes ahead, and merges in {project} no longer ask (approvals.merge: auto in its PROJECT.md)"
            )
        }
        (Decision::Approved { .. }, true) => format!(
            "approved: the call runs now, and `{}` is allowed from now on in {project}",
            request.tool
        ),
        (Decision::Approved { .. }, false) => "approved: the call runs now".to_string(),
        _ => "denied: the model is told so".to_string(),
    };
    Ok(match kept {
        None => format!("{id} {what}"),
        Some(e) => format!(
            "{id} approved: the call runs now, but it could not be added to the allow list ({e}): approve the next one again"
        ),
    })
}

/// Adds the request's exact command line (exec) or its tool to `dir`'s PROJECT.md allow list.
fn allow_always(
    dir: &std::path::Path,
    project: &str,
    request: &store::ApprovalRequest,
) -> Result<(), RequestError> {
    let mut file = ProjectFile::load(dir)?;
    let mut block = store::ApprovalsConfig::from_yaml(file.get("approvals").as_ref())
        .map_err(|m| RequestError::Refused(format!("PROJECT.md of {project}: approvals {m}")))?;
    if request.tool == "exec" {
        let glob = store::exact_glob(&request.always);
        if !block.allow.contains(&glob) {
            block.allow.push(glob);
        }
    } else if request.tool == store::MERGE_TOOL && request.call_id.is_empty() {
        // A merge is not a tool call: `merge: auto` is what makes the next one go through.
        block.merge = Some(store::MergeMode::Auto);
    } else {
        block.tools.insert(request.tool.clone(), store::Mode::Allow);
    }
    let value = serde_norway::to_value(&block).map_err(|e| {
        RequestError::Refused(format!("cannot write the approvals of {project}: {e}"))
    })?;
    file.set("approvals", &value)?;
    file.save(dir)?;
    Ok(())
}

fn already(id: &str, a: &Answer) -> RequestError {
    RequestError::Refused(format!(
        "approval {id} was already answered: {} by {} at {}",
        a.decision.word(),
        a.by,
        a.at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    ))
}
