//! The one JSONL appender of the project, and its tolerant reader.
//!
//! Sessions, task event logs, the task index and the cost ledger are all append-only JSONL.
//! Appending must never glue a new record onto a half-written one left by a crash, and reading
//! must never fail because of one bad line: both rules live here and nowhere else.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::atomic::{create_dir_all_durable, fsync_dir, parent_dir};
use crate::error::{Result, StoreError};

/// An open JSONL file that only ever grows by whole lines.
#[derive(Debug)]
pub struct JsonlAppender {
    file: File,
    path: PathBuf,
}

impl JsonlAppender {
    /// Opens `path` for appending, creating it (and its parent directories) if missing.
    ///
    /// A new file's directory is fsynced so the file survives a crash. If the file does not end
    /// in `'\n'` (a torn write from a crash), it is truncated back to just after the last
    /// `'\n'` (or to empty) and synced, so a new record is never glued to a torn one.
    pub fn open(path: &Path) -> Result<Self> {
        let dir = parent_dir(path);
        create_dir_all_durable(&dir)?;
        let existed = path.exists();
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            .open(path)
            .map_err(StoreError::io(path))?;
        if !existed {
            fsync_dir(&dir)?;
        }
        let appender = JsonlAppender {
            file,
            path: path.to_path_buf(),
        };
        appender.repair_tail()?;
        Ok(appender)
    }

    /// Cuts off an unterminated last line; returns whether it did.
    fn repair_tail(&self) -> Result<bool> {
        let len = self.len()?;
        let keep = complete_prefix_len(&self.file, len).map_err(StoreError::io(&self.path))?;
        if keep == len {
            return Ok(false);
        }
        self.file
            .set_len(keep)
            .map_err(StoreError::io(&self.path))?;
        self.file.sync_all().map_err(StoreError::io(&self.path))?;
        Ok(true)
    }

    /// Current size in bytes; lets callers tell a fresh file (0) from one with history.
    pub fn len(&self) -> Result<u64> {
        Ok(self
            .file
            .metadata()
            .map_err(StoreError::io(&self.path))?
            .len())
    }

    /// True when the file holds no record yet (e.g. to write a header line first).
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Writes one value as a single JSON line. The data reaches the OS but is not synced: call
    /// [`sync`](Self::sync) at a durability boundary (for a session: the end of a turn).
    pub fn append<T: Serialize>(&mut self, value: &T) -> Result<()> {
        let mut line = serde_json::to_vec(value).map_err(|e| {
            StoreError::Invalid(format!(
                "{}: cannot serialize a record: {e}",
                self.path.display()
            ))
        })?;
        line.push(b'\n');
        // One write call per record keeps lines whole in the common case; if it fails midway
        // the tail is cut back so the next append does not glue onto a fragment.
        self.file.write_all(&line).map_err(|e| {
            let _ = self.repair_tail();
            StoreError::io(&self.path)(e)
        })
    }

    /// Makes every appended line durable (fdatasync: the data, not the timestamps).
    pub fn sync(&mut self) -> Result<()> {
        self.file.sync_data().map_err(StoreError::io(&self.path))
    }

    /// [`append`](Self::append) then [`sync`](Self::sync), for records that must not be lost
    /// even alone (a session header, a ledger line).
    pub fn append_durable<T: Serialize>(&mut self, value: &T) -> Result<()> {
        self.append(value)?;
        self.sync()
    }

