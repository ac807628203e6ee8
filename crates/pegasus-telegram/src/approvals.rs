//! Tool-call approvals over Telegram (DESIGN.md §11): each request the bus announces goes to every
//! allowed chat as one message with inline Approve / Deny buttons, and a press of one of them
//! answers the request through the front door, as `pegasusctl approve` / `deny` would, recorded
//! as from `telegram:<chat>`.
//!
//! Sent once. `<home>/telegram.approvals` lists what was sent (`ID CHAT MESSAGE_ID`, one line
//! per request and chat), written atomically after each message went through. At start (and
//! after the bus dropped events for this reader) the waiting requests are listed and only those
//! not in the file are sent, so a restart of pegasusd sends nothing twice; a request that was
//! never sent (the daemon died before it went through, or Telegram refused it) is sent then,
//! because a request nobody sees blocks its task until the timeout. The one window left: a
//! crash between Telegram's answer and the write repeats that one message at the next start.
//! A request answered (from anywhere), expired or withdrawn loses its buttons
//! (`editMessageReplyMarkup`) and leaves the file; at start so do the ones answered while
//! pegasusd was down.
//!
//! A press counts only when `callback_query.message.chat.id` is an allowed chat (an
//! inaccessible message still names its chat; a press with no message at all, from a message
//! sent in inline mode, names none and does not count) and, when `telegram.allowed_users` is
//! set, `callback_query.from.id` is one of them. Every press is answered with
//! `answerCallbackQuery`: the daemon's one line, `not allowed` for a refused chat (and a
//! warning naming it in the log), or why the press did nothing.

use crate::{split, Bot};
use pegasus_proto::ctl::{ApprovalInfo, CtlRequest, CtlResponse};
use pegasus_proto::{BusBody, Channel, WorkerEvent};
use pegasus_supervisor::front_door::{self as bus, Received};
use pegasus_supervisor::FrontDoor;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

/// The file of sent requests, under the home.
const SENT_FILE: &str = "telegram.approvals";
/// Largest `callback_data` the Bot API takes, in bytes.
const MAX_DATA: usize = 64;
/// Largest `answerCallbackQuery` text the Bot API takes, in characters.
const MAX_ANSWER_TEXT: usize = 200;

/// What was sent: request id → chat → the message holding the buttons.
struct Sent {
    path: PathBuf,
    map: BTreeMap<String, BTreeMap<i64, i64>>,
}

impl Sent {
    fn load(path: PathBuf) -> Sent {
        let mut map: BTreeMap<String, BTreeMap<i64, i64>> = BTreeMap::new();
        let text = match pegasus_store::read_text_limited(&path, 4 << 20) {
            Ok(t) => t,
            Err(e) => {
                if path.exists() {
                    tracing::warn!("telegram: cannot read {}: {e}; waiting approvals already sent may be sent again", path.display());
                }
                String::new()
            }
        };
        let mut bad = 0;
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let mut f = line.split_whitespace();
            match (
                f.next(),
                f.next().and_then(|c| c.parse().ok()),
                f.next().and_then(|m| m.parse().ok()),
            ) {
                (Some(id), Some(chat), Some(msg)) => {
                    map.entry(id.to_string()).or_default().insert(chat, msg);
                }
                _ => bad += 1,
            }
        }
        if bad > 0 {
            tracing::warn!(
                "telegram: {bad} unreadable lines in {} skipped",
                path.display()
            );
        }
        Sent { path, map }
    }

    fn has(&self, id: &str, chat: i64) -> bool {
        self.map.get(id).is_some_and(|c| c.contains_key(&chat))
    }

    fn add(&mut self, id: &str, chat: i64, message: i64) {
        self.map
            .entry(id.to_string())
            .or_default()
            .insert(chat, message);
        self.save();
    }

    /// Forgets `id`; its messages, to take their buttons away.
    fn take(&mut self, id: &str) -> BTreeMap<i64, i64> {
        let out = self.map.remove(id).unwrap_or_default();
        if !out.is_empty() {
            self.save();
        }
        out
    }

    fn save(&self) {
        let mut text = String::new();
        for (id, chats) in &self.map {
            for (chat, msg) in chats {
                text.push_str(&format!("{id} {chat} {msg}\n"));
            }
        }
        if let Err(e) = pegasus_store::write_atomic(&self.path, text.as_bytes()) {
            tracing::warn!(
                "telegram: cannot save which approvals were sent ({e}); after a restart they may be sent again"
            );
        }
    }
}

