//! `/api/...`: JSON in the shapes `pegasusctl --json` prints. Changes go through the same
//! handlers as the control socket; reads of files (tasks, session, roles, costs) use the same
//! readers as the CLI. Errors are `{"error": "..."}` with 400, 404, 409 or 500, and [`json_errors`]
//! makes every other error answer JSON too.

use crate::auth::error;
use crate::Dash;
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use pegasus_proto::ctl::{
    AddTask, CreateProject, CtlRequest, CtlResponse, ErrorKind, LifecycleVerb, ProjectFilter,
    TaskVerb,
};
use pegasus_proto::Channel;
use serde::Deserialize;
use serde_json::{json, Value};

/// The one mapping from a daemon answer to HTTP.
fn answer(resp: CtlResponse) -> Response {
    match resp {
        CtlResponse::Status(s) => Json(s).into_response(),
        CtlResponse::Project(p) => Json(*p).into_response(),
        CtlResponse::Projects(list) => Json(list).into_response(),
        CtlResponse::Sent { id } => Json(json!({"id": id})).into_response(),
        CtlResponse::Reply { id, text } => Json(json!({"id": id, "reply": text})).into_response(),
        CtlResponse::Done { message } => {
            Json(json!({"ok": true, "message": message})).into_response()
        }
        CtlResponse::TaskAdded { id, message } => {
            Json(json!({"id": id, "message": message})).into_response()
        }
        CtlResponse::Failed { kind, message } => error(status_of(kind), &message),
        CtlResponse::Approvals(list) => Json(list).into_response(),
        other => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("unexpected answer {other:?}"),
        ),
    }
}

/// The middleware around everything (the auth guard included): every error answer is
/// `{"error": "..."}` with `Content-Type: application/json` (DESIGN.md §11). What the handlers and
/// the guard answer already is; what axum answers by itself is plain text or empty — a body
/// that is not JSON (400), a wrong field (422), no JSON content type (415), a body over the
/// limit (413), a bad query string or path (400), an unknown route (404), a method the route
/// does not take (405) — and is rewritten here with its status, its text and what to do.
/// Outside `/api/` an HTML page (the login page, a page's "not found") stays a page.
pub(super) async fn json_errors(req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let resp = next.run(req).await;
    let status = resp.status();
    if !status.is_client_error() && !status.is_server_error() {
        return resp;
    }
    let content_type = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let api = path.starts_with("/api/") || path == "/api";
    if content_type.starts_with("application/json")
        || (content_type.starts_with("text/html") && !api)
    {
        return resp;
    }
    let allow = resp.headers().get(header::ALLOW).cloned();
    let text = if content_type.starts_with("text/plain") {
        match axum::body::to_bytes(resp.into_body(), 4096).await {
            Ok(b) => String::from_utf8_lossy(&b)
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>()
                .join(" "),
            Err(_) => String::new(),
        }
    } else {
        String::new()
    };
    let mut out = error(
        status,
        &what_went_wrong(status, &method, &path, api, allow.as_ref(), &text),
    );
    if let Some(allow) = allow {
        out.headers_mut().insert(header::ALLOW, allow);
    }
    out
}

/// One line for an error axum answered by itself: its own text when it has one, and what to do.
fn what_went_wrong(
    status: StatusCode,
    method: &Method,
    path: &str,
    api: bool,
    allow: Option<&HeaderValue>,
    text: &str,
) -> String {
    let text = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_string()
    } else {
        text.to_string()
    };
    match status {
        StatusCode::NOT_FOUND if api => format!(
            "no API route {method} {path}: the routes are /api/status, /api/projects[/NAME[/tasks|/session|/messages|/ACTION]], /api/tasks/ID[/ACTION], /api/roles, /api/costs, /api/search?q= and /api/events"
        ),
        StatusCode::NOT_FOUND => format!(
            "no page {path}: the pages are /, /projects/NAME, /search, /costs and /crashes"
        ),
        StatusCode::METHOD_NOT_ALLOWED => {
            match allow.and_then(|a| a.to_str().ok()).filter(|a| !a.is_empty()) {
                Some(a) => format!("{method} is not allowed on {path}: use {a}"),
                None => format!("{method} is not allowed on {path}"),
            }
        }
        StatusCode::UNSUPPORTED_MEDIA_TYPE => {
            "the body must be JSON, sent with `Content-Type: application/json`".to_string()
        }
        StatusCode::PAYLOAD_TOO_LARGE => {
            format!("{text}: the request body is over the limit (2 MiB); send less")
        }
        _ => text,
    }
}