    /// The file this appender writes, for messages and logs.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Length of the longest prefix of the file that ends in `'\n'` (or 0), reading backwards in
/// chunks so a large healthy file costs one byte of I/O.
fn complete_prefix_len(file: &File, len: u64) -> std::io::Result<u64> {
    const CHUNK: u64 = 64 * 1024;
    let mut end = len;
    let mut buf = vec![0u8; CHUNK as usize];
    while end > 0 {
        let start = end.saturating_sub(CHUNK);
        let n = (end - start) as usize;
        let slice = &mut buf[..n];
        file.read_exact_at(slice, start)?;
        if let Some(i) = slice.iter().rposition(|&b| b == b'\n') {
            return Ok(start + i as u64 + 1);
        }
        end = start;
    }
    Ok(0)
}

/// What [`read_jsonl`] found: the good records and how much it had to ignore, so callers can
/// log damage instead of failing on it.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonlRead<T> {
    /// Parsed records, in file order.
    pub records: Vec<T>,
    /// Complete lines that did not parse as `T` (blank lines are not counted).
    pub skipped: usize,
    /// The file ended in an unterminated line (a torn write); it is not among `records`.
    pub torn_tail: bool,
}

impl<T> Default for JsonlRead<T> {
    fn default() -> Self {
        JsonlRead {
            records: Vec::new(),
            skipped: 0,
            torn_tail: false,
        }
    }
}

/// The largest JSONL file read (a session archives itself long before).
pub const MAX_JSONL_FILE: u64 = 1 << 30;

/// Reads every complete line of a JSONL file, skipping (and counting) lines that do not parse.
/// A missing file reads as empty: append-only logs start out absent.
pub fn read_jsonl<T: DeserializeOwned + Send>(path: &Path) -> Result<JsonlRead<T>> {
    read_jsonl_with(path, |line| serde_json::from_slice::<T>(line).ok())
}

/// [`read_jsonl`] with a line parser of the caller's: `None` counts the line as skipped. For
/// record types whose derived deserializer is slow (internally tagged enums buffer every line
/// before choosing a variant), see `session::load_session`.
pub fn read_jsonl_with<T: Send>(
    path: &Path,
    parse: impl Fn(&[u8]) -> Option<T> + Sync,
) -> Result<JsonlRead<T>> {
    // A regular file only, never past the cap: a FIFO or a device in a project folder must
    // not hang or fill the reader (pegasusd, `pegasusctl`).
    let bytes = match crate::read::read_capped(path, MAX_JSONL_FILE) {
        Ok(c) if c.truncated() => {
            return Err(StoreError::Invalid(format!(
                "{} is {} bytes, over the {MAX_JSONL_FILE}-byte limit of a Pegasus log file",
                path.display(),
                c.size
            )))
        }
        Ok(c) => c.bytes,
        Err(crate::read::ReadError::NotFound) => return Ok(JsonlRead::default()),
        Err(crate::read::ReadError::Io(e)) => return Err(StoreError::io(path)(e)),
        Err(e) => return Err(StoreError::Invalid(format!("{} {e}", path.display()))),
    };
    let mut lines: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
    // `split` yields a final segment after the last '\n': empty for a healthy file, a torn
    // record otherwise.
    let torn_tail = lines.pop().is_some_and(|last| !last.is_empty());
    // Parsing is the whole cost of loading a long session (100k lines): spread it over the
    // cores in contiguous chunks, which keeps the order.
    let threads = if bytes.len() < PARALLEL_PARSE_BYTES {
        1
    } else {
        std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(8)
    };
    let chunk = lines.len().div_ceil(threads.max(1)).max(1);
    let parts: Vec<(Vec<T>, usize)> = if threads <= 1 {
        vec![parse_lines(&lines, &parse)]
    } else {
        let parse = &parse;
        std::thread::scope(|scope| {
            let handles: Vec<_> = lines
                .chunks(chunk)
                .map(|c| scope.spawn(move || parse_lines(c, parse)))
                .collect();
            // A parse thread cannot panic on input (serde returns errors); if one did, its
            // lines count as skipped rather than taking the caller down.
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| (Vec::new(), 0)))
                .collect()
        })
    };
    let mut out = JsonlRead {
        records: Vec::with_capacity(lines.len()),
        skipped: 0,
        torn_tail,
    };
    for (records, skipped) in parts {
        out.records.extend(records);
        out.skipped += skipped;
    }
    Ok(out)
}

/// Files at least this big are parsed on several threads.
const PARALLEL_PARSE_BYTES: usize = 1 << 20;

