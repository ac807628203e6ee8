//! A slot's restart life as a state machine: one worker after another, restarted after a crash
//! with exponential backoff, given up on after too many crashes in a window, stopped on
//! request. [`Life::step`] decides what each event does; the slot's loop
//! (`super::Slot::run`) only waits for the next event of the state it is in and carries the
//! actions out.
//!
//! ```text
//!            Hello                 Crashed (≤ max in window), Unreached
//! Starting ─────────► Linked ─────────────────────────────────────────► Backoff
//!    ▲  │                │ Crashed (> max in window)                        │
//!    │  │                └──────────────────────────► CrashLooping          │ BackoffElapsed,
//!    │  │ Refused                                        │                  │ RestartAsked
//!    │  └──────────────────────────────► Refused         │ RestartAsked     │
//!    └───────────────────────────────────────┴───────────┴──────────────────┘
//! ```
//!
//! (`Starting` ends like `Linked` when its worker fails before its hello.) A stop ends every
//! state but `Stopped` in `Stopped`. What happens while a worker is linked is the link's to
//! decide ([`super::link`]).

use pegasus_proto::WorkerState;
use std::{collections::VecDeque, time::Duration};
use tokio::time::Instant;

/// Upper bound of the restart backoff.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Least wait before launching again a worker that never reached pegasusd.
const MIN_UNREACHED_BACKOFF: Duration = Duration::from_secs(1);

/// Where a slot is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum State {
    /// A worker is being started (spawned or launched) and has not said hello yet.
    Starting,
    /// The worker said hello; the link runs it until it ends.
    Linked,
    /// Waiting until `until` before the next start (a crash, or a launch that never arrived).
    Backoff { until: Instant },
    /// Too many crashes in the window: no start until `project resume` (`RestartAsked`).
    CrashLooping,
    /// The project must not start as it is: no start until `project resume`. Shown as
    /// crash-looping; unlike it, a resume does not forget the recent crashes.
    Refused,
    /// Asked to stop: the slot ends.
    Stopped,
}

/// What happens to a slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Event {
    /// The starting worker said hello.
    Hello,
    /// The worker ended without being asked (any exit, a bad frame, a hung handshake), or
    /// could not be started.
    Crashed(String),
    /// A launched worker never reached pegasusd (its host or the network is down).
    Unreached(String),
    /// The project must not start as it is (its paths reach the home, or its shared folder
    /// changed what only pegasusd decides).
    Refused(String),
    /// A stop was asked (or the daemon dropped the slot); while a worker runs, it has been
    /// stopped.
    StopAsked,
    /// The backoff's wait is over.
    BackoffElapsed,
    /// `project resume`: leave crash-looping, or skip the backoff.
    RestartAsked,
    /// A message came while no worker is linked.
    Message,
}

/// Something said in the log about the slot's next start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Note {
    /// The project is not started (`Event::Refused`'s reason).
    NotStarted(String),
    /// A launched worker did not reach pegasusd; launching again after `delay`.
    Unreached { why: String, delay: Duration },
    /// Too many crashes in the window (`crashes` of them): not restarting.
    CrashLooping { crashes: u32 },
    /// Restarting after `delay`.
    Restarting { delay: Duration },
}

/// What the slot's loop does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Action {
    /// The worker has ended: remove its cgroup, forget its pid, sweep what its commands left.
    CleanUp,
    /// Say this in the log.
    Log(Note),
    /// Record a crash with this reason (crashes.jsonl, the bus, the restart count).
    RecordCrash(String),
    /// Show this as the last crash's reason without counting a crash (an unreached launch).
    NoteUnreached(String),
    /// Show the worker in this state, with no pid.
    SetState(WorkerState),
    /// Fail every queued message: the project `why` (`is crash-looping`, ...).
    FailQueued(String),
    /// Keep the message that came until a worker is linked.
    QueueMessage,
    /// Refuse the message that came: the project will not start without `project resume`.
    RefuseMessage,
    /// Show the slot stopped, fail what is queued and answer the stop.
    Finish,
}

