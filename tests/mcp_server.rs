//! `pegasusctl mcp`, Pegasus as an MCP server (DESIGN.md §16), through the real binaries: a
//! real pegasusd on the fake LLM, and the official Python MCP SDK as the client
//! (`tests/mcp_client.py`, in the venv `scripts/mcp-python` makes under target/mcp-python;
//! `.ci/run` installs it), and Claude Code (`claude`, `tests/common/claude.rs`; `.ci/run`
//! installs it) with the fake LLM as its model. Without one of them a test skips with one line;
//! under `CI=true` it fails. The raw protocol test needs nothing but the binaries.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use pegasus_fakellm::{FakeLlm, Match, Reply, Rule, ToolCall};
use serde_json::{json, Value};
use std::{
    io::{BufRead, BufReader, Write},
    process::{Child, ChildStdin, Command, Stdio},
    sync::mpsc,
    time::Duration,
};

const WAIT: Duration = Duration::from_secs(60);

/// `scripts/mcp-python`, the venv's python with the SDK (installed when missing).
fn sdk_python() -> Option<std::path::PathBuf> {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/mcp-python");
    let out = Command::new(&script)
        .arg("--install-only")
        .output()
        .expect("scripts/mcp-python runs");
    if out.status.success() {
        return Some(script);
    }
    let why = String::from_utf8_lossy(&out.stderr).trim().to_string();
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("CI=true and no Python MCP SDK: {why}");
    }
    // Not `eprintln!`: libtest captures that for a passing test, and a skip must show.
    let _ = writeln!(std::io::stderr(), "skipped: no Python MCP SDK: {why}");
    None
}

/// One MCP session of tests/mcp_client.py with `pegasusctl mcp`: calls go in as JSON lines,
/// answers come back by id, in whatever order they finish.
struct Sdk {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<Value>,
    early: Vec<Value>,
}

impl Sdk {
    fn start(python: &std::path::Path, home: &Home) -> Sdk {
        let client = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_client.py");
        let mut child = Command::new(python)
            .arg(client)
            .arg(PEGASUSCTL)
            .arg(home.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let value: Value = serde_json::from_str(&line).unwrap_or_else(|e| {
                    panic!("the client wrote a line that is not JSON ({e}): {line}")
                });
                if tx.send(value).is_err() {
                    return;
                }
            }
        });
        let stdin = child.stdin.take();
        Sdk {
            child,
            stdin,
            lines,
            early: Vec::new(),
        }
    }

    fn send(&mut self, cmd: Value) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{cmd}").unwrap();
        stdin.flush().unwrap();
    }

    /// The answer with this id (others that come first are kept for later).
    fn answer(&mut self, id: &str) -> Value {
        if let Some(at) = self.early.iter().position(|v| v["id"] == id) {
            return self.early.remove(at);
        }
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let v = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|e| panic!("no answer {id} from the MCP client: {e}"));
            if v["id"] == id {
                return v;
            }
            self.early.push(v);
        }
    }

    fn call(&mut self, id: &str, tool: &str, arguments: Value) -> Value {
        self.send(json!({"id": id, "tool": tool, "arguments": arguments}));
        self.answer(id)
    }

    /// A call that must succeed: its answer.
    fn ok(&mut self, id: &str, tool: &str, arguments: Value) -> Value {
        let a = self.call(id, tool, arguments);
        assert_eq!(a["is_error"], false, "{tool} failed: {a}");
        a
    }

    /// Ends the session (stdin closed) and waits for the client, hence the server, to exit.
    fn finish(mut self) {
        drop(self.stdin.take());
        let status = poll(WAIT, "the MCP client to exit", || {
            self.child.try_wait().unwrap()
        });
        assert!(status.success(), "the MCP client failed: {status}");
    }
}

