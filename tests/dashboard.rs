//! The web dashboard and REST API (DESIGN.md §11) through the real daemon over real HTTP: auth
//! (token, cookie exchange, Host and Origin checks), the JSON API in the CLI's shapes, escaping
//! of model output, the SSE event stream with `Last-Event-ID`, and the CLI's `dashboard`,
//! `completions` and `man`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use pegasus_fakellm::{FakeLlm, Match, Reply, Rule};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Resp {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One HTTP/1.1 request, by hand, so every header is exactly what the test says.
fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Resp {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: {addr}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if body.is_some()
        && !headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
    {
        req.push_str("Content-Type: application/json\r\n");
    }
    match body {
        Some(b) => req.push_str(&format!("Content-Length: {}\r\n\r\n{b}", b.len())),
        None => req.push_str("Content-Length: 0\r\n\r\n"),
    }
    s.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
    // A server may answer before reading all of a body it refuses (413) and close: the write
    // then fails, and the read may end in a reset after the answer. The answer is what counts.
    let wrote = s.write_all(req.as_bytes());
    let mut raw = Vec::new();
    let mut buf = [0u8; 16384];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e) if raw.is_empty() => {
                panic!("{method} {path}: no answer ({e}; write: {wrote:?})")
            }
            Err(_) => break,
        }
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap();
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let body = if chunked {
        dechunk(rest)
    } else {
        rest.to_string()
    };
    Resp {
        status,
        headers,
        body,
    }
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        s = &rest[n + 2..];
    }
    out
}

struct Dash {
    addr: String,
    token: String,
}

impl Dash {
    fn of(home: &Home) -> Dash {
        let addr = poll(Duration::from_secs(10), "the dashboard address", || {
            std::fs::read_to_string(home.path().join("run/dashboard.addr")).ok()
        });
        let token = std::fs::read_to_string(home.path().join("run/dashboard.token")).unwrap();
        Dash {
            addr: addr.trim().to_string(),
            token: token.trim().to_string(),
        }
    }
    fn auth(&self) -> String {
        format!("Bearer {}", self.token)
    }
    fn get(&self, path: &str) -> Resp {
        http(
            &self.addr,
            "GET",
            path,
            &[("Authorization", &self.auth())],
            None,
        )
    }
    fn post(&self, path: &str, body: Option<Value>) -> Resp {
        let b = body.map(|b| b.to_string());
        http(
            &self.addr,
            "POST",
            path,
            &[("Authorization", &self.auth())],
            b.as_deref(),
        )
    }
}

fn user(t: &str) -> Match {
    Match::LastUserTextContains(t.into())
}

