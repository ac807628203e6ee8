//! Foundation benchmark: worker spawn latency, restart scan, idle worker memory, `project list`.
//!
//! Run with `cargo build --release --bins && cargo run --release --example
//! bench_foundation`. It uses the release binaries `pegasusd`, `pegasusctl` and
//! `project-worker` from the same target directory as itself, in temporary homes under /tmp,
//! and prints one report with a PASS/MISS per target. See docs/PERFORMANCE.md. Build the
//! binaries on their own, as `cargo install` does: `--bins --examples` in one command would
//! turn the dev-dependencies' features on in them too.
//!
//! (a) spawn→Ready: the benchmark acts as the supervisor itself (binds `<home>/run/w.sock`,
//!     spawns the worker the way `pegasus_supervisor::spawn` does, answers `Hello` with `Init`)
//!     and times spawn → `Ready`, next to spawn+reap of `/bin/true`.
//! (b) restart scan: a real `pegasusd` on a home of 1,000 projects (100 active); time from its
//!     spawn until the 100th worker is ready. "Ready" is observed from the daemon's own
//!     `worker ready` log line on its stderr (event driven, no polling); the `status` answer
//!     is checked afterwards, and two extra runs poll `status` every 2 ms for comparison.
//! (c) idle memory of those 100 workers (and of one lone worker) from /proc.
//! (d) wall time of `pegasusctl --json project list` on that home, daemon up and down.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use interprocess::{
    local_socket::{
        tokio::{prelude::*, Listener, Stream},
        GenericFilePath, ListenerOptions, ToFsName,
    },
    os::unix::local_socket::ListenerOptionsExt,
};
use pegasus_proto::{
    ctl::{CtlRequest, CtlResponse, DaemonStatus},
    worker::{FromWorker, Init, ToWorker},
    FrameReader, FrameWriter, WorkerState, PROTOCOL_VERSION,
};
use pegasus_store::{Home, NewProject, ProjectFile, Verb};
use std::{
    collections::HashMap,
    io::{BufRead, BufReader, Read},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};
use tokio::io::{AsyncWriteExt, ReadHalf, WriteHalf};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Measured spawns per kind in (a), after `WARMUP` discarded ones.
const SPAWNS: usize = 200;
const WARMUP: usize = 10;
/// Projects in the (b) home, and how many of them are active.
const PROJECTS: usize = 1000;
const ACTIVE: usize = 100;
/// Restart-scan runs timed from the daemon's log events, and extra runs timed by `status` polls.
const SCAN_RUNS: usize = 5;
const POLL_RUNS: usize = 2;
const POLL_EVERY: Duration = Duration::from_millis(2);
/// `project list` runs per mode in (d), after `LIST_WARMUP` discarded ones.
const LIST_RUNS: usize = 30;
const LIST_WARMUP: usize = 3;

/// Targets.
const SPAWN_RATIO_MAX: f64 = 3.0;
const SCAN_MAX: Duration = Duration::from_millis(300);
/// Idle worker PSS (VmRSS is shown, not a target: it counts shared clean text in full).
const PSS_MAX_KB: u64 = 614; // 0.6 MiB
const LIST_MAX: Duration = Duration::from_millis(30);

/// The same allowlist as `pegasus_supervisor::spawn` (private there).
const ENV_ALLOWLIST: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LANG",
    "LC_ALL",
    "TZ",
    "TMPDIR",
    "PEGASUS_LOG",
    "RUST_BACKTRACE",
];

fn main() {
    if let Err(e) = run() {
        eprintln!("bench_foundation: {e}");
        std::process::exit(1);
    }
}

fn run() -> Res<()> {
    let bins = Bins::find()?;
    if cfg!(debug_assertions) {
        eprintln!(
            "warning: this benchmark was built without --release; its own overhead is inflated"
        );
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let started = Instant::now();
    println!("Pegasus foundation benchmark");
    println!(
        "  date (UTC)  {}",
        chrono::Utc::now().format("%Y-%m-%d %H:%M:%S")
    );
    println!("  binaries    {}", bins.dir.display());
    println!("  loadavg     {}", loadavg());
    println!();

    let a = rt.block_on(bench_spawn(&bins))?;
    let big = rt.block_on(bench_home(&bins))?;
    let summary = Summary { a, big };
    summary.print();
    println!();
    println!(
        "total benchmark time {:.1} s, loadavg at end {}",
        started.elapsed().as_secs_f64(),
        loadavg()
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Binaries, stats, formatting

struct Bins {
    dir: PathBuf,
    pegasusd: PathBuf,
    pegasusctl: PathBuf,
    worker: PathBuf,
}

impl Bins {
    /// The binaries beside our own target dir: `target/release/examples/bench_foundation` →
    /// `target/release/`.
    fn find() -> Res<Bins> {
        let exe = std::env::current_exe()?;
        let dir = exe
            .parent()
            .and_then(Path::parent)
            .ok_or_else(|| format!("cannot find the target dir above {}", exe.display()))?
            .to_path_buf();
        let bins = Bins {
            pegasusd: dir.join("pegasusd"),
            pegasusctl: dir.join("pegasusctl"),
            worker: dir.join("project-worker"),
            dir,
        };
        let missing: Vec<String> = [&bins.pegasusd, &bins.pegasusctl, &bins.worker]
            .into_iter()
            .filter(|p| !p.is_file())
            .map(|p| p.display().to_string())
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "missing {}: run `cargo build --release --bins` first",
                missing.join(", ")
            )
            .into());
        }
        Ok(bins)
    }
}

