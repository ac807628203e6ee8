//! A fake Telegram Bot API server (the methods Pegasus uses), as strict as the real one where it
//! matters: the token is part of every path (wrong token → 401), `getUpdates` long-polls up to
//! `timeout` seconds and forgets updates below the `offset` it is given (as Telegram confirms
//! them), `sendMessage` refuses empty texts and texts over 4,096 characters (400), and scripted
//! `429 Too Many Requests` answers carry `parameters.retry_after` like the real ones.
//!
//! Inline keyboards (approvals, DESIGN.md §11): `sendMessage`'s `reply_markup` is validated as an
//! `InlineKeyboardMarkup` (an array of arrays of buttons, each with a `text` and one action;
//! `callback_data` 1-64 bytes) and refused with the real API's descriptions; a test presses a
//! button with [`FakeTelegram::press`], which queues a `callback_query` update in the real
//! shape (`id`, `from`, `message` with its `chat`, `chat_instance`, `data`), unless the client's
//! last `allowed_updates` leaves `callback_query` out (then, as on the real server, the update
//! is never created); `answerCallbackQuery` takes each query id once (unknown, answered or
//! expired → the real 400); `editMessageReplyMarkup` changes a sent message's keyboard (not
//! found, or not modified → the real 400).
//! [`FakeTelegram::break_updates`] makes `getUpdates` answer what a client cannot use (see
//! [`BrokenUpdates`]), each in the shape the real API (or a proxy in front of it) gives, and
//! every `getUpdates` request is recorded with its time, so a test can measure the poll rate.
//! Served on its own thread and runtime, like [`crate::FakeLlm`].

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio::sync::Notify;

use crate::background::Background;
use crate::http::{write_full, Conn};

/// An unusable answer `getUpdates` gives while [`FakeTelegram::break_updates`] says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokenUpdates {
    /// `200 {"ok": true, "result": {...}}`: a result that is an object, not a list.
    ResultNotAList,
    /// `200`, `application/json`, with a body cut off in the middle of its JSON.
    MalformedJson,
    /// `502 Bad Gateway` with an HTML page, as a proxy in front of the API answers.
    HtmlErrorPage,
    /// `500 {"ok": false, "error_code": 500, "description": "Internal Server Error"}`.
    ServerError,
    /// `409`, `ok: false` without `retry_after`: another client is polling with this token.
    Conflict,
    /// `429` with `parameters.retry_after` this many seconds.
    RateLimited(u64),
    /// The request is read and the connection closed without an answer.
    Hangup,
    /// `200 {"ok": true, "result": []}` at once, whatever `timeout` the client asked for.
    EmptyAtOnce,
    /// `200` with a list of updates the client already confirmed (below its `offset`) and one
    /// without an `update_id`: nothing the client can take.
    StaleUpdates,
}

/// A message the bot sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentMessage {
    /// The chat it was sent to (`chat_id` of `sendMessage`).
    pub chat_id: i64,
    /// The text as sent.
    pub text: String,
    /// The `message_id` the server gave it.
    pub message_id: i64,
    /// Its inline keyboard now (rows of buttons): as sent, or as last edited; empty when none.
    pub buttons: Vec<Vec<Button>>,
}

/// One button of an inline keyboard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Button {
    /// The label shown on the button.
    pub text: String,
    /// `None` for a button with another action (`url`, ...).
    pub callback_data: Option<String>,
}

/// What a button press is made on, as the real API shapes `callback_query.message`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PressOn {
    /// A message the bot sent in `chat_id` (`message` is that message; a message id the fake
    /// did not send is shaped as a bot message with a placeholder text, as in a chat the bot
    /// wrote to before the test started).
    Message {
        /// The chat the message is in.
        chat_id: i64,
        /// The message's `message_id`.
        message_id: i64,
    },
    /// A message too old to be accessible: `InaccessibleMessage` (`chat`, `message_id`,
    /// `date: 0`).
    Inaccessible {
        /// The chat the message is in.
        chat_id: i64,
        /// The message's `message_id`.
        message_id: i64,
    },
    /// A message sent in inline mode: no `message`, an `inline_message_id` instead.
    Inline,
}

/// How the bot answered a button press (`answerCallbackQuery`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallbackAnswer {
    /// The `text` the bot showed the user; `None` when it gave none.
    pub text: Option<String>,
    /// Whether the text was shown as an alert instead of a notification (`show_alert`).
    pub show_alert: bool,
}

