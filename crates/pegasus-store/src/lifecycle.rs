//! The project lifecycle state machine (DESIGN.md §4), as one function.
//!
//! `active ⇄ suspended → completed → archived`, plus `active → completed`. What a verb does to
//! a worker process is the supervisor's business; this only decides whether it is allowed.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{Result, StoreError};
use crate::project::ProjectStatus;

/// A user-facing lifecycle command on a project.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verb {
    /// Stop the worker gracefully; the session stays for a later resume.
    Suspend,
    /// Start a suspended project again from its persisted session.
    Resume,
    /// Mark the goal reached; the worker stops for good.
    Complete,
    /// Put a completed project away (status only; nothing is deleted).
    Archive,
}

impl Verb {
    /// Every verb, for exhaustive tests and help texts.
    pub const ALL: [Verb; 4] = [Verb::Suspend, Verb::Resume, Verb::Complete, Verb::Archive];

    /// The lowercase name used in commands, tools and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Suspend => "suspend",
            Verb::Resume => "resume",
            Verb::Complete => "complete",
            Verb::Archive => "archive",
        }
    }

    /// Parses the lowercase name; `None` for anything else so callers can list the valid ones.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Decides the status a project moves to when `verb` is applied in status `from`, or refuses
/// with `cannot <verb> project <name>: it is <status>`. The single source of truth for DESIGN.md §4.
pub fn transition(name: &str, from: ProjectStatus, verb: Verb) -> Result<ProjectStatus> {
    use ProjectStatus::*;
    match (from, verb) {
        (Active, Verb::Suspend) => Ok(Suspended),
        (Suspended, Verb::Resume) => Ok(Active),
        (Active | Suspended, Verb::Complete) => Ok(Completed),
        (Completed, Verb::Archive) => Ok(Archived),
        _ => Err(StoreError::Transition {
            verb,
            name: name.to_string(),
            status: from,
        }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use ProjectStatus::*;

    /// The whole table: every status × every verb, `None` meaning refused.
    fn expected(from: ProjectStatus, verb: Verb) -> Option<ProjectStatus> {
        match (from, verb) {
            (Active, Verb::Suspend) => Some(Suspended),
            (Active, Verb::Resume) => None,
            (Active, Verb::Complete) => Some(Completed),
            (Active, Verb::Archive) => None,
            (Suspended, Verb::Suspend) => None,
            (Suspended, Verb::Resume) => Some(Active),
            (Suspended, Verb::Complete) => Some(Completed),
            (Suspended, Verb::Archive) => None,
            (Completed, Verb::Suspend) => None,
            (Completed, Verb::Resume) => None,
            (Completed, Verb::Complete) => None,
            (Completed, Verb::Archive) => Some(Archived),
            (Archived, _) => None,
        }
    }

    #[test]
    fn every_status_and_verb_follows_the_table() {
        let mut allowed = 0;
        for from in ProjectStatus::ALL {
            for verb in Verb::ALL {
                match (transition("foo", from, verb), expected(from, verb)) {
                    (Ok(to), Some(want)) => {
                        assert_eq!(to, want, "{from} {verb}");
                        allowed += 1;
                    }
                    (Err(e), None) => assert_eq!(
                        e.to_string(),
                        format!("cannot {verb} project foo: it is {from}")
                    ),
                    (got, want) => panic!("{from} {verb}: got {got:?}, want {want:?}"),
                }
            }
        }
        assert_eq!(allowed, 5);
    }

    #[test]
    fn refusal_text_is_exact() {
        let e = transition("foo", Active, Verb::Resume).unwrap_err();
        assert_eq!(e.to_string(), "cannot resume project foo: it is active");
    }

    #[test]
    fn verbs_round_trip_through_their_names() {
        for v in Verb::ALL {
            assert_eq!(Verb::parse(v.as_str()), Some(v));
            assert_eq!(v.to_string(), v.as_str());
            assert_eq!(serde_json::to_string(&v).unwrap(), format!("\"{v}\""));
        }
        assert_eq!(Verb::parse("Suspend"), None);
    }
}
