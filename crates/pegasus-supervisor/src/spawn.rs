//! Starting one `project-worker` process.
//!
//! The worker gets only its project path on the command line and a per-spawn token on stdin
//! (stdin, not argv or the environment, so no other process can read it from `/proc`). Its
//! environment is cleared down to a short allowlist: credentials live in pegasusd and must never
//! reach a worker. It runs in its own process group so one `killpg` takes down everything it
//! started, and it dies with us through `PR_SET_PDEATHSIG`, which the worker arms itself as the
//! first thing it does (`SUPERVISOR_PID_ENV` tells it which parent to expect). Arming it in a
//! `pre_exec` hook instead would make std fork pegasusd's whole address space for every spawn;
//! without a hook it uses `posix_spawn` (a vfork-style clone), which matters when a restart
//! starts a thousand workers.

use pegasus_proto::worker::SUPERVISOR_PID_ENV;
use std::{
    io::Read,
    os::unix::process::ExitStatusExt as _,
    path::{Path, PathBuf},
    process::{ExitStatus, Stdio},
};
use tokio::{
    io::AsyncWriteExt,
    process::{Child, Command},
};

/// Environment variables a worker inherits; everything else (API keys first) is dropped.
const ENV_ALLOWLIST: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LANG",
    "LC_ALL",
    "TZ",
    "TMPDIR",
    "PEGASUS_LOG",
    "RUST_BACKTRACE",
];

/// Where the worker binary is: `$PEGASUS_WORKER_BIN`, else beside the running pegasusd.
pub fn worker_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("PEGASUS_WORKER_BIN") {
        return PathBuf::from(p);
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|d| d.join("project-worker")))
        .unwrap_or_else(|| PathBuf::from("project-worker"))
}

/// A fresh random token (128 bits, hex) from the kernel's generator.
pub fn new_token() -> std::io::Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Spawns the worker for `project_dir` and hands it `token`, after `spawned` was told its pid
/// (so the worker socket knows it before the worker can say hello). `stderr_log` catches what
/// the worker prints outside its tracing log (a panic message, a loader error). With `cgroup`
/// (DESIGN.md §12 limits), the worker is told its project's cgroup and puts itself in it before
/// anything else, so nothing it does runs outside it.
pub async fn spawn_worker(
    bin: &Path,
    project_dir: &Path,
    token: &str,
    stderr_log: &Path,
    cgroup: Option<&pegasus_sandbox::cgroups::ProjectCgroup>,
    spawned: impl FnOnce(u32),
) -> std::io::Result<Child> {
    let mut cmd = command(bin, stderr_log)?;
    cmd.arg(project_dir)
        .stdin(Stdio::piped())
        .env(SUPERVISOR_PID_ENV, std::process::id().to_string());
    if let Some(cgroup) = cgroup {
        // The worker joins it itself first thing (as it arms PDEATHSIG), so the spawn stays a
        // `posix_spawn` with no fork-time hook.
        cmd.env(pegasus_sandbox::cgroups::CGROUP_ENV, cgroup.env_value());
    }
    // Known to the escapee sweep: pegasusd is a child subreaper and kills children it did not
    // start on purpose (see `pegasus_sandbox::adopted`).
    let mut child = pegasus_sandbox::adopted::spawn_known(|| cmd.spawn(), |c| c.id())?;
    if let Some(pid) = child.id() {
        spawned(pid);
    }
    if let Some(mut stdin) = child.stdin.take() {
        let line = format!("{token}\n");
        if let Err(e) = stdin.write_all(line.as_bytes()).await {
            let _ = child.start_kill();
            let _ = child.wait().await;
            return Err(e);
        }
    }
    Ok(child)
}

/// Starts a launcher's command (DESIGN.md §14: `ssh`, `ip netns exec`, ...) that starts a worker
/// elsewhere: `argv` already expanded, the same short environment allowlist as a local worker
/// plus the public bootstrap values in `env`, `enroll_line` (the one-time token) on its
/// standard input, which is then closed, its own process group, output to `stderr_log`. Its
/// exit says nothing about the worker: the worker is judged by its link.
pub async fn spawn_launcher(
    argv: &[String],
    env: &[(String, String)],
    enroll_line: &str,
    stderr_log: &Path,
) -> std::io::Result<Child> {
    let Some((program, args)) = argv.split_first() else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the launcher's argv is empty",
        ));
    };
    let mut cmd = command(program, stderr_log)?;
    cmd.args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped());
    let mut child = pegasus_sandbox::adopted::spawn_known(|| cmd.spawn(), |c| c.id())?;
    // One line, far below a pipe's buffer: the write never waits for the command to read it.
    // Dropping the handle closes the pipe, so the worker sees the end of its input after it.
    // A command that already exited (a broken pipe) is judged like any launch: by whether a
    // worker connects.
    if let Some(mut stdin) = child.stdin.take() {
        match stdin.write_all(enroll_line.as_bytes()).await {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                tracing::debug!("the launcher command closed its input before its token: {e}")
            }
            Err(e) => {
                let _ = child.start_kill();
                let _ = child.wait().await;
                return Err(e);
            }
        }
    }
    Ok(child)
}

/// A command with the environment cut down to [`ENV_ALLOWLIST`], in its own process group,
/// its stdout dropped and its stderr appended to `stderr_log`.
fn command(program: impl AsRef<std::ffi::OsStr>, stderr_log: &Path) -> std::io::Result<Command> {
    let stderr = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(stderr_log)?;
    let mut cmd = Command::new(program);
    cmd.env_clear()
        .envs(
            ENV_ALLOWLIST
                .iter()
                .filter_map(|k| std::env::var_os(k).map(|v| (*k, v))),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::from(stderr))
        .process_group(0)
        .kill_on_drop(false);
    if let Some(soft) = crate::gate::inherited_open_files_limit() {
        // pegasusd raised its own soft open-files limit for its listeners; the worker sets the
        // one pegasusd was given back on itself at start (no `pre_exec` hook: see above), so
        // what it runs gets the usual limit.
        cmd.env(pegasus_proto::worker::OPEN_FILES_ENV, soft.to_string());
    }
    Ok(cmd)
}

/// Kills a worker's whole process group (the worker and anything it started). A group that is
/// already gone is not an error.
pub fn kill_group(pid: u32) {
    if let Ok(pid) = i32::try_from(pid) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// How a process ended, for `status` and the crash record: `exit code 3`, `signal 9 (SIGKILL)`.
pub fn describe_exit(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exit code {code}");
    }
    match status.signal() {
        Some(sig) => match nix::sys::signal::Signal::try_from(sig) {
            Ok(s) => format!("signal {sig} ({})", s.as_str()),
            Err(_) => format!("signal {sig}"),
        },
        None => "unknown exit".into(),
    }
}
