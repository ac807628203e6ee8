//! Test harness: a real `pegasusd` in a temporary home, driven through the real `pegasusctl`
//! over the real socket. Waiting is always polling with a deadline, never a bare sleep.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod claude;
pub mod codex;
pub mod llama;
use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    time::{Duration, Instant},
};

pub const PEGASUSD: &str = env!("CARGO_BIN_EXE_pegasusd");
pub const PEGASUSCTL: &str = env!("CARGO_BIN_EXE_pegasusctl");

/// An example's binary, `target/<profile>/examples/<name>`, beside this test's `deps/` folder
/// (`cargo test` builds the examples with the tests).
pub fn example_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .and_then(|deps| deps.parent())
        .expect("a test runs from target/<profile>/deps")
        .join("examples")
        .join(name)
}

/// Polls `f` every 20 ms until it returns `Some` or `timeout` passes; then fails naming `what`.
pub fn poll<T>(timeout: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether a process is alive: it exists and is not a zombie (a dead worker reparented to a
/// container's init may never be reaped, but it runs no code).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rsplit(')')
                .next()
                .and_then(|rest| rest.split_whitespace().next());
            !matches!(state, Some("Z") | Some("X") | None)
        }
        Err(_) => false,
    }
}

/// The pids of live processes whose command line contains `needle`.
pub fn processes_with(needle: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            String::from_utf8_lossy(&cmdline).contains(needle) && alive(*pid)
        })
        .collect()
}

pub fn kill9(pid: u32) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
}

/// A temporary home (short path: Unix socket paths are limited to 107 bytes).
/// Everything in the home's `logs/` (pegasusd's and the workers' files), to look for a line.
pub fn logs(home: &Home) -> String {
    let mut all = String::new();
    for e in std::fs::read_dir(home.path().join("logs"))
        .unwrap()
        .flatten()
    {
        all.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
    }
    all
}

pub struct Home {
    pub dir: tempfile::TempDir,
}

impl Home {
    pub fn new() -> Home {
        let dir = tempfile::Builder::new()
            .prefix("pg")
            .tempdir_in("/tmp")
            .unwrap();
        Home { dir }
    }

