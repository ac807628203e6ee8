//! A scripted model and executor that behave like the real ones as far as a run can tell: they
//! answer by pattern, and every call they "make" lands in a temp ledger under the request's
//! task id, as the gateway would write it.

#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use chrono::Utc;
use pegasus_proto::llm::{Block, ChatRequest, ChatResponse, LlmError, StopReason, Usage};
use pegasus_proto::llm::{ChatFuture, ChatModel};
use pegasus_runs::{ExecuteFuture, PhaseExecutor, RunEngine, RunSettings, RunStore};

pub const PLAN_USD: f64 = 0.5;
pub const SUMMARY_USD: f64 = 0.125;
pub const REVIEW_USD: f64 = 0.25;
/// The executor "makes" two calls per attempt at this price each.
pub const EXEC_CALL_USD: f64 = 0.5;
/// One attempt: two executor calls, a summary and a review.
pub const ATTEMPT_USD: f64 = 2.0 * EXEC_CALL_USD + SUMMARY_USD + REVIEW_USD;

pub const THREE_PHASES: &str = r#"Here you go:
```json
{"phases":[
 {"title":"Gather","description":"collect the data","acceptance":["data.csv exists"]},
 {"title":"Analyse","description":"analyse it","acceptance":["report has a table","numbers add up"]},
 {"title":"Publish","description":"write it up","acceptance":["README updated"]}
]}
```"#;

/// Appends one gateway-style ledger line.
pub fn ledger_line(ledger: &Path, task: &str, usd: Option<f64>) {
    let line = serde_json::json!({
        "ts": Utc::now(),
        "project": "demo",
        "task": task,
        "role": null,
        "model": "fake/model",
        "usd": usd,
    });
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(ledger)
        .unwrap();
    writeln!(f, "{line}").unwrap();
}

/// Sum of the ledger's priced lines whose task starts with `prefix`, in file order.
pub fn ledger_sum(ledger: &Path, prefix: &str) -> f64 {
    let text = std::fs::read_to_string(ledger).unwrap_or_default();
    let mut sum = 0.0;
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        if v["task"].as_str().is_some_and(|t| t.starts_with(prefix)) {
            sum += v["usd"].as_f64().unwrap_or(0.0);
        }
    }
    sum
}

type ReviewFn = dyn Fn(&str) -> Result<String, LlmError> + Send + Sync;
type PlanFn = dyn Fn() -> Result<String, LlmError> + Send + Sync;
type SummaryFn = dyn Fn(&str) -> Result<String, LlmError> + Send + Sync;

/// Answers by the system prompt: planner, summary or review. The review script gets the task
/// id (`<run>-p<n>-a<k>`), so a test can reject one attempt of one phase.
pub struct ScriptedModel {
    ledger: PathBuf,
    pub plan: Box<PlanFn>,
    pub summary: Box<SummaryFn>,
    pub review: Box<ReviewFn>,
    pub calls: Mutex<Vec<ChatRequest>>,
}

impl ScriptedModel {
    pub fn new(ledger: &Path) -> Self {
        ScriptedModel {
            ledger: ledger.to_path_buf(),
            plan: Box::new(|| Ok(THREE_PHASES.to_string())),
            summary: Box::new(|task| Ok(format!("summary of {task}"))),
            review: Box::new(|_| Ok("APPROVED\nall criteria met".to_string())),
            calls: Mutex::new(Vec::new()),
        }
    }

    pub fn calls(&self) -> Vec<ChatRequest> {
        self.calls.lock().unwrap().clone()
    }
}

fn user_text(req: &ChatRequest) -> String {
    req.messages
        .iter()
        .flat_map(|m| m.content.iter())
        .filter_map(|b| match b {
            Block::Text { text } => Some(text.clone()),
            _ => None,
        })
        .collect()
}

