//! The policy in force for one project (DESIGN.md §11): config.yml's `approvals:` block under its
//! PROJECT.md's (both as written: [`pegasus_store::approvals::ApprovalsConfig`]), and what it
//! says about one call.

use pegasus_store::approvals::{ApprovalsConfig, MergeMode, Mode};

use crate::glob::{command_allowed, glob_match, literal_len, split_tool_key};

/// Default `approvals.timeout_s`: an hour.
pub const DEFAULT_TIMEOUT_S: u64 = 3600;
/// The pseudo-tool name of a merge approval (`merge: ask`).
pub const MERGE_TOOL: &str = "merge";

/// The policy in force: one block, or config.yml's with a project's over it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Policy {
    block: ApprovalsConfig,
}

impl Policy {
    /// The policy of one block alone (config.yml's, for a project that adds nothing).
    pub fn of(block: ApprovalsConfig) -> Policy {
        Policy { block }
    }

    /// `project`'s block over `config`'s: scalars replace, `allow` extends, `tools` merge per
    /// glob with the project's winning.
    pub fn under(config: &ApprovalsConfig, project: &ApprovalsConfig) -> Policy {
        let mut out = config.clone();
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
        Policy { block: out }
    }

    /// The merged block.
    pub fn block(&self) -> &ApprovalsConfig {
        &self.block
    }

    /// Seconds a request waits.
    pub fn timeout(&self) -> u64 {
        self.block.timeout_s.unwrap_or(DEFAULT_TIMEOUT_S)
    }

    /// `merge: ask`, and no `tools: {merge: allow}` (what `approve --always` on a merge wrote
    /// before it wrote `merge: auto`) that says otherwise?
    pub fn merge_asks(&self) -> bool {
        self.block.merge == Some(MergeMode::Ask)
            && self.block.tools.get(MERGE_TOOL) != Some(&Mode::Allow)
    }

    /// What the policy says about a call of `tool` whose target is `target` (`exec`'s command
    /// line, `web_fetch`'s URL, `web_search`'s query: [`crate::call_target`]).
    pub fn decide(&self, tool: &str, target: Option<&str>) -> PolicyDecision {
        // `exec:` is `tools: {exec: ...}`: an exact name, so it beats every glob. Otherwise the
        // most specific entry that matches the call: one that names its target
        // (`web_fetch(https://docs.rs/*)`) first, then an exact name, then the one with the
        // most literal characters, then the stricter mode. Targets of `exec` are never matched
        // here: its lines go through `allow`, which knows the shell's operators.
        let exec_key = (tool == "exec" && !self.block.tools.contains_key("exec"))
            .then_some(self.block.exec)
            .flatten();
        let matches = |key: &str| match split_tool_key(key) {
            (name, None) => glob_match(name, tool),
            (name, Some(arg)) => {
                tool != "exec"
                    && glob_match(name, tool)
                    && target.is_some_and(|t| glob_match(arg, t))
            }
        };
        let entry = self
            .block
            .tools
            .iter()
            .filter(|(g, _)| matches(g))
            .max_by_key(|(g, m)| {
                let (name, arg) = split_tool_key(g);
                (arg.is_some(), name == tool, literal_len(g), **m)
            });
        let command = target.filter(|_| tool == "exec");
        let (mode, label) = match (exec_key, entry) {
            (Some(m), _) => (m, "approvals.exec".to_string()),
            (None, Some((g, m))) => (*m, format!("approvals.tools[{g}]")),
            (None, None) => (Mode::Allow, String::new()),
        };
        match mode {
            Mode::Allow => PolicyDecision::Allow,
            Mode::Deny => PolicyDecision::Deny(label),
            Mode::Ask => match (tool, command) {
                ("exec", Some(line))
                    if self.block.allow.iter().any(|g| command_allowed(g, line)) =>
                {
                    PolicyDecision::Allow
                }
                _ => PolicyDecision::Ask,
            },
        }
    }
}

