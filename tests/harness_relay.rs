//! The model endpoint of a harness (DESIGN.md §18) driven by the real Claude Code: `claude -p`
//! talks to a worker's relay endpoint (`pegasus_worker::Relay`), whose frames cross a real
//! socket pair, in the worker protocol's codec, to pegasusd's gateway (`Gateway::relay`, as
//! pegasusd's LLM proxy runs it), which forwards to the strict fake LLM with the real key.
//! One answer streamed and metered at the right cost, a wrong credential refused, an unpriced
//! model refused, a budget refusal kept for the runner, and `count_tokens` answered.
//!
//! Needs `claude` on PATH or `PEGASUS_TEST_CLAUDE` (`.ci/run` installs
//! `@anthropic-ai/claude-code@2.1.332`); without it each test skips with one line, and under
//! `CI=true` fails.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;

use common::claude::Claude;
use pegasus_fakellm::{FakeLlm, Match, Reply, Rule, UsageSpec};
use pegasus_llm::{Gateway, LlmError};
use pegasus_proto::worker::{FromWorker, RelayApi, ToWorker};
use pegasus_proto::{FrameReader, FrameWriter};
use pegasus_store::{
    create_project, read_jsonl, Config, Home, LedgerEntry, NewProject, PriceConfig, ProviderConfig,
};
use pegasus_worker::Relay;
use tokio::net::UnixStream;
use tokio::sync::mpsc;

/// pegasusd's key for the fake provider: the harness never has it.
const KEY: &str = "sk-ant-pegasusd-only-4f1c";
const KEY_ENV: &str = "PEGASUS_RELAY_TEST_KEY";

/// One test's world: the fake, a home with project `web` on provider `fa` (the fake,
/// Anthropic), pegasusd's gateway, and a worker's relay linked to it over a socket pair.
struct World {
    _dir: tempfile::TempDir,
    home: Home,
    fake: FakeLlm,
    relay: Relay,
}

fn world(task_usd: Option<f64>) -> World {
    // SAFETY: every test sets the same value; nothing enumerates the environment.
    unsafe { std::env::set_var(KEY_ENV, KEY) };
    let dir = tempfile::tempdir().unwrap();
    let home = Home::new(dir.path());
    let fake = FakeLlm::start().unwrap();
    fake.require_api_key(Some(KEY.into()));
    let mut config = Config::default();
    config.providers.insert(
        "fa".into(),
        ProviderConfig {
            kind: "anthropic".into(),
            base_url: fake.anthropic_base_url(),
            api_key_env: Some(KEY_ENV.into()),
            local: false,
        },
    );
    config.default_model = "fa/claude-sonnet-4-6".into();
    config.llm.retry_base_ms = 10;
    config.llm.max_retries = 1;
    config.budget.daily_usd = None;
    config.budget.task_usd = task_usd;
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
    create_project(
        &home,
        &NewProject {
            name: "web".into(),
            goal: "Test the relay.".into(),
            ..NewProject::default()
        },
        chrono::Utc::now(),
    )
    .unwrap();
    let gateway = Gateway::new(&home, &config).unwrap();
    let (out, frames) = mpsc::unbounded_channel();
    let relay = Relay::new(out);
    let (worker_end, pegasusd_end) = UnixStream::pair().unwrap();
    tokio::spawn(worker_link(relay.clone(), frames, worker_end));
    tokio::spawn(pegasusd_link(gateway, pegasusd_end));
    World {
        _dir: dir,
        home,
        fake,
        relay,
    }
}

/// The worker's end of the link: its frames out, the answers' parts back to its relay.
async fn worker_link(
    relay: Relay,
    mut frames: mpsc::UnboundedReceiver<FromWorker>,
    socket: UnixStream,
) {
    let (read, write) = socket.into_split();
    let mut writer = FrameWriter::new(write);
    tokio::spawn(async move {
        while let Some(frame) = frames.recv().await {
            writer.write(&frame).await.unwrap();
        }
    });
    let mut reader = FrameReader::new(read);
    while let Ok(Some(frame)) = reader.read::<ToWorker>().await {
        if let ToWorker::RelayAnswer { id, part } = frame {
            relay.deliver(id, part);
        }
    }
}

