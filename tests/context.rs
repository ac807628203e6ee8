//! Context never bricks a project (DESIGN.md §6), end to end: pegasusd, a worker and pegasusctl
//! as real processes, the fake LLM over real HTTP enforcing its context window with the real
//! 400 ("prompt is too long: N tokens > M maximum").
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use pegasus_fakellm::{FakeLlm, Match, Reply, Rule, ToolCall};
use serde_json::json;

/// The fake's context window, in its tokens (JSON characters / 4).
const FAKE_WINDOW: u64 = 30_000;

/// Scripts a project that dumps 5 MB through `exec` on every "dump" message: the summary call
/// gets a summary, a dump's capped result gets an answer, a dump request gets the command.
fn dump_rules(fake: &FakeLlm) {
    main_agent_rule(fake);
    fake.add_rule(Rule::new(
        Match::SystemContains("compaction".into()),
        Reply::Text("SUMMARY: the user asked for dumps of 5 MB of x; each was done.".into()),
    ));
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("bytes cut here".into()),
        Reply::Text("dumped".into()),
    ));
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("dump".into()),
        Reply::Tools(vec![ToolCall::new(
            "exec",
            json!({"command": "head -c 5000000 /dev/zero | tr '\\0' x"}),
        )]),
    ));
}

fn archived(home: &Home, project: &str) -> usize {
    std::fs::read_dir(home.project_dir(project).join("session/archive"))
        .map(|rd| rd.count())
        .unwrap_or(0)
}

/// `window` is what the model table says; the fake's real window is [`FAKE_WINDOW`].
fn home_with_window(fake: &FakeLlm, window: u64) -> Home {
    Home::with_config(&format!(
        "default_model: fa/test-model\n\
         providers:\n  fa: {{kind: anthropic, base_url: \"{a}\", api_key_env: {FAKE_KEY_ENV}}}\n\
         prices:\n  \"fa/*\": {{input: 1.0, output: 2.0}}\n\
         models:\n  \"fa/*\": {{context_window: {window}, max_output_tokens: 1024}}\n\
         llm: {{retry_base_ms: 10, max_retries: 1, timeout_s: 60}}\n\
         workers: {{shutdown_timeout_s: 5}}\n\
         agent: {{reflection: false, max_tokens: 1024, exec_output_cap_bytes: 8000000}}\n",
        a = fake.anthropic_base_url(),
    ))
}

#[test]
fn a_project_whose_tool_returns_5_mb_keeps_answering() {
    let fake = FakeLlm::start().unwrap();
    fake.set_context_window(Some(FAKE_WINDOW));
    dump_rules(&fake);
    let home = home_with_window(&fake, FAKE_WINDOW);
    let _d = home.start_fake();
    home.create("big");
    for n in 1..=6 {
        let reply = home.ctl_ok(&["project", "send", "big", &format!("dump {n}"), "--wait"]);
        assert_eq!(reply.trim(), "dumped", "message {n}");
    }
    // Each result reached the model capped (32 KiB of 5 MB), and the session was compacted
    // before a request could reach the window: the provider never refused one.
    assert!(archived(&home, "big") >= 1, "the session was compacted");
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
    let biggest = fake
        .requests()
        .iter()
        .map(|r| r.body.to_string().len())
        .max()
        .unwrap();
    assert!(biggest < 4 * FAKE_WINDOW as usize, "{biggest}");
    let session = home.project_dir("big").join("session/current.jsonl");
    assert!(std::fs::metadata(session).unwrap().len() < 1 << 20);
    for task in home.json(&["task", "list", "big"]).as_array().unwrap() {
        assert_eq!(task["state"], "done", "{task}");
    }
}

#[test]
fn a_session_over_the_window_recovers_when_the_provider_refuses_it() {
    let fake = FakeLlm::start().unwrap();
    fake.set_context_window(Some(FAKE_WINDOW));
    dump_rules(&fake);
    // The model table claims a window 30 times larger than the provider's: the estimate never
    // sees a problem, so the session grows until the provider refuses a request.
    let home = home_with_window(&fake, 30 * FAKE_WINDOW);
    let _d = home.start_fake();
    home.create("big");
    for n in 1..=6 {
        let reply = home.ctl_ok(&["project", "send", "big", &format!("dump {n}"), "--wait"]);
        assert_eq!(reply.trim(), "dumped", "message {n}");
    }
    let refused: Vec<String> = fake
        .violations()
        .into_iter()
        .filter(|v| v.contains("prompt is too long"))
        .collect();
    assert!(!refused.is_empty(), "the provider refused a request");
    assert_eq!(
        refused.len(),
        fake.violations().len(),
        "nothing else was wrong: {:?}",
        fake.violations()
    );
    assert!(archived(&home, "big") >= 1);
    // Every refusal was followed by a compaction and an accepted retry.
    for task in home.json(&["task", "list", "big"]).as_array().unwrap() {
        assert_eq!(task["state"], "done", "{task}");
    }
}

