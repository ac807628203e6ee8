//! `pegasusctl project ...`: list, show, create, the lifecycle verbs and send.
//!
//! PROJECT.md is the durable intent: a lifecycle verb writes it first and then starts or stops
//! the worker to match, so a crash in between leaves a file that says what to do on boot.

use crate::{
    activity::Activity,
    approval_counts::ApprovalCounts,
    error::RequestError,
    limits::Limits,
    slot::{Delivery, SlotCmd},
    supervisor::Slots,
};
use pegasus_llm::Gateway;
use pegasus_proto::{
    ctl::{CreateProject, LifecycleVerb, ProjectFilter, ProjectInfo},
    Channel,
};
use pegasus_store::{Config, Home, NewProject, ProjectFile, ProjectRegistry, ProjectStatus, Verb};
use std::{path::PathBuf, sync::Arc};
use tokio::sync::{oneshot, Mutex};

/// The longest client id of a send (DESIGN.md §11) kept with its message.
const MAX_CLIENT_ID: usize = 200;

/// Runs file work that fsyncs on the blocking pool ([`pegasus_fs::blocking`]), so a slow disk
/// never stalls the daemon.
async fn off_runtime<T: Send + 'static>(
    f: impl FnOnce() -> pegasus_store::Result<T> + Send + 'static,
) -> Result<T, RequestError> {
    match pegasus_fs::blocking(f).await {
        Ok(done) => done.map_err(RequestError::from),
        Err(e) => Err(RequestError::failed_inside("the write", e)),
    }
}

/// What the listing rows (`project list`, `show`, `status`) are made of: the projects' files,
/// the spend, the live workers with their activity, waiting approvals and limits.
pub(crate) struct Listing {
    pub home: Home,
    pub config: Config,
    /// Every project as its PROJECT.md says now: pegasusd's one reader of those files (listing
    /// rows, budgets, models), shared with the gateway.
    pub projects: Arc<ProjectRegistry>,
    /// The spend per project, the default model, the fallback models and which answered.
    pub gateway: Gateway,
    pub slots: Arc<Slots>,
    /// What each worker is doing now (from the bus).
    pub activity: Arc<Activity>,
    /// Waiting approvals per project.
    pub approval_counts: Arc<ApprovalCounts>,
    /// Per-project limits (DESIGN.md §12): the home's cgroups, or why there are none.
    pub limits: Arc<Limits>,
}

impl Listing {
    /// Every project as listings show it: the files, the live worker and its activity, the spend.
    pub fn infos(&self) -> Result<Vec<ProjectInfo>, RequestError> {
        // Rows re-read only where a PROJECT.md changed; spend from the gateway's running totals
        // (the ledger file is read once, at start).
        let mut infos = self
            .projects
            .rows(|name| self.gateway.spent_by_project(name))?;
        self.fill_live(&mut infos);
        // The model in use: a project that names none runs on the default model.
        let default = self.gateway.resolve_model("");
        for info in infos.iter_mut().filter(|i| i.error.is_none()) {
            if info.model.as_deref().is_none_or(|m| m.trim().is_empty()) {
                info.model = Some(default.clone());
            }
        }
        Ok(infos)
    }

    /// Copies the live facts (worker, its state, its running task and stage) into listing rows.
    fn fill_live(&self, infos: &mut [ProjectInfo]) {
        self.slots.fill(infos);
        self.activity.fill(infos);
        self.approval_counts.fill(infos);
        // DESIGN.md §5 fallback models: the list in force and which answered lately.
        let served = self.gateway.fallbacks_served(None);
        let default = self.gateway.fallback_models(None);
        for info in infos.iter_mut() {
            if info.error.is_none() {
                // The row holds the project's own list, as its PROJECT.md was just read: no
                // second look at each file.
                let own = info.fallback_models.take();
                info.fallback_models = Some(own.unwrap_or_else(|| default.clone()));
            }
            info.fallbacks = served
                .iter()
                .filter(|f| f.project == info.name)
                .cloned()
                .collect();
        }
    }

