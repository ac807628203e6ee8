//! Claude Code (`claude`, npm `@anthropic-ai/claude-code`) as the other side of a test: run
//! `claude -p PROMPT --output-format stream-json --verbose` against a [`FakeLlm`] scripted by
//! the test, in an isolated home, with a deadline, and read back its stream-json events.
//!
//! The binary is `PEGASUS_TEST_CLAUDE` when set, else `claude` on `PATH` (`.ci/run` installs
//! it). When there is none, [`Claude::new`] prints one line saying so and returns `None`, and
//! the test skips; under `CI=true` it fails instead.
//!
//! Claude Code refuses `--dangerously-skip-permissions` as root (as CI runs): allow the tools
//! a test needs with `--allowedTools` (or `--permission-mode`) through [`Claude::args`].
//!
//! What Claude Code sends, for writing rules: every request is `POST /v1/messages?beta=true`,
//! streamed, with its own tools (`Bash`, `Write`, `Read`, `Edit`, ...; `mcp__SERVER__TOOL` for
//! an MCP server's). The prompt is the last text block of the first user message, after a
//! `<system-reminder>` block, so `Match::LastUserTextContains(words of the prompt)` finds it;
//! `Match::NewPrompt` holds on the first request of a prompt, and
//! `Match::LastToolResultContains` on the requests that carry a tool's result back (Write's
//! result is `File created successfully at: PATH ...`, Bash's is the command's output).

use std::{
    path::{Path, PathBuf},
    process::{Command, ExitStatus},
    time::Duration,
};

use pegasus_fakellm::FakeLlm;
use serde_json::Value;

/// The API key Claude Code is given (`ANTHROPIC_API_KEY`): `fake.require_api_key(Some(..))`
/// checks it arrives.
pub const API_KEY: &str = "sk-ant-pegasus-test-claude-code";

/// The longest a run may take unless [`Claude::timeout`] says otherwise.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// The `claude` binary: `PEGASUS_TEST_CLAUDE`, else the first `claude` on `PATH`; `Err` says
/// why there is none.
pub fn find() -> Result<PathBuf, String> {
    super::find_program(
        "PEGASUS_TEST_CLAUDE",
        "claude",
        "install it with `npm install -g @anthropic-ai/claude-code@2.1.332`",
    )
}

/// A prepared run of Claude Code against a fake: its binary, isolated home, working
/// directory, extra arguments and deadline.
pub struct Claude {
    bin: PathBuf,
    base_url: String,
    home: tempfile::TempDir,
    workdir: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    timeout: Duration,
}

/// What one run gave: its stream-json events (one JSON value per stdout line), its stderr and
/// its exit status.
#[derive(Debug)]
pub struct ClaudeRun {
    /// Every stream-json event, in order (`system` init, `assistant`, `user`, `result`, ...).
    pub events: Vec<Value>,
    /// Everything Claude Code wrote on stderr.
    pub stderr: String,
    /// How it exited.
    pub status: ExitStatus,
}

impl Claude {
    /// A run against `fake`, in a fresh home (`HOME` and `CLAUDE_CONFIG_DIR` in a temporary
    /// directory) whose `work/` is the working directory; `None` (after one printed line) when
    /// there is no `claude` and `CI` is not `true`.
    pub fn new(fake: &FakeLlm) -> Option<Claude> {
        let bin = super::required(find())?;
        let home = tempfile::tempdir().unwrap();
        let workdir = home.path().join("work");
        std::fs::create_dir_all(&workdir).unwrap();
        std::fs::create_dir_all(home.path().join("claude-config")).unwrap();
        Some(Claude {
            bin,
            base_url: fake.anthropic_base_url(),
            home,
            workdir,
            args: Vec::new(),
            env: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
        })
    }

    /// The isolated `HOME`.
    pub fn home(&self) -> &Path {
        self.home.path()
    }

    /// Claude Code's config directory (`CLAUDE_CONFIG_DIR`, inside the home): where its
    /// `settings.json` and sessions live.
    pub fn config_dir(&self) -> PathBuf {
        self.home.path().join("claude-config")
    }

