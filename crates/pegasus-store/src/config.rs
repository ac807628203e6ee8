//! config.yml: the user's settings (DESIGN.md §3). Every key is optional and has a default, so a
//! fresh home needs no config at all. An unknown key is refused with its line and name: a typo
//! such as `budjet:` must not silently leave the $20/day default in force. Values are checked
//! too (provider kinds and URLs, prices and budgets >= 0), before pegasusd creates anything.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Result, StoreError};
use crate::project::check_fallback;
use crate::yaml::{dotted_key_line, problem};

/// All settings of a Pegasus home.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Model used when a project names none, as `provider/model`.
    pub default_model: String,
    /// Models that answer, in order, when the model asked for cannot (DESIGN.md §5 fallback
    /// models): every project's and the MainAgent's; a PROJECT.md `fallback:` replaces it.
    pub fallback: Vec<String>,
    /// Provider name -> endpoint. The shipped `anthropic` and `openai` entries are kept unless
    /// the file overrides them by name.
    pub providers: BTreeMap<String, ProviderConfig>,
    /// Gateway limits.
    pub llm: LlmConfig,
    /// Spending caps.
    pub budget: BudgetConfig,
    /// Model pattern -> price per million tokens; extends the shipped table.
    pub prices: BTreeMap<String, PriceConfig>,
    /// Worker process management.
    pub workers: WorkersConfig,
    /// The Telegram channel.
    pub telegram: TelegramConfig,
    /// Asana as a project's board (DESIGN.md §17), synced by pegasusd for every project whose
    /// PROJECT.md has `asana:`.
    pub asana: AsanaConfig,
    /// The web dashboard.
    pub dashboard: DashboardConfig,
    /// Limits of the agent loop inside each worker (and the MainAgent).
    pub agent: AgentConfig,
    /// The watchdog's limits.
    pub watchdog: WatchdogConfig,
    /// What the MainAgent is told of, and how often (crash notices).
    pub notify: NotifyConfig,
    /// Autonomous runs.
    pub runs: RunsConfig,
    /// Model pattern -> what the model can do; extends the shipped table (`data/models.yml`).
    pub models: BTreeMap<String, ModelConfig>,
    /// Context window assumed for a model neither table knows, in tokens.
    pub default_context_window: u64,
    /// MCP servers every project gets (DESIGN.md §13); a project's entry of the same name wins.
    pub mcp_servers: BTreeMap<String, crate::mcp::McpServerConfig>,
    /// How much of every model call MCP tools may take; the rest wait behind `tool_search`.
    pub mcp: crate::mcp::McpConfig,
    /// Where workers can run besides this machine (DESIGN.md §14); `local` is built in.
    pub launchers: BTreeMap<String, crate::launcher::LauncherConfig>,
    /// The launcher of a project whose PROJECT.md names none.
    pub default_launcher: String,
    /// Which tool calls need a person's yes (DESIGN.md §11); PROJECT.md `approvals:` extends it.
    pub approvals: crate::approvals::ApprovalsConfig,
    /// Per-project limits (DESIGN.md §12), enforced with cgroups; PROJECT.md `limits:` wins per key.
    pub limits: crate::limits::LimitsConfig,
    /// How long pegasusd's and the workers' logs under `<home>/logs/` are kept (DESIGN.md §12).
    pub logs: LogsConfig,
    /// `web_fetch`'s limits and `web_search`'s backend (DESIGN.md §16 "The web").
    pub web: crate::web::WebConfig,
    /// Lifecycle hooks in Claude Code's settings format (DESIGN.md §16), for every project;
    /// PROJECT.md's run after them.
    pub hooks: crate::hooks::HooksConfig,
    /// How each coding harness a project may choose as its agent (PROJECT.md `agent:`) is
    /// started (DESIGN.md §15).
    pub harnesses: crate::harness::HarnessesConfig,
    /// The e-mail channel (DESIGN.md §17); absent = none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub email: Option<crate::email::EmailConfig>,
}

/// `logs:` in config.yml: log files older than `keep_days` are deleted, then the oldest until
/// all of them together weigh at most `max_mb`; at start and daily.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogsConfig {
    /// Days a log file is kept after its last write (at least 1).
    pub keep_days: u64,
    /// Megabytes (MiB) all log files may weigh together (at least 1).
    pub max_mb: u64,
}

impl Default for LogsConfig {
    fn default() -> Self {
        LogsConfig {
            keep_days: 14,
            max_mb: 500,
        }
    }
}

/// What a model can do (DESIGN.md §5 model table): `data/models.yml`, extended by config.yml
/// `models:`, keyed like `prices`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// Tokens the model can see; the agent compacts at 80% of it.
    #[serde(default)]
    pub context_window: Option<u64>,
    /// Most tokens one answer may have; a call's `max_tokens` is capped by it.
    #[serde(default)]
    pub max_output_tokens: Option<u32>,
    /// Anthropic extended thinking (`thinking` blocks).
    #[serde(default)]
    pub thinking: bool,
    /// An OpenAI reasoning model: `max_completion_tokens` and `reasoning_effort`.
    #[serde(default)]
    pub reasoning: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            default_model: "anthropic/claude-sonnet-4-5".into(),
            fallback: Vec::new(),
            providers: default_providers(),
            llm: LlmConfig::default(),
            budget: BudgetConfig::default(),
            prices: BTreeMap::new(),
            workers: WorkersConfig::default(),
            telegram: TelegramConfig::default(),
            asana: AsanaConfig::default(),
            dashboard: DashboardConfig::default(),
            agent: AgentConfig::default(),
            watchdog: WatchdogConfig::default(),
            notify: NotifyConfig::default(),
            runs: RunsConfig::default(),
            models: BTreeMap::new(),
            default_context_window: 128_000,
            mcp_servers: BTreeMap::new(),
            mcp: Default::default(),
            launchers: BTreeMap::new(),
            default_launcher: crate::launcher::LOCAL.into(),
            approvals: Default::default(),
            logs: LogsConfig::default(),
            limits: Default::default(),
            web: Default::default(),
            hooks: BTreeMap::new(),
            harnesses: crate::harness::HarnessesConfig::default(),
            email: None,
        }
    }
}

