//! How a message becomes a task, and how a task's life is recorded (DESIGN.md §7): the agent's
//! side of the task store. A message is created as a task, its request frozen as its spec and
//! made `ready`; a run moves it to `running` and, when the loop stops, records what it changed,
//! its summary and cost, and moves it to `done`, `failed` or `blocked` with the stop's reason.
//! Every transition is also reported as a typed [`WorkerEvent::Task`].
//!
//! Kept apart from the agent's loop host (`agent.rs`), which only decides what to run next.

use pegasus_proto::llm::{Block, Message};
use pegasus_proto::WorkerEvent;
use pegasus_store::{ContentBlock, Role as SRole, SessionRecord};
use pegasus_tasks::{
    NewTask, Recovered, Recovery, Task, TaskSpec, TaskState, TaskStore, TaskUpdate,
};
use tokio::sync::mpsc::UnboundedSender;

use crate::error::AgentError;
use crate::outbox::{send_event, Notice};

/// Reports a task's current state.
pub(crate) fn report(notices: &UnboundedSender<Notice>, task: &Task) {
    send_event(
        notices,
        WorkerEvent::Task {
            task: task.id.clone(),
            title: Some(task.title.clone()),
            state: task.state,
            reason: task.stop_reason.clone(),
        },
    );
}

/// Reports what the restart rule did to each task it moved; a message's task that crashed
/// the worker twice is also told to the MainAgent (DESIGN.md §6).
pub(crate) fn report_recovered(notices: &UnboundedSender<Notice>, recovered: &[Recovered]) {
    for r in recovered {
        let state = match r.action {
            Recovery::Rerun => TaskState::Ready,
            Recovery::Failed | Recovery::CrashedTwice => TaskState::Failed,
        };
        let reason = r.action.reason();
        send_event(
            notices,
            WorkerEvent::Task {
                task: r.id.clone(),
                title: None,
                state,
                reason: Some(reason.into()),
            },
        );
        if r.action == Recovery::CrashedTwice {
            let _ = notices.send(Notice::Notify {
                text: format!(
                    "task {} failed: its message {}; it will not run again by itself \
                     (see `pegasusctl project log`; `pegasusctl task retry {}` runs it again)",
                    r.id,
                    pegasus_tasks::CRASHED_TWICE_REASON,
                    r.id
                ),
            });
        }
    }
}

/// The inbound messages of the session (id and text, in order) that no task has taken up:
/// those after the last message some task lists. A session written before tasks listed their
/// messages (tasks exist, none lists any) has nothing pending, so an upgrade re-runs nothing.
pub(crate) fn untaken_messages(records: &[SessionRecord], tasks: &[Task]) -> Vec<(String, String)> {
    let taken: std::collections::HashSet<&str> = tasks
        .iter()
        .flat_map(|t| t.messages.iter().map(String::as_str))
        .collect();
    if taken.is_empty() && !tasks.is_empty() {
        return Vec::new();
    }
    let mut pending = Vec::new();
    for r in records {
        let SessionRecord::Message(m) = r else {
            continue;
        };
        let Some(id) = m.id.as_deref() else { continue };
        // A task's request and a run's phase are user records too, but nobody sent them.
        if m.role != SRole::User || m.from.as_ref().is_some_and(|f| !f.is_message()) {
            continue;
        }
        if taken.contains(id) {
            pending.clear();
            continue;
        }
        let text: Vec<&str> = m
            .content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        pending.push((id.to_string(), text.join("\n")));
    }
    pending
}

/// A message (or a batch of them, joined) becomes a task: created, its request frozen as the
/// spec with the project's repos, made ready, and started when `to` is `running` — one batch of
/// task events with one fdatasync (the messages themselves are already durable in the
/// session). The task lists the messages' ids.
pub(crate) fn task_for_message(
    tasks: &TaskStore,
    project_dir: &std::path::Path,
    goal: String,
    messages: Vec<String>,
    to: TaskState,
) -> Result<Task, AgentError> {
    let title: String = goal
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .take(80)
        .collect();
    let new = NewTask {
        title,
        kind: "chat".into(),
        priority: 2,
        role: None,
        depends_on: Vec::new(),
        messages,
    };
    let spec = TaskSpec {
        goal,
        constraints: Vec::new(),
        acceptance: Vec::new(),
        role: None,
        model_policy: None,
        repos: pegasus_tasks::project_repos(project_dir, pegasus_code::git::repo_rev)
            .unwrap_or_default(),
        budget_usd: None,
    };
    tasks
        .create_frozen(new, spec, to, "agent", "a message")
        .map_err(AgentError::tasks)
}

