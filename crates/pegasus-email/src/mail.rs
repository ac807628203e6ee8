//! What a mail says, and what Pegasus writes back (DESIGN.md §17): pure functions, no I/O.
//!
//! In: who sent it (the `From:` address, and whether the mail server vouched for it in its
//! `Authentication-Results`), where it goes (a `+tag` on Pegasus's address, else a `[name]`
//! subject tag, else the MainAgent), the words (the plain text, the quoted part of a reply
//! cut off), and whether it is an answer to an approval (`approve ID` / `deny ID [reason]` on
//! its first line). Out: the head of a reply in the same thread, its Message-ID derived from
//! the Message-ID it answers, every header value cleaned of what could start another header.

use pegasus_store::email::EmailConfig;
use serde::{Deserialize, Serialize};

/// One mail as Pegasus reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct Incoming {
    /// The `From:` address, lower case; empty when there is none.
    pub from: String,
    /// Its `Message-ID` without the angle brackets, when it has one.
    pub message_id: Option<String>,
    /// Its `References` and `In-Reply-To` ids, oldest first, without angle brackets.
    pub references: Vec<String>,
    /// Its subject as written (decoded), control characters as spaces.
    pub subject: String,
    /// Where it goes.
    pub route: Route,
    /// The text written (the quoted part of a reply cut off).
    pub text: String,
    /// How many attachments it carries.
    pub attachments: usize,
    /// What the topmost `Authentication-Results` says of the sender's domain.
    pub auth: Auth,
}

/// Where a mail goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Route {
    /// The MainAgent.
    Main,
    /// A project, by name.
    Project(String),
}

/// What the mail server said about the sender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Auth {
    /// The topmost `Authentication-Results` carries the trusted authserv-id and a `dkim=pass`
    /// (or `dmarc=pass`) for the sender's domain.
    Pass,
    /// Anything else, with why.
    Fail(String),
}

/// What an allowed sender's mail asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ask {
    /// Answer approval `id`.
    Approval {
        /// The request's id.
        id: String,
        /// Approve (true) or deny.
        approve: bool,
        /// Deny: why.
        reason: Option<String>,
    },
    /// A message for its route.
    Message,
}

/// Reads a whole mail (`BODY[]`) as `cfg` sees it; `None` when it is not a mail at all.
pub fn parse(raw: &[u8], cfg: &EmailConfig) -> Option<Incoming> {
    let msg = mail_parser::MessageParser::default().parse(raw)?;
    let from = msg
        .from()
        .and_then(|a| a.first())
        .and_then(|a| a.address())
        .map(str::to_ascii_lowercase)
        .unwrap_or_default();
    let subject = clean(msg.subject().unwrap_or(""));
    let mut references: Vec<String> = Vec::new();
    for v in [msg.references(), msg.in_reply_to()] {
        for id in v.as_text_list().unwrap_or_default() {
            let id = clean_id(id);
            if !id.is_empty() && !references.contains(&id) {
                references.push(id);
            }
        }
        if let Some(id) = v.as_text() {
            let id = clean_id(id);
            if !id.is_empty() && !references.contains(&id) {
                references.push(id);
            }
        }
    }
    let mut recipients: Vec<String> = Vec::new();
    for a in [msg.to(), msg.cc()].into_iter().flatten() {
        recipients.extend(a.iter().filter_map(|a| a.address()).map(str::to_string));
    }
    for (name, value) in msg.headers_raw() {
        if name.eq_ignore_ascii_case("Delivered-To") || name.eq_ignore_ascii_case("X-Original-To") {
            recipients.push(value.trim().to_string());
        }
    }
    let route = route(&cfg.address, &recipients, &subject);
    let auth = match &cfg.authserv_id {
        None => Auth::Fail("no email.authserv_id is set".into()),
        Some(id) => {
            let top = msg
                .headers_raw()
                .find(|(n, _)| n.eq_ignore_ascii_case("Authentication-Results"))
                .map(|(_, v)| v.to_string());
            authenticated(top.as_deref(), id, &from)
        }
    };
    let body = msg.body_text(0).map(|t| t.into_owned()).unwrap_or_default();
    Some(Incoming {
        from,
        message_id: msg.message_id().map(clean_id).filter(|id| !id.is_empty()),
        references,
        subject,
        route,
        text: strip_quote(&body),
        attachments: msg.attachment_count(),
        auth,
    })
}