/// Median and nearest-rank percentiles of a sample.
#[derive(Clone, Copy)]
struct Stats {
    n: usize,
    min: f64,
    median: f64,
    p99: f64,
    max: f64,
}

impl Stats {
    fn of(values: &[f64]) -> Stats {
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n == 0 {
            return Stats {
                n,
                min: f64::NAN,
                median: f64::NAN,
                p99: f64::NAN,
                max: f64::NAN,
            };
        }
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        let rank = ((0.99 * n as f64).ceil() as usize).clamp(1, n);
        Stats {
            n,
            min: v[0],
            median,
            p99: v[rank - 1],
            max: v[n - 1],
        }
    }

    fn of_durations(d: &[Duration]) -> Stats {
        Stats::of(&d.iter().map(|d| ms(*d)).collect::<Vec<_>>())
    }

    fn line_ms(&self) -> String {
        format!(
            "median {:7.3} ms   p99 {:7.3} ms   (min {:.3}, max {:.3}, n={})",
            self.median, self.p99, self.min, self.max, self.n
        )
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn mib(kb: f64) -> f64 {
    kb / 1024.0
}

fn verdict(pass: bool) -> &'static str {
    if pass {
        "PASS"
    } else {
        "MISS"
    }
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// A temporary home with a short path (Unix socket paths are limited to 107 bytes).
fn temp_home(prefix: &str) -> Res<tempfile::TempDir> {
    Ok(tempfile::Builder::new().prefix(prefix).tempdir_in("/tmp")?)
}

fn new_project(name: &str) -> NewProject {
    NewProject {
        name: name.to_string(),
        goal: format!("Benchmark project {name}: keep the lights on."),
        background: None,
        constraints: None,
        model: None,
        workdir: None,
    }
}

// ---------------------------------------------------------------------------------------------
// (a) spawn → Ready

struct SpawnResult {
    true_plain: Stats,
    true_like_worker: Stats,
    worker: Stats,
    lone_mem: Mem,
    lone_top: Vec<Mapping>,
}

/// A worker that said `Ready` to us.
struct LiveWorker {
    child: tokio::process::Child,
    pid: u32,
    reader: FrameReader<ReadHalf<Stream>>,
    writer: FrameWriter<WriteHalf<Stream>>,
}

fn listen(path: &Path) -> Res<Listener> {
    let _ = std::fs::remove_file(path);
    let name = path.to_fs_name::<GenericFilePath>()?;
    Ok(ListenerOptions::new()
        .name(name)
        .mode(0o600)
        .create_tokio()?)
}

/// A command configured like `pegasus_supervisor::spawn::spawn_worker`: cleared environment,
/// own process group, pegasusd's pid in `SUPERVISOR_PID_ENV` (the worker arms
/// `PR_SET_PDEATHSIG` itself), no `pre_exec` hook, so std spawns with `posix_spawn`.
fn supervised_command(bin: &Path) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(bin);
    cmd.env_clear()
        .envs(
            ENV_ALLOWLIST
                .iter()
                .filter_map(|k| std::env::var_os(k).map(|v| (*k, v))),
        )
        .env(
            pegasus_proto::worker::SUPERVISOR_PID_ENV,
            std::process::id().to_string(),
        )
        .process_group(0)
        .kill_on_drop(false);
    cmd
}

fn new_token() -> Res<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Spawns one worker and runs the supervisor's side of the handshake; returns the time from
/// just before the spawn to the `Ready` frame.
async fn spawn_to_ready(
    bin: &Path,
    project_dir: &Path,
    stderr_log: &Path,
    listener: &Listener,
    init: &Init,
) -> Res<(Duration, LiveWorker)> {
    let token = new_token()?; // pegasusd makes the token before it spawns, too
    let t0 = Instant::now();
    let stderr = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(stderr_log)?;
    let mut child = supervised_command(bin)
        .arg(project_dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::from(stderr))
        .spawn()?;
    let pid = child.id().ok_or("the worker exited at once")?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(format!("{token}\n").as_bytes()).await?;
    }
    let handshake = async {
        let stream = listener.accept().await?;
        let (recv, send) = tokio::io::split(stream);
        let mut reader = FrameReader::new(recv);
        let mut writer = FrameWriter::new(send);
        match reader.read::<FromWorker>().await? {
            Some(FromWorker::Hello(h)) if h.token == token && h.pid == pid => {}
            other => return Err(format!("bad hello from the worker: {other:?}").into()),
        }
        writer.write(&ToWorker::Init(init.clone())).await?;
        loop {
            match reader.read::<FromWorker>().await? {
                Some(FromWorker::Ready) => break,
                Some(FromWorker::Heartbeat) => continue,
                other => return Err(format!("expected Ready, got {other:?}").into()),
            }
        }
        Res::Ok((reader, writer))
    };
    let (reader, writer) = match tokio::time::timeout(Duration::from_secs(10), handshake).await {
        Ok(Ok(rw)) => rw,
        Ok(Err(e)) => {
            let _ = child.start_kill();
            return Err(format!(
                "worker handshake failed: {e} (see {})",
                stderr_log.display()
            )
            .into());
        }
        Err(_) => {
            let _ = child.start_kill();
            return Err(format!("no Ready within 10 s (see {})", stderr_log.display()).into());
        }
    };
    let elapsed = t0.elapsed();
    Ok((
        elapsed,
        LiveWorker {
            child,
            pid,
            reader,
            writer,
        },
    ))
}

