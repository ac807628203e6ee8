//! The e-mail channel (DESIGN.md §17): IMAP for what arrives, SMTP for what Pegasus sends, a
//! client of pegasusd's core through its [`FrontDoor`] like the Telegram channel.
//!
//! The mailbox `email.imap.mailbox` is read in UID order, with IDLE where the server offers
//! it and a look every `email.poll_s` where not; a broken connection is opened again after
//! 1 s, doubling to 5 min. A mail from an allowed sender (and, with `email.authserv_id`,
//! vouched for by the mail server's DKIM or DMARC verdict) becomes a job ([`state`]): a
//! message on channel `email:<address>` to the project its `+tag` or `[name]` subject tag
//! names, else to the MainAgent; an `approve ID` / `deny ID [reason]` first line answers an
//! approval; a mail over `email.max_bytes` or with attachments gets one short answer. Every
//! answer goes back as a reply in the same thread with a Message-ID derived from the mail it
//! answers. Others' mail is logged and left. Approval requests, project notifications and
//! crashes are mailed to the allowed senders ([`outbox`]).

mod mail;
mod net;
mod outbox;
mod state;

use mail::{Ask, Auth, Incoming, Route};
use net::{ImapSession, SendError, Smtp};
use pegasus_proto::ctl::{CtlRequest, CtlResponse};
use pegasus_proto::Channel;
use pegasus_store::email::EmailConfig;
use pegasus_supervisor::front_door::refusal;
use pegasus_supervisor::FrontDoor;
use state::{Cursor, Job, Store, Work};
use std::sync::Arc;
use std::time::Duration;

/// The e-mail channel as a client of pegasusd's core ([`pegasus_supervisor::DaemonOptions`]);
/// it runs when config.yml has `email:` and pegasusd found the IMAP password.
pub fn client() -> pegasus_supervisor::Client {
    Box::new(|door: FrontDoor| {
        let cfg = door.config().email.clone()?;
        let Some(imap_pw) = door.secret(&cfg.imap.password_env).map(str::to_string) else {
            tracing::warn!(
                "email: ${} (email.imap.password_env) is not set, so the e-mail channel is off; set it in pegasusd's environment and restart",
                cfg.imap.password_env
            );
            return None;
        };
        let smtp_pw = door.secret(&cfg.smtp.password_env).map(str::to_string);
        if !cfg.smtp.user.is_empty() && smtp_pw.is_none() {
            tracing::warn!(
                "email: ${} (email.smtp.password_env) is not set, so the e-mail channel is off; set it in pegasusd's environment and restart",
                cfg.smtp.password_env
            );
            return None;
        }
        Some(Box::pin(run(door, cfg, imap_pw, smtp_pw)) as _)
    })
}

/// What every part of the channel shares.
struct Mailer {
    door: FrontDoor,
    /// The IMAP password, for the reader and the look for what was sent before a crash.
    imap_pw: String,
    /// The TLS client of `email.imap` (its roots read once, at start).
    imap_tls: tokio_rustls::TlsConnector,
    cfg: EmailConfig,
    smtp: Smtp,
    store: Store,
    /// `allowed_senders`, lower case.
    allowed: Vec<String>,
}

impl Mailer {
    fn allows(&self, from: &str) -> bool {
        !from.is_empty() && self.allowed.iter().any(|a| a == from)
    }
}

/// The first wait after a broken connection; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// How long one IDLE lasts before it is renewed (servers drop an IDLE after 30 min).
const IDLE_FOR: Duration = Duration::from_secs(5 * 60);

