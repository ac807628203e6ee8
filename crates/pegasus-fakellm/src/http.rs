//! A deliberately minimal HTTP/1.1 server side.
//!
//! The fake only needs to talk to well-behaved HTTP clients (reqwest, the
//! provider SDKs), so it supports exactly one shape of request: a request
//! line, headers, and an optional `Content-Length` body. Anything else
//! (`Transfer-Encoding`, oversized heads, garbage) is refused with a 400
//! that carries `Connection: close`, and the connection is closed.
//! Connections are persistent, as the real APIs' are: after a complete
//! response the next request is read from the same connection, unless the
//! client asked to close it (`Connection: close`, or HTTP/1.0 without
//! `Connection: keep-alive`). A client's connection pool is thus exercised
//! as against a real provider.
//!
//! Streaming responses use chunked transfer encoding so that a connection
//! cut before the terminating chunk is seen by the client as a broken body,
//! exactly like a real server dying mid-stream.

use std::io;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest request head (request line + headers) we accept.
const MAX_HEAD: usize = 64 * 1024;
/// Largest request body we accept; real prompts are far smaller.
const MAX_BODY: usize = 64 * 1024 * 1024;

/// One parsed HTTP request.
#[derive(Debug)]
pub(crate) struct Request {
    pub method: String,
    /// The request target as sent (path plus optional query).
    pub target: String,
    /// Header names are lowercased; values are trimmed.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The client keeps the connection for another request after this one.
    pub keep_alive: bool,
}

impl Request {
    /// The target without its query string, used for routing.
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or("")
    }
}

/// Why a request could not be read.
#[derive(Debug, thiserror::Error)]
enum HttpError {
    #[error("i/o error: {0}")]
    Io(#[from] io::Error),
    #[error("connection closed before a full request arrived")]
    Closed,
    #[error("{0}")]
    Bad(String),
}

fn bad(msg: impl Into<String>) -> HttpError {
    HttpError::Bad(msg.into())
}

/// One client connection: the stream and the bytes read from it beyond the last request.
pub(crate) struct Conn {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    pub fn new(stream: TcpStream) -> Conn {
        let _ = stream.set_nodelay(true);
        Conn {
            stream,
            buf: Vec::new(),
        }
    }

    /// Reads the next request; `None` when there is none to answer: the client closed the
    /// connection (between requests or in the middle of one), or sent one that could not be
    /// read, which is refused first ([`write_refusal`]).
    pub async fn next_request(&mut self) -> Option<Request> {
        match read_request(&mut self.stream, &mut self.buf).await {
            Ok(r) => Some(r),
            Err(HttpError::Bad(msg)) => {
                let _ = write_refusal(&mut self.stream, &msg).await;
                None
            }
            Err(_) => None,
        }
    }
}

/// Reads one request (head and `Content-Length` body) from the stream; `buf` holds what was
/// read past the previous request and keeps what is read past this one.
async fn read_request(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Result<Request, HttpError> {
    let mut chunk = [0u8; 8 * 1024];
    let head_end = loop {
        if let Some(p) = find(buf, b"\r\n\r\n") {
            break p;
        }
        if buf.len() > MAX_HEAD {
            return Err(bad("request head too large"));
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(HttpError::Closed);
        }
        buf.extend_from_slice(&chunk[..n]);
    };

    // What follows the head is the body, and maybe the start of the next request.
    let mut body = buf.split_off(head_end + 4);
    let head_bytes = std::mem::take(buf);
    let head = std::str::from_utf8(&head_bytes[..head_end])
        .map_err(|_| bad("request head is not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or("");
    let mut parts = request_line.split(' ');
    let (method, target, version) = match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(m), Some(t), Some(v), None) if !m.is_empty() && t.starts_with('/') => (m, t, v),
        _ => return Err(bad(format!("malformed request line: {request_line:?}"))),
    };
    if !version.starts_with("HTTP/1.") {
        return Err(bad(format!("unsupported HTTP version {version:?}")));
    }
    let http10 = version == "HTTP/1.0";

    let mut headers = Vec::new();
    for line in lines {
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| bad(format!("malformed header line: {line:?}")))?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
    }

    if headers.iter().any(|(n, _)| n == "transfer-encoding") {
        return Err(bad(
            "Transfer-Encoding is not supported by the fake server; send Content-Length",
        ));
    }
    let mut content_length: Option<usize> = None;
    for (_, v) in headers.iter().filter(|(n, _)| n == "content-length") {
        let len: usize = v
            .parse()
            .map_err(|_| bad(format!("invalid Content-Length {v:?}")))?;
        if content_length.is_some_and(|l| l != len) {
            return Err(bad("conflicting Content-Length headers"));
        }
        content_length = Some(len);
    }
    let len = content_length.unwrap_or(0);
    if len > MAX_BODY {
        return Err(bad("request body too large"));
    }
    // `Connection` is a comma-separated list of options (RFC 9110 §7.6.1).
    let connection = |option: &str| {
        headers
            .iter()
            .filter(|(n, _)| n == "connection")
            .flat_map(|(_, v)| v.split(','))
            .any(|o| o.trim().eq_ignore_ascii_case(option))
    };
    let keep_alive = if http10 {
        connection("keep-alive")
    } else {
        !connection("close")
    };

    let expects_continue = headers
        .iter()
        .any(|(n, v)| n == "expect" && v.eq_ignore_ascii_case("100-continue"));
    if expects_continue && body.len() < len {
        // curl sends this for large bodies and waits for the go-ahead.
        stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await?;
        stream.flush().await?;
    }
    // Bytes past the body belong to the next request.
    if body.len() > len {
        *buf = body.split_off(len);
    }
    while body.len() < len {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(HttpError::Closed);
        }
        let want = (len - body.len()).min(n);
        body.extend_from_slice(&chunk[..want]);
        buf.extend_from_slice(&chunk[want..n]);
    }

