//! DESIGN.md §12, Listeners (issue 32 item 5): floods of idle, silent or junk connections to
//! pegasusd's listeners — the dashboard port, the control socket, `workers.listen` — do not
//! stop `status`, sends or a remote worker's enrollment; refusals make a bounded number of log
//! lines; logs are pruned by age and size. The attacker on a TCP port is another local user
//! (`setpriv` to nobody), flooding with bash's `/dev/tcp`; pegasusd starts with the soft
//! `RLIMIT_NOFILE` of 1024 that a systemd unit leaves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use std::{
    io::{BufRead, BufReader, Read, Write},
    os::unix::process::CommandExt,
    process::{Child, Command, Stdio},
    time::Duration,
};

/// Starts pegasusd with the fake provider's key and a soft open-files limit of 1024 (the hard
/// one as it is), as under the shipped systemd unit; waits until it answers `status`.
fn start_limited(home: &Home) -> Daemon {
    let mut cmd = Command::new(PEGASUSD);
    cmd.arg("--home")
        .arg(home.path())
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env(FAKE_KEY_ENV, FAKE_KEY)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            use nix::sys::resource::{getrlimit, setrlimit, Resource};
            let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
            setrlimit(Resource::RLIMIT_NOFILE, 1024.min(hard), hard)?;
            Ok(())
        });
    }
    let child = cmd.spawn().unwrap();
    let pid = child.id();
    let daemon = Daemon::adopt(child, pid);
    poll(Duration::from_secs(20), "pegasusd to answer status", || {
        home.ctl(&["status"]).status.success().then_some(())
    });
    daemon
}

/// Everything pegasusd logged so far.
fn daemon_log(home: &Home) -> String {
    let mut all = String::new();
    for entry in std::fs::read_dir(home.path().join("logs"))
        .unwrap()
        .flatten()
    {
        if entry.file_name().to_string_lossy().starts_with("pegasusd") {
            all.push_str(&std::fs::read_to_string(entry.path()).unwrap_or_default());
        }
    }
    all
}

/// A flood of TCP connections to `port` on loopback, run as nobody: bash opens `count`
/// connections (sending `junk` on each, if any) and holds them until killed. Returns once it
/// says it holds them.
struct Flood {
    child: Child,
}

impl Flood {
    fn start(port: u16, count: usize, junk: Option<&str>) -> Flood {
        let send = match junk {
            Some(j) => format!("printf '{j}' >&\"$fd\" 2>/dev/null;"),
            None => String::new(),
        };
        let script = format!(
            "trap '' PIPE; ulimit -n {limit}; n=0; for i in $(seq {count}); do \
               if exec {{fd}}<>/dev/tcp/127.0.0.1/{port}; then n=$((n+1)); {send} fi; \
             done 2>/dev/null; echo \"held $n\"; read -r _",
            limit = count + 64,
        );
        let mut child = Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "bash",
                "-c",
                &script,
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.starts_with("held "), "the flood says {line:?}");
        let held: usize = line[5..].trim().parse().unwrap();
        assert!(held >= count * 9 / 10, "only {held} of {count} connected");
        Flood { child }
    }
}