/// The project a mail names: the `+tag` of a recipient that is Pegasus's own address, else
/// the first `[name]` in the subject; else the MainAgent.
pub fn route(address: &str, recipients: &[String], subject: &str) -> Route {
    let (local, domain) = address.rsplit_once('@').unwrap_or((address, ""));
    for r in recipients {
        let r = r.trim().trim_start_matches('<').trim_end_matches('>');
        let Some((rl, rd)) = r.rsplit_once('@') else {
            continue;
        };
        let Some((base, tag)) = rl.split_once('+') else {
            continue;
        };
        // Addresses are read without case (a phone may capitalise the first letter).
        let tag = tag.to_ascii_lowercase();
        if base.eq_ignore_ascii_case(local)
            && rd.eq_ignore_ascii_case(domain)
            && pegasus_store::validate_name(&tag).is_ok()
        {
            return Route::Project(tag);
        }
    }
    let mut rest = subject;
    while let Some(open) = rest.find('[') {
        let after = &rest[open + 1..];
        let Some(close) = after.find(']') else { break };
        let name = after[..close].trim();
        if pegasus_store::validate_name(name).is_ok() {
            return Route::Project(name.to_string());
        }
        rest = &after[close + 1..];
    }
    Route::Main
}

/// Whether the topmost `Authentication-Results` header (`top`, the one the receiving server
/// added last) is `authserv_id`'s and passes DKIM (or DMARC) for `from`'s domain.
pub fn authenticated(top: Option<&str>, authserv_id: &str, from: &str) -> Auth {
    let Some(top) = top else {
        return Auth::Fail("the mail has no Authentication-Results header".into());
    };
    let unfolded: String = top
        .chars()
        .map(|c| if c.is_whitespace() { ' ' } else { c })
        .collect();
    let mut parts = unfolded.split(';');
    let id = parts
        .next()
        .unwrap_or("")
        .split_whitespace()
        .next()
        .unwrap_or("");
    if !id.eq_ignore_ascii_case(authserv_id) {
        return Auth::Fail(format!(
            "its topmost Authentication-Results is from {id:?}, not from email.authserv_id {authserv_id:?}"
        ));
    }
    let domain = from.rsplit_once('@').map(|(_, d)| d).unwrap_or("");
    for result in parts {
        let words: Vec<&str> = result.split_whitespace().collect();
        let Some(method) = words.first() else {
            continue;
        };
        let pass =
            method.eq_ignore_ascii_case("dkim=pass") || method.eq_ignore_ascii_case("dmarc=pass");
        if !pass {
            continue;
        }
        let key = if method.to_ascii_lowercase().starts_with("dkim") {
            "header.d="
        } else {
            "header.from="
        };
        let vouched = words.iter().any(|w| {
            w.len() > key.len()
                && w[..key.len()].eq_ignore_ascii_case(key)
                && w[key.len()..].eq_ignore_ascii_case(domain)
        });
        if vouched && !domain.is_empty() {
            return Auth::Pass;
        }
    }
    Auth::Fail(format!(
        "its Authentication-Results has no dkim=pass (header.d={domain}) nor dmarc=pass (header.from={domain})"
    ))
}

/// An approval answer on the first line written (`approve ID`, `deny ID [reason]`), else a
/// message.
pub fn ask(text: &str) -> Ask {
    let first = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let mut words = first.splitn(3, char::is_whitespace);
    let verb = words.next().unwrap_or("").to_ascii_lowercase();
    let id = words.next().unwrap_or("");
    let id_ok = !id.is_empty()
        && id.len() <= 64
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !id_ok {
        return Ask::Message;
    }
    let reason = words.next().map(str::trim).filter(|r| !r.is_empty());
    match verb.as_str() {
        "approve" => Ask::Approval {
            id: id.to_string(),
            approve: true,
            reason: None,
        },
        "deny" => Ask::Approval {
            id: id.to_string(),
            approve: false,
            reason: reason.map(str::to_string),
        },
        _ => Ask::Message,
    }
}

