//! PROJECT.md: a project's definition and lifecycle status (SPEC §3, seed 000).
//!
//! The file is YAML frontmatter between two `---` lines, then a markdown body that becomes the
//! project agent's system prompt. Users edit it by hand, so this module keeps their text
//! exactly: it validates the known keys (reporting the file line and key), keeps unknown keys,
//! comments and order, and changes a status by editing only the lines of the keys it sets.

use std::fmt;
use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use chrono::{DateTime, SecondsFormat, Utc};
use pulldown_cmark::{Event, HeadingLevel, Parser, Tag, TagEnd};
use serde::{Deserialize, Serialize};
use serde_norway::{Mapping, Value};

use crate::atomic::{create_dir_all_durable, fsync_dir, unique_suffix, write_atomic};
use crate::error::{Result, StoreError};
use crate::home::Home;
use crate::lifecycle::{transition, Verb};
use crate::yaml::{is_key_line, problem, top_level_key_line};

/// The file name of a project definition inside its folder.
pub const PROJECT_FILE: &str = "PROJECT.md";

/// Subfolders every project has (SPEC §3), created with the project so later writers never
/// have to guess whether a directory exists.
pub const PROJECT_SUBDIRS: [&str; 6] = [
    "session",
    "tasks",
    "memory/facts",
    "memory/episodes",
    "skills",
    "artifacts",
];

/// Where a project is in its lifecycle (see [`crate::lifecycle`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProjectStatus {
    /// A worker runs (or should run) for it.
    Active,
    /// Stopped on purpose; its session waits for a resume.
    Suspended,
    /// Its goal is reached; no worker.
    Completed,
    /// Put away; kept on disk, hidden from everyday lists.
    Archived,
}

impl ProjectStatus {
    /// Every status, for exhaustive tests and help texts.
    pub const ALL: [ProjectStatus; 4] = [
        ProjectStatus::Active,
        ProjectStatus::Suspended,
        ProjectStatus::Completed,
        ProjectStatus::Archived,
    ];

    /// The lowercase name written in PROJECT.md and shown to users.
    pub fn as_str(self) -> &'static str {
        match self {
            ProjectStatus::Active => "active",
            ProjectStatus::Suspended => "suspended",
            ProjectStatus::Completed => "completed",
            ProjectStatus::Archived => "archived",
        }
    }

    /// Parses the lowercase name; `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|st| st.as_str() == s)
    }
}

impl fmt::Display for ProjectStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Checks a project name against `^[a-z0-9][a-z0-9-]{0,62}$`: names become folder names, socket
/// ids and channel ids, so they must be short and shell- and path-safe.
pub fn validate_name(name: &str) -> Result<()> {
    let b = name.as_bytes();
    let ok_char = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    let ok = !b.is_empty()
        && b.len() <= 63
        && ok_char(&b[0])
        && b.iter().all(|c| ok_char(c) || *c == b'-');
    if ok {
        Ok(())
    } else {
        Err(StoreError::Invalid(format!(
            "invalid project name `{}`: use 1-63 lowercase letters, digits and dashes, starting with a letter or digit",
            name.escape_debug()
        )))
    }
}

/// Why a model id is not `provider/model`, if it is not.
fn check_model(model: &str) -> std::result::Result<(), String> {
    match model.split_once('/') {
        Some((p, m)) if !p.trim().is_empty() && !m.trim().is_empty() => Ok(()),
        _ => Err(format!(
            "model `{}` must be `provider/model`, e.g. anthropic/claude-sonnet-4-5",
            model.escape_debug()
        )),
    }
}

/// A timestamp as written in PROJECT.md: RFC 3339, UTC, whole seconds.
fn format_ts(ts: DateTime<Utc>) -> String {
    ts.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// What `project create` supplies.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NewProject {
    /// Folder and project name; see [`validate_name`].
    pub name: String,
    /// What the project should achieve; the first section of the system prompt.
    pub goal: String,
    /// Context the agent needs (optional `## Background`).
    pub background: Option<String>,
    /// Rules the agent must follow (optional `## Constraints`).
    pub constraints: Option<String>,
    /// `provider/model` override of the configured default.
    pub model: Option<String>,
    /// External working directory for code projects.
    pub workdir: Option<PathBuf>,
}

/// The typed view of the known frontmatter keys.
#[derive(Debug, Clone, PartialEq)]
struct Known {
    name: String,
    status: ProjectStatus,
    model: Option<String>,
    workdir: Option<PathBuf>,
    created: DateTime<Utc>,
    suspended: Option<DateTime<Utc>>,
    completed: Option<DateTime<Utc>>,
    budget_usd: Option<f64>,
}

/// A parsed PROJECT.md: typed known fields + the exact original frontmatter text (so unknown
/// keys, their order and comments survive) + the body kept byte-for-byte.
#[derive(Debug, Clone, PartialEq)]
pub struct ProjectFile {
    /// The whole file, exactly as read or last rendered.
    text: String,
    /// Byte range of the frontmatter lines (between the two `---` lines).
    fm_start: usize,
    fm_end: usize,
    /// Byte offset where the body starts (after the closing `---` line).
    body_start: usize,
    known: Known,
}

/// Where the frontmatter sits in a file's text.
struct Layout {
    fm_start: usize,
    fm_end: usize,
    body_start: usize,
    /// 1-based line of the closing `---`.
    close_line: usize,
}

fn is_delimiter(line: &str) -> bool {
    line.trim_end() == "---"
}

