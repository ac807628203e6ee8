//! The Telegram channel: a thin Bot API client, no framework, and a client of pegasusd's core
//! through its [`FrontDoor`] (requests and the event bus), like the control socket. Long-polls
//! `getUpdates` with an offset persisted in `<home>/telegram.offset` (written before an update
//! is handled, so none is handled twice across restarts), talks only to `telegram.allowed_chats`
//! (empty = nobody), answers `/status`, `/projects`, `/send NAME TEXT`, gives any other text to
//! the MainAgent, and pushes project notifications and crashes to the allowed chats. Replies are
//! split at 4,000 characters; a `429` is waited out (`retry_after`) and the same part sent
//! again, so nothing is sent twice. An answer to `getUpdates` the poller cannot use (no answer,
//! not JSON, `ok: false`, a `result` that is not a list, nothing new in it, an empty list at
//! once) is waited out: 1 s doubling to 60 s (or the server's `retry_after` when longer), back
//! to 1 s with the first good answer, and logged once per distinct failure, never once per poll.
//! The token is part of every URL, so no URL is ever logged. Tool-call approvals go out with
//! inline buttons and come back as `callback_query` updates: see [`approvals`].

mod approvals;

use pegasus_proto::ctl::{CtlRequest, CtlResponse, ProjectInfo};
use pegasus_proto::{BusBody, Channel, ProjectStatus};
use pegasus_supervisor::front_door::{self as bus, Received};
use pegasus_supervisor::FrontDoor;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest part of a reply; Telegram's limit is 4,096.
const PART: usize = 4000;
/// Attempts per part for errors other than 429.
const ATTEMPTS: u32 = 5;

struct Bot {
    http: reqwest::Client,
    /// `{base_url}/bot{token}`: never logged.
    api: String,
    /// The token itself, only to blank it out of anything the server says.
    token: String,
    /// Where the token comes from, for the refusal that says to fix it.
    token_env: String,
    allowed: Vec<i64>,
    /// Users whose approval presses count (`telegram.allowed_users`); empty = any member of an
    /// allowed chat.
    users: Vec<i64>,
}

/// Telegram as a client of pegasusd's core ([`pegasus_supervisor::DaemonOptions`]); it has
/// nothing to do without a bot token (the variable `telegram.token_env` names, taken by
/// pegasusd at start).
pub fn client() -> pegasus_supervisor::Client {
    Box::new(|door: FrontDoor| {
        let token = door.secret(&door.config().telegram.token_env)?.to_string();
        Some(Box::pin(run(door, token)) as _)
    })
}

/// Runs the adapter until the daemon stops.
async fn run(sup: FrontDoor, token: String) {
    let cfg = sup.config().telegram.clone();
    let http = match reqwest::Client::builder()
        .timeout(Duration::from_secs(cfg.poll_timeout_s + 15))
        .build()
    {
        Ok(c) => c,
        Err(e) => return tracing::warn!("telegram: no HTTP client: {}", e.without_url()),
    };
    let bot = Arc::new(Bot {
        http,
        api: format!("{}/bot{token}", cfg.base_url.trim_end_matches('/')),
        token,
        token_env: cfg.token_env.clone(),
        allowed: cfg.allowed_chats.clone(),
        users: cfg.allowed_users.clone(),
    });
    if bot.allowed.is_empty() {
        tracing::warn!("telegram: `telegram.allowed_chats` is empty, so every message is ignored; add your chat id");
    }
    if !bot.allowed.is_empty() && bot.users.is_empty() {
        tracing::warn!("telegram: `telegram.allowed_users` is empty, so any member of an allowed chat can approve tool calls; list the user ids that may (yours: the `from.id` of your messages)");
    }
    tracing::info!(
        chats = bot.allowed.len(),
        users = bot.users.len(),
        "telegram adapter started"
    );
    tokio::spawn(push_notifications(sup.clone(), bot.clone()));
    tokio::spawn(approvals::push(sup.clone(), bot.clone()));
    let offset_file = sup.home().root().join("telegram.offset");
    let mut offset: i64 = pegasus_store::read_text_limited(&offset_file, 64)
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0);
    let mut pacing = Pacing::default();
    loop {
        let body = json!({"offset": offset, "timeout": cfg.poll_timeout_s, "allowed_updates": ["message", "callback_query"]});
        let asked = Instant::now();
        let got = tokio::select! {
            _ = sup.shutdown().cancelled() => return,
            got = bot.call("getUpdates", &body) => got,
        };
        let updates = match got.and_then(|result| new_updates(result, offset, asked.elapsed())) {
            Ok(updates) => {
                pacing.recovered();
                updates
            }
            Err(e) => {
                let wait = pacing.failed(&e);
                tokio::select! {
                    _ = sup.shutdown().cancelled() => return,
                    _ = tokio::time::sleep(wait) => {}
                }
                continue;
            }
        };
        for (id, update) in updates {
            offset = id + 1;
            // Durable before handling: a crash now loses this update rather than repeating it.
            if let Err(e) = pegasus_store::write_atomic(&offset_file, offset.to_string().as_bytes())
            {
                tracing::warn!("telegram: cannot save the update offset: {e}");
            }
            if let Some(q) = update.get("callback_query") {
                approvals::press(&sup, &bot, q);
            } else {
                handle(&sup, &bot, id, &update["message"]);
            }
        }
    }
}

