//! Issue 32 items 9 and 10, through the real binaries against the fake LLM over real HTTP:
//!
//! * a worker's Ready never waits on the model server: its context window (a model no table
//!   knows, on a server on this machine, which is asked) is learned in the background and
//!   remembered in `windows.state.json`; while the server holds its window endpoint for 30 s,
//!   every worker is Ready within a 5 s poll all the same, and its first model call uses a
//!   window that fits (the server's, remembered or learned; the default only once the server
//!   had its chance to say it);
//! * an answer that pegasusd was reading when it was killed is in the ledger exactly once,
//!   with the call id it sent and the request id the provider gave it, and a later restart
//!   does not count it again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use pegasus_fakellm::{FakeLlm, Fault, Match, Reply, Rule};
use std::{collections::HashMap, time::Duration};

/// The window the fake's `/props` reports: small enough that the agent's answer budget shows
/// it (a quarter of it, 4,000 tokens, under `agent.max_tokens`' 4,096).
const SERVER_WINDOW: u64 = 16_000;
const DEFAULT_MAX_TOKENS: u64 = 4096;

/// A home on the fake whose model no table knows (no `models:` entry): its server on
/// 127.0.0.1 is asked for its window.
fn home_on(fake: &FakeLlm) -> Home {
    Home::with_config(&format!(
        "default_model: fa/test-model\n\
         providers:\n  fa: {{kind: anthropic, base_url: \"{a}\", api_key_env: {FAKE_KEY_ENV}}}\n\
         prices:\n  \"fa/*\": {{input: 1.0, output: 2.0}}\n\
         llm: {{retry_base_ms: 10, max_retries: 1, timeout_s: 60}}\n\
         workers: {{shutdown_timeout_s: 5}}\n\
         agent: {{reflection: false}}\n",
        a = fake.anthropic_base_url(),
    ))
}

/// Every project's worker is ready within 5 s.
fn all_ready_within_5s(home: &Home, what: &str) {
    poll(Duration::from_secs(5), what, || {
        let list = home.json(&["project", "list"]);
        list.as_array()
            .unwrap()
            .iter()
            .all(|p| p["worker_state"] == "ready")
            .then_some(())
    });
}

/// The `max_tokens` of the model call that carried `text`.
fn max_tokens_of_call_with(fake: &FakeLlm, text: &str) -> u64 {
    let reqs = fake.requests();
    let req = reqs
        .iter()
        .find(|r| r.body["messages"].to_string().contains(text))
        .unwrap_or_else(|| panic!("no call carried {text:?}"));
    req.body["max_tokens"].as_u64().unwrap()
}

fn send_wait(home: &Home, project: &str, text: &str) -> String {
    home.ctl_ok(&["project", "send", project, text, "--wait"])
        .trim()
        .to_string()
}

