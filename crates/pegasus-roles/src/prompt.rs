//! The prompt a role agent starts from (seed 001 §3.3).
//!
//! Order matters: who the agent is (the rendered role prompt) comes first, then what it works
//! in (`# Project Context`: overview, memory, relevant files), then what to do (`# Your Task`
//! and its acceptance criteria) last, where the model attends to it most. Empty sections are
//! left out so the model never reads a heading with nothing under it and wonders what is
//! missing.

/// The most characters of context-file content one prompt carries; beyond it files are cut
/// (and the cut is stated), so a large file cannot crowd the task out of the context window.
pub const CONTEXT_BUDGET_CHARS: usize = 48_000;

/// The pieces [`build_prompt`] assembles, each already loaded by the caller.
#[derive(Debug, Clone, Copy, Default)]
pub struct PromptParts<'a> {
    /// The role's template, rendered ([`crate::Role::render`]).
    pub role_prompt: &'a str,
    /// The project overview (PROJECT.md's body).
    pub project_overview: &'a str,
    /// The project memory: its index or the excerpts relevant to the task.
    pub memory: &'a str,
    /// Files relevant to the task: path (as shown to the agent) and content.
    pub context_files: &'a [(String, String)],
    /// The task: its title and description.
    pub task: &'a str,
    /// What must be true when the task is done, one criterion per entry.
    pub acceptance: &'a [String],
}

/// Assembles the role agent's prompt: the role prompt, `# Project Context` (`## Overview`,
/// `## Memory`, `## Relevant Context`), then `# Your Task` with `## Acceptance Criteria` as a
/// bullet list. Blank parts and the headings over them are left out.
pub fn build_prompt(p: &PromptParts) -> String {
    let mut blocks: Vec<String> = Vec::new();
    let role = p.role_prompt.trim();
    if !role.is_empty() {
        blocks.push(role.to_string());
    }

    let files = context_files(p.context_files, CONTEXT_BUDGET_CHARS);
    let context: Vec<String> = [
        ("Overview", p.project_overview.trim()),
        ("Memory", p.memory.trim()),
        ("Relevant Context", files.as_str()),
    ]
    .into_iter()
    .filter(|(_, text)| !text.is_empty())
    .map(|(heading, text)| format!("## {heading}\n\n{text}"))
    .collect();
    if !context.is_empty() {
        blocks.push("# Project Context".into());
        blocks.extend(context);
    }

    let task = p.task.trim();
    let criteria: Vec<String> = p
        .acceptance
        .iter()
        .map(|c| c.trim())
        .filter(|c| !c.is_empty())
        .map(|c| format!("- {}", c.replace('\n', "\n  ")))
        .collect();
    if !task.is_empty() || !criteria.is_empty() {
        blocks.push("# Your Task".into());
        if !task.is_empty() {
            blocks.push(task.to_string());
        }
        if !criteria.is_empty() {
            blocks.push(format!("## Acceptance Criteria\n\n{}", criteria.join("\n")));
        }
    }

    let mut out = blocks.join("\n\n");
    out.push('\n');
    out
}

/// The files under `## Relevant Context`: a `### path` heading and the content in a fence,
/// cut to share `budget` characters in order; files past the budget are listed by path only,
/// so the agent knows they exist and can read them itself.
fn context_files(files: &[(String, String)], budget: usize) -> String {
    let mut left = budget;
    let mut parts = Vec::new();
    let mut skipped = Vec::new();
    for (path, content) in files {
        let path = path.trim();
        let content = content.trim_end();
        if path.is_empty() && content.is_empty() {
            continue;
        }
        if left == 0 {
            skipped.push(format!("`{path}`"));
            continue;
        }
        let total = content.chars().count();
        let (shown, cut) = if total > left {
            let end = content
                .char_indices()
                .nth(left)
                .map_or(content.len(), |(i, _)| i);
            (&content[..end], total - left)
        } else {
            (content, 0)
        };
        left -= shown.chars().count();
        let fence = fence_for(shown);
        let mut part = format!("### {path}\n\n{fence}\n{shown}\n{fence}");
        if cut > 0 {
            part.push_str(&format!(
                "\n\n[{cut} more characters cut to fit the prompt: read_file `{path}` for the rest]"
            ));
        }
        parts.push(part);
    }
    if !skipped.is_empty() {
        parts.push(format!(
            "[Not included, over the prompt's budget; read them if needed: {}]",
            skipped.join(", ")
        ));
    }
    parts.join("\n\n")
}

/// A backtick fence longer than any backtick run in `text`, so a file that contains fences
/// itself (markdown, say) cannot close ours early.
fn fence_for(text: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    "`".repeat((longest + 1).max(3))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn headers(prompt: &str) -> Vec<&str> {
        prompt.lines().filter(|l| l.starts_with('#')).collect()
    }

    #[test]
    fn sections_come_in_seed_order() {
        let files = vec![("src/lib.rs".to_string(), "fn a() {}\n".to_string())];
        let acceptance = vec!["tests pass".to_string(), "docs updated".to_string()];
        let p = build_prompt(&PromptParts {
            role_prompt: "You are the Coder.",
            project_overview: "A CLI tool.",
            memory: "- uses clap",
            context_files: &files,
            task: "Add a --json flag.",
            acceptance: &acceptance,
        });
        assert_eq!(
            headers(&p),
            [
                "# Project Context",
                "## Overview",
                "## Memory",
                "## Relevant Context",
                "### src/lib.rs",
                "# Your Task",
                "## Acceptance Criteria",
            ]
        );
        assert!(p.starts_with(
            "You are the Coder.\n\n# Project Context\n\n## Overview\n\nA CLI tool.\n"
        ));
        assert!(p.contains("### src/lib.rs\n\n```\nfn a() {}\n```"), "{p}");
        assert!(p.ends_with("# Your Task\n\nAdd a --json flag.\n\n## Acceptance Criteria\n\n- tests pass\n- docs updated\n"), "{p}");
    }

    #[test]
    fn empty_sections_are_left_out() {
        let p = build_prompt(&PromptParts {
            role_prompt: "You are the Tester.",
            memory: "  \n",
            task: "Run the tests.",
            ..PromptParts::default()
        });
        assert_eq!(p, "You are the Tester.\n\n# Your Task\n\nRun the tests.\n");

        let p = build_prompt(&PromptParts {
            role_prompt: "R",
            memory: "facts",
            ..PromptParts::default()
        });
        assert_eq!(headers(&p), ["# Project Context", "## Memory"]);
    }

    #[test]
    fn context_files_share_a_budget() {
        let files = vec![
            ("a.md".to_string(), "x".repeat(10)),
            ("b.md".to_string(), "ééééé".to_string()),
            ("c.md".to_string(), "never shown".to_string()),
        ];
        let out = context_files(&files, 13);
        assert!(
            out.contains(&format!("```\n{}\n```", "x".repeat(10))),
            "{out}"
        );
        assert!(
            out.contains("```\nééé\n```\n\n[2 more characters cut"),
            "{out}"
        );
        assert!(out.contains("read them if needed: `c.md`"), "{out}");
        assert!(!out.contains("never shown"), "{out}");
    }

    #[test]
    fn fences_outgrow_the_content() {
        assert_eq!(fence_for("plain"), "```");
        assert_eq!(fence_for("```rust\n```"), "````");
    }
}
