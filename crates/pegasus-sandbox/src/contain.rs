//! Kernel-enforced lifetime of everything a model can start (DESIGN.md §12): each command runs as
//! the first process after the init of a PID namespace of its own, so when the command's
//! launcher dies — its worker was killed, or pegasusd was, and the worker with it — the kernel
//! kills everything in that namespace, whatever it did to get away (`setsid`, a double fork,
//! `env -i`, a daemonizing server). No sweep by pegasusd is needed, even while it is down.
//!
//! The process tree of one confined command (`confine` installs it on a `Command`):
//!
//! ```text
//! worker ─ launcher (own process group; dies with the worker: PR_SET_PDEATHSIG)
//!            └─ init, pid 1 of a new PID + mount namespace (dies with the launcher)
//!                 └─ the command (sh -c …, an MCP server), pid 2, and all it starts
//! ```
//!
//! The launcher is what the caller sees as its child: it exits with the command's status
//! (a signal N shows as exit code 128+N). Inside the namespace `/proc` is mounted anew, so the
//! command sees only its own processes — not pegasusd's or a worker's `/proc/PID/environ` —,
//! the `.git` of the folder it may write (and of the task worktrees below it) is bound
//! read-only, so it cannot point git at a configuration of its own, and the Landlock rules of
//! [`crate::landlock_rules`] confine what it may write and read. As root the namespaces need
//! nothing more; as another user they come with a user namespace that maps only that user.
//! Where the kernel refuses both, the command runs with Landlock alone (today's behaviour)
//! and [`warn_if_unsupported`] has said so once.
//!
//! Everything runs between `fork` and `exec`, so the child code makes raw system calls only:
//! what needs memory (paths, the Landlock ruleset) is prepared before the fork.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};

use landlock::RulesetCreated;
use nix::libc;

use crate::landlock_rules::{ruleset, SandboxPaths};

/// What a confined command may touch.
#[derive(Debug, Clone, Copy)]
pub struct Confinement<'a> {
    /// The Landlock rules (home hidden, writes only to the workdir, tmp and extras); `None`:
    /// namespaces only.
    pub sandbox: Option<&'a SandboxPaths>,
    /// The folder the command runs in and may write.
    pub workdir: &'a Path,
}

/// The environment variable every sandboxed command starts with, naming the home whose worker
/// ran it (a last resort where there are no namespaces: pegasusd kills such processes at
/// start, see [`crate::adopted::kill_marked`]).
pub const EXEC_MARK_ENV: &str = "PEGASUS_EXEC_HOME";

/// Installs the containment on `cmd`: `TMPDIR` (its private temp dir), its own process group, the death signal, the
/// namespaces, the read-only `.git`, Landlock. `Err` is one line (the sandbox could not be
/// prepared); the command must not run then.
pub fn confine(cmd: &mut std::process::Command, c: Confinement<'_>) -> Result<(), String> {
    let mut prepared = Prepared::new(c)?;
    cmd.process_group(0);
    if let Some(paths) = c.sandbox {
        cmd.env("TMPDIR", &paths.tmp_dir)
            .env(EXEC_MARK_ENV, &paths.home);
        // Package managers write caches under the home folder, which is not writable here:
        // give them the project's own, unless told otherwise.
        let cache = paths.tmp_dir.join("cache");
        let told: Vec<std::ffi::OsString> = cmd.get_envs().map(|(k, _)| k.to_owned()).collect();
        for key in [
            "XDG_CACHE_HOME",
            "npm_config_cache",
            "UV_CACHE_DIR",
            "PIP_CACHE_DIR",
        ] {
            if !told.iter().any(|k| k == key) {
                cmd.env(key, &cache);
            }
        }
    }
    // SAFETY: `enter` runs in the forked child before exec and makes only raw system calls
    // (prctl, unshare, pipe2, clone, mount, open, landlock, waitpid, _exit): nothing that
    // allocates or takes a lock. Everything it needs was built by `Prepared::new`.
    unsafe {
        cmd.pre_exec(move || prepared.enter());
    }
    Ok(())
}

