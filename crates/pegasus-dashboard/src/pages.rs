//! The dashboard's pages: server-rendered with maud (every value is escaped; model output is
//! text, never markup), one small script (`/static/app.js`) for the token exchange, the action
//! forms and the live updates over `/api/events`. Nothing is fetched from anywhere else.

use crate::Dash;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use maud::{html, Markup, DOCTYPE};
use pegasus_proto::ctl::{CtlRequest, CtlResponse, ProjectInfo};
use pegasus_proto::Channel;
use pegasus_store::{ContentBlock, SessionRecord};
use pegasus_tasks::{board, Task, TaskState};

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#222}\
header{background:#1d2b3a;color:#fff;padding:8px 16px}header a{color:#cde;margin-right:16px}\
main{padding:16px}table{border-collapse:collapse}td,th{padding:4px 8px;border-bottom:1px solid #ddd;text-align:left}\
.cols{display:flex;gap:12px}.col{flex:1;background:#f4f6f8;padding:8px;border-radius:6px;min-width:0}\
.card{background:#fff;border:1px solid #ccd;border-radius:4px;padding:6px;margin:6px 0}\
.msg{white-space:pre-wrap;border-left:3px solid #ccd;padding:2px 8px;margin:6px 0}.msg.assistant{border-color:#5a8}\
.msg.user{border-color:#58a}#live{white-space:pre-wrap;color:#555}.flash{color:#070}.bad{color:#b00}\
form.inline{display:inline}small{color:#666}textarea{width:100%}svg rect{fill:#58a}";

fn page(title: &str, project: Option<&str>, body: Markup) -> Response {
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { (title) " · Pegasus" }
                style { (maud::PreEscaped(STYLE)) }
                script src="/static/app.js" defer {}
            }
            body data-project=[project] {
                header {
                    a href="/" { "Projects" }
                    a href="/costs" { "Costs" }
                    a href="/crashes" { "Crashes" }
                }
                main {
                    p #flash .flash {}
                    (body)
                }
            }
        }
    };
    Html(markup.into_string()).into_response()
}

/// What an unauthenticated browser gets: the script exchanges `#token=` for a cookie.
pub(super) fn login() -> Html<String> {
    Html(
        html! {
            (DOCTYPE)
            html lang="en" {
                head { meta charset="utf-8"; title { "Pegasus" } script src="/static/app.js" defer {} }
                body {
                    p #login { "This dashboard needs its token: open the URL `pegasusctl dashboard` prints." }
                }
            }
        }
        .into_string(),
    )
}

pub(super) async fn script() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("app.js"),
    )
        .into_response()
}

fn money(x: f64) -> String {
    format!("${x:.4}")
}

async fn project_list(d: &Dash) -> Vec<ProjectInfo> {
    match d
        .door
        .request(
            &Channel::Dashboard,
            CtlRequest::ProjectList { status: None },
        )
        .await
    {
        CtlResponse::Projects(p) => p,
        _ => Vec::new(),
    }
}

pub(super) async fn projects(State(d): State<Dash>) -> Response {
    let list = project_list(&d).await;
    let body = html! {
        h1 { "Projects" }
        table #projects data-live="" {
            tr { th { "project" } th { "status" } th { "worker" } th { "running" } th { "spend" } th { "problem" } }
            @for p in &list {
                tr .project {
                    td { a href={ "/projects/" (p.name) } { (p.name) } }
                    td { (p.status_word()) }
                    td { (p.worker_state) @if let Some(pid) = p.worker_pid { " (" (pid) @if let Some(host) = &p.worker_host { " on " (host) } ")" } }
                    td { @if let Some(t) = &p.task { (t) @if let Some(s) = &p.stage { " · " (s) } } }
                    td { (money(p.cost_usd)) }
                    td { @if let Some(e) = p.error.as_ref().or(p.last_crash.as_ref()) { (e) } }
                }
            }
        }
        h2 { "New project" }
        form data-post="/api/projects" {
            input name="name" placeholder="name" required;
            " "
            input name="goal" placeholder="goal" required size="60";
            " "
            button { "Create" }
        }
    };
    page("Projects", None, body)
}

fn text_of(content: &[ContentBlock]) -> Vec<String> {
    content
        .iter()
        .map(|b| match b {
            ContentBlock::Text { text } => text.clone(),
            ContentBlock::ToolUse { name, input, .. } => format!("→ {name} {input}"),
            ContentBlock::ToolResult {
                content, is_error, ..
            } => {
                let c: String = content.chars().take(400).collect();
                format!("{} {c}", if *is_error { "✗" } else { "←" })
            }
            other => format!(
                "[{}]",
                serde_json::to_value(other)
                    .ok()
                    .and_then(|v| v.get("type").and_then(|t| t.as_str().map(str::to_string)))
                    .unwrap_or_else(|| "block".into())
            ),
        })
        .collect()
}

fn task_card(t: &Task) -> Markup {
    html! {
        div .card .task data-id=(t.id) {
            b { (t.title) } br;
            small { (t.id) " · " (t.state.as_str()) @if let Some(r) = t.shown_reason() { " · " (r) } }
            @if let Some(q) = &t.question {
                p { "Question: " (q) }
                form data-post={ "/api/tasks/" (t.id) "/answer" } {
                    input name="text" placeholder="your answer" required;
                    button { "Answer" }
                }
            }
            div {
                @if !t.state.is_terminal() {
                    form .inline data-post={ "/api/tasks/" (t.id) "/cancel" } { button { "Cancel" } }
                }
                @if t.state == TaskState::Failed {
                    form .inline data-post={ "/api/tasks/" (t.id) "/retry" } { button { "Retry" } }
                }
                @if t.state == TaskState::Planned {
                    form .inline data-post={ "/api/tasks/" (t.id) "/approve" } { button { "Approve" } }
                }
                @if t.state == TaskState::Verified || t.state == TaskState::Blocked {
                    form .inline data-post={ "/api/tasks/" (t.id) "/merge" } { button { "Merge" } }
                }
            }
        }
    }
}

pub(super) async fn project(State(d): State<Dash>, Path(name): Path<String>) -> Response {
    let info = match d
        .door
        .request(
            &Channel::Dashboard,
            CtlRequest::ProjectShow { name: name.clone() },
        )
        .await
    {
        CtlResponse::Project(p) => *p,
        CtlResponse::Failed { kind, message } => {
            let status = super::api::status_of(kind);
            let title = if status == StatusCode::NOT_FOUND {
                "Not found"
            } else {
                "Cannot show the project"
            };
            return (status, page(title, None, html! { p .bad { (message) } })).into_response();
        }
        _ => return StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    };
    let dir = d.door.home().project_dir(&name);
    let (tasks, records, memory, runs) = {
        let (dir, name) = (dir.clone(), name.clone());
        tokio::task::spawn_blocking(move || {
            let tasks = pegasus_tasks::TaskStore::open(&dir, &name)
                .and_then(|s| s.list())
                .unwrap_or_default();
            let records = pegasus_store::load_session(&dir)
                .map(|s| s.records)
                .unwrap_or_default();
            let mut memory = Vec::new();
            if let Ok(entries) = std::fs::read_dir(dir.join("memory")) {
                let mut names: Vec<_> = entries.flatten().map(|e| e.path()).collect();
                names.sort();
                for p in names.into_iter().take(30) {
                    if let Ok(text) = pegasus_store::read_text_limited(&p, 64 * 1024) {
                        let n = p
                            .file_name()
                            .map(|n| n.to_string_lossy().into_owned())
                            .unwrap_or_default();
                        memory.push((n, text));
                    }
                }
            }
            let runs = pegasus_runs::RunStore::open(&dir)
                .and_then(|s| s.list())
                .unwrap_or_default();
            (tasks, records, memory, runs)
        })
        .await
        .unwrap_or_default()
    };
    let messages: Vec<_> = records
        .iter()
        .filter_map(|r| match r {
            SessionRecord::Message(m) => Some(m),
            _ => None,
        })
        .collect();
    let shown = &messages[messages.len().saturating_sub(100)..];
    let body = html! {
        h1 { (info.name) }
        p #info data-live="" {
            "status " b { (info.status_word()) } " · worker " (info.worker_state)
            @if let Some(t) = &info.task { " · running " (t) @if let Some(s) = &info.stage { " (" (s) ")" } }
            " · spend " (money(info.cost_usd))
        }
        div {
            @for verb in ["suspend", "resume", "complete", "archive"] {
                form .inline data-post={ "/api/projects/" (info.name) "/" (verb) } { button { (verb) } }
                " "
            }
        }
        @if let Some(goal) = &info.goal { p { small { "Goal: " (goal) } } }
        h2 { "Conversation" }
        div #transcript data-live="" {
            @for m in shown {
                @let role = format!("{:?}", m.role).to_lowercase();
                div class={ "msg " (role) } {
                    small { (role) @if let Some(f) = &m.from { " · " (f) } } br;
                    @for t in text_of(&m.content) { (t) br; }
                }
            }
        }
        div #live {}
        form #send data-post={ "/api/projects/" (info.name) "/messages" } {
            textarea name="text" rows="3" placeholder="Message to the project" required {}
            button { "Send" }
        }
        h2 { "Tasks" }
        div .cols #board data-live="" {
            @for (col, ts) in board(&tasks) {
                div .col data-column=(format!("{col:?}").to_lowercase()) {
                    h3 { (match format!("{col:?}").as_str() { "InProgress" => "In progress", "Todo" => "To do", other => other }.to_string()) }
                    @for t in ts { (task_card(t)) }
                }
            }
        }
        form data-post={ "/api/projects/" (info.name) "/tasks" } {
            input name="goal" placeholder="new task: its goal" required size="60";
            button { "Add task" }
        }
        h2 { "Runs" }
        @if runs.is_empty() { p { small { "No autonomous runs." } } }
        @for r in &runs {
            div .card {
                b { (r.id) } " · " (format!("{:?}", r.status)) " · " (money(r.cost_usd)) br;
                small { (r.brief) }
                ol { @for ph in &r.phases { li { (ph.title) " — " (format!("{:?}", ph.status)) } } }
            }
        }
        h2 { "Memory" }
        @if memory.is_empty() { p { small { "No memory files." } } }
        @for (n, text) in &memory {
            details { summary { (n) } pre { (text) } }
        }
    };
    page(&name, Some(&name), body)
}

