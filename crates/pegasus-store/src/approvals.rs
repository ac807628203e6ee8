//! Approvals (SPEC §11, "people in the loop"): the policy that says which tool calls need a
//! person's yes, and the durable requests and answers under `<project>/approvals/`.
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
//! Pending = a request in `approvals/` without an answer. pegasusd writes answers only; the
//! worker writes everything else, and answers for timeouts.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::atomic::{fsync_dir, write_atomic};
use crate::error::{Result, StoreError};
use pegasus_proto::shown::escape;

/// The folder of a project's approvals.
pub const APPROVALS_DIR: &str = "approvals";
/// Default `approvals.timeout_s`: an hour.
pub const DEFAULT_TIMEOUT_S: u64 = 3600;
/// The pseudo-tool name of a merge approval (`merge: ask`).
pub const MERGE_TOOL: &str = "merge";

/// What the policy says about one tool or command; ordered from the least strict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Allow,
    Ask,
    Deny,
}

/// `approvals.merge`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MergeMode {
    #[default]
    Auto,
    Ask,
}

/// One `approvals:` block as written, in config.yml or PROJECT.md.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApprovalsConfig {
    /// `exec: allow | ask | deny` (the same as `tools: {exec: ...}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exec: Option<Mode>,
    /// Exec command lines that never ask (globs over the whole line).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    /// Tool name glob -> mode, for any tool (MCP tools included).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub tools: BTreeMap<String, Mode>,
    /// `merge: auto | ask`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merge: Option<MergeMode>,
    /// How long a request waits for its answer, from `asked_at`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_s: Option<u64>,
}

impl ApprovalsConfig {
    /// Reads a PROJECT.md `approvals` value; the error names what is wrong and what to write.
    pub fn from_yaml(v: Option<&serde_norway::Value>) -> std::result::Result<Self, String> {
        match v {
            None | Some(serde_norway::Value::Null) => Ok(Self::default()),
            Some(v) => {
                let c: Self = serde_norway::from_value(v.clone()).map_err(|e| {
                    format!("{e}; expected e.g. {{exec: ask, allow: [\"cargo test*\"], tools: {{\"mcp__*\": ask}}, merge: ask, timeout_s: 3600}}")
                })?;
                c.check()?;
                Ok(c)
            }
        }
    }

    /// Refuses what would read as something else than meant.
    pub fn check(&self) -> std::result::Result<(), String> {
        if self.timeout_s == Some(0) {
            return Err("timeout_s must be at least 1 (seconds)".into());
        }
        if let Some(g) = self.allow.iter().find(|g| g.trim().is_empty()) {
            return Err(format!("allow has an empty glob `{g}`: remove it"));
        }
        if self.tools.keys().any(|g| g.trim().is_empty()) {
            return Err("tools has an empty name: remove it".into());
        }
        Ok(())
    }

    /// The project's block over the config's: scalars replace, `allow` extends, `tools` merge
    /// per glob with the project's winning.
    pub fn under(&self, project: &ApprovalsConfig) -> ApprovalsConfig {
        let mut out = self.clone();
        if project.exec.is_some() {
            // The same as the project writing `tools: {exec: ...}`: it wins over the config's.
            out.exec = project.exec;
            out.tools.remove("exec");
        }
        for g in &project.allow {
            if !out.allow.contains(g) {
                out.allow.push(g.clone());
            }
        }
        out.tools.extend(project.tools.clone());
        out.merge = project.merge.or(out.merge);
        out.timeout_s = project.timeout_s.or(out.timeout_s);
        out
    }

    /// Seconds a request waits.
    pub fn timeout(&self) -> u64 {
        self.timeout_s.unwrap_or(DEFAULT_TIMEOUT_S)
    }

    /// `merge: ask`, and no `tools: {merge: allow}` (what `approve --always` on a merge wrote
    /// before it wrote `merge: auto`) that says otherwise?
    pub fn merge_asks(&self) -> bool {
        self.merge == Some(MergeMode::Ask) && self.tools.get(MERGE_TOOL) != Some(&Mode::Allow)
    }

