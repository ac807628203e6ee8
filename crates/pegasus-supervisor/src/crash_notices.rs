//! Crash notices to the MainAgent, batched (issue 26): a kill campaign used to cost one
//! MainAgent model call per crash. Now the first crash of a burst opens a window
//! (`notify.crash_window_s`, 30 s by default); every crash in it is gathered, and when it ends
//! one message tells what is still wrong: projects restarting, stopped after the crash, or
//! given up (crash-looping). A crash whose project is running again by then is left out,
//! unless `notify.recovered_crashes` asks for those too. The next crash opens the next
//! window, so there is at most one MainAgent call per window, and none for a burst that
//! healed itself.
//!
//! [`CrashNotices`] is the pure state machine (table-tested below); [`start`] feeds it from
//! the bus (an observer, called inside `publish`) and runs its timer. A task that crashed the
//! worker twice is told separately, as the worker's own notify.

use crate::{
    bus::EventBus,
    supervisor::{lock, MainInbox},
};
use pegasus_proto::{BusBody, Channel, WorkerState};
use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::Duration,
};
use tokio::time::{sleep_until, Instant};
use tokio_util::sync::CancellationToken;

/// Where a crashed project's worker is now, as far as the notice is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Backing off or starting again.
    Restarting,
    /// Ready again: the crash healed itself.
    Recovered,
    /// Crashed too often; pegasusd waits for `project resume`.
    GaveUp,
    /// Stopped on purpose after the crash (a suspend, pegasusd stopping).
    Stopped,
}

impl Fate {
    #[cfg(test)]
    const ALL: [Fate; 4] = [
        Fate::Restarting,
        Fate::Recovered,
        Fate::GaveUp,
        Fate::Stopped,
    ];

    /// The fate a worker state means; `None`: the state says nothing new (stopping).
    fn of(state: WorkerState) -> Option<Fate> {
        match state {
            WorkerState::Starting | WorkerState::Backoff => Some(Fate::Restarting),
            WorkerState::Ready => Some(Fate::Recovered),
            WorkerState::CrashLooping => Some(Fate::GaveUp),
            WorkerState::Stopped => Some(Fate::Stopped),
            WorkerState::Stopping => None,
        }
    }

    /// Whether the MainAgent hears of it at the window's end.
    fn told(self, tell_recovered: bool) -> bool {
        match self {
            Fate::Restarting | Fate::GaveUp => true,
            Fate::Recovered | Fate::Stopped => tell_recovered,
        }
    }
}

/// One project's crashes in the current window.
#[derive(Debug, Clone, PartialEq)]
struct Crashes {
    count: u32,
    last_reason: String,
    fate: Fate,
}

/// What the bus said that matters here.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Seen<'a> {
    /// A project's worker crashed, for `reason`.
    Crash { project: &'a str, reason: &'a str },
    /// A project's worker moved to `state`.
    State {
        project: &'a str,
        state: WorkerState,
    },
}

/// The batcher: crashes in, at most one message per window out.
pub(crate) struct CrashNotices {
    window: Duration,
    tell_recovered: bool,
    /// When the gathered crashes are told; `None` while there are none.
    due: Option<Instant>,
    /// By project name, so the message lists them in a stable order.
    pending: BTreeMap<String, Crashes>,
}

impl CrashNotices {
    pub fn new(window: Duration, tell_recovered: bool) -> Self {
        CrashNotices {
            window,
            tell_recovered,
            due: None,
            pending: BTreeMap::new(),
        }
    }

    /// When the window ends, if one is open.
    pub fn due(&self) -> Option<Instant> {
        self.due
    }

    /// Folds in one fact. Returns the window's end when this fact opened a window (the timer
    /// must be woken), `None` otherwise.
    pub fn on(&mut self, seen: Seen<'_>, now: Instant) -> Option<Instant> {
        match seen {
            Seen::Crash { project, reason } => {
                let c = self
                    .pending
                    .entry(project.to_string())
                    .or_insert_with(|| Crashes {
                        count: 0,
                        last_reason: String::new(),
                        fate: Fate::Restarting,
                    });
                c.count += 1;
                c.last_reason = reason.to_string();
                c.fate = Fate::Restarting;
                if self.due.is_some() {
                    return None;
                }
                let due = now + self.window;
                self.due = Some(due);
                Some(due)
            }
            Seen::State { project, state } => {
                // Only a project that crashed in this window has a story to follow.
                if let (Some(c), Some(fate)) = (self.pending.get_mut(project), Fate::of(state)) {
                    c.fate = fate;
                }
                None
            }
        }
    }

