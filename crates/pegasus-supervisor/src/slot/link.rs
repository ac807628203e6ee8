//! The link to a connected worker as a state machine: what happens on each event is
//! [`Link::step`]`(event, now) -> actions`, tested for every phase and every kind of event below;
//! the loop in [`super::connected`] only waits for the next event (a frame, the worker's exit, a
//! command, the earliest clock) and carries the actions out.
//!
//! Four phases. `Loading`: `Init` is sent, the worker loads its project; messages wait in the
//! slot's queue; it must say `Ready` within [`READY_TIMEOUT`]. `Ready`: messages go straight to
//! it, its liveness is watched (pinged when quiet, killed when hung) and an idle worker may be
//! suspended. `Stopping`: `Shutdown` was sent; it must exit within the shutdown timeout or its
//! group is killed. `Lost`: its connection ended or it was killed; the exit is what comes next.
//! The exit itself ends the link in every phase: `Stopped` when it was asked to stop, `Crashed`
//! (with what went wrong before, e.g. `hung`) otherwise.

use super::{Delivery, Outcome, SlotCmd};
use pegasus_proto::{
    worker::{FromWorker, ToWorker},
    WorkerState,
};
use std::time::Duration;
use tokio::{sync::oneshot, time::Instant};

/// How long a connected worker may take to load its project and say `Ready`.
pub(super) const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// A worker whose connection ended while it was not stopping gets this long to exit by itself
/// (a worker that is exiting closes its socket first, and its real exit status is the better
/// crash record); then its group is killed.
const LOST_GRACE: Duration = Duration::from_secs(2);

/// Liveness of a ready worker: it says something (a heartbeat at least) every
/// `heartbeat_interval_s`. Silent for [`PING_AFTER`] beats, it is pinged; silent for
/// [`DEAD_AFTER`] beats (and at least [`DEAD_MIN`]), it is hung — its loop no longer runs — and
/// it is killed and restarted like a crash. (A busy agent still beats: this is not the
/// watchdog's silent-task check.)
const PING_AFTER: u32 = 2;
const DEAD_AFTER: u32 = 6;
const DEAD_MIN: Duration = Duration::from_secs(3);

/// Where the link is (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    Loading,
    Ready,
    Stopping,
    Lost,
}

/// The clocks the link can be waiting for; the loop sleeps until the earliest one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Timer {
    /// Quiet for a while: ask it for a pong.
    Ping,
    /// Quiet for too long: it is hung.
    Dead,
    /// Nothing to do for `workers.idle_suspend_s`.
    Idle,
    /// Not ready, or not stopped, in time.
    Kill,
    /// A remote worker must hear from pegasusd at least every beat: it exits when its link
    /// says nothing for 15 s (DESIGN.md §14), which is how a half-open link is found on its side.
    Keepalive,
}

/// What the link waits for.
pub(super) enum Event {
    /// A frame from the worker (model calls never come here: the reader task hands them to the
    /// proxy at once).
    Frame(FromWorker),
    /// The connection ended, or a frame could not be read.
    ConnectionEnded(String),
    /// A command from the rest of the daemon.
    Cmd(SlotCmd),
    /// The earliest clock of [`Link::next_timer`] is due.
    Timer(Timer),
    /// The worker process exited (its status, described).
    Exited(String),
}

