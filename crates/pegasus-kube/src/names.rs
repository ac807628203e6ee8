//! What a worker pod is called and labelled. A pod's name is a function of the home and the
//! project alone, so at most one pod per project and home can exist in a namespace (the API
//! server refuses a second of the same name), and a restarted pegasusd finds its pods again.
//!
//! These names are those of live pods: changing how they are made orphans the pods of every
//! running pegasusd that upgrades.

use crate::error::KubeError;

/// `app.kubernetes.io/managed-by`, the well-known label tools read to know who owns a pod.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// The value of [`MANAGED_BY_LABEL`] on every worker pod.
pub const MANAGED_BY: &str = "pegasus";
/// The label carrying the home's id: the one pegasusd lists its pods by, so it never sees, and
/// never deletes, another home's pods in the same namespace.
pub const HOME_LABEL: &str = "pegasus/home";
/// The label carrying the project (see [`project_label`]), for `kubectl get pods -l`.
pub const PROJECT_LABEL: &str = "pegasus/project";
/// The annotation carrying the project's exact name, which adoption reads: a label value
/// cannot end with `-`, a project name can.
pub const PROJECT_ANNOTATION: &str = "pegasus/project";

/// The longest pod name (and label value): a DNS-1123 label.
const MAX_NAME: usize = 63;
/// How many characters of the home id a pod name carries.
const SHORT_HOME: usize = 8;

/// A home's id as pods carry it in [`HOME_LABEL`]; checked once, since a bad one would only
/// be refused by the API server at the first launch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HomeId(String);

impl HomeId {
    /// Checks that `id` is a label value: 1-63 of `[A-Za-z0-9-_.]`, starting and ending with
    /// a letter or digit.
    pub fn new(id: &str) -> Result<HomeId, KubeError> {
        let b = id.as_bytes();
        let ok = !b.is_empty()
            && b.len() <= MAX_NAME
            && b.first().is_some_and(u8::is_ascii_alphanumeric)
            && b.last().is_some_and(u8::is_ascii_alphanumeric)
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'));
        if ok {
            Ok(HomeId(id.to_string()))
        } else {
            Err(KubeError::HomeId(id.escape_debug().to_string()))
        }
    }

    /// The id as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Up to 8 of the id's first letters and digits, lowercased: enough to tell homes sharing
    /// a namespace apart in `kubectl get pods`, short enough to leave the name room for the
    /// project. Never empty: the id starts with a letter or digit.
    pub fn short(&self) -> String {
        self.0
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .map(|c| c.to_ascii_lowercase())
            .take(SHORT_HOME)
            .collect()
    }
}

/// The pod name of a project's worker: `pegasus-<home short>-<project>`, or, when that would
/// pass 63 characters or end with `-`, the project cut short and followed by a hash of the
/// whole project name, so two long names sharing a prefix still get two pods.
pub fn pod_name(home: &HomeId, project: &str) -> String {
    fitted(&format!("pegasus-{}-", home.short()), project)
}

/// The [`PROJECT_LABEL`] value of a project: its name, or as in [`pod_name`] when the name is
/// not a label value as it stands (it ends with `-`).
pub fn project_label(project: &str) -> String {
    fitted("", project)
}

/// `prefix + value` if that is at most 63 characters and ends with a letter or digit, else
/// `prefix + value cut + "-" + 8 hex of value's hash`. `prefix` is short and `value` a
/// project name (ASCII), so the cut is on a character boundary.
fn fitted(prefix: &str, value: &str) -> String {
    let whole = format!("{prefix}{value}");
    if whole.len() <= MAX_NAME && !whole.ends_with('-') {
        return whole;
    }
    let room = MAX_NAME.saturating_sub(prefix.len() + 9);
    let cut = value.get(..room.min(value.len())).unwrap_or("");
    let cut = cut.trim_end_matches('-');
    let hash = fnv1a(value);
    if cut.is_empty() {
        format!("{prefix}{hash:08x}")
    } else {
        format!("{prefix}{cut}-{hash:08x}")
    }
}

/// FNV-1a, 32 bits: tiny and fixed forever (names of live pods depend on it), unlike std's
/// hasher, whose output may change between Rust releases.
fn fnv1a(s: &str) -> u32 {
    s.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::settings::is_dns_label;

    #[test]
    fn home_ids_are_label_values() {
        for ok in ["3f9a2c71d0e4", "laptop", "Home_1.b", "a"] {
            assert!(HomeId::new(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-a", "a-", "a b", "é", &"a".repeat(64)] {
            assert!(HomeId::new(bad).is_err(), "{bad}");
        }
        assert_eq!(HomeId::new("3F9A-2c71d0e4").unwrap().short(), "3f9a2c71");
        assert_eq!(HomeId::new("ab").unwrap().short(), "ab");
    }

    #[test]
    fn pod_names_are_dns_labels_and_tell_projects_apart() {
        let home = HomeId::new("3f9a2c71d0e4").unwrap();
        assert_eq!(pod_name(&home, "web"), "pegasus-3f9a2c71-web");
        let long_a = format!("{}a", "x".repeat(62));
        let long_b = format!("{}b", "x".repeat(62));
        let names = [
            pod_name(&home, &long_a),
            pod_name(&home, &long_b),
            pod_name(&home, "web-"),
            pod_name(&home, "web--"),
            pod_name(&home, &format!("{}-{}", "a".repeat(36), "b".repeat(20))),
        ];
        for n in &names {
            assert!(is_dns_label(n), "{n}");
            assert!(n.starts_with("pegasus-3f9a2c71-"), "{n}");
        }
        assert_ne!(names[0], names[1]);
        assert_ne!(names[2], names[3]);
        assert_eq!(names[0].len(), 63);
        // The hash is fixed: pods of a running pegasusd keep their names across upgrades.
        assert_eq!(
            pod_name(&home, "web-"),
            format!("pegasus-3f9a2c71-web-{:08x}", fnv1a("web-"))
        );
        assert_eq!(fnv1a("web-"), 0xafc4_1bf4);
    }

    #[test]
    fn project_labels_are_label_values() {
        assert_eq!(project_label("web"), "web");
        let max = "p".repeat(63);
        assert_eq!(project_label(&max), max);
        let l = project_label("web-");
        assert!(
            l.starts_with("web-") && l.len() == 12 && !l.ends_with('-'),
            "{l}"
        );
    }
}
