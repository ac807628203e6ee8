//! The instructions people leave for coding agents in their folders: `AGENTS.md`, else
//! `CLAUDE.md` (the names and their order are `agent.instruction_files`), joining the agent's
//! own (DESIGN.md §16).
//!
//! Where they are looked for: at each *root* of a task (the workdir; for a code task, each
//! repo's worktree, and the workdir too unless it is one of those repos), and in every folder
//! between a root and a file the task's file tools touched. The convention is Codex's (files
//! from the root down, the nearest last, so the nearest wins where they disagree) with Claude
//! Code's way of finding the nested ones: a folder's file joins when the agent first works on a
//! file under it.
//!
//! How they join, stable for prompt caching: the roots' files are a section of the system
//! prompt, built once at the start of the task; a nested file joins the conversation once, as
//! a text block after the tool results of the turn that touched its folder (again only if the
//! file changed), and after a compaction the nested files of the task join again, so a summary
//! never loses them.
//!
//! Bounded: one task is shown at most [`AgentSettings::instructions_budget`] bytes of them
//! (an eighth of the window, at most `agent.instructions_max_bytes`); the roots take at most
//! half of it, the nested files what is left. A file past its room is cut with a note saying
//! so and where the whole file is. Files are read lazily, only up to the budget, and kept by
//! [`FileStamp`] until they change. A file that cannot be used (unreadable, not UTF-8, a link
//! out of its root) is one warning in the log and one line in the prompt, never a failed turn.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use pegasus_fs::FileStamp;
use pegasus_proto::llm::{Block, Message, Role};

use crate::settings::AgentSettings;

/// How a nested file's block starts in the conversation (compaction tells these blocks from a
/// person's text by it).
pub const NESTED_PREFIX: &str = "# Instructions from `";

/// The head of the system prompt's section.
const SECTION_HEAD: &str = "## Project instructions\n\
The people who own this work left instructions for coding agents in the files below. Follow \
them. Each applies to the files under its folder; where two disagree, the one nearest to the \
file being worked on wins. The instruction files of subfolders join the conversation when you \
first work on a file under them, and win over these for their folders.";

/// Fewer bytes than this left for a file: it is not shown, only named.
const MIN_SHOWN: usize = 256;

/// Bytes a cut's note takes at most (it comes out of the file's room).
const NOTE_ROOM: usize = 400;

/// Paths the file tools of a task resolved, shared by every level of subagents: the loop
/// looks for nested instruction files under them after each turn.
#[derive(Clone, Default, Debug)]
pub struct Touched(Arc<Mutex<Vec<PathBuf>>>);

/// Paths kept between two turns at most; more in one turn are rare, and the folders of the
/// first ones are the ones looked at.
const TOUCHED_CAP: usize = 256;

impl Touched {
    /// Notes a path a file tool resolved.
    pub fn note(&self, path: &Path) {
        let mut v = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if v.len() < TOUCHED_CAP && !v.iter().any(|p| p == path) {
            v.push(path.to_path_buf());
        }
    }

    /// The paths noted since the last call.
    pub fn take(&self) -> Vec<PathBuf> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// A folder whose instruction file is in the system prompt, and under which nested ones are
/// looked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Root {
    /// How the prompt names it: "the workdir", "repo `api`".
    pub label: String,
    /// The folder.
    pub dir: PathBuf,
}

impl Root {
    /// The project's workdir.
    pub fn workdir(dir: &Path) -> Root {
        Root {
            label: "the workdir".into(),
            dir: dir.to_path_buf(),
        }
    }

    /// Repo `id`'s worktree of a code task.
    pub fn repo(id: &str, dir: &Path) -> Root {
        Root {
            label: format!("repo `{id}`"),
            dir: dir.to_path_buf(),
        }
    }
}

/// The first bytes of one instruction file as text, and its size.
#[derive(Debug, Clone, PartialEq)]
pub struct Head {
    /// At most the bytes asked for, cut at a character boundary.
    pub text: String,
    /// The file's size in bytes.
    pub size: u64,
}