/// Graceful stop: `Shutdown`, wait for `ShutdownComplete` (or EOF), reap.
async fn shutdown(w: LiveWorker) -> Res<()> {
    let LiveWorker {
        mut child,
        mut reader,
        mut writer,
        ..
    } = w;
    writer.write(&ToWorker::Shutdown).await?;
    loop {
        match reader.read::<FromWorker>().await {
            Ok(Some(FromWorker::ShutdownComplete)) | Ok(None) | Err(_) => break,
            Ok(Some(_)) => continue,
        }
    }
    drop((reader, writer));
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait()).await??;
    if !status.success() {
        return Err(format!("worker exited with {status}").into());
    }
    Ok(())
}

async fn bench_spawn(bins: &Bins) -> Res<SpawnResult> {
    println!(
        "(a) spawn→Ready: {SPAWNS} spawns of each kind, interleaved, after {WARMUP} warm-up rounds"
    );
    let tmp = temp_home("pgb")?;
    let home = Home::new(tmp.path());
    home.ensure_layout()?;
    pegasus_store::create_project(&home, &new_project("lone"), chrono::Utc::now())?;
    let listener = listen(&home.worker_socket())?;
    let dir = home.project_dir("lone");
    let stderr_log = home.logs_dir().join("worker-lone.stderr");
    let init = Init {
        protocol_version: PROTOCOL_VERSION,
        config_json: serde_json::to_string(&pegasus_store::Config::default())?,
        heartbeat_ms: 5000,
        model: "fake/bench-model".into(),
        context_window: None,
    };
    let (mut plain, mut like, mut worker) = (Vec::new(), Vec::new(), Vec::new());
    let (mut worker_cpu, mut worker_faults) = (Vec::new(), Vec::new());
    for i in 0..WARMUP + SPAWNS {
        // /bin/true with std's default spawn path (posix_spawn/vfork): the floor.
        let t0 = Instant::now();
        let status = Command::new("/bin/true").spawn()?.wait()?;
        let d_plain = t0.elapsed();
        if !status.success() {
            return Err("/bin/true failed".into());
        }
        // /bin/true through the worker's spawn path (posix_spawn, tokio reaping).
        let t0 = Instant::now();
        let status = supervised_command(Path::new("/bin/true"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?
            .wait()
            .await?;
        let d_like = t0.elapsed();
        if !status.success() {
            return Err("/bin/true failed".into());
        }
        let (d_worker, live) =
            spawn_to_ready(&bins.worker, &dir, &stderr_log, &listener, &init).await?;
        // What the start cost the worker itself (outside the timed section).
        let cpu = cpu_ms(live.pid)?;
        let faults = minor_faults(live.pid)?;
        shutdown(live).await?;
        if i >= WARMUP {
            plain.push(d_plain);
            like.push(d_like);
            worker.push(d_worker);
            worker_cpu.push(cpu);
            worker_faults.push(faults);
        }
    }
    let result_plain = Stats::of_durations(&plain);
    let result_like = Stats::of_durations(&like);
    let result_worker = Stats::of_durations(&worker);
    println!(
        "    /bin/true spawn+reap (std Command)         {}",
        result_plain.line_ms()
    );
    println!(
        "    /bin/true via the worker spawn path        {}",
        result_like.line_ms()
    );
    println!(
        "    project-worker spawn→Ready                 {}",
        result_worker.line_ms()
    );
    println!(
        "    worker's own CPU until Ready: median {:.3} ms; minor page faults: median {:.0}",
        Stats::of(&worker_cpu).median,
        Stats::of(&worker_faults).median
    );

    // One lone worker, idle, for memory.
    let (_, live) = spawn_to_ready(&bins.worker, &dir, &stderr_log, &listener, &init).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let lone_mem = Mem::read(live.pid)?;
    let lone_top = top_mappings(live.pid, 9)?;
    shutdown(live).await?;
    println!();
    Ok(SpawnResult {
        true_plain: result_plain,
        true_like_worker: result_like,
        worker: result_worker,
        lone_mem,
        lone_top,
    })
}

// ---------------------------------------------------------------------------------------------
// Memory from /proc

#[derive(Clone, Default)]
struct Mem {
    rss: u64,
    pss: u64,
    pss_anon: u64,
    pss_file: u64,
    pss_dirty: Option<u64>,
    private_dirty: u64,
}

impl Mem {
    fn read(pid: u32) -> Res<Mem> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))?;
        let field = |text: &str, key: &str| -> Option<u64> {
            text.lines().find_map(|l| {
                let rest = l.strip_prefix(key)?.strip_prefix(':')?;
                rest.split_whitespace().next()?.parse().ok()
            })
        };
        let need = |text: &str, key: &str| -> Res<u64> {
            field(text, key).ok_or_else(|| format!("no {key} for pid {pid}").into())
        };
        Ok(Mem {
            rss: need(&status, "VmRSS")?,
            pss: need(&rollup, "Pss")?,
            pss_anon: need(&rollup, "Pss_Anon")?,
            pss_file: need(&rollup, "Pss_File")?,
            pss_dirty: field(&rollup, "Pss_Dirty"),
            private_dirty: need(&rollup, "Private_Dirty")?,
        })
    }

    fn line(&self) -> String {
        format!(
            "VmRSS {:.2} MiB, Pss {:.2} MiB (Pss_Anon {:.2}, Pss_File {:.2}, Pss_Dirty {}), Private_Dirty {:.2} MiB",
            mib(self.rss as f64),
            mib(self.pss as f64),
            mib(self.pss_anon as f64),
            mib(self.pss_file as f64),
            self.pss_dirty
                .map(|d| format!("{:.2}", mib(d as f64)))
                .unwrap_or_else(|| "n/a".into()),
            mib(self.private_dirty as f64),
        )
    }
}

