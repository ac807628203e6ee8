//! Code tasks (DESIGN.md §10): a task whose spec names repos runs in its own worktrees; when the
//! agent says it is finished, its work is committed, the base branch merged in, `verify` run
//! (back to the agent on failure, a bounded number of times), and the verified result merged
//! into the base branch through the safe merge of `pegasus-code` — or held for
//! `pegasusctl task merge` when the project says `merge: manual`. With `review: ROLE`, that
//! role approves the verified change first ([`crate::review`]); with `plan: ROLE`, that role
//! may split a new task into subtasks before it starts ([`crate::planning`]).
//!
//! Git and the project's commands block: they run on blocking threads, never on the runtime's.

use std::path::{Path, PathBuf};
use std::time::Duration;

use pegasus_agent::{roles::RoleRun, Agent, StopKind, Workspace};
use pegasus_code::worktree::{self, commit_all, merge_base_in};
use pegasus_code::{
    recover, run_checks, run_shell, safe_merge, Checks, CodeError, MergeIn, MergeOutcome, Repo,
    TaskFate,
};
use pegasus_sandbox::SandboxPaths;
use pegasus_store::{KeyValue, MergePolicy, ProjectFile};
use pegasus_tasks::{MergeState, Task, TaskState, TaskUpdate};

use crate::attempt::{self, Back, End, Event, Next, State, StepError};
use crate::project_ctx::ProjectCtx;

/// Output kept per hydrate/verify command.
const OUTPUT_CAP: usize = 64 * 1024;
/// What of a failed verify goes back to the agent (the end of the log, where errors are).
const FEEDBACK_CHARS: usize = 8 * 1024;

/// A project's code settings, from PROJECT.md.
#[derive(Debug, Clone)]
pub struct CodeProject {
    /// The project's name (worktree lock reasons name it).
    pub name: String,
    /// `(id, absolute path, base branch)` of every declared repo.
    pub repos: Vec<(String, PathBuf, String)>,
    /// hydrate / verify and their limits.
    pub checks: Checks,
    /// `merge: manual`.
    pub manual: bool,
    /// How many times the agent may try before a failing verify (or a rejecting review)
    /// fails the task.
    pub max_attempts: u32,
    /// `review: ROLE`: the role that must approve a verified change before it is merged.
    pub review: Option<String>,
    /// `plan: ROLE`: the role that may split a new task into subtasks before it starts.
    pub plan: Option<String>,
}

/// A code key's value, or its problem as one line after the file's path.
fn checked<T: Clone>(where_: &str, value: &KeyValue<T>) -> Result<T, String> {
    value
        .clone()
        .map_err(|problem| format!("{where_}: {problem}"))
}

impl CodeProject {
    /// Reads the code keys of PROJECT.md: `repos`, `hydrate`, `verify` (a command or a list),
    /// `merge` (`auto` | `manual`), `env_file`, `verify_timeout_s` (default 600),
    /// `max_attempts` (default 3), `review` and `plan` (role ids, checked when a task starts:
    /// see [`CodeProject::check_roles`]). `Err` is one line naming the key to fix.
    /// `sandbox` confines hydrate and verify as `exec` is confined.
    pub fn load(
        project_dir: &Path,
        name: &str,
        sandbox: Option<SandboxPaths>,
    ) -> Result<CodeProject, String> {
        let file = ProjectFile::load(project_dir).map_err(|e| e.to_string())?;
        let where_ = project_dir.join("PROJECT.md").display().to_string();
        let repos = pegasus_tasks::repo_paths(&file, project_dir, pegasus_code::git::repo_rev)
            .map_err(|e| e.to_string())?;
        let keys = file.code();
        // Checked in this order, so the first problem a user sees is the one it always was.
        let verify = checked(&where_, &keys.verify)?;
        // A project whose board is Asana merges when the board says (Merge Approval,
        // DESIGN.md §17): its verified tasks wait for pegasusd's sync to ask for the merge.
        let manual =
            checked(&where_, &keys.merge)? == MergePolicy::Manual || file.asana().is_some();
        Ok(CodeProject {
            name: name.to_string(),
            repos,
            checks: Checks {
                hydrate: checked(&where_, &keys.hydrate)?.filter(|s| !s.trim().is_empty()),
                verify,
                timeout: Duration::from_secs(checked(&where_, &keys.verify_timeout_s)?),
                output_cap: OUTPUT_CAP,
                env_file: checked(&where_, &keys.env_file)?.unwrap_or_else(|| ".env".to_string()),
                sandbox,
            },
            manual,
            max_attempts: checked(&where_, &keys.max_attempts)? as u32,
            review: checked(&where_, &keys.review)?.filter(|s| !s.trim().is_empty()),
            plan: checked(&where_, &keys.plan)?.filter(|s| !s.trim().is_empty()),
        })
    }