/// A button press and its answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Press {
    /// The `callback_query.id`.
    pub id: String,
    /// The update that carried it.
    pub update_id: i64,
    /// What the pressed button's message is.
    pub on: PressOn,
    /// The user who pressed (`callback_query.from.id`).
    pub from: i64,
    /// The button's `callback_data`.
    pub data: String,
    /// `None` until the bot answers it.
    pub answer: Option<CallbackAnswer>,
    /// Expired by [`FakeTelegram::expire_presses`] before it was answered.
    pub expired: bool,
}

/// `answerCallbackQuery`'s refusal of a query id it does not know, has answered or that expired
/// (the real description).
pub const QUERY_TOO_OLD: &str =
    "Bad Request: query is too old and response timeout expired or query ID is invalid";

#[derive(Default)]
struct State {
    token: String,
    next_update: i64,
    pending: Vec<Value>,
    sent: Vec<SentMessage>,
    send_calls: usize,
    rate_limits: VecDeque<u64>,
    offsets: Vec<i64>,
    polled_at: Vec<Instant>,
    broken: Option<BrokenUpdates>,
    /// The client's last `allowed_updates` (`None`: the default, every common kind).
    allowed_updates: Option<Vec<String>>,
    presses: Vec<Press>,
    /// Presses never queued because `allowed_updates` left `callback_query` out.
    presses_dropped: usize,
    answer_calls: usize,
    edit_calls: usize,
    next_message: i64,
}

