//! The Telegram channel against the in-repo fake Bot API over real HTTP (SPEC §11): commands,
//! the MainAgent, allowed chats only, replies split under the limit, 429 honoured without
//! duplicates, the offset persisted across a restart, notifications pushed, the token never
//! logged.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use pegasus_fakellm::{FakeLlm, FakeTelegram, Match, Reply, Rule};
use std::time::Duration;

const TOKEN: &str = "7654321:SECRET-bot-token-x9z";
const CHAT: i64 = 42;

fn tg_home(fake: &FakeLlm, base_url: &str) -> Home {
    fake_home(
        fake,
        &format!(
            "telegram: {{token_env: PEGASUS_TG_TOKEN, base_url: \"{base_url}\", allowed_chats: [{CHAT}], poll_timeout_s: 1}}\n"
        ),
    )
}

fn start(home: &Home) -> Daemon {
    home.start_with_env(&[(FAKE_KEY_ENV, FAKE_KEY), ("PEGASUS_TG_TOKEN", TOKEN)])
}

/// Waits for a message to `CHAT` containing `needle`, after the first `skip` messages.
fn reply(tg: &FakeTelegram, skip: usize, needle: &str) -> String {
    poll(
        Duration::from_secs(20),
        &format!("a reply with {needle:?}"),
        || {
            tg.sent()
                .into_iter()
                .skip(skip)
                .find(|m| m.chat_id == CHAT && m.text.contains(needle))
                .map(|m| m.text)
        },
    )
}

fn logs(home: &Home) -> String {
    let mut all = String::new();
    for e in std::fs::read_dir(home.path().join("logs"))
        .unwrap()
        .flatten()
    {
        all.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
    }
    all
}

#[test]
fn commands_the_main_agent_limits_rate_limits_restarts_and_notifications() {
    let fake = FakeLlm::start().unwrap();
    let long: String = (0..300)
        .map(|i| format!("line {i} of a long answer\n"))
        .collect();
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("write a lot".into()),
        Reply::Text(long.clone()),
    ));
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("hello there".into()),
        Reply::Text("hi from tg".into()),
    ));
    fake.add_rule(Rule::new(
        Match::SystemContains("MainAgent".into()),
        Reply::Text("the MainAgent here".into()),
    ));
    let tg = FakeTelegram::start(TOKEN).unwrap();
    let home = tg_home(&fake, &tg.base_url());
    let mut daemon = start(&home);
    let worker = home.create("tg");

    tg.push_message(CHAT, "/status");
    assert!(reply(&tg, 0, "active projects").contains("tg"));
    tg.push_message(CHAT, "/projects");
    reply(&tg, 0, "• tg — active");
    tg.push_message(CHAT, "/send tg hello there");
    assert_eq!(reply(&tg, 0, "hi from tg"), "tg: hi from tg");
    tg.push_message(CHAT, "what is going on?");
    reply(&tg, 0, "the MainAgent here");
    tg.push_message(CHAT, "/send tg");
    reply(&tg, 0, "Usage: /send NAME TEXT");
    tg.push_message(CHAT, "/send nope hi");
    reply(&tg, 0, "nope");

    // A chat that is not allowed gets nothing.
    let before = tg.sent().len();
    tg.push_message(999, "/status");
    tg.push_message(CHAT, "/projects");
    reply(&tg, before, "• tg");
    assert!(tg.sent().iter().all(|m| m.chat_id == CHAT));

    // A long answer arrives in parts under the limit, in order, nothing lost.
    let before = tg.sent().len();
    tg.push_message(CHAT, "/send tg write a lot");
    let parts = poll(Duration::from_secs(20), "every part", || {
        let got: Vec<String> = tg.sent().into_iter().skip(before).map(|m| m.text).collect();
        (got.concat() == format!("tg: {long}")).then_some(got)
    });
    assert!(
        parts.len() >= 2 && parts.iter().all(|p| p.chars().count() <= 4000),
        "{}",
        parts.len()
    );

    // 429 with retry_after: waited out, then the message is sent once.
    tg.rate_limit_next_sends(1, 1);
    let (before, calls) = (tg.sent().len(), tg.send_calls());
    tg.push_message(CHAT, "/send tg hello there");
    reply(&tg, before, "hi from tg");
    assert_eq!(tg.sent().len(), before + 1, "exactly one copy");
    assert!(
        tg.send_calls() >= calls + 2,
        "the refused attempt and the one that went through"
    );

    // A crash is pushed to the allowed chat.
    kill9(worker);
    reply(&tg, 0, "[tg] worker crashed");

    // Restart: the offset was kept, so nothing is handled twice.
    daemon.kill9();
    let answered = tg.sent().len();
    let last = tg.push_message(CHAT, "/projects");
    let _d2 = start(&home);
    reply(&tg, answered, "• tg");
    let offset: i64 = std::fs::read_to_string(home.path().join("telegram.offset"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(offset, last + 1);
    // Give the poller a few rounds: still exactly one answer after the restart.
    poll(
        Duration::from_secs(10),
        "more polls after the restart",
        || (tg.offsets().iter().filter(|o| **o == last + 1).count() >= 3).then_some(()),
    );
    assert_eq!(
        tg.sent().len(),
        answered + 1,
        "{:?}",
        &tg.sent()[answered..]
    );

    // The token is in every URL, and in no log line.
    assert!(!logs(&home).contains("SECRET-bot-token"));
}

#[test]
fn a_failing_bot_api_is_retried_and_its_errors_never_show_the_token() {
    let fake = FakeLlm::start().unwrap();
    // Nothing listens on this port.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let home = tg_home(&fake, &format!("http://127.0.0.1:{port}"));
    let _d = start(&home);
    let log = poll(
        Duration::from_secs(20),
        "the getUpdates failure logged",
        || {
            let l = logs(&home);
            (l.matches("telegram: getUpdates failed").count() >= 2).then_some(l)
        },
    );
    assert!(!log.contains("SECRET-bot-token"), "{log}");
    assert!(
        !log.contains(&format!("127.0.0.1:{port}/bot")),
        "no URL in the log"
    );
}