impl Head {
    fn whole(&self) -> bool {
        self.text.len() as u64 >= self.size
    }
}

#[derive(Clone)]
struct Cached {
    stamp: FileStamp,
    cap: u64,
    read: Result<Head, String>,
}

/// The instruction files an agent read, each kept with the stamp it had, so a file is read
/// again only when it changed (or more of it is wanted). Shared by the tasks of one agent.
#[derive(Clone, Default)]
pub struct FileCache(Arc<Mutex<HashMap<PathBuf, Cached>>>);

impl FileCache {
    /// The first `cap` bytes of the instruction file `path` (which must lie in `root`, links
    /// followed) and its stamp; `None` when nothing is there any more. An unusable file is an
    /// `Err` with the reason, logged once per version of the file.
    pub fn load(
        &self,
        path: &Path,
        root: &Path,
        cap: u64,
    ) -> Option<(FileStamp, Result<Head, String>)> {
        // A link to nothing is still there: it is named as unusable, not passed over.
        let (stamp, dangling) = match std::fs::metadata(path) {
            Ok(meta) => (FileStamp::of(&meta), false),
            Err(_) => (FileStamp::of(&std::fs::symlink_metadata(path).ok()?), true),
        };
        {
            let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(c) = map.get(path) {
                let enough = c.cap >= cap || c.read.as_ref().map_or(true, Head::whole);
                if c.stamp == stamp && enough {
                    return Some((stamp, c.read.clone()));
                }
            }
        }
        let read = match dangling {
            true => Err(match std::fs::read_link(path) {
                Ok(to) => format!("it is a link to {}, which does not exist", to.display()),
                Err(e) => format!("cannot resolve: {e}"),
            }),
            false => read_head(path, root, cap),
        };
        if let Err(why) = &read {
            tracing::warn!(path = %path.display(), "instruction file not shown: {why}");
        }
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.insert(
            path.to_path_buf(),
            Cached {
                stamp,
                cap,
                read: read.clone(),
            },
        );
        Some((stamp, read))
    }
}

/// Reads the first `cap` bytes of `path` as UTF-8 (a character cut by the cap is dropped; a
/// leading byte-order mark too). Refuses a file that is not regular, not UTF-8, or a link
/// leading out of `root` (a model could otherwise show itself a file its tools may not read).
fn read_head(path: &Path, root: &Path, cap: u64) -> Result<Head, String> {
    let real = path
        .canonicalize()
        .map_err(|e| format!("cannot resolve: {e}"))?;
    let real_root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    if !real.starts_with(&real_root) {
        return Err(format!(
            "it is a link to {}, outside {}; not read",
            real.display(),
            root.display()
        ));
    }
    let read = pegasus_store::read_capped(&real, cap).map_err(|e| format!("it {e}"))?;
    let truncated = read.truncated();
    let text = match String::from_utf8(read.bytes) {
        Ok(t) => t,
        // Only the character the cap cut in two is incomplete: keep what comes before it.
        Err(e) if truncated && e.utf8_error().error_len().is_none() => {
            let valid = e.utf8_error().valid_up_to();
            let mut bytes = e.into_bytes();
            bytes.truncate(valid);
            String::from_utf8(bytes).map_err(|e| e.to_string())?
        }
        Err(e) => {
            return Err(format!(
                "it is not UTF-8 text (an invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ))
        }
    };
    let text = text
        .strip_prefix('\u{feff}')
        .map(str::to_string)
        .unwrap_or(text);
    Ok(Head {
        text,
        size: read.size,
    })
}

/// The instruction file of `dir`: the first of `names` that is a file there.
pub fn file_in(dir: &Path, names: &[String]) -> Option<PathBuf> {
    names
        .iter()
        .map(|n| dir.join(n))
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file()) || is_dangling(p))
}

