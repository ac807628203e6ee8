//! `<project>/crashes.jsonl`: one [`CrashRecord`] per worker that ended without being asked
//! (pegasusd writes it; the dashboard's crash page reads it).

use std::path::Path;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::jsonl::{read_jsonl, JsonlAppender};

/// The crash log inside a project folder.
pub const CRASHES_FILE: &str = "crashes.jsonl";

/// One worker crash.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CrashRecord {
    /// When pegasusd saw the worker end.
    pub ts: DateTime<Utc>,
    /// The project whose worker it was.
    pub project: String,
    /// How it ended (`exit code 3`, `signal 9 (SIGKILL)`, `no hello within 10 s`, ...).
    pub reason: String,
}

/// Appends `record` to the crash log of the project in `project_dir`, durably.
pub fn record_crash(project_dir: &Path, record: &CrashRecord) -> Result<()> {
    JsonlAppender::open(&project_dir.join(CRASHES_FILE))?.append_durable(record)
}

/// The crashes recorded in `project_dir`, oldest first; none when there is no log. Lines that
/// do not read as a crash (a torn write, a hand edit) are left out.
pub fn read_crashes(project_dir: &Path) -> Result<Vec<CrashRecord>> {
    let path = project_dir.join(CRASHES_FILE);
    if !path.exists() {
        return Ok(Vec::new());
    }
    Ok(read_jsonl::<CrashRecord>(&path)?.records)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn crashes_are_appended_and_read_back_and_old_lines_still_read() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_crashes(dir.path()).unwrap(), []);
        // A line as versions before this type wrote it (keys in another order).
        std::fs::write(
            dir.path().join(CRASHES_FILE),
            "{\"project\":\"p\",\"reason\":\"exit code 3\",\"ts\":\"2026-01-02T10:00:00.123456789Z\"}\nnot json\n",
        )
        .unwrap();
        let new = CrashRecord {
            ts: Utc::now(),
            project: "p".into(),
            reason: "signal 9 (SIGKILL)".into(),
        };
        record_crash(dir.path(), &new).unwrap();
        let got = read_crashes(dir.path()).unwrap();
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0].reason, "exit code 3");
        assert_eq!(
            got[0]
                .ts
                .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
            "2026-01-02T10:00:00.123456789Z"
        );
        assert_eq!(got[1], new);
        // Its `ts` is written as the same RFC 3339 text the dashboard shows.
        let line = serde_json::to_value(&new).unwrap();
        assert_eq!(
            line["ts"],
            new.ts.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
        );
    }
}
