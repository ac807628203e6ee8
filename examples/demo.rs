//! The Pegasus demo on the built-in defaults: `cargo run --release --example demo`.
//!
//! Starts the fake LLM server (it speaks the real Anthropic wire format over HTTP on
//! 127.0.0.1) and a real `pegasusd` in a temporary home pointed at it. Two projects, each its
//! own `project-worker` process, do work with tool calls: one writes a file in its workdir, the
//! other remembers a fact. Then a worker is killed with `kill -9` in the middle of a tool call
//! and comes back with its session intact, the daemon itself is killed and restarted, and the
//! cost ledger is summed. Every step is a real `pegasusctl` command, printed as it runs.
//! Needs no API key and no network.

#![deny(clippy::unwrap_used, clippy::expect_used)]

use pegasus_fakellm::{FakeLlm, Match, Reply, Rule, ToolCall};
use serde_json::json;
use std::{
    error::Error,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

type Result<T> = std::result::Result<T, Box<dyn Error>>;

/// The directory holding the release binaries, built first when run through cargo.
fn bin_dir() -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .ok_or("cannot find the target directory")?
        .to_path_buf();
    // `cargo run --example` builds the example, not the binaries it drives.
    if let Some(cargo) = std::env::var_os("CARGO") {
        let profile = if dir.ends_with("release") {
            vec!["--release"]
        } else {
            vec![]
        };
        // Said before it starts: the first build of the three binaries takes minutes.
        println!(
            "Building the binaries the demo drives: pegasusd, pegasusctl and project-worker{} \
             (a few minutes the first time on a small machine, seconds after that; cargo shows its progress)...",
            if profile.is_empty() { "" } else { " (release)" }
        );
        let status = Command::new(cargo)
            .args(["build", "--bins"])
            .args(profile)
            .status()?;
        if !status.success() {
            return Err("building the pegasus binaries failed".into());
        }
    }
    for bin in ["pegasusd", "pegasusctl", "project-worker"] {
        if !dir.join(bin).is_file() {
            return Err(format!(
                "{} is missing: run `cargo build --release --bins` first",
                dir.join(bin).display()
            )
            .into());
        }
    }
    Ok(dir)
}

struct Demo {
    bins: PathBuf,
    home: tempfile::TempDir,
    daemon: Option<Child>,
}

impl Demo {
    fn say(&self, text: &str) {
        println!("\n\x1b[1m== {text}\x1b[0m");
    }

    /// Runs pegasusctl visibly and returns its stdout.
    fn ctl(&self, args: &[&str]) -> Result<String> {
        println!("$ pegasusctl {}", args.join(" "));
        let out = self.ctl_quiet(args)?;
        print!("{out}");
        Ok(out)
    }

    fn ctl_quiet(&self, args: &[&str]) -> Result<String> {
        let out = Command::new(self.bins.join("pegasusctl"))
            .arg("--home")
            .arg(self.home.path())
            .args(args)
            .output()?;
        if !out.status.success() {
            return Err(format!(
                "pegasusctl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )
            .into());
        }
        Ok(String::from_utf8(out.stdout)?)
    }

    fn json(&self, args: &[&str]) -> Result<serde_json::Value> {
        let mut full = vec!["--json"];
        full.extend_from_slice(args);
        Ok(serde_json::from_str(&self.ctl_quiet(&full)?)?)
    }

    fn start_daemon(&mut self) -> Result<()> {
        println!("$ pegasusd --home {}", self.home.path().display());
        let child = Command::new(self.bins.join("pegasusd"))
            .arg("--home")
            .arg(self.home.path())
            .env("DEMO_FAKE_KEY", "sk-demo-not-a-real-key")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        self.daemon = Some(child);
        wait_for("pegasusd to answer", || {
            Ok(self.ctl_quiet(&["status"]).is_ok())
        })
    }

    fn worker(&self, name: &str, not: Option<u64>) -> Result<u64> {
        let mut pid = 0;
        wait_for(&format!("a ready worker for {name}"), || {
            let p = self.json(&["project", "show", name])?;
            match p["worker_pid"].as_u64() {
                Some(p_) if p["worker_state"] == "ready" && Some(p_) != not => {
                    pid = p_;
                    Ok(true)
                }
                _ => Ok(false),
            }
        })?;
        Ok(pid)
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        if let Some(mut d) = self.daemon.take() {
            let _ = d.kill();
            let _ = d.wait();
        }
    }
}

/// Polls every 20 ms for up to 10 s.
fn wait_for(what: &str, mut f: impl FnMut() -> Result<bool>) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if f().unwrap_or(false) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(format!("timed out waiting for {what}").into())
}

fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false)
}

fn kill9(pid: u64) -> Result<()> {
    println!("$ kill -9 {pid}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(pid)?),
        nix::sys::signal::Signal::SIGKILL,
    )?;
    Ok(())
}

