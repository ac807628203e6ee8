//! The one place that runs `git`: fixed locale, no prompts, Pegasus's identity for the commits
//! it makes, LFS filters turned off when git-lfs is missing, a clean environment. Everything
//! else in the crate calls [`git`] or [`git_output`].
//!
//! A model writes the files of the worktrees git runs in, so git must never run a program the
//! model chose (DESIGN.md §12):
//! * **Pinned repositories.** A folder Pegasus opened ([`pin`]: a repo's root, a task or staging
//!   worktree it made) is always run with `--git-dir` and `--work-tree` given, so git never
//!   looks at the folder's `.git` to find its repository; and before every command that `.git`
//!   is checked to be the very one Pegasus saw (same file, same content), else the command is
//!   refused as [`CodeError::Tampered`].
//! * **Nothing the repository configures runs.** Hooks and fsmonitor are off for every command;
//!   external diff and textconv are off for `diff`; signing is off; and every program-running
//!   key of the repository's own configuration (`filter.*`, `merge.*.driver`,
//!   `submodule.*.update`, `core.sshCommand`, credential helpers, including what it includes)
//!   is overridden on the command line. The user's global and system configuration stay as
//!   they are (git-lfs keeps working).
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex, OnceLock};

use crate::error::CodeError;

/// The identity of commits Pegasus makes (task commits and merges).
pub const AUTHOR_NAME: &str = "Pegasus";
/// See [`AUTHOR_NAME`].
pub const AUTHOR_EMAIL: &str = "pegasus@localhost";

/// The oldest git with everything used here (`merge-tree --write-tree`).
const MIN_VERSION: (u32, u32) = (2, 38);

