//! The Telegram channel (SPEC §11): a thin Bot API client, no framework. Long-polls
//! `getUpdates` with an offset persisted in `<home>/telegram.offset` (written before an update
//! is handled, so none is handled twice across restarts), talks only to `telegram.allowed_chats`
//! (empty = nobody), answers `/status`, `/projects`, `/send NAME TEXT`, gives any other text to
//! the MainAgent, and pushes project notifications and crashes to the allowed chats. Replies are
//! split at 4,000 characters; a `429` is waited out (`retry_after`) and the same part sent
//! again, so nothing is sent twice. The token is part of every URL, so no URL is ever logged.

use crate::bus::{self, Received};
use crate::handlers::dispatch;
use crate::supervisor::Supervisor;
use pegasus_proto::ctl::{CtlRequest, CtlResponse};
use pegasus_proto::BusBody;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

/// Longest part of a reply; Telegram's limit is 4,096.
const PART: usize = 4000;
/// Attempts per part for errors other than 429.
const ATTEMPTS: u32 = 5;

struct Bot {
    http: reqwest::Client,
    /// `{base_url}/bot{token}`: never logged.
    api: String,
    allowed: Vec<i64>,
}

/// Runs the adapter until the daemon stops.
pub(crate) async fn run(sup: Arc<Supervisor>, token: String) {
    let cfg = sup.config.telegram.clone();
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
        allowed: cfg.allowed_chats.clone(),
    });
    if bot.allowed.is_empty() {
        tracing::warn!("telegram: `telegram.allowed_chats` is empty, so every message is ignored; add your chat id");
    }
    tracing::info!(chats = bot.allowed.len(), "telegram adapter started");
    tokio::spawn(push_notifications(sup.clone(), bot.clone()));
    let offset_file = sup.home.root().join("telegram.offset");
    let mut offset: i64 = pegasus_store::read_text_limited(&offset_file, 64)
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0);
    let mut backoff = Duration::from_secs(1);
    loop {
        let body = json!({"offset": offset, "timeout": cfg.poll_timeout_s, "allowed_updates": ["message"]});
        let got = tokio::select! {
            _ = sup.shutdown.cancelled() => return,
            got = bot.call("getUpdates", &body) => got,
        };
        let updates = match got {
            Ok(v) => {
                backoff = Duration::from_secs(1);
                v.as_array().cloned().unwrap_or_default()
            }
            Err(e) => {
                tracing::warn!("telegram: getUpdates failed: {e}; retrying in {backoff:?}");
                tokio::select! {
                    _ = sup.shutdown.cancelled() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(60));
                continue;
            }
        };
        for u in updates {
            let Some(id) = u["update_id"].as_i64() else {
                continue;
            };
            if id < offset {
                continue;
            }
            offset = id + 1;
            // Durable before handling: a crash now loses this update rather than repeating it.
            if let Err(e) = pegasus_store::write_atomic(&offset_file, offset.to_string().as_bytes())
            {
                tracing::warn!("telegram: cannot save the update offset: {e}");
            }
            handle(&sup, &bot, &u["message"]);
        }
    }
}

impl Bot {
    /// One Bot API call; the `result` on success. Errors never contain the URL.
    async fn call(&self, method: &str, body: &Value) -> Result<Value, CallError> {
        let resp = self
            .http
            .post(format!("{}/{method}", self.api))
            .json(body)
            .send()
            .await
            .map_err(|e| CallError::Other(e.without_url().to_string()))?;
        let status = resp.status().as_u16();
        let v: Value = resp
            .json()
            .await
            .map_err(|e| CallError::Other(format!("HTTP {status}: {}", e.without_url())))?;
        if v["ok"].as_bool() == Some(true) {
            return Ok(v["result"].clone());
        }
        let desc = v["description"]
            .as_str()
            .unwrap_or("no description")
            .to_string();
        match (status, v["parameters"]["retry_after"].as_u64()) {
            (429, Some(after)) => Err(CallError::RetryAfter(after)),
            (400..=499, _) if status != 429 => {
                Err(CallError::Refused(format!("HTTP {status}: {desc}")))
            }
            _ => Err(CallError::Other(format!("HTTP {status}: {desc}"))),
        }
    }

