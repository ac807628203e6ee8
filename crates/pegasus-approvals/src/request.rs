//! The request files of a project's approvals, under `<project>/approvals/` (DESIGN.md §11).
//!
//! Files, one set per request `ID` (an id is unique in the home, so `approve ID` needs no
//! project):
//! * `ID.json`, the request, written atomically by the worker before it waits;
//! * `ID.answer.json`, the answer, created exclusively (written aside, then hard-linked into
//!   place, which fails if it exists): whoever answers first (a person, the policy's timeout)
//!   wins, and a second answer is refused, so a call can never be both approved and denied;
//! * `ID.ran`, written (durably) by the worker right before it runs an approved call: after a
//!   crash, a request with this mark is never run again (its call was cut off, like any call);
//! * once the call's result exists, the three move to `closed/`.
//!
//! What state a request is in is read from these files by one function,
//! [`read_state`]; every change to them is a step of [`crate::step`]. pegasusd writes
//! answers only; the worker writes everything else, and answers for timeouts.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use pegasus_proto::shown::escape;
use pegasus_store::atomic::{create_dir_all_durable, fsync_dir, write_atomic};
use pegasus_store::{Result, StoreError};
use serde::{Deserialize, Serialize};

use crate::policy::MERGE_TOOL;
use crate::seen::Seen;
use crate::state::{step, Refusal, RequestEvent, RequestState};

/// The folder of a project's approvals.
pub const APPROVALS_DIR: &str = "approvals";

/// A tool call waiting for a person (the JSON of `pegasusctl approvals --json` is its first
/// six fields).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRequest {
    /// The request's id (see [`new_id`]), which names its files.
    pub id: String,
    /// The project whose worker asks.
    pub project: String,
    /// The id of the task whose call waits; empty when the call is not a task's.
    pub task: String,
    /// The tool's name (`exec`, an MCP tool, `merge` for a merge).
    pub tool: String,
    /// The whole exec command line, or the tool and its arguments.
    pub summary: String,
    /// When it was asked; the timeout counts from here.
    pub asked_at: DateTime<Utc>,
    /// The model's call id (`tool_use` id) the answer is the result of; empty for a merge.
    #[serde(default)]
    pub call_id: String,
    /// The call's arguments as the model wrote them.
    #[serde(default)]
    pub input_json: String,
    /// Seconds it waits, from `asked_at`.
    pub timeout_s: u64,
    /// What `approve --always` adds to the project's policy: the exact command line (exec),
    /// else the tool's name.
    #[serde(default)]
    pub always: String,
}

impl ApprovalRequest {
    /// The request as listings, events and Telegram show it: the summary made again from the
    /// input (so the target comes first whoever wrote the file) and escaped, like the tool's
    /// name; the input whole and as written.
    pub fn info(&self) -> pegasus_proto::ctl::ApprovalInfo {
        let input = (!self.input_json.is_empty())
            .then(|| serde_json::from_str::<serde_json::Value>(&self.input_json).ok())
            .flatten();
        let summary = match &input {
            Some(v) if self.tool != MERGE_TOOL => summary(&self.tool, v),
            _ => self.summary.clone(),
        };
        pegasus_proto::ctl::ApprovalInfo {
            id: self.id.clone(),
            project: escape(&self.project),
            task: escape(&self.task),
            tool: escape(&self.tool),
            summary: escape(&summary),
            asked_at: self
                .asked_at
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            input: input.map(|v| v.to_string()).unwrap_or_default(),
        }
    }

    /// When an unanswered request is denied.
    pub fn expires_at(&self) -> DateTime<Utc> {
        self.asked_at + chrono::Duration::seconds(self.timeout_s.min(i64::MAX as u64 / 2) as i64)
    }
}

/// Characters of a non-exec summary before it is cut (an exec command line is never cut).
pub const SUMMARY_CHARS: usize = 500;
/// Characters of a call's target shown before it is cut.
const TARGET_CHARS: usize = 300;
/// The argument that names what a call acts on, first found first.
const TARGET_KEYS: [&str; 8] = [
    "path",
    "file_path",
    "url",
    "uri",
    "repo",
    "dir",
    "directory",
    "cwd",
];

