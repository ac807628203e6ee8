//! [`TaskStore`]: the tasks of one project folder, on disk (DESIGN.md §3, §7).
//!
//! `tasks/<YYYY-MM-DD>/<id>.jsonl` holds each task's events and is the truth;
//! `tasks/index.jsonl` is a cache of their fold (see the `index` module). Every method that
//! reads or writes tasks holds the project's task lock (see the `lock` module) from its first
//! read to its last write, which is what makes [`TaskStore::transition`] a real
//! compare-and-set across threads and processes. Each write appends its event durably first
//! and rewrites the index second, so a crash between the two loses nothing: the next read
//! notices and folds again.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use pegasus_store::{create_dir_all_durable, read_jsonl, JsonlAppender};

use crate::error::TaskError;
use crate::event::{apply, fold, TaskEvent};
use crate::id::{date_dir_of, is_safe_id, new_task_id};
use crate::index::{read_index, write_index, write_index_if_changed, IndexLine};
use crate::lock::ProjectLock;
use crate::readiness::{readiness_of, Readiness};
use crate::split::{check_steps, step_title, Step};
use crate::state::{check_transition, TaskState};
use crate::task::{NewTask, RepoSnapshot, Task, TaskSpec, TaskUpdate, MAX_PRIORITY};

/// The folder under a project that holds its tasks.
pub const TASKS_DIR: &str = "tasks";
/// The index file inside [`TASKS_DIR`].
pub const INDEX_FILE: &str = "index.jsonl";
/// The lock file inside [`TASKS_DIR`].
pub const LOCK_FILE: &str = ".lock";
/// The actor the restart rule records.
pub const RECOVERY_ACTOR: &str = "recovery";
/// The reason the restart rule records (and so the `stop_reason` it leaves).
pub const RESTART_REASON: &str = "process restarted";
/// The reason a graceful stop records on the task it interrupts (it can be retried).
pub const SHUTDOWN_REASON: &str = "interrupted by shutdown";
/// The reason the restart rule records when it puts an interrupted message's task back to
/// `ready`.
pub const RERUN_REASON: &str = "re-run after restart";
/// The reason a message's task fails with when it was interrupted again after its re-run.
pub const CRASHED_TWICE_REASON: &str = "crashed the worker twice";

/// What the restart rule did to one task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recovery {
    /// Failed with [`RESTART_REASON`].
    Failed,
    /// A message's task, back to `ready` to run again ([`RERUN_REASON`]).
    Rerun,
    /// A message's task interrupted again after its re-run: failed with
    /// [`CRASHED_TWICE_REASON`].
    CrashedTwice,
}

impl Recovery {
    /// The reason recorded for it (and shown to the user).
    pub fn reason(self) -> &'static str {
        match self {
            Recovery::Failed => RESTART_REASON,
            Recovery::Rerun => RERUN_REASON,
            Recovery::CrashedTwice => CRASHED_TWICE_REASON,
        }
    }
}

/// One task the restart rule moved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    /// The task.
    pub id: String,
    /// What happened to it.
    pub action: Recovery,
}

/// The task type used when a caller gives none.
pub const DEFAULT_KIND: &str = "chat";

/// The tasks of one project folder. Cheap to open and to clone; holds no file open between
/// calls, so any number of instances (threads, the worker and pegasusd) may coexist.
#[derive(Debug, Clone)]
pub struct TaskStore {
    project_dir: PathBuf,
    project: String,
    tasks_dir: PathBuf,
}

impl TaskStore {
    /// The task store of the project in `project_dir` (named `project`), creating `tasks/` if
    /// missing. The project folder itself must exist: a typo must not create a project.
    pub fn open(project_dir: &Path, project: &str) -> Result<TaskStore, TaskError> {
        if project.is_empty() {
            return Err(TaskError::Invalid(
                "a task store needs a project name: pass the project's folder name".into(),
            ));
        }
        if !project_dir.is_dir() {
            return Err(TaskError::Invalid(format!(
                "project folder {} does not exist: create the project first",
                project_dir.display()
            )));
        }
        let tasks_dir = project_dir.join(TASKS_DIR);
        create_dir_all_durable(&tasks_dir)?;
        Ok(TaskStore {
            project_dir: project_dir.to_path_buf(),
            project: project.to_string(),
            tasks_dir,
        })
    }

    /// The project these tasks belong to.
    pub fn project(&self) -> &str {
        &self.project
    }

