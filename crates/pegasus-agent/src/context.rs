//! Keeping every request inside the model's context window (DESIGN.md §6: context never bricks a
//! project).
//!
//! Three defences, from cheapest to dearest: a single tool result is capped
//! ([`cap_tool_result`]) so no one turn can overflow; each request is estimated before it is
//! sent ([`ChatRequest::estimated_input_tokens`], the one estimator, shared with the gateway's
//! estimated ledger lines) and the session is compacted first when it reaches
//! [`THRESHOLD`] of the window ([`needs_compaction`]); and a provider's context-length refusal
//! compacts and retries once (in [`crate::agent_loop`]). The estimate is deliberately
//! pessimistic (3.5 bytes per token, where real tokenizers average about 4 on prose), because
//! guessing low costs a refused call and guessing high only compacts a little early.

use pegasus_proto::llm::ChatRequest;

/// Share of the context window at which the session is compacted before the next call.
pub const THRESHOLD: f64 = 0.8;

/// Whether `req` (its estimated prompt plus the answer it allows) reaches [`THRESHOLD`] of
/// `window`, so the session should be compacted before sending it.
pub fn needs_compaction(req: &ChatRequest, window: Option<u64>) -> bool {
    crate::compaction::needed(
        req.estimated_input_tokens() + u64::from(req.max_tokens),
        window,
    )
}