fn layout(text: &str, path: &Path) -> Result<Layout> {
    let mut lines = text.split_inclusive('\n');
    let first = lines.next().unwrap_or("");
    if !is_delimiter(first) {
        return Err(StoreError::Parse {
            path: path.to_path_buf(),
            line: 1,
            key: None,
            message: "missing frontmatter: start the file with a line `---`, then `key: value` lines, then `---`".into(),
        });
    }
    let fm_start = first.len();
    let mut offset = fm_start;
    for (i, line) in lines.enumerate() {
        if is_delimiter(line) {
            return Ok(Layout {
                fm_start,
                fm_end: offset,
                body_start: offset + line.len(),
                close_line: i + 2,
            });
        }
        offset += line.len();
    }
    Err(StoreError::Parse {
        path: path.to_path_buf(),
        line: 1,
        key: None,
        message: "the frontmatter opened here is never closed: add a line `---` after the last key"
            .into(),
    })
}

/// Builds Parse errors for one file, knowing where each key sits.
struct Ctx<'a> {
    path: &'a Path,
    fm: &'a str,
    close_line: usize,
}

impl Ctx<'_> {
    fn line_of(&self, key: &str) -> usize {
        top_level_key_line(self.fm, key).map_or(2, |i| i + 2)
    }

    fn err(&self, key: &str, message: String) -> StoreError {
        StoreError::Parse {
            path: self.path.to_path_buf(),
            line: self.line_of(key),
            key: Some(key.to_string()),
            message,
        }
    }

    fn missing(&self, key: &str, example: &str) -> StoreError {
        StoreError::Parse {
            path: self.path.to_path_buf(),
            line: self.close_line,
            key: Some(key.to_string()),
            message: format!("missing required key: add `{key}: {example}` to the frontmatter"),
        }
    }

    fn timestamp(&self, key: &str, v: &Value) -> Result<Option<DateTime<Utc>>> {
        match v {
            Value::Null => Ok(None),
            Value::String(s) => DateTime::parse_from_rfc3339(s.trim())
                .map(|t| Some(t.with_timezone(&Utc)))
                .map_err(|_| {
                    self.err(
                        key,
                        format!(
                            "invalid timestamp `{}`: use RFC 3339, e.g. 2026-02-28T10:00:00Z",
                            s.escape_debug()
                        ),
                    )
                }),
            _ => Err(self.err(
                key,
                "must be an RFC 3339 timestamp, e.g. 2026-02-28T10:00:00Z".into(),
            )),
        }
    }

    fn opt_string(&self, key: &str, v: Option<&Value>) -> Result<Option<String>> {
        match v {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(self.err(key, "must be a string: quote it".into())),
        }
    }

    fn known(&self, map: &Mapping) -> Result<Known> {
        let name = match map.get("name") {
            None => return Err(self.missing("name", "my-project")),
            Some(Value::String(s)) => s.clone(),
            Some(_) => {
                return Err(self.err(
                    "name",
                    "must be a string: quote it, e.g. name: \"123\"".into(),
                ))
            }
        };
        if let Err(StoreError::Invalid(m)) = validate_name(&name) {
            return Err(self.err("name", m));
        }
        let status = match map.get("status") {
            None => return Err(self.missing("status", "active")),
            Some(Value::String(s)) => ProjectStatus::parse(s).ok_or_else(|| {
                self.err(
                    "status",
                    format!(
                        "unknown status `{}` (expected active, suspended, completed or archived)",
                        s.escape_debug()
                    ),
                )
            })?,
            Some(_) => {
                return Err(self.err(
                    "status",
                    "must be one of active, suspended, completed or archived".into(),
                ))
            }
        };
        let model = self.opt_string("model", map.get("model"))?;
        if let Some(m) = &model {
            check_model(m).map_err(|msg| self.err("model", msg))?;
        }
        let workdir = self.opt_string("workdir", map.get("workdir"))?;
        if workdir.as_deref().is_some_and(|w| w.trim().is_empty()) {
            return Err(self.err("workdir", "is empty: give a path or remove the key".into()));
        }
        let created = match map.get("created") {
            None | Some(Value::Null) => None,
            Some(v) => self.timestamp("created", v)?,
        }
        .ok_or_else(|| self.missing("created", "2026-02-28T10:00:00Z"))?;
        let suspended = match map.get("suspended") {
            None => None,
            Some(v) => self.timestamp("suspended", v)?,
        };
        let completed = match map.get("completed") {
            None => None,
            Some(v) => self.timestamp("completed", v)?,
        };
        let budget_usd = match map.get("budget_usd") {
            None | Some(Value::Null) => None,
            Some(v) => match v.as_f64() {
                Some(x) if x.is_finite() && x >= 0.0 => Some(x),
                _ => {
                    return Err(self.err(
                        "budget_usd",
                        "must be a number of US dollars >= 0, e.g. 5.0".into(),
                    ))
                }
            },
        };
        Ok(Known {
            name,
            status,
            model,
            workdir: workdir.map(PathBuf::from),
            created,
            suspended,
            completed,
            budget_usd,
        })
    }
}

/// Parses the frontmatter YAML into a mapping (empty frontmatter = empty mapping), with YAML
/// errors placed on the file line.
fn frontmatter_mapping(fm: &str, path: &Path) -> Result<Mapping> {
    let value: Value = serde_norway::from_str(fm).map_err(|e| {
        let p = problem(&e);
        StoreError::Parse {
            path: path.to_path_buf(),
            // +1 for the opening `---` line.
            line: p.line.map_or(1, |l| l + 1),
            key: p.key,
            message: p.message,
        }
    })?;
    match value {
        Value::Null => Ok(Mapping::new()),
        Value::Mapping(m) => Ok(m),
        _ => Err(StoreError::Parse {
            path: path.to_path_buf(),
            line: 2,
            key: None,
            message: "the frontmatter must be `key: value` lines".into(),
        }),
    }
}

