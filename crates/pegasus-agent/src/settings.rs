//! The knobs of one agent, resolved once from config.yml and the project.

use pegasus_store::Config;

/// Everything the loop and the tools need to know about their limits. Resolved by the caller
/// (worker or supervisor) so the agent never reads config files itself.
#[derive(Debug, Clone)]
pub struct AgentSettings {
    /// `provider/model` to ask for; empty lets the gateway pick the project's or default model.
    pub model: String,
    /// Model calls per task before it stops as turn-capped.
    pub max_turns: u32,
    /// Concurrent (read-only) tool calls of one turn in flight at once.
    pub max_parallel_tools: usize,
    /// Upper bound of an `exec` timeout, in seconds.
    pub exec_timeout_s: u64,
    /// Bytes of `exec` output kept for the model.
    pub exec_output_cap: usize,
    /// Bytes of any one tool result sent to the model (head and tail kept, the cut noted).
    pub max_tool_result_bytes: usize,
    /// Subagents at this depth cannot spawn more.
    pub max_subagent_depth: u32,
    /// Subagents one task may spawn in all.
    pub max_subagents_per_task: u32,
    /// `max_tokens` of every call.
    pub max_tokens: u32,
    /// Run the PostTaskReflector after an answered task.
    pub reflection: bool,
    /// Identical tool calls in a row that count as a loop.
    pub loop_repeat_limit: u32,
    /// The model's context window in tokens, if known; compaction needs it.
    pub context_window: Option<u64>,
    /// Project name for the call's accounting; `None` for the MainAgent.
    pub project: Option<String>,
    /// Where `exec` records the process groups it starts, so the supervisor can kill what a
    /// dead worker left behind (`Home::exec_registry`); `None` records nothing.
    pub exec_registry: Option<std::path::PathBuf>,
    /// Reasoning effort of every call (`off`, `low`, `medium`, `high`); set from a role.
    pub thinking: Option<String>,
    /// Sampling temperature of every call; set from a role.
    pub temperature: Option<f32>,
    /// `<home>/preferences.md`, the user's standing preferences shown in every system prompt;
    /// `None` = none.
    pub preferences: Option<std::path::PathBuf>,
    /// `<home>/roles`, where user roles override the built-in ones; `None` = built-ins only.
    pub roles_dir: Option<std::path::PathBuf>,
    /// The project's role assignments (PROJECT.md `roles:`): overrides and template variables.
    pub role_assignments: Vec<pegasus_roles::Assignment>,
    /// The skills `use_skill` may load (a role's `skills:` allowlist); `None` = every skill.
    pub skills: Option<Vec<String>>,
    /// How `exec` commands are confined (Landlock); `None` = not at all (tests, tools that
    /// run outside a home).
    pub sandbox: Option<pegasus_sandbox::SandboxPaths>,
    /// Wall-clock limit of one loop (a role's `model.timeout_s`), in seconds; `None` = none
    /// beyond the guards. Checked between turns and bounding each model call and tool batch.
    pub run_timeout_s: Option<u64>,
    /// The instruction files looked for in each folder, the first found wins (config
    /// `agent.instruction_files`); empty = none (DESIGN.md §16).
    pub instruction_files: Vec<String>,
    /// Bytes of instruction files one task is shown at most (`agent.instructions_max_bytes`);
    /// see [`AgentSettings::instructions_budget`].
    pub instructions_max_bytes: usize,
}

impl AgentSettings {
    /// Settings from the config's `agent:` section plus what the caller knows about the model.
    pub fn from_config(
        config: &Config,
        model: String,
        context_window: Option<u64>,
        project: Option<String>,
    ) -> Self {
        let a = &config.agent;
        AgentSettings {
            model,
            max_turns: a.max_turns,
            max_parallel_tools: a.max_parallel_tools,
            exec_timeout_s: a.exec_timeout_s,
            exec_output_cap: a.exec_output_cap_bytes,
            max_tool_result_bytes: a.max_tool_result_bytes,
            max_subagent_depth: a.max_subagent_depth,
            max_subagents_per_task: a.max_subagents_per_task,
            max_tokens: a.max_tokens,
            reflection: a.reflection,
            loop_repeat_limit: a.loop_repeat_limit,
            context_window,
            project,
            exec_registry: None,
            thinking: None,
            temperature: None,
            preferences: None,
            roles_dir: None,
            role_assignments: Vec::new(),
            skills: None,
            sandbox: None,
            run_timeout_s: None,
            instruction_files: a.instruction_files.clone(),
            instructions_max_bytes: a.instructions_max_bytes,
        }
    }
}

