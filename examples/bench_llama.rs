//! Streaming through pegasusd against a real model server (issue 23):
//! `cargo run --release --example bench_llama [-- ROUNDS] [-v]` (default 10 timed rounds, after
//! one untimed warm-up round; `-v` describes the other model calls of each round, `-k` keeps
//! the temporary home). Run by hand; see docs/PERFORMANCE.md.
//!
//! Starts `scripts/llama-server` (llama.cpp with SmolLM2-135M, n_ctx 4096, `--ignore-eos` so
//! every answer runs to `max_tokens`), a recording TCP relay in this process between pegasusd
//! and llama.cpp, a real pegasusd on a temporary home whose provider `llama` points at the
//! relay, one project, and `pegasusctl project log -f` (its stdout read here, every read
//! timestamped: it prints each streamed text delta as it arrives, after `… `).
//!
//! Each round sends the same message with `pegasusctl project send P TEXT --wait`, then
//! replays the exact request body the relay recorded straight to llama.cpp (not through the
//! relay), streaming, and measures:
//!
//! * **added time to first token**: the follower's first delta − the moment the relay saw the
//!   first SSE chunk with content pass from llama.cpp (so it includes the relay's own hop);
//! * **tokens/s through Pegasus**: the ledger's completion tokens ÷ (the follower's last delta −
//!   its first);
//! * **tokens/s direct**: the replay's completion tokens (its `usage`) ÷ (its last content
//!   chunk − its first), read by this process from the socket the same way;
//!
//! and reports the median and the spread (min–max) of the ratio and of the added TTFT.
//! Targets: ratio ≥ 0.98, added TTFT ≤ 5 ms. Everything (the model too) runs on this machine:
//! on 2 vCPUs the model's generation competes with pegasusd, the worker and pegasusctl, which
//! the direct replay does not; the per-round table shows llama.cpp's own generation speed for
//! both calls and the CPU the Pegasus processes used, to tell the two apart.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    collections::VecDeque,
    io::{Read, Write},
    net::TcpStream,
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, Command, ExitCode, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const N_CTX: u32 = 4096;
const MAX_TOKENS: u32 = 256;
const ROUNDS: usize = 10;
const WARMUP: usize = 1;
const PROJECT: &str = "bench";
const PROMPT: &str = "Tell me a long story about a lighthouse keeper who finds a map.";
/// The script that installs and runs llama.cpp's server.
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/llama-server");
/// Targets.
const RATIO_MIN: f64 = 0.98;
const ADDED_TTFT_MAX_MS: f64 = 5.0;
/// How long the relay must see no call before a replay or a round.
const QUIET: Duration = Duration::from_millis(1500);
/// What `log -f` prints before the first delta of an answer.
const STREAM_MARK: &str = "… ";

