//! The index itself: `<home>/index/search.sqlite3`, an SQLite database in WAL mode with one
//! FTS5 table of entries and one row of state per source file.
//!
//! The files stay the truth. A catch-up reads only what changed since the last one (the new
//! lines of a session, a task index or memory file that was rewritten) and drops what is gone;
//! an index that is not a database, is truncated or has another schema is *damaged*: it is
//! deleted and built again from the files, and the caller gets a warning, never a failure.
//! pegasusd and `pegasusctl` may both write at once: each project's changes are one
//! `BEGIN IMMEDIATE` transaction that re-reads the source's state under the write lock, and
//! the busy timeout makes the other writer wait its turn.

use std::collections::{HashMap, HashSet};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use pegasus_store::Home;
use rusqlite::{
    params, Connection, ErrorCode, OptionalExtension, Transaction, TransactionBehavior,
};

use crate::error::SearchError;
use crate::sources::{self, Entry, Kind, SourceFile, Stamp};

/// The folder of the index in the home (DESIGN.md §11).
pub const INDEX_DIR: &str = "index";

/// The database file in [`INDEX_DIR`].
pub const INDEX_FILE: &str = "search.sqlite3";

/// Bump when the tables change: an index of another version is rebuilt from the files.
pub(crate) const SCHEMA_VERSION: i32 = 1;

/// How long a writer waits for the other one (pegasusd's catch-up, a CLI's) before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(20);

const SCHEMA: &str = "
CREATE TABLE sources(
    id INTEGER PRIMARY KEY,
    path BLOB NOT NULL UNIQUE,
    project TEXT NOT NULL,
    kind TEXT NOT NULL,
    dev INTEGER NOT NULL,
    ino INTEGER NOT NULL,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    ctime_ns INTEGER NOT NULL,
    offset INTEGER NOT NULL,
    tail BLOB NOT NULL
);
CREATE TABLE entries(id INTEGER PRIMARY KEY, source INTEGER NOT NULL);
CREATE INDEX entries_by_source ON entries(source);
CREATE VIRTUAL TABLE fts USING fts5(
    text,
    project UNINDEXED,
    kind UNINDEXED,
    location UNINDEXED,
    tokenize = 'unicode61 remove_diacritics 2'
);
";

/// `<home>/index/search.sqlite3`.
pub fn index_file(home: &Home) -> PathBuf {
    home.root().join(INDEX_DIR).join(INDEX_FILE)
}

/// What went wrong inside an operation on the index: damage (rebuild and retry) or a plain
/// error (report it).
#[derive(Debug)]
pub(crate) enum Fail {
    Damaged(String),
    Error(SearchError),
}

impl From<SearchError> for Fail {
    fn from(e: SearchError) -> Self {
        Fail::Error(e)
    }
}

/// What one catch-up did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CatchUp {
    /// Source files read (wholly or their new part).
    pub sources_read: usize,
    /// Entries added to the index.
    pub entries_added: usize,
    /// Source files gone from disk whose entries were dropped.
    pub sources_dropped: usize,
}

/// The state the index keeps of one source file.
#[derive(Debug, Clone)]
struct SourceRow {
    id: i64,
    stamp: Stamp,
    offset: u64,
}

