//! What the index reads: the files of every project and of the MainAgent, and the searchable
//! entries in each, through the readers of the crates that own those files (session records
//! from `pegasus-store`, tasks from `pegasus-tasks`' index, memory as the markdown it is).
//!
//! A file is one *source*; its [`Stamp`] tells a catch-up whether it changed. Sessions are
//! append-only, so a session file that only grew is read from where the last catch-up stopped.

use std::fs;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use chrono::SecondsFormat;
use pegasus_store::{ContentBlock, Home, Role, SessionRecord};
use serde::{Deserialize, Serialize};

/// The project name the MainAgent's entries carry (DESIGN.md §11).
pub const MAIN: &str = "main";

/// Largest memory file indexed; a bigger one is skipped (memory is notes, not data).
const MEMORY_CAP: u64 = 8 << 20;

/// Longest text kept for one entry: a pasted log in a message must not make the index huge;
/// its start is what a search needs.
const ENTRY_CAP: usize = 64 << 10;

/// What an entry is, as `--kind` and the JSON spell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A user or assistant message of a session; its location is the message time.
    Session,
    /// A task (title, spec, result, question); its location is the task id.
    Task,
    /// A memory file; its location is its path in the project folder (`memory/...`).
    Memory,
}

impl Kind {
    /// Every kind, in the order `--kind` lists them.
    pub const ALL: [Kind; 3] = [Kind::Session, Kind::Task, Kind::Memory];

    /// The word for it in files, JSON and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Session => "session",
            Kind::Task => "task",
            Kind::Memory => "memory",
        }
    }

    /// The kind a word names, if any.
    pub fn parse(word: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == word)
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One version of a source file, from its metadata: a different inode is a different file
/// (an atomic replace, a compacted session), a change of size or times is an edit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Stamp {
    pub dev: i64,
    pub ino: i64,
    pub size: i64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
}

impl Stamp {
    pub fn of(meta: &fs::Metadata) -> Stamp {
        let ns = |s: i64, n: i64| s.saturating_mul(1_000_000_000).saturating_add(n);
        Stamp {
            dev: meta.dev() as i64,
            ino: meta.ino() as i64,
            size: i64::try_from(meta.size()).unwrap_or(i64::MAX),
            mtime_ns: ns(meta.mtime(), meta.mtime_nsec()),
            ctime_ns: ns(meta.ctime(), meta.ctime_nsec()),
        }
    }

    /// Whether this is the same file (not a replacement at the same path).
    pub fn same_file(&self, other: &Stamp) -> bool {
        self.dev == other.dev && self.ino == other.ino
    }
}

/// One file the index reads, as found on disk now.
#[derive(Debug, Clone)]
pub(crate) struct SourceFile {
    pub path: PathBuf,
    pub project: String,
    pub kind: Kind,
    /// The project (or `main`) folder it belongs to.
    pub dir: PathBuf,
    pub stamp: Stamp,
}

/// One searchable piece of text and where it is.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Entry {
    pub location: String,
    pub text: String,
}

/// The MainAgent's folder first, then every project folder, by name. A folder whose name is
/// not a project name is not a project (a stray file, an editor's backup).
pub(crate) fn projects(home: &Home) -> Vec<(String, PathBuf)> {
    let mut out = vec![(MAIN.to_string(), home.main_dir())];
    let mut names: Vec<String> = match fs::read_dir(home.projects_dir()) {
        Ok(rd) => rd
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| pegasus_store::validate_name(n).is_ok())
            .collect(),
        Err(_) => Vec::new(),
    };
    names.sort();
    out.extend(names.into_iter().map(|n| {
        let dir = home.project_dir(&n);
        (n, dir)
    }));
    out
}