/// The updates of a `getUpdates` result that are new (`update_id` at or above `offset`, in
/// increasing order), whole (a `message` or a `callback_query`). An answer the poller cannot
/// use is an error, so the caller waits before asking again instead of asking again at once: a
/// result that is not a list, a list with nothing new in it (asking again with the same offset
/// gets the same list), and an empty list that came back at once (a server ignoring the
/// long-poll timeout).
fn new_updates(result: Value, offset: i64, took: Duration) -> Result<Vec<(i64, Value)>, CallError> {
    let Value::Array(list) = result else {
        return Err(CallError::Other(format!(
            "getUpdates answered `ok` with a `result` that is not a list of updates but {}",
            kind_of(&result)
        )));
    };
    if list.is_empty() {
        if took < EAGER {
            return Err(CallError::Other(
                "getUpdates answered an empty list at once instead of waiting for updates (the server ignores the long-poll `timeout`)".into(),
            ));
        }
        return Ok(Vec::new());
    }
    let total = list.len();
    let mut next = offset;
    let mut fresh = Vec::new();
    for u in list {
        // `id + 1` is the next offset, so the largest id is not usable either.
        let Some(id) = u["update_id"]
            .as_i64()
            .filter(|id| *id >= next && *id < i64::MAX)
        else {
            continue;
        };
        next = id + 1;
        fresh.push((id, u));
    }
    if fresh.is_empty() {
        return Err(CallError::Other(format!(
            "getUpdates answered {total} updates and none is new (each lacks an `update_id` at or above the offset it was given)"
        )));
    }
    Ok(fresh)
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null (or missing)",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// An empty `getUpdates` answer sooner than this did not wait (`poll_timeout_s` is at least 1).
const EAGER: Duration = Duration::from_millis(500);
/// The first wait after an unusable answer; it doubles with each one after it, up to
/// [`MAX_WAIT`], and starts over with the first good answer.
const FIRST_WAIT: Duration = Duration::from_secs(1);
const MAX_WAIT: Duration = Duration::from_secs(60);
/// Distinct failures remembered (so each is logged once) between two good answers.
const REMEMBERED: usize = 16;
/// The largest Bot API answer read; 100 updates of a few KiB each are far below it.
const MAX_ANSWER: usize = 16 << 20;

/// How long the poller waits after unusable answers, and which of them it has logged.
struct Pacing {
    next: Duration,
    failures: u64,
    logged: Vec<String>,
}

impl Default for Pacing {
    fn default() -> Pacing {
        Pacing {
            next: FIRST_WAIT,
            failures: 0,
            logged: Vec::new(),
        }
    }
}

impl Pacing {
    /// Counts an unusable answer, logs it when it is new since the last good answer, and
    /// returns how long to wait: the backoff, or the server's `retry_after` when longer.
    fn failed(&mut self, e: &CallError) -> Duration {
        let mut wait = self.next;
        if let CallError::RetryAfter(s) = e {
            wait = wait.max(Duration::from_secs((*s).clamp(1, 3600)));
        }
        self.next = (self.next * 2).min(MAX_WAIT);
        self.failures += 1;
        let key = match e {
            // Telegram counts `retry_after` down: one failure, whatever the number.
            CallError::RetryAfter(_) => "rate limited".to_string(),
            CallError::Refused(m) | CallError::Other(m) => m.clone(),
        };
        if !self.logged.contains(&key) {
            tracing::warn!(
                "telegram: getUpdates failed: {e}; retrying in {} s, then less and less often (at most every {} s) until it answers well again; this failure is not logged again until then",
                wait.as_secs(),
                MAX_WAIT.as_secs()
            );
            if self.logged.len() < REMEMBERED {
                self.logged.push(key);
            }
        }
        wait
    }

    /// A good answer: the next failure waits [`FIRST_WAIT`] again and is logged again.
    fn recovered(&mut self) {
        if self.failures > 0 {
            tracing::info!(
                "telegram: getUpdates answers well again after {} unusable answers",
                self.failures
            );
        }
        *self = Pacing::default();
    }
}

impl Bot {
    /// One Bot API call; the `result` on success. Errors never contain the URL or the token.
    async fn call(&self, method: &str, body: &Value) -> Result<Value, CallError> {
        let mut resp = self
            .http
            .post(format!("{}/{method}", self.api))
            .json(body)
            .send()
            .await
            .map_err(|e| CallError::Other(e.without_url().to_string()))?;
        let status = resp.status().as_u16();
        let json_type = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_none_or(|t| t.contains("json"));
        let mut raw = Vec::new();
        loop {
            let chunk = resp.chunk().await.map_err(|e| {
                CallError::Other(format!(
                    "HTTP {status}: the answer broke off: {}",
                    e.without_url()
                ))
            })?;
            let Some(chunk) = chunk else { break };
            if raw.len() + chunk.len() > MAX_ANSWER {
                return Err(CallError::Other(format!(
                    "HTTP {status}: the answer is larger than {} MiB",
                    MAX_ANSWER >> 20
                )));
            }
            raw.extend_from_slice(&chunk);
        }
        let v: Value = serde_json::from_slice(&raw).map_err(|e| {
            CallError::Other(if json_type {
                format!("HTTP {status}: the answer is malformed JSON ({e})")
            } else {
                format!("HTTP {status}: the answer is not JSON (a proxy's error page?)")
            })
        })?;
        let Some(ok) = v["ok"].as_bool() else {
            return Err(CallError::Other(format!(
                "HTTP {status}: the answer has no `ok` field, so it is not a Bot API answer"
            )));
        };
        if ok {
            return Ok(v["result"].clone());
        }
        let desc = self.redact(v["description"].as_str().unwrap_or("no description"));
        match (status, v["parameters"]["retry_after"].as_u64()) {
            (_, Some(after)) => Err(CallError::RetryAfter(after)),
            (401, _) => Err(CallError::Refused(format!(
                "HTTP 401: {desc}: the bot token is wrong or revoked; put the one @BotFather gave you in ${} and restart pegasusd",
                self.token_env
            ))),
            (400..=499, _) if status != 429 => {
                Err(CallError::Refused(format!("HTTP {status}: {desc}")))
            }
            _ => Err(CallError::Other(format!("HTTP {status}: {desc}"))),
        }
    }

    /// What the server said, fit for one log line: the token blanked out (a server may echo
    /// it), control characters as spaces, at most 300 characters.
    fn redact(&self, text: &str) -> String {
        let text = if self.token.is_empty() {
            text.to_string()
        } else {
            text.replace(&self.token, "<token>")
        };
        text.chars()
            .take(300)
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect()
    }

    /// Sends `text` to `chat` in parts of at most [`PART`] characters, each exactly once.
    async fn send(&self, chat: i64, text: &str) {
        for part in split(text) {
            let body = json!({"chat_id": chat, "text": part});
            let Some(_) = self.call_retrying("sendMessage", &body, chat).await else {
                return;
            };
        }
    }

    /// One Bot API call for `chat`, a `429` waited out and other failures retried a few times;
    /// the result, or `None` (logged) once it is refused or keeps failing.
    async fn call_retrying(&self, method: &str, body: &Value, chat: i64) -> Option<Value> {
        let mut attempts = 0;
        loop {
            match self.call(method, body).await {
                Ok(v) => return Some(v),
                Err(CallError::RetryAfter(s)) => {
                    tracing::info!(chat, "telegram: rate limited; waiting {s} s");
                    tokio::time::sleep(Duration::from_secs(s.clamp(1, 300))).await;
                }
                Err(CallError::Refused(e)) => {
                    tracing::warn!(chat, "telegram: {method} refused: {e}");
                    return None;
                }
                Err(CallError::Other(e)) => {
                    attempts += 1;
                    if attempts >= ATTEMPTS {
                        tracing::warn!(
                            chat,
                            "telegram: {method} failed {attempts} times: {e}; giving up"
                        );
                        return None;
                    }
                    tokio::time::sleep(Duration::from_secs(1 << attempts)).await;
                }
            }
        }
    }
}

enum CallError {
    RetryAfter(u64),
    Refused(String),
    Other(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::RetryAfter(s) => write!(f, "rate limited (retry after {s} s)"),
            CallError::Refused(e) | CallError::Other(e) => f.write_str(e),
        }
    }
}

