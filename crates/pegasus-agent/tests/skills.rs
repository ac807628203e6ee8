//! Skills: indexed in the system prompt, loaded with use_skill, project overriding global.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{calls, send, settings, text, Fixture, ScriptedModel};
use pegasus_proto::llm::Block;
use serde_json::json;

fn skill(root: &std::path::Path, folder: &str, body: &str) {
    std::fs::create_dir_all(root.join(folder)).unwrap();
    std::fs::write(root.join(folder).join("SKILL.md"), body).unwrap();
}

#[tokio::test]
async fn index_and_use_skill_prefer_the_project_skill() {
    let fx = Fixture::new();
    skill(
        &fx.global_skills,
        "deploy",
        "---\nname: deploy\ndescription: Global deploy\n---\nGLOBAL STEPS\n",
    );
    skill(
        &fx.global_skills,
        "review",
        "---\nname: review\ndescription: Review code\n---\nREVIEW STEPS\n",
    );
    skill(
        &fx.dir.join("skills"),
        "deploy",
        "---\nname: deploy\ndescription: Project deploy\n---\nPROJECT STEPS\n",
    );
    std::fs::create_dir_all(fx.dir.join("memory/facts")).unwrap();
    std::fs::write(
        fx.dir.join("memory/facts/context.md"),
        "Staging is at staging.example\n",
    )
    .unwrap();

    let model = ScriptedModel::new();
    model
        .push(calls(&[
            ("a", "use_skill", json!({"name": "deploy"})),
            ("b", "use_skill", json!({"name": "review"})),
            ("c", "use_skill", json!({"name": "nope"})),
        ]))
        .push(text("deployed"));
    let (mut agent, _rx) = fx.open(model.clone(), settings());
    send(&mut agent, "m", "deploy it");
    agent.run().await.unwrap();

    let reqs = model.requests();
    let sys = &reqs[0].system;
    assert!(
        sys.contains("## Skills\n- deploy: Project deploy\n- review: Review code\n"),
        "{sys}"
    );
    assert!(!sys.contains("Global deploy"));
    assert!(
        sys.contains("## Memory\n- facts/context.md: Staging is at staging.example\n"),
        "{sys}"
    );
    let results: Vec<(String, bool)> = reqs[1].messages[2]
        .content
        .iter()
        .map(|b| match b {
            Block::ToolResult {
                content, is_error, ..
            } => (content.clone(), *is_error),
            _ => panic!(),
        })
        .collect();
    assert_eq!(results[0], ("PROJECT STEPS".to_string(), false));
    assert_eq!(results[1], ("REVIEW STEPS".to_string(), false));
    assert!(
        results[2].1 && results[2].0.contains("available: deploy, review"),
        "{:?}",
        results[2]
    );
}
