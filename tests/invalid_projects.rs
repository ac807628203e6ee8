//! The restart scan reports broken projects with their reason and runs every other one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;

/// The row of project `name` in a `status --json` answer.
fn project_row(status: &serde_json::Value, name: &str) -> serde_json::Value {
    status["projects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap()
        .clone()
}

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
    let find = |n: &str| project_row(&status, n);
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

/// Issue 8 (high): a PROJECT.md that is `/dev/zero` took the daemon past 1 GiB on `project
/// list`, and one that is a FIFO wedged it for good (present at boot, it never answered). Both
/// are invalid projects now, with a reason, and everything else goes on; so is an oversized one
/// and a BOM-prefixed one loads.
#[test]
fn hostile_project_files_are_invalid_projects_not_a_wedged_or_bloated_daemon() {
    let home = Home::new();
    let mut d = home.start();
    home.create("good");
    for name in ["zero", "fifo", "huge", "bom"] {
        home.create(name);
    }
    d.kill9();
    let md = |n: &str| home.project_dir(n).join("PROJECT.md");
    std::fs::remove_file(md("zero")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", md("zero")).unwrap();
    std::fs::remove_file(md("fifo")).unwrap();
    nix::unistd::mkfifo(&md("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let mut text = std::fs::read_to_string(md("huge")).unwrap();
    text.push_str(&"x".repeat(17 * 1024 * 1024));
    std::fs::write(md("huge"), text).unwrap();
    let text = std::fs::read_to_string(md("bom")).unwrap();
    std::fs::write(md("bom"), format!("\u{feff}{text}")).unwrap();

    // Without the daemon first: the file-only listing must not hang or balloon either.
    let list = home.json(&["project", "list"]);
    assert_eq!(list.as_array().unwrap().len(), 5);

    let d = home.start();
    home.ready_worker("good", None);
    home.ready_worker("bom", None);
    let status = home.json(&["status"]);
    let find = |n: &str| project_row(&status, n);
    for (name, why) in [
        ("zero", "not a regular file"),
        ("fifo", "not a regular file"),
        ("huge", "limit"),
    ] {
        let p = find(name);
        assert_eq!(p["status"], "invalid", "{name}");
        let err = p["error"].as_str().unwrap();
        assert!(err.contains(why), "{name}: {err}");
    }
    assert_eq!(find("bom")["status"], "active");
    let rss_kib: u64 = std::fs::read_to_string(format!("/proc/{}/status", d.pid))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    assert!(rss_kib < 200 * 1024, "pegasusd at {rss_kib} KiB");
    // A stop still works (nothing is wedged).
    home.ctl_ok(&["stop"]);
}