/// Parts of at most [`PART`] characters, cut at a line break when there is one nearby.
pub(crate) fn split(text: &str) -> Vec<String> {
    let text = if text.trim().is_empty() {
        "(empty)"
    } else {
        text
    };
    let chars: Vec<char> = text.chars().collect();
    let mut parts = Vec::new();
    let mut start = 0;
    while start < chars.len() {
        let mut end = (start + PART).min(chars.len());
        if end < chars.len() {
            if let Some(nl) = (start + PART / 2..end).rev().find(|&i| chars[i] == '\n') {
                end = nl + 1;
            }
        }
        parts.push(chars[start..end].iter().collect());
        start = end;
    }
    parts
}

/// One message of update `update_id` (the client id of a `/send`, DESIGN.md §11: were the update
/// seen again, the project would not run it twice).
fn handle(sup: &FrontDoor, bot: &Arc<Bot>, update_id: i64, msg: &Value) {
    let (Some(chat), Some(text)) = (msg["chat"]["id"].as_i64(), msg["text"].as_str()) else {
        return;
    };
    if !bot.allowed.contains(&chat) {
        tracing::info!(
            chat,
            "telegram: message from a chat not in telegram.allowed_chats ignored"
        );
        return;
    }
    let (sup, bot, text) = (sup.clone(), bot.clone(), text.trim().to_string());
    tokio::spawn(async move {
        let reply = answer(&sup, chat, update_id, &text).await;
        bot.send(chat, &reply).await;
    });
}

