//! The Telegram channel against the in-repo fake Bot API over real HTTP (DESIGN.md §11): commands,
//! the MainAgent, allowed chats only, replies split under the limit, 429 honoured without
//! duplicates, the offset persisted across a restart, notifications pushed, the token never
//! logged; answers the poller cannot use (issue 22) are backed off, logged once, and recovered
//! from.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use pegasus_fakellm::telegram::BrokenUpdates;
use pegasus_fakellm::{FakeLlm, FakeTelegram, Match, Reply, Rule};
use std::time::{Duration, Instant};

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
    // Recorded in the project's session as sent from this chat, not from the CLI.
    let session = pegasus_store::load_session(&home.project_dir("tg")).unwrap();
    let from: Vec<String> = session
        .records
        .iter()
        .filter_map(|r| {
            match r {
            pegasus_store::SessionRecord::Message(m)
                if m.content.iter().any(|b| {
                    matches!(b, pegasus_store::ContentBlock::Text { text } if text == "hello there")
                }) =>
            {
                m.from.as_ref().map(|f| f.to_string())
            }
            _ => None,
        }
        })
        .collect();
    assert_eq!(from, [format!("telegram:{CHAT}")]);
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
            // One warning however often it is retried (the retries are counted against the
            // fake below, `BrokenUpdates::Hangup`).
            l.contains("telegram: getUpdates failed").then_some(l)
        },
    );
    assert!(!log.contains("SECRET-bot-token"), "{log}");
    assert!(
        !log.contains(&format!("127.0.0.1:{port}/bot")),
        "no URL in the log"
    );
}

/// Measures the poll rate while the fake answers `how`: waits (with a deadline) for the first
/// broken answer, counts the `getUpdates` requests over the next 3 s (a poller that does not
/// back off makes thousands), and returns the times of the requests from that first one on.
fn poll_rate_while(tg: &FakeTelegram, how: BrokenUpdates) -> Vec<Instant> {
    let switched = Instant::now();
    tg.break_updates(Some(how));
    // The poll in flight may be a good long poll (up to 1 s); the next one gets `how`.
    let first = poll(
        Duration::from_secs(20),
        &format!("a getUpdates answered {how:?}"),
        || {
            tg.get_updates_times()
                .into_iter()
                .find(|t| *t > switched + Duration::from_millis(50))
        },
    );
    let window = Duration::from_secs(3);
    // A bounded observation window for a negative check.
    std::thread::sleep((first + window).saturating_duration_since(Instant::now()));
    let polls: Vec<Instant> = tg
        .get_updates_times()
        .into_iter()
        .filter(|t| *t >= first)
        .collect();
    let in_window = polls.iter().filter(|t| **t <= first + window).count();
    assert!(
        in_window <= 4,
        "{how:?}: {in_window} getUpdates in 3 s: the poller does not back off"
    );
    polls
}

/// The fake answers well (again); a message is then handled.
fn handles_a_message(tg: &FakeTelegram, after: &str) {
    tg.break_updates(None);
    let before = tg.sent().len();
    tg.push_message(CHAT, "/help");
    poll(
        Duration::from_secs(90),
        &format!("a reply after {after}"),
        || {
            tg.sent()
                .into_iter()
                .skip(before)
                .find(|m| m.chat_id == CHAT && m.text.contains("Pegasus here"))
        },
    );
}

