//! The system prompt of a project agent (DESIGN.md §6): who it is (PROJECT.md body, or the
//! MainAgent's prompt), what skills it can load and what it remembers, rebuilt at the start of
//! every task so new skills and memories are seen without a restart.

use std::path::{Path, PathBuf};

use crate::memory::{index_budget, index_line, index_more_line, memory_index_bounded};
use crate::skills;

/// How to use the tools, kept short: the tool specs carry the details.
const TOOL_NOTE: &str = "## Working\n\
Use the tools to act; file paths are relative to your working directory, memory paths to your \
memory folder. Call independent read-only tools together in one turn. Load a skill with \
use_skill before following it. Record lasting facts with memory_append. When you are done, \
answer without calling a tool; that answer is your reply.";

/// Bytes of `preferences.md` shown in a prompt at most.
const PREFERENCES_CAP: u64 = 16 * 1024;

/// The `## User preferences` section from `path` (the home's `preferences.md`), or nothing
/// when it is absent, empty or unreadable (a FIFO, a device or a symlink is not read).
pub fn preferences_section(path: Option<&Path>) -> String {
    let Some(path) = path else {
        return String::new();
    };
    // Never through a symlink: what is read as policy is only a file that is really there.
    match pegasus_store::read_text_nofollow(path, PREFERENCES_CAP) {
        Ok(text) if !text.trim().is_empty() => format!(
            "\n\n## User preferences\nThe user asked for these always; follow them unless a task says \
             otherwise.\n{}\n",
            text.trim()
        ),
        Ok(_) | Err(pegasus_store::ReadError::NotFound) => String::new(),
        Err(e) => {
            tracing::warn!(path = %path.display(), "preferences not shown: {e}");
            String::new()
        }
    }
}

/// `base` + the user's preferences + `## Skills` index + `## Memory` index + the tool note.
/// The memory index takes at most a sixteenth of `context_window` (tokens; see
/// [`index_budget`]): past that it lists the most relevant files and says how many more
/// `memory_list` shows.
pub fn system_prompt(
    base: &str,
    preferences: Option<&Path>,
    skill_dirs: &[PathBuf],
    memory_dir: &Path,
    context_window: Option<u64>,
) -> String {
    let mut s = base.trim_end().to_string();
    s.push_str(preferences_section(preferences).trim_end());
    s.push_str("\n\n## Skills\n");
    let skills = skills::discover(skill_dirs);
    if skills.is_empty() {
        s.push_str("(none)\n");
    }
    for skill in skills.values() {
        s.push_str(&format!("- {}: {}\n", skill.name, skill.description));
    }
    s.push_str("\n## Memory\n");
    let (index, omitted) = memory_index_bounded(memory_dir, index_budget(context_window));
    if index.is_empty() && omitted == 0 {
        s.push_str("(empty)\n");
    }
    for (path, line) in index {
        s.push_str(&index_line(&path, &line));
    }
    if omitted > 0 {
        s.push_str(&index_more_line(omitted));
    }
    s.push('\n');
    s.push_str(TOOL_NOTE);
    s
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn the_memory_index_takes_a_sixteenth_of_a_small_window() {
        let dir = tempfile::tempdir().unwrap();
        let mem = dir.path().join("memory");
        std::fs::create_dir_all(mem.join("facts")).unwrap();
        for i in 0..200 {
            std::fs::write(
                mem.join(format!("facts/topic-{i:03}.md")),
                format!("Fact number {i} about something worth remembering\n"),
            )
            .unwrap();
        }
        let section = |window| {
            let p = system_prompt("Base.", None, &[], &mem, window);
            let start = p.find("## Memory\n").unwrap() + "## Memory\n".len();
            let end = p.find("## Working").unwrap();
            p[start..end].to_string()
        };
        // Unknown or large window: all of it, as before.
        let full = section(None);
        assert_eq!(full.lines().filter(|l| !l.is_empty()).count(), 200);
        assert_eq!(section(Some(1_000_000)), full);
        // 8k tokens: at most 1,750 bytes, ending with the count of what is not shown.
        let small = section(Some(8_000));
        assert!(small.len() <= 1_750 + 1, "{}", small.len());
        let last = small.trim_end().lines().last().unwrap();
        assert!(
            last.contains("more memory files not listed here: memory_list shows them all"),
            "{last}"
        );
        let listed = small.lines().filter(|l| l.starts_with("- facts/")).count();
        assert!(listed > 10, "{small}");
        assert!(
            last.starts_with(&format!("- ({} more", 200 - listed)),
            "{last}"
        );
    }
}
