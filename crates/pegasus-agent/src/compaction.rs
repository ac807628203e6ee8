//! Compaction (DESIGN.md §3): when a conversation nears the model's context window, one model call
//! summarises it, the session file is archived, and a new one starts from the summary.
//!
//! Crash safety: the old file is first hard-linked (or copied) into `session/archive/`, and only
//! then is `current.jsonl` replaced atomically, so at every instant the full conversation
//! exists in at least one file and `current.jsonl` is always either the old or the new one. The
//! session lock is held throughout, so an inbound message recorded meanwhile cannot land in the
//! file being replaced; messages recorded during the run (not yet enqueued) are carried over.

use std::path::{Path, PathBuf};

use chrono::Utc;
use pegasus_proto::llm::{Block, Message, Role};
use pegasus_store::{
    create_dir_all_durable, fsync_dir, session_file, write_atomic, ContentBlock, Role as SRole,
    Session, SessionMessage, SessionRecord, StoreError, SESSION_VERSION,
};

use crate::error::AgentError;
use crate::session_writer::SessionHandle;
use crate::thinker;
use crate::tool::ToolCtx;
use crate::transcript::{rebuild, render};

/// The summariser's system prompt (names "compaction": scripted test models key on it).
pub const COMPACTION_SYSTEM: &str = "You perform compaction of a long conversation between a \
project agent and the people it works for. Write a summary that lets the agent carry on \
without the original: the goals, decisions made and why, the current state of the work, open \
questions and promised next steps, names, paths and numbers that matter. Plain prose or \
bullets, no preamble.";

/// Characters of transcript sent to the summariser at most (the most recent part is kept);
/// less for a small context window ([`crate::context::summary_input_chars`]).
const SUMMARY_INPUT_CHARS: usize = 200_000;

/// Compaction starts when a response's input+output tokens exceed this share of the window.
pub const THRESHOLD: f64 = crate::context::THRESHOLD;

/// Failed compactions in a row after which an agent stops trying (until one succeeds).
pub const MAX_FAILURES: u32 = 3;

/// Compactions one run may make; a run that needs more is making its context grow faster
/// than summaries shrink it, and stops on the provider's refusal instead.
pub const MAX_PER_RUN: u32 = 4;

/// Told to the model after a compaction in the middle of its task.
pub const MID_TASK_NOTE: &str = "(The conversation was compacted while you were working on \
this request: the summary above says what was already done. Carry on from there.)";

/// Whether a response of `used` tokens calls for compaction under `window`.
pub fn needed(used: u64, window: Option<u64>) -> bool {
    window.is_some_and(|w| w > 0 && used as f64 > THRESHOLD * w as f64)
}

/// What a compaction produced.
#[derive(Debug)]
pub struct Compacted {
    /// The new in-memory transcript: the summary and the last user message.
    pub transcript: Vec<Message>,
    /// Where the old session file went.
    pub archived: PathBuf,
    /// Cost of the summary call.
    pub cost_usd: f64,
    /// The run's mark in the new file: user records after it arrived during the run.
    pub mark: RunMark,
}

