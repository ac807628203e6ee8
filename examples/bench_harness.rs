//! What running Claude Code as a project's agent costs (DESIGN.md §15): `cargo build --release
//! --bins --example bench_harness && target/release/examples/bench_harness [MODE]`.
//!
//! * `ttft`: time to the first byte of a streamed answer, for the request Claude Code 2.1.332
//!   really sends (a recorded 54 KB body), sent by the same client straight to the fake LLM and
//!   through a harness project's model endpoint (the worker's relay, the link, pegasusd's
//!   gateway, the fake). The client through pegasusd is this binary itself, configured as the
//!   project's `claude-code` harness: run by the worker like Claude Code, with the endpoint
//!   and key the worker gives it, it times its requests and answers with the figures. Target:
//!   ≤ 5 ms added (median).
//! * `pss`: proportional set size of a harness project's processes (its worker, and the
//!   harness with everything it started while it works), with the real `claude` (on PATH or
//!   `PEGASUS_BENCH_CLAUDE`), for one project and for ten at once; pegasusd reported beside.
//!   The fake holds each answer 8 s so the harnesses are measured mid-call.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use pegasus_fakellm::{Fault, Match, Reply, Rule};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use support::{ms, Bins, Daemon, Res, Stats};

/// A real request of Claude Code 2.1.332 (method, path, headers, body), as the fake's
/// fixtures hold it.
const FIRST_TURN: &str =
    include_str!("../crates/pegasus-fakellm/tests/fixtures/claude-code-2.1.332/first-turn.json");

/// Requests timed per side (after a few untimed).
const REQUESTS: usize = 60;
const WARMUP: usize = 5;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    // Run by a worker as its harness: `--version` at the worker's start, `-p PROMPT ...` per run.
    if args.iter().any(|a| a == "--version") {
        println!("2.1.332 (Claude Code)");
        return ExitCode::SUCCESS;
    }
    if args.iter().any(|a| a == "-p") {
        return shim();
    }
    support::run_modes(
        "bench_harness",
        &[
            (
                "ttft",
                "time to first byte through pegasusd vs straight to the fake",
                ttft,
            ),
            ("pss", "memory of harness projects, idle and working", pss),
        ],
    )
}

// ---------------------------------------------------------------------------------------------
// ttft

/// A request to replay: its path (with query), the headers that matter, its body.
struct Recorded {
    path: String,
    headers: Vec<(String, String)>,
    body: String,
}

/// The recorded request, streaming.
fn recorded() -> Res<Recorded> {
    let v: serde_json::Value = serde_json::from_str(FIRST_TURN)?;
    let path = v["path"].as_str().ok_or("fixture: no path")?.to_string();
    let headers = v["headers"]
        .as_object()
        .ok_or("fixture: no headers")?
        .iter()
        .filter(|(k, _)| k.starts_with("anthropic-") || k.as_str() == "content-type")
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        .collect();
    let mut body = v["body"].clone();
    body["stream"] = serde_json::Value::Bool(true);
    Ok(Recorded {
        path,
        headers,
        body: body.to_string(),
    })
}

/// Sends the recorded request `REQUESTS` times (after `WARMUP`) to `base_url` with `key`; the
/// milliseconds from each send to the first byte of its answer's body. Each answer is read to
/// its end before the next request.
async fn time_first_bytes(base_url: &str, key: &str) -> Res<Vec<f64>> {
    let Recorded {
        path,
        headers,
        body,
    } = recorded()?;
    let client = reqwest::Client::builder().build()?;
    let mut firsts = Vec::new();
    for i in 0..WARMUP + REQUESTS {
        let mut req = client
            .post(format!("{}{path}", base_url.trim_end_matches('/')))
            .header("x-api-key", key)
            .body(body.clone());
        for (k, v) in &headers {
            req = req.header(k, v);
        }
        let t = Instant::now();
        let mut resp = req.send().await?;
        if !resp.status().is_success() {
            let status = resp.status();
            return Err(format!("{status}: {}", resp.text().await?).into());
        }
        let first = resp.chunk().await?.ok_or("an empty answer")?;
        let took = ms(t.elapsed());
        drop(first);
        while resp.chunk().await?.is_some() {}
        if i >= WARMUP {
            firsts.push(took);
        }
    }
    Ok(firsts)
}

/// This binary as a project's harness: times the recorded request against the endpoint the
/// worker gave it and answers with the figures, in Claude Code's stream-json.
fn shim() -> ExitCode {
    let line = |v: serde_json::Value| println!("{v}");
    line(serde_json::json!({"type": "system", "subtype": "init",
        "session_id": "00000000-0000-4000-8000-000000000001"}));
    let measured = (|| -> Res<Vec<f64>> {
        let base = std::env::var("ANTHROPIC_BASE_URL")?;
        let key = std::env::var("ANTHROPIC_API_KEY")?;
        support::runtime()?.block_on(time_first_bytes(&base, &key))
    })();
    let (text, error) = match measured {
        Ok(v) => (serde_json::to_string(&v).unwrap_or_default(), false),
        Err(e) => (format!("bench shim: {e}"), true),
    };
    line(
        serde_json::json!({"type": "result", "subtype": "success", "is_error": error,
        "result": text, "session_id": "00000000-0000-4000-8000-000000000001"}),
    );
    ExitCode::SUCCESS
}