fn main() -> ExitCode {
    let mut rounds = ROUNDS;
    let mut verbose = false;
    let mut keep = false;
    for arg in std::env::args().skip(1) {
        match arg.parse::<usize>() {
            Ok(n) if n > 0 => rounds = n,
            _ if arg == "-v" => verbose = true,
            _ if arg == "-k" => keep = true,
            _ => {
                eprintln!("usage: bench_llama [ROUNDS] [-v] [-k]");
                return ExitCode::from(2);
            }
        }
    }
    match run(rounds, verbose, keep) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("bench_llama: {e}");
            ExitCode::from(2)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers

/// The directory holding the release binaries, built first when run through cargo.
fn bin_dir() -> Res<PathBuf> {
    let exe = std::env::current_exe()?;
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .ok_or("cannot find the target directory")?
        .to_path_buf();
    if let Some(cargo) = std::env::var_os("CARGO") {
        let profile = if dir.ends_with("release") {
            vec!["--release"]
        } else {
            vec![]
        };
        let status = Command::new(cargo)
            .args(["build", "--bins", "--quiet"])
            .args(profile)
            .status()?;
        if !status.success() {
            return Err("building the pegasus binaries failed".into());
        }
    }
    for bin in ["pegasusd", "pegasusctl", "project-worker"] {
        if !dir.join(bin).is_file() {
            return Err(format!(
                "{} is missing: run `cargo build --release --bins` first",
                dir.join(bin).display()
            )
            .into());
        }
    }
    Ok(dir)
}

fn poll<T>(timeout: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> Res<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Ok(v);
        }
        if Instant::now() > deadline {
            return Err(format!("timed out after {timeout:?} waiting for {what}").into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(|a, b| a.total_cmp(b));
    v
}

fn median(s: &[f64]) -> f64 {
    if s.is_empty() {
        return f64::NAN;
    }
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "PASS"
    } else {
        "MISS"
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// `later − earlier` in milliseconds, negative when `later` is earlier.
fn diff_ms(later: Instant, earlier: Instant) -> f64 {
    if later >= earlier {
        ms(later - earlier)
    } else {
        -ms(earlier - later)
    }
}

fn free_port() -> Res<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// A process's CPU time so far (user + system, its own threads), from /proc.
fn cpu_ms(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return f64::NAN;
    };
    let Some(rest) = stat.rsplit(')').next() else {
        return f64::NAN;
    };
    // Fields after the command: state is field 3, utime 14, stime 15 (1-based).
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i - 3).and_then(|v| v.parse::<f64>().ok());
    // USER_HZ: 100 on every Linux this runs on.
    let hz = 100.0;
    match (ticks(14), ticks(15)) {
        (Some(u), Some(s)) => (u + s) * 1000.0 / hz,
        _ => f64::NAN,
    }
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_else(|| "unknown CPU".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!(
        "{cores} vCPU, {cpu}, kernel {}, {}",
        kernel.trim(),
        chrono::Utc::now().format("%Y-%m-%d %H:%M UTC")
    )
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

// ---------------------------------------------------------------------------------------------
// HTTP/1.1 and SSE, just enough to see where each message and each content chunk passes.

enum Phase {
    Head,
    Length(usize),
    ChunkSize,
    ChunkData(usize),
    ChunkEnd,
    Trailer,
    UntilEof,
}

enum HttpEvent {
    Head(String),
    Data(Vec<u8>),
    End,
}

/// An incremental parser of one direction of an HTTP/1.1 connection (keep-alive: message after
/// message).
struct HttpParser {
    buf: Vec<u8>,
    phase: Phase,
    response: bool,
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

impl HttpParser {
    fn new(response: bool) -> HttpParser {
        HttpParser {
            buf: Vec::new(),
            phase: Phase::Head,
            response,
        }
    }

    fn feed(&mut self, bytes: &[u8], out: &mut Vec<HttpEvent>) {
        self.buf.extend_from_slice(bytes);
        loop {
            match self.phase {
                Phase::Head => {
                    let Some(end) = find(&self.buf, b"\r\n\r\n") else {
                        return;
                    };
                    let head = String::from_utf8_lossy(&self.buf[..end]).to_string();
                    self.buf.drain(..end + 4);
                    let header = |name: &str| {
                        head.lines().skip(1).find_map(|l| {
                            let (k, v) = l.split_once(':')?;
                            k.trim()
                                .eq_ignore_ascii_case(name)
                                .then(|| v.trim().to_ascii_lowercase())
                        })
                    };
                    let length = header("content-length").and_then(|v| v.parse::<usize>().ok());
                    let chunked =
                        header("transfer-encoding").is_some_and(|v| v.contains("chunked"));
                    let status = head
                        .split_whitespace()
                        .nth(1)
                        .and_then(|s| s.parse::<u16>().ok())
                        .unwrap_or(0);
                    out.push(HttpEvent::Head(head));
                    self.phase = if chunked {
                        Phase::ChunkSize
                    } else if let Some(n) = length {
                        Phase::Length(n)
                    } else if !self.response || status == 204 || status == 304 {
                        Phase::Length(0)
                    } else {
                        Phase::UntilEof
                    };
                }
                Phase::Length(n) => {
                    let take = n.min(self.buf.len());
                    if take > 0 {
                        out.push(HttpEvent::Data(self.buf.drain(..take).collect()));
                    }
                    if take == n {
                        out.push(HttpEvent::End);
                        self.phase = Phase::Head;
                    } else {
                        self.phase = Phase::Length(n - take);
                        return;
                    }
                }
                Phase::ChunkSize => {
                    let Some(end) = find(&self.buf, b"\r\n") else {
                        return;
                    };
                    let line = String::from_utf8_lossy(&self.buf[..end]).to_string();
                    self.buf.drain(..end + 2);
                    let hex = line.split(';').next().unwrap_or("").trim();
                    let size = usize::from_str_radix(hex, 16).unwrap_or(0);
                    self.phase = if size == 0 {
                        Phase::Trailer
                    } else {
                        Phase::ChunkData(size)
                    };
                }
                Phase::ChunkData(n) => {
                    let take = n.min(self.buf.len());
                    if take == 0 {
                        return;
                    }
                    out.push(HttpEvent::Data(self.buf.drain(..take).collect()));
                    self.phase = if take == n {
                        Phase::ChunkEnd
                    } else {
                        Phase::ChunkData(n - take)
                    };
                }
                Phase::ChunkEnd => {
                    if self.buf.len() < 2 {
                        return;
                    }
                    self.buf.drain(..2);
                    self.phase = Phase::ChunkSize;
                }
                Phase::Trailer => {
                    let Some(end) = find(&self.buf, b"\r\n") else {
                        return;
                    };
                    self.buf.drain(..end + 2);
                    if end == 0 {
                        out.push(HttpEvent::End);
                        self.phase = Phase::Head;
                    }
                }
                Phase::UntilEof => {
                    if !self.buf.is_empty() {
                        out.push(HttpEvent::Data(std::mem::take(&mut self.buf)));
                    }
                    return;
                }
            }
        }
    }
}

/// What one streamed OpenAI-style answer carried, and when.
#[derive(Default, Clone)]
struct Sse {
    line: Vec<u8>,
    /// Arrival of the first and last chunks with non-empty `choices[0].delta.content`.
    first: Option<Instant>,
    last: Option<Instant>,
    chunks: usize,
    text: String,
    /// `usage.completion_tokens` of the final chunk.
    completion_tokens: Option<u64>,
    prompt_tokens: Option<u64>,
    /// llama.cpp's own `timings.predicted_per_second` (generation speed, server side).
    predicted_per_second: Option<f64>,
    other_deltas: usize,
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
            let line = std::mem::take(&mut self.line);
            let line = String::from_utf8_lossy(&line);
            let Some(data) = line.trim_end().strip_prefix("data:") else {
                continue;
            };
            let Ok(v) = serde_json::from_str::<serde_json::Value>(data.trim()) else {
                continue;
            };
            let delta = &v["choices"][0]["delta"];
            match delta["content"].as_str() {
                Some(c) if !c.is_empty() => {
                    self.first.get_or_insert(at);
                    self.last = Some(at);
                    self.chunks += 1;
                    self.text.push_str(c);
                }
                _ => {
                    if delta
                        .as_object()
                        .is_some_and(|o| o.keys().any(|k| k != "content" && k != "role"))
                    {
                        self.other_deltas += 1;
                    }
                }
            }
            if let Some(id) = v["id"].as_str() {
                self.id.get_or_insert_with(|| id.to_string());
            }
            if let Some(n) = v["usage"]["completion_tokens"].as_u64() {
                self.completion_tokens = Some(n);
            }
            if let Some(n) = v["usage"]["prompt_tokens"].as_u64() {
                self.prompt_tokens = Some(n);
            }
            if let Some(x) = v["timings"]["predicted_per_second"].as_f64() {
                self.predicted_per_second = Some(x);
            }
        }
    }

    /// Completion tokens per second from the first content chunk to the last.
    fn tokens_per_s(&self, tokens: u64) -> f64 {
        match (self.first, self.last) {
            (Some(a), Some(b)) if b > a => tokens as f64 / (b - a).as_secs_f64(),
            _ => f64::NAN,
        }
    }

    fn tokens(&self) -> u64 {
        self.completion_tokens.unwrap_or(self.chunks as u64)
    }
}

// ---------------------------------------------------------------------------------------------
// The recording relay.

/// One request that passed the relay, and its answer.
#[derive(Clone)]
struct Exchange {
    /// The request line and headers.
    head: String,
    body: Vec<u8>,
    /// When its last byte reached the relay.
    sent: Instant,
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

/// Starts the relay on its own thread; returns its port and its log.
fn start_relay(upstream: u16) -> Res<(u16, Log)> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    listener.set_nonblocking(true)?;
    let log: Log = Arc::default();
    let log2 = log.clone();
    std::thread::Builder::new()
        .name("relay".into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("tokio runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                loop {
                    let Ok((client, _)) = listener.accept().await else {
                        continue;
                    };
                    tokio::spawn(relay_conn(client, upstream, log2.clone()));
                }
            });
        })?;
    Ok((port, log))
}