/// `sh -c command` in `dir`, confined as [`confine`] says, its stdin empty and its stdout and
/// stderr one pipe, which keeps their interleaving, as in a terminal: `exec`, `hydrate` and
/// `verify` all start this way. Returns the command and the pipe's read end; the caller must
/// drop the command once it is spawned, or the pipe never reports end-of-file. `Err` is one
/// line; the command must not run then.
pub fn confined_shell(
    command: &str,
    dir: &Path,
    sandbox: Option<&SandboxPaths>,
) -> Result<(std::process::Command, OwnedFd), String> {
    let pipe_error = |e: &dyn std::fmt::Display| format!("cannot create a pipe: {e}");
    let (read_end, write_end) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| pipe_error(&e))?;
    let write_end2 = write_end.try_clone().map_err(|e| pipe_error(&e))?;
    let mut cmd = std::process::Command::new("sh");
    cmd.arg("-c")
        .arg(command)
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .stdout(write_end)
        .stderr(write_end2);
    confine(
        &mut cmd,
        Confinement {
            sandbox,
            workdir: dir,
        },
    )?;
    Ok((cmd, read_end))
}

/// Read access of Landlock ABI 1 (execute, read file, read dir): always handled when Landlock
/// is, so a rule with it is never refused.
const READ_V1: u64 = (1 << 0) | (1 << 2) | (1 << 3);
/// `LANDLOCK_RULE_PATH_BENEATH`.
const RULE_PATH_BENEATH: libc::c_int = 1;

#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// Everything the child needs, made before the fork.
struct Prepared {
    parent: u32,
    root: bool,
    ruleset: Option<RulesetCreated>,
    /// A second handle on the ruleset (the same kernel object): the rule for the new `/proc`
    /// is added through it after the mount.
    ruleset_fd: Option<OwnedFd>,
    /// Paths bound read-only, with the mount flags that must be kept on the remount.
    read_only: Vec<(CString, libc::c_ulong)>,
    /// Sockets and socket folders of other daemons (the user's systemd and D-Bus, docker,
    /// tmux, X): hidden, or a command could ask one of them to start a process outside its
    /// namespace. Folders get an empty tmpfs, sockets `/dev/null`.
    hidden: Vec<(CString, bool)>,
    /// What `/proc/self/uid_map` and `gid_map` get in a user namespace.
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    /// The project's `commands` cgroup (`cgroup.procs` in each hierarchy) when limits apply
    /// (see [`crate::cgroups`]): the command joins it before anything else.
    cgroup_procs: Vec<CString>,
}

const TMPFS: &CStr = c"tmpfs";
const DEV_NULL: &CStr = c"/dev/null";
const PROC: &CStr = c"proc";
const PROC_DIR: &CStr = c"/proc";
const ROOT_DIR: &CStr = c"/";

fn cstring(p: &Path) -> Result<CString, String> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| format!("{}: a NUL in the path", p.display()))
}

impl Prepared {
    fn new(c: Confinement<'_>) -> Result<Prepared, String> {
        let (ruleset, ruleset_fd) = match c.sandbox {
            Some(paths) => {
                let r = ruleset(paths, c.workdir)?;
                let fd = r
                    .try_clone()
                    .map_err(|e| format!("cannot set up the command's sandbox: {e}"))?;
                (Some(r), Option::<OwnedFd>::from(fd))
            }
            None => (None, None),
        };
        let mut read_only = Vec::new();
        let mut roots = vec![c.workdir.to_path_buf()];
        if let Some(paths) = c.sandbox {
            roots.extend(paths.writable.iter().cloned());
        }
        for path in git_dirs(&roots) {
            read_only.push((cstring(&path)?, kept_flags(&path)));
        }
        // SAFETY: these calls only read the process's credentials.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        let mut hidden = Vec::new();
        for path in daemon_sockets(uid) {
            if let Ok(meta) = std::fs::symlink_metadata(&path) {
                if !meta.file_type().is_symlink() {
                    hidden.push((cstring(&path)?, meta.is_dir()));
                }
            }
        }
        Ok(Prepared {
            hidden,
            parent: std::process::id(),
            root: uid == 0,
            ruleset,
            ruleset_fd,
            read_only,
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
            cgroup_procs: crate::cgroups::CommandCgroup::get()
                .map(|c| c.procs().to_vec())
                .unwrap_or_default(),
        })
    }

