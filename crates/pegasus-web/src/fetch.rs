//! `web_fetch`'s client (DESIGN.md §16 "The web"): one GET, redirects followed by hand (at most
//! [`MAX_REDIRECTS`]), every hop's host resolved here, every address checked
//! ([`crate::address::refusal`]) and the connection pinned to the checked addresses, so a name
//! that answers differently the second time (DNS rebinding) cannot slip a private address in
//! between the check and the connection. Proxies from the environment are ignored: a proxy
//! resolves the name itself, out of the check's sight (and a worker's environment is clean
//! anyway). The body is read up to `max_bytes` and the whole fetch bounded by `timeout_s`.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use pegasus_store::web::FetchConfig;
use reqwest::{header, Url};

use crate::address::{self, Class};
use crate::page::{self, Kind};

/// Redirects followed at most; the next one is refused.
pub const MAX_REDIRECTS: usize = 5;

/// What `User-Agent` says.
const USER_AGENT: &str = concat!("Pegasus-web_fetch/", env!("CARGO_PKG_VERSION"));

/// A fetched page, ready for the model.
#[derive(Debug, Clone, PartialEq)]
pub struct Page {
    /// The URL the body came from (after the redirects).
    pub url: String,
    /// Its HTTP status (2xx, or an error status whose page is given too).
    pub status: u16,
    /// Its `Content-Type`, as sent.
    pub content_type: Option<String>,
    /// How it was read.
    pub kind: Kind,
    /// Markdown (HTML) or the text itself.
    pub text: String,
    /// The `<title>` of an HTML page.
    pub title: Option<String>,
    /// The charset it was decoded from.
    pub charset: &'static str,
    /// Bytes of body read.
    pub bytes: usize,
    /// The body was longer than `max_bytes` and cut there.
    pub cut: bool,
    /// The URLs redirected through, in order.
    pub redirects: Vec<String>,
}

/// Why a fetch gave no page. Each says what happened in one line, for the model.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum FetchError {
    /// Not a URL.
    #[error("`{url}` is not a URL ({why}); give an absolute http:// or https:// URL")]
    BadUrl {
        /// The text given.
        url: String,
        /// The parser's reason.
        why: String,
    },
    /// Not http or https.
    #[error("`{url}`: web_fetch reads http:// and https:// URLs only")]
    Scheme {
        /// The URL.
        url: String,
    },
    /// The host is, or resolved to, an address the rule refuses.
    #[error("refused: {host} is {class} ({ip}){hint}")]
    Refused {
        /// The URL's host.
        host: String,
        /// The address it is or resolved to.
        ip: IpAddr,
        /// What kind of address.
        class: Class,
        /// What the user can do about it.
        hint: &'static str,
    },
    /// A metadata host name, refused before any lookup.
    #[error("refused: {host} is a cloud metadata endpoint; web_fetch never reads it")]
    MetadataName {
        /// The host.
        host: String,
    },
    /// The name did not resolve.
    #[error("cannot resolve {host}: {why}")]
    Resolve {
        /// The host.
        host: String,
        /// The resolver's reason.
        why: String,
    },
    /// One redirect too many.
    #[error("refused: more than {MAX_REDIRECTS} redirects (the last pointed to {next})")]
    TooManyRedirects {
        /// Where the redirect past the limit pointed.
        next: String,
    },
    /// A redirect without a usable `Location`.
    #[error("{url} answered {status} with no usable Location header")]
    BadRedirect {
        /// The URL that redirected.
        url: String,
        /// Its status.
        status: u16,
    },
    /// `timeout_s` passed.
    #[error("timed out after {secs} s (web.fetch.timeout_s)")]
    Timeout {
        /// The limit.
        secs: u64,
    },
    /// The request failed (refused connection, TLS, reset).
    #[error("cannot fetch {url}: {why}")]
    Request {
        /// The URL.
        url: String,
        /// What failed.
        why: String,
    },
    /// Not text.
    #[error("{url} is {content_type}, not text or HTML; web_fetch reads text and HTML pages only")]
    Binary {
        /// The URL.
        url: String,
        /// What it said it is.
        content_type: String,
    },
}

