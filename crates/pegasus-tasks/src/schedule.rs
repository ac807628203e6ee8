//! Scheduled agents (DESIGN.md §10): `<home>/schedules.yml` lists jobs that create a task in a
//! project on a 5-field cron schedule (UTC); `<home>/schedules.state.json` remembers, per job,
//! when it last ran and last tried, so a restart neither repeats nor forgets a run.
//!
//! ```yaml
//! - {name: nightly-dupes, cron: "0 3 * * *", project: website, goal: "Find duplicated code", role: duplicate-finder}
//! - {name: weekly-refactor, cron: "0 4 * * MON", project: website, goal: "Propose refactors", role: refactor-finder, auto: true}
//! ```
//!
//! Rules: a job is due when a cron time has passed since its last run (or since it was first
//! seen: a new job does not fire for the past). However many windows were missed while the
//! daemon was down, it runs once. A job whose task cannot be created (a project gone, a bad
//! role) records the attempt and is tried again only at its next cron time, so it never
//! hot-loops. The state is written atomically after every change.

use std::collections::BTreeMap;
use std::path::Path;

use chrono::{DateTime, Utc};
use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;
use serde::{Deserialize, Serialize};

use crate::TaskError;

/// Largest schedules.yml or state file read.
const FILE_CAP: u64 = 256 * 1024;

/// One job of `schedules.yml`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Job {
    /// Unique among the jobs; keys the state.
    pub name: String,
    /// Five fields (minute hour day-of-month month day-of-week), in UTC.
    pub cron: String,
    /// The project the task is added to.
    pub project: String,
    /// The task's goal.
    pub goal: String,
    /// The role that runs the task.
    #[serde(default)]
    pub role: Option<String>,
    /// `true`: the task is created ready and runs; `false` (default): it is created planned
    /// and waits for `pegasusctl task approve ID`.
    #[serde(default)]
    pub auto: bool,
}

/// A job with its parsed schedule.
#[derive(Debug, Clone)]
pub struct Scheduled {
    /// The job as written in `schedules.yml`.
    pub job: Job,
    cron: Cron,
}

/// What the state file keeps of one job.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobState {
    /// When the job was first seen: no run is due for cron times before it.
    pub since: Option<DateTime<Utc>>,
    /// When its last task was created.
    pub last_run: Option<DateTime<Utc>>,
    /// When it was last tried (successfully or not).
    pub last_attempt: Option<DateTime<Utc>>,
    /// Why the last attempt failed, if it did.
    #[serde(default)]
    pub last_error: Option<String>,
}

/// Parses a 5-field cron expression (UTC), refusing seconds and years.
pub fn parse_cron(pattern: &str) -> Result<Cron, String> {
    if pattern.split_whitespace().count() != 5 {
        return Err(format!(
            "`{pattern}` is not a 5-field cron expression (minute hour day-of-month month day-of-week), e.g. \"0 3 * * *\""
        ));
    }
    CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build()
        .parse(pattern)
        .map_err(|e| format!("`{pattern}` is not a valid cron expression: {e}"))
}

/// Loads and checks `schedules.yml`; a missing file is no jobs. Each refusal names the job
/// and what to fix.
pub fn load_jobs(path: &Path) -> Result<Vec<Scheduled>, TaskError> {
    let text = match pegasus_store::read_text_limited(path, FILE_CAP) {
        Ok(t) => t,
        Err(pegasus_store::ReadError::NotFound) => return Ok(Vec::new()),
        Err(e) => {
            return Err(TaskError::Invalid(format!(
                "{}: cannot be read: {e}",
                path.display()
            )))
        }
    };
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    let jobs: Vec<Job> = serde_norway::from_str(&text).map_err(|e| {
        TaskError::Invalid(format!(
            "{}: {e}; it must be a list of {{name, cron, project, goal, role?, auto?}}",
            path.display()
        ))
    })?;
    let mut out: Vec<Scheduled> = Vec::new();
    for job in jobs {
        let bad = |why: String| {
            TaskError::Invalid(format!("{}: job `{}`: {why}", path.display(), job.name))
        };
        if job.name.trim().is_empty() {
            return Err(bad("`name` is empty".into()));
        }
        if out.iter().any(|s| s.job.name == job.name) {
            return Err(bad("the name is used twice".into()));
        }
        pegasus_store::validate_name(&job.project).map_err(|e| bad(e.to_string()))?;
        if job.goal.trim().is_empty() {
            return Err(bad("`goal` is empty: say what the task must achieve".into()));
        }
        let cron = parse_cron(&job.cron).map_err(bad)?;
        out.push(Scheduled { job, cron });
    }
    Ok(out)
}

/// Loads the state file; a missing or unreadable one is empty (each job then starts afresh
/// from now: a run may be skipped, never repeated).
pub fn load_state(path: &Path) -> BTreeMap<String, JobState> {
    match pegasus_store::read_text_limited(path, FILE_CAP) {
        Ok(t) => serde_json::from_str(&t).unwrap_or_else(|e| {
            tracing::warn!(path = %path.display(), "schedule state unreadable, starting afresh: {e}");
            BTreeMap::new()
        }),
        Err(_) => BTreeMap::new(),
    }
}

/// Writes the state file atomically.
pub fn save_state(path: &Path, state: &BTreeMap<String, JobState>) -> Result<(), TaskError> {
    let text = serde_json::to_string_pretty(state)
        .map_err(|e| TaskError::Invalid(format!("schedule state: {e}")))?;
    pegasus_store::write_atomic(path, text.as_bytes())?;
    Ok(())
}

