//! The Pod of one project's worker, built without talking to any server so that what pegasusd
//! asks of the cluster can be read and tested whole.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, EnvVar, KeyToPath, PersistentVolumeClaimVolumeSource, Pod,
    PodSecurityContext, PodSpec, ResourceRequirements, Secret, SecretVolumeSource, Volume,
    VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::ByteString;

use crate::error::KubeError;
use crate::names::{
    pod_name, project_label, HomeId, HOME_LABEL, MANAGED_BY, MANAGED_BY_LABEL, PROJECT_ANNOTATION,
    PROJECT_LABEL,
};
use crate::settings::KubeSettings;

/// The only environment variables a caller may give a worker pod (DESIGN.md §14's public bootstrap
/// values): where pegasusd listens and the CA's fingerprint. Anyone who may read pods in the
/// namespace reads these, which is why nothing secret, neither the enrollment token nor a
/// provider key, is ever put here. The pod also gets [`ENROLL_FILE_ENV`], set here.
pub const BOOTSTRAP_ENV: [&str; 2] = ["PEGASUS_CONNECT", "PEGASUS_CA_SHA256"];

/// The variable naming the file the worker reads its enrollment line from (pegasus-remote's
/// `PEGASUS_ENROLL_FILE`): a path, no secret.
pub const ENROLL_FILE_ENV: &str = "PEGASUS_ENROLL_FILE";

/// Where the launch's Secret is mounted in the worker container (read-only), and the one file
/// in it: the enrollment line, `PEGASUS_ENROLL=<token>`.
pub const ENROLL_DIR: &str = "/run/pegasus-enroll";
/// The key of the enrollment line in the Secret, and its file's name under [`ENROLL_DIR`].
pub const ENROLL_KEY: &str = "enroll";

/// The volume of the launch's Secret.
const ENROLL_VOLUME: &str = "enroll";

/// The mode of the enrollment file: readable by the container's user whatever uid it runs as
/// (a Secret's files belong to root), and by nothing outside the pod; the token in it is spent
/// within seconds of the start, and the Secret deleted then.
const ENROLL_FILE_MODE: i32 = 0o444;

/// The worker container's name, which `kubectl logs` and the status of a pod name.
pub const CONTAINER: &str = "worker";

/// The volume holding the home's `projects/` folder.
const PROJECTS_VOLUME: &str = "projects";

/// The pod's own scratch home: an empty directory at the home's path, so the worker can make
/// what it keeps beside its project (`logs/`, `run/`) whatever user it runs as. It lives and
/// dies with the pod, like the processes its `run/` records.
const HOME_VOLUME: &str = "home";

/// Seconds a deleted pod's worker gets between SIGTERM and SIGKILL. pegasusd stops a worker
/// over its link before it deletes the pod, so a pod still running at deletion is stale: a
/// short grace lets a relaunch reuse the name soon.
pub const TERMINATION_GRACE_SECONDS: i64 = 10;

