//! The review gate of code tasks (DESIGN.md §10, seed 003's Reviewer): with `review: ROLE` in
//! PROJECT.md, that role reads a task's change once the checks passed and before the merge.
//! Its first line decides, read by the run reviews' own parser
//! ([`pegasus_runs::parse_verdict`]): exactly `APPROVED` lets the merge go on; `REJECTED:
//! reason`, and anything else, sends the task back to its agent with the review, within
//! `max_attempts`. A reviewer that gives no answer at all (its model failed, its budget ran
//! out) fails the task: nobody vouched for the change, and sending it back would only spend
//! the agent's attempts on the reviewer's trouble. So does a reviewer that changed the
//! worktree it read (DESIGN.md §15): what it approved would not be what is merged.
//!
//! The reviewer is the role's agent ([`Agent::consult`]): the built-in loop, or the harness its
//! assignment names, whose final answer is read the same way.

use std::path::PathBuf;

use crate::project_ctx::ProjectCtx;
use pegasus_agent::{Agent, StopKind};
use pegasus_code::{worktree, Repo};
use pegasus_runs::{parse_verdict, ReviewVerdict};
use pegasus_tasks::Task;

/// Most of the diffs put in the reviewer's prompt; past it the reviewer reads the files.
const DIFF_CHARS: usize = 64 * 1024;
/// Most of the agent's closing words put in the prompt.
const SUMMARY_CHARS: usize = 4 * 1024;

/// What the reviewer decided.
#[derive(Debug, PartialEq)]
pub(crate) enum Review {
    /// The first line was exactly `APPROVED`.
    Approved,
    /// Back to the agent: the reason (one line) and the review it needs to see.
    Rejected { reason: String, feedback: String },
    /// No verdict at all: the task fails with this line.
    NoAnswer(String),
}

