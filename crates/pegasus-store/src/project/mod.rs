//! PROJECT.md: a project's definition and lifecycle status (DESIGN.md §3, seed 000).
//!
//! The file is YAML frontmatter between two `---` lines, then a markdown body that becomes the
//! project agent's system prompt. Users edit it by hand, so this module keeps their text
//! exactly: it validates the known keys (reporting the file line and key), keeps unknown keys,
//! comments and order, and changes a status by editing only the lines of the keys it sets.
//!
//! This file holds the [`ProjectFile`] type and what can be read off it; the rest is split by
//! what a reader comes looking for:
//! * `parse`: turning text (or a project folder) into a checked [`ProjectFile`];
//! * `edit`: lifecycle verbs, `set` and `save`, which rewrite only the lines they touch;
//! * `create`: making a brand-new project folder from a [`NewProject`];
//! * `extensions`: the typed extension keys (`mcp_servers`, the code keys), read once
//!   (`hooks` is read with `mcp_servers`, by its owner `crate::hooks`);
//! * `roles`: the `roles:` assignments, read once.

use std::path::{Path, PathBuf};

use chrono::{DateTime, SecondsFormat, Utc};
use pulldown_cmark::{Event, HeadingLevel, Parser, Tag, TagEnd};
use serde_norway::Value;

use crate::yaml::top_level_key_line;

mod create;
mod edit;
mod extensions;
#[cfg(test)]
mod fixtures;
mod parse;
mod roles;

pub use create::{create_project, NewProject};
pub use extensions::{CodeKeys, KeyProblem, KeyValue, MergePolicy, RepoEntry};
pub(crate) use parse::check_fallback;
pub use parse::validate_name;
pub use roles::{validate_role_id, Assignment, BadRoleId, Roles, RolesProblem, Thinking};

/// The file name of a project definition inside its folder.
pub const PROJECT_FILE: &str = "PROJECT.md";

/// Subfolders every project has (DESIGN.md §3), created with the project so later writers never
/// have to guess whether a directory exists.
pub const PROJECT_SUBDIRS: [&str; 6] = [
    "session",
    "tasks",
    "memory/facts",
    "memory/episodes",
    "skills",
    "artifacts",
];

/// Where a project is in its lifecycle (see [`crate::lifecycle`]); defined with the wire
/// types, since every listing carries it.
pub use pegasus_proto::ProjectStatus;