/// The settings of the restart rules (`workers:` in config.yml).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Rules {
    /// The first restart's wait (`workers.restart_backoff_ms`), doubled for each one after.
    pub backoff: Duration,
    /// How far back crashes count (`workers.crash_loop_window_s`).
    pub window: Duration,
    /// More crashes than this in the window is a crash loop (`workers.crash_loop_max`).
    pub max_crashes: u32,
}

impl Rules {
    /// The rules `workers:` in config.yml sets.
    pub fn of(workers: &pegasus_store::config::WorkersConfig) -> Rules {
        Rules {
            backoff: Duration::from_millis(workers.restart_backoff_ms),
            window: Duration::from_secs(workers.crash_loop_window_s),
            max_crashes: workers.crash_loop_max,
        }
    }

    /// The wait before the `n`th restart in a row: the first wait, doubled for each one
    /// before it, at most [`MAX_BACKOFF`].
    fn backoff(&self, n: u32) -> Duration {
        let factor = 1u32 << n.saturating_sub(1).min(16);
        self.backoff.saturating_mul(factor).min(MAX_BACKOFF)
    }
}

/// A slot's life: its state and what the restart rules remember.
#[derive(Debug)]
pub(super) struct Life {
    state: State,
    rules: Rules,
    /// When the recent crashes happened, for the crash-loop window.
    crashes: VecDeque<Instant>,
    /// Launches in a row that never reached pegasusd (their backoff grows with it).
    unreached: u32,
}

impl Life {
    /// A slot's life begins by starting its worker.
    pub fn new(rules: Rules) -> Life {
        Life {
            state: State::Starting,
            rules,
            crashes: VecDeque::new(),
            unreached: 0,
        }
    }

    /// Where the slot is.
    pub fn state(&self) -> State {
        self.state
    }

