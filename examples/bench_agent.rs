//! The agent side's figures: `cargo run --release --example bench_agent [-- MODE]` (every mode
//! when none is named; build the binaries first with `cargo build --release --bins`, and
//! `mcp_test_server` for `mcp`: `cargo build --release --examples`). See docs/PERFORMANCE.md.
//!
//! * `proxy`: the latency a model call gains through pegasusd (p99 of paired differences), and
//!   the time to first token it gains.
//! * `session`: loading a 100,000-line session.
//! * `syncs`: fdatasyncs per model turn (strace on a real worker).
//! * `fairness`: 20 projects on 4 model slots.
//! * `code`: a code task's git work against the bare git commands.
//! * `mcp`: an MCP tool call against a built-in tool.
//!
//! For `proxy`, pegasusd runs this executable as the project's worker (`PEGASUS_WORKER_BIN`):
//! given a project folder, it links to pegasusd through the worker's own code
//! (`pegasus_worker::proxy_link`: the real handshake, `ProxyModel`, frame tasks and serve
//! state machine) and times its calls there.

mod support;

use pegasus_agent::{AgentSettings, ChatModel, ToolCtx, ToolSet};
use pegasus_fakellm::{Fault, Match, Reply, Rule, ToolCall};
use pegasus_llm::Gateway;
use pegasus_proto::{
    llm::{Block, CallMeta, ChatRequest, Message, Role},
    BusBody, WorkerEvent,
};
use pegasus_store::{Config, ContentBlock, Home, SessionMessage, SessionRecord};
use std::{
    collections::{BTreeMap, HashMap},
    io::{BufRead, Write},
    path::Path,
    process::{Command, ExitCode, Stdio},
    time::{Duration, Instant},
};
use support::{ms, pct, Bins, Daemon, Res, Stats};

fn main() -> ExitCode {
    if let Some(dir) = std::env::args_os().nth(1).map(std::path::PathBuf::from) {
        if dir.join("PROJECT.md").is_file() {
            return match worker_mode(&dir) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    let _ = std::fs::write(dir.join(PROXY_ERR), e.to_string());
                    ExitCode::from(1)
                }
            };
        }
    }
    // Before any thread: the in-process gateways read the fake provider's key from here.
    std::env::set_var(support::KEY_ENV, support::KEY);
    support::run_modes(
        "bench_agent",
        &[
            (
                "proxy",
                "latency and time to first token a call gains through pegasusd",
                proxy,
            ),
            ("session", "loading a 100,000-line session", session),
            ("syncs", "session fdatasyncs per model turn", syncs),
            ("fairness", "20 projects on 4 model slots", fairness),
            ("code", "a code task's git work against bare git", code),
            ("mcp", "an MCP tool call against a built-in tool", mcp),
        ],
    )
}

/// A chat call as a worker sends it: one user message, no tools, 64 tokens.
fn chat_request(model: &str, text: String, project: Option<String>) -> ChatRequest {
    ChatRequest {
        model: model.to_string(),
        system: "You are the agent of project bench. Answer briefly.".into(),
        messages: vec![Message {
            role: Role::User,
            content: vec![Block::Text { text }],
        }],
        tools: Vec::new(),
        max_tokens: 64,
        temperature: None,
        thinking: None,
        timeout_s: None,
        stream: false,
        meta: CallMeta {
            project,
            ..CallMeta::default()
        },
    }
}

/// A streamed call of the time to first token: the fake answers it event by event.
fn stream_request(model: &str, n: usize, project: Option<String>) -> ChatRequest {
    let mut r = chat_request(
        model,
        format!("Stream call {n}: tell a short story."),
        project,
    );
    r.stream = true;
    r.meta.task = Some(format!("ttft-{n}"));
    r
}

// ---------------------------------------------------------------------------------------------
// proxy

/// Timed calls per path, after `WARMUP` untimed ones; streamed calls and the fake's gap
/// between their events.
const CALLS: usize = 200;
const WARMUP: usize = 10;
const TTFT_CALLS: usize = 50;
const TTFT_GAP_MS: u64 = 5;
/// What the worker writes into its project folder: the timings (last, whole), or its error.
const PROXY_FILE: &str = "bench-proxy.json";
const PROXY_ERR: &str = "bench-proxy.err";

