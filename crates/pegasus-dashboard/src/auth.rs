//! Who may talk to the dashboard: a request must name this server in `Host` (a DNS-rebinding
//! page cannot), carry the token (`Authorization: Bearer`) or a session cookie got for it, and,
//! when it changes something, come from this origin.

use crate::Dash;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::io::Read;
use std::path::Path;

const COOKIE: &str = "pegasus_session";

/// The token in `path`, made (32 random bytes, hex, mode 0600) when missing.
pub(super) fn ensure_token(path: &Path) -> Result<String, String> {
    if let Ok(t) = pegasus_store::read_text_limited(path, 4096) {
        let t = t.trim().to_string();
        if t.len() >= 32 {
            return Ok(t);
        }
    }
    let token = random_hex(32)?;
    pegasus_store::write_atomic(path, token.as_bytes()).map_err(|e| e.to_string())?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(token)
}

fn random_hex(bytes: usize) -> Result<String, String> {
    let mut buf = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .map_err(|e| format!("cannot read /dev/urandom: {e}"))?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// Equal without telling how much matched by how long it took.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

pub(super) fn error(status: StatusCode, msg: &str) -> Response {
    (status, axum::Json(serde_json::json!({"error": msg}))).into_response()
}

fn allowed_hosts(d: &Dash) -> Vec<String> {
    if d.addr.ip().is_unspecified() || d.door.config().dashboard.allow_remote {
        // Served on every address (or remotely): the host name cannot be pinned.
        return Vec::new();
    }
    vec![d.addr.to_string(), format!("localhost:{}", d.addr.port())]
}

fn bearer(h: &HeaderMap) -> Option<&str> {
    h.get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
}

fn cookie(h: &HeaderMap) -> Option<String> {
    h.get_all(header::COOKIE).iter().find_map(|v| {
        v.to_str().ok()?.split(';').find_map(|kv| {
            let (k, v) = kv.trim().split_once('=')?;
            (k == COOKIE).then(|| v.to_string())
        })
    })
}

/// How a request proved who it is.
#[derive(Clone, Copy, PartialEq)]
enum Auth {
    Token,
    Cookie,
    None,
}

fn who(d: &Dash, h: &HeaderMap) -> Auth {
    if bearer(h).is_some_and(|t| same(t, &d.token)) {
        return Auth::Token;
    }
    if let Some(c) = cookie(h) {
        let sessions = d.sessions.lock().unwrap_or_else(|p| p.into_inner());
        if sessions.iter().any(|s| same(s, &c)) {
            return Auth::Cookie;
        }
    }
    Auth::None
}

/// The middleware in front of every route.
pub(super) async fn guard(State(d): State<Dash>, req: Request, next: Next) -> Response {
    let hosts = allowed_hosts(&d);
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !hosts.is_empty() && !hosts.iter().any(|h| h == host) {
        return error(
            StatusCode::FORBIDDEN,
            &format!(
                "unknown Host `{host}`: open the dashboard at http://{}/",
                d.addr
            ),
        );
    }
    let path = req.uri().path().to_string();
    let auth = who(&d, req.headers());
    let public = path == "/static/app.js" || path == "/static/app.css" || path == "/api/session";
    if auth == Auth::None && !public {
        if path.starts_with("/api/") {
            return error(
                StatusCode::UNAUTHORIZED,
                "no valid token: send `Authorization: Bearer <token>` (the token is in <home>/run/dashboard.token; `pegasusctl dashboard` prints a URL with it)",
            );
        }
        return (StatusCode::UNAUTHORIZED, super::pages::login()).into_response();
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let origin = req
            .headers()
            .get(header::ORIGIN)
            .and_then(|v| v.to_str().ok());
        let public = d.door.config().dashboard.public_origin().ok().flatten();
        let ok = match origin {
            // Whatever `allow_remote` says: a page of another port or a sibling host is
            // another origin, and the cookie would go with its request.
            Some(o) => same_origin(o, host, public.as_deref()),
            // A browser always sends Origin on a POST; only a token holder (curl, scripts)
            // may leave it out.
            None => auth == Auth::Token || path == "/api/session",
        };
        if !ok {
            return error(
                StatusCode::FORBIDDEN,
                "cross-origin request refused: changes are only accepted from the dashboard's own pages (behind a proxy, set `dashboard.public_url` to the URL you open)",
            );
        }
    }
    next.run(req).await
}

/// Whether `origin` is the request's own origin (`http(s)://` and its `Host`, exactly) or the
/// configured public one (`dashboard.public_url`, for a proxy that rewrites `Host`).
fn same_origin(origin: &str, host: &str, public: Option<&str>) -> bool {
    let origin = origin.trim().to_ascii_lowercase();
    let host = host.trim().to_ascii_lowercase();
    if public.is_some_and(|p| origin == p) {
        return true;
    }
    !host.is_empty() && (origin == format!("http://{host}") || origin == format!("https://{host}"))
}

/// `POST /api/session` with the token as Bearer: a session cookie (HttpOnly, SameSite=Strict)
/// so the page can drop the token from its URL.
pub(super) async fn session(State(d): State<Dash>, headers: HeaderMap) -> Response {
    if who(&d, &headers) != Auth::Token {
        return error(StatusCode::UNAUTHORIZED, "wrong or missing token");
    }
    let id = match random_hex(32) {
        Ok(id) => id,
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, &e),
    };
    d.sessions
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(id.clone());
    (
        [(
            header::SET_COOKIE,
            format!("{COOKIE}={id}; HttpOnly; SameSite=Strict; Path=/"),
        )],
        axum::Json(serde_json::json!({"ok": true})),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::same_origin;

    #[test]
    fn only_the_requests_own_origin_or_the_public_one_may_change_things() {
        assert!(same_origin("http://127.0.0.1:7474", "127.0.0.1:7474", None));
        assert!(same_origin(
            "https://dash.example.com",
            "dash.example.com",
            None
        ));
        // Another port, a sibling, a lookalike, an opaque origin: refused.
        for bad in [
            "http://127.0.0.1:8080",
            "http://127.0.0.1",
            "http://evil.example.com",
            "http://dash.example.com.evil.test",
            "null",
            "",
        ] {
            assert!(!same_origin(bad, "127.0.0.1:7474", None), "{bad}");
            assert!(!same_origin(bad, "dash.example.com", None), "{bad}");
        }
        assert!(!same_origin("http://x", "", None));
        // Behind a proxy that rewrites Host: the configured public origin.
        let public = Some("https://pegasus.example.com");
        assert!(same_origin(
            "https://pegasus.example.com",
            "127.0.0.1:7474",
            public
        ));
        assert!(!same_origin(
            "https://other.example.com",
            "127.0.0.1:7474",
            public
        ));
    }
}
