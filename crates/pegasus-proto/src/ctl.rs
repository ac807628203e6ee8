//! The client ↔ daemon link used by `pegasusctl` (and later the dashboard).
//!
//! A connection starts with [`CtlRequest::Hello`]; the daemon answers [`CtlResponse::Welcome`] or
//! an error and hangs up. Then each request gets exactly one response.

use crate::event::{BusEvent, Stage};
use crate::project::{status_or_invalid, ProjectStatus, WorkerState, INVALID};
use serde::{Deserialize, Serialize};

/// Client → daemon.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum CtlRequest {
    /// The first frame of every connection: the client's [`crate::PROTOCOL_VERSION`].
    Hello {
        /// The version the client was built with; another number than the daemon's is refused with
        /// [`CtlResponse::Error`].
        protocol_version: u32,
    },
    /// `status`: the daemon's pid, uptime, spend today and every project; answered with
    /// [`CtlResponse::Status`].
    Status,
    /// `project create`: folders and PROJECT.md, then a worker; answered with
    /// [`CtlResponse::Project`].
    ProjectCreate(CreateProject),
    /// `status` keeps the projects in one lifecycle status, or the invalid ones.
    ProjectList {
        /// `None` lists every project.
        status: Option<ProjectFilter>,
    },
    /// `project show`: one project; answered with [`CtlResponse::Project`].
    ProjectShow {
        /// The project's name, as its folder under `projects/`.
        name: String,
    },
    /// One lifecycle verb (DESIGN.md §4).
    ProjectLifecycle {
        /// The project's name, as its folder under `projects/`.
        name: String,
        /// Which lifecycle change to make.
        verb: LifecycleVerb,
    },
    /// Deliver a message to the project's worker; answered with `Sent` once it is durably
    /// persisted, or with `Reply` once the project's agent answered when `wait` is set.
    ProjectSend {
        /// The project's name, as its folder under `projects/`.
        name: String,
        /// The message as the user wrote it.
        text: String,
        /// Answer with the agent's `Reply` instead of `Sent` once the message is persisted.
        wait: bool,
        /// The sender's id for this message (DESIGN.md §11, `--id`, `Idempotency-Key`, Telegram's
        /// `update_id`): a repeat is answered with the first message's id and runs nothing
        /// again; the same id with another text is refused ([`ErrorKind::Conflict`]).
        client_id: Option<String>,
    },
    /// A message to the MainAgent; answered with `Reply`.
    Chat {
        /// The message as the user wrote it.
        text: String,
    },
    /// `task cancel|retry|replay`: one verb on one task (found by id in any project).
    TaskVerb {
        /// The task's id (`t-...`), unique across projects.
        id: String,
        /// What to do with the task.
        verb: TaskVerb,
    },
    /// `task add`: a new task for a project, frozen and ready (DESIGN.md §10); answered with
    /// [`CtlResponse::TaskAdded`].
    TaskAdd(AddTask),
    /// `task answer`: the answer to a blocked task's question; the task goes back to ready.
    TaskAnswer {
        /// The blocked task's id.
        id: String,
        /// The answer as the user wrote it, given to the task's agent.
        text: String,
    },
    /// `role assign`: record a role assignment (with template variables) in PROJECT.md.
    RoleAssign {
        /// The project's name, as its folder under `projects/`.
        project: String,
        /// The role's id (a built-in role or one in `<home>/roles`).
        role: String,
        /// Template variables of the role as `(name, value)` pairs (`--var name=value`).
        variables: Vec<(String, String)>,
    },
    /// `project run`: plan a brief into phases and run them autonomously.
    RunStart {
        /// The project's name, as its folder under `projects/`.
        project: String,
        /// What the user asked for; the planner splits it into phases.
        brief: String,
        /// Attempts per phase before the phase (and the run) fails (`--max-attempts`, 3 by
        /// default).
        max_attempts: u32,
    },
    /// `run cancel|pause|resume`: steer the project's latest run.
    RunControl {
        /// The project's name, as its folder under `projects/`.
        project: String,
        /// What to do with the run.
        action: RunAction,
    },
    /// Follow the daemon's event bus (every project, or one): answered by
    /// [`CtlResponse::Resync`] `{missed: 0}` once subscribed, then a stream of
    /// [`CtlResponse::Event`] frames (and another `Resync` after a gap) until the client hangs
    /// up. The connection takes no other request afterwards.
    Follow {
        /// Only this project's events; `None` follows every project and the MainAgent.
        project: Option<String>,
    },
    /// Graceful daemon shutdown.
    Stop,
    /// `approvals [NAME]`: the tool calls waiting for a person; answered with
    /// [`CtlResponse::Approvals`].
    Approvals {
        /// Only this project's approvals; `None` lists every project's.
        project: Option<String>,
    },
    /// `approve ID [--always]` / `deny ID [--reason T]`.
    ApprovalAnswer {
        /// The approval's id (`ap-...`), as [`ApprovalInfo::id`].
        id: String,
        /// `true` lets the tool call run, `false` refuses it.
        approve: bool,
        /// Approve: add the exact command line (or the tool) to the project's allow list.
        always: bool,
        /// Deny: why, for the model.
        reason: Option<String>,
    },
}