/// The context window a provider's context-length refusal names, in tokens, if it does:
/// Anthropic "prompt is too long: N tokens > M maximum" (and "... exceed context limit: A + B >
/// M"), OpenAI and vLLM "maximum context length is M tokens", llama.cpp "exceeds the available
/// context size (M tokens)", vLLM "longer than the maximum model length of M". Ollama's refusals
/// ("the prompt is longer than the context length currently available to the model", "the input
/// length exceeds the context length") name no number, so they give `None`.
pub fn window_in_refusal(message: &str) -> Option<u64> {
    let number_after = |marker: &str| {
        let at = message.find(marker)? + marker.len();
        let digits: String = message[at..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse::<u64>().ok().filter(|&n| n > 0)
    };
    [
        "maximum context length is ",
        "available context size (",
        "maximum model length of ",
        "> ",
    ]
    .iter()
    .find_map(|m| number_after(m))
}

/// Bytes of transcript a summary call may carry for `window`: 1.5 bytes per token of window
/// (under half the window at any rate from 3 bytes per token up), so the summariser's own
/// request fits with room for its answer; never more than `max`.
pub fn summary_input_chars(window: Option<u64>, max: usize) -> usize {
    match window {
        Some(w) if w > 0 => ((w as usize).saturating_mul(3) / 2).min(max).max(1024),
        _ => max,
    }
}

/// Caps one tool result at `cap` bytes: the head (three quarters) and the tail (one quarter)
/// are kept, cut at character boundaries, around a note saying how much was cut and how to
/// read the rest. Results within the cap are returned unchanged.
pub fn cap_tool_result(content: String, cap: usize) -> String {
    cut_middle(content, cap, |cut, total| {
        format!(
            "[... {cut} of {total} bytes cut here: a tool result shows at most {cap} bytes (a \
             quarter of the model's context window, at most agent.max_tool_result_bytes). To see \
             the middle, read less at a time: e.g. exec `sed -n 'START,ENDp' FILE`, \
             `head -c`/`tail -c`, or `grep -n PATTERN` ...]"
        )
    })
}

/// Keeps the head (three quarters of `cap`) and the tail (the rest) of `content` around the
/// note `note(cut, total)` makes; `content` within `cap` bytes is returned unchanged.
pub fn cut_middle(
    content: String,
    cap: usize,
    note: impl FnOnce(usize, usize) -> String,
) -> String {
    if content.len() <= cap {
        return content;
    }
    let total = content.len();
    let mut head_end = cap * 3 / 4;
    while !content.is_char_boundary(head_end) {
        head_end -= 1;
    }
    let mut tail_start = total - (cap - cap * 3 / 4);
    while !content.is_char_boundary(tail_start) {
        tail_start += 1;
    }
    let cut = tail_start - head_end;
    format!(
        "{}\n\n{}\n\n{}",
        &content[..head_end],
        note(cut, total),
        &content[tail_start..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use pegasus_proto::llm::{Block, CallMeta, Message, Role, ToolSpec};

    fn req(text: &str, max_tokens: u32) -> ChatRequest {
        ChatRequest {
            model: String::new(),
            system: "sys".into(),
            messages: vec![Message {
                role: Role::User,
                content: vec![Block::Text { text: text.into() }],
            }],
            tools: vec![ToolSpec {
                name: "read_file".into(),
                description: "Reads a file".into(),
                input_schema_json: "{}".into(),
            }],
            max_tokens,
            temperature: None,
            thinking: None,
            timeout_s: None,
            stream: false,
            meta: CallMeta::default(),
        }
    }

    #[test]
    fn the_estimate_is_pessimistic_about_prose() {
        let text = "word ".repeat(10_000); // 50,000 bytes: about 12,500 real tokens
        let est = req(&text, 1).estimated_input_tokens();
        assert!(est > 12_500 && est < 16_000, "{est}");
        // It counts at least what the fake LLM counts (JSON characters / 4).
        assert!(est >= 50_000 / 4);
    }

    #[test]
    fn compaction_is_needed_at_eighty_percent_with_the_answer_counted() {
        let text = "x".repeat(7_000); // 2,000 tokens + a little structure
        let r = req(&text, 1000);
        let est = r.estimated_input_tokens() + 1000;
        assert!(!needs_compaction(&r, Some(est * 2)));
        assert!(needs_compaction(&r, Some(est)));
        assert!(needs_compaction(&r, Some((est as f64 / 0.8) as u64 - 10)));
        assert!(!needs_compaction(&r, None));
        assert!(!needs_compaction(&r, Some(0)));
    }

    #[test]
    fn long_results_keep_head_and_tail_with_a_note() {
        assert_eq!(cap_tool_result("short".into(), 1024), "short");
        let long = format!("{}{}", "a".repeat(5000), "z".repeat(5000));
        let capped = cap_tool_result(long, 2048);
        assert!(capped.starts_with(&"a".repeat(1536)));
        assert!(capped.ends_with(&"z".repeat(512)));
        assert!(capped.contains("[... 7952 of 10000 bytes cut here"));
        assert!(capped.len() < 2048 + 400);
    }

    #[test]
    fn cuts_fall_on_character_boundaries() {
        let long = "é".repeat(3000); // two bytes each
        let capped = cap_tool_result(long, 1001);
        assert!(capped.contains("bytes cut here"));
        assert!(capped.starts_with('é') && capped.ends_with('é'));
    }

    #[test]
    fn refusals_name_their_window() {
        let cases = [
            ("prompt is too long: 11406 tokens > 4096 maximum", Some(4096)),
            ("input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000, decrease input length or `max_tokens` and try again", Some(200_000)),
            ("This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.", Some(128_000)),
            ("request (3031 tokens) exceeds the available context size (1024 tokens), try increasing it", Some(1024)),
            ("The decoder prompt (length 8825) is longer than the maximum model length of 8192.", Some(8192)),
            ("the input length exceeds the context length", None),
            ("the prompt is longer than the context length currently available to the model; shorten the prompt, adjust the context length in settings, or use a model with a longer context length", None),
        ];
        for (message, window) in cases {
            assert_eq!(window_in_refusal(message), window, "{message}");
        }
    }

    #[test]
    fn the_summary_input_fits_small_windows() {
        assert_eq!(summary_input_chars(None, 200_000), 200_000);
        assert_eq!(summary_input_chars(Some(1_000_000), 200_000), 200_000);
        assert_eq!(summary_input_chars(Some(8_000), 200_000), 12_000);
        assert_eq!(summary_input_chars(Some(100), 200_000), 1024);
    }
}
