//! The passthrough path (a harness's own requests, DESIGN.md §18) against the fake LLM over
//! real HTTP: the body forwarded as it came with the real key, the answer streamed back, the
//! ledger line from its usage, the reservation rule, and each refusal in the API's own shape.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use pegasus_fakellm::{FakeLlm, Fault, Match, Reply, Rule, UsageSpec};
use pegasus_llm::{Gateway, LlmError};
use pegasus_proto::worker::{RelayApi, RelayPart, RelayRequest};
use pegasus_store::{
    create_project, read_jsonl, Config, Home, LedgerEntry, NewProject, PriceConfig, ProviderConfig,
};
use serde_json::{json, Value};
use tokio::sync::mpsc;

/// The key the fake requires; pegasusd has it, the harness never does.
const KEY: &str = "sk-ant-real-key-of-pegasusd";
const KEY_ENV: &str = "PEGASUS_PASSTHROUGH_TEST_KEY";

struct World {
    _dir: tempfile::TempDir,
    home: Home,
    fake: FakeLlm,
    gw: Gateway,
}

/// A home with project `web` on `model` (provider `fa`, Anthropic, or `fo`, OpenAI, both the
/// fake), priced at $1/M input and $2/M output for `fa/claude-*` only.
fn world(model: &str, tweak: impl FnOnce(&mut Config)) -> World {
    // SAFETY: every test sets the same value; nothing enumerates the environment.
    unsafe { std::env::set_var(KEY_ENV, KEY) };
    let dir = tempfile::tempdir().unwrap();
    let home = Home::new(dir.path());
    let fake = FakeLlm::start().unwrap();
    fake.require_api_key(Some(KEY.into()));
    let mut config = Config::default();
    for (name, kind, base_url) in [
        ("fa", "anthropic", fake.anthropic_base_url()),
        ("fo", "openai", fake.openai_base_url()),
    ] {
        config.providers.insert(
            name.into(),
            ProviderConfig {
                kind: kind.into(),
                base_url,
                api_key_env: Some(KEY_ENV.into()),
                local: false,
            },
        );
    }
    config.llm.retry_base_ms = 10;
    config.llm.timeout_s = 20;
    config.budget.daily_usd = None;
    config.budget.task_usd = None;
    config.prices = BTreeMap::from([(
        "fa/claude-*".to_string(),
        PriceConfig {
            input: 1.0,
            output: 2.0,
            cache_read: Some(0.1),
            cache_write: Some(1.25),
            context_window: Some(200_000),
        },
    )]);
    tweak(&mut config);
    let project = create_project(
        &home,
        &NewProject {
            name: "web".into(),
            goal: "Test the relay.".into(),
            model: Some(model.into()),
            ..NewProject::default()
        },
        chrono::Utc::now(),
    )
    .unwrap();
    project.save(&home.project_dir("web")).unwrap();
    let gw = Gateway::new(&home, &config).unwrap();
    World {
        _dir: dir,
        home,
        fake,
        gw,
    }
}

/// A request as Claude Code sends it: `max_tokens` 128000, betas, streaming.
fn messages(model: &str, stream: bool, text: &str) -> RelayRequest {
    let body = json!({
        "model": model,
        "max_tokens": 128000,
        "stream": stream,
        "system": [{"type": "text", "text": "You are Claude Code."}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}],
        "metadata": {"user_id": "u"},
    });
    RelayRequest {
        api: RelayApi::Anthropic,
        method: "POST".into(),
        path: "/v1/messages?beta=true".into(),
        body: body.to_string(),
        headers: vec![
            ("anthropic-version".into(), "2023-06-01".into()),
            (
                "anthropic-beta".into(),
                "interleaved-thinking-2025-05-14".into(),
            ),
        ],
        task: Some("t-1".into()),
        role: Some("developer".into()),
    }
}

/// The whole answer of one relayed request: its status, its body and how it ended.
struct Answer {
    status: u16,
    body: String,
    refusal: Option<LlmError>,
    deltas: String,
}

