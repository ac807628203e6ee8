//! Fallback models through the real binaries (DESIGN.md §5, issue 35 item 5): `fallback:` in
//! config.yml and PROJECT.md; a model overloaded through its retries is answered for by the
//! next model of the list; the ledger line names it and `fallback_from`; `status` and `project
//! show` say so; a stream cut after its text reached followers restarts on the fallback behind
//! a visible line; a budget refusal never falls back; a chain that all fails is one error
//! naming each model. The provider is the fake LLM over real HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use pegasus_fakellm::{FakeLlm, Fault, Match, Reply, Rule};
use serde_json::Value;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The fake's model answers `529 Overloaded` to every message containing `words`; `fa/backup`
/// answers `answer`; everything else (the MainAgent) is answered normally.
fn overloaded_fake(words: &str, backup: Reply) -> FakeLlm {
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(
        Match::All(vec![
            Match::Model("test-model".into()),
            Match::LastUserTextContains(words.into()),
        ]),
        Reply::Fault(Fault::Status {
            code: 529,
            message: "Overloaded".into(),
            retry_after_s: None,
        }),
    ));
    fake.add_rule(Rule::new(Match::Model("backup".into()), backup.clone()));
    fake.add_rule(Rule::new(Match::Model("other".into()), backup));
    main_agent_rule(&fake);
    fake.add_rule(Rule::new(Match::Any, Reply::Text("ok".into())));
    fake
}

/// [`fake_home`] with one more provider (`name: {...}`, a line of `providers:`).
fn home_with_provider(fake: &FakeLlm, provider: &str, extra: &str) -> Home {
    let base = fake_provider_config(fake).replacen(
        "providers:\n",
        &format!("providers:\n  {provider}\n"),
        1,
    );
    Home::with_config(&format!(
        "{base}workers: {{shutdown_timeout_s: 5}}\n\
         agent: {{reflection: false}}\n\
         dashboard: {{listen: \"127.0.0.1:0\"}}\n\
         {extra}\n"
    ))
}