fn default_providers() -> BTreeMap<String, ProviderConfig> {
    let p = |kind: &str, url: &str, key: &str| ProviderConfig {
        kind: kind.into(),
        base_url: url.into(),
        api_key_env: Some(key.into()),
        local: false,
    };
    BTreeMap::from([
        (
            "anthropic".into(),
            p(
                "anthropic",
                "https://api.anthropic.com",
                "ANTHROPIC_API_KEY",
            ),
        ),
        (
            "openai".into(),
            p("openai", "https://api.openai.com/v1", "OPENAI_API_KEY"),
        ),
    ])
}

/// An LLM endpoint; model ids `"<provider>/<model>"` pick one by name.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProviderConfig {
    /// Wire protocol: `anthropic` or `openai` (any OpenAI-compatible server).
    pub kind: String,
    /// Base URL of the API.
    pub base_url: String,
    /// Environment variable holding the API key (the key itself never goes in a file).
    pub api_key_env: Option<String>,
    /// A server on the user's own machine or network (Ollama, llama.cpp, vLLM): it needs no
    /// key, and its models cost 0 unless `prices:` says otherwise.
    pub local: bool,
}

/// Limits of the LLM gateway.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LlmConfig {
    /// Calls in flight at once, across all projects (>= 1).
    pub max_concurrency: usize,
    /// Seconds before one call is abandoned.
    pub timeout_s: u64,
    /// Retries of a failed call (rate limits, 5xx).
    pub max_retries: u32,
    /// First retry delay in milliseconds; doubled per attempt, capped at 30 s, fully jittered
    /// (and never shorter than the provider's `retry-after`).
    pub retry_base_ms: u64,
    /// Largest provider response body read, in bytes (streamed or not); a larger one fails
    /// the call instead of growing the daemon's memory. 64 KiB to 12 MiB (an answer must also
    /// fit in the frame that carries it to the worker).
    pub max_response_bytes: u64,
    /// Allow calls to models that have no price (`prices:`); their tokens are recorded but
    /// their cost is unknown, so no USD budget can hold them (default false: refused).
    pub allow_unpriced_models: bool,
}

/// Bounds of `llm.max_response_bytes`.
pub const MAX_RESPONSE_BYTES_RANGE: std::ops::RangeInclusive<u64> = 64 * 1024..=12 * 1024 * 1024;

impl Default for LlmConfig {
    fn default() -> Self {
        LlmConfig {
            max_concurrency: 4,
            timeout_s: 120,
            max_retries: 4,
            retry_base_ms: 1000,
            max_response_bytes: 4 * 1024 * 1024,
            allow_unpriced_models: false,
        }
    }
}

/// Spending caps in USD; `None` means no cap.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct BudgetConfig {
    /// Cap on all spending per UTC day.
    pub daily_usd: Option<f64>,
    /// Cap per task.
    pub task_usd: Option<f64>,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        BudgetConfig {
            daily_usd: Some(20.0),
            task_usd: Some(2.0),
        }
    }
}

/// Price of a model in USD per million tokens.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PriceConfig {
    /// Prompt tokens.
    pub input: f64,
    /// Completion tokens.
    pub output: f64,
    /// Prompt tokens read from cache.
    #[serde(default)]
    pub cache_read: Option<f64>,
    /// Prompt tokens written to cache.
    #[serde(default)]
    pub cache_write: Option<f64>,
    /// Context window in tokens (drives compaction at 80%).
    #[serde(default)]
    pub context_window: Option<u64>,
}

/// Autonomous runs (DESIGN.md §9): which models summarise and review phases. `None` = the
/// project's own model. The daily limit of runs is `budget.daily_usd`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunsConfig {
    /// A cheap model for phase summaries.
    pub summary_model: Option<String>,
    /// A strong model for phase reviews.
    pub review_model: Option<String>,
}

/// The watchdog in pegasusd (DESIGN.md §2, §5; seed 003): stops a task that went silent or spends
/// too fast. Per-task budget, turn and loop caps are enforced where the spend and the turns
/// happen (the gateway and the agent loop).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct WatchdogConfig {
    /// A busy worker with no agent event (model answer, tool call, stage) for this long has its
    /// task failed as `silent` and is restarted.
    pub silent_timeout_s: u64,
    /// A task spending faster than this (USD over the last minute) is stopped with reason
    /// `budget`; `None` = no velocity cap.
    pub max_usd_per_minute: Option<f64>,
}

impl Default for WatchdogConfig {
    fn default() -> Self {
        WatchdogConfig {
            silent_timeout_s: 300,
            max_usd_per_minute: Some(1.0),
        }
    }
}

