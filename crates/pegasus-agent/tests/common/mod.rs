//! Test support: a scripted in-process model and helpers to build agents and tool contexts.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};

use pegasus_agent::{Agent, AgentSettings, ChatFuture, ChatModel, Desk, Notice, ToolCtx, ToolSet};
use pegasus_proto::llm::{Block, ChatRequest, ChatResponse, LlmError, StopReason, Usage};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

type Reply = Result<ChatResponse, LlmError>;

/// A model that answers from scripts and records every request. Requests whose system prompt
/// contains a registered keyword take the keyword's queue; the rest take the main queue. An
/// exhausted queue answers with an error, so a test never hangs.
#[derive(Default)]
pub struct ScriptedModel {
    main: Mutex<VecDeque<Reply>>,
    keyed: Mutex<Vec<(String, VecDeque<Reply>)>>,
    pub requests: Mutex<Vec<ChatRequest>>,
    /// Answer every main-queue request with this when the queue is empty.
    pub repeat: Mutex<Option<Reply>>,
}

impl ScriptedModel {
    pub fn new() -> Arc<Self> {
        Arc::new(ScriptedModel::default())
    }

    pub fn push(&self, r: Reply) -> &Self {
        self.main.lock().unwrap().push_back(r);
        self
    }

    pub fn push_for(&self, keyword: &str, r: Reply) -> &Self {
        let mut k = self.keyed.lock().unwrap();
        match k.iter_mut().find(|(w, _)| w == keyword) {
            Some((_, q)) => q.push_back(r),
            None => k.push((keyword.to_string(), VecDeque::from([r]))),
        }
        self
    }

    pub fn requests(&self) -> Vec<ChatRequest> {
        self.requests.lock().unwrap().clone()
    }

    /// Requests that were not reflection or compaction calls.
    pub fn loop_requests(&self) -> Vec<ChatRequest> {
        self.requests()
            .into_iter()
            .filter(|r| !r.system.contains("PostTaskReflector") && !r.system.contains("compaction"))
            .collect()
    }

    fn answer(&self, req: &ChatRequest) -> Reply {
        {
            let mut k = self.keyed.lock().unwrap();
            if let Some((_, q)) = k
                .iter_mut()
                .find(|(w, q)| req.system.contains(w.as_str()) && !q.is_empty())
            {
                return q.pop_front().unwrap();
            }
        }
        if req.system.contains("PostTaskReflector") || req.system.contains("compaction") {
            return Err(LlmError::Other("no script for this call".into()));
        }
        if let Some(r) = self.main.lock().unwrap().pop_front() {
            return r;
        }
        self.repeat
            .lock()
            .unwrap()
            .clone()
            .unwrap_or_else(|| Err(LlmError::Other("script exhausted".into())))
    }
}

impl ChatModel for ScriptedModel {
    fn chat(&self, req: ChatRequest) -> ChatFuture<'_> {
        Box::pin(async move {
            let r = self.answer(&req);
            self.requests.lock().unwrap().push(req);
            r
        })
    }
}

pub fn response(content: Vec<Block>, stop: StopReason) -> ChatResponse {
    ChatResponse {
        request_id: "msg_test".into(),
        model: "fake/model".into(),
        content,
        stop_reason: stop,
        usage: Usage {
            input_tokens: 100,
            output_tokens: 20,
            cache_read_tokens: 0,
            cache_write_tokens: 0,
        },
        cost_usd: Some(0.01),
    }
}

/// A final answer.
pub fn text(t: &str) -> Reply {
    Ok(response(
        vec![Block::Text { text: t.into() }],
        StopReason::EndTurn,
    ))
}

/// A turn of tool calls: (id, name, arguments).
pub fn calls(cs: &[(&str, &str, serde_json::Value)]) -> Reply {
    Ok(response(
        cs.iter()
            .map(|(id, name, input)| Block::ToolUse {
                id: id.to_string(),
                name: name.to_string(),
                input_json: input.to_string(),
            })
            .collect(),
        StopReason::ToolUse,
    ))
}

