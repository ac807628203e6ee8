//! What a task is: its fields (DESIGN.md §7, seed 001 §1.3), its frozen spec (seed 004) and the
//! few fields that may change after creation.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::TaskError;
use crate::merge::MergeState;
use crate::state::TaskState;
use pegasus_proto::Stage;

/// One repository in a spec's scope, with the commit it was at when the spec was frozen, so a
/// replay months later knows exactly which code the task saw.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RepoSnapshot {
    /// The repo's id in PROJECT.md `repos`.
    pub id: String,
    /// Where it lives, as written in PROJECT.md (relative paths are relative to the project
    /// folder).
    pub path: String,
    /// The commit of its base branch at freeze time (a code task's worktree starts there);
    /// `None` when the path is not a git repository.
    #[serde(default)]
    pub head: Option<String>,
    /// The base branch (PROJECT.md `branch`, default `main`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
}

/// A frozen spec: what makes a run reproducible. Once a task is ready it never changes; a
/// different spec means a new task (or a replay).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskSpec {
    /// What must be achieved.
    pub goal: String,
    /// What must not be done or must hold throughout.
    #[serde(default)]
    pub constraints: Vec<String>,
    /// How to tell the goal is met; the verifying step checks these.
    #[serde(default)]
    pub acceptance: Vec<String>,
    /// The role that executes it (coder, researcher, ...).
    #[serde(default)]
    pub role: Option<String>,
    /// Which model(s) to use, as the caller's policy string.
    #[serde(default)]
    pub model_policy: Option<String>,
    /// Repositories in scope, with their HEAD at freeze time.
    #[serde(default)]
    pub repos: Vec<RepoSnapshot>,
    /// Its own spending cap in USD, instead of config.yml's `budget.task_usd` (an Asana task's
    /// Max Cost, DESIGN.md §17); enforced by pegasusd's gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_usd: Option<f64>,
}

/// A task as folded from its event file. Every optional or list field defaults when absent so
/// older lines stay readable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    /// `t-<YYYYMMDD>-<6 hex>`; unique across the home.
    pub id: String,
    /// The project it belongs to (exactly one).
    pub project: String,
    /// One line saying what it is.
    pub title: String,
    /// The task type (`chat`, `code`, `research`, `run-phase`, ...); `type` in files.
    #[serde(rename = "type", alias = "kind")]
    pub kind: String,
    /// 0 is the most urgent, 3 the least.
    #[serde(default)]
    pub priority: u8,
    /// The role asked for at creation (the spec's role wins once frozen).
    #[serde(default)]
    pub role: Option<String>,
    /// Where it is in its life.
    pub state: TaskState,
    /// 0 while unfrozen; the latest frozen spec version otherwise.
    #[serde(default)]
    pub spec_version: u32,
    /// The latest frozen spec.
    #[serde(default)]
    pub spec: Option<TaskSpec>,
    /// Tasks (same project) that must be done before this one may start.
    #[serde(default)]
    pub depends_on: Vec<String>,
    /// What came out of it, in a few sentences.
    #[serde(default)]
    pub result_summary: Option<String>,
    /// Files the task changed.
    #[serde(default)]
    pub files_changed: Vec<String>,
    /// Outputs kept under `artifacts/`.
    #[serde(default)]
    pub artifacts: Vec<String>,
    /// The cognitive stage while running (`reasoning`, `acting`, `reflecting`); cleared when
    /// the task leaves `running`.
    #[serde(default)]
    pub stage: Option<Stage>,
    /// Why it stopped (`token_capped`, `turn_capped`, `loop_capped`, `budget`, `silent`,
    /// `process restarted`, ...): set from the reason of a move to failed/blocked/cancelled,
    /// cleared when it becomes ready again.
    #[serde(default)]
    pub stop_reason: Option<String>,
    /// A verified code task's merge (DESIGN.md §10); ended by every move out of `verified`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merge: Option<MergeState>,
    /// The clarification asked while blocked; cleared when it leaves `blocked`.
    #[serde(default)]
    pub question: Option<String>,
    /// The user's answer to the last question (`task answer`); its next run starts with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// The task this one replays, if it is a replay.
    #[serde(default)]
    pub replay_of: Option<String>,
    /// What the task has cost so far, in USD (subagents included).
    #[serde(default)]
    pub cost_usd: Option<f64>,
    /// The ids of the inbound messages this task answers (a message's task): the restart rule
    /// re-runs such a task once (DESIGN.md §6), and a message whose id no task lists has not been
    /// taken up yet.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub messages: Vec<String>,
    /// The task a planner split into this one and its siblings (`plan:` in PROJECT.md, DESIGN.md
    /// §10); set at creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// The tasks a planner split this one into: it waits for them as for its `depends_on`, and
    /// is done, without running itself, once they all are.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subtasks: Vec<String>,
    /// When it was created; also names its event folder.
    pub created: DateTime<Utc>,
    /// When its last event was written.
    pub updated: DateTime<Utc>,
}