/// What `project list --status S` keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ProjectFilter {
    /// The projects in this lifecycle status.
    Status(ProjectStatus),
    /// The projects whose PROJECT.md does not load.
    Invalid,
}

impl ProjectFilter {
    /// Every filter, for exhaustive tests.
    pub const ALL: [ProjectFilter; 5] = [
        ProjectFilter::Status(ProjectStatus::Active),
        ProjectFilter::Status(ProjectStatus::Suspended),
        ProjectFilter::Status(ProjectStatus::Completed),
        ProjectFilter::Status(ProjectStatus::Archived),
        ProjectFilter::Invalid,
    ];

    /// The word `--status` takes (`active`, ..., `invalid`); the error says which words there
    /// are.
    pub fn parse(s: &str) -> Result<ProjectFilter, String> {
        match ProjectStatus::parse(s) {
            Some(st) => Ok(ProjectFilter::Status(st)),
            None if s == INVALID => Ok(ProjectFilter::Invalid),
            None => Err(format!(
                "unknown status `{s}`: use active, suspended, completed, archived or invalid"
            )),
        }
    }

    /// Whether a listing keeps `p`.
    pub fn keeps(self, p: &ProjectInfo) -> bool {
        match self {
            ProjectFilter::Status(st) => p.status == Some(st),
            ProjectFilter::Invalid => p.status.is_none(),
        }
    }
}

/// The lifecycle verbs of a project (DESIGN.md §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LifecycleVerb {
    /// Stop the worker; the project keeps its files and can be resumed.
    Suspend,
    /// Start a suspended project's worker again (or a crash-looping one).
    Resume,
    /// Mark the project completed and stop its worker.
    Complete,
    /// Archive a completed project; nothing is deleted.
    Archive,
}

impl LifecycleVerb {
    /// Every verb, for exhaustive tests.
    pub const ALL: [LifecycleVerb; 4] = [
        LifecycleVerb::Suspend,
        LifecycleVerb::Resume,
        LifecycleVerb::Complete,
        LifecycleVerb::Archive,
    ];

    /// The word the CLI uses.
    pub fn as_str(self) -> &'static str {
        match self {
            LifecycleVerb::Suspend => "suspend",
            LifecycleVerb::Resume => "resume",
            LifecycleVerb::Complete => "complete",
            LifecycleVerb::Archive => "archive",
        }
    }
}

/// What `task cancel|retry|replay` asks of one task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaskVerb {
    /// Cancel a task that has not ended.
    Cancel,
    /// Send a failed task back to ready.
    Retry,
    /// A new task from this task's frozen spec.
    Replay,
    /// A planned task (e.g. made by a schedule) may run: planned → ready.
    Approve,
    /// A verified code task is merged (or a merge-blocked one tried again).
    Merge,
}

impl TaskVerb {
    /// Every verb, for exhaustive tests.
    pub const ALL: [TaskVerb; 5] = [
        TaskVerb::Cancel,
        TaskVerb::Retry,
        TaskVerb::Replay,
        TaskVerb::Approve,
        TaskVerb::Merge,
    ];
}

/// How `run cancel|pause|resume` steers a project's latest run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RunAction {
    /// Cancel the run at its next step.
    Cancel,
    /// Pause the run at its next step.
    Pause,
    /// Resume a paused run.
    Resume,
}