impl Scheduled {
    /// Whether the job should fire at `now`: a cron time in `(after, now]`, where `after` is
    /// the later of its last run, its last attempt and when it was first seen.
    pub fn due(&self, state: &JobState, now: DateTime<Utc>) -> bool {
        let after = [state.since, state.last_run, state.last_attempt]
            .into_iter()
            .flatten()
            .max()
            .unwrap_or(now);
        self.cron
            .find_next_occurrence(&after, false)
            .is_ok_and(|next| next <= now)
    }
}

/// The jobs due at `now`, after recording a first sighting (`since = now`) for new ones and
/// forgetting the state of removed ones. `state` is updated in place; the caller saves it.
pub fn due_jobs<'a>(
    jobs: &'a [Scheduled],
    state: &mut BTreeMap<String, JobState>,
    now: DateTime<Utc>,
) -> Vec<&'a Scheduled> {
    state.retain(|name, _| jobs.iter().any(|j| &j.job.name == name));
    let mut due = Vec::new();
    for j in jobs {
        let s = state.entry(j.job.name.clone()).or_insert_with(|| JobState {
            since: Some(now),
            ..JobState::default()
        });
        if j.due(s, now) {
            due.push(j);
        }
    }
    due
}

/// Records an attempt of `job` at `now`: a run when `result` is `Ok`.
pub fn record(
    state: &mut BTreeMap<String, JobState>,
    job: &str,
    now: DateTime<Utc>,
    result: Result<(), String>,
) {
    let s = state.entry(job.to_string()).or_default();
    s.last_attempt = Some(now);
    match result {
        Ok(()) => {
            s.last_run = Some(now);
            s.last_error = None;
        }
        Err(e) => s.last_error = Some(e),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use chrono::TimeZone;

    fn t(h: u32, m: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 22, h, m, 0).unwrap()
    }

    fn jobs(yaml: &str) -> Vec<Scheduled> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("schedules.yml");
        std::fs::write(&p, yaml).unwrap();
        load_jobs(&p).unwrap()
    }

    #[test]
    fn five_fields_only() {
        assert!(parse_cron("0 3 * * *").is_ok());
        assert!(parse_cron("*/15 * * * MON-FRI").is_ok());
        assert!(parse_cron("0 0 3 * * *").unwrap_err().contains("5-field"));
        assert!(parse_cron("61 * * * *")
            .unwrap_err()
            .contains("not a valid"));
    }

    #[test]
    fn bad_files_name_the_job_and_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("schedules.yml");
        for (yaml, says) in [
            ("- {name: a, cron: 'x', project: p, goal: g}", "job `a`"),
            ("- {name: a, cron: '0 3 * * *', project: 'Bad Name', goal: g}", "job `a`"),
            ("- {name: a, cron: '0 3 * * *', project: p, goal: ' '}", "`goal` is empty"),
            (
                "- {name: a, cron: '0 3 * * *', project: p, goal: g}\n- {name: a, cron: '0 4 * * *', project: p, goal: g}",
                "used twice",
            ),
            ("- {name: a, cron: '0 3 * * *', project: p, goal: g, colour: red}", "colour"),
        ] {
            std::fs::write(&p, yaml).unwrap();
            let e = load_jobs(&p).unwrap_err().to_string();
            assert!(e.contains(says), "{yaml}: {e}");
        }
        assert!(load_jobs(&dir.path().join("none.yml")).unwrap().is_empty());
    }

    #[test]
    fn a_new_job_waits_for_its_next_time_and_fires_once_for_missed_windows() {
        let js = jobs("- {name: hourly, cron: '0 * * * *', project: p, goal: g}");
        let mut state = BTreeMap::new();
        // First seen at 10:30: nothing due for the past.
        assert!(due_jobs(&js, &mut state, t(10, 30)).is_empty());
        assert!(due_jobs(&js, &mut state, t(10, 59)).is_empty());
        // 11:00 passed: due, once.
        assert_eq!(due_jobs(&js, &mut state, t(11, 0)).len(), 1);
        record(&mut state, "hourly", t(11, 0), Ok(()));
        assert!(due_jobs(&js, &mut state, t(11, 30)).is_empty());
        // Down from 11:30 to 15:10: four windows missed, one run.
        assert_eq!(due_jobs(&js, &mut state, t(15, 10)).len(), 1);
        record(&mut state, "hourly", t(15, 10), Ok(()));
        assert!(due_jobs(&js, &mut state, t(15, 20)).is_empty());
    }

    #[test]
    fn a_failing_job_waits_for_its_next_time() {
        let js = jobs("- {name: h, cron: '0 * * * *', project: p, goal: g}");
        let mut state = BTreeMap::new();
        due_jobs(&js, &mut state, t(10, 30));
        assert_eq!(due_jobs(&js, &mut state, t(11, 1)).len(), 1);
        record(&mut state, "h", t(11, 1), Err("project p not found".into()));
        assert!(
            due_jobs(&js, &mut state, t(11, 2)).is_empty(),
            "no hot loop"
        );
        assert!(due_jobs(&js, &mut state, t(11, 59)).is_empty());
        assert_eq!(due_jobs(&js, &mut state, t(12, 0)).len(), 1);
        assert_eq!(
            state["h"].last_error.as_deref(),
            Some("project p not found")
        );
        assert!(state["h"].last_run.is_none());
    }

    #[test]
    fn state_survives_a_save_and_removed_jobs_are_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("schedules.state.json");
        let js = jobs("- {name: h, cron: '0 * * * *', project: p, goal: g}");
        let mut state = BTreeMap::new();
        state.insert("gone".to_string(), JobState::default());
        due_jobs(&js, &mut state, t(10, 30));
        assert!(!state.contains_key("gone"));
        record(&mut state, "h", t(11, 0), Ok(()));
        save_state(&p, &state).unwrap();
        assert_eq!(load_state(&p), state);
        assert!(load_state(&dir.path().join("missing")).is_empty());
    }
}
