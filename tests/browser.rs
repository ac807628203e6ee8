//! The dashboard in a real browser: headless Chromium driven through WebDriver (`fantoccini`,
//! Debian's `chromium` + `chromium-driver`, which `.ci/run` installs). Log in with the token
//! URL, see the projects, send a message and watch the reply stream in, see a reply's Markdown
//! rendered (its raw HTML and `javascript:` link inert) and its tool call folded with the
//! result, find only the lifecycle buttons the project's state allows, answer a blocked task
//! on the board and watch it move to done, read every page at a phone's width without sideways
//! scrolling, see a crash appear live. On failure a screenshot is left in
//! `target/browser-failure.png`.
//!
//! The screenshots the README shows are taken here: with `PEGASUS_SCREENSHOTS=docs` they are
//! written to `docs/dashboard.png` and `docs/dashboard-phone.png`, else under `target/`.
//!
//! Without chromedriver the test fails in CI (`CI=true`) with the install command, and elsewhere
//! is skipped with one line.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use fantoccini::{ClientBuilder, Locator};
use pegasus_fakellm::{FakeLlm, Fault, Match, Reply, Rule, ToolCall};
use serde_json::json;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const INSTALL: &str = "apt-get install -y chromium chromium-driver";

fn chromedriver() -> Option<PathBuf> {
    ["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

struct Driver(Child);
impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Polls `f` (async) until it gives `Some`, or fails with `what` after `secs`.
async fn until<T, F, Fut>(secs: u64, what: &str, mut f: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return Ok(v);
        }
        if Instant::now() > deadline {
            return Err(format!("timed out waiting for {what}"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Where a screenshot named `name` goes: `docs/` when `PEGASUS_SCREENSHOTS=docs`, else `target/`.
fn screenshot_path(name: &str) -> PathBuf {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    if std::env::var("PEGASUS_SCREENSHOTS").is_ok_and(|v| v == "docs") {
        root.join("docs").join(name)
    } else {
        root.join("target").join(name)
    }
}

/// Runs `script` in the page and gives back what it returns.
async fn js(client: &fantoccini::Client, script: &str) -> Result<serde_json::Value, String> {
    client
        .execute(script, Vec::new())
        .await
        .map_err(|e| format!("{script}: {e}"))
}

/// The texts of the elements `css` finds.
async fn texts(client: &fantoccini::Client, css: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for e in client
        .find_all(Locator::Css(css))
        .await
        .map_err(|e| e.to_string())?
    {
        out.push(e.text().await.map_err(|e| e.to_string())?);
    }
    Ok(out)
}

/// Types `text` into the project page's message box and sends it.
async fn send(client: &fantoccini::Client, text: &str) -> Result<(), String> {
    client
        .find(Locator::Css("form#send textarea"))
        .await
        .map_err(|e| e.to_string())?
        .send_keys(text)
        .await
        .map_err(|e| e.to_string())?;
    client
        .find(Locator::Css("form#send button"))
        .await
        .map_err(|e| e.to_string())?
        .click()
        .await
        .map_err(|e| e.to_string())
}

/// How far the page reaches past the viewport's right edge, in CSS pixels (0: no sideways
/// scrolling).
async fn overflow(client: &fantoccini::Client) -> Result<i64, String> {
    let v = js(
        client,
        "return document.documentElement.scrollWidth - document.documentElement.clientWidth;",
    )
    .await?;
    v.as_i64().ok_or_else(|| format!("not a width: {v}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_works_in_a_real_browser() {
    let Some(driver_bin) = chromedriver() else {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("chromedriver is missing: install it with `{INSTALL}`");
        }
        // Not `eprintln!`: libtest captures that for a passing test, and a skip must show.
        let _ = std::io::Write::write_fmt(
            &mut std::io::stderr(),
            format_args!("skipped: the browser test: no chromedriver (install it with `{INSTALL}`, or run `bash .ci/run`)\n"),
        );
        return;
    };
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("Answer to your question: red".into()),
        Reply::Text("painted red".into()),
    ));
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("Answer to your question: red".into()),
        Reply::Text("painted red".into()),
    ));
    fake.add_rule(Rule::new(
        Match::All(vec![
            Match::LastUserTextContains("paint the door".into()),
            Match::NoToolResultYet,
        ]),
        Reply::Tools(vec![ToolCall::new(
            "ask_user",
            json!({"question": "Which colour for the door?"}),
        )]),
    ));
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("hello browser".into()),
        Reply::Fault(Fault::Paced {
            // Slow enough that the half-streamed text is on screen for most of a second.
            gap_ms: 400,
            then: Box::new(Reply::Text("streamed to the browser, word by word".into())),
        }),
    ));
    // A tool call, then a Markdown answer with raw HTML and a `javascript:` link in it.
    fake.add_rule(
        Rule::new(
            Match::LastUserTextContains("what is in the folder".into()),
            Reply::Tools(vec![ToolCall::new("list_dir", json!({"path": "."}))]),
        )
        .times(1),
    );
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("what is in the folder".into()),
        Reply::Text(
            "**Found** the folder empty:\n\n- `list_dir .`\n- [its docs](javascript:alert(1))\n\n<script>window.pwned = 1</script>"
                .into(),
        ),
    ));
    // A command that waits for a person's yes.
    fake.add_rule(
        Rule::new(
            Match::All(vec![
                Match::LastUserTextContains("deploy the site".into()),
                Match::NewPrompt,
            ]),
            Reply::Tools(vec![ToolCall::new(
                "exec",
                json!({"command": "echo deployed > deployed.txt"}),
            )]),
        )
        .times(1),
    );
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("deploy the site".into()),
        Reply::Text("**Deployed**, as you approved.".into()),
    ));
    main_agent_rule(&fake);
    let home = fake_home(&fake, "approvals: {exec: ask}\n");
    let _daemon = home.start_fake();
    let worker = home.create("web");
    let url = home.ctl_ok(&["dashboard"]).trim().to_string();

    let port = free_port();
    let _driver = Driver(
        Command::new(&driver_bin)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let webdriver = format!("http://127.0.0.1:{port}");
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({"args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1600"]}),
    );
    let client = until(20, "chromedriver", || {
        let (caps, webdriver) = (caps.clone(), webdriver.clone());
        async move {
            // Plain HTTP to the local chromedriver: no TLS stack needed.
            ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
                .capabilities(caps)
                .connect(&webdriver)
                .await
                .ok()
        }
    })
    .await
    .unwrap();

    let steps = async {
        // Log in with the token URL: the page trades it for a cookie and drops it from the URL.
        client.goto(&url).await.map_err(|e| e.to_string())?;
        let link = until(15, "the projects table", || async {
            client
                .find(Locator::Css("table#projects a[href='/projects/web']"))
                .await
                .ok()
        })
        .await?;
        let current = client.current_url().await.map_err(|e| e.to_string())?;
        if current.as_str().contains("token") {
            return Err(format!("the token stayed in the URL: {current}"));
        }
        link.click().await.map_err(|e| e.to_string())?;
        until(10, "the project page", || async {
            client.find(Locator::Css("form#send textarea")).await.ok()
        })
        .await?;

        // An active project offers suspend and complete, never resume or archive.
        let verbs = texts(&client, "#lifecycle button").await?;
        if verbs != ["Suspend", "Mark complete"] {
            return Err(format!("an active project's lifecycle buttons: {verbs:?}"));
        }

        // Send a message; the reply streams in live, then lands in the transcript.
        send(&client, "hello browser").await?;
        let saw_partial = std::sync::atomic::AtomicBool::new(false);
        until(20, "the streamed reply in the transcript", || {
            let client = &client;
            let saw = &saw_partial;
            async move {
                if let Ok(live) = client.find(Locator::Id("live")).await {
                    let t = live.text().await.unwrap_or_default();
                    if t.starts_with("streamed") && !t.contains("word by word") {
                        saw.store(true, std::sync::atomic::Ordering::SeqCst);
                    }
                }
                let t = client
                    .find(Locator::Id("transcript"))
                    .await
                    .ok()?
                    .text()
                    .await
                    .ok()?;
                t.contains("streamed to the browser, word by word")
                    .then_some(())
            }
        })
        .await?;
        if !saw_partial.load(std::sync::atomic::Ordering::SeqCst) {
            return Err("the reply never showed partly streamed in #live".into());
        }

        // A task asks a question: it shows on the board with an answer form; answering moves
        // it to done.
        let goal = client
            .find(Locator::Css("input[name='goal']"))
            .await
            .map_err(|e| e.to_string())?;
        goal.send_keys("paint the door")
            .await
            .map_err(|e| e.to_string())?;
        goal.send_keys("\u{E007}")
            .await
            .map_err(|e| e.to_string())?; // Enter
        let answer = until(20, "the question on the board", || async {
            client
                .find(Locator::Css(
                    "#board [data-column='todo'] .task input[name='text']",
                ))
                .await
                .ok()
        })
        .await?;
        let card = client
            .find(Locator::Css("#board [data-column='todo'] .task"))
            .await
            .map_err(|e| e.to_string())?
            .text()
            .await
            .map_err(|e| e.to_string())?;
        if !card.contains("Which colour for the door?") {
            return Err(format!("the card does not show the question: {card}"));
        }
        answer.send_keys("red").await.map_err(|e| e.to_string())?;
        answer
            .send_keys("\u{E007}")
            .await
            .map_err(|e| e.to_string())?;
        until(20, "the task in the done column", || async {
            let t = client
                .find(Locator::Css("#board [data-column='done']"))
                .await
                .ok()?
                .text()
                .await
                .ok()?;
            t.contains("paint the door").then_some(())
        })
        .await?;

        // A reply with a tool call: the call is folded with its result, the Markdown is
        // rendered, and the reply's raw HTML and `javascript:` link do nothing.
        send(&client, "what is in the folder?").await?;
        until(20, "the Markdown reply rendered", || async {
            let t = client
                .find(Locator::Css("#transcript .msg.assistant .md strong"))
                .await
                .ok()?
                .text()
                .await
                .ok()?;
            (t == "Found").then_some(())
        })
        .await?;
        let mut list_dir = None;
        for fold in client
            .find_all(Locator::Css("#transcript details.tool"))
            .await
            .map_err(|e| e.to_string())?
        {
            let summary = fold.text().await.map_err(|e| e.to_string())?;
            if summary.contains("list_dir") {
                list_dir = Some((fold, summary));
            }
        }
        let (fold, summary) = list_dir.ok_or("no folded list_dir call in the transcript")?;
        if !summary.contains("list_dir") || summary.contains("(empty)") {
            return Err(format!(
                "a folded call shows its name and hides its result: {summary:?}"
            ));
        }
        fold.find(Locator::Css("summary"))
            .await
            .map_err(|e| e.to_string())?
            .click()
            .await
            .map_err(|e| e.to_string())?;
        let opened = fold.text().await.map_err(|e| e.to_string())?;
        if !opened.contains("result\n(empty)") {
            return Err(format!("the opened call shows no result: {opened:?}"));
        }
        let code = texts(&client, "#transcript .md li code").await?;
        if code != ["list_dir ."] {
            return Err(format!("the list item's code: {code:?}"));
        }
        let inert = js(
            &client,
            "return [window.pwned === undefined, \
                     document.querySelectorAll('#transcript script').length, \
                     document.querySelectorAll('#transcript a[href]').length, \
                     document.getElementById('transcript').textContent.includes('<script>window.pwned = 1</script>')];",
        )
        .await?;
        if inert != json!([true, 0, 0, true]) {
            return Err(format!(
                "raw HTML ran or the javascript: link kept its target (no pwned, no script, no link, shown as text): {inert}"
            ));
        }

        // A command waits for approval: the project page lists it with Approve / Deny, the
        // header's badge counts it.
        send(&client, "deploy the site").await?;
        let pending = until(20, "the pending approval on the project page", || async {
            let t = client
                .find(Locator::Css("#project-approvals .approval"))
                .await
                .ok()?
                .text()
                .await
                .ok()?;
            t.contains("echo deployed > deployed.txt").then_some(t)
        })
        .await?;
        if !pending.contains("exec") || !pending.contains("Approve") || !pending.contains("Deny") {
            return Err(format!("the pending approval: {pending:?}"));
        }
        let badge = texts(&client, "#approvals-badge").await?;
        if badge != ["1"] {
            return Err(format!("the header's approvals badge: {badge:?}"));
        }

        // What the README shows: the project page at this point, from its top.
        js(&client, "window.scrollTo(0, 0); return null;").await?;
        if let Ok(shot) = client.screenshot().await {
            let _ = std::fs::write(screenshot_path("dashboard.png"), shot);
        }

        // At a phone's width every page is one column with nothing reaching past the edge.
        client
            .set_window_size(390, 844)
            .await
            .map_err(|e| e.to_string())?;
        let width = js(&client, "return window.innerWidth;").await?;
        if width.as_i64().is_none_or(|w| w > 500) {
            return Err(format!(
                "the window did not shrink to a phone's width: {width}"
            ));
        }
        for path in ["/", "/approvals", "/costs", "/crashes", "/projects/web"] {
            let origin = url.split("/#").next().unwrap_or(&url).trim_end_matches('/');
            // Each page left behind gives its event stream back: with six connections to a
            // host, a page that kept its stream open would make the seventh wait for minutes.
            let started = Instant::now();
            client
                .goto(&format!("{origin}{path}"))
                .await
                .map_err(|e| e.to_string())?;
            if started.elapsed() > Duration::from_secs(5) {
                return Err(format!("{path} took {:?} to load", started.elapsed()));
            }
            until(10, "the page", || async {
                client.find(Locator::Css("main h1")).await.ok()
            })
            .await?;
            if path == "/" {
                // The list says at a glance which project waits.
                let count = until(10, "the project's approvals count", || async {
                    let t = client
                        .find(Locator::Css(".approvals-count[data-project='web']"))
                        .await
                        .ok()?
                        .text()
                        .await
                        .ok()?;
                    (t == "1").then_some(t)
                })
                .await;
                count.map_err(|e| format!("{e}: the list shows no waiting approval for web"))?;
            }
            if path == "/approvals" {
                until(10, "the request on the approvals page", || async {
                    let t = client
                        .find(Locator::Css("#approvals-all .approval"))
                        .await
                        .ok()?
                        .text()
                        .await
                        .ok()?;
                    t.contains("web").then_some(())
                })
                .await?;
            }
            let over = overflow(&client).await?;
            if over > 0 {
                return Err(format!("{path} at 390 px reaches {over} px past the edge"));
            }
            if path == "/projects/web" {
                if let Ok(shot) = client.screenshot().await {
                    let _ = std::fs::write(screenshot_path("dashboard-phone.png"), shot);
                }
            }
        }
        // Tap targets: every button at least 40 px high.
        let low = js(
            &client,
            "return Array.from(document.querySelectorAll('button')).filter(function (b) { \
                 var r = b.getBoundingClientRect(); return r.height > 0 && r.height < 40; }).length;",
        )
        .await?;
        if low != json!(0) {
            return Err(format!("{low} buttons are under 40 px high"));
        }

        // Approved from the phone: the command runs, the reply comes, nothing waits any more.
        client
            .find(Locator::Css(
                "#project-approvals button[data-action='approve']",
            ))
            .await
            .map_err(|e| e.to_string())?
            .click()
            .await
            .map_err(|e| e.to_string())?;
        until(30, "the approved command's reply", || async {
            let t = client
                .find(Locator::Id("transcript"))
                .await
                .ok()?
                .text()
                .await
                .ok()?;
            t.contains("Deployed, as you approved.").then_some(())
        })
        .await?;
        until(
            10,
            "the approval gone from the page and the badge",
            || async {
                let hidden = js(
                    &client,
                    "return [document.getElementById('project-approvals').hidden, \
                         document.getElementById('approvals-badge').textContent];",
                )
                .await
                .ok()?;
                (hidden == json!([true, "0"])).then_some(())
            },
        )
        .await?;
        let ran = home.project_dir("web").join("workdir/deployed.txt");
        if !ran.exists() {
            return Err(format!(
                "the approved command did not run: no {}",
                ran.display()
            ));
        }

        // A crash appears live.
        kill9(worker);
        until(20, "the crash shown", || async {
            let t = client
                .find(Locator::Id("flash"))
                .await
                .ok()?
                .text()
                .await
                .ok()?;
            t.contains("crash in web").then_some(())
        })
        .await?;
        Ok::<(), String>(())
    };
    let result = steps.await;
    if let Err(e) = result {
        let shot = client.screenshot().await.unwrap_or_default();
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/browser-failure.png");
        let _ = std::fs::write(&path, shot);
        let _ = client.close().await;
        panic!("{e} (screenshot: {})", path.display());
    }
    client.close().await.unwrap();
}
