//! Workers on another host (SPEC §14), for real and without containers: a second network stack
//! (a network namespace the test makes, joined to this one by a veth pair with private
//! addresses that exist only inside this test), pegasusd and the fake LLM here, every worker
//! started over there by a `command` launcher (`ip netns exec`). The worker cannot reach the
//! fake LLM (its 127.0.0.1 is its own): every model call goes through pegasusd over mutual TLS.
//!
//! Needs root and `ip` (iproute2): without them each test says so in one line and passes,
//! except under `CI=true` (CI runs as root), where that is a failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use pegasus_fakellm::FakeLlm;
use std::io::{Read, Write};
use std::process::Command;
use std::time::{Duration, Instant};

/// The other host: a network namespace and the veth pair to it, removed on drop.
struct Host {
    ns: String,
    veth: String,
    /// pegasusd's address on the link (this side).
    here: String,
    /// The address of the other side, where the workers run.
    there: String,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Host {
    /// A new host, or `None` (with one line said) where this machine cannot make one.
    fn new() -> Option<Host> {
        // /proc/self belongs to the process's effective user.
        let root = {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
        };
        let why = if !root {
            Some("it needs root".to_string())
        } else if Command::new("ip").arg("-V").output().is_err() {
            Some("`ip` (iproute2) is not installed".to_string())
        } else {
            None
        };
        let why = match why {
            Some(why) => why,
            None => match Host::make() {
                Ok(host) => return Some(host),
                Err(e) => e,
            },
        };
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("the multi-host test cannot run under CI=true: {why}");
        }
        let _ = writeln!(std::io::stderr(), "skipping the multi-host test: {why}");
        None
    }

    fn make() -> Result<Host, String> {
        // Unique per test process and test: names are at most 15 bytes.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = (std::process::id() % 50_000) * 4 + n;
        let (a, b) = ((id / 250) % 250, id % 250);
        let ns = format!("pgh{id}");
        let veth = format!("pgv{id}");
        let peer = format!("pgw{id}");
        let here = format!("10.213.{a}.{}", (b % 60) * 4 + 1);
        let there = format!("10.213.{a}.{}", (b % 60) * 4 + 2);
        let host = Host {
            ns: ns.clone(),
            veth: veth.clone(),
            here: here.clone(),
            there: there.clone(),
        };
        ip(&["netns", "add", &ns])?;
        ip(&["link", "add", &veth, "type", "veth", "peer", "name", &peer])?;
        ip(&["link", "set", &peer, "netns", &ns])?;
        ip(&["addr", "add", &format!("{here}/30"), "dev", &veth])?;
        ip(&["link", "set", &veth, "up"])?;
        ip(&[
            "netns",
            "exec",
            &ns,
            "ip",
            "addr",
            "add",
            &format!("{there}/30"),
            "dev",
            &peer,
        ])?;
        ip(&["netns", "exec", &ns, "ip", "link", "set", &peer, "up"])?;
        ip(&["netns", "exec", &ns, "ip", "link", "set", "lo", "up"])?;
        Ok(host)
    }

    /// Cuts the link (both ways) or brings it back.
    fn link(&self, up: bool) {
        ip(&["link", "set", &self.veth, if up { "up" } else { "down" }]).unwrap();
    }

    /// A free port on this side's address.
    fn free_port(&self) -> u16 {
        let l = std::net::TcpListener::bind(format!("{}:0", self.here)).unwrap();
        l.local_addr().unwrap().port()
    }

    /// A home on the fake provider whose projects run over there.
    fn home(&self, fake: &FakeLlm, port: u16) -> Home {
        Home::with_config(&format!(
            "{}agent: {{reflection: false}}\n\
             dashboard: {{listen: \"127.0.0.1:0\"}}\n\
             workers: {{listen: \"{here}:{port}\", heartbeat_interval_s: 1, shutdown_timeout_s: 5, restart_backoff_ms: 200}}\n\
             launchers:\n  hostb: {{kind: command, connect: \"{here}:{port}\", argv: [ip, netns, exec, {ns}, \"{{env}}\", \"{{worker}}\", \"{{project_dir}}\"]}}\n\
             default_launcher: hostb\n",
            fake_provider_config(fake),
            here = self.here,
            ns = self.ns,
        ))
    }

