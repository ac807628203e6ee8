//! Sends that never run twice, and the channel every message records (DESIGN.md §11, issue 26
//! items 3 and 4), through the real daemon, workers, CLI, REST API and Telegram adapter: a
//! repeated client id is answered with the first message's id and runs nothing again, also
//! after kill -9 of the worker or of pegasusd between the save and the answer; the same id
//! with another text is refused (exit 1, HTTP 409).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use pegasus_fakellm::{FakeLlm, FakeTelegram, Fault, Match, Reply, Rule};
use serde_json::Value;
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

fn user(t: &str) -> Match {
    Match::LastUserTextContains(t.into())
}

/// The session's user records that say `text`.
fn records_saying(home: &Home, project: &str, text: &str) -> Vec<Value> {
    let path = home.project_dir(project).join("session/current.jsonl");
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| {
            r["role"] == "user"
                && r["content"]
                    .as_array()
                    .is_some_and(|c| c.iter().any(|b| b["text"] == text))
        })
        .collect()
}

/// The model calls of a project's agent (the MainAgent's left out) whose latest user text
/// holds `needle`: the runs of that message.
fn calls_with(fake: &FakeLlm, needle: &str) -> usize {
    fake.requests()
        .iter()
        .filter(|r| !r.body["system"].to_string().contains("MainAgent"))
        .filter(|r| last_user_text(&r.body).contains(needle))
        .count()
}

fn last_user_text(body: &Value) -> String {
    let Some(messages) = body["messages"].as_array() else {
        return String::new();
    };
    for m in messages.iter().rev().filter(|m| m["role"] == "user") {
        let text = match &m["content"] {
            Value::String(s) => s.clone(),
            Value::Array(blocks) => blocks
                .iter()
                .filter(|b| b["type"] == "text")
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n"),
            _ => String::new(),
        };
        if !text.is_empty() {
            return text;
        }
    }
    String::new()
}

/// The project's tasks whose title holds `needle`.
fn tasks_titled(home: &Home, project: &str, needle: &str) -> Vec<Value> {
    home.json(&["task", "list", project])
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["title"].as_str().unwrap_or("").contains(needle))
        .cloned()
        .collect()
}

fn send_json(home: &Home, args: &[&str]) -> Value {
    let mut full = vec!["project", "send"];
    full.extend_from_slice(args);
    home.json(&full)
}