impl RunAction {
    /// Every action, for exhaustive tests.
    pub const ALL: [RunAction; 3] = [RunAction::Cancel, RunAction::Pause, RunAction::Resume];

    /// The word the CLI uses.
    pub fn as_str(self) -> &'static str {
        match self {
            RunAction::Cancel => "cancel",
            RunAction::Pause => "pause",
            RunAction::Resume => "resume",
        }
    }
}

/// Arguments of `task add`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AddTask {
    /// The project's name, as its folder under `projects/`.
    pub project: String,
    /// What must be achieved.
    pub goal: String,
    /// One line for listings; `None` = the goal's first line.
    pub title: Option<String>,
    /// The role that runs it (its prompt, tools, model settings).
    pub role: Option<String>,
    /// Ids of the project's `repos` it changes (a code task).
    pub repos: Vec<String>,
    /// Tasks of the same project that must be done first.
    pub depends_on: Vec<String>,
    /// 0 (most urgent) to 3.
    pub priority: u8,
    /// How to tell the goal is met.
    pub acceptance: Vec<String>,
    /// The task's own spending cap in USD, instead of config.yml's `budget.task_usd` (an Asana
    /// task's Max Cost, DESIGN.md §17); `None`: config.yml's.
    pub budget_usd: Option<f64>,
}

/// Arguments of `project create`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CreateProject {
    /// Folder and project name, as its folder under `projects/`.
    pub name: String,
    /// What the project should achieve; the first section of its system prompt.
    pub goal: String,
    /// Context the agent needs (PROJECT.md's optional `## Background`).
    pub background: Option<String>,
    /// Rules the agent must follow (PROJECT.md's optional `## Constraints`).
    pub constraints: Option<String>,
    /// `provider/model` instead of config.yml's default model; `None` keeps the default.
    pub model: Option<String>,
    /// The directory a code project works in; `None` for none.
    pub workdir: Option<String>,
}

/// Daemon → client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum CtlResponse {
    /// The answer to [`CtlRequest::Hello`]: the daemon accepts the connection.
    Welcome {
        /// pegasusd's process id.
        daemon_pid: u32,
        /// The daemon's [`crate::PROTOCOL_VERSION`].
        protocol_version: u32,
    },
    /// The answer to [`CtlRequest::Status`].
    Status(DaemonStatus),
    /// One project, for `project show`, `project create` and a lifecycle verb.
    Project(Box<ProjectInfo>),
    /// Every project a [`CtlRequest::ProjectList`] keeps.
    Projects(Vec<ProjectInfo>),
    /// A message was persisted by the worker under this id.
    Sent {
        /// The message's id in the project's session.
        id: String,
    },
    /// An agent's answer.
    Reply {
        /// The id of the message it answers.
        id: String,
        /// The agent's answer text.
        text: String,
    },
    /// Done; a one-line human summary.
    Done {
        /// What was done, for the user.
        message: String,
    },
    /// `task add` made task `id`.
    TaskAdded {
        /// The new task's id.
        id: String,
        /// One line for the user.
        message: String,
    },
    /// The connection itself is refused (before or at hello: another protocol version, a
    /// process started by pegasusd); one line that says what to do. Its shape never changes,
    /// so a client of any build can read why it was dropped. A refused *request* is
    /// [`CtlResponse::Failed`].
    Error {
        /// One line for the user that says what to do.
        message: String,
    },
    /// One event of the bus, for a [`CtlRequest::Follow`] connection.
    Event(BusEvent),
    /// The follower fell behind and `missed` events were dropped for it: whatever it shows
    /// from events should be re-read from the files.
    Resync {
        /// How many events were dropped since the last one it got.
        missed: u64,
    },
    /// A request was refused or failed: what kind (the one thing clients decide on, e.g. the
    /// dashboard's HTTP status) and one line for the user that says what to do.
    Failed {
        /// What kind of failure, for clients to decide on.
        kind: ErrorKind,
        /// One line for the user that says what to do.
        message: String,
    },
    /// The waiting approvals, oldest first.
    Approvals(Vec<ApprovalInfo>),
}