/// The scripted model: "deploy" runs a gated exec and says whether it ran; "where" is
/// answered; a task's goal "write the docs" is done; anything else gets "ok".
fn fake() -> FakeLlm {
    let fake = FakeLlm::start().unwrap();
    fake.require_api_key(Some(FAKE_KEY.into()));
    main_agent_rule(&fake);
    approval_script(&fake, "deploy");
    fake.add_rule(
        Rule::new(
            Match::All(vec![
                Match::LastUserTextContains("release".into()),
                Match::NewPrompt,
            ]),
            Reply::Tools(vec![ToolCall::new(
                "exec",
                json!({"command": "echo released >> runs.txt"}),
            )]),
        )
        .times(1),
    );
    fake.add_rule(Rule::new(
        Match::All(vec![
            Match::LastUserTextContains("release".into()),
            Match::LastToolResultContains("denied by the user: not today".into()),
        ]),
        Reply::Text("saw: release denied".into()),
    ));
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("where".into()),
        Reply::Text("answered through pegasusd".into()),
    ));
    fake.add_rule(Rule::new(Match::Any, Reply::Text("ok".into())));
    fake
}

fn runs(home: &Home) -> usize {
    std::fs::read_to_string(home.project_dir("web").join("workdir/runs.txt"))
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

#[test]
fn the_python_sdk_drives_every_tool_through_pegasusctl_mcp() {
    let Some(python) = sdk_python() else {
        return;
    };
    let fake = fake();
    let home = fake_home(&fake, "approvals: {exec: ask}\n");
    let _d = home.start_fake();
    home.create("web");
    let mut mcp = Sdk::start(&python, &home);

    let init = mcp.answer("init");
    assert_eq!(init["server"], "pegasus", "{init}");
    assert!(
        init["protocolVersion"].as_str().unwrap().starts_with("20"),
        "{init}"
    );

    // The tools, each with a description and a schema whose every property says what it is.
    mcp.send(json!({"id": "tools", "list_tools": true}));
    let tools = mcp.answer("tools");
    let mut names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "add_task",
            "answer_approval",
            "cost",
            "list_approvals",
            "list_projects",
            "list_tasks",
            "read_log",
            "search",
            "send_message"
        ]
    );
    for t in tools["tools"].as_array().unwrap() {
        assert!(t["description"].as_str().unwrap().len() > 30, "{t}");
        assert_eq!(t["inputSchema"]["type"], "object", "{t}");
        for (name, p) in t["inputSchema"]["properties"].as_object().unwrap() {
            assert!(
                p["description"].as_str().is_some_and(|d| !d.is_empty()),
                "{} {name}: {p}",
                t["name"]
            );
        }
    }
    let send_tool = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "send_message")
        .unwrap();
    assert_eq!(
        send_tool["inputSchema"]["required"],
        json!(["project", "text"])
    );

    // Projects and their state, as `project list --json` says them.
    let listed = mcp.ok("projects", "list_projects", json!({}));
    let web = &listed["structured"]["projects"][0];
    assert_eq!(web["name"], "web", "{listed}");
    assert_eq!(web["status"], "active", "{listed}");
    assert!(listed["text"].as_str().unwrap().contains("web"), "{listed}");

    // A message, and its answer.
    let sent = mcp.ok(
        "where",
        "send_message",
        json!({"project": "web", "text": "where are you?", "wait": true}),
    );
    assert_eq!(sent["text"], "answered through pegasusd", "{sent}");
    assert_eq!(sent["structured"]["reply"], "answered through pegasusd");
    assert!(sent["structured"]["id"].as_str().is_some(), "{sent}");

    // The transcript, then nothing new after its end.
    let log = mcp.ok("log", "read_log", json!({"project": "web"}));
    let text = log["text"].as_str().unwrap();
    assert!(text.contains("where are you?"), "{text}");
    assert!(text.contains("answered through pegasusd"), "{text}");
    let next = log["structured"]["next"].as_u64().unwrap();
    assert!(next >= 3, "{log}");
    assert!(log["structured"]["records"].as_array().unwrap().len() >= 3);
    let after = mcp.ok("log2", "read_log", json!({"project": "web", "since": next}));
    assert_eq!(after["structured"]["records"], json!([]), "{after}");
    let last = mcp.ok("log3", "read_log", json!({"project": "web", "since": -1}));
    assert_eq!(
        last["structured"]["records"].as_array().unwrap().len(),
        1,
        "{last}"
    );
    assert!(last["text"]
        .as_str()
        .unwrap()
        .contains("answered through pegasusd"));

    // Without waiting: the call returns once the project has the message, with the point of
    // the transcript its answer will follow.
    let quick = mcp.ok(
        "quick",
        "send_message",
        json!({"project": "web", "text": "where now?"}),
    );
    assert_eq!(quick["structured"]["since"], next, "{quick}");
    assert!(
        quick["text"]
            .as_str()
            .unwrap()
            .contains(&format!("since: {next}")),
        "{quick}"
    );
    poll(WAIT, "the answer after the given point", || {
        let a = mcp.ok("poll", "read_log", json!({"project": "web", "since": next}));
        let text = a["text"].as_str().unwrap().to_string();
        (text.contains("where now?") && text.contains("answered through pegasusd")).then_some(())
    });

    // A task added, then listed.
    let added = mcp.ok(
        "add",
        "add_task",
        json!({"project": "web", "goal": "write the docs", "acceptance": ["docs/README.md exists"]}),
    );
    let task_id = added["structured"]["id"].as_str().unwrap().to_string();
    assert!(
        added["text"].as_str().unwrap().contains(&task_id),
        "{added}"
    );
    assert_eq!(
        added["structured"]["spec"]["acceptance"],
        json!(["docs/README.md exists"]),
        "{added}"
    );
    let tasks = mcp.ok("tasks", "list_tasks", json!({"project": "web"}));
    assert!(
        tasks["structured"]["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["id"] == task_id),
        "{tasks}"
    );
    assert!(
        tasks["text"].as_str().unwrap().contains(&task_id),
        "{tasks}"
    );

    // A gated call: the send waits on its own while the approval is listed and answered on
    // the same session, and tells a client that asked for progress what it waits for.
    mcp.send(
        json!({"id": "deploy", "tool": "send_message", "progress": true,
        "arguments": {"project": "web", "text": "deploy now", "wait": true}}),
    );
    let request = poll(WAIT, "an approval request over MCP", || {
        let a = mcp.ok("approvals", "list_approvals", json!({}));
        let list = a["structured"]["approvals"].as_array().unwrap().clone();
        (list.len() == 1).then(|| (list[0].clone(), a["text"].as_str().unwrap().to_string()))
    });
    let (request, shown) = request;
    assert_eq!(request["project"], "web");
    assert_eq!(request["tool"], "exec");
    assert_eq!(request["summary"], "echo ran >> runs.txt");
    assert!(shown.contains("echo ran >> runs.txt"), "{shown}");
    assert_eq!(runs(&home), 0, "nothing runs before the answer");
    let id = request["id"].as_str().unwrap();
    let approved = mcp.ok(
        "approve",
        "answer_approval",
        json!({"id": id, "approve": true}),
    );
    assert!(
        approved["text"].as_str().unwrap().contains("approved"),
        "{approved}"
    );
    let deployed = mcp.answer("deploy");
    assert_eq!(deployed["is_error"], false, "{deployed}");
    assert_eq!(deployed["text"], "saw: ran", "{deployed}");
    assert_eq!(runs(&home), 1, "the approved call ran once");
    let progress = deployed["progress"].as_array().unwrap();
    assert!(
        progress.iter().any(|m| m
            .as_str()
            .unwrap()
            .contains(&format!("waiting for approval {id}"))),
        "{deployed}"
    );
    // Answered once: a second answer is the daemon's refusal, one line.
    let again = mcp.call(
        "again",
        "answer_approval",
        json!({"id": id, "approve": false}),
    );
    assert_eq!(again["is_error"], true, "{again}");
    assert!(
        !again["text"].as_str().unwrap().trim().contains('\n'),
        "{again}"
    );

    // A wait that ends before the answer: the message stays with the project, and the call
    // says what it waits for and where its answer will be; a denial then reaches the model.
    let before = mcp.ok("len", "read_log", json!({"project": "web", "since": -1}))["structured"]
        ["next"]
        .clone();
    let waited = mcp.ok(
        "release",
        "send_message",
        json!({"project": "web", "text": "release it", "wait": true, "timeout_s": 1}),
    );
    assert_eq!(waited["structured"]["answered"], false, "{waited}");
    assert!(
        waited["text"]
            .as_str()
            .unwrap()
            .starts_with("project web has not answered within 1 s; it has the message"),
        "{waited}"
    );
    let release = poll(WAIT, "the release's approval request", || {
        let a = mcp.ok("approvals2", "list_approvals", json!({"project": "web"}));
        a["structured"]["approvals"]
            .as_array()
            .unwrap()
            .first()
            .cloned()
    });
    let release_id = release["id"].as_str().unwrap();
    assert_eq!(release["summary"], "echo released >> runs.txt");
    let since = waited["structured"]["since"].as_u64().unwrap();
    assert!(since >= before.as_u64().unwrap(), "{waited}");
    let denied = mcp.ok(
        "deny",
        "answer_approval",
        json!({"id": release_id, "approve": false, "reason": "not today"}),
    );
    assert!(
        denied["text"].as_str().unwrap().contains("denied"),
        "{denied}"
    );
    poll(WAIT, "the denial to reach the model", || {
        let a = mcp.ok(
            "poll2",
            "read_log",
            json!({"project": "web", "since": since}),
        );
        a["text"]
            .as_str()
            .unwrap()
            .contains("saw: release denied")
            .then_some(())
    });
    assert_eq!(runs(&home), 1, "the denied call never ran");

    // Search finds the conversation; cost counts the calls.
    let found = mcp.ok(
        "search",
        "search",
        json!({"query": "where are you", "project": "web"}),
    );
    let hits = found["structured"]["hits"].as_array().unwrap();
    assert!(
        hits.iter()
            .any(|h| h["project"] == "web" && h["kind"] == "session"),
        "{found}"
    );
    let spent = mcp.ok("cost", "cost", json!({"project": "web"}));
    assert!(
        spent["structured"]["total"]["calls"].as_u64().unwrap() >= 3,
        "{spent}"
    );
    assert!(
        spent["text"].as_str().unwrap().starts_with("total $"),
        "{spent}"
    );

    // The MainAgent is reached as `chat` reaches it.
    let main = mcp.ok(
        "main",
        "send_message",
        json!({"project": "main", "text": "how are things?"}),
    );
    assert_eq!(main["text"], "noted", "{main}");

    // Refusals: one line each, the daemon's own words, as tool errors.
    let unknown = mcp.call(
        "unknown",
        "send_message",
        json!({"project": "nope", "text": "hi", "wait": true}),
    );
    assert_eq!(unknown["is_error"], true, "{unknown}");
    let line = unknown["text"].as_str().unwrap();
    assert!(line.contains("project nope not found"), "{line}");
    assert_eq!(line.lines().count(), 1, "{line}");
    let typo = mcp.call("typo", "list_tasks", json!({"project": "wbe"}));
    assert_eq!(typo["is_error"], true, "{typo}");
    assert!(
        typo["text"].as_str().unwrap().contains("did you mean web?"),
        "{typo}"
    );
    let bad = mcp.call(
        "bad",
        "answer_approval",
        json!({"id": "rm -rf", "approve": true}),
    );
    assert_eq!(bad["is_error"], true, "{bad}");
    assert!(
        bad["text"]
            .as_str()
            .unwrap()
            .contains("is not an approval id"),
        "{bad}"
    );

    mcp.finish();
}