impl SourceRow {
    /// The row's `id, dev, ino, size, mtime_ns, ctime_ns, offset`, from column `at` on.
    fn read(r: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<SourceRow> {
        Ok(SourceRow {
            id: r.get(at)?,
            stamp: Stamp {
                dev: r.get(at + 1)?,
                ino: r.get(at + 2)?,
                size: r.get(at + 3)?,
                mtime_ns: r.get(at + 4)?,
                ctime_ns: r.get(at + 5)?,
            },
            offset: u64::try_from(r.get::<_, i64>(at + 6)?).unwrap_or(0),
        })
    }
}

/// What was read of one source: its entries, where to go on from, and whether the entries it
/// had are replaced.
struct Read {
    entries: Vec<Entry>,
    offset: u64,
    tail: Vec<u8>,
    replace: bool,
}

/// An open index.
pub(crate) struct Index {
    pub(crate) conn: Connection,
    pub(crate) path: PathBuf,
}

impl Index {
    /// Opens the index of `home`, creating it when missing. `Err(Fail::Damaged)` when the file
    /// is there but is not an index of this version.
    pub fn open(home: &Home) -> Result<Index, Fail> {
        let root = home.root();
        if !root.is_dir() {
            let why = "no Pegasus home here: pass --home DIR or start pegasusd once";
            let source = std::io::Error::new(std::io::ErrorKind::NotFound, why);
            return Err(SearchError::io(root)(source).into());
        }
        let dir = root.join(INDEX_DIR);
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(SearchError::io(&dir)(e).into()),
        }
        let path = dir.join(INDEX_FILE);
        if let Some(why) = truncated(&path) {
            return Err(Fail::Damaged(why));
        }
        let conn = Connection::open(&path).map_err(|e| classify(&path, e))?;
        let index = Index { conn, path };
        index.prepare().map_err(|e| classify(&index.path, e))?;
        index.check_schema()?;
        Ok(index)
    }