    /// The project folder.
    pub fn project_dir(&self) -> &Path {
        &self.project_dir
    }

    /// `tasks/index.jsonl`.
    pub fn index_path(&self) -> PathBuf {
        self.tasks_dir.join(INDEX_FILE)
    }

    /// New task in `draft`; id = `t-<YYYYMMDD>-<6 random hex>`, event file
    /// `tasks/<date of creation>/<id>.jsonl` starting with a `created` event, index line added.
    /// Every `depends_on` id must be a task of this project.
    pub fn create(&self, t: NewTask, actor: &str) -> Result<Task, TaskError> {
        let _lock = self.lock()?;
        let (path, task, created) = self.new_task_locked(t, None)?;
        write_new_events(&path, &[created])?;
        tracing::info!(task = %task.id, project = %self.project, actor, "task created");
        self.index_put(&task, &path);
        Ok(task)
    }

    /// Freezes a spec: `draft → planned` with `spec_version` 1, or a new version while still
    /// draft/planned (every `spec` event stays in the file, see [`Self::spec_history`]).
    /// Refused once the task is ready or later: from then on a different spec means a new task
    /// or a [`replay`](Self::replay). The repos in `spec.repos` are recorded as given, with the
    /// commits their caller read: [`crate::project_repos`] gives PROJECT.md's repos with them.
    pub fn freeze(&self, id: &str, spec: TaskSpec, actor: &str) -> Result<Task, TaskError> {
        if spec.goal.trim().is_empty() {
            return Err(TaskError::Invalid(format!(
                "task {id}: a spec needs a goal: say what must be achieved"
            )));
        }
        let _lock = self.lock()?;
        let (path, mut task) = self.load(id)?;
        if !matches!(task.state, TaskState::Draft | TaskState::Planned) {
            return Err(TaskError::Frozen(task.id));
        }
        let version = task.spec_version + 1;
        let mut batch = Batch::new(&path, &mut task, None);
        batch.spec(version, spec, actor);
        if batch.task.state == TaskState::Draft {
            let reason = format!("spec v{version} frozen");
            batch.transition(TaskState::Planned, actor, &reason)?;
        }
        batch.commit()?;
        tracing::info!(task = %task.id, version, actor, "spec frozen");
        self.index_put(&task, &path);
        Ok(task)
    }

    /// Compare-and-set transition. Checked in this order, under the lock:
    /// 1. the task is in `expected`, else [`TaskError::Conflict`];
    /// 2. the table allows `expected → to` ([`check_transition`]), else `InvalidTransition`;
    /// 3. gates: `planned` and `ready` need `spec_version >= 1` ([`TaskError::NotFrozen`]);
    ///    `running` needs every dependency done ([`TaskError::Waiting`]).
    ///
    /// Then a `transition` event (actor, reason, time) is appended durably and the index
    /// rewritten. Moving to failed/blocked/cancelled sets `stop_reason` from `reason`.
    ///
    /// Once the event is durable the move has happened: a failure to rewrite the index after
    /// it is logged, not returned, because a caller told "failed" would retry and get a
    /// confusing Conflict; the next `list` repairs the index.
    pub fn transition(
        &self,
        id: &str,
        expected: TaskState,
        to: TaskState,
        actor: &str,
        reason: &str,
    ) -> Result<Task, TaskError> {
        self.finish(id, &[], Some((expected, to, reason)), actor)
    }

    /// Changes one field with an `update` event. The update is checked before anything is
    /// written (a stage only while running, a cost finite and >= 0).
    pub fn update(&self, id: &str, update: TaskUpdate, actor: &str) -> Result<Task, TaskError> {
        self.finish(id, std::slice::from_ref(&update), None, actor)
    }

