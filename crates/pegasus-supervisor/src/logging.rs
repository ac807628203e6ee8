//! Logging: tracing to stderr (foreground, systemd-friendly) and to a daily-rolling file in
//! `<home>/logs/`.
//!
//! The file appender is used without the non-blocking wrapper on purpose: a daemon that may die
//! by `kill -9` should not lose its last lines in an in-memory queue.

use std::path::Path;
use tracing_subscriber::{fmt, prelude::*, EnvFilter};

/// Installs the global subscriber. `prefix` names the file (`pegasusd.log.<date>`).
pub fn init(logs_dir: &Path, prefix: &str) {
    let filter =
        || EnvFilter::try_from_env("PEGASUS_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let file = tracing_appender::rolling::daily(logs_dir, prefix);
    let registry = tracing_subscriber::registry()
        .with(
            fmt::layer()
                // Colours only for a terminal: a redirected stderr (a file, journald) gets
                // plain text.
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .with_writer(std::io::stderr)
                .with_filter(filter()),
        )
        .with(
            fmt::layer()
                .with_ansi(false)
                .with_writer(file)
                .with_filter(filter()),
        );
    // A second init (tests running the daemon in-process) keeps the first subscriber.
    let _ = registry.try_init();
}