/// Why a compaction attempt failed; the session is unchanged in every case.
#[derive(Debug, thiserror::Error)]
pub enum CompactionError {
    /// The summary call failed or returned nothing.
    #[error("the summary call failed: {0}")]
    Summary(String),
    /// Archiving or rewriting the session failed.
    #[error(transparent)]
    Files(#[from] AgentError),
}

/// Where the run that triggers a compaction began, so the swap can tell what to carry over.
#[derive(Debug, Clone)]
pub struct RunMark {
    /// Size of `current.jsonl` when the run started: user records appended after it arrived
    /// during the run and were not enqueued yet.
    pub file_len: u64,
    /// Text of the task's request as it is in the transcript (the "last user message" kept
    /// after the summary).
    pub request: Vec<String>,
}

/// What a compaction keeps after the summary besides the task's request (DESIGN.md §6).
#[derive(Debug, Clone, Default)]
pub struct Keep {
    /// The compaction happens in the middle of the task: the kept request says the work goes
    /// on, with the task's newest tool results.
    pub mid_task: bool,
    /// Tokens the summary, the request and the results may take together (the part of 80% of
    /// the window that the system prompt, the tools and the answer leave); `None` = unknown,
    /// nothing is cut for it.
    pub room: Option<u64>,
    /// The task's tool results so far, newest first: (the call, its result).
    pub results: Vec<(String, String)>,
    /// The model's window, for the note on a cut request.
    pub window: Option<u64>,
}

/// The tool results of the task in progress, newest first, each with its call (name and
/// arguments): what the model already fetched, kept through a compaction so it need not fetch
/// it again. The task began at the last user message that has text (other than an instruction
/// file's, which joins after a turn's results: DESIGN.md §16).
pub fn task_results(transcript: &[Message]) -> Vec<(String, String)> {
    let start = transcript
        .iter()
        .rposition(|m| {
            m.role == Role::User
                && m.content.iter().any(|b| {
                    matches!(b, Block::Text { text } if !crate::instructions::is_instructions(text))
                })
        })
        .map_or(0, |i| i + 1);
    // A call always comes before its result: one pass pairs them.
    let mut calls = std::collections::HashMap::new();
    let mut out = Vec::new();
    for block in transcript[start..].iter().flat_map(|m| &m.content) {
        match block {
            Block::ToolUse {
                id,
                name,
                input_json,
            } => {
                calls.insert(id.as_str(), format!("{name} {input_json}"));
            }
            Block::ToolResult {
                tool_use_id,
                content,
                ..
            } => {
                let call = calls.get(tool_use_id.as_str()).cloned();
                out.push((
                    call.unwrap_or_else(|| "a tool call".into()),
                    content.clone(),
                ));
            }
            _ => {}
        }
    }
    out.reverse();
    out
}

/// Bytes per token when a token budget is turned into text (the estimator's rate).
const BYTES_PER_TOKEN: u64 = 7;
const TOKENS_PER: u64 = 2;

fn bytes_for(tokens: u64) -> usize {
    (tokens.saturating_mul(BYTES_PER_TOKEN) / TOKENS_PER) as usize
}

/// Fewest bytes of a cut request kept, however small the room.
const MIN_REQUEST_BYTES: usize = 512;

/// Fewest bytes worth keeping of a tool result.
const MIN_RESULT_BYTES: usize = 256;

/// Bytes a cut's note takes (it comes on top of what is kept of the text).
const NOTE_BYTES: usize = 300;

/// The text blocks of the kept request: the request (cut to fit `keep.room` when it does not,
/// with a note), the task's newest tool results that still fit (cut, with a note), and with
/// `mid_task` the note that the work goes on.
fn kept_request(request: &[String], summary: &str, archived: &str, keep: &Keep) -> Vec<String> {
    let room = keep.room.map(|r| {
        bytes_for(r.saturating_sub(pegasus_proto::llm::tokens_of_bytes(summary.len()) + 64))
    });
    let asked: usize = request.iter().map(String::len).sum();
    let fetched: usize = keep
        .results
        .iter()
        .map(|(c, r)| c.len() + r.len() + 16)
        .sum();
    let (request_room, mut results_room) = match room {
        None => (usize::MAX, usize::MAX),
        Some(room) if asked + fetched <= room => (usize::MAX, usize::MAX),
        Some(room) => {
            let for_request = if fetched == 0 {
                room
            } else {
                room.saturating_sub(fetched).max(room / 2)
            };
            let for_request = for_request.max(MIN_REQUEST_BYTES);
            (for_request, room.saturating_sub(asked.min(for_request)))
        }
    };
    let window = keep
        .window
        .map(|w| format!(" ({w} tokens)"))
        .unwrap_or_default();
    let mut left = request_room;
    let mut out: Vec<String> = request
        .iter()
        .map(|text| {
            let cap = left.saturating_sub(NOTE_BYTES).max(MIN_REQUEST_BYTES / 2);
            left = left.saturating_sub(text.len().min(cap));
            crate::context::cut_middle(text.clone(), cap, |cut, total| {
                format!(
                    "[... {cut} of {total} bytes of this message cut here: it is longer than \
                     the model's context window{window} allows. The whole message is in \
                     {archived}; ask for the part you need, or use a model with a larger window.]"
                )
            })
        })
        .collect();
    // The notes that go with the results come out of their room.
    results_room = results_room.saturating_sub(MID_TASK_NOTE.len() + 200);
    if keep.mid_task && !keep.results.is_empty() && results_room >= MIN_RESULT_BYTES {
        let mut kept = String::from(
            "(What your tool calls in this task returned, newest first, kept through the \
             compaction; a cut one says so. Do not fetch these again.)",
        );
        for (call, result) in &keep.results {
            let cap = results_room.saturating_sub(call.len() + 16 + NOTE_BYTES);
            if cap < MIN_RESULT_BYTES {
                break;
            }
            let result = crate::context::cut_middle(result.clone(), cap, |cut, total| {
                format!(
                    "[... {cut} of {total} bytes of this result cut to fit the context \
                     window{window}; read a smaller part if you need the middle ...]"
                )
            });
            results_room = results_room.saturating_sub(call.len() + 16 + result.len());
            kept.push_str(&format!("\n\n### {call}\n{result}"));
        }
        out.push(kept);
    }
    if keep.mid_task {
        out.push(MID_TASK_NOTE.to_string());
    }
    out
}

/// Summarises `transcript` and swaps the session file of `dir` (see the module doc); what is
/// kept besides the summary is as `keep` says. The cost is returned even on
/// failure, since the call may have been paid for.
pub async fn compact(
    dir: &Path,
    name: &str,
    session: &SessionHandle,
    ctx: &ToolCtx,
    transcript: &[Message],
    mark: RunMark,
    keep: Keep,
) -> (Result<Compacted, CompactionError>, f64) {
    let input_chars = crate::context::summary_input_chars(
        keep.window.or(ctx.settings.context_window),
        SUMMARY_INPUT_CHARS,
    );
    let text = format!(
        "The conversation so far:\n\n{}\n\nWrite the summary now.",
        render(transcript, input_chars)
    );
    let resp = match thinker::ask(ctx, COMPACTION_SYSTEM, text).await {
        Ok(r) => r,
        Err(stop) => return (Err(CompactionError::Summary(format!("{stop:?}"))), 0.0),
    };
    let cost = resp.cost_usd.unwrap_or(0.0);
    let summary = resp.text().trim().to_string();
    if summary.is_empty() {
        return (
            Err(CompactionError::Summary(
                "the model returned no text".into(),
            )),
            cost,
        );
    }
    let dir = dir.to_path_buf();
    let name = name.to_string();
    let session = session.clone();
    let swapped =
        pegasus_fs::blocking(move || swap_files(&dir, &name, &session, summary, mark, keep))
            .await
            .map_err(AgentError::from)
            .and_then(|r| r);
    let result = match swapped {
        Ok((records, archived, mark)) => Ok(Compacted {
            transcript: rebuild(&records),
            archived,
            cost_usd: cost,
            mark,
        }),
        Err(e) => Err(CompactionError::Files(e)),
    };
    (result, cost)
}

/// Compacts one agent's session during one run: before a call that would not fit, after a
/// provider's context-length refusal, and after the task. It carries the run's [`RunMark`]
/// from one compaction to the next, so messages that arrive during the run are carried over
/// by each of them.
pub struct Compactor<'a> {
    dir: &'a Path,
    name: &'a str,
    session: &'a SessionHandle,
    mark: RunMark,
    /// Compactions made in this run.
    done: u32,
    /// Failed attempts in this run.
    failures: u32,
    /// Estimated tokens of the system prompt and tool specs of the run's calls.
    prompt_tokens: u64,
    /// The window a provider's refusal showed, when smaller than the one the run was given.
    window: Option<u64>,
}