    /// In the forked child: see the module doc. Returns `Ok` in the process that goes on to
    /// exec the command.
    fn enter(&mut self) -> io::Result<()> {
        set_pdeathsig()?;
        // The worker may have died before the prctl: then nobody would kill us later.
        if nix::unistd::getppid().as_raw() as u32 != self.parent {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        if !self.cgroup_procs.is_empty() {
            // Into the project's cgroup before it can start anything, and first in line for
            // an out-of-memory kill there, before its worker (raising it needs no privilege).
            crate::cgroups::join_in_child(&self.cgroup_procs)?;
            write_file(c"/proc/self/oom_score_adj", b"1000");
        }
        if !self.unshare()? {
            return self.restrict();
        }
        let mut fds = [0 as RawFd; 2];
        // SAFETY: pipe2 writes two fds into the array it is given.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let (alive_r, alive_w) = (fds[0], fds[1]);
        let init = raw_fork()?;
        if init > 0 {
            // The launcher: keeps `alive_w` open for as long as it lives, drops every other
            // descriptor (above all the one std waits on for the exec), waits for init.
            // SAFETY: plain descriptor calls on descriptors this process owns.
            unsafe {
                libc::close(alive_r);
                if alive_w != 3 {
                    libc::dup2(alive_w, 3);
                }
            }
            close_from(4);
            let code = wait_until(init, init);
            // SAFETY: ends this process without running anything of the parent's.
            unsafe { libc::_exit(code) }
        }
        // Init of the new namespaces.
        // SAFETY: closing our copy of the launcher's end.
        unsafe { libc::close(alive_w) };
        set_pdeathsig()?;
        if launcher_gone(alive_r) {
            // SAFETY: as above.
            unsafe { libc::_exit(127) }
        }
        // SAFETY: as above.
        unsafe { libc::close(alive_r) };
        self.mount();
        let command = raw_fork()?;
        if command == 0 {
            // Landlock on the command alone: init stays outside its domain, so the command
            // cannot read init's memory (a copy of the worker's) through /proc/1/mem, even as
            // root.
            return self.restrict();
        }
        COMMAND.store(command, Ordering::SeqCst);
        forward_signals();
        close_from(3);
        // SAFETY: as above.
        unsafe { libc::_exit(wait_until(-1, command)) }
    }

    /// Enters new PID and mount namespaces; `false` when the kernel allows neither way.
    fn unshare(&self) -> io::Result<bool> {
        let ns = libc::CLONE_NEWPID | libc::CLONE_NEWNS;
        // SAFETY: unshare takes flags only.
        if self.root && unsafe { libc::unshare(ns) } == 0 {
            return Ok(true);
        }
        // SAFETY: as above.
        if unsafe { libc::unshare(ns | libc::CLONE_NEWUSER) } != 0 {
            return Ok(false);
        }
        // Inside a fresh user namespace: map just this user, or every file would be nobody's.
        write_file(c"/proc/self/setgroups", b"deny");
        if !write_file(c"/proc/self/uid_map", &self.uid_map)
            || !write_file(c"/proc/self/gid_map", &self.gid_map)
        {
            return Err(io::Error::other(
                "cannot map the user into the command's namespace",
            ));
        }
        Ok(true)
    }

    /// Makes the namespace's mounts private, mounts its own `/proc`, binds `.git` read-only.
    /// Each step is best effort, but none is tried after the first fails (a mount while the
    /// tree still propagates would reach the parent's namespace).
    fn mount(&self) {
        let no_exec = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
        if !sys_mount(None, ROOT_DIR, None, libc::MS_REC | libc::MS_PRIVATE) {
            return;
        }
        sys_mount(Some(PROC), PROC_DIR, Some(PROC), no_exec);
        for (path, dir) in &self.hidden {
            if *dir {
                sys_mount(Some(TMPFS), path, Some(TMPFS), no_exec);
            } else {
                sys_mount(Some(DEV_NULL), path, None, libc::MS_BIND);
            }
        }
        for (path, keep) in &self.read_only {
            let read_only = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | keep;
            if sys_mount(Some(path), path, None, libc::MS_BIND)
                && !sys_mount(None, path, None, read_only)
            {
                // A bind left writable would only look protected.
                // SAFETY: umount2 of a NUL-terminated path made before the fork.
                unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) };
            }
        }
        // The ruleset was made before the new /proc existed: grant reading it.
        if let Some(fd) = &self.ruleset_fd {
            // SAFETY: open of a fixed path; the attr lives across the call.
            unsafe {
                let proc_fd = libc::open(PROC_DIR.as_ptr(), libc::O_PATH | libc::O_CLOEXEC);
                if proc_fd >= 0 {
                    let attr = PathBeneathAttr {
                        allowed_access: READ_V1,
                        parent_fd: proc_fd,
                    };
                    libc::syscall(
                        libc::SYS_landlock_add_rule,
                        fd.as_raw_fd(),
                        RULE_PATH_BENEATH,
                        &attr as *const PathBeneathAttr,
                        0u32,
                    );
                    libc::close(proc_fd);
                }
            }
        }
    }

    fn restrict(&mut self) -> io::Result<()> {
        if let Some(r) = self.ruleset.take() {
            r.restrict_self()
                .map_err(|_| io::Error::from_raw_os_error(libc::EACCES))?;
        }
        Ok(())
    }
}