    /// Sends `text` to `chat` in parts of at most [`PART`] characters, each exactly once.
    async fn send(&self, chat: i64, text: &str) {
        for part in split(text) {
            let mut attempts = 0;
            loop {
                match self
                    .call("sendMessage", &json!({"chat_id": chat, "text": part}))
                    .await
                {
                    Ok(_) => break,
                    Err(CallError::RetryAfter(s)) => {
                        tracing::info!(chat, "telegram: rate limited; waiting {s} s");
                        tokio::time::sleep(Duration::from_secs(s.clamp(1, 300))).await;
                    }
                    Err(CallError::Refused(e)) => {
                        return tracing::warn!(chat, "telegram: sendMessage refused: {e}");
                    }
                    Err(CallError::Other(e)) => {
                        attempts += 1;
                        if attempts >= ATTEMPTS {
                            return tracing::warn!(
                                chat,
                                "telegram: sendMessage failed {attempts} times: {e}; giving up"
                            );
                        }
                        tokio::time::sleep(Duration::from_secs(1 << attempts)).await;
                    }
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

fn handle(sup: &Arc<Supervisor>, bot: &Arc<Bot>, msg: &Value) {
    let Some(chat) = msg["chat"]["id"].as_i64() else {
        return;
    };
    let Some(text) = msg["text"].as_str().map(str::to_string) else {
        return;
    };
    if !bot.allowed.contains(&chat) {
        tracing::info!(
            chat,
            "telegram: message from a chat not in telegram.allowed_chats ignored"
        );
        return;
    }
    let (sup, bot) = (sup.clone(), bot.clone());
    tokio::spawn(async move {
        let reply = answer(&sup, chat, text.trim()).await;
        bot.send(chat, &reply).await;
    });
}

async fn answer(sup: &Arc<Supervisor>, chat: i64, text: &str) -> String {
    let (cmd, rest) = text.split_once(char::is_whitespace).unwrap_or((text, ""));
    // `/status@MyBot` in groups.
    let cmd = cmd.split('@').next().unwrap_or(cmd);
    match cmd {
        "/status" => match dispatch(sup, CtlRequest::Status).await {
            CtlResponse::Status(s) => {
                let active = s.projects.iter().filter(|p| p.status == "active").count();
                let mut out = format!(
                    "pegasusd up {} min, {active} active projects, ${:.4} today",
                    s.uptime_s / 60,
                    s.cost_today_usd
                );
                for p in s.projects.iter().filter(|p| p.status == "active") {
                    out.push_str(&format!("\n• {} — {}", p.name, p.worker_state));
                    if let Some(t) = &p.task {
                        out.push_str(&format!(" (running {t})"));
                    }
                }
                out
            }
            other => describe(other),
        },
        "/projects" => match dispatch(sup, CtlRequest::ProjectList { status: None }).await {
            CtlResponse::Projects(list) if list.is_empty() => "No projects yet.".into(),
            CtlResponse::Projects(list) => list
                .iter()
                .map(|p| format!("• {} — {} (${:.4})", p.name, p.status, p.cost_usd))
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
            };
            match dispatch(sup, req).await {
                CtlResponse::Reply { text, .. } => format!("{name}: {text}"),
                other => describe(other),
            }
        }
        "/start" | "/help" => "Pegasus here. /status, /projects, /send NAME TEXT; anything else goes to the MainAgent.".into(),
        _ => match sup.ask_main(&format!("telegram:{chat}"), text.to_string()).await {
            Ok(reply) => reply,
            Err(e) => format!("The MainAgent could not answer: {e}"),
        },
    }
}

fn describe(resp: CtlResponse) -> String {
    match resp {
        CtlResponse::Failed { message, .. } => message,
        CtlResponse::Done { message } => message,
        other => format!("{other:?}"),
    }
}

/// Project notifications (`notify`) and crashes go to every allowed chat.
async fn push_notifications(sup: Arc<Supervisor>, bot: Arc<Bot>) {
    let mut rx = sup.bus.subscribe();
    loop {
        let got = tokio::select! {
            _ = sup.shutdown.cancelled() => return,
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
}