    /// Checks that the roles `review` and `plan` name exist (a user role in `roles_dir`, or a
    /// built-in). `Err` is one line naming the key.
    pub fn check_roles(&self, roles_dir: &Path) -> Result<(), String> {
        for (key, role) in [("review", &self.review), ("plan", &self.plan)] {
            if let Some(id) = role {
                pegasus_roles::find_role(roles_dir, id.trim()).map_err(|e| {
                    format!("PROJECT.md of project {}: key `{key}`: {e}", self.name)
                })?;
            }
        }
        Ok(())
    }

    /// Opens the repos of a task's spec (their declared path and branch; the spec's own when a
    /// repo was removed from PROJECT.md since).
    fn open_task_repos(&self, task: &Task) -> Result<Vec<(Repo, Option<String>)>, CodeError> {
        let spec_repos = task
            .spec
            .as_ref()
            .map(|s| s.repos.clone())
            .unwrap_or_default();
        let mut out = Vec::new();
        for r in spec_repos {
            let (path, branch) = match self.repos.iter().find(|(id, _, _)| *id == r.id) {
                Some((_, p, b)) => (p.clone(), b.clone()),
                None => (
                    PathBuf::from(&r.path),
                    r.branch.clone().unwrap_or_else(|| "main".to_string()),
                ),
            };
            out.push((Repo::open(&r.id, &path, &branch)?, r.head));
        }
        Ok(out)
    }
}

/// Whether `task` is a code task: its frozen spec names at least one repo.
pub fn is_code_task(task: &Task) -> bool {
    task.spec.as_ref().is_some_and(|s| !s.repos.is_empty())
}

/// A git step on the blocking pool ([`pegasus_fs::blocking`]), its panic said as its error.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, String> {
    pegasus_fs::blocking(f)
        .await
        .map_err(|e| format!("a git step panicked: {e}"))
}