#[test]
fn unusable_get_updates_answers_are_backed_off_logged_once_and_recovered_from() {
    let fake = FakeLlm::start().unwrap();
    let tg = FakeTelegram::start(TOKEN).unwrap();
    let home = tg_home(&fake, &tg.base_url());
    let _d = start(&home);
    handles_a_message(&tg, "the start");

    // The answer of issue 22: `ok` with a `result` that is not a list.
    let polls = poll_rate_while(&tg, BrokenUpdates::ResultNotAList);
    // 1 s, then 2 s: the backoff grows.
    assert!(polls.len() >= 2, "retried: {polls:?}");
    assert!(
        polls[1] - polls[0] >= Duration::from_millis(900),
        "{polls:?}"
    );
    let log = poll(Duration::from_secs(10), "the warning", || {
        let l = logs(&home);
        l.contains("not a list").then_some(l)
    });
    let warned = log
        .lines()
        .filter(|l| l.contains("telegram: getUpdates failed") && l.contains("not a list"))
        .count();
    assert_eq!(warned, 1, "one warning, not one per poll:\n{log}");
    handles_a_message(&tg, &format!("{:?}", BrokenUpdates::ResultNotAList));
    poll(Duration::from_secs(10), "the recovery logged", || {
        logs(&home)
            .contains("telegram: getUpdates answers well again")
            .then_some(())
    });

    for how in [
        BrokenUpdates::MalformedJson,
        BrokenUpdates::HtmlErrorPage,
        BrokenUpdates::ServerError,
        BrokenUpdates::Conflict,
    ] {
        poll_rate_while(&tg, how);
        handles_a_message(&tg, &format!("{how:?}"));
    }
    let log = logs(&home);
    for needle in [
        "malformed JSON",
        "HTTP 502: the answer is not JSON",
        "HTTP 500: Internal Server Error",
        "HTTP 409: Conflict",
    ] {
        assert_eq!(
            log.lines().filter(|l| l.contains(needle)).count(),
            1,
            "{needle}:\n{log}"
        );
    }
    assert!(!log.contains("SECRET-bot-token"), "{log}");
}

#[test]
fn rate_limits_hangups_eager_and_stale_answers_are_backed_off_too() {
    let fake = FakeLlm::start().unwrap();
    let tg = FakeTelegram::start(TOKEN).unwrap();
    let home = tg_home(&fake, &tg.base_url());
    let _d = start(&home);
    handles_a_message(&tg, "the start");

    // `retry_after` is honoured: 2 s, though the backoff alone would wait 1 s.
    let polls = poll_rate_while(&tg, BrokenUpdates::RateLimited(2));
    assert!(polls.len() >= 2, "retried: {polls:?}");
    assert!(
        polls[1] - polls[0] >= Duration::from_millis(1900),
        "{polls:?}"
    );
    handles_a_message(&tg, &format!("{:?}", BrokenUpdates::RateLimited(2)));

    for how in [
        BrokenUpdates::Hangup,
        BrokenUpdates::EmptyAtOnce,
        BrokenUpdates::StaleUpdates,
    ] {
        poll_rate_while(&tg, how);
        handles_a_message(&tg, &format!("{how:?}"));
    }
    let log = logs(&home);
    for needle in ["rate limited", "at once", "none is new"] {
        assert_eq!(
            log.lines()
                .filter(|l| l.contains("telegram: getUpdates failed") && l.contains(needle))
                .count(),
            1,
            "{needle}:\n{log}"
        );
    }
    // Nothing stale or without an id was handled: only the replies to /help went out.
    assert!(
        tg.sent().iter().all(|m| m.text.contains("Pegasus here")),
        "{:?}",
        tg.sent()
    );
    assert!(!log.contains("SECRET-bot-token"), "{log}");
}

/// What the bot answered to press `id`, once it has.
fn answer_to(tg: &FakeTelegram, id: &str) -> String {
    poll(
        Duration::from_secs(20),
        &format!("an answer to press {id}"),
        || {
            tg.presses()
                .into_iter()
                .find(|p| p.id == id)
                .and_then(|p| p.answer)
                .map(|a| a.text.unwrap_or_default())
        },
    )
}

/// The one waiting approval request, once there is one that is not `not`.
fn waiting_request(home: &Home, not: &[String]) -> serde_json::Value {
    poll(Duration::from_secs(30), "a waiting approval", || {
        let list = home.json(&["approvals"]);
        list.as_array()?
            .iter()
            .find(|r| {
                r["id"]
                    .as_str()
                    .is_some_and(|id| !not.iter().any(|n| n == id))
            })
            .cloned()
    })
}