    Ok(Request {
        method: method.to_string(),
        target: target.to_string(),
        headers,
        body,
        keep_alive,
    })
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Standard reason phrases for the codes the fake emits (529 is Anthropic's).
pub(crate) fn reason(code: u16) -> &'static str {
    match code {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        408 => "Request Timeout",
        413 => "Payload Too Large",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        529 => "Overloaded",
        _ => "Status",
    }
}

/// How the body of a response is framed.
pub(crate) enum Framing {
    /// `Content-Length: n`.
    Length(usize),
    /// `Transfer-Encoding: chunked`, written with [`write_chunk`] / [`finish_chunks`].
    Chunked,
}

/// The status line and headers. No `Connection` header unless `extra` has one: an HTTP/1.1
/// connection is persistent unless one side says otherwise (see [`write_refusal`]).
fn head(code: u16, content_type: &str, extra: &[(&str, String)], framing: Framing) -> String {
    let mut head = format!(
        "HTTP/1.1 {code} {}\r\ncontent-type: {content_type}\r\n",
        reason(code)
    );
    match framing {
        Framing::Length(n) => head.push_str(&format!("content-length: {n}\r\n")),
        Framing::Chunked => {
            head.push_str("transfer-encoding: chunked\r\ncache-control: no-cache\r\n")
        }
    }
    for (name, value) in extra {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    head
}

/// Writes the status line and headers (of a body that follows in later writes).
pub(crate) async fn write_head(
    stream: &mut TcpStream,
    code: u16,
    content_type: &str,
    extra: &[(&str, String)],
    framing: Framing,
) -> io::Result<()> {
    stream
        .write_all(head(code, content_type, extra, framing).as_bytes())
        .await?;
    stream.flush().await
}

/// Writes a complete response with a `Content-Length` body in one write, as a real server
/// sends a small answer (head and body in the same segment): written in two, a client on the
/// same CPU is woken for the head alone and again for the body, which no real API makes it pay.
pub(crate) async fn write_full(
    stream: &mut TcpStream,
    code: u16,
    content_type: &str,
    extra: &[(&str, String)],
    body: &[u8],
) -> io::Result<()> {
    let mut out = head(code, content_type, extra, Framing::Length(body.len())).into_bytes();
    out.extend_from_slice(body);
    stream.write_all(&out).await?;
    stream.flush().await
}

/// Writes a complete `application/json` response ([`write_full`]).
pub(crate) async fn write_json(
    stream: &mut TcpStream,
    code: u16,
    extra: &[(&str, String)],
    body: &serde_json::Value,
) -> io::Result<()> {
    write_full(
        stream,
        code,
        "application/json",
        extra,
        body.to_string().as_bytes(),
    )
    .await
}

/// Refuses a request that could not be read (400, an `invalid_request_error` naming the
/// problem) with `Connection: close`, and closes: what follows a bad request on the
/// connection cannot be trusted to start a new one.
async fn write_refusal(stream: &mut TcpStream, message: &str) -> io::Result<()> {
    let body = serde_json::json!({"error": {"type": "invalid_request_error", "message": message}});
    write_json(stream, 400, &[("connection", "close".to_string())], &body).await?;
    stream.shutdown().await
}

/// Writes one chunk of a chunked body and flushes it so the client sees it now.
pub(crate) async fn write_chunk(stream: &mut TcpStream, data: &[u8]) -> io::Result<()> {
    if data.is_empty() {
        return Ok(()); // an empty chunk would terminate the body
    }
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    stream.write_all(&out).await?;
    stream.flush().await
}

/// Terminates a chunked body properly.
pub(crate) async fn finish_chunks(stream: &mut TcpStream) -> io::Result<()> {
    stream.write_all(b"0\r\n\r\n").await?;
    stream.flush().await
}

/// Holds the connection open, doing nothing, until the client goes away
/// (or the server shuts down and drops the task).
pub(crate) async fn hold_until_client_leaves(stream: &mut TcpStream) {
    let mut byte = [0u8; 64];
    loop {
        match stream.read(&mut byte).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}
