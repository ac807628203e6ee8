//! The daemon's figures, measured from outside on the release binaries: `cargo run --release
//! --example bench_daemon [-- MODE [ARGS]]` (every mode when none is named; build the binaries
//! first with `cargo build --release --bins`). See docs/PERFORMANCE.md for what each figure
//! means and its target.
//!
//! * `scale [RUNS]`: 1,000 active projects, `RUNS` (3) daemon starts: all ready, total PSS,
//!   `status --json` as a command, graceful stop.
//! * `stream [PROJECTS]`: 200 projects streaming at once: delta → `project log -f` follower,
//!   pegasusd's CPU.
//! * `foundation`: worker spawn → Ready against `/bin/true`; 100 of 1,000 projects resumed;
//!   idle worker PSS; `project list`.
//! * `dashboard`: `GET /api/projects` over 1,000 projects, 100 SSE followers, page weight.
//! * `remote` (root and `ip`): workers on another host (a network namespace, a `command`
//!   launcher) beside local ones: the latency a link adds to a send answered, launch → Ready,
//!   pegasusd with 100 idle remote workers and 100 local.
//! * `search [PROJECTS]`: 1,000 projects × 1,000 session lines: the search index built from
//!   scratch, `pegasusctl search` over it (median, p99), the commonest word.

mod support;

use pegasus_fakellm::{Fault, Match, Reply, Rule};
use pegasus_proto::{
    ctl::{CtlRequest, CtlResponse, LifecycleVerb},
    BusBody, BusEvent, WorkerEvent, WorkerState,
};
use pegasus_store::Home;
use std::{
    io::{BufRead, BufReader, Read, Write},
    net::TcpStream,
    process::{Command, ExitCode},
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Barrier,
    },
    time::{Duration, Instant},
};
use support::{ms, Bins, Daemon, Res, Stats};

fn main() -> ExitCode {
    support::run_modes(
        "bench_daemon",
        &[
            ("scale", "1,000 active projects on one daemon", scale),
            ("stream", "200 projects streaming at once", stream),
            (
                "foundation",
                "spawn, resume, idle memory, project list",
                foundation,
            ),
            (
                "dashboard",
                "the dashboard's list, SSE and pages",
                dashboard,
            ),
            (
                "remote",
                "workers on another host (a network namespace) over mutual TLS",
                remote,
            ),
            (
                "search",
                "1,000 projects × 1,000 session lines: the index from scratch, queries",
                search,
            ),
        ],
    )
}

// ---------------------------------------------------------------------------------------------
// scale

const SCALE_PROJECTS: usize = 1000;
/// `status` requests (and whole commands) per daemon start, after `WARMUP` untimed ones.
const STATUS_RUNS: usize = 30;
const WARMUP: usize = 3;

struct ScaleRun {
    all_ready: Duration,
    pss_total_kb: u64,
    status: Vec<f64>,
    status_cmd: Vec<f64>,
    stop: Duration,
    stop_all: Duration,
}

