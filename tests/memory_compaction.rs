//! Memory that never outgrows the prompt (DESIGN.md §10: "Episodic memory is compacted into facts
//! past 20k tokens"), end to end: pegasusd, a worker and pegasusctl as real processes, the fake
//! LLM over real HTTP. A project whose episodes are past the budget gets them condensed into
//! facts after its next task, by one metered call billed to that task.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use pegasus_agent::memory_compaction::{EPISODE_BUDGET_BYTES, MARKER};
use pegasus_fakellm::{FakeLlm, Match, Reply, Rule, UsageSpec};
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

/// Input tokens the fake reports for the condensing call: how its ledger line is recognised.
const CONDENSE_INPUT_TOKENS: u64 = 4321;

/// Like `fake_home`, with the PostTaskReflector on.
fn reflecting_home(fake: &FakeLlm) -> Home {
    Home::with_config(&format!(
        "default_model: fa/test-model\n\
         providers:\n  fa: {{kind: anthropic, base_url: \"{a}\", api_key_env: {FAKE_KEY_ENV}}}\n\
         prices:\n  \"fa/*\": {{input: 1.0, output: 2.0}}\n\
         models:\n  \"fa/*\": {{context_window: 200000, max_output_tokens: 16000}}\n\
         llm: {{retry_base_ms: 10, max_retries: 1, timeout_s: 60}}\n\
         workers: {{shutdown_timeout_s: 5}}\n\
         agent: {{reflection: true}}\n\
         dashboard: {{listen: \"127.0.0.1:0\"}}\n",
        a = fake.anthropic_base_url(),
    ))
}

fn ledger(home: &Home) -> Vec<Value> {
    std::fs::read_to_string(home.path().join("costs/ledger.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Every episode file's text, oldest month first, and their total size.
fn episodes(project: &Path) -> (String, u64) {
    let mut files: Vec<_> = std::fs::read_dir(project.join("memory/episodes"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    files.sort();
    let text: String = files
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    let len = text.len() as u64;
    (text, len)
}

/// Episode line `i` of a month, about 200 bytes.
fn episode(month: &str, i: usize) -> String {
    format!(
        "- {month}-10 09:00 [t-old-{i:04}] old episode {month}/{i:04}: the user asked for a report and got it {}\n",
        "·".repeat(40)
    )
}

#[test]
fn episodes_past_20k_tokens_are_condensed_into_facts_by_a_metered_call() {
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(
        Rule::new(
            Match::SystemContains(MARKER.into()),
            Reply::Text(
                r#"{"facts":[{"file":"history.md","content":"- 2024: monthly reports were written on request (400 tasks)"},{"file":"preferences.md","content":"- Reports are wanted as PDF"}]}"#
                    .into(),
            ),
        )
        .usage(UsageSpec {
            input: CONDENSE_INPUT_TOKENS,
            output: 77,
            ..Default::default()
        })
        .times(1),
    );
    fake.add_rule(Rule::new(
        Match::SystemContains("PostTaskReflector".into()),
        Reply::Text(r#"{"facts":[],"episode":"User said hello; the agent greeted back."}"#.into()),
    ));
    main_agent_rule(&fake);
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("hello mem".into()),
        Reply::Text("hi from mem".into()),
    ));
    let home = reflecting_home(&fake);
    let _d = home.start_fake();
    home.create("mem");
    let project = home.project_dir("mem");

    // Two months of old episodes, ~75 KB: past the 70,000-byte (20k-token) budget.
    let dir = project.join("memory/episodes");
    std::fs::create_dir_all(&dir).unwrap();
    for month in ["2024-01", "2024-02"] {
        let text: String = (0..210).map(|i| episode(month, i)).collect();
        std::fs::write(dir.join(format!("{month}.md")), text).unwrap();
    }
    let (_, seeded) = episodes(&project);
    assert!(seeded > EPISODE_BUDGET_BYTES, "{seeded}");

    let reply = home.ctl_ok(&["project", "send", "mem", "hello mem", "--wait"]);
    assert_eq!(reply.trim(), "hi from mem");

    // The task ends after the reflection and the condensing: done, with the ledger's lines.
    let (task, line) = poll(
        Duration::from_secs(30),
        "the episodes condensed, the call in the ledger and the task done",
        || {
            let facts = std::fs::read_to_string(project.join("memory/facts/history.md")).ok()?;
            if !facts.contains("monthly reports were written") {
                return None;
            }
            if episodes(&project).1 >= EPISODE_BUDGET_BYTES {
                return None;
            }
            let line = ledger(&home)
                .into_iter()
                .find(|l| l["input_tokens"].as_u64() == Some(CONDENSE_INPUT_TOKENS))?;
            let task = home
                .json(&["task", "list", "mem"])
                .as_array()?
                .first()?
                .clone();
            (task["state"] == "done").then_some((task, line))
        },
    );

    // The call was metered like every call: this project, this task, priced.
    let id = task["id"].as_str().unwrap();
    assert_eq!(line["project"], "mem");
    assert_eq!(line["task"], id);
    let usd = line["usd"].as_f64().unwrap();
    assert!(usd > 0.0, "{line}");
    // ... and its cost is the task's, like the reflection's.
    let task_lines: Vec<Value> = ledger(&home)
        .into_iter()
        .filter(|l| l["task"] == id)
        .collect();
    assert_eq!(
        task_lines.len(),
        3,
        "answer, reflection, condensing: {task_lines:?}"
    );
    let spent: f64 = task_lines.iter().map(|l| l["usd"].as_f64().unwrap()).sum();
    let cost = task["cost_usd"].as_f64().unwrap();
    assert!(
        (cost - spent).abs() < 1e-9,
        "task cost {cost}, ledger {spent}"
    );

    // The call read the oldest episodes, not the newest.
    let condense: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| r.body["system"].to_string().contains(MARKER))
        .collect();
    assert_eq!(condense.len(), 1);
    let body = condense[0].body["messages"].to_string();
    assert!(body.contains("old episode 2024-01/0000"), "{body:.400}");
    assert!(!body.contains("old episode 2024-02/0209"));

    // The newest episodes stayed, with the one this task added; the oldest are facts now.
    let (left, len) = episodes(&project);
    assert!(len < EPISODE_BUDGET_BYTES / 4 + 1_000, "{len}");
    assert!(left.contains("old episode 2024-02/0209"));
    assert!(left.contains("User said hello; the agent greeted back."));
    assert!(!left.contains("old episode 2024-01/0000"));
    assert!(!dir.join("2024-01.md").exists());
    let prefs = std::fs::read_to_string(project.join("memory/facts/preferences.md")).unwrap();
    assert!(
        prefs.starts_with("## From episodes 2024-01 to 2024-02 (condensed "),
        "{prefs}"
    );
    assert!(prefs.ends_with("- Reports are wanted as PDF\n"), "{prefs}");

    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}