async fn relay(w: &World, request: RelayRequest) -> Answer {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (dtx, mut drx) = mpsc::unbounded_channel();
    w.gw.relay("web", request, &tx, Some(dtx)).await;
    drop(tx);
    let mut parts = Vec::new();
    while let Some(p) = rx.recv().await {
        parts.push(p);
    }
    let Some(RelayPart::Head { status, .. }) = parts.first().cloned() else {
        panic!("no head first: {parts:?}");
    };
    let Some(RelayPart::End { refusal }) = parts.last().cloned() else {
        panic!("no end last: {parts:?}");
    };
    let mut body = Vec::new();
    for p in &parts[1..parts.len() - 1] {
        match p {
            RelayPart::Chunk(b) => body.extend_from_slice(b),
            other => panic!("a part in the middle that is not a chunk: {other:?}"),
        }
    }
    let mut deltas = String::new();
    while let Ok(d) = drx.try_recv() {
        deltas.push_str(&d);
    }
    Answer {
        status,
        body: String::from_utf8(body).unwrap(),
        refusal,
        deltas,
    }
}

fn ledger(w: &World) -> Vec<LedgerEntry> {
    read_jsonl::<LedgerEntry>(&w.home.ledger_file())
        .map(|r| r.records)
        .unwrap_or_default()
}

/// Every request answered `text`, its usage `input` and `output` tokens.
fn answer(text: &str, input: u64, output: u64) -> Rule {
    Rule::new(Match::Any, Reply::Text(text.into())).usage(UsageSpec {
        input,
        output,
        ..UsageSpec::default()
    })
}