/// pegasusd's end, as its LLM proxy does it for project `web`: each relayed request runs
/// through the gateway on its own task, its parts written back as they come; a cancel aborts
/// it.
async fn pegasusd_link(gateway: Gateway, socket: UnixStream) {
    let (read, write) = socket.into_split();
    let (to_worker, mut queue) = mpsc::unbounded_channel::<ToWorker>();
    tokio::spawn(async move {
        let mut writer = FrameWriter::new(write);
        while let Some(frame) = queue.recv().await {
            writer.write(&frame).await.unwrap();
        }
    });
    let mut calls = std::collections::HashMap::new();
    let mut reader = FrameReader::new(read);
    while let Ok(Some(frame)) = reader.read::<FromWorker>().await {
        match frame {
            FromWorker::RelayRequest { id, request } => {
                let (gateway, to_worker) = (gateway.clone(), to_worker.clone());
                calls.insert(
                    id,
                    tokio::spawn(async move {
                        let (tx, mut parts) = mpsc::unbounded_channel();
                        let relayed = gateway.relay("web", request, &tx, None);
                        tokio::pin!(relayed);
                        loop {
                            tokio::select! {
                                Some(part) = parts.recv() => {
                                    let _ = to_worker.send(ToWorker::RelayAnswer { id, part });
                                }
                                _ = &mut relayed => break,
                            }
                        }
                        while let Ok(part) = parts.try_recv() {
                            let _ = to_worker.send(ToWorker::RelayAnswer { id, part });
                        }
                    }),
                );
            }
            FromWorker::RelayCancel { id } => {
                if let Some(call) = calls.remove(&id) {
                    call.abort();
                }
            }
            other => panic!("unexpected frame {other:?}"),
        }
    }
}

fn ledger(home: &Home) -> Vec<LedgerEntry> {
    read_jsonl::<LedgerEntry>(&home.ledger_file())
        .map(|r| r.records)
        .unwrap_or_default()
}

/// Runs `claude -p PROMPT` against `base_url` with `key` (off the runtime's threads).
async fn run_claude(
    cc: Claude,
    base_url: &str,
    key: &str,
    prompt: &'static str,
) -> common::claude::ClaudeRun {
    let cc = cc
        .env("ANTHROPIC_BASE_URL", base_url)
        .env("ANTHROPIC_API_KEY", key);
    tokio::task::spawn_blocking(move || cc.run(prompt))
        .await
        .unwrap()
}

