//! The command line, as SPEC §11 fixes it.

use clap::{Parser, Subcommand};
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
    /// Talk to the MainAgent (interactive when no TEXT is given).
    Chat { text: Option<String> },
    /// LLM spending from the cost ledger (works without the daemon).
    Cost {
        /// Only this project (`main` = the MainAgent).
        #[arg(long)]
        project: Option<String>,
        /// Only calls on or after this UTC day (YYYY-MM-DD).
        #[arg(long)]
        since: Option<String>,
    },
    /// Stop the daemon gracefully (every worker first).
    Stop,
}

#[derive(Debug, Subcommand)]
pub enum ProjectCommand {
    /// Create a project and start its worker.
    Create {
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
    },
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
    Send {
        name: String,
        text: String,
        /// Wait for the agent's answer and print it.
        #[arg(long)]
        wait: bool,
    },
    /// Print the project's session transcript (works without the daemon).
    Log {
        name: String,
        /// Keep following the transcript as it grows.
        #[arg(short, long)]
        follow: bool,
    },
}
