//! Where a worker's `web_search` calls go (DESIGN.md §16 "The web"): the searches of one worker
//! connection. A worker sends `WebSearch{id, query, count}`; pegasusd runs it through the
//! configured backend (`pegasus_web::Searcher`, which holds the Brave key: it never reaches a
//! worker) on its own task and hands `WebSearchResult{id, result}` to the connection's frame
//! writer. The searches die with the connection.

use pegasus_proto::worker::ToWorker;
use tokio::{sync::mpsc, task::JoinSet};

/// Searches of one worker in flight at most; more are refused at once (a model looping on
/// searches must not queue up the backend's rate limit).
const MAX_IN_FLIGHT: usize = 4;

/// The web searches of one worker connection.
pub(crate) struct WebSearches {
    searcher: Option<pegasus_web::Searcher>,
    project: String,
    to_worker: mpsc::UnboundedSender<ToWorker>,
    running: JoinSet<()>,
}

impl WebSearches {
    pub fn new(
        searcher: Option<pegasus_web::Searcher>,
        project: String,
        to_worker: mpsc::UnboundedSender<ToWorker>,
    ) -> Self {
        WebSearches {
            searcher,
            project,
            to_worker,
            running: JoinSet::new(),
        }
    }

    /// Starts search `id` of the worker, or answers at once why it cannot run.
    pub fn search(&mut self, id: u64, query: String, count: Option<u32>) {
        while self.running.try_join_next().is_some() {}
        let answer = |result| ToWorker::WebSearchResult { id, result };
        let Some(searcher) = self.searcher.clone() else {
            let _ = self.to_worker.send(answer(Err(
                "web_search is not configured: add `web: {search: ...}` to config.yml".into(),
            )));
            return;
        };
        if self.running.len() >= MAX_IN_FLIGHT {
            let _ = self.to_worker.send(answer(Err(format!(
                "{MAX_IN_FLIGHT} searches are already running for this project; wait for their results"
            ))));
            return;
        }
        let (project, to_worker) = (self.project.clone(), self.to_worker.clone());
        self.running.spawn(async move {
            let result = searcher.search(&query, count).await;
            match &result {
                Ok(hits) => tracing::debug!(%project, hits = hits.len(), "web search answered"),
                Err(e) => tracing::info!(%project, "web search failed: {e}"),
            }
            let _ = to_worker.send(ToWorker::WebSearchResult {
                id,
                result: result.map_err(|e| e.to_string()),
            });
        });
    }
}
