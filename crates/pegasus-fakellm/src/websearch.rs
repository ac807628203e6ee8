//! Fakes of the two search APIs `web_search` speaks, as strict as the real ones where a client
//! can go wrong, each on its own thread and runtime like [`crate::FakeLlm`]:
//!
//! * [`FakeSearxng`]: `GET|POST /search` (and `/`) with `q` and `format`. `format=json` on an
//!   instance whose `search.formats` lacks `json` is `403 Forbidden` (an HTML page, as Flask's
//!   `abort(403)` gives); no `q` is `400 {"error": "No query"}`; a format other than `html`,
//!   `json`, `csv` or `rss` is 400. An answer has SearXNG's keys (`query`,
//!   `number_of_results`, `results[]` with `url`, `title`, `content`, `engine`, `engines`,
//!   `score`, `category`, `positions`, `parsed_url`, plus `answers`, `corrections`,
//!   `infoboxes`, `suggestions`, `unresponsive_engines`).
//! * [`FakeBrave`]: `GET /res/v1/web/search` with `q` (1 to 400 characters, at most 50 words)
//!   and `count` (1 to 20), authenticated by `X-Subscription-Token`. A missing token or a bad
//!   parameter is `422` `VALIDATION`, a wrong token `422` `SUBSCRIPTION_TOKEN_INVALID`, a
//!   scripted limit `429` `RATE_LIMITED` with `X-RateLimit-Limit`, `-Policy`, `-Remaining` and
//!   `-Reset` (one value per window: per second, per month); errors in Brave's shape
//!   (`{"type": "ErrorResponse", "error": {"id", "status", "code", "detail", "meta"},
//!   "time"}`); an answer has `type: search`, `query.original`, and `web.results[]` with
//!   `title`, `url`, `description`, `type: search_result`, `is_source_local`, ... Other
//!   methods are 405, other paths 404.

use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{json, Value};
use tokio::net::TcpStream;

use crate::background::Background;
use crate::http::{write_full, Conn, Request};

/// One result a fake search engine gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeHit {
    /// Its title.
    pub title: String,
    /// Its URL.
    pub url: String,
    /// Its snippet (SearXNG `content`, Brave `description`).
    pub snippet: String,
}

impl FakeHit {
    /// A result.
    pub fn new(title: &str, url: &str, snippet: &str) -> FakeHit {
        FakeHit {
            title: title.into(),
            url: url.into(),
            snippet: snippet.into(),
        }
    }
}

/// A request a fake search engine received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchRequest {
    /// The HTTP method.
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// The decoded query parameters, in order.
    pub params: Vec<(String, String)>,
    /// The headers, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The status it was answered with.
    pub status: u16,
}

impl SearchRequest {
    /// The first value of parameter `name`.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The value of header `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct State {
    hits: Vec<FakeHit>,
    requests: Vec<SearchRequest>,
    json_enabled: bool,
    token: String,
    rate_limited: u32,
}

type Shared = Arc<Mutex<State>>;

fn lock(s: &Shared) -> MutexGuard<'_, State> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

/// The query parameters of a target (and of a form body), `+` and `%XX` decoded.
fn params(target: &str, body: &[u8]) -> Vec<(String, String)> {
    let query = target.split_once('?').map(|(_, q)| q).unwrap_or("");
    let form = std::str::from_utf8(body).unwrap_or("");
    query
        .split('&')
        .chain(form.split('&'))
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (decode(k), decode(v))
        })
        .collect()
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                match u8::from_str_radix(
                    std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or(""),
                    16,
                ) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// What a handler answers.
