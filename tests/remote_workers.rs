//! Workers on another host (DESIGN.md §14), for real and without containers: a second network stack
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
        self.home_via(fake, port, None)
    }

    /// [`Host::home`], each launch going through `spy` on the other host when given.
    fn home_via(&self, fake: &FakeLlm, port: u16, spy: Option<&Spy>) -> Home {
        let spy = spy
            .map(|s| format!("\"{}\", \"{}\", ", s.script().display(), s.dir().display()))
            .unwrap_or_default();
        Home::with_config(&format!(
            "{}agent: {{reflection: false}}\n\
             dashboard: {{listen: \"127.0.0.1:0\"}}\n\
             workers: {{listen: \"{here}:{port}\", heartbeat_interval_s: 1, shutdown_timeout_s: 5, restart_backoff_ms: 200}}\n\
             launchers:\n  hostb: {{kind: command, connect: \"{here}:{port}\", argv: [ip, netns, exec, {ns}, \"{{env}}\", {spy}\"{{worker}}\", \"{{project_dir}}\"]}}\n\
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

/// What someone who can read a launch's standard input on the worker's host learns (root
/// there, or a launcher that logs what it forwards): a wrapper the launcher runs before the
/// worker, which appends the enrollment line it was given to `<dir>/tokens`, waits while the
/// FIFO `<dir>/gate` exists (until the test writes a line to it), and hands the line on to the
/// worker's standard input.
struct Spy {
    dir: tempfile::TempDir,
}

impl Spy {
    fn new() -> Spy {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::Builder::new()
            .prefix("pgspy")
            .tempdir_in("/tmp")
            .unwrap();
        let script = dir.path().join("spy");
        std::fs::write(
            &script,
            "#!/bin/sh\n\
             dir=$1; shift\n\
             IFS= read -r line\n\
             printf '%s\\n' \"$line\" >> \"$dir/tokens\"\n\
             if [ -p \"$dir/gate\" ]; then read go < \"$dir/gate\"; fi\n\
             exec \"$@\" <<EOF\n\
             $line\n\
             EOF\n",
        )
        .unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        Spy { dir }
    }

    fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    fn script(&self) -> std::path::PathBuf {
        self.dir().join("spy")
    }

    /// From now on, each launch waits at the gate (with its token unspent).
    fn hold(&self) {
        nix::unistd::mkfifo(&self.dir().join("gate"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    }

    /// Lets the launch waiting at the gate go on, and the next ones pass.
    fn release(&self) {
        use std::os::unix::fs::OpenOptionsExt;
        let gate = self.dir().join("gate");
        // Opening a FIFO for writing without blocking fails until its reader is there.
        let mut w = poll(Duration::from_secs(10), "a launch at the gate", || {
            std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(nix::libc::O_NONBLOCK)
                .open(&gate)
                .ok()
        });
        std::fs::remove_file(&gate).unwrap();
        w.write_all(b"go\n").unwrap();
    }

    /// The tokens every launch so far was given, oldest first.
    fn tokens(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir().join("tokens"))
            .unwrap_or_default()
            .lines()
            .map(|l| {
                l.strip_prefix("PEGASUS_ENROLL=")
                    .unwrap_or_else(|| panic!("not an enrollment line: {l:?}"))
                    .to_string()
            })
            .collect()
    }

    /// The token of launch `n` (from 1), once it came.
    fn token(&self, n: usize) -> String {
        poll(
            Duration::from_secs(15),
            &format!("launch {n}'s token"),
            || self.tokens().get(n - 1).cloned(),
        )
    }
}

/// The command line and environment of every process, as a local user other than the one
/// running Pegasus reads them (`nobody`, by setpriv): what such a user could learn.
fn proc_as_nobody() -> String {
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "sh",
            "-c",
            "for f in /proc/[0-9]*/cmdline /proc/[0-9]*/environ; do cat \"$f\"; echo; done 2>/dev/null; true",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).replace('\0', " ")
}

/// The pids whose command line contains `needle`.
fn pids_running(needle: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle))
        })
        .collect()
}

/// The environment of `pid`, as root reads it.
fn environ_of(pid: u32) -> String {
    String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default())
        .replace('\0', " ")
}

