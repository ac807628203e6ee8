//! The MainAgent's tools (SPEC §4), one file each. They are clients of the daemon's front door
//! like `pegasusctl`: each call is one request, recorded as from `main` (the door holds the
//! daemon weakly: the daemon owns the MainAgent, not the other way round).

mod add_task;
mod create_project;
mod lifecycle;
mod list_projects;
mod reply;

use crate::front_door::{refusal, FrontDoor};
use pegasus_agent::{Tool, ToolOutput};
use pegasus_proto::{
    ctl::{CtlRequest, CtlResponse, LifecycleVerb},
    Channel,
};
use std::sync::Arc;

/// Every MainAgent tool.
pub(crate) fn all(door: FrontDoor) -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(create_project::CreateProject(door.clone())),
        Arc::new(list_projects::ListProjects(door.clone())),
        Arc::new(lifecycle::Lifecycle {
            door: door.clone(),
            verb: LifecycleVerb::Suspend,
        }),
        Arc::new(lifecycle::Lifecycle {
            door: door.clone(),
            verb: LifecycleVerb::Resume,
        }),
        Arc::new(lifecycle::Lifecycle {
            door: door.clone(),
            verb: LifecycleVerb::Complete,
        }),
        Arc::new(lifecycle::Lifecycle {
            door: door.clone(),
            verb: LifecycleVerb::Archive,
        }),
        Arc::new(add_task::AddTask(door.clone())),
        Arc::new(reply::Reply(door)),
    ]
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
fn arg<'a>(input: &'a serde_json::Value, key: &str) -> Result<&'a str, ToolOutput> {
    input
        .get(key)
        .and_then(|v| v.as_str())
        .ok_or_else(|| ToolOutput::error(format!("missing string argument `{key}`")))
}

/// A project as the model sees it: one JSON object.
fn project_json(p: &pegasus_proto::ctl::ProjectInfo) -> serde_json::Value {
    serde_json::json!({
        "name": p.name, "status": p.status_word(), "worker": p.worker_state, "worker_pid": p.worker_pid,
        "model": p.model, "goal": p.goal, "cost_usd": p.cost_usd, "error": p.error,
    })
}
