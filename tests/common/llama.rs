//! A real llama.cpp server for the tests that drive one: `scripts/llama-server` (llama.cpp's
//! own server, embedded in the xllamacpp wheel, serving SmolLM2-135M-Instruct) on a free port
//! of 127.0.0.1, in a process group of its own that is killed on drop.
//!
//! The packages are installed by the script on first use (`.ci/run` installs them before the
//! tests). Where they cannot be (no network, no python3-venv), [`LlamaServer::start`] prints
//! one line saying why and returns `None`, and the test skips; under `CI=true` it fails instead.

use super::poll;
use std::{
    io::{Read, Write},
    net::{TcpListener, TcpStream},
    os::unix::process::CommandExt,
    process::{Child, Command, Stdio},
    sync::OnceLock,
    time::{Duration, Instant},
};

/// The script that installs and runs the server.
pub const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/llama-server");

/// How the server words its context-overflow refusal (HTTP 400, `exceed_context_size_error`),
/// in its reply and in its log.
pub const REFUSAL: &str = "exceeds the available context size";

/// The longest an install may take (a first one downloads ~130 MB).
const INSTALL_TIMEOUT: Duration = Duration::from_secs(900);

/// The longest the server may take to load its model and answer `/health`.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A running llama.cpp server.
pub struct LlamaServer {
    child: Option<Child>,
    port: u16,
    n_ctx: u32,
    log: tempfile::NamedTempFile,
}

/// Installs the packages once per test binary: `Err` says why they cannot be.
fn install() -> &'static Result<(), String> {
    static INSTALLED: OnceLock<Result<(), String>> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let log = tempfile::NamedTempFile::new().unwrap();
        let started = Instant::now();
        let mut child = match Command::new(SCRIPT)
            .arg("--install-only")
            .stdin(Stdio::null())
            .stdout(log.reopen().unwrap())
            .stderr(log.reopen().unwrap())
            .spawn()
        {
            Ok(child) => child,
            Err(e) => return Err(format!("{SCRIPT} could not run: {e}")),
        };
        let deadline = started + INSTALL_TIMEOUT;
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "`{SCRIPT} --install-only` took more than {INSTALL_TIMEOUT:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let out = std::fs::read_to_string(log.path()).unwrap_or_default();
        if status.success() {
            if !out.trim().is_empty() {
                eprintln!("{} (took {:?})", out.trim(), started.elapsed());
            }
            Ok(())
        } else {
            // The script's last line says why (`llama-server: pip could not install ...`).
            let why = out
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("no output");
            Err(format!(
                "`{SCRIPT} --install-only` failed ({status}): {why}"
            ))
        }
    })
}

/// A port nobody listens on now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET path` on 127.0.0.1:`port`: the status and the body, or `None` when nothing answers.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).ok()?;
    let response = String::from_utf8_lossy(&response);
    let status = response.split(' ').nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    Some((status, body.to_string()))
}

impl LlamaServer {
    /// A server whose context window is `n_ctx` tokens, answering `/health`; `None` (after one
    /// line on stderr saying why) when its packages cannot be installed and `CI` is not `true`.
    pub fn start(n_ctx: u32) -> Option<LlamaServer> {
        Self::start_with(n_ctx, false)
    }

    /// With `ignore_eos`, every answer runs to its `max_tokens`: long enough to be cut.
    pub fn start_with(n_ctx: u32, ignore_eos: bool) -> Option<LlamaServer> {
        if let Err(why) = install() {
            if std::env::var("CI").as_deref() == Ok("true") {
                panic!("CI=true and no llama.cpp server: {why}");
            }
            // Not `eprintln!`: libtest captures that for a passing test, and a skip must show.
            let _ = writeln!(std::io::stderr(), "skipped: no llama.cpp server: {why}");
            return None;
        }
        // A port taken between `free_port` and the server's bind makes it exit: try another.
        for attempt in 1.. {
            let port = free_port();
            let log = tempfile::NamedTempFile::new().unwrap();
            let mut cmd = Command::new(SCRIPT);
            cmd.arg(port.to_string()).arg(n_ctx.to_string());
            if ignore_eos {
                cmd.arg("--ignore-eos");
            }
            // The server exits when this end of its stdin closes: when the test process dies.
            let child = cmd
                .stdin(Stdio::piped())
                .stdout(log.reopen().unwrap())
                .stderr(log.reopen().unwrap())
                .process_group(0)
                .spawn()
                .unwrap();
            let mut server = LlamaServer {
                child: Some(child),
                port,
                n_ctx,
                log,
            };
            let started = Instant::now();
            let exited = poll(START_TIMEOUT, "llama.cpp to answer /health", || {
                if let Some(status) = server.child.as_mut().unwrap().try_wait().unwrap() {
                    return Some(Some(status));
                }
                let healthy = http_get(port, "/health").is_some_and(|(code, _)| code == 200);
                healthy.then_some(None)
            });
            match exited {
                None => {
                    eprintln!(
                        "llama.cpp server on {} (n_ctx {n_ctx}) ready in {:?}",
                        server.base_url(),
                        started.elapsed()
                    );
                    return Some(server);
                }
                Some(_) if attempt < 3 && server.log().contains("HTTP server error") => {
                    server.child = None;
                }
                Some(status) => panic!(
                    "the llama.cpp server exited with {status} before answering:\n{}",
                    server.log()
                ),
            }
        }
        unreachable!()
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn n_ctx(&self) -> u32 {
        self.n_ctx
    }

    /// `http://127.0.0.1:PORT`: the Anthropic Messages API's base URL (`/v1/messages`).
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The OpenAI-compatible API's base URL (`/chat/completions` under it).
    pub fn openai_base_url(&self) -> String {
        format!("{}/v1", self.base_url())
    }

    pub fn anthropic_base_url(&self) -> String {
        self.base_url()
    }

    /// `GET path` on the server.
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        http_get(self.port, path)
    }

    /// What the script and llama.cpp printed so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    /// How many requests the server refused as longer than its context window.
    pub fn refusals(&self) -> usize {
        self.log().matches(REFUSAL).count()
    }

    /// The token counts of each answered request, as the server logged them (in order):
    /// `(prompt tokens evaluated, tokens generated)`. A prompt's cached prefix is not
    /// evaluated again, so the first number is what it computed, not the prompt's length.
    pub fn answered(&self) -> Vec<(u64, u64)> {
        // `slot print_timing: id  0 | task 36 | prompt eval time =  8.40 ms /     1 tokens (...`
        // `slot print_timing: id  0 | task 36 |        eval time = 52.64 ms /     7 tokens (...`
        let tokens = |line: &str| -> Option<u64> {
            let after = line.split(" ms /").nth(1)?;
            after.split_whitespace().next()?.parse().ok()
        };
        let mut out = Vec::new();
        let mut prompt = None;
        for line in self.log().lines() {
            if !line.contains("print_timing") {
                continue;
            }
            if line.contains("prompt eval time") {
                prompt = tokens(line);
            } else if line.contains("| eval time") || line.contains("  eval time") {
                if let (Some(p), Some(g)) = (prompt.take(), tokens(line)) {
                    out.push((p, g));
                }
            }
        }
        out
    }

    /// Kills the server's process group with SIGKILL, as a crash would.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            let _ = child.wait();
        }
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        self.kill9();
    }
}