struct Shared {
    state: Mutex<State>,
    arrived: Notify,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl State {
    /// The id of a new update.
    fn new_update(&mut self) -> i64 {
        self.next_update += 1;
        self.next_update - 1
    }
}

/// The fake server; dropping it stops it.
pub struct FakeTelegram {
    shared: Arc<Shared>,
    server: Background,
}

impl FakeTelegram {
    /// Starts a server that accepts bot token `token`.
    pub fn start(token: &str) -> std::io::Result<FakeTelegram> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                token: token.to_string(),
                next_update: 100,
                ..State::default()
            }),
            arrived: Notify::new(),
        });
        let s = shared.clone();
        let server =
            Background::start("faketelegram", move |stream| connection(s.clone(), stream))?;
        Ok(FakeTelegram { shared, server })
    }

    /// `http://127.0.0.1:PORT` (the bot's methods are under `/bot<token>/`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.server.addr())
    }

    /// A user writes `text` in chat `chat_id`; returns the update's id.
    pub fn push_message(&self, chat_id: i64, text: &str) -> i64 {
        let id = self.shared.lock().new_update();
        self.push_update(id, chat_id, text)
    }

    /// Update `id` again, as Telegram sends an update whose offset was never confirmed: the
    /// same `update_id` with the same message.
    pub fn push_again(&self, id: i64, chat_id: i64, text: &str) -> i64 {
        self.push_update(id, chat_id, text)
    }

    fn push_update(&self, id: i64, chat_id: i64, text: &str) -> i64 {
        {
            let mut st = self.shared.lock();
            st.pending.push(json!({
                "update_id": id,
                "message": {
                    "message_id": id * 10,
                    "date": 1_700_000_000,
                    "chat": {"id": chat_id, "type": "private"},
                    "from": {"id": chat_id, "is_bot": false, "first_name": "Tester"},
                    "text": text,
                }
            }));
        }
        self.shared.arrived.notify_waiters();
        id
    }

    /// A user in `on`'s chat presses a button carrying `data`: queues a `callback_query`
    /// update (unless the client's `allowed_updates` leaves it out, as the real server never
    /// creates it then) and returns the query's id. The presser is the chat's own user (a
    /// private chat's id is its user's); [`FakeTelegram::press_by`] names another.
    pub fn press(&self, on: PressOn, data: &str) -> String {
        self.press_by(on, None, data)
    }

    /// [`FakeTelegram::press`] by user `from` (`callback_query.from.id`), as a member of a
    /// group presses a button there; `None`: the chat's own user (user 1 in inline mode).
    pub fn press_by(&self, on: PressOn, from: Option<i64>, data: &str) -> String {
        let id = {
            let mut st = self.shared.lock();
            let update_id = st.new_update();
            // Real ids are opaque strings of digits.
            let id = format!("{}", 4_382_000_000_000_000_000u64 + update_id as u64);
            let presser = match on {
                PressOn::Message { chat_id, .. } | PressOn::Inaccessible { chat_id, .. } => {
                    from.unwrap_or(chat_id)
                }
                PressOn::Inline => from.unwrap_or(1),
            };
            let user = |_chat: i64| json!({"id": presser, "is_bot": false, "first_name": "Tester", "language_code": "en"});
            let mut q = json!({"id": id, "data": data});
            match on {
                PressOn::Message {
                    chat_id,
                    message_id,
                }
                | PressOn::Inaccessible {
                    chat_id,
                    message_id,
                } => {
                    q["from"] = user(chat_id);
                    q["chat_instance"] = json!(format!("{}", -(chat_id.wrapping_mul(7919))));
                    q["message"] = if let PressOn::Inaccessible { .. } = on {
                        json!({
                            "chat": {"id": chat_id, "type": "private"},
                            "message_id": message_id,
                            "date": 0,
                        })
                    } else {
                        let earlier = SentMessage {
                            chat_id,
                            text: "an earlier message".into(),
                            message_id,
                            buttons: Vec::new(),
                        };
                        let is_it =
                            |m: &&SentMessage| m.chat_id == chat_id && m.message_id == message_id;
                        message_json(st.sent.iter().find(is_it).unwrap_or(&earlier))
                    };
                }
                PressOn::Inline => {
                    q["from"] = user(1);
                    q["inline_message_id"] = json!("AgAAAFoAAAB5c2VydmVy");
                    q["chat_instance"] = json!("-555");
                }
            }
            st.presses.push(Press {
                id: id.clone(),
                update_id,
                on,
                from: presser,
                data: data.to_string(),
                answer: None,
                expired: false,
            });
            let wanted = st
                .allowed_updates
                .as_ref()
                .is_none_or(|kinds| kinds.iter().any(|k| k == "callback_query"));
            if wanted {
                st.pending
                    .push(json!({"update_id": update_id, "callback_query": q}));
            } else {
                st.presses_dropped += 1;
            }
            id
        };
        self.shared.arrived.notify_waiters();
        id
    }

    /// Every press, with its answer once the bot gave one, in order.
    pub fn presses(&self) -> Vec<Press> {
        self.shared.lock().presses.clone()
    }

    /// Presses the server never turned into updates because the client's `allowed_updates`
    /// left `callback_query` out.
    pub fn presses_dropped(&self) -> usize {
        self.shared.lock().presses_dropped
    }

    /// Every press not answered yet expires, as the real server forgets a query after a while
    /// (how long is not documented: some seconds to a minute).
    pub fn expire_presses(&self) {
        for p in self.shared.lock().presses.iter_mut() {
            if p.answer.is_none() {
                p.expired = true;
            }
        }
    }

    /// How many `answerCallbackQuery` calls arrived (refused ones included).
    pub fn answer_calls(&self) -> usize {
        self.shared.lock().answer_calls
    }

    /// How many `editMessageReplyMarkup` calls arrived (refused ones included).
    pub fn edit_calls(&self) -> usize {
        self.shared.lock().edit_calls
    }

    /// Every message the bot sent, in order.
    pub fn sent(&self) -> Vec<SentMessage> {
        self.shared.lock().sent.clone()
    }

    /// How many `sendMessage` calls arrived (refused ones included).
    pub fn send_calls(&self) -> usize {
        self.shared.lock().send_calls
    }

    /// The next `n` `sendMessage` calls get 429 with `retry_after` seconds.
    pub fn rate_limit_next_sends(&self, n: usize, retry_after: u64) {
        let mut st = self.shared.lock();
        for _ in 0..n {
            st.rate_limits.push_back(retry_after);
        }
    }

    /// The `offset` of every `getUpdates` call, in order.
    pub fn offsets(&self) -> Vec<i64> {
        self.shared.lock().offsets.clone()
    }

    /// When each `getUpdates` request arrived (broken answers included), in order.
    pub fn get_updates_times(&self) -> Vec<Instant> {
        self.shared.lock().polled_at.clone()
    }

    /// From now on every `getUpdates` answers `how` (`None`: answers well again). Updates
    /// pushed meanwhile wait, as on the real server.
    pub fn break_updates(&self, how: Option<BrokenUpdates>) {
        self.shared.lock().broken = how;
    }
}

/// What the server writes back.
enum Answer {
    /// A Bot API answer: `application/json`.
    Json(u16, Value),
    /// Anything else, such as a proxy's error page.
    Raw {
        code: u16,
        content_type: &'static str,
        body: String,
    },
    /// Nothing: the connection is closed.
    Hangup,
}

impl From<(u16, Value)> for Answer {
    fn from((code, v): (u16, Value)) -> Answer {
        Answer::Json(code, v)
    }
}