pub fn settings() -> AgentSettings {
    AgentSettings {
        model: "fake/model".into(),
        reflection: false,
        project: Some("demo".into()),
        ..AgentSettings::default()
    }
}

/// A project folder and a workdir inside a temp dir.
pub struct Fixture {
    pub tmp: tempfile::TempDir,
    pub dir: PathBuf,
    pub workdir: PathBuf,
    pub global_skills: PathBuf,
}

impl Fixture {
    pub fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("projects/demo");
        let workdir = tmp.path().join("work");
        let global_skills = tmp.path().join("skills");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::create_dir_all(&global_skills).unwrap();
        Fixture {
            tmp,
            dir,
            workdir,
            global_skills,
        }
    }

    pub fn open(
        &self,
        model: Arc<ScriptedModel>,
        settings: AgentSettings,
    ) -> (Agent, UnboundedReceiver<Notice>) {
        let (agent, _desk, rx) = self.open_desk(model, settings);
        (agent, rx)
    }

    /// Like [`Fixture::open`], with the desk the agent was opened on (its task board and stop
    /// flag), as a host keeps it.
    pub fn open_desk(
        &self,
        model: Arc<ScriptedModel>,
        settings: AgentSettings,
    ) -> (Agent, Desk, UnboundedReceiver<Notice>) {
        let (tx, rx) = unbounded_channel();
        let desk = Desk::open(&self.dir, "demo", tx).unwrap();
        let agent = Agent::open(
            &desk,
            &self.workdir,
            "You work on the demo project.".into(),
            self.global_skills.clone(),
            ToolSet::project_tools(),
            model,
            settings,
        )
        .unwrap();
        (agent, desk, rx)
    }

    /// The project's tasks, read from its files.
    pub fn tasks(&self) -> pegasus_tasks::TaskStore {
        pegasus_tasks::TaskStore::open(&self.dir, "demo").unwrap()
    }
}

/// Records and enqueues a user message, as a host does.
pub fn send(agent: &mut Agent, id: &str, text: &str) {
    let from = pegasus_proto::Channel::Cli;
    pegasus_agent::record_inbound(&agent.session_handle(), id, &from, text).unwrap();
    agent.enqueue(id, &from, text);
}

/// A tool context over `workdir` and `memory_dir` with a model that has no script.
pub fn ctx(workdir: &Path, memory_dir: &Path) -> (ToolCtx, UnboundedReceiver<Notice>) {
    ctx_with(workdir, memory_dir, ScriptedModel::new(), settings())
}

pub fn ctx_with(
    workdir: &Path,
    memory_dir: &Path,
    model: Arc<ScriptedModel>,
    settings: AgentSettings,
) -> (ToolCtx, UnboundedReceiver<Notice>) {
    let (tx, rx) = unbounded_channel();
    (
        ToolCtx {
            workdir: workdir.to_path_buf(),
            memory_dir: memory_dir.to_path_buf(),
            skill_dirs: Vec::new(),
            notices: tx,
            task_id: Some("task-1".into()),
            depth: 0,
            settings,
            model,
            project_overview: "Demo project.".into(),
            subagents_spawned: Arc::new(AtomicU32::new(0)),
            approvals: None,
            offered: None,
            proposed: Default::default(),
            touched: Default::default(),
            hooks: None,
            repos: vec![],
        },
        rx,
    )
}

/// Calls a built-in tool by name.
pub async fn call(
    ctx: &ToolCtx,
    name: &str,
    input: serde_json::Value,
) -> pegasus_agent::ToolOutput {
    let tool = ToolSet::project_tools().get(name).unwrap();
    tool.call(input, ctx).await
}

/// All events of a kind (`WorkerEvent::kind`), in order.
pub fn events(rx: &mut UnboundedReceiver<Notice>, kind: &str) -> Vec<pegasus_proto::WorkerEvent> {
    let mut out = Vec::new();
    while let Ok(n) = rx.try_recv() {
        if let Notice::Event(e) = n {
            if e.kind() == kind {
                out.push(e);
            }
        }
    }
    out
}
