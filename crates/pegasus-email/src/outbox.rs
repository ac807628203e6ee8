//! What Pegasus mails without being asked (DESIGN.md §17): approval requests, project
//! notifications and crashes, to every allowed sender.
//!
//! An approval request is sent once: `<home>/email/approvals` lists what was sent (`ID
//! ADDRESS`, one line each), written atomically after the SMTP server took the mail; at start
//! (and after the bus dropped events for this reader) the waiting requests are listed and only
//! those not in the file are sent, with a Message-ID derived from the request and the
//! recipient, so the one window left (a crash between the server's acceptance and the write)
//! repeats a mail a client shows once. Its text is plain, everything from the request escaped
//! (control, escape, bidi and zero-width characters written out), and its subject is made of
//! the request's id and project only, so nothing in a command line reaches a header. The
//! person answers by replying with `approve ID` or `deny ID [reason]` as the first line.

use crate::mail::{derived_id, Head};
use crate::{send, Mailer};
use pegasus_proto::ctl::{ApprovalInfo, CtlRequest, CtlResponse};
use pegasus_proto::shown::escape;
use pegasus_proto::{BusBody, Channel, WorkerEvent};
use pegasus_supervisor::front_door::{self as bus, refusal, Received};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

/// Project notifications (`notify`) and crashes, to every allowed sender.
pub(crate) async fn notifications(m: Arc<Mailer>) {
    let mut rx = m.door.subscribe();
    loop {
        let got = tokio::select! {
            _ = m.door.shutdown().cancelled() => return,
            got = bus::next(&mut rx) => got,
        };
        let e = match got {
            Some(Received::Event(e)) => e,
            Some(Received::Lagged(_)) => continue,
            None => return,
        };
        let (subject, text) = match &e.body {
            BusBody::Notify { text } => (format!("[{}] notification", e.project), text.clone()),
            BusBody::Crash { reason } => (
                format!("[{}] worker crashed", e.project),
                format!("The worker of project {} crashed: {reason}", e.project),
            ),
            _ => continue,
        };
        let seed = format!(
            "{}\n{}\n{subject}\n{text}",
            e.project,
            chrono::Utc::now().to_rfc3339()
        );
        for to in &m.allowed {
            let head = Head {
                to: to.clone(),
                subject: crate::mail::clean(&subject),
                message_id: derived_id("note", &format!("{seed}\n{to}"), &m.cfg.address),
                in_reply_to: None,
                references: Vec::new(),
            };
            send(&m, &head, &text).await;
        }
    }
}

/// The approval mail of `r`: subject and body.
pub(crate) fn approval_mail(r: &ApprovalInfo) -> (String, String) {
    let (id, project, task, tool, summary) = (
        escape(&r.id),
        escape(&r.project),
        escape(&r.task),
        escape(&r.tool),
        escape(&r.summary),
    );
    let task = if task.is_empty() {
        String::new()
    } else {
        format!(", task {task}")
    };
    let what = match tool.as_str() {
        "exec" => "exec wants to run:".to_string(),
        "merge" => "a merge waits:".to_string(),
        tool => format!("{tool} wants to be called:"),
    };
    let subject = crate::mail::clean(&format!("Approval {id} needed in {project}"));
    let body = format!(
        "Approval needed in {project}{task}\n{what}\n\n    {summary}\n\nReply to this mail with one of these as the first line:\n\napprove {id}\ndeny {id} REASON\n\n(or `pegasusctl approve {id}` / `pegasusctl deny {id}`)\n"
    );
    (subject, body)
}

/// The file of approval mails sent.
struct Sent {
    path: PathBuf,
    lines: BTreeSet<(String, String)>,
}

impl Sent {
    fn load(path: PathBuf) -> Sent {
        let text = pegasus_store::read_text_limited(&path, 4 << 20).unwrap_or_default();
        let lines = text
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(id, to)| (id.to_string(), to.to_string()))
            .collect();
        Sent { path, lines }
    }

    fn save(&self) {
        let text: String = self
            .lines
            .iter()
            .map(|(id, to)| format!("{id} {to}\n"))
            .collect();
        if let Err(e) = pegasus_fs::write_atomic(&self.path, text.as_bytes()) {
            tracing::warn!("email: cannot save which approvals were mailed ({e}); after a restart they may be mailed again");
        }
    }

    fn forget(&mut self, id: &str) {
        let before = self.lines.len();
        self.lines.retain(|(i, _)| i != id);
        if self.lines.len() != before {
            self.save();
        }
    }
}