    /// What `event` does at `now`: the state moves, and the actions are to be carried out in
    /// order.
    pub fn step(&mut self, event: Event, now: Instant) -> Vec<Action> {
        use Action::*;
        match (self.state, event) {
            (State::Stopped, _) => Vec::new(),
            (State::Starting, Event::Hello) => {
                self.state = State::Linked;
                self.unreached = 0;
                Vec::new()
            }
            (State::Starting | State::Linked, Event::Crashed(reason)) => {
                self.unreached = 0;
                self.crashes.push_back(now);
                let window = self.rules.window;
                self.crashes
                    .retain(|t| now.saturating_duration_since(*t) <= window);
                let recent = self.crashes.len() as u32;
                if recent > self.rules.max_crashes {
                    self.state = State::CrashLooping;
                    vec![
                        CleanUp,
                        RecordCrash(reason),
                        Log(Note::CrashLooping { crashes: recent }),
                        SetState(WorkerState::CrashLooping),
                        FailQueued("is crash-looping".into()),
                    ]
                } else {
                    let delay = self.rules.backoff(recent);
                    self.state = State::Backoff { until: now + delay };
                    vec![
                        CleanUp,
                        RecordCrash(reason),
                        Log(Note::Restarting { delay }),
                        SetState(WorkerState::Backoff),
                    ]
                }
            }
            (State::Starting | State::Linked, Event::Unreached(why)) => {
                self.unreached += 1;
                let delay = self
                    .rules
                    .backoff(self.unreached)
                    .max(MIN_UNREACHED_BACKOFF);
                self.state = State::Backoff { until: now + delay };
                vec![
                    CleanUp,
                    Log(Note::Unreached {
                        why: why.clone(),
                        delay,
                    }),
                    NoteUnreached(why),
                    SetState(WorkerState::Backoff),
                ]
            }
            (State::Starting | State::Linked, Event::Refused(why)) => {
                self.state = State::Refused;
                vec![
                    CleanUp,
                    Log(Note::NotStarted(why.clone())),
                    RecordCrash(format!("not started: {why}")),
                    SetState(WorkerState::CrashLooping),
                    FailQueued(format!("is not started ({why})")),
                ]
            }
            (State::Starting | State::Linked, Event::StopAsked) => {
                self.state = State::Stopped;
                vec![CleanUp, Finish]
            }
            (
                State::Backoff { .. } | State::CrashLooping | State::Refused,
                Event::StopAsked,
            ) => {
                self.state = State::Stopped;
                vec![Finish]
            }
            (State::Backoff { .. }, Event::BackoffElapsed | Event::RestartAsked)
            | (State::Refused, Event::RestartAsked) => {
                self.state = State::Starting;
                Vec::new()
            }
            (State::CrashLooping, Event::RestartAsked) => {
                self.crashes.clear();
                self.state = State::Starting;
                Vec::new()
            }
            // A worker is coming (a linked worker's link queues its messages itself).
            (State::Starting | State::Linked | State::Backoff { .. }, Event::Message) => {
                vec![QueueMessage]
            }
            (State::CrashLooping | State::Refused, Event::Message) => vec![RefuseMessage],
            // A worker is starting or running: nothing to restart or wait out.
            (State::Starting | State::Linked, Event::RestartAsked | Event::BackoffElapsed)
            // Only a starting worker says hello.
            | (State::Linked, Event::Hello)
            // No worker runs to say hello or to end.
            | (
                State::Backoff { .. } | State::CrashLooping | State::Refused,
                Event::Hello | Event::Crashed(_) | Event::Unreached(_) | Event::Refused(_),
            )
            // No backoff runs.
            | (State::CrashLooping | State::Refused, Event::BackoffElapsed) => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULES: Rules = Rules {
        backoff: Duration::from_millis(100),
        window: Duration::from_secs(60),
        max_crashes: 3,
    };

    /// One of every kind of event, by name.
    fn events() -> Vec<(&'static str, Event)> {
        vec![
            ("hello", Event::Hello),
            ("crashed", Event::Crashed("exit 1".into())),
            ("unreached", Event::Unreached("no route".into())),
            ("refused", Event::Refused("reaches the home".into())),
            ("stop", Event::StopAsked),
            ("elapsed", Event::BackoffElapsed),
            ("restart", Event::RestartAsked),
            ("message", Event::Message),
        ]
    }

    /// A short name for each action, for the table.
    fn names(actions: &[Action]) -> Vec<&'static str> {
        actions
            .iter()
            .map(|a| match a {
                Action::CleanUp => "clean-up",
                Action::Log(_) => "log",
                Action::RecordCrash(_) => "record-crash",
                Action::NoteUnreached(_) => "note-unreached",
                Action::SetState(WorkerState::Backoff) => "backoff",
                Action::SetState(WorkerState::CrashLooping) => "crash-looping",
                Action::SetState(_) => "state",
                Action::FailQueued(_) => "fail-queued",
                Action::QueueMessage => "queue",
                Action::RefuseMessage => "refuse",
                Action::Finish => "finish",
            })
            .collect()
    }

    /// The states by name: `Backoff` as `B`, its deadline aside.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum S {
        Starting,
        Linked,
        B,
        CrashLooping,
        Refused,
        Stopped,
    }

    fn short(state: State) -> S {
        match state {
            State::Starting => S::Starting,
            State::Linked => S::Linked,
            State::Backoff { .. } => S::B,
            State::CrashLooping => S::CrashLooping,
            State::Refused => S::Refused,
            State::Stopped => S::Stopped,
        }
    }

    fn life_in(state: S, now: Instant) -> Life {
        let mut life = Life::new(RULES);
        life.state = match state {
            S::Starting => State::Starting,
            S::Linked => State::Linked,
            S::B => State::Backoff {
                until: now + Duration::from_secs(1),
            },
            S::CrashLooping => State::CrashLooping,
            S::Refused => State::Refused,
            S::Stopped => State::Stopped,
        };
        life
    }

