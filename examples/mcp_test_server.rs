//! A small MCP server for tests and benchmarks (DESIGN.md §13), built on `rmcp`'s server side so no
//! Node or Python is needed: `cargo build --example mcp_test_server`, then run it with no
//! arguments; it speaks MCP over stdio.
//!
//! Tools: `echo{text}` (answers `echo: TEXT`, after a logging notification, so clients meet a
//! notification before the reply), `fail{}` (a tool-level error, `isError: true`),
//! `sleep{seconds}` (answers after sleeping: past a client's timeout it hangs),
//! `crash{}` (the process exits with status 3 before answering), `pid{}` (its process id),
//! `big{bytes}` (answers `big:`, then `x`s, then `end of big`, `bytes` long in all).
//! With `MCP_TEST_NO_HANDSHAKE=1` it never answers the handshake (a server that hangs at start).
//!
//! Hostile listings, for the limits on what a client accepts:
//! - `MCP_TEST_TOOLS=N`: N more tools, `gen_0` … (each answers `tool NAME answered`), each
//!   described as `Looks up widget I.` and `MCP_TEST_DESC_BYTES` more bytes (default 40);
//! - `MCP_TEST_NAMES=a.b,a_b`: more tools with exactly these names (names that collide once a
//!   client cleans them);
//! - `MCP_TEST_PAGE=K`: the list comes in pages of K tools (default: one page).
#![allow(clippy::unwrap_used, clippy::expect_used)]
// MCP logging is deprecated upstream (SEP-2577) but still what servers send before a reply.
#![allow(deprecated)]

use rmcp::{
    handler::server::{tool::ToolCallContext, wrapper::Parameters},
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
        LoggingLevel, LoggingMessageNotificationParam, PaginatedRequestParams, Tool,
    },
    schemars,
    service::RequestContext,
    tool, tool_handler, tool_router, ErrorData, Peer, RoleServer, ServerHandler, ServiceExt,
};

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct EchoArgs {
    /// What to echo.
    text: String,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct SleepArgs {
    /// Seconds to sleep before answering.
    seconds: u64,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct BigArgs {
    /// Bytes of the answer.
    bytes: usize,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct PathArgs {
    /// The file to try.
    path: String,
}

#[derive(Debug, Clone)]
struct TestServer {
    /// The tools of `MCP_TEST_TOOLS` and `MCP_TEST_NAMES`.
    extra: Vec<Tool>,
    /// `MCP_TEST_PAGE`: tools per page of the list (0: one page).
    page: usize,
}

impl TestServer {
    fn from_env() -> TestServer {
        let num = |key: &str, default: usize| {
            std::env::var(key)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(default)
        };
        let schema: serde_json::Map<String, serde_json::Value> =
            serde_json::from_value(serde_json::json!({"type": "object", "properties": {}}))
                .unwrap();
        let schema = std::sync::Arc::new(schema);
        let desc = "d".repeat(num("MCP_TEST_DESC_BYTES", 40));
        let mut extra: Vec<Tool> = (0..num("MCP_TEST_TOOLS", 0))
            .map(|i| {
                Tool::new(
                    format!("gen_{i}"),
                    format!("Looks up widget {i}. {desc}"),
                    schema.clone(),
                )
            })
            .collect();
        if let Ok(names) = std::env::var("MCP_TEST_NAMES") {
            for n in names.split(',').filter(|n| !n.is_empty()) {
                extra.push(Tool::new(
                    n.to_string(),
                    format!("the tool {n}"),
                    schema.clone(),
                ));
            }
        }
        TestServer {
            extra,
            page: num("MCP_TEST_PAGE", 0),
        }
    }
}

#[tool_router]
impl TestServer {
    #[tool(description = "Echo the text back")]
    async fn echo(
        &self,
        peer: Peer<RoleServer>,
        Parameters(EchoArgs { text }): Parameters<EchoArgs>,
    ) -> String {
        #[allow(deprecated)]
        let _ = peer
            .notify_logging_message(LoggingMessageNotificationParam::new(
                LoggingLevel::Info,
                serde_json::json!("echoing"),
            ))
            .await;
        format!("echo: {text}")
    }

    #[tool(description = "Always fails")]
    fn fail(&self) -> CallToolResult {
        CallToolResult::error(vec![ContentBlock::text("this tool always fails")])
    }

    #[tool(description = "Sleep, then answer")]
    async fn sleep(&self, Parameters(SleepArgs { seconds }): Parameters<SleepArgs>) -> String {
        tokio::time::sleep(std::time::Duration::from_secs(seconds)).await;
        format!("slept {seconds} s")
    }

    #[tool(description = "Exit the server process")]
    fn crash(&self) -> String {
        std::process::exit(3)
    }

    #[tool(description = "The server's process id")]
    fn pid(&self) -> String {
        std::process::id().to_string()
    }

    #[tool(description = "Try to write a file; says `wrote` or the error")]
    fn write(&self, Parameters(PathArgs { path }): Parameters<PathArgs>) -> String {
        match std::fs::write(&path, "mcp\n") {
            Ok(()) => format!("wrote {path}"),
            Err(e) => format!("cannot write {path}: {e}"),
        }
    }

    #[tool(description = "Try to read a file; says `read` or the error")]
    fn read(&self, Parameters(PathArgs { path }): Parameters<PathArgs>) -> String {
        match std::fs::read(&path) {
            Ok(b) => format!("read {path}: {} bytes", b.len()),
            Err(e) => format!("cannot read {path}: {e}"),
        }
    }

    #[tool(description = "Answer with this many bytes")]
    fn big(&self, Parameters(BigArgs { bytes }): Parameters<BigArgs>) -> String {
        let (head, tail) = ("big:", "end of big");
        let fill = bytes.saturating_sub(head.len() + tail.len());
        format!("{head}{}{tail}", "x".repeat(fill))
    }
}

#[tool_handler]
impl ServerHandler for TestServer {
    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut all = Self::tool_router().list_all();
        all.extend(self.extra.iter().cloned());
        if self.page == 0 {
            return Ok(ListToolsResult::with_all_items(all));
        }
        let start: usize = request
            .and_then(|r| r.cursor)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let end = (start + self.page).min(all.len());
        let mut result = ListToolsResult::with_all_items(all[start.min(end)..end].to_vec());
        result.next_cursor = (end < all.len()).then(|| end.to_string());
        Ok(result)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if self.extra.iter().any(|t| t.name == request.name) {
            let text = format!("tool {} answered", request.name);
            return Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into());
        }
        let router = Self::tool_router();
        router
            .call(ToolCallContext::new(self, request, context))
            .await
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    if std::env::var_os("MCP_TEST_NO_HANDSHAKE").is_some() {
        tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
        return;
    }
    let Ok(service) = TestServer::from_env().serve(rmcp::transport::stdio()).await else {
        std::process::exit(2);
    };
    let _ = service.waiting().await;
}
