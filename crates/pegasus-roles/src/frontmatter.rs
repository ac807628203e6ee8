//! A role file's frontmatter: cutting it off the prompt, and locating YAML problems on the
//! *file's* lines.
//!
//! The format is the same as SKILL.md and PROJECT.md (a `---` line, `key: value` lines, a
//! `---` line, then the prompt), so the cut itself is pegasus-store's [`split_frontmatter`],
//! the one splitter all three share; this module only words its refusals for a role file.
//! serde_norway counts lines from the start of the string it was given and folds the key path
//! into its message; a user fixing a role file needs the file line and the key, so the other
//! helpers here translate, with pegasus-store's [`yaml`] helpers (the ones PROJECT.md and
//! config.yml errors use) shifted by the opening `---` line.

use pegasus_store::yaml::{self, YamlProblem};
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
    let YamlProblem {
        line,
        key,
        mut message,
    } = yaml::problem(err);
    if message.starts_with("unknown field") {
        // A misspelt key would otherwise be dropped or, worse, default to "allow everything".
        message.push_str(": fix its spelling or remove it");
    }
    let line = match (line, &key) {
        (Some(line), _) => line + 1,
        (None, Some(k)) => yaml::dotted_key_line(yaml, k) + 1,
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
        line: yaml::dotted_key_line(yaml, key) + 1,
        key: Some(key.to_string()),
        message,
    }
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
}
