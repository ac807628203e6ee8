//! The one place that runs `git`: fixed locale, no prompts, Pegasus's identity for the commits
//! it makes, LFS filters turned off when git-lfs is missing, and the variables that could point
//! git somewhere else removed. Everything else in the crate calls [`git`] or [`git_output`].

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

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
        !Command::new("git")
            .args(["lfs", "version"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    })
}

fn command(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new("git");
    cmd.arg("-C")
        .arg(dir)
        .args(["-c", &format!("user.name={AUTHOR_NAME}")])
        .args(["-c", &format!("user.email={AUTHOR_EMAIL}")]);
    if lfs_missing() {
        // A repo using LFS cannot even check out without git-lfs; the pointer files are
        // checked out instead (design note: PostHog/code #1729, vscode #325591).
        cmd.args([
            "-c",
            "filter.lfs.smudge=",
            "-c",
            "filter.lfs.process=",
            "-c",
            "filter.lfs.required=false",
        ]);
    }
    cmd.args(args)
        .env("LC_ALL", "C")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_EDITOR", "true")
        .env("GIT_MERGE_AUTOEDIT", "no")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE")
        .env_remove("GIT_COMMON_DIR")
        .env_remove("GIT_OBJECT_DIRECTORY")
        .stdin(Stdio::null());
    cmd
}

/// Runs git and returns its output whatever the exit status (for commands whose failure is an
/// answer, like `merge-tree` or `merge-base --is-ancestor`).
pub fn git_output(dir: &Path, args: &[&str]) -> Result<Output, CodeError> {
    command(dir, args)
        .output()
        .map_err(|e| CodeError::NoGit(e.to_string()))
}

/// Runs git and returns its stdout (trailing newline trimmed); a non-zero exit is an error with
/// git's own message.
pub fn git(dir: &Path, args: &[&str]) -> Result<String, CodeError> {
    let out = git_output(dir, args)?;
    if out.status.success() {
        let mut s = String::from_utf8_lossy(&out.stdout).into_owned();
        while s.ends_with('\n') {
            s.pop();
        }
        Ok(s)
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
    let r = CHECKED.get_or_init(|| {
        let out = Command::new("git")
            .arg("--version")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("nogit:{e}"))?;
        let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let version = text
            .strip_prefix("git version ")
            .unwrap_or(&text)
            .to_string();
        let mut parts = version.split('.').map(|p| {
            p.chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
                .parse::<u32>()
                .unwrap_or(0)
        });
        let found = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        if found < MIN_VERSION {
            Err(format!("old:{version}"))
        } else {
            Ok(version)
        }
    });
    match r {
        Ok(v) => Ok(v.clone()),
        Err(e) => match e.strip_prefix("old:") {
            Some(v) => Err(CodeError::OldGit(v.to_string())),
            None => Err(CodeError::NoGit(
                e.strip_prefix("nogit:").unwrap_or(e).to_string(),
            )),
        },
    }
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