async fn relay_conn(client: tokio::net::TcpStream, upstream: u16, log: Log) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    // The log indices of this connection's requests whose answer has not begun.
    let queue: Arc<Mutex<VecDeque<usize>>> = Arc::default();
    let up = {
        let (log, queue) = (log.clone(), queue.clone());
        async move {
            let mut parser = HttpParser::new(false);
            let mut current: Option<Exchange> = None;
            let mut buf = vec![0u8; 64 * 1024];
            let mut events = Vec::new();
            loop {
                let n = match cr.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                // Recorded before it is passed on: the answer cannot overtake it.
                parser.feed(&buf[..n], &mut events);
                for ev in events.drain(..) {
                    match ev {
                        HttpEvent::Head(head) => {
                            current = Some(Exchange {
                                head,
                                body: Vec::new(),
                                sent: Instant::now(),
                                status: 0,
                                sse: Sse::default(),
                                done: false,
                            })
                        }
                        HttpEvent::Data(d) => {
                            if let Some(x) = current.as_mut() {
                                x.body.extend_from_slice(&d)
                            }
                        }
                        HttpEvent::End => {
                            if let Some(mut x) = current.take() {
                                x.sent = Instant::now();
                                let mut log = log.lock().unwrap();
                                log.push(x);
                                queue.lock().unwrap().push_back(log.len() - 1);
                            }
                        }
                    }
                }
                if sw.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
            let _ = sw.shutdown().await;
        }
    };
    let down = async move {
        let mut parser = HttpParser::new(true);
        let mut current: Option<usize> = None;
        let mut buf = vec![0u8; 64 * 1024];
        let mut events = Vec::new();
        loop {
            let n = match sr.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let at = Instant::now();
            if cw.write_all(&buf[..n]).await.is_err() {
                break;
            }
            parser.feed(&buf[..n], &mut events);
            let mut log = log.lock().unwrap();
            for ev in events.drain(..) {
                match ev {
                    HttpEvent::Head(head) => {
                        current = queue.lock().unwrap().pop_front();
                        if let Some(i) = current {
                            log[i].status = head
                                .split_whitespace()
                                .nth(1)
                                .and_then(|s| s.parse().ok())
                                .unwrap_or(0);
                        }
                    }
                    HttpEvent::Data(d) => {
                        if let Some(i) = current {
                            log[i].sse.feed(&d, at);
                        }
                    }
                    HttpEvent::End => {
                        if let Some(i) = current.take() {
                            log[i].done = true;
                        }
                    }
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

/// Sends `body` to llama.cpp's `path` directly (a connection of its own, closed after), reads
/// the streamed answer, every read timestamped.
fn replay(port: u16, path: &str, body: &[u8]) -> Res<Sse> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_secs(300)))?;
    let mut req = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n\
         accept: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(body);
    s.write_all(&req)?;
    let mut parser = HttpParser::new(true);
    let mut sse = Sse::default();
    let mut buf = vec![0u8; 64 * 1024];
    let mut events = Vec::new();
    let mut status = 0u16;
    'read: loop {
        let n = s.read(&mut buf)?;
        if n == 0 {
            break;
        }
        let at = Instant::now();
        parser.feed(&buf[..n], &mut events);
        for ev in events.drain(..) {
            match ev {
                HttpEvent::Head(h) => {
                    status = h
                        .split_whitespace()
                        .nth(1)
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(0)
                }
                HttpEvent::Data(d) => sse.feed(&d, at),
                HttpEvent::End => break 'read,
            }
        }
    }
    if status != 200 {
        return Err(format!("the direct replay got HTTP {status}").into());
    }
    Ok(sse)
}

// ---------------------------------------------------------------------------------------------
// The processes.

/// llama.cpp's server in a process group of its own, killed on drop.
struct Llama {
    child: Child,
    port: u16,
    log: tempfile::NamedTempFile,
}

impl Llama {
    fn start() -> Res<Llama> {
        let port = free_port()?;
        let log = tempfile::NamedTempFile::new()?;
        let child = Command::new(SCRIPT)
            .arg(port.to_string())
            .arg(N_CTX.to_string())
            .arg("--ignore-eos")
            // It stops when this end of its stdin closes.
            .stdin(Stdio::piped())
            .stdout(log.reopen()?)
            .stderr(log.reopen()?)
            .process_group(0)
            .spawn()?;
        let mut llama = Llama { child, port, log };
        // A first run installs it (~130 MB).
        poll(
            Duration::from_secs(900),
            "llama.cpp to answer /health",
            || {
                if let Ok(Some(_)) = llama.child.try_wait() {
                    return Some(false);
                }
                let ok = TcpStream::connect(("127.0.0.1", port))
                    .ok()
                    .and_then(|mut s| {
                        write!(
                            s,
                            "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                        )
                        .ok()?;
                        let mut r = String::new();
                        s.read_to_string(&mut r).ok()?;
                        r.starts_with("HTTP/1.1 200").then_some(())
                    });
                ok.map(|()| true)
            },
        )
        .and_then(|up| {
            if up {
                Ok(())
            } else {
                Err(format!(
                    "the llama.cpp server exited:\n{}",
                    std::fs::read_to_string(llama.log.path()).unwrap_or_default()
                )
                .into())
            }
        })?;
        Ok(llama)
    }
}

impl Drop for Llama {
    fn drop(&mut self) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = self.child.wait();
    }
}

/// A child process killed on drop.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn ctl(bins: &Path, home: &Path, args: &[&str]) -> Res<String> {
    let out = Command::new(bins.join("pegasusctl"))
        .arg("--home")
        .arg(home)
        .args(args)
        .output()?;
    if !out.status.success() {
        return Err(format!(
            "pegasusctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// What `log -f` printed, and when each read of it returned.
#[derive(Default)]
struct Follow {
    bytes: Vec<u8>,
    /// (end offset in `bytes`, time) of every read.
    reads: Vec<(usize, Instant)>,
}

impl Follow {
    /// When the byte at `offset` arrived.
    fn time_of(&self, offset: usize) -> Option<Instant> {
        let i = self.reads.partition_point(|(end, _)| *end <= offset);
        self.reads.get(i).map(|(_, t)| *t)
    }
}

fn start_follower(bins: &Path, home: &Path) -> Res<(Killed, Arc<Mutex<Follow>>)> {
    let mut child = Command::new(bins.join("pegasusctl"))
        .arg("--home")
        .arg(home)
        .args(["project", "log", "-f", PROJECT])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let mut out = child.stdout.take().ok_or("no stdout")?;
    let follow: Arc<Mutex<Follow>> = Arc::default();
    let f2 = follow.clone();
    std::thread::Builder::new()
        .name("follower".into())
        .spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            while let Ok(n) = out.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let at = Instant::now();
                let mut f = f2.lock().unwrap();
                f.bytes.extend_from_slice(&buf[..n]);
                let end = f.bytes.len();
                f.reads.push((end, at));
            }
        })?;
    Ok((Killed(child), follow))
}

/// The completion tokens of the project's ledger line for the provider's request `id`.
fn ledger_tokens(home: &Path, id: Option<&str>) -> Option<u64> {
    let text = std::fs::read_to_string(home.join("costs").join("ledger.jsonl")).ok()?;
    text.lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["project"] == PROJECT && v["request_id"].as_str() == id)?["output_tokens"]
        .as_u64()
}

