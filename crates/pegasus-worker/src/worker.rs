//! The worker's life: handshake, load, serve, stop.

use crate::mcp::McpHub;
use crate::project_ctx::ProjectCtx;
use crate::sends::{self, SendCheck, Sends};
use crate::{
    connection, logging,
    proxy::ProxyModel,
    relay::Relay,
    serve::{self, Action, Event, State},
    work_queue::{run_jobs, AgentPhases, Job, Window, WindowGate},
    WorkerError,
};
use pegasus_agent::{record_sent, Agent, AgentSettings, Approvals, Desk, Notice, ToolSet};
use pegasus_proto::worker::{FromWorker, ToWorker};
use pegasus_runs::{RunEngine, RunSettings, RunStore};
use pegasus_store::{Config, Home, ProjectFile};
use pegasus_tasks::TaskStore;
use std::{
    io::BufRead,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};
use tokio::sync::mpsc;

/// What `project-worker` is started with: only its project folder. The spawn token is read from
/// stdin by [`run`].
#[derive(Debug, Clone)]
pub struct WorkerArgs {
    /// The project's folder, `<home>/projects/<name>` (made absolute at start).
    pub project_dir: PathBuf,
}

/// How long a starting worker waits for the project's worker lock to be free.
const LOCK_PATIENCE: Duration = Duration::from_secs(10);

/// Runs the worker to completion. `Ok` = a requested shutdown or the supervisor went away.
pub fn run(args: WorkerArgs) -> Result<(), WorkerError> {
    die_with_supervisor();
    usual_open_files_limit();
    // Before any thread: into the project's cgroup pegasusd made (DESIGN.md §12 limits), and where
    // its commands go. A worker that cannot be put there does not run outside it.
    pegasus_sandbox::cgroups::CommandCgroup::from_env().map_err(WorkerError::Config)?;
    let project_dir = std::path::absolute(&args.project_dir).unwrap_or(args.project_dir);
    let home = pegasus_store::home_of_project(&project_dir)
        .ok_or_else(|| WorkerError::NotAProject(project_dir.display().to_string()))?;
    let name = project_dir
        .file_name()
        .and_then(|n| n.to_str())
        .map(str::to_string)
        .ok_or_else(|| WorkerError::NotAProject(project_dir.display().to_string()))?;
    // Launched on another host (DESIGN.md §14): the public bootstrap values are in the environment
    // and the enrollment token comes on stdin (or from a Secret's file); started by a local
    // pegasusd: the spawn token comes on stdin.
    let remote = pegasus_remote::Bootstrap::from_launch()
        .transpose()
        .map_err(|e| WorkerError::Link(e.to_string()))?;
    let mut token = String::new();
    if remote.is_none() {
        std::io::stdin()
            .lock()
            .read_line(&mut token)
            .map_err(WorkerError::Token)?;
    }
    // At most one worker serves a project (a killed predecessor's lock goes a moment after it).
    let _lock = pegasus_store::worker_lock::hold(&project_dir, LOCK_PATIENCE)?;
    logging::init(&home.logs_dir(), &name);
    // What a model-run command starts and orphans (`setsid cmd &`) is re-parented to us, so
    // `exec` can kill it when the call ends (see `pegasus_sandbox::adopted`).
    if let Err(e) = pegasus_sandbox::adopted::become_subreaper() {
        tracing::warn!("cannot become a child subreaper ({e}): commands that escape with setsid may outlive their call");
    }
    // One thread is plenty for a worker and keeps its memory small; heavy tool work will use
    // processes of its own.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(WorkerError::Runtime)?;
    let route = match remote {
        Some(bootstrap) => Route::Remote(bootstrap),
        None => Route::Local(token.trim().to_string()),
    };
    let result = runtime.block_on(serve(home, project_dir, name, route));
    if let Err(e) = &result {
        tracing::error!("worker stops: {e}");
    }
    result
}

