//! The e-mail channel (DESIGN.md §17) against a real Dovecot (IMAP, IDLE) and a real Postfix
//! (SMTP), both started by each test as root on loopback ports in a temporary directory with a
//! throwaway config (Postfix delivers into maildirs Dovecot reads; no system service is used),
//! pegasusd and its workers as real processes, the model the fake LLM over real HTTP.
//!
//! A mail from an allowed sender, vouched for by the mail server's `Authentication-Results`,
//! reaches a project (by plus-address or subject tag) or the MainAgent, and the answer arrives
//! whole in the same thread; a stranger's mail and a forged From are left alone; an oversize
//! mail and one with an attachment get one short answer each; an approval request is mailed
//! and answered by a reply; crash notices are mailed; a lost IMAP connection is opened again
//! (a mail delivered meanwhile is read); IDLE where Dovecot offers it, polling where it does
//! not; kill -9 of pegasusd mid-way loses no mail and answers none twice. Over TLS: with a
//! private CA (made here with rcgen) named by `tls_ca_file`, a mail is read over IMAP TLS and
//! over IMAP STARTTLS and answered over SMTP STARTTLS (Dovecot `ssl = required`, Postfix
//! `smtpd_tls_security_level = encrypt`); without it the certificate is refused with one line
//! and no login or mail reaches the servers; a server without STARTTLS is refused likewise.
//!
//! Needs the Debian packages `dovecot-imapd` and `postfix` (`.ci/run` installs them) and root
//! (Postfix's daemons drop to their own users). Without them a test skips with one line;
//! under `CI=true` it fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::llama::free_port;
use common::*;
use pegasus_fakellm::{FakeLlm, Fault, Match, Reply, Rule};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);
const PASSWORD: &str = "imap-secret";
/// What the test's "mail server" writes at the top of every mail it vouches for.
const VOUCHED: &str =
    "Authentication-Results: mx.example.com; dkim=pass header.d=example.com header.s=s1";

/// A Dovecot and a Postfix of this test's own; stopped on drop.
struct MailServers {
    dir: tempfile::TempDir,
    /// IMAP (with TLS: STARTTLS, and nothing before it).
    imap_port: u16,
    /// IMAP over TLS from the first byte (with TLS only; else 0).
    imaps_port: u16,
    /// SMTP for Pegasus (with TLS: STARTTLS required before MAIL FROM).
    smtp_port: u16,
    /// SMTP for the test's own mails ([`MailServers::submit`]): plain, as from another MX.
    inject_port: u16,
    dovecot: Child,
    postfix: Child,
}

fn wait_port(port: u16, what: &str) {
    poll(Duration::from_secs(20), what, || {
        TcpStream::connect(("127.0.0.1", port)).ok().map(|_| ())
    });
}

impl MailServers {
    /// The servers, or `None` (after one line) when this machine cannot run them.
    fn start() -> Option<MailServers> {
        MailServers::start_with(true)
    }

    /// As [`MailServers::start`]; without `idle`, Dovecot does not offer IDLE, so the channel
    /// polls.
    fn start_with(idle: bool) -> Option<MailServers> {
        MailServers::start_opts(idle, false)
    }

    /// As [`MailServers::start`], with a private CA (`tls/ca.pem`) and a server certificate
    /// for 127.0.0.1 and localhost: Dovecot with `ssl = required` (STARTTLS on `imap_port`,
    /// TLS on `imaps_port`), Postfix with `smtpd_tls_security_level = encrypt` on `smtp_port`.
    fn start_tls() -> Option<MailServers> {
        MailServers::start_opts(true, true)
    }

