//! The crate's one error type: every failure says which setting, pod or API call it is about,
//! and what to do next.

/// Why a launcher could not be built, or a pod could not be made, found or removed.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    /// A setting of the launcher entry is missing or wrong. `key` is relative to the entry
    /// (`image`, `home_volume.claim`) so pegasusd can prefix `launchers.NAME.`.
    #[error("`{key}` {problem}")]
    Setting {
        /// The setting, relative to the launcher entry.
        key: String,
        /// What is wrong with it and what to write instead.
        problem: String,
    },

    /// The home id is not usable as a Kubernetes label value.
    #[error("home id `{0}` must be 1-63 letters, digits, `-`, `_` or `.`, starting and ending with a letter or digit (it is a pod label)")]
    HomeId(String),

    /// The project name is not a Pegasus project name.
    #[error("{0}")]
    Project(String),

    /// A variable other than the three bootstrap values was asked for in a pod's environment.
    /// A pod's spec is readable by anyone who may read pods in the namespace, so nothing but
    /// the one-time bootstrap values may go there; a provider key never does.
    #[error("`{name}` may not be set in a worker pod: a pod gets only PEGASUS_CONNECT and PEGASUS_CA_SHA256 in its environment, its enrollment token from a Secret (everything else comes over the link)")]
    EnvNotAllowed {
        /// The variable's name.
        name: String,
    },

    /// The worker command has no program.
    #[error("the worker command is empty: it must start project-worker, e.g. [project-worker, <project_dir>]")]
    EmptyCommand,

    /// No Kubernetes configuration could be found or used.
    #[error("cannot talk to Kubernetes: {0}: pegasusd needs a kubeconfig (KUBECONFIG or ~/.kube/config) or to run in a pod with a service account")]
    Connect(#[source] Box<kube::Error>),

    /// The API server refused or failed a call.
    #[error("Kubernetes could not {action} {what} in namespace `{namespace}`: {detail}{hint}")]
    Api {
        /// The verb of the call that failed (`create`, `read`, `list`, `watch`, `delete`).
        action: &'static str,
        /// The pod (`pod \`NAME\``) or the pods (`pods labelled \`SELECTOR\``) it was about.
        what: String,
        /// The namespace of the launcher entry.
        namespace: String,
        /// The refusal in one line: HTTP code, reason and message when the server gave them.
        detail: String,
        /// What to do about it, when the refusal says (an RBAC refusal, a missing namespace).
        hint: &'static str,
        /// The client's error, as it came.
        #[source]
        source: Box<kube::Error>,
    },

    /// A pod with this project's name exists but carries another home's label: two homes
    /// share the namespace and their short ids collide. Never touched.
    #[error("pod or secret `{pod}` in namespace `{namespace}` belongs to another Pegasus home (`{owner}`): give this launcher its own namespace")]
    NameTaken {
        /// The name of the pod or secret (the project's pod name).
        pod: String,
        /// The namespace of the launcher entry.
        namespace: String,
        /// The other home's `pegasus/home` label, or that it has none.
        owner: String,
    },

    /// The old pod of a project was deleted but had not gone when the new one had to be made.
    #[error("pod `{pod}` was deleted but is still there after {seconds} s: its node may be unreachable; try again later or remove it with kubectl delete pod --force")]
    StillTerminating {
        /// The old pod's name.
        pod: String,
        /// How long pegasusd waited for it to go, in seconds.
        seconds: u64,
    },

    /// The API server answered with a pod that has no uid, which a real one never does.
    #[error("the Kubernetes API answered pod `{pod}` without a uid")]
    NoUid {
        /// The pod's name.
        pod: String,
    },
}

impl KubeError {
    /// Wraps an API failure with the pod it was about, a one-line detail and a hint.
    pub(crate) fn api(
        action: &'static str,
        what: String,
        namespace: &str,
        source: kube::Error,
    ) -> Self {
        let (detail, hint) = match &source {
            kube::Error::Api(status) => {
                let mut detail = format!("{}", status.code);
                if !status.reason.is_empty() {
                    detail.push(' ');
                    detail.push_str(&status.reason);
                }
                if !status.message.is_empty() {
                    detail.push_str(": ");
                    detail.push_str(&status.message);
                }
                let hint = if status.is_forbidden() {
                    " (pegasusd's credentials need a Role allowing pods create, get, list, watch and delete, and secrets create, get, list and delete, in this namespace: see docs/SCALING.md)"
                } else if status.is_not_found() {
                    " (does the namespace exist?)"
                } else {
                    ""
                };
                (detail, hint)
            }
            other => (other.to_string(), ""),
        };
        KubeError::Api {
            action,
            what,
            namespace: namespace.to_string(),
            detail,
            hint,
            source: Box::new(source),
        }
    }

    pub(crate) fn setting(key: &str, problem: impl Into<String>) -> Self {
        KubeError::Setting {
            key: key.to_string(),
            problem: problem.into(),
        }
    }
}
