//! Per-project limits with cgroups (DESIGN.md §12): no project can starve the others.
//!
//! pegasusd ([`Cgroups::setup`], once at start) finds its own cgroup in each hierarchy it
//! needs — cgroup v1 (a hierarchy per controller, as on hybrid hosts) or the unified v2
//! hierarchy — and makes one parent per home below it, `pegasus-<tag of the home>`. Each
//! project's worker gets its own cgroup there ([`Cgroups::create`]), with two leaves:
//!
//! ```text
//! <pegasusd's cgroup>/pegasus-<tag>/<project>/          memory limit (the whole project)
//!                                            /worker    the worker (placed before it execs)
//!                                            /commands  everything it starts: pids, cpu limits
//! ```
//!
//! The worker puts itself in `worker` first thing, before any thread ([`CommandCgroup::from_env`]),
//! so nothing it does escapes; every command it starts (`exec`, hydrate, verify, MCP servers: all go through
//! [`crate::confine`]) moves itself into `commands` before it runs, and raises its
//! `oom_score_adj`, so an out-of-memory kill inside the project takes the command, never the
//! worker, and never anything outside the project. pegasusd is in none of these cgroups. The
//! memory limit covers the worker and its commands; the process and cpu limits what the
//! commands run (a fork bomb cannot take the threads the worker itself needs to report it).
//!
//! A command killed for memory is told apart by the project's out-of-memory kill counter
//! ([`CommandCgroup::oom_kills`]: `memory.events` `oom_kill` on v2, `memory.oom_control`
//! `oom_kill` — or `memory.failcnt` on older kernels — on v1) together with its SIGKILL.
//!
//! A cgroup is removed when its worker has ended ([`ProjectCgroup::remove`]), and those a
//! killed daemon left are swept at start ([`Cgroups::sweep`]). Where the kernel does not let
//! pegasusd use cgroups (no write access, no controller), `setup` says why in one line and
//! projects run without limits.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nix::libc;

/// The controllers Pegasus uses, in order.
const WANTED: [&str; 3] = ["memory", "pids", "cpu"];
/// The leaf the worker lives in.
pub const WORKER_LEAF: &str = "worker";
/// The leaf the worker's commands live in.
pub const COMMANDS_LEAF: &str = "commands";
/// The environment variable pegasusd tells a worker its project's cgroup in (see
/// [`ProjectCgroup::env_value`]); the worker reads it once ([`CommandCgroup::from_env`]).
pub const CGROUP_ENV: &str = "PEGASUS_CGROUP";
/// The cfs period for the cpu quota (100 ms, the kernel's default).
const CPU_PERIOD_US: u64 = 100_000;
/// How long another home's daemon leaves a freshly made project cgroup alone, so a worker
/// that joins it after exec is never swept from under it.
const STRANGER_GRACE: Duration = Duration::from_secs(120);
/// How long removing a cgroup waits for its processes to be gone.
const REMOVE_PATIENCE: Duration = Duration::from_secs(3);

/// Which cgroup interface the kernel gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// The legacy interface: one hierarchy per controller (`/sys/fs/cgroup/memory`, ...).
    V1,
    /// The unified interface: one hierarchy for every controller.
    V2,
}

impl Version {
    fn word(self) -> &'static str {
        match self {
            Version::V1 => "v1",
            Version::V2 => "v2",
        }
    }
}

/// The limits of one project, as numbers.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Bytes of memory for the worker and everything it starts.
    pub memory: u64,
    /// How `memory` was written (`2G`), for what the model is told.
    pub memory_text: String,
    /// Processes and threads of its commands.
    pub pids: u64,
    /// Cores' worth of cpu time of its commands.
    pub cpu: f64,
}

/// One hierarchy the home's cgroups live in: their parent there, and the controllers of
/// [`WANTED`] it carries.
#[derive(Debug, Clone)]
struct Hierarchy {
    parent: PathBuf,
    controllers: Vec<&'static str>,
}

impl Hierarchy {
    fn has(&self, c: &str) -> bool {
        self.controllers.contains(&c)
    }
}

/// Where this home's project cgroups are made (see the module doc).
#[derive(Debug)]
pub struct Cgroups {
    version: Version,
    hierarchies: Vec<Hierarchy>,
    /// Controllers of [`WANTED`] this kernel or user does not give (their limit is not applied).
    missing: Vec<&'static str>,
}

/// A short tag for a home (FNV-1a of its path): one parent per home, so two daemons in the same
/// cgroup never sweep each other's projects.
fn tag(home: &Path) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in home.as_os_str().as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("pegasus-{h:016x}")
}

