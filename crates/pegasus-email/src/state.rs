//! What the e-mail channel remembers under `<home>/email/` (DESIGN.md §17), every file written
//! atomically, so a `kill -9` at any point leaves files that load:
//!
//! * `cursor.json` — `{"uidvalidity": V, "uid": U}`: every mail of the mailbox with
//!   UIDVALIDITY `V` up to UID `U` has been taken (made a job, or left as a stranger's).
//! * `jobs/<V>-<UID>.json` — one per mail taken and not answered yet: what to do with it and
//!   the head of its reply; `answer` is set (the send intent) before the reply goes out, and
//!   the file is removed once the SMTP server accepted it.
//!
//! A job is written before the cursor passes its mail, and the cursor before the job runs, so
//! a mail is never taken twice nor lost; at start every job left is run again from where it
//! stood: a delivery to a project again with the same client id (the worker answers a repeat
//! with the first reply and runs nothing twice), an answer recorded but not confirmed sent
//! again with the same Message-ID.

use crate::mail::{Head, Route};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Where the mailbox was read up to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    /// The mailbox's UIDVALIDITY the UIDs belong to.
    pub uidvalidity: u32,
    /// The highest UID taken.
    pub uid: u32,
}

/// What a job does before it answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Work {
    /// A message for a project or the MainAgent.
    Message {
        /// Where it goes.
        route: Route,
        /// The message.
        text: String,
        /// The sender's address (the message's channel is `email:<from>`).
        from: String,
        /// The client id of the delivery (`email:<V>-<UID>`).
        client_id: String,
    },
    /// An answer to an approval request.
    Approval {
        /// The request's id.
        id: String,
        /// Approve or deny.
        approve: bool,
        /// Deny: why.
        reason: Option<String>,
        /// The sender's address.
        from: String,
    },
    /// Nothing to do but answer (an oversize mail, attachments).
    Refuse {
        /// The short answer.
        text: String,
    },
}

/// One mail taken and not answered yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    /// `<V>-<UID>`.
    pub key: String,
    /// What to do.
    pub work: Work,
    /// The reply's head.
    pub head: Head,
    /// The answer, once known: the reply is sent with it (again after a crash).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
}

/// The files under `<home>/email/`.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
}

/// A file of the store could not be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot write {path}: {message}; check the disk and the permissions of <home>/email")]
pub struct StateWriteError {
    path: String,
    message: String,
}

impl Store {
    /// The store under `<home>/email`, its folders made.
    pub fn open(home: &Path) -> Result<Store, StateWriteError> {
        let dir = home.join("email");
        let jobs = dir.join("jobs");
        pegasus_fs::create_dir_all_durable(&jobs).map_err(|e| StateWriteError {
            path: jobs.display().to_string(),
            message: e.to_string(),
        })?;
        // One pegasusd per home: a temp file here is a write a kill cut off.
        for d in [&dir, &jobs] {
            pegasus_fs::remove_stale_temps(d, std::time::Duration::ZERO);
        }
        Ok(Store { dir })
    }

    fn write(&self, path: &Path, bytes: &[u8]) -> Result<(), StateWriteError> {
        pegasus_fs::write_atomic(path, bytes).map_err(|e| StateWriteError {
            path: path.display().to_string(),
            message: e.to_string(),
        })
    }

    /// The cursor, when one was saved (an unreadable one is logged and taken as none).
    pub fn cursor(&self) -> Option<Cursor> {
        let path = self.dir.join("cursor.json");
        let text = pegasus_store::read_text_limited(&path, 4096).ok()?;
        match serde_json::from_str(&text) {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!(
                    "email: {} is unreadable ({e}); reading on from the mailbox's end",
                    path.display()
                );
                None
            }
        }
    }

    /// Saves the cursor.
    pub fn set_cursor(&self, c: Cursor) -> Result<(), StateWriteError> {
        let text = serde_json::to_string(&c).unwrap_or_default();
        self.write(&self.dir.join("cursor.json"), text.as_bytes())
    }

    fn job_path(&self, key: &str) -> PathBuf {
        self.dir.join("jobs").join(format!("{key}.json"))
    }

    /// Whether a job for `key` is waiting.
    pub fn has_job(&self, key: &str) -> bool {
        self.job_path(key).exists()
    }

    /// Saves `job` (new, or with its answer).
    pub fn save_job(&self, job: &Job) -> Result<(), StateWriteError> {
        let text = serde_json::to_vec_pretty(job).unwrap_or_default();
        self.write(&self.job_path(&job.key), &text)
    }

    /// Forgets job `key`: its reply went out.
    pub fn finish_job(&self, key: &str) {
        let path = self.job_path(key);
        if let Err(e) = std::fs::remove_file(&path) {
            tracing::warn!(
                "email: cannot remove {} ({e}); its reply may be sent again at the next start",
                path.display()
            );
        }
        let _ = pegasus_fs::fsync_dir(&self.dir.join("jobs"));
    }

    /// Every job waiting, oldest mail first.
    pub fn jobs(&self) -> Vec<Job> {
        let mut out = Vec::new();
        let Ok(entries) = std::fs::read_dir(self.dir.join("jobs")) else {
            return out;
        };
        for e in entries.flatten() {
            let path = e.path();
            if path.extension().and_then(|x| x.to_str()) != Some("json") {
                continue;
            }
            let read = pegasus_store::read_text_limited(&path, 64 << 20)
                .map_err(|e| e.to_string())
                .and_then(|t| serde_json::from_str::<Job>(&t).map_err(|e| e.to_string()));
            match read {
                Ok(job) => out.push(job),
                Err(e) => tracing::warn!(
                    "email: job {} is unreadable ({e}); left alone",
                    path.display()
                ),
            }
        }
        out.sort_by_key(|j| order(&j.key));
        out
    }
}

fn order(key: &str) -> (u64, u64) {
    let (v, u) = key.split_once('-').unwrap_or((key, "0"));
    (v.parse().unwrap_or(0), u.parse().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_cursor_and_the_jobs_survive_a_reload() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path()).unwrap();
        assert_eq!(s.cursor(), None);
        s.set_cursor(Cursor {
            uidvalidity: 7,
            uid: 3,
        })
        .unwrap();
        let head = Head {
            to: "me@example.com".into(),
            subject: "Re: x".into(),
            message_id: "pegasus.re.1@example.com".into(),
            in_reply_to: Some("a@b".into()),
            references: vec!["a@b".into()],
        };
        let job = |uid: u32| Job {
            key: format!("7-{uid}"),
            work: Work::Refuse {
                text: "too big".into(),
            },
            head: head.clone(),
            answer: None,
        };
        s.save_job(&job(10)).unwrap();
        s.save_job(&job(9)).unwrap();
        let mut answered = job(10);
        answered.answer = Some("done".into());
        s.save_job(&answered).unwrap();
        let again = Store::open(dir.path()).unwrap();
        assert_eq!(
            again.cursor(),
            Some(Cursor {
                uidvalidity: 7,
                uid: 3
            })
        );
        assert_eq!(again.jobs(), vec![job(9), answered]);
        assert!(again.has_job("7-9"));
        again.finish_job("7-9");
        assert!(!again.has_job("7-9"));
        assert_eq!(again.jobs().len(), 1);
    }
}
