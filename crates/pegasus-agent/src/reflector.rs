//! The PostTaskReflector (seed 000): after an answered task, one model call reads what
//! happened and writes what is worth remembering to project memory: lasting facts to
//! `memory/facts/<file>.md` and a one-line episode to `memory/episodes/<YYYY-MM>.md`.
//!
//! Reflection is best effort: a failed call or output that is not the expected JSON is logged
//! and ignored, because the task itself already succeeded.

use std::path::Path;

use chrono::Utc;
use pegasus_proto::llm::Message;
use serde::Deserialize;

use crate::memory::{append_text, sanitize_fact_file};
use crate::thinker;
use crate::tool::ToolCtx;
use crate::transcript::render;

/// The reflector's system prompt. It must name the PostTaskReflector: scripted test models
/// recognise the call by that word.
pub const REFLECTOR_SYSTEM: &str = "You are the PostTaskReflector of a project agent. You read \
the record of a task that just finished and decide what the project should remember. Reply \
with ONLY a JSON object: {\"facts\":[{\"file\":\"name.md\",\"content\":\"...\"}],\"episode\":\"one line\"}. \
`facts` are durable things worth knowing in later tasks (decisions, preferences, names, where \
things are), each appended to memory/facts/<file>; use few files with stable names (e.g. \
context.md, decisions.md) and leave `facts` empty when nothing new was learned. `episode` is \
one line saying what was asked and what came of it.";

/// Characters of transcript shown to the reflector.
const REFLECT_CHARS: usize = 24_000;

#[derive(Deserialize)]
struct Reflection {
    #[serde(default)]
    facts: Vec<Fact>,
    #[serde(default)]
    episode: Option<String>,
}

#[derive(Deserialize)]
struct Fact {
    file: String,
    content: String,
}

/// What reflection wrote, for logs and tests.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Reflected {
    /// Fact files appended to (sanitised names).
    pub fact_files: Vec<String>,
    /// Whether an episode line was written.
    pub episode: bool,
    /// Cost of the reflection call.
    pub cost_usd: f64,
}

/// Runs the reflection over `task_messages` (this task's part of the transcript).
pub async fn reflect(ctx: &ToolCtx, task_messages: &[Message]) -> Reflected {
    let mut out = Reflected::default();
    let prompt = format!(
        "The task record:\n\n{}\n\nReply with the JSON object only.",
        render(task_messages, REFLECT_CHARS)
    );
    let resp = match thinker::ask(ctx, REFLECTOR_SYSTEM, prompt).await {
        Ok(r) => r,
        Err(stop) => {
            tracing::warn!(?stop, "reflection call failed; memory not updated");
            return out;
        }
    };
    out.cost_usd = resp.cost_usd.unwrap_or(0.0);
    let text: String = resp.text();
    let Some(parsed) = parse(&text) else {
        tracing::warn!(output = %text.chars().take(200).collect::<String>(), "reflection output is not the expected JSON; ignored");
        return out;
    };
    write(&ctx.memory_dir, ctx.task_id.as_deref(), parsed, &mut out);
    out
}

/// The JSON object in the reply, tolerating prose or a code fence around it.
fn parse(text: &str) -> Option<Reflection> {
    let start = text.find('{')?;
    let end = text.rfind('}')?;
    if end < start {
        return None;
    }
    serde_json::from_str(&text[start..=end]).ok()
}

fn write(memory_dir: &Path, task: Option<&str>, r: Reflection, out: &mut Reflected) {
    for fact in r.facts {
        if fact.content.trim().is_empty() {
            continue;
        }
        let file = sanitize_fact_file(&fact.file);
        let path = memory_dir.join("facts").join(&file);
        match append_text(&path, fact.content.trim()) {
            Ok(()) => out.fact_files.push(file),
            Err(e) => tracing::warn!(path = %path.display(), error = %e, "cannot write a fact"),
        }
    }
    if let Some(ep) = r.episode.filter(|e| !e.trim().is_empty()) {
        let now = Utc::now();
        let path = memory_dir
            .join("episodes")
            .join(format!("{}.md", now.format("%Y-%m")));
        let one_line = ep.split_whitespace().collect::<Vec<_>>().join(" ");
        let line = format!(
            "- {} [{}] {}",
            now.format("%Y-%m-%d %H:%M"),
            task.unwrap_or("-"),
            one_line
        );
        match append_text(&path, &line) {
            Ok(()) => out.episode = true,
            Err(e) => tracing::warn!(path = %path.display(), error = %e, "cannot write an episode"),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn json_is_found_inside_fences_and_prose() {
        let r = parse("Sure:\n```json\n{\"facts\":[{\"file\":\"a.md\",\"content\":\"x\"}],\"episode\":\"e\"}\n```").unwrap();
        assert_eq!(r.facts.len(), 1);
        assert_eq!(r.episode.as_deref(), Some("e"));
        assert!(parse("no json here").is_none());
        assert!(parse("} {").is_none());
    }

    #[test]
    fn facts_land_in_sanitised_files_and_episodes_by_month() {
        let dir = tempfile::tempdir().unwrap();
        let mut out = Reflected::default();
        let r = parse(r#"{"facts":[{"file":"../evil","content":"x"},{"file":"ctx.md","content":"  "}],"episode":"did\nit"}"#).unwrap();
        write(dir.path(), Some("t1"), r, &mut out);
        assert_eq!(out.fact_files, vec!["evil.md".to_string()]);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("facts/evil.md")).unwrap(),
            "x\n"
        );
        let month = Utc::now().format("%Y-%m").to_string();
        let ep = std::fs::read_to_string(dir.path().join(format!("episodes/{month}.md"))).unwrap();
        assert!(ep.contains("[t1] did it"), "{ep}");
    }
}