/// One mount of a cgroup filesystem, from `/proc/self/mountinfo`.
struct Mount {
    root: String,
    point: PathBuf,
    fstype: String,
    options: Vec<String>,
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(u8::is_ascii_digit) {
            let n = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(n);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn cgroup_mounts(mountinfo: &str) -> Vec<Mount> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let f: Vec<&str> = left.split(' ').collect();
            let r: Vec<&str> = right.split(' ').collect();
            let fstype = (*r.first()?).to_string();
            if fstype != "cgroup" && fstype != "cgroup2" {
                return None;
            }
            Some(Mount {
                root: unescape(f.get(3)?),
                point: PathBuf::from(unescape(f.get(4)?)),
                fstype,
                options: r
                    .get(2)
                    .map_or_else(Vec::new, |o| o.split(',').map(str::to_string).collect()),
            })
        })
        .collect()
}

/// The directory of cgroup `path` (as `/proc/self/cgroup` names it) on `mount`.
fn dir_on(mount: &Mount, path: &str) -> PathBuf {
    let rel = if mount.root != "/" {
        path.strip_prefix(mount.root.as_str()).unwrap_or(path)
    } else {
        path
    };
    mount.point.join(rel.trim_start_matches('/'))
}

fn read(path: &Path) -> io::Result<String> {
    std::fs::read_to_string(path)
}

fn write(path: &Path, value: &str) -> Result<(), String> {
    std::fs::write(path, value)
        .map_err(|e| format!("cannot write {value:?} to {}: {e}", path.display()))
}

fn mkdir(path: &Path) -> Result<(), String> {
    match std::fs::create_dir(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(format!("cannot create cgroup {}: {e}", path.display())),
    }
}

/// Enables `controllers` for the children of `dir` (v2), those not yet enabled.
fn enable(dir: &Path, controllers: &[&str]) -> io::Result<()> {
    let file = dir.join("cgroup.subtree_control");
    let on = read(&file)?;
    let on: Vec<&str> = on.split_whitespace().collect();
    let add: Vec<String> = controllers
        .iter()
        .filter(|c| !on.contains(c))
        .map(|c| format!("+{c}"))
        .collect();
    if add.is_empty() {
        return Ok(());
    }
    std::fs::write(&file, add.join(" "))
}

impl Cgroups {
    /// Finds this process's cgroups and makes the home's parent in each hierarchy (see the
    /// module doc). `Err` is one line saying why no limit can be applied here.
    pub fn setup(home: &Path) -> Result<Cgroups, String> {
        let cgroup = read(Path::new("/proc/self/cgroup"))
            .map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
        let mountinfo = read(Path::new("/proc/self/mountinfo"))
            .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
        Self::setup_in(&cgroup, &mountinfo, &tag(home), std::process::id())
    }

    /// [`Cgroups::setup`] from the text of `/proc/self/cgroup` and `/proc/self/mountinfo`.
    fn setup_in(cgroup: &str, mountinfo: &str, name: &str, pid: u32) -> Result<Cgroups, String> {
        let mounts = cgroup_mounts(mountinfo);
        // `ID:controllers:path`; v1 lines name their controllers, the v2 line is `0::path`.
        let lines: Vec<(Vec<&str>, &str)> = cgroup
            .lines()
            .filter_map(|l| {
                let mut it = l.splitn(3, ':');
                let _id = it.next()?;
                let ctrls = it.next()?;
                let path = it.next()?;
                Some((ctrls.split(',').filter(|c| !c.is_empty()).collect(), path))
            })
            .collect();
        let v1_has = |c: &str| lines.iter().any(|(cs, _)| cs.contains(&c));
        if WANTED.iter().any(|c| v1_has(c)) {
            Self::setup_v1(&lines, &mounts, name)
        } else {
            let path = lines
                .iter()
                .find(|(cs, _)| cs.is_empty())
                .map(|(_, p)| *p)
                .ok_or("this process is in no cgroup hierarchy")?;
            let mount = mounts
                .iter()
                .find(|m| m.fstype == "cgroup2")
                .ok_or("no cgroup filesystem is mounted")?;
            Self::setup_v2(&dir_on(mount, path), &mount.point, name, pid)
        }
    }

    fn setup_v1(
        lines: &[(Vec<&str>, &str)],
        mounts: &[Mount],
        name: &str,
    ) -> Result<Cgroups, String> {
        let mut hierarchies: Vec<Hierarchy> = Vec::new();
        let mut missing = Vec::new();
        let mut first_error = None;
        for c in WANTED {
            let found = lines
                .iter()
                .find(|(cs, _)| cs.contains(&c))
                .and_then(|(_, path)| {
                    let m = mounts
                        .iter()
                        .find(|m| m.fstype == "cgroup" && m.options.iter().any(|o| o == c))?;
                    Some(dir_on(m, path).join(name))
                });
            let Some(parent) = found else {
                missing.push(c);
                continue;
            };
            if let Some(h) = hierarchies.iter_mut().find(|h| h.parent == parent) {
                h.controllers.push(c);
                continue;
            }
            match mkdir(&parent) {
                Ok(()) => hierarchies.push(Hierarchy {
                    parent,
                    controllers: vec![c],
                }),
                Err(e) => {
                    missing.push(c);
                    first_error.get_or_insert(e);
                }
            }
        }
        if hierarchies.is_empty() {
            return Err(first_error
                .unwrap_or_else(|| "no memory, pids or cpu cgroup controller is mounted".into()));
        }
        let cgroups = Cgroups {
            version: Version::V1,
            hierarchies,
            missing,
        };
        cgroups.sweep_strangers();
        Ok(cgroups)
    }

