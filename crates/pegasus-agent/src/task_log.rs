//! The task records of one agent folder (SPEC §3, §7): `tasks/index.jsonl` with one line per
//! task (id, title, state, created, ...) and `tasks/<YYYY-MM-DD>/<id>.jsonl` with the task's
//! events (every transition with its time and reason, the final cost).
//!
//! The index holds one line per task and is rewritten atomically when a state changes, so a
//! reader needs no folding; unknown keys other code added to a line are kept. The event log
//! is append-only through the store's one JSONL appender.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use pegasus_store::{read_jsonl, write_atomic, JsonlAppender};
use serde::{Deserialize, Serialize};

use crate::error::AgentError;

/// A task's line in the index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskEntry {
    /// Task id.
    pub id: String,
    /// The first 80 characters of what was asked.
    pub title: String,
    /// `created`, `running`, `done`, `failed`, `blocked`, ...
    pub state: String,
    /// When the task was created.
    pub created: DateTime<Utc>,
    /// Why it is in its state, when that needs saying (`turn_capped`, `budget`, ...).
    #[serde(default)]
    pub reason: Option<String>,
}

/// One line of a task's event log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskEvent {
    /// When.
    pub ts: DateTime<Utc>,
    /// `created` or `transition`.
    pub event: String,
    /// The state after the event.
    pub state: String,
    /// The state before it (transitions).
    #[serde(default)]
    pub from: Option<String>,
    /// Why.
    #[serde(default)]
    pub reason: Option<String>,
    /// Cost of the task so far, on the final transition.
    #[serde(default)]
    pub cost_usd: Option<f64>,
}

/// The task records under `<dir>/tasks`.
#[derive(Debug, Clone)]
pub struct TaskLog {
    dir: PathBuf,
}

/// States a restart interrupts (SPEC §7).
const INTERRUPTED: [&str; 2] = ["running", "verifying"];

impl TaskLog {
    /// The task log of an agent folder.
    pub fn new(agent_dir: &Path) -> Self {
        TaskLog {
            dir: agent_dir.join("tasks"),
        }
    }

    /// `tasks/index.jsonl`.
    pub fn index_file(&self) -> PathBuf {
        self.dir.join("index.jsonl")
    }

    /// `tasks/<YYYY-MM-DD of created>/<id>.jsonl`.
    pub fn events_file(&self, id: &str, created: DateTime<Utc>) -> PathBuf {
        self.dir
            .join(created.format("%Y-%m-%d").to_string())
            .join(format!("{id}.jsonl"))
    }

    /// Every task, in creation order.
    pub fn entries(&self) -> Result<Vec<TaskEntry>, AgentError> {
        Ok(read_jsonl::<TaskEntry>(&self.index_file())?.records)
    }

    /// The events of a task, in order.
    pub fn events(&self, entry: &TaskEntry) -> Result<Vec<TaskEvent>, AgentError> {
        Ok(read_jsonl::<TaskEvent>(&self.events_file(&entry.id, entry.created))?.records)
    }

    /// Records a new task in state `created`.
    pub fn create(&self, id: &str, title: &str) -> Result<TaskEntry, AgentError> {
        let entry = TaskEntry {
            id: id.to_string(),
            title: title.to_string(),
            state: "created".into(),
            created: Utc::now(),
            reason: None,
        };
        self.append_event(
            &entry,
            &TaskEvent {
                ts: entry.created,
                event: "created".into(),
                state: entry.state.clone(),
                from: None,
                reason: None,
                cost_usd: None,
            },
        )?;
        let mut lines = self.raw_index()?;
        lines
            .push(serde_json::to_value(&entry).map_err(|e| AgentError::Background(e.to_string()))?);
        self.write_index(&lines)?;
        Ok(entry)
    }

    /// Moves a task to `state`: the event first (the audit trail never misses a state the
    /// index shows), then the index line.
    pub fn set_state(
        &self,
        entry: &mut TaskEntry,
        state: &str,
        reason: Option<&str>,
        cost_usd: Option<f64>,
    ) -> Result<(), AgentError> {
        self.append_event(
            entry,
            &TaskEvent {
                ts: Utc::now(),
                event: "transition".into(),
                state: state.to_string(),
                from: Some(entry.state.clone()),
                reason: reason.map(str::to_string),
                cost_usd,
            },
        )?;
        entry.state = state.to_string();
        entry.reason = reason.map(str::to_string);
        let mut lines = self.raw_index()?;
        for line in lines.iter_mut() {
            if line.get("id").and_then(|v| v.as_str()) == Some(entry.id.as_str()) {
                line["state"] = state.into();
                line["reason"] = reason.into();
            }
        }
        self.write_index(&lines)
    }