/// The `.git` entries a command could otherwise rewrite below the folders it may write: each
/// folder's own and, unless the folder is a task worktree, those of its immediate subfolders
/// (repos side by side in a workdir) and of Pegasus's task worktrees in it. Symbolic links are
/// left out (a bind would follow them).
fn git_dirs(roots: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut push = |p: PathBuf| {
        if !out.contains(&p)
            && std::fs::symlink_metadata(&p).is_ok_and(|m| !m.file_type().is_symlink())
        {
            out.push(p);
        }
    };
    for root in roots {
        push(root.join(".git"));
        // A task worktree (its `.git` is a file) is left out of the subfolder scan: a nested
        // repository there is the model's own, never committed nor entered by Pegasus's git,
        // and the model must be able to delete it.
        let worktree = std::fs::symlink_metadata(root.join(".git")).is_ok_and(|m| m.is_file());
        let scans = if worktree {
            vec![]
        } else {
            vec![root.clone(), root.join(".pegasus/worktrees")]
        };
        for sub in scans {
            if let Ok(entries) = std::fs::read_dir(&sub) {
                for e in entries.flatten() {
                    if e.file_type().is_ok_and(|t| t.is_dir()) {
                        push(e.path().join(".git"));
                    }
                }
            }
        }
    }
    out
}

/// The sockets through which a command could have another daemon start a process for it, out
/// of its namespace and its Landlock domain (Landlock does not govern `connect` to a named
/// socket): the user's systemd (`systemd-run --user`) and session bus under
/// `/run/user/<uid>`, the system bus, systemd's private socket, docker, containerd and podman,
/// tmux, screen and X. DNS (`/run/systemd/resolve`) and the rest of `/run` stay.
fn daemon_sockets(uid: u32) -> Vec<PathBuf> {
    [
        format!("/run/user/{uid}"),
        "/run/dbus".to_string(),
        "/run/systemd/private".to_string(),
        "/run/docker.sock".to_string(),
        "/run/docker".to_string(),
        "/run/containerd".to_string(),
        "/run/podman".to_string(),
        "/run/screen".to_string(),
        format!("/tmp/tmux-{uid}"),
        "/tmp/.X11-unix".to_string(),
    ]
    .into_iter()
    .map(PathBuf::from)
    .collect()
}

/// The flags of the mount holding `path` that a read-only remount must keep (a user
/// namespace may not drop them).
fn kept_flags(path: &Path) -> libc::c_ulong {
    use nix::sys::statvfs::FsFlags;
    let Ok(st) = nix::sys::statvfs::statvfs(path) else {
        return 0;
    };
    let f = st.flags();
    let mut out = 0;
    for (have, keep) in [
        (FsFlags::ST_NOSUID, libc::MS_NOSUID),
        (FsFlags::ST_NODEV, libc::MS_NODEV),
        (FsFlags::ST_NOEXEC, libc::MS_NOEXEC),
        (FsFlags::ST_NOATIME, libc::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, libc::MS_NODIRATIME),
        (FsFlags::ST_RELATIME, libc::MS_RELATIME),
    ] {
        if f.contains(have) {
            out |= keep;
        }
    }
    out
}

