//! The project's MCP servers for a harness (DESIGN.md §15): the servers keep running in the
//! worker's [`McpHub`], contained as for the built-in agent, their `env` never seen by the
//! harness. The harness is given, for each server, a stdio MCP server of its own to start:
//! `project-worker mcp-proxy NAME`, which answers the MCP handshake itself and forwards
//! `tools/list` and `tools/call` to the worker over a loopback channel opened for the run
//! (a random port and token in the harness's environment, as for the permission hook).
//!
//! The token is as visible to the harness's model as the rest of its environment, so the
//! worker's end ([`McpEndpoint`]) trusts nothing it is sent: every call is put to the project's
//! approval policy there (ask: a person's answer; deny: refused), whatever the harness's own
//! hook did, and only tools the hub lists are called.

use std::io::{BufRead, Read, Write};
use std::sync::{Arc, Mutex};

use pegasus_agent::ToolOutput;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use super::hook::{Decide, Question, Ruling};
use crate::mcp::McpHub;

/// The subcommand of `project-worker` a harness starts for each MCP server.
pub const SUBCOMMAND: &str = "mcp-proxy";
/// The environment variable holding the channel's address (`127.0.0.1:PORT`).
pub const ADDR_ENV: &str = "PEGASUS_HARNESS_MCP_ADDR";
/// The environment variable holding the run's token for it.
pub const TOKEN_ENV: &str = "PEGASUS_HARNESS_MCP_TOKEN";
/// The MCP protocol versions the proxy speaks (it only serves tools, the same in all); the
/// client's is answered when it is one of them, else the last.
const PROTOCOL_VERSIONS: &[&str] = &["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];
/// JSON-RPC: the method is not one the proxy serves.
const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC: the request's parameters are wrong.
const INVALID_PARAMS: i64 = -32602;
/// JSON-RPC: the proxy could not answer (the worker could not be asked).
const INTERNAL_ERROR: i64 = -32603;
/// The most a request on the channel may weigh (a tool call's arguments).
const MAX_REQUEST: u64 = 4 << 20;
/// The most an answer from the worker may weigh (a server's tool list).
const MAX_ANSWER: u64 = 64 << 20;

/// A proxy's request to the worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpRequest {
    /// The run's token.
    pub token: String,
    /// The MCP server (its name in `mcp_servers`).
    pub server: String,
    /// What is asked.
    pub op: McpOp,
}

/// What a proxy asks of a server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum McpOp {
    /// Its tools.
    List,
    /// Call its tool `tool` (the part of `mcp__SERVER__TOOL` after the server).
    Call {
        /// The tool.
        tool: String,
        /// Its arguments.
        arguments: Value,
        /// The harness's id for the call, when it says it (Claude Code's tool-use id).
        call_id: Option<String>,
    },
}

/// The worker's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum McpAnswer {
    /// The server's tools.
    Tools {
        /// Each tool.
        tools: Vec<ProxyTool>,
    },
    /// A call's result (a refusal by the policy or a person is an error result).
    Result {
        /// What the model is shown.
        text: String,
        /// Whether the call failed or was not run.
        is_error: bool,
    },
    /// The request was not served (wrong token, unknown server).
    Refused {
        /// Why.
        reason: String,
    },
}

/// One tool as a proxy lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProxyTool {
    /// Its name after `mcp__SERVER__`.
    pub name: String,
    /// Its description.
    pub description: String,
    /// Its input schema.
    pub input_schema: Value,
}

/// How a harness starts the proxies of a run.
#[derive(Debug, Clone)]
pub struct McpCommand {
    /// The `project-worker` binary (its path).
    pub program: String,
    /// The servers, one proxy each (`program mcp-proxy NAME`).
    pub servers: Vec<String>,
    /// The proxies' environment ([`ADDR_ENV`], [`TOKEN_ENV`]), given to the harness, which
    /// passes it on to what it starts.
    pub env: Vec<(String, String)>,
    /// Seconds a proxy's first `tools/list` may take (it may start every server).
    pub list_timeout_s: u64,
    /// Seconds a call may take: a person's approval, then the server's own timeout.
    pub call_timeout_s: u64,
}

