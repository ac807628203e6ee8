//! Full-text search over everything Pegasus remembers (DESIGN.md §11 "Search"): every project's
//! sessions, tasks and memory, and the MainAgent's, ranked, each hit with its project, kind,
//! location and a snippet.
//!
//! What it is for: the index under `<home>/index/` (an SQLite FTS5 database, [`index`]), kept
//! current from the files ([`catch_up`], and [`keep_current`] in pegasusd every
//! [`CATCH_UP_EVERY`]), and the query over it ([`search`], which catches up first, so its
//! answer is current whether the daemon runs or not). The files stay the truth: a missing,
//! damaged or outdated index is rebuilt from them, with a warning, never a failure.
//!
//! What it is not for: reading or writing those files' formats itself — sessions are read as
//! `pegasus-store`'s records, tasks through `pegasus-tasks`' index — nor deciding anything
//! about projects. It never writes outside `<home>/index/`.

pub mod error;
pub mod index;
pub mod query;
pub mod sources;

use std::time::Duration;

pub use error::SearchError;
pub use index::{index_file, CatchUp};
pub use query::{fts_expression, Hit, Query, DEFAULT_LIMIT, MAX_LIMIT};
pub use sources::{Kind, MAIN};

use index::{Fail, Index};
use pegasus_store::Home;

/// How often pegasusd catches the index up (DESIGN.md: current within 10 s of each write).
pub const CATCH_UP_EVERY: Duration = Duration::from_secs(5);

/// What a search found, and what the user should know about how (the index was damaged and
/// rebuilt; it could not be caught up and may lag).
#[derive(Debug, Clone, Default)]
pub struct Found {
    /// Best first.
    pub hits: Vec<Hit>,
    /// One line each, for stderr or a log.
    pub warnings: Vec<String>,
}

/// Catches the index of `home` up with the files, then answers `q`. A damaged index is
/// rebuilt (a warning in [`Found::warnings`]); a catch-up that cannot get the write lock in
/// time is a warning too, and the index is asked as it is.
pub fn search(home: &Home, q: &Query) -> Result<Found, SearchError> {
    let expr =
        fts_expression(&q.text).ok_or_else(|| SearchError::EmptyQuery(q.text.trim().into()))?;
    let mut warnings = Vec::new();
    let hits = with_index(home, &mut warnings, |index, warnings| {
        match index.catch_up(home, &|| false) {
            Ok(_) => {}
            Err(Fail::Error(e)) => warnings.push(format!(
                "the search index could not be brought up to date ({e}); results may miss the last writes"
            )),
            Err(damaged) => return Err(damaged),
        }
        index.query(&expr, q)
    })?;
    Ok(Found { hits, warnings })
}

/// Catches the index of `home` up with the files (building it when missing, rebuilding it when
/// damaged); the warnings say what was rebuilt and why. `stop` is asked between projects.
pub fn catch_up(
    home: &Home,
    stop: &dyn Fn() -> bool,
) -> Result<(CatchUp, Vec<String>), SearchError> {
    let mut warnings = Vec::new();
    let done = with_index(home, &mut warnings, |index, _| index.catch_up(home, stop))?;
    Ok((done, warnings))
}

/// Runs `work` on the open index; when the index turns out damaged (at open or during the
/// work) it is deleted, a warning is noted, and `work` runs once more on a new one.
fn with_index<T>(
    home: &Home,
    warnings: &mut Vec<String>,
    mut work: impl FnMut(&Index, &mut Vec<String>) -> Result<T, Fail>,
) -> Result<T, SearchError> {
    let path = index_file(home);
    let first = Index::open(home).and_then(|index| work(&index, warnings));
    let why = match first {
        Ok(v) => return Ok(v),
        Err(Fail::Error(e)) => return Err(e),
        Err(Fail::Damaged(why)) => why,
    };
    let warning = format!(
        "the search index {} was damaged ({why}); rebuilt it from the files",
        path.display()
    );
    tracing::warn!("{warning}");
    warnings.push(warning);
    index::remove(&path)?;
    match Index::open(home).and_then(|index| work(&index, warnings)) {
        Ok(v) => Ok(v),
        Err(Fail::Error(e)) => Err(e),
        Err(Fail::Damaged(why)) => {
            let why = format!("damaged again right after a rebuild ({why}); check the disk");
            Err(SearchError::io(&path)(std::io::Error::other(why)))
        }
    }
}

/// pegasusd's part (DESIGN.md: the index is current within 10 s of each write): a catch-up at start
/// and then every [`CATCH_UP_EVERY`], each on a blocking thread, until `shutdown`. Failures
/// are logged once each (not every 5 s) and retried at the next round.
pub async fn keep_current(home: Home, shutdown: tokio_util::sync::CancellationToken) {
    let mut last_error: Option<String> = None;
    loop {
        let (h, stop) = (home.clone(), shutdown.clone());
        let round = pegasus_fs::blocking(move || catch_up(&h, &|| stop.is_cancelled()));
        match round.await {
            Ok(Ok((done, _warnings))) => {
                if done.sources_read > 0 || done.sources_dropped > 0 {
                    tracing::debug!(?done, "search index caught up");
                }
                last_error = None;
            }
            Ok(Err(e)) => {
                let e = e.to_string();
                if last_error.as_ref() != Some(&e) {
                    tracing::warn!("search index: {e}");
                    last_error = Some(e);
                }
            }
            Err(e) => tracing::warn!("search index catch-up stopped: {e}"),
        }
        tokio::select! {
            _ = tokio::time::sleep(CATCH_UP_EVERY) => {}
            _ = shutdown.cancelled() => return,
        }
    }
}

#[cfg(test)]
mod tests;
