//! Crash notices are batched (issue 26): real workers killed with `kill -9` in a burst, and the
//! MainAgent's model calls counted at the fake provider. At most one call per window; none
//! when every crash recovered before the window closed (unless `notify.recovered_crashes`);
//! a project given up (crash-looping) is always told.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use pegasus_fakellm::FakeLlm;
use std::time::Duration;

/// A home on the fake with `notify` as given and workers that restart at once.
fn home(fake: &FakeLlm, notify: &str, crash_loop_max: u32) -> Home {
    Home::with_config(&format!(
        "{}notify: {notify}\n\
         workers: {{shutdown_timeout_s: 5, restart_backoff_ms: 10, crash_loop_max: {crash_loop_max}, crash_loop_window_s: 60}}\n\
         agent: {{reflection: false}}\n\
         dashboard: {{listen: \"127.0.0.1:0\"}}\n",
        fake_provider_config(fake),
    ))
}

/// The MainAgent's model calls so far: their request bodies.
fn main_calls(fake: &FakeLlm) -> Vec<String> {
    fake.requests()
        .iter()
        .filter(|r| r.body["system"].to_string().contains("MainAgent"))
        .map(|r| r.body.to_string())
        .collect()
}

/// Kills `name`'s worker `times` times, each time once its successor is ready.
fn kill_burst(home: &Home, name: &str, mut pid: u32, times: u32) -> u32 {
    for _ in 0..times {
        kill9(pid);
        pid = home.ready_worker(name, Some(pid as u64));
    }
    pid
}

fn log_text(home: &Home) -> String {
    let mut all = String::new();
    for entry in std::fs::read_dir(home.path().join("logs"))
        .unwrap()
        .flatten()
    {
        if entry.file_name().to_string_lossy().starts_with("pegasusd") {
            all.push_str(&std::fs::read_to_string(entry.path()).unwrap_or_default());
        }
    }
    all
}

#[test]
fn a_burst_of_kills_is_one_main_agent_call_listing_every_crash() {
    let fake = answering_fake();
    let home = home(&fake, "{recovered_crashes: true, crash_window_s: 3}", 100);
    // Both projects exist before the first kill, so the whole burst fits in one window.
    let _d = home.start_fake();
    let web = home.create("web");
    let api = home.create("api");
    kill_burst(&home, "web", web, 4);
    kill_burst(&home, "api", api, 1);
    let calls = poll(
        Duration::from_secs(15),
        "the MainAgent told of the burst",
        || {
            let calls = main_calls(&fake);
            (!calls.is_empty()).then_some(calls)
        },
    );
    assert_eq!(calls.len(), 1, "one call for five crashes: {calls:?}");
    let told = &calls[0];
    assert!(
        told.contains("project web: the worker crashed 4 times, the last with signal 9")
            && told.contains("project api: the worker crashed with signal 9")
            && told.contains("it is running again"),
        "{told}"
    );
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

#[test]
fn crashes_that_recovered_before_the_window_closed_cost_no_main_agent_call() {
    let fake = answering_fake();
    let home = home(&fake, "{crash_window_s: 1}", 100);
    let _d = home.start_fake();
    let pid = home.create("web");
    kill_burst(&home, "web", pid, 3);
    poll(Duration::from_secs(15), "the crash window to close", || {
        log_text(&home)
            .contains("crash window closed with nothing to tell")
            .then_some(())
    });
    assert_eq!(main_calls(&fake), Vec::<String>::new());
    // Nothing else was lost: the crashes are on record and the worker answers.
    let p = home.json(&["project", "show", "web"]);
    assert_eq!(p["restarts"], 3);
    home.ctl_ok(&["project", "send", "web", "where are you?", "--wait"]);
}

#[test]
fn a_project_given_up_is_told_even_with_recovered_crashes_off() {
    let fake = answering_fake();
    let home = home(&fake, "{crash_window_s: 2}", 2);
    let _d = home.start_fake();
    let pid = home.create("looper");
    let pid = kill_burst(&home, "looper", pid, 2);
    kill9(pid);
    poll(Duration::from_secs(10), "the crash-looping state", || {
        (home.json(&["project", "show", "looper"])["worker_state"] == "crash-looping").then_some(())
    });
    let calls = poll(
        Duration::from_secs(15),
        "the MainAgent told of the crash loop",
        || {
            let calls = main_calls(&fake);
            (!calls.is_empty()).then_some(calls)
        },
    );
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert!(
        calls[0].contains("project looper: the worker crashed 3 times")
            && calls[0].contains("pegasusctl project resume looper"),
        "{}",
        calls[0]
    );
}
