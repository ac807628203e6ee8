//! The gateway against the fake LLM server, over real HTTP, in both wire formats.
//!
//! Every behaviour runs twice: provider `fa` speaks the Anthropic Messages API, `fo` the
//! OpenAI Chat Completions API, both served by one `pegasus-fakellm`, which also checks that
//! what the gateway sends is a transcript the real APIs would accept.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use pegasus_fakellm::{FakeLlm, Fault, Match, Reply, Rule, ToolCall, UsageSpec, WRONG_USAGE_TEXT};
use pegasus_llm::{
    Block, CallMeta, ChatRequest, Gateway, LlmError, Message, Role, StopReason, ToolSpec, Usage,
};
use pegasus_store::{
    create_project, read_jsonl, Config, Home, LedgerEntry, NewProject, PriceConfig, ProviderConfig,
};
use serde_json::json;

/// One test's world: a fresh home, a fake server, a gateway pointed at it.
struct World {
    _dir: tempfile::TempDir,
    home: Home,
    fake: FakeLlm,
    gw: Gateway,
    config: Config,
    key: String,
}

/// An environment variable name and key no other test uses (tests run in parallel threads).
fn unique_key() -> (String, String) {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::SeqCst);
    let pid = std::process::id();
    let env = format!("PEGASUS_LLM_TEST_KEY_{pid}_{n}");
    let key = format!("sk-test-{pid}-{n}");
    #[allow(unused_unsafe)]
    // SAFETY: each test sets its own variable, and nothing in this process enumerates the
    // environment concurrently.
    unsafe {
        std::env::set_var(&env, &key)
    };
    (env, key)
}

fn fake_price() -> PriceConfig {
    PriceConfig {
        input: 1.0,
        output: 2.0,
        cache_read: Some(0.1),
        cache_write: Some(1.25),
        context_window: Some(100_000),
    }
}

fn world(tweak: impl FnOnce(&mut Config)) -> World {
    let dir = tempfile::tempdir().unwrap();
    let home = Home::new(dir.path());
    let fake = FakeLlm::start().unwrap();
    let (env, key) = unique_key();
    let mut config = Config::default();
    config.providers.insert(
        "fa".into(),
        ProviderConfig {
            kind: "anthropic".into(),
            base_url: fake.anthropic_base_url(),
            api_key_env: Some(env.clone()),
            local: false,
        },
    );
    config.providers.insert(
        "fo".into(),
        ProviderConfig {
            kind: "openai".into(),
            base_url: fake.openai_base_url(),
            api_key_env: Some(env),
            local: false,
        },
    );
    config.llm.retry_base_ms = 10;
    config.llm.max_retries = 4;
    config.llm.timeout_s = 20;
    config.budget.daily_usd = None;
    config.budget.task_usd = None;
    config.prices = BTreeMap::from([
        ("fa/*".to_string(), fake_price()),
        ("fo/*".to_string(), fake_price()),
    ]);
    // The test providers' capabilities, as a user would declare them in config.yml.
    let caps = |thinking: bool, reasoning: bool| pegasus_store::ModelConfig {
        context_window: Some(100_000),
        max_output_tokens: Some(8192),
        thinking,
        reasoning,
    };
    config.models = BTreeMap::from([
        ("fa/*".to_string(), caps(true, false)),
        ("fa/*-nothink".to_string(), caps(false, false)),
        ("fo/*".to_string(), caps(false, false)),
        ("fo/*-reasoning".to_string(), caps(false, true)),
    ]);
    tweak(&mut config);
    let gw = Gateway::new(&home, &config).unwrap();
    World {
        _dir: dir,
        home,
        fake,
        gw,
        config,
        key,
    }
}

fn user(text: &str) -> Message {
    Message {
        role: Role::User,
        content: vec![Block::Text { text: text.into() }],
    }
}

fn request(model: &str, text: &str) -> ChatRequest {
    ChatRequest {
        model: model.into(),
        system: "You are a test.".into(),
        messages: vec![user(text)],
        tools: Vec::new(),
        max_tokens: 256,
        temperature: None,
        thinking: None,
        timeout_s: None,
        stream: false,
        meta: CallMeta {
            project: Some("alpha".into()),
            task: Some("t1".into()),
            role: Some("developer".into()),
        },
    }
}

fn ledger(w: &World) -> Vec<LedgerEntry> {
    let read = read_jsonl::<LedgerEntry>(&w.home.ledger_file()).unwrap();
    assert_eq!(read.skipped, 0);
    read.records
}

