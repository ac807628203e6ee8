//! `pegasusctl project log NAME [-f]`: the session transcript, read from the files (the daemon
//! need not run); `-f` follows the file as the project works, across compactions.
//!
//! While the daemon runs, `-f` follows its event bus: an event of the project (a task moved, a
//! tool call or a model call ended) is the cue to read what the worker appended, so new lines
//! show as they land instead of on a polling tick. Without the daemon, or once it stops, the
//! file is polled. The model's text is printed as it streams (after `… `); the finished
//! message then comes from the file, once.

use crate::CtlError;
use pegasus_proto::{ctl::CtlResponse, BusBody, BusEvent, TaskState, WorkerEvent};
use pegasus_store::{ContentBlock, Home, SessionRecord};
use std::{
    io::{Read, Seek, SeekFrom, Write as _},
    os::unix::fs::{MetadataExt, OpenOptionsExt},
    path::Path,
    time::Duration,
};

/// How a record reads for a human: one header line, indented blocks.
fn render(record: &SessionRecord) -> String {
    let clip = |s: &str, n: usize| {
        let one_line = s.replace('\n', " ");
        if one_line.chars().count() > n {
            format!("{}…", one_line.chars().take(n).collect::<String>())
        } else {
            one_line
        }
    };
    match record {
        SessionRecord::Meta {
            project, created, ..
        } => format!("# session of {project}, started {created}\n"),
        SessionRecord::Compaction {
            summary,
            archived,
            ts,
        } => {
            format!(
                "# {ts} compacted (old transcript in {archived})\n  summary: {}\n",
                clip(summary, 400)
            )
        }
        SessionRecord::Crash { reason, ts } => {
            format!("# {} crash: {reason}\n", ts.format("%Y-%m-%d %H:%M:%S"))
        }
        SessionRecord::Hook {
            event, text, ts, ..
        } => {
            format!(
                "# {} hook {event}: {}\n",
                ts.format("%Y-%m-%d %H:%M:%S"),
                clip(text, 400)
            )
        }
        SessionRecord::Message(m) => {
            let who = match (&m.role, &m.from) {
                (pegasus_store::Role::User, Some(from)) => format!("user ({from})"),
                (role, _) => format!("{role:?}").to_lowercase(),
            };
            let model = m
                .model
                .as_ref()
                .map(|m| format!(" [{m}]"))
                .unwrap_or_default();
            let mut out = format!("{} {who}{model}:\n", m.ts.format("%Y-%m-%d %H:%M:%S"));
            for block in &m.content {
                let line = match block {
                    ContentBlock::Text { text } => format!("  {}\n", text.replace('\n', "\n  ")),
                    ContentBlock::ToolUse { name, input, .. } => {
                        format!("  → {name} {}\n", clip(&input.to_string(), 200))
                    }
                    ContentBlock::Thinking { thinking, .. } => {
                        format!("  (thinking) {}\n", clip(thinking, 200))
                    }
                    ContentBlock::RedactedThinking { .. } => "  (thinking, redacted)\n".to_string(),
                    ContentBlock::ToolResult { content, .. }
                        if content == pegasus_store::CANCELLED_TOOL_RESULT =>
                    {
                        "  ← cancelled: cut off when the process stopped\n".to_string()
                    }
                    ContentBlock::ToolResult {
                        content, is_error, ..
                    } => {
                        format!(
                            "  ← {}{}\n",
                            if *is_error { "error: " } else { "" },
                            clip(content, 200)
                        )
                    }
                };
                out.push_str(&line);
            }
            out
        }
    }
}

fn print_line(line: &str, json: bool, stops: &mut Stops) {
    if json {
        println!("{line}");
        return;
    }
    match SessionRecord::decode(line.as_bytes()) {
        Some(record) => {
            // A task that stopped before this record is said where it happened.
            for stop in stops.until(record_ts(&record)) {
                println!("{stop}");
            }
            print!("{}", render(&record))
        }
        None => println!("(unreadable line skipped)"),
    }
}

