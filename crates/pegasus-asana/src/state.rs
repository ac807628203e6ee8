//! What the sync of one board remembers across restarts (DESIGN.md §17), in
//! `<home>/asana/<project>.json`, written atomically after every step that must not be
//! repeated: the events' sync token and, for each Asana task it took, the Pegasus task made
//! from it and what was last written back. pegasusd's own file: a worker cannot reach it.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The folder of the boards' files under the home.
pub const DIR: &str = "asana";

/// One board's memory.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BoardState {
    /// The Asana project these records are of; another gid in PROJECT.md starts over.
    pub project: String,
    /// The sync token of the next `GET /events`; `None`: a full re-sync comes first.
    pub sync: Option<String>,
    /// Asana task gid → what became of it.
    pub tasks: BTreeMap<String, TakenCard>,
    /// Tasks in Ready Queue waiting for a dependency to become a Pegasus task (or complete):
    /// looked at again every poll.
    pub waiting: BTreeSet<String>,
}

/// An Asana task the sync took up.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TakenCard {
    /// The Pegasus task made from it; `None` while it is being made (written before the
    /// request, so a crash in between is found again, never made twice: see `sync::adopt`).
    pub task: Option<String>,
    /// When the making began, to find the task a crash left unlinked.
    pub since: Option<chrono::DateTime<chrono::Utc>>,
    /// The last look written to the board (section, status and agent), as `section/status/agent`.
    pub shown: Option<String>,
    /// The cost last written to the board.
    pub cost: Option<f64>,
    /// The question last posted as a comment, while it waits for an answer.
    pub asked: Option<String>,
    /// The story gid of that comment: the user's next comment after it is the answer.
    pub asked_story: Option<String>,
    /// The Pegasus task's summary was posted as a comment.
    pub summarized: bool,
    /// The failure last posted as a comment.
    pub failure: Option<String>,
    /// The merge was asked for (Merge Approval allowed it).
    pub merge_asked: bool,
    /// The Pegasus task ended (`done` or `cancelled`) and everything about it was written.
    pub finished: bool,
}

/// The file of project `name`'s board.
pub fn path(home: &Path, name: &str) -> PathBuf {
    home.join(DIR).join(format!("{name}.json"))
}

/// Reads the board's file; a missing one is a fresh start. A damaged one is an error (the
/// sync of that board stops with one line, rather than making every task again).
pub fn load(file: &Path) -> Result<BoardState, String> {
    match pegasus_store::read_text_limited(file, 64 << 20) {
        Ok(text) => serde_json::from_str(&text).map_err(|e| {
            format!(
                "{} does not load ({e}); fix or remove it (removing it makes a task of every Asana task in Ready Queue again)",
                file.display()
            )
        }),
        Err(e) if !file.exists() => {
            let _ = e;
            Ok(BoardState::default())
        }
        Err(e) => Err(format!("{}: {e}", file.display())),
    }
}

/// Writes the board's file atomically.
pub fn save(file: &Path, state: &BoardState) -> Result<(), String> {
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let bytes = serde_json::to_vec_pretty(state).map_err(|e| e.to_string())?;
    pegasus_store::write_atomic(file, &bytes).map_err(|e| format!("{}: {e}", file.display()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn a_board_state_survives_a_save_and_a_damaged_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = path(dir.path(), "web");
        assert_eq!(load(&file).unwrap(), BoardState::default());
        let mut s = BoardState {
            project: "12".into(),
            sync: Some("tok".into()),
            ..BoardState::default()
        };
        s.tasks.insert(
            "99".into(),
            TakenCard {
                task: Some("t-1".into()),
                cost: Some(0.5),
                ..TakenCard::default()
            },
        );
        save(&file, &s).unwrap();
        assert_eq!(load(&file).unwrap(), s);
        std::fs::write(&file, "{not json").unwrap();
        assert!(load(&file).unwrap_err().contains("does not load"));
    }
}
