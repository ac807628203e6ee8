//! What an Anthropic Messages request may carry besides its conversation: the headers
//! (`anthropic-version`, `anthropic-beta`), the top-level fields and the betas that gate some of
//! them, the shape of `thinking`, `output_config`, `metadata`, `context_management` and custom
//! tools, and the output limit of the models the fake knows.
//!
//! The real API validates a request body against a strict schema: a field it does not know,
//! or one whose beta the `anthropic-beta` header did not name, is refused with a 400
//! `invalid_request_error` whose message is `<path>: Extra inputs are not permitted`; an
//! unknown beta is refused as ``Unexpected value(s) `x` for the `anthropic-beta` header``. The
//! shapes here were taken from what Claude Code 2.1.332 sends (its recorded requests are the
//! fixtures of `tests/claude_code_requests.rs`) and from the error messages Claude Code itself
//! recognises in the API's answers. The conversation (`messages`) is checked by
//! [`crate::validate`].

use serde_json::{Map, Value};

/// The `anthropic-version` values the API accepts.
const VERSIONS: &[&str] = &["2023-06-01", "2023-01-01"];

/// Betas the API knows: the public ones and every one Claude Code 2.1.332 may name. Any other
/// value of `anthropic-beta` is refused, as the API refuses it.
const KNOWN_BETAS: &[&str] = &[
    "advanced-tool-use-2025-11-20",
    "advisor-tool-2026-03-01",
    "afk-mode-2026-01-31",
    "agent-memory-2026-07-22",
    "auto-mode-classifier-2026-07-16",
    "cache-diagnosis-2026-04-07",
    "cache-keepalive-2026-09-03",
    "ccr-byoc-2025-07-29",
    "ccr-triggers-2026-01-30",
    "claude-code-20250219",
    "claude-code-side-query-2026-09-29",
    "code-execution-2025-05-22",
    "code-execution-2025-08-25",
    "computer-use-2025-01-24",
    "context-1m-2025-08-07",
    "context-hint-2026-04-09",
    "context-management-2025-06-27",
    "dangerous-tool-use-2026-09-03",
    "dreaming-2026-04-21",
    "effort-2025-11-24",
    "environments-2025-11-01",
    "extended-cache-ttl-2025-04-11",
    "fallback-credit-2026-06-01",
    "fast-mode-2026-02-01",
    "files-api-2025-04-14",
    "fine-grained-tool-streaming-2025-05-14",
    "inline-tools-2026-09-15",
    "interleaved-thinking-2025-05-14",
    "managed-agents-2026-04-01",
    "mcp-client-2025-04-04",
    "mcp-servers-2025-12-04",
    "mcp-tunnels-2026-06-22",
    "message-batches-2024-09-24",
    "message-threads-2026-08-12",
    "mid-conversation-system-2026-04-07",
    "mid-conversation-system-clear-at-2026-08-21",
    "mid-conversation-tool-changes-2026-07-01",
    "oauth-2025-04-20",
    "oidc-federation-2026-04-01",
    "output-128k-2025-02-19",
    "per-turn-control-2026-07-01",
    "program-use-case-ids-2026-09-17",
    "prompt-caching-2024-07-31",
    "prompt-caching-evict-2026-05-12",
    "prompt-caching-scope-2026-01-05",
    "redact-thinking-2026-02-12",
    "request-tags-2026-08-21",
    "resumption-2026-10-08",
    "server-side-fallback-2026-06-01",
    "server-side-fallback-2026-07-01",
    "structured-outputs-2025-11-13",
    "structured-outputs-2025-12-15",
    "subagent-review-2026-11-17",
    "task-budgets-2026-03-13",
    "thinking-binding-controls-2026-08-01",
    "thinking-display-updates-2026-08-18",
    "thinking-resumption-2026-07-17",
    "thinking-token-count-2026-05-13",
    "timing-2026-09-09",
    "token-counting-2024-11-01",
    "token-efficient-tools-2025-02-19",
    "tool-provenance-2026-10-26",
    "tool-search-tool-2025-10-19",
    "user-profiles-2026-08-18",
    "web-fetch-2025-09-10",
    "web-search-2025-03-05",
    "web-search-results-only-2026-11-15",
];

