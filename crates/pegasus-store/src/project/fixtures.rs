//! Shared test fixtures for the PROJECT.md modules: the seed example file, fixed timestamps
//! and proptest strategies that build valid project files, so each module's tests start from
//! the same known-good text.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use chrono::{DateTime, TimeZone, Utc};
use proptest::prelude::*;
use serde_norway::Value;

use super::{NewProject, ProjectFile, ProjectStatus};
use crate::error::Result;
use crate::yaml::is_key_line;

pub(crate) const SEED: &str = r#"---
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

pub(crate) fn at(h: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 1, h, 0, 0).unwrap()
}

pub(crate) fn parse(text: &str) -> Result<ProjectFile> {
    ProjectFile::parse(text, Path::new("p/PROJECT.md"))
}

pub(crate) fn err_text(text: &str) -> String {
    parse(text).unwrap_err().to_string()
}

pub(crate) fn lines_except<'a>(text: &'a str, keys: &[&str]) -> Vec<&'a str> {
    text.lines()
        .filter(|l| !keys.iter().any(|k| is_key_line(l, k)))
        .collect()
}

pub(crate) fn status_strategy() -> impl Strategy<Value = ProjectStatus> {
    prop::sample::select(ProjectStatus::ALL.to_vec())
}

pub(crate) fn name_strategy() -> impl Strategy<Value = String> {
    "[a-z0-9][a-z0-9-]{0,62}"
}

pub(crate) fn extra_keys() -> impl Strategy<Value = Vec<(String, String)>> {
    prop::collection::vec(("x_[a-z_]{1,10}", any::<String>()), 0..4).prop_map(|mut v| {
        let mut seen = HashSet::new();
        v.retain(|(k, _)| seen.insert(k.clone()));
        v
    })
}

/// A PROJECT.md text built from parts, with unknown keys added through `set`.
pub(crate) fn build(
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
