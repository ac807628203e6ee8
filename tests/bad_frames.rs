//! Hostile or broken peers on both sockets: garbage bytes, an oversized length prefix, a hello
//! of the wrong protocol version, a forged worker token. Each loses its connection; the daemon
//! and every worker live on (DESIGN.md §2, §12).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use pegasus_proto::{
    ctl::CtlRequest,
    worker::{FromWorker, Hello},
    PROTOCOL_VERSION,
};
use std::{
    io::{Read, Write},
    os::unix::net::UnixStream,
    path::Path,
    time::Duration,
};

fn frame(payload: &[u8]) -> Vec<u8> {
    let mut out = (payload.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(payload);
    out
}

/// Sends `bytes` and asserts the daemon hangs up on us (reads until end of stream; any bytes
/// it sends first, like an error frame, are fine).
fn assert_dropped(socket: &Path, bytes: &[u8]) {
    let mut s = UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(bytes);
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return,
            Err(e) => panic!(
                "connection to {} not dropped after {} bytes: {e}",
                socket.display(),
                bytes.len()
            ),
        }
    }
}

fn hostile_inputs() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("garbage", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()),
        (
            "oversized length prefix",
            vec![0xff, 0xff, 0xff, 0xff, 1, 2, 3],
        ),
        ("undecodable frame", frame(&[0xfe; 32])),
    ]
}

#[test]
fn control_socket_drops_bad_connections_and_keeps_serving() {
    let home = Home::new();
    let _d = home.start();
    let pid = home.create("calm");
    let sock = home.path().join("run/pegasusd.sock");
    for (what, bytes) in hostile_inputs() {
        assert_dropped(&sock, &bytes);
        assert!(
            home.ctl(&["status"]).status.success(),
            "daemon stopped answering after {what}"
        );
    }
    let wrong = pegasus_proto::encode(&CtlRequest::Hello {
        protocol_version: PROTOCOL_VERSION + 99,
    })
    .unwrap();
    assert_dropped(&sock, &frame(&wrong));
    // A request before the hello is refused too.
    let early = pegasus_proto::encode(&CtlRequest::Stop).unwrap();
    assert_dropped(&sock, &frame(&early));
    let status = home.json(&["status"]);
    assert!(status["pid"].is_number());
    assert_eq!(
        home.ready_worker("calm", None),
        pid,
        "the worker was disturbed"
    );
}

#[test]
fn worker_socket_drops_bad_connections_and_forged_hellos() {
    let home = Home::new();
    let _d = home.start();
    let pid = home.create("calm");
    let sock = home.path().join("run/w.sock");
    for (_, bytes) in hostile_inputs() {
        assert_dropped(&sock, &bytes);
    }
    let hello = |version: u32, token: &str| {
        let h = FromWorker::Hello(Hello {
            protocol_version: version,
            project: "calm".into(),
            pid: std::process::id(),
            token: token.into(),
        });
        frame(&pegasus_proto::encode(&h).unwrap())
    };
    assert_dropped(&sock, &hello(PROTOCOL_VERSION + 1, "whatever"));
    assert_dropped(&sock, &hello(PROTOCOL_VERSION, "forged-token"));
    // A hello that lies about its pid is refused even before the token is looked at.
    let liar = FromWorker::Hello(Hello {
        protocol_version: PROTOCOL_VERSION,
        project: "calm".into(),
        pid: 1,
        token: "t".into(),
    });
    assert_dropped(&sock, &frame(&pegasus_proto::encode(&liar).unwrap()));

    assert!(home.ctl(&["status"]).status.success());
    assert_eq!(
        home.ready_worker("calm", None),
        pid,
        "the real worker was disturbed"
    );
    assert_eq!(home.json(&["project", "show", "calm"])["restarts"], 0);
    home.ctl_ok(&["project", "send", "calm", "all good"]);
}

/// Issue 32: `w.sock` serves only the workers pegasusd spawned (by the peer's pid, as the
/// kernel reports it): another process of the same user (a command a model ran, any program)
/// is refused before it says anything, with one logged line naming its pid, whatever it sends.
#[test]
fn worker_socket_refuses_a_process_pegasusd_did_not_spawn() {
    let home = Home::new();
    let _d = home.start();
    let pid = home.create("calm");
    let sock = home.path().join("run/w.sock");
    // Silent: refused at once for who it is, not after the 5 s a worker has to say hello.
    let started = std::time::Instant::now();
    assert_dropped(&sock, &[]);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    // A well-formed hello with its own pid, as a real worker's: refused the same way.
    let hello = FromWorker::Hello(Hello {
        protocol_version: PROTOCOL_VERSION,
        project: "calm".into(),
        pid: std::process::id(),
        token: "0".repeat(32),
    });
    assert_dropped(&sock, &frame(&pegasus_proto::encode(&hello).unwrap()));
    // Refusals are logged at a bounded rate: the first from a peer for a reason has its line,
    // the repeat is counted into the next summary.
    let me = format!(
        "worker socket: refused a connection from pid {}: not a worker pegasusd spawned",
        std::process::id()
    );
    let lines = poll(Duration::from_secs(5), "the refusal in the log", || {
        let lines: Vec<String> = pegasusd_log(&home)
            .lines()
            .filter(|l| l.contains("worker socket: refused a connection"))
            .map(str::to_string)
            .collect();
        (!lines.is_empty()).then_some(lines)
    });
    assert_eq!(lines.len(), 1, "one line for the refused peer: {lines:?}");
    assert!(lines.iter().all(|l| l.contains(&me)), "{lines:?}");
    // The real worker never noticed.
    assert_eq!(home.ready_worker("calm", None), pid);
    assert_eq!(home.json(&["project", "show", "calm"])["restarts"], 0);
    home.ctl_ok(&["project", "send", "calm", "all good"]);
}

/// Everything pegasusd logged so far.
fn pegasusd_log(home: &Home) -> String {
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

fn vm_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Issue 8 (low): a client that says hello and then announces a 16 MiB frame it never sends
/// used to pin 16 MiB each, with no timeout. Now the buffer grows only with bytes that arrive,
/// and a frame that stalls past the frame timeout loses its connection.
#[test]
fn announced_but_unsent_frames_pin_no_memory_and_are_dropped() {
    let home = Home::new();
    let d = home.start();
    home.ctl_ok(&["status"]);
    let sock = home.path().join("run/pegasusd.sock");
    let before = vm_rss_kib(d.pid);
    let hello = frame(
        &pegasus_proto::encode(&CtlRequest::Hello {
            protocol_version: PROTOCOL_VERSION,
        })
        .unwrap(),
    );
    let mut clients: Vec<UnixStream> = (0..20)
        .map(|_| {
            let mut s = UnixStream::connect(&sock).unwrap();
            s.write_all(&hello).unwrap();
            s.write_all(&(pegasus_proto::MAX_FRAME as u32).to_be_bytes())
                .unwrap();
            s.write_all(&[1u8; 16]).unwrap();
            s
        })
        .collect();
    // Every client got its welcome and its half frame is read: the daemon holds them all now.
    home.ctl_ok(&["status"]);
    let grown_mib = vm_rss_kib(d.pid).saturating_sub(before) / 1024;
    assert!(
        grown_mib < 40,
        "20 announced 16 MiB frames grew pegasusd by {grown_mib} MiB"
    );
    for s in &mut clients {
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut buf = [0u8; 4096];
        // The welcome, then the end of stream when the frame timeout drops us.
        loop {
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
                Err(e) => panic!("a stalled frame was not dropped: {e}"),
            }
        }
    }
    assert!(home.ctl(&["status"]).status.success());
}