/// Crash notices to the MainAgent (issue 26): a worker's crashes are gathered for
/// `crash_window_s` from the first of a burst and told in one message, so a burst of crashes
/// costs at most one MainAgent call. A crash whose project is running again by then is left
/// out unless `recovered_crashes` is on; a project given up (crash-looping) is always told.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct NotifyConfig {
    /// Tell the MainAgent of crashes its project recovered from too.
    pub recovered_crashes: bool,
    /// Seconds crash notices are gathered before they are told (> 0, at most 3600).
    pub crash_window_s: f64,
}

impl Default for NotifyConfig {
    fn default() -> Self {
        NotifyConfig {
            recovered_crashes: false,
            crash_window_s: 30.0,
        }
    }
}

/// How the supervisor manages worker processes.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkersConfig {
    /// Seconds a worker gets to finish its turn on shutdown before it is killed (> 0).
    pub shutdown_timeout_s: f64,
    /// Suspend a project after this many idle seconds; `None` = never.
    pub idle_suspend_s: Option<u64>,
    /// Seconds between worker heartbeats.
    pub heartbeat_interval_s: f64,
    /// First restart delay after a crash, doubled per crash in the window, capped at 30 s.
    pub restart_backoff_ms: u64,
    /// Crashes within the window after which restarts stop: the project shows `crash-looping`
    /// in `status` until `pegasusctl project resume NAME` or a restart of pegasusd (DESIGN.md §2).
    pub crash_loop_max: u32,
    /// The crash-counting window in seconds.
    pub crash_loop_window_s: u64,
    /// `IP:PORT` of the TCP listener for remote workers (mutual TLS only, DESIGN.md §14); `None` =
    /// no remote workers.
    pub listen: Option<String>,
}

impl Default for WorkersConfig {
    fn default() -> Self {
        WorkersConfig {
            shutdown_timeout_s: 30.0,
            idle_suspend_s: None,
            heartbeat_interval_s: 5.0,
            restart_backoff_ms: 100,
            crash_loop_max: 5,
            crash_loop_window_s: 60,
            listen: None,
        }
    }
}

/// The Telegram bot channel.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelegramConfig {
    /// Environment variable holding the bot token (read by pegasusd at start, then removed
    /// from its environment); the adapter runs only when it is set.
    #[serde(alias = "bot_token_env")]
    pub token_env: String,
    /// Bot API base URL (overridable for tests).
    pub base_url: String,
    /// Chats allowed to talk to Pegasus; empty = none.
    pub allowed_chats: Vec<i64>,
    /// Users (Telegram user ids) whose approval button presses count; empty = any member of
    /// an allowed chat (warned about at start).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowed_users: Vec<i64>,
    /// Seconds one `getUpdates` long poll may wait.
    pub poll_timeout_s: u64,
}

impl Default for TelegramConfig {
    fn default() -> Self {
        TelegramConfig {
            token_env: "TELEGRAM_BOT_TOKEN".into(),
            base_url: "https://api.telegram.org".into(),
            allowed_chats: Vec::new(),
            allowed_users: Vec::new(),
            poll_timeout_s: 30,
        }
    }
}

/// Asana as a project's board (DESIGN.md §17): where the API is, the variable holding the
/// personal access token, and how often the board is polled for events.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct AsanaConfig {
    /// Environment variable holding the personal access token (read by pegasusd at start, then
    /// removed from its environment; never given to a worker); the sync runs only when it is set.
    pub token_env: String,
    /// The API's base URL (overridable for tests).
    pub base_url: String,
    /// Seconds between two polls of a board's events (1 to 3600).
    pub poll_s: u64,
}

impl Default for AsanaConfig {
    fn default() -> Self {
        AsanaConfig {
            token_env: "ASANA_PAT".into(),
            base_url: "https://app.asana.com/api/1.0".into(),
            poll_s: 10,
        }
    }
}

/// The web dashboard.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct DashboardConfig {
    /// Address to listen on (`IP:PORT`; port 0 = any free port); loopback unless
    /// `allow_remote`. Every request needs the token in `run/dashboard.token`.
    pub listen: String,
    /// Allow a non-loopback `listen` (the dashboard is plain HTTP: put TLS in front of it).
    pub allow_remote: bool,
    /// Serve the dashboard at all.
    pub enabled: bool,
    /// The origin browsers see when the dashboard is behind a proxy
    /// (`https://pegasus.example.com`): a change is accepted from a page of the request's own
    /// `Host` or of this origin, never from anywhere else.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub public_url: Option<String>,
}

impl DashboardConfig {
    /// `public_url` as an origin (`scheme://host[:port]`, lowercase, no trailing `/`), or why
    /// it is not one.
    pub fn public_origin(&self) -> std::result::Result<Option<String>, String> {
        let Some(url) = &self.public_url else {
            return Ok(None);
        };
        let bad = || {
            format!("`{url}` is not an origin: write the scheme and host the browser sees, e.g. https://pegasus.example.com (a port may follow; no path)")
        };
        let lower = url.trim().trim_end_matches('/').to_ascii_lowercase();
        let rest = lower
            .strip_prefix("https://")
            .or_else(|| lower.strip_prefix("http://"))
            .ok_or_else(bad)?;
        let ok = !rest.is_empty()
            && rest
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'));
        if !ok {
            return Err(bad());
        }
        Ok(Some(lower))
    }
}