/// What the worker measured: µs per call through pegasusd and direct, alternating call by call;
/// and for each streamed call its number and the wall clock (µs) when it was sent.
#[derive(serde::Serialize, serde::Deserialize)]
struct WorkerTimes {
    proxy: Vec<f64>,
    direct: Vec<f64>,
    streamed: Vec<(usize, u64)>,
}

/// `CALLS` chat calls with an instant fake reply from a worker process through a real
/// pegasusd, alternating with the same call from a `Gateway` built in that process; the figure
/// is the p99 of the paired differences. Then `TTFT_CALLS` streamed calls, the fake pacing its
/// events 5 ms apart: from the worker sending the request to the call's first `TextDelta` at a
/// follower of the project's bus, against the first delta of a direct gateway call.
fn proxy(bins: &Bins, _: &[String]) -> Res<bool> {
    let paced = Rule::new(
        Match::LastUserTextContains("Stream call".into()),
        Reply::Fault(Fault::Paced {
            gap_ms: TTFT_GAP_MS,
            then: Box::new(Reply::Text(
                "Once upon a time a daemon streamed its answers.".into(),
            )),
        }),
    );
    let instant = Rule::new(Match::Any, Reply::Text("ok".into()));
    let extra = "agent: {reflection: false}";
    let (_fake, _tmp, home) = support::fake_home(vec![paced, instant], extra)?;
    let exe = std::env::current_exe()?;
    let exe = exe.to_str().ok_or("a path that is not UTF-8")?;
    let mut d = Daemon::start(bins, home.root(), &[("PEGASUS_WORKER_BIN", exe)])?;
    d.wait_serving()?;
    let events = support::follow(&home, Some("bench"))?;
    d.ctl(&[
        "project",
        "create",
        "bench",
        "--goal",
        "Benchmark the proxy",
    ])?;
    let dir = home.project_dir("bench");
    let times: WorkerTimes =
        support::poll(Duration::from_secs(300), "the worker's timings", || {
            if let Ok(e) = std::fs::read_to_string(dir.join(PROXY_ERR)) {
                return Some(Err(e));
            }
            let bytes = std::fs::read(dir.join(PROXY_FILE)).ok()?;
            Some(serde_json::from_slice(&bytes).map_err(|e| e.to_string()))
        })??;
    // The last deltas are on their way to the follower when the file appears.
    std::thread::sleep(Duration::from_millis(200));
    drop(d);
    let mut first_delta = HashMap::new();
    for a in events.try_iter() {
        if let BusBody::Worker(WorkerEvent::TextDelta { task: Some(t), .. }) = a.event.body {
            first_delta.entry(t).or_insert(a.unix_us);
        }
    }
    let ttft_proxy = (times.streamed.iter())
        .map(|(n, sent)| match first_delta.get(&format!("ttft-{n}")) {
            Some(at) => Ok(at.saturating_sub(*sent) as f64),
            None => Err(format!("the follower saw no delta of streamed call {n}")),
        })
        .collect::<Result<Vec<f64>, String>>()?;
    // The direct time to first token, here, on the same home, the daemon gone.
    let gw = Gateway::new(&home, &Config::load(&home.config_file())?)?;
    let model = gw.resolve_model("");
    let ttft_direct = support::runtime()?.block_on(async {
        let mut times = Vec::new();
        for n in 0..WARMUP + TTFT_CALLS {
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
            let (gw, req) = (gw.clone(), stream_request(&model, n, Some("bench".into())));
            let t = Instant::now();
            let call = tokio::spawn(async move { gw.chat(req, Some(tx)).await });
            rx.recv().await.ok_or("a streamed call sent no delta")?;
            let us = t.elapsed().as_secs_f64() * 1e6;
            call.await??;
            if n >= WARMUP {
                times.push(us);
            }
        }
        Res::Ok(times)
    })?;

    let paired: Vec<f64> = (times.proxy.iter().zip(&times.direct))
        .map(|(p, d)| p - d)
        .collect();
    let (p, dr) = (Stats::of(&times.proxy), Stats::of(&times.direct));
    println!(
        "  {CALLS} calls, instant reply: through pegasusd {} µs; direct {} µs",
        p.line(0),
        dr.line(0)
    );
    let gain = Stats::of(&paired);
    println!(
        "  gained, paired: median {:.0} µs, p25 {:.0}, p75 {:.0}",
        gain.median,
        pct(&paired, 25.0),
        pct(&paired, 75.0)
    );
    let mut t = support::Targets::default();
    let figure = format!("{:.0} µs", gain.p99);
    let ok = gain.p99 <= 1000.0;
    t.check("latency a proxied call gains, p99", figure, "≤ 1000 µs", ok);
    let (tp, td) = (Stats::of(&ttft_proxy), Stats::of(&ttft_direct));
    println!(
        "  {TTFT_CALLS} streamed calls, first token: at a bus follower {} µs; direct {} µs",
        tp.line(0),
        td.line(0)
    );
    let gained = tp.median - td.median;
    let figure = format!("{gained:.0} µs");
    let ok = gained <= 1000.0;
    t.check(
        "time to first token gained (medians)",
        figure,
        "≤ 1000 µs",
        ok,
    );
    Ok(t.met())
}

