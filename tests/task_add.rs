//! Tasks as a user creates them (`pegasusctl task add`, the MainAgent's `add_task`), the
//! dependency order the worker keeps, and the clarification loop (`ask_user` → `task answer`),
//! through the real daemon, worker and CLI with the fake LLM over real HTTP (DESIGN.md §6, §7, §10).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use pegasus_fakellm::{FakeLlm, Match, Reply, Rule, ToolCall};
use serde_json::{json, Value};
use std::time::Duration;

fn user(t: &str) -> Match {
    Match::LastUserTextContains(t.into())
}

fn task(home: &Home, id: &str) -> Value {
    home.json(&["task", "show", id])["task"].clone()
}

fn wait_state(home: &Home, id: &str, state: &str) -> Value {
    poll(
        Duration::from_secs(15),
        &format!("task {id} {state}"),
        || {
            let t = task(home, id);
            (t["state"] == state).then_some(t)
        },
    )
}

#[test]
fn a_task_added_by_the_user_asks_a_question_and_its_dependent_waits_for_the_answer() {
    let fake = FakeLlm::start().unwrap();
    // The answer comes back in the task's next run.
    fake.add_rule(Rule::new(
        user("Answer to your question: blue"),
        Reply::Text("alpha painted blue".into()),
    ));
    fake.add_rule(Rule::new(
        Match::All(vec![user("paint alpha"), Match::NoToolResultYet]),
        Reply::Tools(vec![ToolCall::new(
            "ask_user",
            json!({"question": "Which colour should alpha be?"}),
        )]),
    ));
    fake.add_rule(Rule::new(
        user("polish beta"),
        Reply::Text("beta polished".into()),
    ));
    main_agent_rule(&fake);
    let home = fake_home(&fake, "");
    let _d = home.start_fake();
    home.create("tp");

    let added = home.json(&[
        "task",
        "add",
        "tp",
        "--goal",
        "paint alpha",
        "--priority",
        "1",
        "--acceptance",
        "alpha has a colour",
    ]);
    let alpha = added["id"].as_str().unwrap().to_string();
    assert_eq!(added["priority"], 1);
    assert_eq!(added["spec"]["goal"], "paint alpha");
    assert_eq!(added["spec"]["acceptance"], json!(["alpha has a colour"]));

    // The agent asks; the task blocks on the question, which `task show` gives.
    let blocked = wait_state(&home, &alpha, "blocked");
    assert_eq!(blocked["stop_reason"], "question");
    assert_eq!(blocked["question"], "Which colour should alpha be?");
    let shown = home.ctl_ok(&["task", "show", &alpha]);
    assert!(shown.contains("Which colour should alpha be?"), "{shown}");
    // `status` says what waits for the user.
    let status = home.ctl_ok(&["status"]);
    assert!(
        status.contains(&format!(
            "tp: task {alpha} asks: Which colour should alpha be?"
        )),
        "{status}"
    );
    assert_eq!(
        home.json(&["status"])["waiting"][0],
        format!("tp: task {alpha} asks: Which colour should alpha be? (answer with `pegasusctl task answer {alpha} TEXT`)")
    );

    // A task that depends on it waits, and the list says on what.
    let out = home.ctl_ok(&[
        "task",
        "add",
        "tp",
        "--goal",
        "polish beta",
        "--depends-on",
        &alpha,
    ]);
    assert!(out.contains("added to tp"), "{out}");
    let beta = home
        .json(&["task", "list", "tp"])
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["title"] == "polish beta")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let list = home.ctl_ok(&["task", "list", "tp"]);
    assert!(
        list.contains(&format!("waits on {alpha} (blocked)")),
        "{list}"
    );
    assert_eq!(task(&home, &beta)["state"], "ready");

    // The answer puts alpha back; it finishes with it, then beta runs.
    home.ctl_ok(&["task", "answer", &alpha, "blue"]);
    let done = wait_state(&home, &alpha, "done");
    assert_eq!(done["result_summary"], "alpha painted blue");
    assert!(
        done["question"].is_null(),
        "the question is cleared: {done}"
    );
    wait_state(&home, &beta, "done");
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

#[test]
fn task_add_refuses_what_cannot_run_with_one_line_each() {
    let fake = FakeLlm::start().unwrap();
    main_agent_rule(&fake);
    let home = fake_home(&fake, "");
    let _d = home.start_fake();
    home.create("tp");
    let refusals = [
        (vec!["nope", "--goal", "x"], "project nope not found"),
        (vec!["tp", "--goal", "x", "--role", "wizard"], "wizard"),
        (vec!["tp", "--goal", "x", "--repo", "app"], "no repo `app`"),
        (
            vec!["tp", "--goal", "x", "--depends-on", "t-nope"],
            "t-nope",
        ),
        (vec!["tp", "--goal", "  "], "needs a goal"),
    ];
    for (args, says) in refusals {
        let mut full = vec!["task", "add"];
        full.extend(args);
        let e = home.ctl_fails(&full);
        assert!(e.contains(says), "{e}");
        assert_eq!(e.trim().lines().count(), 1, "one line: {e}");
    }
    let usage = home.ctl(&["task", "add", "tp", "--goal", "x", "--priority", "7"]);
    assert_eq!(usage.status.code(), Some(2));
    assert!(home
        .json(&["task", "list", "tp"])
        .as_array()
        .unwrap()
        .is_empty());
}