/// `key: value` as YAML lines (no trailing newline), quoting the value as needed so it reads
/// back as the same value and never produces a `---` line.
fn render_entry(key: &str, value: &Value) -> Result<String> {
    let mut m = Mapping::new();
    m.insert(Value::String(key.to_string()), value.clone());
    let s = serde_norway::to_string(&m)
        .map_err(|e| StoreError::Invalid(format!("cannot write key `{key}` as YAML: {e}")))?;
    Ok(s.trim_end_matches('\n').to_string())
}

/// Whether a line after a `key:` line still belongs to that key's value (indented lines, and
/// `- item` lines of a block sequence written at column 0).
fn is_continuation(line: &str) -> bool {
    let l = line.trim_end_matches(['\n', '\r']);
    l.is_empty() || l.starts_with([' ', '\t']) || l == "-" || l.starts_with("- ")
}

/// Column (in chars) and text of a trailing `# comment` on a single-line `key: value` entry, so
/// replacing the value keeps the comment.
fn trailing_comment(line: &str, key: &str) -> Option<(usize, String)> {
    let l = line.trim_end_matches(['\n', '\r']);
    for (i, _) in l.match_indices('#') {
        let before = &l[..i];
        if !before.ends_with([' ', '\t']) {
            continue;
        }
        // The `#` starts a comment only if what precedes it is a complete entry for `key`.
        if let Ok(Value::Mapping(m)) = serde_norway::from_str::<Value>(before.trim_end()) {
            if m.len() == 1 && m.contains_key(key) {
                return Some((before.chars().count(), l[i..].to_string()));
            }
        }
    }
    None
}

/// Replaces the top-level entry of `key` in frontmatter text `fm` with `entry` (its own lines
/// and continuation lines only), or appends it at the end; every other byte is kept.
fn edit_frontmatter(fm: &str, key: &str, entry: &str) -> String {
    let lines: Vec<&str> = fm.split_inclusive('\n').collect();
    let Some(start) = lines.iter().position(|l| is_key_line(l, key)) else {
        let mut out = fm.to_string();
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(entry);
        out.push('\n');
        return out;
    };
    let mut end = start + 1;
    while end < lines.len() && is_continuation(lines[end]) {
        end += 1;
    }
    // Blank lines after the value separate it from what follows; they are not part of it.
    while end > start + 1 && lines[end - 1].trim().is_empty() {
        end -= 1;
    }
    let newline = if lines[end - 1].ends_with("\r\n") {
        "\r\n"
    } else {
        "\n"
    };
    let mut replacement = entry.to_string();
    if end == start + 1 && !entry.contains('\n') {
        if let Some((col, comment)) = trailing_comment(lines[start], key) {
            let width = replacement.chars().count();
            let pad = if width < col { col - width } else { 1 };
            replacement.push_str(&" ".repeat(pad));
            replacement.push_str(&comment);
        }
    }
    let mut out = String::with_capacity(fm.len() + entry.len());
    lines[..start].iter().for_each(|l| out.push_str(l));
    out.push_str(&replacement);
    out.push_str(newline);
    lines[end..].iter().for_each(|l| out.push_str(l));
    out
}

impl ProjectFile {
    /// Renders a fresh PROJECT.md for a new project: `status: active`, `created: <now>`,
    /// `suspended`/`completed` null, and a body with `## Goal` plus the optional sections.
    pub fn new(p: &NewProject, now: DateTime<Utc>) -> Result<Self> {
        validate_name(&p.name)?;
        let goal = p.goal.trim();
        if goal.is_empty() {
            return Err(StoreError::Invalid(
                "a project needs a goal: say in a sentence what it should achieve".into(),
            ));
        }
        let mut fm = String::new();
        let mut entry = |k: &str, v: Value| -> Result<()> {
            fm.push_str(&render_entry(k, &v)?);
            fm.push('\n');
            Ok(())
        };
        entry("name", Value::String(p.name.clone()))?;
        entry(
            "status",
            Value::String(ProjectStatus::Active.as_str().into()),
        )?;
        if let Some(m) = &p.model {
            check_model(m).map_err(StoreError::Invalid)?;
            entry("model", Value::String(m.clone()))?;
        }
        if let Some(w) = &p.workdir {
            let w = w.to_str().filter(|w| !w.trim().is_empty()).ok_or_else(|| {
                StoreError::Invalid(format!(
                    "workdir {} must be a non-empty UTF-8 path",
                    w.display()
                ))
            })?;
            entry("workdir", Value::String(w.into()))?;
        }
        fm.push_str(&format!("created: {}\n", format_ts(now)));
        fm.push_str("suspended: null\ncompleted: null\n");
        let mut body = format!("\n## Goal\n\n{goal}\n");
        for (title, text) in [
            ("Background", &p.background),
            ("Constraints", &p.constraints),
        ] {
            if let Some(t) = text.as_deref().map(str::trim).filter(|t| !t.is_empty()) {
                body.push_str(&format!("\n## {title}\n\n{t}\n"));
            }
        }
        Self::parse(&format!("---\n{fm}---\n{body}"), Path::new(PROJECT_FILE))
    }

    /// Parses PROJECT.md text; `path` only labels error messages. Every known key is checked
    /// and an error names the file line and key; unknown keys are allowed and kept.
    pub fn parse(text: &str, path: &Path) -> Result<Self> {
        let lay = layout(text, path)?;
        let fm = &text[lay.fm_start..lay.fm_end];
        let map = frontmatter_mapping(fm, path)?;
        let ctx = Ctx {
            path,
            fm,
            close_line: lay.close_line,
        };
        let known = ctx.known(&map)?;
        Ok(ProjectFile {
            text: text.to_string(),
            fm_start: lay.fm_start,
            fm_end: lay.fm_end,
            body_start: lay.body_start,
            known,
        })
    }