/// A timestamp as written in PROJECT.md: RFC 3339, UTC, whole seconds.
fn format_ts(ts: DateTime<Utc>) -> String {
    ts.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// The typed view of the known frontmatter keys.
#[derive(Debug, Clone, PartialEq)]
struct Known {
    name: String,
    status: ProjectStatus,
    model: Option<String>,
    /// `fallback:`, replacing config.yml's list; `None` when absent.
    fallback: Option<Vec<String>>,
    workdir: Option<PathBuf>,
    created: DateTime<Utc>,
    suspended: Option<DateTime<Utc>>,
    completed: Option<DateTime<Utc>>,
    budget_usd: Option<f64>,
    /// Where the worker runs (DESIGN.md §14): a name under config.yml `launchers:`, or `local`.
    launcher: Option<String>,
    /// Its own `limits:` (DESIGN.md §12), each key winning over config.yml's.
    limits: crate::limits::ProjectLimits,
    /// Its own MCP servers (`mcp_servers:`), checked with the file.
    mcp_servers: std::collections::BTreeMap<String, crate::mcp::McpServerConfig>,
    /// Its own lifecycle hooks (`hooks:`, DESIGN.md §16), checked with the file.
    hooks: crate::hooks::HooksConfig,
    /// The code keys, each checked by its user when a code task starts.
    code: CodeKeys,
    /// `roles:`, checked by its users (the worker when it starts, `role assign`).
    roles: Roles,
    /// `instruction_files:`, replacing config.yml's `agent.instruction_files` (DESIGN.md §16).
    instruction_files: Option<Vec<String>>,
    /// `agent:`, the project's agent (DESIGN.md §15); `builtin` when absent.
    agent: crate::harness::AgentKind,
    /// `asana:`, the Asana project that is its board (DESIGN.md §17), checked with the file.
    asana: Option<crate::asana::AsanaBoard>,
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
    /// The frontmatter as YAML, parsed once (every edit re-parses the whole file).
    mapping: serde_norway::Mapping,
}

impl ProjectFile {
    /// 1-based file line of a top-level frontmatter key (line 2 if not found in block style).
    pub fn key_line(&self, key: &str) -> usize {
        top_level_key_line(self.frontmatter(), key).map_or(2, |i| i + 2)
    }

    /// The full file text (frontmatter + body). `parse(render()) == self`.
    pub fn render(&self) -> String {
        self.text.clone()
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

    /// Its own fallback models (`fallback:`), in order, replacing config.yml's list; `None`
    /// when it sets none (then config.yml's apply), `Some([])` for none at all.
    pub fn fallback(&self) -> Option<&[String]> {
        self.known.fallback.as_deref()
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

    /// The `launcher` the project's worker is started by; `None`: config.yml's
    /// `default_launcher`.
    pub fn launcher(&self) -> Option<&str> {
        self.known.launcher.as_deref()
    }

    /// Its own `limits:` keys; config.yml's `limits:` gives the others.
    pub fn limits(&self) -> crate::limits::ProjectLimits {
        self.known.limits
    }

    /// Its own MCP servers (`mcp_servers:`; config.yml's are merged in by the worker).
    pub fn mcp_servers(&self) -> &std::collections::BTreeMap<String, crate::mcp::McpServerConfig> {
        &self.known.mcp_servers
    }

    /// Its own lifecycle hooks (`hooks:`), which run after config.yml's.
    pub fn hooks(&self) -> &crate::hooks::HooksConfig {
        &self.known.hooks
    }

    /// The code keys (`repos`, `hydrate`, `verify`, ...), each read or with what is wrong
    /// with it; a code task refuses to start on a problem, the project still loads.
    pub fn code(&self) -> &CodeKeys {
        &self.known.code
    }

    /// Its own `instruction_files:` (AGENTS.md, CLAUDE.md; `[]` = none), replacing config.yml's
    /// `agent.instruction_files`; `None` when it has none.
    pub fn instruction_files(&self) -> Option<&[String]> {
        self.known.instruction_files.as_deref()
    }

    /// The project's agent (`agent:`): Pegasus's own loop unless it names a harness.
    pub fn agent(&self) -> crate::harness::AgentKind {
        self.known.agent
    }

    /// The Asana project that is its board (`asana:`), synced by pegasusd.
    pub fn asana(&self) -> Option<&crate::asana::AsanaBoard> {
        self.known.asana.as_ref()
    }

    /// The role assignments (`roles:`), or what is wrong with them; the worker refuses to
    /// start on a problem and `role assign` reports it, the project still loads.
    pub fn roles(&self) -> &Roles {
        &self.known.roles
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

    /// Value of any frontmatter key (known or unknown) as YAML, as written. The keys this
    /// crate reads have typed accessors; this is for the keys other crates own (`roles`,
    /// `approvals`), for unknown keys, for values kept as written (a remote project's pinned
    /// keys) and for edits.
    pub fn get(&self, key: &str) -> Option<Value> {
        self.mapping.get(key).cloned()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::fixtures::*;
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn agent_names_a_harness_or_is_builtin() {
        use crate::harness::AgentKind;
        assert_eq!(parse(SEED).unwrap().agent(), AgentKind::Builtin);
        let with = |v: &str| {
            SEED.replacen(
                "completed: null",
                &format!("completed: null\nagent: {v}"),
                1,
            )
        };
        assert_eq!(
            parse(&with("claude-code")).unwrap().agent(),
            AgentKind::ClaudeCode
        );
        assert_eq!(parse(&with("codex")).unwrap().agent(), AgentKind::Codex);
        assert_eq!(parse(&with("null")).unwrap().agent(), AgentKind::Builtin);
        let e = err_text(&with("claude"));
        assert!(e.contains("key `agent`") || e.contains("agent"), "{e}");
        assert!(e.contains("use builtin, claude-code or codex"), "{e}");
        let e = err_text(&with("[codex]"));
        assert!(
            e.contains("must be one of builtin, claude-code or codex"),
            "{e}"
        );
    }

    #[test]
    fn instruction_files_replace_the_configs_and_must_be_file_names() {
        assert_eq!(parse(SEED).unwrap().instruction_files(), None);
        let with = |v: &str| {
            SEED.replacen(
                "completed: null",
                &format!("completed: null\ninstruction_files: {v}"),
                1,
            )
        };
        let p = parse(&with("[]")).unwrap();
        assert_eq!(p.instruction_files(), Some(&[][..]));
        let p = parse(&with("[CLAUDE.md, AGENTS.md]")).unwrap();
        assert_eq!(
            p.instruction_files(),
            Some(&["CLAUDE.md".to_string(), "AGENTS.md".to_string()][..])
        );
        for bad in ["AGENTS.md", "[docs/AGENTS.md]", "[\"\"]", "{a: b}"] {
            let e = err_text(&with(bad));
            assert!(e.contains("instruction_files"), "{bad}: {e}");
            assert!(e.contains("must be a list of file names"), "{bad}: {e}");
        }
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
}