#[test]
fn the_main_agent_adds_a_task_with_a_role() {
    let fake = FakeLlm::start().unwrap();
    let main = |m: Match| Match::All(vec![Match::SystemContains("MainAgent".into()), m]);
    fake.add_rule(Rule::new(
        main(Match::LastToolResultContains("added to tp".into())),
        Reply::Text("queued for the researcher".into()),
    ));
    fake.add_rule(Rule::new(
        main(user("queue gamma")),
        Reply::Tools(vec![ToolCall::new(
            "add_task",
            json!({"project": "tp", "goal": "research gamma", "role": "researcher", "priority": 0}),
        )]),
    ));
    main_agent_rule(&fake);
    fake.add_rule(Rule::new(
        Match::SystemContains("# Your Task".into()),
        Reply::Text("gamma researched".into()),
    ));
    let home = fake_home(&fake, "");
    let _d = home.start_fake();
    home.create("tp");
    let reply = home.ctl_ok(&["chat", "please queue gamma for tp"]);
    assert!(reply.contains("queued for the researcher"), "{reply}");
    let t = poll(
        Duration::from_secs(15),
        "the researcher's task done",
        || {
            home.json(&["task", "list", "tp"])
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["title"] == "research gamma" && t["state"] == "done")
                .cloned()
        },
    );
    assert_eq!(t["role"], "researcher");
    assert_eq!(t["priority"], 0);
    assert_eq!(t["result_summary"], "gamma researched");
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

#[test]
fn a_preference_told_to_the_main_agent_reaches_every_project_prompt() {
    let fake = FakeLlm::start().unwrap();
    main_agent_rule(&fake);
    fake.add_rule(Rule::new(user("hello"), Reply::Text("bonjour".into())));
    let home = fake_home(&fake, "");
    let _d = home.start_fake();
    home.create("tp");
    home.ctl_ok(&["chat", "Preference: always answer in French"]);
    let prefs = std::fs::read_to_string(home.path().join("preferences.md")).unwrap();
    assert_eq!(prefs, "- always answer in French\n");
    // The MainAgent's own answer already saw it.
    let main_req = fake
        .requests()
        .into_iter()
        .rev()
        .find(|r| r.body["system"].to_string().contains("MainAgent"))
        .unwrap();
    assert!(main_req.body["system"]
        .to_string()
        .contains("always answer in French"));
    home.ctl_ok(&["project", "send", "tp", "hello", "--wait"]);
    let project_req = fake.requests().pop().unwrap();
    let system = project_req.body["system"].to_string();
    assert!(system.contains("## User preferences"), "{system}");
    assert!(system.contains("always answer in French"), "{system}");
}

#[test]
fn a_schedule_fires_once_after_a_missed_window_and_not_again_after_a_restart() {
    let fake = FakeLlm::start().unwrap();
    main_agent_rule(&fake);
    fake.add_rule(Rule::new(
        user("yearly review"),
        Reply::Text("reviewed".into()),
    ));
    fake.add_rule(Rule::new(
        user("planned review"),
        Reply::Text("planned done".into()),
    ));
    let home = fake_home(&fake, "");
    let mut d = home.start_fake();
    home.create("tp");
    home.ctl_ok(&["stop"]);
    assert_eq!(d.wait_exit(Duration::from_secs(15)), Some(0));

    // Both jobs last ran on 2025-01-01; the daemon "was down" over 2026-01-01.
    std::fs::write(
        home.path().join("schedules.yml"),
        "- {name: yearly, cron: '0 0 1 1 *', project: tp, goal: yearly review, auto: true}\n\
         - {name: planned, cron: '0 0 1 1 *', project: tp, goal: planned review}\n",
    )
    .unwrap();
    let ran = json!({"since": "2024-06-01T00:00:00Z", "last_run": "2025-01-01T00:00:05Z",
                     "last_attempt": "2025-01-01T00:00:05Z"});
    std::fs::write(
        home.path().join("schedules.state.json"),
        json!({"yearly": ran, "planned": ran}).to_string(),
    )
    .unwrap();
    let d = home.start_fake();
    let find = |title: &str| -> Vec<Value> {
        home.json(&["task", "list", "tp"])
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["title"] == title)
            .cloned()
            .collect()
    };
    let yearly = poll(Duration::from_secs(15), "the yearly task done", || {
        let ts = find("yearly (scheduled)");
        (ts.len() == 1 && ts[0]["state"] == "done").then(|| ts[0].clone())
    });
    assert_eq!(yearly["result_summary"], "reviewed");
    let planned = poll(Duration::from_secs(15), "the planned task", || {
        find("planned (scheduled)").into_iter().next()
    });
    assert_eq!(
        planned["state"], "planned",
        "without auto it waits for approval"
    );
    let id = planned["id"].as_str().unwrap().to_string();
    home.ctl_ok(&["task", "approve", &id]);
    poll(Duration::from_secs(15), "the approved task done", || {
        (task(&home, &id)["state"] == "done").then_some(())
    });
    let state: Value = serde_json::from_str(
        &std::fs::read_to_string(home.path().join("schedules.state.json")).unwrap(),
    )
    .unwrap();
    assert!(state["yearly"]["last_run"].as_str().unwrap() > "2026-01-01");

    // A restart finds nothing due: no second task.
    drop(d);
    let _d = home.start_fake();
    home.ready_worker("tp", None);
    home.ctl_ok(&["status"]);
    assert_eq!(find("yearly (scheduled)").len(), 1);
    assert_eq!(find("planned (scheduled)").len(), 1);
}

