//! MCP servers end to end (DESIGN.md §13): the real daemon and worker, the in-repo MCP test server
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

/// A project with hostile servers beside a good one: `huge` lists 5,000 tools with 4 KB
/// descriptions in one message (about 20 MB, past `MAX_FRAME`); `wide` lists the same in pages
/// of 2 MB (each page readable, the whole past `MAX_FRAME`: before the limits the worker put it
/// in every model call, could not send that frame and stopped answering); `many` lists 5,000
/// small tools in pages; `fat` offers one tool past the size of one tool; `t` offers names that
/// collide once cleaned.
#[test]
fn a_server_with_a_huge_tool_list_fails_alone_and_the_worker_keeps_answering() {
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(user("hello"), Reply::Text("hi there".into())));
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("tool do.it answered".into()),
        Reply::Text("the renamed tool answered".into()),
    ));
    let bin = server_bin();
    let bin = bin.display();
    let home = fake_home(
        &fake,
        &format!(
            "mcp_servers:\n  \
             huge: {{command: '{bin}', args: [tag-huge], timeout_s: 30, env: {{MCP_TEST_TOOLS: '5000', MCP_TEST_DESC_BYTES: '4000'}}}}\n  \
             many: {{command: '{bin}', args: [tag-many], timeout_s: 30, env: {{MCP_TEST_TOOLS: '5000', MCP_TEST_PAGE: '1000'}}}}\n  \
             wide: {{command: '{bin}', args: [tag-wide], timeout_s: 30, env: {{MCP_TEST_TOOLS: '5000', MCP_TEST_DESC_BYTES: '4000', MCP_TEST_PAGE: '500'}}}}\n  \
             fat: {{command: '{bin}', args: [tag-fat], timeout_s: 30, env: {{MCP_TEST_TOOLS: '1', MCP_TEST_DESC_BYTES: '40000'}}}}\n  \
             t: {{command: '{bin}', args: [tag-names], timeout_s: 30, env: {{MCP_TEST_NAMES: 'do.it,do_it'}}}}\n"
        ),
    );
    let _d = home.start_fake();
    let pid = home.create("m");

    assert!(send_wait(&home, "m", "hello").contains("hi there"));
    let s = show(&home, "m");
    assert_eq!(s["worker_pid"], pid, "the worker lives on");
    assert_eq!(s["restarts"], 0, "{s}");
    assert!(s["last_crash"].is_null(), "{s}");
    let servers = s["mcp_servers"].as_array().unwrap().clone();
    let by_name = |n: &str| servers.iter().find(|s| s["name"] == n).unwrap().clone();
    let error = |n: &str| by_name(n)["error"].as_str().unwrap_or("").to_string();
    for (name, why) in [
        ("huge", "it sent a message of more than 8 MiB"),
        ("many", "it lists more than 500 tools"),
        ("wide", "its tool list passes 524288 bytes"),
    ] {
        assert_eq!(by_name(name)["state"], "down", "{name}: {s}");
        assert!(error(name).contains(why), "{name}: {}", error(name));
        assert_eq!(error(name).lines().count(), 1);
        assert!(by_name(name)["tools"].as_array().unwrap().is_empty());
    }
    // One tool too large: refused by name, the server's other tools offered.
    assert_eq!(by_name("fat")["state"], "running");
    assert!(
        error("fat").contains("1 tool not offered: `gen_0` (")
            && error("fat").contains("at most 32768"),
        "{}",
        error("fat")
    );
    assert!(by_name("fat")["tools"]
        .as_array()
        .unwrap()
        .contains(&json!("mcp__fat__echo")));
    // Names that collide once cleaned: both offered.
    let t_tools: Vec<String> = by_name("t")["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert!(
        t_tools.contains(&"mcp__t__do_it".to_string()),
        "{t_tools:?}"
    );
    let renamed = t_tools
        .iter()
        .find(|n| n.starts_with("mcp__t__do_it_"))
        .unwrap_or_else(|| panic!("do.it offered under its own name: {t_tools:?}"))
        .clone();
    // The text view says it too, one line per server.
    let text = home.ctl_ok(&["project", "show", "m"]);
    assert!(
        text.contains("huge: down (it sent a message of more than 8 MiB"),
        "{text}"
    );
    // What the model is sent stays small: no tool of a failed server.
    let last = fake.requests().last().unwrap().body.to_string();
    assert!(last.contains("mcp__fat__echo") && !last.contains("mcp__huge__"));
    assert!(last.len() < 1 << 20, "{} bytes", last.len());

    // The renamed tool is reachable.
    fake.add_rule(Rule::new(
        user("call the renamed one"),
        call(&renamed, json!({})),
    ));
    assert!(send_wait(&home, "m", "call the renamed one").contains("the renamed tool answered"));
    // And the project keeps answering; the worker never restarted.
    assert!(send_wait(&home, "m", "hello").contains("hi there"));
    let s = show(&home, "m");
    assert_eq!(s["worker_pid"], pid);
    assert_eq!(s["restarts"], 0);
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
    for tag in ["tag-huge", "tag-many", "tag-wide"] {
        poll(Duration::from_secs(5), "the failed servers stopped", || {
            processes_with(tag).is_empty().then_some(())
        });
    }
}