/// Waits until no call is in flight through the relay and none started for [`QUIET`].
fn quiet(log: &Log) -> Res<()> {
    let mut seen = (usize::MAX, Instant::now());
    poll(Duration::from_secs(600), "the model calls to stop", || {
        let log = log.lock().unwrap();
        if log.len() != seen.0 || log.iter().any(|x| !x.done) {
            seen = (log.len(), Instant::now());
        }
        (seen.1.elapsed() >= QUIET).then_some(())
    })
}

/// One line about a call: its messages' roles and sizes, the start of its system message and
/// of its answer, how it stopped.
fn describe(x: &Exchange) -> String {
    let v: serde_json::Value = serde_json::from_slice(&x.body).unwrap_or_default();
    let empty = Vec::new();
    let msgs = v["messages"].as_array().unwrap_or(&empty);
    let clip = |s: &str, n: usize| s.chars().take(n).collect::<String>().replace('\n', " ");
    let roles: Vec<String> = msgs
        .iter()
        .map(|m| {
            let len = m["content"]
                .as_str()
                .map_or(m["content"].to_string().len(), str::len);
            format!("{}:{len}", m["role"].as_str().unwrap_or("?"))
        })
        .collect();
    let system = msgs
        .first()
        .and_then(|m| m["content"].as_str())
        .map(|s| clip(s, 60))
        .unwrap_or_default();
    let last = msgs
        .last()
        .and_then(|m| m["content"].as_str())
        .map(|s| clip(s, 60))
        .unwrap_or_default();
    format!(
        "max_tokens {} tools {} messages [{}] system {system:?} last {last:?} answer {:?} ({} tok)",
        v["max_tokens"],
        v["tools"].as_array().map_or(0, Vec::len),
        roles.join(" "),
        clip(&x.sse.text, 60),
        x.sse.tokens()
    )
}