/// When a record was written.
fn record_ts(record: &SessionRecord) -> chrono::DateTime<chrono::Utc> {
    match record {
        SessionRecord::Meta { created, .. } => *created,
        SessionRecord::Compaction { ts, .. }
        | SessionRecord::Crash { ts, .. }
        | SessionRecord::Hook { ts, .. } => *ts,
        SessionRecord::Message(m) => m.ts,
    }
}

/// The project's tasks that ended without an answer (failed, cancelled, blocked): the session
/// holds no line for them, so `project log` says them from the task store, each once, in
/// time order among the session's records.
struct Stops {
    dir: std::path::PathBuf,
    project: String,
    shown: std::collections::HashSet<String>,
    /// Not yet shown, oldest first: when, and the line.
    pending: std::collections::VecDeque<(chrono::DateTime<chrono::Utc>, String)>,
}

impl Stops {
    fn new(dir: &Path, project: &str) -> Stops {
        let mut stops = Stops {
            dir: dir.to_path_buf(),
            project: project.to_string(),
            shown: Default::default(),
            pending: Default::default(),
        };
        stops.refresh();
        stops
    }

    /// Reads the task store again for stops not yet shown (nothing when it cannot be read:
    /// the transcript is what `log` is for).
    fn refresh(&mut self) {
        let Ok(tasks) =
            pegasus_tasks::TaskStore::open(&self.dir, &self.project).and_then(|store| store.list())
        else {
            return;
        };
        let stopped: Vec<_> = tasks
            .into_iter()
            .filter(|t| {
                matches!(
                    t.state,
                    TaskState::Failed | TaskState::Cancelled | TaskState::Blocked
                ) && !self.shown.contains(&t.id)
            })
            .collect();
        let mut new: Vec<_> = stopped
            .into_iter()
            .map(|t| {
                let why = t.stop_reason.as_deref().unwrap_or("stopped");
                let detail = t
                    .question
                    .as_deref()
                    .or(t.result_summary.as_deref())
                    .filter(|d| !d.trim().is_empty())
                    .map(|d| format!(": {}", d.replace('\n', " ")))
                    .unwrap_or_default();
                let hint = match t.state {
                    TaskState::Failed => {
                        format!(" (`pegasusctl task retry {}` runs it again)", t.id)
                    }
                    _ => String::new(),
                };
                let line = format!(
                    "# {} task {} {} ({why}){detail}{hint}",
                    t.updated.format("%Y-%m-%d %H:%M:%S"),
                    t.id,
                    t.state
                );
                self.shown.insert(t.id);
                (t.updated, line)
            })
            .collect();
        new.sort_by_key(|(ts, _)| *ts);
        self.pending.extend(new);
    }

    /// The lines of stops at or before `ts`, taken out.
    fn until(&mut self, ts: chrono::DateTime<chrono::Utc>) -> Vec<String> {
        let mut out = Vec::new();
        while self.pending.front().is_some_and(|(at, _)| *at <= ts) {
            if let Some((_, line)) = self.pending.pop_front() {
                out.push(line);
            }
        }
        out
    }

    /// Every line not shown yet, taken out.
    fn rest(&mut self) -> Vec<String> {
        self.pending.drain(..).map(|(_, line)| line).collect()
    }
}

