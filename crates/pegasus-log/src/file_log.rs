//! The worker's subscriber: each event that the `PEGASUS_LOG` filter (a layer over it) lets
//! through is one line appended to the day's file.
//!
//! The subscriber is this module's own, not `tracing-subscriber`'s registry: a worker logs events
//! only (no span of its own code is ever recorded), and the registry's span store allocates and
//! zeroes a 32 KiB table per process at start (one slot per possible thread) and links its
//! formatting machinery into every worker. It shows in the figures (docs/PERFORMANCE.md):
//! with `tracing-subscriber` an idle worker's PSS is ~65 KiB higher (585 against 518 KiB,
//! 100 idle workers, 2026-11-25), which takes 1,000 active projects past 600 MiB. Lines look like `tracing-subscriber`'s default
//! format: `2026-11-24T02:55:05.414570Z  INFO pegasus_worker::worker: worker ready pid=42`.

use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_appender::rolling::RollingFileAppender;

/// Every event its [`Levels`] let through, one line each, appended to the day's file.
pub(crate) struct FileLog {
    levels: Levels,
    file: Mutex<RollingFileAppender>,
    next_span: AtomicU64,
}

impl FileLog {
    /// A log appending to `file` what `levels` let through.
    pub(crate) fn new(file: RollingFileAppender, levels: Levels) -> FileLog {
        FileLog {
            levels,
            file: Mutex::new(file),
            next_span: AtomicU64::new(1),
        }
    }
}

/// The level and per-module levels of a `PEGASUS_LOG` value (`warn,pegasus_llm=debug`), read
/// without `EnvFilter`: its regex tables are relocated, so dirty, in every process that links
/// them (~200 KiB of each worker's PSS). Span and field filters (`[span]`, `{field}`) are
/// pegasusd's only; a worker reads such a directive as absent.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Levels {
    default: LevelFilter,
    /// `(module path, level)`, the longest path first, so the nearest module wins.
    modules: Vec<(String, LevelFilter)>,
}

impl Levels {
    /// The levels `value` says; `None` when a part of it is not a level or `module=level`
    /// (the whole value is then unparsable, and `info` applies, as in pegasusd).
    pub(crate) fn parse(value: &str) -> Option<Levels> {
        let mut levels = Levels {
            default: LevelFilter::INFO,
            modules: Vec::new(),
        };
        for part in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            if part.contains(['[', '{']) {
                continue;
            }
            match part.split_once('=') {
                None => match part.parse::<LevelFilter>() {
                    Ok(level) => levels.default = level,
                    // A bare module path means "everything" for it, as in EnvFilter.
                    Err(_) if is_module_path(part) => {
                        levels.modules.push((part.to_string(), LevelFilter::TRACE))
                    }
                    Err(_) => return None,
                },
                Some((module, level)) if is_module_path(module.trim()) => {
                    let level = level.trim().parse::<LevelFilter>().ok()?;
                    levels.modules.push((module.trim().to_string(), level));
                }
                Some(_) => return None,
            }
        }
        levels.modules.sort_by_key(|m| std::cmp::Reverse(m.0.len()));
        Some(levels)
    }

    /// `info`, what an unset, empty or unparsable value means.
    pub(crate) fn info() -> Levels {
        Levels {
            default: LevelFilter::INFO,
            modules: Vec::new(),
        }
    }

    /// The level that applies to `target`.
    fn of(&self, target: &str) -> LevelFilter {
        self.modules
            .iter()
            .find(|(m, _)| {
                target == m
                    || target
                        .strip_prefix(m.as_str())
                        .is_some_and(|rest| rest.starts_with("::"))
            })
            .map_or(self.default, |(_, level)| *level)
    }

    /// The most any target may log.
    fn most(&self) -> LevelFilter {
        self.modules
            .iter()
            .map(|(_, l)| *l)
            .fold(self.default, std::cmp::max)
    }
}

/// Whether `s` can be a module path (`pegasus_llm`, `pegasus_llm::gateway`).
fn is_module_path(s: &str) -> bool {
    !s.is_empty()
        && s.split("::").all(|seg| {
            !seg.is_empty()
                && seg
                    .chars()
                    .all(|c| c.is_alphanumeric() || c == '_' || c == '-')
        })
}

impl Subscriber for FileLog {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        self.levels.of(metadata.target()) >= *metadata.level()
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(self.levels.most())
    }

    /// Spans (a dependency's, if any) get an id and are otherwise ignored.
    fn new_span(&self, _span: &Attributes<'_>) -> Id {
        Id::from_u64(self.next_span.fetch_add(1, Ordering::Relaxed).max(1))
    }

    fn record(&self, _span: &Id, _values: &Record<'_>) {}

    fn record_follows_from(&self, _span: &Id, _follows: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let line = format_line(chrono::Utc::now(), event);
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        // A log line that cannot be written (disk full) is dropped; the worker carries on.
        let _ = file.write_all(line.as_bytes());
    }

    fn enter(&self, _span: &Id) {}

    fn exit(&self, _span: &Id) {}
}

