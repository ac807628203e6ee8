//! The restart scan reports broken projects with their reason and runs every other one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;

#[test]
fn malformed_and_misnamed_projects_are_reported_and_the_rest_still_runs() {
    let home = Home::new();
    let mut d = home.start();
    home.create("good");
    home.create("broken");
    home.create("renamed");
    d.kill9();
    let broken = home.project_dir("broken").join("PROJECT.md");
    let text = std::fs::read_to_string(&broken)
        .unwrap()
        .replace("status: active", "status: actve");
    std::fs::write(&broken, text).unwrap();
    let renamed = home.project_dir("renamed").join("PROJECT.md");
    let text = std::fs::read_to_string(&renamed)
        .unwrap()
        .replace("name: renamed", "name: other");
    std::fs::write(&renamed, text).unwrap();

    let _d = home.start();
    home.ready_worker("good", None);
    let status = home.json(&["status"]);
    let find = |n: &str| {
        status["projects"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == n)
            .unwrap()
            .clone()
    };
    let b = find("broken");
    assert_eq!(b["status"], "invalid");
    assert!(b["worker_pid"].is_null());
    let err = b["error"].as_str().unwrap();
    assert!(
        err.contains("PROJECT.md:3") && err.contains("status") && err.contains("actve"),
        "{err}"
    );
    let r = find("renamed");
    assert_eq!(r["status"], "invalid");
    let err = r["error"].as_str().unwrap();
    assert!(err.contains("other") && err.contains("renamed"), "{err}");
    // Lifecycle verbs on an invalid project say why and what to do.
    let out = home.ctl(&["project", "suspend", "broken"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid"));
    // The human status table shows the problem too.
    let table = home.ctl_ok(&["status"]);
    assert!(
        table.contains("broken") && table.contains("actve"),
        "{table}"
    );
}
