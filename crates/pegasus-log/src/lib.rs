//! The one log setup of Pegasus's processes, and the one `PEGASUS_LOG` syntax.
//!
//! pegasusd logs to stderr (foreground, systemd-friendly) and to a daily file in
//! `<home>/logs/` ([`init_daemon`]); a worker logs to its own daily file only
//! ([`init_worker`]; pegasusd keeps its stderr for panics). Both read [`ENV`] as tracing's
//! filter directives: a level (`error`, `warn`, `info`, `debug`, `trace`, `off`, in any case)
//! or per-module levels (`info,pegasus_llm=debug`). Unset, empty or unparsable, it is `info`.
//! pegasusd reads it with `EnvFilter` ([`filter`]), span and field filters included; a worker
//! reads the levels itself and skips span and field filters, so it never links `EnvFilter`'s
//! regex tables (~200 KiB of dirty, relocated pages in every process that does). pegasusd hands it on to its workers (their environment keeps
//! it), so one setting says what every process logs.
//!
//! The file appenders are used without the non-blocking wrapper on purpose: a process that may
//! die by `kill -9` should not lose its last lines in an in-memory queue.

mod file_log;

use std::path::Path;

use tracing_subscriber::{fmt, prelude::*, EnvFilter};

/// The environment variable that says what to log.
pub const ENV: &str = "PEGASUS_LOG";

/// What [`ENV`] says to log, `info` when it is unset, empty or does not parse.
pub fn filter() -> EnvFilter {
    parse_filter(std::env::var(ENV).ok().as_deref())
}

/// The filter a value of [`ENV`] says (`None`: unset).
fn parse_filter(value: Option<&str>) -> EnvFilter {
    value
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .and_then(|v| EnvFilter::try_new(v).ok())
        .unwrap_or_else(|| EnvFilter::new("info"))
}

/// Installs pegasusd's subscriber: stderr and the daily file `<logs_dir>/<prefix>.<date>`.
/// A second call (tests running the daemon in-process) keeps the first subscriber.
pub fn init_daemon(logs_dir: &Path, prefix: &str) {
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
    let _ = registry.try_init();
}

/// Installs a worker's subscriber: the daily file `<logs_dir>/worker-<project>.log.<date>`,
/// nothing on stdout or stderr.
/// A worker reads the levels and per-module levels of [`ENV`] itself (`file_log::Levels`),
/// so no worker links `EnvFilter` and its regex tables.
pub fn init_worker(logs_dir: &Path, project: &str) {
    let file = tracing_appender::rolling::daily(logs_dir, format!("worker-{project}.log"));
    let levels = std::env::var(ENV)
        .ok()
        .and_then(|v| file_log::Levels::parse(&v))
        .unwrap_or_else(file_log::Levels::info);
    let _ = tracing::subscriber::set_global_default(file_log::FileLog::new(file, levels));
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use tracing::level_filters::LevelFilter;
    use tracing_subscriber::layer::Layer;

    fn most(value: Option<&str>) -> Option<LevelFilter> {
        Layer::<tracing_subscriber::Registry>::max_level_hint(&parse_filter(value))
    }

    #[test]
    fn a_plain_level_in_any_case_and_unset_or_empty_is_info() {
        assert_eq!(most(Some("debug")), Some(LevelFilter::DEBUG));
        assert_eq!(most(Some(" WARN ")), Some(LevelFilter::WARN));
        assert_eq!(most(Some("off")), Some(LevelFilter::OFF));
        assert_eq!(most(Some("")), Some(LevelFilter::INFO));
        assert_eq!(most(None), Some(LevelFilter::INFO));
        assert_eq!(most(Some("info,=x")), Some(LevelFilter::INFO), "unparsable");
    }

    #[test]
    fn directives_set_levels_per_module() {
        assert_eq!(
            most(Some("warn,pegasus_llm=debug")),
            Some(LevelFilter::DEBUG)
        );
        let filter = parse_filter(Some("warn,pegasus_llm=debug"));
        assert_eq!(filter.to_string(), "pegasus_llm=debug,warn");
    }
}