struct Answer {
    status: u16,
    content_type: &'static str,
    headers: Vec<(&'static str, String)>,
    body: String,
}

impl Answer {
    fn json(status: u16, v: Value) -> Answer {
        Answer {
            status,
            content_type: "application/json",
            headers: Vec::new(),
            body: v.to_string(),
        }
    }
}

async fn serve(shared: Shared, stream: TcpStream, handle: fn(&Shared, &Request) -> Answer) {
    let mut conn = Conn::new(stream);
    while let Some(req) = conn.next_request().await {
        let answer = handle(&shared, &req);
        lock(&shared).requests.push(SearchRequest {
            method: req.method.clone(),
            path: req.path().to_string(),
            params: params(&req.target, &req.body),
            headers: req.headers.clone(),
            status: answer.status,
        });
        let extra: Vec<(&str, String)> = answer.headers.clone();
        let wrote = write_full(
            &mut conn.stream,
            answer.status,
            answer.content_type,
            &extra,
            answer.body.as_bytes(),
        )
        .await;
        if wrote.is_err() || !req.keep_alive {
            return;
        }
    }
}

/// A fake SearXNG instance (see the module doc).
pub struct FakeSearxng {
    shared: Shared,
    server: Background,
}

impl FakeSearxng {
    /// Starts an instance; `json_enabled` is whether its `search.formats` holds `json` (the
    /// shipped settings.yml has only `html`).
    pub fn start(json_enabled: bool) -> std::io::Result<FakeSearxng> {
        let shared: Shared = Arc::new(Mutex::new(State {
            json_enabled,
            ..State::default()
        }));
        let s = shared.clone();
        let server = Background::start("fakesearxng", move |stream| {
            serve(s.clone(), stream, searxng)
        })?;
        Ok(FakeSearxng { shared, server })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.server.addr())
    }

    /// The results every search gives from now on.
    pub fn set_results(&self, hits: Vec<FakeHit>) {
        lock(&self.shared).hits = hits;
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<SearchRequest> {
        lock(&self.shared).requests.clone()
    }
}

fn searxng(shared: &Shared, req: &Request) -> Answer {
    if !matches!(req.path(), "/search" | "/") {
        return html(404, "Not Found");
    }
    if !matches!(req.method.as_str(), "GET" | "POST") {
        return html(405, "Method Not Allowed");
    }
    let params = params(&req.target, &req.body);
    let get = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let format = get("format").unwrap_or_else(|| "html".into());
    let state = lock(shared);
    if !matches!(format.as_str(), "html" | "json" | "csv" | "rss") {
        return html(400, "Bad Request");
    }
    if format != "html" && !(format == "json" && state.json_enabled) {
        return html(403, "Forbidden");
    }
    if format != "json" {
        return html(200, "SearXNG");
    }
    let q = get("q").unwrap_or_default();
    if q.trim().is_empty() {
        return Answer::json(400, json!({"error": "No query"}));
    }
    let results: Vec<Value> = state
        .hits
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let host = h
                .url
                .split("://")
                .nth(1)
                .and_then(|r| r.split('/').next())
                .unwrap_or("");
            json!({
                "url": h.url, "title": h.title, "content": h.snippet,
                "engine": "duckduckgo", "engines": ["duckduckgo", "brave"],
                "parsed_url": ["https", host, "/", "", "", ""],
                "template": "default.html", "positions": [i + 1], "score": 1.0 / (i as f64 + 1.0),
                "category": "general", "publishedDate": null, "thumbnail": "", "iframe_src": "",
                "img_src": "", "priority": ""
            })
        })
        .collect();
    Answer::json(
        200,
        json!({
            "query": q, "number_of_results": 0, "results": results, "answers": [],
            "corrections": [], "infoboxes": [], "suggestions": [], "unresponsive_engines": []
        }),
    )
}

fn html(status: u16, title: &str) -> Answer {
    Answer {
        status,
        content_type: "text/html; charset=utf-8",
        headers: Vec::new(),
        body: format!(
            "<!doctype html>\n<html lang=en>\n<title>{status} {title}</title>\n<h1>{title}</h1>\n"
        ),
    }
}

/// A fake Brave Search API (see the module doc).
pub struct FakeBrave {
    shared: Shared,
    server: Background,
}

impl FakeBrave {
    /// Starts the API, accepting subscription token `token`.
    pub fn start(token: &str) -> std::io::Result<FakeBrave> {
        let shared: Shared = Arc::new(Mutex::new(State {
            token: token.to_string(),
            ..State::default()
        }));
        let s = shared.clone();
        let server = Background::start("fakebrave", move |stream| serve(s.clone(), stream, brave))?;
        Ok(FakeBrave { shared, server })
    }

    /// `http://127.0.0.1:PORT` (the API is under `/res/v1/`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.server.addr())
    }

    /// The results every search gives from now on (cut to its `count`).
    pub fn set_results(&self, hits: Vec<FakeHit>) {
        lock(&self.shared).hits = hits;
    }

    /// The next `n` searches are refused with 429 `RATE_LIMITED`.
    pub fn rate_limit_next(&self, n: u32) {
        lock(&self.shared).rate_limited = n;
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<SearchRequest> {
        lock(&self.shared).requests.clone()
    }
}