/// A tool call waiting for a person's yes (DESIGN.md §11), as `approvals --json`, `GET
/// /api/approvals`, the bus and Telegram show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalInfo {
    /// Stable across restarts; what `approve` and `deny` take.
    pub id: String,
    /// The project whose agent made the call (`main` for the MainAgent).
    pub project: String,
    /// The id of the task that made the call.
    pub task: String,
    /// The tool's name (`exec`, `mcp__NAME__TOOL`, ...), or `merge`.
    pub tool: String,
    /// What a person reads, escaped ([`crate::shown::escape`]): the whole exec command line,
    /// else the tool, its target (`path`, `url`, MCP server) and then its other arguments.
    pub summary: String,
    /// RFC 3339, UTC.
    pub asked_at: String,
    /// The call's whole input as the model wrote it, unescaped (`null` for a merge): a JSON
    /// value in JSON (`approvals --json`, REST), its text on the binary links.
    #[serde(default, with = "json_text")]
    pub input: String,
}

/// A JSON document kept as its text: written as the value itself where the format is JSON
/// (human-readable), as a string on the binary links (bincode cannot carry an untyped value).
mod json_text {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(text: &str, s: S) -> Result<S::Ok, S::Error> {
        if !s.is_human_readable() {
            return text.serialize(s);
        }
        match serde_json::from_str::<serde_json::Value>(text) {
            Ok(v) => v.serialize(s),
            // Not JSON (an empty input): null, never a half-made value.
            Err(_) => serde_json::Value::Null.serialize(s),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
        if !d.is_human_readable() {
            return String::deserialize(d);
        }
        Ok(match serde_json::Value::deserialize(d)? {
            serde_json::Value::Null => String::new(),
            v => v.to_string(),
        })
    }
}

/// Why a request was refused or failed, as a client acts on it; the text is for people only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ErrorKind {
    /// The project, task, role or run it names does not exist.
    NotFound,
    /// The request itself is wrong (a bad name, a missing or unknown argument).
    Invalid,
    /// Understood, but not done: the thing is in another state or already exists, or an
    /// argument does not fit it.
    Refused,
    /// A budget refused the model call it needed.
    BudgetExceeded,
    /// Something it needs is not running or went away (a worker, the MainAgent, a model), or
    /// the daemon is stopping.
    Unavailable,
    /// pegasusd could not do its part: a file it could not read, write or parse (the message
    /// names it), or a failure of its own (its log says more).
    Internal,
    /// The id it carries was used before for something else (a send's client id with another
    /// text): the dashboard's 409.
    Conflict,
}

impl ErrorKind {
    /// Every kind, for tests that must cover them all.
    pub const ALL: [ErrorKind; 7] = [
        ErrorKind::NotFound,
        ErrorKind::Invalid,
        ErrorKind::Refused,
        ErrorKind::BudgetExceeded,
        ErrorKind::Unavailable,
        ErrorKind::Internal,
        ErrorKind::Conflict,
    ];
}

/// What `status` shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DaemonStatus {
    /// pegasusd's process id.
    pub pid: u32,
    /// Seconds since pegasusd started.
    pub uptime_s: u64,
    /// pegasusd's home directory (the root of `config.yml`, `projects/`, ...).
    pub home: String,
    /// USD spent on model calls today (UTC), all projects and the MainAgent together.
    pub cost_today_usd: f64,
    /// Every project, as [`ProjectInfo`] rows with their worker's live facts.
    pub projects: Vec<ProjectInfo>,
    /// What waits for the user, one line each: blocked tasks with their question or reason,
    /// verified tasks whose merge is pending (from the task indexes, by pegasusd).
    #[serde(default)]
    pub waiting: Vec<String>,
    /// What keeps models from answering, found at start, one line each (a default model or a
    /// project's model naming a provider config.yml lacks, or whose key is not set).
    #[serde(default)]
    pub problems: Vec<String>,
    /// Fallback models that answered in the last hour (DESIGN.md §5), the MainAgent's
    /// (project `main`) and every project's.
    #[serde(default)]
    pub fallbacks: Vec<FallbackInfo>,
}

/// A fallback model that answered a project's calls recently, instead of the model they asked
/// for (DESIGN.md §5 fallback models): one per pair of models, while its last call is less
/// than an hour old.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FallbackInfo {
    /// The project whose calls it answered (`main` for the MainAgent).
    pub project: String,
    /// The fallback model that answered, `provider/model`.
    pub model: String,
    /// The model the calls asked for first.
    pub from: String,
    /// Why `from` did not answer the last of them (`overloaded (529)`, `unreachable`).
    pub why: String,
    /// How many calls it answered since `since`.
    pub calls: u64,
    /// When it first answered (RFC 3339, UTC).
    pub since: String,
    /// When it last answered (RFC 3339, UTC).
    pub last: String,
}

