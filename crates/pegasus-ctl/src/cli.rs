//! The command line, as DESIGN.md §11 fixes it.

use clap::{Args, Parser, Subcommand};
use pegasus_proto::ctl::{AddTask, CreateProject};
use std::path::PathBuf;

/// Control the Pegasus daemon and its projects.
#[derive(Debug, Parser)]
#[command(name = "pegasusctl", version)]
pub struct Cli {
    /// Home directory (default: $PEGASUS_HOME, else $XDG_DATA_HOME/pegasus).
    #[arg(long, global = true)]
    pub home: Option<PathBuf>,
    /// Print JSON instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    /// The verb to run.
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Daemon pid, uptime, workers and cost today.
    Status,
    /// Create, list, inspect and drive projects.
    #[command(subcommand)]
    Project(ProjectCommand),
    /// Tasks of a project (list and show work without the daemon).
    #[command(subcommand)]
    Task(TaskCommand),
    /// Role templates and their assignment to projects (list and show work without the daemon).
    #[command(subcommand)]
    Role(RoleCommand),
    /// Autonomous runs (status works without the daemon).
    #[command(subcommand)]
    Run(RunCommand),
    /// Talk to the MainAgent (interactive when no TEXT is given).
    Chat {
        text: Option<String>,
        /// Print the answer's text as it arrives (the default on a terminal).
        #[arg(long)]
        stream: bool,
    },
    /// LLM spending from the cost ledger (works without the daemon).
    Cost {
        /// Only this project (`main` = the MainAgent).
        #[arg(long)]
        project: Option<String>,
        /// Only calls on or after this UTC day (YYYY-MM-DD).
        #[arg(long)]
        since: Option<String>,
    },
    /// Find text in every project's sessions, tasks and memory and the MainAgent's, best
    /// first (works without the daemon).
    Search {
        /// The words to find (all of them, in any order; punctuation is plain text).
        query: String,
        /// Only this project (`main` = the MainAgent).
        #[arg(long)]
        project: Option<String>,
        /// Only this kind of entry.
        #[arg(long, value_enum)]
        kind: Option<SearchKind>,
        /// At most this many hits (1-1000).
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u16).range(1..=1000))]
        limit: u16,
    },
    /// Stop the daemon gracefully (every worker first); returns once pegasusd has exited.
    Stop {
        /// Return once pegasusd has begun to stop, without waiting for its workers.
        #[arg(long)]
        no_wait: bool,
    },
    /// List the tool calls waiting for your yes (works without the daemon).
    Approvals {
        /// Only this project's.
        name: Option<String>,
        /// Show each call's whole input under its summary (escaped, like the summary).
        #[arg(long)]
        full: bool,
    },
    /// Approve a waiting tool call: it runs now.
    Approve {
        /// The request's id (see `pegasusctl approvals`).
        id: String,
        /// Also allow this exact command line (or this tool) in the project from now on.
        #[arg(long)]
        always: bool,
    },
    /// Deny a waiting tool call: the model is told so.
    Deny {
        /// The request's id (see `pegasusctl approvals`).
        id: String,
        /// Why, for the model.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Print the web dashboard's URL with its access token.
    Dashboard,
    /// Print a shell completion script (bash, zsh, fish, elvish or powershell).
    Completions { shell: clap_complete::Shell },
    /// Print the manual page (roff); e.g. `pegasusctl man > ~/.local/share/man/man1/pegasusctl.1`.
    Man,
    /// Serve Pegasus to another agent as an MCP server on stdio (Claude Code, Codex, ...).
    #[command(long_about = MCP_ABOUT)]
    Mcp,
}

/// `pegasusctl mcp --help`: what it serves and how to register it.
const MCP_ABOUT: &str =
    "Serve Pegasus as a Model Context Protocol (MCP) server on stdin/stdout, for \
another agent (Claude Code, Codex, any MCP client) to drive: its tools list_projects, \
send_message, read_log, list_tasks, add_task, list_approvals, answer_approval, search and cost \
do what the matching pegasusctl commands do, and nothing more. The read-only ones work while \
pegasusd is down. Logs go to stderr; the server ends when its input does.

Register it in Claude Code:
    claude mcp add pegasus -- pegasusctl mcp
  (another home: claude mcp add pegasus -e PEGASUS_HOME=/path/to/home -- pegasusctl mcp)

