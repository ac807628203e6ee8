//! Search (DESIGN.md §11) through the real binaries: a message sent to a project is in pegasusd's
//! own index within 10 s, `pegasusctl search` and `GET /api/search` find it in the same shape,
//! the dashboard's search page marks it, search works with the daemon stopped, and a damaged
//! index is rebuilt with a warning and the right answer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// `GET path` on the dashboard with its token: the status and the body.
fn get(home: &Home, path: &str) -> (u16, String) {
    let addr = poll(Duration::from_secs(10), "the dashboard address", || {
        std::fs::read_to_string(home.path().join("run/dashboard.addr")).ok()
    });
    let addr = addr.trim();
    let token = std::fs::read_to_string(home.path().join("run/dashboard.token")).unwrap();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n",
        token.trim()
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    assert!(
        !head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "{head}"
    );
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, body.to_string())
}

/// The hits' identities, for comparing two answers.
fn keys(hits: &Value) -> Vec<(String, String, String, String)> {
    hits.as_array()
        .unwrap()
        .iter()
        .map(|h| {
            let s = |k: &str| h[k].as_str().unwrap().to_string();
            (s("project"), s("kind"), s("location"), s("snippet"))
        })
        .collect()
}

/// How many entries pegasusd's own index holds for `word`, read straight from the database
/// (no catch-up of the test's: this is what the daemon did by itself).
fn indexed(home: &Home, word: &str) -> Option<i64> {
    let path = home.path().join("index/search.sqlite3");
    let conn =
        rusqlite::Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .ok()?;
    conn.query_row(
        "SELECT count(*) FROM fts WHERE fts MATCH ?1",
        [format!("\"{word}\"")],
        |r| r.get(0),
    )
    .ok()
}

#[test]
fn search_finds_what_was_said_over_cli_and_rest_with_or_without_the_daemon() {
    let fake = answering_fake();
    let home = fake_home(&fake, "");
    let mut daemon = home.start_fake();
    home.create("web");
    let answer = home.ctl_ok(&[
        "project",
        "send",
        "web",
        "where is the zebra-crossing manual kept?",
        "--wait",
    ]);
    assert!(answer.contains("answered through pegasusd"), "{answer}");
    home.ctl_ok(&["chat", "remember the okapi enclosure"]);

    // pegasusd keeps its index current by itself (within 10 s of each write).
    poll(
        Duration::from_secs(10),
        "pegasusd to index the message",
        || (indexed(&home, "zebra")? >= 1).then_some(()),
    );
    poll(
        Duration::from_secs(10),
        "pegasusd to index the MainAgent's message",
        || (indexed(&home, "okapi")? >= 1).then_some(()),
    );

    // The CLI: the contract's keys and nothing else, the user's message found in its session.
    let cli = home.json(&["search", "zebra", "--kind", "session"]);
    let hits = cli.as_array().unwrap();
    assert!(!hits.is_empty(), "{cli}");
    for h in hits {
        let mut fields: Vec<&str> = h.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        fields.sort();
        assert_eq!(
            fields,
            ["kind", "location", "project", "score", "snippet"],
            "{h}"
        );
        assert!(h["score"].as_f64().unwrap() > 0.0, "{h}");
    }
    assert_eq!(hits[0]["project"], "web");
    assert_eq!(hits[0]["kind"], "session");
    assert!(
        hits[0]["snippet"]
            .as_str()
            .unwrap()
            .contains("zebra-crossing manual"),
        "{cli}"
    );
    assert!(
        chrono::DateTime::parse_from_rfc3339(hits[0]["location"].as_str().unwrap()).is_ok(),
        "the location of a message is its time: {cli}"
    );
    let main = home.json(&["search", "okapi", "--project", "main"]);
    assert_eq!(main[0]["project"], "main", "{main}");
    let human = home.ctl_ok(&["search", "zebra", "--project", "web", "--limit", "1"]);
    assert!(
        human.starts_with("web · session · ") && human.contains("zebra-crossing"),
        "{human}"
    );

    // REST: the same hits in the same shape; refusals as {"error": ...}.
    let (status, body) = get(&home, "/api/search?q=zebra&kind=session");
    assert_eq!(status, 200, "{body}");
    let rest: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(keys(&rest), keys(&cli));
    for (path, want) in [
        ("/api/search", 400),
        ("/api/search?q=zebra&kind=bogus", 400),
        ("/api/search?q=zebra&limit=0", 400),
        ("/api/search?q=zebra&project=nope", 404),
        ("/api/search?q=%28%29", 400),
    ] {
        let (status, body) = get(&home, path);
        assert_eq!(status, want, "{path}: {body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert!(
            v["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{path}: {body}"
        );
    }
    // The search box on every page, and its answer page with the word marked and escaped.
    let (status, page) = get(&home, "/");
    assert_eq!(status, 200);
    assert!(page.contains(r#"action="/search""#), "{page}");
    let (status, page) = get(&home, "/search?q=zebra+%3Cb%3E");
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains("No match for"),
        "every word must occur: {page}"
    );
    assert!(
        page.contains("&lt;b&gt;") && !page.contains("<b>"),
        "{page}"
    );
    let (status, page) = get(&home, "/search?q=zebra");
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("<mark>zebra</mark>"), "{page}");

    // Without the daemon.
    home.ctl_ok(&["stop"]);
    assert_eq!(daemon.wait_exit(Duration::from_secs(30)), Some(0));
    home.ctl_ok(&["project", "list"]);
    let offline = home.json(&["search", "zebra", "--kind", "session"]);
    assert_eq!(keys(&offline), keys(&cli));

    // A damaged index: a warning on stderr, the right answer, exit 0.
    let index = home.path().join("index/search.sqlite3");
    std::fs::write(&index, "not a database at all\n".repeat(200)).unwrap();
    let out = home.ctl(&["--json", "search", "zebra", "--kind", "session"]);
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("warning") && stderr.contains("rebuilt it from the files"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let rebuilt: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(keys(&rebuilt), keys(&cli));
    let out = home.ctl(&["search", "zebra"]);
    assert!(out.stderr.is_empty(), "healthy again");
}

#[test]
fn the_query_is_plain_words_and_refusals_are_one_line() {
    let home = Home::new();
    std::fs::create_dir_all(home.path().join("projects")).unwrap();
    // FTS5 syntax in the words is text: no error, just no match here.
    let out = home.ctl_ok(&["search", r#"a"b OR ("#]);
    assert!(out.starts_with("no match for"), "{out}");
    assert_eq!(
        home.json(&["search", "NEAR(x y) col:z*"]),
        Value::Array(vec![])
    );
    let line = home.ctl_fails(&["search", "( * )"]);
    assert!(line.contains("give at least one word or number"), "{line}");
    let line = home.ctl_fails(&["search", "x", "--project", "nope"]);
    assert!(line.contains("project nope not found"), "{line}");
    let out = home.ctl(&["search", "x", "--kind", "bogus"]);
    assert_eq!(out.status.code(), Some(2), "a usage error");
    let out = home.ctl(&["search", "x", "--limit", "0"]);
    assert_eq!(out.status.code(), Some(2), "a usage error");
}