    fn start_opts(idle: bool, tls: bool) -> Option<MailServers> {
        let missing: Vec<&str> = ["/usr/sbin/dovecot", "/usr/sbin/postfix"]
            .into_iter()
            .filter(|p| !Path::new(p).exists())
            .collect();
        let why = if !missing.is_empty() {
            Some(format!(
                "{} missing (apt-get install dovecot-imapd postfix)",
                missing.join(", ")
            ))
        } else if !is_root() {
            Some("not root (Postfix must start as root)".to_string())
        } else {
            None
        };
        if let Some(why) = why {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "tests/email.rs needs Dovecot and Postfix under CI: {why}"
            );
            eprintln!("skipping the e-mail test: {why}");
            return None;
        }
        let dir = tempfile::Builder::new()
            .prefix("pgmail")
            .tempdir_in("/tmp")
            .unwrap();
        let d = dir.path();
        sh_ok(&format!("chmod 755 {0} && mkdir -p {0}/mail {0}/dovecot {0}/pf/etc {0}/pf/queue {0}/pf/data && chown mail:mail {0}/mail && chown postfix {0}/pf/data", d.display()));
        let (imap_port, smtp_port) = (free_port(), free_port());
        let (imaps_port, inject_port) = if tls {
            write_certificates(&d.join("tls"));
            (free_port(), free_port())
        } else {
            (0, smtp_port)
        };
        let dovecot_tls = if tls {
            format!("ssl = required\nssl_cert = <{0}/tls/server.pem\nssl_key = <{0}/tls/server.key\ndisable_plaintext_auth = yes\n\
                 login_log_format_elements = user=<%u> method=%m rip=%r lip=%l lport=%{{lport}} mpid=%e %c session=<%{{session}}>\n", d.display())
        } else {
            "ssl = no\ndisable_plaintext_auth = no\n".to_string()
        };
        let imaps = if tls {
            format!("inet_listener imaps {{\n    address = 127.0.0.1\n    port = {imaps_port}\n    ssl = yes\n  }}")
        } else {
            "inet_listener imaps {\n    port = 0\n  }".to_string()
        };
        std::fs::write(
            d.join("dovecot/dovecot.conf"),
            format!(
                "base_dir = {d}/dovecot/run\nstate_dir = {d}/dovecot/state\nlog_path = {d}/dovecot/log\n\
                 protocols = imap\nlisten = 127.0.0.1\n{dovecot_tls}\
                 auth_mechanisms = plain login\nfirst_valid_uid = 1\nmail_location = maildir:~/Maildir\n\
                 passdb {{\n  driver = static\n  args = password={PASSWORD}\n}}\n\
                 userdb {{\n  driver = static\n  args = uid=mail gid=mail home={d}/mail/%d/%n allow_all_users=yes\n}}\n\
                 service imap-login {{\n  inet_listener imap {{\n    address = 127.0.0.1\n    port = {imap_port}\n  }}\n  {imaps}\n  chroot =\n}}\n\
                 service anvil {{\n  chroot =\n}}\n{no_idle}",
                d = d.display(),
                no_idle = if idle {
                    ""
                } else {
                    "imap_capability = IMAP4rev1 SASL-IR LOGIN-REFERRALS ID ENABLE LITERAL+\n"
                }
            ),
        )
        .unwrap();
        let pf = d.join("pf");
        std::fs::write(
            pf.join("etc/main.cf"),
            format!(
                "compatibility_level = 3.6\nqueue_directory = {p}/queue\ndata_directory = {p}/data\n\
                 meta_directory = /etc/postfix\nmail_owner = postfix\nsetgid_group = postdrop\n\
                 inet_interfaces = 127.0.0.1\ninet_protocols = ipv4\nmyhostname = mail.example.com\n\
                 mydomain = example.com\nmydestination =\nmynetworks = 127.0.0.0/8\nlocal_recipient_maps =\n\
                 alias_maps =\nalias_database =\nvirtual_mailbox_domains = example.com\n\
                 virtual_mailbox_base = {d}/mail\nvirtual_mailbox_maps = regexp:{p}/etc/vmailbox\n\
                 virtual_uid_maps = static:8\nvirtual_gid_maps = static:8\nvirtual_minimum_uid = 8\n\
                 recipient_delimiter = +\nsmtpd_relay_restrictions = permit_mynetworks, reject_unauth_destination\n\
                 maillog_file_prefixes = {d}\nmaillog_file = {p}/maillog\nmessage_size_limit = 20000000\n\
                 smtputf8_enable = no\nbiff = no\n{tls}",
                p = pf.display(),
                d = d.display(),
                tls = if tls {
                    format!("smtpd_tls_security_level = encrypt\nsmtpd_tls_chain_files = {0}/tls/server.key, {0}/tls/server.pem\nsmtpd_tls_loglevel = 1\n", d.display())
                } else {
                    String::new()
                }
            ),
        )
        .unwrap();
        // Regexp tables may not substitute `$1` into a mailbox path: one line per user.
        let users = ["pegasus", "me", "stranger"];
        let table: String = users
            .iter()
            .map(|u| format!("/^{u}(\\+[^@]*)?@example\\.com$/\texample.com/{u}/Maildir/\n"))
            .collect();
        std::fs::write(pf.join("etc/vmailbox"), table).unwrap();
        let mut services = vec![
            format!("127.0.0.1:{smtp_port} inet n - n - - smtpd"),
            "pickup unix n - n 60 1 pickup".into(),
            "cleanup unix n - n - 0 cleanup".into(),
            "qmgr unix n - n 300 1 qmgr".into(),
            "rewrite unix - - n - - trivial-rewrite".into(),
            "bounce unix - - n - 0 bounce".into(),
            "defer unix - - n - 0 bounce".into(),
            "trace unix - - n - 0 bounce".into(),
            "verify unix - - n - 1 verify".into(),
            "flush unix n - n 1000? 0 flush".into(),
            "proxymap unix - - n - - proxymap".into(),
            "smtp unix - - n - - smtp".into(),
            "relay unix - - n - - smtp".into(),
            "showq unix n - n - - showq".into(),
            "error unix - - n - - error".into(),
            "retry unix - - n - - error".into(),
            "discard unix - - n - - discard".into(),
            "local unix - n n - - local".into(),
            "virtual unix - n n - - virtual".into(),
            "anvil unix - - n - 1 anvil".into(),
            "scache unix - - n - 1 scache".into(),
            "postlog unix-dgram n - n - 1 postlogd".into(),
        ];
        if tls {
            services.push(format!(
                "127.0.0.1:{inject_port} inet n - n - - smtpd -o smtpd_tls_security_level=none"
            ));
            services.push("tlsmgr unix - - n 1000? 1 tlsmgr".into());
        }
        std::fs::write(pf.join("etc/master.cf"), services.join("\n") + "\n").unwrap();
        let dovecot = spawn_dovecot(d);
        let postfix = Command::new("/usr/sbin/postfix")
            .arg("-c")
            .arg(pf.join("etc"))
            .arg("start-fg")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let servers = MailServers {
            dir,
            imap_port,
            imaps_port,
            smtp_port,
            inject_port,
            dovecot,
            postfix,
        };
        wait_port(imap_port, "Dovecot to listen");
        wait_port(smtp_port, "Postfix to listen");
        if tls {
            wait_port(imaps_port, "Dovecot to listen for TLS");
            wait_port(inject_port, "Postfix to listen on its second port");
        }
        Some(servers)
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Stops Dovecot and every connection it serves (its children would outlive the master),
    /// runs `meanwhile`, and starts it again on the same port.
    fn restart_imap(&mut self, meanwhile: impl FnOnce(&MailServers)) {
        let children = children_of(self.dovecot.id());
        stop(&mut self.dovecot);
        for pid in children {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        meanwhile(self);
        self.dovecot = spawn_dovecot(self.dir.path());
        wait_port(self.imap_port, "Dovecot to listen again");
    }

    /// Hands `raw` to Postfix over SMTP for `to`.
    fn submit(&self, from: &str, to: &str, raw: &str) {
        let stream = TcpStream::connect(("127.0.0.1", self.inject_port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut w = stream.try_clone().unwrap();
        let mut r = BufReader::new(stream);
        let expect = |r: &mut BufReader<TcpStream>, code: &str| loop {
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            assert!(line.starts_with(code), "SMTP: wanted {code}, got {line:?}");
            if line.as_bytes().get(3) == Some(&b' ') {
                break;
            }
        };
        expect(&mut r, "220");
        for (cmd, code) in [
            ("EHLO test.example.com".to_string(), "250"),
            (format!("MAIL FROM:<{from}>"), "250"),
            (format!("RCPT TO:<{to}>"), "250"),
            ("DATA".to_string(), "354"),
        ] {
            write!(w, "{cmd}\r\n").unwrap();
            expect(&mut r, code);
        }
        let body: String = raw
            .replace("\r\n", "\n")
            .lines()
            .map(|l| {
                if l.starts_with('.') {
                    format!(".{l}\r\n")
                } else {
                    format!("{l}\r\n")
                }
            })
            .collect();
        write!(w, "{body}.\r\n").unwrap();
        expect(&mut r, "250");
        write!(w, "QUIT\r\n").unwrap();
    }

    /// Every mail in `user`'s maildir, parsed, oldest first.
    fn inbox(&self, user: &str) -> Vec<Mail> {
        let base = self.path().join(format!("mail/example.com/{user}/Maildir"));
        let mut files: Vec<PathBuf> = ["new", "cur"]
            .iter()
            .flat_map(|sub| {
                std::fs::read_dir(base.join(sub))
                    .into_iter()
                    .flatten()
                    .flatten()
            })
            .map(|e| e.path())
            .collect();
        files.sort();
        files.iter().filter_map(|f| Mail::read(f)).collect()
    }
}

impl Drop for MailServers {
    fn drop(&mut self) {
        let _ = Command::new("/usr/sbin/postfix")
            .arg("-c")
            .arg(self.path().join("pf/etc"))
            .arg("stop")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        stop(&mut self.dovecot);
        stop(&mut self.postfix);
    }
}

/// A private CA (`ca.pem`) and a certificate it signed for 127.0.0.1 and localhost
/// (`server.pem`, key `server.key`), in `dir`.
fn write_certificates(dir: &Path) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
    std::fs::create_dir_all(dir).unwrap();
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::default();
    ca.distinguished_name
        .push(DnType::CommonName, "Test mail CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let mut server =
        CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap();
    server
        .distinguished_name
        .push(DnType::CommonName, "mail.example.com");
    let cert = server.signed_by(&key, &issuer).unwrap();
    std::fs::write(dir.join("ca.pem"), ca_cert.pem()).unwrap();
    std::fs::write(dir.join("server.pem"), cert.pem()).unwrap();
    std::fs::write(dir.join("server.key"), key.serialize_pem()).unwrap();
}

/// The processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let child: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let ppid: u32 = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            (ppid == pid).then_some(child)
        })
        .collect()
}

