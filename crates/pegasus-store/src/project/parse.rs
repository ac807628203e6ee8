//! Turning PROJECT.md text into a checked [`ProjectFile`]: the frontmatter split (through
//! the crate's one [`split_frontmatter`]), the YAML parse, and a check of every known key with
//! an error that names the file line and key a user has to fix.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde_norway::{Mapping, Value};

use super::{CodeKeys, Known, ProjectFile, ProjectStatus, PROJECT_FILE};
use crate::error::{Result, StoreError};
use crate::frontmatter::split_frontmatter;
use crate::yaml::{problem, top_level_key_line};

/// The largest PROJECT.md read (256 KiB). Its body is every request's system prompt: past this
/// it would crowd out the conversation, and a frame carrying it could pass the frame limit.
pub const MAX_PROJECT_FILE: u64 = 256 * 1024;

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
pub(super) fn check_model(model: &str) -> std::result::Result<(), String> {
    match model.split_once('/') {
        Some((p, m)) if !p.trim().is_empty() && !m.trim().is_empty() => Ok(()),
        _ => Err(format!(
            "model `{}` must be `provider/model`, e.g. anthropic/claude-sonnet-4-5",
            model.escape_debug()
        )),
    }
}

/// Why a `fallback:` list (config.yml or PROJECT.md) is wrong, if it is: each entry a
/// `provider/model`, each once.
pub(crate) fn check_fallback(models: &[String]) -> std::result::Result<(), String> {
    for (i, m) in models.iter().enumerate() {
        check_model(m).map_err(|e| format!("entry {}: {e}", i + 1))?;
        if models[..i].contains(m) {
            return Err(format!(
                "entry {}: `{}` is listed twice; each model once, in the order to try them",
                i + 1,
                m.escape_debug()
            ));
        }
    }
    Ok(())
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

    /// The timestamp at `key`, if there is one (absent or null: none).
    fn timestamp(&self, map: &Mapping, key: &str) -> Result<Option<DateTime<Utc>>> {
        match map.get(key).unwrap_or(&Value::Null) {
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

    /// `fallback:`: absent or `null` = config.yml's list; a list of `provider/model` strings
    /// (empty: no fallback for this project).
    fn fallback(&self, v: Option<&Value>) -> Result<Option<Vec<String>>> {
        let list = match v {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::Sequence(items)) => items
                .iter()
                .map(|item| match item {
                    Value::String(s) => Ok(s.trim().to_string()),
                    _ => Err(self.err(
                        "fallback",
                        "must be a list of `provider/model` strings, e.g. [anthropic/claude-haiku-4-5]".into(),
                    )),
                })
                .collect::<Result<Vec<_>>>()?,
            Some(_) => {
                return Err(self.err(
                    "fallback",
                    "must be a list of `provider/model` strings, e.g. [anthropic/claude-haiku-4-5]"
                        .into(),
                ))
            }
        };
        check_fallback(&list).map_err(|m| self.err("fallback", m))?;
        Ok(Some(list))
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
        let fallback = self.fallback(map.get("fallback"))?;
        let workdir = self.opt_string("workdir", map.get("workdir"))?;
        if workdir.as_deref().is_some_and(|w| w.trim().is_empty()) {
            return Err(self.err("workdir", "is empty: give a path or remove the key".into()));
        }
        let created = self
            .timestamp(map, "created")?
            .ok_or_else(|| self.missing("created", "2026-02-28T10:00:00Z"))?;
        let suspended = self.timestamp(map, "suspended")?;
        let completed = self.timestamp(map, "completed")?;
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
        let mcp_servers = crate::mcp::parse_mcp_servers(map.get("mcp_servers"))
            .map_err(|m| self.err("mcp_servers", m))?;
        let hooks =
            crate::hooks::parse_hooks(map.get("hooks")).map_err(|m| self.err("hooks", m))?;
        if let Err(m) = crate::approvals::ApprovalsConfig::from_yaml(map.get("approvals")) {
            return Err(self.err("approvals", m));
        }
        let asana =
            crate::asana::parse_asana(map.get("asana")).map_err(|m| self.err("asana", m))?;
        let limits = crate::limits::ProjectLimits::from_yaml(map.get("limits"))
            .map_err(|m| self.err("limits", m))?;
        let launcher = self.opt_string("launcher", map.get("launcher"))?;
        if launcher
            .as_deref()
            .is_some_and(|l| validate_name(l).is_err())
        {
            return Err(self.err(
                "launcher",
                "must be `local` or the name of an entry under config.yml `launchers:`".into(),
            ));
        }
        let instruction_files = match map.get("instruction_files") {
            None => None,
            Some(v) => Some(
                serde_norway::from_value::<Vec<String>>(v.clone())
                    .ok()
                    .filter(|names| names.iter().all(|n| crate::config::is_file_name(n)))
                    .ok_or_else(|| {
                        self.err(
                            "instruction_files",
                            "must be a list of file names, e.g. [AGENTS.md, CLAUDE.md], or [] for none"
                                .into(),
                        )
                    })?,
            ),
        };
        let agent = match map.get("agent") {
            None | Some(Value::Null) => crate::harness::AgentKind::Builtin,
            Some(Value::String(word)) => {
                crate::harness::AgentKind::parse(word).map_err(|m| self.err("agent", m))?
            }
            Some(_) => {
                return Err(self.err(
                    "agent",
                    "must be one of builtin, claude-code or codex".into(),
                ))
            }
        };
        Ok(Known {
            name,
            status,
            model,
            fallback,
            workdir: workdir.map(PathBuf::from),
            created,
            suspended,
            completed,
            budget_usd,
            launcher,
            limits,
            mcp_servers,
            hooks,
            code: CodeKeys::read(map),
            roles: super::roles::read(map.get("roles")),
            instruction_files,
            agent,
            asana,
        })
    }
}

/// Parses the frontmatter YAML into a mapping (empty frontmatter = empty mapping), with YAML
/// errors placed on the file line.
pub(super) fn frontmatter_mapping(fm: &str, path: &Path) -> Result<Mapping> {
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
        _ => Err(StoreError::parse_at(
            path,
            2,
            "the frontmatter must be `key: value` lines",
        )),
    }
}

