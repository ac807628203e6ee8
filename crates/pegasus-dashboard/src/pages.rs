//! The dashboard's pages: server-rendered with maud (every value is escaped; model text is
//! Markdown rendered by [`crate::markdown`], whose raw HTML stays text), one stylesheet and one
//! small script (`/static/app.css`, `/static/app.js`: the token exchange, the action forms,
//! the approvals and the live updates over `/api/events`). Nothing is fetched from anywhere
//! else, and the Content-Security-Policy says so to the browser.
//!
//! A page offers only what the state allows ([`crate::actions`]) and names states in words
//! ([`crate::words`]); it reads on a phone (one column under 600 px, tap targets of 40 px).

use crate::actions::{self, TaskAction};
use crate::words::{self, usd};
use crate::{chart, transcript, Dash};
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use maud::{html, Markup, DOCTYPE};
use pegasus_proto::ctl::{CtlRequest, CtlResponse, ProjectInfo};
use pegasus_proto::Channel;
use pegasus_store::{CostReport, SessionRecord};
use pegasus_tasks::{board, BoardColumn, Task, TaskState};
use std::collections::HashSet;

/// Everything from this origin, nothing inline, nothing from elsewhere.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

/// The last messages a project page shows.
const SHOWN_MESSAGES: usize = 100;

/// Which header link is the current page's.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Nav {
    Projects,
    Approvals,
    Costs,
    Crashes,
}

/// The headers every page carries: the CSP above, and no sniffing of types.
fn with_headers(status: StatusCode, markup: Markup) -> Response {
    let mut resp = (status, Html(markup.into_string())).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    resp
}

fn head(title: &str) -> Markup {
    html! {
        head {
            meta charset="utf-8";
            meta name="viewport" content="width=device-width, initial-scale=1";
            title { (title) " · Pegasus" }
            link rel="stylesheet" href="/static/app.css";
            script src="/static/app.js" defer {}
        }
    }
}

fn page(title: &str, project: Option<&str>, nav: Option<Nav>, body: Markup) -> Markup {
    let current = |n: Nav| (nav == Some(n)).then_some("page");
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(title))
            body data-project=[project] {
                header {
                    a .brand href="/" { "Pegasus" }
                    nav {
                        a href="/" aria-current=[current(Nav::Projects)] { "Projects" }
                        // Shown by the script once `/api/approvals` answers; the badge counts
                        // what waits.
                        a #approvals-link href="/approvals" aria-current=[current(Nav::Approvals)] hidden {
                            "Approvals" span #approvals-badge .badge .zero { "0" }
                        }
                        a href="/costs" aria-current=[current(Nav::Costs)] { "Costs" }
                        a href="/crashes" aria-current=[current(Nav::Crashes)] { "Crashes" }
                    }
                    form .search action="/search" method="get" role="search" {
                        input type="search" name="q" placeholder="Search" aria-label="Search sessions, tasks and memory";
                    }
                }
                main {
                    p #flash .flash role="status" {}
                    (body)
                }
            }
        }
    }
}

/// A page, with [`with_headers`].
fn respond(
    status: StatusCode,
    title: &str,
    project: Option<&str>,
    nav: Option<Nav>,
    body: Markup,
) -> Response {
    with_headers(status, page(title, project, nav, body))
}

/// What an unauthenticated browser gets: the script exchanges `#token=` for a cookie.
pub(super) fn login() -> Response {
    with_headers(
        StatusCode::UNAUTHORIZED,
        html! {
            (DOCTYPE)
            html lang="en" {
                (head("Pegasus"))
                body {
                    main {
                        p #login { "This dashboard needs its token: open the URL `pegasusctl dashboard` prints." }
                    }
                }
            }
        },
    )
}

pub(super) async fn script() -> Response {
    asset("text/javascript; charset=utf-8", include_str!("app.js"))
}