#[test]
fn a_maintenance_role_proposes_a_task_that_runs_once_approved() {
    let fake = FakeLlm::start().unwrap();
    main_agent_rule(&fake);
    let finder = |m: Match| Match::All(vec![Match::SystemContains("Duplicate finder".into()), m]);
    fake.add_rule(Rule::new(
        finder(Match::LastToolResultContains("proposed as task".into())),
        Reply::Text("proposed one merge".into()),
    ));
    fake.add_rule(Rule::new(
        finder(Match::NoToolResultYet),
        Reply::Tools(vec![ToolCall::new(
            "propose_task",
            json!({"title": "merge the two parsers", "goal": "merge the two date parsers into one",
                   "acceptance": ["one parser left"]}),
        )]),
    ));
    fake.add_rule(Rule::new(
        user("merge the two date parsers"),
        Reply::Text("merged".into()),
    ));
    let home = fake_home(&fake, "");
    let _d = home.start_fake();
    home.create("tp");
    let run = home.json(&[
        "task",
        "add",
        "tp",
        "--goal",
        "look for duplicates",
        "--role",
        "duplicate-finder",
    ]);
    let run_id = run["id"].as_str().unwrap().to_string();
    let done = wait_state(&home, &run_id, "done");
    assert_eq!(done["result_summary"], "proposed one merge");
    let proposed = home
        .json(&["task", "list", "tp"])
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["title"] == "merge the two parsers")
        .cloned()
        .unwrap();
    assert_eq!(
        proposed["state"], "planned",
        "a proposal waits for approval"
    );
    let id = proposed["id"].as_str().unwrap().to_string();
    home.ctl_ok(&["task", "approve", &id]);
    let merged = wait_state(&home, &id, "done");
    assert_eq!(merged["result_summary"], "merged");
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

/// Issue 32 (8): `propose_task` is capped: a task proposes at most 5 tasks, each with a
/// one-line title of at most 120 characters; past that the model gets a tool error that says
/// what to do, and nothing more is created.
#[test]
fn propose_task_is_capped_in_count_and_size() {
    let fake = FakeLlm::start().unwrap();
    main_agent_rule(&fake);
    let finder = |m: Match| Match::All(vec![Match::SystemContains("Duplicate finder".into()), m]);
    // The last result is the oversized title's; the one before it the sixth proposal's.
    fake.add_rule(Rule::new(
        finder(Match::All(vec![
            Match::LastToolResultContains("this task already proposed 5 tasks".into()),
            Match::LastToolResultContains("`title` is 200 characters, at most 120".into()),
            Match::LastToolResultContains("`goal` is 9000 characters, at most 8000".into()),
        ])),
        Reply::Text("both caps held".into()),
    ));
    fake.add_rule(Rule::new(
        finder(Match::LastToolResultContains("proposed as task".into())),
        Reply::Text("a cap did not hold".into()),
    ));
    let mut calls: Vec<ToolCall> = (1..=6)
        .map(|i| {
            ToolCall::new(
                "propose_task",
                json!({"title": format!("proposal {i}"), "goal": format!("do thing {i}")}),
            )
        })
        .collect();
    calls.push(ToolCall::new(
        "propose_task",
        json!({"title": "t".repeat(200), "goal": "x"}),
    ));
    calls.push(ToolCall::new(
        "propose_task",
        json!({"title": "long goal", "goal": "g".repeat(9000)}),
    ));
    fake.add_rule(Rule::new(
        finder(Match::NoToolResultYet),
        Reply::Tools(calls),
    ));
    let home = fake_home(&fake, "");
    let _d = home.start_fake();
    home.create("tp");
    let run = home.json(&[
        "task",
        "add",
        "tp",
        "--goal",
        "look for duplicates",
        "--role",
        "duplicate-finder",
    ]);
    let run_id = run["id"].as_str().unwrap().to_string();
    let done = wait_state(&home, &run_id, "done");
    assert_eq!(done["result_summary"], "both caps held");
    let planned: Vec<Value> = home
        .json(&["task", "list", "tp"])
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["state"] == "planned")
        .cloned()
        .collect();
    assert_eq!(planned.len(), 5, "{planned:?}");
    assert!(planned
        .iter()
        .all(|t| t["title"].as_str().unwrap().starts_with("proposal ")));
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}
