//! Notices to the MainAgent cannot start a chain of model calls (issue 37): with a model that
//! fails every call, one failed project task costs at most one MainAgent call; the MainAgent is
//! never told of its own tasks; a notice it holds is announced to the user (the bus, `status`).
//! Real pegasusd and workers, the fake provider's requests and the ledger counted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use pegasus_fakellm::{FakeLlm, Fault, Match, Reply, Rule};
use std::time::Duration;

/// A fake that refuses every call with a 400, as a provider does for an account out of
/// credit (not retried by the gateway).
fn failing_fake() -> FakeLlm {
    let fake = FakeLlm::start().unwrap();
    fake.require_api_key(Some(FAKE_KEY.into()));
    fake.add_rule(Rule::new(
        Match::Any,
        Reply::Fault(Fault::Status {
            code: 400,
            message: "Your credit balance is too low to access the Anthropic API.".into(),
            retry_after_s: None,
        }),
    ));
    fake
}

/// The MainAgent's model calls so far, as request bodies.
fn main_calls(fake: &FakeLlm) -> Vec<String> {
    fake.requests()
        .iter()
        .filter(|r| r.body["system"].to_string().contains("MainAgent"))
        .map(|r| r.body.to_string())
        .collect()
}

/// Ledger lines of the MainAgent (project `main`).
fn main_ledger_lines(home: &Home) -> usize {
    std::fs::read_to_string(home.path().join("costs").join("ledger.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["project"] == "main")
        .count()
}

/// The texts the MainAgent's session received (answered or held).
fn main_inbound(home: &Home) -> String {
    std::fs::read_to_string(
        home.path()
            .join("main")
            .join("session")
            .join("current.jsonl"),
    )
    .unwrap_or_default()
}

fn pegasusd_log(home: &Home) -> String {
    let mut all = String::new();
    for entry in std::fs::read_dir(home.path().join("logs"))
        .unwrap()
        .flatten()
    {
        if entry.file_name().to_string_lossy().starts_with("pegasusd") {
            all.push_str(&std::fs::read_to_string(entry.path()).unwrap_or_default());
        }
    }
    all
}

#[test]
fn a_failing_model_costs_one_main_agent_call_per_failure_at_most_and_held_notices_are_told() {
    let fake = failing_fake();
    let home = fake_home(&fake, "");
    let _d = home.start_fake();
    home.create("web");

    // One failed project task: the MainAgent is told, tries once, fails.
    let first = home.ctl(&["project", "send", "web", "first question", "--wait"]);
    assert_eq!(first.status.code(), Some(1), "{first:?}");
    poll(
        Duration::from_secs(20),
        "the MainAgent's one failed run",
        || {
            (main_calls(&fake).len() == 1 && pegasusd_log(&home).contains("MainAgent: "))
                .then_some(())
        },
    );

    // A second failure is held (a failed run for project messages is not tried again by the
    // next one), and the user is told: `status` lists it.
    let second = home.ctl(&["project", "send", "web", "second question", "--wait"]);
    assert_eq!(second.status.code(), Some(1), "{second:?}");
    let line = poll(Duration::from_secs(20), "the held notice in status", || {
        let status = home.json(&["status"]);
        status["waiting"]
            .as_array()?
            .iter()
            .filter_map(|w| w.as_str())
            .find(|w| w.starts_with("MainAgent: "))
            .map(str::to_string)
    });
    assert!(
        line.contains("held until you speak") && line.contains("pegasusctl chat"),
        "{line}"
    );
    let human = home.ctl_ok(&["status"]);
    assert!(human.contains("held until you speak"), "{human}");
    poll(
        Duration::from_secs(10),
        "the held notice in the MainAgent's session",
        || {
            (main_inbound(&home)
                .matches("of project web stopped")
                .count()
                == 2)
                .then_some(())
        },
    );

    // Never told of its own task; one model call and at most one ledger line in all.
    let inbound = main_inbound(&home);
    assert!(
        !inbound.contains("of project main stopped"),
        "the MainAgent was told of its own task: {inbound}"
    );
    assert_eq!(main_calls(&fake).len(), 1, "{:?}", main_calls(&fake));
    assert!(main_ledger_lines(&home) <= 1);

    // The user speaks: the hold ends with that run, which sees the held notice.
    fake.clear_rules();
    main_agent_rule(&fake);
    let answer = home.ctl_ok(&["chat", "what happened?"]);
    assert!(answer.contains("noted"), "{answer}");
    let calls = main_calls(&fake);
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert!(calls[1].contains("of project web stopped"), "{}", calls[1]);
    let status = home.json(&["status"]);
    assert!(
        !status["waiting"].to_string().contains("MainAgent"),
        "{status}"
    );
}

#[test]
fn the_name_main_is_the_main_agents() {
    let fake = failing_fake();
    let home = fake_home(&fake, "");
    let _d = home.start_fake();
    let line = home.ctl_fails(&["project", "create", "main", "--goal", "g"]);
    assert!(
        line.contains("MainAgent") && line.contains("another"),
        "{line}"
    );
}