pub(super) async fn stylesheet() -> Response {
    asset("text/css; charset=utf-8", include_str!("app.css"))
}

/// A file built into the binary, as `content_type`.
fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

async fn project_list(d: &Dash) -> Vec<ProjectInfo> {
    let req = CtlRequest::ProjectList { status: None };
    match d.door.request(&Channel::Dashboard, req).await {
        CtlResponse::Projects(p) => p,
        _ => Vec::new(),
    }
}

/// The ledger summed from `since` on (all of it for `None`), one project's lines or all;
/// empty when it cannot be read (the costs page says what the API would).
async fn cost_report(
    d: &Dash,
    project: Option<&str>,
    since: Option<chrono::NaiveDate>,
) -> CostReport {
    let ledger = d.door.home().ledger_file();
    let project = project.map(str::to_string);
    pegasus_fs::blocking(move || pegasus_store::cost_report(&ledger, project.as_deref(), since))
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default()
}

fn today() -> chrono::NaiveDate {
    chrono::Utc::now().date_naive()
}

/// A project's lifecycle status as a chip.
fn state_chip(p: &ProjectInfo) -> Markup {
    html! { span class={ "state " (p.status_word()) } { (p.status_word()) } }
}

/// What a project's worker is doing now, in words; nothing for a project at rest.
fn doing(p: &ProjectInfo) -> Markup {
    html! {
        @if let Some(e) = &p.error {
            span .bad { (e) }
        } @else if p.task.is_some() {
            "working"
            @if let Some(s) = p.stage { " · " (words::stage(s)) }
        } @else if p.status == Some(pegasus_store::ProjectStatus::Active) {
            (words::worker(p.worker_state))
            @if let Some(host) = &p.worker_host { " on " (host) }
        }
        @if p.error.is_none() {
            @if let Some(c) = &p.last_crash {
                br; small .bad { "last crash: " (c) }
            }
        }
        // DESIGN.md §5 fallback models: another model answered its calls lately, and why.
        @for f in &p.fallbacks {
            br; small .bad .fallback { (f.line()) }
        }
    }
}

fn first_line(s: &str, max: usize) -> String {
    chart::short(s.lines().next().unwrap_or_default(), max)
}

pub(super) async fn projects(State(d): State<Dash>) -> Response {
    let list = project_list(&d).await;
    let today = cost_report(&d, None, Some(today())).await;
    let spent_today = |name: &str| today.by_project.get(name).map_or(0.0, |b| b.usd);
    let active = list
        .iter()
        .filter(|p| p.status == Some(pegasus_store::ProjectStatus::Active))
        .count();
    let total: f64 = list.iter().map(|p| p.cost_usd).sum();
    let total_today: f64 = list.iter().map(|p| spent_today(&p.name)).sum();
    let waiting: u32 = list.iter().map(|p| p.approvals).sum();
    let body = html! {
        h1 { "Projects" }
        div .summary #summary data-live="" {
            div { b { (active) } small { "active of " (list.len()) } }
            div { b { (usd(total_today)) } small { "spent today" } }
            div { b { (usd(total)) } small { "spent in all" } }
            div #approvals-summary { b #approvals-total { (waiting) } small { "waiting for approval" } }
        }
        table .list #projects data-live="" {
            tr .head {
                th { "Project" } th { "State" } th { "Now" }
                th .num { "Today" } th .num { "Total" } th .num { "Approvals" }
            }
            @for p in &list {
                tr .project data-name=(p.name) {
                    td {
                        a href={ "/projects/" (p.name) } { b { (p.name) } }
                        @if let Some(goal) = &p.goal { br; small { (first_line(goal, 80)) } }
                    }
                    td data-label="State" { (state_chip(p)) }
                    td data-label="Now" { (doing(p)) }
                    td .num data-label="Today" { (usd(spent_today(&p.name))) }
                    td .num data-label="Total" { (usd(p.cost_usd)) }
                    td .num data-label="Approvals" {
                        @if p.approvals > 0 {
                            a .approvals-count .badge data-project=(p.name) href={ "/projects/" (p.name) "#project-approvals" } { (p.approvals) }
                        } @else {
                            span .approvals-count .muted data-project=(p.name) { "none" }
                        }
                    }
                }
            }
        }
        @if list.is_empty() { p { small { "No projects yet: create one below." } } }
        h2 { "New project" }
        form .row data-post="/api/projects" {
            input name="name" placeholder="name" required aria-label="name";
            input .grow name="goal" placeholder="goal" required aria-label="goal";
            button .primary { "Create" }
        }
    };
    respond(StatusCode::OK, "Projects", None, Some(Nav::Projects), body)
}

