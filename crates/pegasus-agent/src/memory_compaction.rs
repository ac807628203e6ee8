//! Episodic memory that never outgrows the prompt (DESIGN.md §10: "Episodic memory is compacted into
//! facts past 20k tokens").
//!
//! The PostTaskReflector appends one line per task to `memory/episodes/<YYYY-MM>.md`. Once all
//! episode files together pass [`EPISODE_BUDGET_BYTES`] (20k tokens at the context estimator's
//! 3.5 bytes per token), one model call — through [`thinker::think`], so the gateway meters
//! and budgets it like every call, billed to the task — condenses the oldest episodes into
//! facts, appended under a dated heading to `memory/facts/<file>.md`. The newest
//! [`KEEP_BYTES`] of episodes stay episodes.
//!
//! Crash safety: the facts are written first (each fact file replaced atomically: temp file,
//! fsync, rename, fsync the directory), and only then are the episode files rewritten without
//! the condensed lines (again atomically, or removed when nothing is left). A crash between the
//! two leaves the information twice (as facts and as episodes, condensed again next time),
//! never nowhere. A failed call, a refused one (budget) or an answer that is not the expected
//! JSON changes nothing; the next task tries again (one attempt per task at most: it runs once,
//! after the reflection).

use std::path::{Path, PathBuf};

use chrono::Utc;
use pegasus_proto::llm::StopReason;
use serde::Deserialize;

use crate::memory::{memory_index, sanitize_fact_file};
use crate::thinker;
use crate::tool::ToolCtx;

/// The marker phrase of the condensing call's system prompt: scripted test models (the fake
/// LLM's `SystemContains`, the agent tests' keyed scripts) recognise the call by it.
pub const MARKER: &str = "EpisodeCondenser";

/// The system prompt of the condensing call. It names [`MARKER`] and "episodes", and on
/// purpose neither the reflector's name nor the session summariser's keyword, so scripts that
/// key on those never answer it.
pub const EPISODES_SYSTEM: &str = "You are the EpisodeCondenser of a project agent's memory. \
The project keeps a log of episodes, one line per finished task, and the log has grown too \
long to keep. You read the oldest episodes and condense them into lasting facts: decisions \
and why, preferences, names, paths, numbers, recurring problems and their fixes, what was \
built and where, and a short history of what was done. Reply with ONLY a JSON object: \
{\"facts\":[{\"file\":\"name.md\",\"content\":\"- ...\\n- ...\"}]}. Each `content` is \
markdown bullets appended to memory/facts/<file>. Use an existing fact file when one fits, \
otherwise few files with stable names (e.g. history.md, decisions.md). Do not repeat what the \
existing facts already say. Keep everything a later task might need: these episodes are \
deleted once your facts are written.";

/// Episode bytes past which the episodes are condensed: 20k tokens at 3.5 bytes per token.
pub const EPISODE_BUDGET_BYTES: u64 = 70_000;

/// Bytes of the newest episodes kept as episodes (a quarter of the budget).
pub const KEEP_BYTES: u64 = EPISODE_BUDGET_BYTES / 4;

/// Bytes of episodes one call condenses at most (less for a small context window, see
/// [`crate::context::summary_input_chars`]); a longer backlog is condensed over several tasks.
const MAX_INPUT_BYTES: usize = 64 * 1024;

/// Largest episode file read; a bigger one is left alone (and reported).
const MAX_EPISODE_FILE: u64 = 64 << 20;

/// Fact files listed to the model at most.
const MAX_LISTED_FACT_FILES: usize = 64;

/// What a condensing attempt did, for the task's cost, logs and tests.
#[derive(Debug, Clone, PartialEq)]
pub enum CondenseOutcome {
    /// The episodes are within the budget: no call was made.
    NotNeeded,
    /// The oldest `lines` episode lines became facts in `fact_files`.
    Condensed {
        /// Episode lines removed from the episode files.
        lines: usize,
        /// Fact files written (sanitised names).
        fact_files: Vec<String>,
    },
    /// Nothing changed: the call failed or its answer was unusable, or the files could not be
    /// read or written. Tried again after the next task.
    Unchanged(String),
}

