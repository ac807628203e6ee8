//! The worker's log: `<home>/logs/worker-<name>.log.<date>`, daily rolling. Nothing goes to
//! stdout; stderr is kept by pegasusd for panics.
//!
//! `PEGASUS_LOG` is read as a plain level (`error`, `warn`, `info`, `debug`, `trace`), not as
//! pegasusd's full directive syntax: a worker is one project, and the directive parser (with its
//! regex engine) would be code every one of a hundred workers keeps resident for nothing.

use std::path::Path;
use tracing_subscriber::{filter::LevelFilter, fmt, prelude::*};

pub fn init(logs_dir: &Path, project: &str) {
    let level = match std::env::var("PEGASUS_LOG")
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
        .as_str()
    {
        "error" => LevelFilter::ERROR,
        "warn" => LevelFilter::WARN,
        "debug" => LevelFilter::DEBUG,
        "trace" => LevelFilter::TRACE,
        "off" => LevelFilter::OFF,
        _ => LevelFilter::INFO,
    };
    let file = tracing_appender::rolling::daily(logs_dir, format!("worker-{project}.log"));
    let _ = tracing_subscriber::registry()
        .with(
            fmt::layer()
                .with_ansi(false)
                .with_writer(file)
                .with_filter(level),
        )
        .try_init();
}
