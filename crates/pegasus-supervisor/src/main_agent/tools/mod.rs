//! The MainAgent's tools (DESIGN.md §4), one file each. They are clients of the daemon's front door
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

/// Every MainAgent tool. Each is a [`pegasus_agent::TypedTool`] holding the door it asks.
pub(crate) fn all(door: FrontDoor) -> Vec<Arc<dyn Tool>> {
    let mut tools: Vec<Arc<dyn Tool>> = vec![
        Arc::new(create_project::CreateProject(door.clone())),
        Arc::new(list_projects::ListProjects(door.clone())),
    ];
    for verb in LifecycleVerb::ALL {
        tools.push(Arc::new(lifecycle::Lifecycle(door.clone(), verb)));
    }
    tools.push(Arc::new(add_task::AddTask(door.clone())));
    tools.push(Arc::new(reply::Reply(door)));
    tools
}

/// One request from the MainAgent; a refusal is the tool error the model reads.
async fn request(door: &FrontDoor, req: CtlRequest) -> Result<CtlResponse, String> {
    match door.request(&Channel::Main, req).await {
        resp @ (CtlResponse::Failed { .. } | CtlResponse::Error { .. }) => Err(refusal(resp)),
        resp => Ok(resp),
    }
}

/// The tool error for an answer of another kind than the request's (never expected).
fn unexpected(resp: CtlResponse) -> String {
    refusal(resp)
}

/// What the model reads of an answer that is one project.
fn project_answer(resp: CtlResponse) -> Result<ToolOutput, String> {
    match resp {
        CtlResponse::Project(info) => Ok(ToolOutput::ok(project_json(&info).to_string())),
        other => Err(unexpected(other)),
    }
}