#[test]
fn workers_are_ready_at_once_whatever_the_model_server_does() {
    let fake = FakeLlm::start().unwrap();
    main_agent_rule(&fake);
    fake.add_rule(Rule::new(Match::Any, Reply::Text("ok".into())));
    fake.report_window(Some(SERVER_WINDOW));
    // A slow server: every probe held 1 s (under the gateway's 3 s probe deadline).
    fake.hold_window_probes(Some(Duration::from_secs(1)));
    let home = home_on(&fake);
    let mut daemon = home.start_fake();
    for p in ["p1", "p2", "p3"] {
        home.ctl_ok(&["project", "create", p, "--goal", "g"]);
    }
    all_ready_within_5s(&home, "every worker ready while the server is asked");
    // The first call waited for the window the server was still saying: its answer budget is
    // a quarter of it.
    assert_eq!(send_wait(&home, "p1", "first call p1"), "ok");
    assert_eq!(
        max_tokens_of_call_with(&fake, "first call p1"),
        SERVER_WINDOW / 4
    );
    let remembered =
        std::fs::read_to_string(home.path().join("windows.state.json")).unwrap_or_default();
    assert!(
        remembered.contains("fa/test-model") && remembered.contains(&SERVER_WINDOW.to_string()),
        "{remembered}"
    );

    // Now the server holds its window endpoint for 30 s. A new pegasusd knows the window
    // from before: every worker is Ready within 5 s, and the first call fits the window
    // without waiting for the server.
    fake.hold_window_probes(Some(Duration::from_secs(30)));
    daemon.kill9();
    let mut daemon = home.start_fake();
    all_ready_within_5s(
        &home,
        "every worker ready while the server holds its window",
    );
    assert_eq!(send_wait(&home, "p2", "after restart p2"), "ok");
    assert_eq!(
        max_tokens_of_call_with(&fake, "after restart p2"),
        SERVER_WINDOW / 4
    );

    // Nothing remembered and the server still holding: Ready at once all the same; the first
    // call waits only the gateway's probe deadline, then goes on with the default window.
    daemon.kill9();
    std::fs::remove_file(home.path().join("windows.state.json")).unwrap();
    let _daemon = home.start_fake();
    all_ready_within_5s(&home, "every worker ready with nothing remembered");
    assert_eq!(send_wait(&home, "p3", "unknown window p3"), "ok");
    assert_eq!(
        max_tokens_of_call_with(&fake, "unknown window p3"),
        DEFAULT_MAX_TOKENS
    );
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

/// The ledger's lines by the call id each names (`X-Client-Request-Id` of its request).
fn ledger_by_call(home: &Home) -> HashMap<String, Vec<serde_json::Value>> {
    let read = pegasus_store::read_jsonl::<serde_json::Value>(
        &home.path().join("costs").join("ledger.jsonl"),
    )
    .unwrap();
    let mut by_call: HashMap<String, Vec<serde_json::Value>> = HashMap::new();
    for line in read.records {
        let call = line["call"].as_str().unwrap_or_default().to_string();
        by_call.entry(call).or_default().push(line);
    }
    by_call
}

/// Every answer the fake began has exactly one ledger line, found by the call id the request
/// carried, and that line names the answer's request id when it has one (it always does
/// unless pegasusd died before the answer's first event). No request id is on two lines.
fn every_answer_metered_once(fake: &FakeLlm, home: &Home) -> Vec<String> {
    let by_call = ledger_by_call(home);
    let mut problems = Vec::new();
    for a in fake.answered() {
        let Some(call) = a.client_request_id.as_deref() else {
            problems.push(format!(
                "answer {} came to a request without a call id",
                a.request_id
            ));
            continue;
        };
        match by_call.get(call).map(Vec::as_slice) {
            Some([line]) => {
                if let Some(id) = line["request_id"].as_str() {
                    if id != a.request_id {
                        problems.push(format!(
                            "{call}: line names {id}, the answer was {}",
                            a.request_id
                        ));
                    }
                }
            }
            Some(lines) => problems.push(format!(
                "{call} ({}): {} ledger lines",
                a.request_id,
                lines.len()
            )),
            None => problems.push(format!("{call} ({}): no ledger line", a.request_id)),
        }
    }
    let mut ids: HashMap<String, usize> = HashMap::new();
    for line in by_call.values().flatten() {
        if let Some(id) = line["request_id"].as_str() {
            *ids.entry(id.to_string()).or_default() += 1;
        }
    }
    for (id, n) in ids.into_iter().filter(|(_, n)| *n > 1) {
        problems.push(format!("request {id} is on {n} ledger lines"));
    }
    problems
}

#[test]
fn an_answer_arriving_when_pegasusd_is_killed_is_metered_once_with_its_ids() {
    let fake = FakeLlm::start().unwrap();
    main_agent_rule(&fake);
    // The answer streams slowly: pegasusd has its first event (and the answer's id) when it
    // is killed, and never its end.
    fake.add_rule(
        Rule::new(
            Match::LastUserTextContains("slow".into()),
            Reply::Fault(Fault::Paced {
                gap_ms: 700,
                then: Box::new(Reply::Text("a slow answer in several words".into())),
            }),
        )
        .times(1),
    );
    fake.add_rule(Rule::new(Match::Any, Reply::Text("ok".into())));
    let home = home_on(&fake);
    let mut daemon = home.start_fake();
    home.create("p");
    home.ctl_ok(&["project", "send", "p", "slow please"]);
    let slow = poll(Duration::from_secs(10), "the slow answer to begin", || {
        fake.answered().into_iter().next()
    });
    // The window of issue 32 item 10: the provider answered (and bills the call), pegasusd
    // has begun to read it (its id is in the call journal), no ledger line yet.
    let journal = home.path().join("costs").join("pending.jsonl");
    poll(
        Duration::from_secs(10),
        "the answer's id in the journal",
        || {
            std::fs::read_to_string(&journal)
                .unwrap_or_default()
                .contains(&slow.request_id)
                .then_some(())
        },
    );
    assert!(ledger_by_call(&home).is_empty(), "no line before the kill");
    daemon.kill9();

    // The next pegasusd meters it from the journal, once, with both ids; the message is
    // taken up again and answered.
    let mut daemon = home.start_fake();
    let call = slow
        .client_request_id
        .clone()
        .expect("the request named its call");
    let line = poll(Duration::from_secs(10), "the replayed ledger line", || {
        ledger_by_call(&home)
            .get(&call)
            .and_then(|l| l.first().cloned())
    });
    assert_eq!(line["request_id"], slow.request_id.as_str(), "{line}");
    assert_eq!(line["estimated"], true, "{line}");
    assert_eq!(line["project"], "p", "{line}");
    poll(
        Duration::from_secs(20),
        "the message to be answered again",
        || {
            home.json(&["status"])["projects"]
                .as_array()
                .unwrap()
                .iter()
                .all(|p| p["task"].is_null())
                .then_some(())
        },
    );
    // A clean stop and another start replay nothing twice.
    home.ctl_ok(&["stop"]);
    daemon.wait_exit(Duration::from_secs(30));
    let _daemon = home.start_fake();
    all_ready_within_5s(&home, "the worker back");
    let problems = every_answer_metered_once(&fake, &home);
    assert!(problems.is_empty(), "{problems:#?}");
    assert!(fake.answered().len() >= 2, "{:?}", fake.answered());
}