/// A link whose target is gone: shown as unusable rather than passed over in silence.
fn is_dangling(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink())
        && std::fs::metadata(p).is_err()
}

/// The folders strictly below `root` down to the one holding `touched` (or `touched` itself
/// when it is a folder), root-first.
pub fn dirs_between(root: &Path, touched: &Path) -> Vec<PathBuf> {
    let Ok(rel) = touched.strip_prefix(root) else {
        return Vec::new();
    };
    let mut parts: Vec<_> = rel.components().collect();
    if !touched.is_dir() {
        parts.pop();
    }
    let mut dir = root.to_path_buf();
    parts
        .into_iter()
        .map(|c| {
            dir.push(c);
            dir.clone()
        })
        .collect()
}

/// `text` within `room` bytes: whole, or its head and a note saying how much of `path` is
/// shown, why, and where the rest is. `None` when the room is too small to show anything.
fn fit(head: &Head, room: usize, budget: usize, path: &Path) -> Option<String> {
    let text = head.text.trim_end();
    if head.whole() && text.len() <= room {
        return Some(text.to_string());
    }
    if room < MIN_SHOWN + NOTE_ROOM {
        return None;
    }
    let mut keep = (room - NOTE_ROOM).min(text.len());
    while !text.is_char_boundary(keep) {
        keep -= 1;
    }
    Some(format!(
        "{}\n\n[... cut here: this file is {} bytes and only its first {keep} are shown (the \
         instruction files take at most {budget} bytes: an eighth of the model's context window, \
         at most agent.instructions_max_bytes). The whole file is {}; read the rest with exec, \
         e.g. `sed -n '100,200p' {}`.]",
        &text[..keep],
        head.size,
        path.display(),
        path.display(),
    ))
}

/// A nested file that joined the conversation during the task.
#[derive(Debug, Clone)]
struct Joined {
    path: PathBuf,
    root: usize,
    stamp: FileStamp,
}

/// The instruction files of one task: the roots' section of its system prompt, and the nested
/// files that join its conversation as it touches their folders.
pub struct TaskInstructions {
    roots: Vec<Root>,
    /// The roots' real paths, which the file tools' resolved paths start with.
    real_roots: Vec<PathBuf>,
    names: Vec<String>,
    cache: FileCache,
    /// Bytes of instruction text the task is shown at most.
    budget: usize,
    /// Bytes the roots' files took in the system prompt.
    roots_used: usize,
    /// Bytes left for nested files.
    nested_left: usize,
    joined: Vec<Joined>,
}

impl TaskInstructions {
    /// The instructions of a task working in `roots`, under `settings`' names and budget.
    pub fn new(settings: &AgentSettings, roots: Vec<Root>, cache: FileCache) -> Self {
        let roots = if settings.instruction_files.is_empty() {
            Vec::new()
        } else {
            roots
        };
        let real_roots = roots
            .iter()
            .map(|r| r.dir.canonicalize().unwrap_or_else(|_| r.dir.clone()))
            .collect();
        let budget = settings.instructions_budget();
        TaskInstructions {
            roots,
            real_roots,
            names: settings.instruction_files.clone(),
            cache,
            budget,
            roots_used: 0,
            nested_left: budget,
            joined: Vec::new(),
        }
    }

    fn cap(&self) -> u64 {
        self.budget as u64
    }

