//! Codex (`codex`, OpenAI's Codex CLI, npm `@openai/codex`) as the other side of a test: run
//! `codex exec --json PROMPT` against a [`FakeLlm`] scripted by the test, in an isolated
//! `CODEX_HOME` whose `config.toml` names the fake as its model provider, with a deadline, and
//! read back its JSONL events.
//!
//! The binary is `PEGASUS_TEST_CODEX` when set, else `codex` on `PATH` (`.ci/run` installs
//! `@openai/codex@0.171.0`). When there is none, [`Codex::new`] prints one line saying so and
//! returns `None`, and the test skips; under `CI=true` it fails instead.
//!
//! What Codex sends, for writing rules: every request is `POST /v1/responses`, streamed, with
//! `Authorization: Bearer KEY` (the key from the provider's `env_key`), `store: false`, its
//! instructions as `developer` messages, an `<environment_context>` user message and then the
//! prompt as the last user message (`Match::LastUserTextContains` finds it). Its tools:
//! `exec_command` (a function: `{"cmd": "..."}`, run as `bash -lc CMD`, its output coming back
//! as `Chunk ID: ..\nWall time: ..\nProcess exited with code N\n...\nOutput:\n...`),
//! `apply_patch` (a `custom` tool: the call's input is the patch text), `write_stdin`,
//! `view_image`, `request_user_input`, the goal tools, `tool_search`, `web_search`.
//! `Match::NewPrompt` holds on the first request of a prompt and
//! `Match::LastToolResultContains` on the requests that carry a tool's output back.

use std::{
    path::{Path, PathBuf},
    process::{Command, ExitStatus},
    time::Duration,
};

use pegasus_fakellm::FakeLlm;
use serde_json::Value;

/// The API key Codex is given (in [`KEY_VAR`]): `fake.require_api_key(Some(..))` checks it
/// arrives.
pub const API_KEY: &str = "sk-pegasus-test-codex";

/// The environment variable the fake provider's `env_key` names.
pub const KEY_VAR: &str = "PEGASUS_TEST_CODEX_KEY";

/// A model Codex 0.171.0 knows (its metadata is built in, so it warns of nothing).
pub const MODEL: &str = "gpt-5.5";

/// The longest a run may take unless [`Codex::timeout`] says otherwise.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// The `codex` binary: `PEGASUS_TEST_CODEX`, else the first `codex` on `PATH`; `Err` says
/// why there is none.
pub fn find() -> Result<PathBuf, String> {
    super::find_program(
        "PEGASUS_TEST_CODEX",
        "codex",
        "install it with `npm install -g @openai/codex@0.171.0`",
    )
}

/// The `config.toml` of a Codex home whose model provider is the OpenAI Responses endpoint at
/// `base_url` (ending in `/v1`), its key in [`KEY_VAR`], without retries (a refusal ends the
/// run at once).
pub fn config_toml(base_url: &str) -> String {
    format!(
        r#"model = "{MODEL}"
model_provider = "fake"

[model_providers.fake]
name = "Fake LLM"
base_url = "{base_url}"
env_key = "{KEY_VAR}"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
"#
    )
}

/// A prepared run of Codex against a fake: its binary, isolated home, working directory,
/// extra arguments and deadline.
pub struct Codex {
    bin: PathBuf,
    home: tempfile::TempDir,
    workdir: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    timeout: Duration,
}

/// What one run gave: its `--json` events (one JSON value per stdout line), its stderr and
/// its exit status.
#[derive(Debug)]
pub struct CodexRun {
    /// Every event, in order (`thread.started`, `turn.started`, `item.started`,
    /// `item.completed`, `turn.completed` or `turn.failed`, `error`).
    pub events: Vec<Value>,
    /// Everything Codex wrote on stderr.
    pub stderr: String,
    /// How it exited.
    pub status: ExitStatus,
}

