//! Model text as HTML: Markdown parsed by pulldown-cmark and written here, tag by tag, so what
//! reaches the page is only the markup this file writes. Raw HTML in the text is shown as text
//! (escaped), images become links (nothing is loaded from elsewhere), and a link keeps its
//! target only when that is `http:`, `https:`, `mailto:` or a relative address — never
//! `javascript:`, `data:` or anything else a browser would run.

use maud::{Markup, PreEscaped};
use pulldown_cmark::{CodeBlockKind, Event, HeadingLevel, Options, Parser, Tag, TagEnd};
use std::fmt::Write as _;

/// Renders `text` (Markdown) as safe HTML.
pub(crate) fn render(text: &str) -> Markup {
    let options =
        Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    let mut out = String::with_capacity(text.len() + text.len() / 4);
    // What each open link or image ends with (`</a>`, or nothing for a refused target).
    let mut links: Vec<&'static str> = Vec::new();
    let mut in_head = false;
    for event in Parser::new_ext(text, options) {
        match event {
            Event::Start(tag) => open(tag, &mut out, &mut links, &mut in_head),
            Event::End(tag) => close(tag, &mut out, &mut links, &mut in_head),
            Event::Text(t) | Event::InlineMath(t) | Event::DisplayMath(t) => escape(&t, &mut out),
            Event::Code(t) => {
                out.push_str("<code>");
                escape(&t, &mut out);
                out.push_str("</code>");
            }
            // Markup in model text is text: shown, never interpreted.
            Event::Html(t) | Event::InlineHtml(t) => escape(&t, &mut out),
            Event::FootnoteReference(t) => {
                out.push('[');
                escape(&t, &mut out);
                out.push(']');
            }
            // A chat reply's line breaks are the writer's: kept, as a person reads them.
            Event::SoftBreak | Event::HardBreak => out.push_str("<br>"),
            Event::Rule => out.push_str("<hr>"),
            Event::TaskListMarker(done) => out.push_str(if done { "☑ " } else { "☐ " }),
        }
    }
    PreEscaped(out)
}

fn open(tag: Tag<'_>, out: &mut String, links: &mut Vec<&'static str>, in_head: &mut bool) {
    let s = match tag {
        Tag::Paragraph => "<p>",
        // Headings start at h3: the page has its own h1 and h2.
        Tag::Heading { level, .. } => match level {
            HeadingLevel::H1 => "<h3>",
            HeadingLevel::H2 => "<h4>",
            HeadingLevel::H3 => "<h5>",
            _ => "<h6>",
        },
        Tag::BlockQuote(_) => "<blockquote>",
        Tag::CodeBlock(CodeBlockKind::Fenced(lang)) if !lang.is_empty() => {
            out.push_str("<pre><code data-lang=\"");
            escape(lang.split_whitespace().next().unwrap_or_default(), out);
            out.push_str("\">");
            return;
        }
        Tag::CodeBlock(_) => "<pre><code>",
        Tag::HtmlBlock => "<p class=\"raw\">",
        Tag::List(Some(1)) => "<ol>",
        Tag::List(Some(start)) => {
            out.push_str(&format!("<ol start=\"{start}\">"));
            return;
        }
        Tag::List(None) => "<ul>",
        Tag::Item => "<li>",
        Tag::FootnoteDefinition(_) => "<div class=\"footnote\">",
        Tag::DefinitionList => "<dl>",
        Tag::DefinitionListTitle => "<dt>",
        Tag::DefinitionListDefinition => "<dd>",
        Tag::Table(_) => "<div class=\"scroll\"><table>",
        Tag::TableHead => {
            *in_head = true;
            "<thead><tr>"
        }
        Tag::TableRow => "<tr>",
        Tag::TableCell if *in_head => "<th>",
        Tag::TableCell => "<td>",
        Tag::Emphasis => "<em>",
        Tag::Strong => "<strong>",
        Tag::Strikethrough => "<del>",
        Tag::Superscript => "<sup>",
        Tag::Subscript => "<sub>",
        Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. } => {
            if safe_url(&dest_url) {
                out.push_str("<a href=\"");
                escape(&dest_url, out);
                out.push_str("\" rel=\"noopener noreferrer nofollow\" target=\"_blank\">");
                links.push("</a>");
            } else {
                links.push("");
            }
            return;
        }
        Tag::MetadataBlock(_) => "<pre>",
    };
    out.push_str(s);
}

fn close(tag: TagEnd, out: &mut String, links: &mut Vec<&'static str>, in_head: &mut bool) {
    let s = match tag {
        TagEnd::Paragraph | TagEnd::HtmlBlock => "</p>",
        TagEnd::Heading(level) => match level {
            HeadingLevel::H1 => "</h3>",
            HeadingLevel::H2 => "</h4>",
            HeadingLevel::H3 => "</h5>",
            _ => "</h6>",
        },
        TagEnd::BlockQuote(_) => "</blockquote>",
        TagEnd::CodeBlock => "</code></pre>",
        TagEnd::List(true) => "</ol>",
        TagEnd::List(false) => "</ul>",
        TagEnd::Item => "</li>",
        TagEnd::FootnoteDefinition => "</div>",
        TagEnd::DefinitionList => "</dl>",
        TagEnd::DefinitionListTitle => "</dt>",
        TagEnd::DefinitionListDefinition => "</dd>",
        TagEnd::Table => "</tbody></table></div>",
        TagEnd::TableHead => {
            *in_head = false;
            "</tr></thead><tbody>"
        }
        TagEnd::TableRow => "</tr>",
        TagEnd::TableCell if *in_head => "</th>",
        TagEnd::TableCell => "</td>",
        TagEnd::Emphasis => "</em>",
        TagEnd::Strong => "</strong>",
        TagEnd::Strikethrough => "</del>",
        TagEnd::Superscript => "</sup>",
        TagEnd::Subscript => "</sub>",
        TagEnd::Link | TagEnd::Image => links.pop().unwrap_or_default(),
        TagEnd::MetadataBlock(_) => "</pre>",
    };
    out.push_str(s);
}