/// What the loop does.
pub(super) enum Action {
    /// Move the worker's state (published on the bus, shown in listings).
    SetState(WorkerState),
    /// Send a frame to the worker.
    Send(ToWorker),
    /// Send `Shutdown`, or kill the group when the link can no longer carry it.
    Shutdown,
    /// Send a message to the worker and remember who waits for what.
    Deliver(Delivery),
    /// Keep a message until the worker is ready.
    Queue(Delivery),
    /// Send every queued message.
    DeliverQueued,
    /// The worker has this message on disk.
    Persisted(String),
    /// The worker already had this message's client id, on message `original` (DESIGN.md §11).
    Repeated {
        id: String,
        original: String,
        same_text: bool,
    },
    /// The agent answered this message.
    Reply {
        message_id: String,
        text: String,
        answered: bool,
    },
    /// Tell the bus (and the MainAgent) that the project said something.
    Notify(String),
    /// Put an agent event on the bus.
    Publish(pegasus_proto::WorkerEvent),
    /// Kill the worker's process group.
    KillGroup,
    /// The worker is idle: the slot asks the daemon to suspend the project.
    IdleSuspend,
    /// The link is over.
    End(Outcome),
}

/// The state of one worker connection (see the module doc).
pub(super) struct Link {
    pub phase: Phase,
    pid: u32,
    /// It said `Ready` (still true while it stops).
    ready: bool,
    /// Frames can still be read from it.
    conn_open: bool,
    /// What went wrong before it exited (a `Fatal` it sent, a hang, the watchdog's kill).
    fatal: Option<String>,
    /// Answered when the stop asked for is done.
    stop_reply: Option<oneshot::Sender<()>>,
    pinged: bool,
    idle_suspending: bool,
    last_heard: Instant,
    last_busy: Instant,
    kill_at: Option<Instant>,
    beat: Duration,
    shutdown_timeout: Duration,
    idle_limit: Option<Duration>,
    /// When a remote worker is next pinged to keep its link alive; `None` for a local one.
    keepalive_at: Option<Instant>,
}

impl Link {
    /// A link to worker `pid`, connected at `now`, whose `Init` is on its way; `remote`: the
    /// worker runs on another host (its link is kept alive from this side too).
    pub fn new(
        pid: u32,
        now: Instant,
        beat: Duration,
        shutdown_timeout: Duration,
        idle_limit: Option<Duration>,
        remote: bool,
    ) -> Self {
        Link {
            phase: Phase::Loading,
            pid,
            ready: false,
            conn_open: true,
            fatal: None,
            stop_reply: None,
            pinged: false,
            idle_suspending: false,
            last_heard: now,
            last_busy: now,
            kill_at: Some(now + READY_TIMEOUT),
            beat,
            shutdown_timeout,
            idle_limit,
            keepalive_at: remote.then(|| now + beat),
        }
    }

    /// Whether frames can still come from the worker.
    pub fn reading(&self) -> bool {
        self.conn_open
    }

    /// Whether commands are taken (a stopping link leaves them in the channel: nothing more
    /// may be asked of a worker that is going away).
    pub fn taking_commands(&self) -> bool {
        self.phase != Phase::Stopping
    }

    /// The earliest clock the link waits for. `may_idle`: no task of the project runs and no
    /// message waits for the worker (facts the link does not own).
    pub fn next_timer(&self, may_idle: bool) -> Option<(Instant, Timer)> {
        let mut timers = Vec::with_capacity(4);
        if self.phase == Phase::Ready && self.conn_open {
            if !self.pinged {
                timers.push((self.last_heard + self.beat * PING_AFTER, Timer::Ping));
            }
            let dead = (self.beat * DEAD_AFTER).max(DEAD_MIN);
            timers.push((self.last_heard + dead, Timer::Dead));
            if let Some(limit) = self
                .idle_limit
                .filter(|_| may_idle && !self.idle_suspending)
            {
                timers.push((self.last_busy + limit, Timer::Idle));
            }
        }
        if let Some(at) = self.kill_at {
            timers.push((at, Timer::Kill));
        }
        if let Some(at) = self.keepalive_at.filter(|_| self.conn_open) {
            timers.push((at, Timer::Keepalive));
        }
        timers.into_iter().min_by_key(|(at, _)| *at)
    }