/// Waits for the task of approval `request` to end `done`.
fn task_done(home: &Home, request: &serde_json::Value) {
    let task = request["task"].as_str().unwrap();
    poll(
        Duration::from_secs(30),
        &format!("task {task} done"),
        || (home.json(&["task", "show", task])["task"]["state"] == "done").then_some(()),
    );
}

/// The messages to `CHAT` carrying buttons for request `id`.
fn offers(tg: &FakeTelegram, id: &str) -> Vec<pegasus_fakellm::SentMessage> {
    let approve = format!("approve:{id}");
    tg.sent()
        .into_iter()
        .filter(|m| {
            m.text.contains(id)
                && (m.buttons.is_empty()
                    || m.buttons
                        .iter()
                        .flatten()
                        .any(|b| b.callback_data.as_deref() == Some(approve.as_str())))
        })
        .collect()
}

#[test]
fn approvals_go_out_with_buttons_and_only_a_press_in_an_allowed_chat_answers_them() {
    use pegasus_fakellm::telegram::PressOn;
    use pegasus_fakellm::ToolCall;
    use serde_json::json;

    let fake = FakeLlm::start().unwrap();
    // Each prompt makes one `exec` call (its first model request; the session goes on, so
    // later prompts see earlier tool results), then says it is done.
    for (prompt, command) in [
        ("make the file", "touch approved.txt"),
        ("make another", "touch denied.txt"),
        ("make a third", "touch later.txt"),
    ] {
        fake.add_rule(
            Rule::new(
                Match::LastUserTextContains(prompt.into()),
                Reply::Tools(vec![ToolCall::new("exec", json!({"command": command}))]),
            )
            .times(1),
        );
        fake.add_rule(Rule::new(
            Match::LastUserTextContains(prompt.into()),
            Reply::Text(format!("done with {prompt}")),
        ));
    }
    let tg = FakeTelegram::start(TOKEN).unwrap();
    let home = fake_home(
        &fake,
        &format!(
            "telegram: {{token_env: PEGASUS_TG_TOKEN, base_url: \"{}\", allowed_chats: [{CHAT}], poll_timeout_s: 1}}\napprovals: {{exec: ask}}\n",
            tg.base_url()
        ),
    );
    let mut daemon = start(&home);
    home.create("ap");
    let workdir = home.project_dir("ap").join("workdir");
    // No `allowed_users`: any member of the allowed chat may approve, and the log says so once.
    poll(Duration::from_secs(10), "the allowed_users warning", || {
        (logs(&home)
            .matches("`telegram.allowed_users` is empty")
            .count()
            == 1)
            .then_some(())
    });

    // The request goes to the allowed chat once, as plain text with the whole command line
    // and two buttons naming it.
    home.ctl_ok(&["project", "send", "ap", "make the file"]);
    let first = waiting_request(&home, &[]);
    let id = first["id"].as_str().unwrap().to_string();
    let offer = poll(Duration::from_secs(20), "the request in the chat", || {
        offers(&tg, &id).into_iter().next()
    });
    assert_eq!(offer.chat_id, CHAT);
    assert!(
        offer.text.contains("touch approved.txt") && offer.text.contains("ap"),
        "{}",
        offer.text
    );
    let data: Vec<Vec<(String, Option<String>)>> = offer
        .buttons
        .iter()
        .map(|row| {
            row.iter()
                .map(|b| (b.text.clone(), b.callback_data.clone()))
                .collect()
        })
        .collect();
    assert_eq!(
        data,
        vec![vec![
            ("Approve".to_string(), Some(format!("approve:{id}"))),
            ("Deny".to_string(), Some(format!("deny:{id}"))),
        ]]
    );
    let on = PressOn::Message {
        chat_id: CHAT,
        message_id: offer.message_id,
    };

    // A press from a chat not allowed: "not allowed", a warning naming it, nothing changed.
    let q = tg.press(
        PressOn::Message {
            chat_id: 999,
            message_id: 1,
        },
        &format!("approve:{id}"),
    );
    assert_eq!(answer_to(&tg, &q), "not allowed");
    poll(Duration::from_secs(10), "the warning", || {
        logs(&home)
            .lines()
            .any(|l| {
                l.contains("WARN")
                    && l.contains("chat 999")
                    && l.contains("not in telegram.allowed_chats")
            })
            .then_some(())
    });
    // A press whose message is gone (inline mode) and one with data Pegasus never made: answered,
    // nothing changed.
    let q = tg.press(PressOn::Inline, &format!("approve:{id}"));
    assert!(answer_to(&tg, &q).contains("not available"));
    let q = tg.press(on, "approve:../../etc");
    assert_eq!(answer_to(&tg, &q), "unknown button");
    assert_eq!(
        home.json(&["approvals"])[0]["id"],
        id.as_str(),
        "still waiting"
    );
    assert!(!workdir.join("approved.txt").exists());

    // Approve from the allowed chat: answered with the daemon's line, the call runs, the task
    // goes on, the buttons go away.
    let q = tg.press(on, &format!("approve:{id}"));
    let said = answer_to(&tg, &q);
    assert!(said.contains("approved") && said.contains(&id), "{said}");
    poll(
        Duration::from_secs(30),
        "the approved command's file",
        || workdir.join("approved.txt").exists().then_some(()),
    );
    task_done(&home, &first);
    poll(Duration::from_secs(20), "the buttons removed", || {
        tg.sent()
            .iter()
            .any(|m| m.message_id == offer.message_id && m.buttons.is_empty())
            .then_some(())
    });
    // Pressed again: the first answer stands.
    let q = tg.press(on, &format!("deny:{id}"));
    let said = answer_to(&tg, &q);
    assert!(said.contains("already answered"), "{said}");

    // A second request, sent through a 429 (waited out, sent once) and denied: the model is
    // told so, the command never runs.
    tg.rate_limit_next_sends(1, 1);
    home.ctl_ok(&["project", "send", "ap", "make another"]);
    let second = waiting_request(&home, std::slice::from_ref(&id));
    let id2 = second["id"].as_str().unwrap().to_string();
    let offer2 = poll(Duration::from_secs(20), "the second request", || {
        offers(&tg, &id2).into_iter().next()
    });
    let q = tg.press(
        PressOn::Message {
            chat_id: CHAT,
            message_id: offer2.message_id,
        },
        &format!("deny:{id2}"),
    );
    assert!(answer_to(&tg, &q).contains("denied"));
    poll(
        Duration::from_secs(30),
        "the denial seen by the model",
        || {
            fake.requests()
                .iter()
                .any(|r| r.body.to_string().contains("denied by the user"))
                .then_some(())
        },
    );
    assert!(!workdir.join("denied.txt").exists());
    task_done(&home, &second);

    // A third, left waiting across a restart of pegasusd: not sent again; answered from the
    // CLI afterwards, its buttons go away.
    home.ctl_ok(&["project", "send", "ap", "make a third"]);
    let third = waiting_request(&home, &[id.clone(), id2.clone()]);
    let id3 = third["id"].as_str().unwrap().to_string();
    let offer3 = poll(Duration::from_secs(20), "the third request", || {
        offers(&tg, &id3).into_iter().next()
    });
    // Recorded as sent (a kill between Telegram's answer and this write would send it again:
    // the one window DESIGN.md's "never twice" leaves, see pegasus-telegram's approvals).
    poll(
        Duration::from_secs(10),
        "the third request recorded as sent",
        || {
            std::fs::read_to_string(home.path().join("telegram.approvals"))
                .unwrap_or_default()
                .contains(&format!("{id3} {CHAT} {}", offer3.message_id))
                .then_some(())
        },
    );
    daemon.kill9();
    let looked = logs(&home).matches("waiting approvals looked over").count();
    let _d2 = start(&home);
    poll(
        Duration::from_secs(20),
        "the approvals looked over after the restart",
        || (logs(&home).matches("waiting approvals looked over").count() > looked).then_some(()),
    );
    assert_eq!(
        offers(&tg, &id3).len(),
        1,
        "sent once: {:?}",
        offers(&tg, &id3)
    );
    assert_eq!(offers(&tg, &id).len() + offers(&tg, &id2).len(), 2);
    home.ready_worker("ap", None);
    home.ctl_ok(&["approve", &id3]);
    poll(
        Duration::from_secs(30),
        "the approved third command",
        || workdir.join("later.txt").exists().then_some(()),
    );
    task_done(&home, &third);
    poll(
        Duration::from_secs(20),
        "the third request's buttons removed",
        || {
            tg.sent()
                .iter()
                .any(|m| m.message_id == offer3.message_id && m.buttons.is_empty())
                .then_some(())
        },
    );
    // Every press was answered; none twice.
    assert!(
        tg.presses().iter().all(|p| p.answer.is_some()),
        "{:?}",
        tg.presses()
    );
    assert!(!logs(&home).contains("SECRET-bot-token"));
}

