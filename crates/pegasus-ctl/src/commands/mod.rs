//! One file per verb group; each turns a parsed command into requests and printed output.

mod chat;
mod cost;
mod log;
mod project;
mod status;
mod stop;

use crate::{cli::Command, Cli, CtlError};
use pegasus_store::Home;

/// Runs one parsed command line.
pub async fn run(cli: Cli) -> Result<(), CtlError> {
    let home = Home::resolve(cli.home)?;
    match cli.command {
        Command::Status => status::run(&home, cli.json).await,
        Command::Project(cmd) => project::run(&home, cli.json, cmd).await,
        Command::Chat { text } => chat::run(&home, cli.json, text).await,
        Command::Cost { project, since } => cost::run(&home, cli.json, project, since),
        Command::Stop => stop::run(&home, cli.json).await,
    }
}

/// Prints a value as pretty JSON on stdout.
pub(crate) fn print_json<T: serde::Serialize>(value: &T) -> Result<(), CtlError> {
    let text = serde_json::to_string_pretty(value).map_err(|e| CtlError::Failed(e.to_string()))?;
    println!("{text}");
    Ok(())
}
