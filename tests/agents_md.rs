//! AGENTS.md and CLAUDE.md end to end (DESIGN.md §16): pegasusd, a worker and pegasusctl as real
//! processes, the fake LLM over real HTTP recording what the model was sent. The workdir's file
//! is in the system prompt of every request; a subfolder's joins the conversation after the
//! turn that touched a file under it; a code task reads its repo's files in its own worktree, and
//! its reviewer reads them too; a 5 MB file is cut to its share of the window, with a note, and the project answers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use pegasus_fakellm::{FakeLlm, Match, Recorded, Reply, Rule, ToolCall};
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

/// The system prompt of a recorded Anthropic request (a string or text blocks).
fn system(r: &Recorded) -> String {
    match &r.body["system"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The requests of the project's own agent loop (not the MainAgent's, nor a summary's).
fn project_requests(fake: &FakeLlm, marker: &str) -> Vec<Recorded> {
    fake.requests()
        .into_iter()
        .filter(|r| system(r).contains(marker))
        .collect()
}

/// The content blocks of the last message of a request.
fn last_message(r: &Recorded) -> Vec<Value> {
    r.body["messages"].as_array().unwrap().last().unwrap()["content"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn create_in(home: &Home, name: &str, workdir: &Path) {
    home.ctl_ok(&[
        "project",
        "create",
        name,
        "--goal",
        "Keep the docs",
        "--workdir",
        workdir.to_str().unwrap(),
    ]);
    home.ready_worker(name, None);
}

#[test]
fn the_workdirs_agents_md_is_in_every_request_and_a_subfolders_joins_when_touched() {
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("site");
    std::fs::create_dir_all(work.join("docs")).unwrap();
    std::fs::write(
        work.join("AGENTS.md"),
        "ROOT-RULE-7731: keep pages short.\n",
    )
    .unwrap();
    // CLAUDE.md stands in where there is no AGENTS.md.
    std::fs::write(
        work.join("docs/CLAUDE.md"),
        "DOCS-RULE-4410: British spelling.\n",
    )
    .unwrap();
    std::fs::write(work.join("docs/page.md"), "page content\n").unwrap();
    let fake = FakeLlm::start().unwrap();
    main_agent_rule(&fake);
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("page content".into()),
        Reply::Text("read it".into()),
    ));
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("read the page".into()),
        Reply::Tools(vec![ToolCall::new(
            "read_file",
            json!({"path": "docs/page.md"}),
        )]),
    ));
    let home = fake_home(&fake, "");
    let _d = home.start_fake();
    create_in(&home, "site", &work);
    let reply = home.ctl_ok(&["project", "send", "site", "read the page", "--wait"]);
    assert_eq!(reply.trim(), "read it");

    let reqs = project_requests(&fake, "ROOT-RULE-7731");
    assert_eq!(reqs.len(), 2, "the tool turn and the answer");
    let sys = system(&reqs[0]);
    assert!(sys.contains("## Project instructions"), "{sys}");
    assert!(
        sys.contains(&format!(
            "### AGENTS.md of the workdir (`{}`)",
            work.join("AGENTS.md").canonicalize().unwrap().display()
        )),
        "{sys}"
    );
    assert!(
        !sys.contains("DOCS-RULE-4410"),
        "not before a file under docs/ is touched"
    );
    assert_eq!(
        system(&reqs[1]),
        sys,
        "the system prompt stays the same: caching holds"
    );
    // The nested file came after the read's result, in the same user message.
    let last = last_message(&reqs[1]);
    assert_eq!(last[0]["type"], "tool_result", "{last:?}");
    let block = last[1]["text"].as_str().unwrap();
    assert!(
        block.starts_with("# Instructions from `docs/CLAUDE.md` (the workdir)"),
        "{block}"
    );
    assert!(
        block.contains("DOCS-RULE-4410: British spelling."),
        "{block}"
    );
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());

    // A second message touching the same folder: the file is in the conversation already.
    home.ctl_ok(&["project", "send", "site", "read the page again", "--wait"]);
    let reqs = project_requests(&fake, "ROOT-RULE-7731");
    let last = reqs.last().unwrap().body.to_string();
    assert_eq!(last.matches("DOCS-RULE-4410").count(), 1, "{last}");
}

/// The fake's context window, in its tokens (JSON characters / 4), and the model table's.
const WINDOW: u64 = 30_000;