    /// The one transition function of a worker link (see the module doc).
    pub fn step(&mut self, event: Event, now: Instant) -> Vec<Action> {
        use Action::*;
        match event {
            Event::Frame(frame) => {
                self.last_heard = now;
                self.pinged = false;
                if !matches!(frame, FromWorker::Heartbeat | FromWorker::Pong { .. }) {
                    self.last_busy = now;
                }
                self.frame(frame)
            }
            Event::ConnectionEnded(why) => {
                self.conn_open = false;
                if self.phase == Phase::Stopping {
                    return Vec::new();
                }
                tracing::warn!(pid = self.pid, "worker connection ended: {why}");
                self.phase = Phase::Lost;
                self.kill_at = Some(now + LOST_GRACE);
                Vec::new()
            }
            Event::Exited(desc) => {
                let outcome = match (self.phase, self.stop_reply.take()) {
                    (Phase::Stopping, reply) => {
                        tracing::info!(pid = self.pid, "worker stopped ({desc})");
                        Outcome::Stopped(reply)
                    }
                    _ => Outcome::Crashed(match self.fatal.take() {
                        Some(f) => format!("{desc}: {f}"),
                        None => desc,
                    }),
                };
                vec![KillGroup, End(outcome)]
            }
            Event::Timer(timer) => self.timer(timer, now),
            Event::Cmd(cmd) => self.command(cmd, now),
        }
    }

    fn frame(&mut self, frame: FromWorker) -> Vec<Action> {
        use Action::*;
        match frame {
            FromWorker::Ready if self.phase == Phase::Loading => {
                self.ready = true;
                self.phase = Phase::Ready;
                self.kill_at = None;
                tracing::info!(pid = self.pid, "worker ready");
                vec![SetState(WorkerState::Ready), DeliverQueued]
            }
            // Late (it is stopping or lost) or twice: nothing changes.
            FromWorker::Ready => {
                self.ready = true;
                Vec::new()
            }
            FromWorker::MessagePersisted { id } => vec![Persisted(id)],
            FromWorker::MessageRepeated {
                id,
                original,
                same_text,
            } => vec![Repeated {
                id,
                original,
                same_text,
            }],
            FromWorker::Reply {
                message_id,
                text,
                answered,
            } => vec![Reply {
                message_id,
                text,
                answered,
            }],
            FromWorker::Notify { text, kind } => {
                // Its words may be the user's conversation: only at debug.
                tracing::info!(pid = self.pid, %kind, bytes = text.len(), "notify");
                tracing::debug!(pid = self.pid, %kind, "notify: {text}");
                vec![Notify(text)]
            }
            FromWorker::Event(event) => vec![Publish(event)],
            FromWorker::Fatal { reason } => {
                tracing::error!(pid = self.pid, "worker cannot run: {reason}");
                self.fatal = Some(reason);
                Vec::new()
            }
            FromWorker::Hello(_) => {
                tracing::warn!(
                    pid = self.pid,
                    "second hello on a worker connection; dropping it"
                );
                self.conn_open = false;
                if self.phase != Phase::Stopping {
                    self.phase = Phase::Lost;
                }
                vec![KillGroup]
            }
            // Model calls and web searches are the reader task's; the rest only say the
            // worker lives.
            FromWorker::LlmRequest { .. }
            | FromWorker::LlmCancel { .. }
            | FromWorker::RelayRequest { .. }
            | FromWorker::RelayCancel { .. }
            | FromWorker::WebSearch { .. }
            | FromWorker::Heartbeat
            | FromWorker::Pong { .. }
            | FromWorker::ShutdownComplete => Vec::new(),
        }
    }

