//! What a fetched body becomes for the model: HTML as Markdown, other text as it is, binary
//! refused; every text decoded from the charset it was written in (a byte order mark, else the
//! `Content-Type` charset, else for HTML its `<meta charset>`, else UTF-8, else windows-1252,
//! which decodes every byte, as browsers do).

use encoding_rs::Encoding;

/// How a body is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// HTML or XHTML: turned into Markdown.
    Html,
    /// Any other text (plain, JSON, XML, CSS, JavaScript, CSV, ...): given as it is.
    Text,
    /// Images, PDFs, archives, `application/octet-stream`: refused.
    Binary,
}

/// The media type of a `Content-Type` value, lowercased, without parameters.
pub fn media_type(content_type: &str) -> String {
    content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// What kind of body `content_type` announces; without one, what its first bytes look like.
pub fn kind_of(content_type: Option<&str>, head: &[u8]) -> Kind {
    let Some(ct) = content_type.map(media_type).filter(|m| !m.is_empty()) else {
        return sniff(head);
    };
    let (top, sub) = ct.split_once('/').unwrap_or((ct.as_str(), ""));
    match (top, sub) {
        ("text", "html") | ("application", "xhtml+xml") => Kind::Html,
        ("text", _) => Kind::Text,
        (
            "application",
            "json" | "xml" | "javascript" | "ecmascript" | "x-javascript" | "yaml" | "x-yaml"
            | "toml" | "x-sh" | "x-ndjson" | "ndjson" | "sql" | "graphql" | "csv",
        ) => Kind::Text,
        (_, s) if s.ends_with("+json") || s.ends_with("+xml") => Kind::Text,
        _ => Kind::Binary,
    }
}

/// A body that did not say what it is: HTML if it starts like HTML, binary if it holds a NUL
/// byte, text otherwise.
fn sniff(head: &[u8]) -> Kind {
    let start = String::from_utf8_lossy(&head[..head.len().min(512)]).to_ascii_lowercase();
    let start = start.trim_start_matches('\u{feff}').trim_start();
    if start.starts_with("<!doctype html") || start.starts_with("<html") {
        Kind::Html
    } else if head.iter().take(1024).any(|b| *b == 0) {
        Kind::Binary
    } else {
        Kind::Text
    }
}

/// The `charset` parameter of a `Content-Type` value, if it names one encoding_rs knows.
fn header_charset(content_type: &str) -> Option<&'static Encoding> {
    content_type.split(';').skip(1).find_map(|p| {
        let (k, v) = p.split_once('=')?;
        (k.trim().eq_ignore_ascii_case("charset"))
            .then(|| Encoding::for_label(v.trim().trim_matches(['"', '\'']).as_bytes()))
            .flatten()
    })
}

/// The charset a `<meta charset=...>` or `<meta http-equiv="Content-Type" content="...;
/// charset=...">` in the first 1024 bytes names (HTML's prescan, in short).
fn meta_charset(head: &[u8]) -> Option<&'static Encoding> {
    let head = &head[..head.len().min(1024)];
    let lower: Vec<u8> = head.iter().map(u8::to_ascii_lowercase).collect();
    let mut at = 0;
    while let Some(i) = find(&lower[at..], b"<meta") {
        let start = at + i;
        let end = find(&lower[start..], b">").map_or(lower.len(), |e| start + e);
        let tag = &lower[start..end];
        if let Some(c) = find(tag, b"charset=") {
            let value: Vec<u8> = tag[c + b"charset=".len()..]
                .iter()
                .skip_while(|b| matches!(b, b'"' | b'\'' | b' '))
                .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b':' | b'.'))
                .copied()
                .collect();
            if let Some(e) = Encoding::for_label(&value) {
                // A page that says UTF-16 in ASCII bytes is not UTF-16 (HTML's rule).
                return Some(
                    if e == encoding_rs::UTF_16LE || e == encoding_rs::UTF_16BE {
                        encoding_rs::UTF_8
                    } else {
                        e
                    },
                );
            }
        }
        at = end.max(start + 1);
    }
    None
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Decodes `body` as text (see the module doc for which charset wins); returns the text and
/// the encoding's name. `cut`: the body was cut at the size cap, maybe inside a character.
pub fn decode(
    body: &[u8],
    content_type: Option<&str>,
    kind: Kind,
    cut: bool,
) -> (String, &'static str) {
    let declared = Encoding::for_bom(body)
        .map(|(e, _)| e)
        .or_else(|| content_type.and_then(header_charset))
        .or_else(|| (kind == Kind::Html).then(|| meta_charset(body)).flatten());
    let encoding = declared.unwrap_or_else(|| match std::str::from_utf8(body) {
        Ok(_) => encoding_rs::UTF_8,
        // Cut at the size cap in the middle of a character: still UTF-8.
        Err(e) if cut && e.error_len().is_none() => encoding_rs::UTF_8,
        Err(_) => encoding_rs::WINDOWS_1252,
    });
    let (text, used, _) = encoding.decode(body);
    (text.into_owned(), used.name())
}