/// Arms `PR_SET_PDEATHSIG` (SIGKILL when the parent dies) when started by pegasusd, which
/// passes its pid in `SUPERVISOR_PID_ENV`; if the parent is already someone else, pegasusd died
/// before this ran and the worker leaves at once. pegasusd does not arm it between fork and
/// exec so that it can spawn without forking its address space (see its `spawn` module).
fn die_with_supervisor() {
    let Some(expected) = std::env::var(pegasus_proto::worker::SUPERVISOR_PID_ENV)
        .ok()
        .and_then(|p| p.parse::<i32>().ok())
    else {
        return;
    };
    if nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL).is_err()
        || nix::unistd::getppid().as_raw() != expected
    {
        std::process::exit(1);
    }
}

/// Lowers the soft `RLIMIT_NOFILE` to the one pegasusd was started with, when pegasusd raised
/// its own (`OPEN_FILES_ENV`): the commands a model runs get the usual limit, as from a shell.
fn usual_open_files_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Some(soft) = std::env::var(pegasus_proto::worker::OPEN_FILES_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    else {
        return;
    };
    if let Ok((now, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        if soft < now {
            let _ = setrlimit(Resource::RLIMIT_NOFILE, soft, hard);
        }
    }
}

/// Where the worker finds the home's roles, skills and preferences.
struct Shared {
    roles: PathBuf,
    skills: PathBuf,
    preferences: PathBuf,
}

/// Where a remote worker keeps the home's files pegasusd sent it, in its project folder:
/// outside every path its commands may write (the workdir, `tmp/`, `agent.exec_writable` and
/// MCP `writable` paths, none of which may lie in the home), so a model cannot plant a role,
/// a skill or preferences there (DESIGN.md §12).
pub const REMOTE_HOME: &str = "remote-home";

/// Writes the home's files a remote worker got over its link below `dir`, in the home's own
/// layout; each name must be one plain path component (two for a skill's `<name>/SKILL.md`),
/// whatever pegasusd sent. What an earlier start left there is removed first, without following
/// a link (a link in its place is removed, never written through), and a failed removal fails
/// the start; every folder and file is then created new (`O_EXCL`, `O_NOFOLLOW`).
fn materialize(dir: &Path, files: &pegasus_proto::worker::HomeFiles) -> std::io::Result<Shared> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let plain = |c: &str| !c.is_empty() && c != "." && c != ".." && !c.contains(['/', '\\', '\0']);
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(dir)?,
        Ok(_) => std::fs::remove_file(dir)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mkdir = |d: &Path| std::fs::DirBuilder::new().mode(0o700).create(d);
    let write = |path: &Path, text: &str| -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(path)?;
        f.write_all(text.as_bytes())
    };
    mkdir(dir)?;
    let shared = Shared {
        roles: dir.join("roles"),
        skills: dir.join("skills"),
        preferences: dir.join("preferences.md"),
    };
    mkdir(&shared.roles)?;
    mkdir(&shared.skills)?;
    for (name, text) in &files.roles {
        if plain(name) {
            write(&shared.roles.join(name), text)?;
        }
    }
    for (rel, text) in &files.skills {
        if let Some((skill, "SKILL.md")) = rel.split_once('/') {
            if plain(skill) {
                let folder = shared.skills.join(skill);
                if std::fs::symlink_metadata(&folder).is_err() {
                    mkdir(&folder)?;
                }
                write(&folder.join("SKILL.md"), text)?;
            }
        }
    }
    if let Some(text) = &files.preferences {
        write(&shared.preferences, text)?;
    }
    Ok(shared)
}

/// How the worker reaches pegasusd.
enum Route {
    /// The home's worker socket, with the spawn token from stdin.
    Local(String),
    /// Mutual TLS to a pegasusd on another host (DESIGN.md §14).
    Remote(pegasus_remote::Bootstrap),
}

