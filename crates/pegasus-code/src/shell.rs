//! Running a project's own commands (`hydrate`, `verify`): `sh -c` in a given folder, contained
//! as `exec` is ([`pegasus_sandbox::confine`]: own process group and PID namespace, killed as
//! one on timeout and when the shell ends, so nothing it started outlives the step; dying with
//! the worker by the kernel's hand; the same Landlock rules), output cut at a cap.

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use pegasus_sandbox::SandboxPaths;

/// How one command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellResult {
    /// Exit status 0 within the time limit.
    pub ok: bool,
    /// One line: `exit 0`, `exit 2`, `killed by signal 9`, `timed out after 30 s`.
    pub status: String,
    /// stdout and stderr interleaved, cut at the cap (with a note saying so).
    pub output: String,
}

/// How long output may keep flowing after the group was killed (an escapee holding the pipe).
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// Runs `command` with `sh -c` in `dir`, confined by `sandbox` (`None`: namespaces only).
/// Never fails: a command that cannot start is a failed result saying why.
pub fn run_shell(
    command: &str,
    dir: &Path,
    timeout: Duration,
    cap: usize,
    sandbox: Option<&SandboxPaths>,
) -> ShellResult {
    let failed = |why: String| ShellResult {
        ok: false,
        status: why,
        output: String::new(),
    };
    let (mut cmd, read_end) = match pegasus_sandbox::confined_shell(command, dir, sandbox) {
        Ok(c) => c,
        Err(e) => return failed(e),
    };
    cmd.env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE");
    // The project's memory-kill count before it starts (DESIGN.md §12 limits; `None`: no limit).
    let oom_before = pegasus_sandbox::cgroups::oom_kills();
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return failed(format!("cannot start `sh -c {command}`: {e}")),
    };
    // The parent's copies of the write end are gone with `cmd`: EOF comes when the group ends.
    drop(cmd);
    let pgid = Pid::from_raw(child.id() as i32);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut file = std::fs::File::from(read_end);
        let mut kept = Vec::new();
        let mut total = 0usize;
        let mut buf = [0u8; 8192];
        loop {
            match file.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    total += n;
                    let room = cap.saturating_sub(kept.len());
                    kept.extend_from_slice(&buf[..n.min(room)]);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        let _ = tx.send((kept, total));
    });
    let deadline = Instant::now() + timeout;
    let mut timed_out = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if Instant::now() >= deadline => {
                timed_out = true;
                let _ = killpg(pgid, Signal::SIGKILL);
                break child.wait().ok();
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(_) => break None,
        }
    };
    // Background jobs do not outlive the step.
    let _ = killpg(pgid, Signal::SIGKILL);
    let (kept, total) = rx
        .recv_timeout(if timed_out {
            DRAIN_GRACE
        } else {
            timeout.max(DRAIN_GRACE)
        })
        .unwrap_or_default();
    let mut output = String::from_utf8_lossy(&kept).into_owned();
    if total > kept.len() {
        output.push_str(&format!(
            "\n[output cut: {} of {total} bytes shown]",
            kept.len()
        ));
    }
    let killed = status.is_some_and(|s| s.code() == Some(137) || s.signal() == Some(9));
    let memory = pegasus_sandbox::cgroups::memory_kill_note(oom_before);
    let (ok, status) = match (timed_out, status) {
        (true, _) => (false, format!("timed out after {} s", timeout.as_secs())),
        (false, _) if killed && memory.is_some() => (false, memory.unwrap_or_default()),
        (false, Some(s)) => match (s.code(), s.signal()) {
            (Some(c), _) => (c == 0, format!("exit {c}")),
            (None, Some(sig)) => (false, format!("killed by signal {sig}")),
            _ => (false, "ended without a status".to_string()),
        },
        (false, None) => (false, "cannot wait for the command".to_string()),
    };
    ShellResult { ok, status, output }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn exit_codes_output_and_cap() {
        let dir = tempfile::tempdir().unwrap();
        let r = run_shell(
            "echo hi; echo err >&2",
            dir.path(),
            Duration::from_secs(10),
            1000,
            None,
        );
        assert!(r.ok);
        assert_eq!(r.status, "exit 0");
        assert!(r.output.contains("hi") && r.output.contains("err"));
        let r = run_shell("exit 3", dir.path(), Duration::from_secs(10), 1000, None);
        assert!(!r.ok);
        assert_eq!(r.status, "exit 3");
        let r = run_shell(
            "yes | head -c 100000",
            dir.path(),
            Duration::from_secs(10),
            100,
            None,
        );
        assert!(r.ok);
        assert!(
            r.output.contains("[output cut: 100 of 100000 bytes shown]"),
            "{}",
            r.output
        );
    }

    #[test]
    fn a_command_past_its_timeout_is_killed_with_its_group() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("late");
        let cmd = format!("(sleep 1; touch {}) & sleep 30", marker.display());
        let r = run_shell(&cmd, dir.path(), Duration::from_millis(300), 1000, None);
        assert!(!r.ok);
        assert!(r.status.starts_with("timed out"), "{}", r.status);
        // The background job was killed with the group: the marker never appears. Watch past
        // the time it would have been written (a negative check, bounded).
        let until = Instant::now() + Duration::from_millis(1500);
        while Instant::now() < until {
            assert!(!marker.exists());
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
