//! A fake of Asana's REST API (`/api/1.0`), the part a board sync uses, as strict as the real
//! one where a client could get it wrong; shapes and errors follow Asana's published OpenAPI
//! description (`github.com/Asana/openapi`, `defs/asana_oas.yaml`):
//!
//! * every answer is a `{"data": ...}` envelope, every refusal `{"errors": [{"message", "help"}]}`
//!   with the status the API gives (400 bad input, 401 no or wrong token, 403, 404 unknown
//!   object or route, 412 sync token, 429 rate limit with `Retry-After`);
//! * a request needs `Authorization: Bearer <token>` of a known user; a write's `data` with a
//!   field the resource does not have is refused (400), and so is one missing a required field;
//! * objects come back compact (`gid`, `resource_type`, `name`) unless `opt_fields` names more
//!   (an unknown one is refused); lists page with `limit` (1 to 100) and `offset`, answering
//!   `next_page` (`{offset, path, uri}` or `null`) when a `limit` was given;
//! * `GET /events?resource=PROJECT&sync=TOKEN` answers 412 with a fresh `sync` token when the
//!   token is missing, unknown or expired ([`FakeAsana::expire_sync_tokens`]), else the events
//!   since it (at most 100, `has_more`) and the next token; a project's events include its
//!   tasks' and their stories' (they "bubble up");
//! * `html_notes` and a story's `html_text` must be a `<body>` of well-formed XML using only the
//!   tags Asana allows ([`ALLOWED_TAGS`]); anything else is a 400, as on the real API;
//! * sections (created, ordered with `sections/insert`, tasks moved with `addTask`), custom
//!   fields (`text`, `number` with its `precision`, `enum` with its options, an option added
//!   with `POST /custom_fields/{gid}/enum_options`: 201, 403 on a field another user locked
//!   ([`FakeAsana::lock_field`]), 404 unknown field, 400 not an enum / both anchors / a bad
//!   anchor or colour / over 500 options), their settings on projects, stories (comments),
//!   dependencies.
//!
//! A test acts as the board's human user without HTTP through [`FakeAsana::as_user`], which
//! runs the same handler under that user's identity; [`FakeAsana::rate_limit`] makes the next
//! requests answer 429. Served on its own thread and runtime, like [`crate::FakeLlm`].

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use serde_json::{json, Map, Value};
use tokio::net::TcpStream;

use crate::background::Background;
use crate::http::{write_full, Conn};

/// The path every route is under, as on `app.asana.com`.
pub const API_PREFIX: &str = "/api/1.0";

/// The tags `html_notes` and `html_text` may use (Asana's rich text); the root is `<body>`.
pub const ALLOWED_TAGS: &[&str] = &[
    "body",
    "strong",
    "em",
    "u",
    "s",
    "code",
    "pre",
    "a",
    "ul",
    "ol",
    "li",
    "blockquote",
    "h1",
    "h2",
    "hr",
];

/// The message of Asana's 429.
pub const RATE_LIMITED: &str = "You have made too many requests recently. Please, be chill.";

/// One request the fake answered.
#[derive(Debug, Clone)]
pub struct AsanaRequest {
    /// `GET`, `POST`, `PUT`.
    pub method: String,
    /// The path below [`API_PREFIX`], with its query.
    pub target: String,
    /// The status answered.
    pub status: u16,
    /// When it arrived.
    pub at: Instant,
}

#[derive(Debug, Clone)]
struct User {
    gid: String,
    name: String,
    token: String,
}

#[derive(Debug, Clone)]
struct Project {
    name: String,
    sections: Vec<String>,
    /// Custom field gids, in setting order.
    fields: Vec<String>,
    /// Task gids in the project.
    tasks: Vec<String>,
}

#[derive(Debug, Clone)]
enum FieldKind {
    Text,
    Number { precision: u64 },
    Enum { options: Vec<(String, String)> },
}

#[derive(Debug, Clone)]
struct Field {
    name: String,
    kind: FieldKind,
    /// The user who locked the field in Asana's web app ([`FakeAsana::lock_field`]): only
    /// they may add options to it.
    locked_by: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
enum FieldValue {
    Text(String),
    Number(f64),
    Enum(String),
}

#[derive(Debug, Clone)]
struct Task {
    name: String,
    html_notes: String,
    completed: bool,
    created_at: String,
    modified_at: String,
    /// (project, section).
    memberships: Vec<(String, String)>,
    values: BTreeMap<String, FieldValue>,
    dependencies: Vec<String>,
    stories: Vec<String>,
}

#[derive(Debug, Clone)]
struct Story {
    task: String,
    author: String,
    html_text: String,
    created_at: String,
}

#[derive(Debug, Clone)]
struct Event {
    /// Projects whose event stream shows it.
    projects: Vec<String>,
    body: Value,
}

#[derive(Default)]
struct World {
    next_gid: u64,
    clock: u64,
    workspace: String,
    users: Vec<User>,
    projects: BTreeMap<String, Project>,
    sections: BTreeMap<String, (String, String)>,
    fields: BTreeMap<String, Field>,
    tasks: BTreeMap<String, Task>,
    stories: BTreeMap<String, Story>,
    events: Vec<Event>,
    /// Sync token → (project, index into `events` it was issued at).
    syncs: BTreeMap<String, (String, usize)>,
    rate_limits: VecDeque<u64>,
    requests: Vec<AsanaRequest>,
}

/// The colours an enum option may have (Asana's palette).
const OPTION_COLORS: &[&str] = &[
    "none",
    "red",
    "orange",
    "yellow-orange",
    "yellow",
    "yellow-green",
    "green",
    "blue-green",
    "aqua",
    "blue",
    "indigo",
    "purple",
    "magenta",
    "hot-pink",
    "pink",
    "cool-gray",
];

/// The most enum options a custom field can have, disabled ones included.
const MAX_ENUM_OPTIONS: usize = 500;

/// An answer: status, body, and whether it carries `Retry-After`.
struct Answer {
    status: u16,
    body: Value,
    retry_after: Option<u64>,
}

fn ok(data: Value) -> Answer {
    Answer {
        status: 200,
        body: json!({ "data": data }),
        retry_after: None,
    }
}

fn refuse(status: u16, message: impl Into<String>) -> Answer {
    Answer {
        status,
        body: json!({"errors": [{
            "message": message.into(),
            "help": "For more information on API status codes and how to handle them, read the docs on errors: https://developers.asana.com/docs/errors",
        }]}),
        retry_after: None,
    }
}

type Res = Result<Value, Answer>;

/// The fake server; dropping it stops it.
pub struct FakeAsana {
    shared: Arc<Mutex<World>>,
    server: Background,
    project: String,
    bot_token: String,
    user_token: String,
}

fn lock(m: &Mutex<World>) -> MutexGuard<'_, World> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl FakeAsana {
    /// A workspace with two users (the bot, whose token is `bot_token`, and a human, "Ada")
    /// and one project, "Board", with the one section a new Asana project has ("Untitled
    /// section").
    pub fn start(bot_token: &str) -> std::io::Result<FakeAsana> {
        let mut w = World {
            next_gid: 1_200_000_000_000_000,
            clock: 0,
            ..World::default()
        };
        w.workspace = w.gid();
        let bot = w.gid();
        w.users.push(User {
            gid: bot,
            name: "Pegasus Bot".into(),
            token: bot_token.to_string(),
        });
        let user_token = format!("2/{}/ada", w.next_gid);
        let ada = w.gid();
        w.users.push(User {
            gid: ada,
            name: "Ada".into(),
            token: user_token.clone(),
        });
        let project = w.gid();
        w.projects.insert(
            project.clone(),
            Project {
                name: "Board".into(),
                sections: Vec::new(),
                fields: Vec::new(),
                tasks: Vec::new(),
            },
        );
        let s = w.gid();
        w.sections
            .insert(s.clone(), (project.clone(), "Untitled section".into()));
        if let Some(p) = w.projects.get_mut(&project) {
            p.sections.push(s);
        }
        let shared = Arc::new(Mutex::new(w));
        let s = shared.clone();
        let server = Background::start("fakeasana", move |stream| connection(s.clone(), stream))?;
        Ok(FakeAsana {
            shared,
            server,
            project,
            bot_token: bot_token.to_string(),
            user_token,
        })
    }

