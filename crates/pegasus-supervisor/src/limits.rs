//! Per-project limits on pegasusd's side (DESIGN.md §12): the cgroups found once at start
//! (`pegasus_sandbox::cgroups`), each project's own made before its worker is spawned and
//! removed when it has ended, and what `project show` says about them.

use std::sync::Arc;

use pegasus_proto::ctl::LimitsInfo;
use pegasus_sandbox::cgroups::{Cgroups, Limits as CgroupLimits, ProjectCgroup};
use pegasus_store::limits::LimitsConfig;
use pegasus_store::{Config, Home, ProjectFile};

/// What pegasusd can do about limits here.
pub(crate) struct Limits {
    /// The home's cgroups, or why there are none (one line, warned about once at start).
    cgroups: Result<Arc<Cgroups>, String>,
}

impl Limits {
    /// Finds the cgroups, warns once when limits cannot apply, and sweeps the project cgroups
    /// a killed daemon of this home left. Call before any worker starts.
    pub fn setup(home: &Home) -> Limits {
        let cgroups = Cgroups::setup(home.root()).map(Arc::new);
        match &cgroups {
            Ok(c) => {
                let swept = c.sweep();
                if swept > 0 {
                    tracing::info!(
                        projects = swept,
                        "removed the cgroups a previous pegasusd left"
                    );
                }
                if !c.missing().is_empty() {
                    tracing::warn!(
                        "per-project limits: this kernel gives pegasusd no {} cgroup controller; \
                         {} not applied (the others are)",
                        c.missing().join(" or "),
                        if c.missing().len() == 1 {
                            "that limit is"
                        } else {
                            "those limits are"
                        }
                    );
                }
                let parents: Vec<String> = c
                    .parents()
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect();
                tracing::info!(parents = ?parents, "per-project limits with {}", c.describe());
            }
            Err(why) => tracing::warn!(
                "per-project limits (config `limits:`) cannot be applied here: {why}; projects \
                 run without them (run pegasusd as root, or in a cgroup with the memory, pids \
                 and cpu controllers delegated to it)"
            ),
        }
        Limits { cgroups }
    }

    /// A project's limits: config.yml's, with its PROJECT.md's keys in their place.
    pub fn effective(config: &Config, project: Option<&ProjectFile>) -> LimitsConfig {
        match project {
            Some(p) => config.limits.with(&p.limits()),
            None => config.limits,
        }
    }

    /// Makes project `name`'s cgroup for its next worker; `Ok(None)`: no cgroups here.
    pub fn create(
        &self,
        name: &str,
        limits: &LimitsConfig,
    ) -> Result<Option<ProjectCgroup>, String> {
        let Ok(cgroups) = &self.cgroups else {
            return Ok(None);
        };
        let numbers = CgroupLimits {
            memory: limits.memory.bytes(),
            memory_text: limits.memory.to_string(),
            pids: limits.pids,
            cpu: limits.cpu,
        };
        cgroups.create(name, &numbers).map(Some)
    }

    /// What listings say about a project's limits. `remote`: its worker runs on another host;
    /// `problem`: why its current worker could not be given its cgroup.
    pub fn info(&self, limits: &LimitsConfig, remote: bool, problem: Option<&str>) -> LimitsInfo {
        let (applied, note) = match (&self.cgroups, problem) {
            _ if remote => (
                false,
                "the worker runs on another host; limits apply to workers on this one".into(),
            ),
            (_, Some(p)) => (false, p.to_string()),
            (Err(why), None) => (false, why.clone()),
            (Ok(c), None) if c.missing().is_empty() => (true, c.describe()),
            (Ok(c), None) => (
                true,
                format!(
                    "{}; {} not applied: no controller",
                    c.describe(),
                    c.missing().join(", ")
                ),
            ),
        };
        LimitsInfo {
            memory: limits.memory.to_string(),
            memory_bytes: limits.memory.bytes(),
            pids: limits.pids,
            cpu: limits.cpu,
            applied,
            note,
        }
    }

    /// Removes the home's parent cgroups once every worker is gone (at shutdown).
    pub fn close(&self) {
        if let Ok(c) = &self.cgroups {
            c.close();
        }
    }
}
