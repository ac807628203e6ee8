//! One file per verb group; each turns a parsed command into requests and printed output.

mod approvals;
mod chat;
mod cost;
mod dashboard;
mod log;
mod mcp;
mod project;
mod role;
mod run;
mod search;
mod send;
mod status;
mod stop;
mod task;

use crate::{cli::Command, Cli, CtlError};
use pegasus_store::Home;

/// Runs one parsed command line.
pub async fn run(cli: Cli) -> Result<(), CtlError> {
    // These need no home.
    match &cli.command {
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(*shell, &mut cmd, "pegasusctl", &mut std::io::stdout());
            return Ok(());
        }
        Command::Man => {
            let cmd = <Cli as clap::CommandFactory>::command();
            return clap_mangen::Man::new(cmd)
                .render(&mut std::io::stdout())
                .map_err(|e| CtlError::Failed(format!("cannot write the manual: {e}")));
        }
        _ => {}
    }
    let home = Home::resolve(cli.home)?;
    run_in(&home, cli.command, cli.json)
        .await
        .map_err(|e| did_you_mean(&home, e))
}

/// A "project X not found" refusal, from the daemon or from the files, gains the nearest
/// project name when one is close (a typo).
fn did_you_mean(home: &Home, e: CtlError) -> CtlError {
    let CtlError::Failed(message) = e else {
        return e;
    };
    let missing = message
        .strip_prefix("project ")
        .and_then(|rest| rest.split_once(" not found"))
        .map(|(name, _)| name);
    let Some(missing) = missing.filter(|m| !m.contains(' ')) else {
        return CtlError::Failed(message);
    };
    let names: Vec<String> = std::fs::read_dir(home.projects_dir())
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    match nearest(missing, &names) {
        Some(near) => CtlError::Failed(format!("{message} (did you mean {near}?)")),
        None => CtlError::Failed(message),
    }
}

/// The name of `names` nearest to `typed`, if it is within a typo of it: at most 2 edits
/// (a swap of neighbours counts as one), and fewer than a third of its letters.
pub(crate) fn nearest<'a>(typed: &str, names: &'a [String]) -> Option<&'a str> {
    let limit = 2.min(typed.chars().count().div_ceil(3)).max(1);
    names
        .iter()
        .filter(|n| n.as_str() != typed)
        .map(|n| (edits(typed, n), n))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, n)| (*d, n.len()))
        .map(|(_, n)| n.as_str())
}

