//! The watchdog (DESIGN.md §2, §5; seed 003): it notices a busy worker that went silent and a task
//! that spends too fast.
//!
//! It observes the event bus (every event is folded in inside `publish`, see `crate::bus`) and
//! sees what the bus carries of each worker: its agent
//! events (task states, model answers, tool calls), its state, and the start, end and cost of
//! every gateway call it makes. A busy worker waiting on the gateway is not silent: a slow
//! provider is bounded by the gateway's own timeout. Budgets per task, turn caps and
//! loop guards are enforced where the spend and the turns happen (the gateway refuses an
//! over-budget call; the agent loop counts turns and repeats); this adds the two checks only
//! an outside observer can make. Every stop is recorded on the task with its reason, and the
//! MainAgent is told.

use crate::{
    bus::EventBus,
    slot::SlotCmd,
    supervisor::{lock, MainInbox, Slots},
};
use pegasus_proto::llm::LlmError;
use pegasus_proto::{BusBody, BusEvent, Channel, TaskState, WorkerEvent, WorkerState};
use pegasus_store::WatchdogConfig;
use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex},
    time::Duration,
};
use tokio::time::{sleep_until, Instant};

/// The window cost velocity is measured over.
const VELOCITY_WINDOW: Duration = Duration::from_secs(60);

/// What the watchdog knows about one connected worker.
pub(crate) struct Watchdog {
    silent_timeout: Duration,
    max_usd_per_minute: Option<f64>,
    /// The task the worker is running, if any: only a busy worker can be silent.
    busy: Option<String>,
    last_event: Instant,
    spend: HashMap<String, VecDeque<(Instant, f64)>>,
    /// Tasks stopped for spending too fast: (limit, rate) given to their next calls.
    stopped: HashMap<String, (f64, f64)>,
}

/// A task's stop that the MainAgent should hear about.
#[derive(Debug, PartialEq)]
pub(crate) struct Stop {
    pub task: String,
    pub reason: String,
}

impl Watchdog {
    pub fn new(config: &WatchdogConfig) -> Self {
        Watchdog {
            silent_timeout: Duration::from_secs(config.silent_timeout_s.max(1)),
            max_usd_per_minute: config.max_usd_per_minute,
            busy: None,
            last_event: Instant::now(),
            spend: HashMap::new(),
            stopped: HashMap::new(),
        }
    }

    /// An agent event arrived. Returns a stop to report when a task ended for a reason other
    /// than answering (turn_capped, loop_capped, budget, ...).
    pub fn on_event(&mut self, event: &WorkerEvent) -> Option<Stop> {
        self.last_event = Instant::now();
        let WorkerEvent::Task {
            task,
            state,
            reason,
            ..
        } = event
        else {
            return None;
        };
        if *state == TaskState::Running {
            self.busy = Some(task.clone());
            return None;
        }
        if !state.has_stopped() {
            return None;
        }
        if self.busy.as_deref() == Some(task.as_str()) {
            self.busy = None;
        }
        // Waiting for a person's yes (DESIGN.md §11) is a pause, not a stop: the task goes on with
        // its spend when the answer comes, and the person is asked directly (CLI, dashboard,
        // Telegram), not through the MainAgent.
        if *state == TaskState::Blocked && reason.as_deref() == Some("approval") {
            return None;
        }
        self.spend.remove(task);
        let reason = reason.as_deref()?;
        (*state != TaskState::Done || reason == "token_capped").then(|| Stop {
            task: task.clone(),
            reason: reason.to_string(),
        })
    }

    /// A sign of life that is not an agent event (an answer of the gateway to the worker).
    pub fn touch(&mut self) {
        self.last_event = Instant::now();
    }

    /// When a busy worker counts as silent; `None` while idle.
    pub fn silent_deadline(&self) -> Option<Instant> {
        self.busy
            .as_ref()
            .map(|_| self.last_event + self.silent_timeout)
    }

    /// The task that went silent (the deadline passed); it is no longer watched.
    pub fn take_silent(&mut self) -> Option<String> {
        let deadline = self.silent_deadline()?;
        if Instant::now() < deadline {
            return None;
        }
        self.busy.take()
    }

    /// A gateway call of `task` cost `usd`. Returns the reason when this stops the task for
    /// spending faster than allowed.
    pub fn on_cost(&mut self, task: &str, usd: f64) -> Option<String> {
        let max = self.max_usd_per_minute?;
        let now = Instant::now();
        let window = self.spend.entry(task.to_string()).or_default();
        window.push_back((now, usd));
        while window
            .front()
            .is_some_and(|(t, _)| now.duration_since(*t) > VELOCITY_WINDOW)
        {
            window.pop_front();
        }
        let rate: f64 = window.iter().map(|(_, u)| u).sum();
        if rate > max && !self.stopped.contains_key(task) {
            self.stopped.insert(task.to_string(), (max, rate));
            return Some(format!(
                "watchdog: task {task} spent ${rate:.2} in the last minute, over the ${max:.2}/min limit"
            ));
        }
        None
    }