    /// `http://127.0.0.1:PORT/api/1.0`, what `asana.base_url` is set to.
    pub fn base_url(&self) -> String {
        format!("http://{}{API_PREFIX}", self.server.addr())
    }

    /// The gid of the project "Board".
    pub fn project(&self) -> String {
        self.project.clone()
    }

    /// The bot's token, as given to [`FakeAsana::start`].
    pub fn bot_token(&self) -> &str {
        &self.bot_token
    }

    /// One request as the human user Ada, through the same handler as HTTP (so what she does
    /// is validated and makes events): `path` below [`API_PREFIX`], with its query; `body` the
    /// JSON body of a write. Returns the status and the answer's JSON.
    pub fn as_user(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let raw = body.map(|b| b.to_string()).unwrap_or_default();
        let a = handle(
            &self.shared,
            method,
            &format!("{API_PREFIX}{path}"),
            Some(&self.user_token),
            raw.as_bytes(),
            false,
        );
        (a.status, a.body)
    }

    /// The next `n` requests (of the bot) answer 429 with `Retry-After: retry_after_s`.
    pub fn rate_limit(&self, n: usize, retry_after_s: u64) {
        let mut w = lock(&self.shared);
        for _ in 0..n {
            w.rate_limits.push_back(retry_after_s);
        }
    }

    /// Every sync token given so far expires: the next `GET /events` answers 412.
    pub fn expire_sync_tokens(&self) {
        lock(&self.shared).syncs.clear();
    }

    /// Every request the bot made over HTTP, in order.
    pub fn requests(&self) -> Vec<AsanaRequest> {
        lock(&self.shared).requests.clone()
    }

