//! Code-task git benchmark: `cargo run --release --example bench_code`.
//!
//! On a fresh 10,000-file repository (in a temp dir under /tmp, `main` checked out), one code
//! task's whole git life, done two ways, alternating, 7 rounds each:
//!
//! * **pegasus**: what the worker runs, through `pegasus-code`: `worktree::create` (repo lock,
//!   excludes, `worktree add -b` + lock, env link), hydrate-noop (`run_shell("true")`), one file
//!   changed, `commit_all`, `merge_base_in`, verify-noop, `safe_merge` (merge-tree pre-check,
//!   staging worktree, merge, hydrate + verify again, CAS / ff-only of the clean checked-out
//!   main), `worktree::remove` (unlock, remove, branch -D).
//! * **bare git**: the minimal commands a careful human would type for the same result:
//!   `worktree add -b`, `sh -c true`, edit, `add -A` + `commit`, `merge main`, `sh -c true`,
//!   `worktree add --detach` staging, `merge --no-ff`, `sh -c true` ×2, `merge --ff-only` in
//!   main, `worktree remove` ×2, `branch -D`.
//!
//! Target: Pegasus's own overhead ≤ 1.5× the bare git commands (median wall time per task).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use pegasus_code::worktree::{self, commit_all, merge_base_in};
use pegasus_code::{run_checks, run_shell, safe_merge, Checks, MergeOutcome, Repo};

const FILES: usize = 10_000;
const ROUNDS: usize = 7;
const TARGET: f64 = 1.5;

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=b", "-c", "user.email=b@x"])
        .args(args)
        .env("LC_ALL", "C")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn make_repo(root: &Path) {
    std::fs::create_dir_all(root).unwrap();
    git(root, &["init", "-q", "-b", "main"]);
    for i in 0..FILES {
        let dir = root.join(format!("d{:03}", i / 100));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("f{i:05}.txt")), format!("file {i}\n")).unwrap();
    }
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "10k files"]);
}

fn pegasus_round(repo: &Repo, n: usize) -> Duration {
    let id = format!("p{n}");
    let checks = Checks {
        hydrate: Some("true".into()),
        verify: vec!["true".into()],
        timeout: Duration::from_secs(60),
        output_cap: 64 * 1024,
        env_file: ".env".into(),
        sandbox: None,
    };
    let t = Instant::now();
    let start = repo.base_commit().unwrap().unwrap();
    let tree = worktree::create(repo, &id, "bench", &start, ".env").unwrap();
    assert!(run_shell("true", &tree.path, checks.timeout, checks.output_cap, None).ok);
    std::fs::write(tree.path.join(format!("d000/new-{id}.txt")), "x\n").unwrap();
    commit_all(&tree.path, "task").unwrap().unwrap();
    merge_base_in(&tree.path, &repo.base_ref(), true).unwrap();
    assert!(run_checks(&checks, &tree.path, false).ok);
    let out = safe_merge(std::slice::from_ref(repo), &id, "bench", "bench", &checks).unwrap();
    assert!(matches!(out, MergeOutcome::Merged(_)), "{out:?}");
    worktree::remove(repo, &id, true).unwrap();
    t.elapsed()
}

fn bare_round(root: &Path, n: usize) -> Duration {
    let branch = format!("bare/b{n}");
    let wt = root.join(format!("../bare-wt-{n}"));
    let staging = root.join(format!("../bare-staging-{n}"));
    let (w, s) = (wt.to_str().unwrap(), staging.to_str().unwrap());
    let sh_true = |dir: &Path| {
        assert!(Command::new("sh")
            .args(["-c", "true"])
            .current_dir(dir)
            .status()
            .unwrap()
            .success())
    };
    let t = Instant::now();
    git(root, &["worktree", "add", "-q", "-b", &branch, w, "main"]);
    sh_true(&wt);
    std::fs::write(wt.join(format!("d000/bare-{n}.txt")), "x\n").unwrap();
    git(&wt, &["add", "-A"]);
    git(&wt, &["commit", "-q", "-m", "task"]);
    git(&wt, &["merge", "-q", "--no-edit", "main"]);
    sh_true(&wt);
    git(root, &["worktree", "add", "-q", "--detach", s, "main"]);
    git(
        &staging,
        &["merge", "-q", "--no-ff", "-m", "merge", &branch],
    );
    sh_true(&staging);
    sh_true(&staging);
    let new = String::from_utf8(
        Command::new("git")
            .arg("-C")
            .arg(&staging)
            .args(["rev-parse", "HEAD"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    git(root, &["merge", "-q", "--ff-only", new.trim()]);
    git(root, &["worktree", "remove", "--force", s]);
    git(root, &["worktree", "remove", "--force", w]);
    git(root, &["branch", "-D", "-q", &branch]);
    t.elapsed()
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() -> ExitCode {
    let tmp = tempfile::Builder::new()
        .prefix("bench-code")
        .tempdir_in("/tmp")
        .unwrap();
    let root = tmp.path().join("repo");
    eprintln!("making a {FILES}-file repository ...");
    make_repo(&root);
    let repo = Repo::open("app", &root, "main").unwrap();
    // One unmeasured round of each: page cache and git's own caches warm for both.
    bare_round(&root, 0);
    pegasus_round(&repo, 0);
    let (mut p, mut b) = (Vec::new(), Vec::new());
    for n in 1..=ROUNDS {
        b.push(bare_round(&root, n));
        p.push(pegasus_round(&repo, n));
    }
    let (pm, bm) = (median(&mut p), median(&mut b));
    let ratio = pm.as_secs_f64() / bm.as_secs_f64();
    let verdict = if ratio <= TARGET { "PASS" } else { "MISS" };
    println!("== bench_code report");
    println!(
        "machine: {} cores, git {}",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        pegasus_code::git::check_version().unwrap_or_default()
    );
    println!(
        "one task on a {FILES}-file repo (worktree + hydrate-noop + commit + base merge + verify-noop + safe merge + cleanup), {ROUNDS} rounds:"
    );
    println!(
        "  pegasus  median {:.0} ms (min {:.0}, max {:.0})",
        pm.as_secs_f64() * 1e3,
        p[0].as_secs_f64() * 1e3,
        p[p.len() - 1].as_secs_f64() * 1e3
    );
    println!(
        "  bare git median {:.0} ms (min {:.0}, max {:.0})",
        bm.as_secs_f64() * 1e3,
        b[0].as_secs_f64() * 1e3,
        b[b.len() - 1].as_secs_f64() * 1e3
    );
    println!("  ratio {ratio:.2}x (target ≤ {TARGET}x)  {verdict}");
    ExitCode::SUCCESS
}
