//! Asana as a project's board (DESIGN.md §17) through the real pegasusd, worker and fake LLM,
//! against the in-repo strict fake of Asana's REST API over real HTTP: the sections and custom
//! fields of seed 003 made and ordered (an unknown section kept, with one warning), a task moved
//! into Ready Queue run to Done with its Cost, Swarm Status and a summary comment written back
//! (its rich notes as the goal, its Max Cost as its budget, an Asana dependency as
//! `depends_on`), a 429's `Retry-After` honoured, a question asked as a comment and answered by
//! the user's next comment, and kill -9 of pegasusd mid-sync repeating nothing and losing
//! nothing; the user's own Swarm Status lacking options gets them (the user's kept) and the
//! sync writes them, while a field the user locked stays as it is, with one warning. The test
//! acts as the Asana user through `FakeAsana::as_user`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use pegasus_fakellm::{FakeAsana, FakeLlm, Fault, Match, Reply, Rule, ToolCall, UsageSpec};
use serde_json::{json, Value};
use std::time::Duration;

const TOKEN: &str = "1/1204:asana-secret-pat";
const TOKEN_ENV: &str = "PEGASUS_ASANA_PAT";
const CANONICAL: [&str; 8] = [
    "Drafts",
    "Clarification Needed",
    "Planning",
    "Ready Queue",
    "In Progress",
    "Review",
    "Merging",
    "Done",
];

fn asana_home(fake: &FakeLlm, asana: &FakeAsana) -> Home {
    fake_home(
        fake,
        &format!(
            "asana: {{token_env: {TOKEN_ENV}, base_url: \"{}\", poll_s: 1}}\n",
            asana.base_url()
        ),
    )
}

fn start(home: &Home) -> Daemon {
    home.start_with_env(&[(FAKE_KEY_ENV, FAKE_KEY), (TOKEN_ENV, TOKEN)])
}

/// A project `board` whose board is the fake's project.
fn board_project(home: &Home, asana: &FakeAsana) {
    home.create("board");
    configure(
        home,
        "board",
        &format!("asana: {{project: \"{}\"}}", asana.project()),
    );
}

/// Shows pegasusd's Asana log lines when a test fails.
struct ShowLogs<'a>(&'a Home);

impl Drop for ShowLogs<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for line in logs(self.0).lines().filter(|l| l.contains("asana")) {
                eprintln!("{line}");
            }
        }
    }
}

/// The user's side of the board.
struct User<'a>(&'a FakeAsana);

impl User<'_> {
    fn ok(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let (status, v) = self.0.as_user(method, path, body);
        assert_eq!(status, 200, "{method} {path}: {v}");
        v["data"].clone()
    }

    fn section(&self, name: &str) -> String {
        let list = self.ok(
            "GET",
            &format!("/projects/{}/sections", self.0.project()),
            None,
        );
        list.as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("no section {name}: {list}"))["gid"]
            .as_str()
            .unwrap()
            .to_string()
    }

    fn field(&self, name: &str) -> Value {
        let list = self.ok(
            "GET",
            &format!(
                "/projects/{}/custom_field_settings?opt_fields=custom_field.name,custom_field.enum_options.name",
                self.0.project()
            ),
            None,
        );
        list.as_array()
            .unwrap()
            .iter()
            .find(|s| s["custom_field"]["name"] == name)
            .unwrap()["custom_field"]
            .clone()
    }

    /// A task in Drafts with rich notes; returns its gid.
    fn draft(&self, name: &str, html_notes: &str) -> String {
        let p = self.0.project();
        let drafts = self.section("Drafts");
        let t = self.ok(
            "POST",
            "/tasks",
            Some(json!({"data": {"name": name, "html_notes": html_notes,
                "memberships": [{"project": p, "section": drafts}]}})),
        );
        t["gid"].as_str().unwrap().to_string()
    }

    fn move_to(&self, task: &str, section: &str) {
        let s = self.section(section);
        self.ok(
            "POST",
            &format!("/sections/{s}/addTask"),
            Some(json!({"data": {"task": task}})),
        );
    }

    fn comment(&self, task: &str, text: &str) {
        self.ok(
            "POST",
            &format!("/tasks/{task}/stories"),
            Some(json!({"data": {"text": text}})),
        );
    }
}

/// Waits for the card to be in `section`.
fn wait_section(asana: &FakeAsana, task: &str, section: &str, secs: u64) {
    poll(
        Duration::from_secs(secs),
        &format!("task {task} in {section}"),
        || (asana.section_of(task).as_deref() == Some(section)).then_some(()),
    );
}