/// What a person reads about a call of `tool` with `input` (unescaped: every place that shows
/// it escapes it with [`pegasus_proto::shown::escape`]). An exec's whole command line; any
/// other tool's name, its MCP server, its target (`path`, `url`, ...) and then its other
/// arguments, cut at [`SUMMARY_CHARS`] with a note where the rest is. So `write_file`'s path is
/// read before its content, however long that is.
pub fn summary(tool: &str, input: &serde_json::Value) -> String {
    if tool == "exec" {
        if let Some(c) = input.get("command").and_then(|c| c.as_str()) {
            return c.to_string();
        }
    }
    let mut head = tool.to_string();
    if let Some(server) = mcp_server(tool) {
        head.push_str(&format!(" (MCP server {server})"));
    }
    let mut rest = input.clone();
    if let Some(obj) = rest.as_object_mut() {
        let target = TARGET_KEYS.iter().find_map(|k| {
            obj.get(*k)
                .and_then(|v| v.as_str())
                .map(|v| (*k, v.to_string()))
        });
        if let Some((key, value)) = target {
            obj.remove(key);
            let quoted = serde_json::Value::String(cut(&value, TARGET_CHARS)).to_string();
            head.push_str(&format!(" {key}={quoted}"));
        }
    }
    let args = match &rest {
        serde_json::Value::Object(o) if o.is_empty() => String::new(),
        serde_json::Value::Null => String::new(),
        v => v.to_string(),
    };
    let whole = if args.is_empty() {
        head.clone()
    } else {
        format!("{head} {args}")
    };
    if whole.chars().count() <= SUMMARY_CHARS {
        return whole;
    }
    let room = SUMMARY_CHARS.saturating_sub(head.chars().count() + 1);
    format!(
        "{head} {} (cut: `pegasusctl approvals --full` or the dashboard shows the whole input)",
        cut(&args, room.max(40))
    )
}

/// `text` cut at `n` characters, with `…` when it was.
fn cut(text: &str, n: usize) -> String {
    if text.chars().count() <= n {
        return text.to_string();
    }
    text.chars().take(n.saturating_sub(1)).collect::<String>() + "…"
}

/// The server of an MCP tool (`mcp__SERVER__TOOL`).
fn mcp_server(tool: &str) -> Option<&str> {
    let rest = tool.strip_prefix("mcp__")?;
    rest.split_once("__").map(|(server, _)| server)
}

/// How a request was answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Decision {
    /// A person said yes: the call runs.
    Approved {
        /// `--always`: the line or tool was added to the project's allow list too.
        #[serde(default)]
        always: bool,
    },
    /// A person said no.
    Denied {
        /// What they said (`deny --reason`), if anything.
        #[serde(default)]
        reason: Option<String>,
    },
    /// No answer within the timeout.
    Expired {
        /// The timeout it had, in seconds.
        after_s: u64,
    },
    /// The task was cancelled (or ended) while it waited.
    Withdrawn {
        /// Why, in words.
        why: String,
    },
}

impl Decision {
    /// What goes back to the model as the tool's result when the call does not run (DESIGN.md
    /// §11's wording); `None` for an approval.
    pub fn refusal(&self) -> Option<String> {
        match self {
            Decision::Approved { .. } => None,
            Decision::Denied { reason: None } => Some("denied by the user".into()),
            Decision::Denied { reason: Some(r) } => Some(format!("denied by the user: {r}")),
            Decision::Expired { after_s } => Some(format!("denied: no answer within {after_s} s")),
            Decision::Withdrawn { why } => Some(format!("not run: {why}")),
        }
    }

    /// One word for logs and events.
    pub fn word(&self) -> &'static str {
        match self {
            Decision::Approved { .. } => "approved",
            Decision::Denied { .. } => "denied",
            Decision::Expired { .. } => "expired",
            Decision::Withdrawn { .. } => "withdrawn",
        }
    }
}