impl Codex {
    /// A run against `fake`, in a fresh home (`HOME`, and `CODEX_HOME` with the fake as its
    /// provider, in a temporary directory) whose `work/` is the working directory; `None`
    /// (after one printed line) when there is no `codex` and `CI` is not `true`.
    pub fn new(fake: &FakeLlm) -> Option<Codex> {
        let bin = super::required(find())?;
        let home = tempfile::tempdir().unwrap();
        let workdir = home.path().join("work");
        std::fs::create_dir_all(&workdir).unwrap();
        let codex_home = home.path().join("codex-home");
        std::fs::create_dir_all(&codex_home).unwrap();
        std::fs::write(
            codex_home.join("config.toml"),
            config_toml(&fake.openai_base_url()),
        )
        .unwrap();
        Some(Codex {
            bin,
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

    /// `CODEX_HOME` (inside the home): its `config.toml`, sessions and logs.
    pub fn codex_home(&self) -> PathBuf {
        self.home.path().join("codex-home")
    }

    /// The working directory Codex runs in (`HOME/work` unless [`Codex::workdir`]).
    pub fn dir(&self) -> &Path {
        &self.workdir
    }

    /// Runs in `dir` instead.
    pub fn workdir(mut self, dir: &Path) -> Codex {
        self.workdir = dir.to_path_buf();
        self
    }

    /// Extra arguments after `exec --json --skip-git-repo-check`, e.g. `["--sandbox",
    /// "workspace-write"]`, `["-c", "key=value"]`.
    pub fn args<I, S>(mut self, args: I) -> Codex
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// One more environment variable for Codex (and so for the commands it runs); it
    /// overrides the helper's own (e.g. [`KEY_VAR`]).
    pub fn env(mut self, key: &str, value: &str) -> Codex {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    /// The deadline of a run (default 120 s); past it the run is killed and the test fails.
    pub fn timeout(mut self, timeout: Duration) -> Codex {
        self.timeout = timeout;
        self
    }

    /// Runs `codex exec --json --skip-git-repo-check ARGS... PROMPT` to its end and parses
    /// its events. Codex runs in a process group of its own, killed when the run is over (the
    /// commands it started with it). Fails the test past the deadline, or on a stdout line that
    /// is not JSON.
    pub fn run(&self, prompt: &str) -> CodexRun {
        let mut args: Vec<String> = vec![
            "exec".into(),
            "--json".into(),
            "--skip-git-repo-check".into(),
        ];
        args.extend(self.args.iter().cloned());
        args.push(prompt.into());
        self.run_args(&args)
    }

    /// Runs `codex ARGS...` (e.g. `exec resume --last ...`) as [`Codex::run`] does.
    pub fn run_args(&self, args: &[String]) -> CodexRun {
        let mut cmd = Command::new(&self.bin);
        cmd.args(args)
            .current_dir(&self.workdir)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.home.path())
            .env("CODEX_HOME", self.codex_home())
            .env(KEY_VAR, API_KEY)
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        let run = super::run_json_lines(cmd, self.timeout, &format!("codex {args:?}"));
        CodexRun {
            events: run.events,
            stderr: run.stderr,
            status: run.status,
        }
    }
}

impl CodexRun {
    /// The thread id of `thread.started` (what `codex exec resume` takes).
    pub fn thread_id(&self) -> Option<&str> {
        self.events
            .iter()
            .find(|e| e["type"] == "thread.started")
            .and_then(|e| e["thread_id"].as_str())
    }

    /// The items of the `item.completed` events, in order.
    pub fn items(&self) -> Vec<&Value> {
        self.events
            .iter()
            .filter(|e| e["type"] == "item.completed")
            .map(|e| &e["item"])
            .collect()
    }

    /// The completed items of one `type` (`agent_message`, `command_execution`,
    /// `file_change`, `reasoning`, `error`, ...).
    pub fn items_of(&self, kind: &str) -> Vec<&Value> {
        self.items()
            .into_iter()
            .filter(|i| i["type"] == kind)
            .collect()
    }

    /// The text of the last `agent_message`: the final answer.
    pub fn answer(&self) -> Option<&str> {
        self.items_of("agent_message")
            .last()
            .and_then(|i| i["text"].as_str())
    }

    /// The `turn.completed` event, if the turn ended well.
    pub fn turn_completed(&self) -> Option<&Value> {
        self.events.iter().find(|e| e["type"] == "turn.completed")
    }

    /// The messages of the `error` and `turn.failed` events, in order.
    pub fn errors(&self) -> Vec<&str> {
        self.events
            .iter()
            .filter_map(|e| match e["type"].as_str() {
                Some("error") => e["message"].as_str(),
                Some("turn.failed") => e["error"]["message"].as_str(),
                _ => None,
            })
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