/// What the log says about refused remote connections.
fn refusals(home: &Home) -> Vec<String> {
    log_text(home)
        .lines()
        .filter(|l| l.contains("workers.listen: refused a connection"))
        .map(str::to_string)
        .collect()
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
    let environ = environ_of(first);
    assert!(
        !environ.contains(FAKE_KEY),
        "no provider key reaches a remote worker"
    );
    assert!(
        environ.contains("PEGASUS_CONNECT=") && !environ.contains("PEGASUS_ENROLL"),
        "only the public bootstrap values are in its environment: {environ}"
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

    // A worker started by hand over there with a token it was never given (on its standard
    // input, as pegasusd gives it): it exits non-zero at once.
    let environ = environ_of(pid);
    let env: Vec<(String, String)> = environ
        .split(' ')
        .filter_map(|kv| kv.split_once('='))
        .filter(|(k, _)| k.starts_with("PEGASUS_"))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert_eq!(env.len(), 2, "the public bootstrap values: {env:?}");
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
    let out = hand_run(&host, worker, &other_dir, &env, &"ab".repeat(32));
    assert!(!out.status.success(), "a refused worker exits non-zero");
    // Each refusal by its own words: counting refusal lines is not enough, as the suspended
    // worker of `near`, killed mid-handshake, may add one of its own (a reset TLS handshake),
    // and pegasusd may log the token's refusal just after the worker read it.
    let log = poll(Duration::from_secs(5), "the refusals in the log", || {
        let log = log_text(&home);
        (log.contains("plain TCP") && log.contains("unknown token")).then_some(log)
    });
    assert!(
        log.contains(&host.there),
        "the peer's address is named: {log}"
    );
    assert!(log.contains("plain TCP"), "{log}");
    assert!(log.contains("unknown token"), "{log}");
    // The real worker never noticed.
    assert!(alive(pid));
    assert_eq!(
        workers_in(&home.project_dir("far")),
        vec![pid],
        "still one worker"
    );
}

/// `project-worker` started by hand on the other host for `dir`, with `env` and `token` on its
/// standard input as pegasusd would give them.
fn hand_run(
    host: &Host,
    worker: &str,
    dir: &str,
    env: &[(String, String)],
    token: &str,
) -> std::process::Output {
    let mut child = Command::new("ip")
        .args(["netns", "exec", &host.ns, worker, dir])
        .env_clear()
        .envs(env.iter().cloned())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "PEGASUS_ENROLL={token}").unwrap();
    drop(stdin);
    child.wait_with_output().unwrap()
}

