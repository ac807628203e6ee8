//! A `kind: kubernetes` entry of config.yml `launchers:`, checked once when pegasusd starts so
//! that a typo fails there, naming its key, and not at the first launch.

use std::path::{Path, PathBuf};

use pegasus_store::launcher::{HomeVolume, KubernetesLauncher, Quantity, Resources, Setting};
use serde_json::Value;

use crate::error::KubeError;

/// Every key a kubernetes launcher entry may have. An unknown key is refused: a misspelt
/// `namepsace` would otherwise launch into `default` without a word.
const KNOWN_KEYS: [&str; 10] = [
    "kind",
    "connect",
    "namespace",
    "image",
    "service_account",
    "home_volume",
    "resources",
    "home_path",
    "run_as_user",
    "run_as_group",
];

/// The namespace used when the entry names none, as `kubectl` does.
pub const DEFAULT_NAMESPACE: &str = "default";

/// The checked settings of one kubernetes launcher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeSettings {
    /// `HOST:PORT` at which a pod reaches pegasusd's `workers.listen`; pegasusd puts it in
    /// `PEGASUS_CONNECT`.
    pub connect: String,
    /// Where the pods are made; pegasusd's credentials need pod rights there.
    pub namespace: String,
    /// The worker image (docs/worker.Dockerfile).
    pub image: String,
    /// The pod's service account. Without one the pod gets no API token at all: a worker has
    /// no business with the Kubernetes API.
    pub service_account: Option<String>,
    /// The ReadWriteMany claim whose root is the home's `projects/` folder.
    pub claim: String,
    /// pegasusd's home as both hosts see it: a project's folder is mounted at
    /// `<home_path>/projects/<project>`, the path pegasusd gives the worker.
    pub home_path: PathBuf,
    /// CPU for the worker container (requests = limits), e.g. `500m`.
    pub cpu: Option<String>,
    /// Memory for the worker container (requests = limits), e.g. `256Mi`.
    pub memory: Option<String>,
    /// The uid the worker runs as; it must own the project folders on the shared volume as
    /// pegasusd's user does on its host. Absent: the image's user.
    pub run_as_user: Option<i64>,
    /// The gid the worker runs as. Absent: the image's group.
    pub run_as_group: Option<i64>,
}

impl KubeSettings {
    /// Checks a launcher entry given as JSON (as config.yml holds it); see
    /// [`KubeSettings::from_entry`].
    pub fn from_value(value: &Value, home: &Path) -> Result<KubeSettings, KubeError> {
        let entry = serde_json::from_value::<KubernetesLauncher>(value.clone()).map_err(|_| {
            KubeError::setting(
                "kind",
                "a kubernetes launcher must be a mapping: {kind: kubernetes, connect: HOST:PORT, image: ..., home_volume: {claim: ...}}",
            )
        })?;
        Self::from_entry(&entry, home)
    }

    /// Checks a launcher entry as pegasusd read it from config.yml. `home` is pegasusd's home,
    /// the mount path when the entry has no `home_path`. Errors name the key relative to the
    /// entry; the first wrong key is the one named, in the order below.
    pub fn from_entry(entry: &KubernetesLauncher, home: &Path) -> Result<KubeSettings, KubeError> {
        if let Some(key) = entry.unknown.keys().next() {
            return Err(KubeError::setting(
                key,
                format!(
                    "is not a kubernetes launcher setting (known: {})",
                    KNOWN_KEYS.join(", ")
                ),
            ));
        }
        match &entry.kind {
            Setting::Absent => {}
            Setting::Given(kind) if kind == "kubernetes" => {}
            Setting::Given(_) | Setting::Wrong(_) => {
                return Err(KubeError::setting("kind", "must be `kubernetes`"))
            }
        }

        let connect = required_str("connect", &entry.connect, "HOST:PORT where a pod reaches pegasusd's workers.listen, e.g. pegasusd.pegasus.svc:7475")?;
        if !pegasus_store::launcher::is_host_port(connect) {
            return Err(KubeError::setting(
                "connect",
                format!(
                    "`{connect}` must be HOST:PORT where a pod reaches pegasusd's workers.listen"
                ),
            ));
        }

        let namespace = optional_str("namespace", &entry.namespace)?.unwrap_or(DEFAULT_NAMESPACE);
        if !is_dns_label(namespace) {
            return Err(KubeError::setting(
                "namespace",
                format!(
                    "`{namespace}` is not a namespace name: 1-63 lowercase letters, digits and `-`"
                ),
            ));
        }

        let image = required_str(
            "image",
            &entry.image,
            "the worker's image, e.g. registry.example/pegasus-worker:0.1",
        )?;
        if image.chars().any(char::is_whitespace) {
            return Err(KubeError::setting(
                "image",
                format!("`{image}` has a space"),
            ));
        }

        let service_account = optional_str("service_account", &entry.service_account)?;
        if let Some(sa) = service_account {
            if !is_dns_subdomain(sa) {
                return Err(KubeError::setting(
                    "service_account",
                    format!("`{sa}` is not a service account name: lowercase letters, digits, `-` and `.`"),
                ));
            }
        }

        let claim = home_volume_claim(&entry.home_volume)?;
        let (cpu, memory) = resources(&entry.resources)?;

        let home_path = match optional_str("home_path", &entry.home_path)? {
            Some(p) => PathBuf::from(p),
            None => home.to_path_buf(),
        };
        if !home_path.is_absolute() {
            return Err(KubeError::setting(
                "home_path",
                format!(
                    "`{}` must be an absolute path (pegasusd's home as the pod sees it)",
                    home_path.display()
                ),
            ));
        }

        Ok(KubeSettings {
            connect: connect.to_string(),
            namespace: namespace.to_string(),
            image: image.to_string(),
            service_account: service_account.map(str::to_string),
            claim,
            home_path,
            cpu,
            memory,
            run_as_user: optional_id("run_as_user", &entry.run_as_user)?,
            run_as_group: optional_id("run_as_group", &entry.run_as_group)?,
        })
    }

