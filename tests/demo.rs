//! The README's first command, `cargo run --release --example demo`, is the main job: it must
//! run to the end on the built-in defaults. This runs the same example (the debug build that
//! `cargo test` makes of it, driving the debug binaries) and checks it finishes cleanly, with
//! every request the fake model saw matched by its script.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::example_bin;
use std::process::Command;

/// Builds the example as it is now: `cargo test --workspace` builds examples, but a run of
/// this test alone (`cargo test --test demo`) does not, and would find an old build.
fn build_demo() {
    let Some(cargo) = std::env::var_os("CARGO") else {
        return;
    };
    let release = example_bin("demo")
        .parent()
        .and_then(|e| e.parent())
        .is_some_and(|p| p.ends_with("release"));
    let mut build = Command::new(cargo);
    build.args(["build", "--quiet", "--example", "demo"]);
    if release {
        build.arg("--release");
    }
    let status = build.status().unwrap();
    assert!(status.success(), "building the demo failed");
}

#[test]
fn the_readme_demo_runs_to_the_end() {
    build_demo();
    let demo = example_bin("demo");
    assert!(
        demo.is_file(),
        "{} is missing: `cargo test` builds the examples",
        demo.display()
    );
    // Without CARGO the demo uses the binaries `cargo test` built instead of building them.
    let out = Command::new(&demo)
        .env_remove("CARGO")
        .env_remove("PEGASUS_HOME")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the demo failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains("every transcript valid"),
        "the demo did not report a clean end:\n{stdout}"
    );
    // The worker killed in the middle of a tool call came back and answered.
    assert!(stdout.contains("I am back."), "{stdout}");
    // The daemon killed with kill -9 came back with both projects.
    assert!(stdout.contains("research-notes  active  ready"), "{stdout}");
    assert!(stdout.contains("website         active  ready"), "{stdout}");
}