#[test]
fn a_5_mb_agents_md_is_cut_with_a_note_and_the_project_answers() {
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("big");
    std::fs::create_dir_all(&work).unwrap();
    let line = "- BIG-RULE: every line of this file is an instruction.\n";
    let text = line.repeat(5_000_000 / line.len());
    std::fs::write(work.join("AGENTS.md"), &text).unwrap();
    let fake = FakeLlm::start().unwrap();
    fake.set_context_window(Some(WINDOW));
    main_agent_rule(&fake);
    fake.add_rule(Rule::new(Match::Any, Reply::Text("still answering".into())));
    let home = Home::with_config(&format!(
        "default_model: fa/test-model\n\
         providers:\n  fa: {{kind: anthropic, base_url: \"{a}\", api_key_env: {FAKE_KEY_ENV}}}\n\
         prices:\n  \"fa/*\": {{input: 1.0, output: 2.0}}\n\
         models:\n  \"fa/*\": {{context_window: {WINDOW}, max_output_tokens: 1024}}\n\
         llm: {{retry_base_ms: 10, max_retries: 1, timeout_s: 60}}\n\
         workers: {{shutdown_timeout_s: 5}}\n\
         agent: {{reflection: false, max_tokens: 1024}}\n",
        a = fake.anthropic_base_url(),
    ));
    let _d = home.start_fake();
    create_in(&home, "big", &work);
    for n in 1..=2 {
        let reply = home.ctl_ok(&["project", "send", "big", &format!("hello {n}"), "--wait"]);
        assert_eq!(reply.trim(), "still answering");
    }
    let reqs = project_requests(&fake, "BIG-RULE");
    assert_eq!(reqs.len(), 2);
    for r in &reqs {
        // An eighth of the window at most (30,000 tokens × 3.5 bytes / 8), half for the root.
        let sys = system(r);
        assert!(sys.len() < 13_125 / 2 + 8_000, "{}", sys.len());
        assert!(
            sys.contains(&format!(
                "[... cut here: this file is {} bytes and only its first",
                text.len()
            )),
            "{sys}"
        );
        let path = work.join("AGENTS.md").canonicalize().unwrap();
        assert!(sys.contains(&format!("The whole file is {}", path.display())));
        assert!(r.body.to_string().len() < 4 * WINDOW as usize);
    }
    // The provider refused nothing: every request fitted its window.
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

#[test]
fn a_code_task_reads_its_repos_files_in_its_worktree_and_the_nearest_joins_when_it_works_there() {
    let tmp = tempfile::tempdir().unwrap();
    let app = repo(tmp.path(), "app");
    std::fs::create_dir_all(app.join("src")).unwrap();
    std::fs::write(app.join("AGENTS.md"), "APP-ROOT-RULE: run the tests.\n").unwrap();
    std::fs::write(app.join("src/AGENTS.md"), "SRC-RULE: no panics in src.\n").unwrap();
    sh(&app, "git add -A && git commit -q -m rules");
    let fake = FakeLlm::start().unwrap();
    main_agent_rule(&fake);
    fake.add_rule(Rule::new(
        Match::SystemContains("You are the Reviewer".into()),
        Reply::Text("APPROVED\nIt follows the rules.".into()),
    ));
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("wrote".into()),
        Reply::Text("changed src".into()),
    ));
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("edit src".into()),
        Reply::Tools(vec![ToolCall::new(
            "write_file",
            json!({"path": "src/lib.rs", "content": "pub fn f() {}\n"}),
        )]),
    ));
    let home = fake_home(&fake, "");
    let _d = home.start_fake();
    home.create("cp");
    // The project's own workdir has instructions too: they come first.
    let workdir = home.project_dir("cp").join("workdir");
    std::fs::write(workdir.join("AGENTS.md"), "WORKDIR-RULE: be careful.\n").unwrap();
    configure(
        &home,
        "cp",
        &format!("{}review: reviewer\n", repos_yaml(&[("app", &app)])),
    );
    let id = home.json(&["task", "add", "cp", "--goal", "edit src", "--repo", "app"])["id"]
        .as_str()
        .unwrap()
        .to_string();
    poll(Duration::from_secs(30), "the task done", || {
        (home.json(&["task", "show", &id])["task"]["state"] == "done").then_some(())
    });
    assert_eq!(sh(&app, "cat src/lib.rs"), "pub fn f() {}");

    // The reviewer judged the change knowing the repo's rules.
    let (reviews, reqs): (Vec<_>, Vec<_>) = project_requests(&fake, "APP-ROOT-RULE")
        .into_iter()
        .partition(|r| system(r).contains("You are the Reviewer"));
    assert_eq!(
        reviews.len(),
        1,
        "the reviewer's request has the repo's AGENTS.md"
    );
    assert_eq!(reqs.len(), 2, "the write and the answer");
    let sys = system(&reqs[0]);
    let worktree_rule = format!(
        "### AGENTS.md of repo `app` (`{}",
        app.canonicalize()
            .unwrap()
            .join(".pegasus/worktrees/task-")
            .display()
    );
    assert!(sys.contains(&worktree_rule), "the worktree's copy: {sys}");
    let workdir_at = sys.find("WORKDIR-RULE").expect("the workdir's file");
    assert!(
        workdir_at < sys.find("APP-ROOT-RULE").unwrap(),
        "root-first: {sys}"
    );
    assert!(!sys.contains("SRC-RULE"));
    assert_eq!(system(&reqs[1]), sys);
    let last = last_message(&reqs[1]);
    let block = last[1]["text"].as_str().unwrap();
    assert!(
        block.starts_with("# Instructions from `src/AGENTS.md` (repo `app`)"),
        "{block}"
    );
    assert!(block.contains("SRC-RULE: no panics in src."));
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

#[test]
fn a_project_turns_them_off_in_its_project_md() {
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("plain");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("AGENTS.md"), "OFF-RULE-5150: for another tool.\n").unwrap();
    let fake = FakeLlm::start().unwrap();
    main_agent_rule(&fake);
    fake.add_rule(Rule::new(Match::Any, Reply::Text("ok".into())));
    let home = fake_home(&fake, "");
    let _d = home.start_fake();
    create_in(&home, "plain", &work);
    home.ctl_ok(&["project", "send", "plain", "first", "--wait"]);
    assert_eq!(project_requests(&fake, "OFF-RULE-5150").len(), 1);
    // The project's own list replaces config.yml's: none.
    configure(&home, "plain", "instruction_files: []\n");
    home.ctl_ok(&["project", "suspend", "plain"]);
    home.ctl_ok(&["project", "resume", "plain"]);
    home.ready_worker("plain", None);
    home.ctl_ok(&["project", "send", "plain", "second", "--wait"]);
    let last = fake
        .requests()
        .into_iter()
        .rfind(|r| r.body.to_string().contains("second"))
        .unwrap();
    assert!(
        !system(&last).contains("OFF-RULE-5150"),
        "{}",
        system(&last)
    );
    assert!(!system(&last).contains("## Project instructions"));
    assert_eq!(project_requests(&fake, "OFF-RULE-5150").len(), 1);
}
