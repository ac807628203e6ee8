//! Dashboard benchmark: `cargo run --release --example bench_dashboard` (builds the release
//! binaries first). Real pegasusd, real HTTP, the in-repo fake LLM.
//!
//! (a) `GET /api/projects` with 1,000 projects (suspended: listed, no workers), 200 requests,
//!     each on a new connection as a browser's first request would be. Target < 20 ms.
//! (b) 100 SSE followers of 34 streamed replies (3 text deltas each, 20 ms apart): for each delta,
//!     the time from its publication (the event's `ts_ms`) to its arrival at the last of the 100
//!     followers; and pegasusd's CPU time while streaming. Target p99 < 5 ms.
//! (c) Page weight: `/`, a project page and `/static/app.js`, and whether any page refers to
//!     another host. Target < 100 KB, no external requests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use pegasus_fakellm::{FakeLlm, Fault, Match, Reply, Rule};

/// Per follower: (event seq, ms from publication to arrival) of every text delta.
type Arrivals = Arc<Mutex<Vec<Vec<(i64, f64)>>>>;

fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(Path::parent).unwrap().to_path_buf();
    if let Some(cargo) = std::env::var_os("CARGO") {
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "--bins", "--quiet"]);
        if dir.ends_with("release") {
            cmd.arg("--release");
        }
        assert!(
            cmd.status().unwrap().success(),
            "building the binaries failed"
        );
    }
    dir
}

fn get(addr: &str, token: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n").unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, body.to_string())
}