    #[test]
    fn every_state_and_event() {
        use S::*;
        #[rustfmt::skip]
        let table: &[(S, &str, S, &[&str])] = &[
            (Starting, "hello", Linked, &[]),
            (Starting, "crashed", B, &["clean-up", "record-crash", "log", "backoff"]),
            (Starting, "unreached", B, &["clean-up", "log", "note-unreached", "backoff"]),
            (Starting, "refused", Refused, &["clean-up", "log", "record-crash", "crash-looping", "fail-queued"]),
            (Starting, "stop", Stopped, &["clean-up", "finish"]),
            (Starting, "elapsed", Starting, &[]),
            (Starting, "restart", Starting, &[]),
            (Starting, "message", Starting, &["queue"]),

            (Linked, "hello", Linked, &[]),
            (Linked, "crashed", B, &["clean-up", "record-crash", "log", "backoff"]),
            (Linked, "unreached", B, &["clean-up", "log", "note-unreached", "backoff"]),
            (Linked, "refused", Refused, &["clean-up", "log", "record-crash", "crash-looping", "fail-queued"]),
            (Linked, "stop", Stopped, &["clean-up", "finish"]),
            (Linked, "elapsed", Linked, &[]),
            (Linked, "restart", Linked, &[]),
            (Linked, "message", Linked, &["queue"]),

            (B, "hello", B, &[]),
            (B, "crashed", B, &[]),
            (B, "unreached", B, &[]),
            (B, "refused", B, &[]),
            (B, "stop", Stopped, &["finish"]),
            (B, "elapsed", Starting, &[]),
            (B, "restart", Starting, &[]),
            (B, "message", B, &["queue"]),

            (CrashLooping, "hello", CrashLooping, &[]),
            (CrashLooping, "crashed", CrashLooping, &[]),
            (CrashLooping, "unreached", CrashLooping, &[]),
            (CrashLooping, "refused", CrashLooping, &[]),
            (CrashLooping, "stop", Stopped, &["finish"]),
            (CrashLooping, "elapsed", CrashLooping, &[]),
            (CrashLooping, "restart", Starting, &[]),
            (CrashLooping, "message", CrashLooping, &["refuse"]),

            (Refused, "hello", Refused, &[]),
            (Refused, "crashed", Refused, &[]),
            (Refused, "unreached", Refused, &[]),
            (Refused, "refused", Refused, &[]),
            (Refused, "stop", Stopped, &["finish"]),
            (Refused, "elapsed", Refused, &[]),
            (Refused, "restart", Starting, &[]),
            (Refused, "message", Refused, &["refuse"]),

            (Stopped, "hello", Stopped, &[]),
            (Stopped, "crashed", Stopped, &[]),
            (Stopped, "unreached", Stopped, &[]),
            (Stopped, "refused", Stopped, &[]),
            (Stopped, "stop", Stopped, &[]),
            (Stopped, "elapsed", Stopped, &[]),
            (Stopped, "restart", Stopped, &[]),
            (Stopped, "message", Stopped, &[]),
        ];
        let states = [Starting, Linked, B, CrashLooping, Refused, Stopped];
        let events = events();
        assert_eq!(table.len(), states.len() * events.len(), "every pair once");
        for state in states {
            for (name, event) in &events {
                let row = table
                    .iter()
                    .find(|(s, e, _, _)| *s == state && e == name)
                    .unwrap_or_else(|| panic!("no row for {state:?} x {name}"));
                let now = Instant::now();
                let mut life = life_in(state, now);
                let actions = life.step(event.clone(), now);
                assert_eq!(
                    (short(life.state()), names(&actions)),
                    (row.2, row.3.to_vec()),
                    "{state:?} x {name}"
                );
            }
        }
    }