/// `web_fetch`'s client, under `web.fetch`.
#[derive(Debug, Clone)]
pub struct Fetcher {
    config: FetchConfig,
}

/// Where one hop connects: the URL's host and the addresses it may use.
struct Target {
    host: String,
    /// `None` for an IP literal (nothing to resolve).
    pinned: Option<Vec<SocketAddr>>,
}

impl Fetcher {
    /// A client under `config`.
    pub fn new(config: FetchConfig) -> Fetcher {
        Fetcher { config }
    }

    /// GETs `url` (see the module doc).
    pub async fn fetch(&self, url: &str) -> Result<Page, FetchError> {
        let secs = self.config.timeout_s;
        tokio::time::timeout(Duration::from_secs(secs), self.fetch_inner(url))
            .await
            .unwrap_or(Err(FetchError::Timeout { secs }))
    }

    async fn fetch_inner(&self, url: &str) -> Result<Page, FetchError> {
        let mut current = Url::parse(url.trim()).map_err(|e| FetchError::BadUrl {
            url: url.to_string(),
            why: e.to_string(),
        })?;
        let mut redirects = Vec::new();
        loop {
            if !matches!(current.scheme(), "http" | "https") {
                return Err(FetchError::Scheme {
                    url: current.to_string(),
                });
            }
            let target = self.target(&current).await?;
            let response = self.get(&current, &target).await?;
            let status = response.status();
            if status.is_redirection() && status != reqwest::StatusCode::NOT_MODIFIED {
                let next = response
                    .headers()
                    .get(header::LOCATION)
                    .and_then(|l| l.to_str().ok())
                    .and_then(|l| current.join(l).ok())
                    .ok_or_else(|| FetchError::BadRedirect {
                        url: current.to_string(),
                        status: status.as_u16(),
                    })?;
                if redirects.len() >= MAX_REDIRECTS {
                    return Err(FetchError::TooManyRedirects {
                        next: next.to_string(),
                    });
                }
                redirects.push(current.to_string());
                current = next;
                continue;
            }
            return self.read(current, response, redirects).await;
        }
    }