    /// Adds each project's limits (DESIGN.md §12) and whether they apply to listing rows: for
    /// `project list` and `show`, not `status` (one more look at each PROJECT.md).
    fn fill_limits(&self, infos: &mut [ProjectInfo]) {
        use pegasus_store::launcher::LOCAL;
        for info in infos.iter_mut().filter(|i| i.status.is_some()) {
            let problem = self.slots.limits_problem(&info.name);
            let project = self.projects.project(&info.name);
            let limits = Limits::effective(&self.config, project.as_deref());
            let launcher = project.as_deref().and_then(|p| p.launcher());
            let remote = launcher.unwrap_or(&self.config.default_launcher) != LOCAL;
            info.limits = Some(self.limits.info(&limits, remote, problem.as_deref()));
        }
    }
}

/// `project show NAME`.
pub(crate) fn info(listing: &Listing, name: &str) -> Result<ProjectInfo, RequestError> {
    pegasus_store::validate_name(name)?;
    let mut info = listing
        .infos()?
        .into_iter()
        .find(|p| p.name == name)
        .ok_or_else(|| RequestError::ProjectNotFound(name.to_string()))?;
    let dir = listing.home.project_dir(name);
    info.unmerged_branches = pegasus_store::ProjectFile::load(&dir)
        .ok()
        .and_then(|f| pegasus_tasks::repo_paths(&f, &dir, pegasus_code::git::repo_rev).ok())
        .filter(|repos| !repos.is_empty())
        .map(|repos| pegasus_code::unmerged_lines(&repos, &pegasus_tasks::over_tasks(&dir)))
        .unwrap_or_default();
    listing.fill_limits(std::slice::from_mut(&mut info));
    Ok(info)
}

/// `project list [--status S]`; `invalid` lists the projects whose PROJECT.md does not load.
pub(crate) fn list(
    listing: &Listing,
    status: Option<ProjectFilter>,
) -> Result<Vec<ProjectInfo>, RequestError> {
    let mut infos = listing.infos()?;
    if let Some(filter) = status {
        infos.retain(|p| filter.keeps(p));
    }
    listing.fill_limits(&mut infos);
    Ok(infos)
}

/// `project create`: folders + PROJECT.md, then a worker; under `lifecycle_lock`, which
/// serialises every change of a PROJECT.md with the slot change that goes with it.
pub(crate) async fn create(
    listing: &Listing,
    lifecycle_lock: &Mutex<()>,
    req: CreateProject,
) -> Result<ProjectInfo, RequestError> {
    // The MainAgent's events, spend and search results carry the name `main`: a project of
    // that name could not be told from it.
    if req.name == crate::main_agent::MAIN {
        return Err(RequestError::refused(
            "the name `main` is the MainAgent's (talk to it with `pegasusctl chat`): choose another project name",
        ));
    }
    let guard = lifecycle_lock.lock().await;
    let new = NewProject {
        name: req.name.clone(),
        goal: req.goal,
        background: req.background,
        constraints: req.constraints,
        model: req.model,
        workdir: req.workdir.map(PathBuf::from),
    };
    let home = listing.home.clone();
    off_runtime(move || pegasus_store::create_project(&home, &new, chrono::Utc::now())).await?;
    tracing::info!(project = %req.name, "project created");
    listing.slots.start(&req.name);
    drop(guard);
    info(listing, &req.name)
}

/// The wire verb as the store's lifecycle state machine knows it.
pub(crate) fn store_verb(verb: LifecycleVerb) -> Verb {
    match verb {
        LifecycleVerb::Suspend => Verb::Suspend,
        LifecycleVerb::Resume => Verb::Resume,
        LifecycleVerb::Complete => Verb::Complete,
        LifecycleVerb::Archive => Verb::Archive,
    }
}

