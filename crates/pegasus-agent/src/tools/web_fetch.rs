//! `web_fetch{url}`: read a web page (DESIGN.md §16 "The web"). HTML comes back as Markdown,
//! other text as it is; the address rule, the redirects and the caps are `pegasus_web`'s.

use serde::Deserialize;

use crate::tool::{ToolCtx, ToolOutput, TypedTool};

/// Fetches one URL with `web.fetch`'s limits.
pub struct WebFetch {
    fetcher: pegasus_web::Fetcher,
    max_bytes: u64,
}

impl WebFetch {
    /// The tool under config.yml's `web.fetch`.
    pub fn new(config: &pegasus_store::web::FetchConfig) -> WebFetch {
        WebFetch {
            fetcher: pegasus_web::Fetcher::new(config.clone()),
            max_bytes: config.max_bytes,
        }
    }
}

/// The arguments of `web_fetch`, as its schema describes them.
#[derive(Deserialize)]
pub struct Args {
    url: String,
}

impl TypedTool for WebFetch {
    type Args = Args;

    fn name(&self) -> &str {
        "web_fetch"
    }

    fn description(&self) -> &str {
        "Fetch a web page by URL (http or https, GET) and read it: HTML comes back as Markdown, other text as it is. Public addresses only; at most 5 redirects; long pages are cut."
    }

    fn schema(&self) -> serde_json::Value {
        super::string_args(&[("url", "the absolute http:// or https:// URL")], &[])
    }

    fn concurrent(&self) -> bool {
        true
    }

    async fn run(&self, args: Args, _ctx: &ToolCtx) -> Result<ToolOutput, String> {
        let page = self
            .fetcher
            .fetch(&args.url)
            .await
            .map_err(|e| format!("web_fetch: {e}"))?;
        let mut out = String::new();
        if let Some(title) = &page.title {
            out.push_str(&format!("# {title}\n"));
        }
        out.push_str(&format!("URL: {}\n", page.url));
        if let Some(first) = page.redirects.first() {
            out.push_str(&format!(
                "(redirected from {first}, {} redirect{})\n",
                page.redirects.len(),
                if page.redirects.len() == 1 { "" } else { "s" }
            ));
        }
        if let Some(ct) = &page.content_type {
            out.push_str(&format!("Content-Type: {ct}\n"));
        }
        if page.status >= 400 {
            out.push_str(&format!("HTTP status: {}\n", page.status));
        }
        out.push('\n');
        out.push_str(page.text.trim());
        if page.cut {
            out.push_str(&format!(
                "\n\n[cut: the page is longer than web.fetch.max_bytes; only its first {} bytes were read]",
                self.max_bytes
            ));
        }
        Ok(if page.status >= 400 {
            ToolOutput::error(format!(
                "web_fetch: {} answered HTTP {}\n{out}",
                page.url, page.status
            ))
        } else {
            ToolOutput::ok(out)
        })
    }
}
