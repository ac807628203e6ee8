//! The states of a project that every listing shows: its lifecycle status (PROJECT.md) and the
//! state of its worker process. Both are enums from the file or the slot to the screen: JSON
//! (files, `--json`, the dashboard) spells them as the words below, frames carry them as
//! enums, and no consumer compares them as text.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Where a project is in its lifecycle (DESIGN.md §4); `status` in PROJECT.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProjectStatus {
    /// A worker runs (or should run) for it.
    Active,
    /// Stopped on purpose; its session waits for a resume.
    Suspended,
    /// Its goal is reached; no worker.
    Completed,
    /// Put away; kept on disk, hidden from everyday lists.
    Archived,
}

impl ProjectStatus {
    /// Every status, for exhaustive tests and help texts.
    pub const ALL: [ProjectStatus; 4] = [
        ProjectStatus::Active,
        ProjectStatus::Suspended,
        ProjectStatus::Completed,
        ProjectStatus::Archived,
    ];

    /// The lowercase name written in PROJECT.md and shown to users.
    pub fn as_str(self) -> &'static str {
        match self {
            ProjectStatus::Active => "active",
            ProjectStatus::Suspended => "suspended",
            ProjectStatus::Completed => "completed",
            ProjectStatus::Archived => "archived",
        }
    }

    /// Parses the lowercase name; `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|st| st.as_str() == s)
    }
}

impl fmt::Display for ProjectStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a listing says for a project whose PROJECT.md does not load.
pub const INVALID: &str = "invalid";

/// `ProjectInfo::status`: a lifecycle status, or `None` (a PROJECT.md that does not load),
/// written as [`INVALID`], so the field reads as one word in JSON as it always has.
pub(crate) mod status_or_invalid {
    use super::{ProjectStatus, INVALID};
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(s: &Option<ProjectStatus>, ser: S) -> Result<S::Ok, S::Error> {
        ser.serialize_str(s.map_or(INVALID, ProjectStatus::as_str))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        de: D,
    ) -> Result<Option<ProjectStatus>, D::Error> {
        let s = String::deserialize(de)?;
        match ProjectStatus::parse(&s) {
            Some(st) => Ok(Some(st)),
            None if s == INVALID => Ok(None),
            None => Err(D::Error::custom(format!("unknown project status `{s}`"))),
        }
    }
}

/// The state of a project's worker process, as its slot in pegasusd sees it. JSON spells it
/// in kebab case (`crash-looping`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkerState {
    /// Spawned (or about to be), not ready yet.
    Starting,
    /// Loaded its project and takes messages.
    Ready,
    /// Asked to stop; finishing what it does.
    Stopping,
    /// Crashed; restarts after a delay.
    Backoff,
    /// Crashed too often: not restarted until `resume` (or a restart of pegasusd).
    CrashLooping,
    /// No worker (stopped, or never started: the project is not active).
    Stopped,
}

impl WorkerState {
    /// Every state, for exhaustive tests.
    pub const ALL: [WorkerState; 6] = [
        WorkerState::Starting,
        WorkerState::Ready,
        WorkerState::Stopping,
        WorkerState::Backoff,
        WorkerState::CrashLooping,
        WorkerState::Stopped,
    ];

    /// The word listings and JSON use.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerState::Starting => "starting",
            WorkerState::Ready => "ready",
            WorkerState::Stopping => "stopping",
            WorkerState::Backoff => "backoff",
            WorkerState::CrashLooping => "crash-looping",
            WorkerState::Stopped => "stopped",
        }
    }
}

impl fmt::Display for WorkerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::{decode, encode};

    #[test]
    fn every_project_status_is_its_word_in_json_and_round_trips_by_name_and_codec() {
        for s in ProjectStatus::ALL {
            let json = serde_json::to_string(&s).unwrap();
            assert_eq!(json, format!("\"{s}\""));
            assert_eq!(serde_json::from_str::<ProjectStatus>(&json).unwrap(), s);
            assert_eq!(ProjectStatus::parse(s.as_str()), Some(s));
            assert_eq!(decode::<ProjectStatus>(&encode(&s).unwrap()).unwrap(), s);
        }
        assert_eq!(ProjectStatus::parse(INVALID), None);
        assert_eq!(ProjectStatus::parse("Active"), None);
    }

    #[test]
    fn every_worker_state_is_its_old_word_in_json_and_round_trips_through_the_codec() {
        let words: Vec<String> = WorkerState::ALL
            .iter()
            .map(|s| {
                serde_json::to_value(s)
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(
            words,
            [
                "starting",
                "ready",
                "stopping",
                "backoff",
                "crash-looping",
                "stopped"
            ]
        );
        for s in WorkerState::ALL {
            assert_eq!(s.to_string(), serde_json::to_value(s).unwrap());
            assert_eq!(decode::<WorkerState>(&encode(&s).unwrap()).unwrap(), s);
            let back: WorkerState = serde_json::from_value(serde_json::json!(s.as_str())).unwrap();
            assert_eq!(back, s);
        }
    }
}
