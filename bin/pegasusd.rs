//! `pegasusd [--home DIR] [--config FILE]`: the Pegasus supervisor daemon, in the foreground.

#![deny(clippy::unwrap_used, clippy::expect_used)]

use clap::Parser;
use std::{path::PathBuf, process::ExitCode};

/// Pegasus supervisor daemon: runs one project-worker process per active project.
#[derive(Parser)]
#[command(version)]
struct Args {
    /// Home directory (default: $PEGASUS_HOME, else $XDG_DATA_HOME/pegasus).
    #[arg(long)]
    home: Option<PathBuf>,
    /// Config file (default: <home>/config.yml; every key is optional).
    #[arg(long)]
    config: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match pegasus_supervisor::run(pegasus_supervisor::DaemonOptions {
        home: args.home,
        config: args.config,
        // Beside the core, through its front door.
        clients: vec![
            pegasus_dashboard::client(),
            pegasus_telegram::client(),
            pegasus_asana::client(),
            pegasus_email::client(),
            search_index(),
        ],
    }) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pegasusd: {e}");
            ExitCode::from(1)
        }
    }
}

/// Keeps the search index under `<home>/index/` current within 10 s of each write (DESIGN.md §11),
/// beside the core: a catch-up at start and every few seconds, on a blocking thread.
fn search_index() -> pegasus_supervisor::Client {
    Box::new(|door| {
        let run = pegasus_search::keep_current(door.home().clone(), door.shutdown().clone());
        Some(Box::pin(run))
    })
}
