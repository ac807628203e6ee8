//! The MainAgent's tools (SPEC §4), one file each. They hold a weak handle on the supervisor:
//! the daemon owns the MainAgent, not the other way round.

mod add_task;
mod create_project;
mod lifecycle;
mod list_projects;
mod reply;

use crate::supervisor::Supervisor;
use pegasus_agent::{Tool, ToolOutput};
use pegasus_store::Verb;
use std::sync::{Arc, Weak};

/// Every MainAgent tool.
pub(crate) fn all(sup: Weak<Supervisor>) -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(create_project::CreateProject(sup.clone())),
        Arc::new(list_projects::ListProjects(sup.clone())),
        Arc::new(lifecycle::Lifecycle {
            sup: sup.clone(),
            verb: Verb::Suspend,
        }),
        Arc::new(lifecycle::Lifecycle {
            sup: sup.clone(),
            verb: Verb::Resume,
        }),
        Arc::new(lifecycle::Lifecycle {
            sup: sup.clone(),
            verb: Verb::Complete,
        }),
        Arc::new(lifecycle::Lifecycle {
            sup: sup.clone(),
            verb: Verb::Archive,
        }),
        Arc::new(add_task::AddTask(sup.clone())),
        Arc::new(reply::Reply(sup)),
    ]
}

/// The supervisor, or the tool error the model sees while the daemon shuts down.
fn upgrade(sup: &Weak<Supervisor>) -> Result<Arc<Supervisor>, ToolOutput> {
    sup.upgrade()
        .ok_or_else(|| ToolOutput::error("pegasusd is shutting down".to_string()))
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