/// The answer `how` gives to a `getUpdates` asking from `offset`.
fn broken_answer(how: BrokenUpdates, offset: i64) -> Answer {
    match how {
        BrokenUpdates::ResultNotAList => Answer::Json(
            200,
            json!({"ok": true, "result": {"update_id": offset, "message": {"text": "not in a list"}}}),
        ),
        BrokenUpdates::MalformedJson => Answer::Raw {
            code: 200,
            content_type: "application/json",
            body: format!("{{\"ok\":true,\"result\":[{{\"update_id\":{offset},\"mess"),
        },
        BrokenUpdates::HtmlErrorPage => Answer::Raw {
            code: 502,
            content_type: "text/html",
            body: "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n".into(),
        },
        BrokenUpdates::ServerError => err(500, "Internal Server Error").into(),
        BrokenUpdates::Conflict => err(
            409,
            "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running",
        )
        .into(),
        BrokenUpdates::RateLimited(after) => rate_limited(after).into(),
        BrokenUpdates::Hangup => Answer::Hangup,
        BrokenUpdates::EmptyAtOnce => Answer::Json(200, json!({"ok": true, "result": []})),
        BrokenUpdates::StaleUpdates => Answer::Json(
            200,
            json!({"ok": true, "result": [
                {"update_id": offset - 2, "message": {"message_id": 1, "date": 1_700_000_000,
                    "chat": {"id": 1, "type": "private"}, "text": "already confirmed"}},
                {"message": {"message_id": 2, "date": 1_700_000_000,
                    "chat": {"id": 1, "type": "private"}, "text": "no update_id"}},
            ]}),
        ),
    }
}

fn rate_limited(after: u64) -> (u16, Value) {
    (
        429,
        json!({"ok": false, "error_code": 429,
               "description": format!("Too Many Requests: retry after {after}"),
               "parameters": {"retry_after": after}}),
    )
}

/// Serves one connection's requests until the client closes it or asks to: persistent
/// connections, as the Bot API's are.
async fn connection(shared: Arc<Shared>, stream: TcpStream) {
    let mut conn = Conn::new(stream);
    while let Some(req) = conn.next_request().await {
        let (code, content_type, body) = match handle(&shared, &req.target, &req.body).await {
            Answer::Json(code, v) => (code, "application/json", v.to_string()),
            Answer::Raw {
                code,
                content_type,
                body,
            } => (code, content_type, body),
            Answer::Hangup => return,
        };
        let wrote = write_full(&mut conn.stream, code, content_type, &[], body.as_bytes()).await;
        if wrote.is_err() || !req.keep_alive {
            return;
        }
    }
}

fn err(code: u16, description: &str) -> (u16, Value) {
    (
        code,
        json!({"ok": false, "error_code": code, "description": description}),
    )
}

fn params(target: &str, body: &[u8]) -> Value {
    let mut v: Value = serde_json::from_slice(body).unwrap_or_else(|_| json!({}));
    if let Some(q) = target.split_once('?').map(|(_, q)| q) {
        for kv in q.split('&') {
            if let Some((k, val)) = kv.split_once('=') {
                v[k] = val
                    .parse::<i64>()
                    .map(Value::from)
                    .unwrap_or_else(|_| Value::from(val));
            }
        }
    }
    v
}