    /// Whether `pid` runs in this host's network namespace.
    fn runs_here(&self, pid: u32) -> bool {
        use std::os::unix::fs::MetadataExt;
        // The namespace's file under /run/netns has the namespace's id as its inode.
        let ns = std::fs::metadata(format!("/run/netns/{}", self.ns))
            .unwrap()
            .ino();
        std::fs::read_link(format!("/proc/{pid}/ns/net"))
            .is_ok_and(|l| l.to_string_lossy() == format!("net:[{ns}]"))
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = ip(&["link", "del", &self.veth]);
        let _ = ip(&["netns", "del", &self.ns]);
    }
}

fn log_text(home: &Home) -> String {
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

#[test]
fn a_remote_worker_answers_through_pegasusd_and_survives_kills_and_a_cut_link() {
    let Some(host) = Host::new() else { return };
    let fake = answering_fake();
    let port = host.free_port();
    let home = host.home(&fake, port);
    // The home's preferences, roles and skills reach a remote worker over its link.
    std::fs::write(home.path().join("preferences.md"), "Answer briefly.\n").unwrap();
    std::fs::create_dir_all(home.path().join("skills/deploy")).unwrap();
    std::fs::write(
        home.path().join("skills/deploy/SKILL.md"),
        "---\nname: deploy\ndescription: ship it\n---\nRun the deploy.\n",
    )
    .unwrap();
    let mut daemon = home.start_fake();
    let first = home.create("far");
    let got = home.project_dir("far").join("remote-home");
    assert_eq!(
        std::fs::read_to_string(got.join("preferences.md")).unwrap(),
        "Answer briefly.\n"
    );
    assert!(got.join("skills/deploy/SKILL.md").is_file());
    assert!(got.join("roles").is_dir());
    assert!(host.runs_here(first), "the worker runs on the other host");
    // `status` shows the worker's own pid and its host.
    let p = home.json(&["project", "show", "far"]);
    assert_eq!(p["worker_host"], host.there.as_str(), "{p}");
    let status = home.ctl_ok(&["status"]);
    assert!(
        status.contains(&format!("{first}@{}", host.there)),
        "{status}"
    );
    assert!(
        !std::fs::read_to_string(format!("/proc/{first}/environ"))
            .unwrap_or_default()
            .contains(FAKE_KEY),
        "no provider key reaches a remote worker"
    );

    // It answers, through pegasusd: it cannot reach the fake itself.
    let reply = home.ctl_ok(&["project", "send", "far", "where do you run?", "--wait"]);
    assert!(reply.contains("answered through pegasusd"), "{reply}");
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());

    // kill -9 of the remote worker: back within 10 s, with its session.
    kill9(first);
    let second = poll(Duration::from_secs(10), "a new remote worker", || {
        let p = home.json(&["project", "show", "far"]);
        let pid = p["worker_pid"].as_u64()?;
        (p["worker_state"] == "ready" && pid != first as u64).then_some(pid as u32)
    });
    assert!(host.runs_here(second));
    let log = home.ctl_ok(&["project", "log", "far"]);
    assert!(log.contains("where do you run?"), "{log}");

    // The link cut for 20 s: the worker leaves (nothing heard for 15 s), never two at once,
    // and the project is back within 30 s of the link coming back.
    host.link(false);
    let cut = Instant::now();
    let mut most = 0;
    while cut.elapsed() < Duration::from_secs(20) {
        most = most.max(workers_in(&home.project_dir("far")).len());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        !alive(second),
        "a worker that heard nothing for 20 s has exited"
    );
    host.link(true);
    let back = Instant::now();
    let third = poll(
        Duration::from_secs(30),
        "the project back after the link",
        || {
            most = most.max(workers_in(&home.project_dir("far")).len());
            let p = home.json(&["project", "show", "far"]);
            let pid = p["worker_pid"].as_u64()?;
            (p["worker_state"] == "ready" && pid != second as u64).then_some(pid as u32)
        },
    );
    assert!(most <= 1, "never two workers at once (saw {most})");
    assert!(back.elapsed() < Duration::from_secs(30));
    let p = home.json(&["project", "show", "far"]);
    assert_ne!(p["worker_state"], "crash-looping");

    // kill -9 of pegasusd: the remote worker is gone within 15 s (and a few for its exit).
    daemon.kill9();
    poll(
        Duration::from_secs(18),
        "the orphaned remote worker to exit",
        || (!alive(third)).then_some(()),
    );
    let _daemon = home.start_fake();
    let fourth = home.ready_worker("far", Some(third as u64));
    assert!(host.runs_here(fourth));

    // A graceful stop leaves nothing on either side.
    home.ctl_ok(&["stop"]);
    poll(
        Duration::from_secs(15),
        "every worker of the home to exit",
        || {
            workers_in(&home.project_dir("far"))
                .is_empty()
                .then_some(())
        },
    );
}