/// Mails each waiting request to the allowed senders, once, until the daemon stops.
pub(crate) async fn approvals(m: Arc<Mailer>) {
    if m.allowed.is_empty() {
        return;
    }
    // Subscribed before listing: a request asked in between is both listed and announced,
    // and the file keeps it from going out twice.
    let mut rx = m.door.subscribe();
    let mut sent = Sent::load(m.door.home().root().join("email").join("approvals"));
    let mut closed = BTreeSet::new();
    catch_up(&m, &mut sent, &closed).await;
    loop {
        let got = tokio::select! {
            _ = m.door.shutdown().cancelled() => return,
            got = bus::next(&mut rx) => got,
        };
        match got {
            Some(Received::Event(e)) => match &e.body {
                BusBody::Worker(WorkerEvent::Approval { request })
                    if !closed.contains(&request.id) =>
                {
                    offer(&m, &mut sent, request).await;
                }
                BusBody::Worker(WorkerEvent::ApprovalAnswered { id, .. }) => {
                    closed.insert(id.clone());
                    sent.forget(id);
                }
                _ => {}
            },
            Some(Received::Lagged(n)) => {
                tracing::info!(
                    "email: {n} bus events missed; looking for approvals not mailed yet"
                );
                catch_up(&m, &mut sent, &closed).await;
            }
            None => return,
        }
    }
}

async fn catch_up(m: &Mailer, sent: &mut Sent, closed: &BTreeSet<String>) {
    let req = CtlRequest::Approvals { project: None };
    let waiting = match m.door.request(&Channel::Email(None), req).await {
        CtlResponse::Approvals(list) => list,
        other => {
            return tracing::warn!(
                "email: cannot list the waiting approvals: {}",
                refusal(other)
            )
        }
    };
    let ids: BTreeSet<&str> = waiting.iter().map(|r| r.id.as_str()).collect();
    let gone: Vec<String> = sent
        .lines
        .iter()
        .filter(|(id, _)| !ids.contains(id.as_str()))
        .map(|(id, _)| id.clone())
        .collect();
    for id in gone {
        sent.forget(&id);
    }
    // Mailed before a crash that came before the file was written: the copy in the mailbox
    // says so.
    let mut unsent: Vec<(String, String)> = Vec::new();
    for r in waiting.iter().filter(|r| !closed.contains(&r.id)) {
        for to in &m.allowed {
            if !sent.lines.contains(&(r.id.clone(), to.clone())) {
                unsent.push((r.id.clone(), to.clone()));
            }
        }
    }
    let ids: Vec<String> = unsent
        .iter()
        .map(|(id, to)| approval_id(m, id, to))
        .collect();
    let found = crate::sent_before(m, &ids).await;
    for (line, id) in unsent.into_iter().zip(ids) {
        if found.contains(&id) {
            sent.lines.insert(line);
            sent.save();
        }
    }
    for r in waiting.iter().filter(|r| !closed.contains(&r.id)) {
        offer(m, sent, r).await;
    }
}

/// The Message-ID of request `id`'s mail to `to`.
fn approval_id(m: &Mailer, id: &str, to: &str) -> String {
    derived_id("approval", &format!("{id}\n{to}"), &m.cfg.address)
}

async fn offer(m: &Mailer, sent: &mut Sent, r: &ApprovalInfo) {
    let (subject, body) = approval_mail(r);
    for to in &m.allowed {
        let line = (r.id.clone(), to.clone());
        if sent.lines.contains(&line) {
            continue;
        }
        let head = Head {
            to: to.clone(),
            subject: subject.clone(),
            message_id: approval_id(m, &r.id, to),
            in_reply_to: None,
            references: Vec::new(),
        };
        if send(m, &head, &body).await {
            tracing::info!(id = %r.id, %to, "email: approval request mailed");
            sent.lines.insert(line);
            sent.save();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_approval_mail_hides_nothing_and_keeps_the_command_out_of_the_headers() {
        let r = ApprovalInfo {
            id: "ap-1".into(),
            project: "web".into(),
            task: "t-1".into(),
            tool: "exec".into(),
            summary: "touch X #\r\nBcc: evil@x\x1b[2K \u{202e}".into(),
            asked_at: "2026-11-26T10:00:00Z".into(),
            input: String::new(),
        };
        let (subject, body) = approval_mail(&r);
        assert_eq!(subject, "Approval ap-1 needed in web");
        assert!(
            body.contains("touch X #\\r\\nBcc: evil@x\\x1b[2K \\u{202e}"),
            "{body}"
        );
        assert!(
            body.contains("\napprove ap-1\ndeny ap-1 REASON\n"),
            "{body}"
        );
        assert!(!pegasus_proto::shown::has_hidden(&body.replace('\n', " ")));
        assert_eq!(
            crate::mail::ask("approve ap-1\n> Approval needed"),
            crate::mail::Ask::Approval {
                id: "ap-1".into(),
                approve: true,
                reason: None
            }
        );
    }
}
