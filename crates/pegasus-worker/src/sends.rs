//! Sends that never run twice (DESIGN.md §11): the client ids of the messages this project took,
//! so that a repeat (`project send --id`, an `Idempotency-Key`, a Telegram update seen again,
//! the CLI's retry after a dropped connection) is answered with the first message's id and
//! nothing is recorded or run again.
//!
//! The ids have no file of their own: each is in its message's own session line, written
//! before the message is acknowledged, so "the message was saved" and "its id is known" are
//! one fact whatever crash comes between (a separate file written before or after the line
//! would have a window where they disagree). At start the map is rebuilt from the session,
//! and from the archives of compactions of the last [`KEEP`], since a compaction moves old
//! lines there.

use chrono::{DateTime, Utc};
use pegasus_proto::TaskState;
use pegasus_store::{SessionMessage, SessionRecord};
use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::Path;

/// How long an id is remembered at least.
pub const KEEP: chrono::TimeDelta = chrono::TimeDelta::hours(24);

/// Past this many ids a new one first forgets those older than [`KEEP`].
const PRUNE_PAST: usize = 1024;

/// The message a client id was first used for.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    message: String,
    digest: u64,
    at: DateTime<Utc>,
}

/// What a message with a client id is.
#[derive(Debug, Clone, PartialEq)]
pub enum SendCheck {
    /// A new id: record and run it.
    New,
    /// The id of message `original`, with the same text: answer with that one.
    Repeat {
        /// The id of the message first sent with this client id.
        original: String,
    },
    /// The id of message `original` with another text: refuse it.
    Conflict {
        /// The id of the message first sent with this client id.
        original: String,
    },
}

/// The client ids of one project, with the messages they were first used for.
#[derive(Debug, Default)]
pub struct Sends {
    by_client: HashMap<String, Seen>,
}