#[test]
fn only_the_token_holder_on_this_host_and_origin_gets_in() {
    let fake = FakeLlm::start().unwrap();
    let home = fake_home(&fake, "");
    let _d = home.start_fake();
    let d = Dash::of(&home);
    // The token file is private.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(home.path().join("run/dashboard.token"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    assert!(d.token.len() >= 32);

    // No token: 401 with a JSON error for the API, the login page for pages.
    let r = http(&d.addr, "GET", "/api/status", &[], None);
    assert_eq!(r.status, 401);
    assert!(r.json()["error"].as_str().unwrap().contains("token"));
    let r = http(&d.addr, "GET", "/", &[], None);
    assert_eq!(r.status, 401);
    assert!(r.body.contains("pegasusctl dashboard") && !r.body.contains(&d.token));
    let r = http(
        &d.addr,
        "GET",
        "/api/status",
        &[("Authorization", "Bearer nope")],
        None,
    );
    assert_eq!(r.status, 401);
    // A foreign Host (DNS rebinding): 403 even with the token.
    let r = http(
        &d.addr,
        "GET",
        "/api/status",
        &[("Host", "evil.example:80"), ("Authorization", &d.auth())],
        None,
    );
    assert_eq!(r.status, 403);
    let port = d.addr.rsplit(':').next().unwrap();
    let r = http(
        &d.addr,
        "GET",
        "/api/status",
        &[
            ("Host", &format!("localhost:{port}")),
            ("Authorization", &d.auth()),
        ],
        None,
    );
    assert_eq!(r.status, 200);

    // Bearer works; the JSON has the CLI's keys.
    let s = d.get("/api/status").json();
    assert!(
        s["pid"].as_u64().is_some() && s["projects"].is_array(),
        "{s}"
    );

    // The token is exchanged once for an HttpOnly SameSite=Strict cookie.
    let r = d.post("/api/session", None);
    assert_eq!(r.status, 200);
    let cookie = r.header("set-cookie").unwrap().to_string();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let pair = cookie.split(';').next().unwrap().to_string();
    let r = http(&d.addr, "GET", "/api/projects", &[("Cookie", &pair)], None);
    assert_eq!(r.status, 200);
    // A cookie-borne change must come from the dashboard's own origin.
    let body = json!({"name": "web", "goal": "a site"}).to_string();
    let r = http(
        &d.addr,
        "POST",
        "/api/projects",
        &[("Cookie", &pair)],
        Some(&body),
    );
    assert_eq!(r.status, 403);
    let r = http(
        &d.addr,
        "POST",
        "/api/projects",
        &[("Cookie", &pair), ("Origin", "http://evil.example")],
        Some(&body),
    );
    assert_eq!(r.status, 403);
    let origin = format!("http://{}", d.addr);
    let r = http(
        &d.addr,
        "POST",
        "/api/projects",
        &[("Cookie", &pair), ("Origin", &origin)],
        Some(&body),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["name"], "web");
}

/// Asserts `r` is a JSON error with `status`, and returns its message.
fn json_error(r: &Resp, status: u16, what: &str) -> String {
    assert_eq!(r.status, status, "{what}: {}", r.body);
    assert_eq!(
        r.header("content-type"),
        Some("application/json"),
        "{what}: {}",
        r.body
    );
    let v: Value =
        serde_json::from_str(&r.body).unwrap_or_else(|e| panic!("{what}: {e}: {}", r.body));
    let msg = v["error"]
        .as_str()
        .unwrap_or_else(|| panic!("{what}: no `error` string: {}", r.body))
        .to_string();
    assert!(
        !msg.trim().is_empty() && !msg.contains('\n'),
        "{what}: one line: {msg:?}"
    );
    msg
}

