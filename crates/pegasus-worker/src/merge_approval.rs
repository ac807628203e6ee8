//! `approvals.merge: ask` (DESIGN.md §11): a verified code task that would merge on its own waits
//! for a person's yes first. The request is detached (nobody waits for it in-process): the task
//! moves `verified → blocked` (reason `approval`) and the worker is free; when the answer
//! comes, [`settle`] moves it back to `verified`, due to merge (approved) or pending for
//! `pegasusctl task merge` (denied, or no answer in time). A merge a person asked for
//! (`task merge`) is itself that yes and never asks.

use crate::project_ctx::ProjectCtx;
use pegasus_approvals::{self as store, ApprovalRequest, Decision};
use pegasus_proto::TaskState;
use pegasus_tasks::{MergeState, Task, TaskUpdate};

/// If the policy asks before merges, asks for `task` and returns the line for its sender;
/// `None`: merge now.
pub fn ask(ctx: &ProjectCtx, task: &Task) -> Option<String> {
    let gate = &ctx.gate;
    if task.merge.is_some() {
        return None;
    }
    let policy = match gate.policy() {
        Ok(policy) => policy,
        Err(refusal) => {
            // The project's rules are unknown: never merge unasked; a person's `task merge`
            // still can.
            tracing::error!(task = %task.id, "{refusal}");
            let _ = ctx
                .desk
                .board
                .update(&task.id, TaskUpdate::Merge(Some(MergeState::Pending)));
            return Some(format!(
                "Verified, not merged: {refusal}; then `pegasusctl task merge {}` merges it.",
                task.id
            ));
        }
    };
    if !policy.merge_asks() {
        return None;
    }
    let repos = task
        .spec
        .as_ref()
        .map(|s| {
            s.repos
                .iter()
                .map(|r| format!("{} of repo {}", r.branch.as_deref().unwrap_or("main"), r.id))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| "its base branch".into());
    let request = ApprovalRequest {
        id: store::new_id(),
        project: ctx.desk.name.clone(),
        task: task.id.clone(),
        tool: store::MERGE_TOOL.to_string(),
        summary: format!("merge task {} ({}) into {repos}", task.id, task.title),
        asked_at: chrono::Utc::now(),
        call_id: String::new(),
        input_json: String::new(),
        timeout_s: policy.timeout(),
        always: String::new(),
    };
    match gate.ask_detached(&request, TaskState::Verified) {
        Ok(()) => Some(format!(
            "Verified; the merge waits for approval {}: `pegasusctl approve {}`.",
            request.id, request.id
        )),
        Err(e) => {
            // Never merge unasked: the task stays verified, pending a person's `task merge`.
            tracing::error!(task = %task.id, "cannot ask for the merge: {e}");
            let _ = ctx
                .desk
                .board
                .update(&task.id, TaskUpdate::Merge(Some(MergeState::Pending)));
            Some(format!(
                "Verified; the merge could not be put to you ({e}): `pegasusctl task merge {}` merges it.",
                task.id
            ))
        }
    }
}

/// Settles every answered (or timed-out) merge request of the project: approved → `verified`
/// and due; anything else → `verified`, pending a person's `task merge`.
pub fn settle(ctx: &ProjectCtx) {
    let gate = &ctx.gate;
    for open in store::open_requests(gate.dir()) {
        let r = open.request;
        if r.tool != store::MERGE_TOOL || !r.call_id.is_empty() {
            continue;
        }
        let blocked = ctx
            .desk
            .board
            .store()
            .get(&r.task)
            .is_ok_and(|t| t.state == TaskState::Blocked);
        if !blocked {
            gate.withdraw(&r, "its task no longer waits for the merge");
            continue;
        }
        let Some(answer) = gate.detached_answer(&r) else {
            // Still waiting: settled again when its time runs out (the worker's heartbeat).
            gate.expires_detached(r.expires_at());
            continue;
        };
        let (merge, reason) = match &answer.decision {
            Decision::Approved { .. } => (MergeState::Requested, "merge approved".to_string()),
            other => (
                MergeState::Pending,
                other
                    .refusal()
                    .unwrap_or_else(|| "merge not approved".into()),
            ),
        };
        match ctx.desk.board.move_task_with(
            &r.task,
            TaskState::Blocked,
            TaskState::Verified,
            &reason,
            &[TaskUpdate::Merge(Some(merge))],
        ) {
            Ok(_) => gate.done(&r.id),
            Err(e) => tracing::warn!(task = %r.task, "cannot settle the merge approval: {e}"),
        }
    }
}
