//! The approval channel of a harness run (DESIGN.md §15): the harness's permission hook (Claude
//! Code's `PreToolUse`) runs `project-worker harness-hook`, which sends the call to the worker
//! over a loopback connection opened for that run alone (a random port and token, given in
//! the hook's environment) and prints the worker's verdict in the hook's output format. The
//! worker decides with the project's approval policy and, when it says ask, a person's answer
//! (CLI, dashboard, Telegram). Anything that goes wrong on the way is a denial: a call never
//! runs unasked, and nothing ever waits on a terminal.

use std::io::{BufRead, Read, Write};
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

/// The environment variable holding the listener's address (`127.0.0.1:PORT`).
pub const ADDR_ENV: &str = "PEGASUS_HARNESS_HOOK_ADDR";
/// The environment variable holding the run's token.
pub const TOKEN_ENV: &str = "PEGASUS_HARNESS_HOOK_TOKEN";
/// The subcommand of `project-worker` a hook runs.
pub const SUBCOMMAND: &str = "harness-hook";
/// The most a request on a run's channel may weigh (a tool call's input).
const MAX_LINE: u64 = 4 << 20;
/// The most an answer from the worker may weigh (an MCP server's tool list).
const MAX_ANSWER: u64 = 64 << 20;

/// What the hook asks.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Question {
    /// The run's token.
    pub token: String,
    /// The harness's tool (`Bash`, `Write`, `mcp__x__y`).
    pub tool: String,
    /// Its input.
    pub input: serde_json::Value,
    /// The harness's id for the call.
    pub call_id: String,
}

/// The worker's verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// Run it.
    pub allow: bool,
    /// Why not (what the harness's model is told).
    pub reason: String,
}

impl Verdict {
    /// Run it.
    pub fn allow() -> Verdict {
        Verdict {
            allow: true,
            reason: String::new(),
        }
    }

    /// Do not; the model is told `reason`.
    pub fn deny(reason: impl Into<String>) -> Verdict {
        Verdict {
            allow: false,
            reason: reason.into(),
        }
    }
}

/// How a harness's hook reaches the worker: the command it runs and its environment.
#[derive(Debug, Clone)]
pub struct HookCommand {
    /// The shell command line of the hook (`'/path/project-worker' harness-hook`).
    pub command: String,
    /// Its environment: [`ADDR_ENV`] and [`TOKEN_ENV`].
    pub env: Vec<(String, String)>,
    /// Seconds the harness should let the hook take at most (the approval timeout and a
    /// margin).
    pub timeout_s: u64,
}

/// Decides one call.
pub type Decide = Arc<
    dyn Fn(Question) -> std::pin::Pin<Box<dyn std::future::Future<Output = Verdict> + Send>>
        + Send
        + Sync,
>;

impl Tokened for Question {
    fn token(&self) -> &str {
        &self.token
    }
}

/// The listener of one run; dropping it stops listening (and drops the questions waiting).
pub struct HookServer {
    _channel: Loopback,
    /// What the harness is told.
    pub command: HookCommand,
}

impl HookServer {
    /// Listens on a free loopback port with a fresh token; each question is answered by
    /// `decide`.
    pub async fn start(decide: Decide, timeout_s: u64) -> Result<HookServer, String> {
        let channel = Loopback::start(
            "the harness's permission hook",
            move |q: Question| decide(q),
            |why| Verdict::deny(format!("not run: {why}")),
        )
        .await?;
        let command = format!("{} {SUBCOMMAND}", worker_program()?);
        let env = vec![
            (ADDR_ENV.to_string(), channel.addr.clone()),
            (TOKEN_ENV.to_string(), channel.token.clone()),
        ];
        Ok(HookServer {
            _channel: channel,
            command: HookCommand {
                command,
                env,
                timeout_s,
            },
        })
    }
}

/// This `project-worker` binary, quoted for a shell command line.
pub(crate) fn worker_program() -> Result<String, String> {
    let exe = std::env::current_exe()
        .map_err(|e| format!("cannot find the project-worker binary: {e}"))?;
    Ok(format!(
        "'{}'",
        exe.display().to_string().replace('\'', r"'\''")
    ))
}

/// A request on a run's loopback channel: it carries the run's token.
pub(crate) trait Tokened {
    /// The token it came with.
    fn token(&self) -> &str;
}