/// The text above the quoted part of a reply: the trailing block of `>` lines is cut, with
/// the `On … wrote:` line that introduces it.
pub fn strip_quote(body: &str) -> String {
    let lines: Vec<&str> = body.lines().collect();
    let mut end = lines.len();
    while end > 0 && (lines[end - 1].trim().is_empty() || lines[end - 1].starts_with('>')) {
        end -= 1;
    }
    let quoted = lines[end..].iter().any(|l| l.starts_with('>'));
    if quoted && end > 0 && lines[end - 1].trim_end().ends_with("wrote:") {
        end -= 1;
    }
    if !quoted {
        end = lines.len();
    }
    lines[..end].join("\n").trim().to_string()
}

/// A header value fit for one line: control characters (CR and LF included) as spaces, at
/// most 200 characters.
pub fn clean(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(200)
        .collect::<String>()
        .trim()
        .to_string()
}

/// A message id without its angle brackets, only the characters an id may hold (printable
/// ASCII but `<`, `>` and spaces).
pub fn clean_id(s: &str) -> String {
    s.trim()
        .trim_start_matches('<')
        .trim_end_matches('>')
        .chars()
        .filter(|c| c.is_ascii_graphic() && *c != '<' && *c != '>')
        .take(250)
        .collect()
}

/// The head of a mail Pegasus sends: to whom, what about, and its place in a thread.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Head {
    /// The one recipient.
    pub to: String,
    /// The subject, one clean line.
    pub subject: String,
    /// Its own Message-ID, without angle brackets (derived, so a resend is the same mail).
    pub message_id: String,
    /// The id it answers, when it is a reply.
    pub in_reply_to: Option<String>,
    /// The thread so far, oldest first.
    pub references: Vec<String>,
}

/// The reply to `mail`, from `address`: `Re:` subject, `In-Reply-To` and `References` its
/// thread, and a Message-ID derived from the one it answers (`fallback` names the mail when it
/// has none: its mailbox's UIDVALIDITY and UID).
pub fn reply_head(mail: &Incoming, address: &str, fallback: &str) -> Head {
    let subject = if mail.subject.to_ascii_lowercase().starts_with("re:") {
        mail.subject.clone()
    } else if mail.subject.is_empty() {
        "Re: your mail".to_string()
    } else {
        format!("Re: {}", mail.subject)
    };
    let mut references = mail.references.clone();
    if let Some(id) = &mail.message_id {
        references.retain(|r| r != id);
        references.push(id.clone());
    }
    // Long threads: the first and the last few, as RFC 5322 suggests.
    if references.len() > 20 {
        let tail = references.split_off(references.len() - 19);
        references.truncate(1);
        references.extend(tail);
    }
    let seed = mail.message_id.as_deref().unwrap_or(fallback);
    Head {
        to: mail.from.clone(),
        subject: clean(&subject),
        message_id: derived_id("re", seed, address),
        in_reply_to: mail.message_id.clone(),
        references,
    }
}

