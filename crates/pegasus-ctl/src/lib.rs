//! `pegasusctl`, the command-line client of `pegasusd`.
//!
//! What it is for: the CLI contract of DESIGN.md §11 — verbs, flags, `--json` output, exit codes
//! (0 ok, 1 error, 2 usage, 3 daemon not running) — over the control socket, with the read-only
//! verbs falling back to the files when the daemon is down.
//!
//! What it is not for: deciding anything. Every change goes through the daemon, which owns
//! PROJECT.md and the workers.

mod cli;
pub mod client;
mod commands;
pub mod error;
mod output;

pub use cli::Cli;
pub use error::CtlError;

use std::process::ExitCode;

/// Parses the command line, runs the command, prints the outcome and picks the exit code.
pub fn main_entry() -> ExitCode {
    let cli = <Cli as clap::Parser>::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("pegasusctl: cannot start: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(commands::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pegasusctl: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