/// The text a task made elsewhere (replayed, retried, answered) runs with: its goal, its
/// acceptance criteria, and the answer to its question when it was blocked on one.
pub(crate) fn request_of(tasks: &TaskStore, task: &Task) -> String {
    let mut text = task
        .spec
        .as_ref()
        .map(|s| s.goal.clone())
        .unwrap_or_else(|| task.title.clone());
    if let Some(spec) = task.spec.as_ref().filter(|s| !s.acceptance.is_empty()) {
        text.push_str("\n\nAcceptance criteria:\n");
        for a in &spec.acceptance {
            text.push_str(&format!("- {a}\n"));
        }
    }
    if let Some(answer) = task_answer(tasks, &task.id) {
        text.push_str(&format!("\n\nAnswer to your question: {answer}"));
    }
    text
}

/// `ready → running`; `Err` with the reason when the task moved meanwhile (cancelled).
pub(crate) fn start(
    tasks: &TaskStore,
    notices: &UnboundedSender<Notice>,
    id: &str,
) -> Result<(), String> {
    tasks
        .transition(id, TaskState::Ready, TaskState::Running, "agent", "started")
        .map(|t| report(notices, &t))
        .map_err(|e| e.to_string())
}

/// `running → failed` with `why` (best effort: after a failed session write, this may fail
/// too).
pub(crate) fn fail_running(
    tasks: &TaskStore,
    notices: &UnboundedSender<Notice>,
    id: &str,
    why: &str,
) {
    if let Ok(t) = tasks.transition(id, TaskState::Running, TaskState::Failed, "agent", why) {
        report(notices, &t);
    }
}

/// How a run of a task ended, as the task log records it.
pub(crate) struct Finish<'a> {
    pub state: TaskState,
    pub reason: Option<&'static str>,
    pub text: &'a str,
    pub cost_usd: f64,
    /// The task's part of the transcript, for the files it changed.
    pub transcript: &'a [Message],
    /// The question it waits on (`ask_user`), recorded on the task.
    pub question: Option<&'a str>,
}

/// Records the end of a run on its task — files changed, summary, cost, a done task's stop
/// reason, and the transition out of `running` — as one batch with one fdatasync. A cancelled
/// task is already where it belongs; its result is still recorded.
pub(crate) fn finish(
    tasks: &TaskStore,
    notices: &UnboundedSender<Notice>,
    id: &str,
    end: Finish<'_>,
) -> Result<(), AgentError> {
    let changed = files_changed(end.transcript);
    let summary: String = end.text.chars().take(500).collect();
    let mut updates: Vec<TaskUpdate> = Vec::new();
    if !changed.is_empty() {
        updates.push(TaskUpdate::FilesChanged(changed));
    }
    updates.push(TaskUpdate::ResultSummary(Some(summary)));
    // A cost the run could not add up (NaN, negative) is recorded as unknown rather than
    // losing the whole end of the run.
    let cost = Some(end.cost_usd).filter(|c| c.is_finite() && *c >= 0.0);
    updates.push(TaskUpdate::Cost(cost));
    if let Some(r) = end.reason.filter(|_| end.state == TaskState::Done) {
        updates.push(TaskUpdate::StopReason(Some(r.to_string())));
    }
    if let Some(q) = end.question {
        updates.push(TaskUpdate::Question(Some(q.to_string())));
    }
    if end.state != TaskState::Cancelled {
        let moved = tasks.finish(
            id,
            &updates,
            Some((
                TaskState::Running,
                end.state,
                end.reason.unwrap_or("answered"),
            )),
            "agent",
        );
        match moved {
            Ok(t) => report(notices, &t),
            Err(e) => {
                // Not moved (cancelled meanwhile): the result is still recorded.
                let _ = tasks.finish(id, &updates, None, "agent");
                return Err(AgentError::tasks(e));
            }
        }
    } else {
        let _ = tasks.finish(id, &updates, None, "agent");
        if let Ok(t) = tasks.get(id) {
            report(notices, &t);
        }
    }
    Ok(())
}