/// Bytes of text per token when a share of the window is turned into bytes: the estimator's
/// own rate ([`pegasus_proto::llm::tokens_of_bytes`]), so a result of that many bytes is
/// estimated at exactly that share.
const BYTES_PER_TOKEN: f64 = 3.5;

impl AgentSettings {
    /// `max_tokens` of a call: the configured one, and at most a quarter of the window, so a
    /// small local model's answer leaves room for the prompt (4,096 asked of a 2,048-token
    /// model would not fit at all).
    pub fn answer_tokens(&self) -> u32 {
        match self.context_window {
            Some(w) if w > 0 => self
                .max_tokens
                .min((w / 4).clamp(64, u64::from(u32::MAX)) as u32),
            _ => self.max_tokens,
        }
    }

    /// Bytes one tool result may have (DESIGN.md §6): `max_tool_result_bytes`, and at most a quarter
    /// of the model's window, so no one result can fill the context (32 KiB is more than a
    /// whole 8,000-token window).
    pub fn tool_result_cap(&self) -> usize {
        match self.context_window {
            Some(w) if w > 0 => self
                .max_tool_result_bytes
                .min(((w as f64 / 4.0) * BYTES_PER_TOKEN) as usize)
                .max(1024),
            _ => self.max_tool_result_bytes,
        }
    }
}

/// The share of the context window the instruction files of a task take at most: an eighth
/// (DESIGN.md §16).
pub const INSTRUCTIONS_SHARE: f64 = 1.0 / 8.0;

impl AgentSettings {
    /// Bytes of instruction files (AGENTS.md, CLAUDE.md) one task is shown at most:
    /// `instructions_max_bytes`, and at most an eighth of the model's window, so a 5 MB
    /// AGENTS.md can never crowd out the work (DESIGN.md §16).
    pub fn instructions_budget(&self) -> usize {
        match self.context_window {
            Some(w) if w > 0 => self
                .instructions_max_bytes
                .min((w as f64 * INSTRUCTIONS_SHARE * BYTES_PER_TOKEN) as usize)
                .max(1024),
            _ => self.instructions_max_bytes,
        }
    }
}

impl Default for AgentSettings {
    /// The config defaults with no model named (the gateway decides) and no project.
    fn default() -> Self {
        AgentSettings::from_config(&Config::default(), String::new(), None, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_and_tool_results_take_at_most_a_quarter_of_the_window() {
        let mut s = AgentSettings {
            max_tokens: 4096,
            max_tool_result_bytes: 32 * 1024,
            ..AgentSettings::default()
        };
        s.context_window = None;
        assert_eq!((s.answer_tokens(), s.tool_result_cap()), (4096, 32 * 1024));
        s.context_window = Some(200_000);
        assert_eq!((s.answer_tokens(), s.tool_result_cap()), (4096, 32 * 1024));
        s.context_window = Some(8_000);
        assert_eq!((s.answer_tokens(), s.tool_result_cap()), (2000, 7000));
        s.context_window = Some(2_048);
        assert_eq!((s.answer_tokens(), s.tool_result_cap()), (512, 1792));
    }

    #[test]
    fn instructions_take_at_most_an_eighth_of_the_window() {
        let mut s = AgentSettings::default();
        assert_eq!(s.instructions_max_bytes, 64 * 1024);
        s.context_window = None;
        assert_eq!(s.instructions_budget(), 64 * 1024);
        s.context_window = Some(1_000_000);
        assert_eq!(s.instructions_budget(), 64 * 1024);
        s.context_window = Some(8_000);
        assert_eq!(s.instructions_budget(), 3_500);
        s.context_window = Some(1_024);
        assert_eq!(s.instructions_budget(), 1_024);
    }
}