    fn timer(&mut self, timer: Timer, now: Instant) -> Vec<Action> {
        use Action::*;
        match (timer, self.phase) {
            (Timer::Ping, Phase::Ready) => {
                self.pinged = true;
                vec![Send(ToWorker::Ping {
                    nonce: self.pid as u64,
                })]
            }
            (Timer::Dead, Phase::Ready) => {
                let silent = now.saturating_duration_since(self.last_heard).as_secs();
                tracing::warn!(pid = self.pid, "worker said nothing for {silent} s, not even a heartbeat or a pong: it is hung; killing it");
                self.fatal = Some(format!("hung: no heartbeat for {silent} s"));
                self.conn_open = false;
                self.phase = Phase::Lost;
                vec![KillGroup]
            }
            (Timer::Idle, Phase::Ready) => {
                self.idle_suspending = true;
                vec![IdleSuspend]
            }
            (Timer::Kill, Phase::Loading | Phase::Stopping | Phase::Lost) => {
                match self.phase {
                    Phase::Stopping => tracing::warn!(
                        pid = self.pid,
                        "worker did not stop within {:?}; killing its process group",
                        self.shutdown_timeout
                    ),
                    Phase::Loading => tracing::warn!(
                        pid = self.pid,
                        "worker not ready within {READY_TIMEOUT:?}; killing it"
                    ),
                    Phase::Ready | Phase::Lost => {}
                }
                self.kill_at = None;
                vec![KillGroup]
            }
            (Timer::Keepalive, _) if self.conn_open && self.keepalive_at.is_some() => {
                self.keepalive_at = Some(now + self.beat);
                vec![Send(ToWorker::Ping {
                    nonce: self.pid as u64,
                })]
            }
            // A clock of a phase that has passed (or a local link's keepalive).
            (Timer::Ping | Timer::Dead | Timer::Idle | Timer::Keepalive, _)
            | (Timer::Kill, Phase::Ready) => Vec::new(),
        }
    }