    fn setup_v2(own: &Path, root: &Path, name: &str, pid: u32) -> Result<Cgroups, String> {
        let available = read(&own.join("cgroup.controllers")).map_err(|e| {
            format!(
                "cannot read {}: {e}",
                own.join("cgroup.controllers").display()
            )
        })?;
        let available: Vec<&str> = available.split_whitespace().collect();
        let controllers: Vec<&'static str> = WANTED
            .into_iter()
            .filter(|c| available.contains(c))
            .collect();
        if controllers.is_empty() {
            return Err(format!(
                "pegasusd's cgroup {} has no memory, pids or cpu controller delegated to it",
                own.display()
            ));
        }
        if let Err(e) = enable(own, &controllers) {
            // "No internal processes": a cgroup that hands controllers to children holds no
            // process itself. If pegasusd is alone in its cgroup, it moves into a leaf of it.
            let alone = read(&own.join("cgroup.procs"))
                .is_ok_and(|p| p.split_whitespace().all(|q| q == pid.to_string()));
            if own == root || !alone || e.raw_os_error() != Some(libc::EBUSY) {
                return Err(format!(
                    "cannot enable {} in {}: {e} (run pegasusd in a cgroup of its own with them delegated, e.g. systemd Delegate=yes)",
                    controllers.join(", "),
                    own.join("cgroup.subtree_control").display()
                ));
            }
            let leaf = own.join("pegasusd");
            mkdir(&leaf)?;
            write(&leaf.join("cgroup.procs"), &pid.to_string())?;
            enable(own, &controllers).map_err(|e| {
                format!(
                    "cannot enable {} in {}: {e}",
                    controllers.join(", "),
                    own.display()
                )
            })?;
        }
        let parent = own.join(name);
        mkdir(&parent)?;
        enable(&parent, &controllers)
            .map_err(|e| format!("cannot enable controllers in {}: {e}", parent.display()))?;
        let missing = WANTED
            .into_iter()
            .filter(|c| !controllers.contains(c))
            .collect();
        let cgroups = Cgroups {
            version: Version::V2,
            hierarchies: vec![Hierarchy {
                parent,
                controllers,
            }],
            missing,
        };
        cgroups.sweep_strangers();
        Ok(cgroups)
    }

    /// `cgroup v1`, `cgroup v2`.
    pub fn describe(&self) -> String {
        format!("cgroup {}", self.version.word())
    }

    /// Which interface these cgroups are made through.
    pub fn version(&self) -> Version {
        self.version
    }

    /// The limits this kernel does not let Pegasus apply (`memory`, `pids`, `cpu`).
    pub fn missing(&self) -> &[&'static str] {
        &self.missing
    }

    /// The home's parent cgroups, one per hierarchy.
    pub fn parents(&self) -> Vec<PathBuf> {
        self.hierarchies.iter().map(|h| h.parent.clone()).collect()
    }