    /// At the window's end (`now` at or past it): the one message for the MainAgent, on the
    /// channel of the first project it names, or `None` when nothing is worth a call. The
    /// window closes either way.
    pub fn flush(&mut self, now: Instant) -> Option<(Channel, String)> {
        let due = self.due?;
        if now < due {
            return None;
        }
        self.due = None;
        let pending = std::mem::take(&mut self.pending);
        let told: Vec<(String, Crashes)> = pending
            .into_iter()
            .filter(|(_, c)| c.fate.told(self.tell_recovered))
            .collect();
        let first = told.first()?.0.clone();
        let mut text = format!(
            "[Project Worker crashes in the last {}]",
            seconds(self.window)
        );
        for (project, c) in &told {
            let times = match c.count {
                1 => String::new(),
                n => format!(" {n} times, the last"),
            };
            let now = match c.fate {
                Fate::Restarting => "it is restarting".to_string(),
                Fate::Recovered => "it is running again".to_string(),
                Fate::Stopped => "it is stopped".to_string(),
                Fate::GaveUp => format!(
                    "it crashes too often and is not restarted: read its log, then `pegasusctl project resume {project}`"
                ),
            };
            text.push_str(&format!(
                "\n- project {project}: the worker crashed{times} with {}; {now}.",
                c.last_reason
            ));
        }
        Some((Channel::Project(first), text))
    }
}

