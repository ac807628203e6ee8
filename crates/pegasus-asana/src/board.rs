//! The board's vocabulary (seed 003's schema, DESIGN.md §17): the canonical sections in order,
//! the custom fields with their options, and where a Pegasus task in each state is shown.
//! One function, [`look`], decides it; its table test covers every state.

use pegasus_tasks::TaskState;

/// A canonical section, in the board's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    /// A passive holding area.
    Drafts,
    /// Waiting for the user.
    ClarificationNeeded,
    /// Being planned.
    Planning,
    /// The trigger: a task moved here becomes a Pegasus task.
    ReadyQueue,
    /// Running.
    InProgress,
    /// Being verified and reviewed.
    Review,
    /// Verified, being merged (or waiting for Merge Approval).
    Merging,
    /// Finished.
    Done,
}

impl Section {
    /// Every section, in the order the sync puts them.
    pub const CANONICAL: [Section; 8] = [
        Section::Drafts,
        Section::ClarificationNeeded,
        Section::Planning,
        Section::ReadyQueue,
        Section::InProgress,
        Section::Review,
        Section::Merging,
        Section::Done,
    ];

    /// Its name on the board.
    pub fn name(self) -> &'static str {
        match self {
            Section::Drafts => "Drafts",
            Section::ClarificationNeeded => "Clarification Needed",
            Section::Planning => "Planning",
            Section::ReadyQueue => "Ready Queue",
            Section::InProgress => "In Progress",
            Section::Review => "Review",
            Section::Merging => "Merging",
            Section::Done => "Done",
        }
    }

    /// The section of a name, if it is canonical.
    pub fn of(name: &str) -> Option<Section> {
        Section::CANONICAL.into_iter().find(|s| s.name() == name)
    }
}

/// What kind of custom field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldKind {
    /// A single select with these options (the first is the default).
    Enum(&'static [&'static str]),
    /// Text.
    Text,
    /// A number with this many decimals.
    Number(u32),
}

/// A custom field of seed 003 §3.2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldSpec {
    /// Its name on the board.
    pub name: &'static str,
    /// Its kind.
    pub kind: FieldKind,
}

/// `Agent`.
pub const AGENT: &str = "Agent";
/// `Swarm Status`.
pub const SWARM_STATUS: &str = "Swarm Status";
/// `Session ID`.
pub const SESSION_ID: &str = "Session ID";
/// `Cost`.
pub const COST: &str = "Cost";
/// `Max Cost`.
pub const MAX_COST: &str = "Max Cost";
/// `Merge Approval`.
pub const MERGE_APPROVAL: &str = "Merge Approval";
/// `Worktree Path`.
pub const WORKTREE_PATH: &str = "Worktree Path";

/// The custom fields the sync creates when missing, in this order.
pub const FIELDS: [FieldSpec; 7] = [
    FieldSpec {
        name: AGENT,
        kind: FieldKind::Enum(&[
            "Triage",
            "Planner",
            "Worker",
            "Reviewer",
            "Merger",
            "Refactor",
            "Consolidator",
            "Ideation",
            "Documentation",
        ]),
    },
    FieldSpec {
        name: SWARM_STATUS,
        kind: FieldKind::Enum(&["Idle", "Running", "Blocked", "Complete"]),
    },
    FieldSpec {
        name: SESSION_ID,
        kind: FieldKind::Text,
    },
    FieldSpec {
        name: COST,
        kind: FieldKind::Number(2),
    },
    FieldSpec {
        name: MAX_COST,
        kind: FieldKind::Number(2),
    },
    FieldSpec {
        name: MERGE_APPROVAL,
        kind: FieldKind::Enum(&["Auto-Approve", "Manual Check", "Approved"]),
    },
    FieldSpec {
        name: WORKTREE_PATH,
        kind: FieldKind::Text,
    },
];

/// A task's budget when its Max Cost is empty (seed 003).
pub const DEFAULT_MAX_COST: f64 = 2.0;

/// How a Pegasus task is shown on the board.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Look {
    /// Its section.
    pub section: Section,
    /// `Swarm Status`.
    pub status: &'static str,
    /// `Agent`.
    pub agent: &'static str,
}

