//! `exec{command, timeout_s?}`: a shell command in the workdir.
//!
//! The command runs as `sh -c` in its own process group and PID namespace
//! ([`pegasus_sandbox::confine`]), so everything it starts can be killed as one: on timeout,
//! when the call is cancelled (its future dropped, e.g. the worker is told to stop), and when
//! the shell exits (background jobs do not outlive the call; nobody would be left to watch
//! them). The kernel kills the namespace when the worker dies, even under `kill -9`, where no
//! destructor runs.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use serde::Deserialize;
use tokio::io::AsyncReadExt;
use tokio::time::Instant;

use crate::tool::{ToolCtx, ToolOutput, TypedTool};

/// Runs a shell command (see the module doc).
pub struct Exec;

/// The arguments of `exec`, as its schema describes them.
#[derive(Deserialize)]
pub struct Args {
    command: String,
    #[serde(default)]
    timeout_s: Option<u64>,
}

/// How long output may keep flowing after the shell exited and its group was killed; only a
/// process that escaped the group (`setsid`) can hold the pipe open that long.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

impl TypedTool for Exec {
    type Args = Args;

    fn name(&self) -> &str {
        "exec"
    }

    fn description(&self) -> &str {
        "Run a shell command (sh -c) in the working directory. Returns the exit code and the combined stdout+stderr (long output is cut). Background processes are killed when the command ends; a command running past the timeout is killed."
    }

    fn schema(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "the shell command"},
                "timeout_s": {"type": "integer", "minimum": 1, "description": "seconds before the command is killed (capped by the configured maximum)"}
            },
            "required": ["command"]
        })
    }

    async fn run(&self, args: Args, ctx: &ToolCtx) -> Result<ToolOutput, String> {
        let max = ctx.settings.exec_timeout_s.max(1);
        let secs = args.timeout_s.unwrap_or(max).clamp(1, max);
        Ok(run_command(CommandSpec {
            command: &args.command,
            workdir: &ctx.workdir,
            timeout: Duration::from_secs(secs),
            output_cap: ctx.settings.exec_output_cap,
            registry: ctx.settings.exec_registry.as_deref(),
            sandbox: ctx.settings.sandbox.as_ref(),
        })
        .await)
    }
}

/// Kills a process group when dropped: the one mechanism behind timeout, cancel and cleanup,
/// so no path out of [`run_command`] (or a hook's run) can leave the group running.
pub(crate) struct GroupKiller {
    pub(crate) pgid: Pid,
    /// The shell's pid, known to the escapee sweep until the call ends.
    pub(crate) pid: u32,
}

impl GroupKiller {
    pub(crate) fn kill(&self) {
        // ESRCH (the group is already gone) is the normal case after a clean exit.
        let _ = killpg(self.pgid, Signal::SIGKILL);
    }
}

impl Drop for GroupKiller {
    fn drop(&mut self) {
        self.kill();
        pegasus_sandbox::adopted::forget(self.pid);
    }
}

/// Output kept for the model: the first `cap` bytes, and how many there were in all.
struct Capped {
    kept: Vec<u8>,
    total: usize,
    cap: usize,
}

impl Capped {
    fn push(&mut self, bytes: &[u8]) {
        self.total += bytes.len();
        let room = self.cap.saturating_sub(self.kept.len());
        self.kept.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    fn render(&self) -> String {
        let mut s = String::from_utf8_lossy(&self.kept).into_owned();
        if self.total > self.kept.len() {
            s.push_str(&format!(
                "\n[output truncated: {} bytes in all, only the first {} are shown]",
                self.total,
                self.kept.len()
            ));
        }
        s
    }
}

/// One command to run: what, where, for how long, how much output is kept, and how it is
/// contained.
#[derive(Debug, Clone, Copy)]
pub struct CommandSpec<'a> {
    /// The shell command line, run with `sh -c`.
    pub command: &'a str,
    /// The folder it runs in; it must exist.
    pub workdir: &'a Path,
    /// How long it may run before its whole process group is killed.
    pub timeout: Duration,
    /// Bytes of output kept for the model.
    pub output_cap: usize,
    /// Where its process group is recorded for the supervisor's sweep.
    pub registry: Option<&'a Path>,
    /// Its Landlock confinement; `None` = unconfined.
    pub sandbox: Option<&'a pegasus_sandbox::SandboxPaths>,
}

/// Runs a command in its own process group (see the module doc), then kills what escaped it: a process that
/// left the command's group (`setsid cmd &`, a double fork) was re-parented to this process, a
/// child subreaper, when its parent exited; nothing the command started outlives the call.
pub async fn run_command(spec: CommandSpec<'_>) -> ToolOutput {
    let out = run_command_contained(spec).await;
    match pegasus_fs::blocking(pegasus_sandbox::adopted::sweep_adopted).await {
        Ok(0) | Err(_) => {}
        Ok(n) => tracing::info!(killed = n, "killed processes that escaped an exec command"),
    }
    out
}

