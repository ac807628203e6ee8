//! Pruning `<home>/logs/` (DESIGN.md §12, `logs: {keep_days, max_mb}`): pegasusd's daily logs, the
//! workers' daily logs and their stderr files. At start and then daily: every file not written
//! for `keep_days` is deleted, then the oldest others until all of them together weigh at most
//! `max_mb`. A file still being written is never deleted (a daily log of today, or any file
//! written in the last few minutes): a deleted file that a process keeps writing would only
//! hide its lines and free nothing.

use pegasus_store::LogsConfig;
use std::{
    path::{Path, PathBuf},
    time::{Duration, SystemTime},
};
use tokio_util::sync::CancellationToken;

/// A file written this recently is taken to be open for writing.
const LIVE: Duration = Duration::from_secs(5 * 60);
/// How often the logs are pruned after the first time at start.
const EVERY: Duration = Duration::from_secs(24 * 3600);

/// What one pruning did.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Pruned {
    pub files: usize,
    pub bytes: u64,
}

/// Prunes `dir` now and every day until `shutdown`, each time on a blocking thread.
pub(crate) async fn run(dir: PathBuf, logs: LogsConfig, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let (d, l) = (dir.clone(), logs.clone());
        match pegasus_fs::blocking(move || prune(&d, &l, SystemTime::now())).await {
            Ok(Ok(p)) if p.files > 0 => tracing::info!(
                files = p.files,
                "logs pruned: {} file(s), {} KiB freed (logs: keep_days {}, max_mb {})",
                p.files,
                p.bytes / 1024,
                logs.keep_days,
                logs.max_mb
            ),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!("cannot prune the logs in {}: {e}", dir.display()),
            Err(e) => tracing::warn!("log pruning stopped: {e}"),
        }
    }
}

/// Deletes, in `dir`, the regular files not modified within `keep_days` of `now`, then the
/// oldest of the rest that are not live until they weigh at most `max_mb` together.
pub(crate) fn prune(dir: &Path, logs: &LogsConfig, now: SystemTime) -> std::io::Result<Pruned> {
    let today = [
        chrono::Utc::now().format("%Y-%m-%d").to_string(),
        chrono::Local::now().format("%Y-%m-%d").to_string(),
    ];
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        // Never follows a link: only the regular files of this directory count.
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.file_type().is_file() {
            continue;
        }
        let modified = meta.modified().unwrap_or(now);
        let name = entry.file_name().to_string_lossy().into_owned();
        let age = now.duration_since(modified).unwrap_or_default();
        let live = age < LIVE || today.iter().any(|d| name.ends_with(d.as_str()));
        files.push((modified, entry.path(), meta.len(), live));
    }
    files.sort();
    let keep = Duration::from_secs(logs.keep_days.saturating_mul(86_400));
    let max = logs.max_mb.saturating_mul(1 << 20);
    let mut total: u64 = files.iter().map(|f| f.2).sum();
    let mut pruned = Pruned::default();
    for (modified, path, len, live) in files {
        let old = now.duration_since(modified).unwrap_or_default() > keep;
        if live || !(old || total > max) {
            continue;
        }
        // A worker's `.stderr` is its fd 2 for as long as it runs, seldom written: emptied,
        // never unlinked, so what a running worker says next (a panic) still lands in it.
        let gone = if path.extension().is_some_and(|e| e == "stderr") {
            std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .and_then(|f| f.set_len(0))
        } else {
            std::fs::remove_file(&path)
        };
        match gone {
            Ok(()) => {
                total -= len;
                pruned.files += 1;
                pruned.bytes += len;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => total -= len,
            Err(e) => tracing::warn!("cannot delete old log {}: {e}", path.display()),
        }
    }
    Ok(pruned)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn file(dir: &Path, name: &str, len: usize, age_days: u64) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, vec![b'x'; len]).unwrap();
        let when = SystemTime::now() - Duration::from_secs(age_days * 86_400 + 3600);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(when)
            .unwrap();
        path
    }

    #[test]
    fn old_files_go_then_the_oldest_until_the_size_fits_and_live_ones_stay() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let mb = 1 << 20;
        let ancient = file(d, "pegasusd.log.2020-01-01", 10, 30);
        let old = file(d, "worker-a.log.2020-02-01", 10, 15);
        let big_oldest = file(d, "worker-a.log.2020-03-01", mb, 5);
        let big_newer = file(d, "worker-b.log.2020-03-02", mb, 4);
        let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
        let current = file(d, &format!("pegasusd.log.{today}"), 2 * mb, 0);
        let stderr = d.join("worker-a.stderr");
        std::fs::write(&stderr, b"just written").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", d.join("link.log")).unwrap();
        let logs = LogsConfig {
            keep_days: 14,
            max_mb: 4,
        };
        let pruned = prune(d, &logs, SystemTime::now()).unwrap();
        assert!(!ancient.exists() && !old.exists(), "older than 14 days");
        assert!(!big_oldest.exists(), "the oldest goes to fit 4 MiB");
        assert!(
            big_newer.exists(),
            "3 MiB and a little fit once the oldest went"
        );
        assert!(current.exists() && stderr.exists(), "live files stay");
        assert!(std::fs::symlink_metadata(d.join("link.log")).is_ok());
        assert!(std::path::Path::new("/etc/passwd").exists());
        assert_eq!(pruned.files, 3);
        assert_eq!(pruned.bytes, 20 + mb as u64);
        // Nothing more to do the second time.
        assert_eq!(
            prune(d, &logs, SystemTime::now()).unwrap(),
            Pruned::default()
        );
    }
}