async fn run(door: FrontDoor, cfg: EmailConfig, imap_pw: String, smtp_pw: Option<String>) {
    let store = match Store::open(door.home().root()) {
        Ok(s) => s,
        Err(e) => return tracing::error!("email: {e}; the e-mail channel is off"),
    };
    let smtp = match Smtp::new(&cfg.smtp, smtp_pw.as_deref(), &cfg.address) {
        Ok(s) => s,
        Err(e) => return tracing::error!("email: {e}; the e-mail channel is off"),
    };
    let imap_tls = match net::imap_tls(&cfg.imap) {
        Ok(t) => t,
        Err(e) => return tracing::error!("email: {e}; the e-mail channel is off"),
    };
    let allowed = cfg
        .allowed_senders
        .iter()
        .map(|a| a.trim().to_ascii_lowercase())
        .collect();
    let m = Arc::new(Mailer {
        door,
        imap_pw,
        imap_tls,
        cfg,
        smtp,
        store,
        allowed,
    });
    if m.allowed.is_empty() {
        tracing::warn!("email: `email.allowed_senders` is empty, so every mail is left alone; add your address");
    } else if m.cfg.authserv_id.is_none() {
        tracing::warn!("email: `email.authserv_id` is not set, so a mail counts by its From address alone, which anyone can forge; set it to the authserv-id your mail server writes in Authentication-Results (see docs/GUIDE.md, E-mail)");
    }
    tracing::info!(
        address = %m.cfg.address,
        senders = m.allowed.len(),
        "email channel started"
    );
    let checked = m.clone();
    tokio::spawn(async move {
        if let Err(e) = checked.smtp.check().await {
            tracing::warn!(
                "email: SMTP {}:{}: {e}; no mail can be sent until this is fixed",
                checked.cfg.smtp.host,
                checked.cfg.smtp.port
            );
        }
    });
    let jobs = m.store.jobs();
    // A reply whose sending was cut off may have gone out: its copy in the mailbox says so.
    let intents: Vec<String> = jobs
        .iter()
        .filter(|j| j.answer.is_some())
        .map(|j| j.head.message_id.clone())
        .collect();
    let gone = sent_before(&m, &intents).await;
    for job in jobs {
        if gone.contains(&job.head.message_id) {
            tracing::info!(job = %job.key, "email: the reply went out before the restart (its copy is in the mailbox); not sent again");
            m.store.finish_job(&job.key);
            continue;
        }
        tracing::info!(job = %job.key, "email: resuming a mail not answered before the restart");
        tokio::spawn(run_job(m.clone(), job));
    }
    tokio::spawn(outbox::notifications(m.clone()));
    tokio::spawn(outbox::approvals(m.clone()));
    let mut backoff = FIRST_BACKOFF;
    let mut last_error = String::new();
    loop {
        let round = tokio::select! {
            _ = m.door.shutdown().cancelled() => return,
            r = read_mailbox(&m, &mut backoff) => r,
        };
        let Err(e) = round;
        if e != last_error {
            tracing::warn!(
                "email: IMAP {}:{}: {e}; trying again in {} s, then less and less often (at most every {} s)",
                m.cfg.imap.host,
                m.cfg.imap.port,
                backoff.as_secs(),
                MAX_BACKOFF.as_secs()
            );
            last_error = e;
        }
        tokio::select! {
            _ = m.door.shutdown().cancelled() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// One IMAP connection's life: reads every new mail, then waits for more, until it breaks.
/// Which of `ids` (Message-IDs of mails Pegasus meant to send) are in its mailbox already: the
/// blind copy each mail it sends carries. Asked at start only; when the mailbox cannot be
/// asked, none (the mail is sent again, with the same Message-ID).
pub(crate) async fn sent_before(m: &Mailer, ids: &[String]) -> Vec<String> {
    if ids.is_empty() {
        return Vec::new();
    }
    let found = async {
        let (mut session, ..) = net::imap_open(&m.cfg.imap, &m.imap_tls, &m.imap_pw).await?;
        let found = net::present(&mut session, ids).await;
        let _ = session.logout().await;
        found
    };
    match found.await {
        Ok(found) => found,
        Err(e) => {
            tracing::warn!("email: cannot look in the mailbox for mails sent before the restart ({e}); {} may be sent again", ids.len());
            Vec::new()
        }
    }
}

async fn read_mailbox(
    m: &Arc<Mailer>,
    backoff: &mut Duration,
) -> Result<std::convert::Infallible, String> {
    let (mut session, validity, next, idle) =
        net::imap_open(&m.cfg.imap, &m.imap_tls, &m.imap_pw).await?;
    *backoff = FIRST_BACKOFF;
    let mut cursor = match m.store.cursor() {
        Some(c) if c.uidvalidity == validity => c,
        Some(c) => {
            tracing::warn!(
                was = c.uidvalidity,
                now = validity,
                "email: the mailbox's UIDVALIDITY changed (it was recreated), so its old UIDs mean nothing; reading on from its end"
            );
            Cursor {
                uidvalidity: validity,
                uid: next.saturating_sub(1),
            }
        }
        None => {
            tracing::info!(
                "email: first start on this mailbox; the mails already in it are left alone"
            );
            Cursor {
                uidvalidity: validity,
                uid: next.saturating_sub(1),
            }
        }
    };
    m.store.set_cursor(cursor).map_err(|e| e.to_string())?;
    tracing::info!(
        idle,
        uidvalidity = validity,
        uid = cursor.uid,
        "email: reading the mailbox"
    );
    loop {
        for (uid, size) in net::new_uids(&mut session, cursor.uid).await? {
            let job = take(m, &mut session, validity, uid, size).await?;
            cursor.uid = uid;
            m.store.set_cursor(cursor).map_err(|e| e.to_string())?;
            if let Some(job) = job {
                tokio::spawn(run_job(m.clone(), job));
            }
        }
        let wait = if idle {
            IDLE_FOR
        } else {
            Duration::from_secs(m.cfg.poll_s)
        };
        session = net::wait(session, idle, wait).await?;
    }
}

/// Reads mail `uid` and makes it a job when it is to be answered (saved before the cursor
/// passes it); `None` for a mail left alone or taken before a crash.
async fn take(
    m: &Mailer,
    session: &mut ImapSession,
    validity: u32,
    uid: u32,
    size: u32,
) -> Result<Option<Job>, String> {
    let key = format!("{validity}-{uid}");
    if m.store.has_job(&key) {
        return Ok(None);
    }
    let too_big = u64::from(size) > m.cfg.max_bytes;
    let raw = net::fetch(session, uid, !too_big).await?;
    let Some(mail) = mail::parse(&raw, &m.cfg) else {
        tracing::warn!(mail = %key, "email: mail {uid} is not a mail Pegasus can read; left alone");
        return Ok(None);
    };
    if mail.from == m.cfg.address.to_ascii_lowercase() {
        tracing::debug!(mail = %key, "email: Pegasus's own copy of a mail it sent");
        return Ok(None);
    }
    if !m.allows(&mail.from) {
        tracing::info!(mail = %key, from = %mail::clean(&mail.from), "email: mail from a sender not in email.allowed_senders left alone");
        return Ok(None);
    }
    if let (Some(_), Auth::Fail(why)) = (&m.cfg.authserv_id, &mail.auth) {
        tracing::warn!(mail = %key, from = %mail.from, "email: mail not vouched for by the mail server ({why}); a forged From? left alone");
        return Ok(None);
    }
    let job = Job {
        head: mail::reply_head(&mail, &m.cfg.address, &key),
        work: work(m, &mail, &key, too_big.then_some(size)),
        key,
        answer: None,
    };
    m.store.save_job(&job).map_err(|e| e.to_string())?;
    tracing::info!(mail = %job.key, from = %mail.from, "email: mail taken");
    Ok(Some(job))
}

/// What an allowed sender's mail asks for.
fn work(m: &Mailer, mail: &Incoming, key: &str, too_big: Option<u32>) -> Work {
    if let Some(size) = too_big {
        tracing::info!(mail = %key, size, "email: mail over email.max_bytes not read; answered briefly");
        return Work::Refuse {
            text: format!(
                "Your mail is {size} bytes, more than the {} bytes Pegasus reads (email.max_bytes), so it was not read. Send a shorter mail, without attachments.",
                m.cfg.max_bytes
            ),
        };
    }
    if mail.attachments > 0 {
        tracing::info!(mail = %key, attachments = mail.attachments, "email: mail with attachments not read; answered briefly");
        return Work::Refuse {
            text: format!(
                "Your mail carries {} attachment(s); Pegasus reads only the text of a mail, so it was not read. Send it again without attachments (paste the text that matters, or a link).",
                mail.attachments
            ),
        };
    }
    match mail::ask(&mail.text) {
        Ask::Approval {
            id,
            approve,
            reason,
        } => Work::Approval {
            id,
            approve,
            reason,
            from: mail.from.clone(),
        },
        Ask::Message => {
            let subject = mail.subject.trim();
            let text = if subject.is_empty() || subject.to_ascii_lowercase().starts_with("re:") {
                mail.text.clone()
            } else if mail.text.is_empty() {
                subject.to_string()
            } else {
                format!("{subject}\n\n{}", mail.text)
            };
            Work::Message {
                route: mail.route.clone(),
                text,
                from: mail.from.clone(),
                client_id: format!("email:{key}"),
            }
        }
    }
}

/// Does a job's work (unless its answer is known already), records the answer, sends the
/// reply and forgets the job. Left for the next start when pegasusd stops first.
async fn run_job(m: Arc<Mailer>, mut job: Job) {
    if job.answer.is_none() {
        let answer = answer(&m, &job.work).await;
        if m.door.shutdown().is_cancelled() {
            // The answer may be the refusal of a daemon going down: asked again at the next start.
            return;
        }
        job.answer = Some(answer);
        if let Err(e) = m.store.save_job(&job) {
            tracing::warn!(job = %job.key, "email: {e}");
        }
    }
    let text = job.answer.clone().unwrap_or_default();
    if send(&m, &job.head, &text).await {
        m.store.finish_job(&job.key);
    }
}

/// The answer to a job's work, as the reply says it.
async fn answer(m: &Mailer, work: &Work) -> String {
    match work {
        Work::Refuse { text } => text.clone(),
        Work::Message {
            route,
            text,
            from,
            client_id,
        } => {
            let ch = Channel::Email(Some(from.clone()));
            match route {
                Route::Project(name) => {
                    let req = CtlRequest::ProjectSend {
                        name: name.clone(),
                        text: text.clone(),
                        wait: true,
                        client_id: Some(client_id.clone()),
                    };
                    match m.door.request(&ch, req).await {
                        CtlResponse::Reply { text, .. } => text,
                        other => {
                            format!("Your mail did not reach project {name}: {}", refusal(other))
                        }
                    }
                }
                Route::Main => match m
                    .door
                    .request(&ch, CtlRequest::Chat { text: text.clone() })
                    .await
                {
                    CtlResponse::Reply { text, .. } => text,
                    other => format!("The MainAgent could not answer: {}", refusal(other)),
                },
            }
        }
        Work::Approval {
            id,
            approve,
            reason,
            from,
        } => {
            let req = CtlRequest::ApprovalAnswer {
                id: id.clone(),
                approve: *approve,
                always: false,
                reason: reason.clone(),
            };
            match m
                .door
                .request(&Channel::Email(Some(from.clone())), req)
                .await
            {
                CtlResponse::Done { message } => message,
                other => refusal(other),
            }
        }
    }
}

/// Attempts for a mail the server did not take for now; 5 s doubling between them.
const SEND_ATTEMPTS: u32 = 8;

/// Sends one mail, retrying what failed for now; whether it went (or was refused for good,
/// which retrying cannot change). `false` when pegasusd stopped first.
async fn send(m: &Mailer, head: &mail::Head, text: &str) -> bool {
    let mut wait = Duration::from_secs(5);
    for attempt in 1..=SEND_ATTEMPTS {
        match m.smtp.send(head, text).await {
            Ok(()) => {
                tracing::info!(to = %head.to, id = %head.message_id, "email: sent");
                return true;
            }
            Err(SendError::Refused(e)) => {
                tracing::warn!(to = %head.to, "email: the SMTP server refused the mail for good ({e}); it is not sent");
                return true;
            }
            Err(SendError::Failed(e)) => {
                tracing::warn!(to = %head.to, attempt, "email: sending failed ({e}); trying again in {} s", wait.as_secs());
            }
        }
        tokio::select! {
            _ = m.door.shutdown().cancelled() => return false,
            _ = tokio::time::sleep(wait) => {}
        }
        wait = (wait * 2).min(MAX_BACKOFF);
    }
    tracing::warn!(to = %head.to, id = %head.message_id, "email: the mail did not go after {SEND_ATTEMPTS} attempts; it is tried again at the next start");
    false
}