    /// The system prompt's section of the roots' instruction files (empty when there are
    /// none): they share half of the budget, in order; what they leave is the nested files'.
    pub fn system_section(&mut self) -> String {
        let half = self.budget / 2;
        let mut left = half;
        let mut parts = Vec::new();
        for root in &self.roots {
            let Some(path) = file_in(&root.dir, &self.names) else {
                continue;
            };
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            let title = format!("### {name} of {} (`{}`)", root.label, path.display());
            let Some((_, read)) = self.cache.load(&path, &root.dir, self.cap()) else {
                continue;
            };
            match read {
                Err(why) => parts.push(format!("{title}\n(Not shown: {why}.)")),
                Ok(head) if head.text.trim().is_empty() => {}
                Ok(head) => match fit(&head, left, self.budget, &path) {
                    Some(text) => {
                        left = left.saturating_sub(text.len());
                        parts.push(format!("{title}\n{text}"));
                    }
                    None => parts.push(format!(
                        "{title}\n(Not shown: the instruction files' share of the context \
                         window is used up; read it with exec if you need it.)"
                    )),
                },
            }
        }
        self.roots_used = half - left;
        self.nested_left = self.budget - self.roots_used;
        if parts.is_empty() {
            return String::new();
        }
        format!("{SECTION_HEAD}\n\n{}", parts.join("\n\n"))
    }

    /// The blocks of the nested instruction files found under `touched` (paths the file tools
    /// resolved) that are not in the conversation yet, or changed since they joined, root-first
    /// and nearest last. A file whose block is already in `transcript` (an earlier task showed
    /// it) is not shown again.
    pub fn joined_now(&mut self, touched: &[PathBuf], transcript: &[Message]) -> Vec<String> {
        let mut found: Vec<(usize, usize, PathBuf)> = Vec::new();
        for t in touched {
            // The deepest root holding the path (a worktree may lie inside the workdir).
            let Some(root) = (0..self.roots.len())
                .filter(|&i| t.starts_with(&self.real_roots[i]))
                .max_by_key(|&i| self.real_roots[i].components().count())
            else {
                continue;
            };
            for dir in dirs_between(&self.real_roots[root], t) {
                if let Some(p) = file_in(&dir, &self.names) {
                    if !found.iter().any(|(_, _, f)| *f == p) {
                        found.push((root, dir.components().count(), p));
                    }
                }
            }
        }
        found.sort_by_key(|(root, depth, _)| (*root, *depth));
        let mut out = Vec::new();
        for (root, _, path) in found {
            let Some((stamp, read)) = self.cache.load(&path, &self.real_roots[root], self.cap())
            else {
                continue;
            };
            let before = self.joined.iter().position(|j| j.path == path);
            // An empty file says nothing; it is remembered so it is not looked at each turn.
            if matches!(&read, Ok(h) if h.text.trim().is_empty()) {
                match before {
                    Some(i) => self.joined[i].stamp = stamp,
                    None => self.joined.push(Joined { path, root, stamp }),
                }
                continue;
            }
            if before.is_some_and(|i| self.joined[i].stamp == stamp) {
                continue;
            }
            let block = self.block(root, &path, read, before.is_some());
            match before {
                Some(i) => self.joined[i].stamp = stamp,
                None => self.joined.push(Joined { path, root, stamp }),
            }
            if in_transcript(transcript, &block) {
                continue;
            }
            self.nested_left = self.nested_left.saturating_sub(block.len());
            out.push(block);
        }
        out
    }

    /// The blocks of every nested file joined so far, as they are now: what a compaction
    /// took out of the conversation goes back in after its summary.
    pub fn rejoin(&mut self) -> Vec<String> {
        self.nested_left = self.budget - self.roots_used;
        let joined = self.joined.clone();
        let mut out = Vec::new();
        for (i, j) in joined.iter().enumerate() {
            let Some((stamp, read)) =
                self.cache
                    .load(&j.path, &self.real_roots[j.root], self.cap())
            else {
                continue;
            };
            self.joined[i].stamp = stamp;
            let block = self.block(j.root, &j.path, read, false);
            self.nested_left = self.nested_left.saturating_sub(block.len());
            out.push(block);
        }
        out
    }

