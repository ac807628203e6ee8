//! Making, watching and removing the worker pods of one home in one namespace.

use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{
    Api, DeleteParams, ListParams, PostParams, Preconditions, WatchEvent, WatchParams,
};
use kube::ResourceExt;
use tokio::time::Instant;

use crate::error::KubeError;
use crate::manifest::{enroll_secret, pod_manifest, TERMINATION_GRACE_SECONDS};
use crate::names::{
    pod_name, HomeId, HOME_LABEL, MANAGED_BY, MANAGED_BY_LABEL, PROJECT_ANNOTATION,
};
use crate::pod_end::{ended, PodEnd};
use crate::settings::KubeSettings;

/// How long a launch waits for the project's old pod to go before it makes the new one: its
/// grace period and time for the kubelet to report back.
pub const DELETE_PATIENCE: Duration = Duration::from_secs(TERMINATION_GRACE_SECONDS as u64 + 20);

/// How often a launch looks whether the old pod has gone.
const GONE_POLL: Duration = Duration::from_millis(500);

/// How long one watch request lasts before the server ends it and it is made again; under the
/// API server's own limit (295 s in kube-rs).
const WATCH_SECONDS: u32 = 290;

/// How long to wait before looking again after a watch broke, so a failing API server is not
/// asked in a tight loop.
const REWATCH_PAUSE: Duration = Duration::from_secs(1);

/// A worker pod pegasusd made or adopted: enough to watch that very pod, and not a later one
/// of the same name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchedPod {
    /// The project it serves.
    pub project: String,
    /// The pod's name ([`pod_name`]).
    pub name: String,
    /// The pod's uid: a relaunch reuses the name, never the uid.
    pub uid: String,
}

/// What [`PodLauncher::adopt_or_delete`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Adoption {
    /// Live pods of active projects, kept: pegasusd watches them and waits for their link.
    pub adopted: Vec<LaunchedPod>,
    /// Names of the pods deleted: stale ones, ended ones, those of projects not active.
    pub deleted: Vec<String>,
}

/// The Kubernetes launcher of one home: it makes a Pod per active project in the settings'
/// namespace, and only ever lists, watches or deletes pods labelled with its home.
pub struct PodLauncher {
    pods: Api<Pod>,
    /// The enrollment Secrets, one per launch, named as their pods.
    secrets: Api<Secret>,
    settings: KubeSettings,
    home: HomeId,
}

impl PodLauncher {
    /// A launcher over an existing client (a mock one in tests).
    pub fn new(client: kube::Client, settings: KubeSettings, home: HomeId) -> PodLauncher {
        let pods = Api::namespaced(client.clone(), &settings.namespace);
        let secrets = Api::namespaced(client, &settings.namespace);
        PodLauncher {
            pods,
            secrets,
            settings,
            home,
        }
    }

    /// A launcher with the client Kubernetes tools would use: the kubeconfig
    /// (`KUBECONFIG`, `~/.kube/config`) or, inside a pod, its service account.
    pub async fn connect(settings: KubeSettings, home: HomeId) -> Result<PodLauncher, KubeError> {
        // rustls needs one process-wide crypto provider; ring is the one every TLS user in
        // Pegasus links. Already installed (by pegasusd or an earlier call) is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = kube::Client::try_default()
            .await
            .map_err(|e| KubeError::Connect(Box::new(e)))?;
        Ok(PodLauncher::new(client, settings, home))
    }

    /// The settings this launcher makes pods with.
    pub fn settings(&self) -> &KubeSettings {
        &self.settings
    }

    /// Makes the pod of `project` running `worker_cmd` with `env` (see [`pod_manifest`]), and
    /// first the Secret holding `enroll_line` that the pod reads its token from
    /// ([`enroll_secret`]; an earlier one of the same name is replaced). An earlier pod of the
    /// project and home is deleted first, and its end awaited (up to [`DELETE_PATIENCE`]),
    /// since the new one takes its name.
    pub async fn launch(
        &self,
        project: &str,
        env: &[(String, String)],
        enroll_line: &str,
        worker_cmd: &[String],
    ) -> Result<LaunchedPod, KubeError> {
        let pod = pod_manifest(&self.settings, &self.home, project, env, worker_cmd)?;
        let secret = enroll_secret(&self.settings, &self.home, project, enroll_line)?;
        let name = pod_name(&self.home, project);
        if let Some(old) = self.get(&name).await? {
            self.check_ours(&old, &name)?;
            if self.delete_pod(&old, &name).await? {
                self.wait_gone(&name, old.uid().as_deref()).await?;
            }
        }
        self.delete_secret(&name).await?;
        self.secrets
            .create(&PostParams::default(), &secret)
            .await
            .map_err(|e| self.secret_err("create", &name, e))?;
        let created = match self.pods.create(&PostParams::default(), &pod).await {
            Ok(created) => created,
            Err(e) => {
                // No pod will read it: the token goes now, not at the next launch.
                if let Err(left) = self.delete_secret(&name).await {
                    tracing::warn!(secret = %name, "cannot delete an unused enrollment Secret: {left}");
                }
                return Err(self.api_err("create", &name, e));
            }
        };
        launched(project, &name, &created)
    }