impl FallbackInfo {
    /// One line for people: `fallback fa/haiku served 3 calls since 12:04 UTC: fa/sonnet
    /// overloaded (529)`.
    pub fn line(&self) -> String {
        let hhmm = self.since.get(11..16).unwrap_or(&self.since);
        format!(
            "fallback {} served {} call{} since {hhmm} UTC: {} {}",
            self.model,
            self.calls,
            if self.calls == 1 { "" } else { "s" },
            self.from,
            self.why
        )
    }
}

/// One project as every listing shows it, from the daemon (with its worker) or from the files.
///
/// Serialized to JSON by `pegasusctl --json`, so field names are part of the CLI contract.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProjectInfo {
    /// The project's name, as its folder under `projects/`.
    pub name: String,
    /// Lifecycle status from PROJECT.md; `None` when it does not load (`error` says why),
    /// written `invalid`.
    #[serde(with = "status_or_invalid")]
    pub status: Option<ProjectStatus>,
    /// PROJECT.md's `provider/model`; `None` when it names none (config.yml's default applies).
    pub model: Option<String>,
    /// PROJECT.md's working directory (code projects); `None` for none.
    pub workdir: Option<String>,
    /// The worker's process id while one runs (on `worker_host` for a remote worker); `None` when
    /// none runs.
    pub worker_pid: Option<u32>,
    /// Where the worker runs when that is not this machine (DESIGN.md §14: the address its link
    /// comes from); `None` for a local worker.
    #[serde(default)]
    pub worker_host: Option<String>,
    /// What the project's worker process is doing now.
    pub worker_state: WorkerState,
    /// Crash restarts since the daemon started.
    pub restarts: u32,
    /// How the last unrequested exit ended (`exit code 3`, `signal 9 (SIGKILL)`), and when.
    pub last_crash: Option<String>,
    /// When the last crash happened (RFC 3339, UTC); `None` if it never crashed.
    pub last_crash_at: Option<String>,
    /// USD spent by the project's model calls over the whole ledger.
    pub cost_usd: f64,
    /// When the project was created (RFC 3339, UTC, from PROJECT.md); `None` when it does not load.
    pub created: Option<String>,
    /// When it was last suspended (RFC 3339, UTC, from PROJECT.md); `None` if it is not.
    pub suspended: Option<String>,
    /// When it was completed (RFC 3339, UTC, from PROJECT.md); `None` if it is not.
    pub completed: Option<String>,
    /// The project's goal from PROJECT.md; `None` when it does not load.
    pub goal: Option<String>,
    /// Why the project is invalid.
    pub error: Option<String>,
    /// The task its worker is running, and that task's cognitive stage (`reasoning`,
    /// `acting`, `reflecting`; DESIGN.md §7).
    pub task: Option<String>,
    /// The cognitive stage of `task`; `None` when no task runs.
    pub stage: Option<Stage>,
    /// Code projects (`project show` only): branches of ended tasks kept because they hold
    /// commits their base branch lacks, as `repo: branch (task ID)`.
    #[serde(default)]
    pub unmerged_branches: Vec<String>,
    /// Tool calls of the project waiting for a person's yes (DESIGN.md §11).
    #[serde(default)]
    pub approvals: u32,
    /// Its limits (DESIGN.md §12) and whether pegasusd applies them; `None` where nobody knows
    /// (pegasusctl without a daemon).
    #[serde(default)]
    pub limits: Option<LimitsInfo>,
    /// Its fallback models in force, in order (PROJECT.md `fallback:`, else config.yml's);
    /// `None` where nobody knows (pegasusctl without a daemon).
    #[serde(default)]
    pub fallback_models: Option<Vec<String>>,
    /// Fallback models that answered its calls in the last hour.
    #[serde(default)]
    pub fallbacks: Vec<FallbackInfo>,
}

