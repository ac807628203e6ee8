//! `web_search`'s backends (DESIGN.md §16 "The web"), run by pegasusd, which holds the Brave key:
//! a worker asks over its link and never sees it.
//!
//! * SearXNG: `GET {base_url}/search?q=...&format=json`; `results[]` with `url`, `title`,
//!   `content`. An instance whose `search.formats` lacks `json` answers 403, said as such.
//! * Brave Search: `GET {base_url}/res/v1/web/search?q=...&count=N` with
//!   `X-Subscription-Token`; `web.results[]` with `title`, `url`, `description`. Errors come
//!   as `{"type": "ErrorResponse", "error": {"code", "detail", ...}}` (422 for a missing or
//!   invalid token, 429 with the `X-RateLimit-*` headers for the rate and the quota).

use std::time::Duration;

use pegasus_proto::worker::SearchHit;
use pegasus_store::web::{SearchConfig, SearchKind};
use reqwest::header::HeaderMap;

/// Results given when the model asks for no number.
pub const DEFAULT_COUNT: u32 = 10;
/// Most results one search gives (Brave's own maximum for web search).
pub const MAX_COUNT: u32 = 20;
/// Brave's longest query.
const MAX_QUERY_CHARS: usize = 400;
/// How long one search may take.
const TIMEOUT: Duration = Duration::from_secs(30);
/// Largest answer read.
const MAX_ANSWER_BYTES: usize = 4 << 20;

/// Why a search gave no results, in one line for the model.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SearchError {
    /// An empty query, or one over Brave's limit.
    #[error("{0}")]
    BadQuery(String),
    /// Brave's key variable was empty when pegasusd started.
    #[error("web_search cannot run: {env} was not set when pegasusd started (web.search.api_key_env); set it and restart pegasusd")]
    MissingKey {
        /// The variable.
        env: String,
    },
    /// SearXNG with JSON turned off.
    #[error("the SearXNG instance at {base_url} refuses JSON (403): add `json` to `search.formats` in its settings.yml")]
    JsonDisabled {
        /// The instance.
        base_url: String,
    },
    /// Brave's rate or quota limit.
    #[error("Brave Search rate limit reached ({detail}){when}")]
    RateLimited {
        /// Brave's code and words.
        detail: String,
        /// When to try again, from `X-RateLimit-Reset`.
        when: String,
    },
    /// Any other refusal.
    #[error("{backend} answered {status}: {detail}")]
    Status {
        /// `SearXNG` or `Brave Search`.
        backend: &'static str,
        /// The HTTP status.
        status: u16,
        /// What it said.
        detail: String,
    },
    /// No answer.
    #[error("{backend} at {base_url} is unreachable: {why}")]
    Unreachable {
        /// `SearXNG` or `Brave Search`.
        backend: &'static str,
        /// Where.
        base_url: String,
        /// Why.
        why: String,
    },
    /// An answer in another shape.
    #[error("{backend} answered something that is not its search JSON: {why}")]
    BadAnswer {
        /// `SearXNG` or `Brave Search`.
        backend: &'static str,
        /// What was wrong.
        why: String,
    },
}

/// The configured backend, with its key.
#[derive(Clone)]
pub struct Searcher {
    kind: SearchKind,
    base_url: String,
    key: Option<String>,
    key_env: Option<String>,
    client: reqwest::Client,
}

impl std::fmt::Debug for Searcher {
    /// Never the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Searcher")
            .field("kind", &self.kind)
            .field("base_url", &self.base_url)
            .field("key", &self.key.as_ref().map(|_| "<set>"))
            .finish()
    }
}

/// Brave's key, taken out of the environment at start by [`take_key_from_env`].
static KEY: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// Reads the search backend's key variable once (Brave's) and keeps its value in this
/// process's memory only, as pegasusd does with the provider keys: returns the variable's name
/// when it held a key, for the caller to scrub from the environment so that no child (a
/// worker, a command) inherits it. Call it at start, before any thread exists.
pub fn take_key_from_env(config: &pegasus_store::web::WebConfig) -> Option<String> {
    let env = config.search.as_ref()?.key_env()?;
    let value = std::env::var(&env).ok().filter(|v| !v.trim().is_empty())?;
    *KEY.lock().unwrap_or_else(|p| p.into_inner()) = Some(value.trim().to_string());
    Some(env)
}