    /// What the policy says about a call of `tool` (for `exec`, `command` is its line).
    pub fn decide(&self, tool: &str, command: Option<&str>) -> Verdict {
        // `exec:` is `tools: {exec: ...}`: an exact name, so it beats every glob. Otherwise the
        // most specific glob that matches the name: an exact name first, then the one with the
        // most literal characters, then the stricter mode.
        let exec_key = (tool == "exec" && !self.tools.contains_key("exec"))
            .then_some(self.exec)
            .flatten();
        let entry = self
            .tools
            .iter()
            .filter(|(g, _)| glob_match(g, tool))
            .max_by_key(|(g, m)| (*g == tool, literal_len(g), **m));
        let (mode, label) = match (exec_key, entry) {
            (Some(m), _) => (m, "approvals.exec".to_string()),
            (None, Some((g, m))) => (*m, format!("approvals.tools[{g}]")),
            (None, None) => (Mode::Allow, String::new()),
        };
        match mode {
            Mode::Allow => Verdict::Allow,
            Mode::Deny => Verdict::Deny(label),
            Mode::Ask => match (tool, command) {
                ("exec", Some(line)) if self.allow.iter().any(|g| command_allowed(g, line)) => {
                    Verdict::Allow
                }
                _ => Verdict::Ask,
            },
        }
    }
}

/// The policy's answer for one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    Ask,
    /// Refused; the policy key that refused it (`approvals.tools[GLOB]`).
    Deny(String),
}

/// Shell operators that chain, pipe, substitute or redirect: a command line holding one matches
/// only an `allow` glob that holds the same operator, as many times, so `cargo test*` never
/// lets `cargo test; rm -rf ~` through, and `a && b*` not `a && b & c`. (`&` on its own is one
/// too: it starts a second command.) Longest first: `&&` is not two `&`.
const OPERATORS: [&str; 10] = ["&&", "||", "$(", ";", "|", "`", "<", ">", "\n", "&"];

/// How many times each operator occurs in `s` (`\r` counts as a newline), longest match first.
fn operators(s: &str) -> [usize; OPERATORS.len()] {
    let s = s.replace('\r', "\n");
    let mut counts = [0; OPERATORS.len()];
    let mut rest = s.as_str();
    while let Some(c) = rest.chars().next() {
        match OPERATORS.iter().position(|op| rest.starts_with(op)) {
            Some(i) => {
                counts[i] += 1;
                rest = &rest[OPERATORS[i].len()..];
            }
            None => rest = &rest[c.len_utf8()..],
        }
    }
    counts
}

/// Whether `allow` glob `glob` lets command line `line` run without asking.
pub fn command_allowed(glob: &str, line: &str) -> bool {
    let line = line.trim();
    let (have, may) = (operators(line), operators(glob));
    if have.iter().zip(may.iter()).any(|(h, m)| h > m) {
        return false;
    }
    glob_match(glob.trim(), line)
}