/// A [`CondenseOutcome`] and what its call cost (also paid when the answer was unusable).
#[derive(Debug, Clone, PartialEq)]
pub struct Condensed {
    /// What happened.
    pub outcome: CondenseOutcome,
    /// Cost of the call, 0 when none was made.
    pub cost_usd: f64,
}

/// Condenses the oldest episodes of `ctx.memory_dir` into facts when the episodes pass
/// [`EPISODE_BUDGET_BYTES`] (see the module doc). Called once after each reflection.
pub async fn condense_episodes(ctx: &ToolCtx) -> Condensed {
    let memory_dir = ctx.memory_dir.as_path();
    let plan = match Plan::read(
        memory_dir,
        crate::context::summary_input_chars(ctx.settings.context_window, MAX_INPUT_BYTES),
    ) {
        Ok(Some(plan)) => plan,
        Ok(None) => {
            return Condensed {
                outcome: CondenseOutcome::NotNeeded,
                cost_usd: 0.0,
            }
        }
        Err(e) => return unchanged(e, 0.0),
    };
    let resp = match thinker::ask(ctx, EPISODES_SYSTEM, plan.prompt(memory_dir)).await {
        Ok(r) => r,
        Err(stop) => return unchanged(format!("the call failed: {stop:?}"), 0.0),
    };
    let cost = resp.cost_usd.unwrap_or(0.0);
    if resp.stop_reason == StopReason::MaxTokens {
        return unchanged("the answer was cut at max_tokens".into(), cost);
    }
    let text: String = resp.text();
    let Some(facts) = parse(&text) else {
        let shown: String = text.chars().take(200).collect();
        return unchanged(
            format!("the answer is not the expected JSON with facts: {shown}"),
            cost,
        );
    };
    let outcome = match plan.apply(memory_dir, &facts) {
        Ok(fact_files) => {
            tracing::info!(lines = plan.condensed_lines(), facts = ?fact_files,
                "old episodes condensed into facts");
            CondenseOutcome::Condensed {
                lines: plan.condensed_lines(),
                fact_files,
            }
        }
        Err(e) => return unchanged(e, cost),
    };
    Condensed {
        outcome,
        cost_usd: cost,
    }
}

fn unchanged(why: String, cost_usd: f64) -> Condensed {
    tracing::warn!(reason = %why, "episodes not condensed; memory unchanged, tried again after the next task");
    Condensed {
        outcome: CondenseOutcome::Unchanged(why),
        cost_usd,
    }
}

#[derive(Deserialize)]
struct Answer {
    #[serde(default)]
    facts: Vec<FactOut>,
}

#[derive(Deserialize)]
struct FactOut {
    file: String,
    content: String,
}

/// The facts of the answer, grouped by sanitised file name in the order first named; `None`
/// when the answer is not the JSON object or holds no fact (then the episodes must stay).
fn parse(text: &str) -> Option<Vec<(String, String)>> {
    let start = text.find('{')?;
    let end = text.rfind('}')?;
    if end < start {
        return None;
    }
    let answer: Answer = serde_json::from_str(&text[start..=end]).ok()?;
    let mut out: Vec<(String, String)> = Vec::new();
    for f in answer.facts {
        let content = f.content.trim();
        if content.is_empty() {
            continue;
        }
        let file = sanitize_fact_file(&f.file);
        match out.iter_mut().find(|(name, _)| *name == file) {
            Some((_, c)) => {
                c.push('\n');
                c.push_str(content);
            }
            None => out.push((file, content.to_string())),
        }
    }
    (!out.is_empty()).then_some(out)
}