/// An answer, with who gave it and when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    /// What the answer says.
    #[serde(flatten)]
    pub decision: Decision,
    /// The channel it came from (`cli`, `dashboard`, `telegram:<chat>`, `policy`).
    pub by: String,
    /// When it was given.
    pub at: DateTime<Utc>,
}

/// A new request id: `ap-` and ten random lowercase letters and digits (unique in a home).
pub fn new_id() -> String {
    const ALPHABET: &[u8] = b"abcdefghijkmnpqrstuvwxyz23456789";
    let mut bytes = [0u8; 10];
    let filled = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
        .is_ok();
    if !filled {
        let n = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
            ^ (u128::from(std::process::id()) << 64);
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (n >> (i * 8)) as u8;
        }
    }
    let s: String = bytes
        .iter()
        .map(|b| ALPHABET[(*b as usize) % ALPHABET.len()] as char)
        .collect();
    format!("ap-{s}")
}

/// Whether `id` has the shape of a request id (so it can name a file).
pub fn valid_id(id: &str) -> bool {
    id.strip_prefix("ap-").is_some_and(|r| {
        !r.is_empty() && r.len() <= 32 && r.bytes().all(|b| b.is_ascii_alphanumeric())
    })
}

fn dir(project_dir: &Path) -> PathBuf {
    project_dir.join(APPROVALS_DIR)
}

fn request_path(project_dir: &Path, id: &str) -> PathBuf {
    dir(project_dir).join(format!("{id}.json"))
}

fn answer_path(project_dir: &Path, id: &str) -> PathBuf {
    dir(project_dir).join(format!("{id}.answer.json"))
}

fn ran_path(project_dir: &Path, id: &str) -> PathBuf {
    dir(project_dir).join(format!("{id}.ran"))
}

fn closed_answer_path(project_dir: &Path, id: &str) -> PathBuf {
    dir(project_dir)
        .join("closed")
        .join(format!("{id}.answer.json"))
}

/// Writes a new request durably.
pub fn write_request(project_dir: &Path, req: &ApprovalRequest) -> Result<()> {
    let d = dir(project_dir);
    create_dir_all_durable(&d)?;
    let bytes = serde_json::to_vec_pretty(req)
        .map_err(|e| StoreError::Invalid(format!("cannot encode approval {}: {e}", req.id)))?;
    write_atomic(&request_path(project_dir, &req.id), &bytes)
}

/// Why an answer was not recorded.
#[derive(Debug)]
pub enum AnswerError {
    /// Someone answered first; here is their answer.
    Already(Answer),
    /// No pending request with that id.
    NotFound,
    /// The answer could not be encoded or written, or the one already there cannot be read.
    Store(StoreError),
}

/// Records `answer` for request `id` unless it already has one: exactly one answer ever wins.
pub fn answer(
    project_dir: &Path,
    id: &str,
    answer: &Answer,
) -> std::result::Result<(), AnswerError> {
    match read_state(project_dir, id) {
        None | Some(RequestState::Closed) => return Err(AnswerError::NotFound),
        Some(state) => match step(&state, &RequestEvent::Answered(answer.decision.clone())) {
            Ok(_) => {}
            Err(_) => return Err(already_answered(project_dir, id)),
        },
    }
    let path = answer_path(project_dir, id);
    let bytes = serde_json::to_vec_pretty(answer).map_err(|e| {
        AnswerError::Store(StoreError::Invalid(format!("cannot encode an answer: {e}")))
    })?;
    // Written whole and synced aside, then linked into place: link(2) fails if the answer
    // exists, so two answers racing cannot both win, and nobody sees half an answer.
    // Its own name: pegasusd answers from the CLI, the dashboard and Telegram at once.
    let aside = dir(project_dir).join(format!(".{id}.answer.{}.tmp", new_id()));
    let write = || -> std::io::Result<()> {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&aside)?;
        f.write_all(&bytes)?;
        f.sync_all()
    };
    write().map_err(|e| AnswerError::Store(StoreError::io(&aside)(e)))?;
    let linked = std::fs::hard_link(&aside, &path);
    let _ = std::fs::remove_file(&aside);
    match linked {
        Ok(()) if closed_before(project_dir, id, &path) => {
            // Answered and closed between the look above and the link (the request's asker
            // withdrew it, say): the place was free again, but the first answer won.
            let _ = std::fs::remove_file(&path);
            Err(already_answered(project_dir, id))
        }
        Ok(()) => {
            fsync_dir(&dir(project_dir)).map_err(AnswerError::Store)?;
            Ok(())
        }
        // Someone answered between the look above and the link: theirs won.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            Err(already_answered(project_dir, id))
        }
        Err(e) => Err(AnswerError::Store(StoreError::io(&path)(e))),
    }
}

