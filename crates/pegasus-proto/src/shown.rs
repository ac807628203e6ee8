//! Text as a person is shown it (DESIGN.md §11, "what a person is shown is what runs"): every
//! character that would not appear as itself on a terminal, a web page or a phone is written
//! out as an escape instead, so a command line cannot hide part of itself from the person who
//! approves it. `touch X #\r\e[2Kls -la` must not read as `ls -la`, and a right-to-left
//! override must not reorder what follows it.
//!
//! [`escape`] is the one function every place that shows a request uses (the CLI table and the
//! `send --wait` line, the dashboard, Telegram, e-mail): so they all agree on what a person
//! sees. It is idempotent (what it returns holds none of the characters it escapes, and a
//! backslash stays as it is), so escaping twice on the way (a worker, then pegasusd) changes
//! nothing.

/// `text` with control characters, escape sequences, bidi controls and invisible
/// (zero-width, format) characters written as escapes: `\r`, `\n`, `\t`, `\0`, `\x1b` (other
/// C0 and C1 controls and DEL), `\u{202e}` (everything else). All other text is unchanged.
pub fn escape(text: &str) -> String {
    if !text.chars().any(hidden) {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if !hidden(c) {
            out.push(c);
            continue;
        }
        match c {
            '\r' => out.push_str("\\r"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\0' => out.push_str("\\0"),
            c if (c as u32) < 0x100 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
        }
    }
    out
}

/// Whether `text` holds a character [`escape`] writes out.
pub fn has_hidden(text: &str) -> bool {
    text.chars().any(hidden)
}

/// Whether `c` would not show as itself: controls (C0, DEL, C1), bidi controls, zero-width and
/// other invisible format characters, line and paragraph separators, fillers that render as
/// blank, and the tag characters.
fn hidden(c: char) -> bool {
    let u = c as u32;
    c.is_control()
        || matches!(
            u,
            0x00AD              // soft hyphen
            | 0x034F            // combining grapheme joiner
            | 0x061C            // Arabic letter mark
            | 0x115F | 0x1160   // Hangul fillers
            | 0x17B4 | 0x17B5   // Khmer inherent vowels (invisible)
            | 0x180B..=0x180F   // Mongolian variation selectors and vowel separator
            | 0x200B..=0x200F   // zero-width space, (non-)joiner, LRM, RLM
            | 0x2028..=0x202E   // line/paragraph separators, LRE RLE PDF LRO RLO
            | 0x2060..=0x206F   // word joiner, invisible operators, LRI RLI FSI PDI, deprecated
            | 0x3164            // Hangul filler
            | 0xFE00..=0xFE0F   // variation selectors
            | 0xFEFF            // zero-width no-break space (BOM)
            | 0xFFA0            // halfwidth Hangul filler
            | 0xFFF9..=0xFFFB   // interlinear annotation
            | 0x1D173..=0x1D17A // musical format characters
            | 0xE0000..=0xE007F // tags
            | 0xE0100..=0xE01EF // variation selectors supplement
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_hides_is_written_out() {
        assert_eq!(
            escape("touch X #\r\x1b[2Kls -la"),
            "touch X #\\r\\x1b[2Kls -la"
        );
        assert_eq!(escape("ls \u{202e}fdp.exe"), "ls \\u{202e}fdp.exe");
        assert_eq!(escape("rm\u{200b} -rf"), "rm\\u{200b} -rf");
        assert_eq!(escape("a\nb\tc\0"), "a\\nb\\tc\\0");
        assert_eq!(escape("\u{7f}\u{9b}"), "\\x7f\\x9b");
        assert_eq!(
            escape("\u{2066}x\u{2069}\u{feff}"),
            "\\u{2066}x\\u{2069}\\u{feff}"
        );
        assert_eq!(escape("tag\u{e0041}"), "tag\\u{e0041}");
        assert!(has_hidden("a\u{200d}b") && !has_hidden("a b"));
    }

    #[test]
    fn plain_text_and_backslashes_stay_and_escaping_twice_changes_nothing() {
        for s in [
            "cargo test --all && echo 'a\\|b' > out.txt",
            "grep -r \"é ü 中文 😀\" src/",
            "",
        ] {
            assert_eq!(escape(s), s);
        }
        let once = escape("x\r\u{202e}\u{200b}\x1b\\r");
        assert_eq!(escape(&once), once);
        assert!(!has_hidden(&once));
    }
}
