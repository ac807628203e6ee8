//! The daemon's life from start to exit: lock, layout, config, listeners, restart scan, wait for
//! a stop, stop every worker, exit.
//!
//! One runtime (two threads) runs everything: the slots, the worker socket and its
//! connections, the workers' model calls, the control socket, the dashboard, the MainAgent, the
//! bus consumers and the sweeps.

use crate::{
    control,
    front_door::{Client, FrontDoor},
    slot::SlotEvent,
    spawn,
    supervisor::Supervisor,
    worker_server, PidLock, SupervisorError,
};
use interprocess::{
    local_socket::{tokio::Listener, GenericFilePath, ListenerOptions, ToFsName},
    os::unix::local_socket::ListenerOptionsExt,
};
use pegasus_proto::{
    ctl::{CtlRequest, CtlResponse, LifecycleVerb},
    Channel,
};
use pegasus_store::StoreError;
use pegasus_store::{Config, Home};
use std::{
    path::{Path, PathBuf},
    time::Duration,
};
use tokio::signal::unix::{signal, SignalKind};

/// What `pegasusd` is started with.
#[derive(Default)]
pub struct DaemonOptions {
    /// `--home`; else `$PEGASUS_HOME`, else the XDG data dir.
    pub home: Option<PathBuf>,
    /// `--config`; else `<home>/config.yml` (missing = defaults).
    pub config: Option<PathBuf>,
    /// What runs beside the core through its front door (the dashboard, Telegram).
    pub clients: Vec<Client>,
}

/// Runs the daemon in the foreground until SIGTERM, SIGINT or `pegasusctl stop`.
pub fn run(opts: DaemonOptions) -> Result<(), SupervisorError> {
    let home = Home::resolve(opts.home)?;
    home.check_socket_paths()?;
    // The config is read and checked before anything is created on disk: a refused config
    // leaves no home skeleton and no pid file behind.
    let config_path = match opts.config {
        Some(path) => {
            if !path.exists() {
                return Err(SupervisorError::io(
                    "cannot read config",
                    &path,
                    std::io::Error::new(std::io::ErrorKind::NotFound, "no such file; fix --config"),
                ));
            }
            std::path::absolute(&path).unwrap_or(path)
        }
        None => home.config_file(),
    };
    let config = Config::load(&config_path)?;
    // A path the projects' commands may write that reaches the home would hand them its files.
    pegasus_store::home_guard::check_config(&home, &config).map_err(StoreError::Invalid)?;
    std::fs::create_dir_all(home.root())
        .map_err(|e| SupervisorError::io("cannot create home", home.root(), e))?;
    // The lock comes before anything that touches the sockets: a second daemon must not unlink
    // the first one's live socket.
    let _lock = PidLock::acquire(&home.pid_file(), &home.root().display().to_string())?;
    home.ensure_layout()?;
    // Before any thread exists: the model's commands run as this user, so pegasusd's memory
    // and environment must not be readable through /proc (a non-dumpable process's
    // /proc/<pid>/environ and mem belong to root), and the keys leave the environment so no
    // child inherits them.
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        eprintln!("pegasusd: cannot make itself non-dumpable ({e}); API keys may be readable by local processes");
    }
    // Orphans of what model-run commands start are re-parented to us, not to init, so they
    // can be found and killed (see `pegasus_sandbox::adopted`).
    if let Err(e) = pegasus_sandbox::adopted::become_subreaper() {
        eprintln!("pegasusd: cannot become a child subreaper ({e}); commands that escape with setsid may outlive their worker");
    }
    // Every listener's caps are made to fit what this gives (crate::gate).
    let open_files = crate::gate::raise_open_files_limit();
    let mut taken = pegasus_llm::take_keys_from_env(&config);
    // The clients' secrets (the Telegram bot token, the e-mail passwords), likewise: read
    // once, then gone from the environment; a client gets them through its front door.
    let mut secrets = std::collections::HashMap::new();
    let mut names = vec![
        config.telegram.token_env.clone(),
        // The Asana token too (DESIGN.md §17): pegasusd syncs the boards, never a worker.
        config.asana.token_env.clone(),
    ];
    // The e-mail channel's passwords (DESIGN.md §17), likewise.
    names.extend(config.email.iter().flat_map(|e| e.password_envs()));
    for name in names {
        if let Some(token) = std::env::var(&name).ok().filter(|t| !t.trim().is_empty()) {
            secrets.insert(name.clone(), token);
            taken.push(name);
        }
    }
    // The web search backend's key (Brave's), likewise (DESIGN.md §16 "The web").
    taken.extend(pegasus_web::search::take_key_from_env(&config.web));
    for name in &taken {
        scrub_env(name);
    }
    pegasus_log::init_daemon(&home.logs_dir(), "pegasusd.log");
    match open_files {
        Ok((before, after)) if after > before => {
            tracing::info!("open files limit raised from {before} to {after} (the hard limit)")
        }
        Ok((_, after)) => tracing::debug!("open files limit: {after} (already the hard limit)"),
        Err(e) => tracing::warn!(
            "cannot raise the open files limit ({e}); raise LimitNOFILE= in the service unit"
        ),
    }
    if !taken.is_empty() {
        tracing::info!(variables = ?taken, "API keys read and removed from the environment");
    }
    pegasus_sandbox::warn_if_unsupported();
    let worker_bin = spawn::worker_binary();
    if !worker_bin.is_file() {
        return Err(SupervisorError::WorkerBinary(worker_bin));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| SupervisorError::io("cannot start the runtime in", home.root(), e))?;
    runtime.block_on(serve(home, config, worker_bin, secrets, opts.clients))
}

