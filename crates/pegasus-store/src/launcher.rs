//! Where a project's worker runs (DESIGN.md §14): config.yml `launchers:` (kind `command`; `local`
//! is built in and the default), `default_launcher`, and a project's `launcher: NAME` in its
//! PROJECT.md. This module holds the settings, their checks and the expansion of a `command`
//! launcher's argv placeholders; starting and watching workers is pegasusd's.
//!
//! A launcher only starts a worker somewhere: the worker connects back to `connect` (pegasusd's
//! `workers.listen`, over mutual TLS) with the public bootstrap values in its environment and
//! its one-time token on its standard input, and from then on it is supervised like a local one.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The built-in launcher: a child process of pegasusd on this machine, over the Unix socket.
pub const LOCAL: &str = "local";

/// One entry of `launchers:`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum LauncherConfig {
    /// Any command that starts a process on another host (`ssh`, `systemd-run -H`, `srun`,
    /// `ip netns exec`): its argv, with placeholders.
    Command(CommandLauncher),
    /// A Pod per active project; its settings are checked in full by pegasusd at start
    /// (`pegasus-kube`), each error naming its key.
    Kubernetes(Box<KubernetesLauncher>),
}

/// One setting of a [`KubernetesLauncher`] as config.yml gives it: absent (or `null`), a
/// value of its type, or a value of another type, kept as written. config.yml loads whatever
/// a kubernetes entry holds; pegasusd refuses a wrong setting when it starts the launcher
/// (`pegasus-kube`), naming its key, as it always has.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Setting<T> {
    /// Not written, or `null`.
    #[default]
    Absent,
    /// A value of the setting's type.
    Given(T),
    /// A value of another type, as written.
    Wrong(serde_json::Value),
}

impl<T> Setting<T> {
    /// Whether the setting is not written (serialized as absent).
    pub fn is_absent(&self) -> bool {
        matches!(self, Setting::Absent)
    }
}

impl<'de, T: serde::de::DeserializeOwned> Deserialize<'de> for Setting<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        if value.is_null() {
            return Ok(Setting::Absent);
        }
        Ok(match T::deserialize(&value) {
            Ok(t) => Setting::Given(t),
            Err(_) => Setting::Wrong(value),
        })
    }
}

impl<T: Serialize> Serialize for Setting<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Setting::Absent => s.serialize_none(),
            Setting::Given(t) => t.serialize(s),
            Setting::Wrong(v) => v.serialize(s),
        }
    }
}

/// A `kubernetes` launcher entry: a Pod per active project (DESIGN.md §14, docs/SCALING.md). Each
/// key is typed here; what the values must be (a namespace name, a quantity, an absolute
/// path), which keys are required, and the refusal of unknown keys are pegasus-kube's
/// (`KubeSettings`), when pegasusd starts.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct KubernetesLauncher {
    /// `kubernetes`, when the entry is read on its own (in `launchers:` the tag is the enum's).
    #[serde(default, skip_serializing_if = "Setting::is_absent")]
    pub kind: Setting<String>,
    /// `HOST:PORT` at which a pod reaches pegasusd's `workers.listen`.
    #[serde(default, skip_serializing_if = "Setting::is_absent")]
    pub connect: Setting<String>,
    /// Where the pods are made.
    #[serde(default, skip_serializing_if = "Setting::is_absent")]
    pub namespace: Setting<String>,
    /// The worker image.
    #[serde(default, skip_serializing_if = "Setting::is_absent")]
    pub image: Setting<String>,
    /// The pod's service account.
    #[serde(default, skip_serializing_if = "Setting::is_absent")]
    pub service_account: Setting<String>,
    /// `{claim: NAME}`: the ReadWriteMany claim holding the home's `projects/` folder.
    #[serde(default, skip_serializing_if = "Setting::is_absent")]
    pub home_volume: Setting<HomeVolume>,
    /// `{cpu, memory}` of the worker container.
    #[serde(default, skip_serializing_if = "Setting::is_absent")]
    pub resources: Setting<Resources>,
    /// pegasusd's home as both hosts see it.
    #[serde(default, skip_serializing_if = "Setting::is_absent")]
    pub home_path: Setting<String>,
    /// The uid the worker runs as.
    #[serde(default, skip_serializing_if = "Setting::is_absent")]
    pub run_as_user: Setting<i64>,
    /// The gid the worker runs as.
    #[serde(default, skip_serializing_if = "Setting::is_absent")]
    pub run_as_group: Setting<i64>,
    /// Every other key, as written: none is a setting, and pegasusd refuses the first.
    #[serde(flatten)]
    pub unknown: serde_json::Map<String, serde_json::Value>,
}