    /// Makes project `name`'s cgroup with `limits` (an existing one is reused and its limits
    /// set again). `Err` is one line.
    pub fn create(&self, name: &str, limits: &Limits) -> Result<ProjectCgroup, String> {
        let mut dirs = Vec::new();
        for h in &self.hierarchies {
            // Another home's daemon may have swept an empty parent away: make it again.
            if !h.parent.is_dir() {
                mkdir(&h.parent)?;
                if self.version == Version::V2 {
                    enable(&h.parent, &h.controllers).map_err(|e| {
                        format!("cannot enable controllers in {}: {e}", h.parent.display())
                    })?;
                }
            }
            let dir = h.parent.join(name);
            mkdir(&dir)?;
            if self.version == Version::V2 {
                let leaf_ctrls: Vec<&str> =
                    ["pids", "cpu"].into_iter().filter(|c| h.has(c)).collect();
                enable(&dir, &leaf_ctrls)
                    .map_err(|e| format!("cannot enable controllers in {}: {e}", dir.display()))?;
            }
            let commands = dir.join(COMMANDS_LEAF);
            // A fresh `worker` leaf each time: its age is what tells another home's daemon
            // that this project is being started (see `sweep_strangers`). One still holding a
            // process stays (rmdir refuses it).
            let worker = dir.join(WORKER_LEAF);
            let _ = std::fs::remove_dir(&worker);
            mkdir(&worker)?;
            mkdir(&commands)?;
            if h.has("memory") {
                let bytes = limits.memory.to_string();
                match self.version {
                    Version::V1 => {
                        write(&dir.join("memory.limit_in_bytes"), &bytes)?;
                        // With swap accounting, swap counts too: the limit means what it says.
                        let memsw = dir.join("memory.memsw.limit_in_bytes");
                        if memsw.exists() {
                            let _ = write(&memsw, &bytes);
                        }
                    }
                    Version::V2 => {
                        write(&dir.join("memory.max"), &bytes)?;
                        let swap = dir.join("memory.swap.max");
                        if swap.exists() {
                            let _ = write(&swap, "0");
                        }
                    }
                }
            }
            if h.has("pids") {
                write(&commands.join("pids.max"), &limits.pids.to_string())?;
            }
            if h.has("cpu") {
                let quota = ((limits.cpu * CPU_PERIOD_US as f64).round() as u64).max(1000);
                match self.version {
                    Version::V1 => {
                        write(
                            &commands.join("cpu.cfs_period_us"),
                            &CPU_PERIOD_US.to_string(),
                        )?;
                        write(&commands.join("cpu.cfs_quota_us"), &quota.to_string())?;
                    }
                    Version::V2 => {
                        write(
                            &commands.join("cpu.max"),
                            &format!("{quota} {CPU_PERIOD_US}"),
                        )?;
                    }
                }
            }
            dirs.push((dir, h.controllers.clone()));
        }
        Ok(ProjectCgroup {
            version: self.version,
            dirs,
            memory_text: limits.memory_text.clone(),
        })
    }

    /// Removes every project cgroup of this home (what a killed daemon left), killing what
    /// still runs in one; returns how many there were. Call before any worker starts.
    pub fn sweep(&self) -> usize {
        let mut names = std::collections::BTreeSet::new();
        for h in &self.hierarchies {
            let Ok(entries) = std::fs::read_dir(&h.parent) else {
                continue;
            };
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    let dir = e.path();
                    if let Err(why) = remove_tree(&dir, self.version) {
                        tracing::warn!("cannot remove the stale cgroup {}: {why}", dir.display());
                    }
                    names.insert(e.file_name());
                }
            }
        }
        names.len()
    }

    /// Removes what daemons of other homes killed with `kill -9` left (their workers died
    /// with them): every project cgroup there without a process, then each parent left empty.
    /// `rmdir` refuses a cgroup that holds a process or a child, so a live daemon's running
    /// workers keep theirs; a project whose `worker` leaf is younger than [`STRANGER_GRACE`]
    /// is being started (its worker joins the leaf itself, after exec) and is left alone too.
    fn sweep_strangers(&self) {
        for h in &self.hierarchies {
            let (Some(up), Some(ours)) = (h.parent.parent(), h.parent.file_name()) else {
                continue;
            };
            let Ok(entries) = std::fs::read_dir(up) else {
                continue;
            };
            for e in entries.flatten() {
                let n = e.file_name();
                if n != ours && n.to_string_lossy().starts_with("pegasus-") {
                    for project in subdirs(&e.path()) {
                        if young(&project.join(WORKER_LEAF)) {
                            continue;
                        }
                        // Its worker's leaf first: while a worker lives there, the project and
                        // its (often empty) commands leaf are in use and stay.
                        match std::fs::remove_dir(project.join(WORKER_LEAF)) {
                            Err(e) if e.kind() != io::ErrorKind::NotFound => continue,
                            _ => {}
                        }
                        for leaf in subdirs(&project) {
                            let _ = std::fs::remove_dir(leaf);
                        }
                        let _ = std::fs::remove_dir(project);
                    }
                    let _ = std::fs::remove_dir(e.path());
                }
            }
        }
    }

    /// Removes the home's parents (at shutdown, once every worker is gone); best effort.
    pub fn close(&self) {
        for h in &self.hierarchies {
            let _ = std::fs::remove_dir(&h.parent);
        }
    }
}

/// Whether cgroup `dir` was made less than [`STRANGER_GRACE`] ago (or its age is unknown:
/// then it is left alone too).
fn young(dir: &Path) -> bool {
    match std::fs::metadata(dir).and_then(|m| m.modified()) {
        Ok(made) => made.elapsed().map_or(true, |age| age < STRANGER_GRACE),
        Err(e) => e.kind() != io::ErrorKind::NotFound,
    }
}