impl<'a> Compactor<'a> {
    /// The compactor of a run of the agent of project `name` in `dir` that began at `mark`.
    pub fn new(dir: &'a Path, name: &'a str, session: &'a SessionHandle, mark: RunMark) -> Self {
        Compactor {
            dir,
            name,
            session,
            mark,
            done: 0,
            failures: 0,
            prompt_tokens: 0,
            window: None,
        }
    }

    /// The provider refused a request as too long and named (or implied) a window smaller
    /// than the one the run believed: compactions of this run fit that one.
    pub fn lower_window(&mut self, window: u64) {
        self.window = Some(self.window.map_or(window, |w| w.min(window)));
    }

    /// The window learned from a refusal in this run, if any.
    pub fn learned_window(&self) -> Option<u64> {
        self.window
    }

    /// Tells the compactor what the system prompt and the tools of the run's calls take, so
    /// it keeps only what fits beside them.
    pub fn set_prompt_tokens(&mut self, tokens: u64) {
        self.prompt_tokens = tokens;
    }

    /// Whether this run has compacted the session (the transcript was replaced).
    pub fn compacted(&self) -> bool {
        self.done > 0
    }

    /// Compacts the session and replaces `transcript` with the summary and the task's request
    /// (and, `mid_task`, a note that the work goes on). Returns whether it did, and what the
    /// summary cost. Gives up (returning `false`) after [`MAX_FAILURES`] failures or
    /// [`MAX_PER_RUN`] compactions in this run.
    pub async fn run(
        &mut self,
        ctx: &ToolCtx,
        transcript: &mut Vec<Message>,
        mid_task: bool,
    ) -> (bool, f64) {
        if self.failures >= MAX_FAILURES || self.done >= MAX_PER_RUN {
            tracing::warn!(agent = %self.name, done = self.done, failures = self.failures,
                "the context is nearly full, but this run will not compact again");
            return (false, 0.0);
        }
        // PreCompact hooks (DESIGN.md §16) are told first; Pegasus compacts on its own: `auto`.
        if let Some(hooks) = ctx
            .hooks
            .as_ref()
            .filter(|h| h.has(pegasus_store::hooks::HookEvent::PreCompact))
        {
            hooks
                .fire(
                    crate::hooks::Input::PreCompact { trigger: "auto" },
                    &ctx.workdir,
                )
                .await;
        }
        let window = self
            .window
            .or(ctx.settings.context_window)
            .filter(|w| *w > 0);
        let keep = Keep {
            mid_task,
            room: window.map(|w| {
                ((THRESHOLD * w as f64) as u64)
                    .saturating_sub(self.prompt_tokens + u64::from(ctx.settings.answer_tokens()))
            }),
            results: if mid_task {
                task_results(transcript)
            } else {
                Vec::new()
            },
            window,
        };
        let (result, cost) = compact(
            self.dir,
            self.name,
            self.session,
            ctx,
            transcript,
            self.mark.clone(),
            keep,
        )
        .await;
        match result {
            Ok(c) => {
                tracing::info!(agent = %self.name, archived = %c.archived.display(), mid_task,
                    "session compacted");
                *transcript = c.transcript;
                self.mark = c.mark;
                self.done += 1;
                crate::outbox::send_event(
                    &ctx.notices,
                    pegasus_proto::WorkerEvent::Compaction {
                        task: ctx.task_id.clone(),
                        archived: c.archived.to_string_lossy().into_owned(),
                    },
                );
                (true, cost)
            }
            Err(e) => {
                self.failures += 1;
                tracing::warn!(agent = %self.name, error = %e, failures = self.failures,
                    "compaction failed");
                (false, cost)
            }
        }
    }
}

