//! Streaming through pegasusd from a real model server: `cargo run --release --example
//! bench_llama [-- ROUNDS] [-k]` (10 timed rounds after one warm-up; `-k` keeps the home). Run
//! `scripts/llama-server --install-only` once first. See docs/PERFORMANCE.md.
//!
//! llama.cpp (`scripts/llama-server`: SmolLM2-135M, n_ctx 4096, `--ignore-eos` so every answer
//! runs to `max_tokens`), a recording TCP relay in this process between pegasusd and llama.cpp,
//! a real pegasusd on a temporary home whose provider `llama` is the relay, one project, and
//! `pegasusctl project log -f`, its stdout timestamped read by read (it prints each text delta
//! as it arrives, after `… `). Each round sends the same message with `project send --wait`,
//! then replays the exact request body the relay recorded straight to llama.cpp, and measures:
//!
//! * added time to first token: the follower's first delta − the first content chunk passing
//!   the relay;
//! * the ratio of (ledger completion tokens ÷ the follower's first → last delta) to (the
//!   replay's completion tokens ÷ its first → last content chunk).
//!
//! Targets: median ratio ≥ 0.98, median added TTFT ≤ 5 ms.
#![allow(clippy::unwrap_used)] // the relay's and the follower's mutexes

mod support;

use std::{
    collections::VecDeque,
    io::{Read, Write},
    net::TcpStream,
    os::unix::process::CommandExt,
    path::Path,
    process::{Child, Command, ExitCode, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};
use support::{ms, Bins, Daemon, Res, Stats};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const N_CTX: u32 = 4096;
const MAX_TOKENS: u32 = 256;
const WARMUP: usize = 1;
const PROJECT: &str = "bench";
const PROMPT: &str = "Tell me a long story about a lighthouse keeper who finds a map.";
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/llama-server");
/// How long the relay must see no call before a replay or a round.
const QUIET: Duration = Duration::from_millis(1500);
/// What `log -f` prints before the first delta of an answer.
const STREAM_MARK: &str = "… ";

fn main() -> ExitCode {
    let (mut rounds, mut keep) = (10, false);
    for arg in std::env::args().skip(1) {
        match arg.parse::<usize>() {
            Ok(n) if n > 0 => rounds = n,
            _ if arg == "-k" => keep = true,
            _ => {
                eprintln!("usage: bench_llama [ROUNDS] [-k]");
                return ExitCode::from(2);
            }
        }
    }
    support::main_of("bench_llama", |bins| run(bins, rounds, keep))
}

// ---------------------------------------------------------------------------------------------
// HTTP/1.1 and SSE, just enough to see where each message and each content chunk passes.

enum Http {
    Head(String),
    Data(Vec<u8>),
    End,
}

/// Where a parser is in a message's body.
#[derive(Clone, Copy)]
enum Body {
    Length(usize),
    ToEof,
    ChunkSize,
    Chunk(usize),
    Trailer,
}

/// One direction of an HTTP/1.1 connection (keep-alive: message after message), parsed
/// incrementally; `body` is `None` between messages.
struct HttpParser {
    buf: Vec<u8>,
    body: Option<Body>,
    response: bool,
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

impl HttpParser {
    fn new(response: bool) -> HttpParser {
        HttpParser {
            buf: Vec::new(),
            body: None,
            response,
        }
    }

    /// Takes `len` bytes and the `skip` after them off the buffer.
    fn take(&mut self, len: usize, skip: usize) -> Vec<u8> {
        let taken = self.buf[..len].to_vec();
        self.buf.drain(..len + skip);
        taken
    }

    fn line(&mut self) -> Option<String> {
        let end = find(&self.buf, b"\r\n")?;
        Some(String::from_utf8_lossy(&self.take(end, 2)).to_string())
    }

    fn feed(&mut self, bytes: &[u8], out: &mut Vec<Http>) {
        self.buf.extend_from_slice(bytes);
        loop {
            self.body = match self.body {
                None => {
                    let Some(end) = find(&self.buf, b"\r\n\r\n") else {
                        return;
                    };
                    let head = String::from_utf8_lossy(&self.take(end, 4)).to_string();
                    let header = |name: &str| {
                        head.lines().skip(1).find_map(|l| {
                            let (k, v) = l.split_once(':')?;
                            k.trim()
                                .eq_ignore_ascii_case(name)
                                .then(|| v.trim().to_ascii_lowercase())
                        })
                    };
                    let chunked =
                        header("transfer-encoding").is_some_and(|v| v.contains("chunked"));
                    let body = match (
                        chunked,
                        header("content-length").and_then(|v| v.parse().ok()),
                    ) {
                        (true, _) => Body::ChunkSize,
                        (false, Some(n)) => Body::Length(n),
                        (false, None) if self.response => Body::ToEof,
                        (false, None) => Body::Length(0),
                    };
                    out.push(Http::Head(head));
                    Some(body)
                }
                Some(Body::Length(0)) => {
                    out.push(Http::End);
                    None
                }
                Some(Body::ChunkSize) => {
                    let Some(line) = self.line() else { return };
                    match usize::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16) {
                        _ if line.is_empty() => Some(Body::ChunkSize), // the end of a chunk's data
                        Ok(0) => Some(Body::Trailer),
                        Ok(n) => Some(Body::Chunk(n)),
                        Err(_) => Some(Body::ToEof),
                    }
                }
                Some(Body::Trailer) => {
                    let Some(line) = self.line() else { return };
                    if !line.is_empty() {
                        continue;
                    }
                    out.push(Http::End);
                    None
                }
                Some(body) => {
                    let n = match body {
                        Body::Length(n) | Body::Chunk(n) => n,
                        _ => usize::MAX,
                    };
                    let len = n.min(self.buf.len());
                    if len == 0 {
                        return;
                    }
                    out.push(Http::Data(self.take(len, 0)));
                    Some(match body {
                        Body::Chunk(_) if len == n => Body::ChunkSize,
                        Body::Chunk(_) => Body::Chunk(n - len),
                        Body::Length(_) => Body::Length(n - len),
                        other => other,
                    })
                }
            };
        }
    }
}

/// What one streamed OpenAI-style answer carried, and when.
#[derive(Default, Clone)]
struct Sse {
    line: Vec<u8>,
    /// Arrival of the first and last chunks with content.
    first: Option<Instant>,
    last: Option<Instant>,
    chunks: usize,
    text: String,
    completion_tokens: Option<u64>,
    /// llama.cpp's own generation speed (`timings.predicted_per_second`).
    predicted_per_second: Option<f64>,
    /// The answer's `id` (the ledger's `request_id`).
    id: Option<String>,
}

impl Sse {
    fn feed(&mut self, bytes: &[u8], at: Instant) {
        for &b in bytes {
            if b != b'\n' {
                self.line.push(b);
                continue;
            }
            let line = String::from_utf8_lossy(&std::mem::take(&mut self.line)).to_string();
            let Some(data) = line.trim_end().strip_prefix("data:") else {
                continue;
            };
            let Ok(v) = serde_json::from_str::<serde_json::Value>(data.trim()) else {
                continue;
            };
            if let Some(c) = v["choices"][0]["delta"]["content"]
                .as_str()
                .filter(|c| !c.is_empty())
            {
                self.first.get_or_insert(at);
                self.last = Some(at);
                self.chunks += 1;
                self.text.push_str(c);
            }
            if let Some(id) = v["id"].as_str() {
                self.id.get_or_insert_with(|| id.to_string());
            }
            if let Some(n) = v["usage"]["completion_tokens"].as_u64() {
                self.completion_tokens = Some(n);
            }
            if let Some(x) = v["timings"]["predicted_per_second"].as_f64() {
                self.predicted_per_second = Some(x);
            }
        }
    }

    fn tokens(&self) -> u64 {
        self.completion_tokens.unwrap_or(self.chunks as u64)
    }

    /// Completion tokens per second from the first content chunk to the last.
    fn tokens_per_s(&self) -> f64 {
        match (self.first, self.last) {
            (Some(a), Some(b)) if b > a => self.tokens() as f64 / (b - a).as_secs_f64(),
            _ => f64::NAN,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The recording relay

/// One request that passed the relay, and its answer.
#[derive(Clone)]
struct Exchange {
    head: String,
    body: Vec<u8>,
    status: u16,
    sse: Sse,
    done: bool,
}

impl Exchange {
    fn path(&self) -> &str {
        self.head.split_whitespace().nth(1).unwrap_or("")
    }

    fn is_streamed_chat(&self) -> bool {
        self.head.starts_with("POST ")
            && self.path().ends_with("/chat/completions")
            && serde_json::from_slice::<serde_json::Value>(&self.body)
                .is_ok_and(|v| v["stream"] == true)
    }
}

type Log = Arc<Mutex<Vec<Exchange>>>;

fn status_of(head: &str) -> u16 {
    head.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Starts the relay to `upstream` on a thread of its own; its port and its log.
fn start_relay(upstream: u16) -> Res<(u16, Log)> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    listener.set_nonblocking(true)?;
    let log: Log = Arc::default();
    let relay_log = log.clone();
    let rt = support::runtime()?;
    std::thread::Builder::new()
        .name("relay".into())
        .spawn(move || {
            rt.block_on(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                    return;
                };
                while let Ok((client, _)) = listener.accept().await {
                    tokio::spawn(relay_conn(client, upstream, relay_log.clone()));
                }
            })
        })?;
    Ok((port, log))
}

async fn relay_conn(client: tokio::net::TcpStream, upstream: u16, log: Log) {
    let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await else {
        return;
    };
    let (_, _) = (client.set_nodelay(true), server.set_nodelay(true));
    let ((mut cr, mut cw), (mut sr, mut sw)) = (client.into_split(), server.into_split());
    // The log indices of this connection's requests whose answer has not begun.
    let queue: Arc<Mutex<VecDeque<usize>>> = Arc::default();
    let (up_log, up_queue) = (log.clone(), queue.clone());
    let up = async move {
        let (mut parser, mut current, mut events) = (HttpParser::new(false), None, Vec::new());
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n @ 1..) = cr.read(&mut buf).await {
            // Recorded before it is passed on: the answer cannot overtake it.
            parser.feed(&buf[..n], &mut events);
            for ev in events.drain(..) {
                match ev {
                    Http::Head(head) => {
                        current = Some(Exchange {
                            head,
                            body: Vec::new(),
                            status: 0,
                            sse: Sse::default(),
                            done: false,
                        })
                    }
                    Http::Data(d) => current
                        .iter_mut()
                        .for_each(|x| x.body.extend_from_slice(&d)),
                    Http::End => {
                        if let Some(x) = current.take() {
                            let mut log = up_log.lock().unwrap();
                            log.push(x);
                            up_queue.lock().unwrap().push_back(log.len() - 1);
                        }
                    }
                }
            }
            if sw.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = sw.shutdown().await;
    };
    let down = async move {
        let (mut parser, mut current, mut events) = (HttpParser::new(true), None, Vec::new());
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n @ 1..) = sr.read(&mut buf).await {
            let at = Instant::now();
            if cw.write_all(&buf[..n]).await.is_err() {
                break;
            }
            parser.feed(&buf[..n], &mut events);
            let mut log = log.lock().unwrap();
            for ev in events.drain(..) {
                match (ev, current) {
                    (Http::Head(head), _) => {
                        current = queue.lock().unwrap().pop_front();
                        current
                            .iter()
                            .for_each(|i| log[*i].status = status_of(&head));
                    }
                    (Http::Data(d), Some(i)) => log[i].sse.feed(&d, at),
                    (Http::End, Some(i)) => {
                        log[i].done = true;
                        current = None;
                    }
                    _ => {}
                }
            }
        }
        // An answer read to the end of the connection.
        if let Some(i) = current {
            log.lock().unwrap()[i].done = true;
        }
        let _ = cw.shutdown().await;
    };
    tokio::join!(up, down);
}

/// Sends `body` to llama.cpp's `path` directly (a connection of its own), reads the streamed
/// answer, every read timestamped.
fn replay(port: u16, path: &str, body: &[u8]) -> Res<Sse> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_secs(300)))?;
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n\
         accept: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(&[head.as_bytes(), body].concat())?;
    let (mut parser, mut sse, mut status) = (HttpParser::new(true), Sse::default(), 0);
    let (mut buf, mut events) = (vec![0u8; 64 * 1024], Vec::new());
    'read: while let Ok(n @ 1..) = s.read(&mut buf) {
        let at = Instant::now();
        parser.feed(&buf[..n], &mut events);
        for ev in events.drain(..) {
            match ev {
                Http::Head(h) => status = status_of(&h),
                Http::Data(d) => sse.feed(&d, at),
                Http::End => break 'read,
            }
        }
    }
    if status != 200 {
        return Err(format!("the direct replay got HTTP {status}").into());
    }
    Ok(sse)
}