pub(super) async fn costs(State(d): State<Dash>) -> Response {
    let ledger = d.door.home().ledger_file();
    let report =
        tokio::task::spawn_blocking(move || pegasus_store::cost_report(&ledger, None, None))
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
    let days: Vec<(&String, f64)> = report.by_day.iter().map(|(d, b)| (d, b.usd)).collect();
    let max = days
        .iter()
        .map(|(_, u)| *u)
        .fold(0.0f64, f64::max)
        .max(1e-9);
    let (w, h) = (24usize, 120.0f64);
    let body = html! {
        h1 { "Costs" }
        p { "Total " b { (money(report.total.usd)) } " over " (report.total.calls) " calls"
            @if report.total.unpriced_calls > 0 { " (" (report.total.unpriced_calls) " unpriced)" } }
        h2 { "Per day" }
        svg #chart width=(days.len().max(1) * w + 10) height=(h + 30.0) role="img" {
            @for (i, (day, usd)) in days.iter().enumerate() {
                @let bar = (usd / max * h).max(1.0);
                rect x=(i * w + 5) y=(h - bar + 5.0) width=(w - 4) height=(bar) { title { (day) ": " (money(*usd)) } }
            }
        }
        h2 { "Per project" }
        table {
            tr { th { "project" } th { "spend" } th { "calls" } }
            @for (p, b) in &report.by_project { tr { td { (p) } td { (money(b.usd)) } td { (b.calls) } } }
        }
    };
    page("Costs", None, body)
}

pub(super) async fn crashes(State(d): State<Dash>) -> Response {
    let list = project_list(&d).await;
    let home = d.door.home().clone();
    let rows = tokio::task::spawn_blocking(move || {
        let mut rows = Vec::new();
        for p in list {
            for r in pegasus_store::read_crashes(&home.project_dir(&p.name)).unwrap_or_default() {
                rows.push((p.name.clone(), r));
            }
        }
        rows.sort_by_key(|(_, r)| std::cmp::Reverse(r.ts));
        rows.truncate(200);
        rows
    })
    .await
    .unwrap_or_default();
    let body = html! {
        h1 { "Crashes" }
        table #crashes data-live="" {
            tr { th { "when" } th { "project" } th { "what" } }
            @for (p, r) in &rows {
                tr { td { (r.ts.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)) } td { (p) } td { (r.reason) } }
            }
        }
    };
    page("Crashes", None, body)
}