#[test]
fn every_api_error_is_json_with_a_fitting_status() {
    let fake = FakeLlm::start().unwrap();
    let home = fake_home(&fake, "");
    let _d = home.start_fake();
    let d = Dash::of(&home);
    let auth = d.auth();
    let with_auth = [("Authorization", auth.as_str())];

    // A body that is not JSON.
    let r = http(
        &d.addr,
        "POST",
        "/api/projects",
        &with_auth,
        Some("{\"name\": \"x\", "),
    );
    let msg = json_error(&r, 400, "malformed JSON");
    assert!(msg.contains("JSON"), "{msg}");
    // JSON under another content type.
    let body = json!({"name": "web", "goal": "a site"}).to_string();
    let r = http(
        &d.addr,
        "POST",
        "/api/projects",
        &[("Authorization", &auth), ("Content-Type", "text/plain")],
        Some(&body),
    );
    let msg = json_error(&r, 415, "wrong content type");
    assert!(msg.contains("Content-Type: application/json"), "{msg}");
    // No content type at all.
    let r = http(
        &d.addr,
        "POST",
        "/api/projects/web/messages",
        &[("Authorization", &auth), ("Content-Type", "")],
        Some("{\"text\": \"hi\"}"),
    );
    json_error(&r, 415, "no content type");
    // A missing field, a field of the wrong type.
    let r = http(
        &d.addr,
        "POST",
        "/api/projects",
        &with_auth,
        Some("{\"name\": \"web\"}"),
    );
    let msg = json_error(&r, 422, "missing field");
    assert!(msg.contains("goal"), "{msg}");
    let r = http(
        &d.addr,
        "POST",
        "/api/projects",
        &with_auth,
        Some("{\"name\": 5, \"goal\": \"g\"}"),
    );
    json_error(&r, 422, "wrong field type");
    let r = http(&d.addr, "POST", "/api/projects", &with_auth, Some("[1, 2]"));
    json_error(&r, 422, "not an object");
    // A body over the limit.
    let big = json!({"name": "big", "goal": "x".repeat(3 << 20)}).to_string();
    let r = http(&d.addr, "POST", "/api/projects", &with_auth, Some(&big));
    json_error(&r, 413, "oversized body");
    // A query string that does not fit.
    let r = d.get("/api/projects/web/session?since=yesterday");
    let msg = json_error(&r, 400, "bad query string");
    assert!(msg.contains("since"), "{msg}");
    // Unknown routes.
    for path in ["/api/nope", "/api/projects/web/tasks/x/y", "/api"] {
        let msg = json_error(&d.get(path), 404, path);
        assert!(msg.contains("/api/status"), "{msg}");
    }
    // A method the route does not take: 405, naming the ones it does.
    let r = http(&d.addr, "DELETE", "/api/status", &with_auth, None);
    let msg = json_error(&r, 405, "DELETE /api/status");
    assert!(msg.contains("GET"), "{msg}");
    assert!(r.header("allow").is_some_and(|a| a.contains("GET")));
    let r = http(&d.addr, "PUT", "/api/projects", &with_auth, Some(&body));
    json_error(&r, 405, "PUT /api/projects");
    let r = http(
        &d.addr,
        "GET",
        "/api/projects/web/messages",
        &with_auth,
        None,
    );
    json_error(&r, 405, "GET /api/projects/web/messages");
    // The guard's refusals were JSON already; they stay so, on unknown routes too.
    json_error(
        &http(&d.addr, "GET", "/api/nope", &[], None),
        401,
        "no token",
    );
    json_error(
        &http(
            &d.addr,
            "GET",
            "/api/status",
            &[("Host", "evil.example"), ("Authorization", &auth)],
            None,
        ),
        403,
        "foreign Host",
    );
    // Nothing above created anything, and the API still answers.
    assert_eq!(d.get("/api/projects").json(), json!([]));
    // Pages keep their HTML: the login page, a project page's "not found".
    let r = http(&d.addr, "GET", "/", &[], None);
    assert_eq!(r.status, 401);
    assert!(r.header("content-type").unwrap().contains("text/html"));
    let r = d.get("/projects/nope");
    assert_eq!(r.status, 404);
    assert!(r.header("content-type").unwrap().contains("text/html"));
}

