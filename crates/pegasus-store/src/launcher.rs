//! Where a project's worker runs (SPEC §14): config.yml `launchers:` (kind `command`; `local`
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
    Kubernetes(serde_json::Value),
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
    pub worker: &'a str,
    pub project: &'a str,
    pub project_dir: &'a str,
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
                if settings.get("image").and_then(|i| i.as_str()).is_none() {
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
            LauncherConfig::Kubernetes(serde_json::json!({"connect": "x:1"})),
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
}
