//! How a worker pod ended, read from what the API server says of it. pegasusd judges a remote
//! worker by its link; this is what it records beside the crash, and how it learns that a pod
//! will never start (its image cannot be pulled) without waiting for a link that never comes.

use std::fmt;

use k8s_openapi::api::core::v1::Pod;

use crate::manifest::CONTAINER;

/// Waiting reasons after which a container will not start without someone changing the image
/// or the pod: waiting longer only delays the report.
const UNSTARTABLE: [&str; 6] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
    "CreateContainerConfigError",
    "CreateContainerError",
];

/// The longest reason kept: a message from the cluster ends up in crash records and status.
const MAX_REASON: usize = 500;

/// How a worker pod ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodEnd {
    /// Phase `Succeeded`: the worker exited 0 (it drained on stop, or its link went silent).
    Succeeded,
    /// Phase `Failed`: the worker exited non-zero or was killed (OOMKilled), or the pod was
    /// evicted; `reason` says which, in the cluster's words.
    Failed {
        /// The pod's reason and message and the worker's exit, as the cluster gave them.
        reason: String,
    },
    /// The container cannot start (image pull failure, bad config); the pod is still there,
    /// Pending. Counts as a launch that never reached pegasusd.
    Unstartable {
        /// The container's waiting reason and message (`ErrImagePull: ...`).
        reason: String,
    },
    /// The pod no longer exists, or a new pod of the same name replaced it: deleted (by
    /// pegasusd on suspend or stop, or by someone else) or its node was lost.
    Gone,
}

impl fmt::Display for PodEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PodEnd::Succeeded => write!(f, "pod succeeded"),
            PodEnd::Failed { reason } => write!(f, "pod failed: {reason}"),
            PodEnd::Unstartable { reason } => write!(f, "pod cannot start: {reason}"),
            PodEnd::Gone => write!(f, "pod gone"),
        }
    }
}

/// How `pod` has ended, or `None` while it runs or may still start.
pub(crate) fn ended(pod: &Pod) -> Option<PodEnd> {
    let status = pod.status.as_ref()?;
    match status.phase.as_deref() {
        Some("Succeeded") => Some(PodEnd::Succeeded),
        Some("Failed") => Some(PodEnd::Failed {
            reason: failure_reason(pod),
        }),
        Some("Pending") => worker_status(pod)
            .and_then(|cs| cs.state.as_ref()?.waiting.as_ref())
            .filter(|w| {
                w.reason
                    .as_deref()
                    .is_some_and(|r| UNSTARTABLE.contains(&r))
            })
            .map(|w| PodEnd::Unstartable {
                reason: joined([w.reason.clone(), w.message.clone()]),
            }),
        // Running, Unknown (its node is unreachable: the link decides) or no phase yet.
        _ => None,
    }
}

fn worker_status(pod: &Pod) -> Option<&k8s_openapi::api::core::v1::ContainerStatus> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|cs| cs.name == CONTAINER)
}

/// The pod's own reason and message (`Evicted: The node was low on resource: memory.`), then
/// the container's exit (`worker exited with code 137 (OOMKilled)`).
fn failure_reason(pod: &Pod) -> String {
    let status = pod.status.as_ref();
    let exit = worker_status(pod)
        .and_then(|cs| cs.state.as_ref()?.terminated.as_ref())
        .map(|t| {
            let mut s = format!("worker exited with code {}", t.exit_code);
            if let Some(r) = &t.reason {
                s.push_str(&format!(" ({r})"));
            }
            if let Some(m) = t.message.as_deref().filter(|m| !m.trim().is_empty()) {
                s.push_str(&format!(": {}", m.trim()));
            }
            s
        });
    let reason = joined([
        status.and_then(|s| s.reason.clone()),
        status.and_then(|s| s.message.clone()),
        exit,
    ]);
    if reason.is_empty() {
        "the pod failed and Kubernetes gave no reason".to_string()
    } else {
        reason
    }
}

/// The non-empty parts joined by `: `, cut to [`MAX_REASON`] bytes on a character boundary.
fn joined<const N: usize>(parts: [Option<String>; N]) -> String {
    let mut s = parts
        .into_iter()
        .flatten()
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join(": ");
    if s.len() > MAX_REASON {
        let mut end = MAX_REASON;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "status": status})).unwrap()
    }

    fn waiting(reason: &str) -> serde_json::Value {
        json!({"phase": "Pending", "containerStatuses": [{"name": "worker", "image": "i", "imageID": "",
            "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": reason, "message": "Back-off pulling image \"i\""}}}]})
    }

    #[test]
    fn each_phase_is_judged() {
        assert_eq!(ended(&pod(json!({"phase": "Running"}))), None);
        assert_eq!(ended(&pod(json!({"phase": "Unknown"}))), None);
        assert_eq!(ended(&pod(json!({}))), None);
        assert_eq!(ended(&pod(json!({"phase": "Pending"}))), None);
        assert_eq!(ended(&pod(waiting("ContainerCreating"))), None);
        assert_eq!(
            ended(&pod(json!({"phase": "Succeeded"}))),
            Some(PodEnd::Succeeded)
        );
        assert_eq!(
            ended(&pod(waiting("ImagePullBackOff"))),
            Some(PodEnd::Unstartable {
                reason: "ImagePullBackOff: Back-off pulling image \"i\"".into()
            })
        );
        assert_eq!(
            ended(&pod(json!({"phase": "Failed"}))),
            Some(PodEnd::Failed {
                reason: "the pod failed and Kubernetes gave no reason".into()
            })
        );
    }

    #[test]
    fn a_failure_says_why_in_the_clusters_words() {
        let oom = pod(
            json!({"phase": "Failed", "containerStatuses": [{"name": "worker", "image": "i",
            "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}),
        );
        assert_eq!(
            ended(&oom),
            Some(PodEnd::Failed {
                reason: "worker exited with code 137 (OOMKilled)".into()
            })
        );
        let evicted = pod(json!({"phase": "Failed", "reason": "Evicted",
            "message": "The node was low on resource: memory.", "containerStatuses": [{"name": "worker",
            "image": "i", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": 1, "reason": "Error", "message": "link lost"}}}]}));
        assert_eq!(
            ended(&evicted),
            Some(PodEnd::Failed {
                reason: "Evicted: The node was low on resource: memory.: worker exited with code 1 (Error): link lost".into()
            })
        );
        let long = pod(json!({"phase": "Failed", "message": "é".repeat(400)}));
        let Some(PodEnd::Failed { reason }) = ended(&long) else {
            panic!()
        };
        assert!(reason.len() <= MAX_REASON + '…'.len_utf8());
    }
}
