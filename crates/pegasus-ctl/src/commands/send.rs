//! `pegasusctl project send NAME TEXT [--wait] [--id ID]`: a message that never runs twice
//! (DESIGN.md §11). It carries a client id (`--id`, or one made here); when the answer is lost in a
//! way that leaves open whether pegasusd took the message (the connection dropped, the worker
//! died before it said so), the same request is sent once more with the same id, and
//! pegasusd answers a repeat with the first message's id (and its reply) without running it
//! again.

use crate::{
    cli::SendArgs,
    client::{ok, Client},
    CtlError,
};
use pegasus_proto::ctl::{CtlRequest, CtlResponse, ErrorKind};
use pegasus_store::Home;
use std::time::{Duration, Instant};

/// How long the retry waits for a daemon that went away to be back (a supervised pegasusd is
/// restarted within seconds: the shipped unit's `RestartSec` is 2).
const PATIENCE: Duration = Duration::from_secs(10);

pub(crate) async fn run(home: &Home, json: bool, send: SendArgs) -> Result<(), CtlError> {
    let SendArgs {
        name,
        text,
        wait,
        stream,
        id,
    } = send;
    let (req, client_id) = send_request(&name, text, wait, id);
    // Said before anything else, so the streamed text is not what tells a stopped daemon.
    let first = Client::connect(home).await?;
    if wait && super::wants_stream(stream, json) {
        let (resp, streamed) =
            super::streaming(home, &name, request(home, first, req, &client_id)).await;
        return match resp? {
            CtlResponse::Reply { text, .. } => {
                super::finish_stream(&streamed, &text);
                Ok(())
            }
            other => Err(CtlError::Failed(format!(
                "unexpected answer to send: {other:?}"
            ))),
        };
    }
    let sent = request(home, first, req, &client_id);
    let resp = if wait {
        // A call of its task may wait for a person: say which, and how to answer.
        super::watching_approvals(home, &name, sent).await
    } else {
        sent.await
    };
    match resp? {
        CtlResponse::Sent { id } if json => {
            super::print_json(&serde_json::json!({"project": name, "id": id}))
        }
        CtlResponse::Sent { id } => {
            println!("sent to {name} (message {id}); its answer, or why it failed: `pegasusctl project log {name} -f`");
            Ok(())
        }
        CtlResponse::Reply { id, text } if json => {
            super::print_json(&serde_json::json!({"project": name, "id": id, "reply": text}))
        }
        CtlResponse::Reply { text, .. } => {
            println!("{text}");
            Ok(())
        }
        other => Err(CtlError::Failed(format!(
            "unexpected answer to send: {other:?}"
        ))),
    }
}

/// The request of a send to project `name`, with its client id (`id`, or one made here).
pub(crate) fn send_request(
    name: &str,
    text: String,
    wait: bool,
    id: Option<String>,
) -> (CtlRequest, String) {
    let client_id = id.unwrap_or_else(new_client_id);
    let req = CtlRequest::ProjectSend {
        name: name.to_string(),
        text,
        wait,
        client_id: Some(client_id.clone()),
    };
    (req, client_id)
}

/// How one attempt ended.
enum Attempt {
    /// An answer, or a failure that says the message was not taken (or was, and failed).
    Done(Result<CtlResponse, CtlError>),
    /// Lost in a way that leaves open whether the message was taken; the line says how.
    Ambiguous(String),
}

/// The send on `client`, and once more on a new connection after an ambiguous failure.
pub(crate) async fn request(
    home: &Home,
    client: Client,
    req: CtlRequest,
    client_id: &str,
) -> Result<CtlResponse, CtlError> {
    if let Attempt::Done(result) = attempt(client, req.clone()).await {
        return result;
    }
    match attempt(connect_patiently(home).await?, req).await {
        Attempt::Done(result) => result,
        Attempt::Ambiguous(why) => Err(CtlError::Failed(format!(
            "{why} (tried twice; `--id {client_id}` sends it again without running it twice)"
        ))),
    }
}

async fn attempt(mut client: Client, req: CtlRequest) -> Attempt {
    match client.request(req).await {
        // The request may have been read before the connection broke.
        Err(e) => Attempt::Ambiguous(e.to_string()),
        // The worker went away before it said whether it has the message (or before it
        // answered): with the same id, asking again is safe.
        Ok(CtlResponse::Failed {
            kind: ErrorKind::Unavailable,
            message,
        }) => Attempt::Ambiguous(message),
        Ok(resp) => Attempt::Done(ok(resp)),
    }
}

/// A connection that said hello, waiting up to [`PATIENCE`] for a daemon that is not (yet)
/// back. Any failure short of that counts as "not yet": a daemon being killed can still
/// accept a connection in its last moment and then reset it, before the request is written.
async fn connect_patiently(home: &Home) -> Result<Client, CtlError> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        match Client::connect(home).await {
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            done => return done,
        }
    }
}

/// A client id no other send will have: 64 random bits from the kernel, or, failing that,
/// the time, the pid and a counter.
fn new_client_id() -> String {
    use std::io::Read as _;
    let mut bytes = [0u8; 8];
    let random = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .is_ok();
    if random {
        return format!("cli-{:016x}", u64::from_le_bytes(bytes));
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("cli-{nanos:x}-{}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_ids_differ() {
        let ids: std::collections::HashSet<String> = (0..100).map(|_| new_client_id()).collect();
        assert_eq!(ids.len(), 100);
        assert!(ids.iter().all(|id| id.starts_with("cli-")));
    }
}
