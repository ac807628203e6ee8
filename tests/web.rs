//! The web tools through the real binaries (DESIGN.md §16 "The web"): the fake LLM calls
//! `web_fetch` on a page of a scripted site on 127.0.0.1 and reads it as Markdown (with
//! `web.fetch.allow_private`), or is refused in one line (without it); `web_search` goes from
//! the worker to pegasusd and on to strict fakes of SearXNG and Brave Search, whose key never
//! reaches the worker's environment; `approvals.tools` asks before a fetch, and a
//! `web_fetch(GLOB)` entry lets a URL through without asking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use pegasus_fakellm::{
    FakeBrave, FakeHit, FakeLlm, FakeSearxng, FakeSite, Match, Reply, Rule, SitePage, ToolCall,
};
use serde_json::json;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

/// On a message holding `word`, the model calls `tool` with `args` once, then answers
/// "seen" (the tool result is read from the fake's record).
fn script(fake: &FakeLlm, word: &str, tool: &str, args: serde_json::Value) {
    fake.add_rule(
        Rule::new(
            Match::All(vec![
                Match::LastUserTextContains(word.into()),
                Match::NewPrompt,
            ]),
            Reply::Tools(vec![ToolCall::new(tool, args)]),
        )
        .times(1),
    );
    fake.add_rule(Rule::new(
        Match::LastUserTextContains(word.into()),
        Reply::Text(format!("seen {word}")),
    ));
}

/// The text of the last tool result the model was sent, and whether it was an error.
fn last_tool_result(fake: &FakeLlm) -> (String, bool) {
    for r in fake.requests().iter().rev() {
        let Some(messages) = r.body["messages"].as_array() else {
            continue;
        };
        for m in messages.iter().rev() {
            let Some(blocks) = m["content"].as_array() else {
                continue;
            };
            if let Some(b) = blocks.iter().rev().find(|b| b["type"] == "tool_result") {
                let text = match &b["content"] {
                    serde_json::Value::String(s) => s.clone(),
                    serde_json::Value::Array(parts) => parts
                        .iter()
                        .filter_map(|p| p["text"].as_str())
                        .collect::<Vec<_>>()
                        .join(""),
                    _ => String::new(),
                };
                return (text, b["is_error"] == true);
            }
        }
    }
    panic!("no tool result was sent to the model")
}