/// Sends each waiting request to the allowed chats, once, and takes the buttons of answered
/// ones away, until the daemon stops.
pub(crate) async fn push(sup: FrontDoor, bot: Arc<Bot>) {
    if bot.allowed.is_empty() {
        return;
    }
    // Subscribed before listing: a request asked in between is both listed and announced, and
    // the file keeps it from going out twice.
    let mut rx = sup.subscribe();
    let mut sent = Sent::load(sup.home().root().join(SENT_FILE));
    // Answered (or gone) in this daemon's life: never offered again, whatever the bus repeats.
    let mut closed = BTreeSet::new();
    catch_up(&sup, &bot, &mut sent, &closed).await;
    loop {
        let got = tokio::select! {
            _ = sup.shutdown().cancelled() => return,
            got = bus::next(&mut rx) => got,
        };
        match got {
            Some(Received::Event(e)) => match &e.body {
                BusBody::Worker(WorkerEvent::Approval { request })
                    if !closed.contains(&request.id) =>
                {
                    offer(&bot, &mut sent, request).await;
                }
                BusBody::Worker(WorkerEvent::ApprovalAnswered { id, decision, .. }) => {
                    closed.insert(id.clone());
                    close(&bot, &mut sent, id, decision).await;
                }
                _ => {}
            },
            Some(Received::Lagged(n)) => {
                tracing::info!(
                    "telegram: {n} bus events missed; looking for approvals not sent yet"
                );
                catch_up(&sup, &bot, &mut sent, &closed).await;
            }
            None => return,
        }
    }
}

/// Sends the waiting requests not sent yet, and closes the sent ones no longer waiting.
async fn catch_up(sup: &FrontDoor, bot: &Bot, sent: &mut Sent, closed: &BTreeSet<String>) {
    let req = CtlRequest::Approvals { project: None };
    let waiting = match sup.request(&Channel::Telegram(None), req).await {
        CtlResponse::Approvals(list) => list,
        other => {
            return tracing::warn!(
                "telegram: cannot list the waiting approvals: {}",
                pegasus_supervisor::front_door::refusal(other)
            )
        }
    };
    let ids: BTreeSet<&str> = waiting.iter().map(|r| r.id.as_str()).collect();
    let gone: Vec<String> = sent
        .map
        .keys()
        .filter(|id| !ids.contains(id.as_str()))
        .cloned()
        .collect();
    for id in gone {
        close(bot, sent, &id, "answered").await;
    }
    let before = sent.map.len();
    for request in waiting.iter().filter(|r| !closed.contains(&r.id)) {
        offer(bot, sent, request).await;
    }
    tracing::info!(
        waiting = waiting.len(),
        newly_sent = sent.map.len().saturating_sub(before),
        "telegram: waiting approvals looked over"
    );
}

/// The message of a request: plain text (no `parse_mode`, so nothing in the command line is
/// taken as markup), everything from the request escaped (control, escape, bidi and
/// zero-width characters written out: what the person reads is what runs).
pub(crate) fn message(r: &ApprovalInfo) -> String {
    use pegasus_proto::shown::escape;
    let r = &ApprovalInfo {
        id: escape(&r.id),
        project: escape(&r.project),
        task: escape(&r.task),
        tool: escape(&r.tool),
        summary: escape(&r.summary),
        asked_at: escape(&r.asked_at),
        input: String::new(),
    };
    let task = if r.task.is_empty() {
        String::new()
    } else {
        format!(", task {}", r.task)
    };
    // `summary` is the whole command line for exec, the tool and its arguments for another
    // tool, a sentence for a merge.
    let what = match r.tool.as_str() {
        "exec" => "exec wants to run:".to_string(),
        "merge" => "a merge waits:".to_string(),
        tool => format!("{tool} wants to be called:"),
    };
    format!(
        "Approval needed in {}{task}\n{what}\n{}\n\n{} — approve or deny with the buttons (or `pegasusctl approve {}` / `deny {}`).",
        r.project, r.summary, r.id, r.id, r.id
    )
}