async fn serve(
    home: Home,
    project_dir: PathBuf,
    name: String,
    route: Route,
) -> Result<(), WorkerError> {
    let remote = matches!(route, Route::Remote(_));
    let conn = match &route {
        Route::Local(token) => {
            connection::connect(&home.worker_socket(), &name, token.clone()).await?
        }
        Route::Remote(bootstrap) => connection::connect_remote(bootstrap, &name).await?,
    };
    let (reader, mut writer, init) = (conn.reader, conn.writer, conn.init);

    // Frames out go through one queue (the agent, the model proxy and this loop all write).
    let (out, out_rx) = mpsc::unbounded_channel::<FromWorker>();
    let (notices, mut notice_rx) = mpsc::unbounded_channel::<Notice>();
    let proxy = ProxyModel::new(out.clone());
    // The model endpoints of the harnesses this worker runs (DESIGN.md §18): the harness runner
    // starts one per spawn with `relay.start(..)`.
    let relay = Relay::new(out.clone());

    // The home's roles, skills and preferences: a local worker reads the home's own; a remote
    // one (DESIGN.md §14) got them over the link and keeps them where its commands cannot write.
    let shared = match &init.home_files {
        None => Shared {
            roles: home.roles_dir(),
            skills: home.skills_dir(),
            preferences: home.preferences_file(),
        },
        Some(files) => materialize(&project_dir.join(REMOTE_HOME), files).map_err(|e| {
            WorkerError::Config(format!("cannot keep the home's files pegasusd sent: {e}"))
        })?,
    };
    // The settings come from pegasusd (the one reader of config.yml); the worker loads its own
    // project. A failure is reported, then we exit.
    let loaded = serde_json::from_str::<Config>(&init.config_json)
        .map_err(|e| WorkerError::Config(format!("the settings pegasusd sent are unreadable: {e}")))
        .and_then(|config| Ok((config, ProjectFile::load(&project_dir)?)))
        .and_then(|(config, project)| {
            // The home is never inside a project (DESIGN.md §12), whoever edited PROJECT.md.
            pegasus_store::home_guard::check_project(&home, &project_dir, &project)
                .and_then(|()| pegasus_store::home_guard::check_config(&home, &config))
                .map_err(WorkerError::Config)?;
            let mut settings = AgentSettings::from_config(
                &config,
                init.model.clone(),
                init.context_window,
                Some(name.clone()),
            );
            settings.exec_registry = Some(home.exec_registry(&name));
            settings.sandbox = Some(pegasus_sandbox::SandboxPaths {
                home: home.root().to_path_buf(),
                own_dir: project_dir.clone(),
                tmp_dir: project_dir.join("tmp"),
                writable: config
                    .agent
                    .exec_writable
                    .iter()
                    .map(PathBuf::from)
                    .collect(),
            });
            if let Some(names) = project.instruction_files() {
                settings.instruction_files = names.to_vec();
            }
            settings.roles_dir = Some(shared.roles.clone());
            settings.preferences = Some(shared.preferences.clone());
            settings.role_assignments = project.roles().clone().map_err(|e| {
                WorkerError::Config(format!("{}: {e}", project_dir.join("PROJECT.md").display()))
            })?;
            let runs = RunSettings {
                planner_model: init.model.clone(),
                summary_model: config
                    .runs
                    .summary_model
                    .clone()
                    .unwrap_or_else(|| init.model.clone()),
                review_model: config
                    .runs
                    .review_model
                    .clone()
                    .unwrap_or_else(|| init.model.clone()),
                daily_limit_usd: config.budget.daily_usd,
                max_tokens: config.agent.max_tokens,
            };
            // Resolved once, here, after the check: what the tools and the sandbox use from
            // now on cannot be moved by a link made later on its path.
            let workdir = pegasus_store::home_guard::real_path(
                Path::new("/"),
                &pegasus_store::home_guard::project_workdir(&project_dir, &project),
            );
            let sandbox = settings.sandbox.clone();
            let roles_dir = shared.roles.clone();
            let desk = Desk::open(&project_dir, &name, notices.clone())?;
            let mut agent = Agent::open(
                &desk,
                &workdir,
                project.body().to_string(),
                shared.skills.clone(),
                // The web tools under `web:`; searches go to pegasusd, which holds the key.
                ToolSet::project_tools().with(pegasus_agent::tools::web(
                    &config.web,
                    Some(Arc::new(proxy.clone())),
                )),
                Arc::new(proxy.clone()),
                settings,
            )?;
            let gate = Arc::new(Approvals::new(&desk, config.approvals.clone()));
            agent.set_approvals(gate.clone());
            let merged =
                pegasus_store::mcp::merged_mcp_servers(&config.mcp_servers, project.mcp_servers());
            pegasus_store::home_guard::check_mcp_writable(&home, &project_dir, &project, &merged)
                .map_err(WorkerError::Config)?;
            let mcp = McpHub::new(
                merged,
                &project_dir,
                &workdir,
                Some(home.exec_registry(&name)),
                sandbox.clone(),
                config.mcp.clone(),
                config.default_context_window,
            );
            // A harness as the project's (or a role's) agent (DESIGN.md §15): checked now, so a
            // missing binary or a provider of the wrong kind is one error at start.
            // It gets the project's MCP servers, run by `mcp` as for the built-in agent.
            let (kind, harnesses) = crate::harness::build(
                &config,
                &project,
                &init.model,
                &project_dir,
                &relay,
                desk.board.store(),
                Some(mcp.clone()),
            )
            .map_err(WorkerError::Config)?;
            agent.set_harnesses(kind, harnesses);
            agent.set_hooks(
                &config.hooks,
                project.hooks(),
                pegasus_agent::hooks::HookPlace {
                    project: name.clone(),
                    project_dir: project_dir.clone(),
                    workdir: workdir.clone(),
                    model: init.model.clone(),
                    sandbox: sandbox.clone(),
                    registry: Some(home.exec_registry(&name)),
                },
            );
            let ctx = ProjectCtx {
                desk,
                gate,
                sandbox,
                roles_dir,
            };
            Ok((runs, agent, mcp, ctx))
        });
    let (run_settings, agent, mcp, ctx) = match loaded {
        Ok(loaded) => loaded,
        Err(e) => {
            let _ = writer
                .write(&FromWorker::Fatal {
                    reason: e.to_string(),
                })
                .await;
            return Err(e);
        }
    };
    let mut agent = agent;
    // Messages acknowledged before a crash or a stop that no task took up become a task now,
    // before any new message is recorded (the work queue runs it first).
    if let Err(e) = agent.adopt_pending_messages() {
        tracing::error!("cannot take up the messages left unanswered by the last run: {e}");
    }
    let session = agent.session_handle();
    // The client ids of the messages taken in the last day (DESIGN.md §11), from the same lines.
    let mut sends = Sends::load(&project_dir, chrono::Utc::now());
    let writer_task = tokio::spawn(write_frames(writer, out_rx));
    let (jobs, job_rx) = mpsc::unbounded_channel::<Job>();
    let stop_flag = ctx.desk.stop.clone();
    let gate = ctx.gate.clone();
    // Boxed before it is spawned: the agent's future is ~11 KB, and `tokio::spawn` moves its
    // argument through several frames, each a copy on the main stack — pages that an idle
    // worker would then keep resident for its whole life (~60 KB of stack).
    // The model's window: the agent's first call waits for it while pegasusd is still asking
    // the server (Ready does not).
    let (window_tx, window_rx) = tokio::sync::watch::channel(Window {
        tokens: init.context_window,
        pending: init.window_pending,
    });
    let mut agent_task = tokio::spawn(Box::pin(run_jobs(
        agent,
        ctx,
        job_rx,
        out.clone(),
        mcp,
        WindowGate::new(window_rx),
    )));
    let mut barrier: Option<tokio::sync::oneshot::Receiver<()>> = None;
    let mut notices_open = true;
    let run_store = RunStore::open(&project_dir).map_err(|e| WorkerError::Config(e.to_string()))?;
    let unfinished = run_store.unfinished();
    let runs = Runs {
        engine: Arc::new(RunEngine::new(
            run_store,
            Arc::new(proxy.clone()),
            Arc::new(AgentPhases(jobs.clone())),
            home.ledger_file(),
            run_settings,
        )),
        driving: Arc::default(),
    };
    // Runs that were going when the process died resume at the phase they were in.
    match unfinished {
        Ok(unfinished) => {
            for run in unfinished {
                runs.drive(run.id);
            }
        }
        Err(e) => tracing::warn!("cannot look for unfinished runs: {e}"),
    }
    let _ = out.send(FromWorker::Ready);
    // Loading the project (settings, PROJECT.md, the session replay) freed more heap than the
    // worker keeps: give the free pages back, so an idle worker holds only what it uses. It
    // shows in the figures (docs/PERFORMANCE.md): without it an idle worker's PSS is ~50 KiB
    // higher, which takes 1,000 active projects past 600 MiB.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks glibc's own free lists; it touches no Rust-owned memory.
    unsafe {
        nix::libc::malloc_trim(0);
    }
    tracing::info!(project = %name, pid = std::process::id(), model = %init.model, "worker ready");

    // Frame reads are not cancel safe, so they run in their own task and arrive on a channel.
    let (tx, mut rx) = mpsc::channel::<Result<Option<ToWorker>, String>>(64);
    tokio::spawn(read_frames(reader, tx));
    let mut heartbeat = tokio::time::interval(Duration::from_millis(init.heartbeat_ms.max(100)));
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut state = State::Serving;
    // A remote worker's half-open link is found by its silence (pegasusd pings it every beat).
    let mut heard = tokio::time::Instant::now();
    loop {
        // Wait for the next event (see `crate::serve` for what each one does).
        let event = tokio::select! {
            ev = rx.recv() => match ev {
                Some(Ok(Some(frame))) => {
                    heard = tokio::time::Instant::now();
                    Event::Frame(frame)
                }
                Some(Ok(None)) | None => Event::Closed,
                Some(Err(e)) => Event::BadFrame(e),
            },
            _ = tokio::time::sleep_until(heard + serve::LINK_SILENCE), if remote => Event::LinkSilent,
            _ = async { if let Some(b) = barrier.as_mut() { let _ = b.await; } }, if barrier.is_some() => {
                barrier = None;
                Event::Drained
            }
            ended = &mut agent_task => Event::AgentEnded {
                panicked: matches!(ended, Err(e) if e.is_panic()),
            },
            notice = notice_rx.recv(), if notices_open => match notice {
                Some(notice) => Event::Notice(notice),
                None => {
                    notices_open = false;
                    continue;
                }
            },
            _ = heartbeat.tick() => Event::Heartbeat,
        };
        // A merge waiting for a person ran out of time: the merge step settles it.
        if matches!(event, Event::Heartbeat) && gate.detached_due() {
            let _ = jobs.send(Job::ReadyTasks);
        }
        let (next, actions) = serve::step(state, event);
        state = next;
        for action in actions {
            match action {
                Action::TakeMessage(msg) => {
                    if let Some(client_id) = msg.client_id.as_deref() {
                        let (original, same_text) = match sends.check(client_id, &msg.text) {
                            SendCheck::New => (None, true),
                            SendCheck::Repeat { original } => (Some(original), true),
                            SendCheck::Conflict { original } => (Some(original), false),
                        };
                        if let Some(original) = original {
                            // A repeat is neither recorded nor run: its sender gets the first
                            // message's id, and its reply when that is known already.
                            tracing::info!(message = %msg.id, %original, same_text, "a repeated client id");
                            let ended = same_text
                                .then(|| TaskStore::open(&project_dir, &name).ok())
                                .flatten()
                                .and_then(|tasks| sends::ended_reply(&tasks, &original));
                            let _ = out.send(FromWorker::MessageRepeated {
                                id: msg.id,
                                original: original.clone(),
                                same_text,
                            });
                            if let Some((text, answered)) = ended {
                                let _ = out.send(FromWorker::Reply {
                                    message_id: original,
                                    text,
                                    answered,
                                });
                            }
                            continue;
                        }
                    }
                    // Durable before acknowledged: the ack is the sender's proof; the client id
                    // is in the same line, so it is known exactly when the message is.
                    record_sent(
                        &session,
                        &msg.id,
                        &msg.from,
                        &msg.text,
                        msg.client_id.as_deref(),
                    )?;
                    if let Some(client_id) = &msg.client_id {
                        sends.remember(client_id, &msg.id, &msg.text, chrono::Utc::now());
                    }
                    let _ = out.send(FromWorker::MessagePersisted { id: msg.id.clone() });
                    let _ = jobs.send(Job::Message(msg));
                }
                Action::Send(frame) => {
                    let _ = out.send(frame);
                }
                Action::Answer { id, result } => proxy.complete(id, result),
                Action::SearchAnswer { id, result } => proxy.complete_search(id, result),
                Action::RelayAnswer { id, part } => relay.deliver(id, part),
                Action::LookForTasks => {
                    let _ = jobs.send(Job::ReadyTasks);
                }
                Action::DriveRun(run_id) => runs.drive(run_id),
                Action::Window(tokens) => {
                    window_tx.send_replace(Window {
                        tokens: Some(tokens),
                        pending: false,
                    });
                }
                Action::WakeApproval(id) => {
                    tracing::debug!(id, "approval answered");
                    gate.wake();
                    // A merge's answer is settled by the merge step (DESIGN.md §11 `merge: ask`).
                    let _ = jobs.send(Job::ReadyTasks);
                }
                Action::StartDraining => {
                    // A running task stops at its next turn boundary (every turn is already
                    // durable); the barrier answers once the agent is idle. The supervisor
                    // kills us if that takes longer than its shutdown timeout.
                    tracing::info!("shutdown requested");
                    stop_flag.store(true, std::sync::atomic::Ordering::SeqCst);
                    let (tx, rx) = tokio::sync::oneshot::channel();
                    let _ = jobs.send(Job::Barrier(tx));
                    barrier = Some(rx);
                }
                Action::Exit(Ok(())) => {
                    if state == State::Draining && barrier.is_none() {
                        // Drained: the last frame (ShutdownComplete) is written before we go.
                        drop(out);
                        let _ = writer_task.await;
                    } else {
                        tracing::info!("supervisor closed the connection; exiting");
                        proxy.fail_all();
                        relay.fail_all();
                    }
                    return Ok(());
                }
                Action::Exit(Err(why)) => return Err(WorkerError::Config(why)),
            }
        }
    }
}

