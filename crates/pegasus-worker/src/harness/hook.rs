//! The approval channel of a harness run (DESIGN.md §15): the harness's permission hook (Claude
//! Code's `PreToolUse`) runs `project-worker harness-hook`, which sends the call to the worker
//! over a loopback connection opened for that run alone (a random port and token, given in
//! the hook's environment) and prints the worker's verdict in the hook's output format. The
//! worker decides with the project's approval policy and, when it says ask, a person's answer
//! (CLI, dashboard, Telegram). Anything that goes wrong on the way is a denial: a call never
//! runs unasked, and nothing ever waits on a terminal.
//!
//! On the connection, one line each: the hook's [`Question`]; the worker's [`HookReply`]; for an
//! allow, the hook's [`Receipt`] and the worker's final verdict, which alone lets the call run.
//! A person's approval counts as run only once the receipt came, and a hook that goes away
//! first (killed, ended by its harness's hook timeout, its run over) takes its question with
//! it: the request is withdrawn, or, if a person's answer won the race, closed unrun
//! (DESIGN.md §15, [`Handoff`]).

use std::io::{BufRead, Read, Write};
use std::sync::Arc;

use pegasus_agent::approvals::Handoff;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

/// The environment variable holding the listener's address (`127.0.0.1:PORT`).
pub const ADDR_ENV: &str = "PEGASUS_HARNESS_HOOK_ADDR";
/// The environment variable holding the run's token.
pub const TOKEN_ENV: &str = "PEGASUS_HARNESS_HOOK_TOKEN";
/// The subcommand of `project-worker` a hook runs.
pub const SUBCOMMAND: &str = "harness-hook";
/// The most a question or an answer may weigh.
const MAX_LINE: u64 = 4 << 20;

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

/// The line the worker answers the hook with: run the call, or not and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HookReply {
    /// Run it.
    pub allow: bool,
    /// Why not (what the harness's model is told).
    pub reason: String,
}

impl HookReply {
    /// Run it.
    pub fn allow() -> HookReply {
        HookReply {
            allow: true,
            reason: String::new(),
        }
    }

