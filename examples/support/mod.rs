//! What the benchmark mains (`bench_daemon`, `bench_agent`, `bench_llama`) share: the release
//! binaries beside them, temporary homes, a real `pegasusd` watched through its own log lines,
//! `pegasusctl` runs, `pegasusctl`'s own control client, readers of /proc, statistics and the
//! PASS/MISS lines. Nothing here re-implements Pegasus: what a bench measures runs in the
//! release binaries or in the crates' own code.
#![allow(dead_code)] // each main uses a part

use pegasus_ctl::client::Client;
use pegasus_fakellm::FakeLlm;
use pegasus_proto::{
    ctl::{CtlRequest, CtlResponse, DaemonStatus},
    BusEvent, WorkerState,
};
use pegasus_store::{Home, NewProject, ProjectFile, Verb};
use std::{
    io::BufRead,
    path::{Path, PathBuf},
    process::{Child, Command, ExitCode, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};
use tempfile::TempDir;

pub type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// The environment variable the fake provider's key is read from, and the key.
pub const KEY_ENV: &str = "BENCH_KEY";
pub const KEY: &str = "sk-bench";

// ---------------------------------------------------------------------------------------------
// Binaries, modes, the report

/// The target dir this example was built in (`target/release/examples/X` → `target/release/`),
/// whose `pegasusd`, `pegasusctl` and `project-worker` every bench uses.
pub type Bins = Path;

/// The whole main of a bench: finds the binaries, prints the header, measures; exits 1 when a
/// target was missed (`Ok(false)`), 2 when it could not measure.
pub fn main_of(bench: &str, measure: impl FnOnce(&Bins) -> Res<bool>) -> ExitCode {
    let found = std::env::current_exe().map_err(Into::into).and_then(|exe| {
        let dir = exe.parent().and_then(Path::parent).ok_or("no target dir")?;
        match ["pegasusd", "pegasusctl", "project-worker"].map(|b| dir.join(b)) {
            bins if bins.iter().all(|b| b.is_file()) => Res::Ok(dir.to_path_buf()),
            _ => Err("the binaries are missing: run `cargo build --release --bins` first".into()),
        }
    });
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let date = chrono::Utc::now().format("%Y-%m-%d %H:%M:%S UTC");
    println!("{bench}: {date}, {cores} cores, kernel {}", kernel.trim());
    println!("  loadavg {}", loadavg());
    match found.and_then(|bins| {
        println!("  binaries {}", bins.display());
        measure(&bins)
    }) {
        Ok(pass) => {
            println!("\nloadavg at end {}", loadavg());
            ExitCode::from(if pass { 0 } else { 1 })
        }
        Err(e) => {
            eprintln!("{bench}: {e}");
            ExitCode::from(2)
        }
    }
}

/// One mode of a bench: its name, what it measures, and the function that measures it (its
/// extra arguments in; `Ok(false)` when a target was missed).
pub type Mode = (
    &'static str,
    &'static str,
    fn(&Bins, &[String]) -> Res<bool>,
);

/// `BENCH [MODE [ARGS]]`: the mode named, or every mode.
pub fn run_modes(bench: &str, modes: &[Mode]) -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let chosen: Vec<&Mode> = match args.first() {
        None => modes.iter().collect(),
        Some(name) => modes.iter().filter(|m| m.0 == name).collect(),
    };
    if chosen.is_empty() {
        eprintln!("usage: {bench} [MODE [ARGS]], modes:");
        modes
            .iter()
            .for_each(|(name, what, _)| eprintln!("  {name:<10} {what}"));
        return ExitCode::from(2);
    }
    main_of(bench, |bins| {
        let mut all = true;
        for (name, what, measure) in chosen {
            println!("\n== {bench} {name}: {what}");
            all &= measure(bins, args.get(1..).unwrap_or_default())?;
        }
        Ok(all)
    })
}

pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// One target's PASS/MISS line; whether it was met.
pub fn verdict(metric: &str, result: String, target: &str, met: bool) -> bool {
    let word = if met { "PASS" } else { "MISS" };
    println!("  {metric:<40} {result:<50} {target:<12} {word}");
    met
}

/// The PASS/MISS lines of a report, and whether every target was met.
#[derive(Default)]
pub struct Targets {
    missed: bool,
}

impl Targets {
    pub fn check(&mut self, metric: &str, result: String, target: &str, met: bool) {
        self.missed |= !verdict(metric, result, target, met);
    }

    pub fn met(&self) -> bool {
        !self.missed
    }
}

/// The first extra argument as a positive count, or `default`.
pub fn count_arg(args: &[String], default: usize) -> Res<usize> {
    match args.first() {
        None => Ok(default),
        Some(a) => match a.parse() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!("not a positive count: {a}").into()),
        },
    }
}