/// One group of mappings in /proc/PID/smaps (same file and permissions), in kB.
struct Mapping {
    name: String,
    rss: u64,
    private_dirty: u64,
    pss: u64,
}

/// The mapping groups with the most resident memory.
fn top_mappings(pid: u32, n: usize) -> Res<Vec<Mapping>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps"))?;
    let mut groups: HashMap<String, [u64; 3]> = HashMap::new();
    let mut current = String::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let Some(first) = words.next() else { continue };
        if !first.ends_with(':') {
            // Header: `start-end perms offset dev inode [path]`.
            let fields: Vec<&str> = line.split_whitespace().collect();
            let perms = fields.get(1).copied().unwrap_or("?");
            let path = fields.get(5..).map(|p| p.join(" ")).unwrap_or_default();
            let path = match path.rsplit('/').next() {
                Some(base) if !base.is_empty() => base.to_string(),
                _ => "[anon]".to_string(),
            };
            current = format!("{path} {perms}");
            continue;
        }
        let slot = match first {
            "Rss:" => 0,
            "Private_Dirty:" => 1,
            "Pss:" => 2,
            _ => continue,
        };
        let kb: u64 = words.next().and_then(|v| v.parse().ok()).unwrap_or(0);
        groups.entry(current.clone()).or_default()[slot] += kb;
    }
    let mut list: Vec<Mapping> = groups
        .into_iter()
        .map(|(name, [rss, private_dirty, pss])| Mapping {
            name,
            rss,
            private_dirty,
            pss,
        })
        .collect();
    list.sort_by(|a, b| {
        b.rss
            .cmp(&a.rss)
            .then(b.private_dirty.cmp(&a.private_dirty))
    });
    list.truncate(n);
    Ok(list)
}

fn print_mappings(top: &[Mapping]) {
    println!("      top mappings by Rss (kB):             rss  priv_dirty   pss");
    for m in top {
        println!(
            "        {:<34} {:>6} {:>10} {:>6}",
            m.name, m.rss, m.private_dirty, m.pss
        );
    }
}

// ---------------------------------------------------------------------------------------------
// (b) (c) (d) on a home with 1,000 projects

struct HomeResult {
    create_time: Duration,
    scan_runs: Vec<ScanRun>,
    poll_runs: Vec<PollRun>,
    status_latency: Stats,
    worker_mem: Vec<Mem>,
    worker_top: Vec<Mapping>,
    list_up: Stats,
    list_down: Stats,
    list_empty: Stats,
    scan_inproc: Stats,
    stop_time: Duration,
}

struct PollRun {
    by_event: Duration,
    by_status: Duration,
    /// Time between the last "not all ready" request being sent and the answer that was.
    resolution: Duration,
    polls: usize,
}

/// A running pegasusd; SIGKILLed on drop (its workers follow by PDEATHSIG).
struct Daemon {
    child: Option<Child>,
    pid: u32,
    events: mpsc::Receiver<(Instant, Ev)>,
}

/// A daemon log line we time.
enum Ev {
    /// `restart scan done`: every active project has its slot task.
    ScanDone,
    /// `worker ready`: a slot just got `Ready` from its worker.
    Ready,
}

/// When things happened in one daemon start, from the daemon's stderr.
struct Timeline {
    scan_done: Option<Instant>,
    first_ready: Instant,
    last_ready: Instant,
}

/// One event-driven restart-scan run, relative to the daemon's spawn.
struct ScanRun {
    scan_done: Option<Duration>,
    first_ready: Duration,
    all_ready: Duration,
    status_confirm: Duration,
    /// CPU time (user + system) spent up to "all ready" by pegasusd and by all its workers.
    daemon_cpu_ms: f64,
    workers_cpu_ms: f64,
}