/// The answer given to a task's question (`task answer`), if any: the last `answer` update.
fn task_answer(tasks: &TaskStore, id: &str) -> Option<String> {
    tasks
        .history(id)
        .ok()?
        .into_iter()
        .rev()
        .find_map(|e| match e.update(id) {
            Some(TaskUpdate::Answer(answer)) => answer,
            _ => None,
        })
}

/// The workdir paths a task's successful `write_file` and `edit_file` calls touched, in order,
/// each once (seed 001's "files changed" of a task).
pub(crate) fn files_changed(transcript: &[Message]) -> Vec<String> {
    let mut ok = std::collections::HashSet::new();
    for m in transcript {
        for b in &m.content {
            if let Block::ToolResult {
                tool_use_id,
                is_error: false,
                ..
            } = b
            {
                ok.insert(tool_use_id.clone());
            }
        }
    }
    let mut out: Vec<String> = Vec::new();
    for m in transcript {
        for b in &m.content {
            if let Block::ToolUse {
                id,
                name,
                input_json,
            } = b
            {
                if (name == "write_file" || name == "edit_file") && ok.contains(id) {
                    let path = serde_json::from_str::<serde_json::Value>(input_json)
                        .ok()
                        .and_then(|v| v.get("path").and_then(|p| p.as_str()).map(str::to_string));
                    if let Some(p) = path.filter(|p| !out.contains(p)) {
                        out.push(p);
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use pegasus_proto::llm::Role;

    fn inbound(id: &str, from: &str, text: &str) -> SessionRecord {
        crate::transcript::user_record(id, &pegasus_proto::Channel::parse(from), text)
    }

    fn task_listing(messages: &[&str]) -> Task {
        let dir = tempfile::tempdir().unwrap();
        let store = TaskStore::open(dir.path(), "p").unwrap();
        let mut t = store
            .create(
                NewTask {
                    title: "t".into(),
                    ..NewTask::default()
                },
                "test",
            )
            .unwrap();
        t.messages = messages.iter().map(|m| m.to_string()).collect();
        t
    }

    #[test]
    fn untaken_messages_are_those_after_the_last_taken_one() {
        let records = vec![
            inbound("m1", "cli", "one"),
            inbound("t-x", "task", "a task's request"),
            inbound("m2", "main", "two"),
            inbound("r-1", "run", "a phase"),
            inbound("m3", "cli", "three"),
            inbound("m4", "telegram:1", "four"),
        ];
        // Nothing taken yet, no tasks: everything a sender was told about is pending.
        let all: Vec<String> = untaken_messages(&records, &[])
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        assert_eq!(all, ["m1", "m2", "m3", "m4"]);
        // m1 and m2 answered by one task: m3 and m4 wait, with their texts.
        let pending = untaken_messages(&records, &[task_listing(&["m1", "m2"])]);
        assert_eq!(
            pending,
            [
                ("m3".to_string(), "three".to_string()),
                ("m4".to_string(), "four".to_string())
            ]
        );
        // Everything taken: nothing pending.
        assert!(untaken_messages(&records, &[task_listing(&["m3", "m4"])]).is_empty());
        // A session from before tasks listed their messages re-runs nothing.
        assert!(untaken_messages(&records, &[task_listing(&[])]).is_empty());
    }

    #[test]
    fn files_changed_lists_successful_writes_and_edits_once() {
        let use_ = |id: &str, name: &str, path: &str| Block::ToolUse {
            id: id.into(),
            name: name.into(),
            input_json: serde_json::json!({"path": path}).to_string(),
        };
        let result = |id: &str, err: bool| Block::ToolResult {
            tool_use_id: id.into(),
            content: String::new(),
            is_error: err,
        };
        let t = vec![
            Message {
                role: Role::Assistant,
                content: vec![
                    use_("1", "write_file", "a.txt"),
                    use_("2", "edit_file", "b.txt"),
                    use_("3", "read_file", "c.txt"),
                ],
            },
            Message {
                role: Role::User,
                content: vec![result("1", false), result("2", true), result("3", false)],
            },
            Message {
                role: Role::Assistant,
                content: vec![
                    use_("4", "edit_file", "a.txt"),
                    use_("5", "write_file", "d.txt"),
                ],
            },
            Message {
                role: Role::User,
                content: vec![result("4", false), result("5", false)],
            },
        ];
        assert_eq!(files_changed(&t), ["a.txt", "d.txt"]);
    }
}