impl Searcher {
    /// The backend of `config`, with the key [`take_key_from_env`] took (else read from its
    /// variable now: library users and tests that never took it).
    pub fn from_config(config: &SearchConfig) -> Searcher {
        let kept = KEY.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let key = match config.key_env() {
            Some(env) => kept.or_else(|| std::env::var(env).ok()),
            None => None,
        };
        Searcher::new(config, key)
    }

    /// The backend of `config`; `key` is Brave's, read by pegasusd at start (`None` when
    /// its variable was unset: every search then says so).
    pub fn new(config: &SearchConfig, key: Option<String>) -> Searcher {
        Searcher {
            kind: config.kind,
            base_url: config.base_url(),
            key: key.filter(|k| !k.trim().is_empty()),
            key_env: config.key_env(),
            client: reqwest::Client::builder()
                .timeout(TIMEOUT)
                .user_agent(concat!("Pegasus/", env!("CARGO_PKG_VERSION")))
                // A redirect would carry the Brave key's header to wherever it points.
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap_or_default(),
        }
    }

    fn backend(&self) -> &'static str {
        match self.kind {
            SearchKind::Searxng => "SearXNG",
            SearchKind::Brave => "Brave Search",
        }
    }

    /// Searches for `query`; at most `count` results (default [`DEFAULT_COUNT`], at most
    /// [`MAX_COUNT`]).
    pub async fn search(
        &self,
        query: &str,
        count: Option<u32>,
    ) -> Result<Vec<SearchHit>, SearchError> {
        let query = query.trim();
        if query.is_empty() {
            return Err(SearchError::BadQuery("the query is empty".into()));
        }
        if query.chars().count() > MAX_QUERY_CHARS {
            return Err(SearchError::BadQuery(format!(
                "the query is over {MAX_QUERY_CHARS} characters; shorten it"
            )));
        }
        let count = count.unwrap_or(DEFAULT_COUNT).clamp(1, MAX_COUNT);
        let count_text = count.to_string();
        let request = match self.kind {
            SearchKind::Searxng => self
                .client
                .get(format!("{}/search", self.base_url))
                .query(&[("q", query), ("format", "json")]),
            SearchKind::Brave => {
                let key = self.key.as_deref().ok_or_else(|| SearchError::MissingKey {
                    env: self.key_env.clone().unwrap_or_default(),
                })?;
                self.client
                    .get(format!("{}/res/v1/web/search", self.base_url))
                    .query(&[("q", query), ("count", count_text.as_str())])
                    .header("X-Subscription-Token", key)
            }
        };
        let unreachable = |e: reqwest::Error| SearchError::Unreachable {
            backend: self.backend(),
            base_url: self.base_url.clone(),
            why: e.without_url().to_string(),
        };
        let mut response = request
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(unreachable)?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(unreachable)? {
            body.extend_from_slice(&chunk);
            if body.len() > MAX_ANSWER_BYTES {
                return Err(SearchError::BadAnswer {
                    backend: self.backend(),
                    why: format!("over {MAX_ANSWER_BYTES} bytes"),
                });
            }
        }
        let mut hits = match self.kind {
            SearchKind::Searxng => self.searxng(status, &body)?,
            SearchKind::Brave => self.brave(status, &headers, &body)?,
        };
        hits.truncate(count as usize);
        Ok(hits)
    }

    fn searxng(&self, status: u16, body: &[u8]) -> Result<Vec<SearchHit>, SearchError> {
        if status == 403 {
            return Err(SearchError::JsonDisabled {
                base_url: self.base_url.clone(),
            });
        }
        let json: Option<serde_json::Value> = serde_json::from_slice(body).ok();
        if status != 200 {
            let detail = json
                .as_ref()
                .and_then(|j| j.get("error")?.as_str().map(str::to_string))
                .unwrap_or_else(|| snippet(body));
            return Err(SearchError::Status {
                backend: "SearXNG",
                status,
                detail,
            });
        }
        let results = json
            .as_ref()
            .and_then(|j| j.get("results")?.as_array())
            .ok_or_else(|| SearchError::BadAnswer {
                backend: "SearXNG",
                why: "no `results` list".into(),
            })?;
        Ok(results.iter().filter_map(|r| hit(r, "content")).collect())
    }

    fn brave(
        &self,
        status: u16,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<Vec<SearchHit>, SearchError> {
        let json: Option<serde_json::Value> = serde_json::from_slice(body).ok();
        if status != 200 {
            // `error: {...}`, or `errors: [{...}]` as some of its documentation shows.
            let error = json.as_ref().and_then(|j| {
                j.get("error")
                    .or_else(|| j.get("errors").and_then(|e| e.get(0)))
                    .cloned()
            });
            let field = |k: &str| {
                error
                    .as_ref()
                    .and_then(|e| e.get(k)?.as_str().map(str::to_string))
            };
            let detail = match (field("code"), field("detail")) {
                (Some(c), Some(d)) => format!("{c}: {d}"),
                (Some(c), None) => c,
                (None, Some(d)) => d,
                (None, None) => snippet(body),
            };
            if status == 429 {
                return Err(SearchError::RateLimited {
                    detail,
                    when: rate_limit_when(headers),
                });
            }
            let hint = match field("code").as_deref() {
                Some("SUBSCRIPTION_TOKEN_INVALID") | Some("SUBSCRIPTION_NOT_FOUND") => {
                    "; check the key in the variable web.search.api_key_env names"
                }
                _ if status == 401 || status == 403 => {
                    "; check the key in the variable web.search.api_key_env names"
                }
                _ => "",
            };
            return Err(SearchError::Status {
                backend: "Brave Search",
                status,
                detail: format!("{detail}{hint}"),
            });
        }
        let json = json.ok_or_else(|| SearchError::BadAnswer {
            backend: "Brave Search",
            why: "not JSON".into(),
        })?;
        // No `web` section: no web results for this query (Brave leaves it out then).
        let Some(web) = json.get("web") else {
            return Ok(Vec::new());
        };
        let results = web
            .get("results")
            .and_then(|r| r.as_array())
            .ok_or_else(|| SearchError::BadAnswer {
                backend: "Brave Search",
                why: "no `web.results` list".into(),
            })?;
        Ok(results
            .iter()
            .filter_map(|r| hit(r, "description"))
            .collect())
    }
}