/// Whether request `id` was closed with another answer than the one just linked at `mine`:
/// `closed/` holds an answer, and not this file (an answer that won and was closed since is
/// the same file, moved).
fn closed_before(project_dir: &Path, id: &str, mine: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let closed = closed_answer_path(project_dir, id);
    match (
        std::fs::symlink_metadata(&closed),
        std::fs::symlink_metadata(mine),
    ) {
        (Ok(c), Ok(m)) => (c.dev(), c.ino()) != (m.dev(), m.ino()),
        (Ok(_), Err(_)) => true,
        (Err(_), _) => false,
    }
}

/// The refusal of a second answer: the first one, when it can be read (open or closed).
fn already_answered(project_dir: &Path, id: &str) -> AnswerError {
    match read_answer(project_dir, id).or_else(|| read_json(&closed_answer_path(project_dir, id))) {
        Some(a) => AnswerError::Already(a),
        None => AnswerError::Store(StoreError::Invalid(format!(
            "approval {id} has an answer that cannot be read"
        ))),
    }
}

/// The state of request `id` of the project in `project_dir`, as its files say; `None` when
/// there is no such request, open or closed. The one reader of a request's state: whatever
/// lists, counts or answers requests asks it.
pub fn read_state(project_dir: &Path, id: &str) -> Option<RequestState> {
    if !valid_id(id) {
        return None;
    }
    // Regular files only: a FIFO planted among the requests must not hang a listing.
    let is_file = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file());
    if !is_file(&request_path(project_dir, id)) {
        let closed = dir(project_dir).join("closed").join(format!("{id}.json"));
        return is_file(&closed).then_some(RequestState::Closed);
    }
    let answer_file = answer_path(project_dir, id);
    let state = match read_json::<Answer>(&answer_file) {
        Some(a) => match RequestState::answered(&a.decision) {
            RequestState::Approved { .. } if ran_path(project_dir, id).exists() => {
                RequestState::Ran
            }
            state => state,
        },
        // It is there (so a new answer cannot be linked) but does not load: written whole and
        // linked, Pegasus never leaves one so.
        None if std::fs::symlink_metadata(&answer_file).is_ok() => RequestState::Unreadable,
        None => RequestState::Pending,
    };
    Some(state)
}

/// The answer of request `id`, if it has one.
pub fn read_answer(project_dir: &Path, id: &str) -> Option<Answer> {
    read_json(&answer_path(project_dir, id))
}

/// The request `id` of this project, open (not closed) or not.
pub fn read_request(project_dir: &Path, id: &str) -> Option<ApprovalRequest> {
    valid_id(id)
        .then(|| read_json(&request_path(project_dir, id)))
        .flatten()
}

/// The largest request or answer file read: a request holds one tool call's input, itself
/// bounded by the model's answer.
const MAX_APPROVAL_FILE: u64 = 16 << 20;

/// The file at `path` as a `T`, if it is one: a regular file only (a FIFO planted among the
/// requests must not hang a listing), never past [`MAX_APPROVAL_FILE`].
fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Option<T> {
    let capped = pegasus_store::read_capped(path, MAX_APPROVAL_FILE).ok()?;
    if capped.truncated() {
        return None;
    }
    serde_json::from_slice(&capped.bytes).ok()
}

