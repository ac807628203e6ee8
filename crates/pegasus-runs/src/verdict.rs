//! Reading the reviewer's answer.
//!
//! The public implementations of seed 002 approved when the word APPROVED appeared anywhere
//! (so "this is NOT APPROVED" passed) and approved when they could not parse. Here only the
//! first line counts, it must be exactly `APPROVED` or `REJECTED: <reason>` (after trimming
//! spaces around it), and everything else is a rejection that costs an attempt: a reviewer
//! that cannot follow the format cannot vouch for the work either.

/// What the reviewer decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReviewVerdict {
    /// The first line was exactly `APPROVED`.
    Approved,
    /// `REJECTED: <reason>`, or a garbled answer (`reason` = `garbled verdict: <first line>`).
    Rejected {
        /// One line, fed back to the next attempt.
        reason: String,
    },
}

/// Longest first line quoted back in a garbled-verdict reason, so a model that writes one huge
/// line does not flood the run file and the retry prompt.
const QUOTE_MAX_CHARS: usize = 200;

/// The verdict of a review text. Never defaults to approval.
pub fn parse_verdict(text: &str) -> ReviewVerdict {
    let first = text.lines().next().unwrap_or("").trim();
    if first == "APPROVED" {
        return ReviewVerdict::Approved;
    }
    if let Some(reason) = first.strip_prefix("REJECTED:") {
        let reason = reason.trim();
        if !reason.is_empty() {
            return ReviewVerdict::Rejected {
                reason: reason.to_string(),
            };
        }
    }
    let quoted: String = first.chars().take(QUOTE_MAX_CHARS).collect();
    ReviewVerdict::Rejected {
        reason: format!("garbled verdict: {quoted}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rejected(reason: &str) -> ReviewVerdict {
        ReviewVerdict::Rejected {
            reason: reason.to_string(),
        }
    }

    #[test]
    fn exact_approved_first_line_approves() {
        assert_eq!(parse_verdict("APPROVED"), ReviewVerdict::Approved);
        assert_eq!(
            parse_verdict("  APPROVED  \nall good"),
            ReviewVerdict::Approved
        );
        assert_eq!(parse_verdict("APPROVED\r\nfine"), ReviewVerdict::Approved);
    }

    #[test]
    fn rejected_with_reason_carries_the_reason() {
        assert_eq!(
            parse_verdict("REJECTED: tests missing\nmore detail"),
            rejected("tests missing")
        );
        assert_eq!(parse_verdict("REJECTED:no space"), rejected("no space"));
    }

    #[test]
    fn anything_else_is_a_garbled_rejection() {
        let cases = [
            ("", "garbled verdict: "),
            ("\nAPPROVED", "garbled verdict: "),
            ("Approved.", "garbled verdict: Approved."),
            ("approved", "garbled verdict: approved"),
            ("APPROVED.", "garbled verdict: APPROVED."),
            ("APPROVED!", "garbled verdict: APPROVED!"),
            ("I think APPROVED", "garbled verdict: I think APPROVED"),
            (
                "Looks good, APPROVED",
                "garbled verdict: Looks good, APPROVED",
            ),
            ("NOT APPROVED", "garbled verdict: NOT APPROVED"),
            (
                "{\"verdict\":\"APPROVED\"}",
                "garbled verdict: {\"verdict\":\"APPROVED\"}",
            ),
            ("**APPROVED**", "garbled verdict: **APPROVED**"),
            ("REJECTED:", "garbled verdict: REJECTED:"),
            ("REJECTED:   ", "garbled verdict: REJECTED:"),
            ("REJECTED because", "garbled verdict: REJECTED because"),
            ("Rejected: meh", "garbled verdict: Rejected: meh"),
        ];
        for (text, reason) in cases {
            assert_eq!(parse_verdict(text), rejected(reason), "{text:?}");
        }
    }

    #[test]
    fn a_huge_garbled_line_is_quoted_short() {
        let text = "x".repeat(10_000);
        let ReviewVerdict::Rejected { reason } = parse_verdict(&text) else {
            panic!("approved a garbled verdict");
        };
        assert!(reason.len() < 300);
    }
}