pub async fn run(home: &Home, json: bool, name: &str, follow: bool) -> Result<(), CtlError> {
    let dir = super::project_dir(home, name)?;
    let path = pegasus_store::session_file(&dir);
    let mut offset = 0u64;
    let mut inode = 0u64;
    let mut pending = String::new();
    let mut stops = Stops::new(&dir, name);
    read_new(
        &path,
        &mut offset,
        &mut inode,
        &mut pending,
        json,
        &mut stops,
    )?;
    let show_rest = |stops: &mut Stops| {
        if !json {
            for line in stops.rest() {
                println!("{line}");
            }
        }
    };
    show_rest(&mut stops);
    if !follow {
        return Ok(());
    }
    let mut bus = match crate::client::Client::connect(home).await {
        Ok(mut client) => match client.follow(Some(name.to_string())).await {
            Ok(()) => Some(client),
            Err(_) => None,
        },
        Err(_) => None,
    };
    // Streamed text is being printed on the current line.
    let mut streaming = false;
    loop {
        let Some(client) = bus.as_mut() else {
            tokio::time::sleep(POLL).await;
            read_new(
                &path,
                &mut offset,
                &mut inode,
                &mut pending,
                json,
                &mut stops,
            )?;
            continue;
        };
        // The file is appended around the event that announces it, not always before it:
        // read at the event and once more a moment later; and now and then with no event,
        // since not every append has one.
        match tokio::time::timeout(IDLE_READ, client.next_event()).await {
            // The model's text as it arrives (not in --json: that prints the file's records).
            // The finished message follows from the file, once.
            Ok(Some(CtlResponse::Event(BusEvent {
                body: BusBody::Worker(WorkerEvent::TextDelta { text, .. }),
                ..
            }))) => {
                if !json {
                    if !streaming {
                        print!("… ");
                        streaming = true;
                    }
                    print!("{text}");
                    let _ = std::io::stdout().flush();
                }
                continue;
            }
            // Each tool call as it starts and ends (the file says what it returned, later).
            Ok(Some(CtlResponse::Event(BusEvent {
                body:
                    BusBody::Worker(
                        event @ (WorkerEvent::ToolStart { .. } | WorkerEvent::ToolCall { .. }),
                    ),
                ..
            }))) => {
                if !json {
                    if std::mem::take(&mut streaming) {
                        println!();
                    }
                    println!("{}", tool_line(&event));
                    let _ = std::io::stdout().flush();
                }
                read_new(
                    &path,
                    &mut offset,
                    &mut inode,
                    &mut pending,
                    json,
                    &mut stops,
                )?;
                continue;
            }
            Ok(Some(event_or_resync)) => {
                if std::mem::take(&mut streaming) {
                    println!();
                }
                read_new(
                    &path,
                    &mut offset,
                    &mut inode,
                    &mut pending,
                    json,
                    &mut stops,
                )?;
                // A task that ended without an answer: said at once.
                if let CtlResponse::Event(BusEvent {
                    body: BusBody::Worker(WorkerEvent::Task { state, .. }),
                    ..
                }) = &event_or_resync
                {
                    if state.has_stopped() && *state != TaskState::Done {
                        stops.refresh();
                        show_rest(&mut stops);
                    }
                }
                tokio::time::sleep(SETTLE).await;
            }
            Ok(None) => bus = None,
            Err(_) => {}
        }
        read_new(
            &path,
            &mut offset,
            &mut inode,
            &mut pending,
            json,
            &mut stops,
        )?;
    }
}

/// The live line of a tool call starting or ending (`… ` like streamed text: not yet in the
/// file).
fn tool_line(event: &WorkerEvent) -> String {
    let indent = |depth: u32| "  ".repeat(depth as usize);
    match event {
        WorkerEvent::ToolStart {
            name,
            summary,
            depth,
            ..
        } => format!("… {}tool {name} started: {summary}", indent(*depth)),
        WorkerEvent::ToolCall {
            name,
            is_error,
            depth,
            ..
        } => format!(
            "… {}tool {name} {}",
            indent(*depth),
            if *is_error { "failed" } else { "done" }
        ),
        _ => String::new(),
    }
}

/// Polling interval without the daemon.
const POLL: Duration = Duration::from_millis(200);
/// How long after an event the file is read again.
const SETTLE: Duration = Duration::from_millis(50);
/// The longest the file goes unread while the daemon is quiet.
const IDLE_READ: Duration = Duration::from_secs(1);