    /// One nested file's block: a header naming it and the folder it governs, then its text
    /// (cut to what is left of the budget) or why it is not shown.
    fn block(&self, root: usize, path: &Path, read: Result<Head, String>, changed: bool) -> String {
        let real_root = &self.real_roots[root];
        let rel = path.strip_prefix(real_root).unwrap_or(path);
        let dir = rel.parent().unwrap_or(Path::new(""));
        let label = &self.roots[root].label;
        let changed = if changed {
            ", changed since it was shown above"
        } else {
            ""
        };
        let head = format!(
            "{NESTED_PREFIX}{}` ({label}{changed})\nThey apply to the files under `{}/`; where \
             they disagree with the instructions of the folders above it, these win.",
            rel.display(),
            dir.display()
        );
        let body = match read {
            Err(why) => format!("(Not shown: {why}.)"),
            Ok(h) => fit(
                &h,
                self.nested_left.saturating_sub(head.len()),
                self.budget,
                path,
            )
            .unwrap_or_else(|| {
                format!(
                    "(Not shown: the instruction files' share of the context window is used \
                         up; the file is {}, read it with exec if you need it.)",
                    path.display()
                )
            }),
        };
        format!("{head}\n\n{body}")
    }
}

/// Whether a user message of `transcript` holds exactly `block`.
fn in_transcript(transcript: &[Message], block: &str) -> bool {
    transcript
        .iter()
        .filter(|m| m.role == Role::User)
        .flat_map(|m| &m.content)
        .any(|b| matches!(b, Block::Text { text } if text == block))
}

/// `text` with the roots' `section` after it (unchanged when the section is empty).
pub fn with_section(text: &str, section: &str) -> String {
    if section.is_empty() {
        return text.to_string();
    }
    format!("{}\n\n{section}", text.trim_end())
}