/// Marks request `id` as about to run (durably): it never runs again after this.
/// Only an approved request can be: any other is refused.
pub fn mark_ran(project_dir: &Path, id: &str) -> Result<()> {
    let refused =
        |why: Refusal| StoreError::Invalid(format!("approval {id} cannot be marked as run: {why}"));
    match read_state(project_dir, id) {
        None => return Err(refused(Refusal::Unknown)),
        Some(state) => step(&state, &RequestEvent::MarkedRan).map_err(refused)?,
    };
    write_atomic(&ran_path(project_dir, id), b"")
}

/// Moves request `id` and its answer to `closed/`: its call has its result.
/// A request closed already (or never written) is left as it is; one still waiting for its
/// answer is refused: it is answered (withdrawn, if nothing else) first.
pub fn close(project_dir: &Path, id: &str) -> Result<()> {
    match read_state(project_dir, id) {
        None | Some(RequestState::Closed) => return Ok(()),
        Some(state) => {
            step(&state, &RequestEvent::Closed).map_err(|why| {
                StoreError::Invalid(format!("approval {id} cannot be closed: {why}"))
            })?;
        }
    }
    let closed = dir(project_dir).join("closed");
    create_dir_all_durable(&closed)?;
    // The request first: from its move on the request reads as closed, so a crash before the
    // rest moved never leaves it waiting again without its answer.
    for p in [
        request_path(project_dir, id),
        answer_path(project_dir, id),
        ran_path(project_dir, id),
    ] {
        if let Some(name) = p.file_name() {
            match std::fs::rename(&p, closed.join(name)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(StoreError::io(&p)(e)),
            }
        }
    }
    fsync_dir(&dir(project_dir))?;
    fsync_dir(&closed)
}

/// One open request with its state.
#[derive(Debug, Clone, PartialEq)]
pub struct Open {
    /// The request as its worker wrote it.
    pub request: ApprovalRequest,
    /// Its state ([`read_state`]); never [`RequestState::Closed`].
    pub state: RequestState,
}

/// The project's open requests (answered or not), oldest first; files that are not requests
/// are skipped.
pub fn open_requests(project_dir: &Path) -> Vec<Open> {
    let d = dir(project_dir);
    let Ok(entries) = std::fs::read_dir(&d) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(id) = name.strip_suffix(".json") else {
            continue;
        };
        if id.ends_with(".answer") || !valid_id(id) {
            continue;
        }
        // Half a request cannot be: it is written atomically. Anything else here is not ours.
        let Some(request) = read_json(&e.path()) else {
            continue;
        };
        match read_state(project_dir, id) {
            Some(RequestState::Closed) | None => {}
            Some(state) => out.push(Open { request, state }),
        }
    }
    out.sort_by(|a, b| {
        (a.request.asked_at, &a.request.id).cmp(&(b.request.asked_at, &b.request.id))
    });
    out
}

/// The project's requests still waiting for an answer.
pub fn pending(project_dir: &Path) -> Vec<ApprovalRequest> {
    open_requests(project_dir)
        .into_iter()
        .filter(|o| o.state == RequestState::Pending)
        .map(|o| o.request)
        .collect()
}

/// How many requests of the project wait (cheap when there are none: one failed open; no
/// request is parsed).
pub fn count_pending(project_dir: &Path) -> u32 {
    let Ok(entries) = std::fs::read_dir(dir(project_dir)) else {
        return 0;
    };
    let names: Vec<String> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .collect();
    names
        .iter()
        .filter_map(|n| n.strip_suffix(".json"))
        .filter(|id| read_state(project_dir, id) == Some(RequestState::Pending))
        .count() as u32
}

/// Finds the open request `id` among the home's projects: `(project folder, request)`.
pub fn find(projects_dir: &Path, id: &str) -> Option<(PathBuf, ApprovalRequest)> {
    let entries = std::fs::read_dir(projects_dir).ok()?;
    entries.flatten().find_map(|e| {
        let p = e.path();
        read_request(&p, id).map(|r| (p, r))
    })
}