    /// Marks every task a previous process left `running`/`verifying` as `failed` with reason
    /// `process restarted`; returns their ids.
    pub fn recover_interrupted(&self) -> Result<Vec<String>, AgentError> {
        let mut ids = Vec::new();
        for mut entry in self.entries()? {
            if INTERRUPTED.contains(&entry.state.as_str()) {
                self.set_state(&mut entry, "failed", Some("process restarted"), None)?;
                ids.push(entry.id);
            }
        }
        Ok(ids)
    }

    fn append_event(&self, entry: &TaskEntry, event: &TaskEvent) -> Result<(), AgentError> {
        let mut log = JsonlAppender::open(&self.events_file(&entry.id, entry.created))?;
        log.append_durable(event)?;
        Ok(())
    }

    /// Index lines as JSON objects, so keys this module does not know survive a rewrite.
    fn raw_index(&self) -> Result<Vec<serde_json::Value>, AgentError> {
        Ok(read_jsonl::<serde_json::Value>(&self.index_file())?
            .records
            .into_iter()
            .filter(|v| v.is_object())
            .collect())
    }

    fn write_index(&self, lines: &[serde_json::Value]) -> Result<(), AgentError> {
        std::fs::create_dir_all(&self.dir).map_err(AgentError::io(&self.dir))?;
        let mut text = String::new();
        for l in lines {
            text.push_str(&l.to_string());
            text.push('\n');
        }
        write_atomic(&self.index_file(), text.as_bytes())?;
        Ok(())
    }
}

/// A new task id: time-ordered and unique within a process (and, with the pid and clock
/// nanoseconds mixed in, across restarts).
pub fn new_task_id() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let now = Utc::now();
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let mix = (now.timestamp_subsec_nanos()
        ^ std::process::id().rotate_left(16)
        ^ seq.wrapping_mul(0x9e37_79b9))
        & 0xff_ffff;
    format!("{}-{mix:06x}", now.format("%Y%m%d-%H%M%S"))
}

/// A task title: the first 80 characters of the request, on one line.
pub fn title_of(text: &str) -> String {
    let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    one_line.chars().take(80).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn lifecycle_is_recorded_in_index_and_events() {
        let dir = tempfile::tempdir().unwrap();
        let log = TaskLog::new(dir.path());
        let mut t = log.create("t1", "do it").unwrap();
        log.set_state(&mut t, "running", None, None).unwrap();
        log.set_state(&mut t, "done", None, Some(0.5)).unwrap();
        let entries = log.entries().unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].state, "done");
        let states: Vec<String> = log
            .events(&t)
            .unwrap()
            .into_iter()
            .map(|e| e.state)
            .collect();
        assert_eq!(states, vec!["created", "running", "done"]);
    }

    #[test]
    fn interrupted_tasks_fail_on_recovery_and_unknown_keys_survive() {
        let dir = tempfile::tempdir().unwrap();
        let log = TaskLog::new(dir.path());
        let mut a = log.create("a", "A").unwrap();
        log.set_state(&mut a, "running", None, None).unwrap();
        let mut b = log.create("b", "B").unwrap();
        log.set_state(&mut b, "done", None, None).unwrap();
        let text = std::fs::read_to_string(log.index_file()).unwrap();
        std::fs::write(
            log.index_file(),
            text.replace("\"id\":\"a\"", "\"id\":\"a\",\"priority\":3"),
        )
        .unwrap();
        assert_eq!(log.recover_interrupted().unwrap(), vec!["a".to_string()]);
        let entries = log.entries().unwrap();
        assert_eq!(
            (entries[0].state.as_str(), entries[0].reason.as_deref()),
            ("failed", Some("process restarted"))
        );
        assert_eq!(entries[1].state, "done");
        assert!(std::fs::read_to_string(log.index_file())
            .unwrap()
            .contains("\"priority\":3"));
    }

    #[test]
    fn ids_differ_and_titles_are_short() {
        assert_ne!(new_task_id(), new_task_id());
        assert_eq!(title_of("a\nb   c"), "a b c");
        assert_eq!(title_of(&"x".repeat(200)).len(), 80);
    }
}
