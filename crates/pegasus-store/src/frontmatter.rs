//! Where a `---` YAML frontmatter ends and the markdown body begins.
//!
//! PROJECT.md, role files and SKILL.md share one format: a `---` line, `key: value` lines, a
//! `---` line, then the body. People write these files by hand in whatever editor they have,
//! so the split forgives what editors add without asking: a UTF-8 byte-order mark before the
//! first `---`, CRLF line ends, and spaces after a `---`. This is the only place that decides
//! where a frontmatter starts and stops, so the three kinds of file cannot disagree about the
//! same text.
//!
//! It does not parse the YAML and does not name files: each caller has its own keys and its
//! own error type, and turns a [`FrontmatterError`] into a one-line message about its file.

/// The UTF-8 byte-order mark some editors (Notepad, some Windows tools) write at the start of
/// a file. It is not text the user typed, so it never counts as part of the first line.
const BOM: char = '\u{feff}';

/// A text cut at its frontmatter delimiters. The slices borrow the text given to
/// [`split_frontmatter`]; the byte offsets index that same text (a byte-order mark included),
/// so a caller that keeps the whole file, like PROJECT.md's surgical edits, can rebuild it
/// byte for byte around a changed frontmatter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frontmatter<'a> {
    /// The YAML between the two `---` lines, line ends included; empty for `---` `---`.
    pub yaml: &'a str,
    /// Everything after the closing `---` line, exactly as written.
    pub body: &'a str,
    /// Byte offset where [`yaml`](Self::yaml) starts (just after the opening `---` line).
    pub yaml_start: usize,
    /// Byte offset where [`yaml`](Self::yaml) ends (the start of the closing `---` line).
    pub yaml_end: usize,
    /// Byte offset where [`body`](Self::body) starts (just after the closing `---` line).
    pub body_start: usize,
    /// 1-based file line of the closing `---`, where a "missing key" error should point.
    pub close_line: usize,
}

/// Why a text has no usable frontmatter. Both are about the first line of the file, so
/// callers report them at line 1; the messages say what to write, and callers that know more
/// (a role file also needs a prompt after the block) may extend them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrontmatterError {
    /// The first line (after any byte-order mark) is not `---`.
    #[error("missing frontmatter: start the file with a line `---`, then `key: value` lines, then `---`")]
    Missing,
    /// The opening `---` has no closing `---` after it.
    #[error("the frontmatter opened here is never closed: add a line `---` after the last key")]
    Unclosed,
}

/// `text` without a leading byte-order mark, for callers that treat a file with no
/// frontmatter as all body and should not pass the mark on.
pub fn strip_bom(text: &str) -> &str {
    text.strip_prefix(BOM).unwrap_or(text)
}

/// A `---` delimiter line: trailing spaces, tabs and the `\r` of a CRLF line end are ignored,
/// leading ones are not (an indented `---` inside YAML is content, not a delimiter).
fn is_delimiter(line: &str) -> bool {
    line.trim_end() == "---"
}

/// Cuts `text` into frontmatter and body. The frontmatter must open on the first line; the
/// first later `---` line closes it, so a `---` further down (a markdown rule in the body)
/// stays in the body.
pub fn split_frontmatter(text: &str) -> Result<Frontmatter<'_>, FrontmatterError> {
    let skip = text.len() - strip_bom(text).len();
    let mut lines = text[skip..].split_inclusive('\n');
    let first = lines.next().unwrap_or("");
    if !is_delimiter(first) {
        return Err(FrontmatterError::Missing);
    }
    let yaml_start = skip + first.len();
    let mut offset = yaml_start;
    for (i, line) in lines.enumerate() {
        if is_delimiter(line) {
            let body_start = offset + line.len();
            return Ok(Frontmatter {
                yaml: &text[yaml_start..offset],
                body: &text[body_start..],
                yaml_start,
                yaml_end: offset,
                body_start,
                // Line 1 is the opening `---`; `i` counts the lines after it from 0.
                close_line: i + 2,
            });
        }
        offset += line.len();
    }
    Err(FrontmatterError::Unclosed)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn splits_yaml_from_body() {
        let f = split_frontmatter("---\nid: a\nx: 1\n---\nHello\n").unwrap();
        assert_eq!(f.yaml, "id: a\nx: 1\n");
        assert_eq!(f.body, "Hello\n");
        assert_eq!((f.yaml_start, f.yaml_end, f.body_start), (4, 15, 19));
        assert_eq!(f.close_line, 4);
    }

    #[test]
    fn a_leading_byte_order_mark_is_not_part_of_the_first_line() {
        let text = "\u{feff}---\nid: a\n---\nHello\n";
        let f = split_frontmatter(text).unwrap();
        assert_eq!(f.yaml, "id: a\n");
        assert_eq!(f.body, "Hello\n");
        // Offsets index the text as given, mark included, so it can be rebuilt exactly.
        assert_eq!(&text[f.yaml_start..f.yaml_end], f.yaml);
        assert_eq!(&text[..f.yaml_start], "\u{feff}---\n");
        assert_eq!(f.close_line, 3);
        assert_eq!(strip_bom(text), &text[3..]);
        assert_eq!(strip_bom("plain"), "plain");
    }

    #[test]
    fn crlf_line_ends_and_trailing_blanks_on_delimiters_are_accepted() {
        let f = split_frontmatter("--- \r\nid: a\r\n---\t \r\nHello\r\n").unwrap();
        assert_eq!(f.yaml, "id: a\r\n");
        assert_eq!(f.body, "Hello\r\n");
        let f = split_frontmatter("---\r\nid: a\r\n---").unwrap();
        assert_eq!((f.yaml, f.body), ("id: a\r\n", ""));
    }

    #[test]
    fn text_without_frontmatter_is_missing() {
        for text in [
            "",
            "id: a\n",
            "\n---\nid: a\n---\n",
            " ---\nid: a\n---\n",
            "----\n",
        ] {
            assert_eq!(
                split_frontmatter(text),
                Err(FrontmatterError::Missing),
                "{text:?}"
            );
        }
        assert!(FrontmatterError::Missing
            .to_string()
            .starts_with("missing frontmatter: start the file with a line `---`"));
    }

    #[test]
    fn an_unterminated_frontmatter_is_unclosed() {
        for text in [
            "---",
            "---\n",
            "---\nid: a\n",
            "\u{feff}---\nid: a\n  ---\n",
        ] {
            assert_eq!(
                split_frontmatter(text),
                Err(FrontmatterError::Unclosed),
                "{text:?}"
            );
        }
        assert!(FrontmatterError::Unclosed
            .to_string()
            .contains("never closed"));
    }

    #[test]
    fn an_empty_frontmatter_is_empty_yaml() {
        let f = split_frontmatter("---\n---\nbody").unwrap();
        assert_eq!((f.yaml, f.body, f.close_line), ("", "body", 2));
    }

    #[test]
    fn a_dash_line_in_the_body_stays_in_the_body() {
        let f = split_frontmatter("---\nid: a\n---\nabove\n---\nbelow\n---\n").unwrap();
        assert_eq!(f.yaml, "id: a\n");
        assert_eq!(f.body, "above\n---\nbelow\n---\n");
    }
}