/// One episode file as read.
#[derive(Debug)]
struct EpisodeFile {
    path: PathBuf,
    /// The file stem (`YYYY-MM`).
    month: String,
    bytes: Vec<u8>,
    /// Byte ranges of its non-blank lines, without the newline.
    lines: Vec<(usize, usize)>,
    /// How many of its first lines are condensed.
    cut: usize,
}

/// What one condensing would do: which of the oldest lines go.
#[derive(Debug)]
struct Plan {
    files: Vec<EpisodeFile>,
}

impl Plan {
    /// Reads the episode files; `None` when they are within the budget or nothing can go.
    /// The oldest lines are chosen, leaving at least the newest [`KEEP_BYTES`] (whole lines),
    /// and at most `max_input` bytes of them.
    fn read(memory_dir: &Path, max_input: usize) -> Result<Option<Plan>, String> {
        let dir = memory_dir.join("episodes");
        let mut names: Vec<(String, PathBuf)> = match std::fs::read_dir(&dir) {
            Ok(rd) => rd
                .flatten()
                .filter(|e| e.file_type().map(|t| t.is_file()).unwrap_or(false))
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    (!name.starts_with('.') && name.ends_with(".md")).then(|| (name, e.path()))
                })
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("{}: {e}", dir.display())),
        };
        // `YYYY-MM.md` names sort oldest first.
        names.sort();
        let mut files = Vec::new();
        let mut total: u64 = 0;
        for (name, path) in names {
            let capped = match pegasus_store::read_capped(&path, MAX_EPISODE_FILE) {
                Ok(c) => c,
                Err(e) => return Err(format!("{}: {e}", path.display())),
            };
            total += capped.size;
            if capped.size > MAX_EPISODE_FILE {
                tracing::warn!(path = %path.display(), size = capped.size, "episode file too large to condense; left alone");
                continue;
            }
            let bytes = capped.bytes;
            let mut lines = Vec::new();
            let mut start = 0;
            for (i, b) in bytes
                .iter()
                .enumerate()
                .chain(std::iter::once((bytes.len(), &b'\n')))
            {
                if *b == b'\n' {
                    if bytes[start..i].iter().any(|c| !c.is_ascii_whitespace()) {
                        lines.push((start, i));
                    }
                    start = i + 1;
                }
            }
            let month = name.trim_end_matches(".md").to_string();
            files.push(EpisodeFile {
                path,
                month,
                bytes,
                lines,
                cut: 0,
            });
        }
        if total <= EPISODE_BUDGET_BYTES {
            return Ok(None);
        }
        // Newest lines kept: walk back from the end while they fit in KEEP_BYTES.
        let all: Vec<(usize, usize)> = files
            .iter()
            .enumerate()
            .flat_map(|(f, file)| (0..file.lines.len()).map(move |l| (f, l)))
            .collect();
        let len_of = |(f, l): (usize, usize)| {
            let (s, e) = files[f].lines[l];
            (e - s + 1) as u64
        };
        let mut kept: u64 = 0;
        let mut keep_from = all.len();
        while keep_from > 0 && kept + len_of(all[keep_from - 1]) <= KEEP_BYTES {
            kept += len_of(all[keep_from - 1]);
            keep_from -= 1;
        }
        // Oldest lines condensed, within what one call may read (at least one line).
        let mut input = 0usize;
        let mut take = 0;
        while take < keep_from && (take == 0 || input + len_of(all[take]) as usize <= max_input) {
            input += len_of(all[take]) as usize;
            take += 1;
        }
        if take == 0 {
            return Ok(None);
        }
        for &(f, _) in &all[..take] {
            files[f].cut += 1;
        }
        Ok(Some(Plan { files }))
    }

    fn condensed_lines(&self) -> usize {
        self.files.iter().map(|f| f.cut).sum()
    }

    /// `first – last` month of the condensed lines.
    fn months(&self) -> String {
        let months: Vec<&str> = self
            .files
            .iter()
            .filter(|f| f.cut > 0)
            .map(|f| f.month.as_str())
            .collect();
        match (months.first(), months.last()) {
            (Some(a), Some(b)) if a != b => format!("{a} to {b}"),
            (Some(a), _) => format!("of {a}"),
            _ => String::new(),
        }
    }

    /// The user message of the call: the fact files there are and the condensed lines.
    fn prompt(&self, memory_dir: &Path) -> String {
        let facts: Vec<String> = memory_index(memory_dir)
            .into_iter()
            .filter(|(p, _)| p.starts_with("facts/"))
            .take(MAX_LISTED_FACT_FILES)
            .map(|(p, first)| format!("- {p}: {first}"))
            .collect();
        let mut s = String::from("Existing fact files (name: first line):\n");
        if facts.is_empty() {
            s.push_str("(none)\n");
        }
        for f in facts {
            s.push_str(&f);
            s.push('\n');
        }
        let lines = self.condensed_lines();
        s.push_str(&format!(
            "\nThe {lines} oldest episode{} ({}), oldest first:\n\n",
            if lines == 1 { "" } else { "s" },
            self.months()
        ));
        for f in &self.files {
            for &(a, b) in &f.lines[..f.cut] {
                s.push_str(&String::from_utf8_lossy(&f.bytes[a..b]));
                s.push('\n');
            }
        }
        s.push_str("\nReply with the JSON object only.");
        s
    }

    /// Writes `facts` (durably, each file atomically), then rewrites the episode files without
    /// the condensed lines. Returns the fact files written. An error before the episodes are
    /// touched leaves them as they were; one after leaves duplicated, never lost, information.
    fn apply(&self, memory_dir: &Path, facts: &[(String, String)]) -> Result<Vec<String>, String> {
        write_facts(memory_dir, facts, &self.months())?;
        self.rewrite_episodes()?;
        Ok(facts.iter().map(|(f, _)| f.clone()).collect())
    }

    fn rewrite_episodes(&self) -> Result<(), String> {
        for f in self.files.iter().filter(|f| f.cut > 0) {
            // Whatever was appended since it was read is kept; a file changed in any other
            // way (edited by hand meanwhile) is left alone: its lines are condensed twice.
            let now = std::fs::read(&f.path).map_err(|e| format!("{}: {e}", f.path.display()))?;
            let grown = now.get(f.bytes.len()..).unwrap_or(&[]);
            let torn = !f.bytes.is_empty() && !f.bytes.ends_with(b"\n") && !grown.is_empty();
            if !now.starts_with(&f.bytes) || torn {
                tracing::warn!(path = %f.path.display(), "episode file changed while being condensed; left as it is");
                continue;
            }
            let mut text: Vec<u8> = Vec::new();
            for &(a, b) in &f.lines[f.cut..] {
                text.extend_from_slice(&f.bytes[a..b]);
                text.push(b'\n');
            }
            text.extend_from_slice(grown);
            if text.iter().all(|c| c.is_ascii_whitespace()) {
                std::fs::remove_file(&f.path).map_err(|e| format!("{}: {e}", f.path.display()))?;
                if let Some(dir) = f.path.parent() {
                    pegasus_store::fsync_dir(dir).map_err(|e| e.to_string())?;
                }
            } else {
                pegasus_store::write_atomic(&f.path, &text).map_err(|e| e.to_string())?;
            }
        }
        Ok(())
    }
}