impl Default for DashboardConfig {
    fn default() -> Self {
        DashboardConfig {
            listen: "127.0.0.1:7474".into(),
            allow_remote: false,
            enabled: true,
            public_url: None,
        }
    }
}

/// Guards and limits of the agent loop (DESIGN.md §6). They bound what one task can do on its own:
/// how long it may go on, how much it may run at once and how deep it may delegate.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    /// Model calls per task before it stops as `turn_capped` (default 25).
    pub max_turns: u32,
    /// Read-only tool calls of one turn run at the same time, at most this many (default 4).
    pub max_parallel_tools: usize,
    /// Longest an `exec` command may run, in seconds; a call may ask for less (default 120).
    pub exec_timeout_s: u64,
    /// Bytes of `exec` output shown to the model; the rest is cut and the cut noted (default 65536).
    pub exec_output_cap_bytes: usize,
    /// How deep subagents may nest: a subagent at this depth cannot spawn another (default 2).
    pub max_subagent_depth: u32,
    /// Subagents one task may spawn in all (default 5).
    pub max_subagents_per_task: u32,
    /// `max_tokens` of every model call of the loop (default 4096).
    pub max_tokens: u32,
    /// Run the PostTaskReflector after an answered task to update memory (default true).
    pub reflection: bool,
    /// The same tool call (name and arguments) this many times in a row stops the task as
    /// `loop_capped` (default 3).
    pub loop_repeat_limit: u32,
    /// Absolute paths an `exec` command may write besides its workdir and private temp dir
    /// (e.g. `/home/me/.cargo` for a build cache); Landlock confines the rest.
    pub exec_writable: Vec<String>,
    /// Bytes of one tool result sent to the model; a longer result keeps its head and tail
    /// with a note saying what was cut and how to read the rest (default 32768).
    pub max_tool_result_bytes: usize,
    /// The file names of the instructions people leave for coding agents, looked for in each
    /// folder in this order, the first found wins (default `[AGENTS.md, CLAUDE.md]`); empty
    /// turns them off (DESIGN.md §16).
    pub instruction_files: Vec<String>,
    /// Bytes of instruction files one task is shown at most, besides the eighth of the
    /// model's context window they may take (default 65536; 1 KiB to 1 MiB).
    pub instructions_max_bytes: usize,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            max_turns: 25,
            max_parallel_tools: 4,
            exec_timeout_s: 120,
            exec_output_cap_bytes: 65536,
            max_subagent_depth: 2,
            max_subagents_per_task: 5,
            max_tokens: 4096,
            reflection: true,
            loop_repeat_limit: 3,
            exec_writable: Vec::new(),
            max_tool_result_bytes: 32 * 1024,
            instruction_files: vec!["AGENTS.md".into(), "CLAUDE.md".into()],
            instructions_max_bytes: 64 * 1024,
        }
    }
}

/// Whether `name` can be an entry of `instruction_files` (config.yml's `agent.` one and
/// PROJECT.md's): a file name, without folders.
pub fn is_file_name(name: &str) -> bool {
    !(name.is_empty() || name.contains('/') || name == "." || name == "..")
}

/// Bounds of `agent.max_tool_result_bytes`.
const TOOL_RESULT_BYTES_RANGE: std::ops::RangeInclusive<usize> = 1024..=1024 * 1024;

/// The largest config.yml read (1 MiB): far beyond any real one.
const CONFIG_CAP: u64 = 1 << 20;

impl Config {
    /// Loads config.yml. A missing (or empty) file gives [`Config::default`]. Syntax errors,
    /// wrong types and out-of-range values are a [`StoreError::Parse`] naming the file, line
    /// and key, e.g. `config.yml:4: key `llm.max_concurrency`: invalid type: string "x",
    /// expected usize`.
    pub fn load(path: &Path) -> Result<Config> {
        let text = match crate::read::read_text_limited(path, CONFIG_CAP) {
            Ok(t) => t,
            Err(crate::read::ReadError::NotFound) => return Ok(Config::default()),
            Err(crate::read::ReadError::Io(e)) => {
                return Err(StoreError::Io {
                    path: path.to_path_buf(),
                    source: e,
                })
            }
            Err(e) => {
                return Err(StoreError::Invalid(format!(
                    "config {} {e}: it must be a regular YAML file",
                    path.display()
                )))
            }
        };
        Self::parse(&text, path)
    }

    /// Parses config text; `path` only labels error messages.
    pub fn parse(text: &str, path: &Path) -> Result<Config> {
        let to_err = |e: serde_norway::Error| {
            let p = problem(&e);
            let message = match &p.key {
                Some(k) if k == "hooks" || k.starts_with("hooks.") => {
                    crate::hooks::explain_config_error(&p.message)
                }
                _ => p.message,
            };
            StoreError::Parse {
                path: path.to_path_buf(),
                line: p.line.unwrap_or(1),
                key: p.key,
                message,
            }
        };
        // Parsing to a Value first tells "empty or only comments" (= defaults) from a document.
        let value: serde_norway::Value = serde_norway::from_str(text).map_err(to_err)?;
        if value.is_null() {
            return Ok(Config::default());
        }
        if !value.is_mapping() {
            let message = "config must be a mapping of `key: value` lines";
            return Err(StoreError::parse_at(path, 1, message));
        }
        let mut config: Config = serde_norway::from_str(text).map_err(to_err)?;
        for (name, provider) in default_providers() {
            config.providers.entry(name).or_insert(provider);
        }
        config.validate(text, path)?;
        Ok(config)
    }

