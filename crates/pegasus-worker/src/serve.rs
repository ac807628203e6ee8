//! The worker's serve loop as a state machine: what happens on each event is
//! [`step`]`(state, event) -> (state, actions)`, a pure function tested exhaustively below; the
//! loop in `crate::worker` only waits for the next event and carries out the actions.
//!
//! Two states. `Serving`: frames from pegasusd become work, acknowledgements and answers.
//! `Draining`: pegasusd asked for a shutdown; the agent finishes its current stage (a running
//! task stops at its next turn boundary) while the worker still answers pings and model
//! responses, and takes no new work; when the agent says it is idle, `ShutdownComplete` goes
//! out and the worker exits. From either state, pegasusd closing the connection or an agent
//! that stopped ends the worker.

use pegasus_agent::Notice;
use pegasus_proto::{
    llm::{ChatResponse, LlmError},
    worker::{FromWorker, InboundMessage, RelayPart, SearchHit, ToWorker},
};

/// Where the worker is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Serving,
    /// A shutdown was asked for: no new work; waiting for the agent to be idle.
    Draining,
}

/// What the loop waits for.
#[derive(Debug)]
pub enum Event {
    /// A frame from pegasusd.
    Frame(ToWorker),
    /// pegasusd closed the connection.
    Closed,
    /// pegasusd sent something unreadable.
    BadFrame(String),
    /// The agent is idle after a shutdown request.
    Drained,
    /// The agent's task ended (only a panic ends it).
    AgentEnded { panicked: bool },
    /// The agent has something to say.
    Notice(Notice),
    /// Time to say the worker is alive.
    Heartbeat,
    /// A remote worker heard nothing from pegasusd for [`LINK_SILENCE`]: its link is lost
    /// (half-open, or pegasusd is gone), and only pegasusd may start the next worker.
    LinkSilent,
}

/// How long a remote worker waits for a frame from pegasusd before it exits (DESIGN.md §14);
/// pegasusd keeps a remote link alive with a ping every heartbeat interval.
pub const LINK_SILENCE: std::time::Duration = std::time::Duration::from_secs(15);

/// What the loop does.
#[derive(Debug)]
pub enum Action {
    /// Record the message durably, then acknowledge it, then queue it for the agent (in this
    /// order: the acknowledgement is the sender's proof that it is on disk).
    TakeMessage(InboundMessage),
    /// Send a frame to pegasusd.
    Send(FromWorker),
    /// Hand a model answer to the call that waits for it.
    Answer {
        id: u64,
        result: Result<ChatResponse, LlmError>,
    },
    /// Hand web search results to the search that waits for them.
    SearchAnswer {
        id: u64,
        result: Result<Vec<SearchHit>, String>,
    },
    /// Hand a part of a relayed answer to the harness's endpoint that waits for it.
    RelayAnswer { id: u64, part: RelayPart },
    /// Look for tasks that are ready to run.
    LookForTasks,
    /// Drive an autonomous run.
    DriveRun(String),
    /// An approval request has its answer on disk: wake the call that waits for it.
    WakeApproval(String),
    /// The model's context window as its server said it: the agent uses it from its next
    /// task on (the first one waits for it while `Init` said it was pending).
    Window(u64),
    /// Stop taking work and ask the agent to say when it is idle.
    StartDraining,
    /// Exit: `Ok` after a requested shutdown or when pegasusd went away (every waiting model
    /// call fails first), `Err` with the reason otherwise.
    Exit(Result<(), String>),
}

/// The one transition function of the serve loop (see the module doc).
pub fn step(state: State, event: Event) -> (State, Vec<Action>) {
    use Action::*;
    match (state, event) {
        (_, Event::Closed) => (state, vec![Exit(Ok(()))]),
        (_, Event::BadFrame(e)) => (
            state,
            vec![Exit(Err(format!("bad frame from pegasusd: {e}")))],
        ),
        (_, Event::AgentEnded { panicked }) => {
            let why = if panicked {
                "the project agent panicked"
            } else {
                "the project agent stopped"
            };
            (
                state,
                vec![
                    Send(FromWorker::Fatal {
                        reason: why.to_string(),
                    }),
                    Exit(Err(why.to_string())),
                ],
            )
        }
        (State::Draining, Event::Drained) => (
            state,
            vec![Send(FromWorker::ShutdownComplete), Exit(Ok(()))],
        ),
        // Only a shutdown starts a drain: a stray one changes nothing.
        (State::Serving, Event::Drained) => (state, Vec::new()),
        (_, Event::Notice(Notice::Notify { text })) => (
            state,
            vec![Send(FromWorker::Notify {
                text,
                kind: "info".into(),
            })],
        ),
        (_, Event::Notice(Notice::Event(event))) => (state, vec![Send(FromWorker::Event(event))]),
        (_, Event::Heartbeat) => (state, vec![Send(FromWorker::Heartbeat)]),
        (_, Event::LinkSilent) => (
            state,
            vec![Exit(Err(format!(
                "pegasusd said nothing for {} s: the link is lost; exiting so that it can start the next worker",
                LINK_SILENCE.as_secs()
            )))],
        ),
        (_, Event::Frame(frame)) => frame_step(state, frame),
    }
}

