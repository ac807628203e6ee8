//! The safe merge (DESIGN.md §10): a task's branches reach their base branches only through a
//! staging worktree where the merge was made, hydrated and verified, and then only by a
//! compare-and-set of the base ref (or a fast-forward of a clean checked-out base). Several
//! repos merge all or none: every repo is staged and verified first, then every base is checked
//! under all the repos' locks, then all advance.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::CodeError;
use crate::git::{git, git_output, is_ancestor, rev};
use crate::repo::Repo;
use crate::shell::run_shell;
use crate::worktree::{
    add_target, conflicted_files, link_env, lock_reason, remove_locked, task_branch,
};

/// The project's own commands and their limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checks {
    /// `hydrate` of PROJECT.md: run in every new worktree.
    pub hydrate: Option<String>,
    /// `verify` of PROJECT.md: every one must pass.
    pub verify: Vec<String>,
    /// Per command.
    pub timeout: Duration,
    /// Output kept per command.
    pub output_cap: usize,
    /// The env file linked into worktrees (`env_file`, default `.env`).
    pub env_file: String,
    /// The Landlock rules hydrate and verify run under (those of `exec`); `None`: namespaces
    /// only.
    pub sandbox: Option<pegasus_sandbox::SandboxPaths>,
}

/// The result of running the checks in one worktree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckRun {
    /// Every command passed.
    pub ok: bool,
    /// What ran and what it printed, for the task's artifacts and the agent.
    pub log: String,
}

/// Runs `hydrate` (when `with_hydrate`) then every `verify` command in `dir`, stopping at the
/// first failure.
pub fn run_checks(checks: &Checks, dir: &Path, with_hydrate: bool) -> CheckRun {
    let mut log = String::new();
    let hydrate = checks.hydrate.iter().filter(|_| with_hydrate);
    let steps = hydrate
        .map(|h| ("hydrate", h))
        .chain(checks.verify.iter().map(|v| ("verify", v)));
    for (kind, cmd) in steps {
        let r = run_shell(
            cmd,
            dir,
            checks.timeout,
            checks.output_cap,
            checks.sandbox.as_ref(),
        );
        log.push_str(&format!("$ {cmd}    ({kind}: {})\n{}", r.status, r.output));
        if !log.ends_with('\n') {
            log.push('\n');
        }
        if !r.ok {
            return CheckRun { ok: false, log };
        }
    }
    CheckRun { ok: true, log }
}

/// How a safe merge ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MergeOutcome {
    /// Every base branch now includes the task (`(repo, base commit now)`); repos whose branch
    /// was already in their base are listed with their unchanged base.
    Merged(Vec<(String, String)>),
    /// The task branch conflicts with the base in `repo`; nothing was changed anywhere.
    Conflict {
        /// The repo's id.
        repo: String,
        /// The conflicting files.
        files: Vec<String>,
    },
    /// The checks failed on the merged result in `repo`; nothing was changed anywhere.
    VerifyFailed {
        /// The repo's id.
        repo: String,
        /// The checks' log.
        log: String,
    },
    /// A base could not be advanced safely (dirty checked-out base, base kept moving);
    /// nothing was changed anywhere.
    Blocked {
        /// The repo's id.
        repo: String,
        /// One line saying why and what to do.
        reason: String,
    },
}

struct Staged<'a> {
    repo: &'a Repo,
    old: String,
    /// `None`: the task branch is already in the base, nothing to advance.
    new: Option<String>,
    staging: PathBuf,
}

/// Merges task `task`'s branch into the base branch of every repo in `repos`, all or none.
pub fn safe_merge(
    repos: &[Repo],
    task: &str,
    project: &str,
    title: &str,
    checks: &Checks,
) -> Result<MergeOutcome, CodeError> {
    let mut moved = None;
    for _attempt in 0..2 {
        let mut staged: Vec<Staged> = Vec::new();
        let outcome = match stage_all(repos, task, project, title, checks, &mut staged) {
            Ok(None) => advance_all(&staged, task),
            stopped => stopped,
        };
        for s in &staged {
            if let Ok(_lock) = s.repo.lock() {
                let _ = remove_locked(s.repo, &s.staging);
            }
        }
        match outcome? {
            Some(AdvanceStop::Done(merged)) => return Ok(MergeOutcome::Merged(merged)),
            Some(AdvanceStop::Outcome(o)) => return Ok(o),
            Some(AdvanceStop::Moved(repo)) => moved = Some(repo),
            None => return Ok(MergeOutcome::Merged(Vec::new())),
        }
    }
    let repo = moved.unwrap_or_default();
    Ok(MergeOutcome::Blocked {
        reason: format!(
            "the base branch of {repo} kept moving while the task was being merged; merge again with `pegasusctl task merge {task}`"
        ),
        repo,
    })
}