/// The worker's link to pegasusd without its agent, for `examples/bench_agent.rs` only: the
/// real handshake, `Ready`, and the real [`ProxyModel`], its frames carried by the worker's own
/// reader and writer tasks and answered through [`serve::step`] (pings too). A benchmark started
/// by pegasusd as a project's worker (`PEGASUS_WORKER_BIN`) times model calls through it beside
/// a gateway of its own; no other code should need it.
#[doc(hidden)]
pub async fn proxy_link(
    home: &Home,
    project: &str,
    token: String,
) -> Result<Arc<dyn pegasus_agent::ChatModel>, WorkerError> {
    let conn = connection::connect(&home.worker_socket(), project, token).await?;
    let (out, out_rx) = mpsc::unbounded_channel::<FromWorker>();
    let proxy = ProxyModel::new(out.clone());
    tokio::spawn(write_frames(conn.writer, out_rx));
    let _ = out.send(FromWorker::Ready);
    let (tx, mut rx) = mpsc::channel(64);
    tokio::spawn(read_frames(conn.reader, tx));
    let answers = proxy.clone();
    tokio::spawn(async move {
        while let Some(Ok(Some(frame))) = rx.recv().await {
            for action in serve::step(State::Serving, Event::Frame(frame)).1 {
                match action {
                    Action::Send(frame) => {
                        let _ = out.send(frame);
                    }
                    Action::Answer { id, result } => answers.complete(id, result),
                    _ => {}
                }
            }
        }
        answers.fail_all();
    });
    Ok(Arc::new(proxy))
}

