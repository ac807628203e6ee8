//! A fake Telegram Bot API server (the two methods Pegasus uses), as strict as the real one
//! where it matters: the token is part of every path (wrong token → 401), `getUpdates` long-polls
//! up to `timeout` seconds and forgets updates below the `offset` it is given (as Telegram
//! confirms them), `sendMessage` refuses empty texts and texts over 4,096 characters (400), and
//! scripted `429 Too Many Requests` answers carry `parameters.retry_after` like the real ones.
//! Served on its own thread and runtime, like [`crate::FakeLlm`].

use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::{oneshot, Notify};

use crate::http::{write_full, write_refusal, Conn, HttpError};

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
    addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for FakeTelegram {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl FakeTelegram {
    /// Starts a server that accepts bot token `token`.
    pub fn start(token: &str) -> std::io::Result<FakeTelegram> {
        let std_listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let listener = {
            let _g = runtime.enter();
            TcpListener::from_std(std_listener)?
        };
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                token: token.to_string(),
                next_update: 100,
                ..State::default()
            }),
            arrived: Notify::new(),
        });
        let (tx, rx) = oneshot::channel();
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("faketelegram-{}", addr.port()))
            .spawn(move || runtime.block_on(serve(listener, s, rx)))?;
        Ok(FakeTelegram {
            shared,
            addr,
            shutdown: Some(tx),
            thread: Some(thread),
        })
    }

    /// `http://127.0.0.1:PORT` (the bot's methods are under `/bot<token>/`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
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
}

async fn serve(listener: TcpListener, shared: Arc<Shared>, mut stop: oneshot::Receiver<()>) {
    loop {
        tokio::select! {
            _ = &mut stop => return,
            got = listener.accept() => {
                let Ok((stream, _)) = got else { continue };
                let shared = shared.clone();
                // Persistent connections, as the Bot API's are.
                tokio::spawn(async move {
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
                        let (code, body) = handle(&shared, &req.target, &req.body).await;
                        let body = body.to_string();
                        let wrote =
                            write_full(&mut conn.stream, code, "application/json", &[], body.as_bytes())
                                .await;
                        if wrote.is_err() || !req.keep_alive {
                            return;
                        }
                    }
                });
            }
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

async fn handle(shared: &Shared, target: &str, body: &[u8]) -> (u16, Value) {
    let path = target.split('?').next().unwrap_or("");
    let token = shared.lock().token.clone();
    let Some(method) = path.strip_prefix(&format!("/bot{token}/")) else {
        return err(401, "Unauthorized");
    };
    let p = params(target, body);
    match method {
        "getUpdates" => {
            let offset = p["offset"].as_i64().unwrap_or(0);
            let timeout = p["timeout"].as_u64().unwrap_or(0).min(50);
            shared.lock().offsets.push(offset);
            let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(timeout);
            loop {
                let notified = shared.arrived.notified();
                {
                    let mut st = shared.lock();
                    // Updates below the offset are confirmed: gone for good.
                    st.pending
                        .retain(|u| u["update_id"].as_i64().unwrap_or(0) >= offset);
                    if !st.pending.is_empty() || tokio::time::Instant::now() >= deadline {
                        return (200, json!({"ok": true, "result": st.pending.clone()}));
                    }
                }
                let _ = tokio::time::timeout_at(deadline, notified).await;
            }
        }
        "sendMessage" => {
            let mut st = shared.lock();
            st.send_calls += 1;
            if let Some(after) = st.rate_limits.pop_front() {
                return (
                    429,
                    json!({"ok": false, "error_code": 429,
                           "description": format!("Too Many Requests: retry after {after}"),
                           "parameters": {"retry_after": after}}),
                );
            }
            let Some(chat_id) = p["chat_id"].as_i64() else {
                return err(400, "Bad Request: chat_id is empty");
            };
            let text = p["text"].as_str().unwrap_or("");
            if text.is_empty() {
                return err(400, "Bad Request: message text is empty");
            }
            if text.chars().count() > 4096 {
                return err(400, "Bad Request: message is too long");
            }
            st.sent.push(SentMessage {
                chat_id,
                text: text.to_string(),
            });
            let n = st.sent.len();
            (
                200,
                json!({"ok": true, "result": {"message_id": n, "chat": {"id": chat_id}, "text": text}}),
            )
        }
        other => err(404, &format!("Not Found: method {other}")),
    }
}