/// The body of the dashboard's page `path`, fetched with its token (HTTP/1.0: the body ends
/// with the connection).
fn dashboard_get(home: &Home, path: &str) -> String {
    use std::io::Write;
    let addr = poll(Duration::from_secs(10), "the dashboard address", || {
        std::fs::read_to_string(home.path().join("run/dashboard.addr")).ok()
    });
    let token = std::fs::read_to_string(home.path().join("run/dashboard.token")).unwrap();
    let mut s = std::net::TcpStream::connect(addr.trim()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\r\n",
        addr.trim(),
        token.trim()
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    assert!(
        raw.starts_with("HTTP/1.0 200") || raw.starts_with("HTTP/1.1 200"),
        "{raw}"
    );
    raw
}

/// What a command printed, stdout then stderr.
fn said(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The models the fake was asked for, in order.
fn models_asked(fake: &FakeLlm) -> Vec<String> {
    fake.requests()
        .iter()
        .map(|r| r.body["model"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The ledger's lines of `project`.
fn ledger_of(home: &Home, project: &str) -> Vec<Value> {
    std::fs::read_to_string(home.path().join("costs/ledger.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["project"] == project)
        .collect()
}

#[test]
fn an_overloaded_model_falls_back_and_status_and_show_say_so() {
    let fake = overloaded_fake("hello", Reply::Text("answered by the backup".into()));
    let home = fake_home(&fake, "fallback: [fa/backup]");
    let _d = home.start_fake();
    home.create("web");
    let out = home.ctl_ok(&["project", "send", "web", "hello there", "--wait"]);
    assert_eq!(out.trim(), "answered by the backup");
    // The model asked for got its retries (max_retries 1), then the fallback answered.
    let asked = models_asked(&fake);
    let main = asked.iter().position(|m| m == "test-model").unwrap();
    assert_eq!(
        &asked[main..main + 3],
        ["test-model", "test-model", "backup"]
    );

    // The ledger line names the model that answered and the one asked for.
    let lines = ledger_of(&home, "web");
    let served: Vec<&Value> = lines.iter().filter(|l| l["model"] == "fa/backup").collect();
    assert_eq!(served.len(), 1, "{lines:?}");
    assert_eq!(served[0]["fallback_from"], "fa/test-model");
    assert!(served[0]["usd"].as_f64().is_some_and(|u| u > 0.0));
    assert!(lines
        .iter()
        .filter(|l| l["model"] == "fa/test-model")
        .all(|l| l.get("fallback_from").is_none()));

    // `status`: the daemon's list and the project's row, in JSON and for people.
    let status = home.json(&["status"]);
    let f = &status["fallbacks"][0];
    assert_eq!(
        (
            &f["project"],
            &f["model"],
            &f["from"],
            &f["why"],
            &f["calls"]
        ),
        (
            &Value::from("web"),
            &Value::from("fa/backup"),
            &Value::from("fa/test-model"),
            &Value::from("overloaded (529)"),
            &Value::from(1)
        ),
        "{status}"
    );
    let row = status["projects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "web")
        .unwrap();
    assert_eq!(row["fallbacks"][0]["model"], "fa/backup");
    let human = home.ctl_ok(&["status"]);
    assert!(
        human.contains("fallback models answered (last hour):")
            && human.contains("web: fallback fa/backup served 1 call since ")
            && human.contains("UTC: fa/test-model overloaded (529)"),
        "{human}"
    );

    // `project show`: the list in force and what answered.
    let show = home.ctl_ok(&["project", "show", "web"]);
    assert!(show.contains("fallback     fa/backup\n"), "{show}");
    assert!(
        show.contains("fell back    fallback fa/backup served 1 call since"),
        "{show}"
    );
    let shown = home.json(&["project", "show", "web"]);
    assert_eq!(shown["fallback_models"], serde_json::json!(["fa/backup"]));
    assert_eq!(shown["fallbacks"][0]["why"], "overloaded (529)");

    // The dashboard: under the project's state, on the projects page and its own.
    for page in ["/", "/projects/web"] {
        let html = dashboard_get(&home, page);
        assert!(
            html.contains("fallback fa/backup served 1 call since")
                && html.contains("fa/test-model overloaded (529)"),
            "{page}: {html}"
        );
    }
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

/// A PROJECT.md `fallback:` replaces config.yml's list for that project: its calls go to its
/// own fallback, never to config.yml's.
#[test]
fn a_projects_list_replaces_the_configs() {
    let fake = overloaded_fake("hello", Reply::Text("answered by another".into()));
    let home = fake_home(&fake, "fallback: [fa/backup]");
    let _d = home.start_fake();
    home.create("web");
    configure(&home, "web", "fallback: [fa/other]");
    let out = home.ctl_ok(&["project", "send", "web", "hello there", "--wait"]);
    assert_eq!(out.trim(), "answered by another");
    let asked = models_asked(&fake);
    assert!(asked.contains(&"other".to_string()), "{asked:?}");
    assert!(!asked.contains(&"backup".to_string()), "{asked:?}");
    let line = ledger_of(&home, "web")
        .into_iter()
        .find(|l| l["model"] == "fa/other")
        .unwrap();
    assert_eq!(line["fallback_from"], "fa/test-model");
    let shown = home.json(&["project", "show", "web"]);
    assert_eq!(shown["fallback_models"], serde_json::json!(["fa/other"]));
}

const STORY: &str = "Once upon a time a fallback model finished the story.";

/// A streamed answer cut after its text reached followers: they see a line saying the answer
/// restarts on the fallback, then the fallback's answer; `send --wait --stream` prints the
/// final answer once, and the session keeps only it.
#[test]
fn a_stream_cut_after_text_restarts_on_the_fallback_with_a_mark() {
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(
        Match::All(vec![
            Match::Model("test-model".into()),
            Match::LastUserTextContains("tell a story".into()),
        ]),
        Reply::Fault(Fault::CutStream),
    ));
    fake.add_rule(Rule::new(
        Match::Model("backup".into()),
        Reply::Fault(Fault::Paced {
            gap_ms: 50,
            then: Box::new(Reply::Text(STORY.into())),
        }),
    ));
    main_agent_rule(&fake);
    fake.add_rule(Rule::new(Match::Any, Reply::Text("warmed up".into())));
    let home = fake_home(&fake, "fallback: [fa/backup]");
    let _d = home.start_fake();
    home.create("tp");
    let (mut follower, followed) = spawn_ctl(&home, &["project", "log", "tp", "-f"]);
    // The follower is subscribed once it shows a first answer: the story is sent after.
    home.ctl_ok(&["project", "send", "tp", "warm up", "--wait"]);
    poll(Duration::from_secs(10), "log -f to follow", || {
        followed.lock().unwrap().contains("warmed up").then_some(())
    });
    let (mut sender, sent) = spawn_ctl(
        &home,
        &[
            "project",
            "send",
            "tp",
            "tell a story",
            "--wait",
            "--stream",
        ],
    );
    let status = poll(Duration::from_secs(30), "send --wait to exit", || {
        sender.try_wait().unwrap()
    });
    assert!(status.success());
    let out = sent.lock().unwrap().clone();
    let mark = "[the answer restarts on fa/backup: fa/test-model answer broke off]";
    let (before, after) = out
        .split_once(mark)
        .unwrap_or_else(|| panic!("no restart mark in {out:?}"));
    assert!(
        before.contains("fake-llm"),
        "the cut text came first: {out:?}"
    );
    assert_eq!(after.trim(), STORY, "the final answer once: {out:?}");
    assert_eq!(out.matches(STORY).count(), 1, "{out:?}");
    poll(Duration::from_secs(10), "the mark at log -f", || {
        followed.lock().unwrap().contains(mark).then_some(())
    });
    let _ = follower.kill();
    let _ = follower.wait();
    let session =
        std::fs::read_to_string(home.project_dir("tp").join("session/current.jsonl")).unwrap();
    assert_eq!(session.matches(STORY).count(), 1, "{session}");
    assert!(!session.contains("restarts on"), "{session}");
    assert!(!session.contains("fake-llm"), "{session}");
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

/// A budget refusal never falls back: no model is asked.
#[test]
fn a_budget_refusal_does_not_fall_back() {
    let fake = overloaded_fake("hello", Reply::Text("answered by the backup".into()));
    let home = fake_home(
        &fake,
        "fallback: [fa/backup]\nbudget: {daily_usd: 0.0000001}",
    );
    let _d = home.start_fake();
    home.create("web");
    let out = home.ctl(&["project", "send", "web", "hello there", "--wait"]);
    let said = said(&out);
    assert!(said.contains("budget"), "{said}");
    assert!(
        !models_asked(&fake).iter().any(|m| m == "backup"),
        "{:?}",
        models_asked(&fake)
    );
    assert!(ledger_of(&home, "web").is_empty());
    assert!(home.json(&["status"])["fallbacks"]
        .as_array()
        .unwrap()
        .is_empty());
}

/// Every model fails: the answer is one clear error naming each model tried, in order.
#[test]
fn a_chain_that_all_fails_names_each_model() {
    let fake = overloaded_fake(
        "hello",
        Reply::Fault(Fault::Status {
            code: 503,
            message: "Service Unavailable".into(),
            retry_after_s: None,
        }),
    );
    // `gone`: an address nobody listens on, a connection that fails.
    let home = home_with_provider(
        &fake,
        "gone: {kind: openai, base_url: \"http://127.0.0.1:9/v1\", local: true}",
        "fallback: [fa/backup, gone/last]",
    );
    let _d = home.start_fake();
    home.create("web");
    let out = home.ctl(&["project", "send", "web", "hello there", "--wait"]);
    let said = said(&out);
    let at = said
        .find("no model could answer: fa/test-model: ")
        .unwrap_or_else(|| panic!("{said}"));
    let line = said[at..].lines().next().unwrap();
    let (main, backup, last) = (
        line.find("fa/test-model: provider fa failed after 2 attempts: HTTP 529"),
        line.find("; fa/backup: provider fa failed after 2 attempts: HTTP 503"),
        line.find("; gone/last: provider gone failed after 2 attempts: "),
    );
    assert!(
        matches!((main, backup, last), (Some(a), Some(b), Some(c)) if a < b && b < c),
        "{line}"
    );
}

/// An unpriced model in config.yml `fallback:` is refused at start, in one line naming the
/// key.
#[test]
fn an_unpriced_fallback_in_config_is_refused_at_start() {
    let fake = FakeLlm::start().unwrap();
    let home = home_with_provider(
        &fake,
        "fb: {kind: anthropic, base_url: \"http://127.0.0.1:9\"}",
        "fallback: [fb/unpriced]",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_pegasusd"))
        .arg("--home")
        .arg(home.path())
        .env(FAKE_KEY_ENV, FAKE_KEY)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.contains("config.yml key `fallback`"))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(
        line.contains("fb/unpriced cannot be a fallback model: model fb/unpriced has no price"),
        "{line}"
    );
}
