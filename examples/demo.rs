//! The Pegasus demo on the built-in defaults: `cargo run --release --example demo`.
//!
//! Starts a real `pegasusd` in a temporary home, creates two projects (each its own
//! `project-worker` process), sends them messages, kills a worker with `kill -9` and watches it
//! come back, kills the daemon itself with `kill -9` and restarts it, and shows that every
//! acknowledged message is still on disk. Every step is a real `pegasusctl` command, printed as
//! it runs. Needs no API key and no network.

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
        let status = Command::new(cargo)
            .args(["build", "--bins", "--quiet"])
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

fn main() -> Result<()> {
    let bins = bin_dir()?;
    let home = tempfile::Builder::new()
        .prefix("pegasus-demo")
        .tempdir_in("/tmp")?;
    let mut demo = Demo {
        bins,
        home,
        daemon: None,
    };
    println!(
        "Pegasus demo in a temporary home: {}",
        demo.home.path().display()
    );

    demo.say("Start the supervisor and create two projects, each its own OS process");
    demo.start_daemon()?;
    demo.ctl(&[
        "project",
        "create",
        "research-notes",
        "--goal",
        "Collect notes on Rust async runtimes",
    ])?;
    demo.ctl(&[
        "project",
        "create",
        "website",
        "--goal",
        "Keep the personal website up to date",
        "--constraints",
        "Static HTML only",
    ])?;
    let research = demo.worker("research-notes", None)?;
    let website = demo.worker("website", None)?;
    demo.ctl(&["status"])?;

    demo.say(
        "Send messages; each is acknowledged only once it is durably in the project's session",
    );
    demo.ctl(&[
        "project",
        "send",
        "research-notes",
        "Compare tokio and smol schedulers",
    ])?;
    demo.ctl(&["project", "send", "website", "Add a page about Pegasus"])?;

    demo.say(
        "kill -9 one worker: the supervisor reaps it and restarts it; the other never notices",
    );
    kill9(website)?;
    let website2 = demo.worker("website", Some(website))?;
    println!(
        "website is back as pid {website2}; research-notes still pid {research} (alive: {})",
        alive(research)
    );
    demo.ctl(&["project", "show", "website"])?;

    demo.say("kill -9 the daemon itself: every worker dies with it (no orphans)");
    let daemon_pid = demo.daemon.as_ref().map(|d| d.id()).ok_or("no daemon")?;
    kill9(u64::from(daemon_pid))?;
    if let Some(mut d) = demo.daemon.take() {
        d.wait()?;
    }
    wait_for("the workers to die with pegasusd", || {
        Ok(!alive(research) && !alive(website2))
    })?;
    println!("workers {research} and {website2} are gone");
    demo.ctl(&["project", "list"])?;

    demo.say("Start it again: the restart scan resumes every active project from PROJECT.md");
    demo.start_daemon()?;
    demo.worker("research-notes", None)?;
    demo.worker("website", None)?;
    demo.ctl(&["status"])?;
    let session = demo
        .home
        .path()
        .join("projects/website/session/current.jsonl");
    println!("$ cat {}", session.display());
    print!("{}", std::fs::read_to_string(&session)?);

    demo.say("Suspend one project (graceful stop, timestamp in PROJECT.md), then stop the daemon");
    demo.ctl(&["project", "suspend", "research-notes"])?;
    println!("$ cat projects/research-notes/PROJECT.md");
    print!(
        "{}",
        std::fs::read_to_string(demo.home.path().join("projects/research-notes/PROJECT.md"))?
    );
    demo.ctl(&["stop"])?;
    if let Some(mut d) = demo.daemon.take() {
        println!("pegasusd exited with {}", d.wait()?);
    }
    println!("\nDone. Next: the agent loop and the LLM gateway turn these messages into work.");
    Ok(())
}
