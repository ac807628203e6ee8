//! The files of a project's runs, and the verbs outsiders may apply to them.
//!
//! Layout under `<project_dir>/runs/`:
//!
//! * `<id>.json`: the run's latest state, replaced atomically on every change (the engine is
//!   its only writer while the run is live);
//! * `<id>.events.jsonl`: every step, appended and synced ([`crate::events`]);
//! * `<id>.request`: a pending cancel or pause, written only by [`RunStore::request`]. It is a
//!   file of its own because the engine and pegasusd are different processes: if the request
//!   were a field the engine rewrites, an engine write racing pegasusd's would silently drop the
//!   user's cancel. Here each file has one writer and the engine merely reads this one at the top
//!   of every loop turn (and removes it once acted on).
//!
//! Synchronous on purpose, like `pegasus-store`: the writes are small, and the engine runs them
//! on tokio's blocking pool.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use chrono::Utc;
use pegasus_store::{
    create_dir_all_durable, fsync_dir, read_jsonl, write_atomic, JsonlAppender, StoreError,
};

use crate::error::RunError;
use crate::events::{EventLine, RunEvent};
use crate::run::{new_run_id, Run, RunRequest};
use crate::status::{RunStatus, RunTrigger};

/// Runs of one project: `<project_dir>/runs/<id>.json` (atomic rewrite on every change) +
/// `runs/<id>.events.jsonl` (append-only log of every step) + `runs/<id>.request` (a pending
/// cancel/pause from outside).
#[derive(Debug, Clone)]
pub struct RunStore {
    dir: PathBuf,
}

impl RunStore {
    /// Opens (creating if needed) the `runs/` folder of a project.
    pub fn open(project_dir: &Path) -> Result<RunStore, RunError> {
        let dir = project_dir.join("runs");
        create_dir_all_durable(&dir)?;
        Ok(RunStore { dir })
    }

    /// The `runs/` folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A new run in `planning`, with no phases yet; [`crate::RunEngine::drive`] plans it.
    pub fn create(&self, project: &str, brief: &str, max_attempts: u32) -> Result<Run, RunError> {
        if brief.trim().is_empty() {
            return Err(RunError::Invalid(
                "the brief is empty: say what the run should achieve with --brief".into(),
            ));
        }
        if max_attempts == 0 {
            return Err(RunError::Invalid(
                "max attempts must be at least 1 (--max-attempts)".into(),
            ));
        }
        let id = self.fresh_id()?;
        let now = Utc::now();
        let run = Run {
            id,
            project: project.to_string(),
            brief: brief.to_string(),
            status: RunStatus::Planning,
            max_attempts,
            phases: Vec::new(),
            current_phase: None,
            requested: None,
            cost_usd: 0.0,
            error: None,
            created: now,
            updated: now,
            unpriced_calls: 0,
        };
        self.save(&run)?;
        self.log(
            &run.id,
            RunEvent::Created {
                brief: run.brief.clone(),
                max_attempts,
            },
        )?;
        Ok(run)
    }

    /// An id no run of this project has: a clash is astronomically unlikely, but overwriting a
    /// run would lose it, so it is checked.
    fn fresh_id(&self) -> Result<String, RunError> {
        for _ in 0..64 {
            let id = new_run_id();
            if !self.run_file(&id).exists() {
                return Ok(id);
            }
        }
        Err(RunError::Invalid(format!(
            "{}: could not pick an unused run id; check the folder",
            self.dir.display()
        )))
    }