    /// A new task, frozen and moved on in one step: the `created` event, spec v1 and the
    /// transitions draft → planned → ready (→ running when `to` is [`TaskState::Running`]) are
    /// appended to the new event file with a single fdatasync, instead of one per event as
    /// [`create`](Self::create) + [`freeze`](Self::freeze) + [`transition`](Self::transition)
    /// would. The same checks apply (a goal, the transition table, dependencies done before
    /// `running`). `to` must be `planned`, `ready` or `running`. Nothing is acknowledged until
    /// the sync returns; a crash before it leaves at most a prefix of the events, exactly as a
    /// crash between the separate calls would.
    pub fn create_frozen(
        &self,
        t: NewTask,
        spec: TaskSpec,
        to: TaskState,
        actor: &str,
        reason: &str,
    ) -> Result<Task, TaskError> {
        if !matches!(
            to,
            TaskState::Planned | TaskState::Ready | TaskState::Running
        ) {
            return Err(TaskError::Invalid(format!(
                "a new task can start as planned, ready or running, not {to}"
            )));
        }
        if spec.goal.trim().is_empty() {
            return Err(TaskError::Invalid(
                "a spec needs a goal: say what must be achieved".into(),
            ));
        }
        let _lock = self.lock()?;
        let (path, mut task, created) = self.new_task_locked(t, None)?;
        let mut batch = Batch::new(&path, &mut task, Some(created));
        batch.spec(1, spec, actor);
        batch.transition(TaskState::Planned, actor, "spec v1 frozen")?;
        if to != TaskState::Planned {
            batch.transition(TaskState::Ready, actor, reason)?;
        }
        if to == TaskState::Running {
            self.check_deps_done(batch.task)?;
            batch.transition(TaskState::Running, actor, reason)?;
        }
        batch.commit()?;
        tracing::info!(task = %task.id, project = %self.project, to = %to, actor, "task created");
        self.index_put(&task, &path);
        Ok(task)
    }

    /// Several [`update`](Self::update)s and then, with `to = Some((expected, state,
    /// reason))`, a compare-and-set [`transition`](Self::transition) with its checks, appended
    /// with a single fdatasync: how a run records its result, cost and end state. All or
    /// nothing: a bad value, a task not in `expected` ([`TaskError::Conflict`]) or a move the
    /// table or a gate forbids writes nothing.
    pub fn finish(
        &self,
        id: &str,
        updates: &[TaskUpdate],
        to: Option<(TaskState, TaskState, &str)>,
        actor: &str,
    ) -> Result<Task, TaskError> {
        let _lock = self.lock()?;
        let (path, mut task) = self.load(id)?;
        if let Some((expected, state, _)) = to {
            expect_state(&task, expected)?;
            check_transition(&task.id, task.state, state)?;
            if matches!(state, TaskState::Planned | TaskState::Ready) && task.spec_version < 1 {
                return Err(TaskError::NotFrozen(task.id));
            }
            if state == TaskState::Running {
                self.check_deps_done(&task)?;
            }
        }
        let mut batch = Batch::new(&path, &mut task, None);
        for update in updates {
            // Dry run on a copy: a bad update must be refused, not logged and skipped on fold.
            batch.task.clone().apply_update(update)?;
            batch.push(update_event(update, actor));
        }
        if let Some((_, state, reason)) = to {
            batch.transition(state, actor, reason)?;
        }
        if batch.events.is_empty() {
            return Ok(task);
        }
        batch.commit()?;
        // Logged once durable: a failed append moved nothing.
        if let Some((expected, state, reason)) = to {
            tracing::info!(task = %id, from = %expected, to = %state, actor, reason, "task moved");
        }
        self.index_put(&task, &path);
        Ok(task)
    }

    /// The task as its event file says (always folded, never from the index).
    pub fn get(&self, id: &str) -> Result<Task, TaskError> {
        let _lock = self.lock()?;
        Ok(self.load(id)?.1)
    }

    /// Every task, newest first. Served from the index, except that each line is checked
    /// against its event file's size (one `stat`) and every event file the index lacks is
    /// found by listing the date folders: those tasks are folded again and the index is
    /// repaired, so a crash between an event and its index rewrite is never visible here.
    pub fn list(&self) -> Result<Vec<Task>, TaskError> {
        let _lock = self.lock()?;
        let files = self.event_files()?;
        let index = read_index(&self.index_path())?;
        let index_len = index.len();
        let mut by_id: HashMap<String, IndexLine> =
            index.into_iter().map(|l| (l.task.id.clone(), l)).collect();
        let mut lines = Vec::with_capacity(files.len());
        let mut refolded = false;
        for (id, path) in files {
            let len = file_len(&path)?;
            match by_id.remove(&id) {
                Some(line) if line.events_bytes == len => lines.push(line),
                _ => {
                    refolded = true;
                    lines.extend(self.fold_line(&path, len)?);
                }
            }
        }
        sort_oldest_first(&mut lines);
        if refolded || lines.len() != index_len {
            if let Err(e) = write_index(&self.index_path(), &lines) {
                tracing::warn!(project = %self.project, "cannot repair the task index: {e}");
            }
        }
        Ok(lines.into_iter().rev().map(|l| l.task).collect())
    }