    /// Reads and parses `<project_dir>/PROJECT.md` and checks that its name is the folder's,
    /// since the folder name is how every other part of Pegasus finds the project.
    pub fn load(project_dir: &Path) -> Result<Self> {
        let path = project_dir.join(PROJECT_FILE);
        let folder = std::path::absolute(project_dir)
            .ok()
            .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_default();
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == ErrorKind::NotFound => return Err(StoreError::NotFound(folder)),
            Err(e) => return Err(StoreError::Io { path, source: e }),
        };
        let text = String::from_utf8(bytes).map_err(|e| {
            let good = &e.as_bytes()[..e.utf8_error().valid_up_to()];
            StoreError::Parse {
                line: good.iter().filter(|&&b| b == b'\n').count() + 1,
                path: path.clone(),
                key: None,
                message: "not valid UTF-8 text: save the file as UTF-8".into(),
            }
        })?;
        let file = Self::parse(&text, &path)?;
        if file.name() != folder {
            return Err(StoreError::Parse {
                line: file.key_line("name"),
                path,
                key: Some("name".into()),
                message: format!(
                    "name `{}` does not match its folder `{}`: rename one of them",
                    file.name(),
                    folder.escape_debug()
                ),
            });
        }
        Ok(file)
    }

    /// 1-based file line of a top-level frontmatter key (line 2 if not found in block style).
    pub fn key_line(&self, key: &str) -> usize {
        top_level_key_line(self.frontmatter(), key).map_or(2, |i| i + 2)
    }

    /// The full file text (frontmatter + body). `parse(render()) == self`.
    pub fn render(&self) -> String {
        self.text.clone()
    }

    /// Writes [`render`](Self::render) to `<project_dir>/PROJECT.md` atomically.
    pub fn save(&self, project_dir: &Path) -> Result<()> {
        write_atomic(&project_dir.join(PROJECT_FILE), self.text.as_bytes())
    }

    /// The project name (equal to its folder name once loaded).
    pub fn name(&self) -> &str {
        &self.known.name
    }

    /// The lifecycle status.
    pub fn status(&self) -> ProjectStatus {
        self.known.status
    }

    /// The `provider/model` override, if any.
    pub fn model(&self) -> Option<&str> {
        self.known.model.as_deref()
    }

    /// The external working directory, if any.
    pub fn workdir(&self) -> Option<&Path> {
        self.known.workdir.as_deref()
    }

    /// When the project was created.
    pub fn created(&self) -> DateTime<Utc> {
        self.known.created
    }

    /// When it was last suspended.
    pub fn suspended(&self) -> Option<DateTime<Utc>> {
        self.known.suspended
    }

    /// When it was completed.
    pub fn completed(&self) -> Option<DateTime<Utc>> {
        self.known.completed
    }

    /// Its own spending cap in USD, if set.
    pub fn budget_usd(&self) -> Option<f64> {
        self.known.budget_usd
    }

    /// The frontmatter text between the `---` lines, exactly as in the file.
    pub fn frontmatter(&self) -> &str {
        &self.text[self.fm_start..self.fm_end]
    }

    /// The markdown body, exactly as in the file.
    pub fn body(&self) -> &str {
        &self.text[self.body_start..]
    }

    /// Level-2 sections of the body, `(heading text, section text trimmed)`, in order; a section
    /// ends at the next heading of level 1 or 2. Used to build the system prompt.
    pub fn sections(&self) -> Vec<(String, String)> {
        let body = self.body();
        // (level, heading text, heading start, heading end)
        let mut heads: Vec<(HeadingLevel, String, usize, usize)> = Vec::new();
        let mut current: Option<(HeadingLevel, String, usize)> = None;
        for (event, range) in Parser::new(body).into_offset_iter() {
            match event {
                Event::Start(Tag::Heading { level, .. }) => {
                    current = Some((level, String::new(), range.start));
                }
                Event::Text(t) | Event::Code(t) => {
                    if let Some((_, text, _)) = current.as_mut() {
                        text.push_str(&t);
                    }
                }
                Event::End(TagEnd::Heading(_)) => {
                    if let Some((level, text, start)) = current.take() {
                        heads.push((level, text.trim().to_string(), start, range.end));
                    }
                }
                _ => {}
            }
        }
        let mut out = Vec::new();
        for (i, (level, text, _, end)) in heads.iter().enumerate() {
            if *level != HeadingLevel::H2 {
                continue;
            }
            let stop = heads[i + 1..]
                .iter()
                .find(|h| h.0 <= HeadingLevel::H2)
                .map_or(body.len(), |h| h.2);
            let section = body.get(*end..stop).unwrap_or("").trim();
            out.push((text.clone(), section.to_string()));
        }
        out
    }

    /// The text of the `## Goal` section (case-insensitive heading), if present.
    pub fn goal(&self) -> Option<String> {
        self.sections()
            .into_iter()
            .find(|(h, _)| h.eq_ignore_ascii_case("goal"))
            .map(|(_, s)| s)
    }

    /// Value of any frontmatter key (known or unknown) as YAML.
    pub fn get(&self, key: &str) -> Option<Value> {
        frontmatter_mapping(self.frontmatter(), Path::new(PROJECT_FILE))
            .ok()?
            .get(key)
            .cloned()
    }

    /// Sets one top-level frontmatter key, editing only that key's lines (or appending it before
    /// the closing `---`). The result is re-parsed, so an invalid value for a known key is
    /// refused and nothing changes.
    pub fn set(&mut self, key: &str, value: &Value) -> Result<()> {
        let entry = render_entry(key, value)?;
        self.edit(&[(key, entry)])
    }

    /// Applies the edits and re-parses; `self` changes only if the result is valid.
    fn edit(&mut self, edits: &[(&str, String)]) -> Result<()> {
        let mut fm = self.frontmatter().to_string();
        for (key, entry) in edits {
            fm = edit_frontmatter(&fm, key, entry);
        }
        let text = format!(
            "{}{fm}{}",
            &self.text[..self.fm_start],
            &self.text[self.fm_end..]
        );
        *self = Self::parse(&text, Path::new(PROJECT_FILE))?;
        Ok(())
    }

    /// Applies a lifecycle verb at time `now`: sets `status`, plus `suspended: <now>` on suspend
    /// and `completed: <now>` on complete, touching only those lines so unknown keys, comments,
    /// order and the body stay byte-for-byte. A refused transition changes nothing.
    pub fn apply(&mut self, verb: Verb, now: DateTime<Utc>) -> Result<ProjectStatus> {
        let to = transition(self.name(), self.status(), verb)?;
        let mut edits = vec![("status", format!("status: {to}"))];
        match verb {
            Verb::Suspend => edits.push(("suspended", format!("suspended: {}", format_ts(now)))),
            Verb::Complete => edits.push(("completed", format!("completed: {}", format_ts(now)))),
            Verb::Resume | Verb::Archive => {}
        }
        self.edit(&edits)?;
        Ok(to)
    }
}