    /// The names of the project's sections, in order.
    pub fn section_names(&self) -> Vec<String> {
        let w = lock(&self.shared);
        w.projects
            .get(&self.project)
            .map(|p| {
                p.sections
                    .iter()
                    .filter_map(|s| w.sections.get(s).map(|(_, n)| n.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The names of the custom fields set on the project, in order.
    pub fn field_names(&self) -> Vec<String> {
        let w = lock(&self.shared);
        w.projects
            .get(&self.project)
            .map(|p| {
                p.fields
                    .iter()
                    .filter_map(|f| w.fields.get(f).map(|f| f.name.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Locks the workspace's custom field `name` as the human user Ada does in Asana's web
    /// app: from then on only she may add options to it (the bot gets a 403).
    pub fn lock_field(&self, name: &str) {
        let mut w = lock(&self.shared);
        let ada = w.users.get(1).map(|u| u.gid.clone());
        if let Some(f) = w.fields.values_mut().find(|f| f.name == name) {
            f.locked_by = ada;
        }
    }

    /// The option names of the workspace's enum custom field `name`, in order.
    pub fn field_options(&self, name: &str) -> Vec<String> {
        let w = lock(&self.shared);
        match w.fields.values().find(|f| f.name == name).map(|f| &f.kind) {
            Some(FieldKind::Enum { options }) => options.iter().map(|(_, n)| n.clone()).collect(),
            _ => Vec::new(),
        }
    }

    /// How many custom fields the workspace has (a sync must not create one twice).
    pub fn workspace_field_count(&self) -> usize {
        lock(&self.shared).fields.len()
    }

    /// The name of the section task `gid` is in (in the project), if any.
    pub fn section_of(&self, gid: &str) -> Option<String> {
        let w = lock(&self.shared);
        let t = w.tasks.get(gid)?;
        let (_, s) = t.memberships.iter().find(|(p, _)| *p == self.project)?;
        w.sections.get(s).map(|(_, n)| n.clone())
    }

    /// The value of custom field `field` (by name) on task `gid`, as its display value: the
    /// option's name, the number, the text.
    pub fn field_value(&self, gid: &str, field: &str) -> Option<String> {
        let w = lock(&self.shared);
        let t = w.tasks.get(gid)?;
        let (fgid, f) = w.fields.iter().find(|(_, f)| f.name == field)?;
        display(f, t.values.get(fgid)?)
    }

    /// The comments on task `gid`, oldest first: (author's name, `html_text`).
    pub fn comments(&self, gid: &str) -> Vec<(String, String)> {
        let w = lock(&self.shared);
        let Some(t) = w.tasks.get(gid) else {
            return Vec::new();
        };
        t.stories
            .iter()
            .filter_map(|s| w.stories.get(s))
            .map(|s| {
                let name = w
                    .users
                    .iter()
                    .find(|u| u.gid == s.author)
                    .map(|u| u.name.clone())
                    .unwrap_or_default();
                (name, s.html_text.clone())
            })
            .collect()
    }
}

fn display(f: &Field, v: &FieldValue) -> Option<String> {
    match (v, &f.kind) {
        (FieldValue::Text(t), _) => Some(t.clone()),
        (FieldValue::Number(n), FieldKind::Number { precision }) => {
            Some(format!("{n:.*}", *precision as usize))
        }
        (FieldValue::Number(n), _) => Some(n.to_string()),
        (FieldValue::Enum(o), FieldKind::Enum { options }) => {
            options.iter().find(|(g, _)| g == o).map(|(_, n)| n.clone())
        }
        (FieldValue::Enum(_), _) => None,
    }
}

impl World {
    fn gid(&mut self) -> String {
        self.next_gid += 1;
        self.next_gid.to_string()
    }

    fn now(&mut self) -> String {
        self.clock += 1;
        format!(
            "2026-11-29T{:02}:{:02}:{:02}.{:03}Z",
            (self.clock / 3_600_000) % 24,
            (self.clock / 60_000) % 60,
            (self.clock / 1000) % 60,
            self.clock % 1000
        )
    }

    fn user_compact(&self, gid: &str) -> Value {
        let name = self
            .users
            .iter()
            .find(|u| u.gid == gid)
            .map(|u| u.name.clone());
        json!({"gid": gid, "resource_type": "user", "name": name})
    }

    fn event(&mut self, projects: Vec<String>, mut body: Value, user: &str) {
        body["user"] = self.user_compact(user);
        body["created_at"] = json!(self.now());
        self.events.push(Event { projects, body });
    }

    fn task_projects(&self, gid: &str) -> Vec<String> {
        self.tasks
            .get(gid)
            .map(|t| t.memberships.iter().map(|(p, _)| p.clone()).collect())
            .unwrap_or_default()
    }

    fn section_json(&self, gid: &str) -> Value {
        let (project, name) = self.sections.get(gid).cloned().unwrap_or_default();
        let pname = self.projects.get(&project).map(|p| p.name.clone());
        json!({"gid": gid, "resource_type": "section", "name": name,
            "project": {"gid": project, "resource_type": "project", "name": pname},
            "created_at": "2026-11-29T00:00:00.000Z"})
    }

    fn field_json(&self, gid: &str, value: Option<&FieldValue>) -> Value {
        let Some(f) = self.fields.get(gid) else {
            return Value::Null;
        };
        let (subtype, extra) = match &f.kind {
            FieldKind::Text => (
                "text",
                json!({"text_value": match value { Some(FieldValue::Text(t)) => json!(t), _ => Value::Null }}),
            ),
            FieldKind::Number { precision } => (
                "number",
                json!({"precision": precision, "number_value": match value { Some(FieldValue::Number(n)) => json!(n), _ => Value::Null }}),
            ),
            FieldKind::Enum { options } => {
                let opt = |(g, n): &(String, String)| json!({"gid": g, "resource_type": "enum_option", "name": n, "enabled": true, "color": "none"});
                let chosen = match value {
                    Some(FieldValue::Enum(o)) => options
                        .iter()
                        .find(|(g, _)| g == o)
                        .map(opt)
                        .unwrap_or(Value::Null),
                    _ => Value::Null,
                };
                (
                    "enum",
                    json!({"enum_options": options.iter().map(opt).collect::<Vec<_>>(), "enum_value": chosen}),
                )
            }
        };
        let mut v = json!({"gid": gid, "resource_type": "custom_field", "name": f.name,
            "type": subtype, "resource_subtype": subtype,
            "display_value": value.and_then(|v| display(f, v))});
        if let (Value::Object(m), Value::Object(e)) = (&mut v, extra) {
            m.extend(e);
        }
        v
    }

    fn task_json(&self, gid: &str) -> Value {
        let Some(t) = self.tasks.get(gid) else {
            return Value::Null;
        };
        let memberships: Vec<Value> = t
            .memberships
            .iter()
            .map(|(p, s)| {
                let pname = self.projects.get(p).map(|p| p.name.clone());
                let sname = self.sections.get(s).map(|(_, n)| n.clone());
                json!({"project": {"gid": p, "resource_type": "project", "name": pname},
                    "section": {"gid": s, "resource_type": "section", "name": sname}})
            })
            .collect();
        let mut fields = Vec::new();
        for (p, _) in &t.memberships {
            for f in self
                .projects
                .get(p)
                .map(|p| p.fields.clone())
                .unwrap_or_default()
            {
                fields.push(self.field_json(&f, t.values.get(&f)));
            }
        }
        json!({
            "gid": gid, "resource_type": "task", "resource_subtype": "default_task",
            "name": t.name, "notes": plain(&t.html_notes), "html_notes": t.html_notes,
            "completed": t.completed, "created_at": t.created_at, "modified_at": t.modified_at,
            "memberships": memberships,
            "projects": t.memberships.iter().map(|(p, _)| json!({"gid": p, "resource_type": "project", "name": self.projects.get(p).map(|p| p.name.clone())})).collect::<Vec<_>>(),
            "custom_fields": fields,
            "dependencies": t.dependencies.iter().map(|d| json!({"gid": d, "resource_type": "task"})).collect::<Vec<_>>(),
            "workspace": {"gid": self.workspace, "resource_type": "workspace", "name": "Workspace"},
            "permalink_url": format!("https://app.asana.com/0/0/{gid}"),
        })
    }

    fn story_json(&self, gid: &str) -> Value {
        let Some(s) = self.stories.get(gid) else {
            return Value::Null;
        };
        json!({"gid": gid, "resource_type": "story", "resource_subtype": "comment_added",
            "type": "comment", "text": plain(&s.html_text), "html_text": s.html_text,
            "created_at": s.created_at, "created_by": self.user_compact(&s.author),
            "target": {"gid": s.task, "resource_type": "task"}})
    }
}

/// The text of rich text, as the API's `notes`/`text` give it: tags dropped, entities read.
fn plain(html: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

/// Checks rich text as Asana does: one `<body>` root, well-formed, allowed tags only, `href`
/// only on `<a>` (and `data-asana-*`), known entities. The error is the reason.
pub fn check_rich_text(html: &str) -> Result<(), String> {
    let s = html.trim();
    if !s.starts_with("<body>") || !s.ends_with("</body>") {
        return Err("the root element must be <body>".into());
    }
    let mut stack: Vec<String> = Vec::new();
    let mut rest = s;
    let mut closed_root = false;
    while let Some(i) = rest.find(['<', '&']) {
        if closed_root && !rest[..i].trim().is_empty() {
            return Err("text after </body>".into());
        }
        rest = &rest[i..];
        if rest.starts_with('&') {
            let end = rest.find(';').ok_or("an unterminated entity")?;
            let ent = &rest[1..end];
            let known = matches!(ent, "amp" | "lt" | "gt" | "quot" | "apos")
                || ent
                    .strip_prefix('#')
                    .is_some_and(|n| n.parse::<u32>().is_ok() || n.starts_with('x'));
            if !known {
                return Err(format!("unknown entity &{ent};"));
            }
            rest = &rest[end + 1..];
            continue;
        }
        let end = rest.find('>').ok_or("an unterminated tag")?;
        let tag = &rest[1..end];
        rest = &rest[end + 1..];
        if let Some(name) = tag.strip_prefix('/') {
            match stack.pop() {
                Some(open) if open == name.trim() => {
                    if stack.is_empty() {
                        closed_root = true;
                    }
                }
                other => {
                    return Err(format!(
                        "</{name}> closes {}",
                        other.map_or("nothing".into(), |o| format!("<{o}>"))
                    ))
                }
            }
            continue;
        }
        if closed_root {
            return Err("an element after </body>".into());
        }
        let self_closing = tag.ends_with('/');
        let tag = tag.trim_end_matches('/');
        let mut parts = tag.splitn(2, char::is_whitespace);
        let name = parts.next().unwrap_or_default();
        if !ALLOWED_TAGS.contains(&name) {
            return Err(format!("<{name}> is not an allowed tag"));
        }
        if stack.is_empty() && name != "body" {
            return Err("the root element must be <body>".into());
        }
        let attrs = parts.next().unwrap_or_default().trim();
        if !attrs.is_empty() {
            for attr in split_attrs(attrs)? {
                let ok = name == "a" && (attr == "href" || attr.starts_with("data-asana-"));
                if !ok {
                    return Err(format!("attribute `{attr}` is not allowed on <{name}>"));
                }
            }
        }
        if !self_closing {
            stack.push(name.to_string());
        } else if name != "hr" {
            return Err(format!("<{name}/> must have content"));
        }
    }
    if !stack.is_empty() || !closed_root {
        return Err(format!(
            "<{}> is not closed",
            stack.last().map_or("body", |s| s)
        ));
    }
    Ok(())
}

/// The names of `name="value"` attributes; a value must be quoted.
fn split_attrs(mut s: &str) -> Result<Vec<String>, String> {
    let mut names = Vec::new();
    while !s.is_empty() {
        let eq = s.find('=').ok_or("an attribute without a value")?;
        names.push(s[..eq].trim().to_string());
        let v = s[eq + 1..].trim_start();
        let q = v.chars().next().filter(|c| *c == '"' || *c == '\'');
        let q = q.ok_or("an unquoted attribute value")?;
        let close = v[1..].find(q).ok_or("an unterminated attribute value")?;
        s = v[close + 2..].trim_start();
    }
    Ok(names)
}

/// `a%2Cb` → `a,b`, `+` → space.
fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("zz");
                match u8::from_str_radix(hex, 16) {
                    Ok(v) => {
                        out.push(v);
                        i += 3;
                        continue;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn query(target: &str) -> BTreeMap<String, String> {
    target
        .split_once('?')
        .map(|(_, q)| {
            q.split('&')
                .filter(|kv| !kv.is_empty())
                .map(|kv| {
                    let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                    (decode(k), decode(v))
                })
                .collect()
        })
        .unwrap_or_default()
}

async fn connection(shared: Arc<Mutex<World>>, stream: TcpStream) {
    let mut conn = Conn::new(stream);
    while let Some(req) = conn.next_request().await {
        let token = req
            .headers
            .iter()
            .find(|(k, _)| k == "authorization")
            .and_then(|(_, v)| v.strip_prefix("Bearer "))
            .map(str::to_string);
        let a = handle(
            &shared,
            &req.method,
            &req.target,
            token.as_deref(),
            &req.body,
            true,
        );
        let mut extra = Vec::new();
        if let Some(s) = a.retry_after {
            extra.push(("Retry-After", s.to_string()));
        }
        let body = a.body.to_string();
        let wrote = write_full(
            &mut conn.stream,
            a.status,
            "application/json; charset=UTF-8",
            &extra,
            body.as_bytes(),
        )
        .await;
        if wrote.is_err() || !req.keep_alive {
            return;
        }
    }
}

/// One request: authenticated, rate-limited (HTTP only), routed, recorded.
fn handle(
    shared: &Mutex<World>,
    method: &str,
    target: &str,
    token: Option<&str>,
    body: &[u8],
    http: bool,
) -> Answer {
    let mut w = lock(shared);
    let path = target.split('?').next().unwrap_or_default();
    let answer = (|| {
        let Some(path) = path.strip_prefix(API_PREFIX) else {
            return refuse(404, "No matching route for request");
        };
        let user = match token.and_then(|t| w.users.iter().find(|u| u.token == t)) {
            Some(u) => u.gid.clone(),
            None => return refuse(401, "Not Authorized"),
        };
        if http {
            if let Some(s) = w.rate_limits.pop_front() {
                let mut a = refuse(429, RATE_LIMITED);
                a.retry_after = Some(s);
                return a;
            }
        }
        let q = query(target);
        let data = if body.is_empty() {
            Value::Null
        } else {
            match serde_json::from_slice::<Value>(body) {
                Ok(v) => v["data"].clone(),
                Err(_) => return refuse(400, "Could not parse request data, invalid JSON"),
            }
        };
        if matches!(method, "POST" | "PUT") && !data.is_object() {
            return refuse(400, "data: Missing input");
        }
        let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
        match route(&mut w, method, &segs, &q, &data, &user) {
            Ok(v) => {
                if let Some(page) = v.get("__page") {
                    return Answer {
                        status: 200,
                        body: page.clone(),
                        retry_after: None,
                    };
                }
                if let Some(made) = v.get("__created") {
                    return Answer {
                        status: 201,
                        body: json!({ "data": made }),
                        retry_after: None,
                    };
                }
                ok(v)
            }
            Err(a) => a,
        }
    })();
    if http {
        w.requests.push(AsanaRequest {
            method: method.to_string(),
            target: target
                .strip_prefix(API_PREFIX)
                .unwrap_or(target)
                .to_string(),
            status: answer.status,
            at: Instant::now(),
        });
    }
    answer
}

/// Refuses fields of `data` other than `allowed`, and requires `required`.
fn fields(data: &Value, allowed: &[&str], required: &[&str]) -> Result<(), Answer> {
    if let Some(m) = data.as_object() {
        for k in m.keys() {
            if !allowed.contains(&k.as_str()) {
                return Err(refuse(400, format!("{k}: Unknown field")));
            }
        }
    }
    for r in required {
        if data.get(*r).is_none_or(Value::is_null) {
            return Err(refuse(400, format!("{r}: Missing input")));
        }
    }
    Ok(())
}

fn unknown(kind: &str, gid: &str) -> Answer {
    refuse(404, format!("{kind}: Unknown object: {gid}"))
}

/// Keeps `gid`, `resource_type` and what `opt_fields` names of a full object; without
/// `opt_fields`, the compact form. An unknown field is refused.
fn shape(full: &Value, q: &BTreeMap<String, String>, compact: &[&str]) -> Res {
    let mut out = Map::new();
    for k in ["gid", "resource_type"] {
        if let Some(v) = full.get(k) {
            out.insert(k.into(), v.clone());
        }
    }
    match q.get("opt_fields") {
        None => {
            for k in compact {
                if let Some(v) = full.get(*k) {
                    out.insert((*k).into(), v.clone());
                }
            }
        }
        Some(list) => {
            for path in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                let top = path.split('.').next().unwrap_or_default();
                if full.get(top).is_none() && !optional(full, top) {
                    return Err(refuse(400, format!("opt_fields: Unknown field: {path}")));
                }
                pick(full, &mut out, path);
            }
        }
    }
    Ok(Value::Object(out))
}

/// Properties a resource of this type has only in some instances (an enum field's options,
/// a number field's precision): asking for them is fine, they are left out where absent.
fn optional(full: &Value, field: &str) -> bool {
    match full["resource_type"].as_str() {
        Some("custom_field") => matches!(
            field,
            "enum_options" | "enum_value" | "number_value" | "text_value" | "precision"
        ),
        _ => false,
    }
}

/// Copies `path` (dotted) of `from` into `into`, through lists.
fn pick(from: &Value, into: &mut Map<String, Value>, path: &str) {
    let (head, rest) = match path.split_once('.') {
        Some((h, r)) => (h, Some(r)),
        None => (path, None),
    };
    let Some(v) = from.get(head) else { return };
    match (rest, v) {
        (None, v) => {
            into.insert(head.into(), v.clone());
        }
        (Some(rest), Value::Array(items)) => {
            let existing = into.remove(head);
            let mut list: Vec<Value> = match existing {
                Some(Value::Array(l)) if l.len() == items.len() => l,
                _ => items.iter().map(|_| json!({})).collect(),
            };
            for (item, slot) in items.iter().zip(list.iter_mut()) {
                if let (Some(m), true) = (slot.as_object_mut(), item.is_object()) {
                    for k in ["gid", "resource_type"] {
                        if let Some(g) = item.get(k) {
                            m.insert(k.into(), g.clone());
                        }
                    }
                    pick(item, m, rest);
                }
            }
            into.insert(head.into(), Value::Array(list));
        }
        (Some(rest), Value::Object(_)) => {
            let mut m = match into.remove(head) {
                Some(Value::Object(m)) => m,
                _ => Map::new(),
            };
            for k in ["gid", "resource_type"] {
                if let Some(g) = v.get(k) {
                    m.insert(k.into(), g.clone());
                }
            }
            pick(v, &mut m, rest);
            into.insert(head.into(), Value::Object(m));
        }
        (Some(_), other) => {
            into.insert(head.into(), other.clone());
        }
    }
}

/// A list answer: every item shaped, paged by `limit`/`offset` (`next_page` when a limit was
/// given).
fn page(items: Vec<Value>, q: &BTreeMap<String, String>, path: &str, compact: &[&str]) -> Res {
    let mut shaped = Vec::new();
    for i in &items {
        shaped.push(shape(i, q, compact)?);
    }
    let limit = match q.get("limit") {
        None => None,
        Some(l) => match l.parse::<usize>() {
            Ok(n) if (1..=100).contains(&n) => Some(n),
            _ => return Err(refuse(400, "limit: Must be between 1 and 100")),
        },
    };
    let start = match q.get("offset") {
        None => 0,
        Some(o) => match o
            .strip_prefix("eyJvIjo")
            .and_then(|n| n.parse::<usize>().ok())
        {
            Some(n) if n <= shaped.len() => n,
            _ => return Err(refuse(400, "offset: Your pagination token is invalid.")),
        },
    };
    let Some(limit) = limit else {
        return Ok(json!({"__page": {"data": shaped[start..]}}));
    };
    let end = (start + limit).min(shaped.len());
    let next = if end < shaped.len() {
        let offset = format!("eyJvIjo{end}");
        let p = format!("{path}?limit={limit}&offset={offset}");
        json!({"offset": offset, "path": p, "uri": format!("https://app.asana.com/api/1.0{p}")})
    } else {
        Value::Null
    };
    Ok(json!({"__page": {"data": shaped[start..end], "next_page": next}}))
}

fn route(
    w: &mut World,
    method: &str,
    segs: &[&str],
    q: &BTreeMap<String, String>,
    data: &Value,
    user: &str,
) -> Res {
    let full_path = format!("/{}", segs.join("/"));
    match (method, segs) {
        ("GET", ["users", "me"]) => shape(
            &json!({"gid": user, "resource_type": "user", "name": w.user_compact(user)["name"],
                "workspaces": [{"gid": w.workspace, "resource_type": "workspace", "name": "Workspace"}]}),
            q,
            &["name"],
        ),
        ("GET", ["projects", p]) => {
            let proj = w.projects.get(*p).ok_or_else(|| unknown("project", p))?;
            let full = json!({"gid": p, "resource_type": "project", "name": proj.name,
                "workspace": {"gid": w.workspace, "resource_type": "workspace", "name": "Workspace"}});
            shape(&full, q, &["name"])
        }
        ("GET", ["projects", p, "sections"]) => {
            let proj = w.projects.get(*p).ok_or_else(|| unknown("project", p))?;
            let items = proj.sections.iter().map(|s| w.section_json(s)).collect();
            page(items, q, &full_path, &["name"])
        }
        ("POST", ["projects", p, "sections"]) => {
            fields(data, &["name", "insert_before", "insert_after"], &["name"])?;
            if !w.projects.contains_key(*p) {
                return Err(unknown("project", p));
            }
            let name = data["name"].as_str().unwrap_or_default().to_string();
            if name.trim().is_empty() {
                return Err(refuse(400, "name: Missing input"));
            }
            let before = data["insert_before"].as_str();
            let after = data["insert_after"].as_str();
            if before.is_some() && after.is_some() {
                return Err(refuse(
                    400,
                    "You may not specify both insert_before and insert_after",
                ));
            }
            let gid = w.gid();
            w.sections.insert(gid.clone(), (p.to_string(), name));
            let proj = w
                .projects
                .get_mut(*p)
                .ok_or_else(|| unknown("project", p))?;
            let at = match (before, after) {
                (Some(b), _) => proj.sections.iter().position(|s| s == b),
                (_, Some(a)) => proj.sections.iter().position(|s| s == a).map(|i| i + 1),
                _ => Some(proj.sections.len()),
            };
            let Some(at) = at else {
                return Err(refuse(400, "insert_before: Section is not in the project"));
            };
            proj.sections.insert(at, gid.clone());
            w.event(
                vec![p.to_string()],
                json!({"action": "added", "resource": {"gid": gid, "resource_type": "section"},
                    "parent": {"gid": p, "resource_type": "project"}, "type": "section"}),
                user,
            );
            shape(&w.section_json(&gid), q, &["name"])
        }
        ("POST", ["projects", p, "sections", "insert"]) => {
            fields(
                data,
                &["section", "before_section", "after_section"],
                &["section"],
            )?;
            let s = data["section"].as_str().unwrap_or_default().to_string();
            let before = data["before_section"].as_str().map(str::to_string);
            let after = data["after_section"].as_str().map(str::to_string);
            if before.is_none() == after.is_none() {
                return Err(refuse(
                    400,
                    "One of before_section or after_section is required",
                ));
            }
            let proj = w
                .projects
                .get_mut(*p)
                .ok_or_else(|| unknown("project", p))?;
            let Some(from) = proj.sections.iter().position(|x| *x == s) else {
                return Err(refuse(
                    400,
                    "section: Sections cannot be moved between projects",
                ));
            };
            let anchor = before.clone().or(after.clone()).unwrap_or_default();
            if anchor == s || !proj.sections.contains(&anchor) {
                return Err(refuse(400, "before_section: Not a section of this project"));
            }
            proj.sections.remove(from);
            let i = proj.sections.iter().position(|x| *x == anchor).unwrap_or(0);
            proj.sections
                .insert(if before.is_some() { i } else { i + 1 }, s);
            Ok(json!({}))
        }
        ("GET", ["projects", p, "custom_field_settings"]) => {
            let proj = w.projects.get(*p).ok_or_else(|| unknown("project", p))?;
            let items = proj
                .fields
                .iter()
                .map(|f| {
                    json!({"gid": format!("s{f}"), "resource_type": "custom_field_setting",
                        "is_important": true, "custom_field": w.field_json(f, None),
                        "parent": {"gid": p, "resource_type": "project", "name": proj.name},
                        "project": {"gid": p, "resource_type": "project", "name": proj.name}})
                })
                .collect();
            page(items, q, &full_path, &[])
        }
        ("POST", ["projects", p, "addCustomFieldSetting"]) => {
            fields(
                data,
                &[
                    "custom_field",
                    "is_important",
                    "insert_before",
                    "insert_after",
                ],
                &["custom_field"],
            )?;
            let f = data["custom_field"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            if !w.fields.contains_key(&f) {
                return Err(unknown("custom_field", &f));
            }
            let proj = w
                .projects
                .get_mut(*p)
                .ok_or_else(|| unknown("project", p))?;
            if proj.fields.contains(&f) {
                return Err(refuse(
                    400,
                    "custom_field: Custom field with this name already exists on the project",
                ));
            }
            proj.fields.push(f.clone());
            Ok(
                json!({"gid": format!("s{f}"), "resource_type": "custom_field_setting",
                "is_important": data["is_important"].as_bool().unwrap_or(false)}),
            )
        }
        ("GET", ["workspaces", ws, "custom_fields"]) => {
            if *ws != w.workspace {
                return Err(unknown("workspace", ws));
            }
            let items = w.fields.keys().map(|f| w.field_json(f, None)).collect();
            page(items, q, &full_path, &["name", "resource_subtype", "type"])
        }
        ("POST", ["custom_fields"]) => {
            fields(
                data,
                &[
                    "workspace",
                    "name",
                    "resource_subtype",
                    "type",
                    "enum_options",
                    "precision",
                    "description",
                    "format",
                ],
                &["workspace", "name"],
            )?;
            if data["workspace"].as_str() != Some(w.workspace.as_str()) {
                return Err(refuse(400, "workspace: Not a recognized ID"));
            }
            let name = data["name"].as_str().unwrap_or_default().to_string();
            if w.fields.values().any(|f| f.name == name) {
                return Err(refuse(
                    403,
                    format!(
                        "name: Custom field with name \"{name}\" already exists in the workspace"
                    ),
                ));
            }
            let subtype = data["resource_subtype"]
                .as_str()
                .or(data["type"].as_str())
                .ok_or_else(|| refuse(400, "resource_subtype: Missing input"))?;
            let kind = match subtype {
                "text" => FieldKind::Text,
                "number" => {
                    let p = data["precision"].as_u64().unwrap_or(0);
                    if p > 6 {
                        return Err(refuse(400, "precision: Must be between 0 and 6"));
                    }
                    FieldKind::Number { precision: p }
                }
                "enum" => {
                    let list = data["enum_options"].as_array().cloned().unwrap_or_default();
                    if list.is_empty() {
                        return Err(refuse(
                            400,
                            "enum_options: An enum custom field must have at least one option",
                        ));
                    }
                    let mut options = Vec::new();
                    for o in list {
                        fields(
                            &o,
                            &["name", "color", "enabled", "insert_before", "insert_after"],
                            &["name"],
                        )?;
                        let gid = w.gid();
                        options.push((gid, o["name"].as_str().unwrap_or_default().to_string()));
                    }
                    FieldKind::Enum { options }
                }
                other => {
                    return Err(refuse(
                        400,
                        format!("resource_subtype: Invalid value: {other}"),
                    ))
                }
            };
            let gid = w.gid();
            w.fields.insert(
                gid.clone(),
                Field {
                    name,
                    kind,
                    locked_by: None,
                },
            );
            shape(
                &w.field_json(&gid, None),
                q,
                &["name", "resource_subtype", "type"],
            )
        }
        // Asana's `createEnumOptionForCustomField`: 201 with the full option, at the end of
        // the list unless `insert_before`/`insert_after` (one of them) names where.
        ("POST", ["custom_fields", f, "enum_options"]) => {
            fields(
                data,
                &["name", "color", "enabled", "insert_before", "insert_after"],
                &["name"],
            )?;
            let field = w.fields.get(*f).ok_or_else(|| unknown("custom_field", f))?;
            if field.locked_by.as_deref().is_some_and(|by| by != user) {
                return Err(refuse(
                    403,
                    "Locked custom fields can only have enum options added by the user who locked the field.",
                ));
            }
            let FieldKind::Enum { options } = &field.kind else {
                return Err(refuse(
                    400,
                    "custom_field: Enum options can only be added to an enum or multi_enum custom field",
                ));
            };
            let name = data["name"].as_str().unwrap_or_default().to_string();
            if name.trim().is_empty() {
                return Err(refuse(400, "name: Missing input"));
            }
            let color = data["color"].as_str().unwrap_or("none").to_string();
            if !OPTION_COLORS.contains(&color.as_str()) {
                return Err(refuse(400, format!("color: Invalid value: {color}")));
            }
            if options.len() >= MAX_ENUM_OPTIONS {
                return Err(refuse(
                    400,
                    "enum_options: A custom field can have at most 500 enum options",
                ));
            }
            let at = match (data.get("insert_before"), data.get("insert_after")) {
                (Some(_), Some(_)) => {
                    return Err(refuse(
                        400,
                        "insert_before: Cannot be provided together with insert_after",
                    ))
                }
                (Some(anchor), None) | (None, Some(anchor)) => {
                    let key = if data.get("insert_before").is_some() {
                        "insert_before"
                    } else {
                        "insert_after"
                    };
                    let i = options
                        .iter()
                        .position(|(g, _)| Some(g.as_str()) == anchor.as_str())
                        .ok_or_else(|| {
                            refuse(
                                400,
                                format!("{key}: Not an enum option of this custom field"),
                            )
                        })?;
                    if key == "insert_before" {
                        i
                    } else {
                        i + 1
                    }
                }
                (None, None) => options.len(),
            };
            let gid = w.gid();
            if let Some(Field {
                kind: FieldKind::Enum { options },
                ..
            }) = w.fields.get_mut(*f)
            {
                options.insert(at, (gid.clone(), name.clone()));
            }
            let full = json!({"gid": gid, "resource_type": "enum_option", "name": name,
                "enabled": true, "color": color});
            Ok(json!({"__created": shape(&full, q, &["name", "enabled", "color"])?}))
        }
        ("POST", ["tasks"]) => {
            fields(
                data,
                &[
                    "name",
                    "notes",
                    "html_notes",
                    "projects",
                    "memberships",
                    "workspace",
                    "completed",
                ],
                &["name"],
            )?;
            let html = notes_of(data)?;
            let mut memberships = Vec::new();
            for m in data["memberships"].as_array().cloned().unwrap_or_default() {
                let p = m["project"].as_str().unwrap_or_default().to_string();
                let s = m["section"].as_str().unwrap_or_default().to_string();
                if w.sections.get(&s).map(|(sp, _)| sp) != Some(&p) {
                    return Err(refuse(
                        400,
                        "memberships: The section is not in the project",
                    ));
                }
                memberships.push((p, s));
            }
            for p in data["projects"].as_array().cloned().unwrap_or_default() {
                let p = p.as_str().unwrap_or_default().to_string();
                let proj = w.projects.get(&p).ok_or_else(|| unknown("project", &p))?;
                if !memberships.iter().any(|(mp, _)| *mp == p) {
                    let first = proj.sections.first().cloned().unwrap_or_default();
                    memberships.push((p, first));
                }
            }
            if memberships.is_empty() {
                return Err(refuse(400, "workspace: Missing input"));
            }
            let gid = w.gid();
            let now = w.now();
            w.tasks.insert(
                gid.clone(),
                Task {
                    name: data["name"].as_str().unwrap_or_default().to_string(),
                    html_notes: html,
                    completed: false,
                    created_at: now.clone(),
                    modified_at: now,
                    memberships: memberships.clone(),
                    values: BTreeMap::new(),
                    dependencies: Vec::new(),
                    stories: Vec::new(),
                },
            );
            for (p, s) in &memberships {
                if let Some(proj) = w.projects.get_mut(p) {
                    proj.tasks.push(gid.clone());
                }
                w.event(vec![p.clone()], json!({"action": "added", "resource": {"gid": gid, "resource_type": "task", "resource_subtype": "default_task"}, "parent": {"gid": p, "resource_type": "project"}, "type": "task"}), user);
                w.event(vec![p.clone()], json!({"action": "added", "resource": {"gid": gid, "resource_type": "task", "resource_subtype": "default_task"}, "parent": {"gid": s, "resource_type": "section"}, "type": "task"}), user);
            }
            shape(&w.task_json(&gid), q, &["name", "resource_subtype"])
        }
        ("GET", ["projects", p, "tasks"]) => {
            let proj = w.projects.get(*p).ok_or_else(|| unknown("project", p))?;
            let items = proj.tasks.iter().map(|t| w.task_json(t)).collect();
            page(items, q, &full_path, &["name", "resource_subtype"])
        }
        ("GET", ["sections", s, "tasks"]) => {
            let (p, _) = w
                .sections
                .get(*s)
                .cloned()
                .ok_or_else(|| unknown("section", s))?;
            let items = w
                .tasks
                .iter()
                .filter(|(_, t)| t.memberships.iter().any(|(tp, ts)| *tp == p && ts == s))
                .map(|(g, _)| w.task_json(g))
                .collect();
            page(items, q, &full_path, &["name", "resource_subtype"])
        }
        ("GET", ["tasks", t]) => {
            if !w.tasks.contains_key(*t) {
                return Err(unknown("task", t));
            }
            // A single task comes back whole unless opt_fields narrows it.
            let full = w.task_json(t);
            if q.contains_key("opt_fields") {
                shape(&full, q, &[])
            } else {
                Ok(full)
            }
        }
        ("PUT", ["tasks", t]) => {
            fields(
                data,
                &["name", "notes", "html_notes", "completed", "custom_fields"],
                &[],
            )?;
            if !w.tasks.contains_key(*t) {
                return Err(unknown("task", t));
            }
            let html = if data.get("notes").is_some() || data.get("html_notes").is_some() {
                Some(notes_of(data)?)
            } else {
                None
            };
            let mut values = Vec::new();
            if let Some(cf) = data.get("custom_fields") {
                let Some(cf) = cf.as_object() else {
                    return Err(refuse(400, "custom_fields: Value must be an object"));
                };
                let on: Vec<String> = w
                    .task_projects(t)
                    .iter()
                    .flat_map(|p| {
                        w.projects
                            .get(p)
                            .map(|p| p.fields.clone())
                            .unwrap_or_default()
                    })
                    .collect();
                for (fgid, v) in cf {
                    if !on.contains(fgid) {
                        return Err(refuse(
                            400,
                            format!(
                                "custom_fields: Custom field with ID {fgid} is not on given object"
                            ),
                        ));
                    }
                    let f = w
                        .fields
                        .get(fgid)
                        .ok_or_else(|| unknown("custom_field", fgid))?;
                    let value = match (&f.kind, v) {
                        (_, Value::Null) => None,
                        (FieldKind::Text, Value::String(s)) => Some(FieldValue::Text(s.clone())),
                        (FieldKind::Number { .. }, Value::Number(n)) => n.as_f64().map(FieldValue::Number),
                        (FieldKind::Enum { options }, Value::String(o)) if options.iter().any(|(g, _)| g == o) => Some(FieldValue::Enum(o.clone())),
                        (FieldKind::Enum { .. }, Value::String(o)) => return Err(refuse(400, format!("custom_fields: enum option {o} is not an option of custom field {fgid}"))),
                        _ => return Err(refuse(400, format!("custom_fields: Value for custom field {fgid} has the wrong type"))),
                    };
                    values.push((fgid.clone(), value));
                }
            }
            let now = w.now();
            let projects = w.task_projects(t);
            let task = w.tasks.get_mut(*t).ok_or_else(|| unknown("task", t))?;
            let mut changed = Vec::new();
            if let Some(n) = data["name"].as_str() {
                task.name = n.to_string();
                changed.push("name");
            }
            if let Some(h) = html {
                task.html_notes = h;
                changed.push("notes");
            }
            if let Some(c) = data["completed"].as_bool() {
                task.completed = c;
                changed.push("completed");
            }
            for (f, v) in values {
                match v {
                    Some(v) => task.values.insert(f, v),
                    None => task.values.remove(&f),
                };
                changed.push("custom_fields");
            }
            task.modified_at = now;
            changed.dedup();
            for field in changed {
                w.event(projects.clone(), json!({"action": "changed", "resource": {"gid": t, "resource_type": "task", "resource_subtype": "default_task"}, "parent": null, "type": "task", "change": {"field": field, "action": "changed"}}), user);
            }
            shape(&w.task_json(t), q, &["name", "resource_subtype"])
        }
        ("POST", ["sections", s, "addTask"]) => {
            fields(data, &["task", "insert_before", "insert_after"], &["task"])?;
            let (p, _) = w
                .sections
                .get(*s)
                .cloned()
                .ok_or_else(|| unknown("section", s))?;
            let t = data["task"].as_str().unwrap_or_default().to_string();
            let task = w.tasks.get_mut(&t).ok_or_else(|| unknown("task", &t))?;
            let old = task.memberships.iter().position(|(tp, _)| *tp == p);
            let removed = old.map(|i| task.memberships.remove(i).1);
            task.memberships.push((p.clone(), s.to_string()));
            if let Some(old) = removed {
                w.event(vec![p.clone()], json!({"action": "removed", "resource": {"gid": t, "resource_type": "task"}, "parent": {"gid": old, "resource_type": "section"}, "type": "task"}), user);
            } else if let Some(proj) = w.projects.get_mut(&p) {
                proj.tasks.push(t.clone());
            }
            w.event(vec![p], json!({"action": "added", "resource": {"gid": t, "resource_type": "task"}, "parent": {"gid": s, "resource_type": "section"}, "type": "task"}), user);
            Ok(json!({}))
        }
        ("GET", ["tasks", t, "stories"]) => {
            let task = w.tasks.get(*t).ok_or_else(|| unknown("task", t))?;
            let items = task.stories.iter().map(|s| w.story_json(s)).collect();
            page(
                items,
                q,
                &full_path,
                &[
                    "created_at",
                    "created_by",
                    "resource_subtype",
                    "text",
                    "type",
                ],
            )
        }
        ("POST", ["tasks", t, "stories"]) => {
            fields(
                data,
                &["text", "html_text", "is_pinned", "sticker_name"],
                &[],
            )?;
            if !w.tasks.contains_key(*t) {
                return Err(unknown("task", t));
            }
            let html = match (data["text"].as_str(), data["html_text"].as_str()) {
                (Some(_), Some(_)) => {
                    return Err(refuse(
                        400,
                        "You may only specify one of text and html_text",
                    ))
                }
                (Some(text), None) => format!("<body>{}</body>", escape(text)),
                (None, Some(h)) => {
                    check_rich_text(h)
                        .map_err(|e| refuse(400, format!("html_text: XML is invalid: {e}")))?;
                    h.to_string()
                }
                (None, None) => return Err(refuse(400, "text: Missing input")),
            };
            let gid = w.gid();
            let now = w.now();
            w.stories.insert(
                gid.clone(),
                Story {
                    task: t.to_string(),
                    author: user.to_string(),
                    html_text: html,
                    created_at: now,
                },
            );
            if let Some(task) = w.tasks.get_mut(*t) {
                task.stories.push(gid.clone());
            }
            let projects = w.task_projects(t);
            w.event(projects, json!({"action": "added", "resource": {"gid": gid, "resource_type": "story", "resource_subtype": "comment_added"}, "parent": {"gid": t, "resource_type": "task"}, "type": "story"}), user);
            shape(
                &w.story_json(&gid),
                q,
                &[
                    "created_at",
                    "created_by",
                    "resource_subtype",
                    "text",
                    "type",
                ],
            )
        }
        ("GET", ["tasks", t, "dependencies"]) => {
            let task = w.tasks.get(*t).ok_or_else(|| unknown("task", t))?;
            let items = task.dependencies.iter().map(|d| w.task_json(d)).collect();
            page(items, q, &full_path, &["name", "resource_subtype"])
        }
        ("POST", ["tasks", t, "addDependencies"]) => {
            fields(data, &["dependencies"], &["dependencies"])?;
            let deps: Vec<String> = data["dependencies"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .iter()
                .filter_map(|d| d.as_str().map(str::to_string))
                .collect();
            for d in &deps {
                if !w.tasks.contains_key(d) {
                    return Err(unknown("task", d));
                }
                if d == t {
                    return Err(refuse(400, "dependencies: A task cannot depend on itself"));
                }
            }
            let projects = w.task_projects(t);
            let task = w.tasks.get_mut(*t).ok_or_else(|| unknown("task", t))?;
            for d in deps {
                if !task.dependencies.contains(&d) {
                    task.dependencies.push(d);
                }
            }
            w.event(projects, json!({"action": "changed", "resource": {"gid": t, "resource_type": "task"}, "parent": null, "type": "task", "change": {"field": "dependencies", "action": "added"}}), user);
            Ok(json!({}))
        }
        ("GET", ["events"]) => {
            let Some(resource) = q.get("resource") else {
                return Err(refuse(400, "resource: Missing input"));
            };
            if !w.projects.contains_key(resource) && !w.tasks.contains_key(resource) {
                return Err(unknown("resource", resource));
            }
            let fresh = format!(
                "{:032x}",
                (w.next_gid as u128) * 0x9e37_79b9 + w.events.len() as u128
            );
            w.next_gid += 1;
            let from = q
                .get("sync")
                .and_then(|s| w.syncs.get(s))
                .filter(|(r, _)| r == resource)
                .map(|(_, i)| *i);
            let Some(from) = from else {
                let end = w.events.len();
                w.syncs.insert(fresh.clone(), (resource.clone(), end));
                let mut a = refuse(412, "Sync token invalid or too old. If you are attempting to keep resources in sync, you must fetch the full dataset for this query now and use the new sync token for the next sync.");
                a.body["sync"] = json!(fresh);
                return Err(a);
            };
            let mine: Vec<(usize, Value)> = w
                .events
                .iter()
                .enumerate()
                .skip(from)
                .filter(|(_, e)| {
                    e.projects.contains(resource) || e.body["resource"]["gid"] == json!(resource)
                })
                .map(|(i, e)| (i, e.body.clone()))
                .take(101)
                .collect();
            let has_more = mine.len() > 100;
            let taken: Vec<(usize, Value)> = mine.into_iter().take(100).collect();
            let next = if has_more {
                taken.last().map_or(w.events.len(), |(i, _)| i + 1)
            } else {
                w.events.len()
            };
            w.syncs.insert(fresh.clone(), (resource.clone(), next));
            let data: Vec<Value> = taken.into_iter().map(|(_, e)| e).collect();
            Ok(json!({"__page": {"data": data, "sync": fresh, "has_more": has_more}}))
        }
        _ => Err(refuse(404, "No matching route for request")),
    }
}

/// `notes` (plain) or `html_notes` (checked) of a write, as rich text.
fn notes_of(data: &Value) -> Result<String, Answer> {
    match (data["notes"].as_str(), data["html_notes"].as_str()) {
        (Some(_), Some(_)) => Err(refuse(
            400,
            "You may only specify one of notes and html_notes",
        )),
        (Some(n), None) => Ok(format!("<body>{}</body>", escape(n))),
        (None, Some(h)) => {
            check_rich_text(h)
                .map_err(|e| refuse(400, format!("html_notes: XML is invalid: {e}")))?;
            Ok(h.to_string())
        }
        (None, None) => Ok("<body></body>".into()),
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn rich_text_is_a_body_of_allowed_tags() {
        for good in [
            "<body></body>",
            "<body>a &amp; b <strong>c</strong><hr/></body>",
            "<body><ul><li>x</li></ul><a href=\"https://x\">y</a></body>",
        ] {
            assert_eq!(check_rich_text(good), Ok(()), "{good}");
        }
        for bad in [
            "plain",
            "<body><p>x</p></body>",
            "<body><strong>x</body>",
            "<body><a class=\"x\">y</a></body>",
            "<body>&nbsp;</body>",
            "<body></body><body></body>",
        ] {
            assert!(check_rich_text(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_enum_option_is_added_where_asked_and_refused_as_asana_refuses() {
        let fake = FakeAsana::start("bot").unwrap();
        let (_, me) = fake.as_user("GET", "/users/me?opt_fields=workspaces", None);
        let ws = me["data"]["workspaces"][0]["gid"]
            .as_str()
            .unwrap()
            .to_string();
        let make = |name: &str, extra: Value| {
            let mut data = json!({"workspace": ws, "name": name});
            if let (Some(d), Value::Object(e)) = (data.as_object_mut(), extra) {
                d.extend(e);
            }
            let (s, v) = fake.as_user(
                "POST",
                "/custom_fields?opt_fields=enum_options.name",
                Some(json!({ "data": data })),
            );
            assert_eq!(s, 200, "{v}");
            v["data"].clone()
        };
        let level = make(
            "Level",
            json!({"resource_subtype": "enum", "enum_options": [{"name": "Low"}, {"name": "High"}]}),
        );
        let gid = level["gid"].as_str().unwrap().to_string();
        let low = level["enum_options"][0]["gid"]
            .as_str()
            .unwrap()
            .to_string();
        let path = format!("/custom_fields/{gid}/enum_options");
        let add = |data: Value| fake.as_user("POST", &path, Some(json!({ "data": data })));
        let (s, v) = add(json!({"name": "Mid", "insert_after": low}));
        assert_eq!(s, 201, "{v}");
        assert_eq!(v["data"]["resource_type"], "enum_option");
        assert_eq!(
            (v["data"]["name"].as_str(), v["data"]["enabled"].as_bool()),
            (Some("Mid"), Some(true))
        );
        assert_eq!(add(json!({"name": "Top", "color": "blue"})).0, 201);
        assert_eq!(fake.field_options("Level"), ["Low", "Mid", "High", "Top"]);
        let (s, v) = fake.as_user(
            "POST",
            &format!("{path}?opt_fields=color"),
            Some(json!({"data": {"name": "Shaped"}})),
        );
        assert_eq!(
            (s, v["data"]["color"].as_str(), v["data"].get("name")),
            (201, Some("none"), None)
        );
        let refusals = [
            (
                json!({"name": "X", "insert_before": low, "insert_after": low}),
                "insert_before: Cannot be provided together with insert_after",
            ),
            (
                json!({"name": "X", "insert_before": "1"}),
                "insert_before: Not an enum option of this custom field",
            ),
            (json!({"insert_after": low}), "name: Missing input"),
            (
                json!({"name": "X", "colour": "red"}),
                "colour: Unknown field",
            ),
            (
                json!({"name": "X", "color": "mauve"}),
                "color: Invalid value: mauve",
            ),
        ];
        for (data, message) in refusals {
            let (s, v) = add(data);
            assert_eq!(
                (s, v["errors"][0]["message"].as_str()),
                (400, Some(message))
            );
        }
        let text = make("Notes", json!({"resource_subtype": "text"}));
        let (s, _) = fake.as_user(
            "POST",
            &format!(
                "/custom_fields/{}/enum_options",
                text["gid"].as_str().unwrap()
            ),
            Some(json!({"data": {"name": "X"}})),
        );
        assert_eq!(s, 400);
        let (s, v) = fake.as_user(
            "POST",
            "/custom_fields/42/enum_options",
            Some(json!({"data": {"name": "X"}})),
        );
        assert_eq!(
            (s, v["errors"][0]["message"].as_str()),
            (404, Some("custom_field: Unknown object: 42"))
        );
        // Locked by Ada: the bot may not add to it, she may.
        fake.lock_field("Level");
        let body = json!({"data": {"name": "Bot's"}}).to_string();
        let a = handle(
            &fake.shared,
            "POST",
            &format!("{API_PREFIX}{path}"),
            Some("bot"),
            body.as_bytes(),
            false,
        );
        assert_eq!(a.status, 403, "{}", a.body);
        assert_eq!(add(json!({"name": "Ada's"})).0, 201);
        assert_eq!(fake.field_options("Level").len(), 6);
    }

    #[test]
    fn the_user_makes_tasks_and_a_missing_sync_token_is_a_412_with_a_fresh_one() {
        let fake = FakeAsana::start("bot").unwrap();
        let p = fake.project();
        let (s, v) = fake.as_user("GET", &format!("/events?resource={p}"), None);
        assert_eq!(s, 412);
        let token = v["sync"].as_str().unwrap().to_string();
        let (s, v) = fake.as_user(
            "POST",
            "/tasks",
            Some(json!({"data": {"name": "t", "projects": [p], "html_notes": "<body><em>hi</em></body>"}})),
        );
        assert_eq!(s, 200, "{v}");
        let (s, v) = fake.as_user("GET", &format!("/events?resource={p}&sync={token}"), None);
        assert_eq!(s, 200);
        assert_eq!(v["data"].as_array().unwrap().len(), 2);
        let (s, v) = fake.as_user(
            "POST",
            "/tasks",
            Some(json!({"data": {"name": "t", "projects": [p], "bogus": 1}})),
        );
        assert_eq!(
            (s, v["errors"][0]["message"].as_str()),
            (400, Some("bogus: Unknown field"))
        );
        let (s, _) = fake.as_user(
            "POST",
            "/tasks",
            Some(json!({"data": {"name": "t", "projects": [p], "html_notes": "<p>x</p>"}})),
        );
        assert_eq!(s, 400);
    }

    #[tokio::test]
    async fn http_needs_the_token_and_a_rate_limit_says_when_to_come_back() {
        let fake = FakeAsana::start("bot").unwrap();
        let http = reqwest::Client::new();
        let url = format!("{}/users/me", fake.base_url());
        let r = http.get(&url).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 401);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["errors"][0]["message"], "Not Authorized");
        let r = http.get(&url).bearer_auth("wrong").send().await.unwrap();
        assert_eq!(r.status().as_u16(), 401);
        fake.rate_limit(1, 7);
        let r = http.get(&url).bearer_auth("bot").send().await.unwrap();
        assert_eq!(r.status().as_u16(), 429);
        assert_eq!(r.headers()["retry-after"], "7");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["errors"][0]["message"], RATE_LIMITED);
        let r = http.get(&url).bearer_auth("bot").send().await.unwrap();
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["data"]["name"], "Pegasus Bot");
        let r = http
            .get(format!("{}/nothing/here", fake.base_url()))
            .bearer_auth("bot")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 404);
        assert_eq!(fake.requests().len(), 5);
    }

    #[test]
    fn lists_page_with_limit_and_offset_and_opt_fields_narrow() {
        let fake = FakeAsana::start("bot").unwrap();
        let p = fake.project();
        for name in ["a", "b", "c"] {
            fake.as_user(
                "POST",
                &format!("/projects/{p}/sections"),
                Some(json!({"data": {"name": name}})),
            );
        }
        let (s, v) = fake.as_user("GET", &format!("/projects/{p}/sections?limit=3"), None);
        assert_eq!(s, 200);
        assert_eq!(v["data"].as_array().unwrap().len(), 3);
        let off = v["next_page"]["offset"].as_str().unwrap().to_string();
        let (_, v) = fake.as_user(
            "GET",
            &format!("/projects/{p}/sections?limit=3&offset={off}"),
            None,
        );
        assert_eq!(v["data"][0]["name"], "c");
        assert!(v["next_page"].is_null());
        let (s, _) = fake.as_user("GET", &format!("/projects/{p}/sections?limit=500"), None);
        assert_eq!(s, 400);
        let (_, v) = fake.as_user(
            "GET",
            &format!("/projects/{p}/sections?opt_fields=project.name"),
            None,
        );
        assert_eq!(v["data"][0]["project"]["name"], "Board");
        assert!(v["data"][0].get("name").is_none());
        let (s, _) = fake.as_user(
            "GET",
            &format!("/projects/{p}/sections?opt_fields=nope"),
            None,
        );
        assert_eq!(s, 400);
    }
}