impl Daemon {
    fn start(bins: &Bins, home: &Path) -> Res<Daemon> {
        let mut child = Command::new(&bins.pegasusd)
            .arg("--home")
            .arg(home)
            .env("PEGASUS_LOG", "info")
            .env_remove("PEGASUS_WORKER_BIN")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()?;
        let stderr = child.stderr.take().ok_or("no stderr pipe")?;
        let (tx, rx) = mpsc::channel();
        // Drains the daemon's stderr for its whole life (so it never blocks on a full pipe) and
        // timestamps every `worker ready` line the moment it arrives.
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stderr);
            let mut line = String::new();
            loop {
                line.clear();
                match lines.read_line(&mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        if line.contains("worker ready") {
                            let _ = tx.send((Instant::now(), Ev::Ready));
                        } else if line.contains("restart scan done") {
                            let _ = tx.send((Instant::now(), Ev::ScanDone));
                        } else if line.contains("ERROR") || line.contains("WARN") {
                            eprint!("    pegasusd: {line}");
                        }
                    }
                }
            }
        });
        Ok(Daemon {
            pid: child.id(),
            child: Some(child),
            events: rx,
        })
    }

    /// Waits for `n` `worker ready` lines.
    fn wait_ready_events(&mut self, n: usize, timeout: Duration) -> Res<Timeline> {
        let deadline = Instant::now() + timeout;
        let (mut scan_done, mut first, mut last) = (None, None, None);
        let mut i = 0;
        while i < n {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok((t, Ev::ScanDone)) => scan_done = Some(t),
                Ok((t, Ev::Ready)) => {
                    first.get_or_insert(t);
                    last = Some(t);
                    i += 1;
                }
                Err(_) => {
                    return Err(format!(
                        "only {i} of {n} workers ready after {timeout:?} (daemon exited: {:?})",
                        self.child
                            .as_mut()
                            .and_then(|c| c.try_wait().ok().flatten())
                    )
                    .into())
                }
            }
        }
        match (first, last) {
            (Some(first_ready), Some(last_ready)) => Ok(Timeline {
                scan_done,
                first_ready,
                last_ready,
            }),
            _ => Err("no workers expected".into()),
        }
    }

    fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Waits for the daemon to exit on its own.
    fn wait_exit(&mut self, timeout: Duration) -> Res<()> {
        let deadline = Instant::now() + timeout;
        let child = self.child.as_mut().ok_or("daemon already gone")?;
        loop {
            if let Some(status) = child.try_wait()? {
                self.child = None;
                if !status.success() {
                    return Err(format!("pegasusd exited with {status}").into());
                }
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("pegasusd did not exit within {timeout:?}").into());
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A control connection: `pegasusctl`'s own client.
struct Ctl(pegasus_ctl::client::Client);

impl Ctl {
    async fn connect(home: &Home) -> Res<Ctl> {
        Ok(Ctl(pegasus_ctl::client::Client::connect(home).await?))
    }

    /// Connects, retrying every `POLL_EVERY` until `deadline`.
    async fn connect_retry(home: &Home, deadline: Instant) -> Res<Ctl> {
        loop {
            match Ctl::connect(home).await {
                Ok(c) => return Ok(c),
                Err(e) if Instant::now() > deadline => return Err(e),
                Err(_) => tokio::time::sleep(POLL_EVERY).await,
            }
        }
    }

    async fn status(&mut self) -> Res<DaemonStatus> {
        match self.0.request(CtlRequest::Status).await? {
            CtlResponse::Status(s) => Ok(s),
            other => Err(format!("unexpected answer to status: {other:?}").into()),
        }
    }
}

fn ready_count(s: &DaemonStatus) -> usize {
    s.projects
        .iter()
        .filter(|p| p.worker_state == WorkerState::Ready)
        .count()
}

/// Builds the home: `PROJECTS` projects, every tenth active, the rest suspended.
fn populate(home: &Home) -> Res<()> {
    home.ensure_layout()?;
    const THREADS: usize = 8;
    std::thread::scope(|s| -> Res<()> {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                s.spawn(move || -> Result<(), String> {
                    for i in (t..PROJECTS).step_by(THREADS) {
                        let name = format!("p{i:04}");
                        let now = chrono::Utc::now();
                        pegasus_store::create_project(home, &new_project(&name), now)
                            .map_err(|e| e.to_string())?;
                        if i % (PROJECTS / ACTIVE) != 0 {
                            let dir = home.project_dir(&name);
                            let mut p = ProjectFile::load(&dir).map_err(|e| e.to_string())?;
                            p.apply(Verb::Suspend, now).map_err(|e| e.to_string())?;
                            p.save(&dir).map_err(|e| e.to_string())?;
                        }
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

/// CPU time a process has run so far, in ms: the sum of `/proc/PID/task/*/schedstat` (ns
/// precision; `/proc/PID/stat` counts 10 ms ticks, too coarse for a 1 ms worker start). Threads
/// that already exited are not counted.
fn cpu_ms(pid: u32) -> Res<f64> {
    let mut ns = 0u64;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let path = task?.path().join("schedstat");
        let Ok(text) = std::fs::read_to_string(&path) else {
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

/// Minor page faults of a process so far (`/proc/PID/stat` field 10).
fn minor_faults(pid: u32) -> Res<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    // After the `(comm)`, the first word is field 3 (state); minflt is field 10.
    Ok(rest
        .split_whitespace()
        .nth(10 - 3)
        .ok_or("short /proc/PID/stat")?
        .parse::<f64>()?)
}

fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rsplit(')')
                .next()
                .and_then(|rest| rest.split_whitespace().next());
            !matches!(state, Some("Z") | Some("X") | None)
        }
        Err(_) => false,
    }
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
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Times `pegasusctl --home H --json project list` (the whole process, output captured).
fn time_list(bins: &Bins, home: &Path, expect: (usize, usize)) -> Res<Stats> {
    let mut times = Vec::new();
    for i in 0..LIST_WARMUP + LIST_RUNS {
        let t0 = Instant::now();
        let out = Command::new(&bins.pegasusctl)
            .arg("--home")
            .arg(home)
            .args(["--json", "project", "list"])
            .stdin(Stdio::null())
            .output()?;
        let d = t0.elapsed();
        if !out.status.success() {
            return Err(format!(
                "pegasusctl project list failed: {}",
                String::from_utf8_lossy(&out.stderr)
            )
            .into());
        }
        if i == 0 {
            let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
            let list = v.as_array().ok_or("project list --json is not an array")?;
            let ready = list.iter().filter(|p| p["worker_state"] == "ready").count();
            if (list.len(), ready) != expect {
                return Err(format!(
                    "project list shows {} projects, {ready} ready; expected {expect:?}",
                    list.len()
                )
                .into());
            }
        }
        if i >= LIST_WARMUP {
            times.push(d);
        }
    }
    Ok(Stats::of_durations(&times))
}

async fn bench_home(bins: &Bins) -> Res<HomeResult> {
    let tmp = temp_home("pgb")?;
    let home = Home::new(tmp.path());
    let root = tmp.path().to_path_buf();
    print!(
        "(b) populating {PROJECTS} projects ({ACTIVE} active) in {} ... ",
        root.display()
    );
    std::io::Write::flush(&mut std::io::stdout())?;
    let t0 = Instant::now();
    populate(&home)?;
    let create_time = t0.elapsed();
    println!("{:.1} s", create_time.as_secs_f64());
    println!(
        "    t=0 is just before spawning pegasusd. Event-driven runs timestamp each `worker ready` \
         line as it arrives on the daemon's stderr pipe (blocking read, no polling: resolution \
         ~µs). Status-polled runs send `status` every {} ms; their resolution is printed.",
        POLL_EVERY.as_millis()
    );

    // (b) restart scan, POLL_RUNS runs observed by status polling, then SCAN_RUNS by events.
    let mut poll_runs = Vec::new();
    let mut scan_runs = Vec::new();
    let mut status_lat = Vec::new();
    let mut kept: Option<Daemon> = None;
    for run in 0..POLL_RUNS + SCAN_RUNS {
        wait_no_workers(&root, Duration::from_secs(10))?;
        let by_status = run < POLL_RUNS;
        let t0 = Instant::now();
        let mut daemon = Daemon::start(bins, &root)?;
        let deadline = t0 + Duration::from_secs(30);
        if by_status {
            let mut ctl = Ctl::connect_retry(&home, deadline).await?;
            let mut prev_sent = Instant::now();
            let mut polls = 0;
            let (ready_at, resolution) = loop {
                let sent = Instant::now();
                let s = ctl.status().await?;
                let got = Instant::now();
                polls += 1;
                status_lat.push(got - sent);
                if ready_count(&s) == ACTIVE {
                    break (got, got - prev_sent);
                }
                if got > deadline {
                    return Err("workers not ready within 30 s".into());
                }
                prev_sent = sent;
                tokio::time::sleep(POLL_EVERY).await;
            };
            let ev = daemon.wait_ready_events(ACTIVE, Duration::from_secs(5))?;
            let r = PollRun {
                by_event: ev.last_ready - t0,
                by_status: ready_at - t0,
                resolution,
                polls,
            };
            println!(
                "    run {} (status polled every {} ms): all {ACTIVE} ready at {:.1} ms by status ({} polls, resolution {:.1} ms); log events say {:.1} ms",
                run + 1,
                POLL_EVERY.as_millis(),
                ms(r.by_status),
                r.polls,
                ms(r.resolution),
                ms(r.by_event)
            );
            poll_runs.push(r);
        } else {
            let ev = daemon.wait_ready_events(ACTIVE, Duration::from_secs(30))?;
            let by_event = ev.last_ready - t0;
            // CPU spent so far (10 ms ticks per process; summed over 100 workers).
            let daemon_cpu_ms = cpu_ms(daemon.pid)?;
            let workers_cpu_ms = workers_of(&root)
                .into_iter()
                .map(cpu_ms)
                .sum::<Res<f64>>()?;
            // Confirm with the daemon's own answer.
            let mut ctl = Ctl::connect_retry(&home, deadline).await?;
            let sent = Instant::now();
            let s = ctl.status().await?;
            let got = Instant::now();
            status_lat.push(got - sent);
            let ready = ready_count(&s);
            if ready != ACTIVE {
                return Err(format!(
                    "status shows {ready} ready workers after {ACTIVE} ready events"
                )
                .into());
            }
            let r = ScanRun {
                scan_done: ev.scan_done.map(|t| t - t0),
                first_ready: ev.first_ready - t0,
                all_ready: by_event,
                status_confirm: got - t0,
                daemon_cpu_ms,
                workers_cpu_ms,
            };
            println!(
                "    run {} (event driven): scan done at {} ms, first ready {:.1} ms, all {ACTIVE} ready at {:.1} ms; status confirms at {:.1} ms; CPU pegasusd {:.0} ms + workers {:.0} ms",
                run + 1,
                r.scan_done.map(|d| format!("{:.1}", ms(d))).unwrap_or_else(|| "?".into()),
                ms(r.first_ready),
                ms(r.all_ready),
                ms(r.status_confirm),
                r.daemon_cpu_ms,
                r.workers_cpu_ms
            );
            scan_runs.push(r);
        }
        if run + 1 < POLL_RUNS + SCAN_RUNS {
            daemon.kill9();
        } else {
            kept = Some(daemon);
        }
    }
    let mut daemon = kept.ok_or("no daemon kept")?;
    println!();

    // (c) idle memory of the 100 workers.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut ctl = Ctl::connect(&home).await?;
    let s = ctl.status().await?;
    drop(ctl);
    let pids: Vec<u32> = s.projects.iter().filter_map(|p| p.worker_pid).collect();
    if pids.len() != ACTIVE || workers_of(&root).len() != ACTIVE {
        return Err(format!("expected {ACTIVE} workers, status lists {}", pids.len()).into());
    }
    let worker_mem = pids
        .iter()
        .map(|p| Mem::read(*p))
        .collect::<Res<Vec<_>>>()?;
    let worker_top = top_mappings(pids[0], 9)?;

    // (d) project list with the daemon up, then stop it and list with it down.
    let list_up = time_list(bins, &root, (PROJECTS, ACTIVE))?;
    let t0 = Instant::now();
    let out = Command::new(&bins.pegasusctl)
        .arg("--home")
        .arg(&root)
        .arg("stop")
        .output()?;
    if !out.status.success() {
        return Err(format!(
            "pegasusctl stop failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    daemon.wait_exit(Duration::from_secs(60))?;
    let stop_time = t0.elapsed();
    wait_no_workers(&root, Duration::from_secs(10))?;
    let list_down = time_list(bins, &root, (PROJECTS, 0))?;
    // Breakdown of the daemon-down path: process floor and the scan itself.
    let empty = temp_home("pgb")?;
    let list_empty = time_list(bins, empty.path(), (0, 0))?;
    let mut scans = Vec::new();
    for i in 0..LIST_WARMUP + 10 {
        let t0 = Instant::now();
        let entries = pegasus_store::scan_projects(&home)?;
        let d = t0.elapsed();
        if entries.len() != PROJECTS {
            return Err(format!("scan found {} projects", entries.len()).into());
        }
        if i >= LIST_WARMUP {
            scans.push(d);
        }
    }
    let scan_inproc = Stats::of_durations(&scans);

    Ok(HomeResult {
        create_time,
        scan_runs,
        poll_runs,
        status_latency: Stats::of_durations(&status_lat),
        worker_mem,
        worker_top,
        list_up,
        list_down,
        list_empty,
        scan_inproc,
        stop_time,
    })
}

// ---------------------------------------------------------------------------------------------
// Report

struct Summary {
    a: SpawnResult,
    big: HomeResult,
}

impl Summary {
    fn print(&self) {
        let (a, b) = (&self.a, &self.big);
        let ratio = a.worker.median / a.true_plain.median;
        let ratio_p99 = a.worker.p99 / a.true_plain.p99;
        let ratio_like = a.worker.median / a.true_like_worker.median;

        let all_ready: Vec<Duration> = b.scan_runs.iter().map(|r| r.all_ready).collect();
        let scan = Stats::of_durations(&all_ready);
        let confirm = Stats::of_durations(
            &b.scan_runs
                .iter()
                .map(|r| r.status_confirm)
                .collect::<Vec<_>>(),
        );
        let scan_done = Stats::of_durations(
            &b.scan_runs
                .iter()
                .filter_map(|r| r.scan_done)
                .collect::<Vec<_>>(),
        );
        let first_ready = Stats::of_durations(
            &b.scan_runs
                .iter()
                .map(|r| r.first_ready)
                .collect::<Vec<_>>(),
        );
        let rss: Vec<f64> = b.worker_mem.iter().map(|m| m.rss as f64).collect();
        let pss: Vec<f64> = b.worker_mem.iter().map(|m| m.pss as f64).collect();
        let pss_anon: Vec<f64> = b.worker_mem.iter().map(|m| m.pss_anon as f64).collect();
        let pss_file: Vec<f64> = b.worker_mem.iter().map(|m| m.pss_file as f64).collect();
        let pss_dirty: Vec<f64> = b
            .worker_mem
            .iter()
            .filter_map(|m| m.pss_dirty.map(|d| d as f64))
            .collect();
        let priv_dirty: Vec<f64> = b
            .worker_mem
            .iter()
            .map(|m| m.private_dirty as f64)
            .collect();
        let (rss, pss) = (Stats::of(&rss), Stats::of(&pss));

        println!("(c) idle worker memory");
        println!("    lone worker: {}", a.lone_mem.line());
        print_mappings(&a.lone_top);
        println!(
            "    {} workers of (b): VmRSS median {:.2} MiB max {:.2}; Pss median {:.2} MiB max {:.2}; Pss_Anon median {:.2}; Pss_File median {:.2}; Pss_Dirty median {}; Private_Dirty median {:.2} MiB",
            b.worker_mem.len(),
            mib(rss.median),
            mib(rss.max),
            mib(pss.median),
            mib(pss.max),
            mib(Stats::of(&pss_anon).median),
            mib(Stats::of(&pss_file).median),
            if pss_dirty.is_empty() {
                "n/a".to_string()
            } else {
                format!("{:.2}", mib(Stats::of(&pss_dirty).median))
            },
            mib(Stats::of(&priv_dirty).median),
        );
        print_mappings(&b.worker_top);
        println!();

        println!("(d) pegasusctl --json project list, {PROJECTS} projects, {LIST_RUNS} runs each (p99 of 30 = max)");
        println!("    daemon down (files only)  {}", b.list_down.line_ms());
        println!("    daemon up                 {}", b.list_up.line_ms());
        println!(
            "    breakdown: pegasusctl on an empty home (process floor)  {}",
            b.list_empty.line_ms()
        );
        println!(
            "               scan_projects of {PROJECTS} in-process (no output) {}",
            b.scan_inproc.line_ms()
        );
        println!();

        println!("(b) details");
        println!(
            "    populate {PROJECTS} projects: {:.1} s; one `status` request on this home: {}",
            b.create_time.as_secs_f64(),
            b.status_latency.line_ms()
        );
        println!(
            "    event-driven runs, all ready at: {} ms",
            all_ready
                .iter()
                .map(|d| format!("{:.1}", ms(*d)))
                .collect::<Vec<_>>()
                .join(", ")
        );
        println!(
            "    daemon's `restart scan done` log line: {}",
            scan_done.line_ms()
        );
        println!(
            "    first worker ready:                    {}",
            first_ready.line_ms()
        );
        let cpu_d = Stats::of(
            &b.scan_runs
                .iter()
                .map(|r| r.daemon_cpu_ms)
                .collect::<Vec<_>>(),
        );
        let cpu_w = Stats::of(
            &b.scan_runs
                .iter()
                .map(|r| r.workers_cpu_ms)
                .collect::<Vec<_>>(),
        );
        println!(
            "    CPU until all ready (median): pegasusd {:.0} ms + {ACTIVE} workers {:.0} ms ({:.2} ms each) = {:.0} ms, i.e. >= {:.0} ms of wall time on {} cores",
            cpu_d.median,
            cpu_w.median,
            cpu_w.median / ACTIVE as f64,
            cpu_d.median + cpu_w.median,
            (cpu_d.median + cpu_w.median) / cores() as f64,
            cores()
        );
        println!(
            "    status confirmation after the last event: {}",
            confirm.line_ms()
        );
        for (i, r) in b.poll_runs.iter().enumerate() {
            println!(
                "    status-polled run {}: {:.1} ms by status ({} polls, resolution {:.1} ms), {:.1} ms by log events",
                i + 1,
                ms(r.by_status),
                r.polls,
                ms(r.resolution),
                ms(r.by_event)
            );
        }
        println!(
            "    graceful `pegasusctl stop` with {ACTIVE} workers: {:.1} ms",
            ms(b.stop_time)
        );
        println!();

        println!("SUMMARY (verdicts on the median unless noted)");
        println!(
            "  {:<40} {:<58} {:<9} verdict",
            "metric", "result", "target"
        );
        let row = |metric: &str, result: String, target: &str, verdict: &str| {
            println!("  {metric:<40} {result:<58} {target:<9} {verdict}");
        };
        row(
            "(a) /bin/true spawn+reap (floor)",
            format!(
                "med {:.3} ms, p99 {:.3} ms",
                a.true_plain.median, a.true_plain.p99
            ),
            "-",
            "",
        );
        row(
            "(a) worker spawn→Ready",
            format!("med {:.3} ms, p99 {:.3} ms", a.worker.median, a.worker.p99),
            "-",
            "",
        );
        row(
            "(a) worker / floor",
            format!("{ratio:.2}x median, {ratio_p99:.2}x p99 ({ratio_like:.2}x vs same-path true)"),
            "<= 3x",
            verdict(ratio <= SPAWN_RATIO_MAX),
        );
        row(
            "(b) restart scan 1000 proj → 100 ready",
            format!(
                "med {:.1} ms (min {:.1}, max {:.1}, n={})",
                scan.median, scan.min, scan.max, scan.n
            ),
            "< 300 ms",
            verdict(scan.median < ms(SCAN_MAX)),
        );
        row(
            "(c) idle worker VmRSS (100 workers)",
            format!(
                "med {:.2} MiB, max {:.2} MiB",
                mib(rss.median),
                mib(rss.max)
            ),
            "-",
            "info (counts shared text in full)",
        );
        row(
            "(c) idle worker PSS (100 workers)",
            format!(
                "med {:.2} MiB, max {:.2} MiB",
                mib(pss.median),
                mib(pss.max)
            ),
            "< 0.6 MiB",
            verdict(pss.median < PSS_MAX_KB as f64),
        );
        row(
            "(c) lone worker VmRSS / PSS",
            format!(
                "{:.2} MiB / {:.2} MiB",
                mib(a.lone_mem.rss as f64),
                mib(a.lone_mem.pss as f64)
            ),
            "-",
            "info (PSS alone = no sharing)",
        );
        row(
            "(d) project list, daemon down",
            format!(
                "med {:.1} ms, p99 {:.1} ms",
                b.list_down.median, b.list_down.p99
            ),
            "< 30 ms",
            verdict(b.list_down.median < ms(LIST_MAX)),
        );
        row(
            "(d) project list, daemon up",
            format!(
                "med {:.1} ms, p99 {:.1} ms",
                b.list_up.median, b.list_up.p99
            ),
            "< 30 ms",
            verdict(b.list_up.median < ms(LIST_MAX)),
        );
    }
}
