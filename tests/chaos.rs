//! The kill -9 campaign (issue 8): random `kill -9` of workers and of the daemon while projects
//! run tool calls and model calls, with the invariants checked after every kill and at the end:
//!
//! * every project is back (a ready worker) within 5 s of a kill;
//! * every acknowledged message is in its project's session;
//! * every JSONL file (sessions, task logs, the ledger) loads, with nothing skipped but a torn
//!   last line;
//! * after a clean restart no task is left `running`/`verifying` without a worker;
//! * the ledger sums equal what `pegasusctl cost` and `project list` report;
//! * no process a model started outlives its worker.
//!
//! The short form (30 kills) runs in `cargo test`. The long form is run by hand and recorded in
//! `docs/RELIABILITY.md`:
//! `PEGASUS_CHAOS_KILLS=1000 cargo test --release --test chaos -- --nocapture`
//! (`PEGASUS_CHAOS_SEED=N` replays a campaign).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use pegasus_fakellm::{FakeLlm, Match, Reply, Rule, ToolCall};
use serde_json::json;
use std::{
    collections::HashMap,
    path::Path,
    time::{Duration, Instant},
};

const PROJECTS: [&str; 3] = ["alpha", "bravo", "charlie"];
/// A string only the campaign's commands carry, to find their processes.
const MARKER: &str = "chaos-7f3e";

/// A tiny deterministic generator (xorshift), so a failing campaign can be replayed by seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Every `*.jsonl` below `dir`.
fn jsonl_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = entry.path();
        if p.is_dir() {
            jsonl_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "jsonl") {
            out.push(p);
        }
    }
}

/// The whole session history of a project (current file and archives) as text.
fn session_history(home: &Home, project: &str) -> String {
    let mut files = Vec::new();
    jsonl_files(&home.project_dir(project).join("session"), &mut files);
    files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap_or_default())
        .collect()
}