/// The bot's comments on a card.
fn bot_comments(asana: &FakeAsana, task: &str) -> Vec<String> {
    asana
        .comments(task)
        .into_iter()
        .filter(|(who, _)| who == "Pegasus Bot")
        .map(|(_, html)| html)
        .collect()
}

/// The bot's comments on a card once there are `n` (the comment follows the section's move);
/// a moment later there must still be `n`: none is posted twice.
fn comments_soon(asana: &FakeAsana, task: &str, n: usize) -> Vec<String> {
    poll(
        Duration::from_secs(10),
        &format!("{n} comments on {task}"),
        || (bot_comments(asana, task).len() >= n).then_some(()),
    );
    std::thread::sleep(Duration::from_millis(1500));
    let all = bot_comments(asana, task);
    assert_eq!(all.len(), n, "{all:?}");
    all
}

/// The Pegasus tasks of project `board`.
fn tasks(home: &Home) -> Vec<Value> {
    home.json(&["task", "list", "board"])
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn the_board_is_made_and_a_task_moved_into_ready_queue_runs_to_done_with_its_cost() {
    let fake = FakeLlm::start().unwrap();
    main_agent_rule(&fake);
    // The rich notes reach the agent as Markdown.
    fake.add_rule(
        Rule::new(
            Match::LastUserTextContains("Paint the **fence** in *blue*".into()),
            Reply::Text("The fence is painted blue.".into()),
        )
        .usage(UsageSpec {
            input: 100_000,
            output: 50_000,
            cache_read: 0,
            cache_write: 0,
        }),
    );
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("Varnish the fence".into()),
        Reply::Text("Varnished.".into()),
    ));
    let asana = FakeAsana::start(TOKEN).unwrap();
    let user = User(&asana);
    // A board as people leave them: a section of theirs, and Done before Drafts.
    let p = asana.project();
    for name in ["Done", "Old Stuff"] {
        user.ok(
            "POST",
            &format!("/projects/{p}/sections"),
            Some(json!({"data": {"name": name}})),
        );
    }
    let home = asana_home(&fake, &asana);
    let _logs = ShowLogs(&home);
    let _d = start(&home);
    board_project(&home, &asana);

    // Sections created and ordered, the unknown ones kept after them; fields created once.
    poll(Duration::from_secs(20), "the canonical sections", || {
        let names = asana.section_names();
        (names.len() == 10 && names[..8] == CANONICAL).then_some(())
    });
    assert_eq!(
        asana.section_names()[8..],
        ["Untitled section".to_string(), "Old Stuff".to_string()]
    );
    poll(Duration::from_secs(10), "the custom fields", || {
        (asana.field_names().len() == 7).then_some(())
    });
    assert_eq!(
        asana.field_names(),
        [
            "Agent",
            "Swarm Status",
            "Session ID",
            "Cost",
            "Max Cost",
            "Merge Approval",
            "Worktree Path"
        ]
    );
    let agent = user.field("Agent");
    let options: Vec<&str> = agent["enum_options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["name"].as_str().unwrap())
        .collect();
    assert_eq!(options[..3], ["Triage", "Planner", "Worker"]);
    let log = logs(&home);
    assert_eq!(
        log.matches("section `Old Stuff`").count(),
        1,
        "one warning for the unknown section: {log}"
    );

    // A task with rich notes, a Max Cost, and a dependent task.
    let fence = user.draft(
        "Paint the fence",
        "<body>Paint the <strong>fence</strong> in <em>blue</em></body>",
    );
    let max = user.field("Max Cost")["gid"].as_str().unwrap().to_string();
    user.ok(
        "PUT",
        &format!("/tasks/{fence}"),
        Some(json!({"data": {"custom_fields": {max: 1.5}}})),
    );
    let varnish = user.draft("Varnish the fence", "<body>Varnish the fence</body>");
    user.ok(
        "POST",
        &format!("/tasks/{varnish}/addDependencies"),
        Some(json!({"data": {"dependencies": [fence]}})),
    );
    // The dependent first: it waits until its dependency is a Pegasus task.
    user.move_to(&varnish, "Ready Queue");
    // A rate limit on the next call is waited out for its Retry-After.
    asana.rate_limit(1, 2);
    user.move_to(&fence, "Ready Queue");

    wait_section(&asana, &fence, "Done", 40);
    wait_section(&asana, &varnish, "Done", 40);
    assert_eq!(
        asana.field_value(&fence, "Swarm Status").as_deref(),
        Some("Complete")
    );
    assert_eq!(
        asana.field_value(&fence, "Agent").as_deref(),
        Some("Worker")
    );
    // 100k input at $1/M and 50k output at $2/M.
    poll(Duration::from_secs(10), "the cost written back", || {
        (asana.field_value(&fence, "Cost").as_deref() == Some("0.20")).then_some(())
    });
    let summary = comments_soon(&asana, &fence, 1);
    assert!(
        summary[0].starts_with("<body><strong>[Worker]</strong> ✅\nThe fence is painted blue."),
        "{}",
        summary[0]
    );
    assert!(summary[0].contains("Cost: $0.20"), "{}", summary[0]);
    assert!(
        summary[0].contains("View Session Log</a>"),
        "{}",
        summary[0]
    );

    // One Pegasus task each: the notes as the goal, Max Cost as the budget, the dependency
    // mapped.
    let all = tasks(&home);
    assert_eq!(all.len(), 2, "{all:?}");
    let id_of = |title: &str| {
        all.iter().find(|t| t["title"] == title).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let (fence_id, varnish_id) = (id_of("Paint the fence"), id_of("Varnish the fence"));
    let shown = home.json(&["task", "show", &fence_id])["task"].clone();
    assert_eq!(shown["spec"]["goal"], "Paint the **fence** in *blue*");
    assert_eq!(shown["spec"]["budget_usd"], 1.5);
    assert_eq!(shown["state"], "done");
    let v = home.json(&["task", "show", &varnish_id])["task"].clone();
    assert_eq!(v["depends_on"], json!([fence_id]));
    assert_eq!(v["spec"]["budget_usd"], 2.0, "Max Cost empty: 2.00");

    // The 429 was honoured: the next request came no sooner than Retry-After.
    let reqs = asana.requests();
    let i = reqs.iter().position(|r| r.status == 429).unwrap();
    let waited = reqs[i + 1].at.duration_since(reqs[i].at);
    assert!(waited >= Duration::from_secs(2), "retried after {waited:?}");
    assert!(
        reqs.iter().all(|r| r.status != 401 && r.status != 400),
        "{:?}",
        reqs.iter().filter(|r| r.status >= 400).collect::<Vec<_>>()
    );
    // The token is never logged.
    assert!(!logs(&home).contains(TOKEN));
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

#[test]
fn a_question_is_a_comment_in_the_template_and_the_users_reply_answers_it() {
    let fake = FakeLlm::start().unwrap();
    main_agent_rule(&fake);
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("Answer to your question: green".into()),
        Reply::Text("The shed is green now.".into()),
    ));
    fake.add_rule(Rule::new(
        Match::All(vec![
            Match::LastUserTextContains("Paint the shed".into()),
            Match::NoToolResultYet,
        ]),
        Reply::Tools(vec![ToolCall::new(
            "ask_user",
            json!({"question": "Which **colour** should the shed be?"}),
        )]),
    ));
    let asana = FakeAsana::start(TOKEN).unwrap();
    let user = User(&asana);
    let home = asana_home(&fake, &asana);
    let _logs = ShowLogs(&home);
    let _d = start(&home);
    board_project(&home, &asana);
    poll(Duration::from_secs(20), "the board made", || {
        (asana.section_names().len() == 9).then_some(())
    });
    let shed = user.draft("Paint the shed", "<body>Paint the shed</body>");
    user.move_to(&shed, "Ready Queue");

    wait_section(&asana, &shed, "Clarification Needed", 30);
    poll(Duration::from_secs(10), "Swarm Status Blocked", || {
        (asana.field_value(&shed, "Swarm Status").as_deref() == Some("Blocked")).then_some(())
    });
    let asked = poll(Duration::from_secs(10), "the question comment", || {
        bot_comments(&asana, &shed).into_iter().next()
    });
    assert!(
        asked.starts_with(
            "<body><strong>[Worker]</strong> ❓\nWhich <strong>colour</strong> should the shed be?"
        ),
        "{asked}"
    );
    assert!(
        asked.contains("<strong>Critical Details:</strong>"),
        "{asked}"
    );

    // The user answers with a comment; the task goes on with it and ends Done.
    user.comment(&shed, "green");
    wait_section(&asana, &shed, "Done", 30);
    let comments = comments_soon(&asana, &shed, 2);
    assert!(
        comments[1].contains("The shed is green now."),
        "{}",
        comments[1]
    );
    assert_eq!(tasks(&home).len(), 1);
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

#[test]
fn kill_9_of_pegasusd_mid_sync_repeats_nothing_and_loses_nothing() {
    let fake = FakeLlm::start().unwrap();
    main_agent_rule(&fake);
    // The first run hangs (pegasusd is killed during it); the retry answers.
    fake.add_rule(
        Rule::new(
            Match::LastUserTextContains("Mow the lawn".into()),
            Reply::Fault(Fault::Stall),
        )
        .times(1),
    );
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("Mow the lawn".into()),
        Reply::Text("Lawn mowed.".into()),
    ));
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("Rake the leaves".into()),
        Reply::Text("Leaves raked.".into()),
    ));
    let asana = FakeAsana::start(TOKEN).unwrap();
    let user = User(&asana);
    let home = asana_home(&fake, &asana);
    let _logs = ShowLogs(&home);
    let mut d = start(&home);
    board_project(&home, &asana);
    poll(Duration::from_secs(20), "the board made", || {
        (asana.section_names().len() == 9).then_some(())
    });
    let lawn = user.draft("Mow the lawn", "<body>Mow the lawn</body>");
    user.move_to(&lawn, "Ready Queue");
    wait_section(&asana, &lawn, "In Progress", 30);
    poll(Duration::from_secs(10), "the model call in flight", || {
        (fake.request_count() >= 1).then_some(())
    });
    d.kill9();

    // While pegasusd is down, the user moves another task in: its event waits in the stream.
    let leaves = user.draft("Rake the leaves", "<body>Rake the leaves</body>");
    user.move_to(&leaves, "Ready Queue");
    let _d = start(&home);

    // The interrupted task failed ("process restarted") and says so, once.
    poll(Duration::from_secs(30), "the failure comment", || {
        bot_comments(&asana, &lawn)
            .iter()
            .any(|c| c.contains("process restarted"))
            .then_some(())
    });
    wait_section(&asana, &leaves, "Done", 30);
    // The user moves it back: it is retried, not made again.
    user.move_to(&lawn, "Ready Queue");
    wait_section(&asana, &lawn, "Done", 30);

    let all = tasks(&home);
    let titles: Vec<&str> = all.iter().map(|t| t["title"].as_str().unwrap()).collect();
    assert_eq!(titles.len(), 2, "one Pegasus task per card: {titles:?}");
    assert!(titles.contains(&"Mow the lawn") && titles.contains(&"Rake the leaves"));
    let lawn_comments = comments_soon(&asana, &lawn, 2);
    assert!(lawn_comments[1].contains("Lawn mowed."));
    comments_soon(&asana, &leaves, 1);
    assert_eq!(asana.workspace_field_count(), 7, "no field made twice");
}