async fn handle(shared: &Shared, target: &str, body: &[u8]) -> Answer {
    let path = target.split('?').next().unwrap_or("");
    let token = shared.lock().token.clone();
    let Some(method) = path.strip_prefix(&format!("/bot{token}/")) else {
        return err(401, "Unauthorized").into();
    };
    let p = params(target, body);
    match method {
        "getUpdates" => {
            let offset = p["offset"].as_i64().unwrap_or(0);
            let timeout = p["timeout"].as_u64().unwrap_or(0).min(50);
            let broken = {
                let mut st = shared.lock();
                st.offsets.push(offset);
                st.polled_at.push(Instant::now());
                // Kept until the next call that gives it; an empty list is the default.
                if let Some(kinds) = p["allowed_updates"].as_array() {
                    let kinds: Vec<String> = kinds
                        .iter()
                        .filter_map(|k| k.as_str().map(str::to_string))
                        .collect();
                    st.allowed_updates = (!kinds.is_empty()).then_some(kinds);
                }
                st.broken
            };
            if let Some(how) = broken {
                return broken_answer(how, offset);
            }
            let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(timeout);
            loop {
                let notified = shared.arrived.notified();
                {
                    let mut st = shared.lock();
                    // Updates below the offset are confirmed: gone for good.
                    st.pending
                        .retain(|u| u["update_id"].as_i64().unwrap_or(0) >= offset);
                    if !st.pending.is_empty() || tokio::time::Instant::now() >= deadline {
                        return Answer::Json(
                            200,
                            json!({"ok": true, "result": st.pending.clone()}),
                        );
                    }
                }
                let _ = tokio::time::timeout_at(deadline, notified).await;
            }
        }
        "sendMessage" => {
            let mut st = shared.lock();
            st.send_calls += 1;
            if let Some(after) = st.rate_limits.pop_front() {
                return rate_limited(after).into();
            }
            let Some(chat_id) = p["chat_id"].as_i64() else {
                return err(400, "Bad Request: chat_id is empty").into();
            };
            let text = p["text"].as_str().unwrap_or("");
            if text.is_empty() {
                return err(400, "Bad Request: message text is empty").into();
            }
            if text.chars().count() > 4096 {
                return err(400, "Bad Request: message is too long").into();
            }
            let buttons = match p.get("reply_markup").map(inline_keyboard).transpose() {
                Ok(rows) => rows.unwrap_or_default(),
                Err(description) => return err(400, &description).into(),
            };
            st.next_message += 1;
            let message_id = st.next_message;
            let message = SentMessage {
                chat_id,
                text: text.to_string(),
                message_id,
                buttons,
            };
            let result = message_json(&message);
            st.sent.push(message);
            Answer::Json(200, json!({"ok": true, "result": result}))
        }
        "answerCallbackQuery" => {
            let mut st = shared.lock();
            st.answer_calls += 1;
            // Unsure of the real description for a missing id; the real API refuses it with 400.
            let Some(id) = p["callback_query_id"].as_str() else {
                return err(
                    400,
                    "Bad Request: parameter \"callback_query_id\" is required",
                )
                .into();
            };
            let text = p["text"].as_str().map(str::to_string);
            // 0-200 characters (documented); the real description over it is not documented,
            // this one is a guess.
            if text.as_ref().is_some_and(|t| t.chars().count() > 200) {
                return err(400, "Bad Request: MESSAGE_TOO_LONG").into();
            }
            let show_alert = p["show_alert"].as_bool().unwrap_or(false);
            let Some(press) = st
                .presses
                .iter_mut()
                .find(|q| q.id == id && q.answer.is_none() && !q.expired)
            else {
                return err(400, QUERY_TOO_OLD).into();
            };
            press.answer = Some(CallbackAnswer { text, show_alert });
            Answer::Json(200, json!({"ok": true, "result": true}))
        }
        "editMessageReplyMarkup" => {
            let mut st = shared.lock();
            st.edit_calls += 1;
            if p.get("inline_message_id").is_some() {
                // Pegasus never sends in inline mode; the fake does not model it.
                return err(400, "Bad Request: MESSAGE_ID_INVALID").into();
            }
            let Some(chat_id) = p["chat_id"].as_i64() else {
                return err(400, "Bad Request: chat_id is empty").into();
            };
            let Some(message_id) = p["message_id"].as_i64() else {
                return err(400, "Bad Request: message identifier is not specified").into();
            };
            // No `reply_markup`: the keyboard is removed.
            let buttons = match p.get("reply_markup").map(inline_keyboard).transpose() {
                Ok(rows) => rows.unwrap_or_default(),
                Err(description) => return err(400, &description).into(),
            };
            let Some(m) = st
                .sent
                .iter_mut()
                .find(|m| m.chat_id == chat_id && m.message_id == message_id)
            else {
                return err(400, "Bad Request: message to edit not found").into();
            };
            if m.buttons == buttons {
                return err(400, "Bad Request: message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message").into();
            }
            m.buttons = buttons;
            let result = message_json(m);
            Answer::Json(200, json!({"ok": true, "result": result}))
        }
        other => err(404, &format!("Not Found: method {other}")).into(),
    }
}

/// A sent message as the API returns it (`Message`), its keyboard included.
fn message_json(m: &SentMessage) -> Value {
    let mut v = json!({
        "message_id": m.message_id,
        "from": {"id": 7_654_321, "is_bot": true, "first_name": "Pegasus", "username": "pegasus_test_bot"},
        "chat": {"id": m.chat_id, "type": "private"},
        "date": 1_700_000_000,
        "text": m.text,
    });
    if !m.buttons.is_empty() {
        v["reply_markup"] = markup_json(&m.buttons);
    }
    v
}

fn markup_json(rows: &[Vec<Button>]) -> Value {
    let rows: Vec<Value> = rows
        .iter()
        .map(|row| {
            row.iter()
                .map(|b| match &b.callback_data {
                    Some(d) => json!({"text": b.text, "callback_data": d}),
                    None => json!({"text": b.text, "url": "https://example.org/"}),
                })
                .collect()
        })
        .collect();
    json!({"inline_keyboard": rows})
}

