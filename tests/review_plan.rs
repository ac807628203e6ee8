//! The review gate and the planner of code projects (DESIGN.md §10, seed 003's Reviewer and
//! Planner) end to end: real repositories, the real daemon, worker and CLI, and the scripted
//! fake model playing the agent, the reviewer and the planner.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use pegasus_fakellm::{FakeLlm, Match, Reply, Rule, ToolCall};
use serde_json::{json, Value};
use std::time::Duration;

const REVIEWER: &str = "You are the Reviewer";
const PLANNER: &str = "You are the Planner";

fn task(home: &Home, id: &str) -> Value {
    home.json(&["task", "show", id])["task"].clone()
}

fn wait_state(home: &Home, id: &str, state: &str) -> Value {
    poll(
        Duration::from_secs(40),
        &format!("task {id} {state}"),
        || {
            let t = task(home, id);
            (t["state"] == state).then_some(t)
        },
    )
}

fn add(home: &Home, goal: &str) -> String {
    home.json(&["task", "add", "cp", "--goal", goal, "--repo", "app"])["id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Every transition of a task: (from, to, reason).
fn moves(home: &Home, id: &str) -> Vec<(String, String, String)> {
    home.json(&["task", "show", id])["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e.get("from").is_some())
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap_or_default().to_string();
            (s("from"), s("to"), s("reason"))
        })
        .collect()
}

fn write(path: &str, content: &str) -> Reply {
    Reply::Tools(vec![ToolCall::new(
        "write_file",
        json!({"path": path, "content": content}),
    )])
}

fn role(system: &str) -> Match {
    Match::SystemContains(system.into())
}

fn user(t: &str) -> Match {
    Match::LastUserTextContains(t.into())
}

/// The agent's rules: after a write it is done; `rules` say what it writes for which request.
fn agent_rules(fake: &FakeLlm, rules: &[(&str, &str, &str)]) {
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("wrote".into()),
        Reply::Text("changed the files".into()),
    ));
    for (when, path, content) in rules {
        fake.add_rule(Rule::new(user(when), write(path, content)));
    }
    main_agent_rule(fake);
}

/// A home with project `cp` on a fresh repo `app` and `keys` in its PROJECT.md.
fn project(fake: &FakeLlm, keys: &str) -> (tempfile::TempDir, std::path::PathBuf, Home, Daemon) {
    let tmp = tempfile::tempdir().unwrap();
    let app = repo(tmp.path(), "app");
    let home = fake_home(fake, "");
    let d = home.start_fake();
    home.create("cp");
    configure(
        &home,
        "cp",
        &format!("{}{keys}", repos_yaml(&[("app", &app)])),
    );
    (tmp, app, home, d)
}

/// The requests the fake got whose system prompt holds `who`, as JSON text.
fn requests_of(fake: &FakeLlm, who: &str) -> Vec<String> {
    fake.requests()
        .iter()
        .filter(|r| r.body["system"].to_string().contains(who))
        .map(|r| r.body.to_string())
        .collect()
}