fn spawn_dovecot(dir: &Path) -> Child {
    Command::new("/usr/sbin/dovecot")
        .arg("-F")
        .arg("-c")
        .arg(dir.join("dovecot/dovecot.conf"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// SIGTERM, then SIGKILL after 5 s.
fn stop(child: &mut Child) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let stopped = (0..100).any(|_| {
        let done = child.try_wait().ok().flatten().is_some();
        if !done {
            std::thread::sleep(Duration::from_millis(50));
        }
        done
    });
    if !stopped {
        let _ = child.kill();
        let _ = child.wait();
    }
}

fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

fn sh_ok(cmd: &str) {
    let out = Command::new("sh").arg("-c").arg(cmd).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A mail as it arrived.
#[derive(Debug, Clone)]
struct Mail {
    from: String,
    subject: String,
    message_id: String,
    in_reply_to: String,
    references: Vec<String>,
    text: String,
}

impl Mail {
    fn read(path: &Path) -> Option<Mail> {
        let raw = std::fs::read(path).ok()?;
        let m = mail_parser::MessageParser::default().parse(&raw)?;
        let list = |v: &mail_parser::HeaderValue| -> Vec<String> {
            match v {
                mail_parser::HeaderValue::Text(t) => vec![t.to_string()],
                mail_parser::HeaderValue::TextList(l) => l.iter().map(|t| t.to_string()).collect(),
                _ => Vec::new(),
            }
        };
        Some(Mail {
            from: m
                .from()
                .and_then(|a| a.first())
                .and_then(|a| a.address())
                .unwrap_or_default()
                .to_string(),
            subject: m.subject().unwrap_or_default().to_string(),
            message_id: m.message_id().unwrap_or_default().to_string(),
            in_reply_to: list(m.in_reply_to()).join(" "),
            references: list(m.references()),
            text: m.body_text(0).map(|t| t.into_owned()).unwrap_or_default(),
        })
    }
}

/// Hands Postfix a plain mail from the allowed sender, vouched for.
fn from_me(mail: &MailServers, to: &str, subject: &str, id: &str, body: &str) {
    let raw = compose("me@example.com", to, subject, id, "", body, true);
    mail.submit("me@example.com", to, &raw);
}

/// A mail from `from` to `to`; `vouched` puts the mail server's DKIM verdict on top.
fn compose(
    from: &str,
    to: &str,
    subject: &str,
    id: &str,
    extra: &str,
    body: &str,
    vouched: bool,
) -> String {
    format!(
        "{}From: {from}\r\nTo: {to}\r\nSubject: {subject}\r\nMessage-ID: <{id}>\r\nDate: Sun, 29 Nov 2026 10:00:00 +0000\r\nMIME-Version: 1.0\r\n{extra}{}\r\n{body}\r\n",
        if vouched { format!("{VOUCHED}\r\n") } else { String::new() },
        if extra.contains("Content-Type") { "" } else { "Content-Type: text/plain; charset=utf-8\r\n" },
    )
}

fn email_home(fake: &FakeLlm, mail: &MailServers, extra: &str) -> Home {
    fake_home(
        fake,
        &format!(
            "email:\n  address: pegasus@example.com\n  imap: {{host: 127.0.0.1, port: {}, security: none, user: pegasus@example.com, password_env: PEGASUS_IMAP_PASSWORD}}\n  smtp: {{host: 127.0.0.1, port: {}, security: none}}\n  allowed_senders: [Me@Example.com]\n  authserv_id: mx.example.com\n  max_bytes: 4096\n  poll_s: 1\n{extra}",
            mail.imap_port, mail.smtp_port
        ),
    )
}

fn start(home: &Home) -> Daemon {
    let daemon = home.start_with_env(&[
        (FAKE_KEY_ENV, FAKE_KEY),
        ("PEGASUS_IMAP_PASSWORD", PASSWORD),
    ]);
    // Reading the mailbox (the cursor is saved once it is selected): mails from now on count.
    poll(WAIT, "the e-mail channel to read the mailbox", || {
        logs(home)
            .contains("email: reading the mailbox")
            .then_some(())
    });
    daemon
}

/// Waits until every job is answered and forgotten; says what was left when one is not.
fn no_job_left(home: &Home) {
    let jobs = home.path().join("email/jobs");
    let deadline = std::time::Instant::now() + WAIT;
    while std::time::Instant::now() < deadline {
        // Jobs only: a temp file a kill left behind is cleared at the next start.
        let left = std::fs::read_dir(&jobs)
            .unwrap()
            .flatten()
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .count();
        if left == 0 {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let left: Vec<String> = std::fs::read_dir(&jobs)
        .unwrap()
        .flatten()
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect();
    let log: Vec<String> = logs(home)
        .lines()
        .filter(|l| l.contains("email"))
        .map(str::to_string)
        .collect();
    panic!("jobs left: {left:#?}\nlog:\n{}", log.join("\n"));
}

fn logs(home: &Home) -> String {
    let mut all = String::new();
    for e in std::fs::read_dir(home.path().join("logs"))
        .into_iter()
        .flatten()
        .flatten()
    {
        all.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
    }
    all
}

/// The one mail in `user`'s inbox answering `id` (polled until there is one).
fn reply_to(mail: &MailServers, user: &str, id: &str) -> Mail {
    poll(WAIT, &format!("a reply to {id}"), || {
        mail.inbox(user).into_iter().find(|m| m.in_reply_to == id)
    })
}

fn user_messages(home: &Home, project: &str, needle: &str) -> Vec<String> {
    let session = pegasus_store::load_session(&home.project_dir(project)).unwrap();
    session
        .records
        .iter()
        .filter_map(|r| {
            match r {
            pegasus_store::SessionRecord::Message(m)
                if m.content.iter().any(|b| {
                    matches!(b, pegasus_store::ContentBlock::Text { text } if text.contains(needle))
                }) =>
            {
                Some(m.from.as_ref().map(|f| f.to_string()).unwrap_or_default())
            }
            _ => None,
        }
        })
        .collect()
}

#[test]
fn mails_reach_projects_and_the_main_agent_and_answers_come_back_in_the_thread() {
    let Some(mut mail) = MailServers::start() else {
        return;
    };
    let fake = FakeLlm::start().unwrap();
    let long: String = (0..400)
        .map(|i| format!("line {i} of a long **answer**\n"))
        .collect();
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("build status".into()),
        Reply::Text(long.clone()),
    ));
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("deploy".into()),
        Reply::Text("deploy done".into()),
    ));
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("anything new".into()),
        Reply::Text("the MainAgent here".into()),
    ));
    main_agent_rule(&fake);
    let home = email_home(&fake, &mail, "");
    let _daemon = start(&home);
    let worker = home.create("website");

    // By plus-address: the answer, long and whole, in the same thread.
    mail.submit(
        "me@example.com",
        "pegasus+website@example.com",
        &compose(
            "Me <me@example.com>",
            "pegasus+website@example.com",
            "build status",
            "m1@example.com",
            "References: <m0@example.com>\r\n",
            "What is the build status?",
            true,
        ),
    );
    let r = reply_to(&mail, "me", "m1@example.com");
    assert_eq!(r.from, "pegasus@example.com");
    assert_eq!(r.subject, "Re: build status");
    assert_eq!(r.references, vec!["m0@example.com", "m1@example.com"]);
    assert_eq!(
        r.text.trim_end(),
        long.trim_end(),
        "the whole answer, its Markdown as written"
    );
    assert!(
        r.message_id.starts_with("pegasus.re.") && r.message_id.ends_with("@example.com"),
        "{}",
        r.message_id
    );
    assert_eq!(
        user_messages(&home, "website", "What is the build status?"),
        ["email:me@example.com"]
    );

    // By subject tag, and to the MainAgent.
    from_me(
        &mail,
        "pegasus@example.com",
        "[website] deploy",
        "m2@example.com",
        "Please deploy.",
    );
    assert_eq!(
        reply_to(&mail, "me", "m2@example.com").text.trim(),
        "deploy done"
    );
    from_me(
        &mail,
        "pegasus@example.com",
        "hello",
        "m3@example.com",
        "anything new?",
    );
    assert_eq!(
        reply_to(&mail, "me", "m3@example.com").text.trim(),
        "the MainAgent here"
    );

    // A stranger, and a forged From (no verdict from the mail server): left alone.
    mail.submit(
        "stranger@example.com",
        "pegasus+website@example.com",
        &compose(
            "stranger@example.com",
            "pegasus+website@example.com",
            "deploy",
            "s1@example.com",
            "",
            "deploy it",
            true,
        ),
    );
    mail.submit(
        "me@example.com",
        "pegasus+website@example.com",
        &compose(
            "me@example.com",
            "pegasus+website@example.com",
            "deploy",
            "f1@example.com",
            "",
            "forged deploy",
            false,
        ),
    );
    // Too large, and with an attachment: one short answer each.
    from_me(
        &mail,
        "pegasus+website@example.com",
        "big",
        "b1@example.com",
        &"x".repeat(6000),
    );
    let attached = "Content-Type: multipart/mixed; boundary=\"XX\"\r\n";
    let parts = "--XX\r\nContent-Type: text/plain\r\n\r\nsee attached deploy\r\n--XX\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; filename=\"a.bin\"\r\nContent-Transfer-Encoding: base64\r\n\r\nAAECAw==\r\n--XX--";
    mail.submit(
        "me@example.com",
        "pegasus+website@example.com",
        &compose(
            "me@example.com",
            "pegasus+website@example.com",
            "file",
            "a1@example.com",
            attached,
            parts,
            true,
        ),
    );
    assert!(reply_to(&mail, "me", "b1@example.com")
        .text
        .contains("email.max_bytes"));
    assert!(reply_to(&mail, "me", "a1@example.com")
        .text
        .contains("attachment"));
    // Those two came after the stranger's and the forged mail, so those were looked at: one
    // answer for each of the five, none for the others, nothing to the stranger.
    let inbox: Vec<Mail> = mail
        .inbox("me")
        .into_iter()
        .filter(|m| !m.in_reply_to.is_empty())
        .collect();
    assert_eq!(inbox.len(), 5, "{inbox:#?}");
    assert!(mail.inbox("stranger").is_empty());
    assert!(user_messages(&home, "website", "deploy it").is_empty());
    assert!(user_messages(&home, "website", "forged deploy").is_empty());
    let log = logs(&home);
    assert!(
        log.contains("not in email.allowed_senders left alone"),
        "the stranger is logged"
    );
    assert!(
        log.contains("not vouched for by the mail server"),
        "the forgery is logged"
    );
    // Every job answered and forgotten.
    no_job_left(&home);

    // A crash is mailed to the allowed sender, not to anyone else.
    kill9(worker);
    let notice = poll(WAIT, "the crash notice", || {
        mail.inbox("me")
            .into_iter()
            .find(|m| m.subject == "[website] worker crashed")
    });
    assert!(notice.text.contains("crashed"), "{}", notice.text);
    assert!(mail.inbox("stranger").is_empty());

    // The IMAP server goes away; a mail delivered meanwhile is read once it is back.
    mail.restart_imap(|mail| {
        from_me(
            mail,
            "pegasus+website@example.com",
            "deploy again",
            "m4@example.com",
            "Please deploy again.",
        );
        poll(WAIT, "the mail delivered", || {
            (std::fs::read_dir(mail.path().join("mail/example.com/pegasus/Maildir/new"))
                .ok()?
                .count()
                > 0)
            .then_some(())
        });
    });
    assert_eq!(
        reply_to(&mail, "me", "m4@example.com").text.trim(),
        "deploy done"
    );
    let log = logs(&home);
    assert!(
        log.contains("email: IMAP 127.0.0.1") && log.contains("idle=true"),
        "the lost connection is logged: {}",
        log.lines()
            .filter(|l| l.contains("email"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn an_approval_request_is_mailed_and_answered_by_a_reply() {
    let Some(mail) = MailServers::start() else {
        return;
    };
    let fake = FakeLlm::start().unwrap();
    approval_script(&fake, "make the file");
    main_agent_rule(&fake);
    let home = email_home(&fake, &mail, "approvals: {exec: ask}\n");
    let mut daemon = start(&home);
    home.create("website");
    from_me(
        &mail,
        "pegasus+website@example.com",
        "file",
        "q1@example.com",
        "Please make the file.",
    );
    let ask = poll(WAIT, "the approval mail", || {
        mail.inbox("me")
            .into_iter()
            .find(|m| m.subject.starts_with("Approval "))
    });
    let id = ask.subject.split_whitespace().nth(1).unwrap().to_string();
    assert_eq!(ask.subject, format!("Approval {id} needed in website"));
    assert!(ask.text.contains("echo ran >> runs.txt"), "{}", ask.text);
    assert!(ask.text.contains(&format!("approve {id}")), "{}", ask.text);
    assert_eq!(
        std::fs::read_to_string(home.project_dir("website").join("workdir/runs.txt")).ok(),
        None,
        "not before the approval"
    );
    // pegasusd is killed while the request waits: after the restart it is not mailed again.
    daemon.kill9();
    let _daemon = start(&home);
    poll(WAIT, "the request waiting after the restart", || {
        let list = home.json(&["approvals"]);
        (list[0]["id"] == id.as_str()).then_some(())
    });
    // The reply, its first line the answer, the request quoted below it.
    let quoted: String = ask.text.lines().map(|l| format!("> {l}\r\n")).collect();
    mail.submit(
        "me@example.com",
        "pegasus@example.com",
        &compose(
            "me@example.com",
            "pegasus@example.com",
            &format!("Re: {}", ask.subject),
            "q2@example.com",
            &format!(
                "In-Reply-To: <{}>\r\nReferences: <{}>\r\n",
                ask.message_id, ask.message_id
            ),
            &format!("approve {id}\r\n\r\nOn Sunday, Pegasus wrote:\r\n{quoted}"),
            true,
        ),
    );
    let done = reply_to(&mail, "me", "q2@example.com");
    assert_eq!(
        done.references,
        vec![ask.message_id.clone(), "q2@example.com".to_string()]
    );
    assert!(
        done.text.to_lowercase().contains("approved"),
        "{}",
        done.text
    );
    assert_eq!(
        reply_to(&mail, "me", "q1@example.com").text.trim(),
        "saw: ran"
    );
    assert_eq!(
        std::fs::read_to_string(home.project_dir("website").join("workdir/runs.txt")).unwrap(),
        "ran\n"
    );
    // Nothing waits any more, and the request was mailed once.
    assert!(home.json(&["approvals"]).as_array().unwrap().is_empty());
    let asked = mail
        .inbox("me")
        .into_iter()
        .filter(|m| m.subject.starts_with("Approval "))
        .count();
    assert_eq!(asked, 1);
}

#[test]
fn kill_9_of_pegasusd_mid_way_loses_no_mail_and_answers_none_twice() {
    // A server without IDLE: the channel looks every `poll_s`.
    let Some(mail) = MailServers::start_with(false) else {
        return;
    };
    let fake = FakeLlm::start().unwrap();
    // A task cut off by the kill runs again after the restart with the worker's note as the last
    // words (DESIGN.md §6); the fake cannot tell which mail it was, so it says so generically.
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("Pegasus restarted before".into()),
        Reply::Text("answered after a restart".into()),
    ));
    for n in 1..=4 {
        fake.add_rule(Rule::new(
            Match::LastUserTextContains(format!("job number {n}")),
            Reply::Fault(Fault::Delay {
                ms: 1500,
                then: Box::new(Reply::Text(format!("answer {n}"))),
            }),
        ));
    }
    main_agent_rule(&fake);
    let home = email_home(&fake, &mail, "");
    let mut daemon = start(&home);
    home.create("website");
    for n in 1..=4 {
        from_me(
            &mail,
            "pegasus+website@example.com",
            &format!("job {n}"),
            &format!("k{n}@example.com"),
            &format!("Do job number {n}."),
        );
    }
    let jobs = home.path().join("email/jobs");
    // Killed while the first mails are taken and not answered.
    poll(WAIT, "a mail taken", || {
        (std::fs::read_dir(&jobs).ok()?.count() > 0).then_some(())
    });
    daemon.kill9();
    let mut daemon = start(&home);
    // Killed again once some answers went out and others did not.
    poll(WAIT, "a first answer", || {
        (!mail.inbox("me").is_empty()).then_some(())
    });
    daemon.kill9();
    let _daemon = start(&home);
    for n in 1..=4 {
        let r = reply_to(&mail, "me", &format!("k{n}@example.com"));
        // A message that arrives while its project is busy joins the running task, and then
        // shares its answer: any of the fake's answers is the project's answer to this mail.
        let text = r.text.trim();
        let answers: Vec<String> = (1..=4).map(|k| format!("answer {k}")).collect();
        assert!(
            answers.iter().any(|a| a == text) || text == "answered after a restart",
            "mail {n}: {text}"
        );
        assert_eq!(r.subject, format!("Re: job {n}"));
    }
    no_job_left(&home);
    // Both kills cut jobs off, and the restarts took them up.
    let resumed = logs(&home)
        .matches("resuming a mail not answered before the restart")
        .count();
    assert!(resumed >= 2, "{resumed} jobs resumed");
    let log = logs(&home);
    assert!(
        log.contains("idle=false") && !log.contains("idle=true"),
        "polled"
    );
    let inbox: Vec<Mail> = mail
        .inbox("me")
        .into_iter()
        .filter(|m| m.in_reply_to.starts_with('k'))
        .collect();
    assert_eq!(inbox.len(), 4, "one answer per mail: {inbox:#?}");
    for n in 1..=4 {
        assert_eq!(
            user_messages(&home, "website", &format!("job number {n}")),
            ["email:me@example.com"],
            "mail {n} reached the project once"
        );
    }
}

/// A home whose channel reaches the servers as `imap` and `smtp` say (flow-map entries after
/// the host), with the rest as [`email_home`].
fn home_with(fake: &FakeLlm, imap: &str, smtp: &str) -> Home {
    fake_home(
        fake,
        &format!(
            "email:\n  address: pegasus@example.com\n  imap: {{{imap}, user: pegasus@example.com, password_env: PEGASUS_IMAP_PASSWORD}}\n  smtp: {{{smtp}}}\n  allowed_senders: [me@example.com]\n  authserv_id: mx.example.com\n  poll_s: 1\n"
        ),
    )
}

impl MailServers {
    fn ca(&self) -> String {
        self.path().join("tls/ca.pem").display().to_string()
    }

    fn dovecot_log(&self) -> String {
        std::fs::read_to_string(self.path().join("dovecot/log")).unwrap_or_default()
    }

    fn postfix_log(&self) -> String {
        std::fs::read_to_string(self.path().join("pf/maillog")).unwrap_or_default()
    }
}

/// The lines of pegasusd's log holding `needle`.
fn log_lines(home: &Home, needle: &str) -> Vec<String> {
    logs(home)
        .lines()
        .filter(|l| l.contains(needle))
        .map(str::to_string)
        .collect()
}

#[test]
fn mails_are_answered_over_tls_and_starttls_to_servers_of_a_private_ca() {
    let Some(mail) = MailServers::start_tls() else {
        return;
    };
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("over tls".into()),
        Reply::Text("answered over TLS".into()),
    ));
    main_agent_rule(&fake);
    let ca = mail.ca();
    // IMAP over TLS from the first byte, SMTP with STARTTLS; then IMAP with STARTTLS, by name.
    let rounds = [
        (
            format!(
                "host: 127.0.0.1, port: {}, security: tls, tls_ca_file: {ca}",
                mail.imaps_port
            ),
            "m-tls@example.com",
        ),
        (
            format!(
                "host: localhost, port: {}, security: starttls, tls_ca_file: {ca}",
                mail.imap_port
            ),
            "m-starttls@example.com",
        ),
    ];
    for (imap, id) in rounds {
        let smtp = format!(
            "host: 127.0.0.1, port: {}, security: starttls, tls_ca_file: {ca}",
            mail.smtp_port
        );
        let home = home_with(&fake, &imap, &smtp);
        let daemon = start(&home);
        from_me(
            &mail,
            "pegasus@example.com",
            "over tls",
            id,
            "Answer me over TLS.",
        );
        let r = reply_to(&mail, "me", id);
        assert_eq!(r.text.trim(), "answered over TLS", "{imap}");
        assert!(
            log_lines(&home, "email: SMTP").is_empty(),
            "the SMTP check at start passed: {:?}",
            log_lines(&home, "email: SMTP")
        );
        drop(daemon);
    }
    // What the servers saw: every login over TLS, every mail from Pegasus over TLS.
    let dovecot = mail.dovecot_log();
    let logins: Vec<&str> = dovecot
        .lines()
        .filter(|l| l.contains("Login: user=<pegasus@example.com>"))
        .collect();
    assert!(!logins.is_empty(), "{dovecot}");
    assert!(
        logins.iter().all(|l| l.contains(", TLS")),
        "a login without TLS: {logins:#?}"
    );
    assert!(
        logins
            .iter()
            .any(|l| l.contains(&format!("lport={}", mail.imaps_port)))
            && logins
                .iter()
                .any(|l| l.contains(&format!("lport={}", mail.imap_port))),
        "logins by TLS and by STARTTLS: {logins:#?}"
    );
    let postfix = mail.postfix_log();
    assert!(
        postfix.contains("TLS connection established from localhost[127.0.0.1]"),
        "{postfix}"
    );
    assert!(
        !postfix.contains("Must issue a STARTTLS command first"),
        "{postfix}"
    );
}