/// Where a task in `state` is shown; `question`: it is blocked on a question for the user;
/// `held`: a verified code task whose merge waits (Merge Approval `Manual Check`).
pub fn look(state: TaskState, question: bool, held: bool) -> Look {
    let l = |section, status, agent| Look {
        section,
        status,
        agent,
    };
    match state {
        TaskState::Draft => l(Section::Drafts, "Idle", "Triage"),
        TaskState::Planned => l(Section::Planning, "Idle", "Planner"),
        TaskState::Ready => l(Section::ReadyQueue, "Idle", "Worker"),
        TaskState::Running => l(Section::InProgress, "Running", "Worker"),
        TaskState::Verifying => l(Section::Review, "Running", "Reviewer"),
        TaskState::Verified if held => l(Section::Merging, "Blocked", "Merger"),
        TaskState::Verified => l(Section::Merging, "Running", "Merger"),
        TaskState::Blocked if question => l(Section::ClarificationNeeded, "Blocked", "Worker"),
        TaskState::Blocked => l(Section::InProgress, "Blocked", "Worker"),
        TaskState::Failed => l(Section::InProgress, "Blocked", "Worker"),
        TaskState::Done => l(Section::Done, "Complete", "Worker"),
        TaskState::Cancelled => l(Section::Drafts, "Idle", "Triage"),
    }
}

/// The moves that put `current` (section gids in board order) into `want` order, the rest
/// after them in their order: each `(section, after)` is a `sections/insert` with
/// `after_section`, or with `before_section` of the first section when `after` is `None`.
pub fn moves(current: &[String], want: &[String]) -> Vec<(String, Option<String>)> {
    let mut order: Vec<String> = current.to_vec();
    let mut out = Vec::new();
    for (i, s) in want.iter().enumerate() {
        let Some(at) = order.iter().position(|x| x == s) else {
            continue;
        };
        if at == i {
            continue;
        }
        order.remove(at);
        order.insert(i, s.clone());
        let after = i.checked_sub(1).map(|j| order[j].clone());
        out.push((s.clone(), after));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_has_its_section_status_and_agent() {
        use Section::*;
        let table = [
            (TaskState::Draft, false, false, Drafts, "Idle", "Triage"),
            (
                TaskState::Planned,
                false,
                false,
                Planning,
                "Idle",
                "Planner",
            ),
            (TaskState::Ready, false, false, ReadyQueue, "Idle", "Worker"),
            (
                TaskState::Running,
                false,
                false,
                InProgress,
                "Running",
                "Worker",
            ),
            (
                TaskState::Verifying,
                false,
                false,
                Review,
                "Running",
                "Reviewer",
            ),
            (
                TaskState::Verified,
                false,
                false,
                Merging,
                "Running",
                "Merger",
            ),
            (
                TaskState::Verified,
                false,
                true,
                Merging,
                "Blocked",
                "Merger",
            ),
            (
                TaskState::Blocked,
                true,
                false,
                ClarificationNeeded,
                "Blocked",
                "Worker",
            ),
            (
                TaskState::Blocked,
                false,
                false,
                InProgress,
                "Blocked",
                "Worker",
            ),
            (
                TaskState::Failed,
                false,
                false,
                InProgress,
                "Blocked",
                "Worker",
            ),
            (TaskState::Done, false, false, Done, "Complete", "Worker"),
            (TaskState::Cancelled, false, false, Drafts, "Idle", "Triage"),
        ];
        for (state, q, held, section, status, agent) in table {
            assert_eq!(
                look(state, q, held),
                Look {
                    section,
                    status,
                    agent
                },
                "{state:?}"
            );
            // Every status and agent is an option of its field.
            for (field, value) in [(SWARM_STATUS, status), (AGENT, agent)] {
                let spec = FIELDS.iter().find(|f| f.name == field).map(|f| f.kind);
                assert!(matches!(spec, Some(FieldKind::Enum(o)) if o.contains(&value)));
            }
        }
        for s in TaskState::ALL {
            let _ = look(s, false, false);
        }
    }

    #[test]
    fn sections_are_put_in_order_with_the_fewest_moves_unknown_ones_last() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert!(moves(&v(&["a", "b", "x"]), &v(&["a", "b"])).is_empty());
        assert_eq!(
            moves(&v(&["x", "b", "a"]), &v(&["a", "b"])),
            vec![
                ("a".to_string(), None),
                ("b".to_string(), Some("a".to_string()))
            ]
        );
        // Apply the moves and check the order they make.
        let cur = v(&["u", "d", "c", "a", "b"]);
        let want = v(&["a", "b", "c", "d"]);
        let mut order = cur.clone();
        for (s, after) in moves(&cur, &want) {
            order.retain(|x| *x != s);
            let at = after.map_or(0, |a| order.iter().position(|x| *x == a).unwrap_or(0) + 1);
            order.insert(at, s);
        }
        assert_eq!(order, v(&["a", "b", "c", "d", "u"]));
    }
}