/// Whether a text block of the conversation is a nested instruction file's (not a person's
/// words, nor a task's request).
pub fn is_instructions(text: &str) -> bool {
    text.starts_with(NESTED_PREFIX)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn settings(window: Option<u64>) -> AgentSettings {
        AgentSettings {
            context_window: window,
            ..AgentSettings::default()
        }
    }

    fn write(root: &Path, rel: &str, text: &str) -> PathBuf {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        p
    }

    fn task(root: &Path, window: Option<u64>) -> TaskInstructions {
        TaskInstructions::new(
            &settings(window),
            vec![Root::workdir(root)],
            FileCache::default(),
        )
    }

    fn real(root: &Path, rel: &str) -> PathBuf {
        root.canonicalize().unwrap().join(rel)
    }

    #[test]
    fn the_roots_file_is_a_section_of_the_system_prompt() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            dir.path(),
            "AGENTS.md",
            "Run `make check` before answering.\n",
        );
        let section = task(dir.path(), None).system_section();
        assert!(
            section.starts_with("## Project instructions\n"),
            "{section}"
        );
        assert!(section.contains(&format!(
            "### AGENTS.md of the workdir (`{}`)\nRun `make check` before answering.",
            path.display()
        )));
        // No file, or the names turned off: no section at all.
        let empty = tempfile::tempdir().unwrap();
        assert_eq!(task(empty.path(), None).system_section(), "");
        let off = AgentSettings {
            instruction_files: Vec::new(),
            ..settings(None)
        };
        let mut t =
            TaskInstructions::new(&off, vec![Root::workdir(dir.path())], FileCache::default());
        assert_eq!(t.system_section(), "");
    }

    #[test]
    fn claude_md_is_the_fallback_and_agents_md_wins_when_both_are_there() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "CLAUDE.md", "claude rules");
        let section = task(dir.path(), None).system_section();
        assert!(
            section.contains("### CLAUDE.md of the workdir"),
            "{section}"
        );
        assert!(section.contains("claude rules"));
        write(dir.path(), "AGENTS.md", "agents rules");
        let section = task(dir.path(), None).system_section();
        assert!(section.contains("agents rules"), "{section}");
        assert!(!section.contains("claude rules"), "{section}");
        // The order is the configured one.
        let claude_first = AgentSettings {
            instruction_files: vec!["CLAUDE.md".into(), "AGENTS.md".into()],
            ..settings(None)
        };
        let section = TaskInstructions::new(
            &claude_first,
            vec![Root::workdir(dir.path())],
            FileCache::default(),
        )
        .system_section();
        assert!(section.contains("claude rules") && !section.contains("agents rules"));
    }

    #[test]
    fn nested_files_join_root_first_so_the_nearest_comes_last() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "AGENTS.md", "root rules");
        write(dir.path(), "api/AGENTS.md", "api rules");
        write(dir.path(), "api/src/db/CLAUDE.md", "db rules");
        write(dir.path(), "web/AGENTS.md", "web rules");
        write(dir.path(), "api/src/db/pool.rs", "fn main() {}");
        let mut t = task(dir.path(), None);
        let section = t.system_section();
        assert!(section.contains("root rules") && !section.contains("api rules"));
        // Touching a file deep down brings every file on the way, root first.
        let blocks = t.joined_now(&[real(dir.path(), "api/src/db/pool.rs")], &[]);
        assert_eq!(blocks.len(), 2, "{blocks:?}");
        assert!(blocks[0].starts_with("# Instructions from `api/AGENTS.md` (the workdir)\n"));
        assert!(blocks[0].contains("They apply to the files under `api/`"));
        assert!(blocks[0].ends_with("api rules"), "{}", blocks[0]);
        assert!(blocks[1].starts_with("# Instructions from `api/src/db/CLAUDE.md`"));
        assert!(blocks[1].ends_with("db rules"));
        // Once joined, not again; a folder touched itself counts too.
        assert!(t
            .joined_now(&[real(dir.path(), "api/src/db/pool.rs")], &[])
            .is_empty());
        let web = t.joined_now(&[real(dir.path(), "web")], &[]);
        assert_eq!(web.len(), 1);
        assert!(web[0].ends_with("web rules"));
        // A path outside every root brings nothing.
        assert!(t
            .joined_now(&[PathBuf::from("/etc/passwd")], &[])
            .is_empty());
        // After a compaction every joined file comes back, in the order it joined.
        let again = t.rejoin();
        assert_eq!(again.len(), 3);
        assert!(again[0].ends_with("api rules") && again[2].ends_with("web rules"));
    }

    #[test]
    fn a_block_already_in_the_conversation_is_not_shown_twice() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "lib/AGENTS.md", "lib rules");
        let touched = [real(dir.path(), "lib/x.rs")];
        let first = task(dir.path(), None).joined_now(&touched, &[]);
        assert_eq!(first.len(), 1);
        let transcript = vec![Message {
            role: Role::User,
            content: vec![Block::Text {
                text: first[0].clone(),
            }],
        }];
        // The next task of the same conversation: its blocks are still there.
        assert!(task(dir.path(), None)
            .joined_now(&touched, &transcript)
            .is_empty());
    }

    #[test]
    fn a_changed_file_is_read_again_and_joins_again() {
        let dir = tempfile::tempdir().unwrap();
        let root = write(dir.path(), "AGENTS.md", "version one");
        let nested = write(dir.path(), "sub/AGENTS.md", "nested one");
        let cache = FileCache::default();
        let mk = || {
            TaskInstructions::new(
                &settings(None),
                vec![Root::workdir(dir.path())],
                cache.clone(),
            )
        };
        assert!(mk().system_section().contains("version one"));
        std::fs::write(&root, "version two, longer").unwrap();
        let section = mk().system_section();
        assert!(section.contains("version two, longer") && !section.contains("version one"));
        let mut t = mk();
        let touched = [real(dir.path(), "sub/f.txt")];
        assert!(t.joined_now(&touched, &[])[0].ends_with("nested one"));
        assert!(t.joined_now(&touched, &[]).is_empty());
        std::fs::write(&nested, "nested two, longer").unwrap();
        let changed = t.joined_now(&touched, &[]);
        assert_eq!(changed.len(), 1);
        assert!(changed[0].contains("(the workdir, changed since it was shown above)"));
        assert!(changed[0].ends_with("nested two, longer"));
    }

    #[test]
    fn a_huge_file_is_cut_to_its_share_with_a_note_saying_where_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let line = "- Always write tests first, then the code that makes them pass.\n";
        let big = line.repeat(5_000_000 / line.len());
        let path = write(dir.path(), "AGENTS.md", &big);
        write(dir.path(), "sub/AGENTS.md", &big);
        // A 200k-token window: an eighth is 87,500 bytes, capped at 64 KiB; the root gets half.
        let mut t = task(dir.path(), Some(200_000));
        let section = t.system_section();
        assert!(section.len() < 32 * 1024 + 1024, "{}", section.len());
        assert!(section.contains(&format!(
            "[... cut here: this file is {} bytes and only its first",
            big.len()
        )));
        assert!(section.contains(&format!("The whole file is {}", path.display())));
        // The nested file gets what is left, cut the same way.
        let nested = t.joined_now(&[real(dir.path(), "sub/x")], &[]);
        assert!(nested[0].len() < 32 * 1024 + 1024, "{}", nested[0].len());
        assert!(nested[0].contains("cut here"));
        // A small window: an eighth of 8,000 tokens.
        let small = task(dir.path(), Some(8_000)).system_section();
        assert!(small.len() < 3_500 / 2 + 600, "{}", small.len());
        assert!(small.contains("cut here"));
    }

    #[test]
    fn an_unusable_file_is_one_line_not_a_failure() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("AGENTS.md"), b"ok \xff\xfe not utf-8").unwrap();
        let section = task(dir.path(), None).system_section();
        assert!(
            section.contains("(Not shown: it is not UTF-8 text (an invalid byte at offset 3).)"),
            "{section}"
        );
        // A link out of the root is not followed; a dangling one is named, not skipped.
        let outside = tempfile::tempdir().unwrap();
        write(outside.path(), "secret.md", "secret");
        std::fs::create_dir_all(dir.path().join("sub")).unwrap();
        std::os::unix::fs::symlink(
            outside.path().join("secret.md"),
            dir.path().join("sub/AGENTS.md"),
        )
        .unwrap();
        std::fs::create_dir_all(dir.path().join("gone")).unwrap();
        std::os::unix::fs::symlink("/nonexistent/x", dir.path().join("gone/AGENTS.md")).unwrap();
        let mut t = task(dir.path(), None);
        let blocks = t.joined_now(
            &[real(dir.path(), "sub/a.rs"), real(dir.path(), "gone/b.rs")],
            &[],
        );
        assert_eq!(blocks.len(), 2, "{blocks:?}");
        assert!(
            blocks[0].contains("outside") && !blocks[0].contains("secret\n"),
            "{}",
            blocks[0]
        );
        assert!(
            blocks[1]
                .contains("(Not shown: it is a link to /nonexistent/x, which does not exist.)"),
            "{}",
            blocks[1]
        );
        // A link inside the root (CLAUDE.md -> AGENTS.md, a common setup) is followed.
        let linked = tempfile::tempdir().unwrap();
        write(linked.path(), "AGENTS.md", "shared rules");
        std::os::unix::fs::symlink("AGENTS.md", linked.path().join("CLAUDE.md")).unwrap();
        let claude_only = AgentSettings {
            instruction_files: vec!["CLAUDE.md".into()],
            ..settings(None)
        };
        let section = TaskInstructions::new(
            &claude_only,
            vec![Root::workdir(linked.path())],
            FileCache::default(),
        )
        .system_section();
        assert!(section.contains("shared rules"), "{section}");
    }

    #[test]
    fn a_cut_never_splits_a_character() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "AGENTS.md", &"é".repeat(100_000));
        let section = task(dir.path(), Some(8_000)).system_section();
        assert!(section.contains("cut here"));
    }
}