/// The HTTP status of a refused request, from its kind (never its text): 404 for what does
/// not exist, 409 for an id used before for something else, 500 for pegasusd's own
/// failures, 400 for the rest.
pub(super) fn status_of(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::Conflict => StatusCode::CONFLICT,
        ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        ErrorKind::Invalid
        | ErrorKind::Refused
        | ErrorKind::BudgetExceeded
        | ErrorKind::Unavailable => StatusCode::BAD_REQUEST,
    }
}

async fn call(d: &Dash, req: CtlRequest) -> Response {
    answer(d.door.request(&Channel::Dashboard, req).await)
}

fn bad(e: impl std::fmt::Display) -> Response {
    error(StatusCode::BAD_REQUEST, &e.to_string())
}

#[allow(clippy::result_large_err)] // a Response is what the caller returns anyway
fn project_dir(d: &Dash, name: &str) -> Result<std::path::PathBuf, Response> {
    pegasus_store::validate_name(name).map_err(bad)?;
    let dir = d.door.home().project_dir(name);
    if !dir.join("PROJECT.md").exists() {
        return Err(error(
            StatusCode::NOT_FOUND,
            &format!("project {name} not found"),
        ));
    }
    Ok(dir)
}

pub(super) async fn status(State(d): State<Dash>) -> Response {
    call(&d, CtlRequest::Status).await
}

#[derive(Deserialize)]
pub(super) struct ListQuery {
    status: Option<String>,
}

pub(super) async fn projects(State(d): State<Dash>, Query(q): Query<ListQuery>) -> Response {
    let status = match q.status.as_deref().map(ProjectFilter::parse).transpose() {
        Ok(status) => status,
        Err(e) => return bad(e),
    };
    call(&d, CtlRequest::ProjectList { status }).await
}

#[derive(Deserialize)]
pub(super) struct NewProject {
    name: String,
    goal: String,
    background: Option<String>,
    constraints: Option<String>,
    model: Option<String>,
    workdir: Option<String>,
}

pub(super) async fn create_project(State(d): State<Dash>, Json(p): Json<NewProject>) -> Response {
    call(
        &d,
        CtlRequest::ProjectCreate(CreateProject {
            name: p.name,
            goal: p.goal,
            background: p.background,
            constraints: p.constraints,
            model: p.model,
            workdir: p.workdir,
        }),
    )
    .await
}

/// `project show --json`: the project, its task counts, MCP servers and kept branches.
pub(super) async fn project(State(d): State<Dash>, Path(name): Path<String>) -> Response {
    let resp = d
        .door
        .request(
            &Channel::Dashboard,
            CtlRequest::ProjectShow { name: name.clone() },
        )
        .await;
    let CtlResponse::Project(info) = resp else {
        return answer(resp);
    };
    let dir = d.door.home().project_dir(&name);
    let mut counts = std::collections::BTreeMap::new();
    if let Ok(store) = pegasus_tasks::TaskStore::open(&dir, &name) {
        for t in store.list().unwrap_or_default() {
            *counts.entry(t.state.as_str().to_string()).or_insert(0u64) += 1;
        }
    }
    let mut v = serde_json::to_value(&*info).unwrap_or(Value::Null);
    v["tasks"] = json!(counts);
    v["mcp_servers"] = json!(pegasus_store::mcp::read_mcp_status(&dir));
    Json(v).into_response()
}

pub(super) async fn lifecycle(
    State(d): State<Dash>,
    Path((name, verb)): Path<(String, String)>,
) -> Response {
    let verb = match verb.as_str() {
        "suspend" => LifecycleVerb::Suspend,
        "resume" => LifecycleVerb::Resume,
        "complete" => LifecycleVerb::Complete,
        "archive" => LifecycleVerb::Archive,
        other => {
            return error(
                StatusCode::NOT_FOUND,
                &format!("no action `{other}`: use suspend, resume, complete or archive"),
            )
        }
    };
    call(&d, CtlRequest::ProjectLifecycle { name, verb }).await
}

#[derive(Deserialize)]
pub(super) struct Text {
    text: String,
}

/// `POST /api/projects/:name/messages`; an `Idempotency-Key` header is the message's client
/// id (DESIGN.md §11): a repeat is answered with the first message's id, and the same key with
/// another text is a 409.
pub(super) async fn send(
    State(d): State<Dash>,
    Path(name): Path<String>,
    headers: axum::http::HeaderMap,
    Json(t): Json<Text>,
) -> Response {
    let client_id = match headers.get("idempotency-key").map(|v| v.to_str()) {
        None => None,
        Some(Ok(key)) => Some(key.to_string()),
        Some(Err(_)) => return bad("the Idempotency-Key header must be visible ASCII"),
    };
    call(
        &d,
        CtlRequest::ProjectSend {
            name,
            text: t.text,
            wait: false,
            client_id,
        },
    )
    .await
}