    fn command(&mut self, cmd: SlotCmd, now: Instant) -> Vec<Action> {
        use Action::*;
        match cmd {
            SlotCmd::Stop(reply) => {
                let first = if self.conn_open { Shutdown } else { KillGroup };
                self.stop_reply = Some(reply);
                self.phase = Phase::Stopping;
                self.kill_at = Some(now + self.shutdown_timeout);
                vec![SetState(WorkerState::Stopping), first]
            }
            SlotCmd::Deliver(d) => {
                self.last_busy = now;
                if self.phase == Phase::Ready {
                    vec![Deliver(d)]
                } else {
                    vec![Queue(d)]
                }
            }
            SlotCmd::Notify(frame) if self.ready && self.conn_open => vec![Send(frame)],
            SlotCmd::Notify(_) | SlotCmd::Restart => Vec::new(),
            SlotCmd::Kill { pid, reason } if pid == self.pid => {
                self.fatal = Some(reason);
                vec![KillGroup]
            }
            SlotCmd::Kill { .. } => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pegasus_proto::{worker::Hello, Channel, WorkerEvent};

    const PID: u32 = 42;
    const BEAT: Duration = Duration::from_secs(1);
    const STOP: Duration = Duration::from_secs(30);
    const IDLE: Duration = Duration::from_secs(600);

    /// A short name for each action, for the table.
    fn names(actions: &[Action]) -> Vec<&'static str> {
        actions
            .iter()
            .map(|a| match a {
                Action::SetState(WorkerState::Ready) => "ready",
                Action::SetState(WorkerState::Stopping) => "stopping",
                Action::SetState(_) => "state",
                Action::Send(ToWorker::Ping { .. }) => "ping",
                Action::Send(_) => "send",
                Action::Shutdown => "shutdown",
                Action::Deliver(_) => "deliver",
                Action::Queue(_) => "queue",
                Action::DeliverQueued => "deliver-queued",
                Action::Persisted(_) => "persisted",
                Action::Repeated { .. } => "repeated",
                Action::Reply { .. } => "reply",
                Action::Notify(_) => "notify",
                Action::Publish(_) => "publish",
                Action::KillGroup => "kill",
                Action::IdleSuspend => "suspend",
                Action::End(Outcome::Stopped(_)) => "stopped",
                Action::End(Outcome::Crashed(_)) => "crashed",
                Action::End(Outcome::Unreached(_)) => "unreached",
                Action::End(Outcome::Refused(_)) => "refused",
            })
            .collect()
    }

    fn delivery() -> Delivery {
        Delivery {
            from: Channel::Cli,
            text: "hi".into(),
            client_id: None,
            persisted: oneshot::channel().0,
            answer: None,
        }
    }

    /// Makes one event.
    type MakeEvent = Box<dyn Fn() -> Event>;

    /// One of every kind of event, by name.
    fn events() -> Vec<(&'static str, MakeEvent)> {
        let frame = |f: fn() -> FromWorker| -> MakeEvent { Box::new(move || Event::Frame(f())) };
        vec![
            ("ready", frame(|| FromWorker::Ready)),
            (
                "persisted",
                frame(|| FromWorker::MessagePersisted { id: "m".into() }),
            ),
            (
                "repeated",
                frame(|| FromWorker::MessageRepeated {
                    id: "m2".into(),
                    original: "m".into(),
                    same_text: true,
                }),
            ),
            (
                "reply",
                frame(|| FromWorker::Reply {
                    message_id: "m".into(),
                    text: "ok".into(),
                    answered: true,
                }),
            ),
            (
                "notify",
                frame(|| FromWorker::Notify {
                    text: "done".into(),
                    kind: "info".into(),
                }),
            ),
            (
                "event",
                frame(|| {
                    FromWorker::Event(WorkerEvent::TextDelta {
                        task: None,
                        text: "x".into(),
                    })
                }),
            ),
            (
                "fatal",
                frame(|| FromWorker::Fatal {
                    reason: "bad".into(),
                }),
            ),
            (
                "hello",
                frame(|| {
                    FromWorker::Hello(Hello {
                        protocol_version: 0,
                        project: "p".into(),
                        pid: PID,
                        token: String::new(),
                    })
                }),
            ),
            ("heartbeat", frame(|| FromWorker::Heartbeat)),
            ("pong", frame(|| FromWorker::Pong { nonce: 1 })),
            ("complete", frame(|| FromWorker::ShutdownComplete)),
            ("llm-cancel", frame(|| FromWorker::LlmCancel { id: 1 })),
            (
                "closed",
                Box::new(|| Event::ConnectionEnded("connection closed".into())),
            ),
            ("exited", Box::new(|| Event::Exited("exit code 0".into()))),
            ("t-ping", Box::new(|| Event::Timer(Timer::Ping))),
            ("t-dead", Box::new(|| Event::Timer(Timer::Dead))),
            ("t-idle", Box::new(|| Event::Timer(Timer::Idle))),
            ("t-kill", Box::new(|| Event::Timer(Timer::Kill))),
            ("t-keepalive", Box::new(|| Event::Timer(Timer::Keepalive))),
            (
                "stop",
                Box::new(|| Event::Cmd(SlotCmd::Stop(oneshot::channel().0))),
            ),
            (
                "deliver",
                Box::new(|| Event::Cmd(SlotCmd::Deliver(delivery()))),
            ),
            (
                "nudge",
                Box::new(|| Event::Cmd(SlotCmd::Notify(ToWorker::TasksChanged))),
            ),
            ("restart", Box::new(|| Event::Cmd(SlotCmd::Restart))),
            (
                "kill-me",
                Box::new(|| {
                    Event::Cmd(SlotCmd::Kill {
                        pid: PID,
                        reason: "silent".into(),
                    })
                }),
            ),
            (
                "kill-other",
                Box::new(|| {
                    Event::Cmd(SlotCmd::Kill {
                        pid: PID + 1,
                        reason: "silent".into(),
                    })
                }),
            ),
        ]
    }

    /// A link brought to `phase` by the events that lead there.
    fn link_in(phase: Phase, now: Instant) -> Link {
        let mut link = Link::new(PID, now, BEAT, STOP, Some(IDLE), false);
        match phase {
            Phase::Loading => {}
            Phase::Ready => {
                link.step(Event::Frame(FromWorker::Ready), now);
            }
            Phase::Stopping => {
                link.step(Event::Frame(FromWorker::Ready), now);
                link.step(Event::Cmd(SlotCmd::Stop(oneshot::channel().0)), now);
            }
            Phase::Lost => {
                link.step(Event::Frame(FromWorker::Ready), now);
                link.step(Event::ConnectionEnded("gone".into()), now);
            }
        }
        assert_eq!(link.phase, phase);
        link
    }

    /// Every phase × every event: the next phase and the actions.
    #[test]
    fn every_phase_and_event() {
        use Phase::*;
        #[rustfmt::skip]
        let table: &[(Phase, &str, Phase, &[&str])] = &[
            (Loading, "ready", Ready, &["ready", "deliver-queued"]),
            (Loading, "persisted", Loading, &["persisted"]),
            (Loading, "repeated", Loading, &["repeated"]),
            (Loading, "reply", Loading, &["reply"]),
            (Loading, "notify", Loading, &["notify"]),
            (Loading, "event", Loading, &["publish"]),
            (Loading, "fatal", Loading, &[]),
            (Loading, "hello", Lost, &["kill"]),
            (Loading, "heartbeat", Loading, &[]),
            (Loading, "pong", Loading, &[]),
            (Loading, "complete", Loading, &[]),
            (Loading, "llm-cancel", Loading, &[]),
            (Loading, "closed", Lost, &[]),
            (Loading, "exited", Loading, &["kill", "crashed"]),
            (Loading, "t-ping", Loading, &[]),
            (Loading, "t-dead", Loading, &[]),
            (Loading, "t-idle", Loading, &[]),
            (Loading, "t-kill", Loading, &["kill"]),
            (Loading, "t-keepalive", Loading, &[]),
            (Loading, "stop", Stopping, &["stopping", "shutdown"]),
            (Loading, "deliver", Loading, &["queue"]),
            (Loading, "nudge", Loading, &[]),
            (Loading, "restart", Loading, &[]),
            (Loading, "kill-me", Loading, &["kill"]),
            (Loading, "kill-other", Loading, &[]),

            (Ready, "ready", Ready, &[]),
            (Ready, "persisted", Ready, &["persisted"]),
            (Ready, "repeated", Ready, &["repeated"]),
            (Ready, "reply", Ready, &["reply"]),
            (Ready, "notify", Ready, &["notify"]),
            (Ready, "event", Ready, &["publish"]),
            (Ready, "fatal", Ready, &[]),
            (Ready, "hello", Lost, &["kill"]),
            (Ready, "heartbeat", Ready, &[]),
            (Ready, "pong", Ready, &[]),
            (Ready, "complete", Ready, &[]),
            (Ready, "llm-cancel", Ready, &[]),
            (Ready, "closed", Lost, &[]),
            (Ready, "exited", Ready, &["kill", "crashed"]),
            (Ready, "t-ping", Ready, &["ping"]),
            (Ready, "t-dead", Lost, &["kill"]),
            (Ready, "t-idle", Ready, &["suspend"]),
            (Ready, "t-kill", Ready, &[]),
            (Ready, "t-keepalive", Ready, &[]),
            (Ready, "stop", Stopping, &["stopping", "shutdown"]),
            (Ready, "deliver", Ready, &["deliver"]),
            (Ready, "nudge", Ready, &["send"]),
            (Ready, "restart", Ready, &[]),
            (Ready, "kill-me", Ready, &["kill"]),
            (Ready, "kill-other", Ready, &[]),

            (Stopping, "ready", Stopping, &[]),
            (Stopping, "persisted", Stopping, &["persisted"]),
            (Stopping, "repeated", Stopping, &["repeated"]),
            (Stopping, "reply", Stopping, &["reply"]),
            (Stopping, "notify", Stopping, &["notify"]),
            (Stopping, "event", Stopping, &["publish"]),
            (Stopping, "fatal", Stopping, &[]),
            (Stopping, "hello", Stopping, &["kill"]),
            (Stopping, "heartbeat", Stopping, &[]),
            (Stopping, "pong", Stopping, &[]),
            (Stopping, "complete", Stopping, &[]),
            (Stopping, "llm-cancel", Stopping, &[]),
            (Stopping, "closed", Stopping, &[]),
            (Stopping, "exited", Stopping, &["kill", "stopped"]),
            (Stopping, "t-ping", Stopping, &[]),
            (Stopping, "t-dead", Stopping, &[]),
            (Stopping, "t-idle", Stopping, &[]),
            (Stopping, "t-kill", Stopping, &["kill"]),
            (Stopping, "t-keepalive", Stopping, &[]),
            (Stopping, "stop", Stopping, &["stopping", "shutdown"]),
            (Stopping, "deliver", Stopping, &["queue"]),
            (Stopping, "nudge", Stopping, &["send"]),
            (Stopping, "restart", Stopping, &[]),
            (Stopping, "kill-me", Stopping, &["kill"]),
            (Stopping, "kill-other", Stopping, &[]),

            (Lost, "ready", Lost, &[]),
            (Lost, "persisted", Lost, &["persisted"]),
            (Lost, "repeated", Lost, &["repeated"]),
            (Lost, "reply", Lost, &["reply"]),
            (Lost, "notify", Lost, &["notify"]),
            (Lost, "event", Lost, &["publish"]),
            (Lost, "fatal", Lost, &[]),
            (Lost, "hello", Lost, &["kill"]),
            (Lost, "heartbeat", Lost, &[]),
            (Lost, "pong", Lost, &[]),
            (Lost, "complete", Lost, &[]),
            (Lost, "llm-cancel", Lost, &[]),
            (Lost, "closed", Lost, &[]),
            (Lost, "exited", Lost, &["kill", "crashed"]),
            (Lost, "t-ping", Lost, &[]),
            (Lost, "t-dead", Lost, &[]),
            (Lost, "t-idle", Lost, &[]),
            (Lost, "t-kill", Lost, &["kill"]),
            (Lost, "t-keepalive", Lost, &[]),
            (Lost, "stop", Stopping, &["stopping", "kill"]),
            (Lost, "deliver", Lost, &["queue"]),
            (Lost, "nudge", Lost, &[]),
            (Lost, "restart", Lost, &[]),
            (Lost, "kill-me", Lost, &["kill"]),
            (Lost, "kill-other", Lost, &[]),
        ];
        let events = events();
        assert_eq!(table.len(), 4 * events.len(), "every pair is in the table");
        let now = Instant::now();
        for (phase, event, next, actions) in table {
            let make = events
                .iter()
                .find(|(name, _)| name == event)
                .map(|(_, make)| make)
                .unwrap_or_else(|| panic!("no event {event}"));
            let mut link = link_in(*phase, now);
            let did = link.step(make(), now);
            assert_eq!(link.phase, *next, "{phase:?} + {event}");
            assert_eq!(names(&did), *actions, "{phase:?} + {event}");
        }
    }

    /// Which clock each phase waits for: a loading worker only for its ready deadline; a
    /// ready one for a ping, then death, and idleness only when nothing runs; a stopping one
    /// for its shutdown deadline; a lost one for its grace.
    #[test]
    fn the_next_clock_of_each_phase() {
        let now = Instant::now();
        let link = link_in(Phase::Loading, now);
        assert_eq!(
            link.next_timer(true),
            Some((now + READY_TIMEOUT, Timer::Kill))
        );

        let mut link = link_in(Phase::Ready, now);
        assert_eq!(link.next_timer(true), Some((now + 2 * BEAT, Timer::Ping)));
        link.step(Event::Timer(Timer::Ping), now + 2 * BEAT);
        assert_eq!(
            link.next_timer(true),
            Some((now + DEAD_MIN.max(6 * BEAT), Timer::Dead))
        );
        // A pong makes it alive again.
        let later = now + 3 * BEAT;
        link.step(Event::Frame(FromWorker::Pong { nonce: 1 }), later);
        assert_eq!(
            link.next_timer(false),
            Some((later + 2 * BEAT, Timer::Ping))
        );

        let mut idle = Link::new(PID, now, Duration::from_secs(3600), STOP, Some(IDLE), false);
        idle.step(Event::Frame(FromWorker::Ready), now);
        assert_eq!(idle.next_timer(true), Some((now + IDLE, Timer::Idle)));
        assert_eq!(idle.next_timer(false).map(|t| t.1), Some(Timer::Ping));
        idle.step(Event::Timer(Timer::Idle), now + IDLE);
        assert_eq!(
            idle.next_timer(true).map(|t| t.1),
            Some(Timer::Ping),
            "suspends once"
        );

        let link = link_in(Phase::Stopping, now);
        assert_eq!(link.next_timer(true), Some((now + STOP, Timer::Kill)));
        let link = link_in(Phase::Lost, now);
        assert_eq!(link.next_timer(true), Some((now + LOST_GRACE, Timer::Kill)));
    }

    /// A remote worker's link is pinged every beat in every phase while it is open, whatever
    /// else happens; a local worker's never (its death is seen by pegasusd as its parent).
    #[test]
    fn a_remote_link_is_kept_alive_every_beat_until_it_is_lost() {
        let now = Instant::now();
        let mut link = Link::new(PID, now, BEAT, STOP, None, true);
        assert_eq!(link.next_timer(false), Some((now + BEAT, Timer::Keepalive)));
        let did = link.step(Event::Timer(Timer::Keepalive), now + BEAT);
        assert_eq!(names(&did), ["ping"]);
        assert_eq!(
            link.next_timer(false),
            Some((now + 2 * BEAT, Timer::Keepalive))
        );
        link.step(Event::Frame(FromWorker::Ready), now + BEAT);
        link.step(Event::Cmd(SlotCmd::Stop(oneshot::channel().0)), now + BEAT);
        assert_eq!(
            names(&link.step(Event::Timer(Timer::Keepalive), now + 2 * BEAT)),
            ["ping"],
            "a stopping worker still hears from pegasusd"
        );
        link.step(Event::ConnectionEnded("gone".into()), now + 2 * BEAT);
        assert!(link
            .step(Event::Timer(Timer::Keepalive), now + 3 * BEAT)
            .is_empty());
        assert_ne!(link.next_timer(false).map(|t| t.1), Some(Timer::Keepalive));
    }

    /// A crash says what went wrong before the exit; a stop answers its caller.
    #[test]
    fn the_exit_says_why() {
        let now = Instant::now();
        let mut link = link_in(Phase::Ready, now);
        link.step(Event::Timer(Timer::Dead), now + Duration::from_secs(7));
        let end = link.step(Event::Exited("signal 9 (SIGKILL)".into()), now);
        assert!(
            matches!(&end[1], Action::End(Outcome::Crashed(why)) if why == "signal 9 (SIGKILL): hung: no heartbeat for 7 s"),
        );

        let mut link = link_in(Phase::Ready, now);
        let (tx, mut rx) = oneshot::channel();
        link.step(Event::Cmd(SlotCmd::Stop(tx)), now);
        match link.step(Event::Exited("exit code 0".into()), now).pop() {
            Some(Action::End(Outcome::Stopped(Some(reply)))) => {
                let _ = reply.send(());
            }
            _ => panic!("a stop ends as stopped, with its reply"),
        }
        assert!(rx.try_recv().is_ok());
    }
}
