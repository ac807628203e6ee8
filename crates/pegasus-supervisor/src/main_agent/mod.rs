//! The MainAgent: the brain in pegasusd. It talks to the user (`pegasusctl chat`, later
//! Telegram and the dashboard), hears from projects (their notifies, their replies, their
//! crashes) on channel `project/NAME`, and manages projects with its own tools. It is the same
//! agent loop as a project's, with its own folder `<home>/main/` (session, memory), its own
//! tools, and the gateway called directly instead of through a proxy.

mod model;
mod tools;

use crate::bus::EventBus;
use crate::supervisor::MainInput;
use pegasus_agent::{record_inbound, Agent, AgentSettings, Notice, StopKind, ToolSet};
use pegasus_proto::BusBody;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Who the MainAgent is; its PROJECT.md-equivalent.
const MAIN_PROMPT: &str = "You are the MainAgent of Pegasus, a personal AI-agent daemon. You manage the user's \
projects: each project is a long-lived desk with its own agent, session and memory, running in its own process. \
Create, list, suspend, resume, complete and archive projects with your tools. Talk to a project with \
reply(channel_type=\"project\", channel_id=NAME, text); a project's answers and notifications reach you on \
channel project/NAME, and so does a message when a project's worker crashes. Coordinate projects through \
messages; do not do a project's work yourself. Answer the user briefly.";

/// Runs in a row the MainAgent may start for project messages alone (see the loop).
const MAX_UNATTENDED_RUNS: u32 = 8;

/// The name the MainAgent's own events carry on the bus, in the ledger and in search: a notice
/// about a task of this "project" is about the MainAgent itself and never goes back to it.
pub(crate) const MAIN: &str = "main";

/// Project messages the MainAgent holds until the user speaks, and why (for `status` and the
/// daemon log); shared between the MainAgent's loop and the status handler.
#[derive(Default)]
pub(crate) struct Held {
    state: std::sync::Mutex<Option<(usize, String)>>,
}

impl Held {
    /// The line `status` lists under "waiting for you", while messages are held.
    pub(crate) fn line(&self) -> Option<String> {
        let state = crate::supervisor::lock(&self.state);
        let (count, why) = state.as_ref().filter(|(count, _)| *count > 0)?;
        let what = if *count == 1 {
            "1 project message".to_string()
        } else {
            format!("{count} project messages")
        };
        Some(format!(
            "MainAgent: {what} held until you speak ({why}): say something with `pegasusctl chat`"
        ))
    }

    fn add(&self, count: usize, why: &str) {
        let mut state = crate::supervisor::lock(&self.state);
        let held = state.get_or_insert_with(|| (0, why.to_string()));
        held.0 += count;
    }

    fn clear(&self) {
        *crate::supervisor::lock(&self.state) = None;
    }
}

/// Why the MainAgent holds project messages instead of answering them with a model call.
#[derive(Debug, Clone, PartialEq)]
enum Hold {
    /// Messages are answered.
    Open,
    /// Too many runs in a row came from projects alone (a conversation that does not end).
    Unattended,
    /// A run started by project messages alone failed (a failing model, a cap): another such
    /// run would most likely fail the same way and spend again.
    Failed(String),
}

impl Hold {
    fn why(&self) -> String {
        match self {
            Hold::Open => String::new(),
            Hold::Unattended => {
                format!("{MAX_UNATTENDED_RUNS} runs in a row were started by projects alone")
            }
            Hold::Failed(e) => format!("its last run for a project message failed: {e}"),
        }
    }
}

/// The one line a held message is announced with (bus notify: Telegram, dashboard,
/// `project log -f`), the message cut to a readable length.
fn held_notice(text: &str) -> String {
    let one_line = text.replace('\n', " ");
    let cut = match one_line.char_indices().nth(200) {
        Some((at, _)) => format!("{}…", &one_line[..at]),
        None => one_line,
    };
    format!("held for the MainAgent until you speak (`pegasusctl chat`): {cut}")
}

/// What the MainAgent uses of the daemon.
pub(crate) struct MainParts<'a> {
    /// The home: the MainAgent's folder, the skills and preferences.
    pub home: &'a pegasus_store::Home,
    /// config.yml, for the agent's settings.
    pub config: &'a pegasus_store::Config,
    /// Its model calls go through the gateway like every worker's.
    pub gateway: pegasus_llm::Gateway,
    /// Where its notices and events go.
    pub bus: EventBus,
    /// The project messages it holds until the user speaks.
    pub held: Arc<Held>,
    /// The daemon's shutdown: the run in progress finishes, then the loop ends.
    pub shutdown: tokio_util::sync::CancellationToken,
}