/// Every source of one project folder: its session files (the live one and the archived
/// ones), its task index, and each memory file.
pub(crate) fn files_of(project: &str, dir: &Path) -> Vec<SourceFile> {
    let mut out = Vec::new();
    let mut add = |path: PathBuf, meta: &fs::Metadata, kind: Kind| {
        out.push(SourceFile {
            path,
            project: project.to_string(),
            kind,
            dir: dir.to_path_buf(),
            stamp: Stamp::of(meta),
        })
    };
    let mut sessions = Vec::new();
    walk(&dir.join("session"), 2, &mut sessions);
    for (path, meta) in sessions {
        if path.extension().is_some_and(|e| e == "jsonl") {
            add(path, &meta, Kind::Session);
        }
    }
    let index = dir.join("tasks").join("index.jsonl");
    if let Ok(meta) = fs::symlink_metadata(&index) {
        if meta.is_file() {
            add(index, &meta, Kind::Task);
        }
    }
    let mut memory = Vec::new();
    walk(&dir.join("memory"), 4, &mut memory);
    for (path, meta) in memory {
        add(path, &meta, Kind::Memory);
    }
    out
}

/// The regular files under `dir`, `depth` folders deep at most. Hidden names (a temp file of
/// an atomic write, an editor's swap file) and links are left out: a link could lead anywhere.
fn walk(dir: &Path, depth: u32, out: &mut Vec<(PathBuf, fs::Metadata)>) {
    let Ok(rd) = fs::read_dir(dir) else {
        return;
    };
    for e in rd.filter_map(|e| e.ok()) {
        if e.file_name().as_encoded_bytes().first() == Some(&b'.') {
            continue;
        }
        // The type comes with the listing (no `stat` for a folder); a file's metadata is that
        // of the entry itself, never of what a link points to.
        let Ok(kind) = e.file_type() else {
            continue;
        };
        if kind.is_file() {
            if let Ok(meta) = e.metadata() {
                out.push((e.path(), meta));
            }
        } else if kind.is_dir() && depth > 1 {
            walk(&e.path(), depth - 1, out);
        }
    }
}

/// Every project's sources ([`projects`], [`files_of`]), listed on a few threads: a catch-up
/// that finds nothing new is nearly all this listing, one `stat` and a few folder reads per
/// project, and a search waits for it.
pub(crate) fn list_all(home: &Home) -> Vec<Vec<SourceFile>> {
    let projects = projects(home);
    let threads = projects.len().div_ceil(64).clamp(1, 8);
    pegasus_store::par_map(&projects, threads, |(name, dir)| files_of(name, dir))
}

/// Bytes kept of the end of what was read of a session: the same bytes there next time mean
/// the file only grew since.
const TAIL: usize = 64;

/// What [`session_entries`] read.
#[derive(Debug)]
pub(crate) struct SessionRead {
    pub entries: Vec<Entry>,
    /// Just past the last whole line read.
    pub offset: u64,
    /// The last bytes before `offset` (at most [`TAIL`]).
    pub tail: Vec<u8>,
    /// Whether the file was read from its start because it was not what was read last time.
    pub whole: bool,
}

/// The entries of the session lines that start at byte `from` of `path` and end with a line
/// end: a line still being written (no line end yet) is left for the next catch-up. `tail` is
/// what the last read ended with; when the bytes before `from` are not those (the file was
/// cut and written again in place), the whole file is read. Lines that are not session
/// records are skipped, as `load_session` skips them.
pub(crate) fn session_entries(path: &Path, from: u64, tail: &[u8]) -> std::io::Result<SessionRead> {
    let mut file = fs::File::open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut from = from;
    let mut whole = false;
    if from > 0 {
        let n = tail.len() as u64;
        let mut before = vec![0; tail.len()];
        let same = n > 0
            && n <= from
            && file.seek(SeekFrom::Start(from - n)).is_ok()
            && file.read_exact(&mut before).is_ok()
            && before == tail;
        if !same {
            from = 0;
            whole = true;
        }
    }
    file.seek(SeekFrom::Start(from))?;
    let mut reader = BufReader::with_capacity(256 << 10, file);
    let mut entries = Vec::new();
    let mut line = Vec::new();
    let mut offset = from;
    let mut last = if from > 0 { tail.to_vec() } else { Vec::new() };
    loop {
        line.clear();
        let n = reader.read_until(b'\n', &mut line)?;
        if n == 0 || line.last() != Some(&b'\n') {
            break;
        }
        offset += n as u64;
        if let Some(SessionRecord::Message(m)) = SessionRecord::decode(&line) {
            if matches!(m.role, Role::User | Role::Assistant) {
                let text = join(m.content.iter().filter_map(|b| match b {
                    ContentBlock::Text { text } => Some(text.as_str()),
                    _ => None,
                }));
                if !text.trim().is_empty() {
                    entries.push(Entry {
                        location: m.ts.to_rfc3339_opts(SecondsFormat::Millis, true),
                        text,
                    });
                }
            }
        }
        std::mem::swap(&mut last, &mut line);
    }
    let tail = last[last.len().saturating_sub(TAIL)..].to_vec();
    Ok(SessionRead {
        entries,
        offset,
        tail,
        whole,
    })
}

