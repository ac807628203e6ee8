//! Asking the index: the user's words as plain terms, ranked by BM25, each hit with its
//! project, kind, location and a snippet of the text around the words found.

use std::ops::Range;

use rusqlite::params;
use serde::Serialize;

use crate::index::{classify, Fail, Index};
use crate::sources::Kind;

/// Hits a search returns when no limit is given.
pub const DEFAULT_LIMIT: usize = 20;

/// Most hits one search returns.
pub const MAX_LIMIT: usize = 1000;

/// Tokens of text a snippet shows around the words found.
const SNIPPET_TOKENS: i32 = 16;

/// Where the words found start and end in the snippet SQLite builds (characters no message
/// holds: Unicode private use).
const OPEN: char = '\u{E000}';
const CLOSE: char = '\u{E001}';

/// What to look for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Query {
    /// The user's words: every word must occur (in any order); punctuation and FTS5 syntax in
    /// it are plain text, never operators.
    pub text: String,
    /// Only this project (`main` = the MainAgent).
    pub project: Option<String>,
    /// Only this kind of entry.
    pub kind: Option<Kind>,
    /// At most this many hits ([`DEFAULT_LIMIT`] when `None`, never more than [`MAX_LIMIT`]).
    pub limit: Option<usize>,
}

/// One hit, in the shape `pegasusctl search --json` and `GET /api/search` print (DESIGN.md §11).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hit {
    /// The project, or `main` for the MainAgent.
    pub project: String,
    /// Session, task or memory.
    pub kind: Kind,
    /// The message time (RFC 3339, UTC), the task id or the memory file's path in its project.
    pub location: String,
    /// The text around the words found, on one line (`…` where it was cut).
    pub snippet: String,
    /// How well it matches: BM25, higher is better (hits come best first).
    pub score: f64,
    /// Byte ranges of [`Hit::snippet`] that are the words found, for highlighting.
    #[serde(skip)]
    pub highlights: Vec<Range<usize>>,
}

/// The FTS5 expression for the user's words: each whitespace-separated word that holds a
/// letter or digit becomes a quoted string (inner quotes doubled), so `OR`, `(`, `*`, `:` and
/// quotes are searched as text, never parsed; the strings are ANDed. `None` when nothing is
/// left to search for.
pub fn fts_expression(text: &str) -> Option<String> {
    let terms: Vec<String> = text
        .split_whitespace()
        .filter(|w| w.chars().any(char::is_alphanumeric))
        .map(|w| format!("\"{}\"", w.replace('"', "\"\"")))
        .collect();
    (!terms.is_empty()).then(|| terms.join(" "))
}

impl Index {
    /// The best hits for `q` (already checked to have an expression).
    pub(crate) fn query(&self, expr: &str, q: &Query) -> Result<Vec<Hit>, Fail> {
        let err = |e| classify(&self.path, e);
        let limit = q.limit.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT) as i64;
        // Ranked first, snippets after: a snippet in the ranking query would be built for
        // every row that matches, before the sort keeps the best few.
        let mut rank = self
            .conn
            .prepare_cached(
                "SELECT rowid, project, kind, location, bm25(fts) FROM fts \
                 WHERE fts MATCH ?1 AND (?2 IS NULL OR project = ?2) AND (?3 IS NULL OR kind = ?3) \
                 ORDER BY rank LIMIT ?4",
            )
            .map_err(err)?;
        let rows = rank
            .query_map(
                params![expr, q.project, q.kind.map(Kind::as_str), limit],
                |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, String>(3)?,
                        r.get::<_, f64>(4)?,
                    ))
                },
            )
            .map_err(err)?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(err)?;
        let mut snippet = self
            .conn
            .prepare_cached(&format!(
                "SELECT snippet(fts, 0, '{OPEN}', '{CLOSE}', '…', {SNIPPET_TOKENS}) FROM fts \
                 WHERE fts MATCH ?1 AND rowid = ?2"
            ))
            .map_err(err)?;
        let mut hits = Vec::with_capacity(rows.len());
        for (rowid, project, kind, location, bm25) in rows {
            let Some(kind) = Kind::parse(&kind) else {
                return Err(Fail::Damaged(format!(
                    "an entry has the unknown kind `{kind}`"
                )));
            };
            let marked: String = snippet
                .query_row(params![expr, rowid], |r| r.get(0))
                .map_err(err)?;
            let (snippet, highlights) = unmark(&marked);
            hits.push(Hit {
                project,
                kind,
                location,
                snippet,
                // FTS5's bm25() is lower for better matches; the contract's score is higher.
                score: -bm25,
                highlights,
            });
        }
        Ok(hits)
    }
}

/// The snippet on one line without its markers, and where the marked words are in it.
fn unmark(marked: &str) -> (String, Vec<Range<usize>>) {
    let mut out = String::with_capacity(marked.len());
    let mut highlights = Vec::new();
    let mut start = None;
    let mut space = false;
    for c in marked.chars() {
        if c.is_whitespace() {
            space = !out.is_empty();
            continue;
        }
        // A space before the words found or other text, never inside a highlight's end.
        if space && c != CLOSE {
            out.push(' ');
            space = false;
        }
        match c {
            OPEN => start = Some(out.len()),
            CLOSE => highlights.extend(start.take().map(|s| s..out.len())),
            c if !c.is_control() => out.push(c),
            _ => {}
        }
    }
    (out, highlights)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn user_words_are_quoted_so_fts_syntax_is_text() {
        assert_eq!(
            fts_expression("hello world").as_deref(),
            Some(r#""hello" "world""#)
        );
        assert_eq!(
            fts_expression(r#"a"b OR ("#).as_deref(),
            Some(r#""a""b" "OR""#)
        );
        assert_eq!(
            fts_expression("NEAR(x y) col:z*").as_deref(),
            Some(r#""NEAR(x" "y)" "col:z*""#)
        );
        assert_eq!(fts_expression(" ( ) \" * "), None);
        assert_eq!(fts_expression(""), None);
    }

    #[test]
    fn markers_become_ranges_and_the_snippet_one_line() {
        let (s, h) = unmark("…the \u{E000}cat\u{E001}\n sat  on\tthe \u{E000}mat\u{E001}…");
        assert_eq!(s, "…the cat sat on the mat…");
        assert_eq!(
            h.iter().map(|r| &s[r.clone()]).collect::<Vec<_>>(),
            ["cat", "mat"]
        );
    }
}
