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
    let found = pegasus_search::search(home, &q).map_err(CtlError::failed)?;
    for w in &found.warnings {
        eprintln!("pegasusctl: warning: {w}");
    }
    if json {
        return super::print_json(&found.hits);
    }
    if found.hits.is_empty() {
        println!("no match for `{}`", q.text.trim());
        return Ok(());
    }
    for (i, h) in found.hits.iter().enumerate() {
        if i > 0 {
            println!();
        }
        println!("{} · {} · {}", h.project, h.kind, h.location);
        println!("    {}", h.snippet);
    }
    Ok(())
}