    /// Every event of task `id`, in order (a torn last line from a crash is left out).
    pub fn history(&self, id: &str) -> Result<Vec<TaskEvent>, TaskError> {
        let _lock = self.lock()?;
        let path = self.events_path(id)?;
        self.read_events(&path)
    }

    /// Every frozen spec version of task `id`, oldest first.
    pub fn spec_history(&self, id: &str) -> Result<Vec<(u32, TaskSpec)>, TaskError> {
        Ok(self
            .history(id)?
            .into_iter()
            .filter_map(|e| match e {
                TaskEvent::Spec { version, spec, .. } => Some((version, spec)),
                _ => None,
            })
            .collect())
    }

    /// A new task, `planned` at once with `spec_version` 1, whose spec is the source's latest
    /// frozen spec unchanged (repo HEADs included: a replay runs against the code the original
    /// saw, so nothing is re-snapshotted); `replay_of` names the source. Title, type, priority,
    /// role and dependencies are copied.
    pub fn replay(&self, id: &str, actor: &str) -> Result<Task, TaskError> {
        let _lock = self.lock()?;
        let (_, source) = self.load(id)?;
        let Some(spec) = source.spec.clone().filter(|_| source.spec_version >= 1) else {
            return Err(TaskError::NotFrozen(source.id));
        };
        let new = NewTask {
            title: source.title.clone(),
            kind: source.kind.clone(),
            priority: source.priority,
            role: source.role.clone(),
            depends_on: source.depends_on.clone(),
            messages: Vec::new(),
        };
        let (path, mut task, created) = self.new_task_locked(new, Some(source.id.clone()))?;
        let mut batch = Batch::new(&path, &mut task, Some(created));
        batch.spec(1, spec, actor);
        let reason = format!("replay of {}", source.id);
        batch.transition(TaskState::Planned, actor, &reason)?;
        batch.commit()?;
        tracing::info!(task = %task.id, source = %source.id, actor, "task replayed");
        self.index_put(&task, &path);
        Ok(task)
    }

    /// Splits ready task `id` into the subtasks of a planner's `steps` (DESIGN.md §10 `plan:`):
    /// each a new ready task with the parent's kind, priority, role, constraints and repos, its
    /// goal and acceptance from its step, `depends_on` the subtasks of the steps it names, and
    /// [`Task::parent`] set. The parent records them as [`Task::subtasks`] and waits for them.
    ///
    /// A subtask's repos carry no commit: it starts from its base branch as it is when it
    /// starts, after the steps it depends on merged, not from where the parent's spec froze it.
    ///
    /// The parent's list is written before the subtasks: a crash in between leaves a parent
    /// waiting on a subtask that does not exist (shown as `not found`; `task cancel` ends it),
    /// never subtasks running beside a parent that would be split again.
    pub fn split(&self, id: &str, steps: &[Step], actor: &str) -> Result<Vec<Task>, TaskError> {
        check_steps(steps).map_err(|e| TaskError::Invalid(format!("task {id}: {e}")))?;
        let _lock = self.lock()?;
        let (parent_path, mut parent) = self.load(id)?;
        expect_state(&parent, TaskState::Ready)?;
        if !parent.subtasks.is_empty() {
            return Err(TaskError::Invalid(format!(
                "task {id} is already split into {}",
                parent.subtasks.join(", ")
            )));
        }
        let Some(spec) = parent.spec.clone().filter(|_| parent.spec_version >= 1) else {
            return Err(TaskError::NotFrozen(parent.id));
        };
        let whole = spec.goal.trim().lines().next().unwrap_or_default();
        let mut made: Vec<(PathBuf, Task, TaskEvent)> = Vec::with_capacity(steps.len());
        for step in steps {
            let new = NewTask {
                title: step_title(step),
                kind: parent.kind.clone(),
                priority: parent.priority,
                role: parent.role.clone(),
                depends_on: Vec::new(),
                messages: Vec::new(),
            };
            let (path, mut task, _) = self.new_task_locked(new, None)?;
            if made.iter().any(|(_, t, _)| t.id == task.id) {
                return Err(TaskError::Invalid(format!(
                    "task {id}: two subtasks drew the same id; split it again"
                )));
            }
            task.parent = Some(parent.id.clone());
            task.depends_on = dedup(step.depends_on.iter().map(|n| made[n - 1].1.id.clone()));
            let created = TaskEvent::Created {
                ts: task.created,
                task: task.clone(),
            };
            made.push((path, task, created));
        }
        let ids: Vec<String> = made.iter().map(|(_, t, _)| t.id.clone()).collect();
        let mut batch = Batch::new(&parent_path, &mut parent, None);
        batch.push(update_event(&TaskUpdate::Subtasks(ids.clone()), actor));
        batch.commit()?;
        self.index_put(&parent, &parent_path);
        let n = steps.len();
        let mut out = Vec::with_capacity(n);
        for ((path, mut task, created), (i, step)) in made.into_iter().zip(steps.iter().enumerate())
        {
            let mut constraints = spec.constraints.clone();
            constraints.push(format!(
                "This is step {} of {n} of task {}: {whole}",
                i + 1,
                parent.id
            ));
            let sub = TaskSpec {
                goal: step.goal.trim().to_string(),
                constraints,
                acceptance: step.acceptance.clone(),
                role: spec.role.clone(),
                model_policy: spec.model_policy.clone(),
                repos: spec
                    .repos
                    .iter()
                    .map(|r| RepoSnapshot {
                        head: None,
                        ..r.clone()
                    })
                    .collect(),
                budget_usd: spec.budget_usd,
            };
            let mut batch = Batch::new(&path, &mut task, Some(created));
            batch.spec(1, sub, actor);
            batch.transition(TaskState::Planned, actor, "spec v1 frozen")?;
            batch.transition(
                TaskState::Ready,
                actor,
                &format!("split from {}", parent.id),
            )?;
            batch.commit()?;
            self.index_put(&task, &path);
            out.push(task);
        }
        tracing::info!(task = %id, subtasks = %ids.join(", "), actor, "task split");
        Ok(out)
    }

