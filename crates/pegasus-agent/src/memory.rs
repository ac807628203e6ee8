//! The project's long-term memory on disk: `memory/facts/*.md` and
//! `memory/episodes/<YYYY-MM>.md` (SPEC §3), plus any file the agent writes there itself.
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
    let mut text = String::new();
    if len > 0 && !ends_with_newline(path, len) {
        text.push('\n');
    }
    text.push_str(content);
    if !content.ends_with('\n') {
        text.push('\n');
    }
    f.write_all(text.as_bytes())?;
    f.sync_data()
}

fn ends_with_newline(path: &Path, len: u64) -> bool {
    use std::os::unix::fs::FileExt;
    let mut b = [0u8; 1];
    std::fs::File::open(path)
        .and_then(|f| f.read_exact_at(&mut b, len - 1))
        .map(|()| b[0] == b'\n')
        .unwrap_or(true)
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
