//! A fake Telegram Bot API server (the two methods Pegasus uses), as strict as the real one
//! where it matters: the token is part of every path (wrong token → 401), `getUpdates` long-polls
//! up to `timeout` seconds and forgets updates below the `offset` it is given (as Telegram
//! confirms them), `sendMessage` refuses empty texts and texts over 4,096 characters (400), and
//! scripted `429 Too Many Requests` answers carry `parameters.retry_after` like the real ones.
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
use crate::http::{write_full, write_refusal, Conn, HttpError};

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
    pub chat_id: i64,
    pub text: String,
}

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
        let id = {
            let mut st = self.shared.lock();
            let id = st.next_update;
            st.next_update += 1;
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
            id
        };
        self.shared.arrived.notify_waiters();
        id
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
    loop {
        let req = match conn.read_request().await {
            Ok(req) => req,
            Err(HttpError::Bad(msg)) => {
                let _ = write_refusal(&mut conn.stream, &msg).await;
                return;
            }
            Err(_) => return,
        };
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
            st.sent.push(SentMessage {
                chat_id,
                text: text.to_string(),
            });
            let n = st.sent.len();
            Answer::Json(
                200,
                json!({"ok": true, "result": {
                    "message_id": n,
                    "from": {"id": 7_654_321, "is_bot": true, "first_name": "Pegasus", "username": "pegasus_test_bot"},
                    "chat": {"id": chat_id, "type": "private"},
                    "date": 1_700_000_000,
                    "text": text,
                }}),
            )
        }
        other => err(404, &format!("Not Found: method {other}")).into(),
    }
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
                    text: "hello".into()
                }]
            );
        });
    }
}
