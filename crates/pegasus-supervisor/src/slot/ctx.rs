//! What a slot uses of the daemon, and nothing else: [`SlotCtx`], shared by every slot and
//! made once when the daemon starts. Where a project's worker runs ([`SlotCtx::launcher_of`])
//! is decided here, before each start.

use super::{Launch, SlotEvent};
use crate::{
    activity::Activity, bus::EventBus, limits::Limits, pending::PendingSpawns,
    supervisor::MainInbox, sweeper::Sweeper, watchdog::Watchdogs,
};
use pegasus_llm::Gateway;
use pegasus_store::{Config, Home, ProjectRegistry};
use std::{collections::HashMap, path::PathBuf, sync::Arc};
use tokio::sync::mpsc;

/// Why a project's worker is not started now.
#[derive(Debug)]
pub(crate) enum StartError {
    /// Something that may pass (a missing client, a config to fix): counted like a crash.
    Crash(String),
    /// The project must not start as it is (DESIGN.md §12): not retried until `project resume`.
    Refused(String),
}

/// What every slot uses of the daemon: the home, the settings, the gateway, the bus and the
/// few registries a worker's life touches.
pub(crate) struct SlotCtx {
    pub home: Home,
    pub config: Config,
    /// `config`, as the JSON every worker gets in its `Init` (pegasusd is the one reader of
    /// config.yml).
    pub config_json: String,
    pub worker_bin: PathBuf,
    /// Every model call of a worker goes through it.
    pub gateway: Gateway,
    /// Where a worker's state, events and crashes are published.
    pub bus: EventBus,
    /// Whether a task runs (an idle worker may be suspended).
    pub activity: Arc<Activity>,
    /// Asked by a worker's model calls whether its task is stopped.
    pub watchdogs: Arc<Watchdogs>,
    /// Every project as its PROJECT.md says now (its limits).
    pub projects: Arc<ProjectRegistry>,
    /// Per-project limits (DESIGN.md §12): the home's cgroups, or why there are none.
    pub limits: Arc<Limits>,
    /// Sweeps of escaped processes, asked for after each worker's end.
    pub sweeper: Arc<Sweeper>,
    /// The spawns waiting for their worker's hello.
    pub spawns: Arc<PendingSpawns>,
    /// Workers on other hosts (`workers.listen`), when configured.
    pub remote: Option<Arc<crate::remote::Remote>>,
    /// The Kubernetes launchers, by name (DESIGN.md §14).
    pub pods: HashMap<String, Arc<pegasus_kube::PodLauncher>>,
    /// The MainAgent's inbox (a worker's replies and notifies).
    pub main: MainInbox,
    /// What the slots ask of the daemon (see [`SlotEvent`]).
    pub slot_events: mpsc::UnboundedSender<SlotEvent>,
    /// The daemon's shutdown: once cancelled, no slot starts a worker again, and a worker that
    /// has not said hello yet is stopped at once (its socket is already closed).
    pub stopping: tokio_util::sync::CancellationToken,
}

impl SlotCtx {
    /// Tells the daemon what a slot asks of it.
    pub fn slot_event(&self, event: SlotEvent) {
        let _ = self.slot_events.send(event);
    }

    /// The model a project's worker uses: its PROJECT.md `model`, else the default.
    pub fn project_model(&self, name: &str) -> String {
        let model = self.projects.model(name).unwrap_or_default();
        self.gateway.resolve_model(&model)
    }

    /// Where project `name`'s worker runs: `None` for this machine (`local`), else the name of
    /// its launcher and how it launches; an error says what to fix, and whether to retry.
    ///
    /// Checked first, the project is never started (a [`StartError::Refused`]) when one of its
    /// paths reaches the home (DESIGN.md §12: a PROJECT.md edited by hand), or when it is a remote
    /// project whose PROJECT.md changed its launcher, workdir or commands outside pegasusd
    /// (its folder is on storage the worker's host writes): a remote project is launched only
    /// where pegasusd's own record says (`pegasus_store::remote_record`), kept at its first
    /// launch.
    pub fn launcher_of(&self, name: &str) -> Result<Option<(String, Launch)>, StartError> {
        use pegasus_store::launcher::{LauncherConfig, LOCAL};
        use pegasus_store::remote_record::{self, RemoteRecord};
        let dir = self.home.project_dir(name);
        // An unloadable PROJECT.md is reported by the worker that loads it.
        let file = pegasus_store::ProjectFile::load(&dir).ok();
        if let Some(f) = &file {
            pegasus_store::home_guard::check_project(&self.home, &dir, f)
                .map_err(StartError::Refused)?;
        }
        let record = remote_record::read(&self.home, name).map_err(StartError::Refused)?;
        let said = file
            .as_ref()
            .and_then(|p| p.launcher().map(str::to_string))
            .unwrap_or_else(|| self.config.default_launcher.clone());
        let launcher = match (&record, &file) {
            (Some(rec), Some(f)) => {
                let changed = rec.changed(&said, f);
                if !changed.is_empty() {
                    return Err(StartError::Refused(format!(
                        "PROJECT.md of remote project {name} changed `{}` outside pegasusd (its worker's host can write that folder); if you made that change, remove {} and run `pegasusctl project resume {name}`",
                        changed.join("`, `"),
                        remote_record::path(&self.home, name).display()
                    )));
                }
                rec.launcher.clone()
            }
            // Unreadable PROJECT.md: where the record says; the worker reports the file.
            (Some(rec), None) => rec.launcher.clone(),
            (None, _) => said,
        };
        if launcher == LOCAL {
            return Ok(None);
        }
        let launch = match self.config.launchers.get(&launcher) {
            Some(LauncherConfig::Command(c)) => Launch::Command(c.clone()),
            Some(LauncherConfig::Kubernetes(_)) => match self.pods.get(&launcher) {
                Some(pods) => Launch::Pod(pods.clone()),
                None => {
                    return Err(StartError::Crash(format!(
                        "launcher {launcher} has no Kubernetes client; see the pegasusd log"
                    )))
                }
            },
            None => return Err(StartError::Crash(format!(
                "project {name} names launcher {launcher}, which config.yml does not have under `launchers:`; fix PROJECT.md or config.yml, then `pegasusctl project resume {name}`"
            ))),
        };
        if let (None, Some(f)) = (&record, &file) {
            remote_record::write(&self.home, name, &RemoteRecord::of(&launcher, f)).map_err(
                |e| {
                    StartError::Crash(format!(
                        "cannot keep the record of remote project {name}: {e}"
                    ))
                },
            )?;
        }
        Ok(Some((launcher, launch)))
    }
}
