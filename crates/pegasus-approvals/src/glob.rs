//! The glob engine of the policy: tool names and exec command lines against `tools:` and
//! `allow:` globs, with shell operators that cannot slip past an `allow` glob.

/// Shell operators that chain, pipe, substitute or redirect: a command line holding one matches
/// only an `allow` glob that holds the same operator, as many times, so `cargo test*` never
/// lets `cargo test; rm -rf ~` through, and `a && b*` not `a && b & c`. (`&` on its own is one
/// too: it starts a second command.) Longest first: `&&` is not two `&`.
const OPERATORS: [&str; 10] = ["&&", "||", "$(", ";", "|", "`", "<", ">", "\n", "&"];

/// How many times each operator occurs in `s` (`\r` counts as a newline), longest match first.
fn operators(s: &str) -> [usize; OPERATORS.len()] {
    let s = s.replace('\r', "\n");
    let mut counts = [0; OPERATORS.len()];
    let mut rest = s.as_str();
    while let Some(c) = rest.chars().next() {
        match OPERATORS.iter().position(|op| rest.starts_with(op)) {
            Some(i) => {
                counts[i] += 1;
                rest = &rest[OPERATORS[i].len()..];
            }
            None => rest = &rest[c.len_utf8()..],
        }
    }
    counts
}

/// Whether `allow` glob `glob` lets command line `line` run without asking.
pub fn command_allowed(glob: &str, line: &str) -> bool {
    let line = line.trim();
    let (have, may) = (operators(line), operators(glob));
    if have.iter().zip(may.iter()).any(|(h, m)| h > m) {
        return false;
    }
    glob_match(glob.trim(), line)
}

/// An exact command line as an `allow` glob that matches only it (`*`, `?`, `[` and `\`
/// escaped).
pub fn exact_glob(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    for c in line.trim().chars() {
        if matches!(c, '*' | '?' | '[' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A `tools:` key split into the tool-name glob and, for `NAME(GLOB)`, the glob its call's
/// target must match (`web_fetch(https://docs.rs/*)`: `web_fetch`'s URL).
pub fn split_tool_key(key: &str) -> (&str, Option<&str>) {
    match key.split_once('(') {
        Some((name, rest)) if rest.ends_with(')') => (name.trim(), Some(&rest[..rest.len() - 1])),
        _ => (key, None),
    }
}

pub(crate) fn literal_len(glob: &str) -> usize {
    glob.chars().filter(|c| !matches!(c, '*' | '?')).count()
}

/// Glob match over the whole text: `*` any run of characters (spaces and `/` included), `?`
/// one character, `\x` the character x; everything else literal.
pub fn glob_match(glob: &str, text: &str) -> bool {
    #[derive(Clone, Copy, PartialEq)]
    enum Tok {
        Any,
        One,
        Lit(char),
    }
    let mut toks = Vec::new();
    let mut it = glob.chars();
    while let Some(c) = it.next() {
        toks.push(match c {
            '*' => Tok::Any,
            '?' => Tok::One,
            '\\' => Tok::Lit(it.next().unwrap_or('\\')),
            c => Tok::Lit(c),
        });
    }
    let text: Vec<char> = text.chars().collect();
    // Iterative matching with one backtrack point for the last `*`.
    let (mut g, mut t) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match toks.get(g) {
            Some(Tok::Any) => {
                star = Some((g, t));
                g += 1;
            }
            Some(Tok::One) => {
                g += 1;
                t += 1;
            }
            Some(Tok::Lit(c)) if *c == text[t] => {
                g += 1;
                t += 1;
            }
            _ => match star {
                Some((sg, st)) => {
                    g = sg + 1;
                    t = st + 1;
                    star = Some((sg, st + 1));
                }
                None => return false,
            },
        }
    }
    toks[g.min(toks.len())..].iter().all(|t| *t == Tok::Any)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_keys_split_into_name_and_target() {
        assert_eq!(split_tool_key("web_fetch"), ("web_fetch", None));
        assert_eq!(
            split_tool_key("web_fetch(https://docs.rs/*)"),
            ("web_fetch", Some("https://docs.rs/*"))
        );
        assert_eq!(
            split_tool_key("web_search(*(x)*)"),
            ("web_search", Some("*(x)*"))
        );
        assert_eq!(split_tool_key("odd(name"), ("odd(name", None));
    }

    #[test]
    fn globs_match_the_whole_text() {
        assert!(glob_match("cargo test*", "cargo test --all"));
        assert!(glob_match("cargo test*", "cargo test"));
        assert!(!glob_match("cargo test*", "xcargo test"));
        assert!(glob_match("git ?tatus", "git status"));
        assert!(glob_match("*", ""));
        assert!(glob_match("a*b*c", "aXXbYYc"));
        assert!(!glob_match("a*b*c", "aXXbYY"));
        assert!(glob_match("mcp__*", "mcp__github__search"));
        assert!(glob_match(r"echo \*", "echo *"));
        assert!(!glob_match(r"echo \*", "echo x"));
    }

    #[test]
    fn shell_operators_cannot_slip_past_an_allow_glob() {
        for line in [
            "cargo test; rm -rf ~",
            "cargo test && rm -rf ~",
            "cargo test || rm -rf ~",
            "cargo test | sh",
            "cargo test `rm -rf ~`",
            "cargo test $(rm -rf ~)",
            "cargo test > /etc/passwd",
            "cargo test < /dev/zero",
            "cargo test\nrm -rf ~",
            "cargo test\rrm -rf ~",
            "cargo test & rm -rf ~",
        ] {
            assert!(!command_allowed("cargo test*", line), "{line:?}");
        }
        assert!(command_allowed("cargo test*", "cargo test --all"));
        // `&&` in a glob is not two `&`, `||` not a `|`, and one operator not two.
        assert!(!command_allowed("a && b*", "a && b & rm -rf ~"));
        assert!(!command_allowed(
            "make || echo*",
            "make || echo failed | sh"
        ));
        assert!(command_allowed("a && b*", "a && b --x"));
        assert!(!command_allowed(
            "cargo test* | tee *",
            "cargo test | tee log | sh"
        ));
        // A glob that holds the operator may match it.
        assert!(command_allowed(
            "cargo test* | tee *",
            "cargo test | tee log"
        ));
        assert!(!command_allowed(
            "cargo test* | tee *",
            "cargo test | tee log; rm x"
        ));
        // The exact line of `approve --always` matches itself only.
        let line = "ls *.rs && echo [done]?";
        assert!(command_allowed(&exact_glob(line), line));
        assert!(!command_allowed(
            &exact_glob(line),
            "ls a.rs && echo [done]?"
        ));
    }
}