/// A loopback channel of one run (DESIGN.md §15): a listener on a free `127.0.0.1` port and a
/// fresh token; each connection carries one request line (JSON, with the token) and gets one
/// answer line. A request with a wrong token, or one that does not read, gets the `refuse`
/// answer and nothing else happens. Dropping it stops listening and drops the requests
/// waiting. Used by the permission hook and by the MCP proxies ([`super::mcp_proxy`]).
pub(crate) struct Loopback {
    task: tokio::task::JoinHandle<()>,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// The token every request must carry.
    pub token: String,
}

impl Drop for Loopback {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The answer to one request of a [`Loopback`] channel.
pub(crate) type Answering<A> = std::pin::Pin<Box<dyn std::future::Future<Output = A> + Send>>;

impl Loopback {
    /// Listens for `what` (named in errors); `answer` answers each request whose token is
    /// right, several at a time.
    pub(crate) async fn start<Q, A, F>(
        what: &'static str,
        answer: F,
        refuse: fn(String) -> A,
    ) -> Result<Loopback, String>
    where
        Q: DeserializeOwned + Tokened + Send + 'static,
        A: Serialize + Send + 'static,
        F: Fn(Q) -> Answering<A> + Send + Sync + 'static,
    {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| format!("cannot listen for {what}: {e}"))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let token = super::random_hex().ok_or("cannot read /dev/urandom for a token")?;
        let expected = token.clone();
        let answer = Arc::new(answer);
        let task = tokio::spawn(async move {
            loop {
                let stream = match listener.accept().await {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        // Out of descriptors, most likely: not a reason to spin.
                        tracing::warn!("the channel of {what} cannot accept: {e}");
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let (answer, expected) = (answer.clone(), expected.clone());
                tokio::spawn(async move {
                    let (read, mut write) = stream.into_split();
                    let mut line = String::new();
                    let mut reader =
                        tokio::io::BufReader::new(tokio::io::AsyncReadExt::take(read, MAX_LINE));
                    if reader.read_line(&mut line).await.is_err() {
                        return;
                    }
                    let reply = match serde_json::from_str::<Q>(&line) {
                        Ok(q) if token_matches(q.token(), &expected) => answer(q).await,
                        Ok(_) => refuse(format!("the token given for {what} is wrong")),
                        Err(e) => refuse(format!("unreadable request for {what} ({e})")),
                    };
                    if let Ok(mut text) = serde_json::to_string(&reply) {
                        text.push('\n');
                        let _ = write.write_all(text.as_bytes()).await;
                    }
                });
            }
        });
        Ok(Loopback {
            task,
            addr: addr.to_string(),
            token,
        })
    }
}

/// Whether `given` is the token, compared in time that does not depend on where they differ.
fn token_matches(given: &str, expected: &str) -> bool {
    given.len() == expected.len()
        && given
            .bytes()
            .zip(expected.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

/// Sends one request to a [`Loopback`] channel at `addr` and reads its answer (blocking: the
/// clients are small processes of their own).
pub(crate) fn ask<Q: Serialize, A: DeserializeOwned>(addr: &str, request: &Q) -> Result<A, String> {
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

/// `project-worker harness-hook`: reads Claude Code's `PreToolUse` input on stdin, asks the
/// worker, prints the verdict as Claude Code's hook output. Always exits 0 with a decision
/// (a failure is a denial saying why).
pub fn client_main() -> std::process::ExitCode {
    let verdict = ask_worker().unwrap_or_else(|why| {
        Verdict::deny(format!("not run: Pegasus could not be asked ({why})"))
    });
    let output = serde_json::json!({
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": if verdict.allow { "allow" } else { "deny" },
            "permissionDecisionReason": if verdict.allow { "allowed by Pegasus" } else { verdict.reason.as_str() },
        }
    });
    println!("{output}");
    std::process::ExitCode::SUCCESS
}

fn ask_worker() -> Result<Verdict, String> {
    let addr = std::env::var(ADDR_ENV).map_err(|_| format!("{ADDR_ENV} is not set"))?;
    let token = std::env::var(TOKEN_ENV).map_err(|_| format!("{TOKEN_ENV} is not set"))?;
    let mut input = String::new();
    std::io::stdin()
        .take(MAX_LINE)
        .read_to_string(&mut input)
        .map_err(|e| format!("cannot read the hook's input: {e}"))?;
    let hook: serde_json::Value =
        serde_json::from_str(&input).map_err(|e| format!("the hook's input is not JSON: {e}"))?;
    let question = Question {
        token,
        tool: hook["tool_name"].as_str().unwrap_or_default().to_string(),
        input: hook["tool_input"].clone(),
        call_id: hook["tool_use_id"].as_str().unwrap_or_default().to_string(),
    };
    ask(&addr, &question)
}