    /// Whether task `id` may start: [`Readiness::Go`] when every `depends_on` task (and every
    /// subtask it was split into) is done, else `Skip` naming each one that is not, with its
    /// state. Only those are looked at; the task's own state is the caller's business.
    pub fn readiness(&self, id: &str) -> Result<Readiness, TaskError> {
        let _lock = self.lock()?;
        let (_, task) = self.load(id)?;
        self.readiness_locked(&task)
    }

    /// The restart rule (DESIGN.md §6, §7): every task found `running` or `verifying` becomes
    /// `failed` with reason `process restarted` (actor `recovery`), since no process is
    /// executing it any more; then the index is rebuilt from the events. A message's task (one
    /// that lists [`Task::messages`]) is the exception, because its sender was told the message
    /// was taken: it goes back to `ready` to run again ([`RERUN_REASON`]) — also when a
    /// graceful stop interrupted it ([`SHUTDOWN_REASON`]) — but only once: found interrupted
    /// again after that re-run, it fails with [`CRASHED_TWICE_REASON`].
    /// Returns what it did to each task, oldest first. Call it once when a worker starts,
    /// before anything runs.
    pub fn recover_after_restart(&self) -> Result<Vec<Recovered>, TaskError> {
        let _lock = self.lock()?;
        let mut lines = self.fold_all()?;
        let mut done = Vec::new();
        for line in &mut lines {
            let task = &line.task;
            let running = task.state.is_interrupted_by_restart();
            let shut_down = task.state == TaskState::Failed
                && task.stop_reason.as_deref() == Some(SHUTDOWN_REASON);
            let message_task = !task.messages.is_empty();
            if !(running || (shut_down && message_task)) {
                continue;
            }
            let path = self.events_path(&task.id)?;
            let rerun_before = message_task
                && self.read_events(&path)?.iter().any(
                    |e| matches!(e, TaskEvent::Transition { reason, .. } if reason == RERUN_REASON),
                );
            let action = match (message_task, rerun_before, running) {
                (true, false, _) => Recovery::Rerun,
                (true, true, true) => Recovery::CrashedTwice,
                // Interrupted by a graceful stop after its one re-run: it stays failed, and
                // can be retried by hand.
                (true, true, false) => continue,
                (false, _, _) => Recovery::Failed,
            };
            let mut batch = Batch::new(&path, &mut line.task, None);
            if running {
                let reason = match action {
                    Recovery::CrashedTwice => CRASHED_TWICE_REASON,
                    _ => RESTART_REASON,
                };
                batch.transition(TaskState::Failed, RECOVERY_ACTOR, reason)?;
            }
            if action == Recovery::Rerun {
                batch.transition(TaskState::Ready, RECOVERY_ACTOR, RERUN_REASON)?;
            }
            batch.commit()?;
            line.events_bytes = file_len(&path)?;
            let what = match action {
                Recovery::Rerun => "message task interrupted: it runs again".to_string(),
                _ => format!("task failed: {}", action.reason()),
            };
            tracing::warn!(task = %line.task.id, project = %self.project, "{what}");
            done.push(Recovered {
                id: line.task.id.clone(),
                action,
            });
        }
        write_index_if_changed(&self.index_path(), &lines)?;
        Ok(done)
    }