/// Creates a new project: the SPEC §3 folder tree and its PROJECT.md, built in a hidden temp
/// folder and renamed into `projects/` in one step, so a crash never leaves a half-made
/// project (scans ignore hidden folders). Refuses an existing project with `Exists`.
pub fn create_project(home: &Home, p: &NewProject, now: DateTime<Utc>) -> Result<ProjectFile> {
    let file = ProjectFile::new(p, now)?;
    let projects = home.projects_dir();
    create_dir_all_durable(&projects)?;
    let target = projects.join(&p.name);
    if target.symlink_metadata().is_ok() {
        return Err(StoreError::Exists(p.name.clone()));
    }
    let tmp = projects.join(format!(".tmp-{}-{}", p.name, unique_suffix()));
    fs::create_dir(&tmp).map_err(StoreError::io(&tmp))?;
    let built = build_tree(&tmp, &file).and_then(|()| rename_new(&tmp, &target, &p.name));
    if let Err(e) = built {
        let _ = fs::remove_dir_all(&tmp);
        return Err(e);
    }
    fsync_dir(&projects)?;
    Ok(file)
}

/// Fills a fresh project folder: subfolders first, PROJECT.md last.
fn build_tree(dir: &Path, file: &ProjectFile) -> Result<()> {
    for sub in PROJECT_SUBDIRS {
        let d = dir.join(sub);
        fs::create_dir_all(&d).map_err(StoreError::io(&d))?;
    }
    fsync_dir(&dir.join("memory"))?;
    file.save(dir)
}

/// Renames `from` to `to` unless `to` exists (atomically where the OS allows), so two creators
/// racing for one name cannot overwrite each other.
fn rename_new(from: &Path, to: &Path, name: &str) -> Result<()> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use nix::errno::Errno;
        use nix::fcntl::{renameat2, RenameFlags, AT_FDCWD};
        match renameat2(AT_FDCWD, from, AT_FDCWD, to, RenameFlags::RENAME_NOREPLACE) {
            Ok(()) => return Ok(()),
            Err(Errno::EEXIST | Errno::ENOTEMPTY) => return Err(StoreError::Exists(name.into())),
            // File systems without RENAME_NOREPLACE: fall back to the checked rename below.
            Err(Errno::EINVAL | Errno::ENOSYS) => {}
            Err(e) => {
                return Err(StoreError::Io {
                    path: to.to_path_buf(),
                    source: e.into(),
                });
            }
        }
    }
    if to.symlink_metadata().is_ok() {
        return Err(StoreError::Exists(name.into()));
    }
    fs::rename(from, to).map_err(StoreError::io(to))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use chrono::TimeZone;
    use proptest::prelude::*;

    const SEED: &str = r#"---
name: frontend-redesign
status: active                          # active | suspended | completed | archived
model: "anthropic/claude-sonnet-4-20250514"  # optional, falls back to config default
workdir: /home/user/code/my-app         # optional, for code projects
created: 2026-02-28T10:00:00Z
suspended: null                         # timestamp of last suspension
completed: null                         # timestamp of completion
---

## Goal

Migrate the frontend component library from class components to React hooks.

## Background

- Current code is in src/components/ (~50 components)
- Using React 17, needs upgrade to React 18
- Must maintain backward compatibility during migration

## Constraints