/// A board column's id in the page (`data-column`), as the script and the tests find it.
fn column_id(c: BoardColumn) -> &'static str {
    match c {
        BoardColumn::Todo => "todo",
        BoardColumn::InProgress => "in-progress",
        BoardColumn::Review => "review",
        BoardColumn::Done => "done",
    }
}

fn task_card(t: &Task, merge_blocked: bool) -> Markup {
    let actions = actions::task_actions(t, merge_blocked);
    html! {
        div .card .task data-id=(t.id) data-state=(t.state.as_str()) {
            b { (t.title) } br;
            small {
                (t.state.as_str())
                @if let Some(r) = t.shown_reason() { " · " (words::reason(r)) }
                @if let Some(c) = t.cost_usd { " · " (usd(c)) }
                " · " span .muted { (t.id) }
            }
            @if let Some(q) = &t.question {
                p .question { "Question: " (q) }
            }
            @if let (TaskState::Done, Some(s)) = (t.state, &t.result_summary) {
                div .md .muted { (crate::markdown::render(&first_line(s, 200))) }
            }
            @if actions.contains(&TaskAction::Answer) {
                form .row data-post={ "/api/tasks/" (t.id) "/answer" } {
                    input .grow name="text" placeholder="your answer" required aria-label="your answer";
                    button .primary { (TaskAction::Answer.label()) }
                }
            }
            div .actions {
                @for a in actions.iter().filter(|a| **a != TaskAction::Answer) {
                    form .inline data-post={ "/api/tasks/" (t.id) "/" (a.verb()) } {
                        button .danger[*a == TaskAction::Cancel] data-action=(a.verb()) { (a.label()) }
                    }
                }
            }
        }
    }
}

