//! Pegasus files on disk.
//!
//! This crate is for everything Pegasus keeps in its home directory (DESIGN.md §3): where each file
//! lives ([`Home`]), PROJECT.md ([`ProjectFile`]) and the project lifecycle
//! ([`transition`]), config.yml ([`Config`]), session transcripts ([`Session`]), the cost
//! ledger ([`ledger`]), and the two primitives every write goes through: [`write_atomic`] for
//! whole files and [`JsonlAppender`] for append-only logs. It also owns the one `---`
//! frontmatter splitter ([`split_frontmatter`]) that PROJECT.md, role files and SKILL.md
//! share. Loading repairs what a crash can leave behind instead of failing, and every error
//! names the file (and line and key).
//!
//! It is not for processes, sockets or the network: it never spawns a worker, talks to a
//! provider or decides *when* to write; the supervisor and worker crates do. It is synchronous
//! on purpose: its writes are small, and async callers wrap them in `pegasus_fs::blocking`.

pub mod approvals;
pub mod asana;
pub mod atomic;
pub mod config;
pub mod crashes;
pub mod daemon_lock;
pub mod email;
pub mod error;
pub mod frontmatter;
pub mod harness;
pub mod home;
pub mod home_guard;
pub mod hooks;
pub mod jsonl;
pub mod launcher;
pub mod ledger;
pub mod lifecycle;
pub mod limits;
pub mod mcp;
pub mod project;
pub mod project_info;
pub mod read;
pub mod registry;
pub mod remote_record;
pub mod scan;
pub mod session;
pub mod web;
pub mod worker_lock;
pub mod yaml;

pub use atomic::*;
pub use config::*;
pub use crashes::{read_crashes, record_crash, CrashRecord, CRASHES_FILE};
pub use error::{Result, StoreError};
pub use frontmatter::{split_frontmatter, strip_bom, Frontmatter, FrontmatterError};
pub use harness::{AgentKind, HarnessConfig, HarnessesConfig};
pub use home::{home_of_project, Home};
pub use jsonl::*;
pub use ledger::{
    cost_report, project_costs, read_ledger, CostBucket, CostReport, LedgerEntry, LedgerTotals,
};
pub use lifecycle::{transition, Verb};
pub use mcp::{McpServerConfig, DEFAULT_MCP_TIMEOUT_S};
pub use pegasus_fs::stamp;
pub use project::{
    create_project, validate_name, CodeKeys, KeyProblem, KeyValue, MergePolicy, NewProject,
    ProjectFile, ProjectStatus, RepoEntry, PROJECT_FILE, PROJECT_SUBDIRS,
};
pub use read::{read_capped, read_text_limited, read_text_nofollow, Capped, ReadError};
pub use registry::ProjectRegistry;
pub use scan::{par_map, scan_projects, ScanEntry};
pub use session::*;
pub use stamp::FileStamp;