/// Issue 32 (4): with `telegram.allowed_users`, a press counts only from one of them: another
/// member of the allowed chat is answered "not allowed" and nothing changes. The request's
/// message shows its command line escaped.
#[test]
fn only_an_allowed_user_approves_and_the_message_hides_nothing() {
    use pegasus_fakellm::telegram::PressOn;
    use pegasus_fakellm::ToolCall;
    use serde_json::json;

    const USER: i64 = 5_550_001;
    const OTHER: i64 = 5_550_002;
    let sneaky = "touch X #\r\x1b[2Kls -la \u{202e}\u{200b}";
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(
        Rule::new(
            Match::LastUserTextContains("sneak".into()),
            Reply::Tools(vec![ToolCall::new("exec", json!({"command": sneaky}))]),
        )
        .times(1),
    );
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("sneak".into()),
        Reply::Text("done sneaking".into()),
    ));
    let tg = FakeTelegram::start(TOKEN).unwrap();
    let home = fake_home(
        &fake,
        &format!(
            "telegram: {{token_env: PEGASUS_TG_TOKEN, base_url: \"{}\", allowed_chats: [{CHAT}], allowed_users: [{USER}], poll_timeout_s: 1}}\napprovals: {{exec: ask}}\n",
            tg.base_url()
        ),
    );
    let _d = start(&home);
    home.create("ap");
    home.ctl_ok(&["project", "send", "ap", "sneak it in"]);
    let req = waiting_request(&home, &[]);
    let id = req["id"].as_str().unwrap().to_string();
    let offer = poll(Duration::from_secs(20), "the request in the chat", || {
        offers(&tg, &id).into_iter().next()
    });
    assert!(
        offer
            .text
            .contains("touch X #\\r\\x1b[2Kls -la \\u{202e}\\u{200b}"),
        "{}",
        offer.text
    );
    assert!(
        !offer.text.contains('\r')
            && !offer.text.contains('\x1b')
            && !offer.text.contains('\u{202e}')
            && !offer.text.contains('\u{200b}'),
        "{:?}",
        offer.text
    );
    let on = PressOn::Message {
        chat_id: CHAT,
        message_id: offer.message_id,
    };
    let q = tg.press_by(on, Some(OTHER), &format!("approve:{id}"));
    assert_eq!(answer_to(&tg, &q), "not allowed");
    poll(Duration::from_secs(10), "the warning", || {
        logs(&home)
            .lines()
            .any(|l| {
                l.contains("WARN")
                    && l.contains(&format!("user {OTHER}"))
                    && l.contains("not in telegram.allowed_users")
            })
            .then_some(())
    });
    assert_eq!(
        home.json(&["approvals"])[0]["id"],
        id.as_str(),
        "still waiting"
    );
    assert!(!logs(&home).contains("`telegram.allowed_users` is empty"));
    let q = tg.press_by(on, Some(USER), &format!("deny:{id}"));
    let said = answer_to(&tg, &q);
    assert!(said.contains("denied") && said.contains(&id), "{said}");
    task_done(&home, &req);
    assert!(!home.project_dir("ap").join("workdir/X").exists());
}