/// Opens a session file to read, without blocking and only if it is a regular file (a FIFO in
/// its place must not hang `log`); `None` when there is none yet.
fn open_session(path: &Path) -> Result<Option<(std::fs::File, std::fs::Metadata)>, CtlError> {
    let cannot =
        |e: std::io::Error| CtlError::Failed(format!("cannot read {}: {e}", path.display()));
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(cannot(e)),
    };
    let meta = file.metadata().map_err(cannot)?;
    if !meta.is_file() {
        return Err(CtlError::Failed(format!(
            "{} is not a regular file: Pegasus did not write it",
            path.display()
        )));
    }
    Ok(Some((file, meta)))
}

/// A part of a project's transcript (a record is a complete line of its session file, counted
/// from 0): what `project log` prints of those records, their JSON, and the `since` that reads
/// on from where this part ended.
pub(crate) struct Transcript {
    /// As `project log` prints them, with the tasks that stopped among them.
    pub text: String,
    /// As `project log --json` prints them (a line that does not parse is left out).
    pub records: Vec<serde_json::Value>,
    /// Where the next read goes on from.
    pub next: usize,
    /// Records after `next` were left for the next read (the size cap was reached).
    pub more: bool,
    /// `since` was past the end: the session was compacted into a new file since (or the
    /// number was wrong), so this read started again from its beginning.
    pub restarted: bool,
}

/// The complete lines of a project's session file (a last line without its end is still being
/// written: it is read next time).
fn complete_lines(dir: &Path) -> Result<String, CtlError> {
    let mut bytes = Vec::new();
    if let Some((mut file, _)) = open_session(&pegasus_store::session_file(dir))? {
        file.read_to_end(&mut bytes).map_err(CtlError::failed)?;
    }
    let text = String::from_utf8_lossy(&bytes);
    Ok(text.rfind('\n').map_or("", |end| &text[..=end]).to_string())
}

/// How many records project `name`'s transcript holds: where a read from now on starts.
pub(crate) fn length(home: &Home, name: &str) -> Result<usize, CtlError> {
    let dir = super::project_dir(home, name)?;
    Ok(complete_lines(&dir)?.lines().count())
}

/// Reads project `name`'s transcript from record `since` on (negative: that many records
/// before the end), stopping after the record that brings the text past `max_bytes` (see
/// [`Transcript`]).
pub(crate) fn transcript(
    home: &Home,
    name: &str,
    since: i64,
    max_bytes: usize,
) -> Result<Transcript, CtlError> {
    let dir = super::project_dir(home, name)?;
    let text = complete_lines(&dir)?;
    let lines: Vec<&str> = text.lines().collect();
    let since = match usize::try_from(since) {
        Ok(n) => n,
        Err(_) => lines
            .len()
            .saturating_sub(usize::try_from(since.unsigned_abs()).unwrap_or(usize::MAX)),
    };
    let restarted = since > lines.len();
    let from = if restarted { 0 } else { since };
    let mut stops = Stops::new(&dir, name);
    // Tasks that stopped before the records the caller has seen were told then.
    let seen = from
        .checked_sub(1)
        .and_then(|i| lines.get(i))
        .and_then(|l| SessionRecord::decode(l.as_bytes()));
    if let Some(last) = seen {
        stops.until(record_ts(&last));
    }
    let mut out = Transcript {
        text: String::new(),
        records: Vec::new(),
        next: lines.len(),
        more: false,
        restarted,
    };
    for (i, line) in lines.iter().enumerate().skip(from) {
        if out.text.len() >= max_bytes {
            (out.next, out.more) = (i, true);
            break;
        }
        if line.trim().is_empty() {
            continue;
        }
        if let Ok(value) = serde_json::from_str(line) {
            out.records.push(value);
        }
        match SessionRecord::decode(line.as_bytes()) {
            Some(record) => {
                for stop in stops.until(record_ts(&record)) {
                    out.text.push_str(&stop);
                    out.text.push('\n');
                }
                out.text.push_str(&render(&record));
            }
            None => out.text.push_str("(unreadable line skipped)\n"),
        }
    }
    if !out.more {
        for stop in stops.rest() {
            out.text.push_str(&stop);
            out.text.push('\n');
        }
    }
    Ok(out)
}

