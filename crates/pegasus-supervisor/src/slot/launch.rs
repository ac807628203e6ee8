//! A worker on another host (DESIGN.md §14): started by a launcher, supervised by its link. The
//! launch itself only starts something — a command (`ssh`, `ip netns exec`, ...) or a Pod —
//! with the bootstrap values; the worker then connects back over mutual TLS and says the usual
//! hello, and from there on [`super::connected`] supervises it like a local one.
//!
//! Rules of a launch: none while the project's worker lock is held (the last worker may still
//! run where pegasusd cannot see it); one one-time token per launch; a launch that never
//! connects backs off without counting towards crash-looping; the launcher command's own exit
//! is not a crash, a pod's end is (with the cluster's reason).

use super::{life::Event, process::WorkerProcess, Outcome, Slot, SlotCmd};
use crate::spawn;
use pegasus_kube::{LaunchedPod, PodEnd, PodLauncher};
use pegasus_proto::WorkerState;
use pegasus_store::launcher::{expand_argv, CommandLauncher, LaunchValues};
use std::{sync::Arc, time::Duration};
use tokio::{
    sync::mpsc,
    time::{sleep_until, Instant},
};
use tokio_util::sync::CancellationToken;

/// How long a launched worker may take to reach pegasusd and say hello: it keeps trying to
/// connect for [`pegasus_remote::CONNECT_PATIENCE`], then enrolls (a pod also waits for its
/// image and its node).
const REMOTE_HELLO_TIMEOUT: Duration = Duration::from_secs(25);
/// How often a launch waiting for the project's worker lock looks again.
const LOCK_POLL: Duration = Duration::from_millis(500);
/// How long a crashed worker's pod may take to be reported ended, for the crash record.
const POD_END_PATIENCE: Duration = Duration::from_secs(5);
/// How long a pod's deletion may take when its worker is done.
const DELETE_PATIENCE: Duration = Duration::from_secs(15);

/// How a project's worker is started elsewhere.
#[derive(Clone)]
pub(crate) enum Launch {
    /// A command that starts it on another host.
    Command(CommandLauncher),
    /// A Pod in a Kubernetes cluster.
    Pod(Arc<PodLauncher>),
}

impl Launch {
    fn connect(&self) -> String {
        match self {
            Launch::Command(c) => c.connect.clone(),
            Launch::Pod(p) => p.settings().connect.clone(),
        }
    }
}

/// What a launch left running, to watch and to end.
enum Started {
    Command(tokio::process::Child),
    Pod(Arc<PodLauncher>, LaunchedPod),
}

impl Slot {
    /// Launches a worker through `launch` (named `name` in config.yml) and supervises it by its
    /// link until it ends.
    pub(super) async fn run_launched(
        &mut self,
        rx: &mut mpsc::Receiver<SlotCmd>,
        name: &str,
        launch: Launch,
    ) -> Outcome {
        let Some(remote) = self.ctx.remote.clone() else {
            return Outcome::Crashed(format!(
                "launcher {name} needs `workers.listen` in config.yml"
            ));
        };
        let dir = self.ctx.home.project_dir(&self.name);
        let mut told = false;
        while pegasus_store::worker_lock::is_held(&dir) {
            if !told {
                tracing::warn!(project = %self.name, "the project's last worker still holds its lock; waiting for it to go before launching another");
                told = true;
            }
            if let Some(stopped) = self.wait_cmds(rx, Instant::now() + LOCK_POLL).await {
                return stopped;
            }
        }
        let connect = launch.connect();
        // A fresh one-time token (which revokes the certificate of the project's last launch):
        // the public values go in the environment, the token on the launched command's
        // standard input (or a pod's Secret), never on a command line.
        let bootstrap = match remote.authority.bootstrap(&connect, &self.name) {
            Ok(b) => b,
            Err(e) => return Outcome::Crashed(format!("cannot make an enrollment token: {e}")),
        };
        let token = bootstrap.token().to_string();
        let env: Vec<(String, String)> = bootstrap
            .public_env()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        let enroll_line = bootstrap.enroll_line();
        drop(bootstrap);
        let mut conn_rx = self.ctx.spawns.register(&token, &self.name);
        let started = match self
            .start(name, &launch, &env, &enroll_line, &connect)
            .await
        {
            Ok(started) => started,
            Err(outcome) => {
                self.ctx.spawns.cancel(&token);
                return outcome;
            }
        };
        let gone = CancellationToken::new();
        let why = Arc::new(std::sync::Mutex::new(None));
        let (launched, pod) = match started {
            Started::Command(child) => (Some(child), None),
            Started::Pod(launcher, pod) => {
                // The pod's end is the worker's end, with the cluster's reason for it.
                let (gone, why) = (gone.clone(), why.clone());
                let (l, p) = (launcher.clone(), pod.clone());
                let watch = tokio::spawn(async move {
                    let end = loop {
                        match l.wait_for_end(&p).await {
                            Ok(end) => break end,
                            Err(e) => {
                                tracing::debug!(pod = %p.name, "cannot watch the pod: {e}");
                                tokio::time::sleep(Duration::from_secs(1)).await;
                            }
                        }
                    };
                    *why.lock().unwrap_or_else(|e| e.into_inner()) = Some(end.clone());
                    gone.cancel();
                });
                (None, Some((launcher, pod, watch)))
            }
        };
        let mut process = WorkerProcess::Remote {
            pid: 0,
            launched,
            gone: gone.clone(),
        };
        let deadline = Instant::now() + REMOTE_HELLO_TIMEOUT;
        let outcome = loop {
            tokio::select! {
                conn = &mut conn_rx => match conn {
                    Ok(conn) => {
                        if let WorkerProcess::Remote { pid, .. } = &mut process {
                            *pid = conn.pid;
                        }
                        // Enrolled: the token is spent, and its Secret has nothing left to keep.
                        if let Some((launcher, pod, _)) = &pod {
                            forget_enrollment(launcher.clone(), pod.project.clone());
                        }
                        let host = conn.host.clone();
                        self.set(|i| i.host = host);
                        self.on(Event::Hello, None).await;
                        self.set_state(WorkerState::Starting, Some(conn.pid));
                        break self.run_connected(conn, process, rx).await;
                    }
                    Err(_) => {
                        process.kill();
                        break Outcome::Crashed("handshake lost".into());
                    }
                },
                // A pod that ended (or cannot start) before its worker said hello.
                _ = gone.cancelled() => {
                    self.ctx.spawns.cancel(&token);
                    let end = why.lock().unwrap_or_else(|e| e.into_inner()).take();
                    break match end {
                        Some(PodEnd::Unstartable { reason }) => Outcome::Unreached(format!("the pod cannot start: {reason}")),
                        Some(end) => Outcome::Crashed(format!("{end} before its worker connected")),
                        None => Outcome::Crashed("the launch ended before its worker connected".into()),
                    };
                }
                _ = sleep_until(deadline) => {
                    self.ctx.spawns.cancel(&token);
                    process.kill();
                    break Outcome::Unreached(format!(
                        "no worker of launcher {name} connected within {} s",
                        REMOTE_HELLO_TIMEOUT.as_secs()
                    ));
                }
                cmd = rx.recv() => if let Some(stopped) = self.unlinked_cmd(cmd).await {
                    self.ctx.spawns.cancel(&token);
                    process.kill();
                    break stopped;
                },
            }
        };
        // A pod is deleted when its worker is done, however it ended (suspend and stop too).
        let Some((launcher, pod, mut watch)) = pod else {
            return outcome;
        };
        // A dead worker's link drops a moment before its kubelet reports the pod's end: give
        // the watch that moment, so the crash record carries the cluster's reason.
        if matches!(outcome, Outcome::Crashed(_)) {
            let _ = tokio::time::timeout(POD_END_PATIENCE, &mut watch).await;
        }
        watch.abort();
        let deleted = tokio::time::timeout(DELETE_PATIENCE, launcher.delete(&pod.project)).await;
        if !matches!(deleted, Ok(Ok(()))) {
            tracing::warn!(project = %self.name, pod = %pod.name, "cannot delete the pod: {deleted:?}");
        }
        let end = why.lock().unwrap_or_else(|e| e.into_inner()).take();
        match (outcome, end) {
            // The link said "lost"; the cluster says why.
            (Outcome::Crashed(desc), Some(end)) => Outcome::Crashed(format!("{desc}: {end}")),
            (outcome, _) => outcome,
        }
    }

