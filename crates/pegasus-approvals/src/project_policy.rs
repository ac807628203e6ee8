//! One project's policy in force, parsed once and again only when its PROJECT.md changed
//! (its [`FileStamp`]), so `approve --always` and a hand edit count at the next call without
//! a parse per call. A PROJECT.md that does not load (or whose `approvals:` block is wrong)
//! refuses every gated call with one line that names the file and what is wrong: its
//! project's rules are unknown then, and config.yml's alone may be looser.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use pegasus_store::approvals::ApprovalsConfig;
use pegasus_store::{FileStamp, ProjectFile, PROJECT_FILE};

use crate::policy::Policy;

/// Why no policy is in force for a project: its PROJECT.md does not load.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("approval refused: PROJECT.md of {project} does not load ({error}); fix it and retry")]
pub struct PolicyRefusal {
    /// The project's name.
    pub project: String,
    /// What is wrong with its PROJECT.md (the file and line first).
    pub error: String,
}

/// The last parse, and the version of the file it was of.
struct Parsed {
    stamp: FileStamp,
    /// Whether the stamp stands for the content ([`FileStamp::settled`] when it was read): a
    /// file edited within one tick of the clock is read again at the next call.
    settled: bool,
    policy: Result<Arc<Policy>, PolicyRefusal>,
}

/// One project's policy, cached.
pub struct ProjectPolicy {
    project: String,
    dir: PathBuf,
    config: ApprovalsConfig,
    parsed: Mutex<Option<Parsed>>,
}

impl ProjectPolicy {
    /// The policy of project `project` in `dir`, under config.yml's block `config`.
    pub fn new(project: &str, dir: &Path, config: ApprovalsConfig) -> ProjectPolicy {
        ProjectPolicy {
            project: project.to_string(),
            dir: dir.to_path_buf(),
            config,
            parsed: Mutex::new(None),
        }
    }

    /// The policy in force now: config.yml's block under PROJECT.md's, read again only if the
    /// file changed since the last call.
    pub fn get(&self) -> Result<Arc<Policy>, PolicyRefusal> {
        // The stamp before the read: a change in between is seen at the next call.
        let stamp = std::fs::metadata(self.dir.join(PROJECT_FILE))
            .ok()
            .map(|m| FileStamp::of(&m));
        let mut parsed = self.parsed.lock().unwrap_or_else(|p| p.into_inner());
        if let (Some(stamp), Some(p)) = (stamp, parsed.as_ref()) {
            if p.settled && p.stamp == stamp {
                return p.policy.clone();
            }
        }
        let policy = self.parse();
        *parsed = stamp.map(|stamp| Parsed {
            stamp,
            settled: stamp.settled(SystemTime::now()),
            policy: policy.clone(),
        });
        policy
    }

    fn parse(&self) -> Result<Arc<Policy>, PolicyRefusal> {
        let refused = |error: String| PolicyRefusal {
            project: self.project.clone(),
            error,
        };
        let file = ProjectFile::load(&self.dir).map_err(|e| refused(e.to_string()))?;
        // `ProjectFile::load` checks the block already; this is its typed read.
        let block = ApprovalsConfig::from_yaml(file.get("approvals").as_ref()).map_err(|m| {
            refused(format!(
                "{}: key `approvals`: {m}",
                self.dir.join(PROJECT_FILE).display()
            ))
        })?;
        Ok(Arc::new(Policy::under(&self.config, &block)))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::policy::PolicyDecision;

    fn project_md(exec: &str) -> String {
        format!("---\nname: web\nstatus: active\ncreated: 2026-02-28T10:00:00Z\napprovals: {{exec: {exec}}}\n---\nA site.\n")
    }

    /// A home with project `web` whose PROJECT.md says `exec: ask`.
    fn web() -> (tempfile::TempDir, PathBuf) {
        let home = tempfile::tempdir().unwrap();
        let dir = home.path().join("web");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(PROJECT_FILE), project_md("ask")).unwrap();
        (home, dir)
    }

    #[test]
    fn a_project_md_that_does_not_load_is_refused_not_given_the_config_policy() {
        let (_home, dir) = web();
        // config.yml allows every command; the project asks.
        let config = ApprovalsConfig {
            exec: Some(pegasus_store::approvals::Mode::Allow),
            ..Default::default()
        };
        let policy = ProjectPolicy::new("web", &dir, config);
        let p = policy.get().unwrap();
        assert_eq!(p.decide("exec", Some("rm -rf build")), PolicyDecision::Ask);

        // Broken by hand: refused, with the file and what is wrong.
        std::fs::write(dir.join(PROJECT_FILE), "---\nname: web\nstatus: [\n---\n").unwrap();
        let refusal = policy.get().unwrap_err();
        let line = refusal.to_string();
        assert!(
            line.starts_with("approval refused: PROJECT.md of web does not load ("),
            "{line}"
        );
        assert!(line.contains("PROJECT.md:"), "{line}");
        assert!(line.ends_with("; fix it and retry"), "{line}");

        // A wrong `approvals:` block is the same.
        std::fs::write(dir.join(PROJECT_FILE), project_md("maybe")).unwrap();
        assert!(policy.get().is_err());

        // Gone: refused too.
        std::fs::remove_file(dir.join(PROJECT_FILE)).unwrap();
        assert!(policy.get().is_err());

        // Fixed: the project's rules again.
        std::fs::write(dir.join(PROJECT_FILE), project_md("deny")).unwrap();
        assert_eq!(
            policy.get().unwrap().decide("exec", Some("ls")),
            PolicyDecision::Deny("approvals.exec".into())
        );
    }

    #[test]
    fn the_policy_is_parsed_once_and_again_when_its_file_changes() {
        let (_home, dir) = web();
        let policy = ProjectPolicy::new("web", &dir, ApprovalsConfig::default());
        // Within one tick of its write a file is read at every call; once settled, once.
        std::thread::sleep(pegasus_store::stamp::SETTLE + std::time::Duration::from_millis(100));
        let first = policy.get().unwrap();
        let again = policy.get().unwrap();
        assert!(Arc::ptr_eq(&first, &again), "parsed again though unchanged");
        // A write (a new file renamed over it, as pegasusd writes) is seen at the next call.
        let tmp = dir.join("PROJECT.md.tmp");
        std::fs::write(&tmp, project_md("deny")).unwrap();
        std::fs::rename(&tmp, dir.join(PROJECT_FILE)).unwrap();
        let changed = policy.get().unwrap();
        assert!(!Arc::ptr_eq(&first, &changed));
        assert_eq!(
            changed.decide("exec", Some("ls")),
            PolicyDecision::Deny("approvals.exec".into())
        );
    }
}
