//! Asana as a project's board (seed 003, DESIGN.md §17): a client of pegasusd's core through
//! its [`FrontDoor`], like Telegram. For every project whose PROJECT.md has
//! `asana: {project: GID}`, pegasusd (never a worker: the token is pegasusd's alone) keeps the
//! board's sections and custom fields as seed 003 says, makes a Pegasus task of each Asana task
//! moved into Ready Queue, and writes each one's state back ([`sync`]). Every `asana.poll_s`
//! seconds each board is read through Asana's events API; a board that fails (Asana down, a
//! refused token, a damaged state file) is logged once per distinct failure and tried again
//! on the next poll, the others go on.
//!
//! Not for: Asana's webhooks (pegasusd may sit behind NAT, so it polls events), portfolios,
//! subtasks, or projects without `asana:`.

pub mod api;
pub mod board;
pub mod rich;
pub mod schema;
pub mod state;
pub mod sync;

use pegasus_store::ProjectFile;
use pegasus_supervisor::FrontDoor;
use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

/// The board sync as a client of pegasusd's core; it has nothing to do without the token (the
/// variable `asana.token_env` names, taken by pegasusd at start).
pub fn client() -> pegasus_supervisor::Client {
    Box::new(|door: FrontDoor| {
        let env = &door.config().asana.token_env;
        let Some(token) = door.secret(env) else {
            for (project, _) in projects_with_boards(&door) {
                tracing::warn!(project = %project, "asana: PROJECT.md names an Asana board, but ${env} was not set when pegasusd started, so it is not synced; set it and restart pegasusd");
            }
            return None;
        };
        let token = token.to_string();
        Some(Box::pin(run(door, token)) as _)
    })
}

/// Polls every board until the daemon stops.
async fn run(door: FrontDoor, token: String) {
    let cfg = door.config().asana.clone();
    let api = match api::Api::new(
        &cfg.base_url,
        token,
        &cfg.token_env,
        door.shutdown().clone(),
    ) {
        Ok(a) => a,
        Err(e) => return tracing::warn!("asana: {e}"),
    };
    tracing::info!(poll_s = cfg.poll_s, "asana sync started");
    let mut boards: BTreeMap<String, sync::Board> = BTreeMap::new();
    let mut warned: HashSet<String> = HashSet::new();
    let mut failing: BTreeMap<String, String> = BTreeMap::new();
    loop {
        for (name, gid) in projects_with_boards(&door) {
            if boards.get(&name).is_none_or(|b| b.gid != gid) {
                match sync::Board::open(&door, &name, &gid) {
                    Ok(b) => {
                        boards.insert(name.clone(), b);
                    }
                    Err(e) => {
                        if failing.get(&name) != Some(&e) {
                            tracing::warn!(project = %name, "asana: {e}");
                            failing.insert(name.clone(), e);
                        }
                        continue;
                    }
                }
            }
            let Some(board) = boards.get_mut(&name) else {
                continue;
            };
            match board.tick(&api, &door, &mut warned).await {
                Ok(()) => {
                    if failing.remove(&name).is_some() {
                        tracing::info!(project = %name, "asana: board {gid} syncs again");
                    }
                }
                Err(sync::SyncError::Api(api::ApiError::Stopping)) => return,
                Err(e) => {
                    let e = e.to_string();
                    if failing.get(&name) != Some(&e) {
                        tracing::warn!(project = %name, "asana: board {gid}: {e}; trying again every {} s (not logged again until it changes)", cfg.poll_s);
                        failing.insert(name.clone(), e);
                    }
                }
            }
        }
        tokio::select! {
            _ = door.shutdown().cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(cfg.poll_s)) => {}
        }
    }
}

/// The active projects whose PROJECT.md names a board: (project, Asana project gid).
fn projects_with_boards(door: &FrontDoor) -> Vec<(String, String)> {
    let Ok(entries) = std::fs::read_dir(door.home().projects_dir()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let dir = e.path();
        let Ok(file) = ProjectFile::load(&dir) else {
            continue;
        };
        if file.status() != pegasus_store::ProjectStatus::Active {
            continue;
        }
        if let Some(b) = file.asana() {
            out.push((file.name().to_string(), b.project.clone()));
        }
    }
    out.sort();
    out
}