/// The beta that lets `context_management` in.
pub(crate) const CONTEXT_MANAGEMENT_BETA: &str = "context-management-2025-06-27";
/// The beta that adds `updates` to the thinking displays.
pub(crate) const THINKING_DISPLAY_BETA: &str = "thinking-display-updates-2026-08-18";
/// The betas that let a custom tool be deferred (`defer_loading`) behind a tool search.
const DEFER_BETAS: &[&str] = &[
    "advanced-tool-use-2025-11-20",
    "tool-search-tool-2025-10-19",
];
/// The beta that lets a message carry its own `output_config` (per-turn effort).
const PER_TURN_BETA: &str = "per-turn-control-2026-07-01";

/// Top-level fields of a Messages request and the betas of which one must be named for the
/// field to be accepted (empty: generally available).
const FIELDS: &[(&str, &[&str])] = &[
    ("model", &[]),
    ("messages", &[]),
    ("max_tokens", &[]),
    ("system", &[]),
    ("metadata", &[]),
    ("stop_sequences", &[]),
    ("stream", &[]),
    ("temperature", &[]),
    ("top_p", &[]),
    ("top_k", &[]),
    ("tools", &[]),
    ("tool_choice", &[]),
    ("thinking", &[]),
    ("service_tier", &[]),
    ("output_config", &[]),
    ("container", &[]),
    ("inference_geo", &[]),
    ("context_management", &[CONTEXT_MANAGEMENT_BETA]),
    (
        "mcp_servers",
        &["mcp-client-2025-04-04", "mcp-servers-2025-12-04"],
    ),
    (
        "output_format",
        &[
            "structured-outputs-2025-11-13",
            "structured-outputs-2025-12-15",
        ],
    ),
];

/// What the fake knows of an Anthropic model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Model {
    /// Most tokens one answer may have (`max_tokens` above it is refused).
    pub max_output: u64,
    /// The context window, in tokens.
    pub window: u64,
    /// `thinking.type: adaptive` is accepted.
    pub adaptive: bool,
    /// `thinking.type: enabled` (a fixed budget) is accepted.
    pub budgeted: bool,
}

/// The Anthropic models the fake knows, by id prefix (a dated id matches its family); most
/// specific first. Models it does not know (the tests' own names) have no output limit.
const MODELS: &[(&str, Model)] = &[
    ("claude-opus-5", big(true, false)),
    ("claude-sonnet-5", big(true, false)),
    ("claude-mythos", big(true, false)),
    ("claude-fable-5", big(true, false)),
    ("claude-opus-4-8", big(true, false)),
    ("claude-opus-4-7", big(true, false)),
    ("claude-opus-4-6", big(true, true)),
    ("claude-sonnet-4-6", model(64_000, 1_000_000, true, true)),
    ("claude-opus-4-5", model(64_000, 200_000, false, true)),
    ("claude-opus-4-1", model(32_000, 200_000, false, true)),
    ("claude-opus-4", model(32_000, 200_000, false, true)),
    ("claude-sonnet-4", model(64_000, 200_000, false, true)),
    ("claude-haiku-4", model(64_000, 200_000, false, true)),
    ("claude-3-7-sonnet", model(64_000, 200_000, false, true)),
    ("claude-3-5", model(8_192, 200_000, false, false)),
    ("claude-3-haiku", model(4_096, 200_000, false, false)),
];

const fn model(max_output: u64, window: u64, adaptive: bool, budgeted: bool) -> Model {
    Model {
        max_output,
        window,
        adaptive,
        budgeted,
    }
}

const fn big(adaptive: bool, budgeted: bool) -> Model {
    model(128_000, 1_000_000, adaptive, budgeted)
}

/// The fake's knowledge of `id`, if it is a model it knows.
pub(crate) fn known_model(id: &str) -> Option<Model> {
    MODELS
        .iter()
        .find(|(prefix, _)| id.starts_with(prefix))
        .map(|(_, m)| *m)
}

