//! The first hour of a new user (issue 37), through the real binaries against the fake
//! provider: the README's first commands in order, what `pegasusd` says at start about a model
//! that cannot answer, a failed message in `project log`, `log -f` showing the agent at work,
//! the model in use in `project list`, and refusals that say what to do.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use pegasus_fakellm::{FakeLlm, Fault, Match, Reply, Rule, ToolCall};
use serde_json::json;
use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    sync::mpsc,
    time::Duration,
};

/// The fake of the walk-through: "look around" lists the workdir then answers, "break" is
/// refused as an account out of credit, the rest is answered.
fn walkthrough_fake() -> FakeLlm {
    let fake = FakeLlm::start().unwrap();
    fake.require_api_key(Some(FAKE_KEY.into()));
    main_agent_rule(&fake);
    fake.add_rule(Rule::new(
        Match::All(vec![
            Match::LastUserTextContains("look around".into()),
            Match::NewPrompt,
        ]),
        Reply::Tools(vec![ToolCall::new("list_dir", json!({"path": "."}))]),
    ));
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("break".into()),
        Reply::Fault(Fault::Status {
            code: 400,
            message: "Your credit balance is too low to access the Anthropic API.".into(),
            retry_after_s: None,
        }),
    ));
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("Add a page".into()),
        Reply::Text("Added pegasus.html.".into()),
    ));
    fake.add_rule(Rule::new(Match::Any, Reply::Text("ok".into())));
    fake
}

/// Lines of a running command's stdout, read on a thread.
fn lines_of(child: &mut std::process::Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// Waits for a line containing `needle` on `rx`, collecting what came before.
fn wait_line(rx: &mpsc::Receiver<String>, needle: &str, seen: &mut Vec<String>) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                let hit = line.contains(needle);
                seen.push(line);
                if hit {
                    return;
                }
            }
            Err(_) => panic!("no line with {needle:?} in time; saw {seen:#?}"),
        }
    }
}

#[test]
fn the_readme_first_hour_against_the_fake() {
    let fake = walkthrough_fake();
    let home = fake_home(&fake, "");
    // pegasusd &
    let mut d = home.start_fake();
    // pegasusctl project create website --goal ... --constraints ...
    home.ctl_ok(&[
        "project",
        "create",
        "website",
        "--goal",
        "Keep my website up to date",
        "--constraints",
        "Static HTML only",
    ]);
    home.ready_worker("website", None);
    // pegasusctl status: no problem with a model that has its key.
    let status = home.json(&["status"]);
    assert_eq!(status["problems"], json!([]), "{status}");
    // pegasusctl project list: the model in use, not `-`.
    let list = home.ctl_ok(&["project", "list"]);
    assert!(list.contains("fa/test-model"), "{list}");
    assert_eq!(home.json(&["project", "list"])[0]["model"], "fa/test-model");
    // pegasusctl project send website "Add a page about Pegasus" --wait
    let answer = home.ctl_ok(&[
        "project",
        "send",
        "website",
        "Add a page about Pegasus",
        "--wait",
    ]);
    assert_eq!(answer.trim(), "Added pegasus.html.");

    // pegasusctl project log website -f, while the agent lists its folder.
    let mut follow = Command::new(PEGASUSCTL)
        .arg("--home")
        .arg(home.path())
        .args(["project", "log", "website", "-f"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let rx = lines_of(&mut follow);
    let mut seen = Vec::new();
    wait_line(&rx, "Added pegasus.html.", &mut seen);
    home.ctl_ok(&["project", "send", "website", "look around", "--wait"]);
    wait_line(&rx, "tool list_dir started: .", &mut seen);
    wait_line(&rx, "tool list_dir done", &mut seen);

    // A send without --wait says where its answer, or its failure, will be.
    let sent = home.ctl_ok(&["project", "send", "website", "please break"]);
    assert!(sent.contains("pegasusctl project log website -f"), "{sent}");
    // The failure shows in the follower at once, and in `project log` after.
    wait_line(&rx, "failed (model_error)", &mut seen);
    let _ = follow.kill();
    let _ = follow.wait();
    let log = home.ctl_ok(&["project", "log", "website"]);
    let failed = log
        .lines()
        .find(|l| l.contains("failed (model_error)"))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(
        failed.contains("credit balance") && failed.contains("pegasusctl task retry"),
        "{failed}"
    );
    let asked = log.find("please break").unwrap();
    assert!(log.find("failed (model_error)").unwrap() > asked, "{log}");

    // Refusals that say what to do.
    let typo = home.ctl_fails(&["project", "show", "webiste"]);
    assert!(typo.contains("did you mean website?"), "{typo}");
    let typo = home.ctl_fails(&["project", "send", "webiste", "hi"]);
    assert!(typo.contains("did you mean website?"), "{typo}");
    let again = home.ctl_fails(&["project", "create", "website", "--goal", "x"]);
    assert!(
        again.contains("already exists") && again.contains("pegasusctl project send website"),
        "{again}"
    );

    // pegasusctl stop: returns once pegasusd is gone.
    let stopped = home.ctl_ok(&["stop"]);
    assert_eq!(stopped.trim(), "pegasusd stopped");
    assert!(!alive(d.pid));
    assert_eq!(d.wait_exit(Duration::from_secs(5)), Some(0));
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

#[test]
fn a_model_that_cannot_answer_is_said_at_start_one_line_each_and_in_status() {
    let fake = walkthrough_fake();
    let home = fake_home(&fake, "");
    // No key in pegasusd's environment.
    let d = home.start();
    let status = home.json(&["status"]);
    let problems: Vec<&str> = status["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p.as_str())
        .collect();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].starts_with("default_model `fa/test-model` (used by the MainAgent)")
            && problems[0].contains(FAKE_KEY_ENV),
        "{problems:?}"
    );
    let human = home.ctl_ok(&["status"]);
    assert!(
        human.contains("problems") && human.contains(FAKE_KEY_ENV),
        "{human}"
    );
    drop(d);

    // With the key, a project whose model names a provider config.yml lacks: a warning (the
    // default model still serves), its own line.
    let d = home.start_fake();
    home.ctl_ok(&[
        "project",
        "create",
        "odd",
        "--goal",
        "g",
        "--model",
        "nowhere/m",
    ]);
    drop(d);
    let _d = home.start_fake();
    let status = home.json(&["status"]);
    let problems = status["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{problems:?}");
    let line = problems[0].as_str().unwrap();
    assert!(
        line.starts_with(
            "project odd: its model `nowhere/m` cannot be used: unknown provider `nowhere`"
        ),
        "{line}"
    );
    let log = std::fs::read_dir(home.path().join("logs"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("pegasusd"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect::<String>();
    assert!(
        log.lines()
            .any(|l| l.contains("WARN") && l.contains("project odd: its model")),
        "{log}"
    );
}