    /// The refusal for a call of `task`, if the watchdog stopped it: the agent stops on it
    /// like on any budget, and the task is recorded as stopped for `budget`.
    pub fn refusal(&self, task: Option<&str>) -> Option<LlmError> {
        let task = task?;
        self.stopped
            .get(task)
            .map(|(limit, spent)| LlmError::BudgetExceeded {
                scope: format!("spending rate (USD per minute) of task {task}"),
                limit: *limit,
                spent: *spent,
            })
    }
}

/// The watchdogs of every worker, by project; shared between the consumer task (which feeds
/// them) and the LLM proxy (which asks them whether a task's calls are refused).
pub(crate) struct Watchdogs {
    config: WatchdogConfig,
    by_project: Mutex<HashMap<String, Watched>>,
    /// The deadline the timer task sleeps until (`None`: it waits for a wake-up). Locked after
    /// `by_project`, never before.
    armed: Mutex<Option<Instant>>,
    /// Wakes the timer task when an event brings a deadline before the armed one.
    wake: tokio::sync::Notify,
}

/// One project's watchdog and what the bus said about its worker.
struct Watched {
    dog: Watchdog,
    /// The worker's pid while it is ready; `None` while starting, stopping or gone (then
    /// nothing is silent: there is nobody to be).
    ready_pid: Option<u32>,
    /// The project's model calls still in the gateway.
    in_flight: u32,
}

impl Watched {
    /// When this worker becomes silent, if it is ready, busy and has no model call pending.
    fn deadline(&self) -> Option<Instant> {
        if self.ready_pid.is_some() && self.in_flight == 0 {
            self.dog.silent_deadline()
        } else {
            None
        }
    }
}

impl Watchdogs {
    pub fn new(config: &WatchdogConfig) -> Self {
        Watchdogs {
            config: config.clone(),
            by_project: Mutex::new(HashMap::new()),
            armed: Mutex::new(None),
            wake: tokio::sync::Notify::new(),
        }
    }

    /// The refusal for a model call of `task` in `project`, if the watchdog stopped that task.
    pub fn refusal(&self, project: &str, task: Option<&str>) -> Option<LlmError> {
        lock(&self.by_project).get(project)?.dog.refusal(task)
    }

    /// Folds one bus event in; returns a line for the MainAgent when a task stopped for a
    /// reason other than answering.
    fn apply(&self, event: &BusEvent) -> Option<String> {
        let mut all = lock(&self.by_project);
        let w = all.entry(event.project.clone()).or_insert_with(|| Watched {
            dog: Watchdog::new(&self.config),
            ready_pid: None,
            in_flight: 0,
        });
        let line = self.fold(w, event);
        // Only an earlier deadline needs the timer now; a later one is found when it wakes.
        if let Some(due) = w.deadline() {
            if lock(&self.armed).is_none_or(|armed| due < armed) {
                self.wake.notify_one();
            }
        }
        line
    }

    fn fold(&self, w: &mut Watched, event: &BusEvent) -> Option<String> {
        match &event.body {
            BusBody::Worker(e) => w.dog.on_event(e).map(|stop| {
                format!(
                    "[task {} of project {} stopped: {}]",
                    stop.task, event.project, stop.reason
                )
            }),
            BusBody::WorkerState { state, pid } => {
                if *state == WorkerState::Ready {
                    w.ready_pid = *pid;
                } else {
                    // A new process starts with nothing running; an old one's calls are gone.
                    if *state == WorkerState::Starting {
                        w.dog = Watchdog::new(&self.config);
                    }
                    w.ready_pid = None;
                    w.in_flight = 0;
                }
                None
            }
            BusBody::Crash { .. } => {
                w.ready_pid = None;
                w.in_flight = 0;
                None
            }
            BusBody::LlmCall {
                task,
                ended,
                in_flight,
                cost_usd,
            } => {
                w.in_flight = *in_flight;
                if *ended {
                    // An answer from our own gateway is a sign of life.
                    w.dog.touch();
                    if let (Some(task), Some(usd)) = (task, cost_usd) {
                        if let Some(why) = w.dog.on_cost(task, *usd) {
                            tracing::warn!(project = %event.project, "{why}");
                        }
                    }
                }
                None
            }
            BusBody::Notify { .. } => None,
        }
    }