// ---------------------------------------------------------------------------------------------
// The processes

/// A child killed on drop, with its process group.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let group = nix::unistd::Pid::from_raw(self.0.id() as i32);
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// llama.cpp's server, in a process group of its own; its port.
fn start_llama(log: &Path) -> Res<(Killed, u16)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let out = std::fs::File::create(log)?;
    let mut llama = Killed(
        Command::new(SCRIPT)
            .args([port.to_string(), N_CTX.to_string(), "--ignore-eos".into()])
            .stdin(Stdio::piped()) // it stops when this end closes
            .stdout(out.try_clone()?)
            .stderr(out)
            .process_group(0)
            .spawn()?,
    );
    let up = support::poll(
        Duration::from_secs(900),
        "llama.cpp to answer /health",
        || {
            if let Ok(Some(_)) = llama.0.try_wait() {
                return Some(false);
            }
            let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
            write!(
                s,
                "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            )
            .ok()?;
            let mut r = String::new();
            s.read_to_string(&mut r).ok()?;
            r.starts_with("HTTP/1.1 200").then_some(true)
        },
    )?;
    if !up {
        return Err(format!("llama.cpp exited:\n{}", std::fs::read_to_string(log)?).into());
    }
    Ok((llama, port))
}

/// What `log -f` printed, and the end offset and time of each read of it.
#[derive(Default)]
struct Follow {
    bytes: Vec<u8>,
    reads: Vec<(usize, Instant)>,
}