/// What a caller says to create a task; the rest is filled in by the store.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NewTask {
    /// One line saying what it is (required).
    pub title: String,
    /// The task type; empty means `chat`.
    pub kind: String,
    /// 0 (most urgent) ..= 3.
    pub priority: u8,
    /// The role asked for, if any.
    pub role: Option<String>,
    /// Ids of tasks in the same project that must be done first; they must exist.
    pub depends_on: Vec<String>,
    /// The inbound messages it answers (see [`Task::messages`]).
    pub messages: Vec<String>,
}

/// The lowest priority; anything above is refused rather than silently clamped.
pub const MAX_PRIORITY: u8 = 3;

/// One change to the fields of a task that may change after creation; the rest of a task is
/// either fixed at creation or changed only by transitions and freezing, so the audit log
/// stays meaningful. Recorded as an `update` event `{field, value}` ([`TaskUpdate::field`],
/// [`TaskUpdate::value`]) and read back with [`TaskUpdate::parse`].
#[derive(Debug, Clone, PartialEq)]
pub enum TaskUpdate {
    /// What came out of it.
    ResultSummary(Option<String>),
    /// The files it changed.
    FilesChanged(Vec<String>),
    /// Its outputs kept under `artifacts/`.
    Artifacts(Vec<String>),
    /// The cognitive stage; only set while running.
    Stage(Option<Stage>),
    /// The clarification it asks.
    Question(Option<String>),
    /// The user's answer to its question.
    Answer(Option<String>),
    /// Why it stopped.
    StopReason(Option<String>),
    /// A verified code task's merge.
    Merge(Option<MergeState>),
    /// What it has cost so far, in USD (finite, >= 0).
    Cost(Option<f64>),
    /// The tasks a planner split it into (see [`Task::subtasks`]).
    Subtasks(Vec<String>),
}

/// The field names an `update` event may carry (`cost` is read as a synonym of `cost_usd`).
pub const UPDATABLE_FIELDS: [&str; 10] = [
    "result_summary",
    "files_changed",
    "artifacts",
    "stage",
    "question",
    "answer",
    "stop_reason",
    "merge",
    "cost_usd",
    "subtasks",
];

impl TaskUpdate {
    /// The field's name in the event file.
    pub fn field(&self) -> &'static str {
        match self {
            TaskUpdate::ResultSummary(_) => "result_summary",
            TaskUpdate::FilesChanged(_) => "files_changed",
            TaskUpdate::Artifacts(_) => "artifacts",
            TaskUpdate::Stage(_) => "stage",
            TaskUpdate::Question(_) => "question",
            TaskUpdate::Answer(_) => "answer",
            TaskUpdate::StopReason(_) => "stop_reason",
            TaskUpdate::Merge(_) => "merge",
            TaskUpdate::Cost(_) => "cost_usd",
            TaskUpdate::Subtasks(_) => "subtasks",
        }
    }

    /// The value as the event file holds it.
    pub fn value(&self) -> serde_json::Value {
        use serde_json::json;
        match self {
            TaskUpdate::ResultSummary(v)
            | TaskUpdate::Question(v)
            | TaskUpdate::Answer(v)
            | TaskUpdate::StopReason(v) => json!(v),
            TaskUpdate::FilesChanged(v) | TaskUpdate::Artifacts(v) | TaskUpdate::Subtasks(v) => {
                json!(v)
            }
            TaskUpdate::Stage(v) => json!(v),
            TaskUpdate::Merge(v) => json!(v),
            TaskUpdate::Cost(v) => json!(v),
        }
    }

    /// Reads an `update` event's field and value back (task `id`, for the error). A
    /// `stop_reason` that an older file used for the merge state ("merge pending", ...) reads
    /// as that [`TaskUpdate::Merge`].
    pub fn parse(id: &str, field: &str, value: &serde_json::Value) -> Result<Self, TaskError> {
        let opt_string = || typed::<Option<String>>(id, field, value, "a string or null");
        let strings = || typed(id, field, value, "a list of strings");
        Ok(match field {
            "result_summary" => TaskUpdate::ResultSummary(opt_string()?),
            "question" => TaskUpdate::Question(opt_string()?),
            "answer" => TaskUpdate::Answer(opt_string()?),
            "stop_reason" => match opt_string()? {
                Some(r) => match MergeState::from_legacy(&r) {
                    Some(m) => TaskUpdate::Merge(Some(m)),
                    None => TaskUpdate::StopReason(Some(r)),
                },
                None => TaskUpdate::StopReason(None),
            },
            "files_changed" => TaskUpdate::FilesChanged(strings()?),
            "artifacts" => TaskUpdate::Artifacts(strings()?),
            "subtasks" => TaskUpdate::Subtasks(strings()?),
            "stage" => TaskUpdate::Stage(typed(
                id,
                field,
                value,
                "reasoning, acting, reflecting or null",
            )?),
            "merge" => TaskUpdate::Merge(typed(
                id,
                field,
                value,
                "pending, requested, merged or null",
            )?),
            "cost_usd" | "cost" => TaskUpdate::Cost(typed(id, field, value, "a number >= 0")?),
            other => {
                return Err(TaskError::Invalid(format!(
                    "task field `{other}` cannot be updated: use one of {}",
                    UPDATABLE_FIELDS.join(", ")
                )))
            }
        })
    }
}

