//! Containment of every command a model can cause (SPEC §6, §12): `exec`, `hydrate`,
//! `verify` and MCP servers.
//!
//! * [`contain`]: each command in PID and mount namespaces of its own, so the kernel kills all
//!   it started when its worker dies; its own `/proc`; the `.git` it could rewrite read-only.
//! * [`cgroups`]: per-project limits (memory, processes, cpu), each project's worker and
//!   everything it starts in a cgroup of its own.
//! * [`landlock_rules`]: what it may write (its workdir, its temp dir, configured extras) and
//!   read (everything but the Pegasus home, except its own project folder).

pub mod cgroups;
pub mod contain;
pub mod landlock_rules;

pub use contain::{
    confine, confined_shell, kernel_contains, probe, warn_if_unsupported, Confinement, Support,
    EXEC_MARK_ENV,
};
pub use landlock_rules::{landlock_abi, SandboxPaths};
