//! Rich text both ways (DESIGN.md §17): Asana's `html_notes`/`html_text` (a `<body>` of the few
//! tags Asana allows) ⇄ the Markdown Pegasus's agents read and write. What Asana has no tag for
//! (a paragraph, a table, raw HTML, an image) becomes text or a link, never a tag Asana would
//! refuse.

use pulldown_cmark::{Event, HeadingLevel, Options, Parser, Tag, TagEnd};

/// Markdown as Asana rich text: `<body>...</body>` with only Asana's tags.
pub fn to_asana_html(markdown: &str) -> String {
    let mut out = String::from("<body>");
    let mut items = 0usize;
    for event in Parser::new_ext(
        markdown,
        Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS,
    ) {
        match event {
            Event::Start(tag) => match tag {
                Tag::Paragraph
                | Tag::Table(_)
                | Tag::TableHead
                | Tag::TableRow
                | Tag::TableCell => {}
                Tag::Heading { level, .. } => out.push_str(if level == HeadingLevel::H1 {
                    "<h1>"
                } else {
                    "<h2>"
                }),
                Tag::BlockQuote(_) => out.push_str("<blockquote>"),
                Tag::CodeBlock(_) => out.push_str("<pre>"),
                Tag::List(Some(_)) => out.push_str("<ol>"),
                Tag::List(None) => out.push_str("<ul>"),
                Tag::Item => {
                    items += 1;
                    out.push_str("<li>");
                }
                Tag::Emphasis => out.push_str("<em>"),
                Tag::Strong => out.push_str("<strong>"),
                Tag::Strikethrough => out.push_str("<s>"),
                Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. } => {
                    out.push_str(&format!("<a href=\"{}\">", attr(&dest_url)))
                }
                _ => {}
            },
            Event::End(tag) => match tag {
                TagEnd::Paragraph => out.push_str(if items > 0 { "\n" } else { "\n\n" }),
                TagEnd::TableRow | TagEnd::TableHead => out.push('\n'),
                TagEnd::TableCell => out.push_str(" | "),
                TagEnd::Heading(level) => out.push_str(if level == HeadingLevel::H1 {
                    "</h1>"
                } else {
                    "</h2>"
                }),
                TagEnd::BlockQuote(_) => out.push_str("</blockquote>"),
                TagEnd::CodeBlock => {
                    trim_end(&mut out);
                    out.push_str("</pre>");
                }
                TagEnd::List(true) => out.push_str("</ol>"),
                TagEnd::List(false) => out.push_str("</ul>"),
                TagEnd::Item => {
                    items = items.saturating_sub(1);
                    trim_end(&mut out);
                    out.push_str("</li>");
                }
                TagEnd::Emphasis => out.push_str("</em>"),
                TagEnd::Strong => out.push_str("</strong>"),
                TagEnd::Strikethrough => out.push_str("</s>"),
                TagEnd::Link | TagEnd::Image => out.push_str("</a>"),
                _ => {}
            },
            Event::Text(t) => out.push_str(&text(&t)),
            Event::Code(c) => out.push_str(&format!("<code>{}</code>", text(&c))),
            Event::Html(h) | Event::InlineHtml(h) => out.push_str(&text(&h)),
            Event::SoftBreak | Event::HardBreak => out.push('\n'),
            Event::Rule => out.push_str("<hr/>"),
            Event::TaskListMarker(done) => out.push_str(if done { "[x] " } else { "[ ] " }),
            Event::FootnoteReference(f) => out.push_str(&text(&f)),
            Event::InlineMath(m) | Event::DisplayMath(m) => out.push_str(&text(&m)),
        }
    }
    trim_end(&mut out);
    out.push_str("</body>");
    out
}

/// Asana rich text as Markdown; text that is not HTML is kept as it is.
pub fn to_markdown(html: &str) -> String {
    let html = html.trim();
    if !html.starts_with('<') {
        return html.to_string();
    }
    // It fails only when no thread can be had for it: then the rich text as it is.
    pegasus_web::page::to_markdown(html)
        .map(|md| md.trim().to_string())
        .unwrap_or_else(|_| html.to_string())
}

fn text(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn attr(s: &str) -> String {
    text(s).replace('"', "&quot;")
}

fn trim_end(s: &mut String) {
    while s.ends_with(char::is_whitespace) {
        s.pop();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use pegasus_fakellm::asana::check_rich_text;

    #[test]
    fn markdown_becomes_rich_text_asana_accepts() {
        let md = "# Plan\n\nFix **the login** and *log* `it`, see [docs](https://x.example/?a=1&b=\"2\").\n\n* one\n* two <script>\n\n1. first\n2. second\n\n> quoted\n\n```rust\nfn main() {}\n```\n\n---\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n<div>raw</div>\n\n![img](https://x.example/i.png)";
        let html = to_asana_html(md);
        assert_eq!(check_rich_text(&html), Ok(()), "{html}");
        assert!(html.starts_with("<body><h1>Plan</h1>Fix <strong>the login</strong> and <em>log</em> <code>it</code>"), "{html}");
        assert!(
            html.contains("<ul><li>one</li><li>two &lt;script&gt;</li></ul>"),
            "{html}"
        );
        assert!(
            html.contains("<ol><li>first</li><li>second</li></ol>"),
            "{html}"
        );
        assert!(html.contains("<pre>fn main() {}</pre>"), "{html}");
        assert!(
            html.contains("href=\"https://x.example/?a=1&amp;b=&quot;2&quot;\""),
            "{html}"
        );
        assert_eq!(to_asana_html(""), "<body></body>");
    }

    #[test]
    fn rich_text_survives_the_round_trip() {
        let md =
            "Fix **the login** and *log* `it`\n\n* one\n* two\n\nSee [docs](https://x.example/d)";
        let back = to_markdown(&to_asana_html(md));
        for part in [
            "**the login**",
            "*log*",
            "`it`",
            "one",
            "two",
            "[docs](https://x.example/d)",
        ] {
            assert!(back.contains(part), "{part} in {back}");
        }
        assert_eq!(to_markdown("<body>a &amp; b</body>"), "a & b");
        assert_eq!(to_markdown("plain notes"), "plain notes");
    }
}
