//! The system prompt of a project agent (SPEC §6): who it is (PROJECT.md body, or the
//! MainAgent's prompt), what skills it can load and what it remembers, rebuilt at the start of
//! every task so new skills and memories are seen without a restart.

use std::path::{Path, PathBuf};

use crate::memory::memory_index;
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
/// when it is absent, empty or unreadable (a FIFO or a device is not read).
pub fn preferences_section(path: Option<&Path>) -> String {
    let Some(path) = path else {
        return String::new();
    };
    match pegasus_store::read_text_limited(path, PREFERENCES_CAP) {
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
pub fn system_prompt(
    base: &str,
    preferences: Option<&Path>,
    skill_dirs: &[PathBuf],
    memory_dir: &Path,
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
    let index = memory_index(memory_dir);
    if index.is_empty() {
        s.push_str("(empty)\n");
    }
    for (path, line) in index {
        s.push_str(&format!("- {path}: {line}\n"));
    }
    s.push('\n');
    s.push_str(TOOL_NOTE);
    s
}
