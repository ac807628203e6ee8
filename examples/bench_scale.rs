//! Scale benchmark: 1,000 active projects on one daemon; 200 projects streaming at once.
//!
//! Run with `cargo build --release --bins && cargo run --release --example
//! bench_scale [-- stream [PROJECTS]]`. It uses the release `pegasusd` and `pegasusctl` beside
//! itself (the daemon finds `project-worker` beside itself too), in a temporary home under
//! /tmp, and prints one report with a PASS/MISS per target. See docs/PERFORMANCE.md.
//!
//! `stream`: pegasusd as the one funnel of every model call. `PROJECTS` (200) active projects
//! on the in-process fake LLM, `llm.max_concurrency` above their number; one message to each,
//! answered by a stream of text deltas 50 ms apart (20 a second per project, each delta the
//! fake's wall clock when it wrote it: `Fault::Clock`); one follower per project, subscribed
//! to the project's events as `project log -f` is (`pegasus_ctl::client::Client::follow`),
//! stamping each `TextDelta` on arrival. Over a 10 s window that starts 1 s after every
//! follower has had its first delta: delta latency (arrival − the fake's stamp) p50/p99/max,
//! deltas per second per project, and the CPU (utime + stime from /proc/PID/stat) of pegasusd,
//! of all workers and of this process (the fake and the followers).
//!
//! Default, per run (`RUNS`, each a fresh daemon start on the same home):
//! * all ready: time from spawning `pegasusd --home H` until its stderr has shown `PROJECTS`
//!   `worker ready` lines (a thread timestamps each line as it arrives; no polling), confirmed
//!   by one `status` showing every worker `ready`;
//! * memory, 1 s later: the sum of `Pss` (/proc/PID/smaps_rollup) over pegasusd and every live
//!   `project-worker` of the home, and the median worker VmRSS for information;
//! * `status`: `STATUS_RUNS` requests on one control connection (after `STATUS_WARMUP`),
//!   each timed from write to answer, and `STATUS_RUNS` whole `pegasusctl status --json`
//!   commands, each timed from spawn to exit with its output read, as a user meets it;
//! * graceful stop: `pegasusctl stop` until pegasusd has exited, and until no worker of the
//!   home is alive.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use pegasus_fakellm::{FakeLlm, Fault, Match, Reply, Rule};
use pegasus_proto::{
    ctl::{CtlRequest, CtlResponse, DaemonStatus},
    BusBody, BusEvent, WorkerEvent, WorkerState,
};
use pegasus_store::{Home, NewProject};
use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Active projects in the home, daemon starts measured, `status` requests per start.
const PROJECTS: usize = 1000;
const RUNS: usize = 3;
const STATUS_RUNS: usize = 30;
const STATUS_WARMUP: usize = 3;

/// Targets.
const READY_MAX: Duration = Duration::from_secs(2);
const PSS_MAX_MIB: f64 = 600.0;
const STOP_MAX: Duration = Duration::from_secs(1);
const STATUS_MAX: Duration = Duration::from_millis(20);

/// `stream`: projects, the fake's gap between deltas, deltas per answer (long enough to cover
/// the start, the settling and the window), the window, and the targets.
const STREAM_PROJECTS: usize = 200;
const STREAM_GAP_MS: u64 = 50;
const STREAM_DELTAS: usize = 500;
const STREAM_SETTLE: Duration = Duration::from_secs(1);
const STREAM_WINDOW: Duration = Duration::from_secs(10);
const DELTA_P99_MAX_MS: f64 = 5.0;
const DAEMON_CPU_MAX: f64 = 0.5;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        [] => run(),
        ["stream"] => stream(STREAM_PROJECTS),
        ["stream", n] => match n.parse() {
            Ok(n) if n > 0 => stream(n),
            _ => Err(format!("not a number of projects: {n}").into()),
        },
        _ => Err("usage: bench_scale [stream [PROJECTS]]".into()),
    };
    if let Err(e) = result {
        eprintln!("bench_scale: {e}");
        std::process::exit(1);
    }
}