async fn answer(sup: &FrontDoor, chat: i64, update_id: i64, text: &str) -> String {
    // Everything asked from this chat is recorded as from `telegram:<chat>`.
    let from = Channel::Telegram(Some(chat));
    let (cmd, rest) = text.split_once(char::is_whitespace).unwrap_or((text, ""));
    // `/status@MyBot` in groups.
    let cmd = cmd.split('@').next().unwrap_or(cmd);
    match cmd {
        "/status" => match sup.request(&from, CtlRequest::Status).await {
            CtlResponse::Status(s) => {
                let is_active = |p: &&ProjectInfo| p.status == Some(ProjectStatus::Active);
                let active = s.projects.iter().filter(is_active).count();
                let mut out = format!(
                    "pegasusd up {} min, {active} active projects, ${:.4} today",
                    s.uptime_s / 60,
                    s.cost_today_usd
                );
                for p in s.projects.iter().filter(is_active) {
                    out.push_str(&format!("\n• {} — {}", p.name, p.worker_state));
                    if let Some(t) = &p.task {
                        out.push_str(&format!(" (running {t})"));
                    }
                }
                out
            }
            other => describe(other),
        },
        "/projects" => match sup.request(&from, CtlRequest::ProjectList { status: None }).await {
            CtlResponse::Projects(list) if list.is_empty() => "No projects yet.".into(),
            CtlResponse::Projects(list) => list
                .iter()
                .map(|p| format!("• {} — {} (${:.4})", p.name, p.status_word(), p.cost_usd))
                .collect::<Vec<_>>()
                .join("\n"),
            other => describe(other),
        },
        "/send" => {
            let rest = rest.trim();
            let Some((name, body)) = rest.split_once(char::is_whitespace) else {
                return "Usage: /send NAME TEXT".into();
            };
            let req = CtlRequest::ProjectSend {
                name: name.to_string(),
                text: body.trim().to_string(),
                wait: true,
                client_id: Some(format!("telegram:{update_id}")),
            };
            match sup.request(&from, req).await {
                CtlResponse::Reply { text, .. } => format!("{name}: {text}"),
                other => describe(other),
            }
        }
        "/start" | "/help" => "Pegasus here. /status, /projects, /send NAME TEXT; anything else goes to the MainAgent.".into(),
        _ => match sup.request(&from, CtlRequest::Chat { text: text.to_string() }).await {
            CtlResponse::Reply { text, .. } => text,
            other => format!("The MainAgent could not answer: {}", describe(other)),
        },
    }
}

