//! Scale benchmark: 1,000 active projects on one daemon.
//!
//! Run with `cargo build --release --bins && cargo run --release --example
//! bench_scale`. It uses the release `pegasusd` and `pegasusctl` beside itself (the daemon finds
//! `project-worker` beside itself too), in a temporary home under /tmp, and prints one report
//! with a PASS/MISS per target. See docs/PERFORMANCE.md.
//!
//! Per run (`RUNS`, each a fresh daemon start on the same home):
//! * all ready: time from spawning `pegasusd --home H` until its stderr has shown `PROJECTS`
//!   `worker ready` lines (a thread timestamps each line as it arrives; no polling), confirmed
//!   by one `status` showing every worker `ready`;
//! * memory, 1 s later: the sum of `Pss` (/proc/PID/smaps_rollup) over pegasusd and every live
//!   `project-worker` of the home, and the median worker VmRSS for information;
//! * `status`: `STATUS_RUNS` requests on one control connection (after `STATUS_WARMUP`),
//!   each timed from write to answer;
//! * graceful stop: `pegasusctl stop` until pegasusd has exited, and until no worker of the
//!   home is alive.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use interprocess::local_socket::{
    tokio::{prelude::*, Stream},
    GenericFilePath, ToFsName,
};
use pegasus_proto::{
    ctl::{CtlRequest, CtlResponse, DaemonStatus},
    FrameReader, FrameWriter, WorkerState, PROTOCOL_VERSION,
};
use pegasus_store::{Home, NewProject};
use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};
use tokio::io::{ReadHalf, WriteHalf};

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

fn main() {
    if let Err(e) = run() {
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
    stop_daemon: Duration,
    stop_all: Duration,
}

fn run() -> Res<()> {
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
    populate(&home)?;
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
            "  run {}: scan done {} ms, first ready {:.0} ms, all {PROJECTS} ready {:.0} ms (CPU so far: pegasusd {:.0} ms, workers {:.0} ms); Pss total {:.1} MiB (pegasusd {:.1}, {} workers, worker VmRSS median {:.2} MiB); status median {:.1} ms; stop: daemon exited {:.0} ms, all workers gone {:.0} ms",
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
        "status",
        format!("{status:.1} ms (p99 {status_p99:.1} ms)"),
        "< 20 ms",
        status < ms(STATUS_MAX),
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

/// A control connection, speaking the same protocol as pegasusctl.
struct Ctl {
    reader: FrameReader<ReadHalf<Stream>>,
    writer: FrameWriter<WriteHalf<Stream>>,
}

impl Ctl {
    async fn connect(home: &Home) -> Res<Ctl> {
        let path = home.control_socket();
        let name = path.as_path().to_fs_name::<GenericFilePath>()?;
        let (recv, send) = tokio::io::split(Stream::connect(name).await?);
        let mut ctl = Ctl {
            reader: FrameReader::new(recv),
            writer: FrameWriter::new(send),
        };
        match ctl
            .request(&CtlRequest::Hello {
                protocol_version: PROTOCOL_VERSION,
            })
            .await?
        {
            CtlResponse::Welcome { .. } => Ok(ctl),
            other => Err(format!("unexpected answer to hello: {other:?}").into()),
        }
    }

    async fn request(&mut self, req: &CtlRequest) -> Res<CtlResponse> {
        self.writer.write(req).await?;
        Ok(self
            .reader
            .read::<CtlResponse>()
            .await?
            .ok_or("pegasusd closed the connection")?)
    }

    async fn status(&mut self) -> Res<DaemonStatus> {
        match self.request(&CtlRequest::Status).await? {
            CtlResponse::Status(s) => Ok(s),
            other => Err(format!("unexpected answer to status: {other:?}").into()),
        }
    }
}

/// `PROJECTS` active projects, made on 8 threads.
fn populate(home: &Home) -> Res<()> {
    home.ensure_layout()?;
    const THREADS: usize = 8;
    std::thread::scope(|s| -> Res<()> {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                s.spawn(move || -> Result<(), String> {
                    for i in (t..PROJECTS).step_by(THREADS) {
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