// ---------------------------------------------------------------------------------------------

struct Round {
    /// Follower's first delta − relay's first content chunk.
    added_ttft_ms: f64,
    /// Follower's last delta − relay's last content chunk.
    added_tail_ms: f64,
    tokens: u64,
    peg_tps: f64,
    /// The relayed answer's own rate (first to last content chunk at the relay).
    relay_tps: f64,
    direct_tps: f64,
    /// llama.cpp's `predicted_per_second` for the Pegasus call and the replay.
    llama_peg_tps: f64,
    llama_direct_tps: f64,
    prompt_tokens: u64,
    /// CPU used by pegasusd, the worker and the follower during the Pegasus call.
    pegasus_cpu_ms: f64,
    stream_ms: f64,
}

fn run(rounds: usize, verbose: bool, keep: bool) -> Res<bool> {
    let bins = bin_dir()?;
    println!("bench_llama: {}", machine());
    println!("load average at start: {}", loadavg());
    let llama = Llama::start()?;
    println!(
        "llama.cpp on 127.0.0.1:{} (n_ctx {N_CTX}, --ignore-eos, max_tokens {MAX_TOKENS})",
        llama.port
    );
    // How many threads it computes on (its `system_info` line), beside pegasusd's processes.
    if let Some(line) = std::fs::read_to_string(llama.log.path())
        .unwrap_or_default()
        .lines()
        .find(|l| l.contains("n_threads"))
    {
        println!("llama.cpp: {}", line.trim());
    }
    let (relay_port, log) = start_relay(llama.port)?;
    let home_dir = tempfile::Builder::new().prefix("pgl").tempdir_in("/tmp")?;
    let home = home_dir.path();
    std::fs::write(
        home.join("config.yml"),
        format!(
            "default_model: llama/smol\n\
             providers:\n  llama: {{kind: openai, base_url: \"http://127.0.0.1:{relay_port}/v1\", local: true}}\n\
             models:\n  \"llama/smol\": {{context_window: {N_CTX}}}\n\
             llm: {{timeout_s: 300}}\n\
             workers: {{shutdown_timeout_s: 5}}\n\
             agent: {{reflection: false, max_tokens: {MAX_TOKENS}}}\n\
             dashboard: {{listen: \"127.0.0.1:0\"}}\n"
        ),
    )?;
    let mut daemon = Killed(
        Command::new(bins.join("pegasusd"))
            .arg("--home")
            .arg(home)
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("OPENAI_API_KEY")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    );
    poll(Duration::from_secs(15), "pegasusd to answer status", || {
        if let Ok(Some(_)) = daemon.0.try_wait() {
            return Some(Err("pegasusd exited early (see <home>/logs)".to_string()));
        }
        ctl(&bins, home, &["status"]).ok().map(|_| Ok(()))
    })??;
    ctl(
        &bins,
        home,
        &["project", "create", PROJECT, "--goal", "Tell stories."],
    )?;
    let worker = poll(Duration::from_secs(15), "the project's worker", || {
        let v: serde_json::Value =
            serde_json::from_str(&ctl(&bins, home, &["--json", "project", "show", PROJECT]).ok()?)
                .ok()?;
        let pid = v["worker_pid"].as_u64()?;
        (v["worker_state"] == "ready").then_some(pid as u32)
    })?;
    let (follower, follow) = start_follower(&bins, home)?;
    // Until it follows the bus (its first read of the transcript comes before).
    std::thread::sleep(Duration::from_millis(500));
    let pids = [daemon.0.id(), worker, follower.0.id()];
    let pegasus_cpu = || pids.iter().map(|p| cpu_ms(*p)).sum::<f64>();

    let mut results = Vec::new();
    quiet(&log)?;
    for round in 0..WARMUP + rounds {
        let from_log = log.lock().unwrap().len();
        let from_follow = follow.lock().unwrap().bytes.len();
        let cpu0 = pegasus_cpu();
        let t0 = Instant::now();
        ctl(&bins, home, &["project", "send", PROJECT, PROMPT, "--wait"])?;
        let wall = t0.elapsed();
        // Every answer is cut at max_tokens (`--ignore-eos`), so the watchdog reports the
        // message's task as `token_capped` and the MainAgent answers that on the same model:
        // let every call end, so that the replay runs with Pegasus quiet.
        quiet(&log)?;
        let cpu1 = pegasus_cpu();
        let calls: Vec<Exchange> = log.lock().unwrap()[from_log..]
            .iter()
            .filter(|x| x.is_streamed_chat())
            .cloned()
            .collect();
        // The measured call: the one whose text `log -f` printed as streamed deltas (after the
        // mark, byte for byte); the others are the MainAgent's (or a compaction's).
        let (i, first, last) = {
            let f = follow.lock().unwrap();
            let mut found = None;
            let mut from = from_follow;
            while let Some(at) = find(&f.bytes[from..], STREAM_MARK.as_bytes()) {
                let at = from + at + STREAM_MARK.len();
                let hit = calls.iter().position(|x| {
                    !x.sse.text.is_empty()
                        && f.bytes.get(at..at + x.sse.text.len()) == Some(x.sse.text.as_bytes())
                });
                if let Some(i) = hit {
                    let end = at + calls[i].sse.text.len() - 1;
                    found = f.time_of(at).zip(f.time_of(end)).map(|(a, b)| (i, a, b));
                    break;
                }
                from = at;
            }
            found.ok_or_else(|| {
                format!(
                    "round {round}: no streamed call's text (of {}) is what log -f printed: {:?}",
                    calls.len(),
                    String::from_utf8_lossy(&f.bytes[from_follow..])
                )
            })?
        };
        let call = &calls[i];
        if call.status != 200 || call.sse.first.is_none() {
            return Err(format!(
                "round {round}: the relayed call got HTTP {} with {} content chunks",
                call.status, call.sse.chunks
            )
            .into());
        }
        let tokens = ledger_tokens(home, call.sse.id.as_deref()).ok_or_else(|| {
            format!(
                "round {round}: no ledger line for request {:?}",
                call.sse.id
            )
        })?;
        let others: Vec<&Exchange> = calls
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, x)| x)
            .collect();
        if verbose {
            for x in &others {
                println!("    also: {}", describe(x));
            }
        }
        let direct = replay(llama.port, call.path(), &call.body)?;
        let peg_tps = tokens as f64 / (last - first).as_secs_f64();
        let r = Round {
            added_ttft_ms: diff_ms(first, call.sse.first.unwrap()),
            added_tail_ms: diff_ms(last, call.sse.last.unwrap()),
            tokens,
            peg_tps,
            relay_tps: call.sse.tokens_per_s(call.sse.tokens()),
            direct_tps: direct.tokens_per_s(direct.tokens()),
            llama_peg_tps: call.sse.predicted_per_second.unwrap_or(f64::NAN),
            llama_direct_tps: direct.predicted_per_second.unwrap_or(f64::NAN),
            prompt_tokens: call.sse.prompt_tokens.unwrap_or(0),
            pegasus_cpu_ms: cpu1 - cpu0,
            stream_ms: diff_ms(last, first),
        };
        println!(
            "  round {round}{}: prompt {} tok, {} tok ({} direct), added TTFT {:.2} ms, tail {:+.2} ms; \
             tok/s pegasus {:.1} relay {:.1} direct {:.1} (llama's own {:.1} / {:.1}) ratio {:.3}; \
             stream {:.0} ms; Pegasus CPU {:.0} ms; send took {:.0} ms; {} other calls after it",
            if round < WARMUP { " (warm-up)" } else { "" },
            r.prompt_tokens,
            r.tokens,
            direct.tokens(),
            r.added_ttft_ms,
            r.added_tail_ms,
            r.peg_tps,
            r.relay_tps,
            r.direct_tps,
            r.llama_peg_tps,
            r.llama_direct_tps,
            r.peg_tps / r.direct_tps,
            r.stream_ms,
            r.pegasus_cpu_ms,
            ms(wall),
            others.len(),
        );
        if direct.other_deltas > 0 || call.sse.other_deltas > 0 {
            println!("  round {round}: some chunks carried deltas other than content");
        }
        if round >= WARMUP {
            results.push(r);
        }
    }
    drop(follower);
    drop(daemon);
    drop(llama);
    if keep {
        println!("home kept: {}", home_dir.keep().display());
    }

    let ratios = sorted(results.iter().map(|r| r.peg_tps / r.direct_tps).collect());
    let same_call = sorted(results.iter().map(|r| r.peg_tps / r.relay_tps).collect());
    let ttfts = sorted(results.iter().map(|r| r.added_ttft_ms).collect());
    let tails = sorted(results.iter().map(|r| r.added_tail_ms).collect());
    let relay_ratio = sorted(results.iter().map(|r| r.relay_tps / r.direct_tps).collect());
    let llama_ratio = sorted(
        results
            .iter()
            .map(|r| r.llama_peg_tps / r.llama_direct_tps)
            .collect(),
    );
    let span = |s: &[f64], p: usize| {
        format!(
            "median {:.p$}, {:.p$}–{:.p$}",
            median(s),
            s[0],
            s[s.len() - 1]
        )
    };
    let ratio_ok = median(&ratios) >= RATIO_MIN;
    let ttft_ok = median(&ttfts) <= ADDED_TTFT_MAX_MS;
    println!("load average at end: {}", loadavg());
    println!("{rounds} rounds:");
    println!(
        "  tokens/s through pegasusd ÷ direct: {} (target ≥ {RATIO_MIN}): {}",
        span(&ratios, 3),
        verdict(ratio_ok)
    );
    println!(
        "  time to first token added by Pegasus: {} ms (target ≤ {ADDED_TTFT_MAX_MS} ms): {}",
        span(&ttfts, 2),
        verdict(ttft_ok)
    );
    println!(
        "  (info) last delta's lag behind the relay: {} ms",
        span(&tails, 2)
    );
    println!(
        "  (info) tokens/s through pegasusd ÷ the same answer's at the relay: {}",
        span(&same_call, 4)
    );
    println!(
        "  (info) relayed answer's own tokens/s ÷ direct: {}",
        span(&relay_ratio, 3)
    );
    println!(
        "  (info) llama.cpp's own generation speed, Pegasus call ÷ replay: {}",
        span(&llama_ratio, 3)
    );
    Ok(ratio_ok && ttft_ok)
}