/// What `approvals` lists: every request of the home (or of one project) still waiting for
/// a person, oldest first. One whose time ran out by pegasusd's clock ([`Seen`], read from the
/// home) is denied, not listed; one pegasusd has not seen yet is listed (its time starts when
/// pegasusd sees it).
pub fn waiting(
    projects_dir: &Path,
    project: Option<&str>,
) -> Vec<pegasus_proto::ctl::ApprovalInfo> {
    let seen = projects_dir.parent().map(Seen::load).unwrap_or_default();
    waiting_seen(projects_dir, project, &seen)
}

/// [`waiting`], judged by `seen`.
pub fn waiting_seen(
    projects_dir: &Path,
    project: Option<&str>,
    seen: &Seen,
) -> Vec<pegasus_proto::ctl::ApprovalInfo> {
    let now = Utc::now();
    list_pending(projects_dir, project)
        .into_iter()
        .filter(|r| now < seen.expires_at(r, now))
        .map(|r| r.info())
        .collect()
}

/// Every waiting request of the home with its project folder, oldest first.
pub fn pending_with_dirs(projects_dir: &Path) -> Vec<(PathBuf, ApprovalRequest)> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(projects_dir) {
        for e in entries.flatten() {
            let p = e.path();
            if dir(&p).is_dir() {
                out.extend(pending(&p).into_iter().map(|r| (p.clone(), r)));
            }
        }
    }
    out.sort_by(|a, b| (a.1.asked_at, &a.1.id).cmp(&(b.1.asked_at, &b.1.id)));
    out
}

/// The answer of a request `id` that was closed (its call has its result), in any project.
pub fn closed_answer(projects_dir: &Path, id: &str) -> Option<Answer> {
    if !valid_id(id) {
        return None;
    }
    let entries = std::fs::read_dir(projects_dir).ok()?;
    entries.flatten().find_map(|e| {
        let project = e.path();
        // A close moves the request before its answer: in between, the answer is still open.
        read_json(&closed_answer_path(&project, id)).or_else(|| {
            (read_state(&project, id) == Some(RequestState::Closed))
                .then(|| read_answer(&project, id))
                .flatten()
        })
    })
}

/// Every waiting request of the home (or of one project), oldest first.
pub fn list_pending(projects_dir: &Path, project: Option<&str>) -> Vec<ApprovalRequest> {
    let mut out = Vec::new();
    match project {
        Some(name) => out.extend(pending(&projects_dir.join(name))),
        None => {
            if let Ok(entries) = std::fs::read_dir(projects_dir) {
                for e in entries.flatten() {
                    if dir(&e.path()).is_dir() {
                        out.extend(pending(&e.path()));
                    }
                }
            }
        }
    }
    out.sort_by(|a, b| (a.asked_at, &a.id).cmp(&(b.asked_at, &b.id)));
    out
}