/// What the fake model answers: a scripted conversation per project, matched on what the
/// request contains, like a real model would react to it.
fn script(fake: &FakeLlm) {
    let user = |t: &str| Match::LastUserTextContains(t.into());
    fake.add_rule(Rule::new(
        Match::SystemContains("PostTaskReflector".into()),
        Reply::Text(r#"{"facts":[],"episode":"Handled a request from the user."}"#.into()),
    ));
    fake.add_rule(Rule::new(
        Match::SystemContains("MainAgent".into()),
        Reply::Text("Noted; the project is back.".into()),
    ));
    // A tool call answers the first request of a step (`times(1)`), the text the second.
    fake.add_rule(Rule::new(user("index page"), Reply::Tools(vec![ToolCall::new(
        "write_file",
        json!({"path": "site/index.html", "content": "<h1>Pegasus</h1>\n<p>One person, many desks.</p>\n"}),
    )])).times(1));
    fake.add_rule(Rule::new(
        user("index page"),
        Reply::Text("I wrote site/index.html.".into()),
    ));
    fake.add_rule(Rule::new(user("Remember"), Reply::Tools(vec![ToolCall::new(
        "memory_write",
        json!({"path": "facts/runtimes.md", "content": "tokio schedules tasks with work stealing."}),
    )])).times(1));
    fake.add_rule(Rule::new(
        user("Remember"),
        Reply::Text("Noted in memory/facts/runtimes.md.".into()),
    ));
    fake.add_rule(
        Rule::new(
            user("build"),
            Reply::Tools(vec![ToolCall::new(
                "exec",
                json!({"command": "echo building; sleep 30"}),
            )]),
        )
        .times(1),
    );
    // After a crash the worker re-runs the cut-off turn with a note saying so; a model answers
    // the note (what was cut off is cancelled in the session) before the next message.
    fake.add_rule(Rule::new(
        user("Pegasus restarted before the message"),
        Reply::Text(
            "The build was cut off by the restart and did not finish; say the word and I run it again."
                .into(),
        ),
    ));
    fake.add_rule(Rule::new(
        user("back"),
        Reply::Text(
            "I am back. The build was cancelled by the restart; say the word and I run it again."
                .into(),
        ),
    ));
}

fn main() -> Result<()> {
    let bins = bin_dir()?;
    let fake = FakeLlm::start()?;
    script(&fake);
    let home = tempfile::Builder::new()
        .prefix("pegasus-demo")
        .tempdir_in("/tmp")?;
    std::fs::write(
        home.path().join("config.yml"),
        format!(
            "# The demo's model is the fake server in this process; docs/GUIDE.md#models shows real providers.\n\
             default_model: fake/demo-model\n\
             providers:\n  fake: {{kind: anthropic, base_url: \"{}\", api_key_env: DEMO_FAKE_KEY}}\n",
            fake.anthropic_base_url()
        ),
    )?;
    let mut demo = Demo {
        bins,
        home,
        daemon: None,
    };
    println!(
        "Pegasus demo in a temporary home: {}",
        demo.home.path().display()
    );
    println!(
        "The model is a fake LLM server at {} (Anthropic wire format).",
        fake.base_url()
    );

    demo.say("Start the supervisor and create two projects, each its own OS process");
    demo.start_daemon()?;
    demo.ctl(&[
        "project",
        "create",
        "website",
        "--goal",
        "Keep the personal website up to date",
        "--constraints",
        "Static HTML only",
    ])?;
    demo.ctl(&[
        "project",
        "create",
        "research-notes",
        "--goal",
        "Collect notes on Rust async runtimes",
    ])?;
    let website = demo.worker("website", None)?;
    let research = demo.worker("research-notes", None)?;
    demo.ctl(&["status"])?;

    demo.say("Give them work: the agents call tools (a file written, a fact remembered)");
    demo.ctl(&[
        "project",
        "send",
        "website",
        "Please create the index page",
        "--wait",
    ])?;
    let page = demo
        .home
        .path()
        .join("projects/website/workdir/site/index.html");
    println!("$ cat {}", page.display());
    print!("{}", std::fs::read_to_string(&page)?);
    demo.ctl(&[
        "project",
        "send",
        "research-notes",
        "Remember: tokio uses a work-stealing scheduler",
        "--wait",
    ])?;
    let fact = demo
        .home
        .path()
        .join("projects/research-notes/memory/facts/runtimes.md");
    println!("$ cat {}", fact.display());
    println!("{}", std::fs::read_to_string(&fact)?);

    demo.say(
        "kill -9 a worker in the middle of a tool call: it comes back with its session intact",
    );
    demo.ctl(&["project", "send", "website", "Run the site build"])?;
    let session = demo
        .home
        .path()
        .join("projects/website/session/current.jsonl");
    wait_for("the build to start", || {
        Ok(std::fs::read_to_string(&session)?.contains("sleep 30"))
    })?;
    kill9(website)?;
    let website2 = demo.worker("website", Some(website))?;
    println!(
        "website is back as pid {website2}; research-notes still pid {research} (alive: {})",
        alive(research)
    );
    demo.ctl(&["project", "send", "website", "Are you back?", "--wait"])?;
    demo.ctl(&["project", "log", "website"])?;

    demo.say("kill -9 the daemon itself: every worker dies with it; a restart resumes them");
    let daemon_pid = demo.daemon.as_ref().map(|d| d.id()).ok_or("no daemon")?;
    kill9(u64::from(daemon_pid))?;
    if let Some(mut d) = demo.daemon.take() {
        d.wait()?;
    }
    wait_for("the workers to die with pegasusd", || {
        Ok(!alive(research) && !alive(website2))
    })?;
    println!("workers {research} and {website2} are gone");
    demo.start_daemon()?;
    demo.worker("research-notes", None)?;
    demo.worker("website", None)?;
    demo.ctl(&["status"])?;

    demo.say("Every model call went through pegasusd and is in the cost ledger");
    demo.ctl(&["cost"])?;
    demo.ctl(&["stop"])?;
    if let Some(mut d) = demo.daemon.take() {
        println!("pegasusd exited with {}", d.wait()?);
    }
    let violations = fake.violations();
    if !violations.is_empty() {
        return Err(format!("the fake LLM saw invalid requests: {violations:?}").into());
    }
    println!(
        "\nDone: {} model calls, every transcript valid.",
        fake.request_count()
    );
    Ok(())
}
