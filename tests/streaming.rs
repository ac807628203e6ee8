//! Streaming end to end (DESIGN.md §5, issue #9 item 6): the model's text goes fake provider (SSE)
//! → gateway → worker → pegasusd's bus → `pegasusctl project send --wait`, `project log -f`
//! and `chat`, while the turn is still running; the session gets the finished message once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use pegasus_fakellm::{FakeLlm, Fault, Match, Reply, Rule};
use std::time::Duration;

const STORY: &str = "Once upon a time there was a daemon that never lost a message.";

/// A reply streamed slowly: 200 ms between SSE events.
fn slow(text: &str) -> Reply {
    Reply::Fault(Fault::Paced {
        gap_ms: 200,
        then: Box::new(Reply::Text(text.into())),
    })
}

fn running_tasks(home: &Home, project: &str) -> usize {
    home.json(&["task", "list", project])
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["state"] == "running")
        .count()
}

#[test]
fn send_wait_and_log_follow_print_the_text_while_the_turn_runs() {
    let fake = FakeLlm::start().unwrap();
    main_agent_rule(&fake);
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("tell a story".into()),
        slow(STORY),
    ));
    let home = fake_home(&fake, "");
    let _d = home.start_fake();
    home.create("tp");
    let (mut follower, followed) = spawn_ctl(&home, &["project", "log", "tp", "-f"]);
    // The follower is subscribed once it printed the (empty) log and connected; give the
    // first message something to show first.
    let (mut sender, sent) = spawn_ctl(
        &home,
        &[
            "project",
            "send",
            "tp",
            "tell a story",
            "--wait",
            "--stream",
        ],
    );
    // The first words arrive while the task is still running.
    poll(
        Duration::from_secs(10),
        "streamed text at send --wait",
        || sent.lock().unwrap().contains("Once").then_some(()),
    );
    let partial = sent.lock().unwrap().clone();
    assert!(
        running_tasks(&home, "tp") == 1,
        "the text came before the turn ended"
    );
    assert!(
        !partial.contains("message."),
        "only a part so far: {partial}"
    );
    poll(Duration::from_secs(10), "streamed text at log -f", || {
        followed.lock().unwrap().contains("… Once").then_some(())
    });

    let status = poll(Duration::from_secs(15), "send --wait to exit", || {
        sender.try_wait().unwrap()
    });
    assert!(status.success());
    // The whole answer, once: the stream showed it, so it is not printed again.
    assert_eq!(sent.lock().unwrap().trim(), STORY);
    // log -f then shows the finished message from the session.
    poll(
        Duration::from_secs(10),
        "the recorded answer at log -f",
        || {
            let out = followed.lock().unwrap().clone();
            (out.matches(STORY).count() >= 2).then_some(())
        },
    );
    let _ = follower.kill();
    let _ = follower.wait();

    // Deltas never reach the session: the answer is in it exactly once.
    let session =
        std::fs::read_to_string(home.project_dir("tp").join("session/current.jsonl")).unwrap();
    assert_eq!(session.matches(STORY).count(), 1, "{session}");
    assert!(!session.contains("text_delta"));
    assert!(fake.requests().iter().all(|r| r.stream));
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

#[test]
fn without_a_terminal_send_wait_prints_only_the_answer() {
    let fake = FakeLlm::start().unwrap();
    main_agent_rule(&fake);
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("tell a story".into()),
        slow(STORY),
    ));
    let home = fake_home(&fake, "");
    let _d = home.start_fake();
    home.create("tp");
    let out = home.ctl_ok(&["project", "send", "tp", "tell a story", "--wait"]);
    assert_eq!(out, format!("{STORY}\n"));
}

#[test]
fn chat_streams_the_main_agents_answer() {
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(
        Match::All(vec![
            Match::SystemContains("MainAgent".into()),
            Match::LastUserTextContains("how are things".into()),
        ]),
        slow("All projects are running and nothing is over budget."),
    ));
    main_agent_rule(&fake);
    let home = fake_home(&fake, "");
    let _d = home.start_fake();
    let (mut chat, seen) = spawn_ctl(&home, &["chat", "how are things", "--stream"]);
    poll(Duration::from_secs(10), "the first streamed words", || {
        seen.lock().unwrap().contains("All").then_some(())
    });
    assert!(
        !seen.lock().unwrap().contains("budget."),
        "the answer was still arriving"
    );
    let status = poll(Duration::from_secs(15), "chat to exit", || {
        chat.try_wait().unwrap()
    });
    assert!(status.success());
    assert_eq!(
        seen.lock().unwrap().trim(),
        "All projects are running and nothing is over budget."
    );
}
