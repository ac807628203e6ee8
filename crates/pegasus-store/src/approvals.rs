//! The `approvals:` block of config.yml and PROJECT.md as written (DESIGN.md §11): its shape and
//! the checks serde cannot express, so both files are refused at load when it is wrong, like
//! every other key. What the block means (the policy in force, its glob engine, the requests
//! and their answers) is `pegasus-approvals`', which reads it from here.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What the policy says about one tool or command; ordered from the least strict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// The call runs without asking.
    Allow,
    /// The call waits for a person's answer (an approval request) before it runs.
    Ask,
    /// The call is refused without asking.
    Deny,
}

/// `approvals.merge`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MergeMode {
    /// A verified task merges without asking (the default).
    #[default]
    Auto,
    /// A verified task merges only once a person approves the merge.
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
        // `NAME(GLOB)` names a call's target; exec's lines go through `allow`, which knows the
        // shell's operators (DESIGN.md §11).
        if let Some(k) = self.tools.keys().find(|k| {
            k.split_once('(')
                .is_some_and(|(name, _)| name.trim() == "exec")
        }) {
            return Err(format!(
                "tools[{k}]: exec command lines go in `allow` (e.g. allow: [\"cargo test*\"]), not in tools"
            ));
        }
        if let Some(k) = self
            .tools
            .keys()
            .find(|k| k.contains('(') && !k.ends_with(')'))
        {
            return Err(format!(
                "tools[{k}]: a tool entry naming its target is NAME(GLOB), e.g. \"web_fetch(https://docs.rs/*)\""
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn bad_policies_are_refused_with_what_to_write() {
        for bad in [
            "exec: maybe",
            "tools: {exec: sometimes}",
            "timeout_s: 0",
            "timeout_s: -1",
            "merge: never",
            "allow: [\"\"]",
            "tools: {\"exec(ls*)\": allow}",
            "tools: {\"web_fetch(https://x\": allow}",
            "unknown: 1",
        ] {
            let v: serde_norway::Value = serde_norway::from_str(bad).unwrap();
            assert!(ApprovalsConfig::from_yaml(Some(&v)).is_err(), "{bad}");
        }
    }
}