/// Has role `role_id` review the change of `task` (its worktrees `trees` of `repos`, whose
/// base branches are merged in and whose checks passed). `summary` is what the agent said
/// when it finished; `checks` names the commands that passed. The review is kept as the
/// task's `review.md` artifact.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn review(
    agent: &Agent,
    ctx: &ProjectCtx,
    role_id: &str,
    task: &Task,
    repos: &[Repo],
    trees: &[worktree::TaskTree],
    summary: &str,
    checks: &[String],
) -> Review {
    let spec = crate::work_queue::spec_of(task);
    let role = match agent.role_run(task, role_id) {
        Ok(r) => r,
        Err(e) => return Review::NoAnswer(format!("review role {role_id}: {e}")),
    };
    let diffs = {
        let pairs: Vec<(String, String, std::path::PathBuf)> = repos
            .iter()
            .zip(trees)
            .map(|(r, t)| (r.id.clone(), r.base_ref(), t.path.clone()))
            .collect();
        pegasus_fs::blocking(move || {
            pairs
                .into_iter()
                .map(|(id, base, path)| {
                    let diff =
                        worktree::diff(&path, &base).unwrap_or_else(|e| format!("(no diff: {e})"));
                    (id, base, diff)
                })
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default()
    };
    let folders: Vec<(String, PathBuf)> = trees
        .iter()
        .map(|t| (t.repo.clone(), t.path.clone()))
        .collect();
    let ask = |reading: &str| prompt(task, &spec, summary, checks, &diffs, reading);
    let workspace = pegasus_agent::Workspace {
        repos: folders.clone(),
    };
    let before = snapshots(&folders).await;
    let asked = agent.consult(&task.id, role, &ask, &workspace).await;
    if let Some(repo) = changed(&before, &snapshots(&folders).await) {
        return Review::NoAnswer(format!(
            "the reviewer ({role_id}) changed the worktree of repo {repo} it was reviewing"
        ));
    }
    let verdict = match asked {
        Ok(end) if end.stop == StopKind::Answered => end.text,
        Ok(end) => {
            return Review::NoAnswer(format!(
                "the reviewer ({role_id}) did not answer: {}",
                crate::code_task::one_line(&end.text)
            ))
        }
        Err(e) => return Review::NoAnswer(format!("the reviewer ({role_id}) failed: {e}")),
    };
    crate::code_task::keep_artifacts(ctx, &task.id, &[("review.md".into(), verdict.clone())]);
    decide(role_id, &verdict)
}

/// Each worktree's [`worktree::snapshot`] by repo id, or why it cannot be taken.
async fn snapshots(folders: &[(String, PathBuf)]) -> Vec<(String, Result<String, String>)> {
    let ids: Vec<String> = folders.iter().map(|(id, _)| id.clone()).collect();
    let folders = folders.to_vec();
    let taken = pegasus_fs::blocking(move || {
        folders
            .into_iter()
            .map(|(id, path)| (id, worktree::snapshot(&path).map_err(|e| e.to_string())))
            .collect()
    })
    .await;
    taken.unwrap_or_else(|e| ids.into_iter().map(|id| (id, Err(e.to_string()))).collect())
}

/// The first repo whose worktree is not as it was; one whose snapshot cannot be taken counts
/// as changed (nothing says it is not).
fn changed(
    before: &[(String, Result<String, String>)],
    after: &[(String, Result<String, String>)],
) -> Option<String> {
    before
        .iter()
        .zip(after)
        .find(|((_, b), (_, a))| a.is_err() || b.is_err() || a != b)
        .map(|((id, _), _)| id.clone())
}

/// The gate's decision on a review text.
fn decide(role_id: &str, text: &str) -> Review {
    match parse_verdict(text) {
        ReviewVerdict::Approved => Review::Approved,
        ReviewVerdict::Rejected { reason } => Review::Rejected {
            feedback: format!(
                "The reviewer ({role_id}) rejected your change: {reason}\n\nThe review:\n{}",
                cut(text.trim(), SUMMARY_CHARS)
            ),
            reason: format!("review rejected: {reason}"),
        },
    }
}

/// What the reviewer is asked.
fn prompt(
    task: &Task,
    spec: &pegasus_tasks::TaskSpec,
    summary: &str,
    checks: &[String],
    diffs: &[(String, String, String)],
    reading: &str,
) -> String {
    let mut s = format!(
        "Review the change of code task {}: {}\n\nGoal:\n{}\n",
        task.id,
        task.title,
        spec.goal.trim()
    );
    s.push_str(&crate::work_queue::spec_lists(spec));
    if checks.is_empty() {
        s.push_str("\nThe project has no checks (`verify`); nothing was run.\n");
    } else {
        s.push_str(&format!(
            "\nThe project's checks passed: {}.\n",
            checks.join("; ")
        ));
    }
    s.push_str(&format!(
        "\nWhat the agent said when it finished:\n{}\n",
        cut(summary.trim(), SUMMARY_CHARS)
    ));
    s.push_str("\nThe change, against the base branch of each repo:\n");
    let mut left = DIFF_CHARS;
    for (repo, base, diff) in diffs {
        let shown = cut(diff, left);
        left = left.saturating_sub(shown.len());
        s.push_str(&format!(
            "\n## repo `{repo}` (against {base})\n```diff\n{shown}\n```\n"
        ));
        if shown.len() < diff.len() {
            s.push_str("(the diff is cut here; read the files themselves)\n");
        }
    }
    let repos: Vec<&str> = diffs.iter().map(|(repo, _, _)| repo.as_str()).collect();
    s.push_str(&format!(
        "\nThe change is in repos {}. {reading}\n\n",
        repos.join(", ")
    ));
    s.push_str(
        "Your FIRST LINE must be exactly `APPROVED` if the change achieves the goal, meets every \
         acceptance criterion and has nothing that must be fixed, or `REJECTED: <the main \
         reason, in one line>` otherwise. Then explain, saying what to fix. Anything else on the \
         first line counts as a rejection.",
    );
    s
}

/// At most `max` bytes of `s`, cut at a character boundary.
fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn only_an_exact_approved_first_line_approves() {
        assert_eq!(decide("reviewer", "APPROVED\nlooks fine"), Review::Approved);
        let Review::Rejected { reason, feedback } =
            decide("reviewer", "REJECTED: no tests\nadd one")
        else {
            panic!("a rejection")
        };
        assert_eq!(reason, "review rejected: no tests");
        assert!(
            feedback.starts_with("The reviewer (reviewer) rejected your change: no tests"),
            "{feedback}"
        );
        assert!(feedback.contains("add one"), "{feedback}");
        for garbage in ["Looks good to me", "approved", "**APPROVED**", ""] {
            let Review::Rejected { reason, .. } = decide("reviewer", garbage) else {
                panic!("{garbage:?} must be a rejection")
            };
            assert!(
                reason.starts_with("review rejected: garbled verdict"),
                "{reason}"
            );
        }
    }

    #[test]
    fn a_worktree_not_as_it_was_or_unreadable_counts_as_changed() {
        let snap = |app: Result<&str, &str>, lib: Result<&str, &str>| {
            vec![
                (
                    "app".to_string(),
                    app.map(str::to_string).map_err(str::to_string),
                ),
                (
                    "lib".to_string(),
                    lib.map(str::to_string).map_err(str::to_string),
                ),
            ]
        };
        let before = snap(Ok("h1"), Ok("h2"));
        assert_eq!(changed(&before, &snap(Ok("h1"), Ok("h2"))), None);
        assert_eq!(
            changed(&before, &snap(Ok("h1"), Ok("h3"))).as_deref(),
            Some("lib")
        );
        assert_eq!(
            changed(&before, &snap(Err("git failed"), Ok("h2"))).as_deref(),
            Some("app")
        );
        let unreadable = snap(Err("git failed"), Ok("h2"));
        assert_eq!(changed(&unreadable, &unreadable).as_deref(), Some("app"));
    }

    #[test]
    fn the_prompt_cuts_a_huge_diff_and_asks_for_the_verdict_line() {
        let task: Task = serde_json::from_value(serde_json::json!({
            "id": "t-20260101-abcdef", "project": "p", "title": "add x", "type": "code",
            "state": "verifying", "created": "2026-01-01T00:00:00Z", "updated": "2026-01-01T00:00:00Z"
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let spec = pegasus_tasks::TaskSpec {
            goal: "add x".into(),
            constraints: vec![],
            acceptance: vec!["x exists".into()],
            role: None,
            model_policy: None,
            repos: vec![],
            budget_usd: None,
        };
        let diffs = vec![(
            "app".to_string(),
            "refs/heads/main".to_string(),
            "é".repeat(DIFF_CHARS),
        )];
        let p = prompt(
            &task,
            &spec,
            "done",
            &["make test".into()],
            &diffs,
            "Read their files with read_file as `repo-id:path`.",
        );
        assert!(
            p.contains("- x exists") && p.contains("checks passed: make test"),
            "{p}"
        );
        assert!(p.contains("the diff is cut here"));
        assert!(p.len() < DIFF_CHARS + 4096);
        assert!(p.contains("FIRST LINE must be exactly `APPROVED`"));
        assert!(p.contains("The change is in repos app. Read their files with read_file"));
    }
}
