//! A config that does not make sense is refused before pegasusd creates anything (issue 8):
//! unknown keys (a typo would silently keep a default budget), unknown provider kinds, URLs
//! that are not URLs, negative prices (a budget bypass). One line names the file, line and key;
//! no home skeleton and no pid file are left behind.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

#[test]
fn nonsense_config_is_refused_before_anything_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("budjet:\n  daily_usd: 1\n", "budjet"),
        (
            "providers:\n  x: {kind: gemini, base_url: \"https://x\"}\n",
            "providers.x.kind",
        ),
        (
            "providers:\n  x: {kind: openai, base_url: \"not a url\"}\n",
            "providers.x.base_url",
        ),
        ("prices:\n  \"a/*\": {input: -1, output: 1}\n", "prices.a/*"),
        // Where workers run (DESIGN.md §14).
        ("default_launcher: elsewhere\n", "default_launcher"),
        ("workers: {listen: \"everywhere\"}\n", "workers.listen"),
        (
            "workers: {listen: \"127.0.0.1:0\"}\nlaunchers:\n  box: {kind: command, connect: \"10.0.0.1:7475\", argv: [ssh, box, \"{project_dir}\"]}\n",
            "launchers.box.argv",
        ),
        (
            "launchers:\n  box: {kind: command, connect: \"10.0.0.1:7475\", argv: [ssh, box, \"{worker}\"]}\n",
            "launchers.box",
        ),
        (
            "workers: {listen: \"127.0.0.1:0\"}\nlaunchers:\n  k8s: {kind: kubernetes, connect: \"p.svc:7475\", namespace: p}\n",
            "launchers.k8s.image",
        ),
        (
            "launchers:\n  box: {kind: nomad, connect: \"10.0.0.1:7475\"}\n",
            "launchers",
        ),
        // A private CA's file that is not there (DESIGN.md §17).
        (
            "email:\n  address: p@example.com\n  imap: {host: mail.example.com, user: p, password_env: PW, tls_ca_file: /nonexistent/ca.pem}\n  smtp: {host: mail.example.com}\n",
            "email.imap.tls_ca_file",
        ),
    ];
    for (i, (yaml, key)) in cases.iter().enumerate() {
        let config = dir.path().join(format!("config-{i}.yml"));
        std::fs::write(&config, yaml).unwrap();
        let home = dir.path().join(format!("home-{i}"));
        let out = Command::new(env!("CARGO_BIN_EXE_pegasusd"))
            .arg("--home")
            .arg(&home)
            .arg("--config")
            .arg(&config)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{yaml}: {stderr}");
        assert!(
            stderr.contains(key) && stderr.contains(&format!("config-{i}.yml:")),
            "{yaml}: {stderr}"
        );
        assert_eq!(
            stderr.trim().lines().count(),
            1,
            "one line, not a dump: {stderr}"
        );
        assert!(!home.exists(), "a refused config left {}", home.display());
    }
}

/// `workers.listen` on an address this host does not have: one line naming the key, at start.
#[test]
fn a_workers_listen_address_that_cannot_be_bound_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yml");
    // TEST-NET-3 (RFC 5737): never an address of this host, so the bind fails at once.
    std::fs::write(
        &config,
        "workers: {listen: \"203.0.113.7:7475\"}\ndashboard: {listen: \"127.0.0.1:0\"}\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_pegasusd"))
        .arg("--home")
        .arg(dir.path().join("home"))
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("workers.listen"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
}
