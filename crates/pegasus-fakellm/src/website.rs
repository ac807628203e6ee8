//! A scripted web site for `web_fetch`'s tests: each path answers what the test said (a
//! status, headers, a body, maybe after a delay or in a stream that never ends), anything else
//! 404. Served on 127.0.0.1 on its own thread and runtime, like [`crate::FakeLlm`]; every
//! request is recorded with its `Host` header, so a test can tell which hops were made.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::net::TcpStream;

use crate::background::Background;
use crate::http::{write_chunk, write_full, write_head, Conn, Framing};

/// What one path answers.
#[derive(Debug, Clone, PartialEq)]
pub struct SitePage {
    /// The status.
    pub status: u16,
    /// Its headers besides `content-type` and the framing.
    pub headers: Vec<(String, String)>,
    /// `content-type`.
    pub content_type: String,
    /// The body.
    pub body: Vec<u8>,
    /// How long to wait before the head is sent.
    pub delay: Duration,
    /// Send the body again and again, chunked, without end (a page larger than any cap).
    pub endless: bool,
}

impl SitePage {
    /// A `200` page of `content_type`.
    pub fn ok(content_type: &str, body: impl Into<Vec<u8>>) -> SitePage {
        SitePage {
            status: 200,
            headers: Vec::new(),
            content_type: content_type.into(),
            body: body.into(),
            delay: Duration::ZERO,
            endless: false,
        }
    }

    /// A `302` to `location`.
    pub fn redirect(location: &str) -> SitePage {
        SitePage {
            status: 302,
            headers: vec![("location".into(), location.into())],
            ..SitePage::ok("text/html", "")
        }
    }

    /// This page after `delay`.
    pub fn after(mut self, delay: Duration) -> SitePage {
        self.delay = delay;
        self
    }

    /// This page's body repeated without end.
    pub fn endless(mut self) -> SitePage {
        self.endless = true;
        self
    }
}

#[derive(Default)]
struct State {
    pages: HashMap<String, SitePage>,
    hits: Vec<String>,
}

type Shared = Arc<Mutex<State>>;

fn lock(s: &Shared) -> MutexGuard<'_, State> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

/// The scripted site.
pub struct FakeSite {
    shared: Shared,
    server: Background,
}

impl FakeSite {
    /// Starts an empty site.
    pub fn start() -> std::io::Result<FakeSite> {
        let shared: Shared = Arc::default();
        let s = shared.clone();
        let server = Background::start("fakesite", move |stream| serve(s.clone(), stream))?;
        Ok(FakeSite { shared, server })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.server.addr())
    }

    /// The site's port.
    pub fn port(&self) -> u16 {
        self.server.addr().port()
    }

    /// `path` answers `page` from now on.
    pub fn page(&self, path: &str, page: SitePage) {
        lock(&self.shared).pages.insert(path.to_string(), page);
    }

    /// The paths requested so far, in order.
    pub fn hits(&self) -> Vec<String> {
        lock(&self.shared).hits.clone()
    }
}

async fn serve(shared: Shared, stream: TcpStream) {
    let mut conn = Conn::new(stream);
    while let Some(req) = conn.next_request().await {
        let path = req.target.clone();
        let page = {
            let mut state = lock(&shared);
            state.hits.push(path.clone());
            state.pages.get(&path).cloned()
        };
        let page = page.unwrap_or_else(|| SitePage {
            status: 404,
            ..SitePage::ok("text/html; charset=utf-8", "<h1>Not Found</h1>")
        });
        if req.method != "GET" {
            let _ = write_full(&mut conn.stream, 405, "text/plain", &[], b"GET only").await;
            return;
        }
        tokio::time::sleep(page.delay).await;
        let extra: Vec<(&str, String)> = page
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        if page.endless {
            if write_head(
                &mut conn.stream,
                page.status,
                &page.content_type,
                &extra,
                Framing::Chunked,
            )
            .await
            .is_err()
            {
                return;
            }
            while write_chunk(&mut conn.stream, &page.body).await.is_ok() {}
            return;
        }
        let wrote = write_full(
            &mut conn.stream,
            page.status,
            &page.content_type,
            &extra,
            &page.body,
        )
        .await;
        if wrote.is_err() || !req.keep_alive {
            return;
        }
    }
}
