//! `web:` in config.yml (DESIGN.md §16 "The web"): the limits of `web_fetch` and the backend of
//! `web_search`. This module only reads and checks them; `pegasus-web` does the fetching and
//! the searching.
//!
//! config.yml only: PROJECT.md narrows what a project may do on the web through what already
//! narrows every tool (`approvals.tools`, e.g. `web_fetch: deny` or
//! `"web_fetch(https://docs.rs/*)": allow`, and role allowlists), never by loosening the
//! address rule or naming another backend.

use serde::{Deserialize, Serialize};

/// The largest `web.fetch.max_bytes` (64 MiB): a page is read into memory.
pub const MAX_FETCH_BYTES: u64 = 64 << 20;
/// The longest `web.fetch.timeout_s`.
pub const MAX_FETCH_TIMEOUT_S: u64 = 600;
/// Brave Search's API, where `kind: brave` goes unless `base_url` says otherwise.
pub const BRAVE_BASE_URL: &str = "https://api.search.brave.com";
/// The variable holding the Brave Search key unless `api_key_env` names another.
pub const BRAVE_KEY_ENV: &str = "BRAVE_API_KEY";

/// `web:` as written.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebConfig {
    /// `web_fetch`'s limits and address rule.
    pub fetch: FetchConfig,
    /// `web_search`'s backend; `None` = the tool is not offered.
    pub search: Option<SearchConfig>,
}

/// `web.fetch`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct FetchConfig {
    /// Bytes of a body read at most; the rest is cut, and the result says so.
    pub max_bytes: u64,
    /// Seconds one fetch may take in all (every redirect and the body).
    pub timeout_s: u64,
    /// Let `web_fetch` reach loopback, private, link-local, CGNAT and other non-public
    /// addresses (cloud metadata endpoints stay refused).
    pub allow_private: bool,
}

impl Default for FetchConfig {
    fn default() -> Self {
        FetchConfig {
            max_bytes: 2_000_000,
            timeout_s: 20,
            allow_private: false,
        }
    }
}

/// Which search API `web_search` uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SearchKind {
    /// A SearXNG instance's JSON API (`format=json` must be enabled in its settings).
    Searxng,
    /// Brave Search's web search API (a subscription key).
    Brave,
}

/// `web.search`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SearchConfig {
    /// `searxng` or `brave`.
    pub kind: SearchKind,
    /// The instance (`searxng`, required) or the API's root (`brave`, default
    /// [`BRAVE_BASE_URL`]).
    #[serde(default)]
    pub base_url: Option<String>,
    /// `brave`: the environment variable holding the key (default [`BRAVE_KEY_ENV`]); pegasusd
    /// reads it at start and removes it from its environment.
    #[serde(default)]
    pub api_key_env: Option<String>,
}

impl SearchConfig {
    /// The base URL requests go to, without a trailing `/`.
    pub fn base_url(&self) -> String {
        let url = match (self.kind, &self.base_url) {
            (_, Some(u)) => u.as_str(),
            (SearchKind::Brave, None) => BRAVE_BASE_URL,
            (SearchKind::Searxng, None) => "",
        };
        url.trim_end_matches('/').to_string()
    }

    /// The variable holding the key (`brave` only).
    pub fn key_env(&self) -> Option<String> {
        match self.kind {
            SearchKind::Brave => Some(
                self.api_key_env
                    .clone()
                    .filter(|e| !e.trim().is_empty())
                    .unwrap_or_else(|| BRAVE_KEY_ENV.to_string()),
            ),
            SearchKind::Searxng => None,
        }
    }
}

impl WebConfig {
    /// Range checks serde cannot express: `Err((key, message))`.
    pub fn check(&self) -> Result<(), (String, String)> {
        let f = &self.fetch;
        if !(1024..=MAX_FETCH_BYTES).contains(&f.max_bytes) {
            return Err((
                "web.fetch.max_bytes".into(),
                format!("must be from 1024 to {MAX_FETCH_BYTES} bytes"),
            ));
        }
        if !(1..=MAX_FETCH_TIMEOUT_S).contains(&f.timeout_s) {
            return Err((
                "web.fetch.timeout_s".into(),
                format!("must be from 1 to {MAX_FETCH_TIMEOUT_S} seconds"),
            ));
        }
        let Some(s) = &self.search else {
            return Ok(());
        };
        if s.kind == SearchKind::Searxng && s.base_url.is_none() {
            return Err((
                "web.search.base_url".into(),
                "is required for `kind: searxng`: the instance's address, e.g. http://127.0.0.1:8888".into(),
            ));
        }
        if s.kind == SearchKind::Searxng && s.api_key_env.is_some() {
            return Err((
                "web.search.api_key_env".into(),
                "is for `kind: brave` only; SearXNG takes no key".into(),
            ));
        }
        let url = s.base_url();
        if !(url.starts_with("http://") || url.starts_with("https://"))
            || url.len() <= "https://".len()
        {
            return Err((
                "web.search.base_url".into(),
                format!("`{url}` is not an http:// or https:// URL"),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn web(yaml: &str) -> Result<WebConfig, String> {
        let c: WebConfig = serde_norway::from_str(yaml).map_err(|e| e.to_string())?;
        c.check().map_err(|(k, m)| format!("{k} {m}"))?;
        Ok(c)
    }

    #[test]
    fn defaults_fetch_without_search() {
        let c = web("{}").unwrap();
        assert_eq!(c.fetch, FetchConfig::default());
        assert_eq!((c.fetch.max_bytes, c.fetch.timeout_s), (2_000_000, 20));
        assert!(!c.fetch.allow_private);
        assert!(c.search.is_none());
    }

    #[test]
    fn searxng_and_brave_read_and_default() {
        let c = web("search: {kind: searxng, base_url: \"http://127.0.0.1:8888/\"}").unwrap();
        let s = c.search.unwrap();
        assert_eq!(
            (s.base_url(), s.key_env()),
            ("http://127.0.0.1:8888".into(), None)
        );
        let s = web("search: {kind: brave}").unwrap().search.unwrap();
        assert_eq!(
            (s.base_url(), s.key_env()),
            (BRAVE_BASE_URL.into(), Some("BRAVE_API_KEY".into()))
        );
        let s = web("search: {kind: brave, api_key_env: MY_KEY}")
            .unwrap()
            .search
            .unwrap();
        assert_eq!(s.key_env(), Some("MY_KEY".into()));
    }

    #[test]
    fn bad_values_are_refused_naming_the_key() {
        for (yaml, key) in [
            ("fetch: {max_bytes: 10}", "web.fetch.max_bytes"),
            ("fetch: {timeout_s: 0}", "web.fetch.timeout_s"),
            ("search: {kind: searxng}", "web.search.base_url"),
            (
                "search: {kind: searxng, base_url: \"ftp://x\"}",
                "web.search.base_url",
            ),
            (
                "search: {kind: searxng, base_url: \"http://x\", api_key_env: K}",
                "web.search.api_key_env",
            ),
        ] {
            let e = web(yaml).unwrap_err();
            assert!(e.starts_with(key), "{yaml}: {e}");
        }
        assert!(web("search: {kind: google}").is_err());
        assert!(web("fetch: {max_byte: 10}").is_err());
    }
}