    /// Starts the launch; an outcome when it could not be started.
    async fn start(
        &self,
        name: &str,
        launch: &Launch,
        env: &[(String, String)],
        enroll_line: &str,
        connect: &str,
    ) -> Result<Started, Outcome> {
        match launch {
            Launch::Command(c) => {
                let worker = self.ctx.worker_bin.display().to_string();
                let project_dir = self.ctx.home.project_dir(&self.name).display().to_string();
                let argv = expand_argv(
                    &c.argv,
                    &LaunchValues {
                        worker: &worker,
                        project: &self.name,
                        project_dir: &project_dir,
                        connect,
                        env,
                    },
                );
                match spawn::spawn_launcher(&argv, env, enroll_line, &self.stderr_log()).await {
                    Ok(child) => {
                        tracing::info!(project = %self.name, launcher = name, pid = ?child.id(), "worker launched");
                        Ok(Started::Command(child))
                    }
                    Err(e) => Err(Outcome::Crashed(format!(
                        "launcher {name} cannot start `{}`: {e}",
                        argv.join(" ")
                    ))),
                }
            }
            Launch::Pod(launcher) => {
                let dir = launcher.settings().project_dir(&self.name);
                let cmd = vec!["project-worker".to_string(), dir.display().to_string()];
                match launcher.launch(&self.name, env, enroll_line, &cmd).await {
                    Ok(pod) => {
                        tracing::info!(project = %self.name, launcher = name, pod = %pod.name, "worker pod created");
                        Ok(Started::Pod(launcher.clone(), pod))
                    }
                    // The API server is unreachable or refuses: like a host that is down.
                    Err(e) => Err(Outcome::Unreached(format!(
                        "launcher {name} cannot create the pod: {e}"
                    ))),
                }
            }
        }
    }

    /// Takes commands until `until`: a stop ends the wait with its outcome, messages queue.
    pub(super) async fn wait_cmds(
        &mut self,
        rx: &mut mpsc::Receiver<SlotCmd>,
        until: Instant,
    ) -> Option<Outcome> {
        loop {
            tokio::select! {
                _ = sleep_until(until) => return None,
                cmd = rx.recv() => if let Some(stopped) = self.unlinked_cmd(cmd).await {
                    return Some(stopped);
                },
            }
        }
    }
}

/// Deletes the Secret that carried a pod's enrollment token, in the background (the worker is
/// served meanwhile); a failure is logged, and the pod's deletion tries again.
fn forget_enrollment(launcher: Arc<PodLauncher>, project: String) {
    tokio::spawn(async move {
        match tokio::time::timeout(DELETE_PATIENCE, launcher.forget_enrollment(&project)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(%project, "cannot delete the enrollment Secret: {e}")
            }
            Err(_) => tracing::warn!(%project, "cannot delete the enrollment Secret: no answer"),
        }
    });
}