/// One lifecycle verb (DESIGN.md §4): PROJECT.md first, then the worker; under `lifecycle_lock`.
pub(crate) async fn lifecycle(
    listing: &Listing,
    lifecycle_lock: &Mutex<()>,
    name: &str,
    verb: Verb,
) -> Result<ProjectInfo, RequestError> {
    pegasus_store::validate_name(name)?;
    let guard = lifecycle_lock.lock().await;
    let dir = listing.home.project_dir(name);
    if !dir.join("PROJECT.md").exists() {
        return Err(RequestError::ProjectNotFound(name.to_string()));
    }
    let mut project = ProjectFile::load(&dir)
        .map_err(|e| RequestError::refused(format!("project {name} is invalid: {e}")))?;
    // `resume` of an active project whose worker gave up (crash loop) restarts the worker;
    // any other resume of an active project is refused by the state machine below.
    if verb == Verb::Resume
        && project.status() == ProjectStatus::Active
        && listing.slots.is_crash_looping(name)
    {
        if let Some(cmd) = listing.slots.cmd(name) {
            let _ = cmd.send(SlotCmd::Restart).await;
            tracing::info!(project = %name, "resumed after crash loop");
            drop(guard);
            return info(listing, name);
        }
    }
    let to = project.apply(verb, chrono::Utc::now())?;
    off_runtime(move || project.save(&dir)).await?;
    tracing::info!(project = %name, %verb, status = %to, "lifecycle");
    if to == ProjectStatus::Active {
        listing.slots.start(name);
    } else {
        listing.slots.stop(name).await;
    }
    drop(guard);
    info(listing, name)
}

/// `project send`: deliver a message from `from`. Answered with the message id once the
/// worker has it durably, or — with `wait` — with the project agent's reply. A `client_id`
/// the project's worker already has (DESIGN.md §11) is answered with the first message's id (and
/// its reply) without running anything again; with another text, refused as a conflict.
pub(crate) async fn send(
    slots: &Slots,
    projects: &ProjectRegistry,
    name: &str,
    from: Channel,
    text: String,
    wait: bool,
    client_id: Option<String>,
) -> Result<(String, Option<String>), RequestError> {
    if let Some(c) = &client_id {
        if c.is_empty() || c.len() > MAX_CLIENT_ID || c.chars().any(char::is_control) {
            return Err(RequestError::Store(pegasus_store::StoreError::Invalid(format!(
                "a message id (--id, Idempotency-Key) must be 1 to {MAX_CLIENT_ID} bytes without control characters"
            ))));
        }
    }
    pegasus_store::validate_name(name)?;
    let Some(cmd) = slots.cmd(name) else {
        let Some(project) = projects.get(name) else {
            return Err(RequestError::ProjectNotFound(name.to_string()));
        };
        return Err(RequestError::refused(match project {
            Ok(p) if p.status() == ProjectStatus::Suspended => format!(
                "cannot send to project {name}: it is suspended; resume it with `pegasusctl project resume {name}`"
            ),
            Ok(p) => format!("cannot send to project {name}: it is {}", p.status()),
            Err(e) => format!("cannot send to project {name}: it is invalid: {e}"),
        }));
    };
    let (persisted, persisted_rx) = oneshot::channel();
    let (answer, answer_rx) = if wait {
        let (tx, rx) = oneshot::channel();
        (Some(tx), Some(rx))
    } else {
        (None, None)
    };
    let delivery = Delivery {
        from,
        text,
        client_id,
        persisted,
        answer,
    };
    cmd.send(SlotCmd::Deliver(delivery))
        .await
        .map_err(|_| RequestError::unavailable(format!("project {name} is stopping; try again")))?;
    let id = persisted_rx.await.map_err(|_| {
        RequestError::unavailable(format!(
            "project {name} stopped before taking the message; try again"
        ))
    })??;
    let reply = match answer_rx {
        Some(rx) => Some(rx.await.map_err(|_| {
            RequestError::unavailable(format!("project {name} stopped before answering"))
        })??),
        None => None,
    };
    Ok((id, reply))
}