fn all_ready(home: &Home, within: Duration, what: &str) {
    let deadline = Instant::now() + within;
    loop {
        let list = home.json(&["project", "list"]);
        if list
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["worker_state"] == "ready")
        {
            return;
        }
        if Instant::now() > deadline {
            let states: Vec<String> = list
                .as_array()
                .unwrap()
                .iter()
                .map(|p| format!("{} {} {}", p["name"], p["worker_state"], p["last_crash"]))
                .collect();
            panic!("timed out after {within:?} waiting for {what}: {states:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn kill_9_campaign_keeps_every_invariant() {
    let kills: usize = std::env::var("PEGASUS_CHAOS_KILLS")
        .ok()
        .and_then(|k| k.parse().ok())
        .unwrap_or(30);
    let seed: u64 = std::env::var("PEGASUS_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("chaos: {kills} kills, PEGASUS_CHAOS_SEED={seed}");
    let mut rng = Rng(seed);

    let fake = FakeLlm::start().unwrap();
    // Every message: one exec call (a short command that a kill may cut), then an answer.
    fake.add_rule(Rule::new(
        Match::All(vec![
            Match::LastUserTextContains("job".into()),
            Match::NoToolResultYet,
        ]),
        Reply::Tools(vec![ToolCall::new(
            "exec",
            json!({"command": format!("sleep 0.0$((RANDOM % 9 + 1)) # {MARKER}; echo ok")}),
        )]),
    ));
    fake.add_rule(Rule::new(Match::Any, Reply::Text("job done".into())));
    // Fast restarts, and neither a crash-loop stop nor a growing backoff (a 1 s crash window):
    // the campaign kills far more often than a real crash loop, and measures recovery, not
    // backoff. Reflection off (each call is scripted).
    let home = Home::with_config(&format!(
        "default_model: fa/test-model\n\
         providers:\n  fa: {{kind: anthropic, base_url: \"{a}\", api_key_env: {FAKE_KEY_ENV}}}\n\
         prices:\n  \"fa/*\": {{input: 1.0, output: 2.0}}\n\
         llm: {{retry_base_ms: 10, max_retries: 1, timeout_s: 60}}\n\
         workers: {{shutdown_timeout_s: 5, restart_backoff_ms: 20, crash_loop_max: 1000, crash_loop_window_s: 1}}\n\
         agent: {{reflection: false}}\n",
        a = fake.anthropic_base_url(),
    ));
    let mut daemon = home.start_fake();
    for p in PROJECTS {
        home.create(p);
    }

    let mut acked: HashMap<&str, Vec<String>> = HashMap::new();
    let mut worst_back = Duration::ZERO;
    let mut daemon_kills = 0;
    for round in 0..kills {
        // Some work in flight: a few messages, acknowledged (durably persisted) or refused.
        for _ in 0..1 + rng.below(3) {
            let p = PROJECTS[rng.below(PROJECTS.len() as u64) as usize];
            let out = home.ctl(&["--json", "project", "send", p, &format!("job {round}")]);
            if out.status.success() {
                let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
                acked
                    .entry(p)
                    .or_default()
                    .push(v["id"].as_str().unwrap().to_string());
            }
        }
        std::thread::sleep(Duration::from_millis(rng.below(150)));
        let started = Instant::now();
        if rng.below(8) == 0 {
            daemon_kills += 1;
            daemon.kill9();
            daemon = home.start_fake();
        } else {
            let p = PROJECTS[rng.below(PROJECTS.len() as u64) as usize];
            if let Some(pid) = home.json(&["project", "show", p])["worker_pid"].as_u64() {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
                poll(
                    Duration::from_secs(5),
                    "the killed worker to be replaced",
                    || {
                        (home.json(&["project", "show", p])["worker_pid"].as_u64() != Some(pid))
                            .then_some(())
                    },
                );
            }
        }
        all_ready(
            &home,
            Duration::from_secs(5),
            "every project back within 5 s",
        );
        worst_back = worst_back.max(started.elapsed());
    }

    // Let the last messages finish, then stop cleanly and check the files at rest.
    poll(
        Duration::from_secs(30),
        "the campaign's work to settle",
        || {
            let list = home.json(&["status"]);
            list["projects"]
                .as_array()
                .unwrap()
                .iter()
                .all(|p| p["task"].is_null())
                .then_some(())
        },
    );
    home.ctl_ok(&["stop"]);
    daemon.wait_exit(Duration::from_secs(30));

    let mut violations = Vec::new();
    // Acknowledged messages are in their sessions.
    for (p, ids) in &acked {
        let history = session_history(&home, p);
        for id in ids {
            if !history.contains(id.as_str()) {
                violations.push(format!(
                    "acknowledged message {id} of {p} is not in its session"
                ));
            }
        }
    }
    // Every JSONL file loads; only a torn last line may be skipped.
    let mut files = Vec::new();
    jsonl_files(home.path(), &mut files);
    for f in &files {
        match pegasus_store::read_jsonl::<serde_json::Value>(f) {
            Ok(r) if r.skipped > 1 => {
                violations.push(format!("{}: {} lines skipped", f.display(), r.skipped))
            }
            Ok(_) => {}
            Err(e) => violations.push(format!("{}: does not load: {e}", f.display())),
        }
    }
    for p in PROJECTS {
        if let Err(e) = pegasus_store::load_session(&home.project_dir(p)) {
            violations.push(format!("session of {p} does not load: {e}"));
        }
    }
    // No process a model started outlives its worker.
    let strays = processes_with(MARKER);
    if !strays.is_empty() {
        violations.push(format!("commands outlived their workers: {strays:?}"));
    }
    // After a clean restart, nothing is left running without a worker; the ledger adds up.
    let _d = home.start_fake();
    all_ready(
        &home,
        Duration::from_secs(10),
        "every project back after the restart",
    );
    let mut stuck = Vec::new();
    for p in PROJECTS {
        for t in home.json(&["task", "list", p]).as_array().unwrap() {
            if t["state"] == "running" || t["state"] == "verifying" {
                violations.push(format!("task {} of {p} left {}", t["id"], t["state"]));
            }
            // A message's task stuck before `ready` would never run and never fail.
            if t["state"] == "draft" || t["state"] == "planned" {
                stuck.push(format!("task {} of {p} left {}", t["id"], t["state"]));
            }
        }
    }
    // The ledger adds up: what `cost` sums from the file per project is what the daemon
    // reports (the MainAgent's own spend, on `main`, is in the file too).
    let cost = home.json(&["cost"]);
    for p in home.json(&["project", "list"]).as_array().unwrap() {
        let name = p["name"].as_str().unwrap();
        let from_file = cost["by_project"][name]["usd"].as_f64().unwrap_or(0.0);
        let listed = p["cost_usd"].as_f64().unwrap_or(0.0);
        if (from_file - listed).abs() > 1e-9 {
            violations.push(format!(
                "the ledger says ${from_file} for {name} but project list says ${listed}"
            ));
        }
    }
    // Known and open (issue 8, item 9 and the campaign's finding): a kill between a message's
    // task creation and its `ready` leaves it in draft/planned. Reported, not yet enforced.
    if !stuck.is_empty() {
        eprintln!("chaos: {} tasks stuck before ready: {stuck:?}", stuck.len());
    }
    let sent: usize = acked.values().map(Vec::len).sum();
    eprintln!(
        "chaos: {kills} kills ({daemon_kills} of the daemon), {sent} acknowledged messages, \
         {} model calls, worst recovery {worst_back:?}, {} violations",
        fake.request_count(),
        violations.len()
    );
    assert!(violations.is_empty(), "seed {seed}: {violations:#?}");
}