fn lfs_missing() -> bool {
    static MISSING: OnceLock<bool> = OnceLock::new();
    *MISSING.get_or_init(|| {
        // Never in a repository: an `alias.lfs` of the current folder's would run.
        !base_command(Path::new("/"))
            .args(["lfs", "version"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// Set on every command: no hook, no fsmonitor daemon, no signing program, no submodule
/// recursion, no password prompt program, no background maintenance (which outlives the
/// command).
const ALWAYS: &[&str] = &[
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "merge.verifySignatures=false",
    "submodule.recurse=false",
    "protocol.ext.allow=never",
    "core.askPass=",
    "maintenance.auto=false",
    "gc.auto=0",
];

/// What `.git` of a pinned folder was when Pegasus pinned it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    dir: bool,
    /// A gitfile's content (`gitdir: …`).
    content: Option<Vec<u8>>,
}

impl Stamp {
    fn read(dir: &Path) -> Option<Stamp> {
        let dot = dir.join(".git");
        let meta = std::fs::symlink_metadata(&dot).ok()?;
        let ft = meta.file_type();
        if ft.is_symlink() {
            return None;
        }
        let content = if ft.is_file() {
            Some(std::fs::read(&dot).ok()?)
        } else {
            None
        };
        Some(Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            dir: ft.is_dir(),
            content,
        })
    }
}

/// A folder whose repository Pegasus fixed.
#[derive(Debug)]
struct Pin {
    git_dir: PathBuf,
    /// A linked worktree of Pegasus's own (task or staging): git there dies with the worker.
    linked: bool,
    stamp: Option<Stamp>,
    /// Settings that neutralise the repository's own program-running keys.
    overrides: Vec<(String, String)>,
    /// The submodule paths of a linked worktree (its gitlinks): their `.git` files must stay
    /// what git made (naming `<common>/modules/…`).
    submodules: Vec<String>,
}

static PINS: Mutex<Option<HashMap<PathBuf, Arc<Pin>>>> = Mutex::new(None);

fn pins() -> std::sync::MutexGuard<'static, Option<HashMap<PathBuf, Arc<Pin>>>> {
    PINS.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) fn canonical(p: &Path) -> PathBuf {
    p.canonicalize().unwrap_or_else(|_| p.to_path_buf())
}

fn pinned(dir: &Path) -> Option<Arc<Pin>> {
    let guard = pins();
    let map = guard.as_ref()?;
    map.get(dir).or_else(|| map.get(&canonical(dir))).cloned()
}

/// Fixes the repository of `work_tree` to `git_dir` for every later command run there, and
/// remembers its `.git` as it is now (see the module doc).
pub fn pin(work_tree: &Path, git_dir: &Path) -> Result<(), CodeError> {
    let overrides = repository_overrides(work_tree, git_dir)?;
    let linked = git_dir
        .parent()
        .and_then(Path::file_name)
        .is_some_and(|n| n == "worktrees");
    let submodules = if linked {
        gitlinks(work_tree, git_dir)
    } else {
        Vec::new()
    };
    let entry = Arc::new(Pin {
        git_dir: git_dir.to_path_buf(),
        linked,
        submodules,
        stamp: Stamp::read(work_tree),
        overrides,
    });
    pins()
        .get_or_insert_with(HashMap::new)
        .insert(canonical(work_tree), entry);
    Ok(())
}

/// Forgets a folder (its worktree was removed).
pub fn unpin(work_tree: &Path) {
    if let Some(map) = pins().as_mut() {
        map.remove(&canonical(work_tree));
        map.remove(work_tree);
    }
}

/// The gitlinks (submodules) of the commit checked out in a worktree.
fn gitlinks(work_tree: &Path, git_dir: &Path) -> Vec<String> {
    let mut cmd = base_command_in(work_tree, git_dir);
    let Ok(out) = cmd.args(["ls-tree", "-r", "-z", "HEAD"]).output() else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .split('\0')
        .filter_map(|e| {
            let (meta, path) = e.split_once('\t')?;
            meta.starts_with("160000 ").then(|| path.to_string())
        })
        .collect()
}

/// Whether every populated submodule of a linked worktree still has the `.git` file git made:
/// one naming a folder under the repository's `modules/`, where the model cannot write. A
/// submodule git runs in (`status`, `merge`) reads its configuration from there.
fn submodules_intact(dir: &Path, pin: &Pin) -> bool {
    let Some(common) = pin.git_dir.parent().and_then(Path::parent) else {
        return false;
    };
    // A worktree's submodules live under its own admin folder; the main checkout's under the
    // common dir. Both are git's, out of the model's reach.
    let modules: [PathBuf; 2] = [
        canonical(&pin.git_dir.join("modules")),
        canonical(&common.join("modules")),
    ];
    pin.submodules.iter().all(|sub| {
        let dot = dir.join(sub).join(".git");
        let Ok(meta) = std::fs::symlink_metadata(&dot) else {
            return true; // not populated: git does not go in
        };
        if !meta.file_type().is_file() {
            return false;
        }
        std::fs::read_to_string(&dot).is_ok_and(|t| {
            t.trim().strip_prefix("gitdir: ").is_some_and(|g| {
                let real = canonical(&dot.parent().unwrap_or(dir).join(g));
                modules.iter().any(|m| real.starts_with(m))
            })
        })
    })
}

/// The `-c` overrides for the program-running keys of the repository's own configuration
/// (local and worktree scope, includes followed).
fn repository_overrides(
    work_tree: &Path,
    git_dir: &Path,
) -> Result<Vec<(String, String)>, CodeError> {
    let mut cmd = base_command_in(work_tree, git_dir);
    cmd.args([
            "config",
            "--includes",
            "--show-scope",
            "--name-only",
            "--get-regexp",
            r"^(filter\..*\.(clean|smudge|process|required)|merge\..*\.driver|submodule\..*\.update|core\.(sshcommand|gitproxy|askpass)|credential\..*helper|remote\..*\.(uploadpack|receivepack|vcs)|gc\.recentobjectshook)$",
        ]);
    let out = cmd.output().map_err(|e| CodeError::NoGit(e.to_string()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut overrides = Vec::new();
    for line in text.lines() {
        let Some((scope, key)) = line.split_once(char::is_whitespace) else {
            continue;
        };
        if !matches!(scope, "local" | "worktree") {
            continue;
        }
        let value = if key.ends_with(".required") {
            "false"
        } else if key.starts_with("merge.") {
            // Every file of that driver conflicts: the safe answer, never a silent merge.
            "false"
        } else if key.starts_with("submodule.") {
            "checkout"
        } else if key == "core.sshcommand" {
            "ssh"
        } else {
            ""
        };
        let o = (key.to_string(), value.to_string());
        if !overrides.contains(&o) {
            overrides.push(o);
        }
    }
    Ok(overrides)
}

/// git with the fixed settings and a clean environment, before any argument of the command.
fn base_command(dir: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.env_clear();
    for key in ["PATH", "HOME", "XDG_CONFIG_HOME", "TMPDIR"] {
        if let Some(v) = std::env::var_os(key) {
            cmd.env(key, v);
        }
    }
    cmd.env("LC_ALL", "C")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_EDITOR", "true")
        .env("GIT_MERGE_AUTOEDIT", "no")
        .stdin(Stdio::null());
    cmd.arg("-C").arg(dir);
    for c in ALWAYS {
        cmd.args(["-c", c]);
    }
    cmd
}

/// [`base_command`] on the repository `git_dir` with `work_tree` as its work tree.
fn base_command_in(work_tree: &Path, git_dir: &Path) -> Command {
    let mut cmd = base_command(work_tree);
    cmd.arg(format!("--git-dir={}", git_dir.display()))
        .arg(format!("--work-tree={}", work_tree.display()));
    cmd
}

fn command(dir: &Path, args: &[&str]) -> Result<Command, CodeError> {
    let mut cmd = base_command(dir);
    // Beyond the fixed `ALWAYS` (given as `-c`), settings go through GIT_CONFIG_COUNT/KEY/VALUE:
    // no parsing ambiguity for the repository's own key names (a subsection may hold `=`),
    // and the gits git starts itself (in submodules) get them too.
    let mut config: Vec<(String, String)> = vec![
        ("user.name".into(), AUTHOR_NAME.into()),
        ("user.email".into(), AUTHOR_EMAIL.into()),
    ];
    if lfs_missing() {
        // A repo using LFS cannot even check out without git-lfs; the pointer files are
        // checked out instead (design note: PostHog/code #1729, vscode #325591).
        for (k, v) in [
            ("filter.lfs.smudge", ""),
            ("filter.lfs.process", ""),
            ("filter.lfs.required", "false"),
        ] {
            config.push((k.to_string(), v.to_string()));
        }
    }
    if let Some(pin) = pinned(dir) {
        if pin.stamp.is_some() && Stamp::read(dir) != pin.stamp || !submodules_intact(dir, &pin) {
            return Err(CodeError::Tampered {
                dir: dir.to_path_buf(),
            });
        }
        config.extend(pin.overrides.iter().cloned());
        if pin.linked {
            // Nobody else writes a task's worktree: git there dies with its worker, so a lock
            // it leaves is known to be stale when the task resumes (see `worktree::create`).
            // The user's own checkout is not one: a fast-forward there runs to its end.
            let parent = std::process::id();
            // SAFETY: prctl and getppid only, between fork and exec; the error is an errno.
            unsafe {
                cmd.pre_exec(move || {
                    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)?;
                    if nix::unistd::getppid().as_raw() as u32 != parent {
                        return Err(std::io::Error::from_raw_os_error(nix::libc::ESRCH));
                    }
                    Ok(())
                });
            }
        }
        cmd.arg(format!("--git-dir={}", pin.git_dir.display()))
            .arg(format!("--work-tree={}", dir.display()));
    }
    if !pinned(dir).is_some_and(|p| p.linked) {
        // In the repository itself: the git inherits the repository's lock (when held), so a
        // worker killed now leaves it to finish, lock held, instead of to a racing successor;
        // in a process group of its own, so the kill of the worker's group spares it (a
        // fast-forward of the user's checkout cut between its index and its ref would leave
        // the checkout dirty).
        cmd.process_group(0);
        let held = crate::lock::held_here();
        if !held.is_empty() {
            // SAFETY: fcntl on descriptors of this process, between fork and exec.
            unsafe {
                cmd.pre_exec(move || {
                    for fd in &held {
                        nix::libc::fcntl(*fd, nix::libc::F_SETFD, 0);
                    }
                    Ok(())
                });
            }
        }
    }
    cmd.env("GIT_CONFIG_COUNT", config.len().to_string());
    for (i, (k, v)) in config.iter().enumerate() {
        cmd.env(format!("GIT_CONFIG_KEY_{i}"), k)
            .env(format!("GIT_CONFIG_VALUE_{i}"), v);
    }
    match args.split_first() {
        // External diff programs and textconv filters are the repository's programs, and a
        // submodule's status runs git inside it (`.gitmodules` can ask for that whatever the
        // configuration says): off, as flags.
        Some((&"diff", rest)) => {
            cmd.args([
                "diff",
                "--no-ext-diff",
                "--no-textconv",
                "--ignore-submodules=all",
            ])
            .args(rest);
        }
        Some((&"status", rest)) => {
            cmd.args(["status", "--ignore-submodules=all"]).args(rest);
        }
        _ => {
            cmd.args(args);
        }
    }
    Ok(cmd)
}

/// Runs git and returns its output whatever the exit status (for commands whose failure is an
/// answer, like `merge-tree` or `merge-base --is-ancestor`).
pub fn git_output(dir: &Path, args: &[&str]) -> Result<Output, CodeError> {
    command(dir, args)?
        .output()
        .map_err(|e| CodeError::NoGit(e.to_string()))
}

/// Runs git and returns its stdout (trailing newline trimmed); a non-zero exit is an error with
/// git's own message.
pub fn git(dir: &Path, args: &[&str]) -> Result<String, CodeError> {
    let out = git_output(dir, args)?;
    if out.status.success() {
        let s = String::from_utf8_lossy(&out.stdout);
        Ok(s.trim_end_matches('\n').to_string())
    } else {
        Err(failure(dir, args, &out))
    }
}

/// The error for a failed git command: its stderr (or stdout, which is where `merge` reports
/// conflicts), one line, cut when long.
pub fn failure(dir: &Path, args: &[&str], out: &Output) -> CodeError {
    let mut msg = String::from_utf8_lossy(&out.stderr).trim().to_string();
    if msg.is_empty() {
        msg = String::from_utf8_lossy(&out.stdout).trim().to_string();
    }
    let mut msg = msg.replace('\n', "; ");
    if msg.len() > 600 {
        let mut cut = 600;
        while !msg.is_char_boundary(cut) {
            cut -= 1;
        }
        msg.truncate(cut);
        msg.push('…');
    }
    CodeError::Git {
        args: args.join(" "),
        dir: dir.to_path_buf(),
        stderr: msg,
    }
}

/// Checks that git runs and is new enough; the version string on success.
pub fn check_version() -> Result<String, CodeError> {
    static CHECKED: OnceLock<Result<String, String>> = OnceLock::new();
    let version = CHECKED
        .get_or_init(|| {
            let out = base_command(Path::new("/"))
                .arg("--version")
                .output()
                .map_err(|e| e.to_string())?;
            let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
            Ok(text
                .strip_prefix("git version ")
                .unwrap_or(&text)
                .to_string())
        })
        .clone()
        .map_err(CodeError::NoGit)?;
    let mut parts = version.split('.').map(|p| {
        p.chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse::<u32>()
            .unwrap_or(0)
    });
    let found = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    if found < MIN_VERSION {
        return Err(CodeError::OldGit(version));
    }
    Ok(version)
}

/// The commit `path` has checked out, or `None` when it is not the root of a git repository
/// with at least one commit, or git is not installed. For a folder Pegasus has not opened (a
/// task's spec records its repos' commits before any worktree exists): the one read here that
/// is not pinned, and `rev-parse` runs no program of the repository.
///
/// Discovery is stopped at `path` itself (`GIT_CEILING_DIRECTORIES`): without that, a plain
/// folder inside some unrelated repository (a dotfiles repo holding the Pegasus home, say)
/// would be snapshotted with that repository's HEAD.
pub fn repo_head(path: &Path) -> Option<String> {
    repo_rev(path, "HEAD")
}

/// The commit `rev` names in the repository at `path` (same rules as [`repo_head`]).
pub fn repo_rev(path: &Path, rev: &str) -> Option<String> {
    let ceiling = path.parent().unwrap_or(path);
    let spec = format!("{rev}^{{commit}}");
    let out = Command::new("git")
        .arg("-C")
        .arg(path)
        .args(["rev-parse", "--verify", "-q", &spec])
        .env("GIT_CEILING_DIRECTORIES", ceiling)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let head = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!head.is_empty() && head.chars().all(|c| c.is_ascii_hexdigit())).then_some(head)
}

/// The full sha of `rev` in the repository at `dir`, or `None` when it does not name a commit.
pub fn rev(dir: &Path, rev: &str) -> Result<Option<String>, CodeError> {
    let spec = format!("{rev}^{{commit}}");
    let out = git_output(dir, &["rev-parse", "--verify", "-q", &spec])?;
    if !out.status.success() {
        return Ok(None);
    }
    let s = String::from_utf8_lossy(&out.stdout).trim().to_string();
    Ok((!s.is_empty()).then_some(s))
}

/// Whether commit `a` is an ancestor of (or equal to) `b`.
pub fn is_ancestor(dir: &Path, a: &str, b: &str) -> Result<bool, CodeError> {
    let args = ["merge-base", "--is-ancestor", a, b];
    let out = git_output(dir, &args)?;
    match out.status.code() {
        Some(0) => Ok(true),
        Some(1) => Ok(false),
        _ => Err(failure(dir, &args, &out)),
    }
}
