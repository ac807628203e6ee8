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

/// A project with large and hostile servers beside a good one: `huge` lists 5,000 tools with
/// 4 KB descriptions in one message (about 20 MB: read whole, past rmcp's own 16 MiB default);
/// `many` lists 5,000 small tools in pages; `over` lists more than a server may (10,000); `fat`
/// offers one tool past the size of one tool; `a` offers names that collide once cleaned. What
/// fits the budget is offered, the rest deferred (DESIGN.md §13); only `over` fails, alone.
#[test]
fn servers_with_thousands_of_tools_load_and_only_one_past_the_limits_fails_alone() {
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
             huge: {{command: '{bin}', args: [tag-huge], timeout_s: 60, env: {{MCP_TEST_TOOLS: '5000', MCP_TEST_DESC_BYTES: '4000'}}}}\n  \
             many: {{command: '{bin}', args: [tag-many], timeout_s: 60, env: {{MCP_TEST_TOOLS: '5000', MCP_TEST_PAGE: '1000'}}}}\n  \
             over: {{command: '{bin}', args: [tag-over], timeout_s: 60, env: {{MCP_TEST_TOOLS: '10001', MCP_TEST_PAGE: '5000'}}}}\n  \
             fat: {{command: '{bin}', args: [tag-fat], timeout_s: 60, env: {{MCP_TEST_TOOLS: '1', MCP_TEST_DESC_BYTES: '40000'}}}}\n  \
             a: {{command: '{bin}', args: [tag-names], timeout_s: 60, env: {{MCP_TEST_NAMES: 'do.it,do_it'}}}}\n"
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
    assert_eq!(by_name("over")["state"], "down", "{s}");
    assert!(
        error("over").contains("it lists more than 10000 tools"),
        "{}",
        error("over")
    );
    assert_eq!(error("over").lines().count(), 1);
    for name in ["huge", "many"] {
        assert_eq!(by_name(name)["state"], "running", "{name}: {s}");
        assert!(error(name).is_empty(), "{name}: {}", error(name));
    }
    // Servers by name (a, fat, huge, many), each in its listing order, while they fit: a's and
    // fat's tools and the first of huge's; the rest deferred.
    let offered_huge = by_name("huge")["tools"].as_array().unwrap().len() as u64;
    assert!(offered_huge > 0, "{s}");
    assert_eq!(
        by_name("huge")["deferred"].as_u64().unwrap() + offered_huge,
        5008,
        "{s}"
    );
    assert_eq!(by_name("many")["deferred"], 5008, "{s}");
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
    // The text view says it too, one line per server.
    let text = home.ctl_ok(&["project", "show", "m"]);
    assert!(
        text.contains("over: down (it lists more than 10000 tools"),
        "{text}"
    );
    assert!(
        text.contains("many: running (+5008 deferred behind tool_search)"),
        "{text}"
    );
    // What the model is sent stays within the budget: a tenth of the 200,000-token window.
    let last = fake.requests().last().unwrap().body.clone();
    let tools = last["tools"].as_array().unwrap();
    let mcp_bytes: usize = tools
        .iter()
        .filter(|t| t["name"].as_str().unwrap().starts_with("mcp__"))
        .map(|t| t.to_string().len())
        .sum();
    assert!(mcp_bytes < 20_000 * 4, "{mcp_bytes} bytes of MCP tools");
    assert!(tools.iter().any(|t| t["name"] == "tool_search"));
    assert!(last.to_string().len() < 1 << 20);

    // Names that collide once cleaned: both offered.
    let a_tools: Vec<String> = by_name("a")["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert!(
        a_tools.contains(&"mcp__a__do_it".to_string()),
        "{a_tools:?}"
    );
    let renamed = a_tools
        .iter()
        .find(|n| n.starts_with("mcp__a__do_it_"))
        .unwrap_or_else(|| panic!("do.it offered under its own name: {a_tools:?}"))
        .clone();
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
    poll(Duration::from_secs(5), "the failed server stopped", || {
        processes_with("tag-over").is_empty().then_some(())
    });
}