#[test]
fn a_send_repeated_with_its_id_runs_once_and_the_id_with_another_text_is_refused() {
    let fake = answering_fake();
    let home = fake_home(&fake, "");
    let _d = home.start_fake();
    home.create("p");

    let first = send_json(&home, &["p", "where are you?", "--id", "k-1", "--wait"]);
    assert_eq!(first["reply"], "answered through pegasusd");
    let calls = calls_with(&fake, "where are you?");
    assert_eq!(calls, 1);
    // The same id again, with and without --wait: the first id (and reply), nothing runs.
    let again = send_json(&home, &["p", "where are you?", "--id", "k-1"]);
    assert_eq!(again["id"], first["id"]);
    let waited = send_json(&home, &["p", "where are you?", "--id", "k-1", "--wait"]);
    assert_eq!(
        (&waited["id"], &waited["reply"]),
        (&first["id"], &first["reply"])
    );
    // Another text with a used id: one line, exit 1, and nothing recorded.
    let refused = home.ctl_fails(&["project", "send", "p", "something else", "--id", "k-1"]);
    assert!(refused.contains("already used"), "{refused}");
    assert!(records_saying(&home, "p", "something else").is_empty());
    // A new id is a new message; no id at all is one too (the CLI makes one each time).
    let other = send_json(&home, &["p", "where are you?", "--id", "k-2"]);
    assert_ne!(other["id"], first["id"]);
    home.ctl_ok(&["project", "send", "p", "no id given"]);
    home.ctl_ok(&["project", "send", "p", "no id given"]);
    assert_eq!(records_saying(&home, "p", "no id given").len(), 2);

    // One record for k-1, carrying its id and its channel; after a restart of the worker
    // (the ids are rebuilt from the session), still the first id and no run.
    let recorded = records_saying(&home, "p", "where are you?");
    assert_eq!(recorded.len(), 2, "k-1 and k-2: {recorded:?}");
    assert_eq!(recorded[0]["client_id"], "k-1");
    assert_eq!(recorded[0]["id"], first["id"]);
    assert_eq!(
        (&recorded[0]["from"], &recorded[0]["channel"]),
        (&Value::from("cli"), &Value::from("cli"))
    );
    home.ctl_ok(&["project", "suspend", "p"]);
    home.ctl_ok(&["project", "resume", "p"]);
    home.ready_worker("p", None);
    let after = send_json(&home, &["p", "where are you?", "--id", "k-1", "--wait"]);
    assert_eq!(
        (&after["id"], &after["reply"]),
        (&first["id"], &first["reply"])
    );
    poll(Duration::from_secs(10), "k-2 to run", || {
        (calls_with(&fake, "where are you?") >= 2).then_some(())
    });
    assert_eq!(calls_with(&fake, "where are you?"), 2, "k-1 once, k-2 once");
    // A malformed id is refused before anything is sent.
    let long = "x".repeat(300);
    let bad = home.ctl_fails(&["project", "send", "p", "hi", "--id", &long]);
    assert!(bad.contains("--id"), "{bad}");
}

/// A fake whose first call about `what` never answers, and later ones answer `answer`.
fn stalling_fake(what: &str, answer: &str) -> FakeLlm {
    let fake = FakeLlm::start().unwrap();
    fake.require_api_key(Some(FAKE_KEY.into()));
    main_agent_rule(&fake);
    fake.add_rule(Rule::new(user(what), Reply::Fault(Fault::Stall)).times(1));
    fake.add_rule(Rule::new(
        Match::AnyTextContains(what.into()),
        Reply::Text(answer.into()),
    ));
    fake
}

#[test]
fn kill_9_of_the_worker_between_the_save_and_the_answer_then_a_retry_runs_nothing_twice() {
    let fake = stalling_fake("build it", "built");
    let home = fake_home(&fake, "");
    let _d = home.start_fake();
    let pid = home.create("p");

    // Saved and running (its model call hangs); the answer the sender got is as good as lost.
    let first = send_json(&home, &["p", "build it", "--id", "b-1"]);
    poll(Duration::from_secs(10), "the model call", || {
        (calls_with(&fake, "build it") == 1).then_some(())
    });
    kill9(pid);
    // The retry waits for the new worker; it gets the first id, and nothing new is recorded.
    let again = send_json(&home, &["p", "build it", "--id", "b-1"]);
    assert_eq!(again["id"], first["id"]);
    // The restart runs the interrupted message once more (DESIGN.md §6), and only that.
    poll(Duration::from_secs(15), "the re-run to finish", || {
        let t = tasks_titled(&home, "p", "build it");
        (t.len() == 1 && t[0]["state"] == "done").then_some(())
    });
    let waited = send_json(&home, &["p", "build it", "--id", "b-1", "--wait"]);
    assert_eq!(
        (&waited["id"], &waited["reply"]),
        (&first["id"], &Value::from("built"))
    );
    assert_eq!(
        calls_with(&fake, "build it"),
        2,
        "the hung call and the re-run"
    );
    assert_eq!(records_saying(&home, "p", "build it").len(), 1);
    assert_eq!(tasks_titled(&home, "p", "build it").len(), 1);
}

