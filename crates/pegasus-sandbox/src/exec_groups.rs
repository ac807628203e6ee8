//! The record of process groups started by a project's `exec` tool, so they can be killed
//! when their worker dies.
//!
//! A worker kills its command groups itself when a call ends, times out or is cancelled, and
//! the shell it starts dies with it (`PR_SET_PDEATHSIG`). What neither covers is a grandchild
//! of the worker — `sleep` under `sh -c` — when the worker is killed with `kill -9`: the shell
//! dies, the grandchild is orphaned and would run on. So each group is recorded here (pgid and
//! the leader's start time, which tells a live group from a reused pid) and the supervisor
//! kills every recorded group when a worker exits and before it starts the next one.

use pegasus_store::{read_jsonl, write_atomic, JsonlAppender, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct GroupRecord {
    pgid: i32,
    /// Field 22 of `/proc/<pgid>/stat` when recorded.
    start: u64,
    /// Where the pgid means something: the recording process's machine boot and PID
    /// namespace ([`origin`]). A worker on another host (DESIGN.md §14) may share this folder; its
    /// pids are not ours to kill. Older records have none and are taken as local.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    origin: Option<String>,
}

/// This process's pid space: the kernel's boot id and the PID namespace's id. Two processes
/// agree on what a pid names only when both are the same.
fn origin() -> &'static str {
    static ORIGIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ORIGIN.get_or_init(|| {
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
        let ns = std::fs::read_link("/proc/self/ns/pid")
            .map(|l| l.to_string_lossy().into_owned())
            .unwrap_or_default();
        format!("{}/{ns}", boot.trim())
    })
}

/// The start time (clock ticks since boot) of a process, from `/proc/<pid>/stat`.
fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces and parentheses: fields start after the last ')'.
    let rest = stat.rsplit_once(')')?.1;
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Records a group the worker just started (durably: the worker may die the next instant).
pub fn record_exec_group(registry: &Path, pgid: i32) -> Result<()> {
    let Some(start) = start_time(pgid) else {
        return Ok(()); // already gone
    };
    JsonlAppender::open(registry)?.append_durable(&GroupRecord {
        pgid,
        start,
        origin: Some(origin().to_string()),
    })
}

/// Kills every recorded group whose leader is still the process that was recorded, then
/// empties the record. Returns how many groups were killed.
pub fn kill_exec_groups(registry: &Path) -> Result<usize> {
    if !registry.exists() {
        return Ok(0);
    }
    let read = read_jsonl::<GroupRecord>(registry)?;
    let mut killed = 0;
    for g in read.records {
        // A group recorded in another pid space (a worker on another host) is not ours.
        if g.origin.as_deref().is_some_and(|o| o != origin()) {
            continue;
        }
        // A leader with another start time means the pid was reused: not ours. A leader that
        // is gone may have left members running (the orphan case this exists for): kill them.
        let leader = start_time(g.pgid);
        if leader.is_none_or(|s| s == g.start)
            && nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(g.pgid),
                nix::sys::signal::Signal::SIGKILL,
            )
            .is_ok()
        {
            killed += 1;
        }
    }
    write_atomic(registry, b"")?;
    Ok(killed)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// A group recorded by a worker in another pid space (another host, a pod) is never
    /// killed here, even where a local group has the same id; an old record without an
    /// origin is taken as local.
    #[test]
    fn groups_of_another_pid_space_are_never_killed() {
        let dir = tempfile::tempdir().unwrap();
        let reg = dir.path().join("exec.jsonl");
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
        let pgid = child.id() as i32;
        let start = start_time(pgid).unwrap();
        let foreign = GroupRecord {
            pgid,
            start,
            origin: Some("another-boot/pid:[1]".into()),
        };
        JsonlAppender::open(&reg)
            .unwrap()
            .append_durable(&foreign)
            .unwrap();
        assert_eq!(kill_exec_groups(&reg).unwrap(), 0);
        assert!(child.try_wait().unwrap().is_none(), "still running");
        record_exec_group(&reg, pgid).unwrap();
        assert_eq!(kill_exec_groups(&reg).unwrap(), 1);
        child.wait().unwrap();
    }
    use std::os::unix::process::CommandExt;

    #[test]
    fn recorded_groups_are_killed_and_the_record_emptied() {
        let dir = tempfile::tempdir().unwrap();
        let reg = dir.path().join("exec-groups.jsonl");
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & sleep 30"])
            .process_group(0)
            .spawn()
            .unwrap();
        let pgid = child.id() as i32;
        record_exec_group(&reg, pgid).unwrap();
        assert_eq!(kill_exec_groups(&reg).unwrap(), 1);
        let status = child.wait().unwrap();
        assert!(!status.success());
        assert_eq!(std::fs::read_to_string(&reg).unwrap(), "");
        // A second sweep finds nothing.
        assert_eq!(kill_exec_groups(&reg).unwrap(), 0);
    }

    #[test]
    fn a_missing_record_is_nothing_to_do() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(kill_exec_groups(&dir.path().join("none.jsonl")).unwrap(), 0);
    }
}