    /// Deletes the pod of `project` (on suspend and stop, and when its worker is done), and
    /// its enrollment Secret. None is fine.
    pub async fn delete(&self, project: &str) -> Result<(), KubeError> {
        let name = pod_name(&self.home, project);
        if let Some(old) = self.get(&name).await? {
            self.check_ours(&old, &name)?;
            self.delete_pod(&old, &name).await?;
        }
        self.delete_secret(&name).await
    }

    /// Deletes the enrollment Secret of `project`'s launch, once its worker enrolled: the token
    /// in it is spent. None is fine.
    pub async fn forget_enrollment(&self, project: &str) -> Result<(), KubeError> {
        self.delete_secret(&pod_name(&self.home, project)).await
    }

    /// Deletes the Secret `name` if it is this home's; a missing one is fine.
    async fn delete_secret(&self, name: &str) -> Result<(), KubeError> {
        let Some(secret) = self
            .secrets
            .get_opt(name)
            .await
            .map_err(|e| self.secret_err("read", name, e))?
        else {
            return Ok(());
        };
        if secret.labels().get(HOME_LABEL).map(String::as_str) != Some(self.home.as_str()) {
            return Err(KubeError::NameTaken {
                pod: name.to_string(),
                namespace: self.settings.namespace.clone(),
                owner: secret
                    .labels()
                    .get(HOME_LABEL)
                    .cloned()
                    .unwrap_or_else(|| "no pegasus/home label".to_string()),
            });
        }
        match self.secrets.delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.is_not_found() => Ok(()),
            Err(e) => Err(self.secret_err("delete", name, e)),
        }
    }

    /// Returns when `pod` has ended: `Succeeded`, `Failed` with its reason, found unable to
    /// start, or gone (deleted, or replaced by a pod of the same name). pegasusd records a
    /// crash and restarts by its own rules; it judges the worker by its link meanwhile.
    ///
    /// It watches the pod and, whenever a watch ends (the server ends each after
    /// 290 s, or the connection breaks), looks at the pod again and watches on.
    /// An error is a failure to look: the pod may still run, and calling again is fine.
    pub async fn wait_for_end(&self, pod: &LaunchedPod) -> Result<PodEnd, KubeError> {
        loop {
            let Some(current) = self.get(&pod.name).await? else {
                return Ok(PodEnd::Gone);
            };
            if let Some(end) = judge(&current, pod) {
                return Ok(end);
            }
            let version = current.resource_version().unwrap_or_default();
            let params = WatchParams::default()
                .fields(&format!("metadata.name={}", pod.name))
                .timeout(WATCH_SECONDS);
            let events = self
                .pods
                .watch(&params, &version)
                .await
                .map_err(|e| self.api_err("watch", &pod.name, e))?;
            let mut events = std::pin::pin!(events);
            while let Some(event) = events.next().await {
                let why = match event {
                    Ok(WatchEvent::Added(p) | WatchEvent::Modified(p)) => match judge(&p, pod) {
                        Some(end) => return Ok(end),
                        None => continue,
                    },
                    Ok(WatchEvent::Deleted(p)) if p.uid().as_deref() == Some(pod.uid.as_str()) => {
                        return Ok(PodEnd::Gone)
                    }
                    Ok(WatchEvent::Deleted(_) | WatchEvent::Bookmark(_)) => continue,
                    // 410 Gone (the version is too old) or a broken stream: look again.
                    Ok(WatchEvent::Error(status)) => format!("watch ended: {status}"),
                    Err(e) => format!("watch broke: {e}"),
                };
                tracing::debug!(pod = %pod.name, "{why}");
                tokio::time::sleep(REWATCH_PAUSE).await;
                break;
            }
        }
    }

    /// On pegasusd's start: of this home's pods, keeps those of projects in `active` that are
    /// Running or Pending (their workers may still reach pegasusd), and deletes every other
    /// (ended, being deleted, of a project no longer active, or not named as this version
    /// names them). Pods of other homes are never listed, so never touched.
    pub async fn adopt_or_delete(&self, active: &[String]) -> Result<Adoption, KubeError> {
        let selector = format!(
            "{MANAGED_BY_LABEL}={MANAGED_BY},{HOME_LABEL}={}",
            self.home.as_str()
        );
        let list = self
            .pods
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|e| {
                KubeError::api(
                    "list",
                    format!("pods labelled `{selector}`"),
                    &self.settings.namespace,
                    e,
                )
            })?;
        let mut adoption = Adoption::default();
        for pod in list.items {
            let Some(name) = pod.metadata.name.clone() else {
                continue;
            };
            // The server filtered by the label already; a pod without it is not touched.
            if pod.labels().get(HOME_LABEL).map(String::as_str) != Some(self.home.as_str()) {
                continue;
            }
            let project = pod.annotations().get(PROJECT_ANNOTATION).cloned();
            let live = pod.metadata.deletion_timestamp.is_none()
                && matches!(
                    pod.status.as_ref().and_then(|s| s.phase.as_deref()),
                    Some("Running" | "Pending")
                )
                && ended(&pod).is_none();
            match project {
                Some(project)
                    if live
                        && active.contains(&project)
                        && name == pod_name(&self.home, &project) =>
                {
                    adoption.adopted.push(launched(&project, &name, &pod)?);
                }
                _ => {
                    self.delete_pod(&pod, &name).await?;
                    adoption.deleted.push(name);
                }
            }
        }
        // Every enrollment Secret of this home is an earlier pegasusd's: its token died with
        // that pegasusd (tokens live in its memory only), so none has anything left to give.
        let secrets = self
            .secrets
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|e| {
                KubeError::api(
                    "list",
                    format!("secrets labelled `{selector}`"),
                    &self.settings.namespace,
                    e,
                )
            })?;
        for secret in secrets.items {
            if let Some(name) = secret.metadata.name.as_deref() {
                if secret.labels().get(HOME_LABEL).map(String::as_str) == Some(self.home.as_str()) {
                    self.delete_secret(name).await?;
                }
            }
        }
        Ok(adoption)
    }

    async fn get(&self, name: &str) -> Result<Option<Pod>, KubeError> {
        self.pods
            .get_opt(name)
            .await
            .map_err(|e| self.api_err("read", name, e))
    }

    /// Refuses a pod of this name that another home made (their short ids collide).
    fn check_ours(&self, pod: &Pod, name: &str) -> Result<(), KubeError> {
        match pod.labels().get(HOME_LABEL) {
            Some(home) if home == self.home.as_str() => Ok(()),
            other => Err(KubeError::NameTaken {
                pod: name.to_string(),
                namespace: self.settings.namespace.clone(),
                owner: other
                    .cloned()
                    .unwrap_or_else(|| "no pegasus/home label".to_string()),
            }),
        }
    }

    /// Deletes this very pod (by its uid, so never a newer one of the same name). `true`
    /// while it terminates, `false` once it is gone (or was already).
    async fn delete_pod(&self, pod: &Pod, name: &str) -> Result<bool, KubeError> {
        let params = DeleteParams {
            preconditions: pod.uid().map(|uid| Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match self.pods.delete(name, &params).await {
            Ok(answer) => Ok(answer.is_left()),
            // Already gone, or (the uid precondition failed) replaced: this pod is gone.
            Err(kube::Error::Api(s)) if s.is_not_found() || s.is_conflict() => Ok(false),
            Err(e) => Err(self.api_err("delete", name, e)),
        }
    }

    /// Waits until no pod of `name` with `uid` exists, up to [`DELETE_PATIENCE`].
    async fn wait_gone(&self, name: &str, uid: Option<&str>) -> Result<(), KubeError> {
        let deadline = Instant::now() + DELETE_PATIENCE;
        loop {
            match self.get(name).await? {
                None => return Ok(()),
                Some(p) if p.uid().as_deref() != uid => return Ok(()),
                Some(_) if Instant::now() >= deadline => {
                    return Err(KubeError::StillTerminating {
                        pod: name.to_string(),
                        seconds: DELETE_PATIENCE.as_secs(),
                    })
                }
                Some(_) => tokio::time::sleep(GONE_POLL).await,
            }
        }
    }

    fn secret_err(&self, action: &'static str, name: &str, e: kube::Error) -> KubeError {
        KubeError::api(
            action,
            format!("secret `{name}`"),
            &self.settings.namespace,
            e,
        )
    }

    fn api_err(&self, action: &'static str, name: &str, e: kube::Error) -> KubeError {
        KubeError::api(action, format!("pod `{name}`"), &self.settings.namespace, e)
    }
}

/// How `seen` (a state of `ours`'s name) bears on `ours`: a pod of another uid means ours is
/// gone.
fn judge(seen: &Pod, ours: &LaunchedPod) -> Option<PodEnd> {
    if seen.uid().as_deref() != Some(ours.uid.as_str()) {
        return Some(PodEnd::Gone);
    }
    ended(seen)
}

fn launched(project: &str, name: &str, pod: &Pod) -> Result<LaunchedPod, KubeError> {
    Ok(LaunchedPod {
        project: project.to_string(),
        name: name.to_string(),
        uid: pod.uid().ok_or_else(|| KubeError::NoUid {
            pod: name.to_string(),
        })?,
    })
}