    #[test]
    fn the_backoff_doubles_up_to_its_cap_and_a_crash_loop_needs_more_than_the_max() {
        let now = Instant::now();
        let mut life = Life::new(RULES);
        let mut waits = Vec::new();
        for _ in 0..RULES.max_crashes {
            life.step(Event::Hello, now);
            let actions = life.step(Event::Crashed("exit 1".into()), now);
            let Some(Action::Log(Note::Restarting { delay })) = actions.get(2).cloned() else {
                panic!("no restart in {actions:?}");
            };
            waits.push(delay);
            assert_eq!(life.state(), State::Backoff { until: now + delay });
            life.step(Event::BackoffElapsed, now);
        }
        assert_eq!(
            waits,
            [100, 200, 400].map(Duration::from_millis).to_vec(),
            "doubled for each crash in the window"
        );
        let actions = life.step(Event::Crashed("exit 1".into()), now);
        assert_eq!(life.state(), State::CrashLooping);
        assert!(actions.contains(&Action::Log(Note::CrashLooping { crashes: 4 })));
        assert!(actions.contains(&Action::FailQueued("is crash-looping".into())));
        // A resume forgets the crashes: the next one backs off from the start.
        life.step(Event::RestartAsked, now);
        let actions = life.step(Event::Crashed("exit 1".into()), now);
        assert!(actions.contains(&Action::Log(Note::Restarting {
            delay: Duration::from_millis(100)
        })));
        assert_eq!(RULES.backoff(30), MAX_BACKOFF);
    }

    #[test]
    fn crashes_out_of_the_window_do_not_count() {
        let start = Instant::now();
        let mut life = Life::new(RULES);
        for i in 0..10 {
            let now = start + (RULES.window + Duration::from_secs(1)) * (i + 1);
            let actions = life.step(Event::Crashed("exit 1".into()), now);
            assert!(
                actions.contains(&Action::Log(Note::Restarting {
                    delay: Duration::from_millis(100)
                })),
                "crash {i}: {actions:?}"
            );
            life.step(Event::BackoffElapsed, now);
        }
    }

    #[test]
    fn a_refused_project_keeps_its_crashes_and_an_unreached_launch_backs_off_apart() {
        let now = Instant::now();
        let mut life = Life::new(RULES);
        life.step(Event::Crashed("exit 1".into()), now);
        life.step(Event::BackoffElapsed, now);
        let actions = life.step(Event::Refused("reaches the home".into()), now);
        assert!(actions.contains(&Action::RecordCrash("not started: reaches the home".into())));
        assert!(actions.contains(&Action::FailQueued(
            "is not started (reaches the home)".into()
        )));
        life.step(Event::RestartAsked, now);
        // The crash before the refusal still counts: the second waits twice as long.
        let actions = life.step(Event::Crashed("exit 1".into()), now);
        assert!(actions.contains(&Action::Log(Note::Restarting {
            delay: Duration::from_millis(200)
        })));
        life.step(Event::BackoffElapsed, now);
        // Unreached launches wait at least a second, doubling, and never count as crashes.
        let mut waits = Vec::new();
        for _ in 0..6 {
            let actions = life.step(Event::Unreached("no route".into()), now);
            assert!(!actions.iter().any(|a| matches!(a, Action::RecordCrash(_))));
            let State::Backoff { until } = life.state() else {
                panic!("not backing off: {:?}", life.state());
            };
            waits.push(until - now);
            life.step(Event::BackoffElapsed, now);
        }
        assert_eq!(
            waits,
            [1000, 1000, 1000, 1000, 1600, 3200]
                .map(Duration::from_millis)
                .to_vec()
        );
        // A worker that arrives ends the streak.
        life.step(Event::Hello, now);
        life.step(Event::Unreached("no route".into()), now);
        assert_eq!(
            life.state(),
            State::Backoff {
                until: now + Duration::from_secs(1)
            }
        );
    }
}