/// The names of the tools a request offered, in order.
fn offered(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|t| t["name"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// The requests whose last user text is `text`, in order.
fn requests_for(fake: &FakeLlm, text: &str) -> Vec<Value> {
    fake.requests()
        .into_iter()
        .map(|r| r.body)
        .filter(|b| {
            b["messages"]
                .as_array()
                .unwrap()
                .iter()
                .rev()
                .filter(|m| m["role"] == "user")
                .find_map(|m| match &m["content"] {
                    Value::String(s) => Some(s.clone()),
                    Value::Array(blocks) => blocks
                        .iter()
                        .find(|b| b["type"] == "text")
                        .map(|b| b["text"].as_str().unwrap_or("").to_string()),
                    _ => None,
                })
                .is_some_and(|t| t.contains(text))
        })
        .collect()
}

/// DESIGN.md §13, large MCP servers: a 5,000-tool server (listed in pages) is offered as far as
/// the budget goes plus `tool_search`; the model searches, the tool found is offered from the
/// next call on (after the others) and answers; a deferred tool called by its exact name works
/// unfound; a restarted worker still offers what was found.
#[test]
fn a_5000_tool_server_is_searched_and_what_is_found_is_offered_and_kept() {
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("tool gen_4242 answered".into()),
        Reply::Text("the widget tool answered".into()),
    ));
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("found for `widget 4242`".into()),
        call("mcp__big__gen_4242", json!({})),
    ));
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("tool gen_3000 answered".into()),
        Reply::Text("the direct call answered".into()),
    ));
    fake.add_rule(Rule::new(
        user("find the widget"),
        call("tool_search", json!({"query": "widget 4242"})),
    ));
    fake.add_rule(Rule::new(
        user("call it directly"),
        call("mcp__big__gen_3000", json!({})),
    ));
    fake.add_rule(Rule::new(user("hello"), Reply::Text("hi there".into())));
    let tag = "tag-5000";
    let home = fake_home(
        &fake,
        &format!(
            "mcp_servers:\n  big: {{command: '{}', args: ['{tag}'], timeout_s: 60, env: {{MCP_TEST_TOOLS: '5000', MCP_TEST_PAGE: '700'}}}}\n",
            server_bin().display()
        ),
    );
    let _d = home.start_fake();
    home.create("m");

    assert!(send_wait(&home, "m", "find the widget").contains("the widget tool answered"));
    let reqs = requests_for(&fake, "find the widget");
    assert_eq!(reqs.len(), 3, "search, call, answer");
    // The first: the budgeted tools (at most 64 of the server's: mcp.max_offered_tools) and
    // tool_search, and the system prompt says how many are deferred and how to find them.
    let first = offered(&reqs[0]);
    let big: Vec<&String> = first
        .iter()
        .filter(|n| n.starts_with("mcp__big__"))
        .collect();
    assert_eq!(big.len(), 64, "{first:?}");
    // Its listing order: its 8 own tools, then gen_0 … gen_55.
    assert_eq!(big[63], "mcp__big__gen_55");
    assert!(first.contains(&"tool_search".to_string()));
    assert!(!first.contains(&"mcp__big__gen_4242".to_string()));
    let search = reqs[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "tool_search")
        .unwrap()
        .clone();
    let description = search["description"].as_str().unwrap();
    assert!(
        description.contains("4944 of its 5008 MCP tools are deferred"),
        "{description}"
    );
    let system = reqs[0]["system"].to_string();
    assert!(
        system.contains("4944 of the 5008 tools of this project's MCP servers (big)")
            && system.contains("tool_search"),
        "{system}"
    );
    // The second: what was offered, then the tool found, last; the search's answer named it
    // with its schema.
    let second = offered(&reqs[1]);
    assert_eq!(second[..first.len()], first[..], "the prefix did not move");
    assert_eq!(second.last().unwrap(), "mcp__big__gen_4242");
    let answer = reqs[1]["messages"].to_string();
    assert!(
        answer.contains("## mcp__big__gen_4242") && answer.contains("Looks up widget 4242."),
        "{answer}"
    );
    assert!(answer.contains("Input schema:"), "{answer}");
    assert_eq!(offered(&reqs[2]), second);
    let s = show(&home, "m")["mcp_servers"][0].clone();
    assert!(
        s["tools"]
            .as_array()
            .unwrap()
            .contains(&json!("mcp__big__gen_4242")),
        "{s}"
    );
    assert_eq!(s["deferred"], 4943, "{s}");

    // A deferred tool called by its exact name, never found: it runs.
    assert!(send_wait(&home, "m", "call it directly").contains("the direct call answered"));
    let direct = requests_for(&fake, "call it directly");
    assert!(!offered(&direct[0]).contains(&"mcp__big__gen_3000".to_string()));

    // A new worker offers what was found, in the same place; not what was only called.
    home.ctl_ok(&["project", "suspend", "m"]);
    home.ctl_ok(&["project", "resume", "m"]);
    home.ready_worker("m", None);
    assert!(send_wait(&home, "m", "hello").contains("hi there"));
    let after = offered(&requests_for(&fake, "hello")[0]);
    assert_eq!(after, second, "the same tools, in the same order");
    assert!(!after.contains(&"mcp__big__gen_3000".to_string()));
    assert!(home.project_dir("m").join("mcp_found.json").exists());
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