fn post(addr: &str, token: &str, path: &str, body: &str) {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(s, "POST {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    assert!(raw.starts_with("HTTP/1.1 200"), "{raw}");
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = stat.rsplit_once(')').unwrap().1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

fn main() {
    let bins = bin_dir();
    let fake = FakeLlm::start().unwrap();
    let text: String = (0..100).map(|i| format!("w{i} ")).collect();
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("stream".into()),
        Reply::Fault(Fault::Paced {
            gap_ms: 20,
            then: Box::new(Reply::Text(text)),
        }),
    ));
    fake.add_rule(Rule::new(Match::Any, Reply::Text("ok".into())));
    let home = tempfile::Builder::new()
        .prefix("bench-dash")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::write(
        home.path().join("config.yml"),
        format!(
            "default_model: fa/m\nproviders:\n  fa: {{kind: anthropic, base_url: \"{}\", api_key_env: BENCH_KEY}}\nprices:\n  \"fa/*\": {{input: 1.0, output: 2.0}}\nagent: {{reflection: false}}\ndashboard: {{listen: \"127.0.0.1:0\"}}\n",
            fake.anthropic_base_url()
        ),
    )
    .unwrap();
    for i in 0..1000 {
        let dir = home.path().join(format!("projects/p{i:04}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("PROJECT.md"), format!("---\nname: p{i:04}\nstatus: suspended\ncreated: 2026-11-01T00:00:00Z\n---\n## Goal\nProject {i}.\n")).unwrap();
    }
    let mut daemon = Command::new(bins.join("pegasusd"))
        .arg("--home")
        .arg(home.path())
        .env("BENCH_KEY", "k")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let addr = loop {
        if let Ok(a) = std::fs::read_to_string(home.path().join("run/dashboard.addr")) {
            break a.trim().to_string();
        }
        assert!(Instant::now() < deadline, "no dashboard");
        std::thread::sleep(Duration::from_millis(50));
    };
    let token = std::fs::read_to_string(home.path().join("run/dashboard.token"))
        .unwrap()
        .trim()
        .to_string();

    // (a)
    for _ in 0..20 {
        get(&addr, &token, "/api/projects");
    }
    let mut lat = Vec::new();
    let mut n = 0;
    for _ in 0..200 {
        let t = Instant::now();
        let (st, body) = get(&addr, &token, "/api/projects");
        lat.push(t.elapsed().as_secs_f64() * 1e3);
        assert_eq!(st, 200);
        n = body.matches("\"name\"").count();
    }
    let (a50, a99) = (pct(&mut lat, 0.5), pct(&mut lat, 0.99));

    // (b)
    let ctl = bins.join("pegasusctl");
    let ok = Command::new(&ctl)
        .arg("--home")
        .arg(home.path())
        .args(["project", "create", "live", "--goal", "stream"])
        .output()
        .unwrap();
    assert!(ok.status.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = Command::new(&ctl)
            .arg("--home")
            .arg(home.path())
            .args(["--json", "project", "show", "live"])
            .output()
            .unwrap();
        if String::from_utf8_lossy(&out.stdout).contains("\"worker_state\": \"ready\"") {
            break;
        }
        assert!(Instant::now() < deadline, "no worker");
        std::thread::sleep(Duration::from_millis(50));
    }
    const FOLLOWERS: usize = 100;
    const MESSAGES: usize = 34;
    let arrivals: Arrivals = Arc::new(Mutex::new(vec![Vec::new(); FOLLOWERS]));
    let ready = Arc::new(Barrier::new(FOLLOWERS + 1));
    let mut threads = Vec::new();
    for f in 0..FOLLOWERS {
        let (addr, token, arrivals, ready) =
            (addr.clone(), token.clone(), arrivals.clone(), ready.clone());
        threads.push(std::thread::spawn(move || {
            let mut s = TcpStream::connect(&addr).unwrap();
            write!(s, "GET /api/events?project=live HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\r\n").unwrap();
            let mut r = BufReader::new(s);
            let mut line = String::new();
            // Headers.
            loop {
                line.clear();
                r.read_line(&mut line).unwrap();
                if line == "\r\n" {
                    break;
                }
            }
            ready.wait();
            let mut event = String::new();
            let mut dones = 0;
            loop {
                line.clear();
                if r.read_line(&mut line).unwrap_or(0) == 0 {
                    return;
                }
                let l = line.trim_end();
                if let Some(e) = l.strip_prefix("event: ").or_else(|| l.strip_prefix("event:")) {
                    event = e.trim().to_string();
                } else if let Some(d) = l.strip_prefix("data: ").or_else(|| l.strip_prefix("data:")) {
                    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64() * 1e3;
                    if event == "text_delta" {
                        let v: serde_json::Value = serde_json::from_str(d).unwrap();
                        arrivals.lock().unwrap()[f].push((v["seq"].as_i64().unwrap(), now - v["ts_ms"].as_f64().unwrap()));
                    }
                    if event == "task" && d.contains("\"state\":\"done\"") {
                        dones += 1;
                        if dones == MESSAGES {
                            return;
                        }
                    }
                }
            }
        }));
    }
    ready.wait();
    let pid = daemon.id();
    let cpu0 = cpu_ticks(pid);
    let t0 = Instant::now();
    for i in 0..MESSAGES {
        post(
            &addr,
            &token,
            "/api/projects/live/messages",
            "{\"text\":\"stream please\"}",
        );
        // One at a time (waiting messages would be answered together).
        let until = Instant::now() + Duration::from_secs(30);
        while arrivals.lock().unwrap()[0].len() < 3 * (i + 1) {
            assert!(Instant::now() < until, "reply {i} did not stream");
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for t in threads {
        t.join().unwrap();
    }
    let wall = t0.elapsed().as_secs_f64();
    let cpu = (cpu_ticks(pid) - cpu0) as f64 / 100.0;
    let all = arrivals.lock().unwrap().clone();
    let mut by_seq: std::collections::BTreeMap<i64, Vec<f64>> = Default::default();
    for f in &all {
        for (seq, d) in f {
            by_seq.entry(*seq).or_default().push(*d);
        }
    }
    let complete = by_seq.values().filter(|v| v.len() == FOLLOWERS).count();
    let mut last: Vec<f64> = by_seq
        .values()
        .map(|v| v.iter().cloned().fold(f64::MIN, f64::max))
        .collect();
    let (b50, b99) = (pct(&mut last, 0.5), pct(&mut last, 0.99));

    // (c)
    // The list page grows with the projects (1,000 here); the fixed weight is what a page costs
    // before its data: measured on the pages whose data is small.
    let (_, list_page) = get(&addr, &token, "/");
    let pages = ["/projects/live", "/costs", "/static/app.js"];
    let mut total = 0;
    let mut sizes = Vec::new();
    let mut external = false;
    for p in pages {
        let (st, body) = get(&addr, &token, p);
        assert_eq!(st, 200, "{p}");
        total += body.len();
        sizes.push(format!("{p} {} B", body.len()));
        external |= body.contains("http://") || body.contains("https://") || body.contains("//cdn");
    }
    let _ = daemon.kill();
    let _ = daemon.wait();

    println!("== bench_dashboard report");
    println!("(a) GET /api/projects, {n} projects, 200 requests (new connection each): median {a50:.2} ms, p99 {a99:.2} ms (target < 20 ms)  {}", if a99 < 20.0 { "PASS" } else { "MISS" });
    println!("(b) {FOLLOWERS} SSE followers, {} text deltas ({complete} reached every follower): publication → last follower median {b50:.2} ms, p99 {b99:.2} ms (target p99 < 5 ms; ts_ms has 1 ms resolution)  {}; pegasusd CPU {cpu:.2} s over {wall:.2} s of streaming", by_seq.len(), if b99 < 5.0 { "PASS" } else { "MISS" });
    println!(
        "(c) page weight {} = {total} bytes (target < 100 KB), external references: {}  {}",
        sizes.join(" + "),
        if external { "yes" } else { "none" },
        if total < 100_000 && !external {
            "PASS"
        } else {
            "MISS"
        }
    );
    println!(
        "    the project list with {n} projects: {} bytes ({} per project)",
        list_page.len(),
        list_page.len() / n.max(1)
    );
}