/// `home_volume:` of a [`KubernetesLauncher`].
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct HomeVolume {
    /// The claim's name.
    #[serde(default, skip_serializing_if = "Setting::is_absent")]
    pub claim: Setting<String>,
    /// Every other key, as written (refused).
    #[serde(flatten)]
    pub unknown: serde_json::Map<String, serde_json::Value>,
}

/// `resources:` of a [`KubernetesLauncher`]: requests = limits of the worker container.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct Resources {
    /// CPU, e.g. `500m` or `1`.
    #[serde(default, skip_serializing_if = "Setting::is_absent")]
    pub cpu: Setting<Quantity>,
    /// Memory, e.g. `256Mi`.
    #[serde(default, skip_serializing_if = "Setting::is_absent")]
    pub memory: Setting<Quantity>,
    /// Every other key, as written (refused).
    #[serde(flatten)]
    pub unknown: serde_json::Map<String, serde_json::Value>,
}

/// A Kubernetes quantity as written: text, or a number taken as written (`cpu: 1`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum Quantity {
    /// `500m`, `256Mi`.
    Text(String),
    /// `1`, `0.5`.
    Number(serde_json::Number),
}

impl Quantity {
    /// The quantity as Kubernetes reads it.
    pub fn text(&self) -> String {
        match self {
            Quantity::Text(s) => s.clone(),
            Quantity::Number(n) => n.to_string(),
        }
    }
}

/// A `command` launcher.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CommandLauncher {
    /// Where the launched worker reaches pegasusd: `HOST:PORT` of `workers.listen` as seen
    /// from the worker's host.
    pub connect: String,
    /// The command, one argv element each; placeholders: `{worker}`, `{project}`,
    /// `{project_dir}`, `{connect}`, `{env}` (see [`expand_argv`]).
    pub argv: Vec<String>,
}

/// What a launch fills into an argv.
pub struct LaunchValues<'a> {
    /// `{worker}`: the path of the project-worker binary on pegasusd's host.
    pub worker: &'a str,
    /// `{project}`: the project's name.
    pub project: &'a str,
    /// `{project_dir}`: the project folder's path on pegasusd's host.
    pub project_dir: &'a str,
    /// `{connect}`: the launcher's `connect`, `HOST:PORT` where the worker reaches pegasusd.
    pub connect: &'a str,
    /// The public bootstrap environment, in the order `{env}` spells it: never a secret (a
    /// command line is readable by every user of a host; the enrollment token goes on the
    /// launched command's standard input).
    pub env: &'a [(String, String)],
}

/// Expands the placeholders of `argv`: each `{worker}`, `{project}`, `{project_dir}`,
/// `{connect}` inside an element is replaced; an element that is exactly `{env}` becomes the
/// separate elements `env` `K=V` ... (for launchers that do not forward the environment).
pub fn expand_argv(argv: &[String], v: &LaunchValues) -> Vec<String> {
    let mut out = Vec::with_capacity(argv.len() + v.env.len() + 1);
    for arg in argv {
        if arg == "{env}" {
            out.push("env".to_string());
            out.extend(v.env.iter().map(|(k, val)| format!("{k}={val}")));
            continue;
        }
        out.push(
            arg.replace("{worker}", v.worker)
                .replace("{project_dir}", v.project_dir)
                .replace("{project}", v.project)
                .replace("{connect}", v.connect),
        );
    }
    out
}

/// Whether `connect` has the form `HOST:PORT` (a host, a colon, a port number).
pub fn is_host_port(connect: &str) -> bool {
    connect
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok())
}

