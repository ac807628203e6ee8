//! A task split into subtasks by a planner role (`plan: ROLE` in PROJECT.md, DESIGN.md §10, seed
//! 003's Planner): the steps as the planner wrote them, and the rules a split must follow
//! before anything is created. [`crate::TaskStore::split`] creates them.
//!
//! A step may depend only on steps before it (by their number, counting from 1). That makes
//! a cycle impossible to write, so a plan never needs a graph search to be refused, and the
//! steps can be created in order, each naming ones that already exist.

use serde::Deserialize;

/// Most steps one split may have: a planner that wants more is asked for a coarser plan
/// rather than flooding the board.
pub const MAX_STEPS: usize = 8;

/// One step of a plan.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// A one-line title; the goal's first line when absent.
    #[serde(default)]
    pub title: Option<String>,
    /// What this step must achieve (its spec's goal).
    pub goal: String,
    /// How to tell it is done.
    #[serde(default)]
    pub acceptance: Vec<String>,
    /// The numbers (from 1) of earlier steps that must be done first.
    #[serde(default)]
    pub depends_on: Vec<usize>,
}

/// Checks a plan: 1 to [`MAX_STEPS`] steps, each with a goal, each depending only on steps
/// before it. `Err` is one line saying what is wrong.
pub fn check_steps(steps: &[Step]) -> Result<(), String> {
    if steps.is_empty() {
        return Err("the plan has no steps".into());
    }
    if steps.len() > MAX_STEPS {
        return Err(format!(
            "the plan has {} steps; at most {MAX_STEPS} are allowed",
            steps.len()
        ));
    }
    for (i, step) in steps.iter().enumerate() {
        let n = i + 1;
        if step.goal.trim().is_empty() {
            return Err(format!("step {n} has no goal"));
        }
        if let Some(d) = step.depends_on.iter().find(|d| **d == 0 || **d >= n) {
            return Err(format!(
                "step {n} depends on step {d}: a step may depend only on steps before it, numbered from 1"
            ));
        }
    }
    Ok(())
}

/// The title of a step: its own, or its goal's first line, cut at 80 characters.
pub fn step_title(step: &Step) -> String {
    let from = step
        .title
        .as_deref()
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| step.goal.trim().lines().next().unwrap_or_default());
    match from.char_indices().nth(80) {
        Some((i, _)) => format!("{}…", &from[..i]),
        None => from.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn step(goal: &str, deps: &[usize]) -> Step {
        Step {
            goal: goal.into(),
            depends_on: deps.to_vec(),
            ..Step::default()
        }
    }

    #[test]
    fn a_step_may_depend_only_on_steps_before_it() {
        assert_eq!(
            check_steps(&[step("a", &[]), step("b", &[1]), step("c", &[1, 2])]),
            Ok(())
        );
        for (deps, bad) in [
            (&[2usize][..], 2),
            (&[3][..], 3),
            (&[0][..], 0),
            (&[1, 5][..], 5),
        ] {
            let err = check_steps(&[step("a", &[]), step("b", deps)]).unwrap_err();
            assert_eq!(
                err,
                format!("step 2 depends on step {bad}: a step may depend only on steps before it, numbered from 1")
            );
        }
    }

    #[test]
    fn a_plan_needs_steps_with_goals_and_not_too_many() {
        assert_eq!(check_steps(&[]).unwrap_err(), "the plan has no steps");
        assert_eq!(
            check_steps(&[step("a", &[]), step("  ", &[])]).unwrap_err(),
            "step 2 has no goal"
        );
        let many = vec![step("a", &[]); MAX_STEPS + 1];
        assert!(check_steps(&many).unwrap_err().contains("at most 8"));
        assert_eq!(check_steps(&many[..MAX_STEPS]), Ok(()));
    }

    #[test]
    fn a_title_is_given_or_the_goals_first_line() {
        assert_eq!(
            step_title(&step("Add the parser\nwith tests", &[])),
            "Add the parser"
        );
        let titled = Step {
            title: Some(" Parser ".into()),
            ..step("x", &[])
        };
        assert_eq!(step_title(&titled), "Parser");
        assert_eq!(step_title(&step(&"é".repeat(90), &[])).chars().count(), 81);
    }
}