/// A tool result of 2 MB is cut like any tool result; one of 20 MB (past one message) stops
/// that server with the reason, for the model and in `project show`; the worker lives on and
/// the server comes back at next use.
#[test]
fn a_huge_tool_result_fails_that_server_and_a_large_one_is_cut() {
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("more than 8 MiB".into()),
        Reply::Text("the server flooded".into()),
    ));
    fake.add_rule(Rule::new(
        Match::All(vec![
            Match::LastToolResultContains("bytes cut here".into()),
            Match::LastToolResultContains("end of big".into()),
        ]),
        Reply::Text("the result was cut".into()),
    ));
    rules(&fake);
    fake.add_rule(Rule::new(
        user("big it"),
        call("mcp__t__big", json!({"bytes": 2_000_000})),
    ));
    fake.add_rule(Rule::new(
        user("flood it"),
        call("mcp__t__big", json!({"bytes": 20_000_000})),
    ));
    let tag = "tag-flood";
    let home = fake_home(
        &fake,
        &format!(
            "mcp_servers:\n  t: {{command: '{}', args: ['{tag}'], timeout_s: 30}}\n",
            server_bin().display()
        ),
    );
    let _d = home.start_fake();
    let pid = home.create("m");

    assert!(send_wait(&home, "m", "big it").contains("the result was cut"));
    assert_eq!(show(&home, "m")["mcp_servers"][0]["state"], "running");

    assert!(send_wait(&home, "m", "flood it").contains("the server flooded"));
    let s = show(&home, "m");
    assert_eq!(s["worker_pid"], pid, "the worker lives on");
    assert_eq!(s["restarts"], 0, "{s}");
    let server = s["mcp_servers"][0].clone();
    assert_eq!(server["state"], "down", "{server}");
    let error = server["error"].as_str().unwrap();
    assert!(
        error.contains("it sent a message of more than 8 MiB") && error.lines().count() == 1,
        "{error}"
    );
    // The model was told in one line.
    let told = fake.requests().iter().any(|r| {
        let body = r.body.to_string();
        body.contains("MCP server t: it sent a message of more than 8 MiB")
    });
    assert!(told, "the model got the reason");
    poll(
        Duration::from_secs(5),
        "the flooding server stopped",
        || processes_with(tag).is_empty().then_some(()),
    );
    // Next use (after its backoff): started again, answers.
    poll(Duration::from_secs(20), "the server to come back", || {
        send_wait(&home, "m", "use echo")
            .contains("server said echo: hello")
            .then_some(())
    });
    assert_eq!(show(&home, "m")["worker_pid"], pid);
}

/// Issue 22: an MCP server is a program a model drives, so it is confined as `exec` is: its own
/// PID namespace (pegasusd out of sight, dead with its worker), writes only to the workdir, the
/// project's temp dir and the `writable` paths of its entry, nothing read from the home but its
/// project.
#[test]
fn an_mcp_server_is_confined_like_exec_plus_its_writable_paths() {
    let tmp = tempfile::tempdir().unwrap();
    let extra = tmp.path().join("extra");
    std::fs::create_dir(&extra).unwrap();
    let outside = tmp.path().join("outside");
    let fake = FakeLlm::start().unwrap();
    let home = mcp_home(
        &fake,
        "tag-confined",
        &format!(", writable: ['{}']", extra.display()),
    );
    let workdir = home.project_dir("jail").join("workdir");
    let config = home.path().join("config.yml");
    let steps = [
        ("probe pid", call("mcp__t__pid", json!({}))),
        (
            "probe workdir",
            call("mcp__t__write", json!({"path": workdir.join("in.txt")})),
        ),
        (
            "probe extra",
            call("mcp__t__write", json!({"path": extra.join("x.txt")})),
        ),
        (
            "probe outside",
            call("mcp__t__write", json!({"path": outside})),
        ),
        (
            "probe config",
            call("mcp__t__read", json!({"path": config})),
        ),
    ];
    // A turn that ends in a tool result is answered; a probe message calls its tool.
    fake.add_rule(Rule::new(
        Match::LastToolResultContains(String::new()),
        Reply::Text("probed".into()),
    ));
    for (text, reply) in &steps {
        fake.add_rule(Rule::new(user(text), reply.clone()));
    }
    let d = home.start_fake();
    home.create("jail");
    let mut results = Vec::new();
    for (text, _) in &steps {
        send_wait(&home, "jail", text);
        // The tool result the model was shown last.
        let body = fake.last_request().unwrap().body.clone();
        let last = body["messages"].as_array().unwrap().last().unwrap().clone();
        let result = last["content"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["type"] == "tool_result")
            .map(|b| b["content"].to_string())
            .unwrap_or_default();
        results.push(result);
    }
    let [pid, inside, extra_w, out, cfg] = &results[..] else {
        unreachable!()
    };
    assert!(inside.contains("wrote"), "{inside}");
    assert!(extra_w.contains("wrote"), "{extra_w}");
    assert!(!outside.exists(), "the server wrote outside: {out}");
    assert!(cfg.contains("cannot read"), "{cfg}");
    if pegasus_sandbox::probe().namespaces {
        // The server is pid 2 of its own namespace (after its init), not a pid of the host.
        assert_eq!(pid.trim_matches('"'), "2", "{pid}");
    }
    drop(d);
}
