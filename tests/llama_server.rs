//! Pegasus against a REAL llama.cpp server (issue 23; DESIGN.md §5 "Every answered call is
//! metered", "Context windows", "Local providers"): pegasusd, its workers and pegasusctl as real
//! processes; the gateway talks to llama.cpp's own server (`scripts/llama-server`, SmolLM2-135M)
//! over both its OpenAI-compatible and its Anthropic API, with no API key.
//!
//! The model is far too small to pick tools or be right, so these tests check the path, not
//! the answers: an answer arrives and streams, every call is metered with the server's real
//! token counts under the model id the user configured, the server's real context-overflow
//! refusal is survived, the window is learned from the server, a server killed mid-answer or
//! down gives one clear error. Without the server's packages (no network) a test skips with one
//! line; under `CI=true` it fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::llama::LlamaServer;
use common::*;
use serde_json::Value;
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Model ids as the user configures them: one per API of the same server. What llama.cpp
/// calls its model (the gguf path) must never replace them.
const OPENAI: &str = "llama/smol";
const ANTHROPIC: &str = "llama-anthropic/smol";

/// Generous: two cores run the model, pegasusd, its workers and whatever else the machine does.
const ANSWER: Duration = Duration::from_secs(180);

/// One test at a time: each runs a server, pegasusd and a worker, and two cores shared by
/// several models answer too slowly to tell a hang from a queue.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// A home whose providers point at `llama` (`local: true`, no API key, priced), with
/// `default_model`, `agent.max_tokens` and `extra` YAML appended; pegasusd running on it.
/// When the home goes, its ledger is checked for lines without a cost (`Home`'s drop, in
/// tests/common): every answered call has one, estimated or not.
struct Rig {
    // Dropped in this order: the daemon, then the server, then the home's directory.
    _daemon: Daemon,
    llama: LlamaServer,
    home: Home,
}

impl Rig {
    fn start(llama: LlamaServer, model: &str, max_tokens: u32, extra: &str) -> Rig {
        let home = Home::with_config(&format!(
            "default_model: {model}\n\
             providers:\n  \
               llama: {{kind: openai, base_url: \"{o}\", local: true}}\n  \
               llama-anthropic: {{kind: anthropic, base_url: \"{a}\", local: true}}\n\
             prices:\n  \
               \"{OPENAI}\": {{input: 0.1, output: 0.2}}\n  \
               \"{ANTHROPIC}\": {{input: 0.1, output: 0.2}}\n\
             llm: {{retry_base_ms: 10, max_retries: 1, timeout_s: 150}}\n\
             workers: {{shutdown_timeout_s: 5}}\n\
             agent: {{reflection: false, max_tokens: {max_tokens}}}\n\
             dashboard: {{listen: \"127.0.0.1:0\"}}\n\
             {extra}\n",
            o = llama.openai_base_url(),
            a = llama.anthropic_base_url(),
        ));
        let daemon = home.start();
        Rig {
            _daemon: daemon,
            llama,
            home,
        }
    }

    fn ledger(&self) -> Vec<Value> {
        ledger(&self.home)
    }
}