#[derive(Deserialize)]
pub(super) struct Since {
    since: Option<usize>,
}

/// The session's records from index `since` on, and the index to ask from next time.
pub(super) async fn session(
    State(d): State<Dash>,
    Path(name): Path<String>,
    Query(q): Query<Since>,
) -> Response {
    let dir = match project_dir(&d, &name) {
        Ok(d) => d,
        Err(r) => return r,
    };
    let loaded = pegasus_fs::blocking(move || pegasus_store::load_session(&dir)).await;
    match loaded {
        Ok(Ok(s)) => {
            let from = q.since.unwrap_or(0).min(s.records.len());
            Json(json!({"records": &s.records[from..], "next": s.records.len()})).into_response()
        }
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

pub(super) async fn tasks(State(d): State<Dash>, Path(name): Path<String>) -> Response {
    let dir = match project_dir(&d, &name) {
        Ok(d) => d,
        Err(r) => return r,
    };
    match pegasus_tasks::TaskStore::open(&dir, &name).and_then(|s| s.list()) {
        Ok(list) => Json(list).into_response(),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

#[derive(Deserialize)]
pub(super) struct NewTask {
    goal: String,
    title: Option<String>,
    role: Option<String>,
    #[serde(default)]
    repos: Vec<String>,
    #[serde(default)]
    depends_on: Vec<String>,
    #[serde(default = "default_priority")]
    priority: u8,
    #[serde(default)]
    acceptance: Vec<String>,
}

fn default_priority() -> u8 {
    2
}

pub(super) async fn add_task(
    State(d): State<Dash>,
    Path(name): Path<String>,
    Json(t): Json<NewTask>,
) -> Response {
    let resp = d
        .door
        .request(
            &Channel::Dashboard,
            CtlRequest::TaskAdd(AddTask {
                project: name.clone(),
                goal: t.goal,
                title: t.title,
                role: t.role,
                repos: t.repos,
                depends_on: t.depends_on,
                priority: t.priority,
                acceptance: t.acceptance,
                budget_usd: None,
            }),
        )
        .await;
    match resp {
        // `task add --json` prints the task.
        CtlResponse::TaskAdded { id, .. } => {
            match pegasus_tasks::find_task(&d.door.home().projects_dir(), &id)
                .and_then(|(_, store)| store.get(&id))
            {
                Ok(task) => (StatusCode::CREATED, Json(task)).into_response(),
                Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
            }
        }
        other => answer(other),
    }
}

/// `task show --json`: `{task, history}`.
pub(super) async fn task(State(d): State<Dash>, Path(id): Path<String>) -> Response {
    match pegasus_tasks::find_task(&d.door.home().projects_dir(), &id)
        .and_then(|(_, store)| Ok((store.get(&id)?, store.history(&id)?)))
    {
        Ok((task, history)) => Json(json!({"task": task, "history": history})).into_response(),
        Err(e) => error(StatusCode::NOT_FOUND, &e.to_string()),
    }
}

pub(super) async fn task_verb(
    State(d): State<Dash>,
    Path((id, verb)): Path<(String, String)>,
    body: Option<Json<Text>>,
) -> Response {
    let simple = match verb.as_str() {
        "cancel" => Some(TaskVerb::Cancel),
        "retry" => Some(TaskVerb::Retry),
        "approve" => Some(TaskVerb::Approve),
        "replay" => Some(TaskVerb::Replay),
        "merge" => Some(TaskVerb::Merge),
        _ => None,
    };
    let req = match (simple, verb.as_str()) {
        (Some(verb), _) => CtlRequest::TaskVerb { id, verb },
        (None, "answer") => match body {
            Some(Json(t)) if !t.text.trim().is_empty() => {
                CtlRequest::TaskAnswer { id, text: t.text }
            }
            _ => return bad("an answer needs a body {\"text\": \"...\"}"),
        },
        (None, other) => {
            return error(
                StatusCode::NOT_FOUND,
                &format!(
                    "no action `{other}`: use cancel, retry, approve, replay, answer or merge"
                ),
            )
        }
    };
    call(&d, req).await
}

/// `GET /api/approvals[?project=NAME]`: the tool calls waiting for a person, oldest first.
pub(super) async fn approvals(State(d): State<Dash>, Query(q): Query<ApprovalsQuery>) -> Response {
    call(&d, CtlRequest::Approvals { project: q.project }).await
}

#[derive(Deserialize)]
pub(super) struct ApprovalsQuery {
    project: Option<String>,
}

/// `POST /api/approvals/:id/approve` (`{"always": true}` optional) or `.../deny`
/// (`{"reason": "..."}` optional).
pub(super) async fn approval_answer(
    State(d): State<Dash>,
    Path((id, verb)): Path<(String, String)>,
    body: Option<Json<ApprovalBody>>,
) -> Response {
    let body = body.map(|Json(b)| b).unwrap_or_default();
    let approve = match verb.as_str() {
        "approve" => true,
        "deny" => false,
        other => {
            return error(
                StatusCode::NOT_FOUND,
                &format!("no action `{other}`: use approve or deny"),
            )
        }
    };
    call(
        &d,
        CtlRequest::ApprovalAnswer {
            id,
            approve,
            always: approve && body.always,
            reason: if approve { None } else { body.reason },
        },
    )
    .await
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct ApprovalBody {
    #[serde(default)]
    always: bool,
    #[serde(default)]
    reason: Option<String>,
}

pub(super) async fn roles(State(d): State<Dash>) -> Response {
    match pegasus_roles::load_roles(&d.door.home().roles_dir()) {
        Ok(roles) => Json(roles).into_response(),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

#[derive(Deserialize)]
pub(super) struct CostQuery {
    since: Option<String>,
    project: Option<String>,
}

pub(super) async fn costs(State(d): State<Dash>, Query(q): Query<CostQuery>) -> Response {
    let since = match q.since.as_deref().filter(|s| !s.is_empty()) {
        None => None,
        Some(s) => match chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d") {
            Ok(d) => Some(d),
            Err(_) => return bad(format!("bad since `{s}`: use YYYY-MM-DD")),
        },
    };
    let ledger = d.door.home().ledger_file();
    let project = q.project.filter(|p| !p.is_empty());
    match pegasus_fs::blocking(move || {
        pegasus_store::cost_report(&ledger, project.as_deref(), since)
    })
    .await
    {
        Ok(Ok(r)) => Json(r).into_response(),
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

/// `GET /api/search?q=WORDS[&project=NAME][&kind=session|task|memory][&limit=N]`.
#[derive(Deserialize, Default)]
pub(super) struct SearchQuery {
    #[serde(default)]
    pub(super) q: String,
    pub(super) project: Option<String>,
    pub(super) kind: Option<String>,
    pub(super) limit: Option<usize>,
}

/// `search --json`: the hits, best first, in the same shape.
pub(super) async fn search(State(d): State<Dash>, Query(q): Query<SearchQuery>) -> Response {
    match find(&d, q).await {
        Ok(found) => Json(found.hits).into_response(),
        Err((status, message)) => error(status, &message),
    }
}

/// Runs a search for the API and the search page: the query checked, the index caught up and
/// asked on a blocking thread (a damaged index is rebuilt and logged, never an error).
pub(super) async fn find(
    d: &Dash,
    q: SearchQuery,
) -> Result<pegasus_search::Found, (StatusCode, String)> {
    if q.q.trim().is_empty() {
        return Err((
            StatusCode::BAD_REQUEST,
            "give the words to find: /api/search?q=WORDS".into(),
        ));
    }
    let kind = match q.kind.as_deref().filter(|k| !k.is_empty()) {
        None => None,
        Some(k) => Some(pegasus_search::Kind::parse(k).ok_or_else(|| {
            (
                StatusCode::BAD_REQUEST,
                format!("unknown kind `{k}`: use session, task or memory"),
            )
        })?),
    };
    let limit = q.limit.unwrap_or(pegasus_search::DEFAULT_LIMIT);
    if !(1..=pegasus_search::MAX_LIMIT).contains(&limit) {
        return Err((
            StatusCode::BAD_REQUEST,
            format!(
                "limit {limit} is out of range: use 1 to {}",
                pegasus_search::MAX_LIMIT
            ),
        ));
    }
    let project = q.project.filter(|p| !p.is_empty());
    if let Some(name) = project.as_deref().filter(|n| *n != pegasus_search::MAIN) {
        if let Err(resp) = project_dir(d, name) {
            return Err((resp.status(), format!("project {name} not found")));
        }
    }
    let query = pegasus_search::Query {
        text: q.q,
        project,
        kind,
        limit: Some(limit),
    };
    let home = d.door.home().clone();
    match pegasus_fs::blocking(move || pegasus_search::search(&home, &query)).await {
        Ok(Ok(found)) => Ok(found),
        Ok(Err(e @ pegasus_search::SearchError::EmptyQuery(_))) => {
            Err((StatusCode::BAD_REQUEST, e.to_string()))
        }
        Ok(Err(e)) => Err((StatusCode::INTERNAL_SERVER_ERROR, e.to_string())),
        Err(e) => Err((StatusCode::INTERNAL_SERVER_ERROR, e.to_string())),
    }
}