impl Flood {
    /// A flood that never lets up: nobody's bash opens `count` connections, says so, then
    /// forever replaces its oldest connection with a new one (re-opening a descriptor closes
    /// the connection it held), so fresh silent connections keep arriving.
    fn churn(port: u16, count: usize) -> Flood {
        let script = format!(
            "trap '' PIPE; ulimit -n {limit}; \
             for ((i=0;i<{count};i++)); do eval \"exec $((i+20))<>/dev/tcp/127.0.0.1/{port}\"; done 2>/dev/null; \
             echo 'held {count}'; \
             while :; do for ((i=0;i<{count};i++)); do eval \"exec $((i+20))<>/dev/tcp/127.0.0.1/{port}\"; done; done 2>/dev/null",
            limit = count + 64,
        );
        let mut child = Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "bash",
                "-c",
                &script,
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.starts_with("held "), "the flood says {line:?}");
        Flood { child }
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The dashboard's port, once it listens.
fn dashboard_port(home: &Home) -> u16 {
    let file = home.path().join("run").join("dashboard.addr");
    poll(Duration::from_secs(10), "the dashboard's address", || {
        let addr = std::fs::read_to_string(&file).ok()?;
        addr.trim().rsplit(':').next()?.parse().ok()
    })
}

/// What `GET /api/status` without a token gets: the dashboard answers (401), so it serves.
fn dashboard_answers(port: u16) -> bool {
    let Ok(mut tcp) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let req =
        format!("GET /api/status HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    if tcp.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut answer = String::new();
    let _ = tcp.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.1 401")
}

/// `status` answers, within 4 s (it takes a few tens of ms; before, a flood made it wait for
/// the flood's connections to time out, or fail), and a send goes through to the model and back.
fn status_and_send_work(home: &Home) {
    let mut status = Command::new(PEGASUSCTL)
        .arg("--home")
        .arg(home.path())
        .arg("status")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(4);
    let exit = loop {
        if let Some(exit) = status.try_wait().unwrap() {
            break Some(exit);
        }
        if std::time::Instant::now() > deadline {
            let _ = status.kill();
            let _ = status.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        exit.is_some_and(|e| e.success()),
        "status did not answer within 4 s: {exit:?}"
    );
    let reply = home.ctl_ok(&["project", "send", "p", "where are you?", "--wait"]);
    assert!(reply.contains("answered through pegasusd"), "{reply}");
}

#[test]
fn another_user_holding_1100_dashboard_connections_stops_neither_status_nor_sends() {
    let fake = answering_fake();
    let home = fake_home(&fake, "");
    let _daemon = start_limited(&home);
    home.create("p");
    let port = dashboard_port(&home);
    let flood = Flood::start(port, 1100, None);
    status_and_send_work(&home);
    // The user's own browser still gets the dashboard: the flood fills only nobody's share.
    assert!(
        dashboard_answers(port),
        "the dashboard does not answer its user"
    );
    let log = daemon_log(&home);
    assert!(!log.contains("Too many open files"), "{log}");
    assert!(log.contains("open files limit raised from 1024"), "{log}");
    let refused: Vec<_> = log
        .lines()
        .filter(|l| l.contains("dashboard: refused a connection from uid 65534"))
        .collect();
    assert_eq!(
        refused.len(),
        1,
        "one line for ~1,000 refusals: {refused:?}"
    );
    drop(flood);
}

#[test]
fn a_process_holding_1100_control_connections_stops_neither_status_nor_sends() {
    use std::os::unix::net::UnixStream;
    let fake = answering_fake();
    let home = fake_home(&fake, "");
    let _daemon = start_limited(&home);
    home.create("p");
    // The control socket is the user's alone: another user cannot even connect.
    let sock = home.path().join("run").join("pegasusd.sock");
    let other = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "bash",
            "-c",
        ])
        .arg(format!("test -e '{}'", sock.display()))
        .status()
        .unwrap();
    assert!(!other.success(), "another user reached the control socket");
    // One runaway process of the user's holding 1,100 idle connections (this test's).
    let (_, hard) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
    nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, hard, hard).unwrap();
    let held: Vec<UnixStream> = (0..1100)
        .map(|_| UnixStream::connect(&sock).unwrap())
        .collect();
    status_and_send_work(&home);
    let log = daemon_log(&home);
    assert!(!log.contains("Too many open files"), "{log}");
    let refused = log
        .lines()
        .filter(|l| l.contains("control socket: refused") && l.contains("this process"))
        .count();
    assert_eq!(refused, 1, "{log}");
    drop(held);
}