/// The Pod that runs `worker_cmd` for `project` of the home `home`.
///
/// * Name [`pod_name`]; labels [`MANAGED_BY_LABEL`]` = pegasus`, [`HOME_LABEL`]` = <home id>`,
///   [`PROJECT_LABEL`]` = <project>`; the exact project name in [`PROJECT_ANNOTATION`].
/// * `restartPolicy: Never`: pegasusd owns restarts (its crash rules and backoff), and a
///   kubelet restarting a worker behind its back would fight them.
/// * One container, [`CONTAINER`], of the settings' image, with `worker_cmd` as its
///   arguments (so an image entrypoint such as tini stays PID 1 and reaps what the worker
///   leaves), and exactly `env`, which may hold only [`BOOTSTRAP_ENV`] names
///   ([`KubeError::EnvNotAllowed`] otherwise), plus [`ENROLL_FILE_ENV`]. Service links are
///   off: Kubernetes would otherwise add a variable per service in the namespace.
/// * The one-time enrollment token from the Secret of the same name ([`enroll_secret`]),
///   mounted read-only at [`ENROLL_DIR`]: never in the pod's spec.
/// * The project's own folder, and nothing else of the home, from the claim (whose root is the
///   home's `projects/`): mounted at `<home_path>/projects/<project>`, the path pegasusd
///   knows it by. The rest of the home (config.yml, the ledger, `tls/` with the CA key, other
///   projects) never reaches a pod; an empty directory stands at `<home_path>` for what the
///   worker writes beside its project (its log and exec records).
/// * `resources` as requests = limits (the Guaranteed class: a worker is not evicted first
///   under memory pressure); the service account if set, else no API token mounted at all.
pub fn pod_manifest(
    settings: &KubeSettings,
    home: &HomeId,
    project: &str,
    env: &[(String, String)],
    worker_cmd: &[String],
) -> Result<Pod, KubeError> {
    pegasus_store::validate_name(project).map_err(|e| KubeError::Project(e.to_string()))?;
    if worker_cmd.is_empty() {
        return Err(KubeError::EmptyCommand);
    }
    if let Some((name, _)) = env
        .iter()
        .find(|(k, _)| !BOOTSTRAP_ENV.contains(&k.as_str()))
    {
        return Err(KubeError::EnvNotAllowed { name: name.clone() });
    }

    let labels = BTreeMap::from([
        (MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string()),
        (HOME_LABEL.to_string(), home.as_str().to_string()),
        (PROJECT_LABEL.to_string(), project_label(project)),
    ]);
    let annotations = BTreeMap::from([(PROJECT_ANNOTATION.to_string(), project.to_string())]);

    let project_dir = settings.project_dir(project);
    let home_mount = VolumeMount {
        name: HOME_VOLUME.to_string(),
        mount_path: settings.home_path.to_string_lossy().into_owned(),
        ..VolumeMount::default()
    };
    let project_mount = VolumeMount {
        name: PROJECTS_VOLUME.to_string(),
        mount_path: project_dir.to_string_lossy().into_owned(),
        sub_path: Some(project.to_string()),
        ..VolumeMount::default()
    };
    let home_volume = Volume {
        name: HOME_VOLUME.to_string(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    };
    let projects_volume = Volume {
        name: PROJECTS_VOLUME.to_string(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: settings.claim.clone(),
            read_only: None,
        }),
        ..Volume::default()
    };

    let enroll_mount = VolumeMount {
        name: ENROLL_VOLUME.to_string(),
        mount_path: ENROLL_DIR.to_string(),
        read_only: Some(true),
        ..VolumeMount::default()
    };
    let enroll_volume = Volume {
        name: ENROLL_VOLUME.to_string(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(pod_name(home, project)),
            items: Some(vec![KeyToPath {
                key: ENROLL_KEY.to_string(),
                path: ENROLL_KEY.to_string(),
                ..KeyToPath::default()
            }]),
            default_mode: Some(ENROLL_FILE_MODE),
            optional: Some(false),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    };
    let mut env_vars: Vec<EnvVar> = env
        .iter()
        .map(|(name, value)| EnvVar {
            name: name.clone(),
            value: Some(value.clone()),
            value_from: None,
        })
        .collect();
    env_vars.push(EnvVar {
        name: ENROLL_FILE_ENV.to_string(),
        value: Some(format!("{ENROLL_DIR}/{ENROLL_KEY}")),
        value_from: None,
    });

    let amounts: BTreeMap<String, Quantity> =
        [("cpu", &settings.cpu), ("memory", &settings.memory)]
            .into_iter()
            .filter_map(|(k, v)| v.as_ref().map(|v| (k.to_string(), Quantity(v.clone()))))
            .collect();
    let resources = (!amounts.is_empty()).then(|| ResourceRequirements {
        requests: Some(amounts.clone()),
        limits: Some(amounts),
        ..ResourceRequirements::default()
    });

    let container = Container {
        name: CONTAINER.to_string(),
        image: Some(settings.image.clone()),
        args: Some(worker_cmd.to_vec()),
        env: Some(env_vars),
        // The home first: the project's folder is mounted inside it.
        volume_mounts: Some(vec![home_mount, project_mount, enroll_mount]),
        resources,
        ..Container::default()
    };

    let security_context = (settings.run_as_user.is_some() || settings.run_as_group.is_some())
        .then(|| PodSecurityContext {
            run_as_user: settings.run_as_user,
            run_as_group: settings.run_as_group,
            ..PodSecurityContext::default()
        });

    Ok(Pod {
        metadata: ObjectMeta {
            name: Some(pod_name(home, project)),
            namespace: Some(settings.namespace.clone()),
            labels: Some(labels),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            restart_policy: Some("Never".to_string()),
            containers: vec![container],
            volumes: Some(vec![home_volume, projects_volume, enroll_volume]),
            service_account_name: settings.service_account.clone(),
            automount_service_account_token: settings.service_account.is_none().then_some(false),
            enable_service_links: Some(false),
            termination_grace_period_seconds: Some(TERMINATION_GRACE_SECONDS),
            security_context,
            ..PodSpec::default()
        }),
        status: None,
    })
}