type Reader = pegasus_proto::FrameReader<connection::LinkRead>;
type Writer = pegasus_proto::FrameWriter<connection::LinkWrite>;

async fn read_frames(mut reader: Reader, tx: mpsc::Sender<Result<Option<ToWorker>, String>>) {
    loop {
        let ev = match reader.read::<ToWorker>().await {
            // A TLS link whose peer died says so without a close_notify: pegasusd went away,
            // which is a normal end for a worker, as the Unix socket's end of file is.
            Err(pegasus_proto::ProtoError::Io(e))
                if e.kind() == std::io::ErrorKind::UnexpectedEof
                    || e.kind() == std::io::ErrorKind::ConnectionReset =>
            {
                Ok(None)
            }
            ev => ev.map_err(|e| e.to_string()),
        };
        let end = !matches!(ev, Ok(Some(_)));
        if tx.send(ev).await.is_err() || end {
            break;
        }
    }
}

/// Writes queued frames in order; ends after `ShutdownComplete` or when the socket fails (the
/// supervisor is gone: pegasusd dying takes this process down with it anyway).
async fn write_frames(mut writer: Writer, mut rx: mpsc::UnboundedReceiver<FromWorker>) {
    while let Some(frame) = rx.recv().await {
        let last = matches!(frame, FromWorker::ShutdownComplete);
        if let Err(e) = writer.write(&frame).await {
            tracing::warn!("cannot write to pegasusd: {e}");
            break;
        }
        if last {
            break;
        }
    }
}