/// `pegasusctl project send ... --wait` started in the background; its output once it ends.
fn background_send(home: &Home, args: &[&str]) -> std::process::Child {
    Command::new(PEGASUSCTL)
        .arg("--home")
        .arg(home.path())
        .args(["project", "send"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn finished(mut child: std::process::Child) -> (Option<i32>, String, String) {
    let status = poll(Duration::from_secs(30), "the send to end", || {
        child.try_wait().unwrap()
    });
    let (mut out, mut err) = (String::new(), String::new());
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status.code(), out, err)
}

#[test]
fn a_waiting_send_whose_worker_is_killed_retries_itself_and_gets_the_one_runs_reply() {
    let fake = stalling_fake("deploy it", "deployed");
    let home = fake_home(&fake, "");
    let _d = home.start_fake();
    let pid = home.create("p");
    let child = background_send(&home, &["p", "deploy it", "--wait", "--id", "d-1"]);
    poll(Duration::from_secs(10), "the model call", || {
        (calls_with(&fake, "deploy it") == 1).then_some(())
    });
    kill9(pid);
    // The worker's end reaches the CLI as "it may have the message": it asks again with the
    // same id and waits for the re-run's reply, which is the one run.
    let (code, out, err) = finished(child);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.trim(), "deployed");
    assert_eq!(calls_with(&fake, "deploy it"), 2);
    assert_eq!(records_saying(&home, "p", "deploy it").len(), 1);
    assert_eq!(tasks_titled(&home, "p", "deploy it").len(), 1);
}

#[test]
fn a_waiting_send_whose_daemon_is_killed_retries_on_the_restarted_one_and_runs_once() {
    let fake = stalling_fake("ship it", "shipped");
    let home = fake_home(&fake, "");
    let mut d = home.start_fake();
    home.create("p");
    let child = background_send(&home, &["p", "ship it", "--wait", "--id", "s-1"]);
    poll(Duration::from_secs(10), "the model call", || {
        (calls_with(&fake, "ship it") == 1).then_some(())
    });
    // The connection drops with the daemon: the CLI cannot tell whether the message was
    // taken, so it waits for a daemon to ask again (as systemd restarts it).
    d.kill9();
    let _d = home.start_fake();
    let (code, out, err) = finished(child);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.trim(), "shipped");
    assert_eq!(
        calls_with(&fake, "ship it"),
        2,
        "the hung call and the re-run"
    );
    assert_eq!(records_saying(&home, "p", "ship it").len(), 1);
    assert_eq!(tasks_titled(&home, "p", "ship it").len(), 1);
}