    /// A home whose config makes crash tests quick and stops fast.
    pub fn with_config(yaml: &str) -> Home {
        let home = Home::new();
        std::fs::write(home.path().join("config.yml"), yaml).unwrap();
        home
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn project_dir(&self, name: &str) -> PathBuf {
        self.path().join("projects").join(name)
    }

    pub fn project_md(&self, name: &str) -> String {
        std::fs::read_to_string(self.project_dir(name).join("PROJECT.md")).unwrap()
    }

    /// Runs pegasusctl against this home.
    pub fn ctl(&self, args: &[&str]) -> Output {
        Command::new(PEGASUSCTL)
            .arg("--home")
            .arg(self.path())
            .args(args)
            .output()
            .unwrap()
    }

    /// Runs pegasusctl, asserts success, returns stdout.
    pub fn ctl_ok(&self, args: &[&str]) -> String {
        let out = self.ctl(args);
        assert!(
            out.status.success(),
            "pegasusctl {args:?} failed ({:?}): {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs a command that must fail with exit 1 and one line on stderr; returns that line.
    pub fn ctl_fails(&self, args: &[&str]) -> String {
        let out = self.ctl(args);
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
        assert_eq!(out.status.code(), Some(1), "pegasusctl {args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        stderr
    }

    /// Runs pegasusctl with `--json`, asserts success, parses stdout.
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut full = vec!["--json"];
        full.extend_from_slice(args);
        serde_json::from_str(&self.ctl_ok(&full)).unwrap()
    }

    /// Starts pegasusd on this home and waits until it answers `status`.
    pub fn start(&self) -> Daemon {
        self.start_with_env(&[])
    }

    /// Starts pegasusd with extra environment variables (API keys for the fake LLM).
    pub fn start_with_env(&self, env: &[(&str, &str)]) -> Daemon {
        let child = Command::new(PEGASUSD)
            .arg("--home")
            .arg(self.path())
            // A developer's real keys must never turn a test into real, paid API calls.
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("OPENAI_API_KEY")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            // Logs also go to <home>/logs; an unread pipe would fill up and block the daemon.
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut daemon = Daemon {
            child: Some(child),
            pid: 0,
        };
        daemon.pid = daemon.child.as_ref().unwrap().id();
        poll(Duration::from_secs(10), "pegasusd to answer status", || {
            if let Some(status) = daemon.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("pegasusd exited early with {status}");
            }
            self.ctl(&["status"]).status.success().then_some(())
        });
        daemon
    }

    /// The worker pid of `name` once it is `ready` (and different from `not`).
    pub fn ready_worker(&self, name: &str, not: Option<u64>) -> u32 {
        poll(
            Duration::from_secs(10),
            &format!("a ready worker for {name}"),
            || {
                let p = self.json(&["project", "show", name]);
                let pid = p["worker_pid"].as_u64()?;
                (p["worker_state"] == "ready" && Some(pid) != not).then_some(pid as u32)
            },
        )
    }

    pub fn create(&self, name: &str) -> u32 {
        self.ctl_ok(&[
            "project",
            "create",
            name,
            "--goal",
            &format!("Goal of {name}"),
        ]);
        self.ready_worker(name, None)
    }
}

/// A running pegasusd; killed with SIGKILL on drop (its workers follow it by PDEATHSIG).
pub struct Daemon {
    child: Option<Child>,
    pub pid: u32,
}

impl Daemon {
    /// A pegasusd this test spawned itself (with its own limits or environment).
    pub fn adopt(child: Child, pid: u32) -> Daemon {
        Daemon {
            child: Some(child),
            pid,
        }
    }

    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    /// Waits for the daemon to exit on its own and returns its exit code.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        let mut child = self.child.take().unwrap();
        let status = poll(timeout, "pegasusd to exit", || child.try_wait().unwrap());
        status.code()
    }

    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid as i32), sig).unwrap();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// DESIGN.md §5: every answered call is metered; no test's ledger may hold a line without a cost
/// (every model the tests use is priced, or free on a local provider). Checked when a test's
/// home goes, unless the test already failed.
impl Drop for Home {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        let ledger = self.path().join("costs").join("ledger.jsonl");
        let Ok(text) = std::fs::read_to_string(&ledger) else {
            return;
        };
        for line in text.lines() {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            assert!(
                v.get("usd").is_some_and(|u| u.is_number()),
                "a ledger line without a cost: {line}"
            );
        }
    }
}

/// Starts pegasusctl with `args`, collecting its stdout as it comes.
pub fn spawn_ctl(home: &Home, args: &[&str]) -> (Child, std::sync::Arc<std::sync::Mutex<String>>) {
    let mut child = Command::new(PEGASUSCTL)
        .arg("--home")
        .arg(home.path())
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let sink = seen.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 256];
        while let Ok(n) = std::io::Read::read(&mut stdout, &mut buf) {
            if n == 0 {
                break;
            }
            sink.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    (child, seen)
}

/// A third-party program a test drives: `$env_var` when set (it must be a file), else the
/// first `name` on `PATH`; `Err` says why there is none and how to install it (`install`).
pub fn find_program(env_var: &str, name: &str, install: &str) -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os(env_var) {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
        return Err(format!(
            "{env_var}={} is not a file; {install}",
            p.display()
        ));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| format!("no `{name}` on PATH; {install}"))
}

/// The program `found`, or `None` after one printed line saying why the test skips; under
/// `CI=true` a missing program fails the test instead.
pub fn required(found: Result<PathBuf, String>) -> Option<PathBuf> {
    match found {
        Ok(bin) => Some(bin),
        Err(why) => {
            if std::env::var("CI").as_deref() == Ok("true") {
                panic!("CI=true and {why}");
            }
            eprintln!("skipped: {why}");
            None
        }
    }
}