    /// A project's folder as its pod sees it, `<home_path>/projects/<project>`: where the
    /// project is mounted, and the path to give the worker in its command.
    pub fn project_dir(&self, project: &str) -> PathBuf {
        pegasus_store::Home::new(&self.home_path).project_dir(project)
    }
}

fn required_str<'a>(
    key: &str,
    setting: &'a Setting<String>,
    what: &str,
) -> Result<&'a str, KubeError> {
    match optional_str(key, setting)? {
        Some(s) => Ok(s),
        None => Err(KubeError::setting(key, format!("is missing: {what}"))),
    }
}

fn optional_str<'a>(key: &str, setting: &'a Setting<String>) -> Result<Option<&'a str>, KubeError> {
    match setting {
        Setting::Absent => Ok(None),
        Setting::Given(s) if !s.trim().is_empty() => Ok(Some(s.as_str())),
        Setting::Given(_) => Err(KubeError::setting(key, "is empty")),
        Setting::Wrong(_) => Err(KubeError::setting(key, "must be a string")),
    }
}

fn optional_id(key: &str, setting: &Setting<i64>) -> Result<Option<i64>, KubeError> {
    match setting {
        Setting::Absent => Ok(None),
        Setting::Given(id) if (0..=i64::from(u32::MAX)).contains(id) => Ok(Some(*id)),
        Setting::Given(_) | Setting::Wrong(_) => Err(KubeError::setting(
            key,
            "must be a numeric id, e.g. 1000 (`id -u` of pegasusd's user)",
        )),
    }
}

/// `home_volume: {claim: NAME}`.
fn home_volume_claim(setting: &Setting<HomeVolume>) -> Result<String, KubeError> {
    const WHAT: &str = "{claim: NAME}: the ReadWriteMany claim holding the home's projects/ folder";
    let volume = match setting {
        Setting::Given(volume) => volume,
        Setting::Absent => {
            return Err(KubeError::setting(
                "home_volume",
                format!("is missing: {WHAT}"),
            ))
        }
        Setting::Wrong(_) => {
            return Err(KubeError::setting("home_volume", format!("must be {WHAT}")))
        }
    };
    if let Some(key) = volume.unknown.keys().next() {
        return Err(KubeError::setting(
            &format!("home_volume.{key}"),
            "is not a home_volume setting (known: claim)",
        ));
    }
    let claim = required_str("claim", &volume.claim, WHAT).map_err(|_| {
        KubeError::setting(
            "home_volume.claim",
            format!("is missing or not a name: {WHAT}"),
        )
    })?;
    if !is_dns_subdomain(claim) {
        return Err(KubeError::setting(
            "home_volume.claim",
            format!("`{claim}` is not a claim name: lowercase letters, digits, `-` and `.`"),
        ));
    }
    Ok(claim.to_string())
}