    /// Checks `url`'s host: an IP literal directly, a name after resolving it (every address
    /// it resolves to that the rule allows is kept; none = refused, naming the first).
    async fn target(&self, url: &Url) -> Result<Target, FetchError> {
        let allow = self.config.allow_private;
        let hint = if allow {
            ""
        } else {
            "; web_fetch reaches public addresses only (web.fetch.allow_private in config.yml opens private ones)"
        };
        let refused = |host: &str, ip: IpAddr, class: Class| FetchError::Refused {
            host: host.to_string(),
            ip,
            class,
            hint: if class == Class::Metadata { "" } else { hint },
        };
        let port = url.port_or_known_default().unwrap_or(80);
        match url.host() {
            Some(url::Host::Ipv4(ip)) => match address::refusal(IpAddr::V4(ip), allow) {
                Some(class) => Err(refused(&ip.to_string(), IpAddr::V4(ip), class)),
                None => Ok(Target {
                    host: ip.to_string(),
                    pinned: None,
                }),
            },
            Some(url::Host::Ipv6(ip)) => match address::refusal(IpAddr::V6(ip), allow) {
                Some(class) => Err(refused(&format!("[{ip}]"), IpAddr::V6(ip), class)),
                None => Ok(Target {
                    host: format!("[{ip}]"),
                    pinned: None,
                }),
            },
            Some(url::Host::Domain(name)) => {
                let host = name.to_ascii_lowercase();
                if address::metadata_name(&host) {
                    return Err(FetchError::MetadataName { host });
                }
                let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), port))
                    .await
                    .map_err(|e| FetchError::Resolve {
                        host: host.clone(),
                        why: e.to_string(),
                    })?
                    .collect();
                let allowed: Vec<SocketAddr> = addrs
                    .iter()
                    .filter(|a| address::refusal(a.ip(), allow).is_none())
                    .copied()
                    .collect();
                if allowed.is_empty() {
                    let first = addrs.first().ok_or_else(|| FetchError::Resolve {
                        host: host.clone(),
                        why: "no address".into(),
                    })?;
                    let class = address::refusal(first.ip(), allow).unwrap_or(Class::Reserved);
                    return Err(refused(&host, first.ip(), class));
                }
                Ok(Target {
                    host,
                    pinned: Some(allowed),
                })
            }
            None => Err(FetchError::BadUrl {
                url: url.to_string(),
                why: "it has no host".into(),
            }),
        }
    }

    /// One GET of `url`, connecting only to `target`'s checked addresses, no redirect
    /// followed, no proxy.
    async fn get(&self, url: &Url, target: &Target) -> Result<reqwest::Response, FetchError> {
        let failed = |e: reqwest::Error| FetchError::Request {
            url: url.to_string(),
            why: error_chain(&e),
        };
        let mut builder = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(USER_AGENT)
            .connect_timeout(Duration::from_secs(self.config.timeout_s));
        if let Some(addrs) = &target.pinned {
            builder = builder.resolve_to_addrs(&target.host, addrs);
        }
        let client = builder.build().map_err(failed)?;
        client
            .get(url.clone())
            .header(
                header::ACCEPT,
                "text/html,application/xhtml+xml,text/plain;q=0.9,*/*;q=0.5",
            )
            .send()
            .await
            .map_err(failed)
    }

    /// Reads the body (up to `max_bytes`) and makes it a page.
    async fn read(
        &self,
        url: Url,
        mut response: reqwest::Response,
        redirects: Vec<String>,
    ) -> Result<Page, FetchError> {
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        // Refused before a byte of the body is read when the header says it already.
        if content_type.is_some() && page::kind_of(content_type.as_deref(), b"") == Kind::Binary {
            return Err(FetchError::Binary {
                url: url.to_string(),
                content_type: page::media_type(content_type.as_deref().unwrap_or("")),
            });
        }
        let max = usize::try_from(self.config.max_bytes).unwrap_or(usize::MAX);
        let mut body = Vec::new();
        let mut cut = false;
        loop {
            let chunk = response.chunk().await.map_err(|e| FetchError::Request {
                url: url.to_string(),
                why: error_chain(&e),
            })?;
            let Some(chunk) = chunk else { break };
            let room = max - body.len();
            if chunk.len() > room {
                body.extend_from_slice(&chunk[..room]);
                cut = true;
                break;
            }
            body.extend_from_slice(&chunk);
        }
        let kind = page::kind_of(content_type.as_deref(), &body);
        if kind == Kind::Binary {
            return Err(FetchError::Binary {
                url: url.to_string(),
                content_type: "binary data".into(),
            });
        }
        let ct = content_type.clone();
        let bytes = body.len();
        // Parsing megabytes of HTML is CPU work: off the runtime's threads.
        let (text, title, charset) = tokio::task::spawn_blocking(move || {
            let (text, charset) = page::decode(&body, ct.as_deref(), kind, cut);
            match kind {
                Kind::Html => {
                    let title = page::title(&text);
                    let md = page::to_markdown(&text).unwrap_or(text);
                    (md, title, charset)
                }
                _ => (text, None, charset),
            }
        })
        .await
        .map_err(|e| FetchError::Request {
            url: url.to_string(),
            why: format!("the page could not be converted: {e}"),
        })?;
        Ok(Page {
            url: url.to_string(),
            status,
            content_type,
            kind,
            text,
            title,
            charset,
            bytes,
            cut,
            redirects,
        })
    }
}

/// An error with its sources, `outer: inner: ...` (reqwest's own text says little).
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        source = s.source();
    }
    text
}
