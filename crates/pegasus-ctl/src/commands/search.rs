//! `pegasusctl search QUERY [--project NAME] [--kind session|task|memory] [--limit N]`: finds
//! text in every project's sessions, tasks and memory and the MainAgent's, best first. It
//! reads the index under `<home>/index/` after catching it up with the files itself, so it
//! works (and is current) whether pegasusd runs or not; a damaged index is rebuilt with a
//! warning on stderr.

use crate::cli::SearchKind;
use crate::CtlError;
use pegasus_search::{Kind, Query, MAIN};
use pegasus_store::Home;

pub fn run(
    home: &Home,
    json: bool,
    query: String,
    project: Option<String>,
    kind: Option<SearchKind>,
    limit: u16,
) -> Result<(), CtlError> {
    let found = find(home, query.clone(), project, kind, limit)?;
    for w in &found.warnings {
        eprintln!("pegasusctl: warning: {w}");
    }
    if json {
        return super::print_json(&found.hits);
    }
    print!("{}", text(&query, &found.hits));
    Ok(())
}

/// The hits for `query`, best first, after catching the index up with the files.
pub(crate) fn find(
    home: &Home,
    query: String,
    project: Option<String>,
    kind: Option<SearchKind>,
    limit: u16,
) -> Result<pegasus_search::Found, CtlError> {
    if let Some(name) = project.as_deref().filter(|n| *n != MAIN) {
        super::project_dir(home, name)?;
    }
    let q = Query {
        text: query,
        project,
        kind: kind.map(|k| match k {
            SearchKind::Session => Kind::Session,
            SearchKind::Task => Kind::Task,
            SearchKind::Memory => Kind::Memory,
        }),
        limit: Some(usize::from(limit)),
    };
    pegasus_search::search(home, &q).map_err(CtlError::failed)
}

/// The hits as `search` prints them.
pub(crate) fn text(query: &str, hits: &[pegasus_search::Hit]) -> String {
    if hits.is_empty() {
        return format!("no match for `{}`\n", query.trim());
    }
    let blocks: Vec<String> = hits
        .iter()
        .map(|h| {
            format!(
                "{} · {} · {}\n    {}\n",
                h.project, h.kind, h.location, h.snippet
            )
        })
        .collect();
    blocks.join("\n")
}