/// Validates a `reply_markup` as an `InlineKeyboardMarkup`, as the real API does, into its
/// rows; the refusal is the real API's description. The descriptions come from what the real
/// server answers (as quoted in client libraries' bug reports); the empty-text one is a guess.
fn inline_keyboard(markup: &Value) -> Result<Vec<Vec<Button>>, String> {
    const UNPARSABLE: &str = "Bad Request: can't parse reply keyboard markup JSON object";
    // A form-encoded request carries it as a JSON string.
    let parsed;
    let markup = match markup {
        Value::String(s) => {
            parsed = serde_json::from_str::<Value>(s).map_err(|_| UNPARSABLE.to_string())?;
            &parsed
        }
        other => other,
    };
    let Some(obj) = markup.as_object() else {
        return Err(UNPARSABLE.into());
    };
    let Some(rows) = obj.get("inline_keyboard") else {
        // `keyboard`, `remove_keyboard`, `force_reply`: other markups the fake does not model.
        return Err(UNPARSABLE.into());
    };
    const NOT_ARRAYS: &str =
        "Bad Request: field \"inline_keyboard\" of the InlineKeyboardMarkup should be an Array of Arrays";
    let rows = rows.as_array().ok_or(NOT_ARRAYS)?;
    let mut out = Vec::new();
    for row in rows {
        let row = row.as_array().ok_or(NOT_ARRAYS)?;
        let mut buttons = Vec::new();
        for b in row {
            let button = |m: &str| format!("Bad Request: can't parse inline keyboard button: {m}");
            let b = b
                .as_object()
                .ok_or_else(|| button("InlineKeyboardButton should be an Object"))?;
            let text = b
                .get("text")
                .and_then(Value::as_str)
                .ok_or_else(|| button("Field \"text\" must be of type String"))?;
            if text.trim().is_empty() {
                return Err("Bad Request: BUTTON_TEXT_INVALID".into());
            }
            let callback_data = match b.get("callback_data") {
                None => None,
                Some(Value::String(d)) if (1..=64).contains(&d.len()) => Some(d.clone()),
                Some(Value::String(_)) => return Err("Bad Request: BUTTON_DATA_INVALID".into()),
                Some(_) => return Err(button("Field \"callback_data\" must be of type String")),
            };
            let actions = [
                "url",
                "callback_data",
                "web_app",
                "login_url",
                "switch_inline_query",
                "switch_inline_query_current_chat",
                "switch_inline_query_chosen_chat",
                "copy_text",
                "callback_game",
                "pay",
            ];
            if !actions.iter().any(|a| b.contains_key(*a)) {
                return Err(button("Text buttons are unallowed in the inline keyboard"));
            }
            buttons.push(Button {
                text: text.to_string(),
                callback_data,
            });
        }
        out.push(buttons);
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const TOKEN: &str = "123:test-token";

    /// One `getUpdates` over real HTTP: status, content type and body, or `None` when the
    /// connection was closed without an answer.
    async fn get_updates(tg: &FakeTelegram, offset: i64) -> Option<(u16, String, String)> {
        let resp = reqwest::Client::new()
            .post(format!("{}/bot{TOKEN}/getUpdates", tg.base_url()))
            .json(&json!({"offset": offset, "timeout": 0}))
            .send()
            .await
            .ok()?;
        let status = resp.status().as_u16();
        let ctype = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        Some((status, ctype, resp.text().await.ok()?))
    }

    #[test]
    fn broken_get_updates_answers_are_what_a_client_cannot_use_and_end_when_told() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let tg = FakeTelegram::start(TOKEN).unwrap();
            let id = tg.push_message(5, "hi");
            let json_of = |body: &str| serde_json::from_str::<Value>(body).unwrap();

            tg.break_updates(Some(BrokenUpdates::ResultNotAList));
            let (code, ctype, body) = get_updates(&tg, 0).await.unwrap();
            assert_eq!((code, ctype.as_str()), (200, "application/json"));
            let v = json_of(&body);
            assert!(v["ok"] == true && v["result"].is_object(), "{v}");

            tg.break_updates(Some(BrokenUpdates::MalformedJson));
            let (code, _, body) = get_updates(&tg, 0).await.unwrap();
            assert_eq!(code, 200);
            assert!(serde_json::from_str::<Value>(&body).is_err(), "{body}");

            tg.break_updates(Some(BrokenUpdates::HtmlErrorPage));
            let (code, ctype, body) = get_updates(&tg, 0).await.unwrap();
            assert_eq!((code, ctype.as_str()), (502, "text/html"));
            assert!(body.contains("502 Bad Gateway"));

            for (how, want) in [
                (BrokenUpdates::ServerError, 500),
                (BrokenUpdates::Conflict, 409),
            ] {
                tg.break_updates(Some(how));
                let (code, _, body) = get_updates(&tg, 0).await.unwrap();
                let v = json_of(&body);
                assert_eq!(code, want);
                assert!(v["ok"] == false && v["error_code"] == want, "{v}");
                assert!(v["parameters"]["retry_after"].is_null(), "{v}");
            }

            tg.break_updates(Some(BrokenUpdates::RateLimited(7)));
            let (code, _, body) = get_updates(&tg, 0).await.unwrap();
            assert_eq!(code, 429);
            assert_eq!(json_of(&body)["parameters"]["retry_after"], 7);

            tg.break_updates(Some(BrokenUpdates::Hangup));
            assert_eq!(get_updates(&tg, 0).await, None);

            tg.break_updates(Some(BrokenUpdates::EmptyAtOnce));
            let (_, _, body) = get_updates(&tg, 0).await.unwrap();
            assert_eq!(json_of(&body), json!({"ok": true, "result": []}));

            tg.break_updates(Some(BrokenUpdates::StaleUpdates));
            let (_, _, body) = get_updates(&tg, 50).await.unwrap();
            let v = json_of(&body);
            let list = v["result"].as_array().unwrap();
            assert!(!list.is_empty());
            assert!(list
                .iter()
                .all(|u| u["update_id"].as_i64().is_none_or(|i| i < 50)));

            // Answering well again: the message pushed meanwhile is still there.
            tg.break_updates(None);
            let (code, _, body) = get_updates(&tg, 0).await.unwrap();
            assert_eq!(code, 200);
            let v = json_of(&body);
            assert_eq!(v["result"][0]["update_id"], id, "{v}");
            assert_eq!(v["result"][0]["message"]["text"], "hi");

            // Every request was recorded, broken ones included, in order.
            let times = tg.get_updates_times();
            assert_eq!(times.len(), 10);
            assert!(times.windows(2).all(|w| w[0] <= w[1]));
            assert_eq!(tg.offsets().len(), 10);
        });
    }

    async fn call(tg: &FakeTelegram, method: &str, body: Value) -> (u16, Value) {
        let resp = reqwest::Client::new()
            .post(format!("{}/bot{TOKEN}/{method}", tg.base_url()))
            .json(&body)
            .send()
            .await
            .unwrap();
        (resp.status().as_u16(), resp.json().await.unwrap())
    }

    #[test]
    fn keyboards_are_validated_presses_come_as_real_callback_queries_and_are_answered_once() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let tg = FakeTelegram::start(TOKEN).unwrap();
            let send = |markup: Value| json!({"chat_id": 5, "text": "ask", "reply_markup": markup});
            let refused = |v: &Value| v["description"].as_str().unwrap_or("").to_string();
            for (markup, want) in [
                (json!([1]), "can't parse reply keyboard markup JSON object"),
                (json!("{not json"), "can't parse reply keyboard markup JSON object"),
                (json!({"inline_keyboard": [{"text": "x"}]}), "should be an Array of Arrays"),
                (json!({"inline_keyboard": [["x"]]}), "InlineKeyboardButton should be an Object"),
                (json!({"inline_keyboard": [[{"text": "x"}]]}), "Text buttons are unallowed"),
                (
                    json!({"inline_keyboard": [[{"text": "x", "callback_data": "a".repeat(65)}]]}),
                    "BUTTON_DATA_INVALID",
                ),
                (
                    json!({"inline_keyboard": [[{"text": "x", "callback_data": ""}]]}),
                    "BUTTON_DATA_INVALID",
                ),
                (
                    json!({"inline_keyboard": [[{"callback_data": "a"}]]}),
                    "Field \"text\" must be of type String",
                ),
            ] {
                let (code, v) = call(&tg, "sendMessage", send(markup.clone())).await;
                assert_eq!((code, v["ok"].clone(), v["error_code"].clone()), (400, json!(false), json!(400)), "{markup}");
                assert!(refused(&v).starts_with("Bad Request: ") && refused(&v).contains(want), "{markup}: {v}");
            }
            assert!(tg.sent().is_empty());

            // A good keyboard (also as a JSON string, as form-encoded requests carry it).
            let kb = json!({"inline_keyboard": [[{"text": "Approve", "callback_data": "approve:ap-1"},
                                                  {"text": "Deny", "callback_data": "deny:ap-1"}]]});
            let (code, v) = call(&tg, "sendMessage", send(kb.clone())).await;
            assert_eq!(code, 200, "{v}");
            assert_eq!(v["result"]["reply_markup"], kb);
            let (code, _) = call(&tg, "sendMessage", send(json!(kb.to_string()))).await;
            assert_eq!(code, 200);
            let m = &tg.sent()[0];
            assert_eq!(m.buttons[0][1].callback_data.as_deref(), Some("deny:ap-1"));

            // Presses, in the real shape, after the client's allowed_updates.
            let id = tg.press(PressOn::Message { chat_id: 5, message_id: m.message_id }, "approve:ap-1");
            let (_, v) = call(&tg, "getUpdates", json!({"offset": 0, "timeout": 0, "allowed_updates": ["message", "callback_query"]})).await;
            let q = &v["result"][0]["callback_query"];
            assert_eq!(q["id"], id.as_str());
            assert_eq!(q["data"], "approve:ap-1");
            assert!(q["from"]["id"] == 5 && q["chat_instance"].is_string(), "{q}");
            assert_eq!(q["message"]["chat"]["id"], 5);
            assert_eq!(q["message"]["message_id"], m.message_id);
            assert_eq!(q["message"]["reply_markup"], kb);
            let offset = v["result"][0]["update_id"].as_i64().unwrap() + 1;

            let (code, v) = call(&tg, "answerCallbackQuery", json!({"callback_query_id": id, "text": "ok"})).await;
            assert_eq!((code, v), (200, json!({"ok": true, "result": true})));
            assert_eq!(tg.presses()[0].answer, Some(CallbackAnswer { text: Some("ok".into()), show_alert: false }));
            // Twice, unknown, expired: the real refusal.
            let gone = json!({"ok": false, "error_code": 400, "description": QUERY_TOO_OLD});
            let (code, v) = call(&tg, "answerCallbackQuery", json!({"callback_query_id": id})).await;
            assert_eq!((code, v), (400, gone.clone()));
            let (code, v) = call(&tg, "answerCallbackQuery", json!({"callback_query_id": "12345"})).await;
            assert_eq!((code, v), (400, gone.clone()));
            let late = tg.press(PressOn::Inaccessible { chat_id: 5, message_id: 1 }, "deny:ap-1");
            tg.expire_presses();
            let (code, v) = call(&tg, "answerCallbackQuery", json!({"callback_query_id": late})).await;
            assert_eq!((code, v), (400, gone));
            let (_, v) = call(&tg, "getUpdates", json!({"offset": offset, "timeout": 0})).await;
            assert_eq!(v["result"][0]["callback_query"]["message"]["date"], 0, "{v}");
            let offset = v["result"][0]["update_id"].as_i64().unwrap() + 1;

            // The keyboard removed once; removing it again is "not modified".
            let edit = json!({"chat_id": 5, "message_id": m.message_id});
            let (code, v) = call(&tg, "editMessageReplyMarkup", edit.clone()).await;
            assert_eq!(code, 200, "{v}");
            assert!(tg.sent()[0].buttons.is_empty() && v["result"]["reply_markup"].is_null());
            let (code, v) = call(&tg, "editMessageReplyMarkup", edit).await;
            assert!(code == 400 && refused(&v).contains("message is not modified"), "{v}");
            let (code, v) = call(&tg, "editMessageReplyMarkup", json!({"chat_id": 5, "message_id": 999})).await;
            assert!(code == 400 && refused(&v).contains("message to edit not found"), "{v}");

            // A client that asks for messages only never gets a press.
            call(&tg, "getUpdates", json!({"offset": offset, "timeout": 0, "allowed_updates": ["message"]})).await;
            tg.press(PressOn::Inline, "approve:ap-1");
            assert_eq!(tg.presses_dropped(), 1);
            let (_, v) = call(&tg, "getUpdates", json!({"offset": offset, "timeout": 0})).await;
            assert_eq!(v["result"], json!([]));
        });
    }

    #[test]
    fn sent_messages_come_back_in_the_real_shape() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let tg = FakeTelegram::start(TOKEN).unwrap();
            let v: Value = reqwest::Client::new()
                .post(format!("{}/bot{TOKEN}/sendMessage", tg.base_url()))
                .json(&json!({"chat_id": 5, "text": "hello"}))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let m = &v["result"];
            assert!(v["ok"] == true && m["message_id"].is_i64(), "{v}");
            assert!(m["date"].is_i64() && m["from"]["is_bot"] == true, "{v}");
            assert_eq!(m["chat"], json!({"id": 5, "type": "private"}));
            assert_eq!(
                tg.sent(),
                vec![SentMessage {
                    chat_id: 5,
                    text: "hello".into(),
                    message_id: m["message_id"].as_i64().unwrap(),
                    buttons: Vec::new(),
                }]
            );
        });
    }
}