/// What a command run by [`run_json_lines`] gave: its stdout's JSON lines, its stderr and its
/// exit status.
pub struct JsonLines {
    /// One JSON value per non-empty stdout line, in order.
    pub events: Vec<serde_json::Value>,
    /// Everything it wrote on stderr.
    pub stderr: String,
    /// How it exited.
    pub status: std::process::ExitStatus,
}

/// Runs `cmd` to its end in a process group of its own (killed, with whatever it started, once
/// it exits or `timeout` passes) with stdin closed, and reads its stdout as JSON lines (a
/// harness's event stream). Fails the test past the deadline, or on a stdout line that is not
/// JSON; `what` names the run in the message.
pub fn run_json_lines(mut cmd: Command, timeout: Duration, what: &str) -> JsonLines {
    use std::os::unix::process::CommandExt;
    let out = tempfile::NamedTempFile::new().unwrap();
    let err = tempfile::NamedTempFile::new().unwrap();
    cmd.stdin(Stdio::null())
        .stdout(out.reopen().unwrap())
        .stderr(err.reopen().unwrap())
        .process_group(0);
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    let group = child.id() as i32;
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // Whatever is left of the group (a tool's shell, an MCP server) goes with the run.
    let _ = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(group),
        nix::sys::signal::Signal::SIGKILL,
    );
    let stdout = std::fs::read_to_string(out.path()).unwrap();
    let stderr = std::fs::read_to_string(err.path()).unwrap();
    let Some(status) = status else {
        let _ = child.wait();
        panic!("{what} did not finish within {timeout:?}\nstdout:\n{stdout}\nstderr:\n{stderr}");
    };
    let events = stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| {
                panic!("{what} wrote a stdout line that is not JSON ({e}): {l}\nstderr:\n{stderr}")
            })
        })
        .collect();
    JsonLines {
        events,
        stderr,
        status,
    }
}

/// The environment variable and value that carry the fake provider's API key to pegasusd.
pub const FAKE_KEY_ENV: &str = "PEGASUS_FAKE_KEY";
pub const FAKE_KEY: &str = "sk-fake-common-7a3e91";

/// The lines of a config that point provider `fa` (Anthropic wire format) at the fake server
/// as the default model, priced, with a quick retry policy. `fa` models think (extended
/// thinking), so every role that asks for thinking sends it and the fake checks the thinking
/// blocks come back signed and in place, as the real API does.
pub fn fake_provider_config(fake: &pegasus_fakellm::FakeLlm) -> String {
    format!(
        "default_model: fa/test-model\n\
         providers:\n  fa: {{kind: anthropic, base_url: \"{a}\", api_key_env: {FAKE_KEY_ENV}}}\n\
         prices:\n  \"fa/*\": {{input: 1.0, output: 2.0}}\n\
         models:\n  \"fa/*\": {{context_window: 200000, max_output_tokens: 16000, thinking: true}}\n\
         llm: {{retry_base_ms: 10, max_retries: 1, timeout_s: 60}}\n",
        a = fake.anthropic_base_url(),
    )
}

/// A home on the fake provider ([`fake_provider_config`]) with reflection off (each call must
/// be scripted), a quick worker stop, and `extra` YAML appended.
pub fn fake_home(fake: &pegasus_fakellm::FakeLlm, extra: &str) -> Home {
    Home::with_config(&format!(
        "{}workers: {{shutdown_timeout_s: 5}}\n\
         agent: {{reflection: false}}\n\
         dashboard: {{listen: \"127.0.0.1:0\"}}\n\
         {extra}\n",
        fake_provider_config(fake),
    ))
}

/// A fake that answers a message asking "where" with "answered through pegasusd", anything
/// else with "ok" (the MainAgent included), and checks the API key.
pub fn answering_fake() -> pegasus_fakellm::FakeLlm {
    use pegasus_fakellm::{Match, Reply, Rule};
    let fake = pegasus_fakellm::FakeLlm::start().unwrap();
    fake.require_api_key(Some(FAKE_KEY.into()));
    main_agent_rule(&fake);
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("where".into()),
        Reply::Text("answered through pegasusd".into()),
    ));
    fake.add_rule(Rule::new(Match::Any, Reply::Text("ok".into())));
    fake
}