fn listen(path: &Path) -> Result<Listener, SupervisorError> {
    // We hold the PID lock, so a socket file still here was left by a daemon that died.
    match std::fs::remove_file(path) {
        Ok(()) => tracing::info!("removed stale socket {}", path.display()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(SupervisorError::io("cannot remove stale socket", path, e)),
    }
    let name = path
        .to_fs_name::<GenericFilePath>()
        .map_err(|e| SupervisorError::io("bad socket path", path, e))?;
    ListenerOptions::new()
        .name(name)
        .mode(0o600)
        .create_tokio()
        .map_err(|e| SupervisorError::io("cannot listen on", path, e))
}

async fn serve(
    home: Home,
    config: Config,
    worker_bin: PathBuf,
    secrets: std::collections::HashMap<String, String>,
    clients: Vec<Client>,
) -> Result<(), SupervisorError> {
    let worker_listener = listen(&home.worker_socket())?;
    let control_listener = listen(&home.control_socket())?;
    let gateway = pegasus_llm::Gateway::new(&home, &config).map_err(SupervisorError::Llm)?;
    gateway.set_task_budgets(task_budgets(&home));
    // Workers on other hosts (DESIGN.md §14): the listener and the certificate authority.
    let (remote, remote_listener) = match &config.workers.listen {
        Some(listen) => {
            let (addr, listener) = crate::remote::bind(listen)
                .await
                .map_err(SupervisorError::Remote)?;
            let remote = crate::remote::Remote::open(&home, &config, addr)
                .map_err(SupervisorError::Remote)?;
            let remote = std::sync::Arc::new(remote);
            tracing::info!(%addr, "listening for remote workers (mutual TLS)");
            (Some(remote), Some(listener))
        }
        None => (None, None),
    };
    // Once every listener is bound (a refused start stays one line), before any worker: the
    // home's cgroups, and those a killed daemon left swept.
    let limits = std::sync::Arc::new(crate::limits::Limits::setup(&home));
    let pods = crate::remote::pod_launchers(&home, &config)
        .await
        .map_err(SupervisorError::Remote)?;
    let (main_tx, main_rx) = tokio::sync::mpsc::unbounded_channel();
    let (slot_tx, slot_rx) = tokio::sync::mpsc::unbounded_channel();
    let (sup, background) = Supervisor::new(
        home.clone(),
        config,
        worker_bin,
        gateway,
        crate::supervisor::MainInbox::new(main_tx),
        slot_tx,
        crate::remote::Elsewhere {
            remote: remote.clone(),
            pods,
        },
        limits.clone(),
    );
    let door = FrontDoor::new(&sup, secrets);
    let slot_events = tokio::spawn(on_slot_events(door.clone(), slot_rx));
    let main_agent = crate::main_agent::start(
        crate::main_agent::MainParts {
            home: &sup.home,
            config: &sup.config,
            gateway: sup.gateway.clone(),
            bus: sup.bus.clone(),
            held: sup.main_held.clone(),
            shutdown: sup.shutdown.clone(),
        },
        &door,
        main_rx,
    );
    sup.bus
        .observe_weak(&sup.listing.activity, crate::activity::Activity::apply);
    sup.bus.observe_weak(
        &sup.approvals.counts,
        crate::approval_counts::ApprovalCounts::apply,
    );
    crate::watchdog::observe(&sup.bus, &background.watchdogs, sup.main.clone());
    let timer = crate::watchdog::Timer {
        watchdogs: background.watchdogs.clone(),
        home: home.clone(),
        main: sup.main.clone(),
        slots: sup.slots.clone(),
    };
    let watchdog = tokio::spawn(crate::watchdog::run(timer, sup.shutdown.clone()));
    let crash_notices = crate::crash_notices::start(
        &sup.config.notify,
        &sup.bus,
        sup.main.clone(),
        sup.shutdown.clone(),
    );
    let log_pruner = tokio::spawn(crate::log_prune::run(
        home.logs_dir(),
        sup.config.logs.clone(),
        sup.shutdown.clone(),
    ));
    let sweeper = tokio::spawn(crate::sweeper::run(
        background.sweeper.clone(),
        sup.shutdown.clone(),
    ));
    let mut sigterm = signal(SignalKind::terminate())
        .map_err(|e| SupervisorError::io("cannot watch SIGTERM in", home.root(), e))?;
    let mut sigint = signal(SignalKind::interrupt())
        .map_err(|e| SupervisorError::io("cannot watch SIGINT in", home.root(), e))?;
    let workers = tokio::spawn(worker_server::serve(
        background.spawns.clone(),
        sup.shutdown.clone(),
        worker_listener,
    ));
    let remotes = remote.zip(remote_listener).map(|(remote, l)| {
        let (spawns, shutdown) = (background.spawns.clone(), sup.shutdown.clone());
        tokio::spawn(crate::remote::serve(remote, spawns, shutdown, l))
    });
    sup.restart_scan()?;
    let scheduler = tokio::spawn(crate::scheduler::run(door.clone()));
    let approval_clock = tokio::spawn(crate::approval_clock::run(
        sup.approvals.clock.clone(),
        sup.approvals.counts.clone(),
        sup.slots.clone(),
        sup.shutdown.clone(),
    ));
    let controls = tokio::spawn(control::serve(door.clone(), control_listener));
    let clients: Vec<_> = clients
        .into_iter()
        .filter_map(|start| start(door.clone()))
        .map(tokio::spawn)
        .collect();
    tracing::info!(pid = std::process::id(), home = %home.root().display(), "pegasusd serving");

    tokio::select! {
        _ = sigterm.recv() => tracing::info!("SIGTERM: stopping"),
        _ = sigint.recv() => tracing::info!("SIGINT: stopping"),
        _ = sup.shutdown.cancelled() => {}
    }
    // One token stops everything that takes new work (accept loops, idle connections,
    // followers, the MainAgent after its current run, the watchdog's timer); then every worker
    // is stopped gracefully, in parallel.
    crate::handlers::stop::mark_stopping(&sup.home);
    sup.shutdown.cancel();
    let drain = Duration::from_secs_f64(sup.config.workers.shutdown_timeout_s);
    let (_, main_drained) = tokio::join!(
        sup.slots.stop_all(),
        tokio::time::timeout(drain, main_agent)
    );
    if main_drained.is_err() {
        tracing::warn!("the MainAgent did not finish its run within {drain:?}; stopping anyway");
    }
    // What the last workers' commands left behind: one scan after they are all gone.
    crate::sweeper::sweep_now().await;
    limits.close();
    for task in [
        workers,
        controls,
        watchdog,
        crash_notices,
        sweeper,
        log_pruner,
        scheduler,
        approval_clock,
        slot_events,
    ]
    .into_iter()
    .chain(remotes)
    .chain(clients)
    {
        let _ = tokio::time::timeout(Duration::from_secs(1), task).await;
    }
    for path in [home.control_socket(), home.worker_socket()] {
        let _ = std::fs::remove_file(path);
    }
    tracing::info!("pegasusd stopped");
    Ok(())
}

/// Does what the slots ask (see [`SlotEvent`]) through the front door, as any client would,
/// each in its own task: a suspend waits for the very slot that asked to stop.
async fn on_slot_events(
    door: FrontDoor,
    mut events: tokio::sync::mpsc::UnboundedReceiver<SlotEvent>,
) {
    loop {
        let event = tokio::select! {
            ev = events.recv() => ev,
            _ = door.shutdown().cancelled() => None,
        };
        // Every slot is gone, or the daemon stops.
        let Some(event) = event else {
            return;
        };
        match event {
            SlotEvent::Idle(name) => {
                let door = door.clone();
                tokio::spawn(async move {
                    // The project's own slot asks.
                    let from = Channel::Project(name.clone());
                    let suspend = CtlRequest::ProjectLifecycle {
                        name: name.clone(),
                        verb: LifecycleVerb::Suspend,
                    };
                    match door.request(&from, suspend).await {
                        CtlResponse::Project(_) => {
                            tracing::info!(project = %name, "suspended: idle (workers.idle_suspend_s)")
                        }
                        refused => tracing::warn!(
                            project = %name,
                            "idle suspend failed: {}",
                            crate::front_door::refusal(refused)
                        ),
                    }
                });
            }
        }
    }
}

/// Removes variable `name` from the environment and overwrites its value where the kernel
/// shows it. `/proc/<pid>/environ` reads the process's *initial* environment block, which
/// `remove_var` does not touch; so the value's bytes are zeroed in place first. Only safe before
/// any other thread exists (nothing else may read the environment meanwhile).
fn scrub_env(name: &str) {
    extern "C" {
        static mut environ: *mut *mut nix::libc::c_char;
    }
    let prefix = format!("{name}=");
    // SAFETY: called from `run` before the runtime, the logger or any other thread starts, so
    // nothing reads or changes the environment concurrently; `environ` is the C library's
    // NUL-terminated array of NUL-terminated strings, and each string's bytes up to its NUL
    // are writable (they live in the initial stack block or in memory `setenv` allocated).
    unsafe {
        let mut entry = environ;
        while !entry.is_null() && !(*entry).is_null() {
            let s = std::ffi::CStr::from_ptr(*entry).to_bytes();
            if s.starts_with(prefix.as_bytes()) {
                let value = (*entry).add(prefix.len());
                std::ptr::write_bytes(value, 0, s.len() - prefix.len());
            }
            entry = entry.add(1);
        }
    }
    std::env::remove_var(name);
}

/// A task's own spending cap, from its frozen spec (an Asana task's Max Cost, DESIGN.md §17),
/// read from its file at its first call and remembered: a frozen spec never changes.
fn task_budgets(home: &Home) -> pegasus_llm::TaskBudgets {
    let home = home.clone();
    let known = std::sync::Mutex::new(std::collections::HashMap::<String, Option<f64>>::new());
    std::sync::Arc::new(move |project: &str, task: &str| {
        if let Some(b) = known.lock().ok().and_then(|m| m.get(task).copied()) {
            return b;
        }
        let read = pegasus_tasks::TaskStore::open(&home.project_dir(project), project)
            .and_then(|s| s.get(task));
        let Ok(t) = read else {
            return None;
        };
        let budget = t.spec.and_then(|s| s.budget_usd);
        if let Ok(mut m) = known.lock() {
            m.insert(task.to_string(), budget);
        }
        budget
    })
}