fn frame_step(state: State, frame: ToWorker) -> (State, Vec<Action>) {
    use Action::*;
    let draining = state == State::Draining;
    match frame {
        ToWorker::Ping { nonce } => (state, vec![Send(FromWorker::Pong { nonce })]),
        // A call of the current stage may still be waiting for its answer while draining.
        ToWorker::LlmResponse { id, result } => (state, vec![Answer { id, result }]),
        // Likewise a search of the current stage.
        ToWorker::WebSearchResult { id, result } => (state, vec![SearchAnswer { id, result }]),
        // And a harness's call, whose answer it streams.
        ToWorker::RelayAnswer { id, part } => (state, vec![RelayAnswer { id, part }]),
        ToWorker::Shutdown if draining => (state, Vec::new()),
        ToWorker::Shutdown => (State::Draining, vec![StartDraining]),
        // pegasusd sends no work after a shutdown; if it did, it is not taken (and so not
        // acknowledged: the sender keeps it for the next start).
        ToWorker::Message(_) | ToWorker::TasksChanged | ToWorker::RunStart { .. } if draining => {
            (state, Vec::new())
        }
        ToWorker::Message(msg) => (state, vec![TakeMessage(msg)]),
        ToWorker::TasksChanged => (state, vec![LookForTasks]),
        ToWorker::RunStart { run_id } => (state, vec![DriveRun(run_id)]),
        // The call waiting for it may be the one a drain waits for.
        ToWorker::ApprovalAnswered { id } => (state, vec![WakeApproval(id)]),
        // A phase of a run may still make calls while draining: it must fit the window too.
        ToWorker::ContextWindow { window } => (state, vec![Window(window)]),
        ToWorker::Init(_) => {
            tracing::warn!("ignoring a second init");
            (state, Vec::new())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pegasus_proto::worker::Init;
    use State::*;

    /// A short name for each action, for the table.
    fn names(actions: &[Action]) -> Vec<&'static str> {
        actions
            .iter()
            .map(|a| match a {
                Action::TakeMessage(_) => "take",
                Action::Send(FromWorker::Pong { .. }) => "pong",
                Action::Send(FromWorker::Heartbeat) => "heartbeat",
                Action::Send(FromWorker::ShutdownComplete) => "complete",
                Action::Send(FromWorker::Fatal { .. }) => "fatal",
                Action::Send(FromWorker::Notify { .. }) => "notify",
                Action::Send(FromWorker::Event(_)) => "event",
                Action::Send(_) => "send",
                Action::Answer { .. } => "answer",
                Action::SearchAnswer { .. } => "search",
                Action::RelayAnswer { .. } => "relay",
                Action::LookForTasks => "tasks",
                Action::DriveRun(_) => "run",
                Action::WakeApproval(_) => "wake",
                Action::Window(_) => "window",
                Action::StartDraining => "drain",
                Action::Exit(Ok(())) => "exit",
                Action::Exit(Err(_)) => "exit-err",
            })
            .collect()
    }

    /// Makes one event.
    type MakeEvent = Box<dyn Fn() -> Event>;

    /// One of every kind of event, by name.
    fn events() -> Vec<(&'static str, MakeEvent)> {
        vec![
            (
                "message",
                Box::new(|| {
                    Event::Frame(ToWorker::Message(InboundMessage {
                        id: "m1".into(),
                        from: "cli".into(),
                        text: "hi".into(),
                        client_id: None,
                    }))
                }),
            ),
            (
                "ping",
                Box::new(|| Event::Frame(ToWorker::Ping { nonce: 7 })),
            ),
            (
                "response",
                Box::new(|| {
                    Event::Frame(ToWorker::LlmResponse {
                        id: 3,
                        result: Err(LlmError::Cancelled),
                    })
                }),
            ),
            ("tasks", Box::new(|| Event::Frame(ToWorker::TasksChanged))),
            (
                "run",
                Box::new(|| {
                    Event::Frame(ToWorker::RunStart {
                        run_id: "r-1".into(),
                    })
                }),
            ),
            ("shutdown", Box::new(|| Event::Frame(ToWorker::Shutdown))),
            (
                "answered",
                Box::new(|| Event::Frame(ToWorker::ApprovalAnswered { id: "ap-x".into() })),
            ),
            (
                "init",
                Box::new(|| {
                    Event::Frame(ToWorker::Init(Init {
                        protocol_version: 0,
                        config_json: String::new(),
                        heartbeat_ms: 1000,
                        model: String::new(),
                        context_window: None,
                        window_pending: false,
                        home_files: None,
                    }))
                }),
            ),
            ("closed", Box::new(|| Event::Closed)),
            ("bad", Box::new(|| Event::BadFrame("x".into()))),
            ("drained", Box::new(|| Event::Drained)),
            (
                "panicked",
                Box::new(|| Event::AgentEnded { panicked: true }),
            ),
            (
                "notify",
                Box::new(|| {
                    Event::Notice(Notice::Notify {
                        text: "done".into(),
                    })
                }),
            ),
            ("heartbeat", Box::new(|| Event::Heartbeat)),
            ("silent", Box::new(|| Event::LinkSilent)),
            (
                "window",
                Box::new(|| Event::Frame(ToWorker::ContextWindow { window: 4096 })),
            ),
            (
                "searched",
                Box::new(|| {
                    Event::Frame(ToWorker::WebSearchResult {
                        id: 4,
                        result: Ok(Vec::new()),
                    })
                }),
            ),
            (
                "relayed",
                Box::new(|| {
                    Event::Frame(ToWorker::RelayAnswer {
                        id: 5,
                        part: RelayPart::Chunk(b"data: {}".to_vec()),
                    })
                }),
            ),
        ]
    }

    /// Every state × every event: the next state and the actions.
    #[test]
    fn every_state_and_event() {
        let table: &[(State, &str, State, &[&str])] = &[
            (Serving, "message", Serving, &["take"]),
            (Serving, "ping", Serving, &["pong"]),
            (Serving, "response", Serving, &["answer"]),
            (Serving, "tasks", Serving, &["tasks"]),
            (Serving, "run", Serving, &["run"]),
            (Serving, "shutdown", Draining, &["drain"]),
            (Serving, "answered", Serving, &["wake"]),
            (Serving, "init", Serving, &[]),
            (Serving, "closed", Serving, &["exit"]),
            (Serving, "bad", Serving, &["exit-err"]),
            (Serving, "drained", Serving, &[]),
            (Serving, "panicked", Serving, &["fatal", "exit-err"]),
            (Serving, "notify", Serving, &["notify"]),
            (Serving, "heartbeat", Serving, &["heartbeat"]),
            (Serving, "silent", Serving, &["exit-err"]),
            (Serving, "window", Serving, &["window"]),
            (Serving, "searched", Serving, &["search"]),
            (Serving, "relayed", Serving, &["relay"]),
            (Draining, "message", Draining, &[]),
            (Draining, "ping", Draining, &["pong"]),
            (Draining, "response", Draining, &["answer"]),
            (Draining, "tasks", Draining, &[]),
            (Draining, "run", Draining, &[]),
            (Draining, "shutdown", Draining, &[]),
            (Draining, "answered", Draining, &["wake"]),
            (Draining, "init", Draining, &[]),
            (Draining, "closed", Draining, &["exit"]),
            (Draining, "bad", Draining, &["exit-err"]),
            (Draining, "drained", Draining, &["complete", "exit"]),
            (Draining, "panicked", Draining, &["fatal", "exit-err"]),
            (Draining, "notify", Draining, &["notify"]),
            (Draining, "heartbeat", Draining, &["heartbeat"]),
            (Draining, "silent", Draining, &["exit-err"]),
            (Draining, "window", Draining, &["window"]),
            (Draining, "searched", Draining, &["search"]),
            (Draining, "relayed", Draining, &["relay"]),
        ];
        let events = events();
        assert_eq!(table.len(), 2 * events.len(), "every pair is in the table");
        for (state, event, next, actions) in table {
            let make = events
                .iter()
                .find(|(name, _)| name == event)
                .map(|(_, make)| make)
                .unwrap_or_else(|| panic!("no event {event}"));
            let (got, did) = step(*state, make());
            assert_eq!(got, *next, "{state:?} + {event}");
            assert_eq!(names(&did), *actions, "{state:?} + {event}");
        }
    }

    #[test]
    fn a_panicked_agent_says_why() {
        let (_, actions) = step(Serving, Event::AgentEnded { panicked: true });
        assert!(
            matches!(&actions[1], Action::Exit(Err(why)) if why == "the project agent panicked")
        );
        let (_, actions) = step(Serving, Event::AgentEnded { panicked: false });
        assert!(
            matches!(&actions[1], Action::Exit(Err(why)) if why == "the project agent stopped")
        );
    }
}
