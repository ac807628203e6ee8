//! Tasks, roles, autonomous runs and the watchdog through the real daemon, workers and CLI,
//! with the fake LLM over real HTTP (DESIGN.md §7, §8, §9, §2/§5 watchdog).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use pegasus_fakellm::{FakeLlm, Fault, Match, Reply, Rule, ToolCall};
use serde_json::{json, Value};
use std::time::Duration;

fn user(t: &str) -> Match {
    Match::LastUserTextContains(t.into())
}

fn tasks(home: &Home, project: &str) -> Vec<Value> {
    home.json(&["task", "list", project])
        .as_array()
        .unwrap()
        .clone()
}

/// The newest task whose title contains `needle`, once it is in `state`.
fn task_in_state(home: &Home, project: &str, needle: &str, state: &str) -> Value {
    poll(
        Duration::from_secs(15),
        &format!("a task `{needle}` in state {state}"),
        || {
            tasks(home, project)
                .into_iter()
                .find(|t| t["title"].as_str().unwrap_or("").contains(needle) && t["state"] == state)
        },
    )
}

fn ledger(home: &Home) -> Vec<Value> {
    std::fs::read_to_string(home.path().join("costs/ledger.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn ledger_sum(home: &Home, task_prefix: &str) -> f64 {
    ledger(home)
        .iter()
        .filter(|l| {
            l["task"]
                .as_str()
                .is_some_and(|t| t.starts_with(task_prefix))
        })
        .map(|l| l["usd"].as_f64().unwrap())
        .sum()
}

fn main_agent_heard(fake: &FakeLlm, needle: &str) {
    poll(
        Duration::from_secs(15),
        &format!("the MainAgent to hear `{needle}`"),
        || {
            fake.requests()
                .iter()
                .any(|r| {
                    r.body["system"].to_string().contains("MainAgent")
                        && r.body.to_string().contains(needle)
                })
                .then_some(())
        },
    );
}

#[test]
fn a_message_becomes_a_frozen_task_and_replay_reproduces_its_spec() {
    let fake = FakeLlm::start().unwrap();
    main_agent_rule(&fake);
    fake.add_rule(Rule::new(user("hello"), Reply::Text("hi back".into())));
    let home = fake_home(&fake, "");
    let _d = home.start_fake();
    home.create("desk");
    assert_eq!(
        home.ctl_ok(&["project", "send", "desk", "hello there", "--wait"])
            .trim(),
        "hi back"
    );
    let original = task_in_state(&home, "desk", "hello there", "done");
    let id = original["id"].as_str().unwrap().to_string();
    assert_eq!(original["spec_version"], 1);
    assert_eq!(original["spec"]["goal"], "hello there");
    let shown = home.json(&["task", "show", &id]);
    let states: Vec<&str> = shown["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "transition")
        .map(|e| e["to"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["planned", "ready", "running", "done"]);
    // The board groups it as done.
    let board = home.ctl_ok(&["task", "list", "desk", "--board"]);
    assert!(
        board.contains("Done (1)") || board.contains("done (1)"),
        "{board}"
    );

    let out = home.ctl_ok(&["task", "replay", &id]);
    assert!(out.contains("replays"), "{out}");
    let replay = poll(Duration::from_secs(15), "the replay to finish", || {
        tasks(&home, "desk")
            .into_iter()
            .find(|t| t["replay_of"] == id.as_str() && t["state"] == "done")
    });
    assert_eq!(
        serde_json::to_string(&replay["spec"]).unwrap(),
        serde_json::to_string(&original["spec"]).unwrap(),
        "the replay runs from the same frozen spec"
    );
    // Retry refuses a task that did not fail, and says why.
    let out = home.ctl(&["task", "retry", &id]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains(&id));
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

#[test]
fn a_role_without_exec_cannot_run_exec_even_when_the_model_asks() {
    let fake = FakeLlm::start().unwrap();
    main_agent_rule(&fake);
    fake.add_rule(
        Rule::new(
            user("investigate"),
            Reply::Tools(vec![ToolCall::new(
                "spawn_subagent",
                json!({"task": "find the facts", "role": "researcher"}),
            )]),
        )
        .times(1),
    );
    fake.add_rule(
        Rule::new(
            Match::SystemContains("# Your Task".into()),
            Reply::Tools(vec![ToolCall::new(
                "exec",
                json!({"command": "touch pwned"}),
            )]),
        )
        .times(1),
    );
    fake.add_rule(Rule::new(
        Match::SystemContains("# Your Task".into()),
        Reply::Text("could not run commands".into()),
    ));
    fake.add_rule(Rule::new(
        user("investigate"),
        Reply::Text("the researcher reported back".into()),
    ));
    let home = fake_home(&fake, "");
    let _d = home.start_fake();
    home.create("lab");
    assert_eq!(
        home.ctl_ok(&["project", "send", "lab", "please investigate", "--wait"])
            .trim(),
        "the researcher reported back"
    );
    assert!(
        !home.project_dir("lab").join("workdir/pwned").exists(),
        "exec ran for a role without it"
    );
    let role_requests: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| r.body["system"].to_string().contains("# Your Task"))
        .collect();
    assert_eq!(role_requests.len(), 2);
    for r in &role_requests {
        let tools: Vec<&str> = r.body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert!(
            !tools.contains(&"exec"),
            "the researcher was shown exec: {tools:?}"
        );
    }
    let answer = role_requests[1].body["messages"].to_string();
    assert!(
        answer.contains("is_error") && answer.contains("exec"),
        "{answer}"
    );
    // Role listing and assignment through the CLI.
    let roles = home.json(&["role", "list"]);
    assert_eq!(roles.as_array().unwrap().len(), 9, "the built-in roles");
    home.ctl_ok(&["role", "assign", "lab", "coder", "--var", "language=Go"]);
    assert!(home.project_md("lab").contains("coder"));
    let bad = home.ctl(&["role", "assign", "lab", "coder", "--var", "nonsense=1"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("nonsense"));
}

/// Scripts a three-phase run whose phase 2 is rejected once, then approved.
fn script_run(fake: &FakeLlm, slow_phase_2: bool) {
    main_agent_rule(fake);
    let plan = json!({"phases": [
        {"title": "Outline", "description": "Write the outline", "acceptance": ["an outline exists"]},
        {"title": "Draft", "description": "Write the draft", "acceptance": ["the draft has a conclusion"]},
        {"title": "Polish", "description": "Polish it", "acceptance": ["no typos"]}
    ]});
    fake.add_rule(Rule::new(
        Match::SystemContains("You plan autonomous work".into()),
        Reply::Text(plan.to_string()),
    ));
    fake.add_rule(Rule::new(
        Match::SystemContains("You summarise one phase".into()),
        Reply::Text("summary of the phase".into()),
    ));
    fake.add_rule(
        Rule::new(
            Match::All(vec![
                Match::SystemContains("You review one phase".into()),
                Match::AnyTextContains("draft v1".into()),
            ]),
            Reply::Text("REJECTED: the draft lacks a conclusion\nadd one".into()),
        )
        .times(1),
    );
    fake.add_rule(Rule::new(
        Match::SystemContains("You review one phase".into()),
        Reply::Text("APPROVED\nall criteria met".into()),
    ));
    fake.add_rule(Rule::new(
        user("This phase: 1."),
        Reply::Text("outline done".into()),
    ));
    fake.add_rule(Rule::new(
        Match::All(vec![user("This phase: 2."), user("lacks a conclusion")]),
        Reply::Text("draft v2 with a conclusion".into()),
    ));
    let first_draft = Reply::Text("draft v1".into());
    let first_draft = if slow_phase_2 {
        Reply::Fault(Fault::Delay {
            ms: 3_000,
            then: Box::new(first_draft),
        })
    } else {
        first_draft
    };
    fake.add_rule(Rule::new(user("This phase: 2."), first_draft).times(1));
    fake.add_rule(Rule::new(
        user("This phase: 2."),
        Reply::Text("draft v1".into()),
    ));
    fake.add_rule(Rule::new(
        user("This phase: 3."),
        Reply::Text("polished".into()),
    ));
}

fn run_status(home: &Home, project: &str) -> Value {
    home.json(&["run", "status", project])
}

fn wait_run(home: &Home, project: &str, status: &str) -> Value {
    poll(
        Duration::from_secs(30),
        &format!("the run to be {status}"),
        || {
            let r = run_status(home, project);
            (r["status"] == status).then_some(r)
        },
    )
}

fn phase_executions(fake: &FakeLlm, n: u32) -> usize {
    fake.requests()
        .iter()
        .filter(|r| {
            let msgs = r.body["messages"].as_array().unwrap();
            let last = msgs.last().unwrap().to_string();
            !r.body["system"].to_string().contains("You review")
                && !r.body["system"].to_string().contains("You summarise")
                && last.contains(&format!("This phase: {n}."))
        })
        .count()
}

#[test]
fn a_three_phase_run_retries_a_rejected_phase_with_the_feedback_and_costs_add_up() {
    let fake = FakeLlm::start().unwrap();
    script_run(&fake, false);
    let home = fake_home(&fake, "");
    let _d = home.start_fake();
    home.create("book");
    home.ctl_ok(&[
        "project",
        "run",
        "book",
        "--brief",
        "Write a short essay",
        "--max-attempts",
        "3",
    ]);
    let run = wait_run(&home, "book", "completed");
    let phases = run["phases"].as_array().unwrap();
    assert_eq!(phases.len(), 3);
    let numbers: Vec<u64> = phases
        .iter()
        .map(|p| p["number"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, [1, 2, 3]);
    assert_eq!(phases[0]["attempt"], 1);
    assert_eq!(phases[1]["attempt"], 2, "phase 2 was retried once");
    assert_eq!(phases[2]["attempt"], 1);
    // The retry's prompt carried the reviewer's feedback (seen at the fake server).
    let retry = fake
        .requests()
        .into_iter()
        .find(|r| {
            r.body["messages"]
                .as_array()
                .unwrap()
                .last()
                .unwrap()
                .to_string()
                .contains("attempt 2 of 3")
        })
        .expect("a retry prompt");
    assert!(retry
        .body
        .to_string()
        .contains("the draft lacks a conclusion"));
    // Costs come from the ledger's own figures.
    let run_id = run["id"].as_str().unwrap();
    for p in phases {
        let n = p["number"].as_u64().unwrap();
        let expected = ledger_sum(&home, &format!("{run_id}-p{n}-"));
        assert!(
            (p["cost_usd"].as_f64().unwrap() - expected).abs() < 1e-9,
            "phase {n}: {} vs {expected}",
            p["cost_usd"]
        );
        assert!(expected > 0.0);
    }
    let total = ledger_sum(&home, run_id);
    assert!(
        (run["cost_usd"].as_f64().unwrap() - total).abs() < 1e-9,
        "run: {} vs {total}",
        run["cost_usd"]
    );
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

#[test]
fn kill_9_of_pegasusd_in_phase_2_resumes_the_run_at_phase_2() {
    let fake = FakeLlm::start().unwrap();
    script_run(&fake, true);
    let home = fake_home(&fake, "");
    let mut d = home.start_fake();
    home.create("saga");
    home.ctl_ok(&["project", "run", "saga", "--brief", "Write a saga"]);
    poll(
        Duration::from_secs(20),
        "phase 2 to reach the model",
        || (phase_executions(&fake, 2) >= 1).then_some(()),
    );
    d.kill9();
    let _d = home.start_fake();
    let run = wait_run(&home, "saga", "completed");
    assert_eq!(
        phase_executions(&fake, 1),
        1,
        "phase 1 ran again after the restart"
    );
    assert_eq!(run["phases"].as_array().unwrap().len(), 3);
}

#[test]
fn pause_and_cancel_take_effect_at_the_next_step() {
    let fake = FakeLlm::start().unwrap();
    script_run(&fake, true);
    let home = fake_home(&fake, "");
    let _d = home.start_fake();
    home.create("slow");
    home.ctl_ok(&["project", "run", "slow", "--brief", "Write slowly"]);
    poll(Duration::from_secs(20), "phase 2 to start", || {
        (phase_executions(&fake, 2) >= 1).then_some(())
    });
    home.ctl_ok(&["run", "pause", "slow"]);
    let paused = wait_run(&home, "slow", "paused");
    assert_eq!(
        paused["phases"][2]["status"], "pending",
        "phase 3 never started"
    );
    home.ctl_ok(&["run", "resume", "slow"]);
    wait_run(&home, "slow", "completed");
    // A finished run cannot be cancelled, and says so.
    let out = home.ctl(&["run", "cancel", "slow"]);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn a_looping_task_is_stopped_as_loop_capped_and_the_main_agent_is_told() {
    let fake = FakeLlm::start().unwrap();
    main_agent_rule(&fake);
    fake.add_rule(Rule::new(
        user("loop forever"),
        Reply::Tools(vec![ToolCall::new("list_dir", json!({"path": "."}))]),
    ));
    let home = fake_home(&fake, "");
    let _d = home.start_fake();
    home.create("looper");
    let answer = home.ctl_fails(&["project", "send", "looper", "loop forever", "--wait"]);
    assert!(answer.contains("times in a row"), "{answer}");
    let t = task_in_state(&home, "looper", "loop forever", "failed");
    assert_eq!(t["stop_reason"], "loop_capped");
    main_agent_heard(&fake, "loop_capped");
}

#[test]
fn an_over_budget_task_is_blocked_for_budget_and_the_main_agent_is_told() {
    let fake = FakeLlm::start().unwrap();
    main_agent_rule(&fake);
    fake.add_rule(
        Rule::new(
            user("spend a lot"),
            Reply::Tools(vec![ToolCall::new("list_dir", json!({"path": "."}))]),
        )
        .usage(pegasus_fakellm::UsageSpec {
            input: 5000,
            output: 100,
            cache_read: 0,
            cache_write: 0,
        }),
    );
    // A hard cap per task: $0.012 fits one call's worst case (about $0.009: its estimated
    // input and 4096 output tokens), so the first call runs and costs $0.0052; the second's
    // worst case on top of that does not fit, and it is refused before it is sent.
    let home = fake_home(&fake, "budget: {daily_usd: null, task_usd: 0.012}");
    let _d = home.start_fake();
    home.create("spender");
    let answer = home.ctl_fails(&["project", "send", "spender", "spend a lot", "--wait"]);
    assert!(answer.to_lowercase().contains("budget"), "{answer}");
    let t = task_in_state(&home, "spender", "spend a lot", "blocked");
    assert_eq!(t["stop_reason"], "budget");
    main_agent_heard(&fake, "budget");
    let task_requests = fake
        .requests()
        .iter()
        .filter(|r| !r.body["system"].to_string().contains("MainAgent"))
        .count();
    assert_eq!(
        task_requests, 1,
        "the over-budget call reached the provider"
    );
}

#[test]
fn the_watchdog_fails_the_task_of_a_silent_worker_and_restarts_it() {
    let fake = FakeLlm::start().unwrap();
    main_agent_rule(&fake);
    // The unanswered "hang" is still in the transcript when the next message comes, so the
    // more specific rule goes first. A hung command sends no event; a slow provider would not
    // count (the gateway's own timeout covers it).
    fake.add_rule(Rule::new(user("still there"), Reply::Text("yes".into())));
    fake.add_rule(Rule::new(
        user("hang"),
        Reply::Tools(vec![ToolCall::new("exec", json!({"command": "sleep 30"}))]),
    ));
    let home = fake_home(&fake, "watchdog: {silent_timeout_s: 2}");
    let _d = home.start_fake();
    let pid = home.create("quiet");
    home.ctl_ok(&["project", "send", "quiet", "please hang"]);
    let t = task_in_state(&home, "quiet", "please hang", "failed");
    assert_eq!(t["stop_reason"], "silent");
    let new_pid = home.ready_worker("quiet", Some(pid as u64));
    assert!(!alive(pid) && alive(new_pid));
    main_agent_heard(&fake, "silent");
    assert_eq!(
        home.ctl_ok(&["project", "send", "quiet", "still there?", "--wait"])
            .trim(),
        "yes"
    );
}

#[test]
fn restart_runs_an_interrupted_message_again_and_cancel_stops_a_running_one() {
    let fake = FakeLlm::start().unwrap();
    main_agent_rule(&fake);
    // First: a crash before the first answer leaves the request and the restart note in one
    // user message, and this rule must win then too.
    fake.add_rule(Rule::new(
        user("Pegasus restarted"),
        Reply::Text("picked the build up again".into()),
    ));
    fake.add_rule(Rule::new(
        user("long build"),
        Reply::Tools(vec![ToolCall::new("exec", json!({"command": "sleep 1"}))]),
    ));
    let home = fake_home(&fake, "");
    let _d = home.start_fake();
    let pid = home.create("builder");
    home.ctl_ok(&["project", "send", "builder", "long build"]);
    let running = task_in_state(&home, "builder", "long build", "running");
    // `status` shows the running task and its cognitive stage.
    poll(
        Duration::from_secs(10),
        "the task and its stage in status",
        || {
            let status = home.json(&["status"]);
            let row = status["projects"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["name"] == "builder")
                .cloned()?;
            (row["task"] == running["id"]
                && ["reasoning", "acting"].contains(&row["stage"].as_str()?))
            .then_some(())
        },
    );
    kill9(pid);
    home.ready_worker("builder", Some(pid as u64));
    // The message was acknowledged, so its task runs again after the restart (DESIGN.md §6).
    let done = task_in_state(&home, "builder", "long build", "done");
    assert_eq!(done["id"], running["id"]);
    assert_eq!(done["result_summary"], "picked the build up again");
    assert_eq!(
        transition_reasons(&home, running["id"].as_str().unwrap()),
        [
            "planned: spec v1 frozen",
            "ready: a message",
            "running: a message",
            "failed: process restarted",
            "ready: re-run after restart",
            "running: started",
            "done: answered"
        ]
    );

    // Cancel: the task loops on `sleep 1` until the agent sees the cancel at its next turn.
    home.ctl_ok(&["project", "send", "builder", "another long build"]);
    let running = task_in_state(&home, "builder", "another long build", "running");
    let id = running["id"].as_str().unwrap();
    home.ctl_ok(&["task", "cancel", id]);
    let t = task_in_state(&home, "builder", "another long build", "cancelled");
    assert_eq!(t["id"], id);
    // It stays cancelled: the agent stopped instead of finishing it.
    assert_eq!(
        home.json(&["task", "show", id])["task"]["state"],
        "cancelled"
    );
}

#[test]
fn a_graceful_suspend_lets_the_current_turn_finish_and_records_the_interruption() {
    let fake = FakeLlm::start().unwrap();
    main_agent_rule(&fake);
    fake.add_rule(Rule::new(
        user("Pegasus restarted"),
        Reply::Text("resumed".into()),
    ));
    fake.add_rule(Rule::new(
        user("keep working"),
        Reply::Tools(vec![ToolCall::new("exec", json!({"command": "sleep 0.3"}))]),
    ));
    let home = fake_home(&fake, "");
    let _d = home.start_fake();
    let pid = home.create("steady");
    home.ctl_ok(&["project", "send", "steady", "keep working"]);
    task_in_state(&home, "steady", "keep working", "running");
    // A second message arrives while the first runs: acknowledged, not yet taken up.
    home.ctl_ok(&["project", "send", "steady", "also the second thing"]);
    home.ctl_ok(&["project", "suspend", "steady"]);
    assert!(!alive(pid));
    let t = task_in_state(&home, "steady", "keep working", "failed");
    assert_eq!(t["stop_reason"], "interrupted by shutdown");
    let show = home.json(&["project", "show", "steady"]);
    assert_eq!(show["restarts"], 0, "a graceful stop is not a crash");
    // Back, the project runs both again by itself: the interrupted message's task once more,
    // and the waiting message as a task of its own (DESIGN.md §6: nothing acknowledged is dropped).
    home.ctl_ok(&["project", "resume", "steady"]);
    home.ready_worker("steady", None);
    let first = task_in_state(&home, "steady", "keep working", "done");
    assert_eq!(first["id"], t["id"]);
    assert_eq!(first["result_summary"], "resumed");
    let id = t["id"].as_str().unwrap();
    let reasons = transition_reasons(&home, id);
    assert!(
        reasons.ends_with(&[
            "failed: interrupted by shutdown".to_string(),
            "ready: re-run after restart".to_string(),
            "running: started".to_string(),
            "done: answered".to_string()
        ]),
        "{reasons:?}"
    );
    let second = task_in_state(&home, "steady", "second thing", "done");
    assert_eq!(second["result_summary"], "resumed");
    assert_eq!(tasks(&home, "steady").len(), 2);
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

/// Every transition of a task as `to: reason`, in order.
fn transition_reasons(home: &Home, id: &str) -> Vec<String> {
    home.json(&["task", "show", id])["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "transition")
        .map(|e| {
            format!(
                "{}: {}",
                e["to"].as_str().unwrap_or(""),
                e["reason"].as_str().unwrap_or("")
            )
        })
        .collect()
}

/// A role's `skills:` allowlist limits what its agent is shown and may load, and its
/// `model.timeout_s` stops its loop, killing the command in flight (DESIGN.md §8).
#[test]
fn a_role_is_held_to_its_skills_and_its_time_limit() {
    let fake = FakeLlm::start().unwrap();
    main_agent_rule(&fake);
    let marker = format!("sleep 39.{}", std::process::id());
    let role = |m: Match| Match::All(vec![Match::SystemContains("# Your Task".into()), m]);
    // The role agent: tries the skill it may not use, then the one it may, then a long command.
    fake.add_rule(Rule::new(
        role(Match::NoToolResultYet),
        Reply::Tools(vec![ToolCall::new(
            "use_skill",
            json!({"name": "secret-skill"}),
        )]),
    ));
    fake.add_rule(Rule::new(
        role(Match::LastToolResultContains("may not use".into())),
        Reply::Tools(vec![ToolCall::new(
            "use_skill",
            json!({"name": "open-skill"}),
        )]),
    ));
    fake.add_rule(Rule::new(
        role(Match::LastToolResultContains("OPEN-SKILL-BODY".into())),
        Reply::Tools(vec![ToolCall::new("exec", json!({"command": marker}))]),
    ));
    fake.add_rule(
        Rule::new(
            user("delegate"),
            Reply::Tools(vec![ToolCall::new(
                "spawn_subagent",
                json!({"task": "do the slow thing", "role": "slowpoke"}),
            )]),
        )
        .times(1),
    );
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("time limit of 1 s".into()),
        Reply::Text("the slowpoke ran out of time".into()),
    ));
    let home = fake_home(&fake, "");
    std::fs::create_dir_all(home.path().join("roles")).unwrap();
    std::fs::write(
        home.path().join("roles/slowpoke.md"),
        "---\nid: slowpoke\nname: Slowpoke\ndescription: Takes its time.\n\
         model: {timeout_s: 1}\ntools: [exec, use_skill]\nskills: [open-skill]\n---\n\
         You are slow.\n",
    )
    .unwrap();
    for (name, body) in [
        ("open-skill", "OPEN-SKILL-BODY"),
        ("secret-skill", "SECRET-BODY"),
    ] {
        let dir = home.path().join("skills").join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("SKILL.md"),
            format!("---\nname: {name}\ndescription: the {name}\n---\n{body}\n"),
        )
        .unwrap();
    }
    let _d = home.start_fake();
    home.create("slow");
    let answer = home.ctl_ok(&["project", "send", "slow", "please delegate", "--wait"]);
    assert_eq!(answer.trim(), "the slowpoke ran out of time");
    // The command in flight when time ran out was killed with the loop.
    poll(
        Duration::from_secs(5),
        "the role's command to be killed",
        || processes_with(&marker).is_empty().then_some(()),
    );
    let role_requests: Vec<String> = fake
        .requests()
        .into_iter()
        .filter(|r| r.body["system"].to_string().contains("# Your Task"))
        .map(|r| r.body.to_string())
        .collect();
    assert_eq!(role_requests.len(), 3, "{role_requests:#?}");
    // Shown only the skill it may use; refused the other; given the allowed one.
    assert!(role_requests[0].contains("open-skill") && !role_requests[0].contains("secret-skill"));
    assert!(!role_requests.iter().any(|r| r.contains("SECRET-BODY")));
    assert!(role_requests[2].contains("OPEN-SKILL-BODY"));
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}
