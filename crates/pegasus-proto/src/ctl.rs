//! The client ↔ daemon link used by `pegasusctl` (and later the dashboard).
//!
//! A connection starts with [`CtlRequest::Hello`]; the daemon answers [`CtlResponse::Welcome`] or
//! an error and hangs up. Then each request gets exactly one response.

use serde::{Deserialize, Serialize};

/// Client → daemon.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum CtlRequest {
    Hello {
        protocol_version: u32,
    },
    Status,
    ProjectCreate(CreateProject),
    /// `status` filters by lifecycle status (`active`, ..., or `invalid`).
    ProjectList {
        status: Option<String>,
    },
    ProjectShow {
        name: String,
    },
    /// One lifecycle verb: `suspend`, `resume`, `complete` or `archive`.
    ProjectLifecycle {
        name: String,
        verb: String,
    },
    /// Deliver a message to the project's worker; answered with `Sent` once it is durably
    /// persisted, or with `Reply` once the project's agent answered when `wait` is set.
    ProjectSend {
        name: String,
        text: String,
        wait: bool,
    },
    /// A message to the MainAgent; answered with `Reply`.
    Chat {
        text: String,
    },
    /// `task cancel|retry|replay`: one verb on one task (found by id in any project).
    TaskVerb {
        id: String,
        verb: String,
    },
    /// `task answer`: the answer to a blocked task's question; the task goes back to ready.
    TaskAnswer {
        id: String,
        text: String,
    },
    /// `role assign`: record a role assignment (with template variables) in PROJECT.md.
    RoleAssign {
        project: String,
        role: String,
        variables: Vec<(String, String)>,
    },
    /// `project run`: plan a brief into phases and run them autonomously.
    RunStart {
        project: String,
        brief: String,
        max_attempts: u32,
    },
    /// `run cancel|pause|resume`: steer the project's latest run.
    RunControl {
        project: String,
        action: String,
    },
    /// Graceful daemon shutdown.
    Stop,
}

/// Arguments of `project create`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CreateProject {
    pub name: String,
    pub goal: String,
    pub background: Option<String>,
    pub constraints: Option<String>,
    pub model: Option<String>,
    pub workdir: Option<String>,
}

/// Daemon → client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum CtlResponse {
    Welcome {
        daemon_pid: u32,
        protocol_version: u32,
    },
    Status(DaemonStatus),
    Project(Box<ProjectInfo>),
    Projects(Vec<ProjectInfo>),
    /// A message was persisted by the worker under this id.
    Sent {
        id: String,
    },
    /// An agent's answer.
    Reply {
        id: String,
        text: String,
    },
    /// Done; a one-line human summary.
    Done {
        message: String,
    },
    /// Refused or failed; one line that says what to do.
    Error {
        message: String,
    },
}

/// What `status` shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DaemonStatus {
    pub pid: u32,
    pub uptime_s: u64,
    pub home: String,
    pub cost_today_usd: f64,
    pub projects: Vec<ProjectInfo>,
}

/// One project as every listing shows it, from the daemon (with its worker) or from the files.
///
/// Serialized to JSON by `pegasusctl --json`, so field names are part of the CLI contract.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProjectInfo {
    pub name: String,
    /// Lifecycle status from PROJECT.md, or `invalid` when it does not load.
    pub status: String,
    pub model: Option<String>,
    pub workdir: Option<String>,
    pub worker_pid: Option<u32>,
    /// `starting`, `ready`, `stopping`, `backoff`, `crash-looping` or `stopped`.
    pub worker_state: String,
    /// Crash restarts since the daemon started.
    pub restarts: u32,
    /// How the last unrequested exit ended (`exit code 3`, `signal 9 (SIGKILL)`), and when.
    pub last_crash: Option<String>,
    pub last_crash_at: Option<String>,
    pub cost_usd: f64,
    pub created: Option<String>,
    pub suspended: Option<String>,
    pub completed: Option<String>,
    pub goal: Option<String>,
    /// Why the project is invalid.
    pub error: Option<String>,
    /// The task its worker is running, and that task's cognitive stage (`reasoning`,
    /// `acting`, `reflecting`; SPEC §7).
    pub task: Option<String>,
    pub stage: Option<String>,
}