/// Starts the MainAgent task; it serves `inbox` until the daemon exits. Its tools reach the
/// projects through `door`, like every other client.
pub(crate) fn start(
    parts: MainParts<'_>,
    door: &crate::front_door::FrontDoor,
    mut inbox: mpsc::UnboundedReceiver<MainInput>,
) -> tokio::task::JoinHandle<()> {
    let MainParts {
        home,
        config,
        gateway,
        bus,
        held,
        shutdown,
    } = parts;
    let dir = home.main_dir();
    let model_id = gateway.resolve_model("");
    let mut settings = AgentSettings::from_config(
        config,
        model_id.clone(),
        gateway.context_window(&model_id),
        None,
    );
    settings.exec_registry = Some(home.exec_registry("main"));
    settings.preferences = Some(home.preferences_file());
    settings.sandbox = Some(pegasus_sandbox::SandboxPaths {
        home: home.root().to_path_buf(),
        own_dir: dir.clone(),
        tmp_dir: dir.join("tmp"),
        writable: config
            .agent
            .exec_writable
            .iter()
            .map(std::path::PathBuf::from)
            .collect(),
    });
    let (notices, mut notice_rx) = mpsc::unbounded_channel::<Notice>();
    let notice_bus = bus.clone();
    tokio::spawn(async move {
        while let Some(notice) = notice_rx.recv().await {
            match notice {
                Notice::Notify { text } => {
                    tracing::debug!(bytes = text.len(), "MainAgent notify");
                    notice_bus.publish(MAIN, BusBody::Notify { text });
                }
                Notice::Event(event) => notice_bus.publish(MAIN, BusBody::Worker(event)),
            }
        }
    });
    let tools = tools::all(door.clone());
    let skills = home.skills_dir();
    tokio::spawn(async move {
        // A default model no table knows: its server says its window (DESIGN.md §5), remembered
        // from an earlier run or asked now; waited for briefly, never for a server that does
        // not answer (then the default, until it says).
        settings.context_window = Some(
            gateway
                .window_soon(&model_id, std::time::Duration::from_secs(5))
                .await,
        );
        let prefs_file = settings.preferences.clone().unwrap_or_default();
        let agent = pegasus_agent::Desk::open(&dir, MAIN, notices).and_then(|desk| {
            Agent::open(
                &desk,
                &dir.join("workdir"),
                MAIN_PROMPT.to_string(),
                skills,
                ToolSet::new(tools),
                Arc::new(model::GatewayModel(gateway.clone())),
                settings,
            )
        });
        let mut agent = match agent {
            Ok(agent) => agent,
            Err(e) => {
                tracing::error!("the MainAgent cannot start: {e}");
                while let Some(input) = inbox.recv().await {
                    if let Some(tx) = input.answer {
                        let _ = tx.send(Err(format!("the MainAgent cannot start: {e}")));
                    }
                }
                return;
            }
        };
        let session = agent.session_handle();
        let mut next = 0u64;
        // Runs started by projects alone (their replies, notifies, crashes) since the user last
        // spoke: capped, so a MainAgent and a project cannot talk to each other forever.
        let mut unattended = 0u32;
        // Whether project messages are held until the user speaks. Held messages are in the
        // session and the agent's queue: the user's next run answers them too.
        let mut hold = Hold::Open;
        // Shutdown drains: the run in progress finishes and is recorded, then the loop ends.
        loop {
            let first = tokio::select! {
                _ = shutdown.cancelled() => break,
                first = inbox.recv() => match first {
                    Some(first) => first,
                    None => break,
                },
            };
            let mut batch = vec![first];
            while let Ok(more) = inbox.try_recv() {
                batch.push(more);
            }
            let mut waiters = Vec::new();
            let from_user = batch.iter().any(|i| !i.channel.is_project());
            let texts: Vec<String> = batch.iter().map(|i| i.text.clone()).collect();
            for input in batch {
                // "Preference: ..." from the user is kept for every agent's prompt (DESIGN.md §10),
                // before the run, so this very answer already sees it.
                if !input.channel.is_project() {
                    if let Some(pref) = preference_of(&input.text) {
                        match record_preference(&prefs_file, pref) {
                            Ok(()) => tracing::info!(bytes = pref.len(), "preference recorded"),
                            Err(e) => tracing::error!("cannot record a preference: {e}"),
                        }
                    }
                }
                next += 1;
                let id = format!("main-{}-{next}", chrono::Utc::now().timestamp_millis());
                if let Err(e) = record_inbound(&session, &id, &input.channel, &input.text) {
                    tracing::error!("MainAgent cannot record a message: {e}");
                    if let Some(tx) = input.answer {
                        let _ =
                            tx.send(Err(format!("the MainAgent cannot record the message: {e}")));
                    }
                    continue;
                }
                agent.enqueue(&id, &input.channel, &input.text);
                waiters.extend(input.answer);
            }
            if from_user {
                unattended = 0;
                hold = Hold::Open;
                held.clear();
            } else {
                if hold == Hold::Open && unattended >= MAX_UNATTENDED_RUNS {
                    hold = Hold::Unattended;
                }
                if hold != Hold::Open {
                    // Held, never silently: the user is told of each message, and `status`
                    // lists how many wait.
                    let why = hold.why();
                    if held.line().is_none() {
                        tracing::warn!(
                            "MainAgent: {why}; holding project messages until the user speaks"
                        );
                    }
                    held.add(texts.len(), &why);
                    for text in &texts {
                        bus.publish(
                            MAIN,
                            BusBody::Notify {
                                text: held_notice(text),
                            },
                        );
                    }
                    continue;
                }
                unattended += 1;
            }
            let answer = match agent.run().await {
                Ok(outcome) if outcome.stop == StopKind::Answered => Ok(outcome.text),
                Ok(outcome) => Err(outcome.text),
                Err(e) => Err(format!("the MainAgent failed: {e}")),
            };
            if let Err(e) = &answer {
                tracing::warn!("MainAgent: {e}");
                // A run nobody asked for that failed is not tried again for the next project
                // message: with a failing model, each would fail and spend the same way.
                if !from_user {
                    let line = e.lines().next().unwrap_or_default();
                    let cut: String = line.chars().take(160).collect();
                    hold = Hold::Failed(cut);
                }
            }
            for tx in waiters {
                let _ = tx.send(answer.clone());
            }
        }
        inbox.close();
        while let Ok(input) = inbox.try_recv() {
            if let Some(tx) = input.answer {
                let _ = tx.send(Err(
                    "pegasusd is stopping; ask again after it restarts".into()
                ));
            }
        }
        tracing::debug!("MainAgent drained");
    })
}