/// Runs the command with `sh -c` in its workdir; see the module doc for the process rules.
async fn run_command_contained(spec: CommandSpec<'_>) -> ToolOutput {
    let CommandSpec {
        command,
        workdir,
        timeout,
        output_cap: cap,
        registry,
        sandbox,
    } = spec;
    if command.trim().is_empty() {
        return ToolOutput::error("`command` is empty");
    }
    if !workdir.is_dir() {
        return ToolOutput::error(format!("the workdir {} does not exist", workdir.display()));
    }
    // Its own process group, PID namespace and Landlock rules; it dies with this process.
    let (cmd, read_end) = match pegasus_sandbox::confined_shell(command, workdir, sandbox) {
        Ok(c) => c,
        Err(e) => return ToolOutput::error(e),
    };
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.kill_on_drop(true);
    // The project's memory-kill count before it starts (DESIGN.md §12 limits; `None`: no limit).
    let oom_before = pegasus_sandbox::cgroups::oom_kills();
    let spawned = pegasus_sandbox::adopted::spawn_known(|| cmd.spawn(), |c| c.id());
    // Our copies of the write end must close, or the pipe never reports end-of-file.
    drop(cmd);
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => return ToolOutput::error(format!("cannot start sh: {e}")),
    };
    let Some(pid) = child.id() else {
        return ToolOutput::error("the command exited before it could be watched");
    };
    let group = GroupKiller {
        pgid: Pid::from_raw(pid as i32),
        pid,
    };
    // Grandchildren do not inherit the death signal: if the worker is killed, the supervisor
    // finds this group in the registry and kills it.
    if let Some(registry) = registry {
        if let Err(e) = pegasus_sandbox::record_exec_group(registry, pid as i32) {
            tracing::warn!("cannot record exec group {pid}: {e}");
        }
    }
    let mut reader = match tokio::net::unix::pipe::Receiver::from_owned_fd(read_end) {
        Ok(r) => r,
        Err(e) => return ToolOutput::error(format!("cannot read the command's output: {e}")),
    };

    let mut out = Capped {
        kept: Vec::new(),
        total: 0,
        cap,
    };
    let mut chunk = vec![0u8; 16 * 1024];
    let mut status: Option<std::io::Result<ExitStatus>> = None;
    let mut eof = false;
    let mut deadline = Instant::now() + timeout;
    let mut timed_out = false;
    while !(eof && status.is_some()) {
        tokio::select! {
            r = reader.read(&mut chunk), if !eof => match r {
                Ok(0) | Err(_) => eof = true,
                Ok(n) => out.push(&chunk[..n]),
            },
            s = child.wait(), if status.is_none() => {
                status = Some(s);
                // Whatever the shell left running would keep the pipe open and outlive us.
                group.kill();
                deadline = deadline.min(Instant::now() + DRAIN_GRACE);
            },
            _ = tokio::time::sleep_until(deadline) => {
                timed_out = status.is_none();
                break;
            }
        }
    }
    group.kill();
    if timed_out {
        // Reap the killed shell so it does not linger as a zombie; bounded in case it is stuck.
        let _ = tokio::time::timeout(DRAIN_GRACE, child.wait()).await;
        return ToolOutput::error(format!(
            "timed out after {} s; the command and everything it started were killed\n{}",
            timeout.as_secs(),
            out.render()
        ));
    }
    match status {
        Some(Ok(st)) => {
            if let Some(note) = pegasus_sandbox::cgroups::memory_kill_note(oom_before) {
                tracing::warn!(command, "{note}");
                let output = out.render();
                // Ended by SIGKILL (the launcher reports the command's signal as 128 + 9).
                if st.code() == Some(137) || st.signal() == Some(9) {
                    return ToolOutput::error(if output.is_empty() {
                        note
                    } else {
                        format!("{note}\n{output}")
                    });
                }
                out.push(format!("\n[a process of this command was {note}]").as_bytes());
            }
            let head = match (st.code(), st.signal()) {
                (Some(code), _) => format!("exit code: {code}"),
                (None, Some(sig)) => format!("killed by signal {sig}"),
                (None, None) => "exit status unknown".to_string(),
            };
            let text = format!("{head}\n{}", out.render());
            if st.success() {
                ToolOutput::ok(text)
            } else {
                ToolOutput::error(text)
            }
        }
        Some(Err(e)) => ToolOutput::error(format!("cannot wait for the command: {e}")),
        None => ToolOutput::error("the command's status is unknown"),
    }
}