/// Checks `launchers`, `default_launcher` and `workers.listen` together; the error is the
/// dotted key and what to do.
pub fn check(
    launchers: &BTreeMap<String, LauncherConfig>,
    default_launcher: &str,
    listen: Option<&str>,
) -> Result<(), (String, String)> {
    if let Some(addr) = listen {
        if addr.parse::<std::net::SocketAddr>().is_err() {
            return Err((
                "workers.listen".into(),
                format!("`{addr}` must be IP:PORT, e.g. 0.0.0.0:7475"),
            ));
        }
    }
    for (name, launcher) in launchers {
        let key = format!("launchers.{name}");
        if name == LOCAL {
            return Err((
                key,
                "`local` is built in (a worker on this machine); pick another name".into(),
            ));
        }
        match launcher {
            LauncherConfig::Command(c) => {
                if !c.argv.iter().any(|a| a.contains("{worker}")) {
                    return Err((
                        format!("{key}.argv"),
                        "has no `{worker}`: the command must start the project-worker binary, e.g. [ssh, HOST, \"{env}\", \"{worker}\", \"{project_dir}\"]".into(),
                    ));
                }
                if !is_host_port(&c.connect) {
                    return Err((
                        format!("{key}.connect"),
                        format!("`{}` must be HOST:PORT where the worker's host reaches pegasusd's workers.listen", c.connect),
                    ));
                }
            }
            LauncherConfig::Kubernetes(settings) => {
                if !matches!(settings.image, Setting::Given(_)) {
                    return Err((
                        format!("{key}.image"),
                        "is missing: a kubernetes launcher needs the worker's image".into(),
                    ));
                }
            }
        }
        if listen.is_none() {
            return Err((
                key,
                "needs `workers.listen` (the address launched workers connect back to, e.g. 0.0.0.0:7475)".into(),
            ));
        }
    }
    if default_launcher != LOCAL && !launchers.contains_key(default_launcher) {
        return Err((
            "default_launcher".into(),
            format!("`{default_launcher}` is not `local` nor a name under `launchers:`"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn command(argv: &[&str]) -> LauncherConfig {
        LauncherConfig::Command(CommandLauncher {
            connect: "10.0.0.1:7475".into(),
            argv: argv.iter().map(|s| s.to_string()).collect(),
        })
    }

    #[test]
    fn placeholders_expand_and_env_becomes_separate_elements() {
        let env = vec![
            ("PEGASUS_CONNECT".to_string(), "10.0.0.1:7475".to_string()),
            ("PEGASUS_CA_SHA256".to_string(), "ab12".to_string()),
        ];
        let v = LaunchValues {
            worker: "/usr/bin/project-worker",
            project: "web",
            project_dir: "/h/projects/web",
            connect: "10.0.0.1:7475",
            env: &env,
        };
        let argv: Vec<String> = [
            "ssh",
            "box",
            "{env}",
            "{worker}",
            "{project_dir}",
            "--name={project}@{connect}",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            expand_argv(&argv, &v),
            [
                "ssh",
                "box",
                "env",
                "PEGASUS_CONNECT=10.0.0.1:7475",
                "PEGASUS_CA_SHA256=ab12",
                "/usr/bin/project-worker",
                "/h/projects/web",
                "--name=web@10.0.0.1:7475"
            ]
        );
    }

    #[test]
    fn bad_launcher_settings_name_their_key() {
        let none = BTreeMap::new();
        assert!(check(&none, LOCAL, None).is_ok());
        let key = |l: &BTreeMap<String, LauncherConfig>, d: &str, listen: Option<&str>| {
            check(l, d, listen).unwrap_err().0
        };
        assert_eq!(key(&none, "elsewhere", None), "default_launcher");
        assert_eq!(key(&none, LOCAL, Some("nowhere")), "workers.listen");
        let mut l = BTreeMap::new();
        l.insert("box".to_string(), command(&["ssh", "box", "{project_dir}"]));
        assert_eq!(key(&l, LOCAL, Some("0.0.0.0:7475")), "launchers.box.argv");
        l.insert("box".to_string(), command(&["ssh", "box", "{worker}"]));
        assert_eq!(
            key(&l, LOCAL, None),
            "launchers.box",
            "needs workers.listen"
        );
        assert!(check(&l, "box", Some("0.0.0.0:7475")).is_ok());
        let mut k = BTreeMap::new();
        k.insert(
            "cluster".to_string(),
            LauncherConfig::Kubernetes(Box::new(KubernetesLauncher {
                connect: Setting::Given("x:1".into()),
                ..KubernetesLauncher::default()
            })),
        );
        assert_eq!(
            key(&k, LOCAL, Some("0.0.0.0:7475")),
            "launchers.cluster.image"
        );
        let mut local = BTreeMap::new();
        local.insert(LOCAL.to_string(), command(&["{worker}"]));
        assert_eq!(key(&local, LOCAL, Some("0.0.0.0:7475")), "launchers.local");
    }

    #[test]
    fn the_spec_example_parses() {
        let yaml = r#"
build-box: {kind: command, connect: "10.0.0.1:7475", argv: [ssh, build-box, "{env}", "{worker}", "{project_dir}"]}
cluster: {kind: kubernetes, connect: "pegasusd.pegasus.svc:7475", namespace: pegasus, image: "registry.example/pegasus-worker:0.1", home_volume: {claim: pegasus-home}, resources: {cpu: "500m", memory: 256Mi}}
"#;
        let l: BTreeMap<String, LauncherConfig> = serde_norway::from_str(yaml).unwrap();
        assert!(matches!(l["build-box"], LauncherConfig::Command(_)));
        assert!(matches!(l["cluster"], LauncherConfig::Kubernetes(_)));
    }

    fn kubernetes(yaml: &str) -> KubernetesLauncher {
        let l: BTreeMap<String, LauncherConfig> = serde_norway::from_str(yaml).unwrap();
        match &l["k"] {
            LauncherConfig::Kubernetes(k) => (**k).clone(),
            LauncherConfig::Command(c) => panic!("not a kubernetes entry: {c:?}"),
        }
    }

    #[test]
    fn a_kubernetes_entry_reads_each_setting_into_its_type() {
        let k = kubernetes(
            "k: {kind: kubernetes, connect: \"p.svc:7475\", namespace: pegasus, image: \"w:1\", service_account: null, home_volume: {claim: h}, resources: {cpu: 1, memory: 256Mi}, home_path: /srv, run_as_user: 1000}\n",
        );
        assert_eq!(k.kind, Setting::Absent, "the tag is the enum's");
        assert_eq!(k.connect, Setting::Given("p.svc:7475".into()));
        assert_eq!(k.namespace, Setting::Given("pegasus".into()));
        assert_eq!(k.image, Setting::Given("w:1".into()));
        assert_eq!(k.service_account, Setting::Absent);
        let Setting::Given(volume) = &k.home_volume else {
            panic!("{:?}", k.home_volume)
        };
        assert_eq!(volume.claim, Setting::Given("h".into()));
        let Setting::Given(res) = &k.resources else {
            panic!("{:?}", k.resources)
        };
        let text = |q: &Setting<Quantity>| match q {
            Setting::Given(q) => q.text(),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            (text(&res.cpu), text(&res.memory)),
            ("1".into(), "256Mi".into())
        );
        assert_eq!(k.home_path, Setting::Given("/srv".into()));
        assert_eq!(k.run_as_user, Setting::Given(1000));
        assert_eq!(k.run_as_group, Setting::Absent);
        assert!(k.unknown.is_empty());
    }

    #[test]
    fn a_kubernetes_entry_with_wrong_settings_still_reads_and_keeps_them() {
        // config.yml loads; pegasusd refuses these when it starts the launcher (pegasus-kube).
        let k = kubernetes(
            "k: {kind: kubernetes, connect: 7475, image: [a], home_volume: pegasus-home, resources: {gpu: 1}, run_as_user: staff, namepsace: x}\n",
        );
        assert_eq!(k.connect, Setting::Wrong(serde_json::json!(7475)));
        assert_eq!(k.image, Setting::Wrong(serde_json::json!(["a"])));
        assert_eq!(
            k.home_volume,
            Setting::Wrong(serde_json::json!("pegasus-home"))
        );
        let Setting::Given(res) = &k.resources else {
            panic!("{:?}", k.resources)
        };
        assert_eq!(res.unknown.keys().collect::<Vec<_>>(), ["gpu"]);
        assert_eq!(k.run_as_user, Setting::Wrong(serde_json::json!("staff")));
        assert_eq!(k.unknown.keys().collect::<Vec<_>>(), ["namepsace"]);
        let mut none = BTreeMap::new();
        none.insert("k".to_string(), LauncherConfig::Kubernetes(Box::new(k)));
        assert_eq!(
            check(&none, LOCAL, Some("0.0.0.0:7475")).unwrap_err().0,
            "launchers.k.image"
        );
    }

    #[test]
    fn a_kubernetes_entry_is_written_back_as_it_was_read() {
        // config.yml goes to the workers as JSON: each setting as written, numbers as numbers.
        let yaml = "k: {kind: kubernetes, connect: \"p.svc:7475\", image: 7, home_volume: {claim: h, size: 1}, resources: {cpu: 0.5}, extra: [1]}\n";
        let l: BTreeMap<String, LauncherConfig> = serde_norway::from_str(yaml).unwrap();
        let json = serde_json::to_value(&l).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"k": {"kind": "kubernetes", "connect": "p.svc:7475", "image": 7,
                "home_volume": {"claim": "h", "size": 1}, "resources": {"cpu": 0.5}, "extra": [1]}})
        );
        let again: BTreeMap<String, LauncherConfig> = serde_json::from_value(json).unwrap();
        assert_eq!(again, l);
    }
}