fn format_line(now: chrono::DateTime<chrono::Utc>, event: &Event<'_>) -> String {
    let meta = event.metadata();
    let mut fields = Fields::default();
    event.record(&mut fields);
    let level = match *meta.level() {
        Level::ERROR => "ERROR",
        Level::WARN => " WARN",
        Level::INFO => " INFO",
        Level::DEBUG => "DEBUG",
        Level::TRACE => "TRACE",
    };
    let mut line = String::with_capacity(64 + fields.message.len() + fields.rest.len());
    let _ = write!(
        line,
        "{} {level} {}: {}{}",
        now.format("%Y-%m-%dT%H:%M:%S%.6fZ"),
        meta.target(),
        fields.message,
        fields.rest
    );
    line.push('\n');
    line
}

/// An event's `message` and its other fields as ` name=value`.
#[derive(Default)]
struct Fields {
    message: String,
    rest: String,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            let _ = write!(self.rest, " {}={value:?}", field.name());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.rest, " {}={value:?}", field.name());
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// Captures the lines [`format_line`] makes, with a fixed clock.
    struct Capture(Mutex<Vec<String>>);

    impl Subscriber for Capture {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &Attributes<'_>) -> Id {
            Id::from_u64(1)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, event: &Event<'_>) {
            let at = chrono::DateTime::from_timestamp(1_700_000_000, 123_456_000).unwrap();
            self.0.lock().unwrap().push(format_line(at, event));
        }
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }

    #[test]
    fn lines_carry_time_level_target_message_and_fields() {
        let capture = std::sync::Arc::new(Capture(Mutex::new(Vec::new())));
        tracing::subscriber::with_default(capture.clone(), || {
            let project = "web";
            tracing::info!(project = %project, pid = 42, "worker ready");
            tracing::warn!(reason = "disk \"full\"", "cannot write {}", "a file");
        });
        let lines = capture.0.lock().unwrap().clone();
        assert_eq!(
            lines,
            vec![
                "2023-11-14T22:13:20.123456Z  INFO pegasus_log::file_log::tests: worker ready project=web pid=42\n",
                "2023-11-14T22:13:20.123456Z  WARN pegasus_log::file_log::tests: cannot write a file reason=\"disk \\\"full\\\"\"\n",
            ]
        );
    }

    #[test]
    fn only_events_at_or_above_the_level_reach_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let log = FileLog::new(
            tracing_appender::rolling::never(dir.path(), "w.log"),
            Levels::parse("warn").unwrap(),
        );
        tracing::subscriber::with_default(log, || {
            tracing::info!("not written");
            let span = tracing::info_span!("a span", x = 1);
            let _inside = span.enter();
            tracing::warn!(n = 2, "written");
            tracing::error!("also written");
        });
        let text = std::fs::read_to_string(dir.path().join("w.log")).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines[0].ends_with(" WARN pegasus_log::file_log::tests: written n=2"));
        assert!(lines[1].ends_with("ERROR pegasus_log::file_log::tests: also written"));
    }

    #[test]
    fn a_module_of_its_own_level_is_written_below_the_default() {
        let dir = tempfile::tempdir().unwrap();
        let log = FileLog::new(
            tracing_appender::rolling::never(dir.path(), "w.log"),
            Levels::parse("warn,pegasus_log=debug").unwrap(),
        );
        tracing::subscriber::with_default(log, || {
            tracing::debug!("written");
            tracing::debug!(target: "other", "not written");
            tracing::warn!(target: "other", "also written");
        });
        let text = std::fs::read_to_string(dir.path().join("w.log")).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines[0].ends_with("DEBUG pegasus_log::file_log::tests: written"));
        assert!(lines[1].ends_with(" WARN other: also written"));
    }

    #[test]
    fn levels_read_like_env_filter_for_levels_and_modules() {
        let l = Levels::parse("warn,pegasus_llm=debug,pegasus_llm::gateway=trace").unwrap();
        assert_eq!(l.of("pegasus_llm::gateway::x"), LevelFilter::TRACE);
        assert_eq!(l.of("pegasus_llm::budget"), LevelFilter::DEBUG);
        assert_eq!(l.of("pegasus_llmx"), LevelFilter::WARN);
        assert_eq!(l.of("other"), LevelFilter::WARN);
        assert_eq!(l.most(), LevelFilter::TRACE);
        assert_eq!(Levels::parse(" DEBUG ").unwrap().most(), LevelFilter::DEBUG);
        assert_eq!(Levels::parse("").unwrap(), Levels::info());
        assert_eq!(Levels::parse("info,=x"), None);
        assert_eq!(
            Levels::parse("loud"),
            Some(Levels {
                default: LevelFilter::INFO,
                modules: vec![("loud".into(), LevelFilter::TRACE)],
            })
        );
        // A span filter is pegasusd's only: the rest still applies.
        let l = Levels::parse("error,pegasus_agent[run]=debug").unwrap();
        assert_eq!(l.most(), LevelFilter::ERROR);
    }
}