/// The betas a request names: every `anthropic-beta` header, comma-separated values trimmed.
pub(crate) fn betas(headers: &[(String, String)]) -> Vec<String> {
    headers
        .iter()
        .filter(|(n, _)| n == "anthropic-beta")
        .flat_map(|(_, v)| v.split(','))
        .map(str::trim)
        .filter(|b| !b.is_empty())
        .map(str::to_string)
        .collect()
}

/// The header problems of a request, worded as the API words them: a missing or unknown
/// `anthropic-version`, unknown betas.
pub(crate) fn check_headers(headers: &[(String, String)]) -> Vec<String> {
    let mut problems = Vec::new();
    match headers.iter().find(|(n, _)| n == "anthropic-version") {
        None => problems.push("anthropic-version: header is required".to_string()),
        Some((_, v)) if !VERSIONS.contains(&v.as_str()) => {
            problems.push(format!("anthropic-version: invalid version {v:?}"))
        }
        Some(_) => {}
    }
    let unknown: Vec<String> = betas(headers)
        .into_iter()
        .filter(|b| !KNOWN_BETAS.contains(&b.as_str()))
        .map(|b| format!("`{b}`"))
        .collect();
    if !unknown.is_empty() {
        problems.push(format!(
            "Unexpected value(s) {} for the `anthropic-beta` header. Please consult our documentation at docs.claude.com or try again without the header.",
            unknown.join(", ")
        ));
    }
    problems
}

/// The problems of a request body's fields (not its conversation) given the betas it named.
pub(crate) fn check_fields(body: &Value, betas: &[String]) -> Vec<String> {
    let mut problems = Vec::new();
    let Some(obj) = body.as_object() else {
        return problems;
    };
    let named =
        |gate: &[&str]| gate.is_empty() || gate.iter().any(|g| betas.iter().any(|b| b == g));
    for key in obj.keys() {
        match FIELDS.iter().find(|(f, _)| f == key) {
            Some((_, gate)) if named(gate) => {}
            _ => problems.push(extra(key)),
        }
    }
    if let Some(m) = obj.get("metadata") {
        only_keys(m, "metadata", &["user_id"], &mut problems);
    }
    if let Some(o) = obj.get("output_config") {
        output_config(o, "output_config", &mut problems);
    }
    if let Some(c) = obj
        .get("context_management")
        .filter(|_| named(&[CONTEXT_MANAGEMENT_BETA]))
    {
        context_management(c, &mut problems);
    }
    if let Some(t) = obj.get("thinking") {
        thinking(t, betas, &mut problems);
    }
    if let Some(tools) = obj.get("tools").and_then(Value::as_array) {
        for (i, tool) in tools.iter().enumerate() {
            custom_tool(tool, i, named(DEFER_BETAS), &mut problems);
        }
    }
    for (i, msg) in obj
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let Some(m) = msg.as_object() else { continue };
        for key in m.keys() {
            let ok = match key.as_str() {
                "role" | "content" => true,
                "output_config" => named(&[PER_TURN_BETA]),
                _ => false,
            };
            if !ok {
                problems.push(extra(&format!("messages.{i}.{key}")));
            }
        }
    }
    model_limits(obj, &mut problems);
    problems
}

/// `<path>: Extra inputs are not permitted`, the API's refusal of a field it does not know.
fn extra(path: &str) -> String {
    format!("{path}: Extra inputs are not permitted")
}

fn only_keys(v: &Value, path: &str, allowed: &[&str], problems: &mut Vec<String>) {
    let Some(o) = v.as_object() else {
        problems.push(format!("{path}: Input should be a valid dictionary"));
        return;
    };
    for key in o.keys().filter(|k| !allowed.contains(&k.as_str())) {
        problems.push(extra(&format!("{path}.{key}")));
    }
}