/// Claude Code's answer streams through the relay; its ledger line is the fake's usage at the
/// table price, billed to the project and the endpoint's task; the fake saw pegasusd's key
/// (never the harness's) and found every request valid. `count_tokens` is answered too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_answers_through_the_relay_and_is_metered() {
    let w = world(None);
    let Some(cc) = Claude::new(&w.fake) else {
        return;
    };
    w.fake.add_rule(
        Rule::new(Match::Any, Reply::Text("relayed hello".into())).usage(UsageSpec {
            input: 1200,
            output: 30,
            cache_read: 5000,
            cache_write: 100,
        }),
    );
    let endpoint = w
        .relay
        .start(
            RelayApi::Anthropic,
            Some("t-1".into()),
            Some("developer".into()),
        )
        .unwrap();
    let run = run_claude(cc, &endpoint.base_url, &endpoint.key, "say hello").await;
    assert!(run.status.success(), "{}", run.dump());
    assert_eq!(run.result_text(), Some("relayed hello"), "{}", run.dump());
    assert!(w.fake.violations().is_empty(), "{:?}", w.fake.violations());
    let requests = w.fake.requests();
    assert!(!requests.is_empty());
    for r in &requests {
        assert_eq!(
            r.header("x-api-key"),
            Some(KEY),
            "pegasusd's key, added by pegasusd"
        );
        assert!(r.path.starts_with("/v1/messages"), "{}", r.path);
    }
    let lines = ledger(&w.home);
    assert_eq!(lines.len(), requests.len(), "one line per call: {lines:?}");
    let usd = (1200.0 * 1.0 + 30.0 * 2.0 + 5000.0 * 0.1 + 100.0 * 1.25) / 1e6;
    for l in &lines {
        assert!(l.model.starts_with("fa/claude-"), "{l:?}");
        assert_eq!(
            (l.project.as_str(), l.task.as_deref()),
            ("web", Some("t-1"))
        );
        assert_eq!(l.role.as_deref(), Some("developer"));
        assert_eq!((l.input_tokens, l.output_tokens), (1200, 30));
        assert!(!l.estimated, "{l:?}");
        assert!((l.usd.unwrap() - usd).abs() < 1e-12, "{l:?}");
    }
    assert!(endpoint.budget_refusal().is_none());

    // count_tokens, as Claude Code's SDK sends it.
    let model = requests[0].body["model"].as_str().unwrap().to_string();
    let counted = reqwest_post(
        &format!("{}/v1/messages/count_tokens?beta=true", endpoint.base_url),
        &endpoint.key,
        serde_json::json!({"model": model, "messages": [{"role": "user", "content": "count these words"}]}),
    )
    .await;
    assert_eq!(counted.0, 200, "{}", counted.1);
    let v: serde_json::Value = serde_json::from_str(&counted.1).unwrap();
    assert!(v["input_tokens"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(ledger(&w.home).len(), lines.len(), "count_tokens is free");
}

/// A POST with the endpoint's key: its status and body.
async fn reqwest_post(url: &str, key: &str, body: serde_json::Value) -> (u16, String) {
    let r = reqwest::Client::new()
        .post(url)
        .header("x-api-key", key)
        .header("anthropic-version", "2023-06-01")
        .json(&body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// A harness with another credential gets Anthropic's 401 and nothing reaches pegasusd; a
/// model with no price is refused by name, with the config key that fixes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_credential_and_an_unpriced_model_are_refused() {
    let w = world(None);
    let Some(cc) = Claude::new(&w.fake) else {
        return;
    };
    w.fake
        .add_rule(Rule::new(Match::Any, Reply::Text("never".into())));
    let endpoint = w.relay.start(RelayApi::Anthropic, None, None).unwrap();
    let run = run_claude(cc, &endpoint.base_url, "sk-ant-guessed", "say hello").await;
    assert!(!run.status.success(), "{}", run.dump());
    let dump = run.dump();
    assert!(
        dump.contains("401") || dump.contains("invalid x-api-key"),
        "{dump}"
    );
    assert_eq!(w.fake.request_count(), 0);

    let cc = Claude::new(&w.fake)
        .unwrap()
        .args(["--model", "gpt-unpriced"]);
    let run = run_claude(cc, &endpoint.base_url, &endpoint.key, "say hello").await;
    assert!(!run.status.success(), "{}", run.dump());
    let dump = run.dump();
    assert!(dump.contains("fa/gpt-unpriced"), "{dump}");
    assert!(dump.contains("prices:"), "{dump}");
    assert_eq!(w.fake.request_count(), 0);
    assert!(matches!(
        endpoint.last_refusal(),
        Some(LlmError::Unpriced { .. })
    ));
    assert!(ledger(&w.home).is_empty());
}

/// A task budget of $0.20 admits Claude Code's call (asking for `max_tokens` 128000 would
/// reserve $0.256 of output alone), which spends $0.25; the next call is refused in Claude
/// Code's own error shape, naming the budget and its key, and the endpoint keeps the refusal
/// for the runner (the task ends `budget`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_task_budget_refuses_the_next_call() {
    let w = world(Some(0.20));
    let Some(cc) = Claude::new(&w.fake) else {
        return;
    };
    w.fake.add_rule(
        Rule::new(Match::Any, Reply::Text("expensive answer".into())).usage(UsageSpec {
            input: 250_000,
            output: 10,
            ..UsageSpec::default()
        }),
    );
    let endpoint = w
        .relay
        .start(RelayApi::Anthropic, Some("t-9".into()), None)
        .unwrap();
    let run = run_claude(cc, &endpoint.base_url, &endpoint.key, "first").await;
    assert_eq!(
        run.result_text(),
        Some("expensive answer"),
        "{}",
        run.dump()
    );
    let sent = w.fake.request_count();
    assert!(endpoint.budget_refusal().is_none());

    let cc = Claude::new(&w.fake).unwrap();
    let run = run_claude(cc, &endpoint.base_url, &endpoint.key, "second").await;
    assert!(!run.status.success(), "{}", run.dump());
    let dump = run.dump();
    assert!(dump.contains("budget"), "{dump}");
    assert!(dump.contains("budget.task_usd"), "{dump}");
    assert_eq!(
        w.fake.request_count(),
        sent,
        "the refused call was not sent"
    );
    let refusal = endpoint
        .budget_refusal()
        .expect("the runner sees the budget");
    assert!(
        matches!(&refusal, LlmError::BudgetExceeded { scope, .. } if scope.starts_with("task t-9")),
        "{refusal:?}"
    );
}