/// `resources: {cpu: QUANTITY, memory: QUANTITY}`, both optional; numbers are taken as
/// written (`cpu: 1`).
fn resources(setting: &Setting<Resources>) -> Result<(Option<String>, Option<String>), KubeError> {
    const WHAT: &str = "{cpu: QUANTITY, memory: QUANTITY}, e.g. {cpu: 500m, memory: 256Mi}";
    let res = match setting {
        Setting::Given(res) => res,
        Setting::Absent => return Ok((None, None)),
        Setting::Wrong(_) => {
            return Err(KubeError::setting("resources", format!("must be {WHAT}")))
        }
    };
    if let Some(key) = res.unknown.keys().next() {
        return Err(KubeError::setting(
            &format!("resources.{key}"),
            "is not a resources setting (known: cpu, memory)",
        ));
    }
    let quantity = |name: &str,
                    setting: &Setting<Quantity>,
                    example: &str|
     -> Result<Option<String>, KubeError> {
        let key = format!("resources.{name}");
        let text = match setting {
            Setting::Absent => return Ok(None),
            Setting::Given(q) => q.text(),
            Setting::Wrong(_) => {
                return Err(KubeError::setting(
                    &key,
                    format!("must be a quantity, e.g. {example}"),
                ))
            }
        };
        if is_quantity(&text) {
            Ok(Some(text))
        } else {
            Err(KubeError::setting(
                &key,
                format!("`{text}` is not a quantity, e.g. {example}"),
            ))
        }
    };
    Ok((
        quantity("cpu", &res.cpu, "500m or 1")?,
        quantity("memory", &res.memory, "256Mi or 1Gi")?,
    ))
}

/// A Kubernetes quantity as a user writes one: a non-negative decimal number, then an SI or
/// binary suffix or a decimal exponent (`500m`, `1.5`, `256Mi`, `1e3`).
fn is_quantity(s: &str) -> bool {
    let s = s.strip_prefix('+').unwrap_or(s);
    let digits_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(digits_end);
    let number_ok = number.chars().filter(|c| *c == '.').count() <= 1
        && number.chars().any(|c| c.is_ascii_digit());
    const SUFFIXES: [&str; 16] = [
        "", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei",
    ];
    let suffix_ok = SUFFIXES.contains(&suffix)
        || suffix
            .strip_prefix(['e', 'E'])
            .map(|e| e.strip_prefix(['+', '-']).unwrap_or(e))
            .is_some_and(|e| !e.is_empty() && e.chars().all(|c| c.is_ascii_digit()));
    number_ok && suffix_ok
}

/// A DNS-1123 label: what a namespace or a pod name must be.
pub(crate) fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= 63
        && b.first().is_some_and(alnum)
        && b.last().is_some_and(alnum)
        && b.iter().all(|c| alnum(c) || *c == b'-')
}