fn output_config(v: &Value, path: &str, problems: &mut Vec<String>) {
    only_keys(v, path, &["effort", "format"], problems);
    if let Some(effort) = v.get("effort") {
        let ok = effort
            .as_str()
            .is_some_and(|e| ["low", "medium", "high", "xhigh", "max"].contains(&e));
        if !ok {
            problems.push(format!(
                "{path}.effort: Input should be 'low', 'medium', 'high', 'xhigh' or 'max'"
            ));
        }
    }
}

fn context_management(v: &Value, problems: &mut Vec<String>) {
    only_keys(v, "context_management", &["edits"], problems);
    for (i, edit) in v
        .get("edits")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let path = format!("context_management.edits.{i}");
        match edit.get("type").and_then(Value::as_str) {
            Some("clear_thinking_20251015") => only_keys(edit, &path, &["type", "keep"], problems),
            Some("clear_tool_uses_20250919") => only_keys(
                edit,
                &path,
                &["type", "trigger", "keep", "clear_at_least", "exclude_tools", "clear_tool_inputs"],
                problems,
            ),
            other => problems.push(format!(
                "{path}: Input tag '{}' found using 'type' does not match any of the expected tags: 'clear_tool_uses_20250919', 'clear_thinking_20251015'",
                other.unwrap_or("")
            )),
        }
    }
}

/// `thinking`'s shape: its tag, its keys, the displays (`updates` only with its beta).
fn thinking(v: &Value, betas: &[String], problems: &mut Vec<String>) {
    let tag = v.get("type").and_then(Value::as_str).unwrap_or("");
    let keys: &[&str] = match tag {
        "enabled" => &["type", "budget_tokens", "display"],
        "adaptive" => &["type", "display"],
        "disabled" => &["type"],
        _ => {
            problems.push(format!(
                "thinking: Input tag '{tag}' found using 'type' does not match any of the expected tags: 'adaptive', 'disabled', 'enabled'"
            ));
            return;
        }
    };
    only_keys(v, &format!("thinking.{tag}"), keys, problems);
    if let Some(display) = v.get("display") {
        let updates = betas.iter().any(|b| b == THINKING_DISPLAY_BETA);
        let ok = match display.as_str() {
            Some("summarized" | "omitted") => true,
            Some("updates") => updates,
            _ => false,
        };
        if !ok {
            let allowed = if updates {
                "'summarized', 'omitted' or 'updates'"
            } else {
                "'summarized' or 'omitted'"
            };
            problems.push(format!("thinking.{tag}.display: Input should be {allowed}"));
        }
    }
}

/// A custom tool's keys (server tools, which have a versioned `type`, are not checked).
fn custom_tool(tool: &Value, i: usize, defer: bool, problems: &mut Vec<String>) {
    let custom = tool
        .get("type")
        .and_then(Value::as_str)
        .is_none_or(|t| t == "custom");
    if !custom {
        return;
    }
    let path = format!("tools.{i}.custom");
    let Some(o) = tool.as_object() else {
        problems.push(format!("tools.{i}: Input should be a valid dictionary"));
        return;
    };
    for key in o.keys() {
        let ok = match key.as_str() {
            "name"
            | "description"
            | "input_schema"
            | "cache_control"
            | "type"
            | "strict"
            | "eager_input_streaming" => true,
            "defer_loading" | "input_examples" => defer,
            _ => false,
        };
        if !ok {
            problems.push(extra(&format!("{path}.{key}")));
        }
    }
    for required in ["name", "input_schema"] {
        if !o.contains_key(required) {
            problems.push(format!("{path}.{required}: Field required"));
        }
    }
}