impl Task {
    /// Applies one update, checking it first so a bad one is refused before it reaches the
    /// log: a stage only while running, a cost finite and >= 0.
    pub fn apply_update(&mut self, update: &TaskUpdate) -> Result<(), TaskError> {
        match update {
            TaskUpdate::ResultSummary(v) => self.result_summary = v.clone(),
            TaskUpdate::Question(v) => self.question = v.clone(),
            TaskUpdate::Answer(v) => self.answer = v.clone(),
            TaskUpdate::StopReason(v) => self.stop_reason = v.clone(),
            TaskUpdate::FilesChanged(v) => self.files_changed = v.clone(),
            TaskUpdate::Artifacts(v) => self.artifacts = v.clone(),
            TaskUpdate::Subtasks(v) => self.subtasks = v.clone(),
            TaskUpdate::Stage(stage) => {
                if stage.is_some() && self.state != TaskState::Running {
                    return Err(TaskError::Invalid(format!(
                        "task {} is {}: a stage is only set while running",
                        self.id, self.state
                    )));
                }
                self.stage = *stage;
            }
            TaskUpdate::Merge(m) => self.merge = *m,
            TaskUpdate::Cost(cost) => {
                if let Some(c) = cost {
                    if !(c.is_finite() && *c >= 0.0) {
                        return Err(bad_value(
                            &self.id,
                            "cost_usd",
                            "a number >= 0",
                            &serde_json::json!(c),
                        ));
                    }
                }
                self.cost_usd = *cost;
            }
        }
        Ok(())
    }

    /// What listings show as the task's reason: its merge state while it has one (older
    /// versions kept it in `stop_reason`, in the same words), else its stop reason.
    pub fn shown_reason(&self) -> Option<&str> {
        match self.merge {
            Some(m) => Some(m.label()),
            None => self.stop_reason.as_deref(),
        }
    }

    /// A task as an older index line holds it: a merge state kept in `stop_reason` moves to
    /// [`Task::merge`].
    pub(crate) fn upgrade_legacy(&mut self) {
        if let Some(m) = self
            .stop_reason
            .as_deref()
            .and_then(MergeState::from_legacy)
        {
            self.merge = Some(m);
            self.stop_reason = None;
        }
    }
}

/// `v` read as a `T`, or an error saying it must be `wanted`.
fn typed<T: serde::de::DeserializeOwned>(
    id: &str,
    field: &str,
    v: &serde_json::Value,
    wanted: &str,
) -> Result<T, TaskError> {
    T::deserialize(v).map_err(|_| bad_value(id, field, wanted, v))
}

fn bad_value(id: &str, field: &str, wanted: &str, v: &serde_json::Value) -> TaskError {
    TaskError::Invalid(format!(
        "task {id}: field `{field}` must be {wanted}, not {v}"
    ))
}