#[test]
fn refused_remote_clients_are_named_in_the_log_and_dropped() {
    let Some(host) = Host::new() else { return };
    let fake = answering_fake();
    let port = host.free_port();
    let home = host.home(&fake, port);
    let _daemon = home.start_fake();
    let pid = home.create("far");

    // Plain TCP: dropped within 5 s, logged with the peer's address.
    let mut tcp = std::net::TcpStream::connect((host.here.as_str(), port)).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(8))).unwrap();
    let _ = tcp.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    let started = Instant::now();
    let mut buf = [0u8; 64];
    let n = tcp.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "no answer to plain TCP but the close");
    assert!(started.elapsed() < Duration::from_secs(6));

    // A worker started by hand over there with a token it was never given, and one with the
    // running worker's own token (used already, and another project's): each exits non-zero
    // at once.
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let env: Vec<(String, String)> = String::from_utf8_lossy(&environ)
        .split('\0')
        .filter_map(|kv| kv.split_once('='))
        .filter(|(k, _)| k.starts_with("PEGASUS_"))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert_eq!(env.len(), 3, "the bootstrap values: {env:?}");
    // Another project, with no worker (its lock is free, so a worker gets as far as the link).
    home.ctl_ok(&["project", "create", "near", "--goal", "Goal of near"]);
    home.ctl_ok(&["project", "suspend", "near"]);
    poll(Duration::from_secs(10), "near's worker to stop", || {
        workers_in(&home.project_dir("near"))
            .is_empty()
            .then_some(())
    });
    let worker = env!("CARGO_BIN_EXE_project-worker");
    let other_dir = home.project_dir("near").display().to_string();
    let never_issued = "ab".repeat(32);
    for token in [
        never_issued.as_str(),
        env.iter()
            .find(|(k, _)| k == "PEGASUS_ENROLL")
            .map(|(_, v)| v.as_str())
            .unwrap(),
    ] {
        let out = Command::new("ip")
            .args(["netns", "exec", &host.ns, worker, &other_dir])
            .env_clear()
            .envs(env.iter().cloned())
            .env("PEGASUS_ENROLL", token)
            .output()
            .unwrap();
        assert!(!out.status.success(), "a refused worker exits non-zero");
    }
    let log = poll(Duration::from_secs(5), "the refusals in the log", || {
        let log = log_text(&home);
        (log.matches("refusing a remote worker connection").count() >= 3).then_some(log)
    });
    assert!(
        log.contains(&host.there),
        "the peer's address is named: {log}"
    );
    assert!(log.contains("plain TCP"), "{log}");
    assert!(log.contains("token already used"), "{log}");
    assert!(log.contains("unknown token"), "{log}");
    // The real worker never noticed.
    assert!(alive(pid));
    assert_eq!(
        workers_in(&home.project_dir("far")),
        vec![pid],
        "still one worker"
    );
}