/// The child cgroups of `dir`.
fn subdirs(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|es| {
            es.flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// Kills whatever is in cgroup `dir` (not its children).
fn kill_members(dir: &Path, version: Version) {
    if version == Version::V2 {
        let kill = dir.join("cgroup.kill");
        if kill.exists() && std::fs::write(&kill, "1").is_ok() {
            return;
        }
    }
    if let Ok(procs) = read(&dir.join("cgroup.procs")) {
        for pid in procs
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
        {
            if pid > 1 {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
}

/// Removes a project's cgroup `dir`: its leaves (killing what is left in them), then itself;
/// waits up to [`REMOVE_PATIENCE`] for the killed processes to be gone.
fn remove_tree(dir: &Path, version: Version) -> Result<(), String> {
    let deadline = Instant::now() + REMOVE_PATIENCE;
    let mut targets = subdirs(dir);
    targets.push(dir.to_path_buf());
    for t in targets {
        loop {
            match std::fs::remove_dir(&t) {
                Ok(()) => break,
                Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                Err(e) => {
                    if Instant::now() >= deadline {
                        return Err(format!("{}: {e}", t.display()));
                    }
                    kill_members(&t, version);
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
    }
    Ok(())
}

/// One project's cgroup (a directory in each hierarchy), made by [`Cgroups::create`].
#[derive(Debug, Clone)]
pub struct ProjectCgroup {
    version: Version,
    dirs: Vec<(PathBuf, Vec<&'static str>)>,
    memory_text: String,
}

impl ProjectCgroup {
    /// The `cgroup.procs` files of the worker leaf, for [`join_in_child`] (the worker finds its
    /// own in [`CGROUP_ENV`]; `examples/bench_limits.rs` joins a process here itself).
    pub fn worker_procs(&self) -> Vec<CString> {
        self.dirs
            .iter()
            .filter_map(|(d, _)| {
                CString::new(
                    d.join(WORKER_LEAF)
                        .join("cgroup.procs")
                        .as_os_str()
                        .as_bytes(),
                )
                .ok()
            })
            .collect()
    }

    /// The project's directories, one per hierarchy.
    pub fn dirs(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|(d, _)| d.clone()).collect()
    }

    /// What the worker is told in [`CGROUP_ENV`]: lines `version v1`, `memory 2G` and one
    /// `dir PATH [memory]` per hierarchy.
    pub fn env_value(&self) -> String {
        let mut out = format!("version {}\n", self.version.word());
        if self.dirs.iter().any(|(_, c)| c.contains(&"memory")) {
            out.push_str(&format!("memory {}\n", self.memory_text));
        }
        for (d, c) in &self.dirs {
            let mem = if c.contains(&"memory") { " memory" } else { "" };
            out.push_str(&format!("dir{mem} {}\n", d.display()));
        }
        out
    }

    /// Removes the cgroup once its worker has ended, killing what is left in it (blocks up to
    /// a few seconds: call it off the async runtime).
    pub fn remove(&self) -> Result<(), String> {
        let mut first = Ok(());
        for (d, _) in &self.dirs {
            if let Err(e) = remove_tree(d, self.version) {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }
}

/// Writes this process into each of `procs` (`cgroup.procs` files) with raw system calls only,
/// so a confined command's child can call it between fork and exec (the worker calls it first
/// thing at its start, see [`CommandCgroup::from_env`]).
pub fn join_in_child(procs: &[CString]) -> io::Result<()> {
    for p in procs {
        // SAFETY: open/write/close with a NUL-terminated path and a static buffer.
        unsafe {
            let fd = libc::open(p.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            let n = libc::write(fd, b"0".as_ptr().cast(), 1);
            let err = io::Error::last_os_error();
            libc::close(fd);
            if n != 1 {
                return Err(err);
            }
        }
    }
    Ok(())
}

/// The worker's view of its project's cgroup: where its commands go and how to tell a memory
/// kill. Set once, from [`CGROUP_ENV`].
#[derive(Debug)]
pub struct CommandCgroup {
    version: Version,
    /// `<project>/commands/cgroup.procs` in each hierarchy.
    procs: Vec<CString>,
    /// `<project>/worker/cgroup.procs` in each hierarchy: where the worker puts itself.
    worker: Vec<CString>,
    /// The project's directory in the memory hierarchy.
    memory_dir: Option<PathBuf>,
    /// The memory limit as configured (`2G`).
    memory_text: Option<String>,
}

static COMMANDS: OnceLock<CommandCgroup> = OnceLock::new();

impl CommandCgroup {
    /// Parses [`ProjectCgroup::env_value`]'s text.
    fn parse(text: &str) -> Option<CommandCgroup> {
        let mut version = None;
        let mut procs = Vec::new();
        let mut worker = Vec::new();
        let mut memory_dir = None;
        let mut memory_text = None;
        for line in text.lines() {
            let (key, rest) = line.split_once(' ')?;
            match key {
                "version" => {
                    version = Some(match rest {
                        "v1" => Version::V1,
                        "v2" => Version::V2,
                        _ => return None,
                    })
                }
                "memory" => memory_text = Some(rest.to_string()),
                "dir" => {
                    let dir = match rest.strip_prefix("memory ") {
                        Some(d) => {
                            memory_dir = Some(PathBuf::from(d));
                            d
                        }
                        None => rest,
                    };
                    let p = Path::new(dir).join(COMMANDS_LEAF).join("cgroup.procs");
                    procs.push(CString::new(p.as_os_str().as_bytes()).ok()?);
                    let w = Path::new(dir).join(WORKER_LEAF).join("cgroup.procs");
                    worker.push(CString::new(w.as_os_str().as_bytes()).ok()?);
                }
                _ => return None,
            }
        }
        Some(CommandCgroup {
            version: version?,
            procs,
            worker,
            memory_dir,
            memory_text,
        })
    }

    /// Reads (and removes) [`CGROUP_ENV`] from this process's environment; call at the very
    /// start of the worker, before any thread. From then on every confined command joins the
    /// project's `commands` cgroup. `Ok(false)`: pegasusd gave no cgroup (no limits here).
    pub fn from_env() -> Result<bool, String> {
        let Some(text) = std::env::var_os(CGROUP_ENV) else {
            return Ok(false);
        };
        std::env::remove_var(CGROUP_ENV);
        let text = text.to_string_lossy();
        let c = CommandCgroup::parse(&text)
            .ok_or_else(|| format!("{CGROUP_ENV} is not what pegasusd writes: {text:?}"))?;
        // The worker puts itself in its project's `worker` cgroup first thing, before any
        // thread or command (so pegasusd spawns it without a fork-time hook).
        join_in_child(&c.worker)
            .map_err(|e| format!("cannot join the project's cgroup ({e}); the worker stops"))?;
        let _ = COMMANDS.set(c);
        Ok(true)
    }

    /// This worker's project cgroup, once [`CommandCgroup::from_env`] found one.
    pub fn get() -> Option<&'static CommandCgroup> {
        COMMANDS.get()
    }

    /// The `cgroup.procs` files a command writes itself into.
    pub(crate) fn procs(&self) -> &[CString] {
        &self.procs
    }

    /// How many processes of the project the kernel has killed for its memory limit so far
    /// (on a v1 kernel without that counter: how often the limit was hit). `None`: no memory
    /// limit applies.
    pub fn oom_kills(&self) -> Option<u64> {
        let dir = self.memory_dir.as_ref()?;
        let field = |text: &str, key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key)?.trim().parse::<u64>().ok())
        };
        match self.version {
            Version::V2 => field(&read(&dir.join("memory.events")).ok()?, "oom_kill "),
            Version::V1 => {
                // The kill is counted in the cgroup of its victim: the project or a leaf.
                let mut total = None;
                for d in [dir.clone(), dir.join(COMMANDS_LEAF), dir.join(WORKER_LEAF)] {
                    if let Some(n) = read(&d.join("memory.oom_control"))
                        .ok()
                        .and_then(|t| field(&t, "oom_kill "))
                    {
                        total = Some(total.unwrap_or(0) + n);
                    }
                }
                total.or_else(|| read(&dir.join("memory.failcnt")).ok()?.trim().parse().ok())
            }
        }
    }

    /// What the model is told of a command that ended by SIGKILL after the project's kill
    /// counter moved from `before`: `killed: the project's memory limit (2G) was reached`;
    /// `None` when it was not the memory limit.
    pub fn memory_kill_note(&self, before: Option<u64>) -> Option<String> {
        let (before, after) = (before?, self.oom_kills()?);
        (after > before).then(|| {
            format!(
                "killed: the project's memory limit ({}) was reached",
                self.memory_text.as_deref().unwrap_or("?")
            )
        })
    }
}

/// The project's memory kill counter now, if a memory limit applies to this worker (see
/// [`CommandCgroup::oom_kills`]); take it before a command starts.
pub fn oom_kills() -> Option<u64> {
    CommandCgroup::get()?.oom_kills()
}

/// After a command ended by SIGKILL: the note for the model if the project's memory limit
/// killed it (see [`CommandCgroup::memory_kill_note`]).
pub fn memory_kill_note(before: Option<u64>) -> Option<String> {
    CommandCgroup::get()?.memory_kill_note(before)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    const HYBRID_CGROUP: &str =
        "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/abc\n1:cpu:/\n0::/\n";

    fn hybrid_mounts(root: &Path) -> String {
        let r = root.display();
        format!(
            "31 23 0:28 / {r} rw - tmpfs tmpfs rw\n\
             32 31 0:29 / {r}/cpu rw,relatime - cgroup cgroup rw,cpu\n\
             35 31 0:32 / {r}/memory rw,relatime - cgroup cgroup rw,memory\n\
             39 31 0:36 / {r}/pids rw,relatime - cgroup cgroup rw,pids\n\
             41 31 0:38 / {r}/unified rw,relatime - cgroup2 cgroup2 rw\n"
        )
    }

    #[test]
    fn v1_hierarchies_are_found_below_our_own_cgroup_in_each() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        for d in ["cpu", "memory/process_api/abc", "pids", "unified"] {
            std::fs::create_dir_all(r.join(d)).unwrap();
        }
        // A stranger's empty parent is swept with its empty projects; one in use (here: a
        // file stands for a process, which makes rmdir fail as EBUSY would) is kept.
        std::fs::create_dir_all(r.join("pids/pegasus-old/p/worker")).unwrap();
        let long_ago = std::time::SystemTime::now() - STRANGER_GRACE * 2;
        std::fs::File::open(r.join("pids/pegasus-old/p/worker"))
            .and_then(|f| f.set_modified(long_ago))
            .unwrap();
        // One made a moment ago is being started (its worker joins after exec): it stays.
        std::fs::create_dir_all(r.join("pids/pegasus-young/p/worker")).unwrap();
        std::fs::create_dir_all(r.join("pids/pegasus-busy/p/worker")).unwrap();
        std::fs::create_dir_all(r.join("pids/pegasus-busy/p/commands")).unwrap();
        std::fs::write(r.join("pids/pegasus-busy/p/worker/cgroup.procs"), "42\n").unwrap();
        let c = Cgroups::setup_in(HYBRID_CGROUP, &hybrid_mounts(r), "pegasus-x", 1).unwrap();
        assert_eq!(c.version(), Version::V1);
        assert!(c.missing().is_empty());
        assert_eq!(
            c.parents(),
            vec![
                r.join("memory/process_api/abc/pegasus-x"),
                r.join("pids/pegasus-x"),
                r.join("cpu/pegasus-x")
            ]
        );
        assert!(!r.join("pids/pegasus-old").exists());
        assert!(r.join("pids/pegasus-young/p/worker").exists());
        // A live worker's project keeps its empty commands leaf too.
        assert!(r.join("pids/pegasus-busy/p/commands").exists());
        let limits = Limits {
            memory: 64 << 20,
            memory_text: "64M".into(),
            pids: 64,
            cpu: 0.5,
        };
        let p = c.create("web", &limits).unwrap();
        let mem = r.join("memory/process_api/abc/pegasus-x/web");
        let text = |p: PathBuf| std::fs::read_to_string(p).unwrap();
        assert_eq!(text(mem.join("memory.limit_in_bytes")), "67108864");
        assert_eq!(text(r.join("pids/pegasus-x/web/commands/pids.max")), "64");
        assert_eq!(
            text(r.join("cpu/pegasus-x/web/commands/cpu.cfs_quota_us")),
            "50000"
        );
        assert_eq!(
            text(r.join("cpu/pegasus-x/web/commands/cpu.cfs_period_us")),
            "100000"
        );
        assert!(mem.join("worker").is_dir() && mem.join("commands").is_dir());
        assert_eq!(p.worker_procs().len(), 3);
        // The worker's side reads back what pegasusd wrote.
        let w = CommandCgroup::parse(&p.env_value()).unwrap();
        assert_eq!(w.procs.len(), 3);
        assert_eq!(w.memory_dir.as_deref(), Some(mem.as_path()));
        std::fs::write(
            mem.join("commands/memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
        )
        .unwrap();
        let before = w.oom_kills();
        assert_eq!(before, Some(0));
        assert_eq!(w.memory_kill_note(before), None);
        std::fs::write(
            mem.join("commands/memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n",
        )
        .unwrap();
        assert_eq!(
            w.memory_kill_note(before).as_deref(),
            Some("killed: the project's memory limit (64M) was reached")
        );
    }

    #[test]
    fn v2_enables_its_controllers_and_limits_the_commands_leaf() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        let own = r.join("system.slice/pegasusd.service");
        std::fs::create_dir_all(&own).unwrap();
        std::fs::write(own.join("cgroup.controllers"), "cpu io memory pids\n").unwrap();
        std::fs::write(own.join("cgroup.subtree_control"), "").unwrap();
        // A plain directory stands in for cgroupfs: its control files must exist to be read.
        let parent = own.join("pegasus-x");
        std::fs::create_dir_all(parent.join("web")).unwrap();
        std::fs::write(parent.join("cgroup.subtree_control"), "").unwrap();
        std::fs::write(parent.join("web/cgroup.subtree_control"), "").unwrap();
        let mounts = format!("41 31 0:38 / {} rw - cgroup2 cgroup2 rw\n", r.display());
        let c = Cgroups::setup_in(
            "0::/system.slice/pegasusd.service\n",
            &mounts,
            "pegasus-x",
            1,
        )
        .unwrap();
        assert_eq!(c.version(), Version::V2);
        assert_eq!(c.describe(), "cgroup v2");
        assert_eq!(
            std::fs::read_to_string(own.join("cgroup.subtree_control")).unwrap(),
            "+memory +pids +cpu"
        );
        let limits = Limits {
            memory: 2 << 30,
            memory_text: "2G".into(),
            pids: 512,
            cpu: 1.0,
        };
        let p = c.create("web", &limits).unwrap();
        let web = parent.join("web");
        let text = |p: PathBuf| std::fs::read_to_string(p).unwrap();
        assert_eq!(text(web.join("memory.max")), "2147483648");
        assert_eq!(text(web.join("cgroup.subtree_control")), "+pids +cpu");
        assert_eq!(text(web.join("commands/pids.max")), "512");
        assert_eq!(text(web.join("commands/cpu.max")), "100000 100000");
        let w = CommandCgroup::parse(&p.env_value()).unwrap();
        std::fs::write(
            web.join("memory.events"),
            "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n",
        )
        .unwrap();
        assert_eq!(w.oom_kills(), Some(1));
    }

    #[test]
    fn no_controller_is_one_line() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        std::fs::write(r.join("cgroup.controllers"), "hugetlb\n").unwrap();
        let mounts = format!("41 31 0:38 / {} rw - cgroup2 cgroup2 rw\n", r.display());
        let e = Cgroups::setup_in("0::/\n", &mounts, "pegasus-x", 1).unwrap_err();
        assert!(e.contains("no memory, pids or cpu controller"), "{e}");
        assert!(!e.contains('\n'));
        let e = Cgroups::setup_in("0::/\n", "", "pegasus-x", 1).unwrap_err();
        assert_eq!(e, "no cgroup filesystem is mounted");
    }

    /// On the kernel itself (skipped where pegasusd could not use cgroups): a memory hog in a
    /// project's cgroup is killed and counted there, a fork past `pids` fails, this process's
    /// own cgroups stay as they were, and removal leaves nothing behind.
    #[test]
    fn the_kernel_kills_a_hog_and_stops_a_fork_bomb_inside_the_project() {
        use std::os::unix::process::CommandExt;
        let home = tempfile::tempdir().unwrap();
        let cgroups = match Cgroups::setup(home.path()) {
            Ok(c) if c.missing().is_empty() => c,
            Ok(c) => return eprintln!("skipped: no {:?} controller here", c.missing()),
            Err(e) => return eprintln!("skipped: {e}"),
        };
        let ours = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let limits = Limits {
            memory: 48 << 20,
            memory_text: "48M".into(),
            pids: 16,
            cpu: 1.0,
        };
        let project = cgroups.create("hog", &limits).unwrap();
        let w = CommandCgroup::parse(&project.env_value()).unwrap();
        let run = |script: &str| {
            let procs = w.procs().to_vec();
            let mut cmd = std::process::Command::new("sh");
            cmd.args(["-c", script])
                .stdout(std::process::Stdio::piped());
            // SAFETY: join_in_child makes raw system calls only.
            unsafe { cmd.pre_exec(move || join_in_child(&procs)) };
            cmd.output().unwrap()
        };
        let before = w.oom_kills();
        assert!(before.is_some());
        // `tail` keeps a line in memory until its end, and /dev/zero has no line end.
        let out = run("head -c 256M /dev/zero | tail >/dev/null; echo status $?");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("status 137"), "{text}");
        assert_eq!(
            w.memory_kill_note(before).as_deref(),
            Some("killed: the project's memory limit (48M) was reached")
        );
        // 20 sleepers in a project allowed 16 processes: some forks fail; those that started
        // are left for the removal to kill.
        run("for i in $(seq 20); do sleep 60 >/dev/null 2>&1 & done");
        assert_eq!(std::fs::read_to_string("/proc/self/cgroup").unwrap(), ours);
        let pids_events = project
            .dirs()
            .iter()
            .map(|d| d.join("commands/pids.events"))
            .find(|p| p.exists())
            .unwrap();
        let events = std::fs::read_to_string(pids_events).unwrap();
        assert!(
            events.starts_with("max ") && !events.starts_with("max 0"),
            "{events}"
        );
        project.remove().unwrap();
        assert!(project.dirs().iter().all(|d| !d.exists()));
        assert_eq!(cgroups.sweep(), 0);
        cgroups.close();
        assert!(cgroups.parents().iter().all(|d| !d.exists()));
    }

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape(r"/a\040b"), "/a b");
        assert_eq!(unescape(r"/plain"), "/plain");
    }
}