#[test]
fn merge_approval_manual_check_holds_a_code_tasks_merge_until_approved() {
    let tmp = tempfile::tempdir().unwrap();
    let app = repo(tmp.path(), "app");
    let fake = FakeLlm::start().unwrap();
    main_agent_rule(&fake);
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("wrote".into()),
        Reply::Text("changed alpha".into()),
    ));
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("change alpha".into()),
        Reply::Tools(vec![ToolCall::new(
            "write_file",
            json!({"path": "a.txt", "content": "task\n"}),
        )]),
    ));
    let asana = FakeAsana::start(TOKEN).unwrap();
    let user = User(&asana);
    let home = asana_home(&fake, &asana);
    let _logs = ShowLogs(&home);
    let _d = start(&home);
    home.create("board");
    configure(
        &home,
        "board",
        &format!(
            "{}verify: test -s a.txt\nasana: {{project: \"{}\"}}\n",
            repos_yaml(&[("app", &app)]),
            asana.project()
        ),
    );
    poll(Duration::from_secs(20), "the board made", || {
        (asana.field_names().len() == 7).then_some(())
    });
    let card = user.draft("Change alpha", "<body>change alpha</body>");
    let approval = user.field("Merge Approval");
    let option = |name: &str| {
        approval["enum_options"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["name"] == name)
            .unwrap()["gid"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let field = approval["gid"].as_str().unwrap().to_string();
    user.ok(
        "PUT",
        &format!("/tasks/{card}"),
        Some(json!({"data": {"custom_fields": {field.clone(): option("Manual Check")}}})),
    );
    let before = sh(&app, "git rev-parse main");
    user.move_to(&card, "Ready Queue");

    // Verified, the merge waits in Merging: main untouched.
    wait_section(&asana, &card, "Merging", 60);
    poll(Duration::from_secs(10), "Swarm Status Blocked", || {
        (asana.field_value(&card, "Swarm Status").as_deref() == Some("Blocked")).then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(asana.section_of(&card).as_deref(), Some("Merging"));
    assert_eq!(sh(&app, "git rev-parse main"), before, "held");
    let id = tasks(&home)[0]["id"].as_str().unwrap().to_string();
    assert_eq!(
        home.json(&["task", "show", &id])["task"]["state"],
        "verified"
    );
    assert_eq!(asana.field_value(&card, "Session ID"), Some(id.clone()));
    let worktree = asana.field_value(&card, "Worktree Path").unwrap();
    assert!(
        worktree.ends_with(&format!(".pegasus/worktrees/task-{id}")),
        "{worktree}"
    );

    // Approved: merged, and the card is Done.
    user.ok(
        "PUT",
        &format!("/tasks/{card}"),
        Some(json!({"data": {"custom_fields": {field: option("Approved")}}})),
    );
    wait_section(&asana, &card, "Done", 60);
    assert_eq!(sh(&app, "git show main:a.txt"), "task");
    poll(Duration::from_secs(10), "the worktree path cleared", || {
        asana
            .field_value(&card, "Worktree Path")
            .is_none()
            .then_some(())
    });
    comments_soon(&asana, &card, 1);
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

#[test]
fn a_swarm_status_field_lacking_options_gets_them_and_the_sync_writes_them() {
    let fake = FakeLlm::start().unwrap();
    main_agent_rule(&fake);
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("Sweep the yard".into()),
        Reply::Text("Swept.".into()),
    ));
    let asana = FakeAsana::start(TOKEN).unwrap();
    let user = User(&asana);
    let p = asana.project();
    let ws = user.ok("GET", "/users/me?opt_fields=workspaces", None)["workspaces"][0]["gid"]
        .as_str()
        .unwrap()
        .to_string();
    // The user's own Swarm Status (without Running and Complete, with an option of theirs)
    // and a Merge Approval without Approved that they locked; both on the board.
    for (name, options) in [
        ("Swarm Status", vec!["Idle", "Someday", "Blocked"]),
        ("Merge Approval", vec!["Auto-Approve", "Manual Check"]),
    ] {
        let options: Vec<Value> = options.iter().map(|o| json!({ "name": o })).collect();
        let f = user.ok(
            "POST",
            "/custom_fields",
            Some(json!({"data": {"workspace": ws, "name": name, "resource_subtype": "enum", "enum_options": options}})),
        );
        user.ok(
            "POST",
            &format!("/projects/{p}/addCustomFieldSetting"),
            Some(json!({"data": {"custom_field": f["gid"]}})),
        );
    }
    asana.lock_field("Merge Approval");
    let home = asana_home(&fake, &asana);
    let _logs = ShowLogs(&home);
    let _d = start(&home);
    board_project(&home, &asana);

    poll(Duration::from_secs(20), "the custom fields", || {
        (asana.field_names().len() == 7).then_some(())
    });
    // The missing options added where they belong, the user's own kept.
    poll(Duration::from_secs(10), "Swarm Status completed", || {
        (asana.field_options("Swarm Status")
            == ["Idle", "Running", "Someday", "Blocked", "Complete"])
        .then_some(())
    });
    // A field Pegasus may not change stays as it is, with one warning.
    assert_eq!(
        asana.field_options("Merge Approval"),
        ["Auto-Approve", "Manual Check"]
    );
    let warning = "asana: custom field `Merge Approval` lacks the options Approved and Pegasus may not add them";
    poll(Duration::from_secs(10), "the warning", || {
        logs(&home).contains(warning).then_some(())
    });

    // The sync writes the added options.
    let yard = user.draft("Sweep the yard", "<body>Sweep the yard</body>");
    user.move_to(&yard, "Ready Queue");
    wait_section(&asana, &yard, "Done", 40);
    poll(Duration::from_secs(10), "Swarm Status Complete", || {
        (asana.field_value(&yard, "Swarm Status").as_deref() == Some("Complete")).then_some(())
    });
    assert_eq!(logs(&home).matches(warning).count(), 1, "warned once");
    let refused: Vec<_> = asana
        .requests()
        .into_iter()
        .filter(|r| matches!(r.status, 400 | 404))
        .collect();
    assert!(refused.is_empty(), "{refused:?}");
}
