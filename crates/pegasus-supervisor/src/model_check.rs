//! The start-up check of the models (issue 37): `default_model` and the model of every project
//! that can run must name a provider config.yml defines, and that provider's key must be set;
//! so must every fallback model (DESIGN.md §5), which must also have a price (an unpriced one
//! in config.yml already refused pegasusd's start; a PROJECT.md's is said here).
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

/// The problems, one line each, and whether any model in use works. `cannot_answer` says why a
/// fallback model could not answer a call (the gateway's [`pegasus_llm::Gateway::cannot_answer`]).
pub(crate) fn check(
    config: &Config,
    entries: &[ScanEntry],
    cannot_answer: impl Fn(&str) -> Option<String>,
) -> (Vec<String>, bool) {
    let mut lines = Vec::new();
    for model in &config.fallback {
        if let Some(why) = cannot_answer(model) {
            lines.push(format!(
                "fallback `{model}` in config.yml cannot answer: {why} (or remove it from `fallback:`)"
            ));
        }
    }
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
        for model in project.fallback().unwrap_or_default() {
            if let Some(why) = cannot_answer(model) {
                lines.push(format!(
                    "project {}: its fallback `{model}` cannot answer: {why} (or change `fallback:` in its PROJECT.md)",
                    entry.name
                ));
            }
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
        let (lines, works) = check(&c, &[], |_| None);
        assert!(!works);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].contains("default_model `nokey/m` (used by the MainAgent)")
                && lines[0].contains("PEGASUS_TEST_UNSET_KEY_37"),
            "{lines:?}"
        );
        let c = config("default_model: nowhere/m\n");
        let (lines, _) = check(&c, &[], |_| None);
        assert!(lines[0].contains("unknown provider `nowhere`"), "{lines:?}");
    }

    /// Each fallback model that could not answer is one line: config.yml's, and each
    /// runnable project's own list.
    #[test]
    fn each_fallback_that_cannot_answer_is_one_line() {
        let c = config(
            "default_model: llama/any\nfallback: [llama/ok, llama/nokey]\nproviders:\n  llama: {kind: openai, base_url: \"http://127.0.0.1:9/v1\", local: true}\n",
        );
        let text = "---\nname: web\nstatus: active\ncreated: 2026-02-28T10:00:00Z\nfallback: [llama/unpriced]\n---\n## Goal\nG\n";
        let project =
            pegasus_store::ProjectFile::parse(text, std::path::Path::new("PROJECT.md")).unwrap();
        let entries = [ScanEntry {
            name: "web".into(),
            dir: std::path::PathBuf::from("/nowhere/web"),
            project: Ok(project),
        }];
        let why = |m: &str| match m {
            "llama/nokey" => Some("no API key".to_string()),
            "llama/unpriced" => Some("no price".to_string()),
            _ => None,
        };
        let (lines, works) = check(&c, &entries, why);
        assert!(works);
        assert_eq!(
            lines,
            [
                "fallback `llama/nokey` in config.yml cannot answer: no API key (or remove it from `fallback:`)",
                "project web: its fallback `llama/unpriced` cannot answer: no price (or change `fallback:` in its PROJECT.md)",
            ]
        );
    }

    #[test]
    fn a_local_provider_needs_no_key() {
        let c = config(
            "default_model: llama/any\nproviders:\n  llama: {kind: openai, base_url: \"http://127.0.0.1:9/v1\", local: true}\n",
        );
        assert_eq!(check(&c, &[], |_| None), (vec![], true));
    }
}
