//! An agent working as a role (DESIGN.md §8, seed 001): the role's prompt built the seed-001 way,
//! its tool allowlist and its model settings, for a task run or a `spawn_subagent{role}`.

use crate::{memory::memory_index, settings::AgentSettings, toolset::ToolSet};
use pegasus_roles::{apply_assignment, build_prompt, find_role, Assignment, PromptParts, Thinking};
use std::path::{Path, PathBuf};

/// What changes when an agent works as a role.
#[derive(Clone)]
pub struct RoleRun {
    /// The role's id, for the ledger and the task.
    pub role: String,
    /// The seed-001 prompt: role prompt, project overview, memory, the task, its criteria.
    pub system: String,
    /// The tools the role allows (the others are neither shown nor callable).
    pub tools: ToolSet,
    /// The settings with the role's model, thinking, temperature and max_tokens applied.
    pub settings: AgentSettings,
    /// The agent the project's assignment says does this role's work (DESIGN.md §15); `None`:
    /// the project's own.
    pub agent: Option<pegasus_store::AgentKind>,
}

/// Prepares `role_id` for one piece of work. The role comes from `settings.roles_dir` (user
/// roles override the built-in ones); the project's assignment of it, if any, applies its
/// overrides and fills its template variables. The prompt lists the skills of `skill_dirs`
/// the role may load (its `skills:` allowlist, which `use_skill` enforces); the role's
/// `model.timeout_s` bounds its loop. Errors are one line for the model or the user.
#[allow(clippy::too_many_arguments)]
pub fn prepare_role(
    role_id: &str,
    assignments: &[Assignment],
    settings: &AgentSettings,
    tools: &ToolSet,
    overview: &str,
    memory_dir: &Path,
    skill_dirs: &[PathBuf],
    task: &str,
    acceptance: &[String],
) -> Result<RoleRun, String> {
    let roles_dir = settings.roles_dir.clone().unwrap_or_default();
    let role = find_role(&roles_dir, role_id).map_err(|e| e.to_string())?;
    let (role, vars, agent) = match assignments.iter().find(|a| a.role == role.id) {
        Some(a) => (apply_assignment(&role, a), a.variables.clone(), a.agent),
        None => (role, Default::default(), None),
    };
    let role_prompt = role.render(&vars).map_err(|e| e.to_string())?;
    let memory: String = memory_index(memory_dir)
        .into_iter()
        .map(|(path, first)| format!("- {path}: {first}\n"))
        .collect();
    let mut system = build_prompt(&PromptParts {
        role_prompt: &role_prompt,
        project_overview: overview,
        memory: &memory,
        context_files: &[],
        task,
        acceptance,
    });
    let allowed = (!role.skills.is_empty()).then(|| role.skills.clone());
    if role.allows_tool("use_skill") && tools.specs().iter().any(|t| t.name == "use_skill") {
        let skills = crate::skills::discover(skill_dirs);
        let listed: Vec<String> = skills
            .values()
            .filter(|k| role.allows_skill(&k.name))
            .map(|k| format!("- {}: {}\n", k.name, k.description))
            .collect();
        if !listed.is_empty() {
            system.push_str("\n\n## Skills (load one with use_skill)\n");
            system.push_str(&listed.concat());
        }
    }
    system.push_str(&crate::prompt::preferences_section(
        settings.preferences.as_deref(),
    ));
    let mut s = settings.clone();
    s.skills = allowed;
    s.run_timeout_s = role.model.timeout_s;
    if let Some(model) = &role.model.model {
        s.model = model.clone();
    }
    s.thinking =
        (role.model.thinking != Thinking::Off).then(|| role.model.thinking.as_str().to_string());
    s.temperature = role.model.temperature.or(s.temperature);
    if let Some(max) = role.model.max_tokens {
        s.max_tokens = max;
    }
    Ok(RoleRun {
        role: role.id.clone(),
        system,
        tools: {
            let role = role.clone();
            tools.only(move |name| role.allows_tool(name))
        },
        settings: s,
        agent,
    })
}
