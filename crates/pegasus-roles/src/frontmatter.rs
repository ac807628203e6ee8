//! A role file's frontmatter: cutting it off the prompt, and locating YAML problems on the
//! *file's* lines.
//!
//! The format is the same as SKILL.md and PROJECT.md (a `---` line, `key: value` lines, a
//! `---` line, then the prompt), so the cut itself is pegasus-store's [`split_frontmatter`],
//! the one splitter all three share; this module only words its refusals for a role file.
//! serde_norway counts lines from the start of the string it was given and folds the key path
//! into its message; a user fixing a role file needs the file line and the key, so the other
//! helpers here translate.

use pegasus_store::{split_frontmatter, Frontmatter, FrontmatterError};

use crate::error::RoleError;

/// Cuts `text` at its frontmatter delimiters; `origin` names the file in errors. Both
/// refusals are about the file's first line.
pub(crate) fn split<'a>(text: &'a str, origin: &str) -> Result<Frontmatter<'a>, RoleError> {
    split_frontmatter(text).map_err(|e| RoleError::Parse {
        origin: origin.to_string(),
        line: 1,
        key: None,
        message: match e {
            // A role file also needs its prompt after the block; say so where it is missing.
            FrontmatterError::Missing => format!("{e}, then the prompt"),
            FrontmatterError::Unclosed => e.to_string(),
        },
    })
}

/// Turns a serde_norway error on the frontmatter into a [`RoleError::Parse`] with the file
/// line (the opening `---` is line 1, so frontmatter line N is file line N + 1) and the key.
pub(crate) fn parse_error(err: &serde_norway::Error, yaml: &str, origin: &str) -> RoleError {
    let mut message = err.to_string();
    // The parser's own "at line N column M" counts lines of the snippet, not of the file.
    if let Some(i) = message.find(" at line ") {
        message.truncate(i);
    }
    let mut key = None;
    if let Some(i) = message.find(": ") {
        let prefix = &message[..i];
        // serde messages ("invalid type: ...") contain spaces; a key path never does.
        if !prefix.is_empty() && !prefix.contains(char::is_whitespace) {
            key = Some(prefix.to_string());
            message = message[i + 2..].to_string();
        }
    }
    if message.starts_with("unknown field") {
        // A misspelt key would otherwise be dropped or, worse, default to "allow everything".
        message.push_str(": fix its spelling or remove it");
    }
    let line = match (&key, err.location()) {
        (_, Some(loc)) => loc.line() + 1,
        (Some(k), None) => dotted_key_line(yaml, k) + 1,
        (None, None) => 1,
    };
    RoleError::Parse {
        origin: origin.to_string(),
        line,
        key,
        message,
    }
}

/// A [`RoleError::Parse`] about a top-level key the typed parse accepted but a later check
/// refused (a bad id, say), pointing at the key's line.
pub(crate) fn key_error(yaml: &str, origin: &str, key: &str, message: String) -> RoleError {
    RoleError::Parse {
        origin: origin.to_string(),
        line: dotted_key_line(yaml, key) + 1,
        key: Some(key.to_string()),
        message,
    }
}

/// 1-based frontmatter line of a dotted key (`model.thinking`): each segment is searched for
/// after its parent's line; falls back to the deepest parent found, then line 1.
fn dotted_key_line(yaml: &str, dotted: &str) -> usize {
    let lines: Vec<&str> = yaml.lines().collect();
    let mut segments = dotted.split('.');
    let Some(first) = segments.next() else {
        return 1;
    };
    let Some(mut at) = lines.iter().position(|l| is_top_level_key(l, first)) else {
        return 1;
    };
    for seg in segments {
        // Sequence indices (`variables[1]`) are not keys on a line; stop at the parent.
        if seg.contains('[') {
            break;
        }
        let found = lines
            .iter()
            .enumerate()
            .skip(at + 1)
            .find(|(_, l)| mentions_key(l, seg));
        match found {
            Some((i, _)) => at = i,
            None => break,
        }
    }
    at + 1
}

/// Whether `line` is the top-level entry of `key` (`key:` at column 0).
fn is_top_level_key(line: &str, key: &str) -> bool {
    let base = key.split('[').next().unwrap_or(key);
    line.strip_prefix(base)
        .and_then(|rest| rest.trim_start_matches([' ', '\t']).strip_prefix(':'))
        .is_some_and(|after| after.is_empty() || after.starts_with([' ', '\t', '\r']))
}

/// Whether `seg:` appears in `line` as a key (after indentation, `{`, `,` or `- `).
fn mentions_key(line: &str, seg: &str) -> bool {
    let pat = format!("{seg}:");
    line.match_indices(&pat).any(|(i, _)| {
        let before = line[..i].trim_end();
        let after = &line[i + pat.len()..];
        let ends_ok = after.is_empty() || after.starts_with([' ', '\t', '\r']);
        let starts_ok = before.is_empty()
            || before.ends_with('{')
            || before.ends_with(',')
            || before.ends_with('-');
        ends_ok && starts_ok
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn splits_frontmatter_from_body() {
        let s = split("---\nid: a\n---\nHello\n", "x.md").unwrap();
        assert_eq!(s.yaml, "id: a\n");
        assert_eq!(s.body, "Hello\n");
    }

    #[test]
    fn missing_or_unclosed_frontmatter_is_refused() {
        let e = split("id: a\n", "x.md").err().unwrap().to_string();
        assert_eq!(e, "x.md:1: missing frontmatter: start the file with a line `---`, then `key: value` lines, then `---`, then the prompt");
        let e = split("---\nid: a\n", "x.md").err().unwrap().to_string();
        assert_eq!(e, "x.md:1: the frontmatter opened here is never closed: add a line `---` after the last key");
    }

    #[test]
    fn dotted_keys_are_located() {
        let y = "id: a\nmodel:\n  model: null\n  thinking: huge\ntools: [a]\n";
        assert_eq!(dotted_key_line(y, "model.thinking"), 4);
        assert_eq!(dotted_key_line(y, "tools"), 5);
        assert_eq!(dotted_key_line(y, "nope"), 1);
    }
}
