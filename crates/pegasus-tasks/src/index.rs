//! `tasks/index.jsonl`: one line per task, a cache of the fold of every event file.
//!
//! A line is the whole [`Task`] (so it reads as `{id, title, state, created, ...}` for anyone
//! scanning it) plus `events_bytes`, the length of the task's event file when the line was
//! written. Events are appended before the index is rewritten, so a crash in between leaves a
//! line whose `events_bytes` no longer matches the file: one `stat` per task is enough for
//! [`crate::TaskStore::list`] to notice and fold that task again. Nothing lives only here: the
//! whole file can be deleted and rebuilt from the events.

use std::path::Path;

use pegasus_store::{read_jsonl, replace_cache};
use serde::{Deserialize, Serialize};

use crate::error::TaskError;
use crate::task::Task;

/// One line of the index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct IndexLine {
    #[serde(flatten)]
    pub task: Task,
    /// Size of the event file this line was folded from.
    #[serde(default)]
    pub events_bytes: u64,
}

/// Every line that parses; a line that does not is simply refolded by the caller.
pub(crate) fn read_index(path: &Path) -> Result<Vec<IndexLine>, TaskError> {
    let read = read_jsonl::<IndexLine>(path)?;
    if read.skipped > 0 || read.torn_tail {
        tracing::warn!(
            index = %path.display(), skipped = read.skipped, torn = read.torn_tail,
            "task index has unreadable lines; they will be rebuilt from the event files"
        );
    }
    let mut lines = read.records;
    for l in &mut lines {
        l.task.upgrade_legacy();
    }
    Ok(lines)
}

/// Replaces the whole index, oldest task first. Atomic for readers but not flushed to disk:
/// the event files are the durable truth and a lost or stale index is rebuilt from them, so
/// the index costs no fdatasync per transition.
pub(crate) fn write_index(path: &Path, lines: &[IndexLine]) -> Result<(), TaskError> {
    replace_cache(path, &index_text(lines)?)?;
    Ok(())
}

/// [`write_index`], unless the file already holds exactly these lines (a worker's start
/// refolds every task and usually finds nothing changed: no new file, no rename then).
pub(crate) fn write_index_if_changed(path: &Path, lines: &[IndexLine]) -> Result<(), TaskError> {
    let text = index_text(lines)?;
    // One byte over: a longer file reads as different. A FIFO or device there is refused by
    // `read_capped` without blocking, and then simply replaced.
    let old = pegasus_store::read_capped(path, text.len() as u64 + 1);
    if old.is_ok_and(|old| old.bytes == text) {
        return Ok(());
    }
    replace_cache(path, &text)?;
    Ok(())
}

fn index_text(lines: &[IndexLine]) -> Result<Vec<u8>, TaskError> {
    let mut text = Vec::new();
    for l in lines {
        serde_json::to_writer(&mut text, l).map_err(|e| {
            TaskError::Invalid(format!(
                "task {}: cannot serialize its index line: {e}",
                l.task.id
            ))
        })?;
        text.push(b'\n');
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn an_old_index_line_with_the_merge_in_its_stop_reason_reads_as_a_merge_state() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.jsonl");
        std::fs::write(
            &path,
            concat!(
                r#"{"id":"t-1","project":"p","title":"a","type":"code","state":"verified","stop_reason":"merge pending","created":"2026-01-02T10:00:00Z","updated":"2026-01-02T10:00:00Z","events_bytes":10}"#,
                "\n",
                r#"{"id":"t-2","project":"p","title":"b","type":"chat","state":"failed","stop_reason":"budget","created":"2026-01-02T10:00:00Z","updated":"2026-01-02T10:00:00Z","events_bytes":10}"#,
                "\n",
            ),
        )
        .unwrap();
        let lines = read_index(&path).unwrap();
        let got: Vec<_> = lines
            .iter()
            .map(|l| (l.task.merge, l.task.stop_reason.as_deref()))
            .collect();
        assert_eq!(
            got,
            vec![
                (Some(crate::MergeState::Pending), None),
                (None, Some("budget"))
            ]
        );
    }
}