enum AdvanceStop {
    Done(Vec<(String, String)>),
    Outcome(MergeOutcome),
    Moved(String),
}

/// Stages and verifies every repo; `Some` stops the merge with that result.
fn stage_all<'a>(
    repos: &'a [Repo],
    task: &str,
    project: &str,
    title: &str,
    checks: &Checks,
    staged: &mut Vec<Staged<'a>>,
) -> Result<Option<AdvanceStop>, CodeError> {
    let branch = task_branch(task);
    for repo in repos {
        let old = repo.base_commit()?.ok_or_else(|| {
            CodeError::repo(
                &repo.id,
                format!("the base branch `{}` is gone", repo.branch),
            )
        })?;
        let tip = rev(&repo.root, &format!("refs/heads/{branch}"))?.ok_or_else(|| {
            CodeError::repo(&repo.id, format!("the task branch `{branch}` is gone"))
        })?;
        let staging = repo.staging_worktree(task);
        if is_ancestor(&repo.root, &tip, &old)? {
            staged.push(Staged {
                repo,
                old,
                new: None,
                staging,
            });
            continue;
        }
        // A conflict check that touches no worktree.
        let args = [
            "merge-tree",
            "--write-tree",
            "--name-only",
            "--no-messages",
            &old,
            &tip,
        ];
        let out = git_output(&repo.root, &args)?;
        match out.status.code() {
            Some(0) => {}
            Some(1) => {
                let text = String::from_utf8_lossy(&out.stdout);
                let files = text.lines().skip(1).map(str::to_string).collect();
                return Ok(Some(AdvanceStop::Outcome(MergeOutcome::Conflict {
                    repo: repo.id.clone(),
                    files,
                })));
            }
            _ => return Err(crate::git::failure(&repo.root, &args, &out)),
        }
        {
            let _lock = repo.lock()?;
            remove_locked(repo, &staging)?;
            let p = add_target(&staging)?;
            git(&repo.root, &["worktree", "add", "--detach", &p, &old])?;
            let reason = lock_reason(task, project);
            git(&repo.root, &["worktree", "lock", "--reason", &reason, &p])?;
            repo.pin_worktree(&staging)?;
        }
        staged.push(Staged {
            repo,
            old: old.clone(),
            new: None,
            staging: staging.clone(),
        });
        let message = format!("Merge {branch}: {title}");
        let margs = ["merge", "--no-ff", "-q", "-m", &message, &branch];
        let out = git_output(&staging, &margs)?;
        if !out.status.success() {
            let files = conflicted_files(&staging)?;
            let _ = git_output(&staging, &["merge", "--abort"]);
            if files.is_empty() {
                return Err(crate::git::failure(&staging, &margs, &out));
            }
            return Ok(Some(AdvanceStop::Outcome(MergeOutcome::Conflict {
                repo: repo.id.clone(),
                files,
            })));
        }
        // What reaches the base never holds a link out of the repository or a nested
        // repository, whoever committed it on the task branch (checked on the merged tree, so
        // a link is followed through the others).
        let raw = git(
            &staging,
            &[
                "diff",
                "--raw",
                "-z",
                "--no-renames",
                "--ignore-submodules=none",
                &old,
                "HEAD",
            ],
        )?;
        let refused = crate::worktree::refused_in(&staging, &raw)?;
        if !refused.is_empty() {
            let list: Vec<String> = refused.iter().map(ToString::to_string).collect();
            return Ok(Some(AdvanceStop::Outcome(MergeOutcome::Blocked {
                repo: repo.id.clone(),
                reason: format!(
                    "the task branch holds what Pegasus does not merge: {}; nothing was merged",
                    list.join(", ")
                ),
            })));
        }
        let _ = link_env(&repo.root, &staging, &checks.env_file);
        let run = run_checks(checks, &staging, true);
        if !run.ok {
            return Ok(Some(AdvanceStop::Outcome(MergeOutcome::VerifyFailed {
                repo: repo.id.clone(),
                log: run.log,
            })));
        }
        let new = rev(&staging, "HEAD")?;
        if let Some(last) = staged.last_mut() {
            last.new = new;
        }
    }
    Ok(None)
}

