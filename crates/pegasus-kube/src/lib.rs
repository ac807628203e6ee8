//! The Kubernetes launcher (DESIGN.md §14): a Pod per active project, for a user whose projects
//! outgrow one machine.
//!
//! What it is for. pegasusd, holding a `kind: kubernetes` entry of config.yml `launchers:`
//! ([`KubeSettings`]), uses a [`PodLauncher`] to make a project's worker pod with the public
//! bootstrap values in its environment and its one-time enrollment token in a Secret made for
//! that launch ([`enroll_secret`], mounted as a file, deleted once the worker enrolled and
//! with the pod) ([`pod_manifest`]: labelled with the project and the
//! home's id, `restartPolicy: Never`, the project's folder from the shared ReadWriteMany
//! volume at the path pegasusd knows it by), to learn how it ended ([`PodEnd`]), to delete it
//! on suspend and stop, and, when pegasusd starts, to adopt the live pods of active projects
//! and delete the rest ([`PodLauncher::adopt_or_delete`]).
//!
//! What it is not for. It does not decide when a worker starts, crashes or restarts: pegasusd
//! judges a remote worker by its link (pegasus-remote's mutual TLS) and restarts by its own
//! rules; a pod's end is one more fact for its crash record. It holds no secret but the launch's
//! token: a pod's environment carries only [`BOOTSTRAP_ENV`], never a token or a provider key,
//! and is refused anything else. It makes no cluster objects but pods and their enrollment
//! Secrets (no Deployment, Service, claim or RBAC: `docs/SCALING.md` says how to make those
//! once), and it never lists or touches another home's pods or Secrets.

mod error;
mod launcher;
mod manifest;
mod names;
mod pod_end;
mod settings;

pub use error::KubeError;
pub use launcher::{Adoption, LaunchedPod, PodLauncher, DELETE_PATIENCE};
pub use manifest::{
    enroll_secret, pod_manifest, BOOTSTRAP_ENV, CONTAINER, ENROLL_DIR, ENROLL_FILE_ENV, ENROLL_KEY,
    TERMINATION_GRACE_SECONDS,
};
pub use names::{
    pod_name, project_label, HomeId, HOME_LABEL, MANAGED_BY, MANAGED_BY_LABEL, PROJECT_ANNOTATION,
    PROJECT_LABEL,
};
pub use pod_end::PodEnd;
pub use settings::{KubeSettings, DEFAULT_NAMESPACE};