/// Edits from `a` to `b`: insertions, deletions, substitutions and swaps of two neighbours
/// (optimal string alignment).
fn edits(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

async fn run_in(home: &Home, command: Command, json: bool) -> Result<(), CtlError> {
    let home = home.clone();
    match command {
        Command::Completions { .. } | Command::Man => Ok(()),
        Command::Mcp => mcp::run(&home).await,
        Command::Dashboard => dashboard::run(&home, json).await,
        Command::Status => status::run(&home, json).await,
        Command::Project(cmd) => project::run(&home, json, cmd).await,
        Command::Task(cmd) => task::run(&home, json, cmd).await,
        Command::Role(cmd) => role::run(&home, json, cmd).await,
        Command::Run(cmd) => run::run(&home, json, cmd).await,
        Command::Chat { text, stream } => chat::run(&home, json, text, stream).await,
        Command::Cost { project, since } => cost::run(&home, json, project, since),
        Command::Search {
            query,
            project,
            kind,
            limit,
        } => search::run(&home, json, query, project, kind, limit),
        Command::Stop { no_wait } => stop::run(&home, json, no_wait).await,
        Command::Approvals { name, full } => approvals::list(&home, json, name, full),
        Command::Approve { id, always } => {
            approvals::answer(&home, json, id, true, always, None).await
        }
        Command::Deny { id, reason } => {
            approvals::answer(&home, json, id, false, false, reason).await
        }
    }
}

/// Prints a value as pretty JSON on stdout.
pub(crate) fn print_json<T: serde::Serialize>(value: &T) -> Result<(), CtlError> {
    let text = serde_json::to_string_pretty(value).map_err(CtlError::failed)?;
    println!("{text}");
    Ok(())
}

/// The folder of project `name`, for commands that read its files without the daemon; an
/// error that says where to look when there is no such project.
pub(crate) fn project_dir(home: &Home, name: &str) -> Result<std::path::PathBuf, CtlError> {
    pegasus_store::validate_name(name)?;
    let dir = home.project_dir(name);
    if !dir.join("PROJECT.md").exists() {
        return Err(CtlError::Failed(format!(
            "project {name} not found: see `pegasusctl project list`"
        )));
    }
    Ok(dir)
}

/// Sends one request that changes something and prints the daemon's one-line answer.
pub(crate) async fn mutate(
    home: &Home,
    json: bool,
    req: pegasus_proto::ctl::CtlRequest,
) -> Result<(), CtlError> {
    let message = done(home, req).await?;
    if json {
        print_json(&serde_json::json!({"ok": true, "message": message}))
    } else {
        println!("{message}");
        Ok(())
    }
}

/// Sends one request that changes something and gives back the daemon's one-line answer.
pub(crate) async fn done(
    home: &Home,
    req: pegasus_proto::ctl::CtlRequest,
) -> Result<String, CtlError> {
    let mut client = crate::client::Client::connect(home).await?;
    match crate::client::ok(client.request(req).await?)? {
        pegasus_proto::ctl::CtlResponse::Done { message } => Ok(message),
        other => Err(CtlError::Failed(format!("unexpected answer: {other:?}"))),
    }
}

/// Whether an answer should be streamed: asked for, or stdout is a terminal (and not `--json`).
pub(crate) fn wants_stream(asked: bool, json: bool) -> bool {
    use std::io::IsTerminal as _;
    !json && (asked || std::io::stdout().is_terminal())
}

/// Runs `work` while printing the text `project`'s agent streams (its `text_delta` events),
/// as it arrives, and a line on stderr for each call that waits for approval. Returns what
/// `work` gave and the text printed. Without a daemon to follow, `work` just runs.
pub(crate) async fn streaming<T>(
    home: &Home,
    project: &str,
    work: impl std::future::Future<Output = T>,
) -> (T, String) {
    use pegasus_proto::WorkerEvent;
    use std::io::Write as _;
    let mut printed = String::new();
    let out = following(home, project, work, |event| match event {
        WorkerEvent::TextDelta { text, .. } => {
            print!("{text}");
            let _ = std::io::stdout().flush();
            printed.push_str(text);
        }
        WorkerEvent::Approval { request } => eprintln!("{}", approval_line(request)),
        _ => {}
    })
    .await;
    (out, printed)
}

/// Runs `work` (a `send --wait` that does not stream) while saying on stderr which call of
/// `project` waits for approval and how to answer it (DESIGN.md §11).
pub(crate) async fn watching_approvals<T>(
    home: &Home,
    project: &str,
    work: impl std::future::Future<Output = T>,
) -> T {
    following(home, project, work, |event| {
        if let pegasus_proto::WorkerEvent::Approval { request } = event {
            eprintln!("{}", approval_line(request));
        }
    })
    .await
}

/// The line that says a call waits for approval and how to answer it, escaped: what a person
/// reads is what runs, whoever sent it.
pub(crate) fn approval_line(r: &pegasus_proto::ctl::ApprovalInfo) -> String {
    use pegasus_proto::shown::escape;
    format!(
        "waiting for approval {}: {} `{}` (task {}); answer with `pegasusctl approve {}` or `pegasusctl deny {}`",
        escape(&r.id), escape(&r.tool), escape(&r.summary), escape(&r.task), escape(&r.id), escape(&r.id)
    )
}

/// Runs `work` while handing each event of `project`'s worker to `on_event`, as it arrives.
/// Without a daemon to follow, `work` just runs.
pub(crate) async fn following<T>(
    home: &Home,
    project: &str,
    work: impl std::future::Future<Output = T>,
    mut on_event: impl FnMut(&pegasus_proto::WorkerEvent),
) -> T {
    use pegasus_proto::{ctl::CtlResponse, BusBody};
    let mut follower = match crate::client::Client::connect(home).await {
        Ok(mut c) => match c.follow(Some(project.to_string())).await {
            // The first frame says the subscription is in place: nothing sent after it is missed.
            Ok(()) => match c.next_event().await {
                Some(CtlResponse::Resync { .. }) => Some(c),
                _ => None,
            },
            Err(_) => None,
        },
        Err(_) => None,
    };
    tokio::pin!(work);
    loop {
        let Some(f) = follower.as_mut() else {
            break work.await;
        };
        tokio::select! {
            out = &mut work => break out,
            ev = f.next_event() => match ev {
                Some(CtlResponse::Event(e)) => {
                    if let BusBody::Worker(event) = &e.body {
                        on_event(event);
                    }
                }
                Some(_) => {}
                None => follower = None,
            },
        }
    }
}

/// Prints an answer after its streamed text: a line end, and the answer itself unless the
/// stream already showed it.
pub(crate) fn finish_stream(streamed: &str, answer: &str) {
    if !streamed.is_empty() {
        println!();
    }
    if !streamed.contains(answer.trim()) {
        println!("{answer}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typo_finds_its_project_and_a_stranger_nothing() {
        let names: Vec<String> = ["website", "api", "blog"].map(String::from).to_vec();
        assert_eq!(nearest("webiste", &names), Some("website"));
        assert_eq!(nearest("websit", &names), Some("website"));
        assert_eq!(nearest("apu", &names), Some("api"));
        assert_eq!(nearest("shop", &names), None);
        assert_eq!(nearest("b", &names), None);
    }
}