/// pegasusd with a channel asking for STARTTLS on both of `servers`' sides, once it logged
/// both refusals (`imap_says` after `email: IMAP 127.0.0.1:PORT: `, `smtp_says` likewise); its
/// home, the daemon and the IMAP line looked for.
fn refused_by(
    fake: &FakeLlm,
    servers: &MailServers,
    imap_says: &str,
    smtp_says: &str,
) -> (Home, Daemon, String) {
    let side = |port: u16| format!("host: 127.0.0.1, port: {port}, security: starttls");
    let home = home_with(fake, &side(servers.imap_port), &side(servers.smtp_port));
    let daemon = home.start_with_env(&[
        (FAKE_KEY_ENV, FAKE_KEY),
        ("PEGASUS_IMAP_PASSWORD", PASSWORD),
    ]);
    let imap_line = format!("email: IMAP 127.0.0.1:{}: {imap_says}", servers.imap_port);
    let smtp_line = format!("email: SMTP 127.0.0.1:{}: {smtp_says}", servers.smtp_port);
    poll(WAIT, "both refusals in the log", || {
        (!log_lines(&home, &imap_line).is_empty() && !log_lines(&home, &smtp_line).is_empty())
            .then_some(())
    });
    (home, daemon, imap_line)
}

#[test]
fn an_untrusted_certificate_or_a_server_without_starttls_is_refused_and_nothing_goes_in_the_clear()
{
    let Some(tls) = MailServers::start_tls() else {
        return;
    };
    let Some(plain) = MailServers::start() else {
        return;
    };
    let fake = FakeLlm::start().unwrap();

    // The private CA's servers, without `tls_ca_file`: the certificate is refused.
    let (home, daemon, imap_line) = refused_by(
        &fake,
        &tls,
        "the TLS certificate of 127.0.0.1 is not signed by a trusted CA; if your own CA signed it, set email.imap.tls_ca_file",
        "the TLS certificate of 127.0.0.1 is not signed by a trusted CA; if your own CA signed it, set email.smtp.tls_ca_file",
    );
    // Dovecot saw two handshakes fail (the channel tried again), each before any login.
    poll(WAIT, "a second IMAP attempt", || {
        (tls.dovecot_log().matches("no auth attempts").count() >= 2).then_some(())
    });
    assert_eq!(
        log_lines(&home, &imap_line).len(),
        1,
        "one line, not one per attempt"
    );
    let dovecot = tls.dovecot_log();
    assert!(!dovecot.contains("Login: user="), "{dovecot}");
    let postfix = tls.postfix_log();
    assert!(
        !postfix.contains("Must issue a STARTTLS command first"),
        "{postfix}"
    );
    assert!(!postfix.contains("from=<pegasus@example.com>"), "{postfix}");
    drop(daemon);

    // Servers without STARTTLS, to a channel that asks for it: refused, no login, no mail.
    let (home, _daemon, imap_line) = refused_by(
        &fake,
        &plain,
        "the server did not accept STARTTLS",
        "the server does not offer STARTTLS, and Pegasus does not send without TLS",
    );
    assert!(
        log_lines(&home, &imap_line)[0].contains("Pegasus does not log in without TLS"),
        "{:?}",
        log_lines(&home, &imap_line)
    );
    let dovecot = plain.dovecot_log();
    assert!(!dovecot.contains("Login: user="), "{dovecot}");
    assert!(!plain.postfix_log().contains("from=<pegasus@example.com>"));
}