/// A project's limits as pegasusd applies them (DESIGN.md §12): config.yml `limits:` with its
/// PROJECT.md's keys in their place.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LimitsInfo {
    /// Memory of the worker and everything it starts, as written (`2G`).
    pub memory: String,
    /// `memory` in bytes.
    pub memory_bytes: u64,
    /// Processes and threads of its commands.
    pub pids: u64,
    /// Cores' worth of cpu time of its commands.
    pub cpu: f64,
    /// Whether the kernel enforces them for this project.
    pub applied: bool,
    /// How (`cgroup v1`), or why not (one line).
    pub note: String,
}

impl ProjectInfo {
    /// The status as listings show it: the lifecycle word, or `invalid`.
    pub fn status_word(&self) -> &'static str {
        self.status.map_or(INVALID, ProjectStatus::as_str)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::{decode, encode};

    fn requests() -> Vec<CtlRequest> {
        let mut all = vec![
            CtlRequest::Hello {
                protocol_version: 1,
            },
            CtlRequest::Status,
            CtlRequest::ProjectCreate(CreateProject {
                name: "web".into(),
                goal: "a site".into(),
                background: Some("b".into()),
                constraints: None,
                model: Some("anthropic/claude-sonnet-4-5".into()),
                workdir: None,
            }),
            CtlRequest::ProjectList {
                status: Some(ProjectFilter::Status(ProjectStatus::Active)),
            },
            CtlRequest::ProjectList {
                status: Some(ProjectFilter::Invalid),
            },
            CtlRequest::ProjectShow { name: "web".into() },
            CtlRequest::ProjectSend {
                name: "web".into(),
                text: "hi".into(),
                wait: true,
                client_id: Some("cli-1f2e".into()),
            },
            CtlRequest::Chat { text: "hi".into() },
            CtlRequest::TaskAnswer {
                id: "t".into(),
                text: "yes".into(),
            },
            CtlRequest::RoleAssign {
                project: "web".into(),
                role: "coder".into(),
                variables: vec![("lang".into(), "rust".into())],
            },
            CtlRequest::RunStart {
                project: "web".into(),
                brief: "b".into(),
                max_attempts: 3,
            },
            CtlRequest::Follow {
                project: Some("web".into()),
            },
            CtlRequest::Stop,
            CtlRequest::TaskAdd(AddTask {
                project: "web".into(),
                goal: "g".into(),
                title: None,
                role: Some("coder".into()),
                repos: vec!["app".into()],
                depends_on: vec!["t-1".into()],
                priority: 1,
                acceptance: vec!["tests pass".into()],
                budget_usd: Some(1.5),
            }),
            CtlRequest::Approvals {
                project: Some("web".into()),
            },
            CtlRequest::ApprovalAnswer {
                id: "ap-x".into(),
                approve: false,
                always: false,
                reason: Some("no".into()),
            },
        ];
        all.extend(LifecycleVerb::ALL.map(|verb| CtlRequest::ProjectLifecycle {
            name: "web".into(),
            verb,
        }));
        all.extend(TaskVerb::ALL.map(|verb| CtlRequest::TaskVerb {
            id: "t".into(),
            verb,
        }));
        all.extend(RunAction::ALL.map(|action| CtlRequest::RunControl {
            project: "web".into(),
            action,
        }));
        all
    }

