//! The project's long-term memory on disk: `memory/facts/*.md` and
//! `memory/episodes/<YYYY-MM>.md` (DESIGN.md §3), plus any file the agent writes there itself.
//!
//! Memory is plain markdown the user can read and edit. The agent sees an index of it in its
//! system prompt (file and first line) and reads whole files with the memory tools when needed,
//! so the prompt stays small as memory grows.

use std::io::Write;
use std::path::{Path, PathBuf};

/// Longest first line shown per file in the index.
const INDEX_LINE_CHARS: usize = 120;

/// Every file under `memory_dir`, as (path relative to it, first non-empty line), sorted by path.
pub fn memory_index(memory_dir: &Path) -> Vec<(String, String)> {
    let mut files = Vec::new();
    walk(memory_dir, &mut files);
    let mut out: Vec<(String, String)> = files
        .into_iter()
        .map(|p| {
            let rel = p
                .strip_prefix(memory_dir)
                .unwrap_or(&p)
                .to_string_lossy()
                .into_owned();
            (rel, first_line(&p))
        })
        .collect();
    out.sort();
    out
}

/// Bytes the memory index of a system prompt may take for a model with a context window of
/// `window` tokens: a sixteenth of the window, at the context estimator's 3.5 bytes per token.
/// `None` (window unknown) = no bound.
pub fn index_budget(window: Option<u64>) -> Option<usize> {
    window.map(|w| usize::try_from(w.saturating_mul(7) / 32).unwrap_or(usize::MAX))
}

/// One entry of the index as a prompt shows it.
pub fn index_line(path: &str, first: &str) -> String {
    format!("- {path}: {first}\n")
}

/// The line that ends an index cut short: how many files it leaves out and how to see them.
pub fn index_more_line(omitted: usize) -> String {
    format!(
        "- ({omitted} more memory file{} not listed here: memory_list shows them all)\n",
        if omitted == 1 { "" } else { "s" }
    )
}

/// How an entry ranks when the index is cut: class (facts, other files, episodes), then newest.
type Rank = (u8, std::cmp::Reverse<std::time::SystemTime>);

/// Bytes kept free for [`index_more_line`] when the index is cut.
const MORE_LINE_RESERVE: usize = 96;

/// The memory index bounded to `max_bytes` of rendered [`index_line`]s: every file when they
/// fit (as [`memory_index`]); otherwise the most relevant ones that fit with room for the
/// [`index_more_line`] — fact files first, then the other files, then episodes, each newest
/// first — sorted by path, and how many were left out.
pub fn memory_index_bounded(
    memory_dir: &Path,
    max_bytes: Option<usize>,
) -> (Vec<(String, String)>, usize) {
    let all = memory_index(memory_dir);
    let Some(max) = max_bytes else {
        return (all, 0);
    };
    let size = |(p, l): &(String, String)| index_line(p, l).len();
    if all.iter().map(size).sum::<usize>() <= max {
        return (all, 0);
    }
    let total = all.len();
    let mut ranked: Vec<(Rank, (String, String))> = all
        .into_iter()
        .map(|e| {
            let class = if e.0.starts_with("facts/") {
                0
            } else if e.0.starts_with("episodes/") {
                2
            } else {
                1
            };
            let mtime = std::fs::metadata(memory_dir.join(&e.0))
                .and_then(|m| m.modified())
                .unwrap_or(std::time::UNIX_EPOCH);
            ((class, std::cmp::Reverse(mtime)), e)
        })
        .collect();
    // Stable: equal ranks keep path order.
    ranked.sort_by_key(|r| r.0);
    let room = max.saturating_sub(MORE_LINE_RESERVE);
    let mut used = 0;
    let mut shown = Vec::new();
    for (_, e) in ranked {
        let n = size(&e);
        if used + n > room {
            break;
        }
        used += n;
        shown.push(e);
    }
    shown.sort();
    let omitted = total - shown.len();
    (shown, omitted)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let Ok(ft) = e.file_type() else { continue };
        let name = e.file_name();
        // Hidden files are temp files of atomic writes or editor droppings, not memory.
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        if ft.is_dir() {
            walk(&e.path(), out);
        } else if ft.is_file() {
            out.push(e.path());
        }
    }
}

fn first_line(path: &Path) -> String {
    let text = pegasus_store::read_capped(path, 4096)
        .map(|c| String::from_utf8_lossy(&c.bytes).into_owned())
        .unwrap_or_default();
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    line.chars().take(INDEX_LINE_CHARS).collect()
}