/// A DNS-1123 subdomain: what a claim or service account name must be.
fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn home() -> &'static Path {
        Path::new("/srv/pegasus")
    }

    fn key_of(v: Value) -> String {
        match KubeSettings::from_value(&v, home()) {
            Err(KubeError::Setting { key, .. }) => key,
            other => panic!("expected a setting error, got {other:?}"),
        }
    }

    fn minimal() -> Value {
        json!({"kind": "kubernetes", "connect": "pegasusd.pegasus.svc:7475",
               "image": "pegasus-worker:dev", "home_volume": {"claim": "pegasus-home"}})
    }

    fn with(key: &str, value: Value) -> Value {
        let mut v = minimal();
        v.as_object_mut().unwrap().insert(key.to_string(), value);
        v
    }

    #[test]
    fn the_spec_example_reads_with_its_defaults() {
        let v = json!({"kind": "kubernetes", "connect": "pegasusd.pegasus.svc:7475", "namespace": "pegasus",
            "image": "registry.example/pegasus-worker:0.1", "home_volume": {"claim": "pegasus-home"},
            "resources": {"cpu": "500m", "memory": "256Mi"}});
        let s = KubeSettings::from_value(&v, home()).unwrap();
        assert_eq!(
            s,
            KubeSettings {
                connect: "pegasusd.pegasus.svc:7475".into(),
                namespace: "pegasus".into(),
                image: "registry.example/pegasus-worker:0.1".into(),
                service_account: None,
                claim: "pegasus-home".into(),
                home_path: home().to_path_buf(),
                cpu: Some("500m".into()),
                memory: Some("256Mi".into()),
                run_as_user: None,
                run_as_group: None,
            }
        );
        let s = KubeSettings::from_value(&minimal(), home()).unwrap();
        assert_eq!(s.namespace, "default");
        assert_eq!((s.cpu, s.memory), (None, None));
        let s = KubeSettings::from_value(&with("resources", json!({"cpu": 1})), home()).unwrap();
        assert_eq!(s.cpu.as_deref(), Some("1"));
        let s = KubeSettings::from_value(&with("home_path", json!("/mnt/home")), home()).unwrap();
        assert_eq!(s.home_path, Path::new("/mnt/home"));
    }

    #[test]
    fn each_bad_setting_names_its_key() {
        let mut no_image = minimal();
        no_image.as_object_mut().unwrap().remove("image");
        assert_eq!(key_of(no_image), "image");
        let mut no_volume = minimal();
        no_volume.as_object_mut().unwrap().remove("home_volume");
        assert_eq!(key_of(no_volume), "home_volume");
        let mut no_connect = minimal();
        no_connect.as_object_mut().unwrap().remove("connect");
        assert_eq!(key_of(no_connect), "connect");
        assert_eq!(key_of(with("connect", json!("pegasusd"))), "connect");
        assert_eq!(key_of(with("namepsace", json!("x"))), "namepsace");
        assert_eq!(key_of(with("namespace", json!("Pegasus_NS"))), "namespace");
        assert_eq!(key_of(with("image", json!(""))), "image");
        assert_eq!(key_of(with("image", json!(7))), "image");
        assert_eq!(key_of(with("home_volume", json!({}))), "home_volume.claim");
        assert_eq!(
            key_of(with("home_volume", json!({"claim": "Home!"}))),
            "home_volume.claim"
        );
        assert_eq!(
            key_of(with("home_volume", json!({"claim": "h", "size": 1}))),
            "home_volume.size"
        );
        assert_eq!(
            key_of(with("home_volume", json!("pegasus-home"))),
            "home_volume"
        );
        assert_eq!(
            key_of(with("resources", json!({"cpu": "lots"}))),
            "resources.cpu"
        );
        assert_eq!(
            key_of(with("resources", json!({"memory": "-1Gi"}))),
            "resources.memory"
        );
        assert_eq!(
            key_of(with("resources", json!({"gpu": 1}))),
            "resources.gpu"
        );
        assert_eq!(
            key_of(with("service_account", json!("Pegasus"))),
            "service_account"
        );
        assert_eq!(
            key_of(with("home_path", json!("relative/home"))),
            "home_path"
        );
        assert_eq!(key_of(with("run_as_user", json!(-1))), "run_as_user");
        assert_eq!(key_of(with("run_as_group", json!("staff"))), "run_as_group");
        assert_eq!(key_of(with("kind", json!("command"))), "kind");
        assert_eq!(key_of(json!("cluster")), "kind");
    }

    #[test]
    fn an_entry_read_from_config_yml_is_checked_as_its_json_is() {
        let yaml = "launchers:\n  k: {kind: kubernetes, connect: \"p.svc:7475\", namespace: pegasus, image: \"w:1\", home_volume: {claim: h}, resources: {cpu: 1}, run_as_user: 1000}\n";
        let config: pegasus_store::Config = serde_norway::from_str(yaml).unwrap();
        let pegasus_store::launcher::LauncherConfig::Kubernetes(entry) = &config.launchers["k"]
        else {
            panic!("not a kubernetes entry")
        };
        let s = KubeSettings::from_entry(entry, home()).unwrap();
        let json = json!({"kind": "kubernetes", "connect": "p.svc:7475", "namespace": "pegasus",
            "image": "w:1", "home_volume": {"claim": "h"}, "resources": {"cpu": 1}, "run_as_user": 1000});
        assert_eq!(s, KubeSettings::from_value(&json, home()).unwrap());
        assert_eq!((s.cpu.as_deref(), s.run_as_user), (Some("1"), Some(1000)));
        // A wrong setting reads from config.yml and is refused here, naming its key.
        let yaml = "launchers:\n  k: {kind: kubernetes, connect: \"p.svc:7475\", image: \"w:1\", home_volume: {claim: h}, run_as_group: staff}\n";
        let config: pegasus_store::Config = serde_norway::from_str(yaml).unwrap();
        let pegasus_store::launcher::LauncherConfig::Kubernetes(entry) = &config.launchers["k"]
        else {
            panic!("not a kubernetes entry")
        };
        let e = KubeSettings::from_entry(entry, home())
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "`run_as_group` must be a numeric id, e.g. 1000 (`id -u` of pegasusd's user)"
        );
    }

    #[test]
    fn every_known_key_is_a_field_of_the_typed_entry() {
        for key in KNOWN_KEYS {
            let entry: KubernetesLauncher = serde_json::from_value(json!({ key: "x" })).unwrap();
            assert!(entry.unknown.is_empty(), "{key}");
        }
    }

    #[test]
    fn quantities_are_what_kubernetes_accepts() {
        for ok in [
            "500m", "1", "0.5", "256Mi", "1Gi", "1e3", "2E-2", "+1", ".5", "1k",
        ] {
            assert!(is_quantity(ok), "{ok}");
        }
        for bad in ["", "m", "1..2", "1MB", "-1", "1 Gi", "1e", "lots"] {
            assert!(!is_quantity(bad), "{bad}");
        }
    }
}