#[test]
fn a_rejected_change_goes_back_with_the_reason_and_is_merged_once_approved() {
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(
        Rule::new(
            role(REVIEWER),
            Reply::Text("REJECTED: the greeting has no name\nWrite `hello Bob`.".into()),
        )
        .times(1),
    );
    fake.add_rule(Rule::new(
        role(REVIEWER),
        Reply::Text("APPROVED\nGood.".into()),
    ));
    agent_rules(
        &fake,
        &[
            ("rejected your change", "a.txt", "hello Bob\n"),
            ("greet", "a.txt", "hello\n"),
        ],
    );
    let (_tmp, app, home, _d) = project(&fake, "verify: test -s a.txt\nreview: reviewer\n");
    let id = add(&home, "greet in a.txt");
    let done = wait_state(&home, &id, "done");
    assert_eq!(sh(&app, "cat a.txt"), "hello Bob");
    assert_eq!(sh(&app, "git status --porcelain"), "");

    let m = moves(&home, &id);
    assert!(
        m.contains(&(
            "verifying".into(),
            "running".into(),
            "review rejected: the greeting has no name".into()
        )),
        "{m:?}"
    );
    assert!(
        m.contains(&(
            "verifying".into(),
            "verified".into(),
            "verify passed, review approved".into()
        )),
        "{m:?}"
    );
    // The reviewer read the change as a diff, the checks that passed named; the agent got the
    // reason and the review back.
    let reviews = requests_of(&fake, REVIEWER);
    assert_eq!(reviews.len(), 2, "one review per attempt");
    assert!(
        reviews[0].contains("+hello") && reviews[0].contains("test -s a.txt"),
        "{}",
        reviews[0]
    );
    assert!(reviews[1].contains("+hello Bob"), "{}", reviews[1]);
    assert!(fake.requests().iter().any(|r| {
        let b = r.body.to_string();
        !b.contains(REVIEWER)
            && b.contains("rejected your change: the greeting has no name")
            && b.contains("Write `hello Bob`")
    }));
    // The last review is kept beside the diff.
    let artifacts = done["artifacts"].to_string();
    assert!(artifacts.contains("review.md"), "{artifacts}");
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

#[test]
fn a_reviewer_that_never_approves_fails_the_task_after_max_attempts_and_garbage_is_a_rejection() {
    let fake = FakeLlm::start().unwrap();
    // Not the verdict line: a rejection, every time.
    fake.add_rule(Rule::new(
        role(REVIEWER),
        Reply::Text("Looks good to me!".into()),
    ));
    agent_rules(
        &fake,
        &[
            ("rejected your change", "a.txt", "hello again\n"),
            ("greet", "a.txt", "hello\n"),
        ],
    );
    let (_tmp, app, home, _d) = project(&fake, "review: reviewer\nmax_attempts: 2\n");
    let before = sh(&app, "git rev-parse main");
    let id = add(&home, "greet in a.txt");
    let failed = wait_state(&home, &id, "failed");
    assert_eq!(
        failed["stop_reason"],
        "review rejected: garbled verdict: Looks good to me! (after 2 attempts)"
    );
    assert_eq!(requests_of(&fake, REVIEWER).len(), 2);
    assert_eq!(sh(&app, "git rev-parse main"), before, "nothing merged");
}

#[test]
fn an_unknown_review_role_fails_the_task_at_its_start_with_one_line() {
    let fake = FakeLlm::start().unwrap();
    agent_rules(&fake, &[]);
    let (_tmp, _app, home, _d) = project(&fake, "review: nobody\n");
    let id = add(&home, "greet in a.txt");
    let failed = wait_state(&home, &id, "failed");
    let reason = failed["stop_reason"].as_str().unwrap();
    assert!(
        reason.contains("key `review`: no role `nobody`: see `pegasusctl role list`"),
        "{reason}"
    );
    assert!(fake
        .requests()
        .iter()
        .all(|r| r.body["system"].to_string().contains("MainAgent")));
}

#[test]
fn a_planner_splits_a_goal_into_subtasks_that_run_in_dependency_order() {
    let fake = FakeLlm::start().unwrap();
    let plan = json!({"subtasks": [
        {"title": "one", "goal": "create one.txt", "acceptance": ["one.txt exists"]},
        {"title": "two", "goal": "create two.txt", "depends_on": [1]},
        {"title": "three", "goal": "create three.txt", "depends_on": [1, 2]}
    ]});
    fake.add_rule(Rule::new(
        role(PLANNER),
        Reply::Text(format!("```json\n{plan}\n```")),
    ));
    agent_rules(
        &fake,
        &[
            ("create one.txt", "one.txt", "1\n"),
            ("create two.txt", "two.txt", "2\n"),
            ("create three.txt", "three.txt", "3\n"),
        ],
    );
    let (_tmp, app, home, _d) = project(&fake, "plan: planner\n");
    let id = add(&home, "create one.txt, two.txt and three.txt");
    let parent = wait_state(&home, &id, "done");
    let subs: Vec<String> = parent["subtasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect();
    assert_eq!(subs.len(), 3, "{parent}");
    assert_eq!(
        parent["result_summary"],
        format!("Done through its subtasks: {}.", subs.join(", "))
    );
    for (i, sub) in subs.iter().enumerate() {
        let t = wait_state(&home, sub, "done");
        assert_eq!(t["parent"], id.as_str());
        assert_eq!(t["title"], ["one", "two", "three"][i]);
    }
    assert_eq!(task(&home, &subs[1])["depends_on"], json!([subs[0]]));
    assert_eq!(
        task(&home, &subs[2])["depends_on"],
        json!([subs[0], subs[1]])
    );
    // Each subtask was its own code task, merged in dependency order.
    assert_eq!(sh(&app, "cat one.txt two.txt three.txt"), "1\n2\n3");
    let merges = sh(&app, "git log --first-parent --reverse --format=%s main");
    let order: Vec<usize> = subs
        .iter()
        .map(|s| merges.find(&format!("pegasus/task-{s}")).unwrap())
        .collect();
    assert!(order[0] < order[1] && order[1] < order[2], "{merges}");
    // The parent itself never ran an agent: it waited, then was done through them.
    let m = moves(&home, &id);
    assert_eq!(
        m.iter().map(|(_, to, _)| to.as_str()).collect::<Vec<_>>(),
        ["planned", "ready", "running", "done"],
        "{m:?}"
    );
    assert!(parent["artifacts"].to_string().contains("plan.md"));
    assert_eq!(
        requests_of(&fake, PLANNER).len(),
        1,
        "subtasks are not planned again"
    );
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

#[test]
fn a_plan_the_rules_refuse_fails_the_task_and_a_plan_of_one_runs_it_whole() {
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(
        Match::All(vec![role(PLANNER), user("bad plan")]),
        Reply::Text(
            json!({"subtasks": [{"goal": "a", "depends_on": [2]}, {"goal": "b"}]}).to_string(),
        ),
    ));
    fake.add_rule(Rule::new(
        role(PLANNER),
        Reply::Text(json!({"subtasks": [{"goal": "write a.txt"}]}).to_string()),
    ));
    agent_rules(&fake, &[("whole job", "a.txt", "whole\n")]);
    let (_tmp, app, home, _d) = project(&fake, "plan: planner\n");
    let bad = add(&home, "bad plan job");
    let failed = wait_state(&home, &bad, "failed");
    assert_eq!(
        failed["stop_reason"],
        "plan: the planner's answer cannot be used: step 1 depends on step 2: a step may depend only on steps before it, numbered from 1"
    );
    assert_eq!(
        home.json(&["task", "list", "cp"]).as_array().unwrap().len(),
        1
    );

    let whole = add(&home, "whole job");
    let done = wait_state(&home, &whole, "done");
    assert!(done.get("subtasks").is_none(), "{done}");
    assert_eq!(sh(&app, "cat a.txt"), "whole");
}