fn digest(text: &str) -> u64 {
    // In memory only, never written: any stable hash of this build will do.
    let mut h = DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

impl Sends {
    /// The ids of the messages in `<project_dir>/session/current.jsonl` and in the archives
    /// of the compactions of the last [`KEEP`], recorded since `now - KEEP`. What cannot be
    /// read is logged and left out (the session's own loader has refused or repaired it).
    pub fn load(project_dir: &Path, now: DateTime<Utc>) -> Sends {
        let mut sends = Sends::default();
        let since = now - KEEP;
        let mut files = vec![pegasus_store::session_file(project_dir)];
        let mut seen_files = std::collections::HashSet::new();
        while let Some(file) = files.pop() {
            if !seen_files.insert(file.clone()) {
                continue;
            }
            let bytes = match std::fs::read(&file) {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    tracing::warn!(
                        "cannot read {} for the ids of sent messages: {e}",
                        file.display()
                    );
                    continue;
                }
            };
            for line in bytes.split(|b| *b == b'\n') {
                // Only the few lines that can matter are parsed.
                if !contains(line, b"\"client_id\"") && !contains(line, b"\"compaction\"") {
                    continue;
                }
                match SessionRecord::decode(line) {
                    Some(SessionRecord::Message(m)) => sends.remember_record(&m, since),
                    Some(SessionRecord::Compaction { archived, ts, .. }) if ts >= since => {
                        // `archived` is relative to the project (older files: absolute).
                        files.push(project_dir.join(archived));
                    }
                    _ => {}
                }
            }
        }
        sends
    }

    fn remember_record(&mut self, m: &SessionMessage, since: DateTime<Utc>) {
        let (Some(client_id), Some(id)) = (&m.client_id, &m.id) else {
            return;
        };
        if m.ts < since {
            return;
        }
        let text: Vec<&str> = m
            .content
            .iter()
            .filter_map(|b| match b {
                pegasus_store::ContentBlock::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        // The first use of an id is the one that counts (a file has each id once anyway).
        self.by_client
            .entry(client_id.clone())
            .or_insert_with(|| Seen {
                message: id.clone(),
                digest: digest(&text.join("\n")),
                at: m.ts,
            });
    }

    /// What a message carrying `client_id` with `text` is.
    pub fn check(&self, client_id: &str, text: &str) -> SendCheck {
        match self.by_client.get(client_id) {
            None => SendCheck::New,
            Some(seen) if seen.digest == digest(text) => SendCheck::Repeat {
                original: seen.message.clone(),
            },
            Some(seen) => SendCheck::Conflict {
                original: seen.message.clone(),
            },
        }
    }

    /// `client_id` is now message `message` (call it once the message is durably recorded).
    pub fn remember(&mut self, client_id: &str, message: &str, text: &str, now: DateTime<Utc>) {
        if self.by_client.len() >= PRUNE_PAST {
            self.by_client.retain(|_, s| s.at >= now - KEEP);
        }
        self.by_client.insert(
            client_id.to_string(),
            Seen {
                message: message.to_string(),
                digest: digest(text),
                at: now,
            },
        );
    }

    /// How many ids are remembered.
    pub fn len(&self) -> usize {
        self.by_client.len()
    }

    /// Whether no id is remembered.
    pub fn is_empty(&self) -> bool {
        self.by_client.is_empty()
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// The reply to message `message`, when its task has ended (the text, and whether it is an
/// answer), for a repeat whose sender waits: the task's recorded result (its first 500
/// characters), or why it stopped. `None` while the message is still queued or its task has
/// not ended: its reply is still to come, and reaches the repeat's sender then.
pub fn ended_reply(tasks: &pegasus_tasks::TaskStore, message: &str) -> Option<(String, bool)> {
    let task = match tasks.list() {
        Ok(list) => list
            .into_iter()
            .find(|t| t.messages.iter().any(|m| m == message))?,
        Err(e) => {
            tracing::warn!("cannot list the tasks for a repeated message: {e}");
            return None;
        }
    };
    let answered = match task.state {
        TaskState::Done | TaskState::Verified => true,
        // Waiting for a person's approval is not an end (DESIGN.md §11: `send --wait` keeps
        // waiting): the reply comes once the call is answered and the task goes on.
        TaskState::Blocked
            if task.stop_reason.as_deref() == Some(pegasus_agent::approvals::APPROVAL_REASON) =>
        {
            return None
        }
        TaskState::Failed | TaskState::Cancelled | TaskState::Blocked => false,
        TaskState::Draft
        | TaskState::Planned
        | TaskState::Ready
        | TaskState::Running
        | TaskState::Verifying => return None,
    };
    let text = match (&task.result_summary, &task.stop_reason) {
        (Some(summary), _) => summary.clone(),
        (None, Some(reason)) => format!("task {} {} ({reason})", task.id, task.state.as_str()),
        (None, None) => format!("task {} {}", task.id, task.state.as_str()),
    };
    Some((text, answered))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pegasus_agent::transcript::sent_record;
    use pegasus_proto::Channel;
    use pegasus_store::Session;

    fn repeat(original: &str) -> SendCheck {
        SendCheck::Repeat {
            original: original.into(),
        }
    }

    fn conflict(original: &str) -> SendCheck {
        SendCheck::Conflict {
            original: original.into(),
        }
    }

    fn at(hours_ago: i64) -> DateTime<Utc> {
        Utc::now() - chrono::TimeDelta::hours(hours_ago)
    }

    fn record(id: &str, client_id: &str, text: &str, ts: DateTime<Utc>) -> SessionRecord {
        let mut r = sent_record(id, &Channel::Cli, text, Some(client_id));
        if let SessionRecord::Message(m) = &mut r {
            m.ts = ts;
        }
        r
    }

    #[test]
    fn a_repeat_is_the_first_message_and_another_text_a_conflict() {
        let mut s = Sends::default();
        assert_eq!(s.check("c1", "hi"), SendCheck::New);
        s.remember("c1", "m1", "hi", Utc::now());
        assert_eq!(s.check("c1", "hi"), repeat("m1"));
        assert_eq!(s.check("c1", "hello"), conflict("m1"));
        assert_eq!(s.check("c2", "hi"), SendCheck::New);
    }

    /// The ids come back from the session after a restart, and from the archive of a
    /// compaction; those older than a day are forgotten, as are lines without an id.
    #[test]
    fn ids_are_rebuilt_from_the_session_and_its_recent_archives() {
        let dir = tempfile::tempdir().unwrap();
        let mut session = Session::open(dir.path(), "p").unwrap();
        session
            .append_turn(&[
                record("m-old", "c-old", "old", at(25)),
                record("m1", "c1", "one", at(2)),
                plain("m2", "no id"),
            ])
            .unwrap();
        // A compaction: the file so far is archived, and the new one starts with its mark.
        let archive = dir.path().join("session/archive/x.jsonl");
        std::fs::create_dir_all(archive.parent().unwrap()).unwrap();
        std::fs::rename(pegasus_store::session_file(dir.path()), &archive).unwrap();
        let mut session = Session::open(dir.path(), "p").unwrap();
        // The archive of a compaction older than a day is not read.
        std::fs::write(
            dir.path().join("session/archive/y.jsonl"),
            format!(
                "{}\n",
                serde_json::to_string(&record("m5", "c5", "five", at(0))).unwrap()
            ),
        )
        .unwrap();
        session
            .append_turn(&[
                SessionRecord::Compaction {
                    summary: "s".into(),
                    archived: "session/archive/y.jsonl".into(),
                    ts: at(25),
                },
                SessionRecord::Compaction {
                    summary: "s".into(),
                    archived: "session/archive/x.jsonl".into(),
                    ts: at(1),
                },
                record("m3", "c3", "three", at(0)),
            ])
            .unwrap();
        // A torn last line is no id.
        std::fs::OpenOptions::new()
            .append(true)
            .open(pegasus_store::session_file(dir.path()))
            .and_then(|mut f| {
                std::io::Write::write_all(&mut f, br#"{"type":"message","client_id":"c4"#)
            })
            .unwrap();
        let s = Sends::load(dir.path(), Utc::now());
        assert_eq!(s.len(), 2);
        assert_eq!(s.check("c1", "one"), repeat("m1"));
        assert_eq!(s.check("c3", "three"), repeat("m3"));
        assert_eq!(s.check("c-old", "old"), SendCheck::New);
        assert_eq!(s.check("c4", "x"), SendCheck::New);
        assert_eq!(s.check("c5", "five"), SendCheck::New);
    }

    fn plain(id: &str, text: &str) -> SessionRecord {
        pegasus_agent::transcript::user_record(id, &Channel::Dashboard, text)
    }

    #[test]
    fn old_ids_go_only_when_there_are_many() {
        let mut s = Sends::default();
        s.remember("old", "m0", "x", at(30));
        for i in 0..PRUNE_PAST - 1 {
            s.remember(&format!("c{i}"), "m", "x", Utc::now());
        }
        assert!(s.check("old", "x") != SendCheck::New);
        s.remember("new", "m", "x", Utc::now());
        assert_eq!(s.check("old", "x"), SendCheck::New);
        assert_eq!(s.len(), PRUNE_PAST);
    }
}
