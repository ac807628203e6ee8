//! Containment of what model-run commands start: pegasusd and every worker are *child
//! subreapers*, so a process that escapes its command's process group (`setsid cmd &`, a
//! double fork) is re-parented to them instead of to init when its parent exits. Each process
//! knows which of its children it started on purpose ([`spawn_known`]); any other child is an
//! adopted escapee, and [`kill_adopted`] kills it (with its group) and reaps it. A worker
//! sweeps after every `exec` call; pegasusd sweeps after every worker exit, which catches what
//! a `kill -9`-ed worker had adopted.

use std::collections::BTreeSet;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, killpg, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use crate::EXEC_MARK_ENV;

/// Children this process started on purpose. Held while spawning and while sweeping, so a
/// child between its fork and its registration can never be taken for an escapee.
static KNOWN: Mutex<BTreeSet<u32>> = Mutex::new(BTreeSet::new());

fn known() -> MutexGuard<'static, BTreeSet<u32>> {
    KNOWN.lock().unwrap_or_else(|p| p.into_inner())
}

/// Makes this process the reaper of its descendants' orphans.
pub fn become_subreaper() -> nix::Result<()> {
    nix::sys::prctl::set_child_subreaper(true)
}

/// Spawns a child this process means to have (a worker, a command's shell) and remembers its
/// pid until [`forget`]. `pid_of` reads the pid from what `spawn` returns.
pub fn spawn_known<T>(
    spawn: impl FnOnce() -> std::io::Result<T>,
    pid_of: impl Fn(&T) -> Option<u32>,
) -> std::io::Result<T> {
    let mut guard = known();
    let child = spawn()?;
    if let Some(pid) = pid_of(&child) {
        guard.insert(pid);
    }
    Ok(child)
}

/// The child `pid` has been reaped by its owner; a later process with the same pid is new.
pub fn forget(pid: u32) {
    known().remove(&pid);
}

/// Every pid in `/proc`.
fn pids() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .collect()
}

/// Kills `pid` and the process group it leads.
fn kill_with_group(pid: u32) {
    let p = Pid::from_raw(pid as i32);
    let _ = killpg(p, Signal::SIGKILL);
    let _ = kill(p, Signal::SIGKILL);
}

/// The pids whose parent is `parent`, from `/proc`.
fn children_of(parent: u32) -> Vec<u32> {
    pids()
        .into_iter()
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    let rest = stat.rsplit_once(')')?.1.to_string();
                    rest.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(parent)
        })
        .collect()
}

/// What to do with the children this process did not start on purpose: where the kernel
/// contains every command (its own PID namespace), nothing a model started can be among them
/// — they are the orphans of Pegasus's own dead workers (a `git` finishing its change of a
/// repository, holding its lock), so the exited ones are only reaped; elsewhere they are
/// escapees and are killed ([`kill_adopted`]). Returns how many were killed.
pub fn sweep_adopted() -> usize {
    if crate::kernel_contains() {
        reap_adopted();
        0
    } else {
        kill_adopted()
    }
}

/// Reaps the adopted children that have exited (zombies), without waiting for the others. A
/// `git` this process runs itself is left to the thread that waits for it.
fn reap_adopted() {
    let me = std::process::id();
    let ours = known().clone();
    for pid in children_of(me).into_iter().filter(|p| !ours.contains(p)) {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let zombie = stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
        if zombie && !stat.contains("(git)") {
            let _ = waitpid(Pid::from_raw(pid as i32), Some(WaitPidFlag::WNOHANG));
        }
    }
}

/// Kills and reaps every child of this process that it did not start on purpose, and the
/// process group each one leads; repeats while killing them orphans more. Returns how many.
pub fn kill_adopted() -> usize {
    let me = std::process::id();
    let mut killed = 0;
    // Each round takes one generation of escapees; a fork bomb's depth is bounded by the rounds
    // and the rest waits for the next sweep.
    for _ in 0..16 {
        let ours = known();
        let strays: Vec<u32> = children_of(me)
            .into_iter()
            .filter(|p| !ours.contains(p))
            .collect();
        if strays.is_empty() {
            break;
        }
        strays.iter().for_each(|&pid| kill_with_group(pid));
        drop(ours);
        for &pid in &strays {
            reap(pid);
        }
        killed += strays.len();
    }
    killed
}

/// Kills every process of this user (except this one) that started with
/// `EXEC_MARK_ENV=<home>` in its environment, with its process group. For pegasusd at start,
/// when no command of this home can still be running legitimately (workers die with the
/// daemon, commands with their worker): what is found escaped its worker while nobody was
/// there to sweep. A command that re-executed itself with an emptied environment is not
/// found. Returns how many it killed.
pub fn kill_marked(home: &std::path::Path) -> usize {
    use std::os::unix::fs::MetadataExt;
    let mark = format!("{EXEC_MARK_ENV}={}", home.display()).into_bytes();
    let me = std::process::id();
    let Ok(uid) = std::fs::metadata("/proc/self").map(|m| m.uid()) else {
        return 0;
    };
    let mut killed = 0;
    for pid in pids() {
        if pid == me
            || std::fs::metadata(format!("/proc/{pid}"))
                .map(|m| m.uid() != uid)
                .unwrap_or(true)
        {
            continue;
        }
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        if environ.split(|&b| b == 0).any(|var| var == mark.as_slice()) {
            kill_with_group(pid);
            killed += 1;
        }
    }
    killed
}

/// Waits a moment for a killed child to become a zombie, and reaps it.
fn reap(pid: u32) {
    let deadline = Instant::now() + Duration::from_millis(200);
    loop {
        match waitpid(Pid::from_raw(pid as i32), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(2))
            }
            _ => return,
        }
    }
}