fn brave_error(status: u16, code: &str, detail: &str, meta: Value) -> Answer {
    Answer::json(
        status,
        json!({
            "type": "ErrorResponse",
            "error": {"id": "5d832250-9396-4f6e-b84a-2a1fe524cd7d", "status": status,
                      "code": code, "detail": detail, "meta": meta},
            "time": 1_700_000_000
        }),
    )
}

fn validation(loc: Value, msg: &str) -> Answer {
    brave_error(
        422,
        "VALIDATION",
        "Unable to validate request parameter(s)",
        json!({"errors": [{"type": "value_error", "loc": loc, "msg": msg}]}),
    )
}

fn brave(shared: &Shared, req: &Request) -> Answer {
    if req.path() != "/res/v1/web/search" {
        return brave_error(404, "RESOURCE_NOT_FOUND", "Resource not found.", json!({}));
    }
    if req.method != "GET" {
        return brave_error(405, "METHOD_NOT_ALLOWED", "Method not allowed.", json!({}));
    }
    let mut state = lock(shared);
    let token = req
        .headers
        .iter()
        .find(|(k, _)| k == "x-subscription-token")
        .map(|(_, v)| v.clone());
    let Some(token) = token else {
        return validation(json!(["header", "x-subscription-token"]), "Field required");
    };
    if token != state.token {
        return brave_error(
            422,
            "SUBSCRIPTION_TOKEN_INVALID",
            "The provided subscription token is invalid.",
            json!({"component": "authentication"}),
        );
    }
    let params = params(&req.target, &req.body);
    let get = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let q = get("q").unwrap_or_default();
    if q.is_empty() || q.chars().count() > 400 || q.split_whitespace().count() > 50 {
        return validation(
            json!(["query", "q"]),
            "The query must be 1 to 400 characters and at most 50 words",
        );
    }
    let count = match get("count").map(|c| c.parse::<usize>()) {
        None => 20,
        Some(Ok(c)) if (1..=20).contains(&c) => c,
        Some(_) => {
            return validation(
                json!(["query", "count"]),
                "Input should be less than or equal to 20",
            )
        }
    };
    if state.rate_limited > 0 {
        state.rate_limited -= 1;
        let mut a = brave_error(
            429,
            "RATE_LIMITED",
            "Request rate limit exceeded for plan.",
            json!({"plan": "Free", "rate_limit": 1, "rate_current": 2, "quota_limit": 2000,
                   "quota_current": 52, "component": "rate_limiter"}),
        );
        a.headers = vec![
            ("x-ratelimit-limit", "1, 2000".into()),
            ("x-ratelimit-policy", "1;w=1, 2000;w=2592000".into()),
            ("x-ratelimit-remaining", "0, 1948".into()),
            ("x-ratelimit-reset", "1, 1419704".into()),
        ];
        return a;
    }
    let results: Vec<Value> = state
        .hits
        .iter()
        .take(count)
        .map(|h| {
            json!({
                "title": h.title, "url": h.url, "description": h.snippet,
                "type": "search_result", "subtype": "generic", "is_source_local": false,
                "is_source_both": false, "is_live": false, "language": "en",
                "family_friendly": true,
                "meta_url": {"scheme": "https", "netloc": "", "hostname": "", "path": ""}
            })
        })
        .collect();
    let mut a = Answer::json(
        200,
        json!({
            "type": "search",
            "query": {"original": q, "show_strict_warning": false, "is_navigational": false,
                      "is_news_breaking": false, "spellcheck_off": true, "country": "us",
                      "bad_results": false, "should_fallback": false, "postal_code": "",
                      "city": "", "header_country": "", "more_results_available": false,
                      "state": ""},
            "mixed": {"type": "mixed", "main": [], "top": [], "side": []},
            "web": {"type": "search", "results": results, "family_friendly": true}
        }),
    );
    a.headers = vec![
        ("x-ratelimit-limit", "1, 2000".into()),
        ("x-ratelimit-policy", "1;w=1, 2000;w=2592000".into()),
        ("x-ratelimit-remaining", "0, 1947".into()),
        ("x-ratelimit-reset", "1, 1419704".into()),
    ];
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_parameters_are_decoded() {
        assert_eq!(
            params("/search?q=rust+lang%21&format=json", b""),
            vec![
                ("q".to_string(), "rust lang!".to_string()),
                ("format".to_string(), "json".to_string())
            ]
        );
        assert_eq!(decode("%E6%97%A5"), "日");
        assert_eq!(decode("100%"), "100%");
    }
}
