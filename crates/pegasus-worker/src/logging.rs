//! The worker's log: `<home>/logs/worker-<name>.log.<date>`, daily rolling, in pegasusd's
//! format and with its `PEGASUS_LOG` filter syntax. Nothing goes to stdout; stderr is kept by
//! pegasusd for panics. The file appender is used without the non-blocking wrapper on purpose:
//! a worker may die by `kill -9` and must not lose its last lines in an in-memory queue.

use std::path::Path;
use tracing_subscriber::{fmt, prelude::*, EnvFilter};

pub fn init(logs_dir: &Path, project: &str) {
    let filter = EnvFilter::try_from_env("PEGASUS_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let file = tracing_appender::rolling::daily(logs_dir, format!("worker-{project}.log"));
    let _ = tracing_subscriber::registry()
        .with(
            fmt::layer()
                .with_ansi(false)
                .with_writer(file)
                .with_filter(filter),
        )
        .try_init();
}