/// The worker's end of a run's MCP channel. [`McpEndpoint::close`] (or dropping it) stops
/// listening and ends the calls still open: a call waiting for its approval lets go of its
/// request (withdrawn, or held if the process is stopping), as a hook's does.
pub struct McpEndpoint {
    channel: Loopback,
    /// What the harness is told.
    pub command: McpCommand,
}

impl McpEndpoint {
    /// Serves `hub`'s servers for one run: a call is run only when `decide` (the project's
    /// approval policy, and a person when it asks, within `approval_s` seconds) allows it, its
    /// result cut to `max_bytes`.
    pub async fn start(
        hub: Arc<McpHub>,
        decide: Decide,
        approval_s: u64,
        max_bytes: usize,
    ) -> Result<McpEndpoint, String> {
        let servers = hub.server_names();
        let (all, longest) = hub.timeouts();
        let one_at_a_time = Arc::new(tokio::sync::Mutex::new(()));
        let channel = Loopback::start(move |q: McpRequest| -> Answering {
            let (hub, decide, one) = (hub.clone(), decide.clone(), one_at_a_time.clone());
            Box::pin(async move { answer(&hub, &decide, &one, max_bytes, q).await })
        })
        .await?;
        let program = std::env::current_exe()
            .map_err(|e| format!("cannot find the project-worker binary: {e}"))?
            .display()
            .to_string();
        let env = vec![
            (ADDR_ENV.to_string(), channel.addr.clone()),
            (TOKEN_ENV.to_string(), channel.token.clone()),
        ];
        Ok(McpEndpoint {
            channel,
            command: McpCommand {
                program,
                servers,
                env,
                list_timeout_s: all.as_secs() + 30,
                call_timeout_s: approval_s + longest.as_secs() + 30,
            },
        })
    }

    /// Stops listening and ends the calls still open, returning once each has let go of its
    /// request.
    pub async fn close(self) {
        self.channel.close().await;
    }
}

/// The answer to one request of the channel.
type Answering = std::pin::Pin<Box<dyn std::future::Future<Output = McpAnswer> + Send>>;

/// The channel of one run: a listener on a free `127.0.0.1` port and a fresh token; each
/// connection carries one [`McpRequest`] line and gets one [`McpAnswer`] line. A request with a
/// wrong token, or one that does not read, is refused and nothing else happens; a proxy that
/// goes away while its request is answered takes it with it (a call waiting for its approval
/// lets go of its request).
struct Loopback {
    accept: tokio::task::JoinHandle<()>,
    /// The open requests, one task each.
    open: Arc<Mutex<tokio::task::JoinSet<()>>>,
    /// `127.0.0.1:PORT`.
    addr: String,
    /// The token every request must carry.
    token: String,
}