    /// Today's artifacts folder, `<project>/artifacts/<YYYY-MM-DD>/`, created if missing.
    pub fn artifacts_dir(&self) -> Result<PathBuf, TaskError> {
        let dir = self
            .project_dir
            .join("artifacts")
            .join(Utc::now().format("%Y-%m-%d").to_string());
        create_dir_all_durable(&dir)?;
        Ok(dir)
    }

    fn lock(&self) -> Result<ProjectLock, TaskError> {
        ProjectLock::acquire(&self.tasks_dir.join(LOCK_FILE))
    }

    /// A checked new task, its event file's path and its `created` event, not yet written.
    fn new_task_locked(
        &self,
        t: NewTask,
        replay_of: Option<String>,
    ) -> Result<(PathBuf, Task, TaskEvent), TaskError> {
        let title = t.title.trim().to_string();
        if title.is_empty() {
            return Err(TaskError::Invalid(
                "a task needs a title: say in one line what it is".into(),
            ));
        }
        if t.priority > MAX_PRIORITY {
            return Err(TaskError::Invalid(format!(
                "priority {} is out of range: use 0 (most urgent) to {MAX_PRIORITY}",
                t.priority
            )));
        }
        for dep in &t.depends_on {
            self.events_path(dep)?;
        }
        let depends_on = dedup(t.depends_on);
        let now = Utc::now();
        let (id, path) = self.fresh_id(now)?;
        let kind = match t.kind.trim() {
            "" => DEFAULT_KIND.to_string(),
            k => k.to_string(),
        };
        let task = Task {
            id,
            project: self.project.clone(),
            title,
            kind,
            priority: t.priority,
            role: t.role,
            state: TaskState::Draft,
            spec_version: 0,
            spec: None,
            depends_on,
            result_summary: None,
            files_changed: Vec::new(),
            artifacts: Vec::new(),
            stage: None,
            stop_reason: None,
            merge: None,
            question: None,
            answer: None,
            replay_of,
            cost_usd: None,
            messages: t.messages,
            parent: None,
            subtasks: Vec::new(),
            created: now,
            updated: now,
        };
        let created = TaskEvent::Created {
            ts: now,
            task: task.clone(),
        };
        Ok((path, task, created))
    }

    /// An id whose event file does not exist yet (a collision needs the same 24 random bits on
    /// the same day; retrying makes it harmless rather than merely unlikely).
    fn fresh_id(&self, now: DateTime<Utc>) -> Result<(String, PathBuf), TaskError> {
        let day = self.tasks_dir.join(now.format("%Y-%m-%d").to_string());
        for _ in 0..16 {
            let id = new_task_id(now)?;
            let path = day.join(format!("{id}.jsonl"));
            if !path.exists() {
                return Ok((id, path));
            }
        }
        Err(TaskError::Invalid(format!(
            "{}: no free task id after 16 tries: check /dev/urandom",
            day.display()
        )))
    }

    /// The event file of task `id`, or `NotFound`: found directly from the date in the id,
    /// else (ids of another shape) by looking in every date folder.
    pub fn events_path(&self, id: &str) -> Result<PathBuf, TaskError> {
        if !is_safe_id(id) {
            return Err(TaskError::NotFound(id.to_string()));
        }
        let file = format!("{id}.jsonl");
        if let Some(day) = date_dir_of(id) {
            let p = self.tasks_dir.join(day).join(&file);
            if p.is_file() {
                return Ok(p);
            }
        }
        for day in self.date_dirs()? {
            let p = day.join(&file);
            if p.is_file() {
                return Ok(p);
            }
        }
        Err(TaskError::NotFound(id.to_string()))
    }