pub(super) async fn project(State(d): State<Dash>, Path(name): Path<String>) -> Response {
    let req = CtlRequest::ProjectShow { name: name.clone() };
    let info = match d.door.request(&Channel::Dashboard, req).await {
        CtlResponse::Project(p) => *p,
        CtlResponse::Failed { kind, message } => {
            let status = super::api::status_of(kind);
            let title = if status == StatusCode::NOT_FOUND {
                "Not found"
            } else {
                "Cannot show the project"
            };
            return respond(status, title, None, None, html! { p .bad { (message) } });
        }
        _ => return StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    };
    let dir = d.door.home().project_dir(&name);
    let (tasks, merge_blocked, records, memory, runs) = {
        let (dir, name) = (dir.clone(), name.clone());
        pegasus_fs::blocking(move || {
            let store = pegasus_tasks::TaskStore::open(&dir, &name);
            let tasks = store
                .as_ref()
                .ok()
                .and_then(|s| s.list().ok())
                .unwrap_or_default();
            // Which blocked tasks are blocked in their merge (only those offer Merge).
            let merge_blocked: HashSet<String> = tasks
                .iter()
                .filter(|t| t.state == TaskState::Blocked && t.question.is_none())
                .filter(|t| {
                    let history = store.as_ref().ok().and_then(|s| s.history(&t.id).ok());
                    history.is_some_and(|h| pegasus_tasks::blocked_from_verified(&h))
                })
                .map(|t| t.id.clone())
                .collect();
            // The session as written: a call still running (or waiting for approval) has no
            // result yet, so the cancelled one the loader makes up for a model is left out.
            let records = pegasus_store::load_session(&dir)
                .map(|s| {
                    let made_up = s.repairs;
                    s.records
                        .into_iter()
                        .filter(|r| !made_up.contains(r))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default();
            let mut paths: Vec<_> = std::fs::read_dir(dir.join("memory"))
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
                .collect();
            paths.sort();
            let memory: Vec<(String, String)> = paths
                .iter()
                .take(30)
                .filter_map(|p| {
                    let text = pegasus_store::read_text_limited(p, 64 * 1024).ok()?;
                    Some((p.file_name()?.to_string_lossy().into_owned(), text))
                })
                .collect();
            let runs = pegasus_runs::RunStore::open(&dir)
                .and_then(|s| s.list())
                .unwrap_or_default();
            (tasks, merge_blocked, records, memory, runs)
        })
        .await
        .unwrap_or_default()
    };
    let spent_today = cost_report(&d, Some(&name), Some(today())).await.total.usd;
    let messages: Vec<_> = records
        .iter()
        .filter_map(|r| match r {
            SessionRecord::Message(m) => Some(m),
            _ => None,
        })
        .collect();
    let shown = &messages[messages.len().saturating_sub(SHOWN_MESSAGES)..];
    let verbs = actions::lifecycle_verbs(info.status);
    let body = html! {
        h1 { (info.name) " " (state_chip(&info)) }
        @if let Some(goal) = &info.goal { p { (goal) } }
        div .card #info data-live="" {
            div .row {
                span { small { "Now " } (doing(&info)) }
                span { small { "Spent today " } b { (usd(spent_today)) } }
                span { small { "In all " } b { (usd(info.cost_usd)) } }
            }
            @if !verbs.is_empty() {
                div .actions #lifecycle {
                    @for verb in &verbs {
                        form .inline data-post={ "/api/projects/" (info.name) "/" (verb.as_str()) }
                            data-confirm=[actions::verb_confirm(*verb, &info.name)] {
                            button data-verb=(verb.as_str()) { (actions::verb_label(*verb)) }
                        }
                    }
                }
            }
        }
        section #project-approvals hidden {
            h2 { "Waiting for your approval" }
            div .approvals data-approvals=(info.name) {}
        }
        h2 { "Conversation" }
        @if messages.len() > shown.len() {
            p { small { "The last " (shown.len()) " of " (messages.len()) " messages." } }
        }
        div #transcript data-live="" { (transcript::render(shown)) }
        div #live {}
        form #send data-post={ "/api/projects/" (info.name) "/messages" } data-idempotent {
            textarea name="text" rows="3" placeholder="Message to the project" required aria-label="message" {}
            button .primary { "Send" }
        }
        h2 { "Tasks" }
        div .cols #board data-live="" {
            @for (col, ts) in board(&tasks) {
                div .col data-column=(column_id(col)) {
                    h3 { (col.title()) " " small { (ts.len()) } }
                    @for t in ts { (task_card(t, merge_blocked.contains(&t.id))) }
                }
            }
        }
        form .row data-post={ "/api/projects/" (info.name) "/tasks" } {
            input .grow name="goal" placeholder="new task: its goal" required aria-label="new task";
            button { "Add task" }
        }
        h2 { "Runs" }
        @if runs.is_empty() { p { small { "No autonomous runs." } } }
        @for r in &runs {
            div .card {
                b { (r.id) } " · " (r.status.as_str()) " · " (usd(r.cost_usd)) br;
                small { (r.brief) }
                ol { @for ph in &r.phases { li { (ph.title) " — " (ph.status.as_str()) } } }
            }
        }
        h2 { "Memory" }
        @if memory.is_empty() { p { small { "No memory files." } } }
        @for (n, text) in &memory {
            details .tool {
                summary { (n) }
                div .fold .md { (crate::markdown::render(text)) }
            }
        }
    };
    respond(StatusCode::OK, &name, Some(&name), None, body)
}