    /// The earliest moment a ready, busy worker with no model call pending becomes silent,
    /// recorded as the deadline the timer task now sleeps until.
    fn arm(&self) -> Option<Instant> {
        let all = lock(&self.by_project);
        let next = all.values().filter_map(Watched::deadline).min();
        *lock(&self.armed) = next;
        next
    }

    /// The silent ones now: (project, pid, task); each is no longer watched.
    fn take_silent(&self) -> Vec<(String, u32, String)> {
        let mut out = Vec::new();
        for (project, w) in lock(&self.by_project).iter_mut() {
            let Some(pid) = w.ready_pid else { continue };
            if w.in_flight > 0 {
                continue;
            }
            if let Some(task) = w.dog.take_silent() {
                out.push((project.clone(), pid, task));
            }
        }
        out
    }
}

/// Makes the watchdogs an observer of `bus`; what they stop is told to the MainAgent (`main`).
pub(crate) fn observe(bus: &EventBus, watchdogs: &Arc<Watchdogs>, main: MainInbox) {
    bus.observe_weak(watchdogs, move |watchdogs, event| {
        let line = watchdogs.apply(event);
        // The MainAgent's own tasks are on the bus as project `main`: telling it that its own
        // task stopped would start another run, whose stop would be told again, and so on.
        if let Some(line) = line.filter(|_| !is_main_agent(&event.project)) {
            main.tell(Channel::Project(event.project.clone()), line);
        }
    });
}

/// Whether bus events of `project` are the MainAgent's own.
fn is_main_agent(project: &str) -> bool {
    project == crate::main_agent::MAIN
}

/// What the watchdog's timer uses to stop a silent task: the task files, the MainAgent it
/// tells, the slot whose worker it restarts.
pub(crate) struct Timer {
    pub watchdogs: Arc<Watchdogs>,
    pub home: pegasus_store::Home,
    pub main: MainInbox,
    pub slots: Arc<Slots>,
}

/// The watchdog's timer task: stops silent tasks when they are due, until `shutdown` fires.
pub(crate) async fn run(timer: Timer, shutdown: tokio_util::sync::CancellationToken) {
    loop {
        let deadline = timer.watchdogs.arm();
        tokio::select! {
            _ = shutdown.cancelled() => return,
            // A permit stored by an event between `arm` and here is taken at once.
            _ = timer.watchdogs.wake.notified() => {}
            _ = sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                for (project, pid, task) in timer.watchdogs.take_silent() {
                    stop_silent(&timer, &project, pid, &task).await;
                }
            }
        }
    }
}