    /// The date folders under `tasks/`, sorted.
    fn date_dirs(&self) -> Result<Vec<PathBuf>, TaskError> {
        let mut dirs = Vec::new();
        let entries = std::fs::read_dir(&self.tasks_dir).map_err(TaskError::io(&self.tasks_dir))?;
        for entry in entries {
            let entry = entry.map_err(TaskError::io(&self.tasks_dir))?;
            let name = entry.file_name();
            if name.to_string_lossy().starts_with('.') {
                continue;
            }
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            }
        }
        dirs.sort();
        Ok(dirs)
    }

    /// Every event file as `(id, path)`.
    fn event_files(&self) -> Result<Vec<(String, PathBuf)>, TaskError> {
        let mut files = Vec::new();
        for day in self.date_dirs()? {
            let entries = std::fs::read_dir(&day).map_err(TaskError::io(&day))?;
            for entry in entries {
                let entry = entry.map_err(TaskError::io(&day))?;
                let path = entry.path();
                let Some(id) = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .and_then(|n| n.strip_suffix(".jsonl"))
                else {
                    continue;
                };
                if is_safe_id(id) && path.is_file() {
                    files.push((id.to_string(), path));
                }
            }
        }
        files.sort();
        Ok(files)
    }

    fn read_events(&self, path: &Path) -> Result<Vec<TaskEvent>, TaskError> {
        let read = read_jsonl::<TaskEvent>(path)?;
        if read.skipped > 0 || read.torn_tail {
            tracing::warn!(
                file = %path.display(), skipped = read.skipped, torn = read.torn_tail,
                "task event file has unreadable lines; folding the rest"
            );
        }
        Ok(read.records)
    }

    /// Folds one event file; `None` (logged) for a file with no `created` record, which only a
    /// crash in the middle of creating a task leaves behind.
    fn fold_file(&self, path: &Path) -> Result<Option<Task>, TaskError> {
        let task = fold(&self.read_events(path)?);
        if task.is_none() {
            tracing::warn!(file = %path.display(), "task event file has no created record; ignoring it");
        }
        Ok(task)
    }

    /// [`Self::fold_file`] as the index line of an event file `events_bytes` long.
    fn fold_line(&self, path: &Path, events_bytes: u64) -> Result<Option<IndexLine>, TaskError> {
        let task = self.fold_file(path)?;
        Ok(task.map(|task| IndexLine { task, events_bytes }))
    }

    fn load(&self, id: &str) -> Result<(PathBuf, Task), TaskError> {
        let path = self.events_path(id)?;
        match self.fold_file(&path)? {
            Some(task) => Ok((path, task)),
            None => Err(TaskError::Corrupt {
                path,
                message: format!(
                    "task {id} has no created record (interrupted creation): delete the file"
                ),
            }),
        }
    }

    /// Every task folded from its events, as index lines, oldest first.
    fn fold_all(&self) -> Result<Vec<IndexLine>, TaskError> {
        let mut lines = Vec::new();
        for (_, path) in self.event_files()? {
            lines.extend(self.fold_line(&path, file_len(&path)?)?);
        }
        sort_oldest_first(&mut lines);
        Ok(lines)
    }

    fn readiness_locked(&self, task: &Task) -> Result<Readiness, TaskError> {
        let mut deps = Vec::with_capacity(task.depends_on.len() + task.subtasks.len());
        // A task split by a planner waits for its subtasks as for its dependencies.
        for dep in task.depends_on.iter().chain(&task.subtasks) {
            let state = match self.load(dep) {
                Ok((_, t)) => Some(t.state),
                Err(TaskError::NotFound(_) | TaskError::Corrupt { .. }) => None,
                Err(e) => return Err(e),
            };
            deps.push((dep.as_str(), state));
        }
        Ok(readiness_of(deps))
    }

    /// [`TaskError::Waiting`] unless every dependency and subtask of `task` is done.
    fn check_deps_done(&self, task: &Task) -> Result<(), TaskError> {
        match self.readiness_locked(task)? {
            Readiness::Skip { waiting_on } => Err(TaskError::Waiting {
                id: task.id.clone(),
                waiting_on,
            }),
            Readiness::Go => Ok(()),
        }
    }

    /// Puts `task`'s line into the index. Best effort on purpose: the event is already durable,
    /// so the write has happened; a stale index is detected and repaired by [`Self::list`].
    fn index_put(&self, task: &Task, events: &Path) {
        let result = (|| -> Result<(), TaskError> {
            let line = IndexLine {
                task: task.clone(),
                events_bytes: file_len(events)?,
            };
            let mut lines = read_index(&self.index_path())?;
            match lines.iter_mut().find(|l| l.task.id == task.id) {
                Some(slot) => *slot = line,
                None => lines.push(line),
            }
            write_index(&self.index_path(), &lines)
        })();
        if let Err(e) = result {
            tracing::warn!(task = %task.id, "task index not updated (the next list repairs it): {e}");
        }
    }
}