fn ttft(bins: &Bins, _: &[String]) -> Res<bool> {
    let rules = vec![Rule::new(
        Match::Any,
        Reply::Text("Hello from the fake.".into()),
    )];
    let exe = std::env::current_exe()?;
    let (fake, _tmp, home) = support::fake_home(
        rules,
        &format!(
            "harnesses: {{claude-code: {{command: \"{}\"}}}}",
            exe.display()
        ),
    )?;
    fake.require_api_key(Some(support::KEY.into()));
    let direct =
        support::runtime()?.block_on(time_first_bytes(&fake.anthropic_base_url(), support::KEY))?;
    harness_projects(&home, 1)?;
    let mut d = Daemon::start(bins, home.root(), &[])?;
    d.wait_ready(1, Duration::from_secs(60))?;
    let name = support::project_name(0);
    let answer = d.ctl(&["project", "send", &name, "measure", "--wait"])?;
    let relayed: Vec<f64> = serde_json::from_str(answer.trim())
        .map_err(|e| format!("the harness did not answer with figures ({e}): {answer}"))?;
    let (direct, relayed) = (Stats::of(&direct), Stats::of(&relayed));
    println!("  straight to the fake   {}", direct.line(2));
    println!("  through pegasusd       {}", relayed.line(2));
    let added = relayed.median - direct.median;
    d.stop()?;
    Ok(support::verdict(
        "first byte added by pegasusd (median)",
        format!("{added:.2} ms"),
        "≤ 5 ms",
        added <= 5.0,
    ))
}

/// Projects `p0000`.. `n - 1`, active, each with `agent: claude-code`.
fn harness_projects(home: &pegasus_store::Home, n: usize) -> Res<()> {
    support::populate(home, n, |_| true)?;
    for i in 0..n {
        let file = home
            .project_dir(&support::project_name(i))
            .join("PROJECT.md");
        let text = std::fs::read_to_string(&file)?;
        std::fs::write(
            &file,
            text.replacen("---\n", "---\nagent: claude-code\n", 1),
        )?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// pss

/// The real Claude Code.
fn claude() -> Res<PathBuf> {
    if let Some(p) = std::env::var_os("PEGASUS_BENCH_CLAUDE") {
        return Ok(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("claude"))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            "no `claude` on PATH: install Claude Code or set PEGASUS_BENCH_CLAUDE".into()
        })
}

/// Every process below `pid` (children, their children, ...).
fn descendants(pid: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|p| {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
            let ppid = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            Some((p, ppid))
        })
        .collect();
    let mut out = Vec::new();
    let mut frontier = vec![pid];
    while let Some(p) = frontier.pop() {
        for (child, _) in parents.iter().filter(|(_, pp)| *pp == p) {
            out.push(*child);
            frontier.push(*child);
        }
    }
    out
}

/// PSS in KiB of the processes (those that ended meanwhile count nothing).
fn pss_of(pids: &[u32]) -> u64 {
    pids.iter().filter_map(|p| support::pss_kb(*p).ok()).sum()
}

fn pss(bins: &Bins, _: &[String]) -> Res<bool> {
    let claude = claude()?;
    let mut all_met = true;
    for n in [1usize, 10] {
        let answer = Reply::Fault(Fault::Delay {
            ms: 8_000,
            then: Box::new(Reply::Text("Done.".into())),
        });
        let (fake, _tmp, home) = support::fake_home(
            vec![Rule::new(Match::Any, answer)],
            &format!(
                "harnesses: {{claude-code: {{command: \"{}\"}}}}",
                claude.display()
            ),
        )?;
        harness_projects(&home, n)?;
        let mut d = Daemon::start(bins, home.root(), &[])?;
        d.wait_ready(n, Duration::from_secs(120))?;
        let workers = support::workers_of(home.root());
        if workers.len() != n {
            return Err(format!("{} of {n} harness workers found", workers.len()).into());
        }
        let idle_kib = pss_of(&workers);
        let senders: Vec<std::process::Child> = (0..n)
            .map(|i| {
                std::process::Command::new(bins.join("pegasusctl"))
                    .arg("--home")
                    .arg(home.root())
                    .args(["project", "send", &support::project_name(i), "Work on it."])
                    .arg("--wait")
                    .stdout(std::process::Stdio::null())
                    .spawn()
            })
            .collect::<Result<_, _>>()?;
        // Mid-call: every worker runs its Claude Code, and the harnesses' calls wait for their
        // answers.
        // Mid-call: the harnesses' calls wait for their answers (held 8 s by the fake).
        support::poll(
            Duration::from_secs(120),
            "every harness's model call",
            || (fake.request_count() >= n).then_some(()),
        )?;
        let workers = support::workers_of(home.root());
        let mut working = workers.clone();
        for w in &workers {
            working.extend(descendants(*w));
        }
        let working_kib = pss_of(&working);
        let harness_processes = working.len() - workers.len();
        let daemon_kib = support::pss_kb(d.pid)?;
        for mut s in senders {
            s.wait()?;
        }
        println!(
            "  {n} harness project(s): idle {:.1} MiB (workers), working {:.1} MiB (workers and {harness_processes} harness processes), pegasusd {:.1} MiB",
            idle_kib as f64 / 1024.0,
            working_kib as f64 / 1024.0,
            daemon_kib as f64 / 1024.0
        );
        all_met &= harness_processes >= n;
        d.stop()?;
    }
    Ok(all_met)
}