fn tail(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// `verifying → failed` with `reason` (best effort: the task may have moved meanwhile).
fn fail_verifying(ctx: &ProjectCtx, id: &str, reason: &str) {
    let _ = ctx
        .desk
        .board
        .move_task(id, TaskState::Verifying, TaskState::Failed, reason);
}

/// One line for a task's stop reason from a longer text.
pub(crate) fn one_line(s: &str) -> String {
    let line: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    line.chars().take(300).collect()
}

/// Runs a ready code task to `verified` (and merged, unless the project merges by hand), or to
/// failed / blocked. Returns the text for the task's messages and whether it was answered.
///
/// The attempt's life is [`crate::attempt`]'s state machine: this only does the work of each
/// state and turns the end it reaches into the task's last move and the reply.
pub async fn run(
    agent: &mut Agent,
    ctx: &ProjectCtx,
    task: Task,
    role: Option<RoleRun>,
) -> (String, bool) {
    let id = task.id.clone();
    let roles_dir = ctx.roles_dir.clone();
    let code = match CodeProject::load(&ctx.desk.dir, &ctx.desk.name, ctx.sandbox.clone())
        .and_then(|c| c.check_roles(&roles_dir).map(|()| c))
    {
        Ok(c) => c,
        Err(e) => {
            ctx.desk.board.fail_unstartable(&id, &e);
            return (e, false);
        }
    };
    // A task a planner split: picked because its subtasks are all done, it is done too.
    if !task.subtasks.is_empty() {
        return finish_split(ctx, &task);
    }
    if let (Some(planner), None) = (&code.plan, &task.parent) {
        let repos: Vec<(String, PathBuf)> = code
            .repos
            .iter()
            .map(|(id, path, _)| (id.clone(), path.clone()))
            .collect();
        match crate::planning::plan(agent, ctx, planner.trim(), &task, &repos).await {
            crate::planning::Planned::Split(line) => return (line, true),
            crate::planning::Planned::Unsplit => {}
            crate::planning::Planned::Failed(why) => {
                tracing::warn!(task = %id, "{why}");
                ctx.desk.board.fail_unstartable(&id, &one_line(&why));
                return (why, false);
            }
        }
    }
    // What the states' work made: the worktrees (once prepared), the agent's next request and
    // its last answer.
    let mut repos: Vec<Repo> = Vec::new();
    let mut trees: Vec<worktree::TaskTree> = Vec::new();
    let mut request = String::new();
    let mut summary = String::new();
    let mut started = false;
    let mut state = State::Preparing;
    let end = loop {
        let event = match &state {
            // Worktrees (created or resumed) and hydrate, before the agent starts.
            State::Preparing => {
                let prepared = {
                    let code = code.clone();
                    let task = task.clone();
                    blocking(move || prepare(&code, &task)).await
                };
                match prepared {
                    Ok(Ok((r, t, warnings))) => {
                        request = format!(
                            "{}\n\n{}",
                            briefing(&code, &t, &warnings),
                            ctx.desk.board.request_of(&task)
                        );
                        (repos, trees) = (r, t);
                        Event::Prepared
                    }
                    Ok(Err(e)) => Event::PrepareFailed(e),
                    Err(panicked) => Event::PrepareFailed(StepError::Panicked(panicked)),
                }
            }
            State::Working { attempt, back } => {
                let text = match back {
                    None => std::mem::take(&mut request),
                    Some(back) => format!(
                        "{}\n\n(Attempt {attempt} of {}.) Fix it in the worktree, then answer again.",
                        back.feedback, code.max_attempts
                    ),
                };
                let workspace = Workspace {
                    repos: trees
                        .iter()
                        .map(|t| (t.repo.clone(), t.path.clone()))
                        .collect(),
                };
                match agent
                    .run_code(&id, text, role.clone(), &workspace, started)
                    .await
                {
                    Err(e) => Event::AgentFailed(e),
                    Ok(outcome) => {
                        started = true;
                        let answered = outcome.stop == StopKind::Answered;
                        summary = outcome.text;
                        let now = ctx.desk.board.store().get(&id).map(|t| t.state);
                        if answered && now.as_ref().ok() == Some(&TaskState::Verifying) {
                            Event::AgentAnswered
                        } else {
                            Event::AgentStopped { answered }
                        }
                    }
                }
            }
            // Commit, merge the base in, verify.
            State::Verifying { .. } => {
                let checked = {
                    let (repos, trees, checks) =
                        (repos.clone(), trees.clone(), code.checks.clone());
                    let message = format!("pegasus task {id}: {}", task.title);
                    blocking(move || commit_merge_verify(&repos, &trees, &checks, &message)).await
                };
                match checked {
                    Ok(Ok(Checked::Passed(log))) => {
                        write_artifacts(ctx, &task, &repos, &trees, &log, &summary);
                        Event::ChecksPassed
                    }
                    Ok(Ok(Checked::Back(back))) => Event::SentBack(back),
                    Ok(Err(e)) => Event::ChecksFailed(StepError::Code(e)),
                    Err(panicked) => Event::ChecksFailed(StepError::Panicked(panicked)),
                }
            }
            // The review gate, right before the change may be merged.
            State::Reviewing { .. } => {
                review_gate(agent, ctx, &code, &task, &repos, &trees, &summary).await
            }
            State::SendingBack { back, .. } => {
                match ctx.desk.board.move_task(
                    &id,
                    TaskState::Verifying,
                    TaskState::Running,
                    &back.reason,
                ) {
                    Ok(_) => Event::Moved,
                    Err(e) => Event::MoveFailed(e),
                }
            }
            State::Recording { passed } => {
                // With `merge: manual`, "merge pending" is written with the move, so a
                // `task merge` that comes right after can never be overwritten by it.
                let pending = [TaskUpdate::Merge(Some(MergeState::Pending))];
                let updates: &[TaskUpdate] = if code.manual { &pending } else { &[] };
                match ctx.desk.board.move_task_with(
                    &id,
                    TaskState::Verifying,
                    TaskState::Verified,
                    passed,
                    updates,
                ) {
                    Ok(_) => Event::Moved,
                    Err(e) => Event::MoveFailed(e),
                }
            }
            State::Merging => Event::MergeDone(merge_verified(ctx, &code, &id).await),
        };
        match attempt::step(state, event, code.max_attempts) {
            Next::Then(next) => state = next,
            Next::End(end) => break end,
        }
    };
    match end {
        End::Unstartable(e) => {
            tracing::warn!(task = %id, "code task cannot start: {e}");
            let e = e.to_string();
            ctx.desk.board.fail_unstartable(&id, &e);
            (e, false)
        }
        End::AgentFailed(e) => (format!("the project agent failed: {e}"), false),
        End::Stopped { answered } => {
            // Failed, blocked (a question), cancelled: keep what it did on its branch; a failed
            // or cancelled task's worktree goes at the next boot, the branch stays.
            let _ = blocking(move || {
                for t in &trees {
                    let _ = commit_all(&t.path, "pegasus: work in progress (task stopped)");
                }
            })
            .await;
            (summary, answered)
        }
        End::Broken(e) => {
            // A replaced `.git` is named as such (`tampered: …`), not as a git failure.
            let reason = if e.is_tampered() {
                e.to_string()
            } else {
                format!("commit or merge failed: {e}")
            };
            fail_verifying(ctx, &id, &one_line(&reason));
            (format!("The task failed: {e}"), false)
        }
        End::Unreviewed(reason) => {
            fail_verifying(ctx, &id, &one_line(&reason));
            (
                format!("The task failed: {reason}; the base branch was not touched."),
                false,
            )
        }
        End::OutOfAttempts { attempt, back } => {
            write_artifacts(ctx, &task, &repos, &trees, &back.feedback, &summary);
            let reason = back.reason;
            fail_verifying(ctx, &id, &format!("{reason} (after {attempt} attempts)"));
            (
                format!(
                    "The task failed: {reason} after {attempt} attempts; the base branch was not touched."
                ),
                false,
            )
        }
        End::NotSentBack(e) => (
            format!("cannot send the task back to the agent: {e}"),
            false,
        ),
        End::NotVerified(e) => (format!("cannot record the verified task: {e}"), false),
        End::Verified(line) => (format!("{summary}\n\n{line}"), true),
        End::Unexpected { state, event } => {
            tracing::error!(task = %id, state, event, "code task: an event its state cannot produce; the attempt stops here");
            (
                format!("The code task stopped: {event} while {state} (a bug in Pegasus)"),
                false,
            )
        }
    }
}

/// A verified task's merge step: held for `pegasusctl task merge` (`merge: manual`), asked of
/// a person (`approvals.merge: ask`), or merged now. Returns the line saying which.
async fn merge_verified(ctx: &ProjectCtx, code: &CodeProject, id: &str) -> String {
    if code.manual {
        return format!("Verified; merge pending: `pegasusctl task merge {id}` merges it.");
    }
    // `approvals.merge: ask`: a person says yes first.
    if let Some(line) = ctx
        .desk
        .board
        .store()
        .get(id)
        .ok()
        .and_then(|t| crate::merge_approval::ask(ctx, &t))
    {
        return line;
    }
    merge(ctx, code, id).await
}

/// Opens the task's repos and creates (or resumes) its worktrees; hydrates new ones.
#[allow(clippy::type_complexity)]
fn prepare(
    code: &CodeProject,
    task: &Task,
) -> Result<(Vec<Repo>, Vec<worktree::TaskTree>, Vec<String>), StepError> {
    let opened = code.open_task_repos(task)?;
    let mut repos = Vec::new();
    let mut trees = Vec::new();
    let mut warnings = Vec::new();
    for (repo, head) in opened {
        let start = match head {
            Some(h) => h,
            None => repo.base_commit()?.unwrap_or_default(),
        };
        let tree = worktree::create(&repo, &task.id, &code.name, &start, &code.checks.env_file)?;
        warnings.extend(tree.warnings.iter().cloned());
        if tree.created {
            if let Some(h) = &code.checks.hydrate {
                let r = run_shell(
                    h,
                    &tree.path,
                    code.checks.timeout,
                    code.checks.output_cap,
                    code.checks.sandbox.as_ref(),
                );
                if !r.ok {
                    return Err(StepError::Hydrate {
                        repo: repo.id.clone(),
                        status: r.status,
                        output: one_line(tail(&r.output, 600)),
                    });
                }
            }
        }
        repos.push(repo);
        trees.push(tree);
    }
    Ok((repos, trees, warnings))
}

fn briefing(code: &CodeProject, trees: &[worktree::TaskTree], warnings: &[String]) -> String {
    let mut s = String::from(
        "This is a code task. You work in git worktrees made for it (file tools and `exec` act there):\n",
    );
    for (i, t) in trees.iter().enumerate() {
        s.push_str(&format!(
            "- repo `{}`: branch `{}`{}\n",
            t.repo,
            t.branch,
            if i == 0 {
                " (the default; other repos: prefix paths with `id:`)"
            } else {
                ""
            }
        ));
    }
    s.push_str("Do not commit, merge or switch branches: when you answer, Pegasus commits your changes, merges the base branch in");
    if code.checks.verify.is_empty() {
        s.push_str(" and merges the result.");
    } else {
        s.push_str(&format!(
            ", runs the checks ({}) and merges only what passes.",
            code.checks.verify.join("; ")
        ));
    }
    for w in warnings {
        s.push_str(&format!("\nNote: {w}"));
    }
    s
}

/// The review gate (`review: ROLE`): runs right before a verified change is recorded as
/// verified and merged; without the key, every change passes. Approved, back to the agent (as
/// a failed verify is), or failed when nobody could review it.
async fn review_gate(
    agent: &Agent,
    ctx: &ProjectCtx,
    code: &CodeProject,
    task: &Task,
    repos: &[Repo],
    trees: &[worktree::TaskTree],
    summary: &str,
) -> Event {
    let Some(role) = &code.review else {
        return Event::Approved("verify passed");
    };
    let verdict = crate::review::review(
        agent,
        ctx,
        role.trim(),
        task,
        repos,
        trees,
        summary,
        &code.checks.verify,
    )
    .await;
    match verdict {
        crate::review::Review::Approved => Event::Approved("verify passed, review approved"),
        crate::review::Review::Rejected { reason, feedback } => {
            Event::SentBack(Back { reason, feedback })
        }
        crate::review::Review::NoAnswer(why) => Event::ReviewFailed(why),
    }
}

/// A task a planner split, picked because every subtask is done: `ready → running → done`,
/// its summary naming them.
fn finish_split(ctx: &ProjectCtx, task: &Task) -> (String, bool) {
    let list = task.subtasks.join(", ");
    let line = format!("done through its subtasks {list}");
    let moved = ctx
        .desk
        .board
        .move_task(
            &task.id,
            TaskState::Ready,
            TaskState::Running,
            "its subtasks are done",
        )
        .and_then(|_| {
            ctx.desk.board.move_task_with(
                &task.id,
                TaskState::Running,
                TaskState::Done,
                &line,
                &[TaskUpdate::ResultSummary(Some(format!(
                    "Done through its subtasks: {list}."
                )))],
            )
        });
    match moved {
        Ok(_) => (
            format!("Task {} is done: its subtasks {list} are.", task.id),
            true,
        ),
        Err(e) => (format!("cannot record the split task as done: {e}"), false),
    }
}

/// Keeps each `(name, body)` as an artifact of task `id` (under `artifacts/<date>/<id>/`) and
/// lists the new ones on the task. Best effort: an artifact that cannot be written is logged,
/// never a failure.
pub(crate) fn keep_artifacts(ctx: &ProjectCtx, id: &str, files: &[(String, String)]) {
    let kept = (|| -> Result<(), String> {
        let dir = ctx
            .desk
            .board
            .store()
            .artifacts_dir()
            .map_err(|e| e.to_string())?
            .join(id);
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        // The task's list as it is now: a review or plan kept since the task was read is on it.
        let mut all = ctx
            .desk
            .board
            .store()
            .get(id)
            .map_err(|e| e.to_string())?
            .artifacts;
        let listed = all.len();
        for (name, body) in files {
            let path = dir.join(name);
            if let Err(e) = pegasus_store::atomic::write_atomic(&path, body.as_bytes()) {
                tracing::warn!(task = %id, "cannot keep {name}: {e}");
                continue;
            }
            let rel = path.strip_prefix(ctx.desk.dir.as_path()).unwrap_or(&path);
            let rel = rel.to_string_lossy().into_owned();
            if !all.contains(&rel) {
                all.push(rel);
            }
        }
        if all.len() > listed {
            ctx.desk
                .board
                .update(id, TaskUpdate::Artifacts(all))
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    })();
    if let Err(e) = kept {
        tracing::warn!(task = %id, "cannot keep artifacts: {e}");
    }
}

/// What committing, merging the base in and verifying came to.
enum Checked {
    /// Every repo passed: the checks' log.
    Passed(String),
    /// Back to the agent.
    Back(Back),
}

fn commit_merge_verify(
    repos: &[Repo],
    trees: &[worktree::TaskTree],
    checks: &Checks,
    message: &str,
) -> Result<Checked, CodeError> {
    let mut log = String::new();
    for (repo, tree) in repos.iter().zip(trees) {
        // Conflict markers left from the last attempt's merge: not resolved yet.
        let unresolved =
            pegasus_code::git::git(&tree.path, &["diff", "--name-only", "--diff-filter=U"])?;
        if !unresolved.is_empty() {
            return Ok(Checked::Back(Back {
                reason: format!("merge conflict in {} not resolved", repo.id),
                feedback: format!(
                    "The merge of `{}` into your branch of repo `{}` still has unresolved files:\n{unresolved}\nEdit them to remove the conflict markers (<<<<<<< ======= >>>>>>>), keeping both changes where they belong.",
                    repo.branch, repo.id
                ),
            }));
        }
        let refused = worktree::refused_entries(&tree.path)?;
        if !refused.is_empty() {
            let list: Vec<String> = refused.iter().map(ToString::to_string).collect();
            return Ok(Checked::Back(Back {
                reason: format!("entries Pegasus does not commit in repo {}", repo.id),
                feedback: format!(
                    "Pegasus does not commit these in repo `{}`:\n{}\nSymbolic links must point inside the repository (not into .git), and nested git repositories are not allowed: replace each with real files, or delete it.",
                    repo.id,
                    list.join("\n")
                ),
            }));
        }
        commit_all(&tree.path, message)?;
        match merge_base_in(&tree.path, &repo.base_ref(), false)? {
            MergeIn::Clean => {}
            MergeIn::Conflict(files) => {
                return Ok(Checked::Back(Back {
                    reason: format!(
                        "merge conflict with {} in {}: {}",
                        repo.branch,
                        repo.id,
                        files.join(", ")
                    ),
                    feedback: format!(
                        "`{}` changed since your task started, and merging it into your branch of repo `{}` conflicts in:\n{}\nThe files now hold conflict markers (<<<<<<< yours, ======= , >>>>>>> theirs). Resolve them, keeping both changes where they belong.",
                        repo.branch,
                        repo.id,
                        files.join("\n")
                    ),
                }));
            }
        }
        let run = run_checks(checks, &tree.path, false);
        log.push_str(&format!("## repo {}\n{}", repo.id, run.log));
        if !run.ok {
            return Ok(Checked::Back(Back {
                reason: format!("verify failed in {}", repo.id),
                feedback: format!(
                    "The checks failed in repo `{}`:\n{}",
                    repo.id,
                    tail(&run.log, FEEDBACK_CHARS)
                ),
            }));
        }
    }
    Ok(Checked::Passed(log))
}

/// Keeps the task's outputs under `artifacts/<date>/<task-id>/`: the diff per repo, the checks'
/// log and the agent's summary; records them on the task.
fn write_artifacts(
    ctx: &ProjectCtx,
    task: &Task,
    repos: &[Repo],
    trees: &[worktree::TaskTree],
    log: &str,
    summary: &str,
) {
    let heads = task
        .spec
        .iter()
        .flat_map(|s| s.repos.iter().map(|r| r.head.clone()));
    let mut files = Vec::new();
    for ((repo, tree), head) in repos.iter().zip(trees).zip(heads) {
        let from = head.unwrap_or_else(|| repo.base_ref());
        if let Ok(d) = worktree::diff(&tree.path, &from) {
            files.push((format!("diff-{}.patch", repo.id), d));
        }
    }
    files.push(("verify.log".to_string(), log.to_string()));
    files.push(("summary.md".to_string(), summary.to_string()));
    keep_artifacts(ctx, &task.id, &files);
}

/// The safe merge of a verified task, then cleanup (worktree, branch) and `done`; a merge
/// that cannot land blocks the task saying why. Returns one line for the user.
pub async fn merge(ctx: &ProjectCtx, code: &CodeProject, id: &str) -> String {
    let task = match ctx.desk.board.store().get(id) {
        Ok(t) if t.state == TaskState::Verified => t,
        Ok(t) => return format!("task {id} is {}, not verified: nothing to merge", t.state),
        Err(e) => return e.to_string(),
    };
    let merged_before = task.merge == Some(MergeState::Merged);
    let result = {
        let (code, task) = (code.clone(), task.clone());
        blocking(move || -> Result<(MergeOutcome, Vec<Repo>), CodeError> {
            let repos: Vec<Repo> = code
                .open_task_repos(&task)?
                .into_iter()
                .map(|(r, _)| r)
                .collect();
            if merged_before {
                // Merged before a crash cut the cleanup: only the cleanup is left.
                let heads = repos
                    .iter()
                    .map(|r| {
                        let head = r.base_commit().ok().flatten().unwrap_or_default();
                        (r.id.clone(), head)
                    })
                    .collect();
                return Ok((MergeOutcome::Merged(heads), repos));
            }
            let out = safe_merge(&repos, &task.id, &code.name, &task.title, &code.checks)?;
            Ok((out, repos))
        })
        .await
    };
    let block = |reason: String| {
        let _ = ctx.desk.board.move_task(
            id,
            TaskState::Verified,
            TaskState::Blocked,
            &one_line(&reason),
        );
        format!("Not merged: {reason}")
    };
    match result {
        Ok(Ok((MergeOutcome::Merged(heads), repos))) => {
            if !merged_before {
                if let Err(e) = ctx
                    .desk
                    .board
                    .update(id, TaskUpdate::Merge(Some(MergeState::Merged)))
                {
                    tracing::warn!(task = %id, "cannot record the merge before its cleanup: {e}");
                }
            }
            let cleanup = {
                let (repos, id) = (repos.clone(), id.to_string());
                blocking(move || {
                    for r in &repos {
                        worktree::remove(r, &id, true).map_err(|e| e.to_string())?;
                    }
                    Ok::<(), String>(())
                })
                .await
            };
            if let Ok(Err(e)) | Err(e) = cleanup {
                tracing::warn!(task = %id, "merged, but cleanup failed (boot recovery retries): {e}");
            }
            let at: Vec<String> = heads
                .iter()
                .map(|(r, sha)| format!("{r} at {}", &sha[..sha.len().min(12)]))
                .collect();
            let line = format!("merged ({})", at.join(", "));
            // The merge state ends with the move out of `verified`; a reason left from a merge
            // that was blocked before ends with it.
            let _ = ctx.desk.board.move_task_with(
                id,
                TaskState::Verified,
                TaskState::Done,
                &line,
                &[TaskUpdate::StopReason(None)],
            );
            format!("Merged: {}.", at.join(", "))
        }
        Ok(Ok((MergeOutcome::Conflict { repo, files }, _))) => block(
            format!(
                "merge conflict in {repo}: {}; to let the agent merge the base in and resolve it: `pegasusctl task answer {id} \"resolve the conflict\"`",
                files.join(", ")
            ),
        ),
        Ok(Ok((MergeOutcome::VerifyFailed { repo, log }, _))) => block(
            format!(
                "verify failed on the merged result in {repo}: {}",
                tail(&log, 200)
            ),
        ),
        Ok(Ok((MergeOutcome::Blocked { repo, reason }, _))) => {
            block(format!("{repo}: {reason}"))
        }
        Ok(Err(e)) => block(e.to_string()),
        Err(panicked) => block(panicked),
    }
}

/// At worker start: each repo recovered (prune, dead worktrees removed, unmerged branches of
/// failed tasks kept and logged). The merges a crash interrupted are done again by the first
/// [`merge_due`], which runs right after.
pub async fn boot(ctx: &ProjectCtx) {
    let Ok(code) = CodeProject::load(&ctx.desk.dir, &ctx.desk.name, ctx.sandbox.clone()) else {
        return;
    };
    if code.repos.is_empty() {
        return;
    }
    let fates: std::collections::HashMap<String, TaskFate> = ctx
        .desk
        .board
        .store()
        .list()
        .unwrap_or_default()
        .into_iter()
        .map(|t| {
            let fate = if pegasus_tasks::is_over(t.state) {
                TaskFate::Over
            } else {
                TaskFate::Live
            };
            (t.id, fate)
        })
        .collect();
    let c = code.clone();
    let recovered = blocking(move || {
        let fate = |id: &str| fates.get(id).copied().unwrap_or(TaskFate::Foreign);
        let mut lines = Vec::new();
        for (id, path, branch) in &c.repos {
            match Repo::open(id, path, branch).and_then(|r| recover(&r, &c.name, &fate)) {
                Ok(rep) => {
                    for p in rep.removed {
                        lines.push(format!("removed the worktree {}", p.display()));
                    }
                    for k in rep.kept {
                        lines.push(format!(
                            "kept branch {} of repo {} (task {} ended with unmerged commits)",
                            k.branch, k.repo, k.task
                        ));
                    }
                }
                Err(e) => lines.push(format!("cannot recover repo {id}: {e}")),
            }
        }
        lines
    })
    .await
    .unwrap_or_default();
    for l in recovered {
        tracing::info!("code recovery: {l}");
    }
}

/// Merges every verified task that should be: automatically merged ones interrupted by a crash,
/// and the ones `pegasusctl task merge` asked for. PROJECT.md is read only when a verified task
/// exists (this runs at every nudge).
pub async fn merge_due(ctx: &ProjectCtx) {
    // Merges a person answered (`approvals.merge: ask`) are due, or pending, from here on.
    crate::merge_approval::settle(ctx);
    let verified: Vec<Task> = ctx
        .desk
        .board
        .store()
        .list()
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t.state == TaskState::Verified)
        .collect();
    if verified.is_empty() {
        return;
    }
    let code = match CodeProject::load(&ctx.desk.dir, &ctx.desk.name, ctx.sandbox.clone()) {
        Ok(c) => c,
        Err(e) => return tracing::warn!("verified tasks wait: {e}"),
    };
    let due: Vec<Task> = verified
        .into_iter()
        .filter(|t| t.merge.map_or(!code.manual, MergeState::is_due))
        .collect();
    for task in due {
        // An automatic merge cut off before it was asked for: asked now.
        if let Some(line) = crate::merge_approval::ask(ctx, &task) {
            tracing::info!(task = %task.id, "{line}");
            continue;
        }
        let id = task.id;
        let line = merge(ctx, &code, &id).await;
        tracing::info!(task = %id, "{line}");
    }
}