- Migrate in batches, not all at once
- All tests must pass after each batch
- Keep backward compatibility
"#;

    fn at(h: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 3, 1, h, 0, 0).unwrap()
    }

    fn parse(text: &str) -> Result<ProjectFile> {
        ProjectFile::parse(text, Path::new("p/PROJECT.md"))
    }

    fn err_text(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    fn lines_except<'a>(text: &'a str, keys: &[&str]) -> Vec<&'a str> {
        text.lines()
            .filter(|l| !keys.iter().any(|k| is_key_line(l, k)))
            .collect()
    }

    #[test]
    fn parses_the_seed_example() {
        let p = parse(SEED).unwrap();
        assert_eq!(p.name(), "frontend-redesign");
        assert_eq!(p.status(), ProjectStatus::Active);
        assert_eq!(p.model(), Some("anthropic/claude-sonnet-4-20250514"));
        assert_eq!(p.workdir(), Some(Path::new("/home/user/code/my-app")));
        assert_eq!(
            p.created(),
            Utc.with_ymd_and_hms(2026, 2, 28, 10, 0, 0).unwrap()
        );
        assert_eq!(
            (p.suspended(), p.completed(), p.budget_usd()),
            (None, None, None)
        );
        assert!(p.body().starts_with("\n## Goal\n"));
        assert_eq!(p.render(), SEED);
        let sections = p.sections();
        let heads: Vec<_> = sections.iter().map(|(h, _)| h.as_str()).collect();
        assert_eq!(heads, ["Goal", "Background", "Constraints"]);
        assert_eq!(
            p.goal().as_deref(),
            Some("Migrate the frontend component library from class components to React hooks.")
        );
        assert!(
            sections[2].1.starts_with("- Migrate in batches")
                && sections[2].1.ends_with("compatibility")
        );
        assert_eq!(p.get("status"), Some(Value::String("active".into())));
        assert_eq!(p.get("nope"), None);
    }

    #[test]
    fn every_validation_error_names_its_line_and_key() {
        let base = "---\nname: foo\nstatus: active\nmodel: a/b\nworkdir: /w\ncreated: 2026-02-28T10:00:00Z\nsuspended: null\ncompleted: null\nbudget_usd: 3\n---\nbody\n";
        assert!(parse(base).is_ok());
        let cases = [
            (
                "name: foo",
                "name: Foo",
                2,
                "name",
                "invalid project name `Foo`",
            ),
            ("name: foo", "name: 123", 2, "name", "quote it"),
            (
                "status: active",
                "status: actve",
                3,
                "status",
                "unknown status `actve` (expected active, suspended, completed or archived)",
            ),
            (
                "model: a/b",
                "model: gpt4",
                4,
                "model",
                "must be `provider/model`",
            ),
            (
                "model: a/b",
                "model: /b",
                4,
                "model",
                "must be `provider/model`",
            ),
            (
                "workdir: /w",
                "workdir: 5",
                5,
                "workdir",
                "must be a string",
            ),
            (
                "created: 2026-02-28T10:00:00Z",
                "created: yesterday",
                6,
                "created",
                "invalid timestamp `yesterday`",
            ),
            (
                "suspended: null",
                "suspended: 2026-13-01",
                7,
                "suspended",
                "RFC 3339",
            ),
            (
                "completed: null",
                "completed: [1]",
                8,
                "completed",
                "RFC 3339",
            ),
            ("budget_usd: 3", "budget_usd: -1", 9, "budget_usd", ">= 0"),
            ("budget_usd: 3", "budget_usd: lots", 9, "budget_usd", ">= 0"),
        ];
        for (from, to, line, key, msg) in cases {
            let e = err_text(&base.replace(from, to));
            let want = format!("p/PROJECT.md:{line}: key `{key}`: ");
            assert!(e.starts_with(&want), "{to}: {e}");
            assert!(e.contains(msg), "{to}: {e}");
        }
    }

    #[test]
    fn bad_status_on_line_3_is_reported_there() {
        let e = err_text("---\nname: foo\nstatus: actve\ncreated: 2026-02-28T10:00:00Z\n---\n");
        assert!(e.contains("PROJECT.md:3") && e.contains("status"), "{e}");
    }

    #[test]
    fn missing_required_keys_point_at_the_closing_line() {
        let e = err_text("---\nstatus: active\ncreated: 2026-02-28T10:00:00Z\n---\n");
        assert!(
            e.starts_with("p/PROJECT.md:4: key `name`: missing required key"),
            "{e}"
        );
        let e = err_text("---\nname: foo\ncreated: 2026-02-28T10:00:00Z\n---\n");
        assert!(e.starts_with("p/PROJECT.md:4: key `status`"), "{e}");
        let e = err_text("---\nname: foo\nstatus: active\n---\n");
        assert!(e.starts_with("p/PROJECT.md:4: key `created`"), "{e}");
    }

    #[test]
    fn missing_or_unclosed_frontmatter_is_a_line_1_error() {
        let e = err_text("## Goal\n\nno frontmatter\n");
        assert!(e.starts_with("p/PROJECT.md:1: missing frontmatter"), "{e}");
        let e = err_text("");
        assert!(e.starts_with("p/PROJECT.md:1: missing frontmatter"), "{e}");
        let e = err_text("---\nname: foo\n");
        assert!(
            e.starts_with("p/PROJECT.md:1: ") && e.contains("never closed"),
            "{e}"
        );
    }

    #[test]
    fn yaml_syntax_errors_give_the_file_line() {
        let e =
            parse("---\nname: foo\nstatus: active\nbad: [unclosed\ncreated: x\n---\n").unwrap_err();
        match e {
            StoreError::Parse { line, .. } => assert!((4..=6).contains(&line), "{line}"),
            other => panic!("{other}"),
        }
        let e = err_text("---\n- a\n- b\n---\n");
        assert!(
            e.starts_with("p/PROJECT.md:2: the frontmatter must be"),
            "{e}"
        );
    }

    #[test]
    fn load_checks_the_folder_name() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("other-name");
        fs::create_dir(&d).unwrap();
        fs::write(d.join(PROJECT_FILE), SEED).unwrap();
        let e = ProjectFile::load(&d).unwrap_err().to_string();
        assert!(e.ends_with(
            "PROJECT.md:2: key `name`: name `frontend-redesign` does not match its folder `other-name`: rename one of them"
        ), "{e}");
        let d = dir.path().join("frontend-redesign");
        fs::create_dir(&d).unwrap();
        fs::write(d.join(PROJECT_FILE), SEED).unwrap();
        assert_eq!(ProjectFile::load(&d).unwrap().render(), SEED);
        let e = ProjectFile::load(&dir.path().join("absent")).unwrap_err();
        assert!(matches!(e, StoreError::NotFound(n) if n == "absent"));
    }

    #[test]
    fn apply_keeps_unknown_keys_comments_and_body_byte_for_byte() {
        let text = SEED.replace(
            "created: 2026-02-28T10:00:00Z\n",
            "created: 2026-02-28T10:00:00Z\n# a comment the user wrote\nrepos:\n  - {id: app, path: /x, role: main}\nverify:\n- cargo test\n",
        );
        let walk = [
            (
                Verb::Suspend,
                ProjectStatus::Suspended,
                vec!["status", "suspended"],
            ),
            (Verb::Resume, ProjectStatus::Active, vec!["status"]),
            (
                Verb::Complete,
                ProjectStatus::Completed,
                vec!["status", "completed"],
            ),
            (Verb::Archive, ProjectStatus::Archived, vec!["status"]),
        ];
        let mut p = parse(&text).unwrap();
        for (i, (verb, want, touched)) in walk.into_iter().enumerate() {
            let before = p.clone();
            let now = at(i as u32);
            assert_eq!(p.apply(verb, now).unwrap(), want);
            assert_eq!(p.status(), want);
            assert_eq!(p.body(), before.body());
            assert_eq!(
                lines_except(&p.render(), &touched),
                lines_except(&before.render(), &touched)
            );
            assert_eq!(p.render().lines().count(), before.render().lines().count());
            assert_eq!(p.get("repos"), before.get("repos"));
            assert_eq!(p.get("verify"), before.get("verify"));
            match verb {
                Verb::Suspend => assert_eq!(p.suspended(), Some(now)),
                Verb::Complete => assert_eq!(p.completed(), Some(now)),
                _ => {}
            }
            assert_eq!(parse(&p.render()).unwrap(), p);
        }
        // Inline comments on the rewritten lines survive, aligned as before.
        let r = p.render();
        assert!(r.contains("status: archived                        # active | suspended | completed | archived\n"), "{r}");
        assert!(
            r.contains("suspended: 2026-03-01T00:00:00Z         # timestamp of last suspension\n"),
            "{r}"
        );
        assert!(
            r.contains("completed: 2026-03-01T02:00:00Z         # timestamp of completion\n"),
            "{r}"
        );
    }

    #[test]
    fn apply_appends_missing_keys_before_the_closing_line() {
        let text = "---\nname: foo\nstatus: active\ncreated: 2026-02-28T10:00:00Z\n---\nbody\n";
        let mut p = parse(text).unwrap();
        p.apply(Verb::Suspend, at(1)).unwrap();
        assert_eq!(
            p.render(),
            "---\nname: foo\nstatus: suspended\ncreated: 2026-02-28T10:00:00Z\nsuspended: 2026-03-01T01:00:00Z\n---\nbody\n"
        );
    }

    #[test]
    fn apply_replaces_a_multi_line_value_but_nothing_after_it() {
        let text =
            "---\nname: foo\nstatus:\n  active\n\n# keep me\ncreated: 2026-02-28T10:00:00Z\n---\n";
        let mut p = parse(text).unwrap();
        p.apply(Verb::Complete, at(1)).unwrap();
        assert_eq!(
            p.render(),
            "---\nname: foo\nstatus: completed\n\n# keep me\ncreated: 2026-02-28T10:00:00Z\ncompleted: 2026-03-01T01:00:00Z\n---\n"
        );
    }

    #[test]
    fn refused_transition_changes_nothing() {
        let mut p = parse(SEED).unwrap();
        let before = p.clone();
        let e = p.apply(Verb::Resume, at(1)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot resume project frontend-redesign: it is active"
        );
        assert_eq!(p, before);
    }

    #[test]
    fn set_edits_one_key_and_refuses_invalid_values() {
        let mut p = parse(SEED).unwrap();
        p.set("budget_usd", &Value::from(5.5)).unwrap();
        assert_eq!(p.budget_usd(), Some(5.5));
        assert!(p
            .render()
            .ends_with(&format!("budget_usd: 5.5\n---\n{}", p.body())));
        let before = p.clone();
        assert!(p.set("status", &Value::String("bogus".into())).is_err());
        assert_eq!(p, before);
    }

    #[test]
    fn new_renders_the_seed_shape() {
        let np = NewProject {
            name: "frontend-redesign".into(),
            goal: "Do it.".into(),
            background: Some("Some context.".into()),
            constraints: None,
            model: Some("anthropic/claude-sonnet-4-20250514".into()),
            workdir: Some("/home/user/code/my-app".into()),
        };
        let p =
            ProjectFile::new(&np, Utc.with_ymd_and_hms(2026, 2, 28, 10, 0, 0).unwrap()).unwrap();
        assert_eq!(
            p.render(),
            "---\nname: frontend-redesign\nstatus: active\nmodel: anthropic/claude-sonnet-4-20250514\nworkdir: /home/user/code/my-app\ncreated: 2026-02-28T10:00:00Z\nsuspended: null\ncompleted: null\n---\n\n## Goal\n\nDo it.\n\n## Background\n\nSome context.\n"
        );
        let bad = NewProject {
            name: "Bad".into(),
            goal: "x".into(),
            ..Default::default()
        };
        assert!(ProjectFile::new(&bad, at(0))
            .unwrap_err()
            .to_string()
            .starts_with("invalid project name `Bad`: use 1-63"));
        let bad = NewProject {
            name: "ok".into(),
            goal: "x".into(),
            model: Some("m".into()),
            ..Default::default()
        };
        assert!(matches!(
            ProjectFile::new(&bad, at(0)),
            Err(StoreError::Invalid(_))
        ));
    }

    #[test]
    fn names_follow_the_pattern() {
        for ok in ["a", "0", "my-project", "a-", &"x".repeat(63)] {
            assert!(validate_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "-a",
            "A",
            "a_b",
            "a.b",
            "a/b",
            ".tmp",
            "é",
            &"x".repeat(64),
        ] {
            assert!(validate_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn create_project_makes_the_tree_and_refuses_a_second_time() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::new(dir.path());
        let np = NewProject {
            name: "foo".into(),
            goal: "Ship it".into(),
            ..Default::default()
        };
        let made = create_project(&home, &np, at(0)).unwrap();
        let d = home.project_dir("foo");
        for sub in PROJECT_SUBDIRS {
            assert!(d.join(sub).is_dir(), "{sub}");
        }
        assert_eq!(ProjectFile::load(&d).unwrap(), made);
        assert_eq!(made.goal().as_deref(), Some("Ship it"));
        let e = create_project(&home, &np, at(0)).unwrap_err();
        assert_eq!(e.to_string(), "project foo already exists");
        // No temp folders are left behind.
        let names: Vec<_> = fs::read_dir(home.projects_dir())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("foo")]);
    }

    fn status_strategy() -> impl Strategy<Value = ProjectStatus> {
        prop::sample::select(ProjectStatus::ALL.to_vec())
    }

    fn name_strategy() -> impl Strategy<Value = String> {
        "[a-z0-9][a-z0-9-]{0,62}"
    }

    fn extra_keys() -> impl Strategy<Value = Vec<(String, String)>> {
        prop::collection::vec(("x_[a-z_]{1,10}", any::<String>()), 0..4).prop_map(|mut v| {
            let mut seen = HashSet::new();
            v.retain(|(k, _)| seen.insert(k.clone()));
            v
        })
    }

    use std::collections::HashSet;

    /// A PROJECT.md text built from parts, with unknown keys added through `set`.
    fn build(
        name: &str,
        status: ProjectStatus,
        model: Option<String>,
        workdir: Option<String>,
        extras: &[(String, String)],
        body: &str,
    ) -> ProjectFile {
        let np = NewProject {
            name: name.into(),
            goal: "g".into(),
            model,
            workdir: workdir.map(PathBuf::from),
            ..Default::default()
        };
        let mut p = ProjectFile::new(&np, at(0)).unwrap();
        p.set("status", &Value::String(status.as_str().into()))
            .unwrap();
        for (k, v) in extras {
            p.set(k, &Value::String(v.clone())).unwrap();
        }
        let text = format!("---\n{}---\n{body}", p.frontmatter());
        parse(&text).unwrap()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn render_then_parse_is_identity(
            name in name_strategy(),
            status in status_strategy(),
            model in prop::option::of("[a-z]{1,8}/[a-zA-Z0-9.:-]{1,20}"),
            workdir in prop::option::of("\\PC{0,30}".prop_filter("non-empty", |w: &String| !w.trim().is_empty())),
            extras in extra_keys(),
            body in any::<String>(),
            dashes in any::<bool>(),
        ) {
            let body = if dashes { format!("---\n{body}\n---\n") } else { body };
            let p = build(&name, status, model.clone(), workdir.clone(), &extras, &body);
            let text = p.render();
            let again = parse(&text).unwrap();
            prop_assert_eq!(&again, &p);
            prop_assert_eq!(again.render(), text);
            prop_assert_eq!(p.body(), body.as_str());
            prop_assert_eq!(p.name(), name.as_str());
            prop_assert_eq!(p.status(), status);
            prop_assert_eq!(p.model(), model.as_deref());
            prop_assert_eq!(p.workdir(), workdir.as_deref().map(Path::new));
            for (k, v) in &extras {
                prop_assert_eq!(p.get(k), Some(Value::String(v.clone())));
            }
        }

        #[test]
        fn apply_keeps_body_and_unknown_keys(
            name in name_strategy(),
            status in status_strategy(),
            extras in extra_keys(),
            body in any::<String>(),
            pick in any::<prop::sample::Index>(),
            hour in 0u32..24,
        ) {
            let mut p = build(&name, status, None, None, &extras, &body);
            let allowed: Vec<Verb> = Verb::ALL.into_iter().filter(|v| transition(&name, status, *v).is_ok()).collect();
            prop_assume!(!allowed.is_empty());
            let verb = allowed[pick.index(allowed.len())];
            let before = p.clone();
            let to = p.apply(verb, at(hour)).unwrap();
            prop_assert_eq!(p.status(), to);
            prop_assert_eq!(p.body(), before.body());
            for (k, _) in &extras {
                prop_assert_eq!(p.get(k), before.get(k));
            }
            let touched = ["status", "suspended", "completed"];
            prop_assert_eq!(lines_except(p.frontmatter(), &touched), lines_except(before.frontmatter(), &touched));
            prop_assert_eq!(parse(&p.render()).unwrap(), p);
        }

        #[test]
        fn parse_never_panics(text in any::<String>()) {
            let _ = parse(&text);
            let _ = parse(&format!("---\n{text}"));
            let _ = parse(&format!("---\nname: a\nstatus: active\ncreated: 2026-02-28T10:00:00Z\n{text}\n---\n"));
        }
    }
}