fn error_message(body: &str) -> String {
    let v: Value = serde_json::from_str(body).unwrap();
    assert_eq!(v["type"], "error", "Anthropic's error shape: {body}");
    v["error"]["message"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_call_is_forwarded_as_it_came_and_metered_from_its_usage() {
    let w = world("fa/claude-sonnet-4-5", |_| {});
    w.fake.add_rule(
        Rule::new(Match::Any, Reply::Text("Hello from the model.".into())).usage(UsageSpec {
            input: 1000,
            output: 200,
            cache_read: 3000,
            cache_write: 400,
        }),
    );
    let request = messages("claude-opus-4-7", true, "hi");
    let sent_body = request.body.clone();
    let a = relay(&w, request).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(a.refusal.is_none());
    assert!(a.body.contains("event: message_start"), "{}", a.body);
    assert!(a.body.contains("event: message_stop"), "{}", a.body);
    assert_eq!(a.deltas, "Hello from the model.");
    // Forwarded as it came: the same body, the path with its query, the betas, the real key.
    let r = w.fake.last_request().unwrap();
    assert_eq!(r.path, "/v1/messages?beta=true");
    assert_eq!(r.body, serde_json::from_str::<Value>(&sent_body).unwrap());
    let header = |n: &str| {
        r.headers
            .iter()
            .find(|(k, _)| k == n)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(
        header("anthropic-beta").as_deref(),
        Some("interleaved-thinking-2025-05-14")
    );
    assert_eq!(header("x-api-key").as_deref(), Some(KEY));
    assert!(w.fake.violations().is_empty(), "{:?}", w.fake.violations());
    // One ledger line, from the answer's usage, at the table price of `fa/<the model asked>`.
    let lines = ledger(&w);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let l = &lines[0];
    assert_eq!(l.model, "fa/claude-opus-4-7");
    assert_eq!(
        (l.project.as_str(), l.task.as_deref()),
        ("web", Some("t-1"))
    );
    assert_eq!(l.role.as_deref(), Some("developer"));
    assert_eq!(
        (
            l.input_tokens,
            l.output_tokens,
            l.cache_read_tokens,
            l.cache_write_tokens
        ),
        (1000, 200, 3000, 400)
    );
    assert!(!l.estimated);
    let usd = (1000.0 * 1.0 + 200.0 * 2.0 + 3000.0 * 0.1 + 400.0 * 1.25) / 1e6;
    assert!((l.usd.unwrap() - usd).abs() < 1e-12, "{l:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_call_and_count_tokens_are_answered() {
    let w = world("fa/claude-sonnet-4-5", |_| {});
    w.fake.add_rule(answer("plain", 10, 5));
    let a = relay(&w, messages("claude-opus-4-7", false, "hi")).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let v: Value = serde_json::from_str(&a.body).unwrap();
    assert_eq!(v["content"][0]["text"], "plain");
    let lines = ledger(&w);
    assert_eq!(lines.len(), 1);
    assert_eq!((lines[0].input_tokens, lines[0].output_tokens), (10, 5));
    assert!(!lines[0].estimated);

    let mut count = messages("claude-opus-4-7", false, "count me");
    let mut body: Value = serde_json::from_str(&count.body).unwrap();
    let body_map = body.as_object_mut().unwrap();
    for k in ["max_tokens", "stream", "metadata"] {
        body_map.remove(k);
    }
    count.body = body.to_string();
    count.path = "/v1/messages/count_tokens?beta=true".into();
    let a = relay(&w, count).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let v: Value = serde_json::from_str(&a.body).unwrap();
    assert!(v["input_tokens"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(ledger(&w).len(), 1, "count_tokens is free: no ledger line");
    assert!(w.fake.violations().is_empty(), "{:?}", w.fake.violations());
}

/// The reservation rule (DESIGN.md §18): a call asking for `max_tokens` 128000 reserves at
/// most 8192 output tokens, so it runs under a task budget its full `max_tokens` would exceed;
/// once the budget is spent, the next call is refused in Anthropic's error shape, saying which
/// budget and how to raise it, and the typed reason comes with the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_budget_holds_without_reserving_the_whole_max_tokens() {
    let w = world("fa/claude-sonnet-4-5", |c| c.budget.task_usd = Some(0.05));
    // 128000 output tokens at $2/M alone is $0.256, five times the budget.
    w.fake.add_rule(answer("spent", 30_000, 1000));
    for _ in 0..2 {
        let a = relay(&w, messages("claude-opus-4-7", true, "work")).await;
        assert_eq!(a.status, 200, "{}", a.body);
    }
    // $0.032 each: $0.064 spent, past the $0.05 cap.
    let a = relay(&w, messages("claude-opus-4-7", true, "more")).await;
    assert_eq!(a.status, 400, "{}", a.body);
    let message = error_message(&a.body);
    assert!(message.contains("task t-1"), "{message}");
    assert!(message.contains("budget.task_usd"), "{message}");
    assert!(
        matches!(a.refusal, Some(LlmError::BudgetExceeded { .. })),
        "{:?}",
        a.refusal
    );
    assert_eq!(w.fake.request_count(), 2, "the refused call was not sent");
    assert_eq!(ledger(&w).len(), 2);
}

/// A task with its own budget (an Asana card's Max Cost, fixed when the task is made) is told
/// so, not to raise config.yml's `budget.task_usd`, which does not apply to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_over_its_own_budget_is_told_which_budget_to_raise() {
    let w = world("fa/claude-sonnet-4-5", |c| c.budget.task_usd = Some(10.0));
    w.gw.set_task_budgets(std::sync::Arc::new(|project: &str, task: &str| {
        (project == "web" && task == "t-1").then_some(0.02)
    }));
    w.fake.add_rule(answer("spent", 30_000, 1000));
    let a = relay(&w, messages("claude-opus-4-7", true, "work")).await;
    assert_eq!(a.status, 200, "{}", a.body);
    // $0.032 spent, past the task's own $0.02.
    let a = relay(&w, messages("claude-opus-4-7", true, "more")).await;
    assert_eq!(a.status, 400, "{}", a.body);
    let message = error_message(&a.body);
    assert!(message.contains("task t-1"), "{message}");
    assert!(
        message.contains("the task's own budget is fixed"),
        "{message}"
    );
    assert!(!message.contains("budget.task_usd"), "{message}");
    assert_eq!(w.fake.request_count(), 1, "the refused call was not sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unpriced_model_and_a_provider_of_another_kind_are_refused_by_name() {
    let w = world("fa/claude-sonnet-4-5", |_| {});
    let a = relay(&w, messages("gpt-unpriced", true, "hi")).await;
    assert_eq!(a.status, 400, "{}", a.body);
    let message = error_message(&a.body);
    assert!(message.contains("fa/gpt-unpriced"), "{message}");
    assert!(message.contains("prices:"), "{message}");
    assert!(matches!(a.refusal, Some(LlmError::Unpriced { .. })));

    let w = world("fo/gpt-5", |_| {});
    let a = relay(&w, messages("claude-opus-4-7", true, "hi")).await;
    assert_eq!(a.status, 400, "{}", a.body);
    let message = error_message(&a.body);
    assert!(message.contains("kind `anthropic`"), "{message}");
    assert!(message.contains("model:"), "{message}");
    assert_eq!(w.fake.request_count(), 0);
}

/// The provider's own refusal reaches the harness as it is (its status and body); a retryable
/// one is retried first, as long as nothing went to the harness.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_errors_are_retried_then_passed_through() {
    let w = world("fa/claude-sonnet-4-5", |c| c.llm.max_retries = 1);
    w.fake.add_rule(
        Rule::new(
            Match::Any,
            Reply::Fault(Fault::Status {
                code: 529,
                message: "Overloaded".into(),
                retry_after_s: None,
            }),
        )
        .times(1),
    );
    w.fake
        .add_rule(Rule::new(Match::Any, Reply::Text("after a retry".into())));
    let a = relay(&w, messages("claude-opus-4-7", true, "hi")).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.deltas, "after a retry");
    assert_eq!(w.fake.request_count(), 2);

    w.fake.clear_rules();
    w.fake.add_rule(Rule::new(
        Match::Any,
        Reply::Fault(Fault::Status {
            code: 400,
            message: "prompt is too long: 300000 tokens > 200000 maximum".into(),
            retry_after_s: None,
        }),
    ));
    let a = relay(&w, messages("claude-opus-4-7", true, "hi")).await;
    assert_eq!(a.status, 400);
    assert!(error_message(&a.body).contains("prompt is too long"));
    assert!(
        a.refusal.is_none(),
        "the provider's refusal, not pegasusd's"
    );
    assert_eq!(w.fake.request_count(), 3, "a 400 is not retried");
}

/// A harness that goes away mid-answer: the call is dropped (cancelled upstream), and what
/// arrived is metered, estimated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_dropped_mid_answer_is_metered_from_what_arrived() {
    let w = world("fa/claude-sonnet-4-5", |_| {});
    w.fake
        .add_rule(Rule::new(Match::Any, Reply::Fault(Fault::StallStream)));
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut relayed =
        Box::pin(w.gw.relay("web", messages("claude-opus-4-7", true, "hi"), &tx, None));
    // Until the first bytes of the answer reached the harness.
    let mut got_chunk = false;
    while !got_chunk {
        tokio::select! {
            _ = &mut relayed => panic!("a stalled answer ended"),
            part = rx.recv() => got_chunk = matches!(part, Some(RelayPart::Chunk(_))),
        }
    }
    drop(relayed);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while ledger(&w).is_empty() {
        assert!(std::time::Instant::now() < deadline, "no ledger line");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let lines = ledger(&w);
    assert_eq!(lines.len(), 1);
    assert!(lines[0].estimated);
    assert!(lines[0].usd.unwrap() > 0.0);
}

/// A streamed answer larger than `llm.max_response_bytes` passes whole: its bytes are not held
/// (the limit bounds what pegasusd keeps, and a 128,000-token stream is far beyond it), and it
/// is metered from its usage. (The fake sends the text as one event, larger than the limit:
/// that event is not read for the bus, only passed on.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_stream_passes_whole_past_the_response_limit() {
    let w = world("fa/claude-sonnet-4-5", |c| {
        c.llm.max_response_bytes = 64 * 1024
    });
    let text = "word ".repeat(40_000);
    w.fake.add_rule(
        Rule::new(Match::Any, Reply::Text(text.clone())).usage(UsageSpec {
            input: 10,
            output: 50_000,
            ..UsageSpec::default()
        }),
    );
    let a = relay(&w, messages("claude-opus-4-7", true, "write a lot")).await;
    assert_eq!(a.status, 200);
    assert!(a.body.len() > 200_000, "{}", a.body.len());
    let streamed: String = a
        .body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter(|e| e["delta"]["type"] == "text_delta")
        .map(|e| e["delta"]["text"].as_str().unwrap().to_string())
        .collect();
    assert!(streamed == text, "the whole text reached the harness");
    assert!(a.body.contains("message_stop"));
    let lines = ledger(&w);
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0].output_tokens, 50_000);
    assert!(!lines[0].estimated);
}