/// DESIGN.md §6: one tool result takes at most a quarter of the model's window, and compaction keeps
/// the task's newest results: a 2 MB file read on an 8,000-token model is answered in the same
/// task, fetched once (before, the 32 KiB cut filled the whole window, compaction dropped it,
/// the model asked again and the task ended `loop_capped`).
#[test]
fn a_2_mb_file_on_an_8000_token_model_is_answered_in_the_same_task() {
    const WINDOW: u64 = 8_000;
    let fake = FakeLlm::start().unwrap();
    // The fake counts JSON characters / 4: its real window is at least the table's.
    fake.set_context_window(Some(WINDOW));
    main_agent_rule(&fake);
    let answer = "big.txt holds 2 MB of the letter A, one line per 100.";
    fake.add_rule(Rule::new(
        Match::SystemContains("compaction".into()),
        Reply::Text("SUMMARY: the user asked what big.txt holds; it was being read.".into()),
    ));
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("bytes cut here".into()),
        Reply::Text(answer.into()),
    ));
    fake.add_rule(Rule::new(
        Match::AnyTextContains("kept through the compaction".into()),
        Reply::Text(answer.into()),
    ));
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("big.txt".into()),
        Reply::Tools(vec![ToolCall::new("read_file", json!({"path": "big.txt"}))]),
    ));
    let home = home_with_window(&fake, WINDOW);
    let _d = home.start_fake();
    home.create("small");
    let line = format!("{}\n", "A".repeat(99));
    std::fs::write(
        home.project_dir("small").join("workdir/big.txt"),
        line.repeat(20_000),
    )
    .unwrap();
    let reply = home.ctl_ok(&[
        "project",
        "send",
        "small",
        "What does big.txt hold?",
        "--wait",
    ]);
    assert_eq!(reply.trim(), answer);
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
    let reads = fake
        .requests()
        .iter()
        .filter(|r| r.body.to_string().contains("bytes cut here"))
        .count();
    assert!(reads >= 1);
    let asked = fake
        .requests()
        .iter()
        .filter(|r| !r.body.to_string().contains("compaction"))
        .count();
    // The main agent may have spoken too; the project's own loop made two calls: read, answer.
    assert!(asked <= 3, "the file was fetched once: {asked} calls");
    for task in home.json(&["task", "list", "small"]).as_array().unwrap() {
        assert_eq!(task["state"], "done", "{task}");
    }
    // The result reached the model cut to a quarter of the window (7,000 bytes + the note).
    let biggest = fake
        .requests()
        .iter()
        .map(|r| r.body.to_string().len())
        .max()
        .unwrap();
    assert!(biggest < 4 * WINDOW as usize, "{biggest}");
}

/// A message larger than the whole window: with the window known, it is cut to fit (the whole
/// message stays in the session archive) and answered; with the window unknown, the provider's
/// refusal fails the task with a clear reason. Either way the next message is answered: a
/// refused message never poisons the ones after it.
#[test]
fn a_message_larger_than_the_window_never_bricks_the_project() {
    const WINDOW: u64 = 4_096;
    let fake = FakeLlm::start().unwrap();
    fake.set_context_window(Some(WINDOW));
    main_agent_rule(&fake);
    fake.add_rule(Rule::new(
        Match::SystemContains("compaction".into()),
        Reply::Text("SUMMARY: the user sent a very long message.".into()),
    ));
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("2 + 2".into()),
        Reply::Text("4".into()),
    ));
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("of this message cut here".into()),
        Reply::Text("I read the part that fits.".into()),
    ));
    let long = format!(
        "Please read this. {}",
        "lorem ipsum dolor sit amet ".repeat(1_500)
    );

    // The window is known (model table): cut, compacted and answered.
    let home = home_with_window(&fake, WINDOW);
    let mut d = home.start_fake();
    home.create("known");
    let reply = home.ctl_ok(&["project", "send", "known", &long, "--wait"]);
    assert_eq!(reply.trim(), "I read the part that fits.");
    let reply = home.ctl_ok(&["project", "send", "known", "What is 2 + 2?", "--wait"]);
    assert_eq!(reply.trim(), "4");
    assert!(
        archived(&home, "known") >= 1,
        "the whole message is archived"
    );
    d.kill9();
    drop(d);

    // The window is not known (a table 30 times too large): the provider refuses, Pegasus
    // compacts and retries once, then fails the task clearly; the next message is answered.
    let home = home_with_window(&fake, 30 * WINDOW);
    let _d = home.start_fake();
    home.create("unknown");
    let out = home.ctl(&["project", "send", "unknown", &long, "--wait"]);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.contains("context window") || said.contains("I read the part that fits."),
        "{said}"
    );
    for n in 1..=3 {
        let reply = home.ctl_ok(&["project", "send", "unknown", "What is 2 + 2?", "--wait"]);
        assert_eq!(reply.trim(), "4", "message {n} after the long one");
    }
}
