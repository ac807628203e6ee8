//! A small MCP server for tests and benchmarks (SPEC §13), built on `rmcp`'s server side so no
//! Node or Python is needed: `cargo build --example mcp_test_server`, then run it with no
//! arguments; it speaks MCP over stdio.
//!
//! Tools: `echo{text}` (answers `echo: TEXT`, after a logging notification, so clients meet a
//! notification before the reply), `fail{}` (a tool-level error, `isError: true`),
//! `sleep{seconds}` (answers after sleeping: past a client's timeout it hangs),
//! `crash{}` (the process exits with status 3 before answering), `pid{}` (its process id).
//! With `MCP_TEST_NO_HANDSHAKE=1` it never answers the handshake (a server that hangs at start).
#![allow(clippy::unwrap_used, clippy::expect_used)]
// MCP logging is deprecated upstream (SEP-2577) but still what servers send before a reply.
#![allow(deprecated)]

use rmcp::{
    handler::server::wrapper::Parameters,
    model::{CallToolResult, ContentBlock, LoggingLevel, LoggingMessageNotificationParam},
    schemars, tool, tool_router, Peer, RoleServer, ServiceExt,
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

#[derive(Debug, Clone)]
struct TestServer;

#[tool_router(server_handler)]
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
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    if std::env::var_os("MCP_TEST_NO_HANDSHAKE").is_some() {
        tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
        return;
    }
    let Ok(service) = TestServer.serve(rmcp::transport::stdio()).await else {
        std::process::exit(2);
    };
    let _ = service.waiting().await;
}
