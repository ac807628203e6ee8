//! Which agent does a role's work (DESIGN.md §15), for the hosts that hand it to a harness
//! themselves: the worker asks a code task's reviewer or planner through the harness the role's
//! assignment names, told what the built-in consultation is told.

use std::sync::Arc;

use pegasus_store::AgentKind;

use super::{Agent, Workspace};
use crate::harness::Harness;
use crate::settings::AgentSettings;

impl Agent {
    /// The harness that works for an agent of `kind` (a role's assignment; `None`: the project's
    /// own agent); `None` when that is the built-in loop.
    pub fn harness_of(&self, kind: Option<AgentKind>) -> Option<Arc<dyn Harness>> {
        self.harnesses
            .get(&kind.unwrap_or(self.agent_kind))
            .cloned()
    }

    /// `system` followed by the section naming the instruction files of `workspace` (the
    /// workdir's without one) that `settings` asks for (DESIGN.md §16): what a consulted role
    /// is told, whichever agent runs it.
    pub fn with_instructions(
        &self,
        system: &str,
        settings: &AgentSettings,
        workspace: Option<&Workspace>,
    ) -> String {
        let (_, section) = self.instructions(settings, workspace);
        crate::instructions::with_section(system, &section)
    }
}