/// The buttons of request `id`, or `None` when its id does not fit in `callback_data`.
pub(crate) fn keyboard(id: &str) -> Option<Value> {
    let approve = format!("approve:{id}");
    let deny = format!("deny:{id}");
    (approve.len() <= MAX_DATA && deny.len() <= MAX_DATA).then(|| {
        json!({"inline_keyboard": [[
            {"text": "Approve", "callback_data": approve},
            {"text": "Deny", "callback_data": deny},
        ]]})
    })
}

/// Sends `request` to every allowed chat it was not sent to.
async fn offer(bot: &Bot, sent: &mut Sent, request: &ApprovalInfo) {
    let text = message(request);
    let markup = keyboard(&request.id);
    if markup.is_none() {
        tracing::warn!(id = %request.id, "telegram: the approval id is too long for a button; sent without buttons");
    }
    for &chat in &bot.allowed {
        if sent.has(&request.id, chat) {
            continue;
        }
        let parts = split(&text);
        let last = parts.len().saturating_sub(1);
        let mut holder = None;
        for (i, part) in parts.into_iter().enumerate() {
            let mut body = json!({"chat_id": chat, "text": part});
            if i == last {
                if let Some(m) = &markup {
                    body["reply_markup"] = m.clone();
                }
            }
            match bot.call_retrying("sendMessage", &body, chat).await {
                Some(result) => holder = result["message_id"].as_i64(),
                None => {
                    holder = None;
                    break;
                }
            }
        }
        match holder {
            Some(message_id) => {
                tracing::info!(id = %request.id, chat, "telegram: approval request sent");
                sent.add(&request.id, chat, message_id);
            }
            None => tracing::warn!(
                id = %request.id,
                chat,
                "telegram: the approval request did not go through; it is sent again at the next start"
            ),
        }
    }
}

/// Takes the buttons off request `id`'s messages (answered `decision`) and forgets it.
async fn close(bot: &Bot, sent: &mut Sent, id: &str, decision: &str) {
    for (chat, message_id) in sent.take(id) {
        let body = json!({"chat_id": chat, "message_id": message_id});
        match bot.call_retrying("editMessageReplyMarkup", &body, chat).await {
            Some(_) => tracing::info!(id, chat, decision, "telegram: approval buttons removed"),
            None => tracing::info!(id, chat, "telegram: the approval's buttons stay (a press now is answered by the daemon's refusal)"),
        }
    }
}

/// What a button's `callback_data` asks.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Action {
    Approve(String),
    Deny(String),
}

/// `approve:ID` / `deny:ID`, `ID` as approval ids are (letters, digits, `-`); anything else is
/// not a button Pegasus made.
pub(crate) fn parse_data(data: &str) -> Option<Action> {
    let (verb, id) = data.split_once(':')?;
    let id_ok = !id.is_empty()
        && id.len() <= MAX_DATA
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !id_ok {
        return None;
    }
    match verb {
        "approve" => Some(Action::Approve(id.to_string())),
        "deny" => Some(Action::Deny(id.to_string())),
        _ => None,
    }
}