/// Prints the complete lines added since `offset`; starts over when the file was replaced
/// (compaction archives it and starts a new one).
fn read_new(
    path: &Path,
    offset: &mut u64,
    inode: &mut u64,
    pending: &mut String,
    json: bool,
    stops: &mut Stops,
) -> Result<(), CtlError> {
    let Some((mut file, meta)) = open_session(path)? else {
        return Ok(());
    };
    if meta.ino() != *inode || meta.len() < *offset {
        *inode = meta.ino();
        *offset = 0;
        pending.clear();
    }
    file.seek(SeekFrom::Start(*offset))
        .map_err(CtlError::failed)?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(CtlError::failed)?;
    *offset += bytes.len() as u64;
    pending.push_str(&String::from_utf8_lossy(&bytes));
    while let Some(end) = pending.find('\n') {
        let line: String = pending.drain(..=end).collect();
        let line = line.trim_end();
        if !line.is_empty() {
            print_line(line, json, stops);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use pegasus_store::{Role, SessionMessage};

    /// A home with project `web` whose session holds `n` user messages `message 0` ...
    fn home_with(n: usize) -> (tempfile::TempDir, Home) {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::new(tmp.path());
        let dir = home.project_dir("web");
        std::fs::create_dir_all(dir.join("session")).unwrap();
        std::fs::write(dir.join("PROJECT.md"), "---\nname: web\n---\n").unwrap();
        let mut lines = String::new();
        for i in 0..n {
            let m = SessionRecord::Message(SessionMessage::new(
                Role::User,
                vec![ContentBlock::Text {
                    text: format!("message {i}"),
                }],
            ));
            lines.push_str(&serde_json::to_string(&m).unwrap());
            lines.push('\n');
        }
        // A line still being written is not a record yet.
        lines.push_str("{\"type\":\"mess");
        std::fs::write(pegasus_store::session_file(&dir), lines).unwrap();
        (tmp, home)
    }

    #[test]
    fn a_transcript_is_read_in_parts_from_any_point() {
        let (_tmp, home) = home_with(10);
        let all = transcript(&home, "web", 0, usize::MAX).unwrap();
        assert_eq!((all.records.len(), all.next, all.more), (10, 10, false));
        assert!(all.text.contains("message 0") && all.text.contains("message 9"));
        // From a point on, and nothing after the end.
        let tail = transcript(&home, "web", 7, usize::MAX).unwrap();
        assert_eq!(tail.records.len(), 3);
        assert!(!tail.text.contains("message 6") && tail.text.contains("message 7"));
        let none = transcript(&home, "web", 10, usize::MAX).unwrap();
        assert_eq!(
            (none.records.len(), none.next, none.restarted),
            (0, 10, false)
        );
        // Negative: the last ones.
        let last = transcript(&home, "web", -2, usize::MAX).unwrap();
        assert_eq!(last.records.len(), 2);
        assert!(last.text.contains("message 8") && last.text.contains("message 9"));
        assert_eq!(
            transcript(&home, "web", -50, usize::MAX)
                .unwrap()
                .records
                .len(),
            10
        );
        // Past the end (a compaction started a new file): from its beginning, said so.
        let past = transcript(&home, "web", 42, usize::MAX).unwrap();
        assert!(past.restarted);
        assert_eq!(past.records.len(), 10);
        // A size cap cuts after the record that reaches it, and `next` reads on.
        let mut from = 0;
        let mut seen = 0;
        loop {
            let part = transcript(&home, "web", from as i64, 1).unwrap();
            assert!(part.records.len() <= 1);
            seen += part.records.len();
            from = part.next;
            if !part.more {
                break;
            }
        }
        assert_eq!((seen, from), (10, 10));
        assert_eq!(length(&home, "web").unwrap(), 10);
        // An unknown project is the CLI's refusal.
        let err = transcript(&home, "nope", 0, 1).err().unwrap();
        assert!(err.to_string().contains("project nope not found"), "{err}");
    }
}