/// Whether a link target may be followed: `http:`, `https:`, `mailto:` or no scheme at all (a
/// relative address). Browsers drop tabs, newlines and leading spaces or controls before they
/// read a scheme (`java\tscript:` runs), so this reads it the same way.
fn safe_url(url: &str) -> bool {
    let cleaned: String = url
        .chars()
        .filter(|c| !c.is_ascii_whitespace() && !c.is_control())
        .collect::<String>()
        .to_ascii_lowercase();
    let end = cleaned.find(['/', '?', '#']).unwrap_or(cleaned.len());
    match cleaned[..end].find(':') {
        None => true,
        Some(i) => matches!(&cleaned[..i], "http" | "https" | "mailto"),
    }
}

/// Escapes text for an element's content or a double-quoted attribute.
fn escape(text: &str, out: &mut String) {
    let _ = maud::Escaper::new(out).write_str(text);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn html(md: &str) -> String {
        render(md).into_string()
    }

    #[test]
    fn markdown_becomes_markup() {
        let h = html("# Plan\n\n**bold**, *em*, `code` and ~~old~~\n\n- one\n- two\n\n```rust\nfn main() {}\n```");
        assert!(h.contains("<h3>Plan</h3>"), "{h}");
        assert!(h.contains("<strong>bold</strong>"), "{h}");
        assert!(h.contains("<em>em</em>"), "{h}");
        assert!(h.contains("<code>code</code>"), "{h}");
        assert!(h.contains("<del>old</del>"), "{h}");
        assert!(h.contains("<ul><li>one</li><li>two</li></ul>"), "{h}");
        assert!(
            h.contains("<pre><code data-lang=\"rust\">fn main() {}\n</code></pre>"),
            "{h}"
        );
        let t = html("| a | b |\n|---|---|\n| 1 | 2 |");
        assert!(
            t.contains("<table><thead><tr><th>a</th><th>b</th></tr></thead><tbody><tr><td>1</td><td>2</td></tr></tbody></table>"),
            "{t}"
        );
    }

    #[test]
    fn raw_html_in_model_text_is_shown_escaped_never_run() {
        let h = html("<script>alert('x')</script> & done");
        assert!(!h.contains("<script"), "{h}");
        assert!(
            h.contains("&lt;script&gt;alert('x')&lt;/script&gt; &amp; done"),
            "{h}"
        );
        let h = html("text with <img src=x onerror=alert(1)> inline and <b>bold</b>");
        assert!(!h.contains("<img") && !h.contains("<b>"), "{h}");
        assert!(h.contains("&lt;img src=x onerror=alert(1)&gt;"), "{h}");
        let h = html("`<script>` and\n\n```\n</code></pre><script>x</script>\n```");
        assert!(!h.contains("<script"), "{h}");
    }

    #[test]
    fn links_keep_only_safe_targets() {
        let h = html("[site](https://example.com/a?b=\"c\") and <https://example.org> and [mail](mailto:a@b.c) and [rel](/projects/x)");
        assert!(
            h.contains("<a href=\"https://example.com/a?b=%22c%22\"")
                || h.contains("<a href=\"https://example.com/a?b=&quot;c&quot;\""),
            "{h}"
        );
        assert!(h.contains("<a href=\"https://example.org\""), "{h}");
        assert!(h.contains("<a href=\"mailto:a@b.c\""), "{h}");
        assert!(h.contains("<a href=\"/projects/x\""), "{h}");
        for bad in [
            "[x](javascript:alert(1))",
            "[x](JavaScript:alert(1))",
            "[x](<java\tscript:alert(1)>)",
            "[x]( javascript:alert(1))",
            "[x](data:text/html,<script>alert(1)</script>)",
            "[x](vbscript:msgbox)",
            "<javascript:alert(1)>",
            "![x](javascript:alert(1))",
        ] {
            let h = html(bad);
            assert!(!h.contains("href"), "{bad}: {h}");
            assert!(
                !h.to_ascii_lowercase().contains("script:") || !h.contains("<a"),
                "{bad}: {h}"
            );
        }
        // An image is a link to it, never loaded.
        let h = html("![chart](https://example.com/c.png)");
        assert!(!h.contains("<img"), "{h}");
        assert!(h.contains("<a href=\"https://example.com/c.png\""), "{h}");
        assert!(h.contains(">chart</a>"), "{h}");
    }

    #[test]
    fn the_scheme_is_read_as_a_browser_reads_it() {
        for ok in [
            "https://a",
            "http://a",
            "mailto:x@y",
            "/p",
            "#top",
            "page?x=a:b",
            "a/b:c",
        ] {
            assert!(safe_url(ok), "{ok}");
        }
        for bad in [
            "javascript:x",
            "JAVASCRIPT:x",
            "java\nscript:x",
            "\u{1}javascript:x",
            "data:x",
            "file:///etc",
        ] {
            assert!(!safe_url(bad), "{bad:?}");
        }
    }
}