/// The outcome of a press before any request is made: the chat it counts for, or the text to
/// answer with and the log line.
pub(crate) enum PressCheck {
    Counts { chat: i64, action: Action },
    Refused { text: &'static str, log: String },
}

/// Decides about a `callback_query` (DESIGN.md §11: `message.chat.id` must be an allowed chat, and
/// `from.id` an allowed user when `users` is not empty).
pub(crate) fn judge(q: &Value, allowed: &[i64], users: &[i64]) -> PressCheck {
    let from = q["from"]["id"].as_i64().unwrap_or(0);
    let Some(chat) = q["message"]["chat"]["id"].as_i64() else {
        return PressCheck::Refused {
            text: "this button's message is not available; use pegasusctl approvals",
            log: format!(
                "telegram: button press by user {from} without a message (inline mode?) ignored"
            ),
        };
    };
    if !allowed.contains(&chat) {
        return PressCheck::Refused {
            text: "not allowed",
            log: format!(
                "telegram: button press from chat {chat} (user {from}), which is not in telegram.allowed_chats, refused; nothing changed"
            ),
        };
    }
    if !users.is_empty() && !q["from"]["id"].as_i64().is_some_and(|u| users.contains(&u)) {
        return PressCheck::Refused {
            text: "not allowed",
            log: format!(
                "telegram: button press by user {from} in chat {chat}, who is not in telegram.allowed_users, refused; nothing changed"
            ),
        };
    }
    let data = q["data"].as_str().unwrap_or("");
    match parse_data(data) {
        Some(action) => PressCheck::Counts { chat, action },
        None => PressCheck::Refused {
            text: "unknown button",
            log: format!(
                "telegram: button press in chat {chat} with data {:?} that is no approval button ignored",
                data.chars().take(80).collect::<String>()
            ),
        },
    }
}

/// Handles one `callback_query` update: decides, answers the request when the press counts,
/// and answers the press.
pub(crate) fn press(sup: &FrontDoor, bot: &Arc<Bot>, q: &Value) {
    let Some(query_id) = q["id"].as_str().map(str::to_string) else {
        return tracing::warn!("telegram: a callback_query without an id ignored");
    };
    let verdict = judge(q, &bot.allowed, &bot.users);
    let (sup, bot) = (sup.clone(), bot.clone());
    tokio::spawn(async move {
        let text = match verdict {
            PressCheck::Refused { text, log } => {
                tracing::warn!("{log}");
                text.to_string()
            }
            PressCheck::Counts { chat, action } => {
                let (id, approve) = match action {
                    Action::Approve(id) => (id, true),
                    Action::Deny(id) => (id, false),
                };
                let req = CtlRequest::ApprovalAnswer {
                    id: id.clone(),
                    approve,
                    always: false,
                    reason: None,
                };
                match sup.request(&Channel::Telegram(Some(chat)), req).await {
                    CtlResponse::Done { message } => message,
                    other => {
                        let line = pegasus_supervisor::front_door::refusal(other);
                        tracing::info!(chat, id, "telegram: approval press refused: {line}");
                        line
                    }
                }
            }
        };
        let text: String = text.chars().take(MAX_ANSWER_TEXT).collect();
        let body = json!({"callback_query_id": query_id, "text": text});
        match bot.call("answerCallbackQuery", &body).await {
            Ok(_) => {}
            // One try: a query is short-lived and a late answer only gets "query is too old".
            Err(e) => tracing::warn!("telegram: answerCallbackQuery failed: {e}"),
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(id: &str, summary: &str) -> ApprovalInfo {
        ApprovalInfo {
            id: id.into(),
            project: "web".into(),
            task: "t-1".into(),
            tool: "exec".into(),
            summary: summary.into(),
            asked_at: "2026-11-26T10:00:00Z".into(),
            input: String::new(),
        }
    }

    #[test]
    fn a_request_reads_as_plain_text_with_two_buttons_that_fit() {
        let text = message(&info("ap-abc", "rm -rf build && echo *done* <b>"));
        assert!(text.contains("web, task t-1"), "{text}");
        assert!(
            text.contains("\nrm -rf build && echo *done* <b>\n"),
            "{text}"
        );
        assert!(text.contains("exec wants to run:"), "{text}");
        assert!(text.contains("pegasusctl approve ap-abc"), "{text}");
        // A long command line is whole, in parts under the limit; the buttons go on the last.
        let long = message(&info("ap-abc", &"x".repeat(9000)));
        let parts = split(&long);
        assert!(parts.len() >= 3 && parts.iter().all(|p| p.chars().count() <= 4000));
        assert_eq!(parts.concat(), long);
        let kb = keyboard("ap-abc");
        assert_eq!(
            kb,
            Some(json!({"inline_keyboard": [[
                {"text": "Approve", "callback_data": "approve:ap-abc"},
                {"text": "Deny", "callback_data": "deny:ap-abc"},
            ]]}))
        );
        assert_eq!(keyboard(&"a".repeat(60)), None, "over 64 bytes");
        // The buttons parse back.
        assert_eq!(
            parse_data("approve:ap-abc"),
            Some(Action::Approve("ap-abc".into()))
        );
        assert_eq!(
            parse_data("deny:ap-abc"),
            Some(Action::Deny("ap-abc".into()))
        );
        for bad in [
            "",
            "approve",
            "approve:",
            "merge:ap-1",
            "deny:ap 1",
            "deny:../x",
        ] {
            assert_eq!(parse_data(bad), None, "{bad}");
        }
    }

    #[test]
    fn only_a_press_in_an_allowed_chat_counts() {
        let q = |chat: Option<i64>, data: &str| {
            let mut q = json!({"id": "1", "from": {"id": 9}, "chat_instance": "-1", "data": data});
            if let Some(c) = chat {
                q["message"] = json!({"message_id": 3, "date": 0, "chat": {"id": c}});
            }
            q
        };
        let allowed = [42];
        // The helper's message has `date: 0`, an InaccessibleMessage: it still names its chat,
        // which is what decides.
        assert!(matches!(
            judge(&q(Some(42), "approve:ap-1"), &allowed, &[]),
            PressCheck::Counts { chat: 42, action: Action::Approve(ref id) } if id == "ap-1"
        ));
        match judge(&q(Some(7), "approve:ap-1"), &allowed, &[]) {
            PressCheck::Refused { text, log } => {
                assert_eq!(text, "not allowed");
                assert!(log.contains("chat 7"), "{log}");
            }
            PressCheck::Counts { .. } => panic!("a chat not allowed counted"),
        }
        assert!(matches!(
            judge(&q(None, "approve:ap-1"), &allowed, &[]),
            PressCheck::Refused { .. }
        ));
        assert!(matches!(
            judge(&q(Some(42), "rm -rf /"), &allowed, &[]),
            PressCheck::Refused {
                text: "unknown button",
                ..
            }
        ));
    }

    #[test]
    fn with_allowed_users_only_their_presses_count() {
        let q = |from: Option<i64>| {
            let mut q = json!({"id": "1", "chat_instance": "-1", "data": "approve:ap-1",
                "message": {"message_id": 3, "date": 0, "chat": {"id": 42}}});
            if let Some(f) = from {
                q["from"] = json!({"id": f, "is_bot": false, "first_name": "x"});
            }
            q
        };
        assert!(matches!(
            judge(&q(Some(5)), &[42], &[5]),
            PressCheck::Counts { chat: 42, .. }
        ));
        for press in [q(Some(6)), q(None)] {
            match judge(&press, &[42], &[5]) {
                PressCheck::Refused { text, log } => {
                    assert_eq!(text, "not allowed");
                    assert!(log.contains("telegram.allowed_users"), "{log}");
                }
                PressCheck::Counts { .. } => panic!("a user not allowed counted"),
            }
        }
        // No list: any member of an allowed chat, as before.
        assert!(matches!(
            judge(&q(Some(6)), &[42], &[]),
            PressCheck::Counts { .. }
        ));
    }

    #[test]
    fn a_request_hides_nothing_in_its_message() {
        let text = message(&info("ap-abc", "touch X #\r\x1b[2Kls -la \u{202e}\u{200b}"));
        assert!(
            text.contains("touch X #\\r\\x1b[2Kls -la \\u{202e}\\u{200b}"),
            "{text}"
        );
        assert!(
            !pegasus_proto::shown::has_hidden(&text.replace('\n', " ")),
            "{text}"
        );
    }

    #[test]
    fn the_sent_file_survives_a_reload_and_forgets_what_is_closed() {
        let dir = std::env::temp_dir().join(format!("pegasus-tg-sent-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join(SENT_FILE);
        let _ = std::fs::remove_file(&path);
        let mut s = Sent::load(path.clone());
        s.add("ap-1", 42, 7);
        s.add("ap-1", 43, 8);
        s.add("ap-2", 42, 9);
        let mut again = Sent::load(path.clone());
        assert!(again.has("ap-1", 42) && again.has("ap-1", 43) && again.has("ap-2", 42));
        assert!(!again.has("ap-2", 43));
        assert_eq!(
            again.take("ap-1").into_iter().collect::<Vec<_>>(),
            vec![(42, 7), (43, 8)]
        );
        let last = Sent::load(path.clone());
        assert!(!last.has("ap-1", 42) && last.has("ap-2", 42));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