struct RunResult {
    scan_done: Option<Duration>,
    first_ready: Duration,
    all_ready: Duration,
    /// CPU (user + system) used up to "all ready" by pegasusd and by all its workers, in ms.
    cpu_daemon_ms: f64,
    cpu_workers_ms: f64,
    pss_total_kb: u64,
    pss_daemon_kb: u64,
    rss_worker_median_kb: u64,
    workers: usize,
    status: Vec<Duration>,
    status_cmd: Vec<Duration>,
    stop_daemon: Duration,
    stop_all: Duration,
}

/// The target dir holding this example, and its `pegasusd` and `pegasusctl`.
fn binaries() -> Res<(PathBuf, PathBuf, PathBuf)> {
    let dir = std::env::current_exe()?
        .parent()
        .and_then(Path::parent)
        .ok_or("cannot find the target dir")?
        .to_path_buf();
    let (pegasusd, pegasusctl) = (dir.join("pegasusd"), dir.join("pegasusctl"));
    for b in [&pegasusd, &pegasusctl, &dir.join("project-worker")] {
        if !b.exists() {
            return Err(format!(
                "{} is missing: run `cargo build --release --bins` first",
                b.display()
            )
            .into());
        }
    }
    Ok((dir, pegasusd, pegasusctl))
}

fn run() -> Res<()> {
    let (dir, pegasusd, pegasusctl) = binaries()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    println!("Pegasus scale benchmark: {PROJECTS} active projects on one daemon");
    println!(
        "  date (UTC)  {}",
        chrono::Utc::now().format("%Y-%m-%d %H:%M:%S")
    );
    println!("  binaries    {}", dir.display());
    println!("  loadavg     {}", loadavg());

    let tmp = tempfile::Builder::new().prefix("pgs").tempdir_in("/tmp")?;
    let root = tmp.path().to_path_buf();
    let home = Home::new(&root);
    let t0 = Instant::now();
    populate(&home, PROJECTS)?;
    println!(
        "  populated {PROJECTS} active projects in {:.1} s ({})",
        t0.elapsed().as_secs_f64(),
        root.display()
    );

    let mut runs = Vec::new();
    for i in 0..RUNS {
        wait_no_workers(&root, Duration::from_secs(20))?;
        let r = rt.block_on(one_run(&pegasusd, &pegasusctl, &root, &home))?;
        println!(
            "  run {}: scan done {} ms, first ready {:.0} ms, all {PROJECTS} ready {:.0} ms (CPU so far: pegasusd {:.0} ms, workers {:.0} ms); Pss total {:.1} MiB (pegasusd {:.1}, {} workers, worker VmRSS median {:.2} MiB); status median {:.1} ms (as a command {:.1} ms); stop: daemon exited {:.0} ms, all workers gone {:.0} ms",
            i + 1,
            r.scan_done.map(|d| format!("{:.0}", ms(d))).unwrap_or_else(|| "?".into()),
            ms(r.first_ready),
            ms(r.all_ready),
            r.cpu_daemon_ms,
            r.cpu_workers_ms,
            r.pss_total_kb as f64 / 1024.0,
            r.pss_daemon_kb as f64 / 1024.0,
            r.workers,
            r.rss_worker_median_kb as f64 / 1024.0,
            median(&r.status.iter().map(|d| ms(*d)).collect::<Vec<_>>()),
            median(&r.status_cmd.iter().map(|d| ms(*d)).collect::<Vec<_>>()),
            ms(r.stop_daemon),
            ms(r.stop_all),
        );
        runs.push(r);
    }

    let all_ready = median(&runs.iter().map(|r| ms(r.all_ready)).collect::<Vec<_>>());
    let pss = median(
        &runs
            .iter()
            .map(|r| r.pss_total_kb as f64 / 1024.0)
            .collect::<Vec<_>>(),
    );
    let stop = median(&runs.iter().map(|r| ms(r.stop_daemon)).collect::<Vec<_>>());
    let stop_all = median(&runs.iter().map(|r| ms(r.stop_all)).collect::<Vec<_>>());
    let status: Vec<f64> = runs
        .iter()
        .flat_map(|r| r.status.iter().map(|d| ms(*d)))
        .collect();
    let status_p99 = p99(&status);
    let status = median(&status);
    let status_cmd: Vec<f64> = runs
        .iter()
        .flat_map(|r| r.status_cmd.iter().map(|d| ms(*d)))
        .collect();
    let (status_cmd_p99, status_cmd_min, status_cmd_max) = (
        p99(&status_cmd),
        status_cmd.iter().copied().fold(f64::INFINITY, f64::min),
        status_cmd.iter().copied().fold(0.0, f64::max),
    );
    let status_cmd = median(&status_cmd);
    println!();
    println!("SUMMARY (medians over {RUNS} runs; status over all its requests)");
    let row = |metric: &str, result: String, target: &str, pass: bool| {
        println!(
            "  {metric:<34} {result:<36} {target:<9} {}",
            if pass { "PASS" } else { "MISS" }
        );
    };
    row(
        "all ready after daemon start",
        format!("{all_ready:.0} ms"),
        "< 2 s",
        all_ready < ms(READY_MAX),
    );
    row(
        "total PSS (daemon + workers)",
        format!("{pss:.1} MiB"),
        "< 600 MiB",
        pss < PSS_MAX_MIB,
    );
    row(
        "graceful stop (daemon exit)",
        format!("{stop:.0} ms (all workers gone {stop_all:.0} ms)"),
        "< 1 s",
        stop < ms(STOP_MAX),
    );
    row(
        "`pegasusctl status --json` command",
        format!(
            "{status_cmd:.1} ms ({status_cmd_min:.1}–{status_cmd_max:.1}, p99 {status_cmd_p99:.1})"
        ),
        "< 20 ms",
        status_cmd < ms(STATUS_MAX),
    );
    println!(
        "  (info) status request on an open connection: {status:.1} ms (p99 {status_p99:.1} ms)"
    );
    println!("  loadavg at end {}", loadavg());
    Ok(())
}