fn text_of(blocks: &[Block]) -> String {
    blocks
        .iter()
        .filter_map(|b| match b {
            Block::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

fn expected_cost(u: &Usage) -> f64 {
    (u.input_tokens as f64 * 1.0
        + u.output_tokens as f64 * 2.0
        + u.cache_read_tokens as f64 * 0.1
        + u.cache_write_tokens as f64 * 1.25)
        / 1e6
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

fn status(code: u16, message: &str, retry_after_s: Option<u64>) -> Reply {
    Reply::Fault(Fault::Status {
        code,
        message: message.into(),
        retry_after_s,
    })
}

/// Runs an async test body once per wire format, as `<name>::anthropic` and `<name>::openai`.
macro_rules! both_formats {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn anthropic() {
                super::$name("fa").await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn openai() {
                super::$name("fo").await
            }
        }
    )*};
}

both_formats!(
    text_answer_is_priced_and_written_to_the_ledger,
    tool_call_round_trip_is_a_valid_transcript,
    streamed_text_arrives_as_deltas_and_assembles,
    rate_limit_waits_for_retry_after_then_succeeds,
    bad_request_is_not_retried_and_names_the_problem,
    server_errors_are_retried,
    cut_stream_is_retried,
    malformed_body_is_retried,
    stalled_call_times_out_quickly,
    daily_budget_reached_refuses_without_a_request,
    missing_key_refuses_without_a_request,
    key_goes_in_the_provider_header,
    semaphore_caps_calls_in_flight,
    unknown_price_is_recorded_as_null_not_zero,
    an_unpriced_model_is_refused_unless_allowed,
    an_answer_without_usage_is_metered_by_estimate,
    a_local_provider_needs_no_key_and_is_free_unless_priced,
    a_caller_gone_mid_answer_still_gets_one_estimated_line,
    dropped_call_frees_its_slot_and_writes_nothing,
    an_answer_over_max_response_bytes_fails_once_without_growing,
    calls_reuse_the_providers_connection,
);

/// The provider's connection is kept between calls, as against the real APIs (whose servers
/// keep it alive, as the fake's do): plain, streamed, and after an error status answer all use
/// one; an answer cut mid-body costs that connection, and the retry opens another.
async fn calls_reuse_the_providers_connection(p: &str) {
    let w = world(|_| {});
    w.fake.add_rule(Rule::new(
        Match::Nth(3),
        status(500, "internal error", None),
    ));
    w.fake
        .add_rule(Rule::new(Match::Nth(5), Reply::Fault(Fault::CutStream)));
    w.fake
        .add_rule(Rule::new(Match::Any, Reply::Text("again".into())));
    let model = format!("{p}/x");
    for stream in [false, true, false] {
        let mut req = request(&model, "hi");
        req.stream = stream;
        let r = w.gw.chat(req, None).await.unwrap();
        assert_eq!(text_of(&r.content), "again");
    }
    // The third call took two requests: a 500 (request 3), then its retry (request 4).
    assert_eq!(w.fake.request_count(), 4);
    assert_eq!(
        w.fake.connection_count(),
        1,
        "one connection for every call"
    );
    // Request 5 is cut mid-body: the retry (6) needs a new connection.
    let r = w.gw.chat(request(&model, "hi"), None).await.unwrap();
    assert_eq!(text_of(&r.content), "again");
    assert_eq!(w.fake.request_count(), 6);
    assert_eq!(w.fake.connection_count(), 2);
    assert!(w.fake.violations().is_empty(), "{:?}", w.fake.violations());
}

async fn text_answer_is_priced_and_written_to_the_ledger(p: &str) {
    let w = world(|_| {});
    w.fake.add_rule(
        Rule::new(Match::Any, Reply::Text("hello there".into())).usage(UsageSpec {
            input: 1000,
            output: 500,
            cache_read: 2000,
            cache_write: 400,
        }),
    );
    let model = format!("{p}/x");
    let r = w.gw.chat(request(&model, "hi"), None).await.unwrap();
    assert_eq!(text_of(&r.content), "hello there");
    assert_eq!(r.stop_reason, StopReason::EndTurn);
    assert_eq!(r.model, model);
    assert!(!r.request_id.is_empty());
    // Anthropic reports cache writes; OpenAI folds them into prompt_tokens (no write count).
    let want = if p == "fa" {
        Usage {
            input_tokens: 1000,
            output_tokens: 500,
            cache_read_tokens: 2000,
            cache_write_tokens: 400,
        }
    } else {
        Usage {
            input_tokens: 1400,
            output_tokens: 500,
            cache_read_tokens: 2000,
            cache_write_tokens: 0,
        }
    };
    assert_eq!(r.usage, want);
    let cost = expected_cost(&want);
    assert!(
        close(r.cost_usd.unwrap(), cost),
        "{:?} vs {cost}",
        r.cost_usd
    );

    let lines = ledger(&w);
    assert_eq!(lines.len(), 1);
    let l = &lines[0];
    assert_eq!(l.project, "alpha");
    assert_eq!(l.task.as_deref(), Some("t1"));
    assert_eq!(l.role.as_deref(), Some("developer"));
    assert_eq!(l.model, model);
    assert_eq!(
        (
            l.input_tokens,
            l.output_tokens,
            l.cache_read_tokens,
            l.cache_write_tokens
        ),
        (
            want.input_tokens,
            want.output_tokens,
            want.cache_read_tokens,
            want.cache_write_tokens
        )
    );
    assert!(close(l.usd.unwrap(), cost));
    assert_eq!(l.request_id.as_deref(), Some(r.request_id.as_str()));

    assert!(close(w.gw.spent_today(), cost));
    assert!(close(w.gw.spent_by_project("alpha"), cost));
    assert!(close(w.gw.spent_by_task("t1"), cost));
    assert_eq!(w.gw.spent_by_project("main"), 0.0);
    // A restarted gateway rebuilds the totals from the ledger.
    let again = Gateway::new(&w.home, &w.config).unwrap();
    assert!(close(again.spent_by_task("t1"), cost));
    assert_eq!(w.gw.context_window(&model), Some(100_000));
    assert!(w.fake.violations().is_empty(), "{:?}", w.fake.violations());
}

async fn tool_call_round_trip_is_a_valid_transcript(p: &str) {
    let w = world(|_| {});
    w.fake.add_rule(Rule::new(
        Match::NoToolResultYet,
        Reply::Tools(vec![ToolCall::new("get_weather", json!({"city": "Paris"}))]),
    ));
    w.fake.add_rule(Rule::new(
        Match::LastToolResultContains("sunny".into()),
        Reply::Text("It is sunny in Paris.".into()),
    ));
    let mut req = request(&format!("{p}/x"), "Weather in Paris?");
    req.tools = vec![ToolSpec {
        name: "get_weather".into(),
        description: "Current weather of a city".into(),
        input_schema_json:
            r#"{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}"#
                .into(),
    }];
    let first = w.gw.chat(req.clone(), None).await.unwrap();
    assert_eq!(first.stop_reason, StopReason::ToolUse);
    let (id, input) = first
        .content
        .iter()
        .find_map(|b| match b {
            Block::ToolUse {
                id,
                name,
                input_json,
            } if name == "get_weather" => Some((id.clone(), input_json.clone())),
            _ => None,
        })
        .expect("a tool call");
    let input: serde_json::Value = serde_json::from_str(&input).unwrap();
    assert_eq!(input, json!({"city": "Paris"}));

    req.messages.push(Message {
        role: Role::Assistant,
        content: first.content.clone(),
    });
    req.messages.push(Message {
        role: Role::User,
        content: vec![Block::ToolResult {
            tool_use_id: id,
            content: "sunny, 24 C".into(),
            is_error: false,
        }],
    });
    let second = w.gw.chat(req, None).await.unwrap();
    assert_eq!(text_of(&second.content), "It is sunny in Paris.");
    assert_eq!(second.stop_reason, StopReason::EndTurn);
    assert!(w.fake.violations().is_empty(), "{:?}", w.fake.violations());
    assert_eq!(w.fake.request_count(), 2);
    assert_eq!(ledger(&w).len(), 2);
    // The tool's schema went out as an object, in the format's own key.
    let body = &w.fake.requests()[0].body;
    let schema = if p == "fa" {
        &body["tools"][0]["input_schema"]
    } else {
        &body["tools"][0]["function"]["parameters"]
    };
    assert_eq!(schema["required"], json!(["city"]));
}

async fn streamed_text_arrives_as_deltas_and_assembles(p: &str) {
    let w = world(|_| {});
    let text = "The quick brown fox jumps over the lazy dog, twice over.";
    w.fake.add_rule(
        Rule::new(
            Match::LastUserTextContains("fox".into()),
            Reply::Text(text.into()),
        )
        .times(1),
    );
    w.fake.add_rule(Rule::new(
        Match::LastUserTextContains("look".into()),
        Reply::TextThenTools(
            "Let me look.".into(),
            vec![ToolCall::new(
                "read_file",
                json!({"path": "src/main.rs", "lines": [1, 20]}),
            )],
        ),
    ));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut req = request(&format!("{p}/x"), "tell me about the fox");
    req.stream = true;
    let r = w.gw.chat(req.clone(), Some(tx)).await.unwrap();
    let mut deltas = Vec::new();
    while let Ok(d) = rx.try_recv() {
        deltas.push(d);
    }
    assert_eq!(text_of(&r.content), text);
    assert_eq!(deltas.concat(), text);
    assert!(w.fake.requests()[0].stream);
    assert!(r.cost_usd.is_some());

    req.messages = vec![user("please look at main.rs")];
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let r = w.gw.chat(req, Some(tx)).await.unwrap();
    assert_eq!(r.stop_reason, StopReason::ToolUse);
    assert_eq!(text_of(&r.content), "Let me look.");
    let input = r
        .content
        .iter()
        .find_map(|b| match b {
            Block::ToolUse { input_json, .. } => Some(input_json.clone()),
            _ => None,
        })
        .unwrap();
    let input: serde_json::Value = serde_json::from_str(&input).unwrap();
    assert_eq!(input, json!({"path": "src/main.rs", "lines": [1, 20]}));
    let mut deltas = String::new();
    while let Ok(d) = rx.try_recv() {
        deltas.push_str(&d);
    }
    assert_eq!(deltas, "Let me look.");
    assert_eq!(ledger(&w).len(), 2);
    assert!(w.fake.violations().is_empty(), "{:?}", w.fake.violations());
}

async fn rate_limit_waits_for_retry_after_then_succeeds(p: &str) {
    let w = world(|_| {});
    w.fake
        .add_rule(Rule::new(Match::Any, status(429, "rate limited", Some(1))).times(1));
    w.fake
        .add_rule(Rule::new(Match::Any, Reply::Text("ok".into())));
    let r =
        w.gw.chat(request(&format!("{p}/x"), "hi"), None)
            .await
            .unwrap();
    assert_eq!(text_of(&r.content), "ok");
    let reqs = w.fake.requests();
    assert_eq!(reqs.len(), 2);
    let gap = reqs[1].at.duration_since(reqs[0].at);
    assert!(gap >= Duration::from_millis(950), "retried after {gap:?}");
    assert_eq!(ledger(&w).len(), 1);
}

async fn bad_request_is_not_retried_and_names_the_problem(p: &str) {
    let w = world(|_| {});
    w.fake.add_rule(Rule::new(
        Match::Any,
        status(400, "max_tokens: 99999999 is too large", None),
    ));
    let err =
        w.gw.chat(request(&format!("{p}/x"), "hi"), None)
            .await
            .unwrap_err();
    match &err {
        LlmError::Refused {
            provider,
            status,
            message,
        } => {
            assert_eq!(provider, p);
            assert_eq!(*status, 400);
            assert!(
                message.contains("max_tokens: 99999999 is too large"),
                "{message}"
            );
        }
        other => panic!("expected Refused, got {other:?}"),
    }
    assert!(err.to_string().contains("is too large"));
    assert_eq!(w.fake.request_count(), 1);
    assert!(ledger(&w).is_empty());
}

async fn server_errors_are_retried(p: &str) {
    let w = world(|_| {});
    w.fake
        .add_rule(Rule::new(Match::Any, status(500, "internal error", None)).times(2));
    w.fake
        .add_rule(Rule::new(Match::Any, Reply::Text("fine now".into())));
    let r =
        w.gw.chat(request(&format!("{p}/x"), "hi"), None)
            .await
            .unwrap();
    assert_eq!(text_of(&r.content), "fine now");
    assert_eq!(w.fake.request_count(), 3);
    assert_eq!(ledger(&w).len(), 1);

    // Overloaded (529) all the way: Exhausted after 1 + max_retries attempts.
    let w = world(|c| c.llm.max_retries = 2);
    w.fake
        .add_rule(Rule::new(Match::Any, status(529, "Overloaded", None)));
    let err =
        w.gw.chat(request(&format!("{p}/x"), "hi"), None)
            .await
            .unwrap_err();
    match err {
        LlmError::Exhausted { attempts, last, .. } => {
            assert_eq!(attempts, 3);
            assert!(
                last.contains("529") && last.contains("Overloaded"),
                "{last}"
            );
        }
        other => panic!("expected Exhausted, got {other:?}"),
    }
    assert_eq!(w.fake.request_count(), 3);
    assert!(ledger(&w).is_empty());
}

async fn cut_stream_is_retried(p: &str) {
    let w = world(|_| {});
    w.fake
        .add_rule(Rule::new(Match::Any, Reply::Fault(Fault::CutStream)).times(1));
    w.fake
        .add_rule(Rule::new(Match::Any, Reply::Text("complete answer".into())));
    let mut req = request(&format!("{p}/x"), "hi");
    req.stream = true;
    let r = w.gw.chat(req.clone(), None).await.unwrap();
    assert_eq!(text_of(&r.content), "complete answer");
    assert_eq!(w.fake.request_count(), 2);
    // The cut answer was a 200: billed, so recorded before the retry, estimated from the
    // request and the part that arrived (not its worst case).
    let lines = ledger(&w);
    assert_eq!(lines.len(), 2);
    assert!(
        lines[0].estimated && lines[0].usd.unwrap() > 0.0,
        "{:?}",
        lines[0]
    );
    assert!(lines[0].output_tokens < 256, "{:?}", lines[0]);
    assert!(!lines[1].estimated);

    // The same for a plain (non-streamed) body cut short.
    w.fake.clear_rules();
    w.fake
        .add_rule(Rule::new(Match::Any, Reply::Fault(Fault::CutStream)).times(1));
    w.fake
        .add_rule(Rule::new(Match::Any, Reply::Text("whole".into())));
    req.stream = false;
    let r = w.gw.chat(req, None).await.unwrap();
    assert_eq!(text_of(&r.content), "whole");
    assert_eq!(w.fake.request_count(), 4);
}

async fn malformed_body_is_retried(p: &str) {
    let w = world(|_| {});
    w.fake
        .add_rule(Rule::new(Match::Any, Reply::Fault(Fault::MalformedJson)).times(2));
    w.fake
        .add_rule(Rule::new(Match::Any, Reply::Text("good".into())));
    let r =
        w.gw.chat(request(&format!("{p}/x"), "hi"), None)
            .await
            .unwrap();
    assert_eq!(text_of(&r.content), "good");
    let mut req = request(&format!("{p}/x"), "hi");
    req.stream = true;
    w.fake.clear_rules();
    w.fake
        .add_rule(Rule::new(Match::Any, Reply::Fault(Fault::MalformedJson)).times(1));
    w.fake
        .add_rule(Rule::new(Match::Any, Reply::Text("good".into())));
    let r = w.gw.chat(req, None).await.unwrap();
    assert_eq!(text_of(&r.content), "good");
    assert_eq!(w.fake.request_count(), 5);
    // Three unreadable 200s (billed, estimated) and two answers.
    let lines = ledger(&w);
    assert_eq!(lines.len(), 5);
    assert_eq!(lines.iter().filter(|l| l.estimated).count(), 3);
}

async fn stalled_call_times_out_quickly(p: &str) {
    let w = world(|c| c.llm.max_retries = 0);
    w.fake
        .add_rule(Rule::new(Match::Any, Reply::Fault(Fault::Stall)));
    let mut req = request(&format!("{p}/x"), "hi");
    req.timeout_s = Some(1);
    let started = Instant::now();
    let err = w.gw.chat(req.clone(), None).await.unwrap_err();
    assert!(
        matches!(&err, LlmError::Exhausted { attempts: 1, provider, .. } if provider == p),
        "{err:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );

    // A stream that starts and then goes silent is abandoned the same way.
    w.fake.clear_rules();
    w.fake
        .add_rule(Rule::new(Match::Any, Reply::Fault(Fault::StallStream)));
    req.stream = true;
    let started = Instant::now();
    let err = w.gw.chat(req, None).await.unwrap_err();
    assert!(
        matches!(&err, LlmError::Exhausted { last, .. } if last.contains("stalled")),
        "{err:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(w.gw.stats().in_flight, 0);
    // The stream had begun (a 200): the call counts at its worst case; the stall before any
    // answer does not.
    let lines = ledger(&w);
    assert_eq!(lines.len(), 1);
    assert!(lines[0].estimated);
}

async fn daily_budget_reached_refuses_without_a_request(p: &str) {
    let w = world(|c| c.budget.daily_usd = Some(0.005));
    w.fake.add_rule(
        Rule::new(Match::Any, Reply::Text("pricey".into())).usage(UsageSpec {
            input: 10_000,
            output: 0,
            cache_read: 0,
            cache_write: 0,
        }),
    );
    let model = format!("{p}/x");
    // 10k input tokens at $1/M = $0.01: the first call is allowed and crosses the cap.
    w.gw.chat(request(&model, "hi"), None).await.unwrap();
    let err = w.gw.chat(request(&model, "again"), None).await.unwrap_err();
    match err {
        LlmError::BudgetExceeded {
            scope,
            limit,
            spent,
        } => {
            assert_eq!(scope, "daily");
            assert_eq!(limit, 0.005);
            assert!(close(spent, 0.01), "{spent}");
        }
        other => panic!("expected BudgetExceeded, got {other:?}"),
    }
    assert_eq!(w.fake.request_count(), 1);
    assert_eq!(ledger(&w).len(), 1);
}

async fn missing_key_refuses_without_a_request(p: &str) {
    let w = world(|c| {
        for name in ["fa", "fo"] {
            c.providers.get_mut(name).unwrap().api_key_env =
                Some("PEGASUS_LLM_TEST_KEY_NEVER_SET".into());
        }
    });
    w.fake
        .add_rule(Rule::new(Match::Any, Reply::Text("no".into())));
    let err =
        w.gw.chat(request(&format!("{p}/x"), "hi"), None)
            .await
            .unwrap_err();
    assert_eq!(
        err,
        LlmError::MissingKey {
            provider: p.into(),
            env: "PEGASUS_LLM_TEST_KEY_NEVER_SET".into()
        }
    );
    assert!(err.to_string().contains("PEGASUS_LLM_TEST_KEY_NEVER_SET"));
    assert_eq!(w.fake.request_count(), 0);
}

async fn key_goes_in_the_provider_header(p: &str) {
    let w = world(|_| {});
    w.fake.require_api_key(Some(w.key.clone()));
    w.fake
        .add_rule(Rule::new(Match::Any, Reply::Text("authorised".into())));
    let r =
        w.gw.chat(request(&format!("{p}/x"), "hi"), None)
            .await
            .unwrap();
    assert_eq!(text_of(&r.content), "authorised");
    let sent = w.fake.last_request().unwrap();
    if p == "fa" {
        assert_eq!(sent.path, "/v1/messages");
        assert_eq!(sent.header("x-api-key"), Some(w.key.as_str()));
        assert_eq!(sent.header("anthropic-version"), Some("2023-06-01"));
        assert_eq!(sent.header("authorization"), None);
        assert_eq!(sent.body["model"], json!("x"));
        assert_eq!(sent.body["system"], json!("You are a test."));
    } else {
        assert_eq!(sent.path, "/v1/chat/completions");
        let bearer = format!("Bearer {}", w.key);
        assert_eq!(sent.header("authorization"), Some(bearer.as_str()));
        assert_eq!(sent.header("x-api-key"), None);
        assert_eq!(sent.body["model"], json!("x"));
        assert_eq!(sent.body["messages"][0]["role"], json!("system"));
    }
    assert!(sent
        .header("content-type")
        .unwrap()
        .starts_with("application/json"));

    // A wrong key is the provider's 401: refused, not retried.
    w.fake.require_api_key(Some("sk-someone-else".into()));
    let err =
        w.gw.chat(request(&format!("{p}/x"), "hi"), None)
            .await
            .unwrap_err();
    assert!(
        matches!(err, LlmError::Refused { status: 401, .. }),
        "{err:?}"
    );
    assert_eq!(w.fake.request_count(), 2);
}

async fn semaphore_caps_calls_in_flight(p: &str) {
    let w = world(|c| c.llm.max_concurrency = 2);
    w.fake.add_rule(Rule::new(
        Match::Any,
        Reply::Fault(Fault::Delay {
            ms: 200,
            then: Box::new(Reply::Text("slow".into())),
        }),
    ));
    let model = format!("{p}/x");
    let started = Instant::now();
    let calls = (0..6).map(|i| {
        let gw = w.gw.clone();
        let req = request(&model, &format!("call {i}"));
        async move { gw.chat(req, None).await }
    });
    let results = futures_util::future::join_all(calls).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let stats = w.gw.stats();
    assert_eq!(stats.max_in_flight, 2);
    assert_eq!(stats.in_flight, 0);
    assert_eq!(stats.calls, 6);
    // Six 200 ms answers, two at a time: at least three rounds.
    assert!(
        started.elapsed() >= Duration::from_millis(580),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(ledger(&w).len(), 6);
}

async fn an_unpriced_model_is_refused_unless_allowed(p: &str) {
    let w = world(|c| c.prices.clear());
    w.fake
        .add_rule(Rule::new(Match::Any, Reply::Text("free?".into())));
    let err =
        w.gw.chat(request(&format!("{p}/x"), "hi"), None)
            .await
            .unwrap_err();
    assert!(matches!(&err, LlmError::Unpriced { model } if model == &format!("{p}/x")));
    let line = err.to_string();
    assert!(
        line.contains("prices:") && line.contains("allow_unpriced_models"),
        "{line}"
    );
    assert_eq!(w.fake.request_count(), 0, "refused before any request");
}

async fn unknown_price_is_recorded_as_null_not_zero(p: &str) {
    let w = world(|c| {
        c.prices.clear();
        c.llm.allow_unpriced_models = true;
    });
    w.fake
        .add_rule(Rule::new(Match::Any, Reply::Text("free?".into())));
    let r =
        w.gw.chat(request(&format!("{p}/x"), "hi"), None)
            .await
            .unwrap();
    assert_eq!(r.cost_usd, None);
    assert!(r.usage.output_tokens > 0);
    let lines = ledger(&w);
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0].usd, None);
    assert!(lines[0].output_tokens > 0);
    let raw = std::fs::read_to_string(w.home.ledger_file()).unwrap();
    assert!(raw.contains("\"usd\":null"), "{raw}");
    assert_eq!(w.gw.spent_today(), 0.0);
    // Unpriced is not unknown: the window comes from the model table.
    assert_eq!(w.gw.context_window(&format!("{p}/x")), Some(100_000));
}

/// DESIGN.md §5: every answered call is metered. A server that sends no usage (many
/// OpenAI-compatible ones and proxies, streamed or not) gets a ledger line estimated from the
/// request and the text received, priced, counted by the budgets, and marked `estimated`.
async fn an_answer_without_usage_is_metered_by_estimate(p: &str) {
    let w = world(|_| {});
    let text = "An answer of some length, so that its estimate is not trivially small. ".repeat(8);
    w.fake
        .add_rule(Rule::new(Match::Any, Reply::Text(text.clone())));
    w.fake.omit_usage(true);
    for stream in [false, true] {
        let mut req = request(&format!("{p}/x"), &"a question of some length ".repeat(40));
        req.stream = stream;
        let r = w.gw.chat(req.clone(), None).await.unwrap();
        assert_eq!(text_of(&r.content), text);
        let usd = r.cost_usd.expect("an estimated line is priced");
        assert!(usd > 0.0, "stream={stream}");
        // The same estimator as the context check, on the request and the text received.
        assert_eq!(r.usage.input_tokens, req.estimated_input_tokens());
        assert_eq!(
            r.usage.output_tokens,
            pegasus_proto::llm::tokens_of_bytes(text.len())
        );
        assert!(close(usd, expected_cost(&r.usage)), "stream={stream}");
    }
    // A wrong answer without usage too.
    w.fake.omit_usage(false);
    w.fake
        .add_rule(Rule::new(Match::Any, Reply::Fault(Fault::WrongUsage)));
    w.fake.clear_rules();
    w.fake
        .add_rule(Rule::new(Match::Any, Reply::Fault(Fault::WrongUsage)));
    let r =
        w.gw.chat(request(&format!("{p}/x"), "hi"), None)
            .await
            .unwrap();
    assert_eq!(text_of(&r.content), WRONG_USAGE_TEXT);
    assert!(r.cost_usd.is_some_and(|u| u > 0.0));
    let lines = ledger(&w);
    assert_eq!(lines.len(), 3);
    assert!(
        lines
            .iter()
            .all(|l| l.estimated && l.usd.is_some_and(|u| u > 0.0)),
        "{lines:?}"
    );
    // The budgets count them like any other line.
    let total: f64 = lines.iter().filter_map(|l| l.usd).sum();
    assert!(close(w.gw.spent_today(), total));
    assert!(close(w.gw.spent_by_task("t1"), total));
    assert!(w.fake.violations().is_empty(), "{:?}", w.fake.violations());
}

/// A caller that goes away while its streamed answer arrives (a worker killed mid-call): the
/// provider billed the call, so it gets one ledger line, estimated from what had arrived.
async fn a_caller_gone_mid_answer_still_gets_one_estimated_line(p: &str) {
    let w = world(|_| {});
    w.fake.add_rule(
        Rule::new(
            Match::Any,
            Reply::Fault(Fault::Paced {
                gap_ms: 50,
                then: Box::new(Reply::Text("slowly, word by word, ".repeat(20))),
            }),
        )
        .times(1),
    );
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut req = request(&format!("{p}/x"), "hi");
    req.stream = true;
    let gw = w.gw.clone();
    let call = tokio::spawn(async move { gw.chat(req, Some(tx)).await });
    // Part of the answer arrived; then the caller dies.
    let first = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await;
    let Ok(Some(first)) = first else {
        panic!("no delta arrived")
    };
    call.abort();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let lines = loop {
        let lines = ledger(&w);
        if !lines.is_empty() || std::time::Instant::now() > deadline {
            break lines;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(lines.len(), 1, "{lines:?}");
    let l = &lines[0];
    assert!(l.estimated && l.usd.is_some_and(|u| u > 0.0), "{l:?}");
    // The text received is counted, not the output count the stream's start reported (1 in
    // Anthropic's `message_start`).
    assert!(
        l.output_tokens >= pegasus_proto::llm::tokens_of_bytes(first.len())
            && l.output_tokens < 256,
        "{l:?} after {first:?}"
    );
    assert_eq!(w.gw.stats().in_flight, 0);
}

async fn dropped_call_frees_its_slot_and_writes_nothing(p: &str) {
    let w = world(|c| c.llm.max_concurrency = 1);
    w.fake.add_rule(
        Rule::new(
            Match::Any,
            Reply::Fault(Fault::Delay {
                ms: 5_000,
                then: Box::new(Reply::Text("too late".into())),
            }),
        )
        .times(1),
    );
    w.fake
        .add_rule(Rule::new(Match::Any, Reply::Text("next".into())));
    let model = format!("{p}/x");
    let abandoned = tokio::time::timeout(
        Duration::from_millis(300),
        w.gw.chat(request(&model, "slow"), None),
    )
    .await;
    assert!(abandoned.is_err(), "the call should have been cut off");
    assert_eq!(w.gw.stats().in_flight, 0);
    // The only slot is free again: the next call goes through at once.
    let r = tokio::time::timeout(
        Duration::from_secs(3),
        w.gw.chat(request(&model, "next"), None),
    )
    .await
    .expect("slot was not released")
    .unwrap();
    assert_eq!(text_of(&r.content), "next");
    let lines = ledger(&w);
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0].request_id.as_deref(), Some(r.request_id.as_str()));
}

/// DESIGN.md §5 local providers: `local: true` needs no key (one set is still sent) and its models
/// cost 0 unless priced; no `allow_unpriced_models` needed.
async fn a_local_provider_needs_no_key_and_is_free_unless_priced(p: &str) {
    let w = world(|c| {
        c.prices.clear();
        for pc in c.providers.values_mut() {
            pc.local = true;
            pc.api_key_env = Some("PEGASUS_TEST_LOCAL_KEY_UNSET".into());
        }
    });
    w.fake
        .add_rule(Rule::new(Match::Any, Reply::Text("local answer".into())));
    let r =
        w.gw.chat(request(&format!("{p}/x"), "hi"), None)
            .await
            .unwrap();
    assert_eq!(text_of(&r.content), "local answer");
    assert_eq!(r.cost_usd, Some(0.0));
    let lines = ledger(&w);
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0].usd, Some(0.0));
    assert!(lines[0].input_tokens > 0 && lines[0].output_tokens > 0);
    assert_eq!(
        lines[0].model,
        format!("{p}/x"),
        "the id the user configured"
    );
}

// Budgets other than the daily one, and model resolution, only need one format.

#[tokio::test]
async fn project_and_task_budgets_are_enforced_per_scope() {
    let w = world(|c| c.budget.task_usd = Some(0.005));
    let mut project = create_project(
        &w.home,
        &NewProject {
            name: "alpha".into(),
            goal: "Test budgets.".into(),
            ..NewProject::default()
        },
        chrono::Utc::now(),
    )
    .unwrap();
    project
        .set("budget_usd", &serde_norway::Value::from(0.015))
        .unwrap();
    project.save(&w.home.project_dir("alpha")).unwrap();
    w.fake.add_rule(
        Rule::new(Match::Any, Reply::Text("x".into())).usage(UsageSpec {
            input: 10_000,
            ..UsageSpec::default()
        }),
    );
    let call = |task: &str| {
        let mut req = request("fa/x", "hi");
        req.meta.task = Some(task.into());
        w.gw.chat(req, None)
    };
    call("t1").await.unwrap(); // $0.01: task t1 now over its $0.005
    let err = call("t1").await.unwrap_err();
    assert!(
        matches!(&err, LlmError::BudgetExceeded { scope, .. } if scope == "task t1"),
        "{err:?}"
    );
    call("t2").await.unwrap(); // project alpha: $0.02 >= $0.015
    let err = call("t3").await.unwrap_err();
    assert!(
        matches!(&err, LlmError::BudgetExceeded { scope, limit, .. } if scope == "project alpha" && *limit == 0.015),
        "{err:?}"
    );
    // The MainAgent (no project) is only bound by the daily cap.
    let mut req = request("fa/x", "hi");
    req.meta = CallMeta::default();
    w.gw.chat(req, None).await.unwrap();
    assert!(close(w.gw.spent_by_project("main"), 0.01));
    assert_eq!(w.fake.request_count(), 3);
    assert_eq!(ledger(&w).iter().filter(|l| l.project == "main").count(), 1);
}

#[tokio::test]
async fn a_tasks_own_budget_replaces_the_configs_for_that_task_only() {
    let w = world(|c| c.budget.task_usd = Some(1.0));
    w.gw.set_task_budgets(std::sync::Arc::new(|project: &str, task: &str| {
        (project == "alpha" && task == "t-asana").then_some(0.005)
    }));
    w.fake.add_rule(
        Rule::new(Match::Any, Reply::Text("x".into())).usage(UsageSpec {
            input: 10_000,
            ..UsageSpec::default()
        }),
    );
    let call = |task: &str| {
        let mut req = request("fa/x", "hi");
        req.meta.task = Some(task.into());
        w.gw.chat(req, None)
    };
    call("t-asana").await.unwrap(); // $0.01: past its own $0.005
    let err = call("t-asana").await.unwrap_err();
    assert!(
        matches!(&err, LlmError::BudgetExceeded { scope, limit, .. } if scope == "task t-asana" && *limit == 0.005),
        "{err:?}"
    );
    // Another task keeps config.yml's $1.
    call("t-other").await.unwrap();
    call("t-other").await.unwrap();
}

#[tokio::test]
async fn models_resolve_against_the_config() {
    let w = world(|c| c.default_model = "fa/default-model".into());
    assert_eq!(w.gw.resolve_model(""), "fa/default-model");
    assert_eq!(w.gw.resolve_model("fo/y"), "fo/y");
    assert_eq!(
        w.gw.context_window("anthropic/claude-sonnet-4-5"),
        Some(200_000)
    );
    assert_eq!(w.gw.context_window(""), Some(100_000));
    w.fake.add_rule(Rule::new(
        Match::Model("default-model".into()),
        Reply::Text("default".into()),
    ));
    let r = w.gw.chat(request("", "hi"), None).await.unwrap();
    assert_eq!(r.model, "fa/default-model");
    let err = w.gw.chat(request("nope/x", "hi"), None).await.unwrap_err();
    assert!(matches!(err, LlmError::UnknownProvider { .. }), "{err:?}");
    let err =
        w.gw.chat(request("justamodel", "hi"), None)
            .await
            .unwrap_err();
    assert_eq!(err, LlmError::BadModel("justamodel".into()));
    assert_eq!(w.fake.request_count(), 1);
}

async fn an_answer_over_max_response_bytes_fails_once_without_growing(p: &str) {
    let w = world(|c| c.llm.max_response_bytes = 64 * 1024);
    // 200 KB of text: over the limit in a plain body and in a stream alike.
    w.fake
        .add_rule(Rule::new(Match::Any, Reply::Text("x".repeat(200_000))));
    for stream in [false, true] {
        let mut req = request(&format!("{p}/m"), "say a lot");
        req.stream = stream;
        let before = w.fake.requests().len();
        let err = w.gw.chat(req, None).await.unwrap_err();
        match &err {
            LlmError::BadResponse { message, .. } => {
                assert!(message.contains("llm.max_response_bytes"), "{message}")
            }
            other => panic!("stream={stream}: {other:?}"),
        }
        // Not retried: a retry would be billed and as large.
        assert_eq!(w.fake.requests().len(), before + 1, "stream={stream}");
    }
    // A normal answer under the limit still works.
    w.fake.clear_rules();
    w.fake
        .add_rule(Rule::new(Match::Any, Reply::Text("short".into())));
    let ok =
        w.gw.chat(request(&format!("{p}/m"), "hi"), None)
            .await
            .unwrap();
    assert_eq!(text_of(&ok.content), "short");
}

/// Anthropic extended thinking, as the real API wants it (the fake enforces each rule): the
/// thinking and redacted_thinking blocks of a response come back as blocks and are sent back
/// unchanged on the next request of the tool loop; an altered one is refused; a loop started
/// without thinking finishes without it; temperature is left out when thinking is on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thinking_blocks_round_trip_unchanged_within_the_tool_loop() {
    for stream in [false, true] {
        let w = world(|_| {});
        w.fake.add_rule(Rule::new(
            Match::LastToolResultContains("sunny".into()),
            Reply::Text("It is sunny.".into()),
        ));
        w.fake.add_rule(Rule::new(
            Match::NoToolResultYet,
            Reply::Tools(vec![ToolCall::new("get_weather", json!({"city": "Paris"}))]),
        ));
        let mut first = request("fa/m", "weather in Paris?");
        first.thinking = Some("low".into());
        first.temperature = Some(0.3);
        first.stream = stream;
        first.tools = vec![ToolSpec {
            name: "get_weather".into(),
            description: "weather of a city".into(),
            input_schema_json: r#"{"type":"object","properties":{"city":{"type":"string"}}}"#
                .into(),
        }];
        let resp = w.gw.chat(first.clone(), None).await.unwrap();
        assert!(
            matches!(resp.content[0], Block::Thinking { ref signature, .. } if !signature.is_empty()),
            "stream={stream}: {:?}",
            resp.content
        );
        assert!(matches!(resp.content[1], Block::RedactedThinking { .. }));
        let call_id = resp
            .content
            .iter()
            .find_map(|b| match b {
                Block::ToolUse { id, .. } => Some(id.clone()),
                _ => None,
            })
            .unwrap();
        let sent = &w.fake.requests()[0].body;
        assert!(sent.get("temperature").is_none(), "{sent}");
        assert!(sent["max_tokens"].as_u64() > sent["thinking"]["budget_tokens"].as_u64());
        let follow_up = |assistant: Vec<Block>| {
            let mut r = first.clone();
            r.messages.push(Message {
                role: Role::Assistant,
                content: assistant,
            });
            r.messages.push(Message {
                role: Role::User,
                content: vec![Block::ToolResult {
                    tool_use_id: call_id.clone(),
                    content: "sunny, 24 C".into(),
                    is_error: false,
                }],
            });
            r
        };
        // Unchanged: accepted, and the answer comes.
        let answer =
            w.gw.chat(follow_up(resp.content.clone()), None)
                .await
                .unwrap();
        assert_eq!(text_of(&answer.content), "It is sunny.", "stream={stream}");
        let sent = w.fake.requests().last().unwrap().body.clone();
        assert_eq!(sent["messages"][1]["content"][0]["type"], "thinking");
        assert_eq!(
            sent["messages"][1]["content"][1]["type"],
            "redacted_thinking"
        );
        assert!(w.fake.violations().is_empty(), "{:?}", w.fake.violations());
        // Altered: refused with the real API's 400, not retried.
        let mut altered = resp.content.clone();
        if let Block::Thinking { thinking, .. } = &mut altered[0] {
            thinking.push_str(" (edited)");
        }
        match w.gw.chat(follow_up(altered), None).await.unwrap_err() {
            LlmError::Refused {
                status, message, ..
            } => {
                assert_eq!(status, 400);
                assert!(message.contains("Invalid `signature`"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        // A loop whose assistant turn has no thinking block (made without thinking): this
        // call goes without thinking instead of being refused.
        let without: Vec<Block> = resp
            .content
            .iter()
            .filter(|b| matches!(b, Block::ToolUse { .. }))
            .cloned()
            .collect();
        let answer = w.gw.chat(follow_up(without), None).await.unwrap();
        assert_eq!(text_of(&answer.content), "It is sunny.");
        let sent = w.fake.requests().last().unwrap().body.clone();
        assert!(sent.get("thinking").is_none(), "{sent}");
    }
}

/// The model table decides the wire (DESIGN.md §5): a reasoning model gets max_completion_tokens and
/// reasoning_effort and no temperature; any other model never gets reasoning_effort; a role's
/// thinking on a model without it runs without it. The fake refuses each wrong shape with the
/// real API's 400, so a pass here means the real API would take these requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_table_shapes_thinking_and_reasoning_requests() {
    let w = world(|_| {});
    w.fake
        .add_rule(Rule::new(Match::Any, Reply::Text("ok".into())));
    let ask = |model: &str| {
        let mut r = request(model, "think hard");
        r.thinking = Some("high".into());
        r.temperature = Some(0.3);
        r.max_tokens = 100_000;
        r
    };
    for model in ["fo/x-reasoning", "fo/plain", "fa/m-nothink", "fa/m"] {
        let got = w.gw.chat(ask(model), None).await;
        assert!(got.is_ok(), "{model}: {got:?}");
    }
    let bodies: Vec<serde_json::Value> = w.fake.requests().iter().map(|r| r.body.clone()).collect();
    // Reasoning model.
    assert_eq!(
        bodies[0]["max_completion_tokens"], 8192,
        "capped by max_output_tokens"
    );
    assert_eq!(bodies[0]["reasoning_effort"], "high");
    assert!(bodies[0].get("max_tokens").is_none() && bodies[0].get("temperature").is_none());
    // Plain OpenAI model.
    assert!(bodies[1].get("reasoning_effort").is_none(), "{}", bodies[1]);
    assert_eq!(bodies[1]["max_tokens"], 8192);
    assert!((bodies[1]["temperature"].as_f64().unwrap() - 0.3).abs() < 1e-6);
    // Anthropic model without thinking: none sent, temperature kept.
    assert!(bodies[2].get("thinking").is_none(), "{}", bodies[2]);
    assert!(bodies[2].get("temperature").is_some());
    // Anthropic model with thinking: enabled, no temperature, budget below max_tokens.
    assert_eq!(bodies[3]["thinking"]["type"], "enabled");
    assert!(bodies[3].get("temperature").is_none());
    assert!(w.fake.violations().is_empty(), "{:?}", w.fake.violations());
    // An unknown model gets the conservative default window, never "unknown".
    assert_eq!(w.gw.context_window("nobody/x"), Some(128_000));
}

/// DESIGN.md §5 hard budgets: 20 calls at once against a daily budget that fits 3 of them; the
/// admission after the queue wait, with the worst cases of the calls in flight held, keeps the
/// spend within the budget, and the ledger file reproduces every total.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_concurrent_calls_never_overspend_a_budget_that_fits_three() {
    let w = world(|c| {
        c.llm.max_concurrency = 20;
        c.llm.max_retries = 0;
    });
    w.fake.add_rule(
        Rule::new(
            Match::Any,
            Reply::Fault(Fault::Delay {
                ms: 300,
                then: Box::new(Reply::Text("answer".into())),
            }),
        )
        .usage(UsageSpec {
            input: 50,
            output: 256,
            cache_read: 0,
            cache_write: 0,
        }),
    );
    // One call's worst case: its estimated input plus 256 output tokens, at $1/$2 per Mtok.
    let one = {
        let probe = world(|_| {});
        probe.fake.add_rule(
            Rule::new(Match::Any, Reply::Text("x".into())).usage(UsageSpec {
                input: 50,
                output: 256,
                cache_read: 0,
                cache_write: 0,
            }),
        );
        probe.gw.chat(request("fa/x", "hi"), None).await.unwrap();
        std::fs::read_to_string(probe.home.pending_calls_file()).unwrap()
    };
    let worst: f64 = one
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find_map(|v| v["usd"].as_f64())
        .unwrap();
    let budget = 3.5 * worst;
    let w = World {
        gw: {
            let mut c = w.config.clone();
            c.budget.daily_usd = Some(budget);
            Gateway::new(&w.home, &c).unwrap()
        },
        ..w
    };
    let calls = (0..20).map(|i| {
        let gw = w.gw.clone();
        async move { gw.chat(request("fa/x", &format!("call {i}")), None).await }
    });
    let results = futures_util::future::join_all(calls).await;
    let answered = results.iter().filter(|r| r.is_ok()).count();
    let refused = results
        .iter()
        .filter(|r| matches!(r, Err(LlmError::BudgetExceeded { .. })))
        .count();
    assert_eq!(answered + refused, 20, "{results:?}");
    assert_eq!(answered, 3, "three worst cases fit, a fourth does not");
    assert!(
        w.gw.spent_today() <= budget,
        "{} > {budget}",
        w.gw.spent_today()
    );
    // The ledger on disk gives the same totals as the gateway's memory.
    let lines = ledger(&w);
    assert_eq!(lines.len(), 3);
    let on_disk: f64 = lines.iter().filter_map(|l| l.usd).sum();
    assert!((on_disk - w.gw.spent_today()).abs() < 1e-12);
    assert!((w.gw.spent_by_task("t1") - on_disk).abs() < 1e-12);
    assert!(lines.iter().all(|l| l.call.is_some() && !l.estimated));
    assert_eq!(w.fake.request_count(), 3, "refused calls were never sent");
}

/// A call journaled by a pegasusd that died before its ledger line becomes one line at its
/// worst case, flagged estimated, once; settled and finished calls add nothing.
#[tokio::test]
async fn calls_a_dead_daemon_sent_but_never_recorded_count_at_their_worst_case() {
    let w = world(|_| {});
    let pending = |call: &str| {
        json!({"call": call, "ts": "2026-11-22T10:00:00Z", "project": "alpha", "task": "t9",
               "role": null, "model": "fa/x", "input_tokens": 100, "output_tokens": 256,
               "usd": 0.25})
        .to_string()
    };
    let settled = LedgerEntry {
        ts: chrono::Utc::now(),
        project: "alpha".into(),
        task: Some("t9".into()),
        role: None,
        model: "fa/x".into(),
        input_tokens: 1,
        output_tokens: 1,
        cache_read_tokens: 0,
        cache_write_tokens: 0,
        usd: Some(0.001),
        request_id: None,
        call: Some("c-settled".into()),
        estimated: false,
        fallback_from: None,
    };
    std::fs::write(
        w.home.ledger_file(),
        format!("{}\n", serde_json::to_string(&settled).unwrap()),
    )
    .unwrap();
    std::fs::write(
        w.home.pending_calls_file(),
        format!(
            "{}\n{}\n{}\n{{\"done\":\"c-done\"}}\n",
            pending("c-lost"),
            pending("c-settled"),
            pending("c-done")
        ),
    )
    .unwrap();
    let gw = Gateway::new(&w.home, &w.config).unwrap();
    let lines = ledger(&w);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[1].call.as_deref(), Some("c-lost"));
    assert!(lines[1].estimated);
    assert_eq!(lines[1].usd, Some(0.25));
    assert!((gw.spent_by_task("t9") - 0.251).abs() < 1e-12);
    assert_eq!(
        std::fs::read_to_string(w.home.pending_calls_file()).unwrap(),
        ""
    );
    // A second start finds nothing more to record.
    drop(gw);
    let gw = Gateway::new(&w.home, &w.config).unwrap();
    assert_eq!(ledger(&w).len(), 2);
    assert!((gw.spent_by_task("t9") - 0.251).abs() < 1e-12);
}

/// A world with provider `lo`: an OpenAI-compatible server on this machine (the fake) whose
/// models no table knows, so their window is asked of the server.
fn local_world() -> World {
    world(|c| {
        let base_url = c.providers["fo"].base_url.clone();
        c.providers.insert(
            "lo".into(),
            ProviderConfig {
                kind: "openai".into(),
                base_url,
                api_key_env: c.providers["fo"].api_key_env.clone(),
                local: false,
            },
        );
        c.prices.insert(
            "lo/*".into(),
            PriceConfig {
                context_window: None,
                ..fake_price()
            },
        );
    })
}

/// Issue 32 item 9: the window of a model only its server knows is learned in the background
/// (nothing waits for it: `window_now` says it is pending meanwhile), announced, remembered
/// on disk so a restarted gateway knows it at once, kept when the server is too slow to say it
/// again, and asked again when the provider moved to another server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_window_is_learned_in_the_background_and_remembered() {
    use pegasus_llm::WindowNow;
    let w = local_world();
    let m = "lo/m";
    w.fake.report_window(Some(4096));
    w.fake.hold_window_probes(Some(Duration::from_millis(300)));
    let default = w.config.default_context_window;
    assert_eq!(
        w.gw.window_now(m),
        WindowNow {
            window: default,
            pending: true
        }
    );
    let mut updates = w.gw.subscribe_windows();
    w.gw.spawn_learn(m);
    // Returned at once: the probe is held 300 ms.
    assert!(w.gw.window_now(m).pending);
    let (model, window) = tokio::time::timeout(Duration::from_secs(10), updates.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((model.as_str(), window), (m, 4096));
    let known = WindowNow {
        window: 4096,
        pending: false,
    };
    assert_eq!(w.gw.window_now(m), known);
    assert_eq!(w.gw.context_window(m), Some(4096));
    let file = std::fs::read_to_string(w.home.context_windows_file()).unwrap();
    assert!(file.contains("\"lo/m\"") && file.contains("4096"), "{file}");

    // A restart knows it at once, while the server holds its probes past the deadline; the
    // refresh that times out keeps what the server said before.
    w.fake.hold_window_probes(Some(Duration::from_secs(30)));
    let again = Gateway::new(&w.home, &w.config).unwrap();
    assert_eq!(again.window_now(m), known);
    let mut updates = again.subscribe_windows();
    again.spawn_learn(m);
    let (_, window) = tokio::time::timeout(Duration::from_secs(10), updates.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(window, 4096);
    assert_eq!(again.window_now(m), known);

    // The provider now points at another server: what the old one said does not apply.
    let mut moved = w.config.clone();
    moved.providers.get_mut("lo").unwrap().base_url = "http://127.0.0.1:9/v1".into();
    let elsewhere = Gateway::new(&w.home, &moved).unwrap();
    assert!(elsewhere.window_now(m).pending);
    // A server that is down: the first call's wait ends with the default, quickly.
    let started = Instant::now();
    assert_eq!(
        elsewhere.window_soon(m, Duration::from_secs(30)).await,
        default
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(!elsewhere.window_now(m).pending);
}

/// A server that holds its probes longer than the first call may wait: the call goes on with
/// the default window (and the server's later answer still arrives on the subscription).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_server_does_not_hold_the_first_call_past_its_deadline() {
    let w = local_world();
    w.fake.report_window(Some(2048));
    w.fake.hold_window_probes(Some(Duration::from_secs(30)));
    let started = Instant::now();
    let got = w.gw.window_soon("lo/m", Duration::from_millis(500)).await;
    assert_eq!(got, w.config.default_context_window);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

/// Issue 32 item 10: every request names its call (`X-Client-Request-Id`), and its ledger line
/// carries that call id and the answer's request id, so the provider's record and the ledger
/// match one to one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_request_names_its_call_and_its_ledger_line_names_both() {
    let w = world(|_| {});
    w.fake
        .add_rule(Rule::new(Match::Any, Reply::Text("hi".into())));
    for stream in [false, true] {
        let mut req = request("fa/m", "hello");
        req.stream = stream;
        w.gw.chat(req, None).await.unwrap();
    }
    let answered = w.fake.answered();
    let lines = ledger(&w);
    assert_eq!((answered.len(), lines.len()), (2, 2));
    for a in &answered {
        let call = a.client_request_id.clone().expect("the call id was sent");
        let matching: Vec<_> = lines
            .iter()
            .filter(|l| l.call.as_deref() == Some(call.as_str()))
            .collect();
        assert_eq!(matching.len(), 1, "{call}: {lines:?}");
        assert_eq!(
            matching[0].request_id.as_deref(),
            Some(a.request_id.as_str())
        );
    }
}

// ---- fallback models (DESIGN.md §5) ---------------------------------------------------------

/// A world whose calls of `fa/main` fall back to `list`, in order; `main` answers `529` always.
fn overloaded_main(list: &[&str], tweak: impl FnOnce(&mut Config)) -> World {
    let w = world(|c| {
        c.fallback = list.iter().map(|s| s.to_string()).collect();
        c.llm.max_retries = 1;
        tweak(c);
    });
    w.fake.add_rule(Rule::new(
        Match::Model("main".into()),
        status(529, "Overloaded", None),
    ));
    w
}

/// The models the fake was asked for, in order.
fn models_asked(w: &World) -> Vec<String> {
    w.fake
        .requests()
        .iter()
        .map(|r| r.body["model"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The model asked for is overloaded through its retries: the next model of `fallback:`
/// answers; its ledger line names it and the model asked for; `status` can say so. Across
/// wire formats: an Anthropic model falls back to an OpenAI one.
#[tokio::test]
async fn an_overloaded_model_falls_back_after_its_retries() {
    let w = overloaded_main(&["fo/backup", "fa/never"], |_| {});
    w.fake.add_rule(Rule::new(
        Match::Model("backup".into()),
        Reply::Text("from the backup".into()),
    ));
    let r = w.gw.chat(request("fa/main", "hi"), None).await.unwrap();
    assert_eq!(text_of(&r.content), "from the backup");
    assert_eq!(
        r.model, "fo/backup",
        "the response names the model that answered"
    );
    assert_eq!(
        models_asked(&w),
        ["main", "main", "backup"],
        "retries first, in order"
    );
    let lines = ledger(&w);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0].model, "fo/backup");
    assert_eq!(lines[0].fallback_from.as_deref(), Some("fa/main"));
    assert!(lines[0].usd.is_some_and(|u| u > 0.0));
    let raw = std::fs::read_to_string(w.home.ledger_file()).unwrap();
    assert!(raw.contains(r#""fallback_from":"fa/main""#), "{raw}");
    let served = w.gw.fallbacks_served(Some("alpha"));
    assert_eq!(served.len(), 1);
    assert_eq!(
        (
            served[0].model.as_str(),
            served[0].from.as_str(),
            served[0].calls
        ),
        ("fo/backup", "fa/main", 1)
    );
    assert!(
        served[0].line().ends_with("fa/main overloaded (529)"),
        "{}",
        served[0].line()
    );
    // A second call counts on the same line; the model asked for answering has no mark.
    w.gw.chat(request("fa/main", "again"), None).await.unwrap();
    assert_eq!(w.gw.fallbacks_served(None)[0].calls, 2);
    assert!(w.gw.fallbacks_served(Some("other")).is_empty());
    w.fake.clear_rules();
    w.fake
        .add_rule(Rule::new(Match::Any, Reply::Text("main is back".into())));
    w.gw.chat(request("fa/main", "hi"), None).await.unwrap();
    let last = ledger(&w).pop().unwrap();
    assert_eq!((last.model.as_str(), last.fallback_from), ("fa/main", None));
    assert!(!std::fs::read_to_string(w.home.ledger_file())
        .unwrap()
        .lines()
        .last()
        .unwrap()
        .contains("fallback_from"));
    assert!(w.fake.violations().is_empty(), "{:?}", w.fake.violations());
}

/// Rate limits, other 5xx, a refused key (401) and a provider nobody listens on fall back;
/// a request's own fault (400) does not, and neither does a budget refusal.
#[tokio::test]
async fn what_falls_back_and_what_does_not() {
    for (reply, why) in [
        (status(429, "rate limited", None), "rate-limited (429)"),
        (status(503, "unavailable", None), "overloaded (503)"),
        (status(500, "internal", None), "failing (500)"),
        (
            status(401, "invalid x-api-key", None),
            "refused the key (401)",
        ),
    ] {
        let w = world(|c| {
            c.fallback = vec!["fa/backup".into()];
            c.llm.max_retries = 1;
        });
        w.fake
            .add_rule(Rule::new(Match::Model("main".into()), reply));
        w.fake
            .add_rule(Rule::new(Match::Any, Reply::Text("backup".into())));
        let r = w.gw.chat(request("fa/main", "hi"), None).await.unwrap();
        assert_eq!(r.model, "fa/backup", "{why}");
        assert_eq!(w.gw.fallbacks_served(None)[0].why, why);
    }

    // Nobody listens at the main model's address: a failed connection, after its retries.
    let w = world(|c| {
        c.providers.insert(
            "gone".into(),
            ProviderConfig {
                kind: "anthropic".into(),
                base_url: "http://127.0.0.1:9".into(),
                api_key_env: None,
                local: true,
            },
        );
        c.fallback = vec!["fa/backup".into()];
        c.llm.max_retries = 1;
    });
    w.fake
        .add_rule(Rule::new(Match::Any, Reply::Text("backup".into())));
    let r = w.gw.chat(request("gone/main", "hi"), None).await.unwrap();
    assert_eq!(r.model, "fa/backup");
    assert_eq!(w.gw.fallbacks_served(None)[0].why, "unreachable");

    // 400: the request's fault; the backup is never asked.
    let w = world(|c| c.fallback = vec!["fa/backup".into()]);
    w.fake.add_rule(Rule::new(
        Match::Model("main".into()),
        status(400, "messages: field required", None),
    ));
    w.fake
        .add_rule(Rule::new(Match::Any, Reply::Text("backup".into())));
    let err = w.gw.chat(request("fa/main", "hi"), None).await.unwrap_err();
    assert!(
        matches!(err, LlmError::Refused { status: 400, .. }),
        "{err:?}"
    );
    assert_eq!(models_asked(&w), ["main"]);
    assert!(w.gw.fallbacks_served(None).is_empty());

    // A budget refusal: no model is asked.
    let w = world(|c| {
        c.fallback = vec!["fa/backup".into()];
        c.budget.daily_usd = Some(0.000_001);
    });
    w.fake
        .add_rule(Rule::new(Match::Any, Reply::Text("x".into())));
    let err = w.gw.chat(request("fa/main", "hi"), None).await.unwrap_err();
    assert!(matches!(err, LlmError::BudgetExceeded { .. }), "{err:?}");
    assert_eq!(w.fake.request_count(), 0);
}

/// Each model reserves at its own price: a fallback dearer than the budget allows is refused
/// by the budget (and that refusal ends the call), while the cheap model asked for was
/// admitted.
#[tokio::test]
async fn each_model_reserves_at_its_own_price() {
    let w = overloaded_main(&["fa/dear"], |c| {
        c.budget.daily_usd = Some(0.01);
        c.prices.insert(
            "fa/dear".into(),
            PriceConfig {
                input: 1000.0,
                output: 1000.0,
                ..fake_price()
            },
        );
    });
    w.fake
        .add_rule(Rule::new(Match::Any, Reply::Text("dear".into())));
    let err = w.gw.chat(request("fa/main", "hi"), None).await.unwrap_err();
    match &err {
        LlmError::BudgetExceeded { scope, .. } => assert!(scope.starts_with("daily"), "{scope}"),
        other => panic!("expected the dear fallback refused by the budget: {other:?}"),
    }
    assert_eq!(
        models_asked(&w),
        ["main", "main"],
        "the dear model never asked"
    );
    // Its own attempt reserved at its own price: in the journal as `fa/dear`, never sent.
    let journal = std::fs::read_to_string(w.home.pending_calls_file()).unwrap();
    assert!(
        !journal.contains("fa/dear"),
        "refused before the journal: {journal}"
    );
    assert!(journal.contains(r#""model":"fa/main""#), "{journal}");
}

/// Every model fails: one error names each model tried, in order, with its own reason.
#[tokio::test]
async fn a_chain_that_all_fails_names_each_model() {
    let w = overloaded_main(&["fa/second", "gone/third"], |c| {
        c.providers.insert(
            "gone".into(),
            ProviderConfig {
                kind: "openai".into(),
                base_url: "http://127.0.0.1:9/v1".into(),
                api_key_env: None,
                local: true,
            },
        );
    });
    w.fake.add_rule(Rule::new(
        Match::Model("second".into()),
        status(500, "boom", None),
    ));
    let err = w.gw.chat(request("fa/main", "hi"), None).await.unwrap_err();
    let LlmError::NoModelAnswered { tried } = &err else {
        panic!("expected NoModelAnswered, got {err:?}");
    };
    assert_eq!(tried.len(), 3, "{tried:?}");
    assert!(
        tried[0].starts_with("fa/main: provider fa failed after 2 attempts: HTTP 529"),
        "{tried:?}"
    );
    assert!(
        tried[1].starts_with("fa/second: provider fa failed after 2 attempts: HTTP 500"),
        "{tried:?}"
    );
    assert!(
        tried[2].starts_with("gone/third: provider gone failed after 2 attempts: "),
        "{tried:?}"
    );
    let line = err.to_string();
    assert!(
        line.starts_with("no model could answer: fa/main: "),
        "{line}"
    );
    assert!(!line.contains('\n'), "one line: {line}");
    assert!(ledger(&w).is_empty());
}

/// A streamed answer that breaks after its text reached the caller restarts on the fallback
/// behind a line that says so; the response holds only the fallback's answer.
#[tokio::test]
async fn a_stream_cut_after_text_restarts_on_the_fallback_with_a_mark() {
    let w = world(|c| {
        c.fallback = vec!["fa/backup".into()];
        c.llm.max_retries = 0;
    });
    w.fake.add_rule(Rule::new(
        Match::Model("main".into()),
        Reply::Fault(Fault::CutStream),
    ));
    w.fake.add_rule(Rule::new(
        Match::Any,
        Reply::Text("The whole answer, from the backup.".into()),
    ));
    let mut req = request("fa/main", "hi");
    req.stream = true;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let r = w.gw.chat(req, Some(tx)).await.unwrap();
    assert_eq!(text_of(&r.content), "The whole answer, from the backup.");
    let mut seen = String::new();
    while let Ok(d) = rx.try_recv() {
        seen.push_str(&d);
    }
    let mark = "\n\n[the answer restarts on fa/backup: fa/main answer broke off]\n\n";
    let (before, after) = seen.split_once(mark).unwrap_or_else(|| panic!("{seen:?}"));
    assert!(
        before.starts_with("fake-llm"),
        "the cut answer's text came first: {seen:?}"
    );
    assert_eq!(after, "The whole answer, from the backup.");
    // The cut answer was billed (estimated) as the model asked for; the answer as its fallback.
    let lines = ledger(&w);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].estimated && lines[0].model == "fa/main" && lines[0].fallback_from.is_none());
    assert_eq!(lines[1].fallback_from.as_deref(), Some("fa/main"));

    // A retry of the same model after text went out is marked too.
    let w = world(|c| c.llm.max_retries = 1);
    w.fake
        .add_rule(Rule::new(Match::Any, Reply::Fault(Fault::CutStream)).times(1));
    w.fake
        .add_rule(Rule::new(Match::Any, Reply::Text("Second try.".into())));
    let mut req = request("fa/main", "hi");
    req.stream = true;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    w.gw.chat(req, Some(tx)).await.unwrap();
    let mut seen = String::new();
    while let Ok(d) = rx.try_recv() {
        seen.push_str(&d);
    }
    assert!(
        seen.ends_with(
            "\n\n[the answer restarts: fa/main answer broke off; trying it again]\n\nSecond try."
        ),
        "{seen:?}"
    );
}

/// PROJECT.md `fallback:` replaces config.yml's list for that project (the MainAgent keeps
/// config.yml's), and `[]` means none.
#[tokio::test]
async fn a_projects_list_replaces_the_configs() {
    let w = overloaded_main(&["fa/from-config"], |_| {});
    w.fake
        .add_rule(Rule::new(Match::Any, Reply::Text("ok".into())));
    let mut project = create_project(
        &w.home,
        &NewProject {
            name: "alpha".into(),
            goal: "Test fallbacks.".into(),
            ..NewProject::default()
        },
        chrono::Utc::now(),
    )
    .unwrap();
    let list: serde_norway::Value = serde_norway::from_str("[fa/from-project]").unwrap();
    project.set("fallback", &list).unwrap();
    project.save(&w.home.project_dir("alpha")).unwrap();
    let r = w.gw.chat(request("fa/main", "hi"), None).await.unwrap();
    assert_eq!(r.model, "fa/from-project");
    let mut main_agent = request("fa/main", "hi");
    main_agent.meta = CallMeta::default();
    assert_eq!(
        w.gw.chat(main_agent, None).await.unwrap().model,
        "fa/from-config"
    );
    assert_eq!(
        w.gw.fallbacks_served(Some("main"))[0].model,
        "fa/from-config"
    );

    let none: serde_norway::Value = serde_norway::from_str("[]").unwrap();
    project.set("fallback", &none).unwrap();
    project.save(&w.home.project_dir("alpha")).unwrap();
    let err = w.gw.chat(request("fa/main", "hi"), None).await.unwrap_err();
    assert!(
        matches!(err, LlmError::Exhausted { .. }),
        "no fallback: {err:?}"
    );
}

/// A request built for a thinking model with a large window is fitted to its fallback: a
/// model whose window cannot hold it is skipped (and named), one without thinking gets none
/// (and no thinking blocks), and `max_tokens` is capped to what its window leaves.
#[tokio::test]
async fn a_request_is_fitted_to_each_fallbacks_window_and_thinking() {
    let w = overloaded_main(&["fa/tiny", "fa/small-nothink"], |c| {
        let caps = |window: u64| pegasus_store::ModelConfig {
            context_window: Some(window),
            max_output_tokens: Some(8192),
            thinking: false,
            reasoning: false,
        };
        c.models.insert("fa/tiny".into(), caps(1500));
        c.models.insert("fa/small-nothink".into(), caps(6000));
    });
    w.fake
        .add_rule(Rule::new(Match::Any, Reply::Text("fitted".into())));
    let mut req = request("fa/main", &"a long question ".repeat(600));
    req.thinking = Some("high".into());
    req.max_tokens = 8000;
    let r = w.gw.chat(req, None).await.unwrap();
    assert_eq!(r.model, "fa/small-nothink");
    let sent = w.fake.requests().last().unwrap().body.clone();
    assert!(sent.get("thinking").is_none(), "{sent}");
    let max = sent["max_tokens"].as_u64().unwrap();
    assert!(
        (1024..6000).contains(&max),
        "capped to the window's room: {max}"
    );
    assert_eq!(
        models_asked(&w),
        ["main", "main", "small-nothink"],
        "tiny skipped unasked"
    );
    assert!(w.fake.violations().is_empty(), "{:?}", w.fake.violations());
}

/// An unpriced or unknown fallback in config.yml is refused at start with one line naming
/// the key; a PROJECT.md's is reported by `cannot_answer` (the start-up check's lines).
#[test]
fn an_unusable_fallback_in_config_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let home = Home::new(dir.path());
    let mut config = Config {
        fallback: vec!["openai/no-such-priced-model".into()],
        ..Config::default()
    };
    let err = Gateway::new(&home, &config).err().unwrap().to_string();
    assert!(
        err.starts_with("config.yml key `fallback`: openai/no-such-priced-model cannot be a fallback model: model openai/no-such-priced-model has no price"),
        "{err}"
    );
    assert!(!err.contains('\n'));
    config.fallback = vec!["nowhere/x".into()];
    let err = Gateway::new(&home, &config).err().unwrap().to_string();
    assert!(err.contains("unknown provider `nowhere`"), "{err}");
    config.llm.allow_unpriced_models = true;
    config.fallback = vec!["openai/no-such-priced-model".into()];
    let gw = Gateway::new(&home, &config).unwrap();
    assert!(gw
        .cannot_answer("anthropic/claude-haiku-4-5")
        .is_some_and(|e| matches!(e, LlmError::MissingKey { .. })));
}