/// Fails a silent task and restarts its worker. The task file decides: only a task that is
/// still `running` on disk is failed (compare-and-set), so a watchdog that missed the task's
/// end can never kill a worker that was merely idle.
async fn stop_silent(timer: &Timer, project: &str, pid: u32, task: &str) {
    let secs = timer.watchdogs.config.silent_timeout_s;
    let dir = timer.home.project_dir(project);
    let (p, t) = (project.to_string(), task.to_string());
    let recorded = pegasus_fs::blocking(move || {
        pegasus_tasks::TaskStore::open(&dir, &p).and_then(|store| {
            store.transition(
                &t,
                TaskState::Running,
                TaskState::Failed,
                "watchdog",
                "silent",
            )
        })
    })
    .await;
    match recorded {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => {
            return tracing::debug!(%project, %task, "silent task not failed: {e}");
        }
        Err(e) => return tracing::warn!(%project, %task, "cannot record the watchdog's stop: {e}"),
    }
    tracing::warn!(%project, pid, %task, "watchdog: no event for {secs} s from a busy worker; failing the task and restarting the worker");
    timer.main.tell(
        Channel::Project(project.to_string()),
        format!("[task {task} of project {project} stopped: silent for {secs} s; the worker is restarted]"),
    );
    let reason = format!("watchdog: silent for {secs} s while running task {task}");
    timer.slots.try_cmd(project, SlotCmd::Kill { pid, reason });
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn task(id: &str, state: TaskState, reason: Option<&str>) -> WorkerEvent {
        WorkerEvent::Task {
            task: id.into(),
            title: None,
            state,
            reason: reason.map(str::to_string),
        }
    }

    fn dog(max: Option<f64>) -> Watchdog {
        Watchdog::new(&WatchdogConfig {
            silent_timeout_s: 1,
            max_usd_per_minute: max,
        })
    }

    fn bus(body: BusBody) -> BusEvent {
        BusEvent {
            seq: 0,
            ts_ms: 0,
            project: "p".into(),
            body,
        }
    }

    fn call(ended: bool, in_flight: u32) -> BusEvent {
        bus(BusBody::LlmCall {
            task: Some("t1".into()),
            ended,
            in_flight,
            cost_usd: None,
        })
    }

    /// Whether the timer task would be woken (takes the stored permit).
    fn woken(ws: &Watchdogs) -> bool {
        use futures_util::FutureExt as _;
        ws.wake.notified().now_or_never().is_some()
    }

    #[tokio::test(start_paused = true)]
    async fn the_timer_is_woken_only_for_a_deadline_before_the_armed_one() {
        let ws = Watchdogs::new(&WatchdogConfig {
            silent_timeout_s: 60,
            max_usd_per_minute: None,
        });
        ws.apply(&bus(BusBody::WorkerState {
            state: WorkerState::Ready,
            pid: Some(7),
        }));
        assert!(!woken(&ws), "an idle worker has no deadline");
        ws.apply(&bus(BusBody::Worker(task("t1", TaskState::Running, None))));
        assert!(woken(&ws), "the first deadline wakes a timer that had none");
        let armed = ws.arm().unwrap();
        // Model calls: the watch pauses, then restarts later than the armed deadline.
        tokio::time::advance(Duration::from_secs(5)).await;
        ws.apply(&call(false, 1));
        ws.apply(&call(true, 0));
        assert!(!woken(&ws), "a later deadline waits for the timer");
        // Which, when it fires at the old deadline, finds nobody silent and re-arms later.
        tokio::time::advance(Duration::from_secs(55)).await;
        assert!(ws.take_silent().is_empty());
        assert!(ws.arm().unwrap() > armed);
        // With no deadline armed (the only busy worker in a call), its end wakes the timer.
        ws.apply(&call(false, 1));
        assert_eq!(ws.arm(), None);
        ws.apply(&call(true, 0));
        assert!(woken(&ws));
        tokio::time::advance(Duration::from_secs(61)).await;
        let silent = ws.take_silent();
        assert_eq!(silent, vec![("p".to_string(), 7, "t1".to_string())]);
    }

    #[test]
    fn only_a_busy_worker_can_be_silent() {
        let mut w = dog(None);
        assert!(w.silent_deadline().is_none());
        w.on_event(&task("t1", TaskState::Running, None));
        assert!(w.silent_deadline().is_some());
        w.on_event(&task("t1", TaskState::Done, None));
        assert!(w.silent_deadline().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn silence_past_the_timeout_names_the_task() {
        let mut w = dog(None);
        w.on_event(&task("t1", TaskState::Running, None));
        assert_eq!(w.take_silent(), None);
        tokio::time::advance(Duration::from_millis(500)).await;
        w.on_event(&WorkerEvent::ToolCall {
            task: Some("t1".into()),
            depth: 0,
            name: "exec".into(),
            is_error: false,
        });
        tokio::time::advance(Duration::from_millis(700)).await;
        assert_eq!(w.take_silent(), None, "an event resets the clock");
        tokio::time::advance(Duration::from_millis(400)).await;
        assert_eq!(w.take_silent().as_deref(), Some("t1"));
        assert!(w.silent_deadline().is_none());
    }

    #[test]
    fn stops_other_than_answers_are_reported_with_their_reason() {
        let mut w = dog(None);
        let stop = w.on_event(&task("t1", TaskState::Failed, Some("loop_capped")));
        assert_eq!(
            stop,
            Some(Stop {
                task: "t1".into(),
                reason: "loop_capped".into()
            })
        );
        assert_eq!(w.on_event(&task("t2", TaskState::Done, None)), None);
        assert!(w
            .on_event(&task("t3", TaskState::Done, Some("token_capped")))
            .is_some());
        // Waiting for approval is a pause the MainAgent is not told about.
        assert_eq!(
            w.on_event(&task("t4", TaskState::Blocked, Some("approval"))),
            None
        );
    }

    #[test]
    fn spending_too_fast_stops_the_task_once() {
        let mut w = dog(Some(1.0));
        assert_eq!(w.on_cost("t1", 0.6), None);
        assert!(w.refusal(Some("t1")).is_none());
        let reason = w.on_cost("t1", 0.6).unwrap();
        assert!(
            reason.contains("t1") && reason.contains("$1.20"),
            "{reason}"
        );
        assert!(w.refusal(Some("t1")).is_some());
        assert_eq!(w.on_cost("t1", 5.0), None, "reported once");
        assert!(w.refusal(Some("t2")).is_none() && w.refusal(None).is_none());
        assert_eq!(dog(None).on_cost("t1", 100.0), None, "no cap, no stop");
    }
}