/// [`TaskError::Conflict`] unless `task` is in `expected`.
fn expect_state(task: &Task, expected: TaskState) -> Result<(), TaskError> {
    if task.state == expected {
        return Ok(());
    }
    Err(TaskError::Conflict {
        id: task.id.clone(),
        expected,
        actual: task.state,
    })
}

/// `ids` without repeats, in first-seen order.
fn dedup(ids: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for id in ids {
        if !out.contains(&id) {
            out.push(id);
        }
    }
    out
}

/// The `update` event that records `update`.
fn update_event(update: &TaskUpdate, actor: &str) -> TaskEvent {
    TaskEvent::Update {
        ts: Utc::now(),
        field: update.field().to_string(),
        value: update.value(),
        actor: actor.to_string(),
    }
}

/// Writes a new task's event file whole (temp file, fsync, rename, fsync of its folder): a
/// crash leaves either no file or one that starts with its `created` event, never an empty or
/// headless file the index does not know.
fn write_new_events(path: &Path, events: &[TaskEvent]) -> Result<(), TaskError> {
    if let Some(dir) = path.parent() {
        create_dir_all_durable(dir)?;
    }
    let mut bytes = Vec::new();
    for event in events {
        serde_json::to_writer(&mut bytes, event).map_err(|e| {
            TaskError::Invalid(format!(
                "{}: cannot serialize an event: {e}",
                path.display()
            ))
        })?;
        bytes.push(b'\n');
    }
    pegasus_store::write_atomic(path, &bytes)?;
    Ok(())
}

/// Appends `events` in order and makes them durable with one fdatasync.
fn append_events(path: &Path, events: &[TaskEvent]) -> Result<(), TaskError> {
    let mut log = JsonlAppender::open(path)?;
    for event in events {
        log.append(event)?;
    }
    log.sync()?;
    Ok(())
}

/// Events of one task, applied to it as they are added (exactly as a later fold will) and
/// appended together by [`Batch::commit`] with a single fdatasync.
struct Batch<'a> {
    path: &'a Path,
    task: &'a mut Task,
    events: Vec<TaskEvent>,
    /// The batch creates the event file (it starts with `created`).
    new: bool,
}

impl<'a> Batch<'a> {
    /// A batch for `task`, starting with its `created` event when the task is new.
    fn new(path: &'a Path, task: &'a mut Task, created: Option<TaskEvent>) -> Self {
        Batch {
            path,
            task,
            new: created.is_some(),
            events: created.into_iter().collect(),
        }
    }

    fn push(&mut self, event: TaskEvent) {
        apply(self.task, &event);
        self.events.push(event);
    }

    /// Adds spec `version`.
    fn spec(&mut self, version: u32, spec: TaskSpec, actor: &str) {
        self.push(TaskEvent::Spec {
            ts: Utc::now(),
            version,
            spec,
            actor: actor.to_string(),
        });
    }

    /// Adds a move, checked against the table from the state the batch has reached.
    fn transition(&mut self, to: TaskState, actor: &str, reason: &str) -> Result<(), TaskError> {
        check_transition(&self.task.id, self.task.state, to)?;
        self.push(TaskEvent::Transition {
            ts: Utc::now(),
            from: self.task.state,
            to,
            actor: actor.to_string(),
            reason: reason.to_string(),
        });
        Ok(())
    }

    fn commit(self) -> Result<(), TaskError> {
        if self.new {
            write_new_events(self.path, &self.events)
        } else {
            append_events(self.path, &self.events)
        }
    }
}

fn file_len(path: &Path) -> Result<u64, TaskError> {
    Ok(std::fs::metadata(path).map_err(TaskError::io(path))?.len())
}

fn sort_oldest_first(lines: &mut [IndexLine]) {
    lines.sort_by(|a, b| (a.task.created, &a.task.id).cmp(&(b.task.created, &b.task.id)));
}