/// `30 s`, `0.5 s`.
fn seconds(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

/// The batcher shared by the bus observer and the timer task.
struct Shared {
    notices: Mutex<CrashNotices>,
    /// Wakes the timer when a crash opens a window.
    wake: tokio::sync::Notify,
}

/// Makes the batcher an observer of `bus` and starts its timer task, which tells the
/// MainAgent (`main`) at the end of each window until `shutdown` fires.
pub(crate) fn start(
    n: &pegasus_store::NotifyConfig,
    bus: &EventBus,
    main: MainInbox,
    shutdown: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let shared = Arc::new(Shared {
        notices: Mutex::new(CrashNotices::new(
            Duration::from_secs_f64(n.crash_window_s),
            n.recovered_crashes,
        )),
        wake: tokio::sync::Notify::new(),
    });
    let observed = shared.clone();
    bus.observe(move |event| {
        let seen = match &event.body {
            BusBody::Crash { reason } => Seen::Crash {
                project: &event.project,
                reason,
            },
            BusBody::WorkerState { state, .. } => Seen::State {
                project: &event.project,
                state: *state,
            },
            _ => return,
        };
        if lock(&observed.notices).on(seen, Instant::now()).is_some() {
            observed.wake.notify_one();
        }
    });
    tokio::spawn(async move {
        loop {
            let due = lock(&shared.notices).due();
            tokio::select! {
                _ = shutdown.cancelled() => return,
                // A permit stored by a crash between `due` and here is taken at once.
                _ = shared.wake.notified() => {}
                _ = sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => {
                    let told = lock(&shared.notices).flush(Instant::now());
                    match told {
                        Some((channel, text)) => {
                            tracing::info!("crash window closed; telling the MainAgent: {text}");
                            main.tell(channel, text);
                        }
                        None => tracing::info!(
                            "crash window closed with nothing to tell: every project that crashed in it is running again or stopped (notify.recovered_crashes is off)"
                        ),
                    }
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    const WINDOW: Duration = Duration::from_secs(30);

    fn crash(n: &mut CrashNotices, project: &str, at: Instant) -> Option<Instant> {
        n.on(
            Seen::Crash {
                project,
                reason: "signal 9 (SIGKILL)",
            },
            at,
        )
    }

    fn state(n: &mut CrashNotices, project: &str, state: WorkerState, at: Instant) {
        assert_eq!(n.on(Seen::State { project, state }, at), None);
    }

    #[test]
    fn every_state_after_every_fate_is_decided() {
        let t0 = Instant::now();
        for from in Fate::ALL {
            for s in WorkerState::ALL {
                let mut n = CrashNotices::new(WINDOW, false);
                crash(&mut n, "p", t0);
                n.pending.get_mut("p").unwrap().fate = from;
                state(&mut n, "p", s, t0);
                let expect = Fate::of(s).unwrap_or(from);
                assert_eq!(n.pending["p"].fate, expect, "{from:?} then {s:?}");
            }
        }
        // A project that did not crash in the window is not followed.
        let mut n = CrashNotices::new(WINDOW, false);
        state(&mut n, "q", WorkerState::Ready, t0);
        assert!(n.pending.is_empty() && n.due().is_none());
    }

    #[test]
    fn which_fates_are_told_with_and_without_recovered_crashes() {
        let t0 = Instant::now();
        let table = [
            (Fate::Restarting, true, true),
            (Fate::GaveUp, true, true),
            (Fate::Recovered, false, true),
            (Fate::Stopped, false, true),
        ];
        for (fate, off, on) in table {
            for (tell_recovered, expect) in [(false, off), (true, on)] {
                let mut n = CrashNotices::new(WINDOW, tell_recovered);
                crash(&mut n, "p", t0);
                n.pending.get_mut("p").unwrap().fate = fate;
                let told = n.flush(t0 + WINDOW);
                assert_eq!(
                    told.is_some(),
                    expect,
                    "{fate:?} recovered={tell_recovered}"
                );
                assert!(
                    n.due().is_none() && n.pending.is_empty(),
                    "closed either way"
                );
            }
        }
    }

    #[test]
    fn a_burst_is_one_message_at_the_end_of_the_window_opened_by_its_first_crash() {
        let t0 = Instant::now();
        let mut n = CrashNotices::new(WINDOW, false);
        assert_eq!(crash(&mut n, "web", t0), Some(t0 + WINDOW));
        state(&mut n, "web", WorkerState::Backoff, t0);
        state(
            &mut n,
            "web",
            WorkerState::Ready,
            t0 + Duration::from_secs(1),
        );
        for s in 2..5 {
            assert_eq!(
                crash(&mut n, "web", t0 + Duration::from_secs(s)),
                None,
                "the window is open"
            );
        }
        assert_eq!(crash(&mut n, "api", t0 + Duration::from_secs(6)), None);
        state(
            &mut n,
            "api",
            WorkerState::Backoff,
            t0 + Duration::from_secs(6),
        );
        state(
            &mut n,
            "api",
            WorkerState::CrashLooping,
            t0 + Duration::from_secs(7),
        );
        assert_eq!(n.flush(t0 + Duration::from_secs(29)), None, "not yet");
        let (channel, text) = n.flush(t0 + WINDOW).unwrap();
        assert_eq!(channel, Channel::Project("api".into()));
        assert_eq!(
            text,
            "[Project Worker crashes in the last 30 s]\n\
             - project api: the worker crashed with signal 9 (SIGKILL); it crashes too often and is not restarted: read its log, then `pegasusctl project resume api`.\n\
             - project web: the worker crashed 4 times, the last with signal 9 (SIGKILL); it is restarting."
        );
        assert_eq!(n.flush(t0 + WINDOW * 2), None, "told once");
        // The next crash opens the next window.
        let t1 = t0 + WINDOW + Duration::from_secs(1);
        assert_eq!(crash(&mut n, "web", t1), Some(t1 + WINDOW));
    }

    #[test]
    fn a_burst_that_healed_itself_costs_no_call_unless_asked_for() {
        let t0 = Instant::now();
        for (tell_recovered, expect) in [(false, None), (true, Some("it is running again"))] {
            let mut n = CrashNotices::new(WINDOW, tell_recovered);
            for s in 0..3 {
                let at = t0 + Duration::from_secs(s);
                crash(&mut n, "web", at);
                state(&mut n, "web", WorkerState::Backoff, at);
                state(&mut n, "web", WorkerState::Starting, at);
                state(&mut n, "web", WorkerState::Ready, at);
            }
            let told = n.flush(t0 + WINDOW).map(|(_, text)| text);
            match expect {
                None => assert_eq!(told, None),
                Some(words) => {
                    let text = told.unwrap();
                    assert!(
                        text.contains("crashed 3 times, the last with signal 9")
                            && text.contains(words),
                        "{text}"
                    );
                }
            }
        }
    }
}