    /// The working directory Claude Code runs in (`HOME/work` unless [`Claude::workdir`]).
    pub fn dir(&self) -> &Path {
        &self.workdir
    }

    /// Runs in `dir` instead.
    pub fn workdir(mut self, dir: &Path) -> Claude {
        self.workdir = dir.to_path_buf();
        self
    }

    /// Extra arguments after `-p PROMPT --output-format stream-json --verbose`, e.g.
    /// `["--allowedTools", "Write", "Bash(echo:*)"]`, `["--mcp-config", path]`,
    /// `["--settings", path]`.
    pub fn args<I, S>(mut self, args: I) -> Claude
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// One more environment variable for Claude Code (and so for its hooks and MCP servers);
    /// it overrides the helper's own (e.g. `CLAUDE_CODE_MAX_RETRIES`, 0 unless set here).
    pub fn env(mut self, key: &str, value: &str) -> Claude {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    /// The deadline of a run (default 120 s); past it the run is killed and the test fails.
    pub fn timeout(mut self, timeout: Duration) -> Claude {
        self.timeout = timeout;
        self
    }

    /// Runs `claude -p PROMPT --output-format stream-json --verbose ARGS...` to its end and
    /// parses its events. Claude Code runs in a process group of its own, killed when the run
    /// is over (its tools' and MCP servers' processes with it). Fails the test past the
    /// deadline, or on a stdout line that is not JSON.
    pub fn run(&self, prompt: &str) -> ClaudeRun {
        let mut cmd = Command::new(&self.bin);
        cmd.args(["-p", prompt, "--output-format", "stream-json", "--verbose"])
            .args(&self.args)
            .current_dir(&self.workdir)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.home.path())
            .env("CLAUDE_CONFIG_DIR", self.config_dir())
            .env("ANTHROPIC_BASE_URL", &self.base_url)
            .env("ANTHROPIC_API_KEY", API_KEY)
            .env("DISABLE_TELEMETRY", "1")
            .env("DISABLE_ERROR_REPORTING", "1")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .env("DISABLE_AUTOUPDATER", "1")
            // No retries: a request no rule answers (the fake's 500) ends the run at once,
            // not after Claude Code's ten backed-off retries. `.env(..)` may set another.
            .env("CLAUDE_CODE_MAX_RETRIES", "0")
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        let run = super::run_json_lines(cmd, self.timeout, &format!("claude -p {prompt:?}"));
        ClaudeRun {
            events: run.events,
            stderr: run.stderr,
            status: run.status,
        }
    }
}

impl ClaudeRun {
    /// The final `{"type":"result"}` event, if the run got that far.
    pub fn result(&self) -> Option<&Value> {
        self.events.iter().rev().find(|e| e["type"] == "result")
    }

    /// The final answer's text (`result` of a successful result event).
    pub fn result_text(&self) -> Option<&str> {
        self.result()
            .filter(|r| r["subtype"] == "success" && r["is_error"] == false)
            .and_then(|r| r["result"].as_str())
    }

    /// The content blocks of the `assistant` (or `user`) events, in order.
    pub fn blocks(&self, role: &str) -> Vec<&Value> {
        self.events
            .iter()
            .filter(|e| e["type"] == role)
            .filter_map(|e| e["message"]["content"].as_array())
            .flatten()
            .collect()
    }

    /// The `tool_use` blocks the (fake) model sent, in order.
    pub fn tool_uses(&self) -> Vec<&Value> {
        self.blocks("assistant")
            .into_iter()
            .filter(|b| b["type"] == "tool_use")
            .collect()
    }

    /// The `tool_result` blocks Claude Code answered them with, in order.
    pub fn tool_results(&self) -> Vec<&Value> {
        self.blocks("user")
            .into_iter()
            .filter(|b| b["type"] == "tool_result")
            .collect()
    }

    /// Everything the run printed, for a failing assertion's message.
    pub fn dump(&self) -> String {
        let events: Vec<String> = self.events.iter().map(Value::to_string).collect();
        format!(
            "status {:?}\nevents:\n{}\nstderr:\n{}",
            self.status,
            events.join("\n"),
            self.stderr
        )
    }
}