/// Deepest element nesting [`to_markdown`] converts; a page nested deeper (no real page is,
/// a hostile one can be: `<div>` 200,000 times fits the size cap) comes back as plain text.
const MAX_NESTING: usize = 512;
/// The converter walks the tree recursively: its own thread, with room for [`MAX_NESTING`].
const CONVERT_STACK: usize = 64 << 20;

/// HTML as Markdown: scripts, styles and other non-content elements left out. A page nested
/// deeper than [`MAX_NESTING`] is given as its text without tags, with a note saying why.
pub fn to_markdown(html: &str) -> Result<String, String> {
    let depth = nesting_depth(html);
    if depth > MAX_NESTING {
        return Ok(format!(
            "[this page nests its elements {depth} deep (more than {MAX_NESTING}): shown as plain text]\n\n{}",
            plain_text(html)
        ));
    }
    let html = html.to_string();
    std::thread::Builder::new()
        .name("html-to-markdown".into())
        .stack_size(CONVERT_STACK)
        .spawn(move || convert(&html))
        .map_err(|e| format!("the HTML could not be read: no thread to convert it: {e}"))?
        .join()
        .map_err(|_| "the HTML could not be read: its conversion failed".to_string())?
}

/// The deepest nesting of elements in `html`, counted by a scan of its tags: elements whose
/// end tag may be left out (`p`, `li`, `td`, ...) and void elements (`br`, `img`, ...) do not
/// count, so sloppy real pages are not over-counted.
fn nesting_depth(html: &str) -> usize {
    const UNCOUNTED: &[&str] = &[
        "p", "li", "dt", "dd", "tr", "td", "th", "option", "optgroup", "tbody", "thead", "tfoot",
        "colgroup", "caption", "rb", "rt", "rp", "rtc", "br", "img", "hr", "input", "meta", "link",
        "area", "base", "col", "embed", "param", "source", "track", "wbr", "!doctype",
    ];
    let bytes = html.as_bytes();
    let (mut depth, mut max, mut at) = (0usize, 0usize, 0usize);
    while let Some(i) = bytes[at..].iter().position(|&b| b == b'<') {
        let start = at + i + 1;
        let Some(len) = bytes[start..].iter().position(|&b| b == b'>') else {
            break;
        };
        let tag = &html[start..start + len];
        at = start + len + 1;
        if tag.starts_with("!--") || tag.ends_with('/') {
            continue;
        }
        let closing = tag.starts_with('/');
        let name: String = tag
            .trim_start_matches('/')
            .chars()
            .take_while(|c| !c.is_whitespace() && *c != '/')
            .collect::<String>()
            .to_ascii_lowercase();
        if name.is_empty() || UNCOUNTED.contains(&name.as_str()) {
            continue;
        }
        if closing {
            depth = depth.saturating_sub(1);
        } else {
            depth += 1;
            max = max.max(depth);
        }
    }
    max
}

/// The text of `html` without its tags, whitespace collapsed.
fn plain_text(html: &str) -> String {
    let mut out = String::with_capacity(html.len() / 2);
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => {
                in_tag = true;
                out.push(' ');
            }
            '>' if in_tag => in_tag = false,
            _ if !in_tag => out.push(c),
            _ => {}
        }
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn convert(html: &str) -> Result<String, String> {
    htmd::HtmlToMarkdown::builder()
        .skip_tags(vec![
            "script", "style", "noscript", "template", "head", "svg", "iframe", "object", "embed",
            "canvas",
        ])
        .build()
        .convert(html)
        .map_err(|e| format!("the HTML could not be read: {e}"))
}