impl Follow {
    /// When the byte at `offset` arrived.
    fn time_of(&self, offset: usize) -> Option<Instant> {
        let i = self.reads.partition_point(|(end, _)| *end <= offset);
        self.reads.get(i).map(|(_, t)| *t)
    }
}

fn start_follower(bins: &Bins, home: &Path) -> Res<(Killed, Arc<Mutex<Follow>>)> {
    let mut child = Command::new(bins.join("pegasusctl"))
        .arg("--home")
        .arg(home)
        .args(["project", "log", "-f", PROJECT])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()?;
    let mut out = child.stdout.take().ok_or("no stdout")?;
    let follow: Arc<Mutex<Follow>> = Arc::default();
    let f = follow.clone();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n @ 1..) = out.read(&mut buf) {
            let at = Instant::now();
            let mut f = f.lock().unwrap();
            f.bytes.extend_from_slice(&buf[..n]);
            let end = f.bytes.len();
            f.reads.push((end, at));
        }
    });
    Ok((Killed(child), follow))
}

/// The completion tokens of the project's ledger line for the provider's request `id`.
fn ledger_tokens(home: &Path, id: Option<&str>) -> Option<u64> {
    let text = std::fs::read_to_string(home.join("costs/ledger.jsonl")).ok()?;
    (text.lines().rev())
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["project"] == PROJECT && v["request_id"].as_str() == id)?["output_tokens"]
        .as_u64()
}