    /// Adding a request without a sample above fails to compile here.
    fn covered(r: &CtlRequest) -> &'static str {
        match r {
            CtlRequest::Hello { .. } => "hello",
            CtlRequest::Status => "status",
            CtlRequest::ProjectCreate(_) => "create",
            CtlRequest::ProjectList { .. } => "list",
            CtlRequest::ProjectShow { .. } => "show",
            CtlRequest::ProjectLifecycle { .. } => "lifecycle",
            CtlRequest::ProjectSend { .. } => "send",
            CtlRequest::Chat { .. } => "chat",
            CtlRequest::TaskVerb { .. } => "task",
            CtlRequest::TaskAnswer { .. } => "answer",
            CtlRequest::TaskAdd(_) => "add",
            CtlRequest::RoleAssign { .. } => "role",
            CtlRequest::RunStart { .. } => "run",
            CtlRequest::RunControl { .. } => "run-control",
            CtlRequest::Follow { .. } => "follow",
            CtlRequest::Stop => "stop",
            CtlRequest::Approvals { .. } => "approvals",
            CtlRequest::ApprovalAnswer { .. } => "approval-answer",
        }
    }

    #[test]
    fn every_control_request_round_trips_through_the_codec() {
        let all = requests();
        let kinds: std::collections::HashSet<_> = all.iter().map(covered).collect();
        assert_eq!(kinds.len(), 18, "one sample of every request");
        for req in all {
            assert_eq!(decode::<CtlRequest>(&encode(&req).unwrap()).unwrap(), req);
        }
    }

    #[test]
    fn every_error_kind_round_trips_through_the_codec() {
        for kind in ErrorKind::ALL {
            match kind {
                ErrorKind::NotFound
                | ErrorKind::Invalid
                | ErrorKind::Refused
                | ErrorKind::BudgetExceeded
                | ErrorKind::Unavailable
                | ErrorKind::Internal
                | ErrorKind::Conflict => {}
            }
            let resp = CtlResponse::Failed {
                kind,
                message: format!("{kind:?}"),
            };
            assert_eq!(
                decode::<CtlResponse>(&encode(&resp).unwrap()).unwrap(),
                resp
            );
        }
    }

    fn fallback() -> FallbackInfo {
        FallbackInfo {
            project: "web".into(),
            model: "fa/backup".into(),
            from: "fa/main".into(),
            why: "overloaded (529)".into(),
            calls: 3,
            since: "2026-11-29T12:04:09Z".into(),
            last: "2026-11-29T12:10:00Z".into(),
        }
    }

    #[test]
    fn a_fallback_says_what_served_since_when_and_why() {
        assert_eq!(
            fallback().line(),
            "fallback fa/backup served 3 calls since 12:04 UTC: fa/main overloaded (529)"
        );
        let one = FallbackInfo {
            calls: 1,
            ..fallback()
        };
        assert!(one.line().contains("served 1 call since"), "{}", one.line());
    }

    #[test]
    fn every_control_response_round_trips_through_the_codec() {
        let info = ProjectInfo {
            name: "web".into(),
            status: Some(ProjectStatus::Active),
            model: None,
            workdir: Some("/w".into()),
            worker_pid: Some(7),
            worker_host: None,
            worker_state: WorkerState::CrashLooping,
            restarts: 1,
            last_crash: None,
            last_crash_at: None,
            cost_usd: 0.5,
            created: None,
            suspended: None,
            completed: None,
            goal: Some("g".into()),
            error: None,
            task: Some("t".into()),
            stage: Some(Stage::Acting),
            unmerged_branches: Vec::new(),
            approvals: 2,
            limits: Some(LimitsInfo {
                memory: "2G".into(),
                memory_bytes: 2 << 30,
                pids: 512,
                cpu: 1.0,
                applied: true,
                note: "cgroup v1".into(),
            }),
            fallback_models: Some(vec!["fa/backup".into()]),
            fallbacks: vec![fallback()],
        };
        let invalid = ProjectInfo {
            status: None,
            error: Some("bad".into()),
            ..info.clone()
        };
        let all = vec![
            CtlResponse::Welcome {
                daemon_pid: 1,
                protocol_version: 1,
            },
            CtlResponse::Status(DaemonStatus {
                pid: 1,
                uptime_s: 2,
                home: "/h".into(),
                cost_today_usd: 0.1,
                projects: vec![info.clone()],
                waiting: vec!["web: task t-1 asks: which?".into()],
                problems: vec!["default_model `x/y` cannot be used".into()],
                fallbacks: vec![fallback()],
            }),
            CtlResponse::Project(Box::new(info.clone())),
            CtlResponse::Projects(vec![info, invalid]),
            CtlResponse::Sent { id: "m".into() },
            CtlResponse::Reply {
                id: "m".into(),
                text: "hi".into(),
            },
            CtlResponse::Done {
                message: "ok".into(),
            },
            CtlResponse::Error {
                message: "no".into(),
            },
            CtlResponse::Resync { missed: 3 },
            CtlResponse::Failed {
                kind: ErrorKind::BudgetExceeded,
                message: "over".into(),
            },
            CtlResponse::TaskAdded {
                id: "t-1".into(),
                message: "added".into(),
            },
            CtlResponse::Approvals(vec![ApprovalInfo {
                id: "ap-abc".into(),
                project: "web".into(),
                task: "t-1".into(),
                tool: "exec".into(),
                summary: "rm -rf build".into(),
                asked_at: "2026-11-26T10:00:00Z".into(),
                input: "{\"command\":\"rm -rf build\"}".into(),
            }]),
        ];
        for resp in all {
            match &resp {
                CtlResponse::Welcome { .. }
                | CtlResponse::Status(_)
                | CtlResponse::Project(_)
                | CtlResponse::Projects(_)
                | CtlResponse::Sent { .. }
                | CtlResponse::Reply { .. }
                | CtlResponse::Done { .. }
                | CtlResponse::TaskAdded { .. }
                | CtlResponse::Error { .. }
                | CtlResponse::Event(_)
                | CtlResponse::Resync { .. }
                | CtlResponse::Failed { .. }
                | CtlResponse::Approvals(_) => {}
            }
            assert_eq!(
                decode::<CtlResponse>(&encode(&resp).unwrap()).unwrap(),
                resp
            );
        }
    }

    #[test]
    fn a_project_row_reads_in_json_as_it_always_has() {
        let row = r#"{"name":"web","status":"invalid","model":null,"workdir":null,"worker_pid":null,
            "worker_state":"crash-looping","restarts":6,"last_crash":"exit code 3","last_crash_at":null,
            "cost_usd":0.0,"created":null,"suspended":null,"completed":null,"goal":null,
            "error":"PROJECT.md: bad","task":"t-1","stage":"reflecting"}"#;
        let p: ProjectInfo = serde_json::from_str(row).unwrap();
        assert_eq!(
            (p.status, p.worker_state, p.stage),
            (None, WorkerState::CrashLooping, Some(Stage::Reflecting))
        );
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(
            (&v["status"], &v["worker_state"], &v["stage"]),
            (
                &serde_json::json!("invalid"),
                &serde_json::json!("crash-looping"),
                &serde_json::json!("reflecting")
            )
        );
        for st in ProjectStatus::ALL {
            let p = ProjectInfo {
                status: Some(st),
                ..p.clone()
            };
            let v = serde_json::to_value(&p).unwrap();
            assert_eq!(v["status"], st.as_str());
            assert_eq!(serde_json::from_value::<ProjectInfo>(v).unwrap(), p);
        }
        let bad = row.replace(r#""status":"invalid""#, r#""status":"paused""#);
        assert!(serde_json::from_str::<ProjectInfo>(&bad).is_err());
    }

    #[test]
    fn an_approval_carries_its_input_as_a_value_in_json_and_as_text_on_the_wire() {
        let a = ApprovalInfo {
            id: "ap-abc".into(),
            project: "web".into(),
            task: "t-1".into(),
            tool: "write_file".into(),
            summary: "write_file src/a.rs {...}".into(),
            asked_at: "2026-11-26T10:00:00Z".into(),
            input: r#"{"content":"x","path":"src/a.rs"}"#.into(),
        };
        let v = serde_json::to_value(&a).unwrap();
        assert_eq!(v["input"]["path"], "src/a.rs");
        let back: ApprovalInfo = serde_json::from_value(v).unwrap();
        assert_eq!(back, a);
        let resp = CtlResponse::Approvals(vec![a.clone()]);
        let bytes = crate::encode(&resp).unwrap();
        assert_eq!(crate::decode::<CtlResponse>(&bytes).unwrap(), resp);
        // A merge has no input: null in JSON, and a listing from before `input` still reads.
        let merge = ApprovalInfo {
            input: String::new(),
            ..a
        };
        let v = serde_json::to_value(&merge).unwrap();
        assert!(v["input"].is_null());
        let mut old = v.clone();
        old.as_object_mut().unwrap().remove("input");
        assert_eq!(serde_json::from_value::<ApprovalInfo>(old).unwrap(), merge);
    }

    #[test]
    fn a_status_filter_is_parsed_from_its_word_and_keeps_its_projects() {
        let words: Vec<&str> = ["active", "suspended", "completed", "archived", "invalid"].into();
        for (word, filter) in words.iter().zip(ProjectFilter::ALL) {
            assert_eq!(ProjectFilter::parse(word), Ok(filter));
        }
        let err = ProjectFilter::parse("paused").unwrap_err();
        assert_eq!(
            err,
            "unknown status `paused`: use active, suspended, completed, archived or invalid"
        );
    }
}