/// User records appended to `path` after byte `offset`: messages that arrived during the run.
fn user_records_since(path: &Path, offset: u64) -> Result<Vec<SessionRecord>, AgentError> {
    let bytes = std::fs::read(path).map_err(StoreError::io(path))?;
    let tail = bytes.get(offset as usize..).unwrap_or(&[]);
    Ok(tail
        .split(|&b| b == b'\n')
        .filter_map(SessionRecord::decode)
        .filter(|r| matches!(r, SessionRecord::Message(m) if m.role == SRole::User))
        .collect())
}

/// Archives `current.jsonl` and replaces it with meta + compaction + the task's request +
/// the user messages recorded during the run. Returns the records the in-memory transcript is
/// rebuilt from (without those late messages: the host enqueues them itself), the archive
/// path and the run's new mark (the late messages are after it, so a second compaction in
/// the same run carries them over again).
fn swap_files(
    dir: &Path,
    name: &str,
    session: &SessionHandle,
    summary: String,
    mark: RunMark,
    keep: Keep,
) -> Result<(Vec<SessionRecord>, PathBuf, RunMark), AgentError> {
    let mut guard = session.lock().unwrap_or_else(|p| p.into_inner());
    let current = session_file(dir);
    let late = user_records_since(&current, mark.file_len)?;

    let archive_dir = dir.join("session").join("archive");
    create_dir_all_durable(&archive_dir)?;
    let stamp = Utc::now().format("%Y%m%dT%H%M%S%.3fZ").to_string();
    let mut archived = archive_dir.join(format!("{stamp}.jsonl"));
    let mut n = 1;
    while archived.exists() {
        archived = archive_dir.join(format!("{stamp}-{n}.jsonl"));
        n += 1;
    }
    if std::fs::hard_link(&current, &archived).is_err() {
        std::fs::copy(&current, &archived).map_err(StoreError::io(&archived))?;
        std::fs::File::open(&archived)
            .and_then(|f| f.sync_all())
            .map_err(StoreError::io(&archived))?;
    }
    fsync_dir(&archive_dir)?;

    let now = Utc::now();
    let archived_rel = archived
        .strip_prefix(dir)
        .unwrap_or(&archived)
        .to_string_lossy()
        .into_owned();
    let request: Vec<ContentBlock> = if mark.request.is_empty() && !keep.mid_task {
        Vec::new()
    } else {
        kept_request(&mark.request, &summary, &archived_rel, &keep)
            .into_iter()
            .map(|text| ContentBlock::Text { text })
            .collect()
    };
    let mut keep = vec![SessionRecord::Compaction {
        summary,
        archived: archived_rel,
        ts: now,
    }];
    if !request.is_empty() {
        keep.push(SessionRecord::Message(SessionMessage {
            id: None,
            role: SRole::User,
            from: None,
            content: request,
            model: None,
            usage: None,
            ts: now,
            client_id: None,
        }));
    }
    let meta = SessionRecord::Meta {
        version: SESSION_VERSION,
        project: name.to_string(),
        created: now,
    };
    let mut text = String::new();
    let mut kept_len = 0;
    for (i, r) in std::iter::once(&meta).chain(&keep).chain(&late).enumerate() {
        if i == 1 + keep.len() {
            kept_len = text.len();
        }
        let line = serde_json::to_string(r).map_err(|e| AgentError::Background(e.to_string()))?;
        text.push_str(&line);
        text.push('\n');
    }
    if late.is_empty() {
        kept_len = text.len();
    }
    write_atomic(&current, text.as_bytes())?;
    // The old appender points at the replaced inode; appends must go to the new file.
    *guard = Session::open(dir, name)?;
    let mark = RunMark {
        file_len: kept_len as u64,
        request: mark.request,
    };
    Ok((keep, archived, mark))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn call(id: &str, path: &str) -> Message {
        Message {
            role: Role::Assistant,
            content: vec![Block::ToolUse {
                id: id.into(),
                name: "read_file".into(),
                input_json: format!("{{\"path\":\"{path}\"}}"),
            }],
        }
    }

    fn result(id: &str, content: String) -> Message {
        Message {
            role: Role::User,
            content: vec![Block::ToolResult {
                tool_use_id: id.into(),
                content,
                is_error: false,
            }],
        }
    }

    #[test]
    fn the_task_results_are_kept_newest_first_and_cut_to_the_room() {
        let transcript = vec![
            Message {
                role: Role::User,
                content: vec![Block::Text {
                    text: "an older task".into(),
                }],
            },
            call("0", "old.txt"),
            result("0", "old".into()),
            Message {
                role: Role::User,
                content: vec![Block::Text {
                    text: "summarise big.txt and small.txt".into(),
                }],
            },
            call("1", "big.txt"),
            result("1", "B".repeat(50_000)),
            call("2", "small.txt"),
            result("2", "small file".into()),
        ];
        let results = task_results(&transcript);
        assert_eq!(results.len(), 2, "only this task's results: {results:?}");
        assert_eq!(results[0].0, r#"read_file {"path":"small.txt"}"#);
        assert_eq!(results[1].0, r#"read_file {"path":"big.txt"}"#);
        let keep = Keep {
            mid_task: true,
            room: Some(3_000),
            results,
            window: Some(8_000),
        };
        let request = vec!["summarise big.txt and small.txt".to_string()];
        let kept = kept_request(&request, "the summary", "session/archive/x.jsonl", &keep);
        assert_eq!(kept[0], request[0], "a request that fits is kept whole");
        let results = &kept[1];
        assert!(results.find("small.txt").unwrap() < results.find("big.txt").unwrap());
        assert!(results.contains("small file"));
        assert!(
            results.contains("bytes of this result cut to fit the context window (8000 tokens)")
        );
        let bytes: usize = kept.iter().map(String::len).sum();
        assert!(bytes <= 3_000 * 7 / 2 + 600, "{bytes}");
        assert_eq!(kept.last().unwrap(), MID_TASK_NOTE);
    }

    #[test]
    fn a_request_larger_than_the_window_is_cut_with_a_note() {
        let keep = Keep {
            mid_task: false,
            room: Some(1_000),
            results: Vec::new(),
            window: Some(2_048),
        };
        let long = format!("{}{}", "head ".repeat(2_000), "tail".repeat(500));
        let kept = kept_request(
            std::slice::from_ref(&long),
            "s",
            "session/archive/x.jsonl",
            &keep,
        );
        assert_eq!(kept.len(), 1);
        assert!(kept[0].len() < 1_000 * 7 / 2 + 400, "{}", kept[0].len());
        assert!(kept[0].starts_with("head head"));
        assert!(kept[0].ends_with("tail"));
        assert!(kept[0].contains("longer than the model's context window (2048 tokens) allows"));
        assert!(kept[0].contains("session/archive/x.jsonl"));
        // An unknown window cuts nothing.
        let keep = Keep { room: None, ..keep };
        assert_eq!(
            kept_request(std::slice::from_ref(&long), "s", "a", &keep),
            vec![long]
        );
    }

    #[test]
    fn threshold_is_eighty_percent_of_a_known_window() {
        assert!(!needed(800, Some(1000)));
        assert!(needed(801, Some(1000)));
        assert!(!needed(10_000_000, None));
        assert!(!needed(1, Some(0)));
    }
}