/// A project as the model sees it: one JSON object.
fn project_json(p: &pegasus_proto::ctl::ProjectInfo) -> serde_json::Value {
    serde_json::json!({
        "name": p.name, "status": p.status_word(), "worker": p.worker_state, "worker_pid": p.worker_pid,
        "model": p.model, "goal": p.goal, "cost_usd": p.cost_usd, "error": p.error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pegasus_agent::{AgentSettings, ToolCtx};
    use pegasus_proto::llm::{ChatFuture, ChatModel, ChatRequest, LlmError};
    use serde_json::json;

    /// The MainAgent never lends its model to these tools.
    struct NoModel;

    impl ChatModel for NoModel {
        fn chat(&self, _req: ChatRequest) -> ChatFuture<'_> {
            Box::pin(async { Err(LlmError::BadModel("none".into())) })
        }
    }

    fn ctx() -> ToolCtx {
        ToolCtx {
            workdir: "/nonexistent".into(),
            memory_dir: "/nonexistent".into(),
            skill_dirs: Vec::new(),
            notices: tokio::sync::mpsc::unbounded_channel().0,
            task_id: None,
            depth: 0,
            settings: AgentSettings::default(),
            model: Arc::new(NoModel),
            project_overview: String::new(),
            subagents_spawned: Default::default(),
            repos: Vec::new(),
            approvals: None,
            offered: None,
            proposed: Default::default(),
            touched: Default::default(),
            hooks: None,
        }
    }

    /// The tools over a door whose daemon is gone: every request is refused as stopping.
    fn tools() -> Vec<Arc<dyn Tool>> {
        all(FrontDoor::detached(pegasus_store::Home::new(
            "/nonexistent",
        )))
    }

    async fn call(name: &str, input: serde_json::Value) -> ToolOutput {
        let tools = tools();
        let Some(tool) = tools.iter().find(|t| t.spec().name == name) else {
            panic!("no MainAgent tool {name}");
        };
        tool.call(input, &ctx()).await
    }

    #[test]
    fn schemas_are_the_contract_with_the_model() {
        let specs: Vec<(String, String)> = tools()
            .iter()
            .map(|t| (t.spec().name, t.spec().input_schema_json))
            .collect();
        let lifecycle =
            r#"{"properties":{"name":{"type":"string"}},"required":["name"],"type":"object"}"#;
        let expected = [
            (
                "create_project",
                r#"{"properties":{"background":{"type":"string"},"constraints":{"type":"string"},"goal":{"type":"string"},"model":{"description":"provider/model","type":"string"},"name":{"type":"string"},"workdir":{"description":"absolute path the project works in, outside the Pegasus home","type":"string"}},"required":["name","goal"],"type":"object"}"#,
            ),
            ("list_projects", r#"{"properties":{},"type":"object"}"#),
            ("suspend_project", lifecycle),
            ("resume_project", lifecycle),
            ("complete_project", lifecycle),
            ("archive_project", lifecycle),
            (
                "add_task",
                r#"{"properties":{"acceptance":{"description":"how to tell the goal is met","items":{"type":"string"},"type":"array"},"depends_on":{"description":"task ids that must be done first","items":{"type":"string"},"type":"array"},"goal":{"description":"what must be achieved","type":"string"},"priority":{"maximum":3,"minimum":0,"type":"integer"},"project":{"type":"string"},"repos":{"items":{"type":"string"},"type":"array"},"role":{"description":"coder, researcher, reviewer, ...","type":"string"},"title":{"description":"one line for listings","type":"string"}},"required":["project","goal"],"type":"object"}"#,
            ),
            (
                "reply",
                r#"{"properties":{"channel_id":{"type":"string"},"channel_type":{"enum":["project","cli"],"type":"string"},"text":{"type":"string"}},"required":["channel_type","channel_id","text"],"type":"object"}"#,
            ),
        ];
        let expected: Vec<(String, String)> = expected
            .iter()
            .map(|(n, s)| (n.to_string(), s.to_string()))
            .collect();
        assert_eq!(specs, expected);
    }

    #[tokio::test]
    async fn bad_arguments_say_which_and_what_to_do() {
        let out = call("add_task", json!({"goal": "g"})).await;
        assert!(out.is_error);
        assert_eq!(
            out.content,
            "bad arguments for add_task: missing field `project`; see the tool's input schema"
        );
        let out = call(
            "add_task",
            json!({"project": "p", "goal": "g", "repos": "web"}),
        )
        .await;
        assert!(out.is_error && out.content.starts_with("bad arguments for add_task: repos: invalid type: string \"web\", expected a sequence"), "{}", out.content);
        let out = call(
            "add_task",
            json!({"project": "p", "goal": "g", "priority": 7}),
        )
        .await;
        assert_eq!(out, ToolOutput::error("`priority` must be 0, 1, 2 or 3"));
        let out = call("suspend_project", json!({"name": 5})).await;
        assert!(out.is_error && out.content.starts_with("bad arguments for suspend_project: name: invalid type: integer `5`, expected a string"), "{}", out.content);
        let out = call(
            "reply",
            json!({"channel_type": "mail", "channel_id": "x", "text": "t"}),
        )
        .await;
        assert_eq!(
            out,
            ToolOutput::error("unknown channel_type `mail`: use project or cli")
        );
    }

    #[tokio::test]
    async fn good_arguments_reach_the_door() {
        let stopping = ToolOutput::error("pegasusd is stopping; try again when it is back");
        let out = call(
            "add_task",
            json!({"project": "p", "goal": "g", "repos": null}),
        )
        .await;
        assert_eq!(out, stopping);
        assert_eq!(call("list_projects", json!(null)).await, stopping);
        assert_eq!(
            call("archive_project", json!({"name": "p"})).await,
            stopping
        );
        let out = call(
            "reply",
            json!({"channel_type": "cli", "channel_id": "x", "text": "t"}),
        )
        .await;
        assert_eq!(
            out,
            ToolOutput::ok("the user sees your final answer; put the text there")
        );
    }
}
