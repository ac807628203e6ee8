//! The start-up check of the models (issue 37): `default_model` and the model of every project
//! that can run must name a provider config.yml defines, and that provider's key must be set.
//! Each problem is one line, logged at start (a warning while something else can still be
//! served, an error when nothing can) and listed by `pegasusctl status` until pegasusd restarts.

use pegasus_llm::provider;
use pegasus_proto::ProjectStatus;
use pegasus_store::{Config, ScanEntry};

/// Why `model` cannot be called as configured now, if it cannot.
fn problem(config: &Config, model: &str) -> Option<String> {
    match provider::resolve(config, model) {
        Err(e) => Some(e.to_string()),
        Ok(target) => provider::credential(&target).err().map(|e| e.to_string()),
    }
}

/// The problems, one line each, and whether any model in use works.
pub(crate) fn check(config: &Config, entries: &[ScanEntry]) -> (Vec<String>, bool) {
    let mut lines = Vec::new();
    let mut any_works = false;
    // Who relies on the default model: the MainAgent, and each runnable project naming none.
    let mut on_default = Vec::new();
    for entry in entries {
        let Ok(project) = &entry.project else {
            continue;
        };
        if !matches!(
            project.status(),
            ProjectStatus::Active | ProjectStatus::Suspended
        ) {
            continue;
        }
        match project.model().filter(|m| !m.trim().is_empty()) {
            None => on_default.push(entry.name.clone()),
            Some(model) => match problem(config, model) {
                Some(why) => lines.push(format!(
                    "project {}: its model `{model}` cannot be used: {why} (or change `model:` in its PROJECT.md)",
                    entry.name
                )),
                None => any_works = true,
            },
        }
    }
    let default = &config.default_model;
    match problem(config, default) {
        Some(why) => {
            let users = match on_default.len() {
                0 => "the MainAgent".to_string(),
                1 => format!("the MainAgent and project {}", on_default[0]),
                n => format!("the MainAgent and {n} projects"),
            };
            lines.insert(
                0,
                format!(
                    "default_model `{default}` (used by {users}) cannot be used: {why} (or set default_model in config.yml; README: a local model needs no key)"
                ),
            );
        }
        None => any_works = true,
    }
    (lines, any_works)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn config(yaml: &str) -> Config {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.yml");
        std::fs::write(&path, yaml).unwrap();
        Config::load(&path).unwrap()
    }

    #[test]
    fn a_missing_key_and_an_unknown_provider_are_one_line_each() {
        let c = config(
            "default_model: nokey/m\nproviders:\n  nokey: {kind: anthropic, base_url: \"http://127.0.0.1:9\", api_key_env: PEGASUS_TEST_UNSET_KEY_37}\n",
        );
        let (lines, works) = check(&c, &[]);
        assert!(!works);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].contains("default_model `nokey/m` (used by the MainAgent)")
                && lines[0].contains("PEGASUS_TEST_UNSET_KEY_37"),
            "{lines:?}"
        );
        let c = config("default_model: nowhere/m\n");
        let (lines, _) = check(&c, &[]);
        assert!(lines[0].contains("unknown provider `nowhere`"), "{lines:?}");
    }

    #[test]
    fn a_local_provider_needs_no_key() {
        let c = config(
            "default_model: llama/any\nproviders:\n  llama: {kind: openai, base_url: \"http://127.0.0.1:9/v1\", local: true}\n",
        );
        assert_eq!(check(&c, &[]), (vec![], true));
    }
}