#[cfg(test)]
#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    pub(crate) fn request(id: &str, asked_at: DateTime<Utc>) -> ApprovalRequest {
        ApprovalRequest {
            id: id.into(),
            project: "web".into(),
            task: "t-1".into(),
            tool: "exec".into(),
            summary: "rm -rf build".into(),
            asked_at,
            call_id: "toolu_1".into(),
            input_json: "{\"command\":\"rm -rf build\"}".into(),
            timeout_s: 60,
            always: "rm -rf build".into(),
        }
    }

    #[test]
    fn exactly_one_answer_wins_and_closing_keeps_the_history() {
        let home = tempfile::tempdir().unwrap();
        let projects = home.path().join("projects");
        let p = projects.join("web");
        std::fs::create_dir_all(&p).unwrap();
        let id = new_id();
        assert!(valid_id(&id));
        write_request(&p, &request(&id, Utc::now())).unwrap();
        assert_eq!(count_pending(&p), 1);
        assert_eq!(read_state(&p, &id), Some(RequestState::Pending));
        assert!(mark_ran(&p, &id).is_err(), "only an approved call runs");
        assert!(close(&p, &id).is_err(), "answered before it closes");
        assert_eq!(list_pending(&projects, None).len(), 1);
        assert_eq!(find(&projects, &id).unwrap().0, p);
        let yes = Answer {
            decision: Decision::Approved { always: false },
            by: "cli".into(),
            at: Utc::now(),
        };
        answer(&p, &id, &yes).unwrap();
        let no = Answer {
            decision: Decision::Denied { reason: None },
            by: "dashboard".into(),
            at: Utc::now(),
        };
        match answer(&p, &id, &no) {
            Err(AnswerError::Already(a)) => assert_eq!(a, yes),
            other => panic!("{other:?}"),
        }
        assert_eq!(count_pending(&p), 0);
        assert!(pending(&p).is_empty());
        let open = open_requests(&p);
        assert_eq!(open.len(), 1);
        assert_eq!(open[0].state, RequestState::Approved { always: false });
        mark_ran(&p, &id).unwrap();
        assert_eq!(open_requests(&p)[0].state, RequestState::Ran);
        assert!(mark_ran(&p, &id).is_err(), "a call runs once");
        close(&p, &id).unwrap();
        assert!(open_requests(&p).is_empty());
        assert_eq!(read_state(&p, &id), Some(RequestState::Closed));
        assert!(p
            .join("approvals/closed")
            .join(format!("{id}.json"))
            .exists());
        assert!(matches!(answer(&p, &id, &no), Err(AnswerError::NotFound)));
        assert!(matches!(
            answer(&p, "../../etc", &no),
            Err(AnswerError::NotFound)
        ));
    }

    fn answer_by(decision: Decision, by: &str) -> Answer {
        Answer {
            decision,
            by: by.into(),
            at: Utc::now(),
        }
    }

    /// A person answers while the request's worker withdraws and closes it: exactly one
    /// answer wins, and the one told it won is the one closed.
    #[test]
    fn an_answer_racing_a_withdrawal_and_its_close_wins_only_if_it_is_the_one_closed() {
        let home = tempfile::tempdir().unwrap();
        let projects = home.path().join("projects");
        let p = projects.join("web");
        std::fs::create_dir_all(&p).unwrap();
        for _ in 0..200 {
            let id = new_id();
            write_request(&p, &request(&id, Utc::now())).unwrap();
            let (pp, pid) = (p.clone(), id.clone());
            let person = std::thread::spawn(move || {
                answer(
                    &pp,
                    &pid,
                    &answer_by(Decision::Approved { always: false }, "cli"),
                )
            });
            let gone = Decision::Withdrawn { why: "gone".into() };
            let _ = answer(&p, &id, &answer_by(gone, "policy"));
            close(&p, &id).unwrap();
            let theirs = person.join().unwrap();
            let closed = closed_answer(&projects, &id).unwrap();
            // Told it won: it is the answer closed. Refused: the withdrawal is.
            match theirs {
                Ok(()) => assert_eq!(closed.by, "cli"),
                Err(AnswerError::Already(a)) => assert_eq!(a, closed),
                Err(AnswerError::NotFound) => {}
                Err(e) => panic!("{e:?}"),
            }
            if closed.by != "cli" {
                assert!(matches!(closed.decision, Decision::Withdrawn { .. }));
            }
            assert_eq!(read_state(&p, &id), Some(RequestState::Closed));
            assert!(read_answer(&p, &id).is_none(), "no answer is left open");
        }
    }

    /// A close cut off after the request moved: the request reads as closed, its answer is
    /// found, and a late answer is refused with it.
    #[test]
    fn a_close_cut_off_halfway_leaves_the_request_closed_with_its_answer() {
        let home = tempfile::tempdir().unwrap();
        let projects = home.path().join("projects");
        let p = projects.join("web");
        std::fs::create_dir_all(p.join("approvals/closed")).unwrap();
        let id = new_id();
        write_request(&p, &request(&id, Utc::now())).unwrap();
        let gone = answer_by(Decision::Withdrawn { why: "gone".into() }, "policy");
        answer(&p, &id, &gone).unwrap();
        std::fs::rename(
            request_path(&p, &id),
            p.join("approvals/closed").join(format!("{id}.json")),
        )
        .unwrap();
        assert_eq!(read_state(&p, &id), Some(RequestState::Closed));
        assert_eq!(closed_answer(&projects, &id), Some(gone.clone()));
        let late = answer_by(Decision::Approved { always: false }, "cli");
        assert!(matches!(answer(&p, &id, &late), Err(AnswerError::NotFound)));
        // The answer-first order of old, cut off: the request still open, its answer closed.
        let id = new_id();
        write_request(&p, &request(&id, Utc::now())).unwrap();
        answer(&p, &id, &gone).unwrap();
        std::fs::rename(answer_path(&p, &id), closed_answer_path(&p, &id)).unwrap();
        match answer(&p, &id, &late) {
            Err(AnswerError::Already(a)) => assert_eq!(a, gone),
            other => panic!("{other:?}"),
        }
        assert!(read_answer(&p, &id).is_none());
    }

    #[test]
    fn a_summary_names_the_target_before_the_content_and_is_shown_escaped() {
        let big = "x".repeat(10_240);
        let input = serde_json::json!({"content": big, "path": "src/ma\u{202e}in.rs"});
        let s = summary("write_file", &input);
        assert!(
            s.starts_with("write_file path=\"src/ma\u{202e}in.rs\" {\"content\":\"xxx"),
            "{s}"
        );
        assert!(s.chars().count() < SUMMARY_CHARS + 120, "{}", s.len());
        assert!(s.contains("pegasusctl approvals --full"), "{s}");
        let url = summary(
            "fetch",
            &serde_json::json!({"url": "https://x.test/a", "max": 3}),
        );
        assert_eq!(url, "fetch url=\"https://x.test/a\" {\"max\":3}");
        let mcp = summary("mcp__github__push", &serde_json::json!({"branch": "main"}));
        assert_eq!(
            mcp,
            "mcp__github__push (MCP server github) {\"branch\":\"main\"}"
        );
        assert_eq!(summary("list_tasks", &serde_json::json!({})), "list_tasks");
        // An exec's command line is whole, however long.
        let line = format!("echo {big}");
        assert_eq!(summary("exec", &serde_json::json!({"command": line})), line);
        // What listings show is escaped, and the input is there whole.
        let mut r = request("ap-x", Utc::now());
        r.input_json = serde_json::json!({"command": "touch X #\r\x1b[2Kls -la"}).to_string();
        r.summary = "stale".into();
        let info = r.info();
        assert_eq!(info.summary, "touch X #\\r\\x1b[2Kls -la");
        let back: serde_json::Value = serde_json::from_str(&info.input).unwrap();
        assert_eq!(back["command"], "touch X #\r\x1b[2Kls -la");
    }

    #[test]
    fn overdue_requests_expire_with_the_policy_wording() {
        let d = tempfile::tempdir().unwrap();
        let id = new_id();
        let asked = Utc::now() - chrono::Duration::seconds(120);
        let overdue = request(&id, asked);
        write_request(d.path(), &overdue).unwrap();
        let fresh = new_id();
        write_request(d.path(), &request(&fresh, Utc::now())).unwrap();
        assert!(Utc::now() >= overdue.expires_at());
        assert!(Utc::now() < request(&fresh, Utc::now()).expires_at());
        let expired = Answer {
            decision: Decision::Expired {
                after_s: overdue.timeout_s,
            },
            by: "policy".into(),
            at: Utc::now(),
        };
        answer(d.path(), &id, &expired).unwrap();
        let a = read_answer(d.path(), &id).unwrap();
        assert_eq!(
            a.decision.refusal().as_deref(),
            Some("denied: no answer within 60 s")
        );
        assert_eq!(pending(d.path()).len(), 1);
        assert_eq!(
            Decision::Denied {
                reason: Some("too risky".into())
            }
            .refusal()
            .as_deref(),
            Some("denied by the user: too risky")
        );
    }
}
