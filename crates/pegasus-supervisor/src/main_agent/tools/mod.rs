//! The MainAgent's tools (SPEC §4), one file each. They are clients of the daemon's front door
//! like `pegasusctl`: each call is one request, recorded as from `main` (the door holds the
//! daemon weakly: the daemon owns the MainAgent, not the other way round).

mod add_task;
mod create_project;
mod lifecycle;
mod list_projects;
mod reply;

use crate::front_door::{refusal, FrontDoor};
use pegasus_agent::{Tool, ToolCtx, ToolFuture, ToolOutput};
use pegasus_proto::{
    ctl::{CtlRequest, CtlResponse, LifecycleVerb},
    llm::ToolSpec,
    Channel,
};
use serde_json::Value;
use std::sync::Arc;

/// Every MainAgent tool.
pub(crate) fn all(door: FrontDoor) -> Vec<Arc<dyn Tool>> {
    let mut tools: Vec<Arc<dyn Tool>> = vec![
        Arc::new(Door(door.clone(), create_project::CreateProject)),
        Arc::new(list_projects::ListProjects(door.clone())),
    ];
    for verb in LifecycleVerb::ALL {
        tools.push(Arc::new(Door(door.clone(), lifecycle::Lifecycle(verb))));
    }
    tools.push(Arc::new(Door(door.clone(), add_task::AddTask)));
    tools.push(Arc::new(Door(door, reply::Reply)));
    tools
}

/// A MainAgent tool that is one request to the front door.
trait DoorCall: Send + Sync {
    fn spec(&self) -> ToolSpec;
    /// The request the model's arguments make, or the tool's output at once (an argument is
    /// missing or wrong, or there is nothing to ask).
    fn ask(&self, input: &Value) -> Result<CtlRequest, ToolOutput>;
    /// What the model reads of the answer (an answer of another kind is [`unexpected`]);
    /// unless said otherwise, the answer is one project.
    fn read(&self, _input: &Value, resp: CtlResponse) -> ToolOutput {
        match resp {
            CtlResponse::Project(info) => ToolOutput::ok(project_json(&info).to_string()),
            other => unexpected(other),
        }
    }
}

/// A [`DoorCall`] with the door it asks.
struct Door<T>(FrontDoor, T);

impl<T: DoorCall> Tool for Door<T> {
    fn spec(&self) -> ToolSpec {
        self.1.spec()
    }

    fn call<'a>(&'a self, input: Value, _ctx: &'a ToolCtx) -> ToolFuture<'a> {
        Box::pin(async move {
            let req = match self.1.ask(&input) {
                Ok(req) => req,
                Err(out) => return out,
            };
            match request(&self.0, req).await {
                Ok(resp) => self.1.read(&input, resp),
                Err(e) => e,
            }
        })
    }
}

/// A tool's spec; `schema` is its arguments' JSON Schema.
fn spec(name: impl Into<String>, description: &str, schema: Value) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: description.into(),
        input_schema_json: schema.to_string(),
    }
}

/// One request from the MainAgent; a refusal is the tool error the model reads.
async fn request(door: &FrontDoor, req: CtlRequest) -> Result<CtlResponse, ToolOutput> {
    match door.request(&Channel::Main, req).await {
        resp @ (CtlResponse::Failed { .. } | CtlResponse::Error { .. }) => {
            Err(ToolOutput::error(refusal(resp)))
        }
        resp => Ok(resp),
    }
}

/// The tool error for an answer of another kind than the request's (never expected).
fn unexpected(resp: CtlResponse) -> ToolOutput {
    ToolOutput::error(refusal(resp))
}

/// A required string argument, or the tool error that tells the model what is missing.
fn arg(input: &Value, key: &str) -> Result<String, ToolOutput> {
    input
        .get(key)
        .and_then(|v| v.as_str())
        .map(str::to_string)
        .ok_or_else(|| ToolOutput::error(format!("missing string argument `{key}`")))
}

/// An optional string argument.
fn opt(input: &Value, key: &str) -> Option<String> {
    input.get(key).and_then(|v| v.as_str()).map(str::to_string)
}

/// A project as the model sees it: one JSON object.
fn project_json(p: &pegasus_proto::ctl::ProjectInfo) -> serde_json::Value {
    serde_json::json!({
        "name": p.name, "status": p.status_word(), "worker": p.worker_state, "worker_pid": p.worker_pid,
        "model": p.model, "goal": p.goal, "cost_usd": p.cost_usd, "error": p.error,
    })
}