/// `max_tokens` and the thinking type against what the model can do.
fn model_limits(obj: &Map<String, Value>, problems: &mut Vec<String>) {
    let id = obj.get("model").and_then(Value::as_str).unwrap_or("");
    let Some(model) = known_model(id) else {
        return;
    };
    if let Some(max) = obj
        .get("max_tokens")
        .and_then(Value::as_u64)
        .filter(|m| *m > model.max_output)
    {
        problems.push(format!(
            "max_tokens: {max} > {}, which is the maximum allowed number of output tokens for {id}",
            model.max_output
        ));
    }
    match obj
        .get("thinking")
        .and_then(|t| t.get("type"))
        .and_then(Value::as_str)
    {
        Some("adaptive") if !model.adaptive => problems.push(format!(
            "thinking.type.adaptive is not supported for {id}. Use thinking.type.enabled with thinking.budget_tokens."
        )),
        Some("enabled") if !model.budgeted && model.adaptive => problems.push(format!(
            "thinking.type.enabled is not supported for {id}. Use thinking.type.adaptive and output_config.effort to control thinking behavior."
        )),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn h(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn headers() {
        assert!(check_headers(&h(&[("anthropic-version", "2023-06-01")])).is_empty());
        assert_eq!(
            check_headers(&h(&[])),
            vec!["anthropic-version: header is required"]
        );
        let p = check_headers(&h(&[
            ("anthropic-version", "2023-06-01"),
            (
                "anthropic-beta",
                "claude-code-20250219, made-up-2099-01-01,also-not",
            ),
        ]));
        assert_eq!(p, vec!["Unexpected value(s) `made-up-2099-01-01`, `also-not` for the `anthropic-beta` header. Please consult our documentation at docs.claude.com or try again without the header."]);
    }

    #[test]
    fn fields_and_their_betas() {
        let body = json!({"model": "m", "max_tokens": 5, "messages": [],
            "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
            "frobnicate": 1});
        let p = check_fields(&body, &[]);
        assert_eq!(
            p,
            vec![
                "context_management: Extra inputs are not permitted",
                "frobnicate: Extra inputs are not permitted"
            ]
        );
        let p = check_fields(&body, &[CONTEXT_MANAGEMENT_BETA.to_string()]);
        assert_eq!(p, vec!["frobnicate: Extra inputs are not permitted"]);
    }

    #[test]
    fn thinking_shapes_and_models() {
        let adaptive = |display: &str, model: &str| {
            json!({"model": model, "max_tokens": 100, "messages": [],
                "thinking": {"type": "adaptive", "display": display}})
        };
        let display = [THINKING_DISPLAY_BETA.to_string()];
        assert!(check_fields(&adaptive("updates", "claude-opus-5-5"), &display).is_empty());
        assert_eq!(
            check_fields(&adaptive("updates", "claude-opus-5-5"), &[]),
            vec!["thinking.adaptive.display: Input should be 'summarized' or 'omitted'"]
        );
        let p = check_fields(&adaptive("omitted", "claude-sonnet-4-5-20250929"), &[]);
        assert!(
            p[0].starts_with("thinking.type.adaptive is not supported"),
            "{p:?}"
        );
        let body = json!({"model": "claude-opus-5-5", "max_tokens": 128_001, "messages": []});
        assert_eq!(
            check_fields(&body, &[]),
            vec!["max_tokens: 128001 > 128000, which is the maximum allowed number of output tokens for claude-opus-5-5"]
        );
        let body = json!({"model": "m", "max_tokens": 1, "messages": [], "thinking": {"type": "sometimes"}});
        assert!(check_fields(&body, &[])[0].contains("Input tag 'sometimes'"));
    }

    #[test]
    fn deferred_tools_need_their_beta() {
        let body = json!({"model": "m", "max_tokens": 1, "messages": [], "tools": [
            {"name": "a", "input_schema": {"type": "object"}, "defer_loading": true},
            {"name": "b", "input_schema": {"type": "object"}, "colour": "red"},
            {"type": "web_search_20250305", "name": "web_search"}
        ]});
        assert_eq!(
            check_fields(&body, &[]),
            vec![
                "tools.0.custom.defer_loading: Extra inputs are not permitted",
                "tools.1.custom.colour: Extra inputs are not permitted"
            ]
        );
        let p = check_fields(&body, &["advanced-tool-use-2025-11-20".to_string()]);
        assert_eq!(
            p,
            vec!["tools.1.custom.colour: Extra inputs are not permitted"]
        );
    }
}