/// Waits until no call is in flight through the relay and none started for [`QUIET`].
fn quiet(log: &Log) -> Res<()> {
    let mut seen = (usize::MAX, Instant::now());
    support::poll(Duration::from_secs(600), "the model calls to stop", || {
        let log = log.lock().unwrap();
        if log.len() != seen.0 || log.iter().any(|x| !x.done) {
            seen = (log.len(), Instant::now());
        }
        (seen.1.elapsed() >= QUIET).then_some(())
    })
}

// ---------------------------------------------------------------------------------------------

struct Round {
    added_ttft_ms: f64,
    /// The follower's last delta − the relay's last content chunk.
    added_tail_ms: f64,
    ratio: f64,
    /// Through pegasusd ÷ the same answer's own rate at the relay.
    same_answer: f64,
}

fn run(bins: &Bins, rounds: usize, keep: bool) -> Res<bool> {
    let home_dir = support::temp_home("pgl")?;
    let home = home_dir.path();
    let (llama, llama_port) = start_llama(&home.join("llama.log"))?;
    println!("  llama.cpp on 127.0.0.1:{llama_port} (n_ctx {N_CTX}, --ignore-eos, max_tokens {MAX_TOKENS})");
    let (relay_port, log) = start_relay(llama_port)?;
    std::fs::write(
        home.join("config.yml"),
        format!(
            "default_model: llama/smol\n\
             providers:\n  llama: {{kind: openai, base_url: \"http://127.0.0.1:{relay_port}/v1\", local: true}}\n\
             models:\n  \"llama/smol\": {{context_window: {N_CTX}}}\n\
             llm: {{timeout_s: 300}}\n\
             workers: {{shutdown_timeout_s: 5}}\n\
             agent: {{reflection: false, max_tokens: {MAX_TOKENS}}}\n"
        ),
    )?;
    let mut daemon = Daemon::start(bins, home, &[])?;
    daemon.wait_serving()?;
    daemon.ctl(&["project", "create", PROJECT, "--goal", "Tell stories."])?;
    daemon.wait_ready(1, Duration::from_secs(30))?;
    let (follower, follow) = start_follower(bins, home)?;
    // Until it follows the bus (it reads the transcript first).
    std::thread::sleep(Duration::from_millis(500));

    let mut results = Vec::new();
    quiet(&log)?;
    for round in 0..WARMUP + rounds {
        let (from_log, from_follow) = (
            log.lock().unwrap().len(),
            follow.lock().unwrap().bytes.len(),
        );
        let t0 = Instant::now();
        daemon.ctl(&["project", "send", PROJECT, PROMPT, "--wait"])?;
        let send = t0.elapsed();
        // Every answer is cut at max_tokens, so the watchdog reports the task as
        // `token_capped` and the MainAgent answers on the same model: let every call end, so
        // that the replay runs with Pegasus quiet.
        quiet(&log)?;
        let calls: Vec<Exchange> = log.lock().unwrap()[from_log..]
            .iter()
            .filter(|x| x.is_streamed_chat())
            .cloned()
            .collect();
        // The measured call: the one whose text `log -f` printed as deltas after the mark,
        // byte for byte; the others are the MainAgent's (or a compaction's).
        let (call, first, last) = {
            let f = follow.lock().unwrap();
            let mut from = from_follow;
            let mut found = None;
            while let Some(at) = find(&f.bytes[from..], STREAM_MARK.as_bytes()) {
                let at = from + at + STREAM_MARK.len();
                let hit = calls.iter().find(|x| {
                    !x.sse.text.is_empty()
                        && f.bytes.get(at..at + x.sse.text.len()) == Some(x.sse.text.as_bytes())
                });
                if let Some(x) = hit {
                    let end = at + x.sse.text.len() - 1;
                    found = f
                        .time_of(at)
                        .zip(f.time_of(end))
                        .map(|(a, b)| (x.clone(), a, b));
                    break;
                }
                from = at;
            }
            found.ok_or_else(|| {
                format!("round {round}: no streamed call's text is what log -f printed")
            })?
        };
        let (Some(relay_first), Some(relay_last)) = (call.sse.first, call.sse.last) else {
            return Err(format!("round {round}: HTTP {} with no content", call.status).into());
        };
        let tokens = ledger_tokens(home, call.sse.id.as_deref())
            .ok_or_else(|| format!("round {round}: no ledger line for {:?}", call.sse.id))?;
        let direct = replay(llama_port, call.path(), &call.body)?;
        let through = tokens as f64 / (last - first).as_secs_f64();
        let signed = |a: Instant, b: Instant| {
            ms(a.saturating_duration_since(b)) - ms(b.saturating_duration_since(a))
        };
        let r = Round {
            added_ttft_ms: signed(first, relay_first),
            added_tail_ms: signed(last, relay_last),
            ratio: through / direct.tokens_per_s(),
            same_answer: through / call.sse.tokens_per_s(),
        };
        println!(
            "  round {round}{}: {tokens} tok ({} direct), added TTFT {:.2} ms, tail {:+.2} ms, ratio {:.3} (llama.cpp's own tok/s {:.1} / {:.1}); send {:.0} ms, {} other calls",
            if round < WARMUP { " (warm-up)" } else { "" },
            direct.tokens(),
            r.added_ttft_ms,
            r.added_tail_ms,
            r.ratio,
            call.sse.predicted_per_second.unwrap_or(f64::NAN),
            direct.predicted_per_second.unwrap_or(f64::NAN),
            ms(send),
            calls.len() - 1,
        );
        if round >= WARMUP {
            results.push(r);
        }
    }
    drop((follower, daemon, llama));
    if keep {
        println!("  home kept: {}", home_dir.keep().display());
    }
    let of = |f: fn(&Round) -> f64| Stats::of(&results.iter().map(f).collect::<Vec<_>>());
    let (ratio, ttft) = (of(|r| r.ratio), of(|r| r.added_ttft_ms));
    let mut t = support::Targets::default();
    let (fig, ok) = (ratio.line(3), ratio.median >= 0.98);
    t.check("tokens/s through pegasusd ÷ direct", fig, "≥ 0.98", ok);
    let (fig, ok) = (ttft.line(2), ttft.median <= 5.0);
    t.check("time to first token added, ms", fig, "≤ 5 ms", ok);
    println!(
        "  (info) last delta behind the relay, ms: {}",
        of(|r| r.added_tail_ms).line(2)
    );
    println!(
        "  (info) through pegasusd ÷ the same answer at the relay: {}",
        of(|r| r.same_answer).line(4)
    );
    Ok(t.met())
}
