//! The daemon's event bus, followed over the real control socket: a `Follow` connection sees
//! a project's agent at work (its task moving, its stages, its model call and tool call, the
//! worker's state, a crash) as typed events in bus order; a follower that never reads does not
//! hold up the daemon or the other followers; and `project log -f` shows new lines as they land.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use pegasus_fakellm::{FakeLlm, Match, Reply, Rule, ToolCall};
use pegasus_proto::{
    ctl::{CtlRequest, CtlResponse},
    BusBody, BusEvent, Stage, TaskState, WorkerEvent, WorkerState, PROTOCOL_VERSION,
};
use serde_json::json;
use std::{
    io::{Read, Write},
    os::unix::net::UnixStream,
    path::Path,
    sync::mpsc,
    time::{Duration, Instant},
};

fn write_frame(s: &mut UnixStream, req: &CtlRequest) {
    let payload = pegasus_proto::encode(req).unwrap();
    let mut out = (payload.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(&payload);
    s.write_all(&out).unwrap();
}

fn read_frame(s: &mut UnixStream) -> Option<CtlResponse> {
    let mut prefix = [0u8; 4];
    s.read_exact(&mut prefix).ok()?;
    let mut payload = vec![0u8; u32::from_be_bytes(prefix) as usize];
    s.read_exact(&mut payload).ok()?;
    Some(pegasus_proto::decode(&payload).unwrap())
}

/// A follower connection: hello, then `Follow`.
fn follow(socket: &Path, project: Option<&str>) -> UnixStream {
    let mut s = UnixStream::connect(socket).unwrap();
    write_frame(
        &mut s,
        &CtlRequest::Hello {
            protocol_version: PROTOCOL_VERSION,
        },
    );
    assert!(matches!(
        read_frame(&mut s),
        Some(CtlResponse::Welcome { .. })
    ));
    write_frame(
        &mut s,
        &CtlRequest::Follow {
            project: project.map(str::to_string),
        },
    );
    // The first frame says the subscription stands.
    assert_eq!(read_frame(&mut s), Some(CtlResponse::Resync { missed: 0 }));
    s
}

/// Reads events on a thread until `stop` says the collection is complete or the deadline.
fn collect_until(
    mut s: UnixStream,
    timeout: Duration,
    stop: impl Fn(&[BusEvent]) -> bool + Send + 'static,
) -> Vec<BusEvent> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut got = Vec::new();
        while let Some(frame) = read_frame(&mut s) {
            if let CtlResponse::Event(e) = frame {
                got.push(e);
                if stop(&got) {
                    break;
                }
            }
        }
        let _ = tx.send(got);
    });
    rx.recv_timeout(timeout)
        .expect("no complete set of events before the deadline")
}

fn task_done(events: &[BusEvent]) -> bool {
    events.iter().any(|e| {
        matches!(
            &e.body,
            BusBody::Worker(WorkerEvent::Task {
                state: TaskState::Done,
                ..
            })
        )
    })
}