/// Appends each fact under a heading saying where it came from, to `memory/facts/<file>`,
/// replacing the file atomically (so it is durable before any episode goes).
fn write_facts(memory_dir: &Path, facts: &[(String, String)], months: &str) -> Result<(), String> {
    let dir = memory_dir.join("facts");
    pegasus_store::create_dir_all_durable(&dir).map_err(|e| e.to_string())?;
    let heading = format!(
        "## From episodes {months} (condensed {})",
        Utc::now().format("%Y-%m-%d")
    );
    for (file, content) in facts {
        let path = dir.join(file);
        let mut bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        if !bytes.is_empty() {
            if !bytes.ends_with(b"\n") {
                bytes.push(b'\n');
            }
            bytes.push(b'\n');
        }
        bytes.extend_from_slice(format!("{heading}\n{content}\n").as_bytes());
        pegasus_store::write_atomic(&path, &bytes).map_err(|e| e.to_string())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::sync::atomic::AtomicU32;
    use std::sync::{Arc, Mutex};

    use pegasus_proto::llm::{
        Block, ChatFuture, ChatModel, ChatRequest, ChatResponse, LlmError, Usage,
    };

    /// Answers every call with one reply and records the requests.
    struct OneReply {
        reply: Result<ChatResponse, LlmError>,
        requests: Mutex<Vec<ChatRequest>>,
    }

    impl ChatModel for OneReply {
        fn chat(&self, req: ChatRequest) -> ChatFuture<'_> {
            self.requests.lock().unwrap().push(req);
            let r = self.reply.clone();
            Box::pin(async move { r })
        }
    }

    fn answer(text: &str) -> Result<ChatResponse, LlmError> {
        Ok(ChatResponse {
            request_id: "msg_t".into(),
            model: "fake/model".into(),
            content: vec![Block::Text { text: text.into() }],
            stop_reason: StopReason::EndTurn,
            usage: Usage {
                input_tokens: 100,
                output_tokens: 20,
                cache_read_tokens: 0,
                cache_write_tokens: 0,
            },
            cost_usd: Some(0.03),
        })
    }

    fn ctx(memory_dir: &Path, model: Arc<OneReply>) -> ToolCtx {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        std::mem::forget(rx);
        ToolCtx {
            workdir: memory_dir.to_path_buf(),
            memory_dir: memory_dir.to_path_buf(),
            skill_dirs: Vec::new(),
            notices: tx,
            task_id: Some("t-9".into()),
            depth: 0,
            settings: crate::AgentSettings {
                context_window: Some(200_000),
                ..Default::default()
            },
            model,
            project_overview: String::new(),
            subagents_spawned: Arc::new(AtomicU32::new(0)),
            approvals: None,
            offered: None,
            proposed: Default::default(),
            touched: Default::default(),
            hooks: None,
            repos: Vec::new(),
        }
    }

    fn model(reply: Result<ChatResponse, LlmError>) -> Arc<OneReply> {
        Arc::new(OneReply {
            reply,
            requests: Mutex::new(Vec::new()),
        })
    }

    /// Episode files of three months, `n` lines each of about 200 bytes: line `i` of month
    /// `m` says `ep-m-i`.
    fn seed(mem: &Path, n: usize) -> u64 {
        let dir = mem.join("episodes");
        std::fs::create_dir_all(&dir).unwrap();
        let mut total = 0;
        for m in ["2024-01", "2024-02", "2024-03"] {
            let text: String = (0..n)
                .map(|i| format!("- {m}-01 10:00 [t{i}] ep-{m}-{i:04} {}\n", "x".repeat(160)))
                .collect();
            total += text.len() as u64;
            std::fs::write(dir.join(format!("{m}.md")), text).unwrap();
        }
        total
    }

    fn episodes(mem: &Path) -> String {
        let mut names: Vec<_> = std::fs::read_dir(mem.join("episodes"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        names.sort();
        names
            .iter()
            .map(|p| std::fs::read_to_string(p).unwrap())
            .collect()
    }

    const FACTS: &str = r#"Done: {"facts":[{"file":"history.md","content":"- Early 2024: built the importer"},{"file":"../decisions","content":"- Postgres 16"},{"file":"history.md","content":"- Shipped v1"}]}"#;

    #[tokio::test]
    async fn small_episodes_make_no_call() {
        let dir = tempfile::tempdir().unwrap();
        seed(dir.path(), 10);
        let m = model(answer(FACTS));
        let out = condense_episodes(&ctx(dir.path(), m.clone())).await;
        assert_eq!(out.outcome, CondenseOutcome::NotNeeded);
        assert!(m.requests.lock().unwrap().is_empty());
        // No memory at all: nothing either.
        let empty = tempfile::tempdir().unwrap();
        let out = condense_episodes(&ctx(empty.path(), m.clone())).await;
        assert_eq!(out.outcome, CondenseOutcome::NotNeeded);
    }

    #[tokio::test]
    async fn the_oldest_episodes_become_facts_and_the_newest_stay() {
        let dir = tempfile::tempdir().unwrap();
        let mem = dir.path();
        let total = seed(mem, 130); // 3 x 130 lines of ~200 bytes: ~78 KB
        assert!(total > EPISODE_BUDGET_BYTES);
        std::fs::create_dir_all(mem.join("facts")).unwrap();
        std::fs::write(mem.join("facts/history.md"), "Project history").unwrap();
        let m = model(answer(FACTS));
        let out = condense_episodes(&ctx(mem, m.clone())).await;
        let CondenseOutcome::Condensed { lines, fact_files } = &out.outcome else {
            panic!("{out:?}")
        };
        assert_eq!(fact_files, &["history.md", "decisions.md"]);
        assert!((out.cost_usd - 0.03).abs() < 1e-9);

        // The call: the marker, no tools, billed to the task, the oldest lines only.
        let reqs = m.requests.lock().unwrap().clone();
        assert_eq!(reqs.len(), 1);
        assert!(reqs[0].system.contains(MARKER) && reqs[0].system.contains("episodes"));
        assert!(
            !reqs[0].system.contains("compaction") && !reqs[0].system.contains("PostTaskReflector")
        );
        assert!(reqs[0].tools.is_empty());
        assert_eq!(reqs[0].meta.task.as_deref(), Some("t-9"));
        let Block::Text { text: prompt } = &reqs[0].messages[0].content[0] else {
            panic!()
        };
        assert!(
            prompt.contains("ep-2024-01-0000")
                && prompt.contains("facts/history.md: Project history")
        );
        assert!(!prompt.contains("ep-2024-03-0129"));

        // What is left: the newest lines, at most KEEP_BYTES of them, in order, in their files.
        let left = episodes(mem);
        assert!(
            left.len() as u64 <= KEEP_BYTES && left.len() as u64 > KEEP_BYTES - 300,
            "{}",
            left.len()
        );
        assert!(left.ends_with(&format!("ep-2024-03-0129 {}\n", "x".repeat(160))));
        assert!(!left.contains("ep-2024-01-"));
        assert_eq!(left.lines().count() + lines, 390);
        assert!(
            !mem.join("episodes/2024-01.md").exists(),
            "an emptied month is removed"
        );

        // The facts: appended under a heading saying where they came from; one file per name.
        let history = std::fs::read_to_string(mem.join("facts/history.md")).unwrap();
        assert!(
            history
                .starts_with("Project history\n\n## From episodes 2024-01 to 2024-03 (condensed "),
            "{history}"
        );
        assert!(
            history.ends_with("- Early 2024: built the importer\n- Shipped v1\n"),
            "{history}"
        );
        let decisions = std::fs::read_to_string(mem.join("facts/decisions.md")).unwrap();
        assert!(
            decisions.starts_with("## From episodes") && decisions.ends_with("\n- Postgres 16\n")
        );

        // Within the budget now: the next task makes no call.
        let out = condense_episodes(&ctx(mem, m.clone())).await;
        assert_eq!(out.outcome, CondenseOutcome::NotNeeded);
        assert_eq!(m.requests.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn garbage_answers_and_failed_calls_change_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mem = dir.path();
        seed(mem, 130);
        let before = episodes(mem);
        for reply in [
            answer("I cannot do that."),
            answer(r#"{"facts": []}"#),
            answer(r#"{"facts":[{"file":"a.md","content":"   "}]}"#),
            answer(r#"{"facts": "nope"}"#),
            answer("{ truncated"),
            Err(LlmError::Other("down".into())),
            Err(LlmError::BudgetExceeded {
                scope: "task t-9".into(),
                limit: 0.1,
                spent: 0.1,
            }),
        ] {
            let failed = reply.is_err();
            let out = condense_episodes(&ctx(mem, model(reply))).await;
            assert!(
                matches!(out.outcome, CondenseOutcome::Unchanged(_)),
                "{out:?}"
            );
            assert_eq!(out.cost_usd, if failed { 0.0 } else { 0.03 });
            assert_eq!(episodes(mem), before);
            assert!(
                !mem.join("facts").exists()
                    || std::fs::read_dir(mem.join("facts"))
                        .unwrap()
                        .next()
                        .is_none()
            );
        }
        // An answer cut at max_tokens is not trusted either.
        let mut cut = answer(FACTS).unwrap();
        cut.stop_reason = StopReason::MaxTokens;
        let out = condense_episodes(&ctx(mem, model(Ok(cut)))).await;
        assert!(matches!(out.outcome, CondenseOutcome::Unchanged(_)));
        assert_eq!(episodes(mem), before);
    }

    #[tokio::test]
    async fn facts_are_durable_before_any_episode_goes() {
        let dir = tempfile::tempdir().unwrap();
        let mem = dir.path();
        seed(mem, 130);
        let before = episodes(mem);
        // Facts cannot be written (facts/ is a file): the episodes stay as they were.
        std::fs::write(mem.join("facts"), "in the way").unwrap();
        let out = condense_episodes(&ctx(mem, model(answer(FACTS)))).await;
        assert!(
            matches!(out.outcome, CondenseOutcome::Unchanged(_)),
            "{out:?}"
        );
        assert_eq!(episodes(mem), before);
        std::fs::remove_file(mem.join("facts")).unwrap();

        // A crash between the two steps (the facts written, the episodes not yet rewritten)
        // leaves every episode in place and the facts on disk: duplicated, not lost.
        let plan = Plan::read(mem, MAX_INPUT_BYTES).unwrap().unwrap();
        write_facts(mem, &parse(FACTS).unwrap(), &plan.months()).unwrap();
        assert_eq!(episodes(mem), before);
        assert!(std::fs::read_to_string(mem.join("facts/history.md"))
            .unwrap()
            .contains("Shipped v1"));
        // The next attempt condenses them again, and an episode appended meanwhile survives.
        let month = mem.join("episodes/2024-03.md");
        crate::memory::append_text(&month, "- 2024-03-31 23:59 [t-new] the newest").unwrap();
        let plan = Plan::read(mem, MAX_INPUT_BYTES).unwrap().unwrap();
        crate::memory::append_text(&month, "- 2024-03-31 23:59 [t-later] appended meanwhile")
            .unwrap();
        plan.apply(mem, &parse(FACTS).unwrap()).unwrap();
        let left = episodes(mem);
        assert!(
            left.ends_with("[t-new] the newest\n- 2024-03-31 23:59 [t-later] appended meanwhile\n"),
            "{left}"
        );
        assert!(!left.contains("ep-2024-01-0000"));
    }

    #[test]
    fn a_long_backlog_is_condensed_a_bounded_chunk_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let mem = dir.path();
        seed(mem, 400); // ~240 KB
        let plan = Plan::read(mem, 10_000).unwrap().unwrap();
        let lines = plan.condensed_lines();
        assert!(lines > 0 && lines * 200 <= 10_000 + 200, "{lines}");
        assert_eq!(plan.files[0].cut, lines);
        assert_eq!(plan.months(), "of 2024-01");
    }
}