impl ProjectFile {
    /// Parses PROJECT.md text; `path` only labels error messages. Every known key is checked
    /// and an error names the file line and key; unknown keys are allowed and kept. A leading
    /// byte-order mark is accepted and kept, so a save writes the file back as it came.
    pub fn parse(text: &str, path: &Path) -> Result<Self> {
        let split =
            split_frontmatter(text).map_err(|e| StoreError::parse_at(path, 1, e.to_string()))?;
        let map = frontmatter_mapping(split.yaml, path)?;
        let ctx = Ctx {
            path,
            fm: split.yaml,
            close_line: split.close_line,
        };
        let known = ctx.known(&map)?;
        Ok(ProjectFile {
            text: text.to_string(),
            fm_start: split.yaml_start,
            fm_end: split.yaml_end,
            body_start: split.body_start,
            known,
            mapping: map,
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
        // Only a regular file, never more than the cap: a PROJECT.md that is a FIFO (would
        // block the daemon for good) or `/dev/zero` (would fill its memory) is invalid.
        let bytes = match crate::read::read_capped(&path, MAX_PROJECT_FILE + 1) {
            Ok(c) if c.size > MAX_PROJECT_FILE || c.truncated() => {
                let message = format!(
                    "the file is {} bytes, over the {MAX_PROJECT_FILE}-byte limit: keep long material in the project's files and memory",
                    c.size
                );
                return Err(StoreError::parse_at(path, 1, message));
            }
            Ok(c) => c.bytes,
            Err(crate::read::ReadError::NotFound) => return Err(StoreError::NotFound(folder)),
            Err(crate::read::ReadError::Io(e)) => return Err(StoreError::Io { path, source: e }),
            Err(e) => {
                let message = format!("the file {e}: PROJECT.md must be a regular file");
                return Err(StoreError::parse_at(path, 1, message));
            }
        };
        let text = String::from_utf8(bytes).map_err(|e| {
            let good = &e.as_bytes()[..e.utf8_error().valid_up_to()];
            let line = good.iter().filter(|&&b| b == b'\n').count() + 1;
            StoreError::parse_at(&path, line, "not valid UTF-8 text: save the file as UTF-8")
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
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::super::fixtures::*;
    use super::*;
    use proptest::prelude::*;
    use std::fs;

    /// `fallback:` absent means config.yml's list, a list replaces it, `[]` means none.
    #[test]
    fn a_fallback_list_is_read_in_order() {
        let with = |line: &str| {
            parse(&format!(
                "---\nname: foo\nstatus: active\ncreated: 2026-02-28T10:00:00Z\n{line}---\nbody\n"
            ))
            .unwrap()
        };
        assert_eq!(with("").fallback(), None);
        assert_eq!(with("fallback: null\n").fallback(), None);
        assert_eq!(with("fallback: []\n").fallback(), Some(&[][..]));
        assert_eq!(
            with("fallback: [fa/b, openrouter/meta/llama]\n").fallback(),
            Some(&["fa/b".to_string(), "openrouter/meta/llama".to_string()][..])
        );
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
            (
                "budget_usd: 3",
                "fallback: a/c",
                9,
                "fallback",
                "must be a list of `provider/model` strings",
            ),
            (
                "budget_usd: 3",
                "fallback: [a/c, haiku]",
                9,
                "fallback",
                "entry 2: model `haiku` must be `provider/model`",
            ),
            (
                "budget_usd: 3",
                "fallback: [a/c, a/c]",
                9,
                "fallback",
                "entry 2: `a/c` is listed twice",
            ),
            ("budget_usd: 3", "budget_usd: lots", 9, "budget_usd", ">= 0"),
            (
                "budget_usd: 3",
                "limits: {memory: 2GB}",
                9,
                "limits",
                "is not a size",
            ),
            (
                "budget_usd: 3",
                "hooks: {PreToolUse: [{matcher: \"(\", hooks: []}]}",
                9,
                "hooks",
                "matcher `(` is not a regular expression",
            ),
            (
                "budget_usd: 3",
                "hooks: {SessionEnd: []}",
                9,
                "hooks",
                "unknown variant `SessionEnd`",
            ),
        ];
        for (from, to, line, key, msg) in cases {
            let e = err_text(&base.replace(from, to));
            let want = format!("p/PROJECT.md:{line}: key `{key}`: ");
            assert!(e.starts_with(&want), "{to}: {e}");
            assert!(e.contains(msg), "{to}: {e}");
        }
    }

    #[test]
    fn hooks_are_read_with_the_file() {
        let p = parse("---\nname: foo\nstatus: active\ncreated: 2026-02-28T10:00:00Z\nhooks:\n  Stop:\n    - hooks: [{type: command, command: ./stop.sh, timeout: 5}]\n---\n").unwrap();
        let stop = &p.hooks()[&crate::hooks::HookEvent::Stop];
        assert_eq!(stop[0].hooks[0].command(), "./stop.sh");
        assert!(parse(SEED).unwrap().hooks().is_empty());
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
    fn a_project_file_starting_with_a_byte_order_mark_loads() {
        // Issue 8 item 8: a PROJECT.md saved by an editor that writes a BOM was refused as
        // "missing frontmatter".
        let text = format!("\u{feff}{SEED}");
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("frontend-redesign");
        fs::create_dir(&d).unwrap();
        fs::write(d.join(PROJECT_FILE), &text).unwrap();
        let p = ProjectFile::load(&d).unwrap();
        assert_eq!(p.name(), "frontend-redesign");
        assert_eq!(p.status(), ProjectStatus::Active);
        assert_eq!(p.key_line("status"), 3);
        assert!(p.frontmatter().starts_with("name: frontend-redesign\n"));
        assert_eq!(p.body(), parse(SEED).unwrap().body());
        // The mark is the user's byte, not ours to drop: the file renders back unchanged.
        assert_eq!(p.render(), text);
        let e =
            err_text("\u{feff}---\nname: foo\nstatus: actve\ncreated: 2026-02-28T10:00:00Z\n---\n");
        assert!(e.starts_with("p/PROJECT.md:3: key `status`"), "{e}");
    }

    #[test]
    fn crlf_line_ends_are_accepted() {
        let p = parse(&SEED.replace('\n', "\r\n")).unwrap();
        assert_eq!(p.name(), "frontend-redesign");
        assert_eq!(p.status(), ProjectStatus::Active);
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
        fn parse_never_panics(text in any::<String>()) {
            let _ = parse(&text);
            let _ = parse(&format!("---\n{text}"));
            let _ = parse(&format!("---\nname: a\nstatus: active\ncreated: 2026-02-28T10:00:00Z\n{text}\n---\n"));
        }
    }
}
