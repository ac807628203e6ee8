//! What per-project limits (DESIGN.md §12, cgroups) cost: `cargo run --release --example
//! bench_limits [-- RUNS]` (root, or a delegated cgroup).
//!
//! Each run is a child process of this bench playing a worker: it runs 300 commands (after 20
//! untimed) exactly as the `exec` tool does — the project's memory-kill count read, `sh -c
//! true` contained by `pegasus_sandbox::confined_shell` (namespaces, no Landlock) spawned and
//! waited for, the count read again — either with no cgroup (`plain`) or from inside its
//! project's `worker` cgroup with every command joining `commands` (`cgroup`). Runs alternate
//! between the two; the figure is the difference of the per-run medians. A `cgroup` run also
//! times making and removing a project's cgroup (what each worker start and end adds).
//! Target: the limits add ≤ 1 ms to a command.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::time::{Duration, Instant};

use pegasus_sandbox::cgroups::{Cgroups, CommandCgroup, Limits, CGROUP_ENV};

const COMMANDS: usize = 300;
const WARMUP: usize = 20;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// One command as `exec` runs it.
fn one_command(dir: &std::path::Path) -> Duration {
    let t = Instant::now();
    let before = pegasus_sandbox::cgroups::oom_kills();
    let (mut cmd, read_end) = pegasus_sandbox::confined_shell("true", dir, None).unwrap();
    let mut child = cmd.spawn().unwrap();
    drop(cmd);
    drop(read_end);
    assert!(child.wait().unwrap().success());
    assert!(pegasus_sandbox::cgroups::memory_kill_note(before).is_none());
    t.elapsed()
}

/// A child run: prints `median_us [create_remove_us]`.
fn run(mode: &str) {
    let dir = tempfile::tempdir().unwrap();
    let mut setup = None;
    let mut lifecycle = None;
    if mode == "cgroup" {
        let cgroups = Cgroups::setup(dir.path()).unwrap_or_else(|e| {
            eprintln!("no cgroups here: {e}");
            std::process::exit(2)
        });
        let limits = Limits {
            memory: 2 << 30,
            memory_text: "2G".into(),
            pids: 512,
            cpu: 1.0,
        };
        let mut times = Vec::new();
        for i in 0..50 {
            let t = Instant::now();
            let p = cgroups.create(&format!("p{i}"), &limits).unwrap();
            p.remove().unwrap();
            times.push(t.elapsed());
        }
        lifecycle = Some(median(times));
        let project = cgroups.create("bench", &limits).unwrap();
        // Into the worker leaf as pegasusd puts a worker, and told where commands go.
        pegasus_sandbox::cgroups::join_in_child(&project.worker_procs()).unwrap();
        std::env::set_var(CGROUP_ENV, project.env_value());
        assert!(CommandCgroup::from_env().unwrap());
        setup = Some((cgroups, project));
    }
    for _ in 0..WARMUP {
        one_command(dir.path());
    }
    let times: Vec<Duration> = (0..COMMANDS).map(|_| one_command(dir.path())).collect();
    print!("{:.1}", us(median(times)));
    if let Some(l) = lifecycle {
        print!(" {:.1}", us(l));
    }
    println!();
    if let Some((cgroups, project)) = setup {
        // Back to where the bench started (the project's grandparent in each hierarchy),
        // then nothing is left behind.
        let home: Vec<std::ffi::CString> = project
            .dirs()
            .iter()
            .filter_map(|d| d.parent()?.parent().map(|own| own.join("cgroup.procs")))
            .filter_map(|p| std::ffi::CString::new(p.into_os_string().into_encoded_bytes()).ok())
            .collect();
        let _ = pegasus_sandbox::cgroups::join_in_child(&home);
        if let Err(e) = project.remove() {
            eprintln!("cannot remove the bench's cgroup: {e}");
        }
        cgroups.close();
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--mode") {
        return run(&args[2]);
    }
    let runs: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(5);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "bench_limits: {} (UTC), load {}",
        chrono::Utc::now().format("%F %T"),
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    let me = std::env::current_exe().unwrap();
    let (mut plain, mut limited, mut lifecycle) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..runs {
        for mode in ["plain", "cgroup"] {
            let out = Command::new(&me).args(["--mode", mode]).output().unwrap();
            if !out.status.success() {
                eprintln!("{}", String::from_utf8_lossy(&out.stderr));
                std::process::exit(2);
            }
            let text = String::from_utf8_lossy(&out.stdout);
            let mut nums = text.split_whitespace().map(|n| n.parse::<f64>().unwrap());
            let per_command = nums.next().unwrap();
            if mode == "plain" {
                plain.push(per_command);
            } else {
                limited.push(per_command);
                lifecycle.extend(nums.next());
            }
            println!(
                "run {} {mode:>6}: median {per_command:.1} µs a command",
                i + 1
            );
        }
    }
    let range = |v: &[f64]| {
        let min = v.iter().cloned().fold(f64::MAX, f64::min);
        let max = v.iter().cloned().fold(f64::MIN, f64::max);
        (min, max)
    };
    let mid = |v: &[f64]| {
        let mut s = v.to_vec();
        s.sort_by(f64::total_cmp);
        s[s.len() / 2]
    };
    let (p0, p1) = range(&plain);
    let (c0, c1) = range(&limited);
    let (l0, l1) = range(&lifecycle);
    let diffs: Vec<f64> = limited.iter().zip(&plain).map(|(c, p)| c - p).collect();
    let (d0, d1) = range(&diffs);
    println!(
        "without a cgroup: {:.1} µs a command (runs {p0:.1}–{p1:.1})",
        mid(&plain)
    );
    println!(
        "in its cgroup:    {:.1} µs a command (runs {c0:.1}–{c1:.1})",
        mid(&limited)
    );
    println!(
        "the limits add {:.1} µs a command (paired runs {d0:.1} to {d1:.1}); a project's cgroup \
         made and removed: {:.1} µs (runs {l0:.1}–{l1:.1})",
        mid(&diffs),
        mid(&lifecycle)
    );
    let pass = mid(&diffs) <= 1000.0;
    println!(
        "{} the limits add ≤ 1 ms to a command",
        if pass { "PASS" } else { "MISS" }
    );
    std::process::exit(if pass { 0 } else { 1 });
}