    /// Do not; the model is told `reason`.
    pub fn deny(reason: impl Into<String>) -> HookReply {
        HookReply {
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

/// What the worker rules on one call, before the hook has it in hand.
#[derive(Debug)]
pub enum Ruling {
    /// Run it (the policy allows it, or the project has no gate).
    Allow,
    /// A person approved it: it runs, and counts as run, once the hook confirms it has the
    /// verdict ([`Handoff::ran`]); dropped unconfirmed, the request closes without running.
    Approved(Handoff),
    /// Do not; the model is told this.
    Deny(String),
}

impl Ruling {
    /// The verdict sent first: an allow waits for the hook's [`Receipt`].
    fn verdict(&self) -> HookReply {
        match self {
            Ruling::Allow | Ruling::Approved(_) => HookReply::allow(),
            Ruling::Deny(why) => HookReply::deny(why.clone()),
        }
    }

    /// The final verdict of an allow, once the hook has it in hand.
    fn received(self) -> HookReply {
        match self {
            Ruling::Allow => HookReply::allow(),
            Ruling::Approved(handoff) => match handoff.ran() {
                Ok(()) => HookReply::allow(),
                Err(why) => HookReply::deny(why),
            },
            Ruling::Deny(why) => HookReply::deny(why),
        }
    }
}

/// The hook's receipt of an allowing verdict: only then does the call count as run, and only
/// the worker's second verdict, sent after it, lets it run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Receipt {
    /// Always `true`.
    pub received: bool,
}

/// Decides one call.
pub type Decide = Arc<
    dyn Fn(Question) -> std::pin::Pin<Box<dyn std::future::Future<Output = Ruling> + Send>>
        + Send
        + Sync,
>;

/// How long the worker waits for a hook's [`Receipt`]: it sends one as soon as it reads
/// the verdict.
const RECEIPT_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// The listener of one run. [`HookServer::close`] (or dropping it) stops listening and ends
/// the questions still open: each lets go of its request (DESIGN.md §15).
pub struct HookServer {
    accept: tokio::task::JoinHandle<()>,
    /// The open questions, one task each.
    calls: Arc<std::sync::Mutex<tokio::task::JoinSet<()>>>,
    /// What the harness is told.
    pub command: HookCommand,
}

impl Drop for HookServer {
    fn drop(&mut self) {
        self.accept.abort();
        lock(&self.calls).abort_all();
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl HookServer {
    /// Listens on a free loopback port with a fresh token; each question is answered by
    /// `decide`, one at a time (the agent does one thing at a time).
    pub async fn start(decide: Decide, timeout_s: u64) -> Result<HookServer, String> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| format!("cannot listen for the harness's permission hook: {e}"))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let token = super::random_hex().ok_or("cannot read /dev/urandom for a token")?;
        let exe = std::env::current_exe()
            .map_err(|e| format!("cannot find the project-worker binary: {e}"))?;
        let command = format!(
            "'{}' {SUBCOMMAND}",
            exe.display().to_string().replace('\'', r"'\''")
        );
        let calls = Arc::new(std::sync::Mutex::new(tokio::task::JoinSet::new()));
        let (expected, open) = (token.clone(), calls.clone());
        let accept = tokio::spawn(async move {
            let one_at_a_time = Arc::new(tokio::sync::Mutex::new(()));
            loop {
                let stream = match listener.accept().await {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        // Out of descriptors, most likely: not a reason to spin.
                        tracing::warn!("the harness's permission channel cannot accept: {e}");
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let mut open = lock(&open);
                while open.try_join_next().is_some() {}
                open.spawn(serve(
                    stream,
                    decide.clone(),
                    expected.clone(),
                    one_at_a_time.clone(),
                ));
            }
        });
        Ok(HookServer {
            accept,
            calls,
            command: HookCommand {
                command,
                env: vec![
                    (ADDR_ENV.to_string(), addr.to_string()),
                    (TOKEN_ENV.to_string(), token),
                ],
                timeout_s,
            },
        })
    }

    /// Stops listening and ends the questions still open, returning once each has let go of
    /// its request (withdrawn; held if the process is stopping).
    pub async fn close(mut self) {
        self.accept.abort();
        let _ = (&mut self.accept).await;
        let mut calls = std::mem::take(&mut *lock(&self.calls));
        calls.shutdown().await;
    }
}

/// One question over one connection: its verdict, and for an allow the hook's receipt and
/// the final verdict. The hook says nothing while it waits: its connection closing (the hook
/// killed, or ended by its harness) drops the decision, and the request is let go.
async fn serve(
    stream: tokio::net::TcpStream,
    decide: Decide,
    expected: String,
    one_at_a_time: Arc<tokio::sync::Mutex<()>>,
) {
    let (read, mut write) = stream.into_split();
    let mut reader = tokio::io::BufReader::new(tokio::io::AsyncReadExt::take(read, MAX_LINE));
    let mut line = String::new();
    let first = tokio::time::timeout(super::FIRST_LINE_WAIT, reader.read_line(&mut line)).await;
    if !matches!(first, Ok(Ok(_))) {
        return;
    }
    let ruling = match serde_json::from_str::<Question>(&line) {
        Ok(q) if super::token_matches(&q.token, &expected) => {
            let deciding = async {
                let _one = one_at_a_time.lock().await;
                decide(q).await
            };
            let mut byte = [0u8; 1];
            tokio::select! {
                ruling = deciding => ruling,
                // End of stream, an error, or a word out of turn: the hook is gone.
                _ = tokio::io::AsyncReadExt::read(&mut reader, &mut byte) => {
                    tracing::info!("the harness's permission hook went away while its call was decided");
                    return;
                }
            }
        }
        Ok(_) => Ruling::Deny("not run: the permission hook's token is wrong".into()),
        Err(e) => Ruling::Deny(format!("not run: unreadable permission question ({e})")),
    };
    let verdict = ruling.verdict();
    if !send(&mut write, &verdict).await || !verdict.allow {
        return;
    }
    line.clear();
    let receipt = tokio::time::timeout(RECEIPT_WAIT, reader.read_line(&mut line)).await;
    let received = matches!(receipt, Ok(Ok(n)) if n > 0)
        && serde_json::from_str::<Receipt>(&line).is_ok_and(|r| r.received);
    if !received {
        tracing::info!("the harness's permission hook went away before it had its allow");
        return;
    }
    send(&mut write, &ruling.received()).await;
}

/// Writes `verdict` as one line; whether it was written.
async fn send(write: &mut tokio::net::tcp::OwnedWriteHalf, verdict: &HookReply) -> bool {
    let Ok(mut text) = serde_json::to_string(verdict) else {
        return false;
    };
    text.push('\n');
    write.write_all(text.as_bytes()).await.is_ok()
}

/// `project-worker harness-hook`: reads Claude Code's `PreToolUse` input on stdin, asks the
/// worker, prints the verdict as Claude Code's hook output. Always exits 0 with a decision
/// (a failure is a denial saying why).
pub fn client_main() -> std::process::ExitCode {
    let verdict = ask_worker().unwrap_or_else(|why| {
        HookReply::deny(format!("not run: Pegasus could not be asked ({why})"))
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

fn ask_worker() -> Result<HookReply, String> {
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
    let mut stream = std::net::TcpStream::connect(&addr)
        .map_err(|e| format!("cannot reach the worker at {addr}: {e}"))?;
    let mut line = serde_json::to_string(&question).map_err(|e| e.to_string())?;
    line.push('\n');
    stream
        .write_all(line.as_bytes())
        .map_err(|e| format!("cannot ask the worker: {e}"))?;
    let mut reader = std::io::BufReader::new(
        stream
            .try_clone()
            .map_err(|e| format!("cannot read the worker's answer: {e}"))?
            .take(MAX_LINE),
    );
    let verdict = read_verdict(&mut reader)?;
    if !verdict.allow {
        return Ok(verdict);
    }
    // An allow counts once the worker knows it is here: it answers the receipt with the
    // final verdict.
    let mut receipt =
        serde_json::to_string(&Receipt { received: true }).map_err(|e| e.to_string())?;
    receipt.push('\n');
    stream
        .write_all(receipt.as_bytes())
        .map_err(|e| format!("cannot confirm the worker's answer: {e}"))?;
    read_verdict(&mut reader)
}

/// One verdict line from the worker.
fn read_verdict(reader: &mut impl BufRead) -> Result<HookReply, String> {
    let mut answer = String::new();
    match reader.read_line(&mut answer) {
        Ok(0) => return Err("the worker closed the connection without an answer".into()),
        Ok(_) => {}
        Err(e) => return Err(format!("no answer from the worker: {e}")),
    }
    serde_json::from_str(&answer).map_err(|e| format!("unreadable answer from the worker: {e}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use pegasus_agent::Approvals;
    use pegasus_approvals::{self as store, Answer, ApprovalRequest, Decision, RequestState};
    use pegasus_proto::TaskState;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;
    use tokio::io::AsyncReadExt;

    /// A project whose PROJECT.md asks before every exec, a task of it running, its gate, and
    /// a hook server deciding with it as a harness's run does.
    struct Fixture {
        _tmp: tempfile::TempDir,
        projects: std::path::PathBuf,
        dir: std::path::PathBuf,
        task: String,
        tasks: pegasus_tasks::TaskStore,
        gate: Arc<Approvals>,
        stop: Arc<AtomicBool>,
        server: HookServer,
    }

    impl Fixture {
        async fn new() -> Fixture {
            let tmp = tempfile::tempdir().unwrap();
            let projects = tmp.path().join("projects");
            let dir = projects.join("demo");
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(
                dir.join("PROJECT.md"),
                "---\nname: demo\nstatus: active\ncreated: 2026-02-28T10:00:00Z\napprovals: {exec: ask}\n---\nA demo.\n",
            )
            .unwrap();
            let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
            let desk = pegasus_agent::Desk::open(&dir, "demo", tx).unwrap();
            let tasks = desk.board.store().clone();
            let spec = serde_json::from_value(serde_json::json!({"goal": "g"})).unwrap();
            let task = tasks
                .create_frozen(
                    pegasus_tasks::NewTask {
                        title: "t".into(),
                        ..Default::default()
                    },
                    spec,
                    TaskState::Running,
                    "test",
                    "test",
                )
                .unwrap()
                .id;
            let stop = desk.stop.clone();
            let gate = Arc::new(Approvals::new(&desk, Default::default()));
            let server = HookServer::start(
                super::super::runner::decider(Some(gate.clone()), "Claude Code", task.clone()),
                60,
            )
            .await
            .unwrap();
            Fixture {
                _tmp: tmp,
                projects,
                dir,
                task,
                tasks,
                gate,
                stop,
                server,
            }
        }

        /// A hook's connection that asked to run `command` in the shell.
        async fn ask(&self, command: &str) -> tokio::net::TcpStream {
            let env = |k: &str| {
                let (_, v) = self
                    .server
                    .command
                    .env
                    .iter()
                    .find(|(n, _)| n == k)
                    .unwrap();
                v.clone()
            };
            let mut stream = tokio::net::TcpStream::connect(env(ADDR_ENV)).await.unwrap();
            let question = Question {
                token: env(TOKEN_ENV),
                tool: "Bash".into(),
                input: serde_json::json!({"command": command}),
                call_id: "toolu_1".into(),
            };
            let mut line = serde_json::to_string(&question).unwrap();
            line.push('\n');
            stream.write_all(line.as_bytes()).await.unwrap();
            stream
        }

        /// A hook's connection that asked to run `command`, a person's approval of it, and the
        /// first `allow` the hook reads.
        async fn approved(&self, command: &str) -> (tokio::net::TcpStream, ApprovalRequest) {
            let mut hook = self.ask(command).await;
            let r = self.pending().await;
            self.answer(&r.id, Decision::Approved { always: false })
                .unwrap();
            self.gate.wake();
            assert_eq!(verdict(&mut hook).await, HookReply::allow());
            (hook, r)
        }

        /// The request the hook's question wrote (there must be one soon).
        async fn pending(&self) -> ApprovalRequest {
            until("a pending request", || store::pending(&self.dir).pop()).await
        }

        fn answer(&self, id: &str, decision: Decision) -> Result<(), store::AnswerError> {
            let answer = Answer {
                decision,
                by: "cli".into(),
                at: chrono::Utc::now(),
            };
            store::answer(&self.dir, id, &answer)
        }

        /// The answer of request `id` once it is closed (it must be soon).
        async fn closed(&self, id: &str) -> Decision {
            until("the request closed", || {
                (store::read_state(&self.dir, id) == Some(RequestState::Closed))
                    .then(|| store::closed_answer(&self.projects, id))
                    .flatten()
            })
            .await
            .decision
        }

        /// Whether request `id` was marked as run.
        fn ran(&self, id: &str) -> bool {
            self.dir
                .join("approvals/closed")
                .join(format!("{id}.ran"))
                .exists()
        }

        fn task_state(&self) -> TaskState {
            self.tasks.get(&self.task).unwrap().state
        }
    }

    /// Polls `f` until it says something, for at most ten seconds.
    async fn until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(v) = f() {
                return v;
            }
            assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// One verdict line from the worker.
    async fn verdict(stream: &mut tokio::net::TcpStream) -> HookReply {
        let mut line = Vec::new();
        let mut byte = [0u8; 1];
        while stream.read(&mut byte).await.unwrap() == 1 && byte[0] != b'\n' {
            line.push(byte[0]);
        }
        serde_json::from_slice(&line).unwrap()
    }

    #[tokio::test]
    async fn a_hook_gone_while_its_call_waits_withdraws_the_request() {
        let fx = Fixture::new().await;
        let hook = fx.ask("rm -rf build").await;
        let r = fx.pending().await;
        assert_eq!(fx.task_state(), TaskState::Blocked);
        drop(hook);
        match fx.closed(&r.id).await {
            Decision::Withdrawn { why } => {
                assert_eq!(why, "Claude Code stopped waiting for the answer")
            }
            d => panic!("{d:?}"),
        }
        assert!(!fx.ran(&r.id));
        // A later answer is refused: the request is closed, its answer stays.
        assert!(matches!(
            fx.answer(&r.id, Decision::Approved { always: false }),
            Err(store::AnswerError::NotFound)
        ));
        assert!(matches!(
            store::closed_answer(&fx.projects, &r.id).unwrap().decision,
            Decision::Withdrawn { .. }
        ));
        // The harness goes on without the call.
        assert_eq!(fx.task_state(), TaskState::Running);
    }

    #[tokio::test]
    async fn an_approval_counts_as_run_once_the_hook_has_it_in_hand() {
        let fx = Fixture::new().await;
        let (mut hook, r) = fx.approved("make").await;
        // Not before the receipt.
        assert!(
            store::read_state(&fx.dir, &r.id) == Some(RequestState::Approved { always: false }),
            "not marked before the receipt"
        );
        let mut receipt = serde_json::to_string(&Receipt { received: true }).unwrap();
        receipt.push('\n');
        hook.write_all(receipt.as_bytes()).await.unwrap();
        assert_eq!(verdict(&mut hook).await, HookReply::allow());
        assert!(matches!(fx.closed(&r.id).await, Decision::Approved { .. }));
        assert!(fx.ran(&r.id));
        assert_eq!(fx.task_state(), TaskState::Running);
    }

    #[tokio::test]
    async fn an_approval_whose_hook_went_away_before_its_receipt_never_counts_as_run() {
        let fx = Fixture::new().await;
        let (hook, r) = fx.approved("make").await;
        drop(hook);
        // One state: approved, closed, not run.
        assert!(matches!(fx.closed(&r.id).await, Decision::Approved { .. }));
        assert!(!fx.ran(&r.id));
        assert_eq!(fx.task_state(), TaskState::Running);
    }

    /// The person answers at the instant the hook dies: whichever comes first wins, the
    /// request ends closed in that one state, and it never counts as run.
    #[tokio::test]
    async fn an_answer_racing_the_hooks_end_leaves_one_state_and_nothing_run() {
        for _ in 0..10 {
            let fx = Fixture::new().await;
            let hook = fx.ask("make").await;
            let r = fx.pending().await;
            let (dir, id) = (fx.dir.clone(), r.id.clone());
            let answering = tokio::task::spawn_blocking(move || {
                let answer = Answer {
                    decision: Decision::Approved { always: false },
                    by: "cli".into(),
                    at: chrono::Utc::now(),
                };
                store::answer(&dir, &id, &answer)
            });
            drop(hook);
            let answered = answering.await.unwrap();
            fx.gate.wake();
            let end = fx.closed(&r.id).await;
            match (&answered, &end) {
                (Ok(()), Decision::Approved { .. }) => {}
                (Err(store::AnswerError::Already(a)), Decision::Withdrawn { .. })
                    if a.decision == end => {}
                (Err(store::AnswerError::NotFound), Decision::Withdrawn { .. }) => {}
                _ => panic!("{answered:?} but closed as {end:?}"),
            }
            assert!(!fx.ran(&r.id));
            assert_eq!(fx.task_state(), TaskState::Running);
        }
    }

    #[tokio::test]
    async fn the_end_of_the_run_withdraws_a_waiting_call() {
        let fx = Fixture::new().await;
        let _hook = fx.ask("make").await;
        let r = fx.pending().await;
        let (dir, id) = (fx.dir.clone(), r.id.clone());
        let Fixture {
            server,
            projects,
            _tmp,
            ..
        } = fx;
        server.close().await;
        // Settled by the time the close returns.
        assert_eq!(store::read_state(&dir, &id), Some(RequestState::Closed));
        assert!(matches!(
            store::closed_answer(&projects, &id).unwrap().decision,
            Decision::Withdrawn { .. }
        ));
        drop(_tmp);
    }

    #[tokio::test]
    async fn a_call_waiting_when_the_process_stops_is_held() {
        let fx = Fixture::new().await;
        let hook = fx.ask("make").await;
        let r = fx.pending().await;
        fx.stop.store(true, Ordering::SeqCst);
        drop(hook);
        let Fixture {
            server,
            dir,
            gate,
            tasks,
            task,
            _tmp,
            ..
        } = fx;
        server.close().await;
        assert_eq!(store::read_state(&dir, &r.id), Some(RequestState::Pending));
        assert!(gate.holding());
        assert_eq!(tasks.get(&task).unwrap().state, TaskState::Blocked);
        drop(_tmp);
    }
}