pub(super) async fn approvals(State(d): State<Dash>) -> Response {
    let list = waiting_approvals(&d).await;
    // Rendered here too (the script draws the same cards from `/api/approvals` and keeps them
    // current): a page read without the script shows what waits, escaped the same way.
    let body = html! {
        h1 { "Approvals" }
        p { small { "Tool calls waiting for a person's yes. A call never runs without it." } }
        div .approvals #approvals-all data-approvals="" {
            @for a in &list { (approval_card(a)) }
            @if list.is_empty() { p .muted { "Nothing waits for your approval." } }
        }
    };
    respond(
        StatusCode::OK,
        "Approvals",
        None,
        Some(Nav::Approvals),
        body,
    )
}

async fn waiting_approvals(d: &Dash) -> Vec<pegasus_proto::ctl::ApprovalInfo> {
    let req = CtlRequest::Approvals { project: None };
    match d.door.request(&Channel::Dashboard, req).await {
        CtlResponse::Approvals(list) => list,
        _ => Vec::new(),
    }
}

/// One waiting request as a card: everything a person reads escaped
/// ([`pegasus_proto::shown::escape`]: control, escape, bidi and zero-width characters written
/// out), its whole input one click away.
fn approval_card(a: &pegasus_proto::ctl::ApprovalInfo) -> Markup {
    use pegasus_proto::shown::escape;
    html! {
        div .card .approval data-id=(a.id) {
            div .row {
                b { (escape(&a.tool)) }
                small { (escape(&a.project)) " · task " (escape(&a.task)) " · asked " (a.asked_at) }
            }
            pre { (escape(&a.summary)) }
            p { a href={ "/approvals/" (a.id) } { "Whole input" } }
        }
    }
}

/// `/approvals/:id`: one waiting request with its whole input (pretty JSON, escaped) and the
/// buttons to answer it.
pub(super) async fn approval(State(d): State<Dash>, Path(id): Path<String>) -> Response {
    use pegasus_proto::shown::escape;
    let list = waiting_approvals(&d).await;
    let Some(a) = list.into_iter().find(|a| a.id == id) else {
        return respond(
            StatusCode::NOT_FOUND,
            "Not found",
            None,
            Some(Nav::Approvals),
            html! { p .bad { "No approval " (escape(&id)) " is waiting: it was answered, expired or never asked." } p { a href="/approvals" { "The waiting ones" } } },
        );
    };
    let input = serde_json::from_str::<serde_json::Value>(&a.input)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| a.input.clone());
    let body = html! {
        h1 { "Approval " (a.id) }
        p { small { (escape(&a.project)) " · task " (escape(&a.task)) " · " (escape(&a.tool)) " · asked " (a.asked_at) } }
        h2 { "Summary" }
        pre #approval-summary { (escape(&a.summary)) }
        h2 { "Whole input" }
        @if a.input.is_empty() { p .muted { "This request has no tool input (a merge)." } }
        @else { pre #approval-input { (escape(&input)) } }
        div .row {
            form .inline data-post={ "/api/approvals/" (a.id) "/approve" } {
                button .primary data-action="approve" { "Approve" }
            }
            form .row .grow data-post={ "/api/approvals/" (a.id) "/deny" } {
                input .grow name="reason" placeholder="why not (optional)" aria-label="reason to deny";
                button .danger data-action="deny" { "Deny" }
            }
        }
    };
    respond(StatusCode::OK, "Approval", None, Some(Nav::Approvals), body)
}