/// `mount(2)` without data (`None`: no source or file system type); whether it worked. Makes
/// no allocation: it runs between fork and exec.
fn sys_mount(
    src: Option<&CStr>,
    target: &CStr,
    fstype: Option<&CStr>,
    flags: libc::c_ulong,
) -> bool {
    let ptr = |s: Option<&CStr>| s.map_or(std::ptr::null(), CStr::as_ptr);
    // SAFETY: NUL-terminated strings that outlive the call, or NULL where mount takes none.
    unsafe {
        libc::mount(
            ptr(src),
            target.as_ptr(),
            ptr(fstype),
            flags,
            std::ptr::null(),
        ) == 0
    }
}

fn set_pdeathsig() -> io::Result<()> {
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `fork` as the bare system call: glibc's wrapper runs the process's atfork handlers, which a
/// child of a multi-threaded process must not.
fn raw_fork() -> io::Result<libc::pid_t> {
    // SAFETY: clone with SIGCHLD and no stack or tid pointers is fork: the child continues on
    // a copy of this stack.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            libc::SIGCHLD as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(pid as libc::pid_t)
}

fn write_file(path: &CStr, bytes: &[u8]) -> bool {
    // SAFETY: open/write/close with a NUL-terminated path and a live buffer.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return false;
        }
        let n = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        libc::close(fd);
        n == bytes.len() as isize
    }
}

/// Whether the launcher is gone (its end of the pipe closed).
fn launcher_gone(fd: RawFd) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll on one pollfd, no wait.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n != 0 && (n < 0 || p.revents != 0)
}

fn close_from(first: u32) {
    // SAFETY: close_range takes integers; the fallback closes descriptors one by one.
    unsafe {
        if libc::syscall(libc::SYS_close_range, first, u32::MAX, 0u32) == 0 {
            return;
        }
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        let max = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur.min(1 << 20) as i32
        } else {
            4096
        };
        for fd in first as i32..max {
            libc::close(fd);
        }
    }
}

/// An exit code for a wait status: the code, or 128 + the signal, as shells report it.
fn exit_code(status: libc::c_int) -> libc::c_int {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        1
    }
}

/// Waits (`waitpid(wait_on)`) until `pid` ends and returns its exit code: the launcher waits
/// for init alone; init (`wait_on` -1) reaps every orphan of the namespace on the way.
fn wait_until(wait_on: libc::pid_t, pid: libc::pid_t) -> libc::c_int {
    let mut status = 0;
    loop {
        // SAFETY: waitpid writes the status into a local.
        let r = unsafe { libc::waitpid(wait_on, &mut status, 0) };
        if r == pid {
            return exit_code(status);
        }
        if r < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return 1;
        }
    }
}

/// The command init forwards signals to (init of a namespace gets only the signals it
/// handles).
static COMMAND: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward(sig: libc::c_int) {
    let pid = COMMAND.load(Ordering::SeqCst);
    if pid > 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe { libc::kill(pid, sig) };
    }
}

fn forward_signals() {
    for sig in [
        libc::SIGTERM,
        libc::SIGINT,
        libc::SIGHUP,
        libc::SIGQUIT,
        libc::SIGUSR1,
        libc::SIGUSR2,
    ] {
        // SAFETY: installs a handler that only calls kill; the struct is zeroed, then filled.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = forward as *const () as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// What this kernel and user allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Support {
    /// The Landlock ABI, when the kernel enforces it.
    pub landlock: Option<i64>,
    /// Commands run in a PID namespace of their own (die with their worker).
    pub namespaces: bool,
}

/// Runs one confined command to see what holds (a few milliseconds).
pub fn probe() -> Support {
    let mut cmd = std::process::Command::new("sh");
    // `read` is the shell's own builtin, so /proc/self is the shell itself (pid 2 in the
    // namespace) only when /proc is the namespace's own; a command substitution would fork
    // and read a child's pid instead.
    cmd.args(["-c", "read -r pid rest < /proc/self/stat; echo $$ $pid"])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let namespaces = confine(
        &mut cmd,
        Confinement {
            sandbox: None,
            workdir: Path::new("/"),
        },
    )
    .is_ok()
        && cmd
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "2 2");
    Support {
        landlock: crate::landlock_rules::landlock_abi(),
        namespaces,
    }
}

