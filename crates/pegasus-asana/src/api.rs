//! The Asana REST client of the sync: `{"data": ...}` envelopes in and out, the token in the
//! `Authorization` header only (never in a URL, never logged), lists read page by page
//! (`limit`/`offset`), and a `429` waited out for its `Retry-After` and the same request sent
//! again, so nothing is done twice and nothing is lost to a rate limit.

use reqwest::Method;
use serde_json::{json, Value};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Items asked per page.
const PAGE: usize = 100;
/// The longest `Retry-After` honoured as given (Asana's are seconds to a minute).
const MAX_RETRY_AFTER: u64 = 600;
/// The largest answer read.
const MAX_ANSWER: usize = 32 << 20;

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// `412` of `GET /events`: the sync token is missing or expired; the fresh one is given.
    #[error("the sync token expired")]
    SyncExpired(String),
    /// A refusal (4xx other than 429): the status and Asana's message.
    #[error("HTTP {0}: {1}")]
    Refused(u16, String),
    /// The network, a 5xx, an answer that is not Asana's.
    #[error("{0}")]
    Other(String),
    /// pegasusd is stopping.
    #[error("stopping")]
    Stopping,
}

/// One Asana account, as the token says.
pub struct Api {
    http: reqwest::Client,
    base: String,
    token: String,
    token_env: String,
    /// pegasusd's shutdown: a wait for `Retry-After` ends with it.
    stop: CancellationToken,
}

impl Api {
    /// A client of `base` (config.yml `asana.base_url`) with `token` (from `token_env`).
    pub fn new(
        base: &str,
        token: String,
        token_env: &str,
        stop: CancellationToken,
    ) -> Result<Api, ApiError> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| ApiError::Other(format!("no HTTP client: {}", e.without_url())))?;
        Ok(Api {
            http,
            base: base.trim_end_matches('/').to_string(),
            token,
            token_env: token_env.to_string(),
            stop,
        })
    }

    /// `GET path` (with its query): the `data`.
    pub async fn get(&self, path: &str) -> Result<Value, ApiError> {
        Ok(self.call(Method::GET, path, None).await?["data"].take())
    }

    /// `POST path` with `{"data": data}`: the answer's `data`.
    pub async fn post(&self, path: &str, data: Value) -> Result<Value, ApiError> {
        Ok(self.call(Method::POST, path, Some(data)).await?["data"].take())
    }

    /// `PUT path` with `{"data": data}`: the answer's `data`.
    pub async fn put(&self, path: &str, data: Value) -> Result<Value, ApiError> {
        Ok(self.call(Method::PUT, path, Some(data)).await?["data"].take())
    }

    /// Every item of a list, page by page. `path` may have a query (`?opt_fields=...`).
    pub async fn list(&self, path: &str) -> Result<Vec<Value>, ApiError> {
        let sep = if path.contains('?') { '&' } else { '?' };
        let mut out = Vec::new();
        let mut offset: Option<String> = None;
        loop {
            let mut p = format!("{path}{sep}limit={PAGE}");
            if let Some(o) = &offset {
                p.push_str(&format!("&offset={o}"));
            }
            let mut v = self.call(Method::GET, &p, None).await?;
            match v["data"].take() {
                Value::Array(items) => out.extend(items),
                other => {
                    return Err(ApiError::Other(format!(
                        "GET {path}: `data` is not a list but {other}"
                    )))
                }
            }
            match v["next_page"]["offset"].as_str() {
                Some(o) => offset = Some(o.to_string()),
                None => return Ok(out),
            }
        }
    }

    /// The whole answer of one call (the envelope), a 429 waited out and sent again.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        data: Option<Value>,
    ) -> Result<Value, ApiError> {
        loop {
            let mut req = self
                .http
                .request(method.clone(), format!("{}{path}", self.base))
                .bearer_auth(&self.token)
                .header("Accept", "application/json");
            if let Some(d) = &data {
                req = req.json(&json!({ "data": d }));
            }
            let resp = tokio::select! {
                _ = self.stop.cancelled() => return Err(ApiError::Stopping),
                r = req.send() => r.map_err(|e| ApiError::Other(format!("{method} {path}: {}", e.without_url())))?,
            };
            let status = resp.status().as_u16();
            let retry_after = resp
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok());
            let body = read(resp)
                .await
                .map_err(|e| ApiError::Other(format!("{method} {path}: HTTP {status}: {e}")))?;
            let v: Value = serde_json::from_slice(&body).map_err(|_| {
                ApiError::Other(format!(
                    "{method} {path}: HTTP {status}: the answer is not JSON (a proxy's error page?)"
                ))
            })?;
            if (200..300).contains(&status) {
                return Ok(v);
            }
            let message = v["errors"][0]["message"]
                .as_str()
                .unwrap_or("no message")
                .chars()
                .take(300)
                .collect::<String>();
            match status {
                429 => {
                    let wait = retry_after.unwrap_or(30).clamp(1, MAX_RETRY_AFTER);
                    tracing::info!("asana: rate limited on {method} {path}; waiting {wait} s as Retry-After says");
                    tokio::select! {
                        _ = self.stop.cancelled() => return Err(ApiError::Stopping),
                        _ = tokio::time::sleep(Duration::from_secs(wait)) => {}
                    }
                }
                412 => {
                    return match v["sync"].as_str() {
                        Some(s) => Err(ApiError::SyncExpired(s.to_string())),
                        None => Err(ApiError::Refused(412, message)),
                    }
                }
                401 => {
                    return Err(ApiError::Refused(
                        401,
                        format!(
                            "{message}: the token in ${} is wrong or revoked; put a personal access token from Asana's developer console there and restart pegasusd",
                            self.token_env
                        ),
                    ))
                }
                400..=499 => {
                    return Err(ApiError::Refused(status, format!("{method} {path}: {message}")))
                }
                _ => {
                    return Err(ApiError::Other(format!(
                        "{method} {path}: HTTP {status}: {message}"
                    )))
                }
            }
        }
    }
}

async fn read(mut resp: reqwest::Response) -> Result<Vec<u8>, String> {
    let mut raw = Vec::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| format!("the answer broke off: {}", e.without_url()))?
    {
        if raw.len() + chunk.len() > MAX_ANSWER {
            return Err(format!(
                "the answer is larger than {} MiB",
                MAX_ANSWER >> 20
            ));
        }
        raw.extend_from_slice(&chunk);
    }
    Ok(raw)
}
