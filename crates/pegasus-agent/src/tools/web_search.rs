//! `web_search{query, count?}`: search the web through the backend config.yml names (DESIGN.md
//! §16 "The web"). The search itself is made where the backend's key is (pegasusd, over the
//! worker's link): this tool only asks and shows the results.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use pegasus_proto::worker::SearchHit;
use serde::Deserialize;

use crate::tool::{ToolCtx, ToolOutput, TypedTool};

/// The future a [`WebSearch`] returns: the results, or one line for the model.
pub type SearchFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Vec<SearchHit>, String>> + Send + 'a>>;

/// Whoever makes the search: in a worker, the link to pegasusd.
pub trait WebSearch: Send + Sync {
    /// Searches for `query`, at most `count` results (`None` = the backend's default).
    fn search(&self, query: String, count: Option<u32>) -> SearchFuture<'_>;
}

/// Searches the web; offered only when config.yml has `web.search`.
pub struct WebSearchTool {
    searcher: Arc<dyn WebSearch>,
}

impl WebSearchTool {
    /// The tool, searching through `searcher`.
    pub fn new(searcher: Arc<dyn WebSearch>) -> WebSearchTool {
        WebSearchTool { searcher }
    }
}

/// The arguments of `web_search`, as its schema describes them.
#[derive(Deserialize)]
pub struct Args {
    query: String,
    #[serde(default)]
    count: Option<u32>,
}

impl TypedTool for WebSearchTool {
    type Args = Args;

    fn name(&self) -> &str {
        "web_search"
    }

    fn description(&self) -> &str {
        "Search the web. Returns titles, URLs and snippets, best first; read a result with web_fetch."
    }

    fn schema(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "what to search for"},
                "count": {"type": "integer", "minimum": 1, "maximum": 20, "description": "results wanted (default 10)"}
            },
            "required": ["query"]
        })
    }

    fn concurrent(&self) -> bool {
        true
    }

    async fn run(&self, args: Args, _ctx: &ToolCtx) -> Result<ToolOutput, String> {
        if args.query.trim().is_empty() {
            return Err("`query` is empty".into());
        }
        let hits = self
            .searcher
            .search(args.query.clone(), args.count)
            .await
            .map_err(|e| format!("web_search: {e}"))?;
        if hits.is_empty() {
            return Ok(ToolOutput::ok(format!("no results for {:?}", args.query)));
        }
        let mut out = String::new();
        for (i, h) in hits.iter().enumerate() {
            out.push_str(&format!("{}. {}\n   {}\n", i + 1, h.title, h.url));
            if !h.snippet.is_empty() {
                out.push_str(&format!("   {}\n", h.snippet));
            }
        }
        Ok(ToolOutput::ok(out.trim_end().to_string()))
    }
}