static SUPPORT: std::sync::OnceLock<Support> = std::sync::OnceLock::new();

/// Whether commands get their own PID namespace here (probed once per process): then the
/// kernel ends what they start, and no sweep of escaped processes is needed.
pub fn kernel_contains() -> bool {
    SUPPORT.get_or_init(probe).namespaces
}

/// Logs one warning for each containment this kernel cannot give; call once at start.
pub fn warn_if_unsupported() -> Support {
    let s = *SUPPORT.get_or_init(probe);
    if s.landlock.is_none() {
        tracing::warn!(
            "this kernel has no Landlock: model-run commands can write anywhere this user can \
             and read the Pegasus home (use a kernel >= 5.13 with landlock in its LSM list)"
        );
    }
    if !s.namespaces {
        tracing::warn!(
            "commands a model runs cannot get a PID namespace of their own here: what they \
             start in the background is killed by pegasusd's sweeps instead of by the kernel, \
             and they can read other processes' /proc (run pegasusd as root, or allow \
             unprivileged user namespaces: sysctl kernel.unprivileged_userns_clone=1 and \
             user.max_user_namespaces > 0)"
        );
    }
    s
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    fn confined(script: &str, dir: &Path, sandbox: Option<&SandboxPaths>) -> Command {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", script])
            .current_dir(dir)
            .stdin(Stdio::null());
        confine(
            &mut cmd,
            Confinement {
                sandbox,
                workdir: dir,
            },
        )
        .unwrap();
        cmd
    }

    fn alive(pid: i32) -> bool {
        // A zombie is dead for our purpose.
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| {
                !s.rsplit_once(')')
                    .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
            })
            .unwrap_or(false)
    }

    #[test]
    fn exit_codes_pass_through() {
        let dir = tempfile::tempdir().unwrap();
        let out = confined("echo hi; exit 3", dir.path(), None)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(3));
        assert_eq!(String::from_utf8_lossy(&out.stdout), "hi\n");
        let out = confined("kill -9 $$", dir.path(), None).output().unwrap();
        assert_eq!(out.status.code(), Some(137));
    }

    #[test]
    fn a_missing_program_is_a_spawn_error() {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new("/nonexistent/program");
        confine(
            &mut cmd,
            Confinement {
                sandbox: None,
                workdir: dir.path(),
            },
        )
        .unwrap();
        assert!(cmd.output().is_err());
    }

    /// The heart of it: a process that left the command's group and session, with an emptied
    /// environment, dies with the command's launcher — killed by the kernel, nobody sweeping.
    #[test]
    fn what_a_command_started_dies_with_its_launcher() {
        if !probe().namespaces {
            eprintln!("skipped: no PID namespaces for this user here");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("escapee");
        // The escapee reports its pid as seen from outside: the namespace's /proc is its own,
        // so it names itself by a marker in its argv and we look it up from here.
        let script = "setsid env -i sh -c 'exec sleep 3600' pegasus-escapee-marker >/dev/null 2>&1 & echo started; sleep 3600".to_string();
        let mut child = confined(&script, dir.path(), None)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let escapee = loop {
            if let Some(pid) = find_sleeper(&child.id()) {
                break pid;
            }
            assert!(Instant::now() < deadline, "the escapee never started");
            std::thread::sleep(Duration::from_millis(20));
        };
        let _ = std::fs::write(&pidfile, escapee.to_string());
        child.kill().unwrap();
        child.wait().unwrap();
        let deadline = Instant::now() + Duration::from_secs(1);
        while alive(escapee) {
            assert!(
                Instant::now() < deadline,
                "the escapee {escapee} outlived its launcher by more than 1 s"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// A `sleep 3600` below the launcher `root` (by parent links), other than the shell's own.
    fn find_sleeper(root: &u32) -> Option<i32> {
        let parent_of = |pid: i32| -> Option<i32> {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            stat.rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()
        };
        for e in std::fs::read_dir("/proc").ok()?.flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if cmdline != b"sleep\x003600\x00" {
                continue;
            }
            // Its session differs from ours (setsid), and it descends from the launcher.
            let mut p = pid;
            for _ in 0..8 {
                match parent_of(p) {
                    Some(q) if q as u32 == *root => {
                        let sid = nix::unistd::getsid(Some(nix::unistd::Pid::from_raw(pid)));
                        let ours = nix::unistd::getsid(None);
                        if sid.ok() != ours.ok() {
                            return Some(pid);
                        }
                        break;
                    }
                    Some(q) if q > 1 => p = q,
                    _ => break,
                }
            }
        }
        None
    }

    /// A daemon's socket would let a command have a process started outside its namespace
    /// (`systemd-run --user`, `docker run`, a tmux server): the known ones are hidden.
    #[test]
    fn daemon_sockets_are_out_of_reach() {
        if !probe().namespaces {
            eprintln!("skipped: no PID namespaces for this user here");
            return;
        }
        // SAFETY: reads the process's credentials.
        let uid = unsafe { libc::geteuid() };
        let dir = PathBuf::from(format!("/tmp/tmux-{uid}"));
        let made = std::fs::create_dir(&dir).is_ok();
        let sock = dir.join(format!("pegasus-test-{}", std::process::id()));
        let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let work = tempfile::tempdir().unwrap();
        let script = format!("test -S {} && echo visible || echo hidden", sock.display());
        let out = confined(&script, work.path(), None).output().unwrap();
        drop(listener);
        let _ = std::fs::remove_file(&sock);
        if made {
            let _ = std::fs::remove_dir(&dir);
        }
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "hidden");
    }

    /// Init is a fork of the worker: its memory is the worker's. The command's Landlock domain
    /// keeps it out, root or not. (Its `environ` is the worker's initial environment, which
    /// holds no credential by design: keys never reach a worker, and a remote worker's
    /// enrollment token is spent before any command runs. As root the kernel lets a process
    /// read it; this test runs as root on CI, so it pins down the memory only.)
    #[test]
    fn the_command_cannot_read_its_init() {
        if !probe().namespaces || crate::landlock_abi().is_none() {
            eprintln!("skipped: no namespaces or no Landlock here");
            return;
        }
        let base = tempfile::tempdir().unwrap();
        let home = base.path().join("home");
        let own = home.join("projects/p");
        std::fs::create_dir_all(&own).unwrap();
        let work = base.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        let paths = SandboxPaths {
            home: home.clone(),
            own_dir: own.clone(),
            tmp_dir: own.join("tmp"),
            writable: vec![],
        };
        let script = "head -c 1 /proc/1/mem >/dev/null 2>&1 && echo mem-read; \
                      cat /proc/self/status >/dev/null && echo self-ok";
        let out = confined(script, &work, Some(&paths)).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(!text.contains("mem-read"), "{text}");
        assert!(text.contains("self-ok"), "{text}");
    }

    #[test]
    fn the_command_sees_only_its_own_processes_and_cannot_write_git() {
        if !probe().namespaces {
            eprintln!("skipped: no PID namespaces for this user here");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(".git")).unwrap();
        std::fs::write(dir.path().join(".git/config"), "[core]\n").unwrap();
        let me = std::process::id();
        let script = format!(
            "test -e /proc/{me} && echo visible; echo x >> .git/config || echo git-refused; echo ok > file && echo wrote"
        );
        let out = confined(&script, dir.path(), None).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(!text.contains("visible"), "{text}");
        assert!(text.contains("git-refused"), "{text}");
        assert!(text.contains("wrote"), "{text}");
        assert_eq!(
            std::fs::read_to_string(dir.path().join(".git/config")).unwrap(),
            "[core]\n"
        );
    }
}