/// A 15 MiB result (one JSON-RPC line, read whole) reaches the model cut with a note saying how
/// much was cut and that the server is fine; a 100 MiB one (past the 32 MiB read of one message) is skipped as it streams, the call
/// answered with one line; the same server process answers the next call at once.
#[test]
fn large_results_are_cut_and_huge_ones_refused_while_the_server_keeps_running() {
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("past the 32 MiB".into()),
        Reply::Text("the server flooded".into()),
    ));
    fake.add_rule(Rule::new(
        Match::All(vec![
            Match::LastToolResultContains("MCP server t is fine and still running".into()),
            Match::LastToolResultContains("end of big".into()),
        ]),
        Reply::Text("the result was cut".into()),
    ));
    rules(&fake);
    fake.add_rule(Rule::new(
        user("big it"),
        call("mcp__t__big", json!({"bytes": 15 << 20})),
    ));
    fake.add_rule(Rule::new(
        user("flood it"),
        call("mcp__t__big", json!({"bytes": 100 << 20})),
    ));
    let tag = "tag-flood";
    let home = fake_home(
        &fake,
        &format!(
            "mcp_servers:\n  t: {{command: '{}', args: ['{tag}'], timeout_s: 60}}\n",
            server_bin().display()
        ),
    );
    let _d = home.start_fake();
    let pid = home.create("m");

    assert!(send_wait(&home, "m", "big it").contains("the result was cut"));
    let server = processes_with(tag);
    assert_eq!(server.len(), 1);
    assert_eq!(show(&home, "m")["mcp_servers"][0]["state"], "running");
    let body = fake.last_request().unwrap().body;
    let result =
        body["messages"].as_array().unwrap().last().unwrap()["content"][0]["content"].to_string();
    assert!(result.len() < 40_000, "{} bytes", result.len());
    assert!(
        result.contains(&format!("of {} bytes cut here", 15 << 20)),
        "{}",
        &result[..result.len().min(2000)]
    );
    assert!(result.starts_with("\"big:"), "{}", &result[..100]);
    // The same server process answers the next call.
    assert!(send_wait(&home, "m", "use echo").contains("server said echo: hello"));
    assert_eq!(processes_with(tag), server);

    assert!(send_wait(&home, "m", "flood it").contains("the server flooded"));
    let s = show(&home, "m");
    assert_eq!(s["worker_pid"], pid, "the worker lives on");
    assert_eq!(s["restarts"], 0, "{s}");
    assert_eq!(s["mcp_servers"][0]["state"], "running", "{s}");
    let told = fake.requests().iter().any(|r| {
        r.body.to_string().contains(
            "MCP server t: its answer was 100 MiB, past the 32 MiB Pegasus reads of one MCP \
             message, so nothing of it is shown; the server is fine and still running",
        )
    });
    assert!(told, "the model got the reason in one line");
    // Still the same process, answering at once.
    assert!(send_wait(&home, "m", "use echo").contains("server said echo: hello"));
    assert_eq!(processes_with(tag), server);
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
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
