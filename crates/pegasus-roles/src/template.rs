//! `{{name}}` placeholders in a role's prompt template.
//!
//! The syntax is deliberately tiny: `{{name}}` (spaces inside the braces allowed) is replaced
//! by a value in one pass, so a value that itself contains `{{x}}` is inserted literally and
//! can never pull in another variable. Anything between `{{` and `}}` that contains spaces or
//! braces (`{{ not a var }}`, JSON like `{{"a":1}}`) is not a placeholder and stays as written.

use std::collections::BTreeMap;
use std::ops::Range;

/// One placeholder found in a template: its byte range (braces included) and its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placeholder<'a> {
    /// Where `{{name}}` sits in the template.
    pub range: Range<usize>,
    /// The name between the braces, trimmed.
    pub name: &'a str,
}

/// Every placeholder in `template`, in order.
pub fn placeholders(template: &str) -> Vec<Placeholder<'_>> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(open) = template[from..].find("{{").map(|i| from + i) {
        let inner_start = open + 2;
        let Some(close) = template[inner_start..].find("}}").map(|i| inner_start + i) else {
            break;
        };
        let name = template[inner_start..close].trim();
        if is_placeholder_name(name) {
            out.push(Placeholder {
                range: open..close + 2,
                name,
            });
            from = close + 2;
        } else {
            // Not a placeholder: look again one byte later, so `{{{x}}` still finds `{{x}}`.
            from = open + 1;
        }
    }
    out
}

/// Names worth treating as placeholders: anything without whitespace or braces, so a typo like
/// `{{project.name}}` is reported as undeclared rather than silently left in the prompt.
fn is_placeholder_name(name: &str) -> bool {
    !name.is_empty() && !name.contains(|c: char| c.is_whitespace() || c == '{' || c == '}')
}

/// Whether `name` may be declared as a variable: a letter or `_`, then letters, digits, `_`.
pub fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Replaces every placeholder with its value from `values`; a placeholder without a value is
/// left as written (callers check completeness first, see [`crate::Role::render`]).
pub fn fill(template: &str, values: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(template.len());
    let mut last = 0;
    for p in placeholders(template) {
        out.push_str(&template[last..p.range.start]);
        let as_written = &template[p.range.clone()];
        out.push_str(values.get(p.name).map_or(as_written, String::as_str));
        last = p.range.end;
    }
    out.push_str(&template[last..]);
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn names(t: &str) -> Vec<&str> {
        placeholders(t).into_iter().map(|p| p.name).collect()
    }

    #[test]
    fn finds_placeholders_and_ignores_other_braces() {
        assert_eq!(names("a {{x}} b {{ y }} c"), ["x", "y"]);
        assert_eq!(names("{{not a var}} {{\"a\": 1}} {{}}"), Vec::<&str>::new());
        assert_eq!(names("{{{x}}}"), ["x"]);
        assert_eq!(names("{{project.name}}"), ["project.name"]);
        assert_eq!(names("open {{x"), Vec::<&str>::new());
    }

    #[test]
    fn fills_in_one_pass() {
        let v = BTreeMap::from([
            ("a".to_string(), "{{b}}".to_string()),
            ("b".to_string(), "B".to_string()),
        ]);
        assert_eq!(fill("[{{a}}|{{ b }}|{{c}}]", &v), "[{{b}}|B|{{c}}]");
    }

    #[test]
    fn variable_names_are_identifiers() {
        assert!(is_variable_name("language"));
        assert!(is_variable_name("_x1"));
        assert!(!is_variable_name("1x"));
        assert!(!is_variable_name("a-b"));
        assert!(!is_variable_name(""));
    }
}