/// What pegasusd runs as the project's worker in `proxy`: links to it through the worker's own
/// code and times `CALLS` calls through it, each after the same call from a gateway of its own
/// (on a shadow home with this home's config and PROJECT.md, beside it on the same disk), then
/// the streamed calls; writes [`WorkerTimes`] into the project folder and exits.
fn worker_mode(dir: &Path) -> Res<()> {
    let dir = std::path::absolute(dir)?;
    let mut token = String::new();
    std::io::stdin().lock().read_line(&mut token)?;
    let home = pegasus_store::home_of_project(&dir).ok_or("the project is not in a home")?;
    let name = dir
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or("bad project folder")?;
    let shadow = tempfile::Builder::new()
        .prefix("pga-direct")
        .tempdir_in(home.root().parent().ok_or("the home has no parent")?)?;
    let shadow_home = Home::new(shadow.path());
    shadow_home.ensure_layout()?;
    std::fs::copy(home.config_file(), shadow_home.config_file())?;
    std::fs::create_dir_all(shadow_home.project_dir(name))?;
    std::fs::copy(
        dir.join("PROJECT.md"),
        shadow_home.project_dir(name).join("PROJECT.md"),
    )?;
    // pegasusd starts workers with a clean environment: the key comes from here.
    std::env::set_var(support::KEY_ENV, support::KEY);
    let gw = Gateway::new(&shadow_home, &Config::load(&shadow_home.config_file())?)?;
    let model_id = gw.resolve_model("");
    support::runtime()?.block_on(async {
        let model = pegasus_worker::proxy_link(&home, name, token.trim().to_string()).await?;
        let mut t = WorkerTimes {
            proxy: Vec::new(),
            direct: Vec::new(),
            streamed: Vec::new(),
        };
        for n in 0..WARMUP + CALLS {
            let text = || format!("Benchmark call {n}: please answer with one short sentence.");
            let started = Instant::now();
            gw.chat(
                chat_request(&model_id, text(), Some(name.to_string())),
                None,
            )
            .await?;
            let direct = started.elapsed().as_secs_f64() * 1e6;
            let started = Instant::now();
            model.chat(chat_request(&model_id, text(), None)).await?;
            if n >= WARMUP {
                t.direct.push(direct);
                t.proxy.push(started.elapsed().as_secs_f64() * 1e6);
            }
        }
        for n in 0..WARMUP + TTFT_CALLS {
            let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
            let sent = support::unix_us();
            model
                .chat_streaming(stream_request(&model_id, n, None), tx)
                .await?;
            if n >= WARMUP {
                t.streamed.push((n, sent));
            }
        }
        // Written whole, then renamed: the bench never reads half a file.
        let tmp = dir.join(format!("{PROXY_FILE}.tmp"));
        std::fs::write(&tmp, serde_json::to_vec(&t)?)?;
        std::fs::rename(&tmp, dir.join(PROXY_FILE))?;
        // Linked until pegasusd is gone: a link closed now would be a crash to it.
        let parent = nix::unistd::getppid();
        while nix::unistd::getppid() == parent {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Res::Ok(())
    })?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// session

const SESSION_LINES: usize = 100_000;
const LOADS: usize = 5;

/// `load_session` + `transcript::rebuild_owned` (what `Agent::open` runs) of a 100,000-line
/// session with a dangling tool call and a torn last line, median of 5.
fn session(_: &Bins, _: &[String]) -> Res<bool> {
    let dir = support::temp_home("pgs")?;
    let bytes = write_session(dir.path())?;
    let mut times = Vec::new();
    let mut last = None;
    for _ in 0..LOADS {
        let t = Instant::now();
        let mut loaded = pegasus_store::load_session(dir.path())?;
        let records = std::mem::take(&mut loaded.records);
        let n = records.len();
        let transcript = pegasus_agent::transcript::rebuild_owned(records);
        times.push(ms(t.elapsed()));
        last = Some((loaded, n, transcript.len()));
    }
    let (loaded, records, messages) = last.ok_or("no load")?;
    println!(
        "  {SESSION_LINES} lines, {:.1} MB (torn tail {}, {} dangling call repaired) → {records} records, {messages} transcript messages",
        bytes as f64 / 1e6,
        loaded.torn_tail,
        loaded.repaired_tool_uses
    );
    let t = Stats::of(&times);
    let (fig, ok) = (format!("{} ms", t.line(1)), t.median < 300.0);
    Ok(support::verdict(
        "100,000-line session load + rebuild",
        fig,
        "< 300 ms",
        ok,
    ))
}

/// The session: meta, then cycles of user text / assistant text + tool call / tool result /
/// assistant text, then a user message, a tool call left without its result and a user
/// message that came meanwhile (100,000 complete lines in all), then half a line.
fn write_session(project_dir: &Path) -> Res<u64> {
    use pegasus_store::Role as R;
    let path = pegasus_store::session_file(project_dir);
    std::fs::create_dir_all(path.parent().ok_or("no parent")?)?;
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path)?);
    let mut seed = 42u64;
    let mut words = |len: usize| {
        const W: &[&str] = &[
            "the", "build", "fails", "because", "module", "config", "test", "passes", "after",
            "renaming", "function", "worker", "session", "file", "needs", "a", "fix", "in",
        ];
        let mut s = String::new();
        while s.len() < len {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            if !s.is_empty() {
                s.push(' ');
            }
            s.push_str(W[(seed >> 33) as usize % W.len()]);
        }
        s
    };
    let text = |text: String| vec![ContentBlock::Text { text }];
    let msg = |role: R, content: Vec<ContentBlock>, n: usize| {
        let assistant = role == R::Assistant;
        SessionRecord::Message(SessionMessage {
            id: Some(format!("{}_{n:08}", if assistant { "msg" } else { "in" })),
            role,
            from: (role == R::User).then_some(pegasus_proto::Channel::Cli),
            content,
            model: assistant.then(|| "fa/m".to_string()),
            usage: assistant.then(|| {
                serde_json::json!({"input_tokens": 1200 + n % 500, "output_tokens": 80,
                                   "cache_read_tokens": 0, "cache_write_tokens": 0})
            }),
            ts: chrono::Utc::now(),
            client_id: None,
        })
    };
    let tool_use = |id: String, c: usize| ContentBlock::ToolUse {
        id,
        name: ["read_file", "list_dir", "write_file", "exec"][c % 4].into(),
        input: serde_json::json!({"path": format!("src/module_{}.rs", c % 97)}),
    };
    let mut records = vec![SessionRecord::Meta {
        version: pegasus_store::SESSION_VERSION,
        project: "bench".into(),
        created: chrono::Utc::now(),
    }];
    let cycles = (SESSION_LINES - 4) / 4;
    for c in 0..cycles {
        let id = format!("toolu_{c:010}");
        records.push(msg(R::User, text(words(200)), c));
        let mut said = text(words(120));
        said.push(tool_use(id.clone(), c));
        records.push(msg(R::Assistant, said, c));
        let result = ContentBlock::ToolResult {
            tool_use_id: id,
            content: words(200),
            is_error: false,
        };
        records.push(msg(R::Tool, vec![result], c));
        records.push(msg(R::Assistant, text(words(200)), c));
    }
    records.push(msg(R::User, text(words(200)), cycles));
    records.push(msg(
        R::Assistant,
        vec![tool_use("toolu_dangling".into(), 3)],
        cycles,
    ));
    records.push(msg(R::User, text(words(200)), cycles));
    assert_eq!(records.len(), SESSION_LINES);
    for r in &records {
        serde_json::to_writer(&mut f, r)?;
        f.write_all(b"\n")?;
    }
    // A crash in the middle of writing a tool result.
    f.write_all(
        br#"{"type":"message","id":null,"role":"tool","from":null,"content":[{"type":"tool_re"#,
    )?;
    f.flush()?;
    drop(f);
    Ok(std::fs::metadata(&path)?.len())
}