/// Issue 32 item 1: the enrollment token is seen by no other local user, a certificate is the
/// latest enrollment's for one link only, and a spent token presented again is refused and
/// logged while the real worker keeps serving.
#[test]
fn enrollment_cannot_be_stolen_or_replayed() {
    use pegasus_proto::{
        worker::{FromWorker, Hello, ToWorker},
        FrameReader, FrameWriter, PROTOCOL_VERSION,
    };
    use pegasus_remote::{Bootstrap, LinkError};
    let Some(host) = Host::new() else { return };
    let fake = answering_fake();
    let port = host.free_port();
    let spy = Spy::new();
    let home = host.home_via(&fake, port, Some(&spy));
    let _daemon = home.start_fake();
    let connect = format!("{}:{port}", host.here);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();

    // The first launch, held on the worker's host with its token unspent.
    spy.hold();
    home.ctl_ok(&["project", "create", "far", "--goal", "Goal of far"]);
    let t1 = spy.token(1);
    let held = pids_running(&spy.script().display().to_string());
    assert!(!held.is_empty(), "the launch waits at the gate");
    // Another local user reads every command line and environment: no token anywhere.
    let seen = proc_as_nobody();
    assert!(
        seen.contains(&spy.script().display().to_string()),
        "the reader saw the launch's command line"
    );
    assert!(!seen.contains(&t1), "the token is readable by another user");
    // Nor is it in the launch's environment, even for root: only the public values are.
    let environ = environ_of(held[0]);
    assert!(environ.contains("PEGASUS_CONNECT="), "{environ}");
    assert!(
        !environ.contains(&t1) && !environ.contains("PEGASUS_ENROLL"),
        "{environ}"
    );
    let ca = environ
        .split(' ')
        .find_map(|kv| kv.strip_prefix("PEGASUS_CA_SHA256="))
        .unwrap()
        .to_string();

    // Whoever learns a token before the worker uses it can enroll with it (which is why it
    // must never be seen): here an attacker takes launch 1, then drops the link.
    let stolen = Bootstrap::new(&connect, &t1, &ca).unwrap();
    let identity = rt.block_on(stolen.enroll("far")).unwrap();
    rt.block_on(async {
        let mut link = stolen.connect_with(&identity).await.unwrap();
        let hello = FromWorker::Hello(Hello {
            protocol_version: PROTOCOL_VERSION,
            project: "far".into(),
            pid: 4242,
            token: t1.clone(),
        });
        FrameWriter::new(&mut link).write(&hello).await.unwrap();
        let init = FrameReader::new(&mut link)
            .read::<ToWorker>()
            .await
            .unwrap();
        assert!(matches!(init, Some(ToWorker::Init(_))), "{init:?}");
    });

    // pegasusd launches again (still held). The attacker's certificate, an earlier one of the
    // same project, is refused; so is its spent token.
    let t2 = spy.token(2);
    assert_ne!(t1, t2);
    let before = refusals(&home).len();
    rt.block_on(async {
        // TLS 1.3: the client's handshake ends before the server looks at its certificate;
        // the refusal shows as the end of the stream.
        if let Ok(mut old) = stolen.connect_with(&identity).await {
            let _ = FrameWriter::new(&mut old)
                .write(&FromWorker::Hello(Hello {
                    protocol_version: PROTOCOL_VERSION,
                    project: "far".into(),
                    pid: 4242,
                    token: t2.clone(),
                }))
                .await;
            assert!(
                !matches!(
                    FrameReader::new(&mut old).read::<ToWorker>().await,
                    Ok(Some(_))
                ),
                "an earlier certificate got an answer"
            );
        }
    });
    let replay = rt.block_on(stolen.enroll("far")).unwrap_err();
    assert!(
        matches!(&replay, LinkError::Refused { reason, .. } if reason.contains("token already used")),
        "{replay}"
    );
    let refused = poll(Duration::from_secs(5), "the two refusals logged", || {
        let r = refusals(&home);
        (r.len() >= before + 2).then_some(r)
    });
    let new: Vec<&String> = refused[before..].iter().collect();
    assert_eq!(new.len(), 2, "one line per refusal: {new:?}");
    assert!(
        new.iter()
            .any(|l| l.contains("is revoked") && l.contains(&host.here)),
        "the earlier certificate's refusal names the peer and why: {new:?}"
    );
    assert!(
        new.iter()
            .any(|l| l.contains("token already used") && l.contains(&host.here)),
        "{new:?}"
    );

    // The real worker gets its launch's token, and serves.
    spy.release();
    let worker = home.ready_worker("far", None);
    assert!(host.runs_here(worker));
    let seen = proc_as_nobody();
    assert!(seen.contains(env!("CARGO_BIN_EXE_project-worker")));
    assert!(!seen.contains(&t2), "the token is readable by another user");
    let environ = environ_of(worker);
    assert!(!environ.contains(&t2) && !environ.contains("PEGASUS_ENROLL"));
    let cmdline =
        String::from_utf8_lossy(&std::fs::read(format!("/proc/{worker}/cmdline")).unwrap())
            .to_string();
    assert!(!cmdline.contains(&t2), "{cmdline}");

    // Its spent token, presented again by hand (another project's worker, so the lock lets it
    // get to the link) and by a client for its own project: each refused, logged once.
    home.ctl_ok(&["project", "create", "near", "--goal", "Goal of near"]);
    home.ready_worker("near", None);
    home.ctl_ok(&["project", "suspend", "near"]);
    poll(Duration::from_secs(10), "near's worker to stop", || {
        workers_in(&home.project_dir("near"))
            .is_empty()
            .then_some(())
    });
    let before = refusals(&home).len();
    let public = vec![
        ("PEGASUS_CONNECT".to_string(), connect.clone()),
        ("PEGASUS_CA_SHA256".to_string(), ca.clone()),
    ];
    let near = home.project_dir("near").display().to_string();
    let out = hand_run(
        &host,
        env!("CARGO_BIN_EXE_project-worker"),
        &near,
        &public,
        &t2,
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("token already used"), "{stderr}");
    let again = Bootstrap::new(&connect, &t2, &ca).unwrap();
    let err = rt.block_on(again.connect("far")).unwrap_err();
    assert!(err.to_string().contains("token already used"), "{err}");
    // Refusals are logged at a bounded rate: the hand-run worker's (from the other host) gets
    // its line; the library client's repeats, from this host, a refusal already logged in this
    // window for the same reason, so it is counted into the next summary line instead.
    let refused = poll(Duration::from_secs(5), "the replays logged", || {
        let r = refusals(&home);
        (r.len() > before).then_some(r)
    });
    assert!(refused[before..]
        .iter()
        .all(|l| l.contains("token already used")));
    assert!(
        refused[before..].iter().any(|l| l.contains(&host.there)),
        "the peer's address is named: {refused:?}"
    );

    // The real worker never noticed.
    assert!(alive(worker));
    assert_eq!(workers_in(&home.project_dir("far")), vec![worker]);
    let reply = home.ctl_ok(&["project", "send", "far", "where are you now?", "--wait"]);
    assert!(reply.contains("answered through pegasusd"), "{reply}");
}
