//! MCP servers end to end (SPEC §13): the real daemon and worker, the in-repo MCP test server
//! (`examples/mcp_test_server.rs`, rmcp's server side) as a child of the worker, the fake LLM
//! calling its tools over real HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use pegasus_fakellm::{FakeLlm, Match, Reply, Rule, ToolCall};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;

/// The test server binary, built by `cargo test` with the other examples.
fn server_bin() -> PathBuf {
    let bin = example_bin("mcp_test_server");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build --example mcp_test_server` (plain `cargo test` builds it)",
        bin.display()
    );
    bin
}

/// A home whose config gives every project the test server `t`, tagged so this test finds its
/// own server processes among those of tests running beside it.
fn mcp_home(fake: &FakeLlm, tag: &str, extra: &str) -> Home {
    fake_home(
        fake,
        &format!(
            "mcp_servers:\n  t: {{command: '{}', args: ['{tag}'], timeout_s: 2{extra}}}\n",
            server_bin().display()
        ),
    )
}

fn call(tool: &str, input: Value) -> Reply {
    Reply::Tools(vec![ToolCall::new(tool, input)])
}

fn user(t: &str) -> Match {
    Match::LastUserTextContains(t.into())
}

fn send_wait(home: &Home, project: &str, text: &str) -> String {
    home.ctl_ok(&["project", "send", project, text, "--wait"])
}

fn show(home: &Home, name: &str) -> Value {
    home.json(&["project", "show", name])
}

/// The answers every test uses: an echo result is repeated, any MCP error is reported.
fn rules(fake: &FakeLlm) {
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("echo: hello".into()),
        Reply::Text("server said echo: hello".into()),
    ));
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("unknown tool `mcp__t__echo`".into()),
        Reply::Text("echo is not mine to call".into()),
    ));
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("MCP".into()),
        Reply::Text("the mcp tool failed".into()),
    ));
    fake.add_rule(Rule::new(
        user("use echo"),
        call("mcp__t__echo", json!({"text": "hello"})),
    ));
    fake.add_rule(Rule::new(
        user("crash it"),
        call("mcp__t__crash", json!({})),
    ));
    fake.add_rule(Rule::new(
        user("hang it"),
        call("mcp__t__sleep", json!({"seconds": 30})),
    ));
    fake.add_rule(Rule::new(user("fail it"), call("mcp__t__fail", json!({}))));
}

#[test]
fn an_agent_calls_an_mcp_tool_and_the_answer_reaches_the_user() {
    let fake = FakeLlm::start().unwrap();
    rules(&fake);
    let tag = "tag-e2e";
    let home = mcp_home(&fake, tag, "");
    let _d = home.start_fake();
    home.create("m");
    // Lazy: nothing runs before the first use.
    assert!(processes_with(tag).is_empty());
    assert_eq!(show(&home, "m")["mcp_servers"][0]["state"], "not started");

    assert!(send_wait(&home, "m", "use echo").contains("server said echo: hello"));
    let s = show(&home, "m")["mcp_servers"][0].clone();
    assert_eq!(s["name"], "t");
    assert_eq!(s["state"], "running");
    assert!(
        s["tools"]
            .as_array()
            .unwrap()
            .contains(&json!("mcp__t__echo")),
        "{s}"
    );
    let text = home.ctl_ok(&["project", "show", "m"]);
    assert!(
        text.contains("t: running") && text.contains("mcp__t__sleep"),
        "{text}"
    );
    // A tool-level error (isError) goes back to the model, the server stays up.
    assert!(send_wait(&home, "m", "fail it").contains("the mcp tool failed"));
    assert_eq!(show(&home, "m")["mcp_servers"][0]["state"], "running");
    assert_eq!(processes_with(tag).len(), 1);
    // The model saw the tool with its schema.
    let seen = fake.requests().iter().any(|r| {
        r.body.to_string().contains("mcp__t__echo") && r.body.to_string().contains("What to echo")
    });
    assert!(seen, "the tool spec reached the model");
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

#[test]
fn a_role_without_the_tool_cannot_call_it_and_one_allowing_mcp_t_star_can() {
    let fake = FakeLlm::start().unwrap();
    rules(&fake);
    let home = mcp_home(&fake, "tag-roles", "");
    // A role allowing every tool of server t.
    let roles = home.path().join("roles");
    std::fs::create_dir_all(&roles).unwrap();
    std::fs::write(
        roles.join("mcper.md"),
        "---\nid: mcper\nname: MCP user\ndescription: uses MCP tools\ntools: [mcp__t__*]\n---\nYou use MCP tools.\n",
    )
    .unwrap();
    let _d = home.start_fake();
    home.create("m");
    let wait_done = |id: &str| {
        poll(Duration::from_secs(20), "task to finish", || {
            let t = home.json(&["task", "show", id])["task"].clone();
            (t["state"] == "done").then_some(t)
        })
    };
    let coder = home.json(&["task", "add", "m", "--goal", "use echo", "--role", "coder"])["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        wait_done(&coder)["result_summary"],
        "echo is not mine to call"
    );
    let mcper = home.json(&["task", "add", "m", "--goal", "use echo", "--role", "mcper"])["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        wait_done(&mcper)["result_summary"],
        "server said echo: hello"
    );
}

#[test]
fn a_crashing_or_hanging_server_does_not_take_the_worker_down_and_restarts_at_next_use() {
    let fake = FakeLlm::start().unwrap();
    rules(&fake);
    let tag = "tag-crash";
    let home = mcp_home(&fake, tag, "");
    let _d = home.start_fake();
    let pid = home.create("m");

    assert!(send_wait(&home, "m", "crash it").contains("the mcp tool failed"));
    let s = show(&home, "m");
    assert_eq!(s["worker_pid"], pid, "the worker lives on");
    assert_eq!(s["mcp_servers"][0]["state"], "down");
    assert!(
        s["mcp_servers"][0]["error"].as_str().unwrap().len() > 3,
        "{s}"
    );

    // Used again (after its backoff): started again, answers.
    poll(Duration::from_secs(20), "the server to come back", || {
        send_wait(&home, "m", "use echo")
            .contains("server said echo: hello")
            .then_some(())
    });
    assert_eq!(processes_with(tag).len(), 1);

    // A call past timeout_s (2 s): an error for the model, the hung server is stopped.
    assert!(send_wait(&home, "m", "hang it").contains("the mcp tool failed"));
    let s = show(&home, "m");
    assert_eq!(s["worker_pid"], pid);
    assert_eq!(s["mcp_servers"][0]["state"], "down");
    assert!(
        s["mcp_servers"][0]["error"]
            .as_str()
            .unwrap()
            .contains("no answer within 2 s"),
        "{s}"
    );
    poll(Duration::from_secs(5), "the hung server gone", || {
        processes_with(tag).is_empty().then_some(())
    });
    poll(Duration::from_secs(20), "the server to come back", || {
        send_wait(&home, "m", "use echo")
            .contains("server said echo: hello")
            .then_some(())
    });
}

#[test]
fn kill_9_of_the_worker_or_the_daemon_leaves_no_server_process() {
    let fake = FakeLlm::start().unwrap();
    rules(&fake);
    let tag = "tag-kill";
    let home = mcp_home(&fake, tag, ", eager: true");
    let mut d = home.start_fake();
    let pid = home.create("m");
    // Eager: started with the worker.
    poll(Duration::from_secs(10), "the eager server", || {
        (processes_with(tag).len() == 1).then_some(())
    });
    kill9(pid);
    poll(
        Duration::from_secs(10),
        "no server after the worker died",
        || processes_with(tag).is_empty().then_some(()),
    );
    home.ready_worker("m", Some(pid as u64));
    poll(Duration::from_secs(10), "the eager server again", || {
        (processes_with(tag).len() == 1).then_some(())
    });
    d.kill9();
    poll(
        Duration::from_secs(10),
        "no server after the daemon died",
        || processes_with(tag).is_empty().then_some(()),
    );
}

#[test]
fn bad_mcp_entries_are_refused_naming_the_key() {
    let home = Home::with_config("mcp_servers:\n  a__b: {command: x}\n");
    let out = std::process::Command::new(PEGASUSD)
        .arg("--home")
        .arg(home.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("mcp_servers.a__b"), "{err}");
}

#[test]
fn servers_that_cannot_start_or_hang_at_the_handshake_are_down_and_the_project_still_works() {
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(user("hello"), Reply::Text("hi there".into())));
    let home = fake_home(
        &fake,
        &format!(
            "mcp_servers:\n  gone: {{command: /nonexistent/mcp-server}}\n  mute: {{command: '{}', args: [tag-mute], env: {{MCP_TEST_NO_HANDSHAKE: '1'}}, timeout_s: 1}}\n",
            server_bin().display()
        ),
    );
    let _d = home.start_fake();
    home.create("m");
    assert!(send_wait(&home, "m", "hello").contains("hi there"));
    let servers = show(&home, "m")["mcp_servers"].clone();
    let by_name = |n: &str| {
        servers
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == n)
            .unwrap()
            .clone()
    };
    let gone = by_name("gone");
    assert_eq!(gone["state"], "down");
    assert!(
        gone["error"]
            .as_str()
            .unwrap()
            .contains("cannot run `/nonexistent/mcp-server`"),
        "{gone}"
    );
    let mute = by_name("mute");
    assert_eq!(mute["state"], "down");
    assert!(
        mute["error"]
            .as_str()
            .unwrap()
            .contains("no answer to the handshake within 1 s"),
        "{mute}"
    );
    poll(Duration::from_secs(5), "the mute server killed", || {
        processes_with("tag-mute").is_empty().then_some(())
    });
}