// ---------------------------------------------------------------------------------------------
// syncs

/// A real pegasusd and project-worker; the fake answers one message with a `list_dir` call,
/// then text. `strace -f -y` attached to the worker counts its sync calls: the session must be
/// synced once for the inbound message and once per model turn.
fn syncs(bins: &Bins, _: &[String]) -> Res<bool> {
    let list = Reply::Tools(vec![ToolCall::new(
        "list_dir",
        serde_json::json!({"path": "."}),
    )]);
    let rules = vec![
        Rule::new(Match::LastUserTextContains("list the files".into()), list).times(1),
        Rule::new(Match::Any, Reply::Text("There are no files yet.".into())),
    ];
    let (_fake, _tmp, home) = support::fake_home(rules, "agent: {reflection: false}")?;
    let mut d = Daemon::start(bins, home.root(), &[])?;
    d.wait_serving()?;
    d.ctl(&["project", "create", "sync", "--goal", "Count syncs"])?;
    d.wait_ready(1, Duration::from_secs(20))?;
    let show: serde_json::Value =
        serde_json::from_str(&d.ctl(&["--json", "project", "show", "sync"])?)?;
    let worker = show["worker_pid"].as_u64().ok_or("no worker pid")? as u32;
    let before = pegasus_store::load_session(&home.project_dir("sync"))?
        .records
        .len();
    let trace = home.root().join("worker.strace");
    let mut strace = strace(worker, &trace)?;
    d.ctl(&["project", "send", "sync", "list the files", "--wait"])?;
    // The task's last transition may land just after the reply.
    std::thread::sleep(Duration::from_millis(700));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(strace.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )?;
    strace.wait()?;
    let added = pegasus_store::load_session(&home.project_dir("sync"))?
        .records
        .split_off(before);
    let is_turn = |r: &SessionRecord| matches!(r, SessionRecord::Message(m) if m.role == pegasus_store::Role::Assistant);
    let turns = added.iter().filter(|r| is_turn(r)).count();
    let trace = std::fs::read_to_string(&trace)?;
    let syncs: Vec<&str> = trace.lines().filter(|l| l.contains("sync(")).collect();
    let session = syncs
        .iter()
        .filter(|l| l.contains("session/current.jsonl>"))
        .count();
    println!(
        "  the worker's sync calls while it answered: {}",
        syncs.len()
    );
    let (fig, ok) = (
        format!("{session} for 1 inbound message + {turns} turns"),
        turns > 0 && session == 1 + turns,
    );
    Ok(support::verdict(
        "session fdatasyncs per model turn",
        fig,
        "exactly 1",
        ok,
    ))
}