    fn prepare(&self) -> rusqlite::Result<()> {
        self.conn.busy_timeout(BUSY_TIMEOUT)?;
        // WAL: readers never wait for the writer, and a commit costs no fsync (synchronous =
        // NORMAL); a power cut can lose the last commits, which the next catch-up redoes from
        // the files.
        let mode: String = self
            .conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            tracing::debug!(path = %self.path.display(), "search index journal mode {mode}");
        }
        self.conn.execute_batch("PRAGMA synchronous = NORMAL;")?;
        Ok(())
    }

    /// Creates the tables in a new database; refuses (as damage) one of another version or with
    /// tables that are not this schema's.
    fn check_schema(&self) -> Result<(), Fail> {
        let err = |e| classify(&self.path, e);
        let version = self.user_version().map_err(err)?;
        if version == 0 {
            // New (or being made by another process): made under the write lock.
            return self.create_schema();
        }
        if version != SCHEMA_VERSION {
            return Err(other_version(version));
        }
        let tables: i64 = self
            .conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type IN ('table', 'index') AND name IN ('sources', 'entries', 'entries_by_source', 'fts')",
                [],
                |r| r.get(0),
            )
            .map_err(err)?;
        if tables != 4 {
            return Err(Fail::Damaged("tables are missing".into()));
        }
        Ok(())
    }

    /// A `BEGIN IMMEDIATE` transaction: the write lock is taken at the start, so the state
    /// read inside it is the state written over. Rolled back unless committed.
    fn begin(&self) -> rusqlite::Result<Transaction<'_>> {
        Transaction::new_unchecked(&self.conn, TransactionBehavior::Immediate)
    }

    fn user_version(&self) -> rusqlite::Result<i32> {
        self.conn.query_row("PRAGMA user_version", [], |r| r.get(0))
    }

    fn create_schema(&self) -> Result<(), Fail> {
        let err = |e| classify(&self.path, e);
        let tx = self.begin().map_err(err)?;
        let version = self.user_version().map_err(err)?;
        if version == 0 {
            let objects: i64 = self
                .conn
                .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
                .map_err(err)?;
            if objects != 0 {
                return Err(Fail::Damaged("it has tables but no schema version".into()));
            }
            self.conn.execute_batch(SCHEMA).map_err(err)?;
            self.conn
                .execute_batch(&format!("PRAGMA user_version = {SCHEMA_VERSION};"))
                .map_err(err)?;
        }
        tx.commit().map_err(err)?;
        if version != 0 && version != SCHEMA_VERSION {
            return Err(other_version(version));
        }
        Ok(())
    }

    /// Brings the index up to date with the files of `home`: new and changed sources are read
    /// (a session only from where it was last read), sources gone from disk are dropped.
    /// `stop` is asked between projects, so a daemon that stops is not held by a long rebuild.
    pub fn catch_up(&self, home: &Home, stop: &dyn Fn() -> bool) -> Result<CatchUp, Fail> {
        let err = |e| classify(&self.path, e);
        let known = self.known_sources().map_err(err)?;
        let mut done = CatchUp::default();
        let mut seen: HashSet<Vec<u8>> = HashSet::with_capacity(known.len());
        for files in sources::list_all(home) {
            if stop() {
                return Ok(done);
            }
            let changed: Vec<&SourceFile> = files
                .iter()
                .filter(|f| {
                    let key = path_key(&f.path);
                    let unchanged = known.get(&key).is_some_and(|r| r.stamp == f.stamp);
                    seen.insert(key);
                    !unchanged
                })
                .collect();
            if changed.is_empty() {
                continue;
            }
            let tx = self.begin().map_err(err)?;
            for f in changed {
                self.apply(f, &mut done).map_err(err)?;
            }
            tx.commit().map_err(err)?;
        }
        let gone: Vec<i64> = known
            .iter()
            .filter(|(path, _)| !seen.contains(*path))
            .map(|(_, r)| r.id)
            .collect();
        if !gone.is_empty() && !stop() {
            let tx = self.begin().map_err(err)?;
            for id in gone {
                self.drop_entries(id).map_err(err)?;
                self.conn
                    .execute("DELETE FROM sources WHERE id = ?1", [id])
                    .map_err(err)?;
                done.sources_dropped += 1;
            }
            tx.commit().map_err(err)?;
        }
        Ok(done)
    }

    fn known_sources(&self) -> rusqlite::Result<HashMap<Vec<u8>, SourceRow>> {
        let mut stmt = self
            .conn
            .prepare("SELECT path, id, dev, ino, size, mtime_ns, ctime_ns, offset FROM sources")?;
        let rows = stmt.query_map([], |r| {
            Ok((r.get::<_, Vec<u8>>(0)?, SourceRow::read(r, 1)?))
        })?;
        rows.collect()
    }

    /// Reads what is new in one source, inside the caller's write transaction. Its state is
    /// read again here, under the lock: another process may have caught it up meanwhile.
    fn apply(&self, f: &SourceFile, done: &mut CatchUp) -> rusqlite::Result<()> {
        let key = path_key(&f.path);
        let row = self
            .conn
            .prepare_cached(
                "SELECT id, dev, ino, size, mtime_ns, ctime_ns, offset FROM sources WHERE path = ?1",
            )?
            .query_row([&key], |r| SourceRow::read(r, 0))
            .optional()?;
        if row.as_ref().is_some_and(|r| r.stamp == f.stamp) {
            return Ok(());
        }
        let read = match self.read(f, row.as_ref())? {
            Some(read) => read,
            // Gone between the listing and the read: the next catch-up drops it.
            None => return Ok(()),
        };
        if let (Some(r), true) = (&row, read.replace) {
            self.drop_entries(r.id)?;
        }
        // A known source keeps its id, project and kind.
        let id: i64 = self
            .conn
            .prepare_cached(
                "INSERT INTO sources(path, project, kind, dev, ino, size, mtime_ns, ctime_ns, offset, tail) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) \
                 ON CONFLICT(path) DO UPDATE SET dev = excluded.dev, ino = excluded.ino, size = excluded.size, mtime_ns = excluded.mtime_ns, ctime_ns = excluded.ctime_ns, offset = excluded.offset, tail = excluded.tail \
                 RETURNING id",
            )?
            .query_row(
                params![
                    key,
                    f.project,
                    f.kind.as_str(),
                    f.stamp.dev,
                    f.stamp.ino,
                    f.stamp.size,
                    f.stamp.mtime_ns,
                    f.stamp.ctime_ns,
                    read.offset as i64,
                    read.tail,
                ],
                |r| r.get(0),
            )?;
        self.insert(id, &f.project, f.kind, &read.entries)?;
        done.sources_read += 1;
        done.entries_added += read.entries.len();
        Ok(())
    }

    /// Reads one changed source: a session that is the same file and did not shrink below
    /// what was read only grew, so only its new lines are read; anything else is read whole
    /// and replaces the entries it had. `None` when it cannot be read (it just went away).
    fn read(&self, f: &SourceFile, row: Option<&SourceRow>) -> rusqlite::Result<Option<Read>> {
        let whole = |entries| Read {
            entries,
            offset: 0,
            tail: Vec::new(),
            replace: true,
        };
        Ok(Some(match f.kind {
            Kind::Task => whole(sources::task_entries(&f.dir)),
            Kind::Memory => whole(sources::memory_entries(&f.path, &f.dir)),
            Kind::Session => {
                let (from, tail) = match row {
                    Some(r)
                        if r.stamp.same_file(&f.stamp)
                            && u64::try_from(f.stamp.size).unwrap_or(0) >= r.offset =>
                    {
                        let tail: Vec<u8> = self
                            .conn
                            .prepare_cached("SELECT tail FROM sources WHERE id = ?1")?
                            .query_row([r.id], |r| r.get(0))?;
                        (r.offset, tail)
                    }
                    _ => (0, Vec::new()),
                };
                match sources::session_entries(&f.path, from, &tail) {
                    Ok(s) => Read {
                        replace: from == 0 || s.whole,
                        entries: s.entries,
                        offset: s.offset,
                        tail: s.tail,
                    },
                    Err(e) => {
                        tracing::debug!(path = %f.path.display(), "cannot read: {e}");
                        return Ok(None);
                    }
                }
            }
        }))
    }

    fn insert(
        &self,
        source: i64,
        project: &str,
        kind: Kind,
        entries: &[Entry],
    ) -> rusqlite::Result<()> {
        let mut entry = self
            .conn
            .prepare_cached("INSERT INTO entries(source) VALUES (?1)")?;
        let mut text = self.conn.prepare_cached(
            "INSERT INTO fts(rowid, text, project, kind, location) VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        for e in entries {
            entry.execute([source])?;
            let id = self.conn.last_insert_rowid();
            text.execute(params![id, e.text, project, kind.as_str(), e.location])?;
        }
        Ok(())
    }

    fn drop_entries(&self, source: i64) -> rusqlite::Result<()> {
        self.conn
            .prepare_cached(
                "DELETE FROM fts WHERE rowid IN (SELECT id FROM entries WHERE source = ?1)",
            )?
            .execute([source])?;
        self.conn
            .prepare_cached("DELETE FROM entries WHERE source = ?1")?
            .execute([source])?;
        Ok(())
    }
}