/// The protocol itself, spoken raw over the pipes as a client would: every version a current
/// client sends is accepted as it is, `ping` is answered, an unknown method gets JSON-RPC's
/// error, a tool call without a daemon is a one-line tool error, and the end of stdin ends the
/// server cleanly. Nothing but JSON-RPC ever reaches stdout.
#[test]
fn the_raw_protocol_negotiates_the_version_and_ends_with_its_input() {
    let home = Home::new();
    for version in ["2025-06-18", "2025-03-26", "2024-11-05", "2025-11-25"] {
        let requests = [
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": version, "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"}}}),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}),
            json!({"jsonrpc": "2.0", "id": 3, "method": "no/such/method"}),
            json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list"}),
            json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {
                "name": "send_message", "arguments": {"project": "web", "text": "hi"}}}),
            json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {
                "name": "list_projects", "arguments": {}}}),
        ];
        let mut child = Command::new(PEGASUSCTL)
            .arg("--home")
            .arg(home.path())
            .arg("mcp")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        for r in &requests {
            writeln!(stdin, "{r}").unwrap();
        }
        // The answers come, then the end of stdin ends the server by itself.
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut answers = std::collections::HashMap::new();
        let mut lines = stdout.lines();
        while answers.len() < 6 {
            let line = lines.next().expect("an answer line").unwrap();
            let v: Value = serde_json::from_str(&line).expect("only JSON-RPC on stdout");
            assert_eq!(v["jsonrpc"], "2.0", "{v}");
            if let Some(id) = v["id"].as_u64() {
                answers.insert(id, v);
            }
        }
        drop(stdin);
        let status = poll(
            WAIT,
            "pegasusctl mcp to exit at the end of its input",
            || child.try_wait().unwrap(),
        );
        assert!(status.success(), "{version}: {status}");

        let init = &answers[&1]["result"];
        assert_eq!(init["protocolVersion"], version, "{init}");
        assert_eq!(init["serverInfo"]["name"], "pegasus");
        assert!(init["capabilities"]["tools"].is_object(), "{init}");
        assert_eq!(answers[&2]["result"], json!({}));
        assert_eq!(answers[&3]["error"]["code"], -32601, "{:?}", answers[&3]);
        assert_eq!(answers[&4]["result"]["tools"].as_array().unwrap().len(), 9);
        let refused = &answers[&5]["result"];
        assert_eq!(refused["isError"], true, "{refused}");
        let text = refused["content"][0]["text"].as_str().unwrap();
        assert!(text.starts_with("pegasusd is not running on"), "{text}");
        assert_eq!(text.lines().count(), 1, "{text}");
        // Read-only tools work from the files while pegasusd is down.
        let listed = &answers[&6]["result"];
        assert_eq!(listed["isError"], false, "{listed}");
        assert_eq!(listed["structuredContent"]["projects"], json!([]));
    }
}