/// `strace` attached to `pid` and its threads, writing to `out`.
fn strace(pid: u32, out: &Path) -> Res<std::process::Child> {
    let err = out.with_extension("err");
    let child = Command::new("strace")
        .args(["-f", "-y", "-e", "trace=fdatasync,fsync,syncfs", "-o"])
        .arg(out)
        .args(["-p", &pid.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err)?)
        .spawn()?;
    let said = support::poll(Duration::from_secs(10), "strace to attach", || {
        let s = std::fs::read_to_string(&err).unwrap_or_default();
        (s.contains("attached") || s.contains("not permitted")).then_some(s)
    })?;
    if !said.contains("attached") {
        return Err(format!("strace cannot attach: {}", said.trim()).into());
    }
    Ok(child)
}

// ---------------------------------------------------------------------------------------------
// fairness

const PROJECTS: usize = 20;
const CALLS_PER_PROJECT: usize = 10;
const SLOTS: usize = 4;
const SERVICE_MS: u64 = 50;

/// 20 projects calling at once through one in-process `Gateway` (`max_concurrency` 4, every
/// answer delayed 50 ms), 10 calls each: calls in flight, and each project's total time.
fn fairness(_: &Bins, _: &[String]) -> Res<bool> {
    let delayed = Rule::new(
        Match::Any,
        Reply::Fault(Fault::Delay {
            ms: SERVICE_MS,
            then: Box::new(Reply::Text("ok".into())),
        }),
    );
    let extra = format!("llm: {{max_concurrency: {SLOTS}}}");
    let (_fake, _tmp, home) = support::fake_home(vec![delayed], &extra)?;
    let gw = Gateway::new(&home, &Config::load(&home.config_file())?)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let start = Instant::now();
    let totals = rt.block_on(async {
        let tasks: Vec<_> = (0..PROJECTS)
            .map(|p| {
                let gw = gw.clone();
                tokio::spawn(async move {
                    let t0 = Instant::now();
                    for n in 0..CALLS_PER_PROJECT {
                        let req =
                            chat_request("fa/m", format!("call {n}"), Some(format!("p{p:02}")));
                        gw.chat(req, None).await.map_err(|e| e.to_string())?;
                    }
                    Ok::<_, String>(ms(t0.elapsed()))
                })
            })
            .collect();
        let mut totals = Vec::new();
        for t in tasks {
            totals.push(t.await??);
        }
        Res::Ok(totals)
    })?;
    let wall = ms(start.elapsed());
    let ideal = (PROJECTS * CALLS_PER_PROJECT) as f64 * SERVICE_MS as f64 / SLOTS as f64;
    let stats = gw.stats();
    let t = Stats::of(&totals);
    println!(
        "  {} calls, at most {} in flight; wall {wall:.0} ms against an ideal {ideal:.0} ms; per project {} ms",
        stats.calls,
        stats.max_in_flight,
        t.line(0)
    );
    let (fig, ok) = (
        format!("{:.2}", t.max / t.median),
        stats.max_in_flight <= SLOTS && t.max <= 2.0 * t.median,
    );
    Ok(support::verdict(
        "slowest project ÷ median project",
        fig,
        "≤ 2",
        ok,
    ))
}