    /// Range checks serde cannot express.
    fn validate(&self, text: &str, path: &Path) -> Result<()> {
        let err = |key: &str, message: &str| StoreError::Parse {
            path: path.to_path_buf(),
            line: dotted_key_line(text, key),
            key: Some(key.to_string()),
            message: message.to_string(),
        };
        if self.llm.max_concurrency < 1 {
            return Err(err("llm.max_concurrency", "must be at least 1"));
        }
        if let Err(m) = check_fallback(&self.fallback) {
            return Err(err("fallback", &m));
        }
        if let Err(m) = self.approvals.check() {
            return Err(err("approvals", &m));
        }
        if let Err((key, m)) = self.limits.check() {
            return Err(err(&format!("limits.{key}"), &m));
        }
        if let Err((key, m)) = self.web.check() {
            return Err(err(&key, &m));
        }
        match self.dashboard.listen.parse::<std::net::SocketAddr>() {
            Err(_) => {
                return Err(err(
                    "dashboard.listen",
                    "must be IP:PORT, e.g. 127.0.0.1:7474",
                ))
            }
            Ok(a) if !a.ip().is_loopback() && !self.dashboard.allow_remote => {
                return Err(err(
                    "dashboard.listen",
                    "is not a loopback address: the dashboard is plain HTTP; set `dashboard.allow_remote: true` to serve it anyway (behind TLS)",
                ))
            }
            Ok(_) => {}
        }
        if self.logs.keep_days < 1 {
            return Err(err("logs.keep_days", "must be at least 1 (day)"));
        }
        if self.logs.max_mb < 1 {
            return Err(err("logs.max_mb", "must be at least 1 (MiB)"));
        }
        if let Err(m) = self.dashboard.public_origin() {
            return Err(err("dashboard.public_url", &m));
        }
        if let Some(Err((key, m))) = self.email.as_ref().map(|e| e.check()) {
            return Err(err(&key, &m));
        }
        if !(1..=50).contains(&self.telegram.poll_timeout_s) {
            return Err(err(
                "telegram.poll_timeout_s",
                "must be from 1 to 50 seconds (Telegram's long-poll limit)",
            ));
        }
        if !(1..=3600).contains(&self.asana.poll_s) {
            return Err(err("asana.poll_s", "must be from 1 to 3600 seconds"));
        }
        if !(self.asana.base_url.starts_with("https://")
            || self.asana.base_url.starts_with("http://"))
        {
            return Err(err(
                "asana.base_url",
                "must be an http(s) URL, e.g. https://app.asana.com/api/1.0",
            ));
        }
        if let Err((key, m)) = crate::launcher::check(
            &self.launchers,
            &self.default_launcher,
            self.workers.listen.as_deref(),
        ) {
            return Err(err(&key, &m));
        }
        if let Err(m) = crate::mcp::check_mcp_servers(&self.mcp_servers) {
            let key = m
                .split(&[':', ' '][..])
                .next()
                .unwrap_or("mcp_servers")
                .to_string();
            return Err(err(&key, &m));
        }
        if let Err((key, m)) = self.mcp.check() {
            return Err(err(&format!("mcp.{key}"), m));
        }
        if let Err((key, m)) = self.harnesses.check() {
            return Err(err(&key, &m));
        }
        if let Err(m) = crate::hooks::check_hooks(&self.hooks) {
            let (key, what) = m.split_once(' ').unwrap_or(("hooks", &m));
            return Err(err(key, what));
        }
        if self.default_context_window < 1024 {
            return Err(err(
                "default_context_window",
                "must be at least 1024 tokens (128000 is a safe guess for current models)",
            ));
        }
        for (pattern, m) in &self.models {
            if m.context_window.is_some_and(|w| w < 1024)
                || m.max_output_tokens.is_some_and(|t| t < 1)
            {
                return Err(err(
                    &format!("models.{pattern}"),
                    "context_window must be at least 1024 and max_output_tokens at least 1",
                ));
            }
        }
        if !MAX_RESPONSE_BYTES_RANGE.contains(&self.llm.max_response_bytes) {
            return Err(err(
                "llm.max_response_bytes",
                "must be between 65536 (64 KiB) and 12582912 (12 MiB)",
            ));
        }
        let a = &self.agent;
        for (key, v) in [
            ("agent.max_turns", a.max_turns as u64),
            ("agent.max_parallel_tools", a.max_parallel_tools as u64),
            ("agent.exec_timeout_s", a.exec_timeout_s),
            ("agent.max_tokens", a.max_tokens as u64),
            ("agent.loop_repeat_limit", a.loop_repeat_limit as u64),
        ] {
            if v < 1 {
                return Err(err(key, "must be at least 1"));
            }
        }
        if !TOOL_RESULT_BYTES_RANGE.contains(&a.max_tool_result_bytes) {
            return Err(err(
                "agent.max_tool_result_bytes",
                "must be between 1024 (1 KiB) and 1048576 (1 MiB)",
            ));
        }
        if !TOOL_RESULT_BYTES_RANGE.contains(&a.instructions_max_bytes) {
            return Err(err(
                "agent.instructions_max_bytes",
                "must be between 1024 (1 KiB) and 1048576 (1 MiB)",
            ));
        }
        if let Some(n) = a.instruction_files.iter().find(|n| !is_file_name(n)) {
            return Err(err(
                "agent.instruction_files",
                &format!("`{n}` is not a file name: give names like AGENTS.md, without folders"),
            ));
        }
        if let Some(p) = a.exec_writable.iter().find(|p| !Path::new(p).is_absolute()) {
            return Err(err(
                "agent.exec_writable",
                &format!("`{p}` is not an absolute path, e.g. /home/me/.cargo"),
            ));
        }
        let w = &self.workers;
        if !(w.shutdown_timeout_s.is_finite() && w.shutdown_timeout_s > 0.0) {
            return Err(err(
                "workers.shutdown_timeout_s",
                "must be a number of seconds > 0",
            ));
        }
        let window = self.notify.crash_window_s;
        if !(window.is_finite() && window > 0.0 && window <= 3600.0) {
            return Err(err(
                "notify.crash_window_s",
                "must be a number of seconds > 0 and at most 3600 (the default is 30)",
            ));
        }
        if !(w.heartbeat_interval_s.is_finite() && w.heartbeat_interval_s > 0.0) {
            return Err(err(
                "workers.heartbeat_interval_s",
                "must be a number of seconds > 0",
            ));
        }
        for (name, p) in &self.providers {
            let key = format!("providers.{name}");
            if p.kind != "anthropic" && p.kind != "openai" {
                return Err(err(
                    &format!("{key}.kind"),
                    &format!("unknown provider kind `{}`: use `anthropic` or `openai` (any OpenAI-compatible server)", p.kind),
                ));
            }
            if !is_http_url(&p.base_url) {
                return Err(err(
                    &format!("{key}.base_url"),
                    &format!(
                        "`{}` is not an http(s) URL, e.g. https://api.anthropic.com",
                        p.base_url
                    ),
                ));
            }
        }
        for (pattern, price) in &self.prices {
            for (field, v) in [
                ("input", Some(price.input)),
                ("output", Some(price.output)),
                ("cache_read", price.cache_read),
                ("cache_write", price.cache_write),
            ] {
                if v.is_some_and(|x| !(x.is_finite() && x >= 0.0)) {
                    return Err(err(
                        &format!("prices.{pattern}"),
                        &format!("`{field}` must be a price in USD per million tokens >= 0"),
                    ));
                }
            }
        }
        for (key, v) in [
            (
                "watchdog.max_usd_per_minute",
                self.watchdog.max_usd_per_minute,
            ),
            ("budget.daily_usd", self.budget.daily_usd),
            ("budget.task_usd", self.budget.task_usd),
        ] {
            if v.is_some_and(|x| !(x.is_finite() && x >= 0.0)) {
                return Err(err(
                    key,
                    "must be a number of US dollars >= 0, or null for no cap",
                ));
            }
        }
        Ok(())
    }
}