pub(super) async fn costs(State(d): State<Dash>) -> Response {
    let report = cost_report(&d, None, None).await;
    let today = today();
    let days = chart::day_series(report.by_day.iter().map(|(d, b)| (d, b.usd)), today);
    let spent_today = report.by_day.get(&today.to_string()).map_or(0.0, |b| b.usd);
    let projects: Vec<(String, f64)> = report
        .by_project
        .iter()
        .map(|(p, b)| (p.clone(), b.usd))
        .collect();
    let body = html! {
        h1 { "Costs" }
        div .summary {
            div { b { (usd(spent_today)) } small { "today" } }
            div { b { (usd(report.total.usd)) } small { "in all, " (report.total.calls) " calls" } }
            @if report.total.unpriced_calls > 0 {
                div { b { (report.total.unpriced_calls) } small { "calls without a price" } }
            }
        }
        h2 { "Per day" small { " · the last " (chart::DAYS) " days" } }
        @if days.is_empty() { p { small { "No model calls in the last " (chart::DAYS) " days." } } }
        @else { (chart::per_day(&days)) }
        h2 { "Per project" }
        @if projects.is_empty() { p { small { "No model calls yet." } } }
        @else {
            (chart::per_project(&projects))
            table .list #costs-projects {
                tr .head { th { "Project" } th .num { "Spend" } th .num { "Calls" } }
                @for (p, b) in &report.by_project {
                    tr {
                        td { @if p == "main" { "MainAgent" } @else { a href={ "/projects/" (p) } { (p) } } }
                        td .num data-label="Spend" { (usd(b.usd)) }
                        td .num data-label="Calls" { (b.calls) }
                    }
                }
            }
        }
    };
    respond(StatusCode::OK, "Costs", None, Some(Nav::Costs), body)
}

pub(super) async fn crashes(State(d): State<Dash>) -> Response {
    let list = project_list(&d).await;
    let home = d.door.home().clone();
    let rows = pegasus_fs::blocking(move || {
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
        @if rows.is_empty() { p { small { "No crashes recorded." } } }
        table .list #crashes data-live="" {
            tr .head { th { "When" } th { "Project" } th { "What" } }
            @for (p, r) in &rows {
                tr {
                    td { time datetime=(r.ts.to_rfc3339()) { (r.ts.format("%Y-%m-%d %H:%M:%S UTC")) } }
                    td data-label="Project" { a href={ "/projects/" (p) } { (p) } }
                    td data-label="What" { (r.reason) }
                }
            }
        }
    };
    respond(StatusCode::OK, "Crashes", None, Some(Nav::Crashes), body)
}

/// `/search?q=WORDS`: the header's search box answered, best first; the same search (and
/// the same checks) as `GET /api/search`.
pub(super) async fn search(
    State(d): State<Dash>,
    axum::extract::Query(q): axum::extract::Query<crate::api::SearchQuery>,
) -> Response {
    let words = q.q.clone();
    let (status, results) = if words.trim().is_empty() {
        let hint =
            "Words to find in every project's sessions, tasks and memory, and the MainAgent's.";
        (StatusCode::OK, html! { p { (hint) } })
    } else {
        match crate::api::find(&d, q).await {
            Ok(found) => (
                StatusCode::OK,
                html! {
                    @for w in &found.warnings { p .bad { (w) } }
                    @if found.hits.is_empty() { p { "No match for “" (words.trim()) "”." } }
                    ol .hits {
                        @for h in &found.hits {
                            li {
                                p {
                                    @if h.project == pegasus_search::MAIN { "MainAgent" }
                                    @else { a href={ "/projects/" (h.project) } { (h.project) } }
                                    " · " (h.kind) " · " code { (h.location) }
                                }
                                p { (highlighted(h)) }
                            }
                        }
                    }
                },
            ),
            Err((status, message)) => (status, html! { p .bad { (message) } }),
        }
    };
    let body = html! {
        h1 { "Search" }
        form .row action="/search" method="get" role="search" {
            input type="search" name="q" value=(words) aria-label="Search sessions, tasks and memory";
            button type="submit" { "Search" }
        }
        (results)
    };
    respond(status, "Search", None, None, body)
}

