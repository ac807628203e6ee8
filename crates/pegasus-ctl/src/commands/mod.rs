//! One file per verb group; each turns a parsed command into requests and printed output.

mod chat;
mod cost;
mod log;
mod project;
mod role;
mod run;
mod status;
mod stop;
mod task;

use crate::{cli::Command, Cli, CtlError};
use pegasus_store::Home;

/// Runs one parsed command line.
pub async fn run(cli: Cli) -> Result<(), CtlError> {
    let home = Home::resolve(cli.home)?;
    match cli.command {
        Command::Status => status::run(&home, cli.json).await,
        Command::Project(cmd) => project::run(&home, cli.json, cmd).await,
        Command::Task(cmd) => task::run(&home, cli.json, cmd).await,
        Command::Role(cmd) => role::run(&home, cli.json, cmd).await,
        Command::Run(cmd) => run::run(&home, cli.json, cmd).await,
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

/// Sends one request that changes something and prints the daemon's one-line answer.
pub(crate) async fn mutate(
    home: &Home,
    json: bool,
    req: pegasus_proto::ctl::CtlRequest,
) -> Result<(), CtlError> {
    let mut client = crate::client::Client::connect(home).await?;
    match crate::client::ok(client.request(req).await?)? {
        pegasus_proto::ctl::CtlResponse::Done { message } => {
            if json {
                print_json(&serde_json::json!({"ok": true, "message": message}))
            } else {
                println!("{message}");
                Ok(())
            }
        }
        other => Err(CtlError::Failed(format!("unexpected answer: {other:?}"))),
    }
}
