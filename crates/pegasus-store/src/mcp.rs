//! MCP server declarations (DESIGN.md §13): `mcp_servers: {NAME: {command, args?, env?, timeout_s?,
//! eager?, writable?}}` in config.yml (every project gets them) and in PROJECT.md (an entry of the same
//! name wins). One type and one check for both files.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// How to start one MCP server (stdio transport).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// The program (a path, or a name looked up in `PATH`).
    pub command: String,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Extra environment; the server otherwise starts with a clean one (`PATH`, `HOME`,
    /// `LANG` only).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Seconds one call (or the start) may take; default [`DEFAULT_MCP_TIMEOUT_S`].
    #[serde(default)]
    pub timeout_s: Option<u64>,
    /// Start with the worker instead of at first use.
    #[serde(default)]
    pub eager: bool,
    /// Paths the server may write besides the project's workdir and temp dir (it is confined
    /// as `exec` is); relative ones are taken from the workdir.
    #[serde(default)]
    pub writable: Vec<String>,
}

/// `mcp:` in config.yml: how much of every model call the MCP tools of a project may take
/// (DESIGN.md §13). The tools past it are deferred behind `tool_search`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpConfig {
    /// The share of the model's context window (0 to 1) the offered MCP tools' specs may take,
    /// estimated as the agent estimates its window (default 0.1).
    pub tool_budget_share: f64,
    /// The most MCP tools offered in every call, `tool_search` and the tools found with it
    /// not counted (default 64: with the built-ins, `tool_search` and the tools found, under
    /// the 128 tools some providers accept).
    pub max_offered_tools: usize,
}

impl Default for McpConfig {
    fn default() -> Self {
        McpConfig {
            tool_budget_share: 0.1,
            max_offered_tools: 64,
        }
    }
}

impl McpConfig {
    /// Range checks: `Err((key, why))`, the key under `mcp.`.
    pub fn check(&self) -> Result<(), (&'static str, &'static str)> {
        if !(self.tool_budget_share.is_finite() && (0.0..=1.0).contains(&self.tool_budget_share)) {
            return Err((
                "tool_budget_share",
                "must be a number from 0 to 1 (a share of the context window, e.g. 0.1)",
            ));
        }
        if self.max_offered_tools > 1000 {
            return Err((
                "max_offered_tools",
                "must be at most 1000 (providers refuse far fewer tools per call)",
            ));
        }
        Ok(())
    }
}

/// A call's time limit when `timeout_s` is not given.
pub const DEFAULT_MCP_TIMEOUT_S: u64 = 60;
/// The largest `timeout_s` accepted.
pub const MAX_MCP_TIMEOUT_S: u64 = 3600;

impl McpServerConfig {
    /// The call time limit.
    pub fn timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.timeout_s.unwrap_or(DEFAULT_MCP_TIMEOUT_S))
    }
}

/// Checks names and values; the error names the offending entry (`mcp_servers.NAME...`).
pub fn check_mcp_servers(servers: &BTreeMap<String, McpServerConfig>) -> Result<(), String> {
    for (name, s) in servers {
        let ok_name = !name.is_empty()
            && name.len() <= 32
            && !name.contains("__")
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !ok_name {
            return Err(format!(
                "mcp_servers.{name}: a server name is 1-32 letters, digits, `-` or `_` (no `__`), e.g. `github`"
            ));
        }
        if s.command.trim().is_empty() {
            return Err(format!(
                "mcp_servers.{name}.command is empty: give the program that starts the server"
            ));
        }
        if s.timeout_s
            .is_some_and(|t| !(1..=MAX_MCP_TIMEOUT_S).contains(&t))
        {
            return Err(format!(
                "mcp_servers.{name}.timeout_s must be from 1 to {MAX_MCP_TIMEOUT_S} seconds"
            ));
        }
        if let Some(k) = s.env.keys().find(|k| k.is_empty() || k.contains('=')) {
            return Err(format!(
                "mcp_servers.{name}.env has a bad variable name `{k}`"
            ));
        }
    }
    Ok(())
}

/// Parses and checks the `mcp_servers` value of a PROJECT.md (absent or null: none).
pub fn parse_mcp_servers(
    value: Option<&serde_norway::Value>,
) -> Result<BTreeMap<String, McpServerConfig>, String> {
    let servers = match value {
        None | Some(serde_norway::Value::Null) => BTreeMap::new(),
        Some(v) => serde_norway::from_value(v.clone()).map_err(|e| {
            format!("must map server names to {{command, args?, env?, timeout_s?, eager?, writable?}}: {e}")
        })?,
    };
    check_mcp_servers(&servers)?;
    Ok(servers)
}

/// The servers a project gets: config.yml's, with the project's entries winning by name.
pub fn merged_mcp_servers(
    global: &BTreeMap<String, McpServerConfig>,
    project: &BTreeMap<String, McpServerConfig>,
) -> BTreeMap<String, McpServerConfig> {
    let mut all = global.clone();
    all.extend(project.iter().map(|(k, v)| (k.clone(), v.clone())));
    all
}

/// The file where a worker keeps its MCP servers' state, beside PROJECT.md.
pub const MCP_STATUS_FILE: &str = "mcp.json";

/// One server's state as the worker last wrote it (`project show`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpServerStatus {
    /// The server's name.
    pub name: String,
    /// `not started`, `running` or `down`.
    pub state: String,
    /// Its tools offered with every model call (`mcp__NAME__TOOL`): those within the budget
    /// and those found with `tool_search`.
    pub tools: Vec<String>,
    /// How many more of its tools wait behind `tool_search` (DESIGN.md §13).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub deferred: usize,
    /// Why it is down (or last failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// A project's MCP servers' state (none when the file is absent or unreadable).
pub fn read_mcp_status(project_dir: &std::path::Path) -> Vec<McpServerStatus> {
    crate::read::read_text_limited(&project_dir.join(MCP_STATUS_FILE), 1 << 20)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn entries_are_checked_and_the_project_wins() {
        let v: serde_norway::Value =
            serde_norway::from_str("t: {command: ./srv, args: [a], timeout_s: 5}").unwrap();
        let p = parse_mcp_servers(Some(&v)).unwrap();
        assert_eq!(p["t"].args, vec!["a"]);
        for bad in [
            "a__b: {command: x}",
            "t: {command: ''}",
            "t: {command: x, timeout_s: 0}",
            "t: {command: x, colour: red}",
            "t: [x]",
        ] {
            let v: serde_norway::Value = serde_norway::from_str(bad).unwrap();
            assert!(parse_mcp_servers(Some(&v)).is_err(), "{bad}");
        }
        let g: serde_norway::Value =
            serde_norway::from_str("t: {command: global}\nu: {command: u}").unwrap();
        let g = parse_mcp_servers(Some(&g)).unwrap();
        let m = merged_mcp_servers(&g, &p);
        assert_eq!(m["t"].command, "./srv");
        assert_eq!(m["u"].command, "u");
    }
}