/// One `POST /api/projects/p/messages` with the dashboard's token.
fn post_message(home: &Home, text: &str, key: Option<&str>) -> (u16, Value) {
    let addr = poll(Duration::from_secs(10), "the dashboard address", || {
        std::fs::read_to_string(home.path().join("run/dashboard.addr")).ok()
    });
    let addr = addr.trim();
    let token = std::fs::read_to_string(home.path().join("run/dashboard.token")).unwrap();
    let body = serde_json::json!({ "text": text }).to_string();
    let mut req = format!(
        "POST /api/projects/p/messages HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Authorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        token.trim(),
        body.len()
    );
    if let Some(key) = key {
        req.push_str(&format!("Idempotency-Key: {key}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(&body);
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    // A chunked body is one chunk here: its JSON is between the size line and the end.
    let json = body
        .find('{')
        .and_then(|start| body.rfind('}').map(|end| &body[start..=end]))
        .unwrap_or("null");
    (status, serde_json::from_str(json).unwrap())
}

#[test]
fn the_rest_api_takes_an_idempotency_key_and_answers_another_text_with_409() {
    let fake = answering_fake();
    let home = fake_home(&fake, "");
    let _d = home.start_fake();
    home.create("p");
    let (status, first) = post_message(&home, "from the web", Some("web-1"));
    assert_eq!(status, 200, "{first}");
    let (status, again) = post_message(&home, "from the web", Some("web-1"));
    assert_eq!((status, &again["id"]), (200, &first["id"]));
    let (status, conflict) = post_message(&home, "something else", Some("web-1"));
    assert_eq!(status, 409, "{conflict}");
    assert!(conflict["error"].as_str().unwrap().contains("already used"));
    // Without a key, every post is a message.
    let (_, one) = post_message(&home, "keyless", None);
    let (_, two) = post_message(&home, "keyless", None);
    assert_ne!(one["id"], two["id"]);
    let recorded = records_saying(&home, "p", "from the web");
    assert_eq!(recorded.len(), 1);
    assert_eq!(
        (
            &recorded[0]["channel"],
            &recorded[0]["from"],
            &recorded[0]["client_id"]
        ),
        (
            &Value::from("dashboard"),
            &Value::from("dashboard"),
            &Value::from("web-1")
        )
    );
    assert!(recorded[0].get("sender").is_none());
    poll(Duration::from_secs(10), "the message to run", || {
        (calls_with(&fake, "from the web") == 1).then_some(())
    });
    assert_eq!(records_saying(&home, "p", "keyless").len(), 2);
}

const TOKEN: &str = "7654321:SECRET-bot-token-s3nd";
const CHAT: i64 = 42;

#[test]
fn a_telegram_send_records_its_chat_and_an_update_seen_again_runs_once() {
    let fake = answering_fake();
    let tg = FakeTelegram::start(TOKEN).unwrap();
    let home = fake_home(
        &fake,
        &format!(
            "telegram: {{token_env: PEGASUS_TG_TOKEN, base_url: \"{}\", allowed_chats: [{CHAT}], poll_timeout_s: 1}}\n",
            tg.base_url()
        ),
    );
    // The offset cannot be saved (a folder is in its way), so a restart asks from the start
    // and Telegram sends the update again.
    std::fs::create_dir_all(home.path().join("telegram.offset")).unwrap();
    let env = [(FAKE_KEY_ENV, FAKE_KEY), ("PEGASUS_TG_TOKEN", TOKEN)];
    let mut d = home.start_with_env(&env);
    home.create("p");
    let update = tg.push_message(CHAT, "/send p where is it?");
    let reply = |n: usize| {
        poll(Duration::from_secs(20), "the bot's replies", || {
            let sent: Vec<String> = tg
                .sent()
                .into_iter()
                .filter(|m| m.chat_id == CHAT && m.text.starts_with("p: "))
                .map(|m| m.text)
                .collect();
            (sent.len() >= n).then_some(sent)
        })
    };
    assert_eq!(reply(1)[0], "p: answered through pegasusd");
    let recorded = records_saying(&home, "p", "where is it?");
    assert_eq!(recorded.len(), 1);
    assert_eq!(
        (
            &recorded[0]["from"],
            &recorded[0]["channel"],
            &recorded[0]["sender"],
            &recorded[0]["client_id"]
        ),
        (
            &Value::from(format!("telegram:{CHAT}")),
            &Value::from("telegram"),
            &Value::from(CHAT.to_string()),
            &Value::from(format!("telegram:{update}"))
        )
    );

    d.kill9();
    let polls = tg.offsets().len();
    let _d = home.start_with_env(&env);
    home.ready_worker("p", None);
    // The killed daemon's last poll (offset `update + 1`, which confirms the update) is over
    // once the new one has polled twice (each waits up to the 1 s long-poll timeout).
    poll(
        Duration::from_secs(10),
        "two polls of the new daemon",
        || {
            let from_start = tg.offsets()[polls..].iter().filter(|o| **o == 0).count();
            (from_start >= 2).then_some(())
        },
    );
    tg.push_again(update, CHAT, "/send p where is it?");
    // Answered again (the first run's reply), but not run again.
    assert_eq!(reply(2)[1], "p: answered through pegasusd");
    assert_eq!(calls_with(&fake, "where is it?"), 1);
    assert_eq!(records_saying(&home, "p", "where is it?").len(), 1);
}