/// An `http://` or `https://` URL with a host, the only kind a provider can be reached at.
fn is_http_url(url: &str) -> bool {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"));
    rest.and_then(|r| r.split(['/', '?', '#']).next())
        .is_some_and(|host| !host.is_empty() && !host.contains(char::is_whitespace))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn parse(text: &str) -> Result<Config> {
        Config::parse(text, Path::new("config.yml"))
    }

    #[test]
    fn missing_or_empty_file_gives_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let c = Config::load(&dir.path().join("config.yml")).unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.default_model, "anthropic/claude-sonnet-4-5");
        assert_eq!(c.llm.max_concurrency, 4);
        assert_eq!(c.llm.timeout_s, 120);
        assert_eq!(c.budget.daily_usd, Some(20.0));
        assert_eq!(c.workers.restart_backoff_ms, 100);
        assert_eq!(c.dashboard.listen, "127.0.0.1:7474");
        assert_eq!(c.providers["openai"].base_url, "https://api.openai.com/v1");
        assert_eq!(c.agent.max_turns, 25);
        assert_eq!(c.agent.exec_output_cap_bytes, 65536);
        assert!(c.agent.reflection);
        assert_eq!(parse("# just a comment\n").unwrap(), Config::default());
    }

    #[test]
    fn the_spec_sketch_loads_and_extends_providers() {
        let c = parse(
            r#"default_model: anthropic/claude-sonnet-4-5
providers:
  ollama:    {kind: openai, base_url: http://127.0.0.1:11434/v1}
llm: {max_concurrency: 2, timeout_s: 120, max_retries: 4}
budget: {daily_usd: 20, task_usd: 2.0}
prices: {"ollama/*": {input: 0, output: 0}}
workers: {shutdown_timeout_s: 30, idle_suspend_s: null}
telegram: {token_env: TELEGRAM_BOT_TOKEN, base_url: https://api.telegram.org, allowed_chats: [42]}
dashboard: {listen: 127.0.0.1:7474}
"#,
        )
        .unwrap();
        assert_eq!(c.llm.max_concurrency, 2);
        assert_eq!(c.providers.len(), 3);
        assert_eq!(c.providers["ollama"].api_key_env, None);
        assert_eq!(c.prices["ollama/*"].input, 0.0);
        assert_eq!(c.telegram.allowed_chats, vec![42]);
        assert_eq!(c.workers.heartbeat_interval_s, 5.0);
    }

    #[test]
    fn instruction_files_default_to_agents_then_claude_and_take_plain_names() {
        let c = Config::default();
        assert_eq!(c.agent.instruction_files, ["AGENTS.md", "CLAUDE.md"]);
        assert_eq!(c.agent.instructions_max_bytes, 65536);
        let c = parse("agent: {instruction_files: [], instructions_max_bytes: 8192}\n").unwrap();
        assert!(c.agent.instruction_files.is_empty());
        assert_eq!(c.agent.instructions_max_bytes, 8192);
        let err = parse("agent:\n  instruction_files: [docs/AGENTS.md]\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("agent.instruction_files"), "{err}");
        assert!(err.contains("`docs/AGENTS.md` is not a file name"), "{err}");
        let err = parse("agent:\n  instructions_max_bytes: 10\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("must be between 1024 (1 KiB) and 1048576 (1 MiB)"),
            "{err}"
        );
    }

    #[test]
    fn logs_default_to_two_weeks_and_500_mb_and_refuse_zero() {
        let c = Config::default();
        assert_eq!((c.logs.keep_days, c.logs.max_mb), (14, 500));
        let c = parse("logs: {keep_days: 3}\n").unwrap();
        assert_eq!((c.logs.keep_days, c.logs.max_mb), (3, 500));
        let err = parse("logs:\n  max_mb: 0\n").unwrap_err().to_string();
        assert_eq!(
            err,
            "config.yml:2: key `logs.max_mb`: must be at least 1 (MiB)"
        );
        let err = parse("logs: {keep_days: 0}\n").unwrap_err().to_string();
        assert!(err.contains("logs.keep_days"), "{err}");
    }

    #[test]
    fn mcp_budget_defaults_and_refuses_nonsense_naming_the_key() {
        let c = Config::default();
        assert_eq!(
            (c.mcp.tool_budget_share, c.mcp.max_offered_tools),
            (0.1, 64)
        );
        let c = parse("mcp: {tool_budget_share: 0.25, max_offered_tools: 10}\n").unwrap();
        assert_eq!(
            (c.mcp.tool_budget_share, c.mcp.max_offered_tools),
            (0.25, 10)
        );
        let err = parse("mcp:\n  tool_budget_share: 2\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(
                "config.yml:2: key `mcp.tool_budget_share`: must be a number from 0 to 1"
            ),
            "{err}"
        );
        let err = parse("mcp: {max_offered_tools: 5000}\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("mcp.max_offered_tools"), "{err}");
    }

    #[test]
    fn hooks_load_and_a_bad_one_is_one_line_with_its_key() {
        let c = parse("hooks:\n  PreToolUse:\n    - matcher: exec\n      hooks: [{type: command, command: ./check.sh}]\n").unwrap();
        let group = &c.hooks[&crate::hooks::HookEvent::PreToolUse][0];
        assert!(group.matcher.matches(Some("exec")));
        let err = parse(
            "default_model: a/b\nhooks:\n  PreToolUse:\n    - matcher: \"(\"\n      hooks: []\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("config.yml:"), "{err}");
        assert!(
            err.contains("matcher `(` is not a regular expression"),
            "{err}"
        );
        let err = parse("hooks:\n  SessionEnd: []\n").unwrap_err().to_string();
        assert!(err.contains("key `hooks`"), "{err}");
        assert!(
            err.contains("unknown variant `SessionEnd`") && err.contains("Pegasus fires"),
            "{err}"
        );
        let err = parse("hooks:\n  Stop:\n    - hooks: [{type: http, url: x}]\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("`type: command` hooks only"), "{err}");
        let err =
            parse("hooks:\n  Stop:\n    - hooks: [{type: command, command: x, timeout: 0}]\n")
                .unwrap_err()
                .to_string();
        assert_eq!(
            err,
            "config.yml:1: key `hooks.Stop[0].hooks[0].timeout`: must be from 1 to 3600 seconds"
        );
    }

    #[test]
    fn limits_load_and_a_bad_size_is_one_line_with_its_key() {
        let c = parse("limits: {memory: 64M, pids: 64}\n").unwrap();
        assert_eq!(c.limits.memory.bytes(), 64 << 20);
        assert_eq!((c.limits.pids, c.limits.cpu), (64, 1.0));
        assert_eq!(
            Config::default().limits.describe(),
            "memory 2G, pids 512, cpu 1.0"
        );
        let err = parse("default_model: a/b\nlimits:\n  memory: 2GB\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("config.yml:3: key `limits.memory`: `2GB` is not a size"),
            "{err}"
        );
        assert!(!err.contains('\n'), "{err}");
        let err = parse("limits:\n  cpu: 0\n").unwrap_err().to_string();
        assert!(err.starts_with("config.yml:2: key `limits.cpu`:"), "{err}");
        let err = parse("limits: {swap: 1G}\n").unwrap_err().to_string();
        assert!(err.contains("unknown field `swap`"), "{err}");
    }

    #[test]
    fn wrong_type_names_line_and_key() {
        let err = parse("default_model: a/b\nllm:\n  timeout_s: 5\n  max_concurrency: x\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "config.yml:4: key `llm.max_concurrency`: invalid type: string \"x\", expected usize"
        );
    }

    #[test]
    fn syntax_error_names_the_line() {
        let err = parse("llm:\n  timeout_s: 5\n bad: [\n").unwrap_err();
        match err {
            StoreError::Parse { line, .. } => assert!(line >= 2, "{line}"),
            other => panic!("{other}"),
        }
    }

    #[test]
    fn out_of_range_values_name_line_and_key() {
        let err = parse("llm:\n  max_concurrency: 0\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "config.yml:2: key `llm.max_concurrency`: must be at least 1"
        );
        let err = parse("default_model: a/b\nfallback: [a/c, haiku]\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "config.yml:2: key `fallback`: entry 2: model `haiku` must be `provider/model`, e.g. anthropic/claude-sonnet-4-5"
        );
        let c = parse("fallback: [a/c, b/d]\n").unwrap();
        assert_eq!(c.fallback, vec!["a/c".to_string(), "b/d".to_string()]);
        let err = parse("workers: {shutdown_timeout_s: 0}\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("config.yml:1: key `workers.shutdown_timeout_s`"),
            "{err}"
        );
        let err = parse("workers: {shutdown_timeout_s: .inf}\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("shutdown_timeout_s"), "{err}");
        for bytes in [0u64, 1000, 1 << 30] {
            let err = parse(&format!("llm:\n  max_response_bytes: {bytes}\n"))
                .unwrap_err()
                .to_string();
            assert!(
                err.starts_with("config.yml:2: key `llm.max_response_bytes`"),
                "{err}"
            );
        }
        let c = parse("llm: {max_response_bytes: 1048576}\n").unwrap();
        assert_eq!(c.llm.max_response_bytes, 1 << 20);
    }

    #[test]
    fn agent_section_is_optional_per_key_and_range_checked() {
        let c = parse("agent: {max_turns: 7, reflection: false}\n").unwrap();
        assert_eq!(c.agent.max_turns, 7);
        assert!(!c.agent.reflection);
        assert_eq!(c.agent.loop_repeat_limit, 3);
        let err = parse("agent:\n  max_turns: 0\n").unwrap_err().to_string();
        assert_eq!(
            err,
            "config.yml:2: key `agent.max_turns`: must be at least 1"
        );
    }

    #[test]
    fn crash_notices_are_batched_by_default_and_a_bad_setting_is_one_line() {
        let c = parse("").unwrap();
        assert!(!c.notify.recovered_crashes);
        assert_eq!(c.notify.crash_window_s, 30.0);
        let c = parse("notify: {recovered_crashes: true, crash_window_s: 0.5}\n").unwrap();
        assert!(c.notify.recovered_crashes);
        assert_eq!(c.notify.crash_window_s, 0.5);
        let err = parse("notify:\n  recovered_crashes: maybe\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("config.yml:2: key `notify.recovered_crashes`") && !err.contains('\n'),
            "{err}"
        );
        for bad in ["0", "-1", ".inf", "7200"] {
            let err = parse(&format!("notify:\n  crash_window_s: {bad}\n"))
                .unwrap_err()
                .to_string();
            assert!(
                err.starts_with("config.yml:2: key `notify.crash_window_s`: must be"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn a_dashboards_public_url_is_an_origin_and_telegram_users_are_ids() {
        let c = parse("dashboard: {public_url: \"https://Pegasus.example.com/\"}\ntelegram: {allowed_users: [5, 6]}\n").unwrap();
        assert_eq!(
            c.dashboard.public_origin(),
            Ok(Some("https://pegasus.example.com".to_string()))
        );
        assert_eq!(c.telegram.allowed_users, vec![5, 6]);
        assert_eq!(parse("").unwrap().dashboard.public_origin(), Ok(None));
        for bad in [
            "pegasus.example.com",
            "https://x.test/dash",
            "ftp://x.test",
            "https://",
            "https://a b",
        ] {
            let err = parse(&format!("dashboard: {{public_url: \"{bad}\"}}\n"))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("dashboard.public_url") && err.contains("no path"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn unknown_keys_are_refused_naming_the_key() {
        let err = parse("llm: {timeout_s: 7}\nfuture_feature: {x: 1}\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("config.yml:2") && err.contains("unknown field `future_feature`"),
            "{err}"
        );
    }

    #[test]
    fn nonsense_is_refused_with_its_line_and_key() {
        let cases = [
            ("budjet:\n  daily_usd: 1\n", "budjet", 1),
            ("budget:\n  daily_usd: 5\n  task_uds: 1\n", "task_uds", 3),
            (
                "providers:\n  x: {kind: gemini, base_url: \"https://x\"}\n",
                "providers.x.kind",
                2,
            ),
            (
                "providers:\n  x:\n    kind: openai\n    base_url: not a url\n",
                "providers.x.base_url",
                4,
            ),
            (
                "prices:\n  \"fa/*\": {input: -1, output: 2}\n",
                "prices.fa/*",
                0,
            ),
            ("budget: {daily_usd: -5}\n", "budget.daily_usd", 1),
            (
                "watchdog: {max_usd_per_minute: -1}\n",
                "watchdog.max_usd_per_minute",
                1,
            ),
        ];
        for (text, key, line) in cases {
            let err = Config::parse(text, Path::new("config.yml"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(key), "{text:?} -> {err}");
            // 0: a quoted key whose line the locator cannot find (the key still names it).
            if line > 0 {
                assert!(
                    err.contains(&format!("config.yml:{line}")),
                    "{text:?} -> {err}"
                );
            }
        }
    }

    #[test]
    fn only_http_urls_with_a_host_are_urls() {
        for ok in ["https://api.anthropic.com", "http://127.0.0.1:11434/v1"] {
            assert!(is_http_url(ok), "{ok}");
        }
        for bad in [
            "not a url",
            "ftp://x",
            "https://",
            "http:///v1",
            "https://a b",
        ] {
            assert!(!is_http_url(bad), "{bad}");
        }
    }
}