fn ledger(home: &Home) -> Vec<Value> {
    std::fs::read_to_string(home.path().join("costs/ledger.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn estimated(line: &Value) -> bool {
    line["estimated"].as_bool().unwrap_or(false)
}

fn tokens(line: &Value, field: &str) -> u64 {
    line[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} of {line}"))
}

/// Whether `f` holds within `timeout` (polled; the caller asserts with its own message).
fn eventually(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Starts pegasusctl with `args`, collecting its stdout and stderr as they come.
struct Spawned {
    child: Child,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
    /// The two readers: joined once the child exited, so its last words are in.
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Spawned {
    fn new(home: &Home, args: &[&str]) -> Spawned {
        let mut child = Command::new(PEGASUSCTL)
            .arg("--home")
            .arg(home.path())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut readers = Vec::new();
        let mut collect = |mut from: Box<dyn Read + Send>| {
            let seen = Arc::new(Mutex::new(String::new()));
            let sink = seen.clone();
            readers.push(std::thread::spawn(move || {
                let mut buf = [0u8; 1024];
                while let Ok(n) = from.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    sink.lock()
                        .unwrap()
                        .push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            }));
            seen
        };
        let stdout = collect(Box::new(child.stdout.take().unwrap()));
        let stderr = collect(Box::new(child.stderr.take().unwrap()));
        Spawned {
            child,
            stdout,
            stderr,
            readers,
        }
    }

    fn out(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }

    fn err(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    fn wait(&mut self, timeout: Duration, what: &str) -> std::process::ExitStatus {
        let status = poll(timeout, what, || self.child.try_wait().unwrap());
        // The pipes end with the child: the readers finish with everything it wrote.
        for reader in self.readers.drain(..) {
            reader.join().unwrap();
        }
        status
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `project send NAME TEXT --wait`: the answer, which must not be empty.
fn ask(home: &Home, project: &str, text: &str) -> String {
    let answer = home
        .ctl_ok(&["project", "send", project, text, "--wait"])
        .trim()
        .to_string();
    assert!(!answer.is_empty(), "no answer to {text:?}");
    answer
}

fn tasks(home: &Home, project: &str) -> Vec<Value> {
    home.json(&["task", "list", project])
        .as_array()
        .unwrap()
        .clone()
}

/// Prose of about `bytes` bytes (about 4.2 bytes per SmolLM2 token).
fn prose(label: &str, bytes: usize) -> String {
    let mut s = format!("{label}: ");
    while s.len() < bytes {
        s.push_str("The quick brown fox jumps over the lazy dog. ");
    }
    s
}

// a + b: an answer through each API, streamed to a follower, each call metered with the
// server's own token counts under the configured model id.

fn answers_streams_and_meters(model: &str) {
    let _serial = one_at_a_time();
    let Some(llama) = LlamaServer::start(4096) else {
        return;
    };
    let started = Instant::now();
    let rig = Rig::start(llama, model, 128, "");
    let home = &rig.home;
    home.create("lp");

    let follower = Spawned::new(home, &["project", "log", "lp", "-f"]);
    poll(
        Duration::from_secs(10),
        "log -f to print the session",
        || follower.out().contains("# session of lp").then_some(()),
    );
    ask(home, "lp", "What is 2 + 2?");
    poll(ANSWER, "the first answer at log -f", || {
        (follower.out().matches("assistant [").count() == 1).then_some(())
    });
    // The follower is on the bus by now: the next answer's text reaches it as it streams.
    let mut sender = Spawned::new(
        home,
        &[
            "project",
            "send",
            "lp",
            "Tell me a short story about a cat.",
            "--wait",
            "--stream",
        ],
    );
    let status = sender.wait(ANSWER, "send --wait --stream to exit");
    assert!(status.success(), "send failed: {}", sender.err());
    assert!(!sender.out().trim().is_empty(), "no streamed answer");
    poll(ANSWER, "the second answer at log -f", || {
        (follower.out().matches("assistant [").count() == 2).then_some(())
    });
    let followed = follower.out();
    let (before, after) = followed.split_at(followed.rfind("assistant [").unwrap());
    let streamed = before
        .rsplit_once("… ")
        .map(|(_, text)| text.trim())
        .unwrap_or_else(|| panic!("no streamed text before the recorded answer:\n{followed}"));
    assert!(!streamed.is_empty(), "{followed}");
    assert!(
        before.rfind("… ") > before.find("assistant ["),
        "the streamed text is the second answer's:\n{followed}"
    );
    // The session records the model the user configured.
    assert!(
        after.starts_with(&format!("assistant [{model}]")),
        "the recorded answer names {model}:\n{followed}"
    );
    for task in tasks(home, "lp") {
        assert_eq!(task["state"], "done", "{task}");
    }

    // Every call has one ledger line, with the server's real token counts: the lines' (input,
    // output) tokens are the (prompt evaluated, generated) counts the server logged, call for
    // call (the MainAgent's calls, if any, included).
    let counts = |rig: &Rig| {
        let mut ledger: Vec<(u64, u64)> = rig
            .ledger()
            .iter()
            .map(|l| (tokens(l, "input_tokens"), tokens(l, "output_tokens")))
            .collect();
        let mut served = rig.llama.answered();
        ledger.sort_unstable();
        served.sort_unstable();
        (ledger, served)
    };
    let matched = eventually(Duration::from_secs(30), || {
        let (ledger, served) = counts(&rig);
        ledger == served
    });
    let (ledger_counts, served) = counts(&rig);
    assert!(
        matched,
        "ledger (input, output) tokens {ledger_counts:?} != the server's {served:?}"
    );
    let lines = rig.ledger();
    let project_lines: Vec<&Value> = lines.iter().filter(|l| l["project"] == "lp").collect();
    assert!(project_lines.len() >= 2, "{lines:?}");
    for line in &lines {
        assert_eq!(line["model"], model, "the configured model id: {line}");
        assert!(!estimated(line), "the server reported usage: {line}");
        assert!(tokens(line, "input_tokens") > 0, "{line}");
        assert!(tokens(line, "output_tokens") > 0, "{line}");
        let usd = line["usd"]
            .as_f64()
            .unwrap_or_else(|| panic!("usd: {line}"));
        let expected = (tokens(line, "input_tokens") as f64 * 0.1
            + tokens(line, "output_tokens") as f64 * 0.2
            + tokens(line, "cache_read_tokens") as f64 * 0.1)
            / 1e6;
        assert!(
            usd > 0.0 && usd <= expected * 1.0001,
            "priced at the configured price: {line}"
        );
    }
    eprintln!(
        "{model}: answered, streamed and metered in {:?}",
        started.elapsed()
    );
}

#[test]
fn openai_api_answers_streams_and_meters_every_call() {
    answers_streams_and_meters(OPENAI);
}

#[test]
fn anthropic_api_answers_streams_and_meters_every_call() {
    answers_streams_and_meters(ANTHROPIC);
}

// c: the server's real context-overflow refusal, through each API.

#[test]
fn openai_api_a_message_larger_than_the_servers_window_is_survived_and_the_next_is_answered() {
    overflow_is_survived(OPENAI);
}

#[test]
fn anthropic_api_a_message_larger_than_the_servers_window_is_survived_and_the_next_is_answered() {
    overflow_is_survived(ANTHROPIC);
}

fn overflow_is_survived(model: &str) {
    let _serial = one_at_a_time();
    let Some(llama) = LlamaServer::start(2048) else {
        return;
    };
    let started = Instant::now();
    // The model table claims a window 60 times the server's: Pegasus sends the message, and
    // the server refuses it with its real 400 (`exceed_context_size_error`).
    let rig = Rig::start(
        llama,
        model,
        128,
        &format!("models:\n  \"{model}\": {{context_window: 128000, max_output_tokens: 1024}}"),
    );
    let home = &rig.home;
    home.create("lp");
    ask(home, "lp", "What is 2 + 2?");

    let big = prose("Please read this note", 12_000);
    let out = home.ctl(&["project", "send", "lp", &big, "--wait"]);
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
    assert!(
        rig.llama.refusals() >= 1,
        "the server refused the message:\n{}",
        rig.llama.log()
    );
    if out.status.success() {
        // Compacted (the message cut to fit) and answered.
        assert!(!stdout.is_empty(), "an empty answer");
    } else {
        // Or the task failed, saying why in one line.
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        assert!(
            stderr.contains("context"),
            "the reason names the context window: {stderr}"
        );
    }

    // The project is not bricked: the next message is answered.
    let next = home.ctl(&["project", "send", "lp", "What is 2 + 2?", "--wait"]);
    assert!(
        next.status.success() && !next.stdout.is_empty(),
        "the next message failed: {}\nthe big one: {stderr}\n{}\nthe server's log:\n{}",
        String::from_utf8_lossy(&next.stderr),
        home.ctl_ok(&["project", "log", "lp"]),
        rig.llama.log()
    );
    let tasks = tasks(home, "lp");
    assert_eq!(tasks.len(), 3, "{tasks:?}");
    assert!(tasks.iter().all(|t| t["state"] != "running"), "{tasks:?}");
    let last = tasks
        .iter()
        .find(|t| t["title"] == "What is 2 + 2?" && t["state"] == "done");
    assert!(last.is_some(), "{tasks:?}");
    // Never a loop: a refusal or two per message at most.
    let refusals = rig.llama.refusals();
    assert!(
        refusals <= 4,
        "{refusals} refusals: Pegasus kept sending what the server refused"
    );
    eprintln!(
        "{model}: context overflow survived ({refusals} refusals) in {:?}",
        started.elapsed()
    );
}

// d: the window learned from the server.

#[test]
fn with_no_model_table_entry_the_window_is_learned_from_the_server() {
    // A 4096-token server, not 2048: Pegasus counts its system prompt and 14 tool specs as
    // ~1,370 tokens (3.5 bytes a token) plus the answer's max_tokens, which on 2048 leaves room
    // for ~140 tokens of conversation; and llama.cpp's template for this model does not render
    // the tools (the server counts ~120 tokens there), so short messages on 2048 would never
    // overflow the server, learned window or not.
    let _serial = one_at_a_time();
    let Some(llama) = LlamaServer::start(4096) else {
        return;
    };
    let started = Instant::now();
    // No entry for llama/smol: the default window (128k) would never compact these ~20 KB.
    let rig = Rig::start(llama, OPENAI, 128, "");
    let home = &rig.home;
    home.create("lp");
    // Five messages of 4 KB: about 4,700 tokens of user text in all, more than the server's
    // window, so the session must be compacted before the server sees it overflow.
    for n in 1..=5 {
        let text = format!(
            "{}\nReply with one short sentence.",
            prose(&format!("Note {n}"), 4000)
        );
        ask(home, "lp", &text);
    }
    assert_eq!(
        rig.llama.refusals(),
        0,
        "Pegasus knew the window; the server never refused:\n{}",
        rig.llama.log()
    );
    let archived = std::fs::read_dir(home.project_dir("lp").join("session/archive"))
        .map(|rd| rd.count())
        .unwrap_or(0);
    assert!(archived >= 1, "the session was compacted");
    for task in tasks(home, "lp") {
        assert_eq!(task["state"], "done", "{task}");
    }
    eprintln!(
        "5 messages over a 4096-token window answered in {:?}",
        started.elapsed()
    );
}

// e: the server killed in the middle of an answer, through each API.

#[test]
fn openai_api_a_server_killed_mid_answer_ends_the_task_with_a_clear_error_and_one_estimated_line() {
    killed_mid_answer(OPENAI);
}

#[test]
fn anthropic_api_a_server_killed_mid_answer_ends_the_task_with_a_clear_error_and_one_estimated_line(
) {
    killed_mid_answer(ANTHROPIC);
}

fn killed_mid_answer(model: &str) {
    // Every answer runs to max_tokens: 512 tokens take seconds, so the kill lands mid-stream.
    let _serial = one_at_a_time();
    let Some(llama) = LlamaServer::start_with(4096, true) else {
        return;
    };
    let started = Instant::now();
    let mut rig = Rig::start(llama, model, 512, "");
    let home = &rig.home;
    home.create("lp");
    let mut sender = Spawned::new(
        home,
        &[
            "project",
            "send",
            "lp",
            "Write a long story about a dragon.",
            "--wait",
            "--stream",
        ],
    );
    poll(ANSWER, "the first streamed words", || {
        (!sender.out().trim().is_empty()).then_some(())
    });
    rig.llama.kill9();
    let cut_at = sender.out();
    let status = sender.wait(ANSWER, "send --wait to exit");
    let err = sender.err();
    assert_eq!(status.code(), Some(1), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains("llama"), "the error names the provider: {err}");

    let home = &rig.home;
    let tasks = tasks(home, "lp");
    assert_eq!(tasks.len(), 1, "{tasks:?}");
    assert!(
        tasks[0]["state"] != "running" && tasks[0]["state"] != "done",
        "{}",
        tasks[0]
    );
    // The cut call was metered once, from the request and the text received.
    let lines: Vec<Value> = rig
        .ledger()
        .into_iter()
        .filter(|l| l["project"] == "lp")
        .collect();
    assert_eq!(lines.len(), 1, "one line for the cut call: {lines:?}");
    let line = &lines[0];
    assert!(estimated(line), "{line}");
    assert!(line["usd"].as_f64().is_some_and(|usd| usd > 0.0), "{line}");
    assert!(tokens(line, "input_tokens") > 0, "{line}");
    assert!(tokens(line, "output_tokens") > 0, "text arrived: {line}");
    assert_eq!(line["model"], model, "{line}");
    eprintln!(
        "{model}: cut after {} bytes of text; task ended with {err:?} in {:?}",
        cut_at.len(),
        started.elapsed()
    );
}

// f: the server down, through each API.

#[test]
fn openai_api_a_server_that_is_down_gives_one_clear_error_naming_it() {
    server_down(OPENAI);
}

#[test]
fn anthropic_api_a_server_that_is_down_gives_one_clear_error_naming_it() {
    server_down(ANTHROPIC);
}

fn server_down(model: &str) {
    let _serial = one_at_a_time();
    let Some(llama) = LlamaServer::start(2048) else {
        return;
    };
    let started = Instant::now();
    let mut rig = Rig::start(llama, model, 64, "");
    let home = &rig.home;
    home.create("lp");
    ask(home, "lp", "What is 2 + 2?");
    let port = rig.llama.port();
    rig.llama.kill9();
    let home = &rig.home;
    let err = home.ctl_fails(&["project", "send", "lp", "What is 3 + 3?", "--wait"]);
    assert!(err.contains("llama"), "names the provider: {err}");
    assert!(
        err.contains(&format!("127.0.0.1:{port}")),
        "names the URL: {err}"
    );
    let tasks = tasks(home, "lp");
    assert_eq!(tasks.len(), 2, "{tasks:?}");
    assert!(tasks.iter().all(|t| t["state"] != "running"), "{tasks:?}");
    // Nothing answered, nothing metered.
    let lines = rig.ledger();
    assert_eq!(
        lines.iter().filter(|l| l["project"] == "lp").count(),
        1,
        "{lines:?}"
    );
    eprintln!("{model}: down server reported in {:?}", started.elapsed());
}

// Local providers: a model with no price costs 0, never "unknown".

#[test]
fn a_local_providers_unpriced_model_costs_nothing_and_still_has_a_cost() {
    let _serial = one_at_a_time();
    let Some(llama) = LlamaServer::start(2048) else {
        return;
    };
    let rig = Rig::start(llama, "llama/free", 64, "");
    let home = &rig.home;
    home.create("lp");
    ask(home, "lp", "What is 2 + 2?");
    let lines: Vec<Value> = rig
        .ledger()
        .into_iter()
        .filter(|l| l["project"] == "lp")
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["model"], "llama/free", "{}", lines[0]);
    assert_eq!(lines[0]["usd"].as_f64(), Some(0.0), "{}", lines[0]);
    assert!(tokens(&lines[0], "output_tokens") > 0, "{}", lines[0]);
}
