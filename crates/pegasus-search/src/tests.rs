//! The index against real files in a temporary home: what is found and how it ranks, what a
//! catch-up reads again, and that a damaged index is rebuilt.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::{Path, PathBuf};

use chrono::{TimeZone, Utc};
use pegasus_store::{Home, Role, Session, SessionRecord};

use crate::{catch_up, index_file, search, Kind, Query, SearchError};

fn home() -> (tempfile::TempDir, Home) {
    let dir = tempfile::tempdir().unwrap();
    let home = Home::new(dir.path().join("home"));
    home.ensure_layout().unwrap();
    (dir, home)
}

fn project(home: &Home, name: &str) -> PathBuf {
    let dir = home.project_dir(name);
    for sub in pegasus_store::PROJECT_SUBDIRS {
        fs::create_dir_all(dir.join(sub)).unwrap();
    }
    dir
}

/// A message record, built from its JSON line so fields added to the record later need no
/// change here.
fn message(role: Role, text: &str, second: u32) -> SessionRecord {
    let ts = Utc.with_ymd_and_hms(2026, 11, 21, 10, 0, 0).unwrap()
        + chrono::Duration::seconds(second.into());
    serde_json::from_value(serde_json::json!({
        "type": "message",
        "role": role,
        "content": [{"type": "text", "text": text}],
        "ts": ts,
    }))
    .unwrap()
}

fn say(dir: &Path, name: &str, lines: &[(Role, &str)]) {
    let mut s = Session::open(dir, name).unwrap();
    let records: Vec<_> = lines
        .iter()
        .enumerate()
        .map(|(i, (role, text))| message(*role, text, i as u32))
        .collect();
    s.append_turn(&records).unwrap();
}

fn find(home: &Home, text: &str) -> Vec<crate::Hit> {
    let found = search(
        home,
        &Query {
            text: text.into(),
            ..Query::default()
        },
    )
    .unwrap();
    assert!(found.warnings.is_empty(), "{:?}", found.warnings);
    found.hits
}

fn locations(hits: &[crate::Hit]) -> Vec<String> {
    hits.iter()
        .map(|h| format!("{}/{}/{}", h.project, h.kind, h.location))
        .collect()
}