#[test]
fn a_follower_sees_a_message_become_task_events_in_order_and_idle_followers_hold_nothing_up() {
    let fake = FakeLlm::start().unwrap();
    let home = fake_home(&fake, "");
    fake.add_rule(
        Rule::new(
            Match::LastUserTextContains("list it".into()),
            Reply::Tools(vec![ToolCall::new("list_dir", json!({"path": "."}))]),
        )
        .times(1),
    );
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("list it".into()),
        Reply::Text("listed".into()),
    ));
    let _d = home.start_fake();
    home.create("bus");
    let socket = home.path().join("run/pegasusd.sock");

    // Followers that never read (every project, or one with no events) hold nothing up.
    let stalled = follow(&socket, None);
    let follower = follow(&socket, Some("bus"));
    let other_project = follow(&socket, Some("nobody"));

    assert_eq!(
        home.ctl_ok(&["project", "send", "bus", "please list it", "--wait"])
            .trim(),
        "listed"
    );
    let events = collect_until(follower, Duration::from_secs(30), task_done);
    assert!(events.iter().all(|e| e.project == "bus"));
    assert!(
        events.windows(2).all(|w| w[0].seq < w[1].seq),
        "bus order is seq order"
    );
    let kinds: Vec<&str> = events.iter().map(|e| e.body.kind()).collect();
    let pos = |pred: &dyn Fn(&BusBody) -> bool| {
        events
            .iter()
            .position(|e| pred(&e.body))
            .unwrap_or_else(|| panic!("missing event in {kinds:?}"))
    };
    let running = pos(&|b| {
        matches!(
            b,
            BusBody::Worker(WorkerEvent::Task {
                state: TaskState::Running,
                ..
            })
        )
    });
    let reasoning = pos(&|b| {
        matches!(
            b,
            BusBody::Worker(WorkerEvent::Stage {
                stage: Stage::Reasoning,
                depth: 0,
                ..
            })
        )
    });
    let call_started = pos(&|b| matches!(b, BusBody::LlmCall { ended: false, .. }));
    let usage = pos(&|b| matches!(b, BusBody::Worker(WorkerEvent::ModelUsage { .. })));
    let tool = pos(
        &|b| matches!(b, BusBody::Worker(WorkerEvent::ToolCall { name, is_error: false, .. }) if name == "list_dir"),
    );
    let done = pos(&|b| {
        matches!(
            b,
            BusBody::Worker(WorkerEvent::Task {
                state: TaskState::Done,
                ..
            })
        )
    });
    assert!(
        running < reasoning && reasoning < usage && usage < tool && tool < done,
        "{kinds:?}"
    );
    assert!(call_started < usage, "{kinds:?}");
    assert!(
        events.iter().any(|e| matches!(
            e.body,
            BusBody::LlmCall {
                ended: true,
                cost_usd: Some(c),
                ..
            } if c > 0.0
        )),
        "model calls end on the bus with their cost: {kinds:?}"
    );

    // The idle followers held nothing up: the daemon answers at once.
    let t = Instant::now();
    home.ctl_ok(&["status"]);
    assert!(t.elapsed() < Duration::from_secs(5));
    drop((stalled, other_project));
}

#[test]
fn a_follower_sees_a_worker_crash_and_its_restart() {
    let home = Home::new();
    let _d = home.start();
    let pid = home.create("crashy");
    let socket = home.path().join("run/pegasusd.sock");
    let follower = follow(&socket, Some("crashy"));
    kill9(pid);
    let events = collect_until(follower, Duration::from_secs(30), |got| {
        got.iter().any(|e| {
            matches!(
                &e.body,
                BusBody::WorkerState {
                    state: WorkerState::Ready,
                    pid: Some(_)
                }
            )
        })
    });
    let crash = events
        .iter()
        .position(|e| matches!(&e.body, BusBody::Crash { reason } if reason.contains("signal 9")))
        .unwrap_or_else(|| panic!("no crash event: {events:?}"));
    let ready = events
        .iter()
        .position(|e| {
            matches!(
                &e.body,
                BusBody::WorkerState {
                    state: WorkerState::Ready,
                    ..
                }
            )
        })
        .unwrap();
    assert!(crash < ready, "{events:?}");
    let new_pid = home.ready_worker("crashy", Some(pid as u64));
    assert_ne!(new_pid, pid);
}

#[test]
fn project_log_follow_shows_new_lines_while_the_daemon_runs() {
    let fake = FakeLlm::start().unwrap();
    let home = fake_home(&fake, "");
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("ping".into()),
        Reply::Text("pong-from-agent".into()),
    ));
    let _d = home.start_fake();
    home.create("follow");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_pegasusctl"))
        .args(["--home"])
        .arg(home.path())
        .args(["project", "log", "follow", "-f"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut seen = String::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = out.read(&mut buf) {
            if n == 0 {
                break;
            }
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
            if seen.contains("pong-from-agent") {
                let _ = tx.send(seen.clone());
                break;
            }
        }
    });
    home.ctl_ok(&["project", "send", "follow", "ping", "--wait"]);
    let seen = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("log -f did not show the reply");
    assert!(seen.contains("ping"), "{seen}");
    let _ = child.kill();
    let _ = child.wait();
}