/// The Secret made for one launch of `project`'s worker: named and labelled as its pod, holding
/// only `enroll_line` (`PEGASUS_ENROLL=<token>`, the token pegasusd issued for this launch)
/// under [`ENROLL_KEY`], immutable (the kubelet need not watch it). pegasusd deletes it once the
/// worker enrolled, and with its pod.
pub fn enroll_secret(
    settings: &KubeSettings,
    home: &HomeId,
    project: &str,
    enroll_line: &str,
) -> Result<Secret, KubeError> {
    pegasus_store::validate_name(project).map_err(|e| KubeError::Project(e.to_string()))?;
    Ok(Secret {
        metadata: ObjectMeta {
            name: Some(pod_name(home, project)),
            namespace: Some(settings.namespace.clone()),
            labels: Some(BTreeMap::from([
                (MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string()),
                (HOME_LABEL.to_string(), home.as_str().to_string()),
                (PROJECT_LABEL.to_string(), project_label(project)),
            ])),
            annotations: Some(BTreeMap::from([(
                PROJECT_ANNOTATION.to_string(),
                project.to_string(),
            )])),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".to_string()),
        immutable: Some(true),
        data: Some(BTreeMap::from([(
            ENROLL_KEY.to_string(),
            ByteString(enroll_line.as_bytes().to_vec()),
        )])),
        string_data: None,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;
    use std::path::Path;

    /// The spec's example entry, run as uid and gid 1000, as pegasusd reads it.
    fn settings() -> KubeSettings {
        let entry = json!({"kind": "kubernetes", "connect": "pegasusd.pegasus.svc:7475",
            "namespace": "pegasus", "image": "registry.example/pegasus-worker:0.1",
            "home_volume": {"claim": "pegasus-home"}, "resources": {"cpu": "500m", "memory": "256Mi"},
            "run_as_user": 1000, "run_as_group": 1000});
        KubeSettings::from_value(&entry, Path::new("/srv/pegasus")).unwrap()
    }

    pub(crate) fn bootstrap_env() -> Vec<(String, String)> {
        vec![
            ("PEGASUS_CONNECT".into(), "pegasusd.pegasus.svc:7475".into()),
            ("PEGASUS_CA_SHA256".into(), "ab".repeat(32)),
        ]
    }

    fn cmd() -> Vec<String> {
        vec!["project-worker".into(), "/srv/pegasus/projects/web".into()]
    }

    /// The whole manifest, as the API server receives it: a change to what pegasusd asks of
    /// the cluster shows here.
    #[test]
    fn the_manifest_is_exactly_this() {
        let home = HomeId::new("3f9a2c71d0e4").unwrap();
        let pod = pod_manifest(&settings(), &home, "web", &bootstrap_env(), &cmd()).unwrap();
        assert_eq!(
            serde_json::to_value(&pod).unwrap(),
            json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": "pegasus-3f9a2c71-web",
                    "namespace": "pegasus",
                    "labels": {
                        "app.kubernetes.io/managed-by": "pegasus",
                        "pegasus/home": "3f9a2c71d0e4",
                        "pegasus/project": "web"
                    },
                    "annotations": {"pegasus/project": "web"}
                },
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": false,
                    "enableServiceLinks": false,
                    "terminationGracePeriodSeconds": 10,
                    "securityContext": {"runAsUser": 1000, "runAsGroup": 1000},
                    "containers": [{
                        "name": "worker",
                        "image": "registry.example/pegasus-worker:0.1",
                        "args": ["project-worker", "/srv/pegasus/projects/web"],
                        "env": [
                            {"name": "PEGASUS_CONNECT", "value": "pegasusd.pegasus.svc:7475"},
                            {"name": "PEGASUS_CA_SHA256", "value": "ab".repeat(32)},
                            {"name": "PEGASUS_ENROLL_FILE", "value": "/run/pegasus-enroll/enroll"}
                        ],
                        "resources": {
                            "requests": {"cpu": "500m", "memory": "256Mi"},
                            "limits": {"cpu": "500m", "memory": "256Mi"}
                        },
                        "volumeMounts": [
                            {"name": "home", "mountPath": "/srv/pegasus"},
                            {
                                "name": "projects",
                                "mountPath": "/srv/pegasus/projects/web",
                                "subPath": "web"
                            },
                            {"name": "enroll", "mountPath": "/run/pegasus-enroll", "readOnly": true}
                        ]
                    }],
                    "volumes": [
                        {"name": "home", "emptyDir": {}},
                        {"name": "projects", "persistentVolumeClaim": {"claimName": "pegasus-home"}},
                        {"name": "enroll", "secret": {
                            "secretName": "pegasus-3f9a2c71-web",
                            "items": [{"key": "enroll", "path": "enroll"}],
                            "defaultMode": 0o444,
                            "optional": false
                        }}
                    ]
                }
            })
        );
    }

    /// The token is in the Secret alone, never in the pod's spec.
    #[test]
    fn the_token_goes_into_a_secret_of_the_pods_name_and_never_into_the_pod() {
        let home = HomeId::new("3f9a2c71d0e4").unwrap();
        let line = format!("PEGASUS_ENROLL={}\n", "cd".repeat(32));
        let secret = enroll_secret(&settings(), &home, "web", &line).unwrap();
        assert_eq!(
            serde_json::to_value(&secret).unwrap(),
            json!({
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": "pegasus-3f9a2c71-web",
                    "namespace": "pegasus",
                    "labels": {
                        "app.kubernetes.io/managed-by": "pegasus",
                        "pegasus/home": "3f9a2c71d0e4",
                        "pegasus/project": "web"
                    },
                    "annotations": {"pegasus/project": "web"}
                },
                "type": "Opaque",
                "immutable": true,
                // base64 of the line
                "data": {"enroll": serde_json::to_value(ByteString(line.as_bytes().to_vec())).unwrap()}
            })
        );
        let pod = pod_manifest(&settings(), &home, "web", &bootstrap_env(), &cmd()).unwrap();
        let text = serde_json::to_string(&pod).unwrap();
        assert!(!text.contains(&"cd".repeat(32)) && !text.contains("PEGASUS_ENROLL\""));
        let mut env = bootstrap_env();
        env.push(("PEGASUS_ENROLL".into(), "cd".repeat(32)));
        assert!(matches!(
            pod_manifest(&settings(), &home, "web", &env, &cmd()),
            Err(KubeError::EnvNotAllowed { name }) if name == "PEGASUS_ENROLL"
        ));
    }

    #[test]
    fn a_service_account_is_used_and_its_token_left_to_it() {
        let home = HomeId::new("3f9a2c71d0e4").unwrap();
        let mut s = settings();
        s.service_account = Some("pegasus-worker".into());
        s.cpu = None;
        s.memory = None;
        s.run_as_user = None;
        s.run_as_group = None;
        let pod = pod_manifest(&s, &home, "web", &bootstrap_env(), &cmd()).unwrap();
        let spec = pod.spec.unwrap();
        assert_eq!(spec.service_account_name.as_deref(), Some("pegasus-worker"));
        assert_eq!(spec.automount_service_account_token, None);
        assert_eq!(spec.security_context, None);
        assert_eq!(spec.containers[0].resources, None);
    }

    #[test]
    fn nothing_but_the_bootstrap_values_enters_a_pod() {
        let home = HomeId::new("3f9a2c71d0e4").unwrap();
        let mut env = bootstrap_env();
        env.push(("ANTHROPIC_API_KEY".into(), "sk-ant-secret".into()));
        match pod_manifest(&settings(), &home, "web", &env, &cmd()) {
            Err(KubeError::EnvNotAllowed { name }) => assert_eq!(name, "ANTHROPIC_API_KEY"),
            other => panic!("expected EnvNotAllowed, got {other:?}"),
        }
        assert!(matches!(
            pod_manifest(&settings(), &home, "web", &bootstrap_env(), &[]),
            Err(KubeError::EmptyCommand)
        ));
        assert!(matches!(
            pod_manifest(&settings(), &home, "../etc", &bootstrap_env(), &cmd()),
            Err(KubeError::Project(_))
        ));
    }
}