#[test]
fn bundled_sqlite_has_fts5() {
    let conn = rusqlite::Connection::open_in_memory().unwrap();
    let used: i64 = conn
        .query_row("SELECT sqlite_compileoption_used('ENABLE_FTS5')", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(used, 1);
    conn.execute_batch("CREATE VIRTUAL TABLE t USING fts5(x)")
        .unwrap();
}

#[test]
fn sessions_tasks_and_memory_of_projects_and_main_are_found() {
    let (_d, home) = home();
    let web = project(&home, "web");
    say(
        &web,
        "web",
        &[
            (Role::User, "deploy the walrus service"),
            (Role::Assistant, "the walrus is deployed"),
        ],
    );
    let tasks = pegasus_tasks::TaskStore::open(&web, "web").unwrap();
    let task = tasks
        .create(
            pegasus_tasks::NewTask {
                title: "feed the walrus".into(),
                ..Default::default()
            },
            "test",
        )
        .unwrap();
    fs::write(
        web.join("memory/facts/zoo.md"),
        "# Zoo\nThe walrus eats fish.\n",
    )
    .unwrap();
    say(
        &home.main_dir(),
        "main",
        &[(Role::User, "ask web about the walrus")],
    );

    let hits = find(&home, "walrus");
    let mut got = locations(&hits);
    got.sort();
    assert_eq!(
        got,
        [
            "main/session/2026-11-21T10:00:00.000Z".to_string(),
            "web/memory/memory/facts/zoo.md".into(),
            "web/session/2026-11-21T10:00:00.000Z".into(),
            "web/session/2026-11-21T10:00:01.000Z".into(),
            format!("web/task/{}", task.id),
        ]
    );
    let memory = hits.iter().find(|h| h.kind == Kind::Memory).unwrap();
    assert_eq!(memory.snippet, "# Zoo The walrus eats fish.");
    assert_eq!(&memory.snippet[memory.highlights[0].clone()], "walrus");

    // Filters: a project, a kind, a limit.
    let only = |project: Option<&str>, kind: Option<Kind>, limit: Option<usize>| {
        search(
            &home,
            &Query {
                text: "walrus".into(),
                project: project.map(str::to_string),
                kind,
                limit,
            },
        )
        .unwrap()
        .hits
    };
    assert_eq!(locations(&only(Some("main"), None, None)).len(), 1);
    assert_eq!(
        locations(&only(None, Some(Kind::Task), None)),
        [format!("web/task/{}", task.id)]
    );
    assert_eq!(only(Some("web"), Some(Kind::Session), None).len(), 2);
    assert_eq!(only(None, None, Some(2)).len(), 2);
    assert!(only(Some("nope"), None, None).is_empty());
}

#[test]
fn tool_messages_are_not_indexed_and_every_word_must_occur() {
    let (_d, home) = home();
    let web = project(&home, "web");
    say(
        &web,
        "web",
        &[
            (Role::User, "red apple"),
            (Role::Tool, "red apple from a tool"),
            (Role::Assistant, "green apple"),
        ],
    );
    assert_eq!(find(&home, "apple").len(), 2);
    assert_eq!(find(&home, "red apple").len(), 1);
    assert_eq!(find(&home, "APPLE Red").len(), 1, "case does not matter");
    assert!(find(&home, "blue apple").is_empty());
}

#[test]
fn better_matches_rank_first_with_a_higher_score() {
    let (_d, home) = home();
    let web = project(&home, "web");
    say(
        &web,
        "web",
        &[
            (
                Role::User,
                "a long message that mentions kernels once among many other words here",
            ),
            (Role::Assistant, "kernels kernels kernels"),
            (Role::User, "nothing relevant"),
        ],
    );
    let hits = find(&home, "kernels");
    assert_eq!(hits.len(), 2);
    assert_eq!(hits[0].snippet, "kernels kernels kernels");
    assert!(hits[0].score > hits[1].score, "{hits:?}");
    assert!(hits[1].score > 0.0);
}

#[test]
fn fts_syntax_in_the_query_is_plain_text() {
    let (_d, home) = home();
    let web = project(&home, "web");
    say(
        &web,
        "web",
        &[(Role::User, r#"she said a"b OR (maybe) col:x* NEAR"#)],
    );
    for q in [r#"a"b OR ("#, "col:x*", "NEAR(", "(maybe)", "\"", "AND"] {
        let found = search(
            &home,
            &Query {
                text: q.into(),
                ..Query::default()
            },
        );
        match found {
            Ok(f) => assert!(!f.hits.is_empty() || q == "AND", "{q}: {f:?}"),
            Err(SearchError::EmptyQuery(_)) => assert_eq!(q, "\""),
            Err(e) => panic!("{q}: {e}"),
        }
    }
    let err = search(
        &home,
        &Query {
            text: " ( * ) ".into(),
            ..Query::default()
        },
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "nothing to search for in `( * )`: give at least one word or number"
    );
}

#[test]
fn a_catch_up_reads_only_the_new_lines_of_a_session() {
    let (_d, home) = home();
    let web = project(&home, "web");
    say(&web, "web", &[(Role::User, "first otter")]);
    let (done, _) = catch_up(&home, &|| false).unwrap();
    assert_eq!((done.sources_read, done.entries_added), (1, 1));
    let (done, _) = catch_up(&home, &|| false).unwrap();
    assert_eq!(
        done,
        crate::CatchUp::default(),
        "nothing changed, nothing read"
    );

    say(
        &web,
        "web",
        &[
            (Role::User, "second otter"),
            (Role::Assistant, "third otter"),
        ],
    );
    let (done, _) = catch_up(&home, &|| false).unwrap();
    assert_eq!((done.sources_read, done.entries_added), (1, 2));
    assert_eq!(find(&home, "otter").len(), 3, "no line indexed twice");

    // A line still being written (no line end yet) waits for its end.
    let path = pegasus_store::session_file(&web);
    let line = serde_json::to_string(&message(Role::User, "fourth otter", 9)).unwrap();
    let (head, tail) = line.split_at(20);
    let mut f = fs::OpenOptions::new().append(true).open(&path).unwrap();
    std::io::Write::write_all(&mut f, head.as_bytes()).unwrap();
    assert_eq!(find(&home, "otter").len(), 3);
    std::io::Write::write_all(&mut f, format!("{tail}\n").as_bytes()).unwrap();
    assert_eq!(find(&home, "otter").len(), 4);
}

#[test]
fn a_replaced_or_shrunk_session_is_read_whole_again() {
    let (_d, home) = home();
    let web = project(&home, "web");
    say(
        &web,
        "web",
        &[(Role::User, "old badger"), (Role::User, "older badger")],
    );
    assert_eq!(find(&home, "badger").len(), 2);

    // Compaction: the old file is archived, a new one replaces it (a new inode).
    let path = pegasus_store::session_file(&web);
    fs::create_dir_all(web.join("session/archive")).unwrap();
    fs::hard_link(&path, web.join("session/archive/1.jsonl")).unwrap();
    let new = web.join("session/.new");
    fs::write(
        &new,
        format!(
            "{}\n",
            serde_json::to_string(&message(Role::User, "new badger", 30)).unwrap()
        ),
    )
    .unwrap();
    fs::rename(&new, &path).unwrap();
    let hits = find(&home, "badger");
    assert_eq!(hits.len(), 3, "{:?}", locations(&hits));

    // Cut in place to less than was read: the rest is read again, and nothing stale stays.
    fs::remove_file(web.join("session/archive/1.jsonl")).unwrap();
    let f = fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(0).unwrap();
    drop(f);
    say(&web, "web", &[(Role::User, "lone badger")]);
    let hits = find(&home, "badger");
    assert_eq!(hits.len(), 1, "{:?}", locations(&hits));
    assert_eq!(hits[0].snippet, "lone badger");
}

#[test]
fn edited_memory_and_tasks_replace_their_entries_and_gone_projects_leave() {
    let (_d, home) = home();
    let web = project(&home, "web");
    let fact = web.join("memory/facts/db.md");
    fs::write(&fact, "Database: Postgres 16\n").unwrap();
    assert_eq!(find(&home, "postgres").len(), 1);
    fs::write(&fact, "Database: SQLite now\n").unwrap();
    assert!(find(&home, "postgres").is_empty());
    assert_eq!(find(&home, "sqlite").len(), 1);

    let tasks = pegasus_tasks::TaskStore::open(&web, "web").unwrap();
    let t = tasks
        .create(
            pegasus_tasks::NewTask {
                title: "paint the fence".into(),
                ..Default::default()
            },
            "test",
        )
        .unwrap();
    assert_eq!(find(&home, "fence").len(), 1);
    tasks
        .create(
            pegasus_tasks::NewTask {
                title: "mend the fence".into(),
                ..Default::default()
            },
            "test",
        )
        .unwrap();
    let hits = find(&home, "fence");
    assert_eq!(hits.len(), 2, "the task index was read again, not added to");
    assert!(hits.iter().any(|h| h.location == t.id));

    fs::remove_dir_all(&web).unwrap();
    assert!(find(&home, "fence").is_empty());
    assert!(find(&home, "sqlite").is_empty());
}

/// Each kind of damage: a warning, a rebuild from the files, the right answer.
#[test]
fn a_damaged_index_is_rebuilt_with_a_warning() {
    type Spoil = fn(&Path);
    let damage: [(&str, Spoil); 4] = [
        ("not a database", |p| {
            fs::write(p, b"this is not sqlite, just text\n".repeat(100)).unwrap()
        }),
        ("truncated", |p| {
            let len = fs::metadata(p).unwrap().len();
            let f = fs::OpenOptions::new().write(true).open(p).unwrap();
            f.set_len(len / 2).unwrap();
        }),
        ("another schema", |p| {
            let c = rusqlite::Connection::open(p).unwrap();
            c.execute_batch("PRAGMA user_version = 99").unwrap();
        }),
        ("pages overwritten", |p| {
            let mut bytes = fs::read(p).unwrap();
            let n = bytes.len();
            for b in &mut bytes[4096.min(n)..] {
                *b = 0x5a;
            }
            fs::write(p, bytes).unwrap();
        }),
    ];
    for (what, spoil) in damage {
        let (_d, home) = home();
        let web = project(&home, "web");
        let lines: Vec<String> = (0..300)
            .map(|i| format!("heron number {i} flies"))
            .collect();
        let lines: Vec<(Role, &str)> = lines.iter().map(|l| (Role::User, l.as_str())).collect();
        say(&web, "web", &lines);
        catch_up(&home, &|| false).unwrap();
        let path = index_file(&home);
        // Everything in the main file, nothing left in the WAL to hide the damage.
        {
            let c = rusqlite::Connection::open(&path).unwrap();
            c.execute_batch("PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode = DELETE;")
                .unwrap();
        }
        spoil(&path);
        let found = search(
            &home,
            &Query {
                text: "heron 123".into(),
                ..Query::default()
            },
        )
        .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(found.warnings.len(), 1, "{what}: {:?}", found.warnings);
        assert!(
            found.warnings[0].contains("was damaged")
                && found.warnings[0].contains("rebuilt it from the files"),
            "{what}: {}",
            found.warnings[0]
        );
        if what == "truncated" {
            assert!(
                found.warnings[0].contains("(truncated: "),
                "{}",
                found.warnings[0]
            );
        }
        assert_eq!(found.hits.len(), 1, "{what}");
        assert_eq!(found.hits[0].snippet, "heron number 123 flies");
        // And it stays healthy.
        assert_eq!(find(&home, "heron").len(), 20, "{what}");
    }
}

#[test]
fn a_missing_index_is_built_without_a_warning_and_a_missing_home_is_an_error() {
    let (_d, home) = home();
    let web = project(&home, "web");
    say(&web, "web", &[(Role::User, "lynx")]);
    assert_eq!(find(&home, "lynx").len(), 1);
    crate::index::remove(&index_file(&home)).unwrap();
    assert_eq!(find(&home, "lynx").len(), 1);

    let err = search(
        &Home::new(home.root().join("nope")),
        &Query {
            text: "lynx".into(),
            ..Query::default()
        },
    )
    .unwrap_err();
    assert!(err.to_string().contains("no Pegasus home here"), "{err}");
}

#[test]
fn a_stop_asked_for_ends_the_catch_up_between_projects() {
    let (_d, home) = home();
    for name in ["a", "b"] {
        let dir = project(&home, name);
        say(&dir, name, &[(Role::User, "mole")]);
    }
    let (done, _) = catch_up(&home, &|| true).unwrap();
    assert_eq!(done, crate::CatchUp::default());
    assert_eq!(find(&home, "mole").len(), 2);
}