/// `pegasusctl mcp --help` says how to register it in Claude Code and Codex; the manual and
/// the completions, made from the same command line, know the verb.
#[test]
fn the_help_says_how_to_register_it() {
    let home = Home::new();
    let help = home.ctl_ok(&["mcp", "--help"]);
    assert!(
        help.contains("claude mcp add pegasus -- pegasusctl mcp"),
        "{help}"
    );
    assert!(help.contains("[mcp_servers.pegasus]"), "{help}");
    assert!(
        help.contains("codex mcp add pegasus -- pegasusctl mcp"),
        "{help}"
    );
    assert!(home.ctl_ok(&["man"]).contains("pegasusctl\\-mcp"));
    assert!(home.ctl_ok(&["completions", "bash"]).contains("mcp"));
}

/// Claude Code as the client (issue 35's "done"): with an MCP config naming `pegasusctl mcp`
/// (and the home in `PEGASUS_HOME`) and `--allowedTools "mcp__pegasus__*"`, its model (a fake
/// scripted to use the tools) lists Pegasus's pending approval, approves it, and the gated
/// command then runs in the project; then it sends the project a message and gets its answer.
/// Claude Code defers MCP tools behind its `ToolSearch`, so the script loads them first. Two
/// fakes: one is Pegasus's model, the other Claude Code's.
#[test]
fn claude_code_answers_an_approval_and_talks_to_a_project_through_pegasusctl_mcp() {
    let cc_fake = FakeLlm::start().unwrap();
    let Some(cc) = claude::Claude::new(&cc_fake) else {
        return;
    };
    let fake = fake();
    let home = fake_home(&fake, "approvals: {exec: ask}\n");
    let _d = home.start_fake();
    home.create("web");
    // A gated call waits for a person.
    home.ctl_ok(&["project", "send", "web", "deploy now"]);
    let request = poll(WAIT, "an approval request", || {
        let list = home.json(&["approvals"]);
        list.as_array()
            .filter(|a| a.len() == 1)
            .map(|a| a[0].clone())
    });
    let id = request["id"].as_str().unwrap().to_string();
    assert_eq!(runs(&home), 0);

    let tools =
        ["list_approvals", "answer_approval", "send_message"].map(|t| format!("mcp__pegasus__{t}"));
    cc_fake.require_api_key(Some(claude::API_KEY.into()));
    cc_fake.add_rule(
        Rule::new(
            Match::NewPrompt,
            Reply::Tools(vec![ToolCall::new(
                "ToolSearch",
                json!({"query": format!("select:{}", tools.join(",")), "max_results": 5}),
            )]),
        )
        .times(1),
    );
    cc_fake.add_rule(
        Rule::new(
            Match::LastToolResultContains("mcp__pegasus__answer_approval".into()),
            Reply::Tools(vec![ToolCall::new(
                "mcp__pegasus__list_approvals",
                json!({}),
            )]),
        )
        .times(1),
    );
    // Only once the listing showed it: the request's id and its command line.
    cc_fake.add_rule(
        Rule::new(
            Match::All(vec![
                Match::LastToolResultContains(id.clone()),
                Match::LastToolResultContains("echo ran >> runs.txt".into()),
            ]),
            Reply::Tools(vec![ToolCall::new(
                "mcp__pegasus__answer_approval",
                json!({"id": id, "approve": true}),
            )]),
        )
        .times(1),
    );
    cc_fake.add_rule(
        Rule::new(
            Match::LastToolResultContains("approved".into()),
            Reply::Tools(vec![ToolCall::new(
                "mcp__pegasus__send_message",
                json!({"project": "web", "text": "where are you, from Claude Code?", "wait": true}),
            )]),
        )
        .times(1),
    );
    cc_fake.add_rule(Rule::new(
        Match::LastToolResultContains("answered through pegasusd".into()),
        Reply::Text("Approved; web says: answered through pegasusd".into()),
    ));

    let config = cc.home().join("mcp.json");
    let spec = json!({"mcpServers": {"pegasus": {
        "command": PEGASUSCTL, "args": ["mcp"],
        "env": {"PEGASUS_HOME": home.path()}}}});
    std::fs::write(&config, spec.to_string()).unwrap();
    let run = cc
        .args([
            "--mcp-config",
            config.to_str().unwrap(),
            "--allowedTools",
            "mcp__pegasus__*",
        ])
        .run("Approve what Pegasus waits for, then ask the web project where it is.");

    assert_eq!(
        run.result_text(),
        Some("Approved; web says: answered through pegasusd"),
        "{}",
        run.dump()
    );
    assert!(
        cc_fake.violations().is_empty(),
        "{:?}",
        cc_fake.violations()
    );
    let called: Vec<&str> = run
        .tool_uses()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        called,
        [
            "ToolSearch",
            "mcp__pegasus__list_approvals",
            "mcp__pegasus__answer_approval",
            "mcp__pegasus__send_message"
        ],
        "{}",
        run.dump()
    );
    // The approved command ran in the project, once; nothing waits any more.
    poll(WAIT, "the approved command to run", || {
        (runs(&home) == 1).then_some(())
    });
    assert_eq!(home.json(&["approvals"]), json!([]));
    // The project got Claude Code's message and answered it, in its transcript.
    let log = home.ctl_ok(&["project", "log", "web"]);
    assert!(log.contains("where are you, from Claude Code?"), "{log}");
    assert!(log.contains("answered through pegasusd"), "{log}");
}