/// A hit's snippet with the words found marked (every piece escaped).
fn highlighted(h: &pegasus_search::Hit) -> Markup {
    let mut parts: Vec<(&str, bool)> = Vec::new();
    let mut at = 0;
    for r in &h.highlights {
        if let (Some(before), Some(word)) = (h.snippet.get(at..r.start), h.snippet.get(r.clone())) {
            parts.extend([(before, false), (word, true)]);
            at = r.end;
        }
    }
    parts.push((h.snippet.get(at..).unwrap_or(""), false));
    html! {
        @for (text, found) in parts {
            @if found { mark { (text) } } @else { (text) }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn every_page_is_escaped_and_loads_nothing_from_elsewhere() {
        let html = page(
            "<t>",
            Some("a\"b"),
            Some(Nav::Costs),
            html! { p { "<script>x</script>" } },
        )
        .into_string();
        assert!(html.contains("&lt;t&gt; · Pegasus"), "{html}");
        assert!(html.contains("data-project=\"a&quot;b\""), "{html}");
        assert!(html.contains("&lt;script&gt;x&lt;/script&gt;"), "{html}");
        assert!(html.contains("<meta name=\"viewport\""), "{html}");
        assert!(!html.contains("http://") && !html.contains("https://") && !html.contains("//cdn"));
        assert!(
            !html.contains(" style="),
            "inline styles would need the CSP to allow them"
        );
        assert!(html.contains("<header>"), "{html}");
        let resp = with_headers(StatusCode::OK, html! {});
        assert_eq!(resp.headers()[header::CONTENT_SECURITY_POLICY], CSP);
    }

    /// A fallback model that answered lately is said where the project's state is, on the
    /// projects page and the project's own.
    #[test]
    fn a_fallback_that_answered_is_shown_with_why() {
        let mut p = pegasus_store::project_info::from_entry(
            &pegasus_store::ScanEntry {
                name: "web".into(),
                dir: std::path::PathBuf::new(),
                project: Err(pegasus_store::StoreError::Invalid("x".into())),
            },
            0.0,
        );
        p.error = None;
        assert!(!doing(&p).into_string().contains("fallback"));
        p.fallbacks = vec![pegasus_proto::ctl::FallbackInfo {
            project: "web".into(),
            model: "fa/<b>".into(),
            from: "fa/a".into(),
            why: "overloaded (529)".into(),
            calls: 2,
            since: "2026-11-29T12:04:00Z".into(),
            last: "2026-11-29T12:05:00Z".into(),
        }];
        let html = doing(&p).into_string();
        assert!(
            html.contains(
                "fallback fa/&lt;b&gt; served 2 calls since 12:04 UTC: fa/a overloaded (529)"
            ),
            "{html}"
        );
    }

    #[test]
    fn a_task_card_shows_only_its_allowed_buttons() {
        let now = chrono::Utc::now();
        let mut t: Task = serde_json::from_value(serde_json::json!({
            "id": "t-20260101-abcdef", "project": "p", "title": "<b>x</b>", "type": "task",
            "state": "running", "created": now, "updated": now,
        }))
        .unwrap();
        let card = task_card(&t, false).into_string();
        assert!(card.contains("&lt;b&gt;x&lt;/b&gt;"), "{card}");
        assert!(card.contains("data-action=\"cancel\""), "{card}");
        assert!(
            !card.contains("data-action=\"retry\"") && !card.contains("answer"),
            "{card}"
        );
        t.state = TaskState::Done;
        let card = task_card(&t, false).into_string();
        assert!(!card.contains("<button"), "{card}");
        t.state = TaskState::Blocked;
        t.question = Some("which?".into());
        let card = task_card(&t, false).into_string();
        assert!(
            card.contains("/answer") && card.contains("Question: which?"),
            "{card}"
        );
    }
}