// ---------------------------------------------------------------------------------------------
// code

const FILES: usize = 10_000;
const ROUNDS: usize = 7;

/// On a fresh 10,000-file repository, one code task's whole git life, alternating, 7 rounds
/// each (after one of each untimed): through `pegasus-code` as the worker runs it (worktree,
/// hydrate, commit, base merged in, verify, safe merge, cleanup; hydrate and verify `true`),
/// and as the bare git commands a careful human would type for the same result.
fn code(_: &Bins, _: &[String]) -> Res<bool> {
    use pegasus_code::Repo;
    let tmp = support::temp_home("pgc")?;
    let root = tmp.path().join("repo");
    std::fs::create_dir_all(&root)?;
    git(&root, &["init", "-q", "-b", "main"])?;
    for i in 0..FILES {
        let dir = root.join(format!("d{:03}", i / 100));
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join(format!("f{i:05}.txt")), format!("file {i}\n"))?;
    }
    git(&root, &["add", "-A"])?;
    git(&root, &["commit", "-q", "-m", "10k files"])?;
    let repo = Repo::open("app", &root, "main")?;
    let (mut p, mut b) = (Vec::new(), Vec::new());
    for n in 0..=ROUNDS {
        let (bare, peg) = (bare_round(&root, n)?, pegasus_round(&repo, n)?);
        if n > 0 {
            b.push(ms(bare));
            p.push(ms(peg));
        }
    }
    let (p, b) = (Stats::of(&p), Stats::of(&b));
    println!(
        "  git {}",
        pegasus_code::git::check_version().unwrap_or_default()
    );
    println!("  pegasus  {} ms\n  bare git {} ms", p.line(0), b.line(0));
    let ratio = p.median / b.median;
    let (fig, ok) = (format!("{ratio:.2}×"), ratio <= 1.5);
    Ok(support::verdict(
        "code task's git work ÷ bare git",
        fig,
        "≤ 1.5×",
        ok,
    ))
}