/// Checks every base under all the locks, then advances them all.
fn advance_all(staged: &[Staged], task: &str) -> Result<Option<AdvanceStop>, CodeError> {
    // Locks in a fixed order (by common dir), so two merges over the same repos cannot deadlock;
    // one lock per distinct repository.
    let mut order: Vec<&Staged> = staged.iter().collect();
    order.sort_by(|a, b| a.repo.common.cmp(&b.repo.common));
    let mut locks = Vec::new();
    let mut seen: Vec<&Path> = Vec::new();
    for s in &order {
        if !seen.contains(&s.repo.common.as_path()) {
            locks.push(s.repo.lock()?);
            seen.push(&s.repo.common);
        }
    }
    // Check everything first: a base that moved, a dirty checked-out base.
    let mut plan = Vec::new();
    for s in staged {
        let now = s.repo.base_commit()?;
        if now.as_deref() != Some(s.old.as_str()) {
            return Ok(Some(AdvanceStop::Moved(s.repo.id.clone())));
        }
        let Some(new) = &s.new else { continue };
        let checked_out = s.repo.checked_out_at(&s.repo.base_ref())?;
        if let Some(wt) = &checked_out {
            let status = git(wt, &["status", "--porcelain", "--untracked-files=no"])?;
            if !status.is_empty() {
                return Ok(Some(AdvanceStop::Outcome(MergeOutcome::Blocked {
                    repo: s.repo.id.clone(),
                    reason: format!(
                        "main worktree has local changes: {} has `{}` checked out with uncommitted changes; commit or stash them, then `pegasusctl task merge {task}`",
                        wt.display(),
                        s.repo.branch
                    ),
                })));
            }
        }
        plan.push((s, new.clone(), checked_out));
    }
    let mut advanced: Vec<(&Staged, &Option<PathBuf>)> = Vec::new();
    for (s, new, checked_out) in &plan {
        let r = advance(s.repo, &s.old, new, checked_out.as_deref(), task);
        if let Err(e) = r {
            // All or none: put back the ones already moved.
            for (done, wt) in advanced {
                if let Some(new_done) = &done.new {
                    let _ = rollback(done.repo, &done.old, new_done, wt.as_deref());
                }
            }
            return Ok(Some(AdvanceStop::Outcome(MergeOutcome::Blocked {
                repo: s.repo.id.clone(),
                reason: format!("the base branch could not be advanced ({e}); nothing was merged"),
            })));
        }
        advanced.push((s, checked_out));
    }
    drop(locks);
    Ok(Some(AdvanceStop::Done(
        staged
            .iter()
            .map(|s| {
                (
                    s.repo.id.clone(),
                    s.new.clone().unwrap_or_else(|| s.old.clone()),
                )
            })
            .collect(),
    )))
}

fn advance(
    repo: &Repo,
    old: &str,
    new: &str,
    checked_out: Option<&Path>,
    task: &str,
) -> Result<(), CodeError> {
    match checked_out {
        // Compare-and-set: refused when the base is no longer `old`.
        None => git(
            &repo.root,
            &[
                "update-ref",
                "-m",
                &format!("pegasus: merge task {task}"),
                &repo.base_ref(),
                new,
                old,
            ],
        )
        .map(|_| ()),
        // Never move a checked-out branch's ref under its files: fast-forward it in place.
        Some(wt) => git(wt, &["merge", "--ff-only", "-q", new]).map(|_| ()),
    }
}

fn rollback(
    repo: &Repo,
    old: &str,
    new: &str,
    checked_out: Option<&Path>,
) -> Result<(), CodeError> {
    match checked_out {
        None => git(&repo.root, &["update-ref", &repo.base_ref(), old, new]).map(|_| ()),
        Some(wt) => git(wt, &["reset", "--keep", "-q", old]).map(|_| ()),
    }
}
