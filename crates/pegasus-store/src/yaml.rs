//! Locating YAML problems in the user's own text.
//!
//! serde_norway reports errors relative to the string it was given and hides the key path
//! inside its message; PROJECT.md, config.yml and role file errors must name the *file* line
//! and the key, so these helpers translate between the two (pegasus-roles uses them too). They
//! also find which line a top-level key sits on, which the surgical PROJECT.md edits rely on.

/// A serde_norway error split into the parts a [`crate::StoreError::Parse`] needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct YamlProblem {
    /// 1-based line within the parsed text, if the parser knew it.
    pub line: Option<usize>,
    /// Dotted key path (`llm.max_concurrency`) if the error is about a value.
    pub key: Option<String>,
    /// The rest of the message, without location noise.
    pub message: String,
}

/// Splits a serde_norway error into line, key and message.
pub fn problem(err: &serde_norway::Error) -> YamlProblem {
    let line = err.location().map(|l| l.line());
    let mut message = err.to_string();
    // The parser's own "at line N column M" counts lines of the snippet, not of the file; the
    // caller reports the file line instead.
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
    YamlProblem { line, key, message }
}

/// Whether `line` is the top-level entry of `key` (`key:`, `"key":` or `'key':` at column 0,
/// followed by a space, a tab or the end of the line).
pub(crate) fn is_key_line(line: &str, key: &str) -> bool {
    let line = line.trim_end_matches(['\n', '\r']);
    let rest = [key.to_string(), format!("\"{key}\""), format!("'{key}'")]
        .iter()
        .find_map(|k| line.strip_prefix(k.as_str()).map(str::to_string));
    let Some(rest) = rest else { return false };
    let rest = rest.trim_start_matches([' ', '\t']);
    rest.strip_prefix(':')
        .is_some_and(|after| after.is_empty() || after.starts_with([' ', '\t']))
}

/// 0-based index of the line holding the top-level `key`, if written in block style.
pub(crate) fn top_level_key_line(text: &str, key: &str) -> Option<usize> {
    text.lines().position(|l| is_key_line(l, key))
}

/// 1-based line of a dotted key path (`llm.max_concurrency`, `variables[1].name`), found by
/// searching for each segment after the line of its parent; falls back to the deepest parent
/// found, then line 1.
pub fn dotted_key_line(text: &str, dotted: &str) -> usize {
    let lines: Vec<&str> = text.lines().collect();
    let mut segments = dotted.split('.');
    let Some(first) = segments.next() else {
        return 1;
    };
    // `variables[1]` is an item of the sequence under the key `variables`.
    let first = first.split('[').next().unwrap_or(first);
    let Some(mut at) = lines.iter().position(|l| is_key_line(l, first)) else {
        return 1;
    };
    for seg in segments {
        // Sequence indices (`variables[1]`) are not keys on a line; stop at the parent.
        if seg.contains('[') {
            break;
        }
        let found = lines.iter().enumerate().skip(at).find(|(i, l)| {
            let body = if *i == at {
                l.split_once(':').map_or("", |(_, r)| r)
            } else {
                l
            };
            mentions_key(body, seg)
        });
        match found {
            Some((i, _)) => at = i,
            None => break,
        }
    }
    at + 1
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
    fn key_lines_are_found_only_at_top_level() {
        assert!(is_key_line("status: active  # x", "status"));
        assert!(is_key_line("status:\n", "status"));
        assert!(is_key_line("\"status\" : a", "status"));
        assert!(!is_key_line("  status: a", "status"));
        assert!(!is_key_line("statuses: a", "status"));
        assert!(!is_key_line("status:x", "status"));
        assert_eq!(top_level_key_line("a: 1\n# c\nb: 2\n", "b"), Some(2));
    }

    #[test]
    fn dotted_keys_are_located() {
        let t = "default_model: x\nllm:\n  timeout_s: 5\n  max_concurrency: 0\nworkers: {shutdown_timeout_s: 0}\n";
        assert_eq!(dotted_key_line(t, "llm.max_concurrency"), 4);
        assert_eq!(dotted_key_line(t, "workers.shutdown_timeout_s"), 5);
        assert_eq!(dotted_key_line(t, "nope.x"), 1);
        // A role file's frontmatter: nested keys, and sequence items found at their key.
        let y =
            "id: a\nmodel:\n  model: null\n  thinking: huge\ntools: [a]\nvariables:\n  - name: x\n";
        assert_eq!(dotted_key_line(y, "model.thinking"), 4);
        assert_eq!(dotted_key_line(y, "tools"), 5);
        assert_eq!(dotted_key_line(y, "variables[0].name"), 7);
        assert_eq!(dotted_key_line(y, "model.tools[0]"), 2);
        assert_eq!(dotted_key_line(y, "nope"), 1);
    }

    #[test]
    fn problems_split_key_and_line() {
        #[derive(Debug, serde::Deserialize)]
        struct L {
            #[allow(dead_code)]
            n: usize,
        }
        #[derive(Debug, serde::Deserialize)]
        struct C {
            #[allow(dead_code)]
            llm: L,
        }
        let err = serde_norway::from_str::<C>("llm:\n  n: x\n").unwrap_err();
        let p = problem(&err);
        assert_eq!(p.line, Some(2));
        assert_eq!(p.key.as_deref(), Some("llm.n"));
        assert!(p.message.starts_with("invalid type"), "{}", p.message);
    }
}