/// The preference a user message states ("Preference: ..." at its start, any case), if any.
fn preference_of(text: &str) -> Option<&str> {
    let t = text.trim_start();
    let head = t.get(..11)?;
    if !head.eq_ignore_ascii_case("preference:") {
        return None;
    }
    let pref = t[11..].trim();
    (!pref.is_empty()).then_some(pref)
}

/// Bytes of preferences.md kept when adding one (older lines beyond it are dropped first).
const PREFERENCES_KEEP: usize = 12 * 1024;

/// Adds `pref` as a line of `path` (written atomically); an identical line is not repeated.
fn record_preference(path: &std::path::Path, pref: &str) -> Result<(), pegasus_store::StoreError> {
    let old = match pegasus_store::read_text_limited(path, 64 * 1024) {
        Ok(t) => t,
        Err(pegasus_store::ReadError::NotFound) => String::new(),
        Err(e) => {
            return Err(pegasus_store::StoreError::Io {
                path: path.to_path_buf(),
                source: std::io::Error::other(e.to_string()),
            })
        }
    };
    let line = format!("- {}", pref.replace('\n', " "));
    let mut lines: Vec<&str> = old.lines().filter(|l| *l != line).collect();
    lines.push(&line);
    while lines.iter().map(|l| l.len() + 1).sum::<usize>() > PREFERENCES_KEEP && lines.len() > 1 {
        lines.remove(0);
    }
    let mut text = lines.join("\n");
    text.push('\n');
    pegasus_store::write_atomic(path, text.as_bytes())
}

#[cfg(test)]
mod preference_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_preference_is_the_text_after_its_marker() {
        assert_eq!(
            preference_of("Preference: short answers"),
            Some("short answers")
        );
        assert_eq!(
            preference_of("  preference:  British spelling "),
            Some("British spelling")
        );
        assert_eq!(preference_of("Preference:"), None);
        assert_eq!(preference_of("my preference: x"), None);
        assert_eq!(preference_of("é"), None);
    }

    #[test]
    fn preferences_are_kept_once_each_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("preferences.md");
        record_preference(&p, "short answers").unwrap();
        record_preference(&p, "no emoji").unwrap();
        record_preference(&p, "short answers").unwrap();
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            "- no emoji\n- short answers\n"
        );
    }
}