/// Per daemon start: from spawning `pegasusd` until its stderr has shown 1,000 `worker ready`
/// lines, confirmed by one `status`; 1 s later the `Pss` of pegasusd and every worker; `status`
/// on an open connection and as whole `pegasusctl status --json` commands; `pegasusctl stop`
/// until pegasusd has exited, and until every worker is gone.
fn scale(bins: &Bins, args: &[String]) -> Res<bool> {
    let runs = support::count_arg(args, 3)?;
    let tmp = support::temp_home("pgs")?;
    let home = Home::new(tmp.path());
    let t0 = Instant::now();
    support::populate(&home, SCALE_PROJECTS, |_| true)?;
    println!(
        "  populated {SCALE_PROJECTS} active projects in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    let mut all = Vec::new();
    for i in 0..runs {
        support::wait_no_workers(home.root(), Duration::from_secs(20))?;
        let r = scale_run(bins, &home)?;
        println!(
            "  run {}: all ready {:.0} ms; Pss total {:.1} MiB; status {:.1} ms (as a command {:.1} ms); stop {:.0} ms (all workers gone {:.0} ms)",
            i + 1,
            ms(r.all_ready),
            r.pss_total_kb as f64 / 1024.0,
            support::median(&r.status),
            support::median(&r.status_cmd),
            ms(r.stop),
            ms(r.stop_all)
        );
        all.push(r);
    }
    let of = |f: &dyn Fn(&ScaleRun) -> f64| support::median(&all.iter().map(f).collect::<Vec<_>>());
    let (ready, stop) = (of(&|r| ms(r.all_ready)), of(&|r| ms(r.stop)));
    let (pss, stop_all) = (
        of(&|r| r.pss_total_kb as f64 / 1024.0),
        of(&|r| ms(r.stop_all)),
    );
    let all_of = |f: fn(&ScaleRun) -> &Vec<f64>| {
        Stats::of(&all.iter().flat_map(f).copied().collect::<Vec<_>>())
    };
    let (cmd, open) = (all_of(|r| &r.status_cmd), all_of(|r| &r.status));
    println!("  medians over {runs} runs; status over all its requests");
    let mut t = support::Targets::default();
    let (fig, ok) = (format!("{ready:.0} ms"), ready < 2000.0);
    t.check("all ready after daemon start", fig, "< 2 s", ok);
    let (fig, ok) = (format!("{pss:.1} MiB"), pss < 600.0);
    t.check("total PSS (daemon + workers)", fig, "< 600 MiB", ok);
    let stopped = format!("{stop:.0} ms (all workers gone {stop_all:.0} ms)");
    let ok = stop < 1000.0;
    t.check("graceful stop (daemon exit)", stopped, "< 1 s", ok);
    let (fig, ok) = (cmd.line(1), cmd.median < 20.0);
    t.check("`pegasusctl status --json` command", fig, "< 20 ms", ok);
    println!("  (info) status on an open connection: {} ms", open.line(1));
    Ok(t.met())
}

fn scale_run(bins: &Bins, home: &Home) -> Res<ScaleRun> {
    let mut d = Daemon::start(bins, home.root(), &[])?;
    d.wait_ready(SCALE_PROJECTS, Duration::from_secs(60))?;
    let all_ready = d.seen.ready[SCALE_PROJECTS - 1] - d.started;
    let rt = support::runtime()?;
    let mut c = rt.block_on(support::connect(home))?;
    let ready = support::ready_count(&rt.block_on(support::status(&mut c))?);
    if ready != SCALE_PROJECTS {
        return Err(
            format!("status shows {ready} ready after {SCALE_PROJECTS} ready lines").into(),
        );
    }
    std::thread::sleep(Duration::from_secs(1));
    let mut pss_total_kb = support::pss_kb(d.pid)?;
    for pid in support::workers_of(home.root()) {
        pss_total_kb += support::pss_kb(pid)?;
    }
    let (mut status, mut status_cmd) = (Vec::new(), Vec::new());
    for i in 0..WARMUP + STATUS_RUNS {
        let t = Instant::now();
        rt.block_on(support::status(&mut c))?;
        if i >= WARMUP {
            status.push(ms(t.elapsed()));
        }
    }
    drop(c);
    for i in 0..WARMUP + STATUS_RUNS {
        let t = Instant::now();
        let out = d.ctl(&["status", "--json"])?;
        let took = t.elapsed();
        if out.len() < SCALE_PROJECTS * 10 {
            return Err("pegasusctl status --json printed too little".into());
        }
        if i >= WARMUP {
            status_cmd.push(ms(took));
        }
    }
    let t0 = Instant::now();
    let stop = d.stop()?;
    support::wait_no_workers(home.root(), Duration::from_secs(20))?;
    Ok(ScaleRun {
        all_ready,
        pss_total_kb,
        status,
        status_cmd,
        stop,
        stop_all: t0.elapsed(),
    })
}

// ---------------------------------------------------------------------------------------------
// stream

/// The fake's gap between deltas, deltas per answer (enough to outlast the start, the settling
/// and the window), the settling time after every follower's first delta, the window.
const STREAM_GAP_MS: u64 = 50;
const STREAM_DELTAS: usize = 500;
const STREAM_SETTLE: Duration = Duration::from_secs(1);
const STREAM_WINDOW: Duration = Duration::from_secs(10);

/// `PROJECTS` active projects on the in-process fake LLM (`llm.max_concurrency` above their
/// number), one message each, answered by a stream of text deltas 50 ms apart, each carrying
/// the fake's wall clock when it wrote it (`Fault::Clock`); one follower per project on one
/// runtime here, subscribed as `project log -f` is, stamping each `TextDelta` on arrival. Over
/// a 10 s window starting 1 s after every follower had its first delta: arrival − stamp, and the
/// CPU of pegasusd, of the workers and of this process (the fake and the followers).
fn stream(bins: &Bins, args: &[String]) -> Res<bool> {
    let projects = support::count_arg(args, 200)?;
    let clock = Fault::Clock {
        deltas: STREAM_DELTAS,
        gap_ms: STREAM_GAP_MS,
    };
    let rules = vec![
        Rule::new(
            Match::LastUserTextContains("stream".into()),
            Reply::Fault(clock),
        ),
        Rule::new(Match::Any, Reply::Text("ok".into())),
    ];
    let extra = format!(
        "llm: {{max_concurrency: {}}}\nagent: {{reflection: false}}",
        projects + 8
    );
    let (_fake, _tmp, home) = support::fake_home(rules, &extra)?;
    support::populate(&home, projects, |_| true)?;
    let mut d = Daemon::start(bins, home.root(), &[])?;
    d.wait_ready(projects, Duration::from_secs(60))?;
    println!(
        "  {projects} projects ready {:.0} ms after pegasusd's start",
        ms(d.seen.ready[projects - 1] - d.started)
    );
    let w = support::runtime()?.block_on(stream_window(projects, &home, d.pid))?;
    let stop = d.stop()?;
    support::wait_no_workers(home.root(), Duration::from_secs(30))?;

    let secs = w.window.as_secs_f64();
    let in_window = |at: &u64| (w.from_us..w.to_us).contains(at);
    let lat: Vec<f64> = (w.seen.iter().flatten())
        .filter(|(at, _)| in_window(at))
        .map(|(at, stamp)| at.saturating_sub(*stamp) as f64 / 1000.0)
        .collect();
    let rate: Vec<f64> = (w.seen.iter())
        .map(|s| s.iter().filter(|(at, _)| in_window(at)).count() as f64 / secs)
        .collect();
    let (lat, share) = (Stats::of(&lat), |ms: f64| 100.0 * ms / 1000.0 / secs);
    println!(
        "  every follower had its first delta {:.0} ms after the sends",
        ms(w.first_deltas)
    );
    let per_s = support::median(&rate);
    println!(
        "  window {secs:.1} s: {} deltas, {per_s:.1} a second per project",
        lat.n
    );
    let [daemon, workers, own] = w.cpu.map(share);
    println!("  CPU, % of one core: pegasusd {daemon:.1}, the workers {workers:.1}, this process (fake + followers) {own:.1}");
    println!(
        "  graceful stop while streaming: {:.0} ms (each worker ends its model call first)",
        ms(stop)
    );
    let mut t = support::Targets::default();
    let delay = format!(
        "p99 {:.2} ms (p50 {:.2}, max {:.1})",
        lat.p99, lat.median, lat.max
    );
    let ok = lat.p99 <= 5.0;
    t.check("delta: fake → follower", delay, "p99 ≤ 5 ms", ok);
    let cpu = format!("{daemon:.1} % of one core");
    let ok = daemon <= 50.0;
    t.check("pegasusd CPU while streaming", cpu, "≤ 50 %", ok);
    Ok(t.met())
}

struct Window {
    first_deltas: Duration,
    window: Duration,
    from_us: u64,
    to_us: u64,
    /// Per follower: (arrival, the fake's stamp) of every stamp in every `TextDelta`, in µs.
    seen: Vec<Vec<(u64, u64)>>,
    /// CPU ms over the window: pegasusd, the workers, this process.
    cpu: [f64; 3],
}

async fn stream_window(projects: usize, home: &Home, daemon: u32) -> Res<Window> {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let started = Arc::new(AtomicUsize::new(0));
    let mut followers = Vec::new();
    for i in 0..projects {
        let mut client = support::connect(home).await?;
        client.follow(Some(support::project_name(i))).await?;
        let (mut stop, started) = (stop_rx.clone(), started.clone());
        followers.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            loop {
                tokio::select! {
                    ev = client.next_event() => match ev {
                        Some(CtlResponse::Event(BusEvent {
                            body: BusBody::Worker(WorkerEvent::TextDelta { text, .. }),
                            ..
                        })) => {
                            let at = support::unix_us();
                            if seen.is_empty() {
                                started.fetch_add(1, Ordering::Relaxed);
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
    // A subscription stands once pegasusd has read it: give it a moment.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut ctl = support::connect(home).await?;
    let sent = Instant::now();
    for i in 0..projects {
        let send = CtlRequest::ProjectSend {
            name: support::project_name(i),
            text: "stream please".into(),
            wait: false,
            client_id: None,
        };
        support::request(&mut ctl, send).await?;
    }
    while started.load(Ordering::Relaxed) < projects {
        if sent.elapsed() > Duration::from_secs(30) {
            return Err("not every follower saw a delta within 30 s".into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let first_deltas = sent.elapsed();
    tokio::time::sleep(STREAM_SETTLE).await;
    let workers = support::workers_of(home.root());
    let cpu = || -> [f64; 3] {
        let of = |pid| support::cpu_ms(pid).unwrap_or(0.0);
        [
            of(daemon),
            workers.iter().map(|p| of(*p)).sum(),
            of(std::process::id()),
        ]
    };
    let (c0, from_us, from) = (cpu(), support::unix_us(), Instant::now());
    tokio::time::sleep(STREAM_WINDOW).await;
    let (c1, to_us, window) = (cpu(), support::unix_us(), from.elapsed());
    // What was sent before the window's end arrives, then the followers stop.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let _ = stop_tx.send(true);
    let mut seen = Vec::new();
    for f in followers {
        seen.push(f.await?);
    }
    Ok(Window {
        first_deltas,
        window,
        from_us,
        to_us,
        seen,
        cpu: [c1[0] - c0[0], c1[1] - c0[1], c1[2] - c0[2]],
    })
}

// ---------------------------------------------------------------------------------------------
// foundation

const SPAWNS: usize = 200;
const SPAWN_WARMUP: usize = 10;
/// The home of (b)–(d): projects, every tenth active; daemon starts (the first on a fresh
/// home, reported apart); `project list` runs per case.
const PROJECTS: usize = 1000;
const ACTIVE: usize = 100;
const STARTS: usize = 5;
const LIST_RUNS: usize = 30;

/// (a) spawn → Ready against `/bin/true`; (b) 100 of 1,000 projects resumed; (c) idle worker
/// PSS; (d) `pegasusctl --json project list`, daemon up and down.
fn foundation(bins: &Bins, _: &[String]) -> Res<bool> {
    let mut t = support::Targets::default();
    let (worker, floor) = spawn_to_ready(bins)?;
    let ratio = worker.median / floor.median;
    let (w, f) = (worker, floor);
    let spawn = format!(
        "{ratio:.2}× ({:.3} / {:.3} ms; p99 {:.3} / {:.3})",
        w.median, f.median, w.p99, f.p99
    );
    let ok = ratio <= 3.0;
    t.check("(a) worker spawn → Ready ÷ /bin/true", spawn, "≤ 3×", ok);
    resumed_home(bins, &mut t)?;
    Ok(t.met())
}

/// When a follower saw the slot's `Starting` (before it starts a worker) and then its `Ready`.
fn starting_to_ready(
    events: &std::sync::mpsc::Receiver<support::Arrival>,
) -> Res<(Instant, Instant)> {
    let mut starting = None;
    loop {
        let a = events.recv_timeout(Duration::from_secs(30))?;
        match a.event.body {
            BusBody::WorkerState {
                state: WorkerState::Starting,
                pid: None,
            } => starting = Some(a.at),
            BusBody::WorkerState {
                state: WorkerState::Ready,
                ..
            } => return Ok((starting.ok_or("Ready without Starting")?, a.at)),
            _ => {}
        }
    }
}

/// A real pegasusd with one active project, suspended and resumed `SPAWNS` times (after
/// `SPAWN_WARMUP`): from the slot's `Starting` (published before it makes the spawn token and
/// spawns) to its `Ready` (after the worker's `Ready` frame), both as a follower of the
/// project's bus receives them; beside each, the spawn and reap of `/bin/true` from here.
fn spawn_to_ready(bins: &Bins) -> Res<(Stats, Stats)> {
    let tmp = support::temp_home("pgf")?;
    let home = Home::new(tmp.path());
    support::populate(&home, 1, |_| true)?;
    let mut d = Daemon::start(bins, home.root(), &[])?;
    d.wait_ready(1, Duration::from_secs(30))?;
    let events = support::follow(&home, Some("p0000"))?;
    let rt = support::runtime()?;
    let mut ctl = rt.block_on(support::connect(&home))?;
    let verb = |verb| CtlRequest::ProjectLifecycle {
        name: "p0000".into(),
        verb,
    };
    let (mut worker, mut floor, mut asked_to_ready) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..SPAWN_WARMUP + SPAWNS {
        let t = Instant::now();
        if !Command::new("/bin/true").spawn()?.wait()?.success() {
            return Err("/bin/true failed".into());
        }
        let true_took = t.elapsed();
        rt.block_on(support::request(&mut ctl, verb(LifecycleVerb::Suspend)))?;
        let asked = Instant::now();
        rt.block_on(support::request(&mut ctl, verb(LifecycleVerb::Resume)))?;
        let (starting, ready) = starting_to_ready(&events)?;
        if i >= SPAWN_WARMUP {
            worker.push(ms(ready - starting));
            floor.push(ms(true_took));
            asked_to_ready.push(ms(ready - asked));
        }
    }
    let (worker, floor) = (Stats::of(&worker), Stats::of(&floor));
    println!(
        "  (a) worker Starting → Ready at a bus follower: {} ms",
        worker.line(3)
    );
    println!(
        "      /bin/true spawn + reap:                    {} ms",
        floor.line(3)
    );
    println!(
        "      (info) from the `resume` request (PROJECT.md written first): {} ms",
        Stats::of(&asked_to_ready).line(3)
    );
    Ok((worker, floor))
}

/// (b) Each start: t = 0 just before spawning pegasusd; `status` polled every 2 ms on one
/// control connection until it lists 100 ready workers; the daemon's own `worker ready` lines
/// timed beside it. Every start but the last ends with a SIGKILL (the workers follow). Then
/// (c) and (d) on the last.
fn resumed_home(bins: &Bins, t: &mut support::Targets) -> Res<()> {
    let tmp = support::temp_home("pgb")?;
    let home = Home::new(tmp.path());
    support::populate(&home, PROJECTS, |i| i % (PROJECTS / ACTIVE) == 0)?;
    let rt = support::runtime()?;
    let (mut by_status, mut by_log, mut last) = (Vec::new(), Vec::new(), None);
    for start in 0..STARTS {
        drop(last.take());
        support::wait_no_workers(home.root(), Duration::from_secs(20))?;
        let mut d = Daemon::start(bins, home.root(), &[])?;
        let ready_at = rt.block_on(async {
            let mut c = support::connect(&home).await?;
            while support::ready_count(&support::status(&mut c).await?) < ACTIVE {
                if d.started.elapsed() > Duration::from_secs(30) {
                    return Err("the workers were not ready within 30 s".into());
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            Res::Ok(Instant::now())
        })?;
        d.wait_ready(ACTIVE, Duration::from_secs(5))?;
        let (s, l) = (
            ms(ready_at - d.started),
            ms(d.seen.ready[ACTIVE - 1] - d.started),
        );
        let fresh = if start == 0 { " (fresh home)" } else { "" };
        println!(
            "  (b) start {}{fresh}: ready by status {s:.1} ms, by the log {l:.1} ms",
            start + 1
        );
        if start > 0 {
            by_status.push(s);
            by_log.push(l);
        }
        last = Some(d);
    }
    let mut d = last.ok_or("no daemon")?;
    let resumed = Stats::of(&by_status);
    let figure = format!("{} ms", resumed.line(1));
    let ok = resumed.median < 300.0;
    t.check("(b) 100 of 1,000 resumed (status)", figure, "< 300 ms", ok);
    println!(
        "      (info) by the log lines: {} ms",
        Stats::of(&by_log).line(1)
    );

    std::thread::sleep(Duration::from_secs(1));
    let s = rt.block_on(async { support::status(&mut support::connect(&home).await?).await })?;
    let pids: Vec<u32> = s.projects.iter().filter_map(|p| p.worker_pid).collect();
    if pids.len() != ACTIVE {
        return Err(format!("status lists {} workers", pids.len()).into());
    }
    let mib = |f: fn(u32) -> Res<u64>| -> Res<Stats> {
        let v: Res<Vec<f64>> = pids.iter().map(|p| Ok(f(*p)? as f64 / 1024.0)).collect();
        Ok(Stats::of(&v?))
    };
    let (pss, rss) = (mib(support::pss_kb)?, mib(support::rss_kb)?);
    let figure = format!("median {:.2} MiB, max {:.2}", pss.median, pss.max);
    let ok = pss.median < 0.6;
    t.check("(c) idle worker PSS (100 workers)", figure, "< 0.6 MiB", ok);
    println!(
        "      (info) VmRSS (counts shared text in full): median {:.2} MiB",
        rss.median
    );

    let list_up = time_list(&d, ACTIVE)?;
    d.stop()?;
    support::wait_no_workers(home.root(), Duration::from_secs(20))?;
    for (case, list) in [("down", time_list(&d, 0)?), ("up", list_up)] {
        let metric = format!("(d) `project list`, daemon {case}");
        let (fig, ok) = (format!("{} ms", list.line(1)), list.median < 30.0);
        t.check(&metric, fig, "< 30 ms", ok);
    }
    Ok(())
}

/// `pegasusctl --json project list`, the whole command, `LIST_RUNS` times after `WARMUP`; the
/// first answer must list every project and `ready` workers.
fn time_list(d: &Daemon, ready: usize) -> Res<Stats> {
    let mut times = Vec::new();
    for i in 0..WARMUP + LIST_RUNS {
        let t = Instant::now();
        let out = d.ctl(&["--json", "project", "list"])?;
        let took = t.elapsed();
        if i == 0 {
            let v: serde_json::Value = serde_json::from_str(&out)?;
            let list = v.as_array().ok_or("project list --json is not an array")?;
            let n = list.iter().filter(|p| p["worker_state"] == "ready").count();
            if (list.len(), n) != (PROJECTS, ready) {
                return Err(
                    format!("project list shows {} projects, {n} ready", list.len()).into(),
                );
            }
        }
        if i >= WARMUP {
            times.push(ms(took));
        }
    }
    Ok(Stats::of(&times))
}

// ---------------------------------------------------------------------------------------------
// dashboard

const FOLLOWERS: usize = 100;
const MESSAGES: usize = 34;

/// A real pegasusd with its dashboard on a home of 1,000 suspended projects (listed, no
/// workers) and one active, `live`, on the fake LLM. (a) `GET /api/projects` 200 times, each on
/// a new connection as a browser's first request; (b) 100 SSE followers of `live` while it
/// streams 34 replies (3 text deltas each, 20 ms apart): per delta, its publication (`ts_ms`) →
/// its arrival at the last follower; (c) the weight of the pages and whether any names another
/// host.
fn dashboard(bins: &Bins, _: &[String]) -> Res<bool> {
    let text: String = (0..100).map(|i| format!("w{i} ")).collect();
    let paced = Reply::Fault(Fault::Paced {
        gap_ms: 20,
        then: Box::new(Reply::Text(text)),
    });
    let rules = vec![
        Rule::new(Match::LastUserTextContains("stream".into()), paced),
        Rule::new(Match::Any, Reply::Text("ok".into())),
    ];
    let extra = "agent: {reflection: false}\ndashboard: {listen: \"127.0.0.1:0\"}";
    let (_fake, _tmp, home) = support::fake_home(rules, extra)?;
    support::populate(&home, 1000, |_| false)?;
    let mut d = Daemon::start(bins, home.root(), &[])?;
    d.wait_serving()?;
    let run = home.root().join("run");
    let addr = support::poll(Duration::from_secs(20), "the dashboard's address", || {
        std::fs::read_to_string(run.join("dashboard.addr")).ok()
    })?;
    let token = std::fs::read_to_string(run.join("dashboard.token"))?;
    let http = Http {
        addr: addr.trim().into(),
        token: token.trim().into(),
    };

    let mut t = support::Targets::default();
    let (mut list, mut listed) = (Vec::new(), 0);
    for i in 0..220 {
        let started = Instant::now();
        let body = http.get("/api/projects")?;
        if i >= 20 {
            list.push(ms(started.elapsed()));
        }
        listed = body.matches("\"name\"").count();
    }
    let list = Stats::of(&list);
    let metric = format!("(a) GET /api/projects, {listed} projects");
    let (fig, ok) = (format!("{} ms", list.line(2)), list.p99 < 20.0);
    t.check(&metric, fig, "< 20 ms", ok);

    d.ctl(&["project", "create", "live", "--goal", "stream"])?;
    d.wait_ready(1, Duration::from_secs(20))?;
    let (cpu0, started) = (support::cpu_ms(d.pid)?, Instant::now());
    let arrivals = sse_followers(&http)?;
    let (cpu, secs) = (
        support::cpu_ms(d.pid)? - cpu0,
        started.elapsed().as_secs_f64(),
    );
    let mut by_seq = std::collections::BTreeMap::<i64, Vec<f64>>::new();
    for (seq, delay) in arrivals.iter().flatten() {
        by_seq.entry(*seq).or_default().push(*delay);
    }
    let everywhere = by_seq.values().filter(|v| v.len() == FOLLOWERS).count();
    let last: Vec<f64> = by_seq
        .values()
        .map(|v| v.iter().copied().fold(f64::MIN, f64::max))
        .collect();
    let last = Stats::of(&last);
    let figure = format!("{} ms", last.line(2));
    let ok = last.p99 < 5.0;
    t.check(
        "(b) 100 SSE followers: delta → last one",
        figure,
        "p99 < 5 ms",
        ok,
    );
    println!(
        "      {} deltas, {everywhere} reached every follower (ts_ms is in whole ms); pegasusd CPU {:.0} ms in {secs:.1} s",
        by_seq.len(),
        cpu
    );

    // The list page grows with the projects: the fixed weight is that of pages of little data.
    let (mut total, mut external) = (0, false);
    for page in ["/projects/live", "/costs", "/static/app.js"] {
        let body = http.get(page)?;
        println!("      {page}: {} B", body.len());
        total += body.len();
        external |= ["http://", "https://", "//cdn"]
            .iter()
            .any(|s| body.contains(s));
    }
    let figure = format!("{total} B, {}", if external { "some" } else { "none" });
    let ok = total < 100_000 && !external;
    t.check("(c) page weight, other hosts", figure, "< 100 KB", ok);
    Ok(t.met())
}

/// `FOLLOWERS` threads following `live` by SSE while it answers `MESSAGES` messages, one at a
/// time (messages waiting together would be answered together); per follower, the bus seq
/// and the ms from publication to arrival of every text delta.
fn sse_followers(http: &Http) -> Res<Vec<Vec<(i64, f64)>>> {
    let (ready, progress) = (
        Arc::new(Barrier::new(FOLLOWERS + 1)),
        Arc::new(AtomicUsize::new(0)),
    );
    let threads: Vec<_> = (0..FOLLOWERS)
        .map(|f| {
            let (http, ready, progress) = (http.clone(), ready.clone(), progress.clone());
            let progress = (f == 0).then_some(progress);
            std::thread::spawn(move || {
                follow_sse(&http, &ready, progress).map_err(|e| e.to_string())
            })
        })
        .collect();
    ready.wait();
    for i in 0..MESSAGES {
        http.post(
            "/api/projects/live/messages",
            "{\"text\":\"stream please\"}",
        )?;
        support::poll(Duration::from_secs(30), "a streamed reply", || {
            (progress.load(Ordering::Relaxed) >= 3 * (i + 1)).then_some(())
        })?;
        std::thread::sleep(Duration::from_millis(100));
    }
    threads
        .into_iter()
        .map(|t| Ok(t.join().map_err(|_| "a follower panicked")??))
        .collect()
}

fn follow_sse(
    http: &Http,
    ready: &Barrier,
    progress: Option<Arc<AtomicUsize>>,
) -> Res<Vec<(i64, f64)>> {
    let mut r = http.send("GET /api/events?project=live", "", false)?;
    let mut line = String::new();
    while r.read_line(&mut line)? > 2 {
        line.clear(); // the headers
    }
    ready.wait();
    let (mut event, mut dones, mut seen) = (String::new(), 0, Vec::new());
    while dones < MESSAGES {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            break;
        }
        let now = support::unix_us() as f64 / 1000.0;
        if let Some(e) = line.trim_end().strip_prefix("event:") {
            event = e.trim().to_string();
        } else if let Some(data) = line.trim_end().strip_prefix("data:") {
            if event == "text_delta" {
                let v: serde_json::Value = serde_json::from_str(data)?;
                seen.push((
                    v["seq"].as_i64().unwrap_or(-1),
                    now - v["ts_ms"].as_f64().unwrap_or(0.0),
                ));
                progress
                    .iter()
                    .for_each(|p| _ = p.fetch_add(1, Ordering::Relaxed));
            }
            dones += usize::from(event == "task" && data.contains("\"state\":\"done\""));
        }
    }
    Ok(seen)
}

/// The dashboard over plain HTTP/1.1, one connection per request, as a browser's first.
#[derive(Clone)]
struct Http {
    addr: String,
    token: String,
}

impl Http {
    /// Sends the request (`METHOD PATH`) with the token; the connection, to read the answer.
    fn send(&self, request: &str, body: &str, close: bool) -> Res<BufReader<TcpStream>> {
        let mut s = TcpStream::connect(&self.addr)?;
        let close = if close { "Connection: close\r\n" } else { "" };
        write!(
            s,
            "{request} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n{close}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.addr,
            self.token,
            body.len()
        )?;
        Ok(BufReader::new(s))
    }

    /// The body of a 200 answer, read to the connection's end.
    fn call(&self, request: &str, body: &str) -> Res<String> {
        let mut raw = String::new();
        self.send(request, body, true)?.read_to_string(&mut raw)?;
        let (head, body) = raw.split_once("\r\n\r\n").ok_or("no HTTP head")?;
        if !head.starts_with("HTTP/1.1 200") {
            return Err(format!("{request}: {}", head.lines().next().unwrap_or("")).into());
        }
        Ok(body.to_string())
    }

    fn get(&self, path: &str) -> Res<String> {
        self.call(&format!("GET {path}"), "")
    }

    fn post(&self, path: &str, body: &str) -> Res<String> {
        self.call(&format!("POST {path}"), body)
    }
}

// ---------------------------------------------------------------------------------------------
// remote

/// The other host: a network namespace joined to this one by a veth pair (private addresses
/// that exist only inside this bench), removed on drop.
struct NetHost {
    ns: String,
    veth: String,
    here: String,
}

fn ip(args: &[&str]) -> Res<()> {
    let out = Command::new("ip").args(args).output()?;
    if !out.status.success() {
        return Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    Ok(())
}

impl NetHost {
    fn make() -> Res<NetHost> {
        let id = std::process::id() % 200;
        let host = NetHost {
            ns: format!("pgbench{id}"),
            veth: format!("pgbv{id}"),
            here: format!("10.214.{id}.1"),
        };
        let peer = format!("pgbw{id}");
        // What a run killed before its end left behind.
        let _ = ip(&["link", "del", &host.veth]);
        let _ = ip(&["netns", "del", &host.ns]);
        ip(&["netns", "add", &host.ns])?;
        ip(&[
            "link", "add", &host.veth, "type", "veth", "peer", "name", &peer,
        ])?;
        ip(&["link", "set", &peer, "netns", &host.ns])?;
        ip(&[
            "addr",
            "add",
            &format!("{}/30", host.here),
            "dev",
            &host.veth,
        ])?;
        ip(&["link", "set", &host.veth, "up"])?;
        let there = format!("10.214.{id}.2/30");
        ip(&[
            "netns", "exec", &host.ns, "ip", "addr", "add", &there, "dev", &peer,
        ])?;
        ip(&["netns", "exec", &host.ns, "ip", "link", "set", &peer, "up"])?;
        ip(&["netns", "exec", &host.ns, "ip", "link", "set", "lo", "up"])?;
        Ok(host)
    }
}

impl Drop for NetHost {
    fn drop(&mut self) {
        let _ = ip(&["link", "del", &self.veth]);
        let _ = ip(&["netns", "del", &self.ns]);
    }
}

/// Sets `launcher: NAME` in a project's PROJECT.md (after its `status:` line).
fn set_launcher(home: &Home, project: &str, launcher: &str) -> Res<()> {
    let path = home.project_dir(project).join("PROJECT.md");
    let text = std::fs::read_to_string(&path)?;
    let text = text.replacen("\nstatus:", &format!("\nlauncher: {launcher}\nstatus:"), 1);
    std::fs::write(&path, text)?;
    Ok(())
}

const REMOTE_SENDS: usize = 200;
const REMOTE_CYCLES: usize = 20;
const REMOTE_IDLE: usize = 100;
const REMOTE_WARMUP: usize = 5;

/// Workers on another host, beside local ones in the same daemon: (a) the latency a remote
/// link adds to a send answered (`ProjectSend` with `wait`, on pegasusctl's own client: the
/// agent's turn and an instant fake answer), local and remote alternating, paired call by
/// call; (b) launch → Ready (the launcher command, enrollment, the second TLS connection,
/// hello, load) at a bus follower, against a local spawn → Ready; (c) pegasusd with 100 idle
/// remote workers, then 100 idle local ones more. Needs root and `ip`: without them it says so
/// and measures nothing.
fn remote(bins: &Bins, _: &[String]) -> Res<bool> {
    let root = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
    };
    if !root || Command::new("ip").arg("-V").output().is_err() {
        println!("  skipped: the remote mode needs root and `ip` (iproute2); no figure");
        return Ok(true);
    }
    let host = NetHost::make()?;
    let port = std::net::TcpListener::bind(format!("{}:0", host.here))?
        .local_addr()?
        .port();
    let extra = format!(
        "agent: {{reflection: false}}\n\
         workers: {{listen: \"{here}:{port}\"}}\n\
         launchers:\n  far: {{kind: command, connect: \"{here}:{port}\", argv: [ip, netns, exec, {ns}, \"{{env}}\", \"{{worker}}\", \"{{project_dir}}\"]}}\n",
        here = host.here,
        ns = host.ns,
    );
    let rules = vec![Rule::new(Match::Any, Reply::Text("ok".into()))];
    let (_fake, _tmp, home) = support::fake_home(rules, &extra)?;
    // p0000 local, p0001 remote; then 100 remote and 100 local, suspended (for (c)).
    let (far_idle, local_idle) = (2..2 + REMOTE_IDLE, 2 + REMOTE_IDLE..2 + 2 * REMOTE_IDLE);
    support::populate(&home, 2 + 2 * REMOTE_IDLE, |i| i < 2)?;
    for i in std::iter::once(1).chain(far_idle.clone()) {
        set_launcher(&home, &support::project_name(i), "far")?;
    }
    let mut t = support::Targets::default();
    let mut d = Daemon::start(bins, home.root(), &[])?;
    d.wait_ready(2, Duration::from_secs(60))?;
    let rt = support::runtime()?;
    let mut ctl = rt.block_on(support::connect(&home))?;

    // (a) sends answered, alternating (which goes first alternates too), paired.
    let (mut local, mut far) = (Vec::new(), Vec::new());
    for i in 0..REMOTE_WARMUP + REMOTE_SENDS {
        let order = if i % 2 == 0 { [0, 1] } else { [1, 0] };
        let mut took = [0.0; 2];
        for k in order {
            let send = CtlRequest::ProjectSend {
                name: support::project_name(k),
                text: format!("hi {i}"),
                wait: true,
                client_id: None,
            };
            let t0 = Instant::now();
            match rt.block_on(support::request(&mut ctl, send))? {
                CtlResponse::Reply { .. } => {}
                other => return Err(format!("unexpected answer to send: {other:?}").into()),
            }
            took[k] = ms(t0.elapsed());
        }
        if i >= REMOTE_WARMUP {
            local.push(took[0]);
            far.push(took[1]);
        }
    }
    let diff: Vec<f64> = far.iter().zip(&local).map(|(f, l)| f - l).collect();
    let (l, f, dd) = (Stats::of(&local), Stats::of(&far), Stats::of(&diff));
    println!("  (a) send answered, local:  {} ms", l.line(2));
    println!("      send answered, remote: {} ms", f.line(2));
    println!(
        "      remote − local, paired: {} ms, p1 {:.2}",
        dd.line(2),
        support::pct(&diff, 1.0)
    );
    // Each send is a whole agent turn (the session's writes, two tasks, the bus) whose own
    // spread is milliseconds; the paired differences' tails are that spread on both sides
    // (symmetric: see p1), so the link's cost at the p99 is the p99s' difference.
    let added = f.p99 - l.p99;
    t.check(
        "(a) latency a remote link adds, p99",
        format!(
            "{added:.2} ms ({:.2} − {:.2}; medians {:+.2})",
            f.p99,
            l.p99,
            f.median - l.median
        ),
        "≤ 2 ms",
        added <= 2.0,
    );

    // (b) launch → Ready, remote and local, at a bus follower.
    let mut starts = |project: &str| -> Res<Vec<f64>> {
        let events = support::follow(&home, Some(project))?;
        let verb = |verb| CtlRequest::ProjectLifecycle {
            name: project.into(),
            verb,
        };
        let mut took = Vec::new();
        for i in 0..2 + REMOTE_CYCLES {
            rt.block_on(support::request(&mut ctl, verb(LifecycleVerb::Suspend)))?;
            rt.block_on(support::request(&mut ctl, verb(LifecycleVerb::Resume)))?;
            let (starting, ready) = starting_to_ready(&events)?;
            if i >= 2 {
                took.push(ms(ready - starting));
            }
        }
        Ok(took)
    };
    // The launcher command's own share: `ip netns exec NS /bin/true`, spawned and reaped.
    let mut exec = Vec::new();
    for _ in 0..REMOTE_CYCLES {
        let t0 = Instant::now();
        let ok = Command::new("ip")
            .args(["netns", "exec", &host.ns, "/bin/true"])
            .status()?
            .success();
        if !ok {
            return Err("ip netns exec /bin/true failed".into());
        }
        exec.push(ms(t0.elapsed()));
    }
    let far_start = starts("p0001")?;
    let local_start = starts("p0000")?;
    let p95 = |v: &[f64]| support::pct(v, 95.0);
    let (fs, ls) = (Stats::of(&far_start), Stats::of(&local_start));
    println!(
        "  (b) launch → Ready, remote (ip netns exec, worker start, TLS enrollment, mutual TLS, hello, load): {} ms, p95 {:.1}",
        fs.line(1),
        p95(&far_start)
    );
    println!(
        "      spawn → Ready, local: {} ms, p95 {:.1}",
        ls.line(1),
        p95(&local_start)
    );
    println!(
        "      of which `ip netns exec NS /bin/true` alone takes {} ms",
        Stats::of(&exec).line(1)
    );
    t.check(
        "(b) enrollment to Ready (launch incl.), median",
        format!("{:.1} ms (p95 {:.1})", fs.median, p95(&far_start)),
        "≤ 50 ms",
        fs.median <= 50.0,
    );

    // (c) 100 idle remote workers, then 100 idle local ones more.
    let mut idle = |what: &str, projects: std::ops::Range<usize>| -> Res<()> {
        let before = (support::pss_kb(d.pid)?, support::rss_kb(d.pid)?);
        for i in projects.clone() {
            let resume = CtlRequest::ProjectLifecycle {
                name: support::project_name(i),
                verb: LifecycleVerb::Resume,
            };
            rt.block_on(support::request(&mut ctl, resume))?;
        }
        // p0000.. up to the range's end are then active, each with its worker.
        let want = projects.end;
        support::poll(Duration::from_secs(120), "the idle workers ready", || {
            let s = rt.block_on(support::status(&mut ctl)).ok()?;
            (support::ready_count(&s) >= want).then_some(())
        })?;
        std::thread::sleep(Duration::from_secs(2));
        let (cpu0, w0) = (support::cpu_ms(d.pid)?, Instant::now());
        std::thread::sleep(Duration::from_secs(10));
        let cpu = (support::cpu_ms(d.pid)? - cpu0) / ms(w0.elapsed()) * 100.0;
        let after = (support::pss_kb(d.pid)?, support::rss_kb(d.pid)?);
        let mib = |kb: u64| kb as f64 / 1024.0;
        println!(
            "      +{} {what} workers idle: pegasusd PSS {:.1} MiB (+{:.1}), RSS {:.1} MiB (+{:.1}), CPU {:.2} % of one core over 10 s",
            projects.len(),
            mib(after.0),
            mib(after.0) - mib(before.0),
            mib(after.1),
            mib(after.1) - mib(before.1),
            cpu
        );
        Ok(())
    };
    println!("  (c) pegasusd with 2 workers (1 remote), then:");
    idle("remote", far_idle)?;
    idle("local", local_idle)?;
    d.stop()?;
    Ok(t.met())
}

// ---------------------------------------------------------------------------------------------
// search

const SEARCH_PROJECTS: usize = 1000;
const SEARCH_LINES: usize = 1000;
const SEARCH_QUERIES: usize = 100;
/// Distinct words of the made-up language the sessions are written in.
const VOCABULARY: usize = 20_000;

/// xorshift64*: the same home on every run, with no dependency for it.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// `VOCABULARY` distinct words of two to four syllables, and the cumulative weights that draw
/// them as prose does (Zipf, s = 1: the commonest word is a tenth of all words).
fn vocabulary() -> (Vec<String>, Vec<f64>) {
    const SYLLABLES: [&str; 40] = [
        "ka", "lo", "mi", "ne", "ru", "ta", "vi", "so", "pe", "du", "ga", "hi", "jo", "ku", "la",
        "me", "no", "pa", "ri", "se", "to", "ve", "wa", "yo", "za", "be", "ci", "fo", "gu", "ha",
        "ji", "ke", "lu", "mo", "ni", "po", "re", "su", "ti", "vo",
    ];
    let mut words = Vec::with_capacity(VOCABULARY);
    let mut seen = std::collections::HashSet::new();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    while words.len() < VOCABULARY {
        let n = 2 + rng.below(3);
        let w: String = (0..n)
            .map(|_| SYLLABLES[rng.below(SYLLABLES.len())])
            .collect();
        if seen.insert(w.clone()) {
            words.push(w);
        }
    }
    let mut acc = 0.0;
    let cumulative = (1..=VOCABULARY)
        .map(|rank| {
            acc += 1.0 / rank as f64;
            acc
        })
        .collect();
    (words, cumulative)
}

fn sentence(rng: &mut Rng, words: &[String], cumulative: &[f64], n: usize) -> String {
    let total = cumulative.last().copied().unwrap_or(1.0);
    let mut out = String::new();
    for i in 0..n {
        let x = (rng.next() >> 11) as f64 / (1u64 << 53) as f64 * total;
        let rank = cumulative.partition_point(|c| *c < x).min(words.len() - 1);
        if i > 0 {
            out.push(' ');
        }
        out.push_str(&words[rank]);
    }
    out
}

/// `PROJECTS` (1,000) projects × 1,000 session lines, user messages of 12 words and answers of
/// 40 alternating, written by the store's own `Session` on 8 threads. Then (a) the index built
/// from scratch by the crate's catch-up (what pegasusd's first round or the first `search`
/// does); (b) 100 queries of one or two words drawn uniformly from the vocabulary (a user
/// looks for a term), each a whole `pegasusctl search` (its catch-up included: nothing new
/// found) and in process; (c) the worst case, the commonest word, in every tenth word.
fn search(_bins: &Bins, args: &[String]) -> Res<bool> {
    let projects = support::count_arg(args, SEARCH_PROJECTS)?;
    let pegasusctl = _bins.join("pegasusctl");
    let tmp = support::temp_home("pgs")?;
    let home = Home::new(tmp.path());
    let t0 = Instant::now();
    support::populate(&home, projects, |_| false)?;
    let (words, cumulative) = vocabulary();
    let (words, cumulative) = (&words, &cumulative);
    std::thread::scope(|s| -> Res<()> {
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let home = &home;
                s.spawn(move || -> Result<(), String> {
                    for i in (t..projects).step_by(8) {
                        let name = support::project_name(i);
                        let dir = home.project_dir(&name);
                        let mut rng = Rng(0x5851_f42d_4c95_7f2d ^ (i as u64 + 1));
                        let t0 = chrono::Utc::now() - chrono::Duration::days(30);
                        let records: Vec<pegasus_store::SessionRecord> = (0..SEARCH_LINES)
                            .map(|k| {
                                let (role, n) = if k % 2 == 0 { ("user", 12) } else { ("assistant", 40) };
                                let ts = t0 + chrono::Duration::seconds(k as i64 * 37);
                                serde_json::from_value(serde_json::json!({
                                    "type": "message",
                                    "role": role,
                                    "content": [{"type": "text", "text": sentence(&mut rng, words, cumulative, n)}],
                                    "ts": ts,
                                }))
                                .map_err(|e| e.to_string())
                            })
                            .collect::<Result<_, _>>()?;
                        let mut session =
                            pegasus_store::Session::open(&dir, &name).map_err(|e| e.to_string())?;
                        session.append_turn(&records).map_err(|e| e.to_string())?;
                    }
                    Ok(())
                })
            })
            .collect();
        for t in threads {
            t.join()
                .map_err(|_| "a session-writing thread panicked")??;
        }
        Ok(())
    })?;
    println!(
        "  home: {projects} projects × {SEARCH_LINES} session lines written in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    let mut t = support::Targets::default();

    // (a) From scratch.
    let t0 = Instant::now();
    let (done, _) = pegasus_search::catch_up(&home, &|| false)?;
    let built = t0.elapsed();
    let index = pegasus_search::index_file(&home);
    let mib =
        |p: &std::path::Path| std::fs::metadata(p).map_or(0.0, |m| m.len() as f64 / 1048576.0);
    let mut wal = index.clone().into_os_string();
    wal.push("-wal");
    println!(
        "  (a) {} entries from {} files, index {:.0} MiB (+ WAL {:.0} MiB)",
        done.entries_added,
        done.sources_read,
        mib(&index),
        mib(std::path::Path::new(&wal))
    );
    t.check(
        &format!("index from scratch ({projects} × {SEARCH_LINES} lines)"),
        format!("{:.1} s", built.as_secs_f64()),
        "< 30 s",
        built < Duration::from_secs(30) || projects != SEARCH_PROJECTS,
    );

    // (b) Queries a user makes.
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let queries: Vec<String> = (0..SEARCH_QUERIES)
        .map(|i| {
            let w = |rng: &mut Rng| words[rng.below(words.len())].clone();
            match i % 3 {
                2 => format!("{} {}", w(&mut rng), w(&mut rng)),
                _ => w(&mut rng),
            }
        })
        .collect();
    let run_cli = |q: &str| -> Res<f64> {
        let t0 = Instant::now();
        support::ctl(&pegasusctl, home.root(), &["--json", "search", q])?;
        Ok(ms(t0.elapsed()))
    };
    let run_lib = |q: &str| -> Res<(f64, usize)> {
        let t0 = Instant::now();
        let found = pegasus_search::search(
            &home,
            &pegasus_search::Query {
                text: q.into(),
                ..Default::default()
            },
        )?;
        Ok((ms(t0.elapsed()), found.hits.len()))
    };
    run_cli(&queries[0])?;
    let cli: Vec<f64> = queries.iter().map(|q| run_cli(q)).collect::<Res<_>>()?;
    let lib: Vec<(f64, usize)> = queries.iter().map(|q| run_lib(q)).collect::<Res<_>>()?;
    let hits: usize = lib.iter().filter(|(_, n)| *n > 0).count();
    let lib: Vec<f64> = lib.into_iter().map(|(t, _)| t).collect();
    let cli = Stats::of(&cli);
    println!(
        "  (b) {SEARCH_QUERIES} queries of 1-2 words ({hits} with hits); in process (catch-up included): {} ms",
        Stats::of(&lib).line(1)
    );
    t.check(
        "query: `pegasusctl search` (p99)",
        format!("{} ms", cli.line(1)),
        "< 50 ms",
        cli.p99 < 50.0,
    );

    // (c) The worst case: the commonest word (a tenth of all words; in most lines).
    let common: Vec<f64> = (0..10).map(|_| run_cli(&words[0])).collect::<Res<_>>()?;
    println!(
        "  (c) the commonest word, `pegasusctl search {}`: {} ms",
        words[0],
        Stats::of(&common).line(1)
    );
    Ok(t.met())
}