/// A home whose projects' workers are launched by a `kind: command` launcher on this host and
/// link back over `workers.listen` on loopback.
fn loopback_home(fake: &pegasus_fakellm::FakeLlm, port: u16) -> Home {
    Home::with_config(&format!(
        "{}agent: {{reflection: false}}\n\
         dashboard: {{listen: \"127.0.0.1:0\"}}\n\
         workers: {{listen: \"127.0.0.1:{port}\", heartbeat_interval_s: 1, shutdown_timeout_s: 5, restart_backoff_ms: 200}}\n\
         launchers:\n  lo: {{kind: command, connect: \"127.0.0.1:{port}\", argv: [\"{{env}}\", \"{{worker}}\", \"{{project_dir}}\"]}}\n\
         default_launcher: lo\n",
        fake_provider_config(fake),
    ))
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[test]
fn silent_connections_to_workers_listen_do_not_delay_a_remote_workers_enrollment_or_return() {
    let fake = answering_fake();
    let port = free_port();
    let home = loopback_home(&fake, port);
    let _daemon = start_limited(&home);
    // Silent connections that keep coming: before, each held one of 256 places for 5 s and
    // the rest queued ahead of the worker's, which waited as long as the flood lasted.
    let flood = Flood::churn(port, 600);
    let started = std::time::Instant::now();
    home.ctl_ok(&["project", "create", "p", "--goal", "g"]);
    let first = poll(
        Duration::from_secs(8),
        "the remote worker to enroll",
        || {
            let p = home.json(&["project", "show", "p"]);
            (p["worker_state"] == "ready").then(|| p["worker_pid"].as_u64())?
        },
    );
    eprintln!("enrolled under the flood in {:?}", started.elapsed());
    let reply = home.ctl_ok(&["project", "send", "p", "where are you?", "--wait"]);
    assert!(reply.contains("answered through pegasusd"), "{reply}");
    // Its return after a kill, while the flood goes on.
    let started = std::time::Instant::now();
    kill9(first as u32);
    poll(
        Duration::from_secs(8),
        "the remote worker to return",
        || {
            let p = home.json(&["project", "show", "p"]);
            let pid = p["worker_pid"].as_u64()?;
            (p["worker_state"] == "ready" && pid != first).then_some(())
        },
    );
    eprintln!("back under the flood in {:?}", started.elapsed());
    let reply = home.ctl_ok(&["project", "send", "p", "where are you?", "--wait"]);
    assert!(reply.contains("answered through pegasusd"), "{reply}");
    let log = daemon_log(&home);
    assert!(log.contains("workers.listen: refused a connection from uid 65534"));
    drop(flood);
}

/// The number of connections a pegasusd log accounts for: one per first line, N per "N more".
fn refusals_told(log: &str, what: &str) -> (usize, u64) {
    let mut lines = 0;
    let mut told = 0;
    for line in log.lines().filter(|l| l.contains(what)) {
        lines += 1;
        told += match line.split(" more refused").next() {
            Some(head) if line.contains(" more refused") => head
                .rsplit(' ')
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0),
            _ => 1,
        };
    }
    (lines, told)
}

#[test]
fn three_thousand_junk_connections_make_a_handful_of_log_lines() {
    let fake = answering_fake();
    let port = free_port();
    let home = loopback_home(&fake, port);
    let mut daemon = start_limited(&home);
    // Plain TCP junk, 3,000 connections from one user (held, so most are past its cap).
    let flood = Flood::start(port, 3000, Some("GET / HTTP/1.0\\r\\n\\r\\n"));
    drop(flood);
    // Stopping says the window's repeats: every refusal is accounted for, in a few lines.
    daemon.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(daemon.wait_exit(Duration::from_secs(20)), Some(0));
    let log = daemon_log(&home);
    let (lines, told) = refusals_told(&log, "workers.listen: ");
    for line in log.lines().filter(|l| l.contains("workers.listen: ")) {
        eprintln!("{line}");
    }
    assert!(lines <= 6, "{lines} lines for 3,000 refusals:\n{log}");
    assert!(
        told >= 2_900,
        "only {told} of 3,000 refusals accounted for:\n{log}"
    );
}

#[test]
fn logs_are_pruned_by_age_and_by_size_at_start() {
    let home = Home::with_config(
        "dashboard: {listen: \"127.0.0.1:0\"}\nlogs: {keep_days: 3, max_mb: 2}\n",
    );
    let logs = home.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let mb = 1 << 20;
    let aged = |name: &str, len: usize, days: u64| {
        let path = logs.join(name);
        std::fs::write(&path, vec![b'x'; len]).unwrap();
        let when = std::time::SystemTime::now() - Duration::from_secs(days * 86_400 + 3600);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(when)
            .unwrap();
        path
    };
    let old_daemon = aged("pegasusd.log.2020-01-01", 100, 10);
    let old_worker = aged("worker-a.log.2020-01-01", 100, 4);
    let big_older = aged("worker-a.log.2020-01-05", mb, 2);
    let big_newer = aged("worker-b.log.2020-01-06", mb, 1);
    let recent = aged("pegasusd.log.2020-01-06", 1000, 1);
    let _daemon = home.start();
    poll(Duration::from_secs(10), "the logs to be pruned", || {
        (!old_daemon.exists() && !old_worker.exists() && !big_older.exists()).then_some(())
    });
    assert!(big_newer.exists() && recent.exists(), "what fits is kept");
    let total: u64 = std::fs::read_dir(&logs)
        .unwrap()
        .flatten()
        .map(|e| e.metadata().unwrap().len())
        .sum();
    assert!(total <= 2 * mb as u64, "{total} bytes left");
    let log = poll(Duration::from_secs(10), "the pruning's line", || {
        let log = daemon_log(&home);
        log.contains("logs pruned: 3 file(s)").then_some(log)
    });
    assert!(log.contains("keep_days 3, max_mb 2"), "{log}");
}
