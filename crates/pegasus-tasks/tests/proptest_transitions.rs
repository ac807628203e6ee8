//! Random sequences of transitions through the store: it never reaches a state the table
//! cannot reach, it accepts exactly what the table (and gates) accept, and the folded state is
//! always the last successful move.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashSet;

use common::*;
use pegasus_tasks::{check_transition, TaskError, TaskState};
use proptest::prelude::*;

/// States reachable from draft by the table alone.
fn reachable() -> HashSet<TaskState> {
    let mut seen = HashSet::from([TaskState::Draft]);
    let mut todo = vec![TaskState::Draft];
    while let Some(s) = todo.pop() {
        for to in TaskState::ALL {
            if check_transition("x", s, to).is_ok() && seen.insert(to) {
                todo.push(to);
            }
        }
    }
    seen
}

fn state() -> impl Strategy<Value = TaskState> {
    (0..TaskState::ALL.len()).prop_map(|i| TaskState::ALL[i])
}

/// One attempted move: the target, and whether the caller passes a wrong `expected`.
fn step() -> impl Strategy<Value = (TaskState, bool)> {
    (state(), prop::bool::weighted(0.15))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn random_transitions_follow_the_table(freeze_first in any::<bool>(), steps in prop::collection::vec(step(), 1..24)) {
        let reachable = reachable();
        let (_dir, store) = project();
        let t = store.create(new_task("prop"), "p").unwrap();
        let mut model = TaskState::Draft;
        let mut frozen = false;
        if freeze_first {
            model = store.freeze(&t.id, spec("g"), "p").unwrap().state;
            frozen = true;
        }
        for (to, lie) in steps {
            let expected = if lie {
                TaskState::ALL.into_iter().find(|s| *s != model).unwrap()
            } else {
                model
            };
            let got = store.transition(&t.id, expected, to, "p", "r");
            match got {
                Ok(task) => {
                    prop_assert!(!lie);
                    prop_assert!(check_transition(&t.id, model, to).is_ok());
                    prop_assert_eq!(task.state, to);
                    model = to;
                }
                Err(TaskError::Conflict { actual, .. }) => {
                    prop_assert!(lie);
                    prop_assert_eq!(actual, model);
                }
                Err(TaskError::InvalidTransition { from, to: t2, .. }) => {
                    prop_assert!(!lie);
                    prop_assert_eq!((from, t2), (model, to));
                    prop_assert!(check_transition(&t.id, model, to).is_err());
                }
                Err(TaskError::NotFrozen(_)) => {
                    prop_assert!(!frozen);
                    prop_assert!(matches!(to, TaskState::Planned | TaskState::Ready));
                }
                Err(e) => prop_assert!(false, "unexpected error: {}", e),
            }
            prop_assert!(reachable.contains(&model));
            prop_assert_eq!(store.get(&t.id).unwrap().state, model);
        }
        // The log replays to the same state, and every recorded move was legal.
        let mut folded = TaskState::Draft;
        for e in store.history(&t.id).unwrap() {
            if let pegasus_tasks::TaskEvent::Transition { from, to, .. } = e {
                prop_assert_eq!(from, folded);
                prop_assert!(check_transition("x", from, to).is_ok());
                folded = to;
            }
        }
        prop_assert_eq!(folded, model);
        prop_assert_eq!(store.list().unwrap()[0].state, model);
    }
}