/// One entry per task of the project, as its task index holds it: title, goal, constraints,
/// acceptance, result, question and answer.
pub(crate) fn task_entries(project_dir: &Path) -> Vec<Entry> {
    pegasus_tasks::peek_tasks(project_dir)
        .into_iter()
        .map(|t| {
            let spec = t.spec.as_ref();
            let parts = std::iter::once(t.title.as_str())
                .chain(spec.map(|s| s.goal.as_str()))
                .chain(spec.into_iter().flat_map(|s| {
                    s.constraints
                        .iter()
                        .chain(&s.acceptance)
                        .map(String::as_str)
                }))
                .chain(t.result_summary.as_deref())
                .chain(t.question.as_deref())
                .chain(t.answer.as_deref());
            Entry {
                location: t.id.clone(),
                text: join(distinct(parts)),
            }
        })
        .collect()
}

/// The parts without repeats: a task's title is often its goal (or the goal's start, cut with
/// `…`), which a snippet would show twice; the longer of the two is kept, where the first was.
fn distinct<'a>(parts: impl Iterator<Item = &'a str>) -> std::vec::IntoIter<&'a str> {
    let mut kept: Vec<&'a str> = Vec::new();
    for part in parts {
        let p = part.trim();
        if p.is_empty() {
            continue;
        }
        let stem = |s: &str| s.trim_end_matches('…').trim_end().to_string();
        match kept
            .iter()
            .position(|k| p.starts_with(&stem(k)) || k.starts_with(&stem(p)))
        {
            Some(i) if p.len() > kept[i].len() => kept[i] = p,
            Some(_) => {}
            None => kept.push(p),
        }
    }
    kept.into_iter()
}

/// The memory file at `path` as one entry located at its path in the project folder; nothing
/// when it is not UTF-8 text or is over the cap.
pub(crate) fn memory_entries(path: &Path, project_dir: &Path) -> Vec<Entry> {
    let text = match pegasus_store::read_text_limited(path, MEMORY_CAP) {
        Ok(t) => t,
        Err(e) => {
            tracing::debug!(path = %path.display(), "not indexed: {e}");
            return Vec::new();
        }
    };
    if text.trim().is_empty() {
        return Vec::new();
    }
    let location = path
        .strip_prefix(project_dir)
        .unwrap_or(path)
        .to_string_lossy()
        .into_owned();
    vec![Entry {
        location,
        text: cap(text),
    }]
}

/// The parts, one per line, cut to [`ENTRY_CAP`].
fn join<'a>(parts: impl Iterator<Item = &'a str>) -> String {
    let mut text = String::new();
    for p in parts {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(p);
        if text.len() > ENTRY_CAP {
            break;
        }
    }
    cap(text)
}

fn cap(mut text: String) -> String {
    if text.len() > ENTRY_CAP {
        let mut at = ENTRY_CAP;
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        text.truncate(at);
    }
    text
}

#[cfg(test)]
mod distinct_tests {
    use super::distinct;

    #[test]
    fn a_title_that_is_its_goal_or_its_start_is_kept_once() {
        let got: Vec<_> =
            distinct(["Fix the login", "Fix the login", "done"].into_iter()).collect();
        assert_eq!(got, vec!["Fix the login", "done"]);
        let got: Vec<_> =
            distinct(["Fix the lo…", "Fix the login page", "x"].into_iter()).collect();
        assert_eq!(got, vec!["Fix the login page", "x"]);
        let got: Vec<_> = distinct(["a title", "another goal"].into_iter()).collect();
        assert_eq!(got, vec!["a title", "another goal"]);
    }
}
