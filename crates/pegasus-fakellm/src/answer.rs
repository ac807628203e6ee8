//! A concrete answer: a scripted reply with ids and token usage filled in.
//!
//! Both wire formats render the same [`Answer`], so the content of a reply is
//! decided once, independently of the format it is sent in.

use crate::ids;
use crate::record::Format;
use crate::script::{ToolCall, UsageSpec};

/// A tool call with its generated id.
#[derive(Debug, Clone)]
pub(crate) struct AnswerTool {
    pub id: String,
    pub name: String,
    pub input: serde_json::Value,
    /// The tool's namespace (a Responses `function_call`'s `namespace`).
    pub namespace: Option<String>,
}

/// Everything needed to render one successful response.
#[derive(Debug, Clone)]
pub(crate) struct Answer {
    /// `msg_…` (Anthropic), `chatcmpl-…` (OpenAI Chat Completions) or `resp_…` (Responses).
    pub id: String,
    /// Echo of the request's model.
    pub model: String,
    /// Unix seconds, for OpenAI's `created`.
    pub created: u64,
    pub text: Option<String>,
    pub tools: Vec<AnswerTool>,
    /// `None` means "send broken usage" ([`crate::Fault::WrongUsage`]).
    pub usage: Option<UsageSpec>,
    /// Extended thinking (the request enabled it): a `thinking` block with its signature and
    /// a `redacted_thinking` block, before the text and tool calls.
    pub thinking: Option<(String, String)>,
    pub redacted: Option<String>,
    /// The request asked for `context_management`: the answer reports the edits applied
    /// (none: the fake's conversations never grow large enough).
    pub context_management: bool,
    /// How many deltas the text is streamed in.
    pub pieces: usize,
    /// The text is [`CLOCK_SLOT`]s, each stamped as it is written ([`crate::Fault::Clock`]).
    pub clock: bool,
}

/// Where a [`crate::Fault::Clock`] answer's stamp goes: as many chars as the stamp has digits.
const CLOCK_MARK: &str = "\u{23f1}\u{23f1}\u{23f1}\u{23f1}\u{23f1}\u{23f1}\u{23f1}\u{23f1}\u{23f1}\u{23f1}\u{23f1}\u{23f1}\u{23f1}\u{23f1}\u{23f1}\u{23f1}";

/// Replaces the first `n` (all, if `None`) marks of a rendered answer with the wall clock now.
pub(crate) fn stamp(wire: String, n: Option<usize>) -> String {
    if !wire.contains(CLOCK_MARK) {
        return wire;
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros());
    let digits = format!("{now:016}");
    match n {
        Some(n) => wire.replacen(CLOCK_MARK, &digits, n),
        None => wire.replace(CLOCK_MARK, &digits),
    }
}

impl Answer {
    /// Builds the answer; `usage: None` estimates it from `input_chars` and
    /// the reply's own size (chars / 4 + 1, roughly a real tokenizer).
    pub fn new(
        format: Format,
        model: &str,
        text: Option<String>,
        tools: &[ToolCall],
        usage: Option<UsageSpec>,
        input_chars: usize,
    ) -> Answer {
        let (msg_prefix, tool_prefix) = match format {
            Format::Anthropic => ("msg_", "toolu_"),
            Format::OpenAi => ("chatcmpl-", "call_"),
            Format::Responses => ("resp_", "call_"),
        };
        let tools: Vec<AnswerTool> = tools
            .iter()
            .map(|t| AnswerTool {
                id: ids::unique(tool_prefix),
                name: t.name.clone(),
                input: t.input.clone(),
                namespace: t.namespace.clone(),
            })
            .collect();
        let usage = usage.unwrap_or_else(|| {
            let output_chars = text.as_ref().map_or(0, |t| t.chars().count())
                + tools
                    .iter()
                    .map(|t| t.input.to_string().chars().count())
                    .sum::<usize>();
            UsageSpec {
                input: (input_chars / 4 + 1) as u64,
                output: (output_chars / 4 + 1) as u64,
                cache_read: 0,
                cache_write: 0,
            }
        });
        Answer {
            id: ids::unique(msg_prefix),
            model: model.to_string(),
            created: ids::unix_now(),
            text,
            tools,
            usage: Some(usage),
            thinking: None,
            redacted: None,
            context_management: false,
            pieces: 3,
            clock: false,
        }
    }

    /// Adds the thinking blocks a thinking-enabled request gets (Anthropic only); `omitted`
    /// (`thinking.display: omitted`) leaves the thinking text out, keeping its signature.
    pub fn with_thinking(mut self, omitted: bool) -> Answer {
        let text = if omitted {
            String::new()
        } else {
            format!(
                "Reasoning about the request before answering ({}).",
                self.id
            )
        };
        self.thinking = Some((text.clone(), ids::thinking_signature(&text)));
        self.redacted = Some(ids::redacted_data(&self.id));
        self
    }

    /// A [`crate::Fault::Clock`] answer: `deltas` marks and spaces, one a delta.
    pub fn clock(mut self, deltas: usize) -> Answer {
        let deltas = deltas.max(1);
        self.text = Some(format!("{CLOCK_MARK} ").repeat(deltas));
        self.pieces = deltas;
        self.clock = true;
        self
    }

    /// Drops the usage so the renderers emit the broken variant.
    pub fn without_usage(mut self) -> Answer {
        self.usage = None;
        self
    }

    /// Why the model stopped, in a format's words: `tools` when it stopped to call tools.
    pub fn stop_reason(&self, tools: &'static str, end: &'static str) -> &'static str {
        if self.tools.is_empty() {
            end
        } else {
            tools
        }
    }
}

/// A non-streaming body that is not JSON, for [`crate::Fault::MalformedJson`]: the first half
/// of `body` (the answer as the format renders it) plus garbage.
pub(crate) fn malformed(body: &serde_json::Value) -> String {
    let full = body.to_string();
    let half = full.len() / 2;
    format!(
        "{} <<fake-llm: this is not JSON>>",
        full.get(..half).unwrap_or("{")
    )
}