/// The run engine and the runs it is driving (one drive per run at a time).
struct Runs {
    engine: Arc<RunEngine>,
    driving: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
}

impl Runs {
    fn drive(&self, run_id: String) {
        if !self
            .driving
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(run_id.clone())
        {
            return tracing::info!(run = %run_id, "run already being driven");
        }
        let (engine, driving) = (self.engine.clone(), self.driving.clone());
        tokio::spawn(async move {
            match engine.drive(&run_id).await {
                Ok(run) => tracing::info!(run = %run_id, status = ?run.status, "run drive ended"),
                Err(e) => tracing::error!(run = %run_id, "run failed: {e}"),
            }
            driving
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&run_id);
        });
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// What pegasusd sends lands in the home's layout; a name that is not one plain path
    /// component is dropped, whatever pegasusd sent.
    #[test]
    fn home_files_land_in_the_homes_layout_and_nothing_escapes() {
        let dir = tempfile::tempdir().unwrap();
        let files = pegasus_proto::worker::HomeFiles {
            roles: vec![
                ("coder.md".into(), "role".into()),
                ("../escape.md".into(), "no".into()),
            ],
            skills: vec![
                ("deploy/SKILL.md".into(), "skill".into()),
                ("../x/SKILL.md".into(), "no".into()),
                ("deploy/other.sh".into(), "no".into()),
            ],
            preferences: Some("prefs".into()),
        };
        let at = dir.path().join(REMOTE_HOME);
        let shared = materialize(&at, &files).unwrap();
        assert_eq!(
            std::fs::read_to_string(shared.roles.join("coder.md")).unwrap(),
            "role"
        );
        assert_eq!(
            std::fs::read_to_string(shared.skills.join("deploy/SKILL.md")).unwrap(),
            "skill"
        );
        assert_eq!(
            std::fs::read_to_string(&shared.preferences).unwrap(),
            "prefs"
        );
        assert!(!dir.path().join("escape.md").exists());
        assert!(!at.join("x").exists());
        assert!(!shared.skills.join("deploy/other.sh").exists());
    }

    /// A link left where the next start writes is removed, never written through.
    #[test]
    fn a_link_in_place_of_the_home_files_is_removed_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::create_dir_all(victim.join("roles")).unwrap();
        std::fs::write(victim.join("roles/coder.md"), "session").unwrap();
        let at = dir.path().join(REMOTE_HOME);
        std::os::unix::fs::symlink(&victim, &at).unwrap();
        let files = pegasus_proto::worker::HomeFiles {
            roles: vec![("coder.md".into(), "role".into())],
            skills: vec![],
            preferences: None,
        };
        let shared = materialize(&at, &files).unwrap();
        assert!(!std::fs::symlink_metadata(&at)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(
            std::fs::read_to_string(shared.roles.join("coder.md")).unwrap(),
            "role"
        );
        assert_eq!(
            std::fs::read_to_string(victim.join("roles/coder.md")).unwrap(),
            "session"
        );
    }
}