impl ChatModel for ScriptedModel {
    fn chat(&self, req: ChatRequest) -> ChatFuture<'_> {
        Box::pin(async move {
            self.calls.lock().unwrap().push(req.clone());
            let task = req.meta.task.clone().unwrap_or_default();
            let (answer, usd) = if req.system.starts_with("You plan") {
                assert!(user_text(&req).contains("Brief:"));
                ((self.plan)(), PLAN_USD)
            } else if req.system.starts_with("You summarise") {
                ((self.summary)(&task), SUMMARY_USD)
            } else if req.system.starts_with("You review") {
                assert!(user_text(&req).contains("Acceptance criteria"));
                ((self.review)(&task), REVIEW_USD)
            } else {
                panic!("unexpected system prompt: {}", req.system);
            };
            // The gateway bills a call that reached the provider; a refused one costs nothing.
            if !matches!(answer, Err(LlmError::BudgetExceeded { .. })) {
                ledger_line(&self.ledger, &task, Some(usd));
            }
            let text = answer?;
            Ok(ChatResponse {
                request_id: "msg_1".into(),
                model: "fake/model".into(),
                content: vec![Block::Text { text }],
                stop_reason: StopReason::EndTurn,
                usage: Usage::default(),
                cost_usd: Some(usd),
            })
        })
    }
}

type ExecFn = dyn Fn(&str, &str) -> Result<String, pegasus_runs::ExecError> + Send + Sync;

/// Records what it was asked, bills two calls per attempt to the task id, then answers by
/// script (default: a report naming the task).
pub struct ScriptedExecutor {
    ledger: PathBuf,
    pub script: Box<ExecFn>,
    pub calls: Mutex<Vec<(String, String)>>,
}

impl ScriptedExecutor {
    pub fn new(ledger: &Path) -> Self {
        ScriptedExecutor {
            ledger: ledger.to_path_buf(),
            script: Box::new(|_, task| Ok(format!("did the work of {task}"))),
            calls: Mutex::new(Vec::new()),
        }
    }

    pub fn tasks(&self) -> Vec<String> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .map(|(_, t)| t.clone())
            .collect()
    }

    pub fn prompt_of(&self, task_suffix: &str) -> String {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .find(|(_, t)| t.ends_with(task_suffix))
            .map(|(p, _)| p.clone())
            .unwrap_or_else(|| panic!("no executor call for {task_suffix}"))
    }
}

impl PhaseExecutor for ScriptedExecutor {
    fn execute<'a>(&'a self, prompt: String, task_id: String) -> ExecuteFuture<'a> {
        Box::pin(async move {
            self.calls
                .lock()
                .unwrap()
                .push((prompt.clone(), task_id.clone()));
            ledger_line(&self.ledger, &task_id, Some(EXEC_CALL_USD));
            ledger_line(&self.ledger, &task_id, Some(EXEC_CALL_USD));
            (self.script)(&prompt, &task_id)
        })
    }
}

/// A project folder, a ledger, and builders for the scripted pieces.
pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub ledger: PathBuf,
}

impl Fixture {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ledger = dir.path().join("ledger.jsonl");
        Fixture { dir, ledger }
    }

    pub fn project_dir(&self) -> PathBuf {
        self.dir.path().join("demo")
    }

    /// A second, independent store over the same folder: what pegasusd holds.
    pub fn store(&self) -> RunStore {
        RunStore::open(&self.project_dir()).unwrap()
    }

    pub fn engine(
        &self,
        model: &Arc<ScriptedModel>,
        exec: &Arc<ScriptedExecutor>,
        settings: RunSettings,
    ) -> RunEngine {
        RunEngine::new(
            self.store(),
            model.clone(),
            exec.clone(),
            self.ledger.clone(),
            settings,
        )
    }
}

/// `<run>-p<n>-a<k>` → the run id.
pub fn run_id_of(task: &str) -> String {
    let i = task.rfind("-p").unwrap();
    task[..i].to_string()
}