/// One result with a URL; its snippet from `snippet_key`, tags and entities taken out.
fn hit(r: &serde_json::Value, snippet_key: &str) -> Option<SearchHit> {
    let s = |k: &str| r.get(k).and_then(|v| v.as_str()).unwrap_or("").to_string();
    let url = s("url");
    (!url.is_empty()).then(|| SearchHit {
        title: plain(&s("title")),
        url,
        snippet: plain(&s(snippet_key)),
    })
}

/// Text without HTML tags (Brave marks matches with `<strong>`) and with the common entities
/// decoded.
fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_tag = false;
    for c in text.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out.replace("&quot;", "\"")
        .replace("&#x27;", "'")
        .replace("&#39;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// The start of a body, for an error line.
fn snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let cut: String = line.chars().take(200).collect();
    if cut.is_empty() {
        "(no body)".into()
    } else {
        cut
    }
}

/// When Brave's limit lifts, from its `X-RateLimit-Remaining` and `X-RateLimit-Reset` (one
/// number per window, the per-second one first, then the monthly quota).
fn rate_limit_when(headers: &HeaderMap) -> String {
    let list = |name: &str| -> Vec<u64> {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
            .unwrap_or_default()
    };
    let (remaining, reset) = (list("x-ratelimit-remaining"), list("x-ratelimit-reset"));
    // The window that is used up, else the first.
    let window = remaining.iter().position(|r| *r == 0).unwrap_or(0);
    match reset.get(window) {
        Some(s) if window > 0 => {
            format!("; the plan's quota is used up until it resets in {s} s")
        }
        Some(s) => format!("; try again in {s} s"),
        None => "; try again later".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snippets_lose_tags_and_entities() {
        assert_eq!(
            plain("The <strong>Rust</strong> Programming &amp; You&#x27;ll"),
            "The Rust Programming & You'll"
        );
    }

    #[test]
    fn rate_limit_names_the_window_used_up() {
        let mut h = HeaderMap::new();
        h.insert(
            "x-ratelimit-remaining",
            "0, 1000".parse().unwrap_or_else(|_| unreachable!()),
        );
        h.insert(
            "x-ratelimit-reset",
            "1, 1419704".parse().unwrap_or_else(|_| unreachable!()),
        );
        assert_eq!(rate_limit_when(&h), "; try again in 1 s");
        h.insert(
            "x-ratelimit-remaining",
            "1, 0".parse().unwrap_or_else(|_| unreachable!()),
        );
        assert!(rate_limit_when(&h).contains("quota is used up until it resets in 1419704 s"));
        assert_eq!(rate_limit_when(&HeaderMap::new()), "; try again later");
    }
}