async fn one_run(pegasusd: &Path, pegasusctl: &Path, root: &Path, home: &Home) -> Res<RunResult> {
    let t0 = Instant::now();
    let mut child = Command::new(pegasusd)
        .arg("--home")
        .arg(root)
        .env("PEGASUS_LOG", "info")
        .env_remove("PEGASUS_WORKER_BIN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let daemon_pid = child.id();
    let events = watch_stderr(&mut child)?;
    let result = async {
        let deadline = t0 + Duration::from_secs(60);
        let (mut scan_done, mut first, mut n) = (None, None, 0);
        let mut last = t0;
        while n < PROJECTS {
            match events.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok((t, true)) => {
                    first.get_or_insert(t);
                    last = t;
                    n += 1;
                }
                Ok((t, false)) => scan_done = Some(t - t0),
                Err(_) => return Err(format!("only {n} of {PROJECTS} workers ready").into()),
            }
        }
        let cpu_daemon_ms = cpu_ms(daemon_pid)?;
        let mut cpu_workers_ms = 0.0;
        for pid in workers_of(root) {
            cpu_workers_ms += cpu_ms(pid).unwrap_or(0.0);
        }
        let mut ctl = Ctl::connect(home).await?;
        let s = ctl.status().await?;
        let ready = s
            .projects
            .iter()
            .filter(|p| p.worker_state == WorkerState::Ready)
            .count();
        if ready != PROJECTS {
            return Err(format!("status shows {ready} ready after {PROJECTS} ready lines").into());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let workers = workers_of(root);
        let mut pss_total = pss_kb(daemon_pid)?;
        let pss_daemon = pss_total;
        let mut rss = Vec::new();
        for pid in &workers {
            pss_total += pss_kb(*pid)?;
            rss.push(rss_kb(*pid)? as f64);
        }
        let mut status = Vec::new();
        for i in 0..STATUS_WARMUP + STATUS_RUNS {
            let sent = Instant::now();
            ctl.status().await?;
            if i >= STATUS_WARMUP {
                status.push(sent.elapsed());
            }
        }
        drop(ctl);
        let mut status_cmd = Vec::new();
        for i in 0..STATUS_WARMUP + STATUS_RUNS {
            let sent = Instant::now();
            let out = Command::new(pegasusctl)
                .arg("--home")
                .arg(root)
                .args(["status", "--json"])
                .stdin(Stdio::null())
                .output()?;
            let took = sent.elapsed();
            if !out.status.success() || out.stdout.len() < PROJECTS * 10 {
                return Err(format!(
                    "pegasusctl status --json failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                )
                .into());
            }
            if i >= STATUS_WARMUP {
                status_cmd.push(took);
            }
        }
        let stop_t0 = Instant::now();
        let out = Command::new(pegasusctl)
            .arg("--home")
            .arg(root)
            .arg("stop")
            .output()?;
        if !out.status.success() {
            return Err(format!(
                "pegasusctl stop failed: {}",
                String::from_utf8_lossy(&out.stderr)
            )
            .into());
        }
        loop {
            if let Some(status) = child.try_wait()? {
                if !status.success() {
                    return Err(format!("pegasusd exited with {status}").into());
                }
                break;
            }
            if stop_t0.elapsed() > Duration::from_secs(60) {
                return Err("pegasusd did not stop within 60 s".into());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let stop_daemon = stop_t0.elapsed();
        wait_no_workers(root, Duration::from_secs(20))?;
        let stop_all = stop_t0.elapsed();
        Ok(RunResult {
            scan_done,
            first_ready: first.unwrap_or(t0) - t0,
            all_ready: last - t0,
            cpu_daemon_ms,
            cpu_workers_ms,
            pss_total_kb: pss_total,
            pss_daemon_kb: pss_daemon,
            rss_worker_median_kb: median(&rss) as u64,
            workers: workers.len(),
            status,
            status_cmd,
            stop_daemon,
            stop_all,
        })
    }
    .await;
    if result.is_err() {
        let _ = child.kill();
        let _ = child.wait();
    }
    result
}

/// Drains the daemon's stderr for its whole life; `true` = a `worker ready` line, `false` =
/// `restart scan done`, each timestamped on arrival.
fn watch_stderr(child: &mut Child) -> Res<mpsc::Receiver<(Instant, bool)>> {
    let stderr = child.stderr.take().ok_or("no stderr pipe")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stderr);
        let mut line = String::new();
        loop {
            line.clear();
            match lines.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if line.contains("worker ready") {
                        let _ = tx.send((Instant::now(), true));
                    } else if line.contains("restart scan done") {
                        let _ = tx.send((Instant::now(), false));
                    } else if line.contains("ERROR") || line.contains("WARN") {
                        eprint!("    pegasusd: {line}");
                    }
                }
            }
        }
    });
    Ok(rx)
}