/// Parses lines into records, counting the unparsable ones (blank lines are neither).
fn parse_lines<T>(lines: &[&[u8]], parse: &impl Fn(&[u8]) -> Option<T>) -> (Vec<T>, usize) {
    let mut records = Vec::with_capacity(lines.len());
    let mut skipped = 0;
    for line in lines {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match parse(line) {
            Some(v) => records.push(v),
            None => skipped += 1,
        }
    }
    (records, skipped)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Serialize, Deserialize, PartialEq)]
    struct A {
        a: i64,
    }

    #[test]
    fn new_files_are_the_users_alone() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.jsonl");
        JsonlAppender::open(&p)
            .unwrap()
            .append_durable(&A { a: 1 })
            .unwrap();
        let q = dir.path().join("y.md");
        crate::write_atomic(&q, b"hi").unwrap();
        for f in [&p, &q] {
            let mode = std::fs::metadata(f).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", f.display());
        }
    }

    #[test]
    fn big_files_parse_in_parallel_in_order_and_count_bad_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("big.jsonl");
        let mut text = String::new();
        for i in 0..120_000 {
            if i % 10_000 == 5 {
                text.push_str("not json\n");
            }
            text.push_str(&format!("{{\"a\":{i}}}\n"));
        }
        text.push_str("{\"a\":");
        assert!(text.len() > PARALLEL_PARSE_BYTES);
        std::fs::write(&p, text).unwrap();
        let r = read_jsonl::<A>(&p).unwrap();
        assert_eq!(r.records.len(), 120_000);
        assert!(r.records.iter().enumerate().all(|(i, a)| a.a == i as i64));
        assert_eq!(r.skipped, 12);
        assert!(r.torn_tail);
    }

    #[test]
    fn open_repairs_torn_tail_before_appending() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log.jsonl");
        std::fs::write(&p, "{\"a\":1}\n{\"a\":").unwrap();
        let mut w = JsonlAppender::open(&p).unwrap();
        w.append_durable(&A { a: 2 }).unwrap();
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            "{\"a\":1}\n{\"a\":2}\n"
        );
        let r: JsonlRead<A> = read_jsonl(&p).unwrap();
        assert_eq!(r.records, vec![A { a: 1 }, A { a: 2 }]);
        assert_eq!((r.skipped, r.torn_tail), (0, false));
    }

    #[test]
    fn open_truncates_a_file_with_no_newline_to_empty() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log.jsonl");
        std::fs::write(&p, "{\"a\":").unwrap();
        let w = JsonlAppender::open(&p).unwrap();
        assert!(w.is_empty().unwrap());
    }

    #[test]
    fn open_creates_parent_dirs_and_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x/y/log.jsonl");
        let mut w = JsonlAppender::open(&p).unwrap();
        w.append(&A { a: 7 }).unwrap();
        w.sync().unwrap();
        assert_eq!(w.path(), p.as_path());
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "{\"a\":7}\n");
    }

    #[test]
    fn read_jsonl_counts_skipped_lines_and_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log.jsonl");
        std::fs::write(&p, "{\"a\":1}\nnot json\n\n{\"b\":2}\n{\"a\":3}\n{\"a\":4").unwrap();
        let r: JsonlRead<A> = read_jsonl(&p).unwrap();
        assert_eq!(r.records, vec![A { a: 1 }, A { a: 3 }]);
        assert_eq!(r.skipped, 2);
        assert!(r.torn_tail);
    }

    #[test]
    fn read_jsonl_of_missing_file_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let r: JsonlRead<A> = read_jsonl(&dir.path().join("none.jsonl")).unwrap();
        assert_eq!(r, JsonlRead::default());
    }

    #[test]
    fn long_torn_tail_spanning_chunks_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log.jsonl");
        let mut text = String::from("{\"a\":1}\n");
        text.push_str(&"x".repeat(200_000));
        std::fs::write(&p, &text).unwrap();
        let w = JsonlAppender::open(&p).unwrap();
        assert_eq!(w.len().unwrap(), 8);
    }
}
