//! The dashboard in a real browser: headless Chromium driven through WebDriver (`fantoccini`,
//! Debian's `chromium` + `chromium-driver`, which `.ci/run` installs). Log in with the token
//! URL, see the projects, send a message and watch the reply stream in, answer a blocked task
//! on the board and watch it move to done, see a crash appear live. On failure a screenshot is
//! left in `target/browser-failure.png`.
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_works_in_a_real_browser() {
    let Some(driver_bin) = chromedriver() else {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("chromedriver is missing: install it with `{INSTALL}`");
        }
        eprintln!("skipped: no chromedriver (install it with `{INSTALL}`)");
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
    main_agent_rule(&fake);
    let home = fake_home(&fake, "");
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

        // Send a message; the reply streams in live, then lands in the transcript.
        let text = client
            .find(Locator::Css("form#send textarea"))
            .await
            .map_err(|e| e.to_string())?;
        text.send_keys("hello browser")
            .await
            .map_err(|e| e.to_string())?;
        client
            .find(Locator::Css("form#send button"))
            .await
            .map_err(|e| e.to_string())?
            .click()
            .await
            .map_err(|e| e.to_string())?;
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

        // What the README shows: the project page at this point (target/dashboard.png).
        if let Ok(shot) = client.screenshot().await {
            let path =
                std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/dashboard.png");
            let _ = std::fs::write(path, shot);
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