/// An exact command line as an `allow` glob that matches only it (`*`, `?`, `[` and `\`
/// escaped).
pub fn exact_glob(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    for c in line.trim().chars() {
        if matches!(c, '*' | '?' | '[' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn literal_len(glob: &str) -> usize {
    glob.chars().filter(|c| !matches!(c, '*' | '?')).count()
}

/// Glob match over the whole text: `*` any run of characters (spaces and `/` included), `?`
/// one character, `\x` the character x; everything else literal.
pub fn glob_match(glob: &str, text: &str) -> bool {
    #[derive(Clone, Copy, PartialEq)]
    enum Tok {
        Any,
        One,
        Lit(char),
    }
    let mut toks = Vec::new();
    let mut it = glob.chars();
    while let Some(c) = it.next() {
        toks.push(match c {
            '*' => Tok::Any,
            '?' => Tok::One,
            '\\' => Tok::Lit(it.next().unwrap_or('\\')),
            c => Tok::Lit(c),
        });
    }
    let text: Vec<char> = text.chars().collect();
    // Iterative matching with one backtrack point for the last `*`.
    let (mut g, mut t) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match toks.get(g) {
            Some(Tok::Any) => {
                star = Some((g, t));
                g += 1;
            }
            Some(Tok::One) => {
                g += 1;
                t += 1;
            }
            Some(Tok::Lit(c)) if *c == text[t] => {
                g += 1;
                t += 1;
            }
            _ => match star {
                Some((sg, st)) => {
                    g = sg + 1;
                    t = st + 1;
                    star = Some((sg, st + 1));
                }
                None => return false,
            },
        }
    }
    toks[g.min(toks.len())..].iter().all(|t| *t == Tok::Any)
}

/// A tool call waiting for a person (the JSON of `pegasusctl approvals --json` is its first
/// six fields).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRequest {
    pub id: String,
    pub project: String,
    pub task: String,
    pub tool: String,
    /// The whole exec command line, or the tool and its arguments.
    pub summary: String,
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
    Approved {
        /// `--always`: the line or tool was added to the project's allow list too.
        #[serde(default)]
        always: bool,
    },
    Denied {
        #[serde(default)]
        reason: Option<String>,
    },
    /// No answer within the timeout.
    Expired { after_s: u64 },
    /// The task was cancelled (or ended) while it waited.
    Withdrawn { why: String },
}

impl Decision {
    /// What goes back to the model as the tool's result when the call does not run (SPEC
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
    #[serde(flatten)]
    pub decision: Decision,
    /// The channel it came from (`cli`, `dashboard`, `telegram:<chat>`, `policy`).
    pub by: String,
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

/// Writes a new request durably.
pub fn write_request(project_dir: &Path, req: &ApprovalRequest) -> Result<()> {
    let d = dir(project_dir);
    crate::atomic::create_dir_all_durable(&d)?;
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
    Store(StoreError),
}

/// Records `answer` for request `id` unless it already has one: exactly one answer ever wins.
pub fn answer(
    project_dir: &Path,
    id: &str,
    answer: &Answer,
) -> std::result::Result<(), AnswerError> {
    if !valid_id(id) || !request_path(project_dir, id).exists() {
        return Err(AnswerError::NotFound);
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
        Ok(()) => {
            fsync_dir(&dir(project_dir)).map_err(AnswerError::Store)?;
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            match read_answer(project_dir, id) {
                Some(a) => Err(AnswerError::Already(a)),
                None => Err(AnswerError::Store(StoreError::Invalid(format!(
                    "approval {id} has an answer that cannot be read"
                )))),
            }
        }
        Err(e) => Err(AnswerError::Store(StoreError::io(&path)(e))),
    }
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
    let capped = crate::read::read_capped(path, MAX_APPROVAL_FILE).ok()?;
    if capped.truncated() {
        return None;
    }
    serde_json::from_slice(&capped.bytes).ok()
}

/// Marks request `id` as about to run (durably): it never runs again after this.
pub fn mark_ran(project_dir: &Path, id: &str) -> Result<()> {
    write_atomic(&ran_path(project_dir, id), b"")
}

/// Whether request `id` was marked as run.
pub fn was_run(project_dir: &Path, id: &str) -> bool {
    ran_path(project_dir, id).exists()
}

/// Moves request `id` and its answer to `closed/`: its call has its result.
pub fn close(project_dir: &Path, id: &str) -> Result<()> {
    let closed = dir(project_dir).join("closed");
    crate::atomic::create_dir_all_durable(&closed)?;
    for p in [
        answer_path(project_dir, id),
        ran_path(project_dir, id),
        request_path(project_dir, id),
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
    pub request: ApprovalRequest,
    pub answer: Option<Answer>,
    pub ran: bool,
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
        if let Some(request) = read_json(&e.path()) {
            out.push(Open {
                answer: read_answer(project_dir, id),
                ran: was_run(project_dir, id),
                request,
            });
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
        .filter(|o| o.answer.is_none())
        .map(|o| o.request)
        .collect()
}

/// How many requests of the project wait (cheap when there are none: one failed open).
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
        .filter(|id| valid_id(id))
        .filter(|id| !names.iter().any(|n| *n == format!("{id}.answer.json")))
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

/// The file under the home where pegasusd remembers when it first saw each waiting request.
pub const SEEN_FILE: &str = "approvals.seen";

/// When pegasusd first saw each waiting request (SPEC §11: expiry is judged by pegasusd's
/// clock from that moment, so a remote host whose clock is behind or ahead neither hides its
/// requests nor stretches them). `<home>/approvals.seen`, lines `ID RFC3339`, written
/// atomically by pegasusd only; a request answered or gone is forgotten.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Seen {
    map: BTreeMap<String, DateTime<Utc>>,
}

impl Seen {
    /// The record of the home at `home_root` (empty when missing or unreadable: every request
    /// then counts as seen at its next look).
    pub fn load(home_root: &Path) -> Seen {
        let path = home_root.join(SEEN_FILE);
        let text = crate::read_text_limited(&path, 4 << 20).unwrap_or_default();
        let map = text
            .lines()
            .filter_map(|l| {
                let (id, at) = l.trim().split_once(' ')?;
                let at = DateTime::parse_from_rfc3339(at.trim()).ok()?;
                valid_id(id).then(|| (id.to_string(), at.with_timezone(&Utc)))
            })
            .collect();
        Seen { map }
    }

    /// Writes the record atomically.
    pub fn save(&self, home_root: &Path) -> Result<()> {
        let mut text = String::new();
        for (id, at) in &self.map {
            text.push_str(&format!(
                "{id} {}\n",
                at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
            ));
        }
        write_atomic(&home_root.join(SEEN_FILE), text.as_bytes())
    }

    /// When pegasusd first saw request `id`.
    pub fn get(&self, id: &str) -> Option<DateTime<Utc>> {
        self.map.get(id).copied()
    }

    /// When `request` runs out of time by pegasusd's clock (one not seen yet counts as seen
    /// `now`).
    pub fn expires_at(&self, request: &ApprovalRequest, now: DateTime<Utc>) -> DateTime<Utc> {
        let from = self.get(&request.id).unwrap_or(now);
        from + chrono::Duration::seconds(request.timeout_s.min(i64::MAX as u64 / 4) as i64)
    }

    /// Notes the first sight of `id` at `now`; whether it is new.
    pub fn note(&mut self, id: &str, now: DateTime<Utc>) -> bool {
        if !valid_id(id) || self.map.contains_key(id) {
            return false;
        }
        self.map.insert(id.to_string(), now);
        true
    }

    /// Forgets every request not in `waiting`; whether any was forgotten.
    pub fn keep_only(&mut self, waiting: &std::collections::HashSet<&str>) -> bool {
        let before = self.map.len();
        self.map.retain(|id, _| waiting.contains(id.as_str()));
        self.map.len() != before
    }
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
        read_json(
            &dir(&e.path())
                .join("closed")
                .join(format!("{id}.answer.json")),
        )
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
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn policy(yaml: &str) -> ApprovalsConfig {
        let v: serde_norway::Value = serde_norway::from_str(yaml).unwrap();
        ApprovalsConfig::from_yaml(Some(&v)).unwrap()
    }

    #[test]
    fn globs_match_the_whole_text() {
        assert!(glob_match("cargo test*", "cargo test --all"));
        assert!(glob_match("cargo test*", "cargo test"));
        assert!(!glob_match("cargo test*", "xcargo test"));
        assert!(glob_match("git ?tatus", "git status"));
        assert!(glob_match("*", ""));
        assert!(glob_match("a*b*c", "aXXbYYc"));
        assert!(!glob_match("a*b*c", "aXXbYY"));
        assert!(glob_match("mcp__*", "mcp__github__search"));
        assert!(glob_match(r"echo \*", "echo *"));
        assert!(!glob_match(r"echo \*", "echo x"));
    }

    #[test]
    fn shell_operators_cannot_slip_past_an_allow_glob() {
        for line in [
            "cargo test; rm -rf ~",
            "cargo test && rm -rf ~",
            "cargo test || rm -rf ~",
            "cargo test | sh",
            "cargo test `rm -rf ~`",
            "cargo test $(rm -rf ~)",
            "cargo test > /etc/passwd",
            "cargo test < /dev/zero",
            "cargo test\nrm -rf ~",
            "cargo test\rrm -rf ~",
            "cargo test & rm -rf ~",
        ] {
            assert!(!command_allowed("cargo test*", line), "{line:?}");
        }
        assert!(command_allowed("cargo test*", "cargo test --all"));
        // `&&` in a glob is not two `&`, `||` not a `|`, and one operator not two.
        assert!(!command_allowed("a && b*", "a && b & rm -rf ~"));
        assert!(!command_allowed(
            "make || echo*",
            "make || echo failed | sh"
        ));
        assert!(command_allowed("a && b*", "a && b --x"));
        assert!(!command_allowed(
            "cargo test* | tee *",
            "cargo test | tee log | sh"
        ));
        // A glob that holds the operator may match it.
        assert!(command_allowed(
            "cargo test* | tee *",
            "cargo test | tee log"
        ));
        assert!(!command_allowed(
            "cargo test* | tee *",
            "cargo test | tee log; rm x"
        ));
        // The exact line of `approve --always` matches itself only.
        let line = "ls *.rs && echo [done]?";
        assert!(command_allowed(&exact_glob(line), line));
        assert!(!command_allowed(
            &exact_glob(line),
            "ls a.rs && echo [done]?"
        ));
    }

    #[test]
    fn verdicts_follow_exec_allow_and_tool_globs() {
        let p = policy(
            "exec: ask\nallow: [\"git status\", \"cargo test*\"]\ntools: {\"mcp__*\": ask, \"mcp__safe__*\": allow, write_file: deny}",
        );
        assert_eq!(p.decide("exec", Some("git status")), Verdict::Allow);
        assert_eq!(p.decide("exec", Some("cargo test -q")), Verdict::Allow);
        assert_eq!(p.decide("exec", Some("rm -rf build")), Verdict::Ask);
        assert_eq!(p.decide("exec", Some("git status; rm x")), Verdict::Ask);
        assert_eq!(p.decide("mcp__github__push", None), Verdict::Ask);
        assert_eq!(p.decide("mcp__safe__read", None), Verdict::Allow);
        assert_eq!(
            p.decide("write_file", None),
            Verdict::Deny("approvals.tools[write_file]".into())
        );
        assert_eq!(p.decide("read_file", None), Verdict::Allow);
        // Defaults: everything allowed.
        let d = ApprovalsConfig::default();
        assert_eq!(d.decide("exec", Some("rm -rf /")), Verdict::Allow);
        assert_eq!(d.timeout(), 3600);
        assert!(!d.merge_asks());
        // `tools: {exec: ...}` is the same as `exec:` and wins over it.
        let t = policy("exec: allow\ntools: {exec: deny}");
        assert_eq!(
            t.decide("exec", Some("ls")),
            Verdict::Deny("approvals.tools[exec]".into())
        );
        assert_eq!(
            policy("exec: deny").decide("exec", Some("ls")),
            Verdict::Deny("approvals.exec".into())
        );
        // `exec:` is exact: no glob overrides it; ties between globs go to the stricter mode.
        let g = policy("exec: deny\ntools: {\"*\": allow, \"e*\": allow}");
        assert_eq!(
            g.decide("exec", Some("rm -rf ~")),
            Verdict::Deny("approvals.exec".into())
        );
        let tie = policy("tools: {\"*__push\": allow, \"mcp__*h\": deny}");
        assert!(matches!(
            tie.decide("mcp__gh__push", None),
            Verdict::Deny(_)
        ));
        // A project's `exec:` wins over the config's `tools: {exec: ...}`.
        let merged = policy("tools: {exec: deny}").under(&policy("exec: allow"));
        assert_eq!(merged.decide("exec", Some("ls")), Verdict::Allow);
    }

    #[test]
    fn a_project_block_extends_allow_and_wins_per_glob() {
        let config = policy(
            "exec: ask\nallow: [\"ls\"]\ntools: {\"mcp__*\": ask, edit_file: ask}\ntimeout_s: 60",
        );
        let project = policy("allow: [\"make\"]\ntools: {\"mcp__*\": allow}\nmerge: ask");
        let p = config.under(&project);
        assert_eq!(p.exec, Some(Mode::Ask));
        assert_eq!(p.allow, vec!["ls".to_string(), "make".to_string()]);
        assert_eq!(p.decide("mcp__x__y", None), Verdict::Allow);
        assert_eq!(p.decide("edit_file", None), Verdict::Ask);
        assert!(p.merge_asks());
        assert_eq!(p.timeout(), 60);
    }

    #[test]
    fn bad_policies_are_refused_with_what_to_write() {
        for bad in [
            "exec: maybe",
            "tools: {exec: sometimes}",
            "timeout_s: 0",
            "timeout_s: -1",
            "merge: never",
            "allow: [\"\"]",
            "unknown: 1",
        ] {
            let v: serde_norway::Value = serde_norway::from_str(bad).unwrap();
            assert!(ApprovalsConfig::from_yaml(Some(&v)).is_err(), "{bad}");
        }
    }

    fn request(id: &str, asked_at: DateTime<Utc>) -> ApprovalRequest {
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
        assert!(!open[0].ran);
        mark_ran(&p, &id).unwrap();
        assert!(open_requests(&p)[0].ran);
        close(&p, &id).unwrap();
        assert!(open_requests(&p).is_empty());
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
    fn pegasusds_clock_starts_when_it_first_sees_a_request() {
        let home = tempfile::tempdir().unwrap();
        let now = Utc::now();
        // Asked five hours ago by a host's clock: pegasusd sees it now, so it waits its 60 s.
        let behind = request("ap-behind", now - chrono::Duration::hours(5));
        let mut seen = Seen::load(home.path());
        assert!(seen.note("ap-behind", now));
        assert!(!seen.note("ap-behind", now + chrono::Duration::seconds(30)));
        assert!(!seen.note("../x", now));
        assert_eq!(
            seen.expires_at(&behind, now + chrono::Duration::seconds(50)),
            now + chrono::Duration::seconds(60)
        );
        seen.save(home.path()).unwrap();
        let again = Seen::load(home.path());
        let ms = |t: DateTime<Utc>| t.timestamp_millis();
        assert_eq!(again.get("ap-behind").map(ms), Some(ms(now)));
        // Unseen: counts from now.
        let other = request("ap-other", now - chrono::Duration::hours(5));
        assert_eq!(
            again.expires_at(&other, now),
            now + chrono::Duration::seconds(60)
        );
        let mut pruned = again.clone();
        assert!(pruned.keep_only(&std::collections::HashSet::from(["ap-other"])));
        assert_eq!(pruned.get("ap-behind"), None);
        // `waiting` lists it by that clock.
        let projects = home.path().join("projects");
        let p = projects.join("web");
        std::fs::create_dir_all(&p).unwrap();
        write_request(&p, &behind).unwrap();
        assert_eq!(waiting(&projects, None).len(), 1);
        let mut old = Seen::default();
        old.note("ap-behind", now - chrono::Duration::seconds(61));
        assert!(waiting_seen(&projects, None, &old).is_empty());
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
