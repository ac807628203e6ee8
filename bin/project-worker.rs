//! `project-worker <project-dir>`: started by pegasusd, one per active project.

#![deny(clippy::unwrap_used, clippy::expect_used)]

use std::process::ExitCode;

fn main() -> ExitCode {
    // A harness's permission hook (DESIGN.md §15): asks the worker that started the harness.
    if std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(
            pegasus_worker::harness::hook::SUBCOMMAND,
        ))
    {
        return pegasus_worker::harness::hook::client_main();
    }
    // A harness's MCP server (DESIGN.md §15): `mcp-proxy NAME` forwards to the worker.
    if std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(
            pegasus_worker::harness::mcp_proxy::SUBCOMMAND,
        ))
    {
        let name = std::env::args().nth(2).unwrap_or_default();
        return pegasus_worker::harness::mcp_proxy::client_main(&name);
    }
    let mut args = std::env::args_os().skip(1);
    let (Some(dir), None) = (args.next(), args.next()) else {
        eprintln!("{}", pegasus_worker::WorkerError::Usage);
        return ExitCode::from(2);
    };
    match pegasus_worker::run(pegasus_worker::WorkerArgs {
        project_dir: dir.into(),
    }) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("project-worker: {e}");
            ExitCode::from(1)
        }
    }
}
