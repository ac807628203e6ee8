//! The declared `rust-version` is what the dependency set really needs: no crate Pegasus builds
//! (dependencies, dev-dependencies, build dependencies, on Linux) declares a newer one. Only one
//! toolchain is on the machine, so this is the `cargo msrv verify`-style check CI runs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

/// `1.89` and `1.89.0` are the same version.
fn version(v: &str) -> [u32; 3] {
    let mut out = [0; 3];
    for (slot, part) in out.iter_mut().zip(v.split('.')) {
        *slot = part.parse().unwrap_or(0);
    }
    out
}

#[test]
fn rust_version_covers_every_dependency() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--offline",
            "--filter-platform",
            "x86_64-unknown-linux-gnu",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ours = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "pegasus")
        .and_then(|p| p["rust_version"].as_str())
        .expect("the root package declares rust-version")
        .to_string();
    let in_graph: std::collections::HashSet<&str> = meta["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n["id"].as_str())
        .collect();
    let mut newer = Vec::new();
    for p in meta["packages"].as_array().unwrap() {
        let (Some(id), Some(rv)) = (p["id"].as_str(), p["rust_version"].as_str()) else {
            continue;
        };
        if in_graph.contains(id) && version(rv) > version(&ours) {
            newer.push(format!("{} {} needs {rv}", p["name"], p["version"]));
        }
    }
    assert!(
        newer.is_empty(),
        "rust-version is {ours} in Cargo.toml but {}: raise it",
        newer.join(", ")
    );
}
