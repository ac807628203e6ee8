//! Running one hook command: `sh -c COMMAND` contained exactly as `exec` is (its own process
//! group and PID namespace, Landlock, the project's cgroup, dying with its worker), the
//! event's JSON on stdin, stdout and stderr kept apart and capped, and the whole group killed
//! at its timeout.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use super::outcome::Ended;
use crate::tools::exec::GroupKiller;

/// Bytes of stdout, and of stderr, kept of one hook; the rest is read and dropped.
pub const OUTPUT_CAP: usize = 64 * 1024;

/// Where and how one hook runs.
pub struct Spec<'a> {
    /// The command line.
    pub command: &'a str,
    /// The event as JSON, written to its stdin.
    pub input: &'a [u8],
    /// Its working directory.
    pub cwd: &'a Path,
    /// Extra environment (`CLAUDE_PROJECT_DIR`, `PEGASUS_PROJECT`).
    pub env: &'a [(&'a str, String)],
    /// How long it may run.
    pub timeout: Duration,
    /// Its Landlock confinement; `None`: namespaces only.
    pub sandbox: Option<&'a pegasus_sandbox::SandboxPaths>,
    /// Where its process group is recorded for pegasusd's sweep.
    pub registry: Option<&'a Path>,
}

/// How long the pipes may still flow once the hook exited and its group was killed (only a
/// process that left the group can hold them that long).
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// Reads all of `from`, keeping the first [`OUTPUT_CAP`] bytes; `true` when more came.
async fn read_capped(mut from: impl AsyncRead + Unpin) -> (Vec<u8>, bool) {
    let mut kept = Vec::new();
    let mut flooded = false;
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        match from.read(&mut chunk).await {
            Ok(0) | Err(_) => return (kept, flooded),
            Ok(n) => {
                let room = OUTPUT_CAP.saturating_sub(kept.len());
                kept.extend_from_slice(&chunk[..n.min(room)]);
                flooded |= n > room;
            }
        }
    }
}

/// Runs one hook (see the module doc) and says how it ended.
pub async fn run(spec: Spec<'_>) -> Ended {
    let ended = run_contained(&spec).await;
    // What escaped the group (a `setsid` child) was re-parented to this process: killed too.
    let _ = pegasus_fs::blocking(pegasus_sandbox::adopted::sweep_adopted).await;
    ended
}

async fn run_contained(spec: &Spec<'_>) -> Ended {
    if !spec.cwd.is_dir() {
        return Ended::NotStarted(format!("its folder {} does not exist", spec.cwd.display()));
    }
    let mut cmd = std::process::Command::new("sh");
    cmd.arg("-c")
        .arg(spec.command)
        .current_dir(spec.cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in spec.env {
        cmd.env(k, v);
    }
    if let Err(e) = pegasus_sandbox::confine(
        &mut cmd,
        pegasus_sandbox::Confinement {
            sandbox: spec.sandbox,
            workdir: spec.cwd,
        },
    ) {
        return Ended::NotStarted(e);
    }
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.kill_on_drop(true);
    let mut child = match pegasus_sandbox::adopted::spawn_known(|| cmd.spawn(), |c| c.id()) {
        Ok(c) => c,
        Err(e) => return Ended::NotStarted(format!("cannot start sh: {e}")),
    };
    let Some(pid) = child.id() else {
        return Ended::NotStarted("it exited before it could be watched".into());
    };
    let group = GroupKiller {
        pgid: Pid::from_raw(pid as i32),
        pid,
    };
    if let Some(registry) = spec.registry {
        if let Err(e) = pegasus_sandbox::record_exec_group(registry, pid as i32) {
            tracing::warn!("cannot record the hook's process group {pid}: {e}");
        }
    }
    let (Some(mut stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Ended::NotStarted("its pipes could not be opened".into());
    };
    // The pipes are read on their own, so a hook that writes much before reading its stdin
    // (or never reads it) cannot stall: a failed write (it exited early) is no error of ours.
    let out = tokio::spawn(read_capped(stdout));
    let err = tokio::spawn(read_capped(stderr));
    let input = spec.input.to_vec();
    let run = async move {
        let _ = stdin.write_all(&input).await;
        drop(stdin);
        child.wait().await
    };
    let status = tokio::time::timeout(spec.timeout, run).await;
    // Whatever it left running (a background job holding the pipes) goes with it, so the
    // pipes end now.
    group.kill();
    let status = match status {
        Err(_) => {
            return Ended::TimedOut {
                secs: spec.timeout.as_secs(),
            }
        }
        Ok(Err(e)) => return Ended::NotStarted(format!("cannot wait for it: {e}")),
        Ok(Ok(status)) => status,
    };
    let drained = |h: tokio::task::JoinHandle<(Vec<u8>, bool)>| async move {
        match tokio::time::timeout(DRAIN_GRACE, h).await {
            Ok(Ok(kept)) => kept,
            _ => (Vec::new(), false),
        }
    };
    let ((out, out_flooded), (err, err_flooded)) = tokio::join!(drained(out), drained(err));
    Ended::Exited {
        code: status.code().unwrap_or(128),
        stdout: String::from_utf8_lossy(&out).into_owned(),
        stderr: String::from_utf8_lossy(&err).into_owned(),
        flooded: out_flooded || err_flooded,
    }
}