/// Appends `content` to a memory file as its own line(s), creating the file and its folders,
/// and syncs it: memory is what survives the session, so it must survive a crash too.
pub fn append_text(path: &Path, content: &str) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .read(true)
        .open(path)?;
    let len = f.metadata()?.len();
    // The file's last byte; one that cannot be read counts as a line end.
    let mut last = [b'\n'];
    if len > 0 {
        let _ = std::os::unix::fs::FileExt::read_exact_at(&f, &mut last, len - 1);
    }
    let mut text = String::new();
    if last[0] != b'\n' {
        text.push('\n');
    }
    text.push_str(content);
    if !content.ends_with('\n') {
        text.push('\n');
    }
    f.write_all(text.as_bytes())?;
    f.sync_data()
}

/// A safe file name for a fact file from whatever the model proposed: one path component of
/// letters, digits, `-`, `_` and `.`, ending in `.md`.
pub fn sanitize_fact_file(name: &str) -> String {
    let base = name.rsplit('/').next().unwrap_or(name);
    let base = base.strip_suffix(".md").unwrap_or(base);
    let mut s: String = base
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    s = s.trim_matches(|c| c == '.' || c == '-').to_string();
    s.truncate(64);
    if s.is_empty() {
        s = "facts".into();
    }
    format!("{s}.md")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn index_lists_files_with_their_first_line() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("facts")).unwrap();
        std::fs::write(dir.path().join("facts/stack.md"), "\n# Stack\nrust\n").unwrap();
        std::fs::write(dir.path().join("notes.md"), "").unwrap();
        std::fs::write(dir.path().join(".tmp"), "x").unwrap();
        assert_eq!(
            memory_index(dir.path()),
            vec![
                ("facts/stack.md".to_string(), "# Stack".to_string()),
                ("notes.md".to_string(), String::new())
            ]
        );
    }

    #[test]
    fn the_index_is_bounded_for_a_small_window() {
        let dir = tempfile::tempdir().unwrap();
        let mem = dir.path();
        std::fs::create_dir_all(mem.join("facts")).unwrap();
        std::fs::create_dir_all(mem.join("episodes")).unwrap();
        // Episode files modified in order, `2024-00` last (newest).
        let base = std::time::SystemTime::now();
        for i in 0..40u64 {
            let p = mem.join(format!("episodes/2024-{i:02}.md"));
            std::fs::write(&p, "- an episode\n").unwrap();
            let at = base + std::time::Duration::from_secs(if i == 0 { 1000 } else { i });
            let f = std::fs::File::options().append(true).open(&p).unwrap();
            f.set_modified(at).unwrap();
        }
        std::fs::write(mem.join("facts/stack.md"), "Database: Postgres 16\n").unwrap();
        std::fs::write(mem.join("notes.md"), "Notes\n").unwrap();

        // No window, or a big one: everything, as before.
        let full = memory_index(mem);
        assert_eq!(memory_index_bounded(mem, None), (full.clone(), 0));
        assert_eq!(
            memory_index_bounded(mem, index_budget(Some(200_000))),
            (full, 0)
        );

        // 2,000 tokens: 437 bytes for the index.
        let budget = index_budget(Some(2_000)).unwrap();
        assert_eq!(budget, 437);
        let (shown, omitted) = memory_index_bounded(mem, Some(budget));
        let text: String = shown
            .iter()
            .map(|(p, l)| index_line(p, l))
            .collect::<String>()
            + &index_more_line(omitted);
        assert!(text.len() <= budget, "{}: {text}", text.len());
        assert_eq!(shown.len() + omitted, 42);
        assert!(omitted > 0);
        // Facts and notes first, then the newest episodes.
        assert_eq!(shown[0].0, "episodes/2024-00.md");
        assert!(shown.iter().any(|(p, _)| p == "facts/stack.md"));
        assert!(shown.iter().any(|(p, _)| p == "notes.md"));
        assert!(shown.iter().any(|(p, _)| p == "episodes/2024-39.md"));
        assert!(!shown.iter().any(|(p, _)| p == "episodes/2024-01.md"));
        assert!(index_more_line(omitted).contains("memory_list shows them all"));
    }

    #[test]
    fn append_keeps_lines_separate() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a/b.md");
        append_text(&p, "one").unwrap();
        std::fs::write(&p, "one\ntwo").unwrap();
        append_text(&p, "three\n").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "one\ntwo\nthree\n");
    }

    #[test]
    fn fact_file_names_are_sanitised() {
        assert_eq!(sanitize_fact_file("context.md"), "context.md");
        assert_eq!(sanitize_fact_file("../../etc/passwd"), "passwd.md");
        assert_eq!(sanitize_fact_file("My Stack!"), "my-stack.md");
        assert_eq!(sanitize_fact_file(".."), "facts.md");
        assert_eq!(sanitize_fact_file(""), "facts.md");
    }
}