/// The argument of a call that a `tools:` entry can name: `exec`'s command line (matched by
/// `allow`), `web_fetch`'s `url`, `web_search`'s `query` (and the same of a harness's own web
/// tools, Claude Code's `WebFetch` and `WebSearch`, DESIGN.md §15); `None` for other tools.
pub fn call_target(tool: &str, input: &serde_json::Value) -> Option<String> {
    let key = match tool {
        "exec" => "command",
        "web_fetch" | "WebFetch" => "url",
        "web_search" | "WebSearch" => "query",
        _ => return None,
    };
    let target = input.get(key).and_then(|v| v.as_str())?;
    Some(match tool {
        "web_fetch" | "WebFetch" => fetch_target(target),
        _ => target.to_string(),
    })
}

/// A URL as the fetcher reads it, for matching: trimmed, its scheme and host in lower case
/// (` HTTP://Example.COM/Path` is `http://example.com/Path`), so a glob cannot be dodged by
/// spelling what the fetcher ignores.
fn fetch_target(url: &str) -> String {
    let url = url.trim();
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let host_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    format!(
        "{}://{}{}",
        scheme.to_ascii_lowercase(),
        rest[..host_end].to_ascii_lowercase(),
        &rest[host_end..]
    )
}

/// What the policy says about one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyDecision {
    /// It runs without asking.
    Allow,
    /// A person says yes or no first.
    Ask,
    /// Refused; the policy key that refused it (`approvals.tools[GLOB]`).
    Deny(String),
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_fetch_target_is_matched_as_the_fetcher_reads_it() {
        let t = |u: &str| call_target("web_fetch", &serde_json::json!({ "url": u })).unwrap();
        assert_eq!(
            t(" HTTP://Example.COM/Path?Q=1"),
            "http://example.com/Path?Q=1"
        );
        assert_eq!(t("https://docs.rs"), "https://docs.rs");
        assert_eq!(t("not a url"), "not a url");
        let q = call_target("web_search", &serde_json::json!({"query": " Rust "})).unwrap();
        assert_eq!(q, " Rust ");
        // Claude Code's own web tools are read the same way.
        let u = call_target(
            "WebFetch",
            &serde_json::json!({"url": "HTTPS://Docs.RS/x", "prompt": "p"}),
        );
        assert_eq!(u.as_deref(), Some("https://docs.rs/x"));
        let p = policy("tools: {\"WebFetch(https://docs.rs/*)\": allow, WebFetch: deny}\n");
        assert_eq!(p.decide("WebFetch", u.as_deref()), PolicyDecision::Allow);
        let other = call_target(
            "WebFetch",
            &serde_json::json!({"url": "https://evil.example/"}),
        );
        assert!(matches!(
            p.decide("WebFetch", other.as_deref()),
            PolicyDecision::Deny(_)
        ));
    }

    fn block(yaml: &str) -> ApprovalsConfig {
        let v: serde_norway::Value = serde_norway::from_str(yaml).unwrap();
        ApprovalsConfig::from_yaml(Some(&v)).unwrap()
    }

    fn policy(yaml: &str) -> Policy {
        Policy::of(block(yaml))
    }

    #[test]
    fn decisions_follow_exec_allow_and_tool_globs() {
        let p = policy(
            "exec: ask\nallow: [\"git status\", \"cargo test*\"]\ntools: {\"mcp__*\": ask, \"mcp__safe__*\": allow, write_file: deny}",
        );
        assert_eq!(p.decide("exec", Some("git status")), PolicyDecision::Allow);
        assert_eq!(
            p.decide("exec", Some("cargo test -q")),
            PolicyDecision::Allow
        );
        assert_eq!(p.decide("exec", Some("rm -rf build")), PolicyDecision::Ask);
        assert_eq!(
            p.decide("exec", Some("git status; rm x")),
            PolicyDecision::Ask
        );
        assert_eq!(p.decide("mcp__github__push", None), PolicyDecision::Ask);
        assert_eq!(p.decide("mcp__safe__read", None), PolicyDecision::Allow);
        assert_eq!(
            p.decide("write_file", None),
            PolicyDecision::Deny("approvals.tools[write_file]".into())
        );
        assert_eq!(p.decide("read_file", None), PolicyDecision::Allow);
        // Defaults: everything allowed.
        let d = Policy::default();
        assert_eq!(d.decide("exec", Some("rm -rf /")), PolicyDecision::Allow);
        assert_eq!(d.timeout(), 3600);
        assert!(!d.merge_asks());
        // `tools: {exec: ...}` is the same as `exec:` and wins over it.
        let t = policy("exec: allow\ntools: {exec: deny}");
        assert_eq!(
            t.decide("exec", Some("ls")),
            PolicyDecision::Deny("approvals.tools[exec]".into())
        );
        assert_eq!(
            policy("exec: deny").decide("exec", Some("ls")),
            PolicyDecision::Deny("approvals.exec".into())
        );
        // `exec:` is exact: no glob overrides it; ties between globs go to the stricter mode.
        let g = policy("exec: deny\ntools: {\"*\": allow, \"e*\": allow}");
        assert_eq!(
            g.decide("exec", Some("rm -rf ~")),
            PolicyDecision::Deny("approvals.exec".into())
        );
        let tie = policy("tools: {\"*__push\": allow, \"mcp__*h\": deny}");
        assert!(matches!(
            tie.decide("mcp__gh__push", None),
            PolicyDecision::Deny(_)
        ));
        // A project's `exec:` wins over the config's `tools: {exec: ...}`.
        let merged = Policy::under(&block("tools: {exec: deny}"), &block("exec: allow"));
        assert_eq!(merged.decide("exec", Some("ls")), PolicyDecision::Allow);
    }

    #[test]
    fn a_tool_entry_may_name_its_target() {
        let p = policy(
            "tools: {web_fetch: ask, \"web_fetch(https://docs.rs/*)\": allow, \"web_fetch(http://*)\": deny, \"web_*\": allow}",
        );
        let fetch = |url: &str| p.decide("web_fetch", Some(url));
        assert_eq!(fetch("https://docs.rs/htmd"), PolicyDecision::Allow);
        assert_eq!(fetch("https://example.com/"), PolicyDecision::Ask);
        assert_eq!(
            fetch("http://docs.rs/x"),
            PolicyDecision::Deny("approvals.tools[web_fetch(http://*)]".into())
        );
        // No target known: the name-only entries decide.
        assert_eq!(p.decide("web_fetch", None), PolicyDecision::Ask);
        assert_eq!(p.decide("web_search", Some("rust")), PolicyDecision::Allow);
        // `exec` lines are `allow`'s alone: an `exec(...)` entry (refused at load) never matches.
        let mut b = block("exec: ask");
        b.tools.insert("exec(ls*)".into(), Mode::Allow);
        assert_eq!(
            Policy::of(b).decide("exec", Some("ls; rm -rf ~")),
            PolicyDecision::Ask
        );
    }

    #[test]
    fn a_project_block_extends_allow_and_wins_per_glob() {
        let config = block(
            "exec: ask\nallow: [\"ls\"]\ntools: {\"mcp__*\": ask, edit_file: ask}\ntimeout_s: 60",
        );
        let project = block("allow: [\"make\"]\ntools: {\"mcp__*\": allow}\nmerge: ask");
        let p = Policy::under(&config, &project);
        assert_eq!(p.block().exec, Some(Mode::Ask));
        assert_eq!(p.block().allow, vec!["ls".to_string(), "make".to_string()]);
        assert_eq!(p.decide("mcp__x__y", None), PolicyDecision::Allow);
        assert_eq!(p.decide("edit_file", None), PolicyDecision::Ask);
        assert!(p.merge_asks());
        assert_eq!(p.timeout(), 60);
    }
}