/// A control connection: `pegasusctl`'s own client.
struct Ctl(pegasus_ctl::client::Client);

impl Ctl {
    async fn connect(home: &Home) -> Res<Ctl> {
        Ok(Ctl(pegasus_ctl::client::Client::connect(home).await?))
    }

    async fn status(&mut self) -> Res<DaemonStatus> {
        match self.0.request(CtlRequest::Status).await? {
            CtlResponse::Status(s) => Ok(s),
            other => Err(format!("unexpected answer to status: {other:?}").into()),
        }
    }
}

/// `projects` active projects, made on 8 threads.
fn populate(home: &Home, projects: usize) -> Res<()> {
    home.ensure_layout()?;
    const THREADS: usize = 8;
    std::thread::scope(|s| -> Res<()> {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                s.spawn(move || -> Result<(), String> {
                    for i in (t..projects).step_by(THREADS) {
                        let name = format!("p{i:04}");
                        let p = NewProject {
                            name: name.clone(),
                            goal: format!("Benchmark project {name}: keep the lights on."),
                            background: None,
                            constraints: None,
                            model: None,
                            workdir: None,
                        };
                        pegasus_store::create_project(home, &p, chrono::Utc::now())
                            .map_err(|e| e.to_string())?;
                    }
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            h.join().map_err(|_| "a populate thread panicked")??;
        }
        Ok(())
    })
}

/// Live (non-zombie) `project-worker` processes whose project is in `home`.
fn workers_of(home: &Path) -> Vec<u32> {
    let prefix = home.display().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                return false;
            };
            let mut args = cmdline.split(|b| *b == 0);
            let exe = args.next().unwrap_or_default();
            let dir = args.next().unwrap_or_default();
            exe.ends_with(b"project-worker") && dir.starts_with(prefix.as_bytes()) && alive(*pid)
        })
        .collect()
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        let state = stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().next());
        !matches!(state, Some("Z") | Some("X") | None)
    })
}

