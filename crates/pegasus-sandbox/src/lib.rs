//! Containment of every command a model can cause (DESIGN.md §6, §12): `exec`, `hydrate`,
//! `verify` and MCP servers.
//!
//! * [`contain`]: each command in PID and mount namespaces of its own, so the kernel kills all
//!   it started when its worker dies; its own `/proc`; the `.git` it could rewrite read-only.
//! * [`cgroups`]: per-project limits (memory, processes, cpu), each project's worker and
//!   everything it starts in a cgroup of its own.
//! * [`landlock_rules`]: what it may write (its workdir, its temp dir, configured extras) and
//!   read (everything but the Pegasus home, except its own project folder).
//! * [`adopted`]: what escapes a command's process group anyway: pegasusd and every worker
//!   are child subreapers and kill the orphans they did not start on purpose.
//! * [`exec_groups`]: the record of each command's process group, kept in a file the caller
//!   names, so pegasusd kills what a `kill -9`-ed worker's commands left running.
//!
//! Its one record on disk (the exec groups) is written through `pegasus-store`'s durable append
//! and atomic write, like every other file of the home.

pub mod adopted;
pub mod cgroups;
pub mod contain;
pub mod exec_groups;
pub mod landlock_rules;

pub use contain::{
    confine, confined_shell, kernel_contains, probe, warn_if_unsupported, Confinement, Support,
    EXEC_MARK_ENV,
};
pub use exec_groups::{kill_exec_groups, record_exec_group};
pub use landlock_rules::{landlock_abi, SandboxPaths};