fn describe(resp: CtlResponse) -> String {
    match resp {
        CtlResponse::Failed { message, .. } | CtlResponse::Done { message } => message,
        other => format!("{other:?}"),
    }
}

/// Project notifications (`notify`) and crashes go to every allowed chat.
async fn push_notifications(sup: FrontDoor, bot: Arc<Bot>) {
    let mut rx = sup.subscribe();
    loop {
        let got = tokio::select! {
            _ = sup.shutdown().cancelled() => return,
            got = bus::next(&mut rx) => got,
        };
        let e = match got {
            Some(Received::Event(e)) => e,
            Some(Received::Lagged(_)) => continue,
            None => return,
        };
        let text = match &e.body {
            BusBody::Notify { text } => format!("[{}] {text}", e.project),
            BusBody::Crash { reason } => format!("[{}] worker crashed: {reason}", e.project),
            _ => continue,
        };
        for chat in &bot.allowed {
            bot.send(*chat, &text).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_split_under_the_limit_preferring_line_breaks() {
        assert_eq!(split("hi"), vec!["hi"]);
        let long = "a".repeat(9000);
        let parts = split(&long);
        assert_eq!(
            parts.iter().map(|p| p.chars().count()).collect::<Vec<_>>(),
            vec![4000, 4000, 1000]
        );
        let lines = format!("{}\n{}", "x".repeat(3000), "y".repeat(3000));
        let parts = split(&lines);
        assert_eq!(parts[0], format!("{}\n", "x".repeat(3000)));
        assert_eq!(parts.concat(), lines);
        let wide = "é".repeat(5000);
        assert!(split(&wide).iter().all(|p| p.chars().count() <= PART));
    }

    #[test]
    fn only_new_updates_in_a_list_are_usable() {
        let slow = Duration::from_secs(1);
        let msg = |id: Value| json!({"update_id": id, "message": {"text": "x"}});
        for bad in [json!({"update_id": 5}), json!(null), json!("[]"), json!(3)] {
            let e = new_updates(bad.clone(), 0, slow)
                .err()
                .map(|e| e.to_string());
            assert!(e.is_some_and(|e| e.contains("not a list")), "{bad}");
        }
        // An empty list after the long poll waited is fine; at once, it is not.
        assert!(new_updates(json!([]), 0, slow).is_ok_and(|u| u.is_empty()));
        assert!(new_updates(json!([]), 0, Duration::ZERO).is_err());
        // Nothing at or above the offset, no id, an id with no next offset: nothing new.
        for stale in [
            json!([msg(json!(3)), msg(json!(9))]),
            json!([{"message": {}}, msg(json!("11"))]),
            json!([msg(json!(i64::MAX))]),
        ] {
            let e = new_updates(stale.clone(), 10, slow)
                .err()
                .map(|e| e.to_string());
            assert!(e.is_some_and(|e| e.contains("none is new")), "{stale}");
        }
        // New ones are taken in order, older or repeated ones between them skipped.
        let got = new_updates(
            json!([
                msg(json!(10)),
                msg(json!(4)),
                msg(json!(12)),
                msg(json!(12))
            ]),
            10,
            slow,
        )
        .ok()
        .map(|u| u.into_iter().map(|(id, _)| id).collect::<Vec<_>>());
        assert_eq!(got, Some(vec![10, 12]));
    }

    #[test]
    fn unusable_answers_wait_longer_and_longer_honour_retry_after_and_start_over() {
        let mut p = Pacing::default();
        let other = || CallError::Other("not JSON".into());
        let waits: Vec<u64> = (0..8).map(|_| p.failed(&other()).as_secs()).collect();
        assert_eq!(waits, vec![1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(p.logged, vec!["not JSON".to_string()], "logged once");
        p.recovered();
        assert_eq!(p.failed(&CallError::RetryAfter(5)).as_secs(), 5);
        assert_eq!(p.failed(&CallError::RetryAfter(0)).as_secs(), 2);
        assert_eq!(p.failed(&CallError::RetryAfter(u64::MAX)).as_secs(), 3600);
        assert_eq!(p.logged.len(), 1, "rate limits are one failure");
        p.recovered();
        assert_eq!(p.failed(&other()).as_secs(), 1);
    }
}