    /// The run with this id, with any pending request filled in.
    pub fn get(&self, id: &str) -> Result<Run, RunError> {
        check_id(id)?;
        let path = self.run_file(id);
        let bytes = match read_run_file(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(RunError::NotFound(id.to_string()))
            }
            Err(e) => return Err(StoreError::io(&path)(e).into()),
        };
        let mut run: Run = serde_json::from_slice(&bytes).map_err(|e| RunError::Corrupt {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        // A request left behind by a crash between "run finished" and "request removed" means
        // nothing any more.
        run.requested = if run.status.is_finished() {
            None
        } else {
            self.read_request(id)?
        };
        Ok(run)
    }

    /// The newest run (what `run status NAME` shows), if any.
    pub fn latest(&self) -> Result<Option<Run>, RunError> {
        Ok(self.list()?.pop())
    }

    /// Every readable run, oldest first. A run file that does not parse is logged and left out,
    /// so one damaged file does not hide the others.
    pub fn list(&self) -> Result<Vec<Run>, RunError> {
        let entries = std::fs::read_dir(&self.dir).map_err(StoreError::io(&self.dir))?;
        let mut runs = Vec::new();
        for entry in entries {
            let entry = entry.map_err(StoreError::io(&self.dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            // Temp files of write_atomic start with a dot; the logs end in .jsonl.
            let Some(id) = name.strip_suffix(".json") else {
                continue;
            };
            if name.starts_with('.') {
                continue;
            }
            match self.get(id) {
                Ok(run) => runs.push(run),
                Err(e @ RunError::Corrupt { .. }) => tracing::warn!("skipping a run: {e}"),
                // Removed between read_dir and read: not a run any more.
                Err(RunError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        runs.sort_by(|a, b| a.created.cmp(&b.created).then_with(|| a.id.cmp(&b.id)));
        Ok(runs)
    }

    /// Runs that were planning or executing when the process died: nobody drives them now, so
    /// the caller resumes each with [`crate::RunEngine::drive`]. Paused runs are not among them:
    /// they wait for `run resume`.
    pub fn unfinished(&self) -> Result<Vec<Run>, RunError> {
        Ok(self
            .list()?
            .into_iter()
            .filter(|r| r.status.is_live())
            .collect())
    }

    /// From outside (pegasusd on `run cancel|pause`): records the request; the engine acts on it
    /// at its next loop turn (after the phase under way has its verdict). A paused run has no
    /// loop to act, so cancelling it takes effect at once. Refused with a plain line for a
    /// finished run, a run already paused, or a pause while a cancel is pending.
    pub fn request(&self, id: &str, req: RunRequest) -> Result<Run, RunError> {
        let mut run = self.get(id)?;
        if run.status.is_finished() {
            return Err(RunError::Refused(format!(
                "run {id} is {}: nothing to {}",
                run.status,
                req.verb()
            )));
        }
        match (run.status, req) {
            (RunStatus::Paused, RunRequest::Pause) => Err(RunError::Refused(format!(
                "run {id} is already paused: `run resume` continues it, `run cancel` ends it"
            ))),
            (RunStatus::Paused, RunRequest::Cancel) => {
                run.apply(RunTrigger::Cancel)?;
                run.requested = None;
                self.save(&run)?;
                self.clear_request(id)?;
                self.log(id, RunEvent::Cancelled)?;
                Ok(run)
            }
            _ => {
                if run.requested == Some(RunRequest::Cancel) && req == RunRequest::Pause {
                    return Err(RunError::Refused(format!(
                        "run {id} is already being cancelled: nothing to pause"
                    )));
                }
                let body = serde_json::to_vec(&req).map_err(|e| {
                    RunError::Invalid(format!("cannot encode the request for run {id}: {e}"))
                })?;
                write_atomic(&self.request_file(id), &body)?;
                self.log(id, RunEvent::Requested { request: req })?;
                run.requested = Some(req);
                Ok(run)
            }
        }
    }

    /// `run resume`: a paused run goes back to executing (or to planning, if it paused before it
    /// had a plan), with its request and error cleared. The caller then drives it. Anything but
    /// a paused run is refused.
    pub fn resume(&self, id: &str) -> Result<Run, RunError> {
        let mut run = self.get(id)?;
        if run.status != RunStatus::Paused {
            return Err(RunError::Refused(format!(
                "run {id} is {}: only a paused run can be resumed",
                run.status
            )));
        }
        // The request goes first: a crash after it leaves a paused run the user can resume
        // again, whereas the other order could leave a live run that pauses itself at once.
        self.clear_request(id)?;
        run.apply(RunTrigger::Resume {
            planned: !run.phases.is_empty(),
        })?;
        run.requested = None;
        run.error = None;
        self.save(&run)?;
        self.log(id, RunEvent::Resumed)?;
        Ok(run)
    }

    /// Replaces the run file. The engine's write; outsiders use [`request`](Self::request) and
    /// [`resume`](Self::resume), which never race a live engine on this file.
    pub fn save(&self, run: &Run) -> Result<(), RunError> {
        check_id(&run.id)?;
        let mut body = serde_json::to_vec_pretty(run)
            .map_err(|e| RunError::Invalid(format!("cannot encode run {}: {e}", run.id)))?;
        body.push(b'\n');
        write_atomic(&self.run_file(&run.id), &body)?;
        Ok(())
    }

    /// Appends one step to the run's log, durably.
    pub fn log(&self, id: &str, event: RunEvent) -> Result<(), RunError> {
        check_id(id)?;
        let mut log = JsonlAppender::open(&self.events_file(id))?;
        log.append_durable(&EventLine {
            ts: Utc::now(),
            event,
        })?;
        Ok(())
    }

    /// The run's log, oldest first (damaged lines skipped).
    pub fn events(&self, id: &str) -> Result<Vec<EventLine>, RunError> {
        check_id(id)?;
        Ok(read_jsonl::<EventLine>(&self.events_file(id))?.records)
    }

    /// Removes a pending request once acted on (or on resume).
    pub(crate) fn clear_request(&self, id: &str) -> Result<(), RunError> {
        let path = self.request_file(id);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(fsync_dir(&self.dir)?),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(StoreError::io(&path)(e).into()),
        }
    }

    fn read_request(&self, id: &str) -> Result<Option<RunRequest>, RunError> {
        let path = self.request_file(id);
        match read_run_file(&path) {
            Ok(bytes) => match serde_json::from_slice(&bytes) {
                Ok(req) => Ok(Some(req)),
                Err(e) => {
                    // Only request() writes it, atomically; a bad one was edited by hand and
                    // is ignored rather than blocking the run.
                    tracing::warn!("{}: ignoring an unreadable request: {e}", path.display());
                    Ok(None)
                }
            },
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(StoreError::io(&path)(e).into()),
        }
    }

    fn run_file(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    fn events_file(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.events.jsonl"))
    }

    fn request_file(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.request"))
    }
}

/// Run ids come from the command line; anything but letters, digits and dashes could name a
/// file outside `runs/`.
fn check_id(id: &str) -> Result<(), RunError> {
    if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
        return Err(RunError::NotFound(id.to_string()));
    }
    Ok(())
}

/// The largest run or request file read.
const MAX_RUN_FILE: u64 = 16 << 20;

/// A run's file: a regular file only, never past [`MAX_RUN_FILE`] (pegasusd reads these from
/// the project folder; a FIFO there must not hang it).
fn read_run_file(path: &std::path::Path) -> std::io::Result<Vec<u8>> {
    match pegasus_store::read_capped(path, MAX_RUN_FILE + 1) {
        Ok(c) if c.truncated() || c.size > MAX_RUN_FILE => Err(std::io::Error::other(format!(
            "is {} bytes, over the {MAX_RUN_FILE}-byte limit",
            c.size
        ))),
        Ok(c) => Ok(c.bytes),
        Err(pegasus_store::ReadError::NotFound) => Err(ErrorKind::NotFound.into()),
        Err(pegasus_store::ReadError::Io(e)) => Err(e),
        Err(e) => Err(std::io::Error::other(e.to_string())),
    }
}