/// Why the database file is shorter than its own header says, if it is. SQLite notices a
/// missing page only when a query reads it, and a search might not: a catch-up that finds
/// nothing new reads no page of the entries it would then never return. The header's page
/// count is trusted only when it is current (its "version valid for" equals the change
/// counter), as SQLite itself does, and only when no other connection is open (no WAL file):
/// a checkpoint in progress writes page 1 before the pages that make the file longer.
fn truncated(path: &Path) -> Option<String> {
    use std::io::Read as _;
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    if Path::new(&wal).exists() {
        return None;
    }
    let mut header = [0u8; 100];
    let mut file = std::fs::File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    file.read_exact(&mut header).ok()?;
    if &header[..16] != b"SQLite format 3\0" {
        return None;
    }
    let be = |at: usize| {
        u32::from_be_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
    };
    let page_size = match u16::from_be_bytes([header[16], header[17]]) {
        1 => 65536,
        n => u64::from(n),
    };
    let pages = u64::from(be(28));
    let want = pages * page_size;
    (be(92) == be(24) && pages > 0 && len < want)
        .then(|| format!("truncated: {len} of its {want} bytes"))
}

fn other_version(version: i32) -> Fail {
    Fail::Damaged(format!(
        "it has schema version {version}, this build uses {SCHEMA_VERSION}"
    ))
}

fn path_key(path: &Path) -> Vec<u8> {
    path.as_os_str().as_bytes().to_vec()
}

/// Damage (the file is not a database, or a damaged one) or another error.
pub(crate) fn classify(path: &Path, e: rusqlite::Error) -> Fail {
    match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase) => Fail::Damaged(e.to_string()),
        _ => Fail::Error(SearchError::Db {
            path: path.to_path_buf(),
            source: e,
        }),
    }
}

/// Deletes a damaged index (with its WAL and shared-memory files) so it can be made anew.
pub(crate) fn remove(path: &Path) -> Result<(), SearchError> {
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        let p = PathBuf::from(p);
        match std::fs::remove_file(&p) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(SearchError::io(&p)(e)),
        }
    }
    Ok(())
}