/// A Message-ID made from `seed` alone: `<kind>.<sha256 of seed, 32 hex>@<address's domain>`;
/// the same seed always gives the same id.
pub fn derived_id(kind: &str, seed: &str, address: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, seed.as_bytes());
    let hex: String = digest.as_ref()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let domain = address
        .rsplit_once('@')
        .map(|(_, d)| d)
        .unwrap_or("pegasus.invalid");
    format!("pegasus.{kind}.{hex}@{domain}")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn cfg(authserv: Option<&str>) -> EmailConfig {
        let mut c: EmailConfig = serde_norway::from_str(
            "address: pegasus@example.com\nimap: {host: localhost, user: p, password_env: PW}\nsmtp: {host: localhost}\n",
        )
        .unwrap();
        c.authserv_id = authserv.map(str::to_string);
        c
    }

    #[test]
    fn a_mail_reads_as_sender_route_thread_and_text() {
        let raw = "From: Me <ME@Example.com>\r\nTo: pegasus+website@example.com\r\nSubject: =?UTF-8?Q?caf=C3=A9?=\r\nMessage-ID: <abc@mail.example.com>\r\nReferences: <r1@x> <r2@x>\r\nIn-Reply-To: <r2@x>\r\n\r\nPlease fix it.\r\n\r\nOn Mon, Pegasus wrote:\r\n> old\r\n> text\r\n";
        let m = parse(raw.as_bytes(), &cfg(None)).unwrap();
        assert_eq!(m.from, "me@example.com");
        assert_eq!(m.route, Route::Project("website".into()));
        assert_eq!(m.subject, "café");
        assert_eq!(m.message_id.as_deref(), Some("abc@mail.example.com"));
        assert_eq!(m.references, vec!["r1@x", "r2@x"]);
        assert_eq!(m.text, "Please fix it.");
        assert_eq!(m.attachments, 0);
        let head = reply_head(&m, "pegasus@example.com", "1-2");
        assert_eq!(head.subject, "Re: café");
        assert_eq!(head.in_reply_to.as_deref(), Some("abc@mail.example.com"));
        assert_eq!(
            head.references,
            vec!["r1@x", "r2@x", "abc@mail.example.com"]
        );
        assert_eq!(head.to, "me@example.com");
        assert!(
            head.message_id.starts_with("pegasus.re.") && head.message_id.ends_with("@example.com")
        );
        assert_eq!(
            head,
            reply_head(&m, "pegasus@example.com", "other"),
            "derived: the same every time"
        );
    }

    #[test]
    fn routes_by_plus_tag_then_subject_tag_then_main() {
        let a = "pegasus@example.com";
        let r = |to: &[&str], s: &str| {
            route(a, &to.iter().map(|t| t.to_string()).collect::<Vec<_>>(), s)
        };
        assert_eq!(
            r(&["Pegasus+Web@EXAMPLE.com"], ""),
            Route::Project("web".into())
        );
        assert_eq!(
            r(&["pegasus@example.com"], "Re: [website] build"),
            Route::Project("website".into())
        );
        assert_eq!(
            r(&["pegasus@example.com"], "[a b] [site]"),
            Route::Project("site".into())
        );
        assert_eq!(r(&["other+web@example.com"], "hello"), Route::Main);
        assert_eq!(r(&["pegasus+../x@example.com"], "hi"), Route::Main);
    }

    #[test]
    fn only_the_trusted_servers_dkim_pass_for_the_senders_domain_counts() {
        let from = "me@example.com";
        let id = "mx.example.net";
        let ok = "mx.example.net; dkim=pass header.d=example.com header.s=s1; spf=pass";
        assert_eq!(authenticated(Some(ok), id, from), Auth::Pass);
        let dmarc = "mx.example.net;\r\n\tdkim=fail; dmarc=pass (p=none) header.from=Example.COM";
        assert_eq!(authenticated(Some(dmarc), id, from), Auth::Pass);
        for bad in [
            "evil.example; dkim=pass header.d=example.com",
            "mx.example.net; dkim=pass header.d=other.com",
            "mx.example.net; dkim=fail header.d=example.com",
            "mx.example.net; spf=pass smtp.mailfrom=example.com",
        ] {
            assert!(
                matches!(authenticated(Some(bad), id, from), Auth::Fail(_)),
                "{bad}"
            );
        }
        assert!(matches!(authenticated(None, id, from), Auth::Fail(_)));
        // The topmost header decides: a forged one below it does not help.
        let raw = "Authentication-Results: mx.example.net; dkim=none\r\nAuthentication-Results: mx.example.net; dkim=pass header.d=example.com\r\nFrom: me@example.com\r\nTo: pegasus@example.com\r\nSubject: x\r\n\r\nhi\r\n";
        let m = parse(raw.as_bytes(), &cfg(Some(id))).unwrap();
        assert!(matches!(m.auth, Auth::Fail(_)));
    }

    #[test]
    fn approval_answers_are_the_first_line() {
        assert_eq!(
            ask("approve ap-12ab\n\nOn x wrote:\n> Approval needed"),
            Ask::Approval {
                id: "ap-12ab".into(),
                approve: true,
                reason: None
            }
        );
        assert_eq!(
            ask("\n  Deny ap-1 not on main  \nthanks"),
            Ask::Approval {
                id: "ap-1".into(),
                approve: false,
                reason: Some("not on main".into())
            }
        );
        for m in ["please approve ap-1", "approve", "approve ../x", "hello"] {
            assert_eq!(ask(m), Ask::Message, "{m}");
        }
    }

    #[test]
    fn header_values_cannot_start_another_header() {
        assert_eq!(clean("hi\r\nBcc: evil@x"), "hi  Bcc: evil@x");
        assert_eq!(clean_id("<a b\r\n>c@d>"), "abc@d");
        assert_eq!(
            strip_quote("just text\n> not a trailing quote\nmore"),
            "just text\n> not a trailing quote\nmore"
        );
    }
}