#[test]
fn the_api_drives_projects_and_tasks_in_the_clis_shapes_and_escapes_model_output() {
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(
        user("say something nasty"),
        Reply::Text("<script>alert('x')</script> & done".into()),
    ));
    fake.add_rule(Rule::new(user("a task"), Reply::Text("task done".into())));
    main_agent_rule(&fake);
    let home = fake_home(&fake, "");
    let _daemon = home.start_fake();
    let d = Dash::of(&home);
    let r = d.post(
        "/api/projects",
        Some(json!({"name": "api", "goal": "Try the API"})),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    home.ready_worker("api", None);
    // The list and the project have the CLI's --json keys.
    let list = d.get("/api/projects").json();
    let cli = home.json(&["project", "list"]);
    let keys = |v: &Value| {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(keys(&list[0]), keys(&cli[0]));
    let shown = d.get("/api/projects/api").json();
    assert_eq!(keys(&shown), keys(&home.json(&["project", "show", "api"])));
    assert_eq!(d.get("/api/projects/nope").status, 404);

    // A message; its reply lands in the session.
    let id = d
        .post(
            "/api/projects/api/messages",
            Some(json!({"text": "say something nasty"})),
        )
        .json()["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!id.is_empty());
    let session = poll(Duration::from_secs(20), "the reply in the session", || {
        let s = d.get("/api/projects/api/session?since=0").json();
        s.to_string().contains("alert('x')").then_some(s)
    });
    // Recorded as sent from the dashboard, not from the CLI.
    let sent = session["records"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id.as_str())
        .unwrap_or_else(|| panic!("no record of message {id}: {session}"));
    assert_eq!(
        (&sent["role"], &sent["from"]),
        (&json!("user"), &json!("dashboard")),
        "{sent}"
    );
    // The page shows it as text: escaped, never markup.
    let page = d.get("/projects/api");
    assert_eq!(page.status, 200);
    assert!(
        page.body
            .contains("&lt;script&gt;alert('x')&lt;/script&gt; &amp; done"),
        "{}",
        page.body
    );
    assert!(!page.body.contains("<script>alert"));
    assert!(page.body.contains("<script src=\"/static/app.js\""));

    // Tasks: add, list, show, in the CLI's shapes.
    let r = d.post(
        "/api/projects/api/tasks",
        Some(json!({"goal": "a task", "priority": 1})),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let task = r.json();
    let tid = task["id"].as_str().unwrap().to_string();
    assert_eq!(task["priority"], 1);
    let shown = poll(Duration::from_secs(20), "the task done", || {
        let t = d.get(&format!("/api/tasks/{tid}")).json();
        (t["task"]["state"] == "done").then_some(t)
    });
    // Its events name the dashboard as who added it.
    assert_eq!(shown["history"][1]["actor"], "dashboard", "{shown}");
    let shown = d.get(&format!("/api/tasks/{tid}")).json();
    assert!(shown["history"].as_array().unwrap().len() >= 3);
    assert_eq!(keys(&shown), keys(&home.json(&["task", "show", &tid])));
    assert!(
        d.get("/api/projects/api/tasks")
            .json()
            .as_array()
            .unwrap()
            .len()
            >= 2
    );
    let r = d.post(&format!("/api/tasks/{tid}/retry"), None);
    assert_eq!(r.status, 400, "a done task cannot be retried: {}", r.body);
    assert!(r.json()["error"].as_str().unwrap().contains(&tid));
    // A refusal's status comes from its kind (above: refused, 400), never its wording: what
    // does not exist is a 404.
    let r = d.post("/api/tasks/t-20200101-abcdef/retry", None);
    assert_eq!(r.status, 404, "no such task: {}", r.body);
    let r = d.post("/api/projects/nope/suspend", None);
    assert_eq!(r.status, 404, "no such project: {}", r.body);
    assert_eq!(d.get("/projects/nope").status, 404);

    // Lifecycle.
    let r = d.post("/api/projects/api/suspend", None);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["status"], "suspended");
    assert_eq!(
        d.post("/api/projects/api/resume", None).json()["status"],
        "active"
    );
    assert_eq!(d.post("/api/projects/api/explode", None).status, 404);

    // Roles, costs (the same report as `pegasusctl cost --json`).
    assert!(d.get("/api/roles").json().as_array().unwrap().len() >= 8);
    let costs = d.get("/api/costs").json();
    assert_eq!(keys(&costs), keys(&home.json(&["cost"])));
    assert!(costs["total"]["calls"].as_u64().unwrap() >= 2);
    assert_eq!(d.get("/api/costs?since=yesterday").status, 400);
    // Pages render.
    for p in ["/", "/costs", "/crashes"] {
        let r = d.get(p);
        assert_eq!(r.status, 200, "{p}");
        assert!(r.body.contains("<header>"), "{p}");
    }
    let r = d.get("/static/app.js");
    assert!(
        r.body.contains("EventSource") && r.header("content-type").unwrap().contains("javascript")
    );
}

/// Reads SSE events (id, event, data) from an open `/api/events` response until `until` says
/// stop or the deadline passes.
fn sse_events(
    d: &Dash,
    last_id: Option<u64>,
    until: impl Fn(&[(u64, String, Value)]) -> bool,
) -> Vec<(u64, String, Value)> {
    let mut s = TcpStream::connect(&d.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let last = last_id
        .map(|i| format!("Last-Event-ID: {i}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "GET /api/events HTTP/1.1\r\nHost: {}\r\nAuthorization: {}\r\n{last}\r\n",
        d.addr,
        d.auth()
    )
    .unwrap();
    let mut r = BufReader::new(s);
    let mut events = Vec::new();
    let (mut id, mut ev, mut data) = (0u64, String::new(), String::new());
    let mut line = String::new();
    loop {
        line.clear();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return events;
        }
        let l = line.trim_end();
        if let Some(v) = l.strip_prefix("id: ").or_else(|| l.strip_prefix("id:")) {
            id = v.trim().parse().unwrap_or(0);
        } else if let Some(v) = l
            .strip_prefix("event: ")
            .or_else(|| l.strip_prefix("event:"))
        {
            ev = v.trim().to_string();
        } else if let Some(v) = l.strip_prefix("data: ").or_else(|| l.strip_prefix("data:")) {
            data = v.to_string();
        } else if l.is_empty() && !ev.is_empty() {
            events.push((
                id,
                std::mem::take(&mut ev),
                serde_json::from_str(&data).unwrap_or(Value::Null),
            ));
            if until(&events) {
                return events;
            }
        }
    }
}

#[test]
fn events_stream_live_and_resume_from_last_event_id() {
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(
        user("stream please"),
        Reply::Text("streamed answer".into()),
    ));
    main_agent_rule(&fake);
    let home = fake_home(&fake, "");
    let _daemon = home.start_fake();
    let d = Dash::of(&home);
    home.create("ev");
    let addr = d.addr.clone();
    let token = d.token.clone();
    let sender = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        let d = Dash { addr, token };
        d.post(
            "/api/projects/ev/messages",
            Some(json!({"text": "stream please"})),
        );
    });
    let live = sse_events(&d, None, |e| {
        e.iter()
            .any(|(_, k, v)| k == "task" && v["state"] == "done")
    });
    sender.join().unwrap();
    let text: String = live
        .iter()
        .filter(|(_, k, _)| k == "text_delta")
        .map(|(_, _, v)| v["text"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(text, "streamed answer", "{live:?}");
    assert!(live
        .iter()
        .all(|(_, _, v)| v["project"] == "ev" || v["project"] == "main"));
    // Ids increase; a client that reconnects with the id of an early event gets the rest again.
    let ids: Vec<u64> = live.iter().map(|(i, _, _)| *i).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    let from = ids[0];
    let want = ids.len() - 1;
    let again = sse_events(&d, Some(from), |e| e.len() >= want);
    assert_eq!(
        again.iter().map(|(i, _, _)| *i).collect::<Vec<_>>(),
        ids[1..].to_vec()
    );
}

#[test]
fn the_cli_prints_the_dashboard_url_completions_and_a_manual() {
    let fake = FakeLlm::start().unwrap();
    let home = fake_home(&fake, "");
    // No daemon: exit 3.
    assert_eq!(home.ctl(&["dashboard"]).status.code(), Some(3));
    let _d = home.start_fake();
    let d = Dash::of(&home);
    let url = home.ctl_ok(&["dashboard"]);
    assert_eq!(url.trim(), format!("http://{}/#token={}", d.addr, d.token));
    let bash = home.ctl_ok(&["completions", "bash"]);
    assert!(
        bash.contains("pegasusctl") && bash.contains("complete"),
        "{bash}"
    );
    let zsh = home.ctl_ok(&["completions", "zsh"]);
    assert!(zsh.contains("#compdef pegasusctl"));
    let man = home.ctl_ok(&["man"]);
    assert!(man.contains(".TH") && man.contains("pegasusctl"), "{man}");
}

/// DESIGN.md §5: `cost` and the dashboard count estimated ledger lines like the others. A server
/// that sends no usage gets estimated, priced lines; `/api/costs`, `pegasusctl cost --json`
/// and `pegasusctl cost` report their amount (the ledger's sum), not only the project's name.
#[test]
fn estimated_ledger_lines_count_in_the_costs_like_the_others() {
    let fake = FakeLlm::start().unwrap();
    fake.omit_usage(true);
    fake.add_rule(Rule::new(
        Match::Any,
        Reply::Text("an answer the server did not count".into()),
    ));
    let home = fake_home(&fake, "");
    let _daemon = home.start_fake();
    let d = Dash::of(&home);
    home.create("uncounted");
    home.ctl_ok(&["project", "send", "uncounted", "count me", "--wait"]);
    let lines: Vec<Value> = std::fs::read_to_string(home.path().join("costs/ledger.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(!lines.is_empty());
    assert!(lines.iter().all(|l| l["estimated"] == true), "{lines:?}");
    let usd = |l: &Value| l["usd"].as_f64().unwrap_or_else(|| panic!("a cost: {l}"));
    let total: f64 = lines.iter().map(usd).sum();
    let project: f64 = lines
        .iter()
        .filter(|l| l["project"] == "uncounted")
        .map(usd)
        .sum();
    // Visible at the four decimals `cost` prints.
    assert!(project >= 0.0001, "{lines:?}");
    let close = |a: &Value, b: f64| a.as_f64().is_some_and(|a| (a - b).abs() < 1e-12);
    for (what, report) in [
        ("/api/costs", d.get("/api/costs").json()),
        ("pegasusctl cost --json", home.json(&["cost"])),
        (
            "/api/costs?project=uncounted",
            d.get("/api/costs?project=uncounted").json(),
        ),
    ] {
        let all = !what.contains("project=");
        let sum = if all { total } else { project };
        assert!(close(&report["total"]["usd"], sum), "{what}: {report}");
        let n = if all {
            lines.len()
        } else {
            lines.iter().filter(|l| l["project"] == "uncounted").count()
        };
        assert_eq!(
            report["total"]["estimated_calls"].as_u64(),
            Some(n as u64),
            "{what}: {report}"
        );
        assert!(
            close(&report["by_project"]["uncounted"]["usd"], project),
            "{what}: {report}"
        );
    }
    let text = home.ctl_ok(&["cost"]);
    assert!(text.contains(&format!("total ${total:.4}")), "{text}");
    let row = text
        .lines()
        .find(|l| l.trim_start().starts_with("uncounted "))
        .unwrap_or_else(|| panic!("a row for the project: {text}"));
    assert!(row.contains(&format!("${project:>10.4}")), "{text}");
    assert!(text.contains("at an estimated cost"), "{text}");
}

#[test]
fn a_non_loopback_listen_is_refused_unless_allowed() {
    let home = Home::with_config("dashboard: {listen: \"0.0.0.0:0\"}\n");
    let out = std::process::Command::new(PEGASUSD)
        .arg("--home")
        .arg(home.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("dashboard.listen") && err.contains("allow_remote"),
        "{err}"
    );
}

/// Issue 32 (6): with `allow_remote: true` a change still comes only from the request's own
/// origin (or `dashboard.public_url`): a page on another port of the same host or on a
/// sibling host cannot create, send, approve or deny with the user's cookie. Issue 32 (4):
/// the dashboard shows a request escaped, with its whole input one click away.
#[test]
fn with_allow_remote_only_the_dashboards_own_origin_may_change_things() {
    let fake = FakeLlm::start().unwrap();
    let home = Home::with_config(&format!(
        "{}workers: {{shutdown_timeout_s: 5}}\n\
         agent: {{reflection: false}}\n\
         dashboard: {{listen: \"127.0.0.1:0\", allow_remote: true, public_url: \"https://pegasus.example.test/\"}}\n",
        fake_provider_config(&fake),
    ));
    let _d = home.start_fake();
    let d = Dash::of(&home);
    let r = http(
        &d.addr,
        "POST",
        "/api/session",
        &[("Authorization", &d.auth())],
        None,
    );
    assert_eq!(r.status, 200);
    let pair = r
        .header("set-cookie")
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    let port: u16 = d.addr.rsplit(':').next().unwrap().parse().unwrap();
    let body = json!({"name": "web", "goal": "a site"}).to_string();
    let create = |origin: &str| {
        http(
            &d.addr,
            "POST",
            "/api/projects",
            &[("Cookie", &pair), ("Origin", origin)],
            Some(&body),
        )
    };
    for foreign in [
        format!("http://127.0.0.1:{}", port.wrapping_add(1)),
        "http://127.0.0.1".to_string(),
        format!("http://localhost:{port}"),
        "https://evil.example.test".to_string(),
        "https://pegasus.example.test.evil.test".to_string(),
        "null".to_string(),
    ] {
        let r = create(&foreign);
        assert_eq!(r.status, 403, "{foreign}: {}", r.body);
        assert!(r.json()["error"]
            .as_str()
            .unwrap()
            .contains("dashboard.public_url"));
    }
    assert!(!home.project_dir("web").exists(), "nothing was created");
    // The configured public origin (a proxy in front) and the request's own origin may.
    let r = create("https://pegasus.example.test");
    assert_eq!(r.status, 200, "{}", r.body);
    // Its worker is up before a request is planted below: a starting worker withdraws the
    // requests no task of its waits for.
    home.ready_worker("web", None);
    let origin = format!("http://{}", d.addr);
    let r = http(
        &d.addr,
        "POST",
        "/api/projects/web/messages",
        &[
            ("Cookie", &pair),
            (
                "Origin",
                &format!("http://127.0.0.1:{}", port.wrapping_add(1)),
            ),
        ],
        Some(&json!({"text": "hi"}).to_string()),
    );
    assert_eq!(r.status, 403, "a send from another port: {}", r.body);

    // A request whose command line would rewrite its own display.
    let sneaky = "touch X #\r\x1b[2Kls -la \u{202e}\u{200b}";
    let dir = home.project_dir("web").join("approvals");
    std::fs::create_dir_all(&dir).unwrap();
    let req = json!({
        "id": "ap-dashsneaky", "project": "web", "task": "", "tool": "exec",
        "summary": sneaky, "asked_at": chrono::Utc::now().to_rfc3339(), "call_id": "toolu_d",
        "input_json": json!({"command": sneaky}).to_string(), "timeout_s": 3600, "always": sneaky,
    });
    std::fs::write(dir.join(".t"), req.to_string()).unwrap();
    std::fs::rename(dir.join(".t"), dir.join("ap-dashsneaky.json")).unwrap();
    let shown = "touch X #\\r\\x1b[2Kls -la \\u{202e}\\u{200b}";
    let hides = |s: &str| {
        s.contains('\r') || s.contains('\x1b') || s.contains('\u{202e}') || s.contains('\u{200b}')
    };
    let list = d.get("/api/approvals");
    assert_eq!(list.status, 200);
    let a = &list.json()[0];
    assert_eq!(a["summary"], shown, "{a}");
    assert_eq!(a["input"]["command"], sneaky);
    for page in ["/approvals", "/approvals/ap-dashsneaky"] {
        let r = d.get(page);
        assert_eq!(r.status, 200, "{page}");
        assert!(r.body.contains(shown), "{page}: {}", r.body);
        assert!(!hides(&r.body), "{page} shows it raw");
    }
    let one = d.get("/approvals/ap-dashsneaky").body;
    assert!(
        one.contains("Whole input") && one.contains("&quot;command&quot;"),
        "{one}"
    );
    assert!(d.get("/static/app.js").body.contains("Whole input"));
    assert_eq!(d.get("/approvals/ap-nosuchone").status, 404);
    // Approving and denying from another port is refused and changes nothing.
    for verb in ["approve", "deny"] {
        let r = http(
            &d.addr,
            "POST",
            &format!("/api/approvals/ap-dashsneaky/{verb}"),
            &[
                ("Cookie", &pair),
                (
                    "Origin",
                    &format!("http://127.0.0.1:{}", port.wrapping_add(1)),
                ),
            ],
            Some("{}"),
        );
        assert_eq!(r.status, 403, "{verb}: {}", r.body);
    }
    assert!(!dir.join("ap-dashsneaky.answer.json").exists());
    let r = http(
        &d.addr,
        "POST",
        "/api/approvals/ap-dashsneaky/deny",
        &[("Cookie", &pair), ("Origin", &origin)],
        Some("{}"),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(dir.join("ap-dashsneaky.answer.json").exists());
}