/// The text of the page's `<title>`, if it has one near its start.
pub fn title(html: &str) -> Option<String> {
    let lower = html.get(..html.len().min(64 * 1024))?.to_ascii_lowercase();
    let start = lower.find("<title")?;
    let open_end = start + lower[start..].find('>')? + 1;
    let close = open_end + lower[open_end..].find("</title")?;
    let t = html
        .get(open_end..close)?
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    (!t.is_empty()).then_some(t)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_page_nested_past_the_limit_is_plain_text_and_real_pages_are_markdown() {
        let hostile = format!(
            "{}deep{}",
            "<div>".repeat(200_000),
            "</div>".repeat(200_000)
        );
        let md = to_markdown(&hostile).unwrap();
        assert!(
            md.starts_with("[this page nests its elements 200000 deep"),
            "{}",
            &md[..80]
        );
        assert!(md.ends_with("deep"), "{}", &md[md.len() - 20..]);
        // Unclosed paragraphs and list items, and void elements, do not count as nesting.
        let sloppy = format!(
            "<ul>{}</ul><p>end",
            "<li><p>item<br><img src=x>".repeat(5_000)
        );
        assert!(nesting_depth(&sloppy) < 5, "{}", nesting_depth(&sloppy));
        let md = to_markdown(&format!("<h1>Title</h1>{}", "<div>".repeat(400))).unwrap();
        assert!(md.starts_with("# Title"), "{md}");
    }

    #[test]
    fn kinds_follow_the_content_type_then_the_bytes() {
        let k = |ct: Option<&str>, b: &[u8]| kind_of(ct, b);
        assert_eq!(k(Some("text/html; charset=utf-8"), b""), Kind::Html);
        assert_eq!(k(Some("application/xhtml+xml"), b""), Kind::Html);
        assert_eq!(k(Some("text/plain"), b""), Kind::Text);
        assert_eq!(k(Some("application/json"), b""), Kind::Text);
        assert_eq!(k(Some("application/vnd.api+json"), b""), Kind::Text);
        assert_eq!(k(Some("image/png"), b""), Kind::Binary);
        assert_eq!(k(Some("application/pdf"), b""), Kind::Binary);
        assert_eq!(k(Some("application/octet-stream"), b""), Kind::Binary);
        assert_eq!(k(None, b"  <!DOCTYPE html><p>x"), Kind::Html);
        assert_eq!(k(None, b"hello"), Kind::Text);
        assert_eq!(k(None, b"\x89PNG\r\n\x1a\n\0\0"), Kind::Binary);
    }

    #[test]
    fn charsets_header_then_meta_then_utf8_then_1252() {
        // "café" in ISO-8859-1 (windows-1252 in encoding_rs, as the WHATWG says).
        let latin = b"caf\xe9";
        assert_eq!(
            decode(
                latin,
                Some("text/plain; charset=ISO-8859-1"),
                Kind::Text,
                false
            )
            .0,
            "café"
        );
        // Shift_JIS "日本語" named only by the page's meta tag.
        let sjis = [
            b"<html><head><meta charset=\"Shift_JIS\"></head><body>".as_slice(),
            &[0x93, 0xfa, 0x96, 0x7b, 0x8c, 0xea],
            b"</body></html>",
        ]
        .concat();
        let (text, name) = decode(&sjis, Some("text/html"), Kind::Html, false);
        assert!(text.contains("日本語"), "{text}");
        assert_eq!(name, "Shift_JIS");
        let http_equiv =
            b"<meta http-equiv=\"Content-Type\" content=\"text/html; charset=iso-8859-1\">caf\xe9";
        assert!(decode(http_equiv, None, Kind::Html, false)
            .0
            .ends_with("café"));
        // The header wins over the meta tag.
        assert_eq!(
            decode(
                b"<meta charset=utf-8>caf\xe9",
                Some("text/html; charset=latin1"),
                Kind::Html,
                false
            )
            .1,
            "windows-1252"
        );
        assert_eq!(decode("café".as_bytes(), None, Kind::Text, false).0, "café");
        assert_eq!(decode(latin, None, Kind::Text, false).0, "café");
        // A BOM beats everything.
        assert_eq!(
            decode(
                b"\xef\xbb\xbfok",
                Some("text/plain; charset=latin1"),
                Kind::Text,
                false
            )
            .0,
            "ok"
        );
    }

    #[test]
    fn html_becomes_markdown_without_scripts() {
        let md = to_markdown(
            "<html><head><title>T</title><style>p{}</style></head><body><h1>Hello</h1><p>A <a href=\"https://x.org/\">link</a> and <b>bold</b>.</p><script>alert(1)</script><ul><li>one</li></ul></body></html>",
        )
        .unwrap();
        assert!(md.contains("# Hello"), "{md}");
        assert!(md.contains("[link](https://x.org/)"), "{md}");
        assert!(md.contains("**bold**"), "{md}");
        assert!(md.contains("one"), "{md}");
        assert!(!md.contains("alert"), "{md}");
        assert!(!md.contains("p{}"), "{md}");
        assert_eq!(title("<title>\n A  page </title>"), Some("A page".into()));
    }
}