/// The live `project-worker` processes whose command line names `dir` (a project's folder, or
/// a home's `projects/`), wherever they were started from.
pub fn workers_in(dir: &Path) -> Vec<u32> {
    processes_with(&dir.display().to_string())
        .into_iter()
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/exe"))
                .is_ok_and(|e| e.to_string_lossy().contains("project-worker"))
        })
        .collect()
}

impl Home {
    /// Starts pegasusd with the fake provider's key.
    pub fn start_fake(&self) -> Daemon {
        self.start_with_env(&[(FAKE_KEY_ENV, FAKE_KEY)])
    }
}

/// The MainAgent hears about crashes, stops and notifies; give it something to say.
pub fn main_agent_rule(fake: &pegasus_fakellm::FakeLlm) {
    fake.add_rule(pegasus_fakellm::Rule::new(
        pegasus_fakellm::Match::SystemContains("MainAgent".into()),
        pegasus_fakellm::Reply::Text("noted".into()),
    ));
}

/// An approval round on the fake: a new message containing `trigger` makes the model ask, once,
/// to run `echo ran >> runs.txt` (an `exec`, held under `exec: ask`); it then answers
/// `saw: denied` when the tool result says denied, else `saw: ran`.
pub fn approval_script(fake: &pegasus_fakellm::FakeLlm, trigger: &str) {
    use pegasus_fakellm::{Match, Reply, Rule, ToolCall};
    fake.add_rule(
        Rule::new(
            Match::All(vec![
                Match::LastUserTextContains(trigger.into()),
                Match::NewPrompt,
            ]),
            Reply::Tools(vec![ToolCall::new(
                "exec",
                serde_json::json!({"command": "echo ran >> runs.txt"}),
            )]),
        )
        .times(1),
    );
    fake.add_rule(Rule::new(
        Match::All(vec![
            Match::LastUserTextContains(trigger.into()),
            Match::LastToolResultContains("denied".into()),
        ]),
        Reply::Text("saw: denied".into()),
    ));
    fake.add_rule(Rule::new(
        Match::LastUserTextContains(trigger.into()),
        Reply::Text("saw: ran".into()),
    ));
}

// Code projects: real repositories for the tests that change them.

/// Runs `cmd` with `sh -c` in `dir` as a user with a git identity; its stdout, trimmed.
pub fn sh(dir: &Path, cmd: &str) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "u")
        .env("GIT_AUTHOR_EMAIL", "u@x")
        .env("GIT_COMMITTER_NAME", "u")
        .env("GIT_COMMITTER_EMAIL", "u@x")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{cmd}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A repo with `main` checked out: a.txt = "alpha", b.txt = "beta".
pub fn repo(parent: &Path, name: &str) -> PathBuf {
    let root = parent.join(name);
    std::fs::create_dir_all(&root).unwrap();
    sh(&root, "git init -q -b main && echo alpha > a.txt && echo beta > b.txt && git add -A && git commit -q -m init");
    root
}

/// Adds code keys to a project's PROJECT.md frontmatter (before its closing `---`).
pub fn configure(home: &Home, name: &str, keys: &str) {
    let path = home.project_dir(name).join("PROJECT.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let end = text[4..].find("\n---").unwrap() + 4;
    let next = format!("{}\n{}{}", &text[..end], keys.trim_end(), &text[end..]);
    std::fs::write(&path, next).unwrap();
}

pub fn repos_yaml(repos: &[(&str, &Path)]) -> String {
    let mut s = String::from("repos:\n");
    for (id, p) in repos {
        s.push_str(&format!("  - {{id: {id}, path: '{}'}}\n", p.display()));
    }
    s
}
