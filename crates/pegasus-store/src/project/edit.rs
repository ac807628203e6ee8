//! Changing a PROJECT.md the user also edits by hand: lifecycle verbs ([`ProjectFile::apply`]),
//! single keys ([`ProjectFile::set`]) and the atomic save. Each edit rewrites only the lines
//! of the keys it sets, so unknown keys, comments, order and the body stay byte for byte, and
//! the result is re-parsed so an invalid value changes nothing.

use std::path::Path;

use chrono::{DateTime, Utc};
use serde_norway::{Mapping, Value};

use super::{format_ts, ProjectFile, ProjectStatus, PROJECT_FILE};
use crate::atomic::write_atomic;
use crate::error::{Result, StoreError};
use crate::lifecycle::{transition, Verb};
use crate::yaml::is_key_line;

/// `key: value` as YAML lines (no trailing newline), quoting the value as needed so it reads
/// back as the same value and never produces a `---` line.
pub(super) fn render_entry(key: &str, value: &Value) -> Result<String> {
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
    /// Writes [`render`](Self::render) to `<project_dir>/PROJECT.md` atomically.
    /// A file over the size that loading accepts is refused here, so Pegasus never writes a
    /// PROJECT.md it would then call invalid.
    pub fn save(&self, project_dir: &Path) -> Result<()> {
        let len = self.text.len() as u64;
        if len > super::parse::MAX_PROJECT_FILE {
            return Err(StoreError::Invalid(format!(
                "PROJECT.md would be {len} bytes, over the {}-byte limit: shorten the goal, background or constraints and keep long material in the project's files",
                super::parse::MAX_PROJECT_FILE
            )));
        }
        write_atomic(&project_dir.join(PROJECT_FILE), self.text.as_bytes())
    }

    /// Sets one top-level frontmatter key, editing only that key's lines (or appending it before
    /// the closing `---`). The result is re-parsed, so an invalid value for a known key is
    /// refused and nothing changes.
    pub fn set(&mut self, key: &str, value: &Value) -> Result<()> {
        let entry = render_entry(key, value)?;
        self.edit(&[(key, entry)])
    }

    /// Sets `roles:` to `assignments`, each written in its shortest form (the bare role id
    /// when it has no overrides), like [`set`](Self::set).
    pub fn set_roles(&mut self, assignments: &[super::Assignment]) -> Result<()> {
        self.set("roles", &super::roles::to_yaml(assignments))
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::super::fixtures::*;
    use super::*;
    use proptest::prelude::*;

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
    fn apply_keeps_a_leading_byte_order_mark() {
        let text =
            "\u{feff}---\nname: foo\nstatus: active\ncreated: 2026-02-28T10:00:00Z\n---\nbody\n";
        let mut p = parse(text).unwrap();
        p.apply(Verb::Suspend, at(1)).unwrap();
        assert_eq!(
            p.render(),
            "\u{feff}---\nname: foo\nstatus: suspended\ncreated: 2026-02-28T10:00:00Z\nsuspended: 2026-03-01T01:00:00Z\n---\nbody\n"
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

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

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
    }
}