fn wait_no_workers(home: &Path, timeout: Duration) -> Res<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = workers_of(home).len();
        if left == 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("{left} workers of {} still alive", home.display()).into());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn proc_field(path: PathBuf, key: &str) -> Res<u64> {
    let text = std::fs::read_to_string(&path)?;
    text.lines()
        .find_map(|l| {
            l.strip_prefix(key)?
                .strip_prefix(':')?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .ok_or_else(|| format!("no {key} in {}", path.display()).into())
}

fn pss_kb(pid: u32) -> Res<u64> {
    proc_field(PathBuf::from(format!("/proc/{pid}/smaps_rollup")), "Pss")
}

fn rss_kb(pid: u32) -> Res<u64> {
    proc_field(PathBuf::from(format!("/proc/{pid}/status")), "VmRSS")
}

/// CPU time a process has run so far, in ms: the sum of `/proc/PID/task/*/schedstat`.
fn cpu_ms(pid: u32) -> Res<f64> {
    let mut ns = 0u64;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let Ok(text) = std::fs::read_to_string(task?.path().join("schedstat")) else {
            continue; // the thread ended meanwhile
        };
        ns += text
            .split_whitespace()
            .next()
            .ok_or("empty schedstat")?
            .parse::<u64>()?;
    }
    Ok(ns as f64 / 1e6)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn p99(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    let rank = ((0.99 * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

// ---------------------------------------------------------------------------------------------
// stream

/// CPU time (utime + stime) a process has used so far, in clock ticks (100 a second).
fn cpu_ticks(pid: u32) -> Res<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let rest = stat.rsplit_once(')').ok_or("bad /proc/PID/stat")?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    Ok(f.get(11).ok_or("short stat")?.parse::<u64>()?
        + f.get(12).ok_or("short stat")?.parse::<u64>()?)
}

fn unix_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// What one follower saw: (arrival, the fake's stamp) of every stamp in every `TextDelta`, in
/// wall-clock microseconds.
type Seen = Vec<(u64, u64)>;

fn stream(projects: usize) -> Res<()> {
    let (dir, pegasusd, pegasusctl) = binaries()?;
    println!(
        "Pegasus streaming benchmark: {projects} projects streaming at once through one daemon"
    );
    println!(
        "  date (UTC)  {}",
        chrono::Utc::now().format("%Y-%m-%d %H:%M:%S")
    );
    println!("  binaries    {}", dir.display());
    println!("  loadavg     {}", loadavg());

    let fake = FakeLlm::start()?;
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("stream".into()),
        Reply::Fault(Fault::Clock {
            deltas: STREAM_DELTAS,
            gap_ms: STREAM_GAP_MS,
        }),
    ));
    fake.add_rule(Rule::new(Match::Any, Reply::Text("ok".into())));
    let tmp = tempfile::Builder::new().prefix("pgst").tempdir_in("/tmp")?;
    let root = tmp.path().to_path_buf();
    let home = Home::new(&root);
    home.ensure_layout()?;
    std::fs::write(
        home.config_file(),
        format!(
            "default_model: fa/m\nproviders:\n  fa: {{kind: anthropic, base_url: \"{}\", api_key_env: BENCH_KEY}}\nprices:\n  \"fa/*\": {{input: 1.0, output: 2.0}}\nllm: {{max_concurrency: {}}}\nagent: {{reflection: false}}\n",
            fake.anthropic_base_url(),
            projects + 8
        ),
    )?;
    populate(&home, projects)?;

    let t0 = Instant::now();
    let mut child = Command::new(&pegasusd)
        .arg("--home")
        .arg(&root)
        .env("PEGASUS_LOG", "info")
        .env("BENCH_KEY", "k")
        .env_remove("PEGASUS_WORKER_BIN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let daemon = child.id();
    let events = watch_stderr(&mut child)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let result = rt.block_on(stream_run(projects, &home, daemon, t0, &events));
    let stop_t0 = Instant::now();
    let stopped = Command::new(&pegasusctl)
        .arg("--home")
        .arg(&root)
        .arg("stop")
        .output();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait()?.is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let stop = stop_t0.elapsed();
    let _ = child.wait();
    let _ = wait_no_workers(&root, Duration::from_secs(20));
    let r = result?;
    if !stopped.is_ok_and(|o| o.status.success()) {
        return Err("pegasusctl stop failed".into());
    }

    let secs = r.window.as_secs_f64();
    let mut lat: Vec<f64> = r
        .seen
        .iter()
        .flatten()
        .filter(|(at, _)| (r.from_us..r.to_us).contains(at))
        .map(|(at, stamp)| at.saturating_sub(*stamp) as f64 / 1000.0)
        .collect();
    lat.sort_by(f64::total_cmp);
    let per_project: Vec<f64> = r
        .seen
        .iter()
        .map(|s| {
            s.iter()
                .filter(|(at, _)| (r.from_us..r.to_us).contains(at))
                .count() as f64
                / secs
        })
        .collect();
    let (p50, p99, max) = (
        median(&lat),
        p99(&lat),
        lat.last().copied().unwrap_or(f64::NAN),
    );
    let cpu = |ticks: u64| ticks as f64 / 100.0 / secs;
    let daemon_cpu = cpu(r.daemon_ticks);
    println!(
        "  {projects} projects ready {:.0} ms after pegasusd's start; every follower had its first delta {:.0} ms after the messages were sent",
        ms(r.ready),
        ms(r.first_deltas)
    );
    println!(
        "  window {:.1} s: {} deltas ({:.1} a second per project: min {:.1}, max {:.1}; the fake sends {:.0})",
        secs,
        lat.len(),
        median(&per_project),
        per_project.iter().copied().fold(f64::INFINITY, f64::min),
        per_project.iter().copied().fold(0.0, f64::max),
        1000.0 / STREAM_GAP_MS as f64
    );
    println!(
        "  CPU over the window, share of one core: pegasusd {:.1} %, {} workers {:.1} % (together), this process (fake + followers) {:.1} %",
        100.0 * daemon_cpu,
        projects,
        100.0 * cpu(r.workers_ticks),
        100.0 * cpu(r.own_ticks)
    );
    println!(
        "  graceful stop while streaming: pegasusd exited {:.0} ms after `pegasusctl stop`",
        ms(stop)
    );
    println!();
    println!("SUMMARY");
    let row = |metric: &str, result: String, target: &str, pass: bool| {
        println!(
            "  {metric:<34} {result:<36} {target:<9} {}",
            if pass { "PASS" } else { "MISS" }
        );
    };
    row(
        "delta: fake → follower",
        format!("p99 {p99:.2} ms (p50 {p50:.2}, max {max:.1})"),
        "p99 ≤ 5 ms",
        p99 <= DELTA_P99_MAX_MS,
    );
    row(
        "pegasusd CPU while streaming",
        format!("{:.1} % of one core", 100.0 * daemon_cpu),
        "≤ 50 %",
        daemon_cpu <= DAEMON_CPU_MAX,
    );
    println!("  loadavg at end {}", loadavg());
    Ok(())
}

struct StreamResult {
    ready: Duration,
    first_deltas: Duration,
    window: Duration,
    from_us: u64,
    to_us: u64,
    seen: Vec<Seen>,
    daemon_ticks: u64,
    workers_ticks: u64,
    own_ticks: u64,
}

async fn stream_run(
    projects: usize,
    home: &Home,
    daemon: u32,
    t0: Instant,
    events: &mpsc::Receiver<(Instant, bool)>,
) -> Res<StreamResult> {
    let deadline = t0 + Duration::from_secs(60);
    let mut n = 0;
    while n < projects {
        match events.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok((_, true)) => n += 1,
            Ok((_, false)) => {}
            Err(_) => return Err(format!("only {n} of {projects} workers ready").into()),
        }
    }
    let ready = t0.elapsed();
    // One follower per project, as `project log -f P`.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let started = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut followers = Vec::new();
    for i in 0..projects {
        let mut client = pegasus_ctl::client::Client::connect(home).await?;
        client.follow(Some(format!("p{i:04}"))).await?;
        let (mut stop, started) = (stop_rx.clone(), started.clone());
        followers.push(tokio::spawn(async move {
            let mut seen: Seen = Vec::new();
            loop {
                tokio::select! {
                    ev = client.next_event() => match ev {
                        Some(CtlResponse::Event(BusEvent {
                            body: BusBody::Worker(WorkerEvent::TextDelta { text, .. }),
                            ..
                        })) => {
                            let at = unix_us();
                            if seen.is_empty() {
                                started.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            }
                            seen.extend(pegasus_fakellm::clock_stamps(&text).map(|s| (at, s)));
                        }
                        Some(_) => {}
                        None => break,
                    },
                    _ = stop.changed() => break,
                }
            }
            seen
        }));
    }
    // Subscriptions are taken when pegasusd reads them: give it a moment.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut ctl = pegasus_ctl::client::Client::connect(home).await?;
    let sent = Instant::now();
    for i in 0..projects {
        match ctl
            .request(CtlRequest::ProjectSend {
                name: format!("p{i:04}"),
                text: "stream please".into(),
                wait: false,
            })
            .await?
        {
            CtlResponse::Error { message } => return Err(message.into()),
            CtlResponse::Failed { message, .. } => return Err(message.into()),
            _ => {}
        }
    }
    while started.load(std::sync::atomic::Ordering::Relaxed) < projects {
        if sent.elapsed() > Duration::from_secs(30) {
            return Err(format!(
                "only {} of {projects} followers saw a delta within 30 s",
                started.load(std::sync::atomic::Ordering::Relaxed)
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let first_deltas = sent.elapsed();
    tokio::time::sleep(STREAM_SETTLE).await;
    let workers = workers_of(home.root());
    let workers_cpu = |pids: &[u32]| pids.iter().map(|p| cpu_ticks(*p).unwrap_or(0)).sum::<u64>();
    let me = std::process::id();
    let (d0, w0, o0) = (cpu_ticks(daemon)?, workers_cpu(&workers), cpu_ticks(me)?);
    let (from_us, from) = (unix_us(), Instant::now());
    tokio::time::sleep(STREAM_WINDOW).await;
    let (to_us, window) = (unix_us(), from.elapsed());
    let (d1, w1, o1) = (cpu_ticks(daemon)?, workers_cpu(&workers), cpu_ticks(me)?);
    // Let what was sent before the window's end arrive, then stop the followers.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let _ = stop_tx.send(true);
    let mut seen = Vec::new();
    for f in followers {
        seen.push(f.await?);
    }
    Ok(StreamResult {
        ready,
        first_deltas,
        window,
        from_us,
        to_us,
        seen,
        daemon_ticks: d1.saturating_sub(d0),
        workers_ticks: w1.saturating_sub(w0),
        own_ticks: o1.saturating_sub(o0),
    })
}