Register it in Codex (~/.codex/config.toml):
    [mcp_servers.pegasus]
    command = \"pegasusctl\"
    args = [\"mcp\"]
  (or: codex mcp add pegasus -- pegasusctl mcp)";

#[derive(Debug, Subcommand)]
pub enum ProjectCommand {
    /// Create a project and start its worker.
    Create(CreateArgs),
    /// List projects (works without the daemon).
    List {
        /// Only projects with this status (active, suspended, completed, archived, invalid).
        #[arg(long)]
        status: Option<String>,
    },
    /// Show one project (works without the daemon).
    Show { name: String },
    /// Stop the project's worker; it keeps its state.
    Suspend { name: String },
    /// Start a suspended project's worker again (or a crash-looping one).
    Resume { name: String },
    /// Mark the project completed and stop its worker.
    Complete { name: String },
    /// Archive a completed project; nothing is deleted.
    Archive { name: String },
    /// Send a message to the project's agent.
    Send(SendArgs),
    /// Plan a brief into phases and run them autonomously (see `run status`).
    Run {
        name: String,
        #[arg(long)]
        brief: String,
        /// Attempts per phase before the run fails.
        #[arg(long, default_value_t = 3)]
        max_attempts: u32,
    },
    /// Print the project's session transcript (works without the daemon).
    Log {
        name: String,
        /// Keep following the transcript as it grows.
        #[arg(short, long)]
        follow: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum TaskCommand {
    /// The project's tasks, newest first (`--board`: todo / in progress / review / done).
    List {
        name: String,
        #[arg(long)]
        board: bool,
    },
    /// Add a task to a project; it runs when its dependencies are done, most urgent first.
    Add(AddArgs),
    /// One task: its fields, frozen spec and every transition.
    Show { id: String },
    /// Cancel a task that has not ended.
    Cancel { id: String },
    /// Send a failed task back to ready.
    Retry { id: String },
    /// Let a planned task (e.g. one a schedule made) run.
    Approve { id: String },
    /// A new task from this task's frozen spec.
    Replay { id: String },
    /// Merge a verified code task into its base branch(es) (`merge: manual`, or after fixing
    /// what blocked its merge).
    Merge { id: String },
    /// Answer a blocked task's question; it goes back to ready.
    Answer { id: String, text: String },
}

#[derive(Debug, Subcommand)]
pub enum RoleCommand {
    /// Every role: the built-in ones and yours in <home>/roles.
    List,
    /// One role with its model settings, tools, variables and prompt template.
    Show { id: String },
    /// Assign a role to a project (`--var name=value` fills the template's variables).
    Assign {
        name: String,
        role: String,
        #[arg(long = "var", value_name = "NAME=VALUE")]
        vars: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum RunCommand {
    /// The project's latest run: status, phases, attempts, costs.
    Status { name: String },
    /// Cancel the latest run at its next step.
    Cancel { name: String },
    /// Pause the latest run at its next step.
    Pause { name: String },
    /// Resume a paused run.
    Resume { name: String },
}

// `project create`.
#[derive(Debug, Args)]
pub struct CreateArgs {
    name: String,
    #[arg(long)]
    goal: String,
    #[arg(long)]
    background: Option<String>,
    #[arg(long)]
    constraints: Option<String>,
    /// provider/model, e.g. anthropic/claude-sonnet-4-5.
    #[arg(long)]
    model: Option<String>,
    /// The directory the project works in.
    #[arg(long)]
    workdir: Option<PathBuf>,
}

impl From<CreateArgs> for CreateProject {
    fn from(c: CreateArgs) -> Self {
        CreateProject {
            name: c.name,
            goal: c.goal,
            background: c.background,
            constraints: c.constraints,
            model: c.model,
            workdir: c
                .workdir
                .map(|w| std::path::absolute(&w).unwrap_or(w).display().to_string()),
        }
    }
}

// `project send`.
#[derive(Debug, Args)]
pub struct SendArgs {
    pub name: String,
    pub text: String,
    /// Wait for the agent's answer and print it.
    #[arg(long)]
    pub wait: bool,
    /// With --wait: print the answer's text as it arrives (the default on a terminal).
    #[arg(long)]
    pub stream: bool,
    /// This message's own id: sent again with the same id, it is not run twice (the
    /// first message's id, and with --wait its reply, come back); another text with a
    /// used id is refused. Made up when not given.
    #[arg(long, value_name = "ID")]
    pub id: Option<String>,
}

// `task add`.
#[derive(Debug, Args)]
pub struct AddArgs {
    /// The project.
    name: String,
    /// What must be achieved.
    #[arg(long)]
    goal: String,
    /// One line for listings (default: the goal's first line).
    #[arg(long)]
    title: Option<String>,
    /// The role that runs it (see `pegasusctl role list`).
    #[arg(long)]
    role: Option<String>,
    /// A repo of the project (PROJECT.md `repos:` id) the task changes; repeatable.
    #[arg(long = "repo", value_name = "ID")]
    repos: Vec<String>,
    /// A task of the same project that must be done first; repeatable.
    #[arg(long = "depends-on", value_name = "ID")]
    depends_on: Vec<String>,
    /// 0 (most urgent) to 3.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(0..=3))]
    priority: u8,
    /// How to tell the goal is met; repeatable.
    #[arg(long = "acceptance", value_name = "TEXT")]
    acceptance: Vec<String>,
}

impl From<AddArgs> for AddTask {
    fn from(a: AddArgs) -> Self {
        AddTask {
            project: a.name,
            goal: a.goal,
            title: a.title,
            role: a.role,
            repos: a.repos,
            depends_on: a.depends_on,
            priority: a.priority,
            acceptance: a.acceptance,
            budget_usd: None,
        }
    }
}

/// What `search --kind` (and the MCP tool `search`'s `kind`) takes.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    clap::ValueEnum,
    serde::Deserialize,
    rmcp::schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
#[schemars(crate = "rmcp::schemars")]
pub enum SearchKind {
    Session,
    Task,
    Memory,
}