// ---------------------------------------------------------------------------------------------
// Statistics

/// A sample's median and nearest-rank percentiles.
#[derive(Clone, Copy, Debug)]
pub struct Stats {
    pub n: usize,
    pub min: f64,
    pub median: f64,
    pub p99: f64,
    pub max: f64,
}

impl Stats {
    pub fn of(values: &[f64]) -> Stats {
        let v = sorted(values);
        let median = match v.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => v[n / 2],
            n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        };
        Stats {
            n: v.len(),
            min: v.first().copied().unwrap_or(f64::NAN),
            median,
            p99: pct(&v, 99.0),
            max: v.last().copied().unwrap_or(f64::NAN),
        }
    }

    /// `median M (min–max, p99 P, n=N)` with `digits` decimals.
    pub fn line(&self, digits: usize) -> String {
        format!(
            "median {:.d$} ({:.d$}–{:.d$}, p99 {:.d$}, n={})",
            self.median,
            self.min,
            self.max,
            self.p99,
            self.n,
            d = digits
        )
    }
}

pub fn sorted(v: &[f64]) -> Vec<f64> {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v
}

/// The nearest-rank `p`th percentile.
pub fn pct(values: &[f64], p: f64) -> f64 {
    let v = sorted(values);
    if v.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

pub fn median(values: &[f64]) -> f64 {
    Stats::of(values).median
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Wall-clock microseconds, for times compared across processes.
pub fn unix_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Calls `f` every 5 ms until it gives a value or `timeout` passes.
pub fn poll<T>(timeout: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> Res<T> {
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

pub fn runtime() -> Res<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

// ---------------------------------------------------------------------------------------------
// Homes

/// A temporary directory for a home: short (a Unix socket path has at most 107 bytes), under
/// `$PEGASUS_BENCH_HOME_DIR` if set (e.g. /dev/shm, to keep the disk out of a figure), else /tmp.
pub fn temp_home(prefix: &str) -> Res<TempDir> {
    let parent = std::env::var_os("PEGASUS_BENCH_HOME_DIR").unwrap_or_else(|| "/tmp".into());
    Ok(tempfile::Builder::new().prefix(prefix).tempdir_in(parent)?)
}

/// Writes `config.yml`: provider `fa` at `base_url` (the fake LLM's Anthropic API, keyed by
/// [`KEY_ENV`]) as the default model, then `extra` (more YAML lines).
pub fn write_config(home: &Home, base_url: &str, extra: &str) -> Res<()> {
    home.ensure_layout()?;
    std::fs::write(
        home.config_file(),
        format!(
            "default_model: fa/m\n\
             providers:\n  fa: {{kind: anthropic, base_url: \"{base_url}\", api_key_env: {KEY_ENV}}}\n\
             prices:\n  \"fa/*\": {{input: 1.0, output: 2.0}}\n{extra}\n"
        ),
    )?;
    Ok(())
}

pub fn project_name(i: usize) -> String {
    format!("p{i:04}")
}

/// A fake LLM answering by `rules`, and a temporary home whose config (`extra` added) uses it.
pub fn fake_home(rules: Vec<pegasus_fakellm::Rule>, extra: &str) -> Res<(FakeLlm, TempDir, Home)> {
    let fake = FakeLlm::start()?;
    rules.into_iter().for_each(|r| fake.add_rule(r));
    let tmp = temp_home("pgh")?;
    let home = Home::new(tmp.path());
    write_config(&home, &fake.anthropic_base_url(), extra)?;
    Ok((fake, tmp, home))
}

/// Projects `p0000`.. `n - 1`, made by the store's own `create_project` on 8 threads; those for
/// which `active(i)` is false are then suspended through `ProjectFile::apply`, as `project
/// suspend` leaves them.
pub fn populate(home: &Home, n: usize, active: impl Fn(usize) -> bool + Sync) -> Res<()> {
    home.ensure_layout()?;
    const THREADS: usize = 8;
    let active = &active;
    std::thread::scope(|s| -> Res<()> {
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                s.spawn(move || -> Result<(), String> {
                    for i in (t..n).step_by(THREADS) {
                        let name = project_name(i);
                        let now = chrono::Utc::now();
                        let p = NewProject {
                            goal: format!("Benchmark project {name}: keep the lights on."),
                            name: name.clone(),
                            background: None,
                            constraints: None,
                            model: None,
                            workdir: None,
                        };
                        pegasus_store::create_project(home, &p, now).map_err(|e| e.to_string())?;
                        if !active(i) {
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
        for t in threads {
            t.join().map_err(|_| "a populate thread panicked")??;
        }
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------------
// A real pegasusd

/// What a daemon's log said so far, each line timestamped as it arrived on its stderr.
#[derive(Default)]
pub struct Seen {
    /// `pegasusd serving`: its sockets listen.
    pub serving: Option<Instant>,
    /// `worker ready`, one per worker that said `Ready`.
    pub ready: Vec<Instant>,
}

enum Line {
    Serving,
    Ready,
}

/// A real `pegasusd --home H` (`PEGASUS_LOG=info`), its stderr read line by line on a thread of
/// its own (so it never blocks on a full pipe); WARN and ERROR lines are echoed. SIGKILLed on
/// drop; its workers follow it (`PR_SET_PDEATHSIG`).
pub struct Daemon {
    child: Child,
    pub pid: u32,
    pub home: Home,
    /// Just before the spawn.
    pub started: Instant,
    pub seen: Seen,
    lines: mpsc::Receiver<(Instant, Line)>,
    pegasusctl: PathBuf,
}

impl Daemon {
    /// Starts it with `env` added (and the fake provider's key); `PEGASUS_WORKER_BIN` is
    /// removed unless `env` sets it.
    pub fn start(bins: &Bins, home: &Path, env: &[(&str, &str)]) -> Res<Daemon> {
        let mut cmd = Command::new(bins.join("pegasusd"));
        cmd.arg("--home")
            .arg(home)
            .env("PEGASUS_LOG", "info")
            .env("NO_COLOR", "1")
            .env(KEY_ENV, KEY)
            .env_remove("PEGASUS_WORKER_BIN")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let started = Instant::now();
        let mut child = cmd.spawn()?;
        let stderr = child.stderr.take().ok_or("no stderr pipe")?;
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let at = Instant::now();
                let kind = if line.contains("worker ready") {
                    Line::Ready
                } else if line.contains("pegasusd serving") {
                    Line::Serving
                } else {
                    if line.contains("ERROR") || line.contains("WARN") {
                        eprintln!("    pegasusd: {line}");
                    }
                    continue;
                };
                let _ = tx.send((at, kind));
            }
        });
        Ok(Daemon {
            pid: child.id(),
            child,
            home: Home::new(home),
            started,
            seen: Seen::default(),
            lines,
            pegasusctl: bins.join("pegasusctl"),
        })
    }

    /// Reads the log until `done(&self.seen)`.
    pub fn wait(&mut self, what: &str, timeout: Duration, done: impl Fn(&Seen) -> bool) -> Res<()> {
        let deadline = Instant::now() + timeout;
        while !done(&self.seen) {
            match self
                .lines
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok((at, Line::Serving)) => self.seen.serving = Some(at),
                Ok((at, Line::Ready)) => self.seen.ready.push(at),
                Err(_) => {
                    let exit = self.child.try_wait().ok().flatten();
                    return Err(format!(
                        "no {what} within {timeout:?} ({} workers ready; pegasusd exited: {exit:?}; its log is in {})",
                        self.seen.ready.len(),
                        self.home.logs_dir().display()
                    )
                    .into());
                }
            }
        }
        Ok(())
    }

    pub fn wait_serving(&mut self) -> Res<()> {
        self.wait("`pegasusd serving`", Duration::from_secs(30), |s| {
            s.serving.is_some()
        })
    }

    /// Waits for `n` `worker ready` lines in all since the start.
    pub fn wait_ready(&mut self, n: usize, timeout: Duration) -> Res<()> {
        self.wait(&format!("{n} ready workers"), timeout, |s| {
            s.ready.len() >= n
        })
    }

    /// Runs `pegasusctl --home H ARGS`; its stdout.
    pub fn ctl(&self, args: &[&str]) -> Res<String> {
        ctl(&self.pegasusctl, self.home.root(), args)
    }

    /// `pegasusctl stop`, then waits for the daemon to exit; the time from the command's start.
    pub fn stop(&mut self) -> Res<Duration> {
        let t0 = Instant::now();
        self.ctl(&["stop"])?;
        let deadline = t0 + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait()? {
                if !status.success() {
                    return Err(format!("pegasusd exited with {status}").into());
                }
                return Ok(t0.elapsed());
            }
            if Instant::now() > deadline {
                return Err("pegasusd did not exit within 60 s of `stop`".into());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `pegasusctl --home H ARGS` to its end; its stdout, or its stderr as the error.
pub fn ctl(pegasusctl: &Path, home: &Path, args: &[&str]) -> Res<String> {
    let out = Command::new(pegasusctl)
        .arg("--home")
        .arg(home)
        .args(args)
        .stdin(Stdio::null())
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

// ---------------------------------------------------------------------------------------------
// The control client (pegasusctl's own)

/// Connects as `pegasusctl` does, retrying every 2 ms for 30 s while pegasusd starts.
pub async fn connect(home: &Home) -> Res<Client> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match Client::connect(home).await {
            Ok(c) => return Ok(c),
            Err(e) if Instant::now() > deadline => return Err(e.into()),
            Err(_) => tokio::time::sleep(Duration::from_millis(2)).await,
        }
    }
}

/// One request on `client`; an error answer is an error.
pub async fn request(client: &mut Client, req: CtlRequest) -> Res<CtlResponse> {
    Ok(pegasus_ctl::client::ok(client.request(req).await?)?)
}

pub async fn status(client: &mut Client) -> Res<DaemonStatus> {
    match request(client, CtlRequest::Status).await? {
        CtlResponse::Status(s) => Ok(s),
        other => Err(format!("unexpected answer to status: {other:?}").into()),
    }
}

pub fn ready_count(s: &DaemonStatus) -> usize {
    s.projects
        .iter()
        .filter(|p| p.worker_state == WorkerState::Ready)
        .count()
}

/// An event of a follower and when it arrived (monotonic, and wall clock in µs).
pub struct Arrival {
    pub at: Instant,
    pub unix_us: u64,
    pub event: BusEvent,
}

/// Follows the bus (one project, or all) as `pegasusctl project log -f` does, on a thread and
/// runtime of its own so that each event is stamped the moment it arrives. Returns once the
/// subscription stands; the thread ends when the daemon closes the connection or the receiver
/// is dropped and another event comes.
pub fn follow(home: &Home, project: Option<&str>) -> Res<mpsc::Receiver<Arrival>> {
    let (home, project) = (home.clone(), project.map(str::to_string));
    let (tx, rx) = mpsc::channel();
    let (up_tx, up_rx) = mpsc::channel::<Result<(), String>>();
    std::thread::spawn(move || {
        let Ok(rt) = runtime() else { return };
        rt.block_on(async move {
            let subscribed = async {
                let mut client = Client::connect(&home).await?;
                client.follow(project).await?;
                match client.next_event().await {
                    Some(CtlResponse::Resync { .. }) => Res::Ok(client),
                    other => Err(format!("unexpected answer to follow: {other:?}").into()),
                }
            };
            let mut client = match subscribed.await {
                Ok(c) => c,
                Err(e) => {
                    let _ = up_tx.send(Err(e.to_string()));
                    return;
                }
            };
            let _ = up_tx.send(Ok(()));
            while let Some(frame) = client.next_event().await {
                if let CtlResponse::Event(event) = frame {
                    let arrival = Arrival {
                        at: Instant::now(),
                        unix_us: unix_us(),
                        event,
                    };
                    if tx.send(arrival).is_err() {
                        break;
                    }
                }
            }
        });
    });
    up_rx.recv_timeout(Duration::from_secs(15))??;
    Ok(rx)
}

// ---------------------------------------------------------------------------------------------
// /proc

/// Live (not zombie) `project-worker` processes of projects in `home`.
pub fn workers_of(home: &Path) -> Vec<u32> {
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
    stat_fields(pid).is_ok_and(|f| !matches!(f.first().map(String::as_str), Some("Z" | "X")))
}

pub fn wait_no_workers(home: &Path, timeout: Duration) -> Res<()> {
    poll(timeout, "the home's workers to be gone", || {
        workers_of(home).is_empty().then_some(())
    })
}

/// The fields of `/proc/PID/stat` after `(comm)`: `[0]` is field 3 (state).
fn stat_fields(pid: u32) -> Res<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let rest = stat.rsplit_once(')').ok_or("bad /proc/PID/stat")?.1;
    Ok(rest.split_whitespace().map(str::to_string).collect())
}

/// CPU time (utime + stime, threads that ended included) a process used so far, in ms; the
/// kernel counts it in ticks of 10 ms.
pub fn cpu_ms(pid: u32) -> Res<f64> {
    let f = stat_fields(pid)?;
    let field = |n: usize| -> Res<f64> { Ok(f.get(n - 3).ok_or("short stat")?.parse::<f64>()?) };
    Ok((field(14)? + field(15)?) * 10.0)
}

/// A `Key:  N kB` line of `/proc/PID/<file>`.
fn proc_kb(pid: u32, file: &str, key: &str) -> Res<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/{file}"))?;
    text.lines()
        .find_map(|l| {
            l.strip_prefix(key)?
                .strip_prefix(':')?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .ok_or_else(|| format!("no {key} in /proc/{pid}/{file}").into())
}

/// Proportional set size: shared pages count once over all the processes that map them.
pub fn pss_kb(pid: u32) -> Res<u64> {
    proc_kb(pid, "smaps_rollup", "Pss")
}

pub fn rss_kb(pid: u32) -> Res<u64> {
    proc_kb(pid, "status", "VmRSS")
}