/// The tool names offered in the last model call of a project (not the MainAgent's).
fn offered(fake: &FakeLlm) -> Vec<String> {
    let r = fake
        .requests()
        .into_iter()
        .rev()
        .find(|r| !r.body["system"].to_string().contains("MainAgent"))
        .unwrap();
    r.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

fn send(home: &Home, project: &str, text: &str) -> String {
    home.ctl_ok(&["project", "send", project, text, "--wait"])
        .trim()
        .to_string()
}

fn site() -> FakeSite {
    let site = FakeSite::start().unwrap();
    site.page(
        "/doc",
        SitePage::ok(
            "text/html; charset=utf-8",
            "<html><head><title>Widget docs</title></head><body><h2>Install</h2><p>Run <code>make install</code>, then read <a href=\"/more\">more</a>.</p><script>track()</script></body></html>",
        ),
    );
    site
}

#[test]
fn web_fetch_reads_a_loopback_page_as_markdown_when_private_addresses_are_allowed() {
    let site = site();
    let url = format!("{}/doc", site.base_url());
    let fake = FakeLlm::start().unwrap();
    fake.require_api_key(Some(FAKE_KEY.into()));
    main_agent_rule(&fake);
    script(&fake, "docs", "web_fetch", json!({"url": url}));
    let home = fake_home(&fake, "web: {fetch: {allow_private: true, timeout_s: 10}}");
    let _d = home.start_fake();
    home.create("web");
    assert_eq!(send(&home, "web", "read the docs"), "seen docs");
    let (text, is_error) = last_tool_result(&fake);
    assert!(!is_error, "{text}");
    assert!(text.starts_with("# Widget docs\nURL: "), "{text}");
    assert!(text.contains("## Install"), "{text}");
    assert!(text.contains("`make install`"), "{text}");
    assert!(text.contains("[more](/more)"), "{text}");
    assert!(!text.contains("track()"), "{text}");
    assert_eq!(site.hits(), vec!["/doc"]);
    // No `web.search`: `web_search` is not offered; `web_fetch` is.
    let tools = offered(&fake);
    assert!(tools.contains(&"web_fetch".to_string()), "{tools:?}");
    assert!(!tools.contains(&"web_search".to_string()), "{tools:?}");
}

#[test]
fn web_fetch_refuses_loopback_and_metadata_in_one_line_by_default() {
    let site = site();
    let fake = FakeLlm::start().unwrap();
    fake.require_api_key(Some(FAKE_KEY.into()));
    main_agent_rule(&fake);
    script(
        &fake,
        "local",
        "web_fetch",
        json!({"url": format!("http://localhost:{}/doc", site.port())}),
    );
    script(
        &fake,
        "cloud",
        "web_fetch",
        json!({"url": "http://169.254.169.254/latest/meta-data/"}),
    );
    let home = fake_home(&fake, "");
    let _d = home.start_fake();
    home.create("web");
    assert_eq!(send(&home, "web", "fetch the local page"), "seen local");
    let (text, is_error) = last_tool_result(&fake);
    assert!(is_error);
    // 127.0.0.1 or ::1, whichever the resolver gives first.
    assert!(
        text.starts_with("web_fetch: refused: localhost is a loopback address (")
            && text.ends_with("); web_fetch reaches public addresses only (web.fetch.allow_private in config.yml opens private ones)")
            && !text.contains('\n'),
        "{text}"
    );
    assert_eq!(send(&home, "web", "read the cloud metadata"), "seen cloud");
    let (text, is_error) = last_tool_result(&fake);
    assert!(is_error);
    assert_eq!(
        text,
        "web_fetch: refused: 169.254.169.254 is a cloud metadata endpoint (169.254.169.254)"
    );
    assert!(site.hits().is_empty(), "{:?}", site.hits());
}

#[test]
fn web_search_goes_through_pegasusd_to_searxng() {
    let sx = FakeSearxng::start(true).unwrap();
    sx.set_results(vec![
        FakeHit::new(
            "Rust",
            "https://www.rust-lang.org/",
            "A language empowering everyone",
        ),
        FakeHit::new(
            "Docs",
            "https://doc.rust-lang.org/",
            "The <strong>book</strong>",
        ),
    ]);
    let fake = FakeLlm::start().unwrap();
    fake.require_api_key(Some(FAKE_KEY.into()));
    main_agent_rule(&fake);
    script(
        &fake,
        "rust",
        "web_search",
        json!({"query": "rust language", "count": 5}),
    );
    let home = fake_home(
        &fake,
        &format!(
            "web: {{search: {{kind: searxng, base_url: \"{}\"}}}}",
            sx.base_url()
        ),
    );
    let _d = home.start_fake();
    home.create("web");
    assert_eq!(send(&home, "web", "search rust"), "seen rust");
    let (text, is_error) = last_tool_result(&fake);
    assert!(!is_error, "{text}");
    assert_eq!(
        text,
        "1. Rust\n   https://www.rust-lang.org/\n   A language empowering everyone\n2. Docs\n   https://doc.rust-lang.org/\n   The book"
    );
    let r = &sx.requests()[0];
    assert_eq!(
        (r.param("q"), r.param("format")),
        (Some("rust language"), Some("json"))
    );
    assert!(offered(&fake).contains(&"web_search".to_string()));
}

#[test]
fn web_search_through_brave_keeps_the_key_in_pegasusd() {
    const KEY_ENV: &str = "PEGASUS_TEST_BRAVE_KEY";
    const KEY: &str = "brave-secret-5f2c81";
    let brave = FakeBrave::start(KEY).unwrap();
    brave.set_results(vec![FakeHit::new(
        "Widgets",
        "https://widgets.example/",
        "All about <strong>widgets</strong>",
    )]);
    let fake = FakeLlm::start().unwrap();
    fake.require_api_key(Some(FAKE_KEY.into()));
    main_agent_rule(&fake);
    script(&fake, "widgets", "web_search", json!({"query": "widgets"}));
    script(&fake, "limit", "web_search", json!({"query": "again"}));
    let home = fake_home(
        &fake,
        &format!(
            "web: {{search: {{kind: brave, base_url: \"{}\", api_key_env: {KEY_ENV}}}}}",
            brave.base_url()
        ),
    );
    let d = home.start_with_env(&[(FAKE_KEY_ENV, FAKE_KEY), (KEY_ENV, KEY)]);
    let worker = home.create("web");
    assert_eq!(send(&home, "web", "find widgets"), "seen widgets");
    let (text, _) = last_tool_result(&fake);
    assert_eq!(
        text,
        "1. Widgets\n   https://widgets.example/\n   All about widgets"
    );
    let r = &brave.requests()[0];
    assert_eq!(r.header("x-subscription-token"), Some(KEY));
    assert_eq!(r.param("count"), Some("10"));
    // The key is in neither the worker's environment nor (scrubbed) pegasusd's.
    for pid in [worker, d.pid] {
        let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
        let env = String::from_utf8_lossy(&env);
        assert!(!env.contains(KEY), "pid {pid} holds the key");
    }
    let env = String::from_utf8_lossy(&std::fs::read(format!("/proc/{worker}/environ")).unwrap())
        .to_string();
    assert!(!env.contains(KEY_ENV), "{env}");
    // Brave's rate limit reaches the model as one line.
    brave.rate_limit_next(1);
    assert_eq!(send(&home, "web", "hit the limit"), "seen limit");
    let (text, is_error) = last_tool_result(&fake);
    assert!(is_error);
    assert_eq!(
        text,
        "web_search: Brave Search rate limit reached (RATE_LIMITED: Request rate limit exceeded for plan.); try again in 1 s"
    );
}

#[test]
fn web_fetch_asks_under_approvals_and_a_url_glob_lets_a_site_through() {
    let site = site();
    site.page("/ok/page", SitePage::ok("text/plain", "trusted text"));
    let trusted = format!("{}/ok/page", site.base_url());
    let other = format!("{}/doc", site.base_url());
    let fake = FakeLlm::start().unwrap();
    fake.require_api_key(Some(FAKE_KEY.into()));
    main_agent_rule(&fake);
    script(&fake, "trusted", "web_fetch", json!({"url": trusted}));
    script(&fake, "other", "web_fetch", json!({"url": other}));
    let home = fake_home(
        &fake,
        &format!(
            "web: {{fetch: {{allow_private: true}}}}\napprovals: {{tools: {{web_fetch: ask, \"web_fetch({}/ok/*)\": allow}}}}",
            site.base_url()
        ),
    );
    let _d = home.start_fake();
    home.create("web");
    // The glob names the URL: no question.
    assert_eq!(send(&home, "web", "read the trusted page"), "seen trusted");
    assert!(last_tool_result(&fake).0.ends_with("trusted text"));
    assert!(home.json(&["approvals"]).as_array().unwrap().is_empty());
    // Any other URL asks first, and the request shows the URL.
    let waiting = std::process::Command::new(env!("CARGO_BIN_EXE_pegasusctl"))
        .arg("--home")
        .arg(home.path())
        .args(["project", "send", "web", "read the other page", "--wait"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let req = poll(WAIT, "an approval request", || {
        home.json(&["approvals"])
            .as_array()
            .and_then(|a| a.first().cloned())
    });
    assert_eq!(req["tool"], "web_fetch");
    assert_eq!(req["summary"], format!("web_fetch url={other:?}"));
    assert_eq!(
        site.hits(),
        vec!["/ok/page"],
        "nothing fetched before the answer"
    );
    home.ctl_ok(&["approve", req["id"].as_str().unwrap()]);
    let out = waiting.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "seen other");
    assert!(last_tool_result(&fake).0.contains("## Install"));
    assert_eq!(site.hits(), vec!["/ok/page", "/doc"]);
}