fn git(dir: &Path, args: &[&str]) -> Res<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=b", "-c", "user.email=b@x"])
        .args(args)
        .env("LC_ALL", "C")
        .output()?;
    if !out.status.success() {
        return Err(format!("git {args:?}: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(String::from_utf8(out.stdout)?)
}

fn pegasus_round(repo: &pegasus_code::Repo, n: usize) -> Res<Duration> {
    use pegasus_code::{worktree, MergeOutcome};
    let id = format!("p{n}");
    let checks = pegasus_code::Checks {
        hydrate: Some("true".into()),
        verify: vec!["true".into()],
        timeout: Duration::from_secs(60),
        output_cap: 64 * 1024,
        env_file: ".env".into(),
        sandbox: None,
    };
    let t = Instant::now();
    let start = repo.base_commit()?.ok_or("no base commit")?;
    let tree = worktree::create(repo, &id, "bench", &start, ".env")?;
    let hydrated =
        pegasus_code::run_shell("true", &tree.path, checks.timeout, checks.output_cap, None);
    std::fs::write(tree.path.join(format!("d000/new-{id}.txt")), "x\n")?;
    worktree::commit_all(&tree.path, "task")?.ok_or("nothing committed")?;
    worktree::merge_base_in(&tree.path, &repo.base_ref(), true)?;
    let verified = pegasus_code::run_checks(&checks, &tree.path, false);
    let merged =
        pegasus_code::safe_merge(std::slice::from_ref(repo), &id, "bench", "bench", &checks)?;
    worktree::remove(repo, &id, true)?;
    let took = t.elapsed();
    if !hydrated.ok || !verified.ok || !matches!(merged, MergeOutcome::Merged(_)) {
        return Err(format!("round {n} did not merge: {merged:?}").into());
    }
    Ok(took)
}

fn bare_round(root: &Path, n: usize) -> Res<Duration> {
    let branch = format!("bare/b{n}");
    let (wt, staging) = (
        root.join(format!("../bare-wt-{n}")),
        root.join(format!("../bare-staging-{n}")),
    );
    let (w, s) = (wt.to_str().ok_or("path")?, staging.to_str().ok_or("path")?);
    let sh_true = |dir: &Path| {
        Command::new("sh")
            .args(["-c", "true"])
            .current_dir(dir)
            .status()
    };
    let t = Instant::now();
    git(root, &["worktree", "add", "-q", "-b", &branch, w, "main"])?;
    sh_true(&wt)?;
    std::fs::write(wt.join(format!("d000/bare-{n}.txt")), "x\n")?;
    git(&wt, &["add", "-A"])?;
    git(&wt, &["commit", "-q", "-m", "task"])?;
    git(&wt, &["merge", "-q", "--no-edit", "main"])?;
    sh_true(&wt)?;
    git(root, &["worktree", "add", "-q", "--detach", s, "main"])?;
    git(
        &staging,
        &["merge", "-q", "--no-ff", "-m", "merge", &branch],
    )?;
    sh_true(&staging)?;
    sh_true(&staging)?;
    let head = git(&staging, &["rev-parse", "HEAD"])?;
    git(root, &["merge", "-q", "--ff-only", head.trim()])?;
    git(root, &["worktree", "remove", "--force", s])?;
    git(root, &["worktree", "remove", "--force", w])?;
    git(root, &["branch", "-D", "-q", &branch])?;
    Ok(t.elapsed())
}

// ---------------------------------------------------------------------------------------------
// mcp

const MCP_CALLS: usize = 1000;

struct NoModel;

impl ChatModel for NoModel {
    fn chat(&self, _: ChatRequest) -> pegasus_agent::ChatFuture<'_> {
        Box::pin(async { Err(pegasus_proto::llm::LlmError::Other("no model here".into())) })
    }
}

/// In one runtime like a worker's: `mcp__t__echo` of `examples/mcp_test_server` through the
/// worker's MCP hub (`pegasus_worker::mcp`: the `Tool` the agent calls → rmcp over the server's
/// stdio → the reply rendered for the model), alternating with the built-in `read_file` of a
/// small file through the same `Tool` interface, 1,000 calls each.
fn mcp(bins: &Bins, _: &[String]) -> Res<bool> {
    let server = bins.join("examples/mcp_test_server");
    if !server.is_file() {
        return Err(format!(
            "{} is missing: run `cargo build --release --examples`",
            server.display()
        )
        .into());
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let dir = tempfile::tempdir()?;
        std::fs::write(dir.path().join("small.txt"), "hello\n")?;
        let config = pegasus_store::McpServerConfig {
            command: server.display().to_string(),
            args: vec![],
            env: BTreeMap::new(),
            timeout_s: Some(30),
            eager: false,
            writable: vec![],
        };
        let servers = BTreeMap::from([("t".to_string(), config)]);
        let hub = pegasus_worker::mcp::McpHub::new(
            servers,
            dir.path(),
            dir.path(),
            None,
            None,
            pegasus_store::mcp::McpConfig::default(),
            200_000,
        );
        let t0 = Instant::now();
        let tools = ToolSet::project_tools().with(hub.tools(None).await.tools);
        let start = t0.elapsed();
        let (notices, _rx) = tokio::sync::mpsc::unbounded_channel();
        let ctx = ToolCtx {
            workdir: dir.path().to_path_buf(),
            memory_dir: dir.path().join("memory"),
            skill_dirs: vec![],
            notices,
            task_id: Some("bench".into()),
            depth: 0,
            settings: AgentSettings::default(),
            model: std::sync::Arc::new(NoModel),
            project_overview: String::new(),
            subagents_spawned: Default::default(),
            repos: vec![],
            approvals: None,
            offered: None,
            proposed: Default::default(),
            touched: Default::default(),
            hooks: None,
        };
        let echo = tools
            .get("mcp__t__echo")
            .ok_or("the echo tool is not offered")?;
        let read = tools.get("read_file").ok_or("no read_file")?;
        let (mut m, mut b) = (Vec::new(), Vec::new());
        for i in 0..50 + MCP_CALLS {
            let t = Instant::now();
            let out = echo.call(serde_json::json!({"text": "hi"}), &ctx).await;
            let echo_us = t.elapsed().as_secs_f64() * 1e6;
            let t = Instant::now();
            let read_out = read
                .call(serde_json::json!({"path": "small.txt"}), &ctx)
                .await;
            let read_us = t.elapsed().as_secs_f64() * 1e6;
            if out.content != "echo: hi" || read_out.is_error {
                return Err(format!("unexpected tool output: {}", out.content).into());
            }
            if i >= 50 {
                m.push(echo_us);
                b.push(read_us);
            }
        }
        let (m, b) = (Stats::of(&m), Stats::of(&b));
        println!(
            "  server start + handshake + tools/list: {:.1} ms",
            ms(start)
        );
        println!(
            "  mcp__t__echo {} µs\n  read_file    {} µs",
            m.line(0),
            b.line(0)
        );
        println!(
            "  an MCP tool call adds {:.0} µs (medians; no target)",
            m.median - b.median
        );
        Res::Ok(true)
    })
}