impl Drop for Loopback {
    fn drop(&mut self) {
        self.accept.abort();
        lock(&self.open).abort_all();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Loopback {
    async fn start<F>(answer: F) -> Result<Loopback, String>
    where
        F: Fn(McpRequest) -> Answering + Send + Sync + 'static,
    {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| format!("cannot listen for the harness's MCP servers: {e}"))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let token = super::random_hex().ok_or("cannot read /dev/urandom for a token")?;
        let open = Arc::new(Mutex::new(tokio::task::JoinSet::new()));
        let (expected, tasks) = (token.clone(), open.clone());
        let answer = Arc::new(answer);
        let accept = tokio::spawn(async move {
            loop {
                let stream = match listener.accept().await {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        // Out of descriptors, most likely: not a reason to spin.
                        tracing::warn!("the harness's MCP channel cannot accept: {e}");
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let mut tasks = lock(&tasks);
                while tasks.try_join_next().is_some() {}
                tasks.spawn(serve(stream, answer.clone(), expected.clone()));
            }
        });
        Ok(Loopback {
            accept,
            open,
            addr: addr.to_string(),
            token,
        })
    }

    async fn close(mut self) {
        self.accept.abort();
        let _ = (&mut self.accept).await;
        let mut open = std::mem::take(&mut *lock(&self.open));
        open.shutdown().await;
    }
}

/// One request over one connection.
async fn serve(
    stream: tokio::net::TcpStream,
    answer: Arc<impl Fn(McpRequest) -> Answering>,
    expected: String,
) {
    let (read, mut write) = stream.into_split();
    let mut reader = tokio::io::BufReader::new(tokio::io::AsyncReadExt::take(read, MAX_REQUEST));
    let mut line = String::new();
    let first = tokio::time::timeout(super::FIRST_LINE_WAIT, reader.read_line(&mut line)).await;
    if !matches!(first, Ok(Ok(_))) {
        return;
    }
    let reply = match serde_json::from_str::<McpRequest>(&line) {
        Ok(q) if super::token_matches(&q.token, &expected) => {
            let mut byte = [0u8; 1];
            tokio::select! {
                reply = answer(q) => reply,
                // End of stream, an error, or a word out of turn: the proxy is gone.
                _ = tokio::io::AsyncReadExt::read(&mut reader, &mut byte) => {
                    tracing::info!("a harness's MCP proxy went away while its request was answered");
                    return;
                }
            }
        }
        Ok(_) => McpAnswer::Refused {
            reason: "the token given for the harness's MCP servers is wrong".into(),
        },
        Err(e) => McpAnswer::Refused {
            reason: format!("unreadable request for the harness's MCP servers ({e})"),
        },
    };
    if let Ok(mut text) = serde_json::to_string(&reply) {
        text.push('\n');
        let _ = write.write_all(text.as_bytes()).await;
    }
}

/// Sends one request to the channel at `addr` and reads its answer (blocking: the proxy is a
/// small process of its own).
fn ask<Q: Serialize, A: DeserializeOwned>(addr: &str, request: &Q) -> Result<A, String> {
    let mut stream = std::net::TcpStream::connect(addr)
        .map_err(|e| format!("cannot reach the worker at {addr}: {e}"))?;
    let mut line = serde_json::to_string(request).map_err(|e| e.to_string())?;
    line.push('\n');
    stream
        .write_all(line.as_bytes())
        .map_err(|e| format!("cannot ask the worker: {e}"))?;
    let mut answer = String::new();
    std::io::BufReader::new(stream.take(MAX_ANSWER))
        .read_line(&mut answer)
        .map_err(|e| format!("no answer from the worker: {e}"))?;
    serde_json::from_str(&answer).map_err(|e| format!("unreadable answer from the worker: {e}"))
}

/// The name a harness gives tool `tool` of server `server`, and the policy matches.
fn full_name(server: &str, tool: &str) -> String {
    format!("mcp__{server}__{tool}")
}

/// Answers one request whose token was right.
async fn answer(
    hub: &McpHub,
    decide: &Decide,
    one_at_a_time: &tokio::sync::Mutex<()>,
    max_bytes: usize,
    q: McpRequest,
) -> McpAnswer {
    let server = q.server;
    match q.op {
        McpOp::List => match hub.harness_tools(&server).await {
            Ok(specs) => {
                let prefix = full_name(&server, "");
                McpAnswer::Tools {
                    tools: specs
                        .iter()
                        .filter_map(|s| {
                            Some(ProxyTool {
                                name: s.name.strip_prefix(&prefix)?.to_string(),
                                description: s.description.clone(),
                                input_schema: serde_json::from_str(&s.input_schema_json)
                                    .unwrap_or_else(|_| json!({"type": "object"})),
                            })
                        })
                        .collect(),
                }
            }
            Err(reason) => McpAnswer::Refused { reason },
        },
        McpOp::Call {
            tool,
            arguments,
            call_id,
        } => {
            let name = full_name(&server, &tool);
            // The policy is asked here, for every call: the token is no proof the harness's
            // hook ran (DESIGN.md §15). One call is decided at a time.
            let asking = one_at_a_time.lock().await;
            let ruling = decide(Question {
                token: String::new(),
                tool: name.clone(),
                input: arguments.clone(),
                call_id: call_id
                    .filter(|id| !id.is_empty())
                    .or_else(|| super::random_hex().map(|h| format!("mcp-{h}")))
                    .unwrap_or_default(),
            })
            .await;
            drop(asking);
            let refused = match ruling {
                Ruling::Allow => None,
                // A person's approval counts as run now: the worker runs it.
                Ruling::Approved(handoff) => handoff.ran().err(),
                Ruling::Deny(why) => Some(why),
            };
            if let Some(text) = refused {
                return McpAnswer::Result {
                    text,
                    is_error: true,
                };
            }
            let ToolOutput { content, is_error } =
                hub.harness_call(&server, &name, arguments, max_bytes).await;
            McpAnswer::Result {
                text: content,
                is_error,
            }
        }
    }
}

/// `project-worker mcp-proxy NAME`: serves MCP server `NAME` on stdio to the harness that
/// started it, each request forwarded to the worker. Exits when its input ends.
pub fn client_main(server: &str) -> std::process::ExitCode {
    let addr = std::env::var(ADDR_ENV).unwrap_or_default();
    let token = std::env::var(TOKEN_ENV).unwrap_or_default();
    let name = server.to_string();
    let proxy = Arc::new(Proxy {
        server: server.to_string(),
        forward: move |op: McpOp| -> Result<McpAnswer, String> {
            if addr.is_empty() || token.is_empty() {
                return Err(format!("{ADDR_ENV} and {TOKEN_ENV} are not set"));
            }
            ask(
                &addr,
                &McpRequest {
                    token: token.clone(),
                    server: name.clone(),
                    op,
                },
            )
        },
    });
    let out = Arc::new(Mutex::new(std::io::stdout()));
    let stdin = std::io::stdin();
    let mut calls = Vec::new();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let message = match serde_json::from_str::<Value>(&line) {
            Ok(m) => m,
            Err(_) if line.trim().is_empty() => continue,
            Err(e) => {
                send(
                    &out,
                    &error_reply(Value::Null, -32700, &format!("parse error: {e}")),
                );
                continue;
            }
        };
        // A call can wait for a person's approval: it is answered on its own thread, so the
        // harness's other requests (a ping, another server's list) are not held up.
        if message["method"] == "tools/call" {
            let (proxy, out) = (proxy.clone(), out.clone());
            calls.push(std::thread::spawn(move || {
                if let Some(reply) = proxy.handle(&message) {
                    send(&out, &reply);
                }
            }));
            continue;
        }
        if let Some(reply) = proxy.handle(&message) {
            send(&out, &reply);
        }
    }
    // A client may write its last request and close its end, then read the answer: the calls
    // in flight are answered first. (When the harness's run ends, the worker closes the
    // channel: a call still waiting for a person is then withdrawn.)
    for call in calls {
        let _ = call.join();
    }
    std::process::ExitCode::SUCCESS
}

fn send(out: &Mutex<std::io::Stdout>, message: &Value) {
    if let Ok(mut out) = out.lock() {
        let _ = writeln!(out, "{message}");
        let _ = out.flush();
    }
}

/// The MCP side of a proxy: what it answers to each message of the harness.
struct Proxy<F> {
    server: String,
    /// Asks the worker.
    forward: F,
}

impl<F: Fn(McpOp) -> Result<McpAnswer, String>> Proxy<F> {
    /// The reply to `message` (`None`: a notification, or a client's response, needs none).
    fn handle(&self, message: &Value) -> Option<Value> {
        let id = message.get("id").cloned()?;
        let Some(method) = message["method"].as_str() else {
            // A response to a request of ours: the proxy sends none.
            return None;
        };
        let params = &message["params"];
        Some(match method {
            "initialize" => {
                let asked = params["protocolVersion"].as_str().unwrap_or_default();
                let version = PROTOCOL_VERSIONS
                    .iter()
                    .find(|v| **v == asked)
                    .or(PROTOCOL_VERSIONS.last())
                    .copied()
                    .unwrap_or_default();
                ok_reply(
                    id,
                    json!({
                        "protocolVersion": version,
                        "capabilities": {"tools": {"listChanged": false}},
                        "serverInfo": {"name": self.server, "version": env!("CARGO_PKG_VERSION")},
                    }),
                )
            }
            "ping" => ok_reply(id, json!({})),
            "tools/list" => match (self.forward)(McpOp::List) {
                Ok(McpAnswer::Tools { tools }) => {
                    let tools: Vec<Value> = tools
                        .into_iter()
                        .map(|t| {
                            json!({
                                "name": t.name,
                                "description": t.description,
                                "inputSchema": t.input_schema,
                            })
                        })
                        .collect();
                    ok_reply(id, json!({ "tools": tools }))
                }
                Ok(other) => error_reply(id, INTERNAL_ERROR, &refusal(&self.server, other)),
                Err(why) => error_reply(
                    id,
                    INTERNAL_ERROR,
                    &format!(
                        "Pegasus could not be asked for {}'s tools ({why})",
                        self.server
                    ),
                ),
            },
            "tools/call" => {
                let Some(tool) = params["name"].as_str() else {
                    return Some(error_reply(id, INVALID_PARAMS, "tools/call needs a `name`"));
                };
                let arguments = match &params["arguments"] {
                    Value::Null => json!({}),
                    a => a.clone(),
                };
                let call_id = params["_meta"]["claudecode/toolUseId"]
                    .as_str()
                    .map(str::to_string);
                let (text, is_error) = match (self.forward)(McpOp::Call {
                    tool: tool.to_string(),
                    arguments,
                    call_id,
                }) {
                    Ok(McpAnswer::Result { text, is_error }) => (text, is_error),
                    Ok(other) => (refusal(&self.server, other), true),
                    Err(why) => (format!("not run: Pegasus could not be asked ({why})"), true),
                };
                ok_reply(
                    id,
                    json!({"content": [{"type": "text", "text": text}], "isError": is_error}),
                )
            }
            _ => error_reply(id, METHOD_NOT_FOUND, &format!("method not found: {method}")),
        })
    }
}

/// What an answer other than the one asked for says.
fn refusal(server: &str, answer: McpAnswer) -> String {
    match answer {
        McpAnswer::Refused { reason } => format!("not run: {reason}"),
        _ => format!("not run: the worker's answer about MCP server {server} does not fit"),
    }
}

fn ok_reply(id: Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

fn error_reply(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::collections::BTreeMap;

    /// What a test's worker was asked.
    type Asked = Arc<Mutex<Vec<McpOp>>>;

    /// A proxy whose worker answers with `answer` and records what it was asked.
    fn proxy(answer: McpAnswer) -> (Proxy<impl Fn(McpOp) -> Result<McpAnswer, String>>, Asked) {
        let asked = Arc::new(Mutex::new(Vec::new()));
        let seen = asked.clone();
        let proxy = Proxy {
            server: "t".into(),
            forward: move |op| {
                seen.lock().unwrap().push(op);
                Ok(answer.clone())
            },
        };
        (proxy, asked)
    }

    fn request(line: &str) -> Value {
        serde_json::from_str(line).unwrap()
    }

    #[test]
    fn the_handshake_and_a_list_are_answered_as_claude_code_asks_them() {
        let tools = McpAnswer::Tools {
            tools: vec![ProxyTool {
                name: "echo".into(),
                description: "Echo".into(),
                input_schema: json!({"type": "object", "properties": {"text": {"type": "string"}}}),
            }],
        };
        let (p, asked) = proxy(tools);
        // As Claude Code 2.1.332 sends them: a draft-spec probe, then the handshake.
        let probe = request(
            r#"{"jsonrpc":"2.0","id":"server-discover-probe-1","method":"server/discover","params":{}}"#,
        );
        let reply = p.handle(&probe).unwrap();
        assert_eq!(reply["id"], "server-discover-probe-1");
        assert_eq!(reply["error"]["code"], METHOD_NOT_FOUND);
        let init = request(
            r#"{"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"roots":{"listChanged":true}},"clientInfo":{"name":"claude-code","version":"2.1.332"}},"jsonrpc":"2.0","id":0}"#,
        );
        let reply = p.handle(&init).unwrap();
        assert_eq!(reply["id"], 0);
        assert_eq!(reply["result"]["protocolVersion"], "2025-11-25");
        assert_eq!(reply["result"]["serverInfo"]["name"], "t");
        assert!(reply["result"]["capabilities"]["tools"].is_object());
        // A version it does not know: its latest.
        let old = request(
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"1999-01-01"}}"#,
        );
        assert_eq!(
            p.handle(&old).unwrap()["result"]["protocolVersion"],
            *PROTOCOL_VERSIONS.last().unwrap()
        );
        // Notifications and responses get no reply; nothing is asked of the worker for them.
        let note = request(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        assert_eq!(p.handle(&note), None);
        let response = request(r#"{"jsonrpc":"2.0","id":5,"result":{}}"#);
        assert_eq!(p.handle(&response), None);
        let ping = request(r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#);
        assert_eq!(p.handle(&ping).unwrap()["result"], json!({}));
        assert!(asked.lock().unwrap().is_empty());
        let list = request(r#"{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{}}"#);
        let reply = p.handle(&list).unwrap();
        assert_eq!(reply["result"]["tools"][0]["name"], "echo");
        assert_eq!(
            reply["result"]["tools"][0]["inputSchema"]["properties"]["text"]["type"],
            "string"
        );
        assert_eq!(*asked.lock().unwrap(), vec![McpOp::List]);
    }

    #[test]
    fn a_call_is_forwarded_with_its_id_and_a_refusal_is_an_error_result() {
        let (p, asked) = proxy(McpAnswer::Result {
            text: "echo: hi".into(),
            is_error: false,
        });
        let call = request(
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"},"_meta":{"claudecode/toolUseId":"toolu_1"}}}"#,
        );
        let reply = p.handle(&call).unwrap();
        assert_eq!(
            reply["result"],
            json!({"content": [{"type": "text", "text": "echo: hi"}], "isError": false})
        );
        assert_eq!(
            asked.lock().unwrap()[0],
            McpOp::Call {
                tool: "echo".into(),
                arguments: json!({"text": "hi"}),
                call_id: Some("toolu_1".into()),
            }
        );
        let (p, _) = proxy(McpAnswer::Refused {
            reason: "the token given for it is wrong".into(),
        });
        let reply = p.handle(&call).unwrap();
        assert_eq!(reply["result"]["isError"], true);
        assert_eq!(
            reply["result"]["content"][0]["text"],
            "not run: the token given for it is wrong"
        );
        // No name: an error, nothing forwarded.
        let (p, asked) = proxy(McpAnswer::Tools { tools: vec![] });
        let bad = request(r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{}}"#);
        assert_eq!(p.handle(&bad).unwrap()["error"]["code"], INVALID_PARAMS);
        assert!(asked.lock().unwrap().is_empty());
        // The worker out of reach: the call is not run, and says why.
        let p = Proxy {
            server: "t".into(),
            forward: |_: McpOp| -> Result<McpAnswer, String> { Err("connection refused".into()) },
        };
        let reply = p.handle(&call).unwrap();
        assert_eq!(reply["result"]["isError"], true);
        assert!(reply["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("connection refused"));
    }

    /// A hub with one server `t` that cannot start.
    fn hub(dir: &std::path::Path) -> Arc<McpHub> {
        let server = pegasus_store::McpServerConfig {
            command: "/nonexistent/mcp-server".into(),
            args: vec![],
            env: BTreeMap::new(),
            timeout_s: Some(2),
            eager: false,
            writable: vec![],
        };
        McpHub::new(
            BTreeMap::from([("t".to_string(), server)]),
            dir,
            dir,
            None,
            None,
            pegasus_store::mcp::McpConfig::default(),
            128_000,
        )
    }

    /// A decision that denies with `deny`, or allows (`None`), and records what it was asked.
    fn deciding(deny: Option<&'static str>, asked: Arc<Mutex<Vec<String>>>) -> Decide {
        Arc::new(move |q: Question| {
            asked.lock().unwrap().push(q.tool.clone());
            Box::pin(async move {
                match deny {
                    Some(why) => Ruling::Deny(why.into()),
                    None => Ruling::Allow,
                }
            })
        })
    }

    #[tokio::test]
    async fn the_endpoint_checks_the_token_and_puts_every_call_to_the_policy() {
        let dir = tempfile::tempdir().unwrap();
        let asked = Arc::new(Mutex::new(Vec::new()));
        let hub = hub(dir.path());
        let endpoint = McpEndpoint::start(
            hub.clone(),
            deciding(Some("denied by policy: tools"), asked.clone()),
            60,
            4096,
        )
        .await
        .unwrap();
        let env: BTreeMap<String, String> = endpoint.command.env.iter().cloned().collect();
        let (addr, token) = (env[ADDR_ENV].clone(), env[TOKEN_ENV].clone());
        let call = |token: &str| McpRequest {
            token: token.to_string(),
            server: "t".into(),
            op: McpOp::Call {
                tool: "write".into(),
                arguments: json!({"path": "x"}),
                call_id: None,
            },
        };
        let ask = |request: McpRequest| {
            let addr = addr.clone();
            async move {
                tokio::task::spawn_blocking(move || super::ask::<_, McpAnswer>(&addr, &request))
                    .await
                    .unwrap()
                    .unwrap()
            }
        };
        // A wrong token: refused before anything is decided.
        let wrong = ask(call(&"0".repeat(token.len()))).await;
        assert!(
            matches!(&wrong, McpAnswer::Refused { reason } if reason.contains("token")),
            "{wrong:?}"
        );
        assert!(asked.lock().unwrap().is_empty());
        // The right one: the policy is asked, under the name the policy's globs match, and
        // its denial is the result (the server is never started).
        let denied = ask(call(&token)).await;
        assert_eq!(
            denied,
            McpAnswer::Result {
                text: "denied by policy: tools".into(),
                is_error: true
            }
        );
        assert_eq!(*asked.lock().unwrap(), vec!["mcp__t__write".to_string()]);
        assert_eq!(hub.status().await[0].state, "not started");
        // An unknown server is refused by name.
        let mut other = call(&token);
        other.server = "nope".into();
        other.op = McpOp::List;
        assert!(
            matches!(ask(other).await, McpAnswer::Refused { reason } if reason.contains("nope"))
        );
    }

    #[tokio::test]
    async fn an_allowed_call_reaches_the_hub() {
        let dir = tempfile::tempdir().unwrap();
        let asked = Arc::new(Mutex::new(Vec::new()));
        let hub = hub(dir.path());
        let decide = deciding(None, asked.clone());
        // Listing starts the server: it cannot, so it has no tools, and a call of a tool it
        // never listed is not made.
        let one = tokio::sync::Mutex::new(());
        let req = |op| McpRequest {
            token: String::new(),
            server: "t".into(),
            op,
        };
        let listed = answer(&hub, &decide, &one, 4096, req(McpOp::List)).await;
        assert_eq!(listed, McpAnswer::Tools { tools: vec![] });
        let call = McpOp::Call {
            tool: "echo".into(),
            arguments: json!({}),
            call_id: Some("c1".into()),
        };
        let called = answer(&hub, &decide, &one, 4096, req(call)).await;
        let McpAnswer::Result { text, is_error } = called else {
            panic!("{called:?}")
        };
        assert!(is_error && text.contains("has no tool"), "{text}");
        assert_eq!(*asked.lock().unwrap(), vec!["mcp__t__echo".to_string()]);
        let status = pegasus_store::mcp::read_mcp_status(dir.path());
        assert_eq!(status[0].state, "down", "{status:?}");
    }
}
