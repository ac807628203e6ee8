//! Hard budgets (DESIGN.md §5): what is reserved for calls in flight, and the journal that makes
//! sure no billed call is missing from the ledger.
//!
//! A call is admitted only after its queue wait, under one lock, if the spend so far plus the
//! reservations of the calls in flight plus its own worst case (estimated input + `max_tokens`
//! at the table price) fit every cap; so overspend is bounded by what is in flight, and with
//! exact estimates there is none. Before it is sent, a `pending` line is appended durably to
//! `costs/pending.jsonl`; its ledger line carries the same call id, and a call that ends
//! without a bill (refused, cancelled, failed before an answer) appends a `done` line. On
//! start, every pending call with neither becomes a ledger line at its reserved cost, flagged
//! `estimated` (pegasusd died between the provider's answer and the ledger), and the journal
//! starts empty again. The provider's response id is journaled (an `answered` line, written
//! but not synced: a killed process loses nothing the kernel has) as soon as it is seen, so
//! such a line carries the request id of the answer it meters; the call id itself went to the
//! provider with the request (`X-Client-Request-Id`), so every line names its request even
//! when pegasusd died before a byte of the answer arrived. The recovery is idempotent: a crash during it leaves lines whose call
//! ids are in the ledger, which the next start skips.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use crate::lock;
use chrono::{DateTime, Utc};
use pegasus_proto::llm::Usage;
use pegasus_store::{Home, JsonlAppender, LedgerEntry};
use serde::{Deserialize, Serialize};

/// A call sent (or about to be) and what it may cost at worst.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingCall {
    /// The gateway's id of the call, unique per pegasusd run: sent to the provider as
    /// `X-Client-Request-Id` and carried by the call's ledger line.
    pub call: String,
    /// When the call was admitted.
    pub ts: DateTime<Utc>,
    /// The ledger project name that makes the call (`main` for the MainAgent).
    pub project: String,
    /// The task it is for, if any.
    #[serde(default)]
    pub task: Option<String>,
    /// The role that makes it, if any.
    #[serde(default)]
    pub role: Option<String>,
    /// The `provider/model` the call goes to.
    pub model: String,
    /// Estimated prompt tokens.
    pub input_tokens: u64,
    /// The call's `max_tokens`.
    pub output_tokens: u64,
    /// The worst case at the table price; `None` for an unpriced model.
    pub usd: Option<f64>,
    /// The model the call asked for first, when this model is its fallback.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback_from: Option<String>,
}

impl PendingCall {
    /// The ledger line of this call: `usage` costing `usd`, with the provider's `request_id` if
    /// it gave one; `estimated` when the counts are not the provider's.
    pub fn entry(
        &self,
        usage: &Usage,
        usd: Option<f64>,
        request_id: Option<String>,
        estimated: bool,
    ) -> LedgerEntry {
        LedgerEntry {
            ts: Utc::now(),
            project: self.project.clone(),
            task: self.task.clone(),
            role: self.role.clone(),
            model: self.model.clone(),
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            cache_read_tokens: usage.cache_read_tokens,
            cache_write_tokens: usage.cache_write_tokens,
            usd,
            request_id,
            call: Some(self.call.clone()),
            estimated,
            fallback_from: self.fallback_from.clone(),
        }
    }

    /// The ledger line of this call when only its worst case is known.
    pub fn estimated_entry(&self, request_id: Option<String>) -> LedgerEntry {
        let worst = Usage {
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
            ..Usage::default()
        };
        self.entry(&worst, self.usd, request_id, true)
    }
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(untagged)]
enum Line {
    Done {
        done: String,
    },
    /// The provider's response id of a call, once seen.
    Answered {
        answered: String,
        request_id: String,
    },
    Sent(PendingCall),
}

/// A call journaled by an earlier pegasusd that has no ledger line, with the provider's
/// response id if its answer had begun to arrive.
#[derive(Debug, Clone, PartialEq)]
pub struct Unsettled {
    /// The call as its `pending` line journaled it.
    pub call: PendingCall,
    /// The provider's response id from its `answered` line; `None` when none was journaled.
    pub request_id: Option<String>,
}

/// The journal file.
pub struct Journal {
    file: Mutex<Open>,
}

/// The journal's appender, with what it holds: the calls still open, and its line count.
struct Open {
    appender: JsonlAppender,
    /// The calls still open, with their response id once seen.
    calls: HashMap<String, (PendingCall, Option<String>)>,
    lines: usize,
}

/// Lines after which the journal is rewritten with only its open calls (it gains two per
/// call: without this it would grow until the next start).
const COMPACT_AFTER: usize = 4096;

impl Journal {
    /// Opens the journal of `home`, returning it (emptied) and the calls it held that have
    /// no ledger line (`settled`: the call ids the ledger has) and no `done` line.
    pub fn recover(
        home: &Home,
        settled: &HashSet<String>,
    ) -> Result<(Journal, Vec<Unsettled>), pegasus_store::StoreError> {
        let path = home.pending_calls_file();
        let read = pegasus_store::read_jsonl::<Line>(&path)?;
        let mut done: HashSet<&str> = HashSet::new();
        let mut ids: HashMap<&str, &str> = HashMap::new();
        for line in &read.records {
            match line {
                Line::Done { done: call } => {
                    done.insert(call.as_str());
                }
                Line::Answered {
                    answered,
                    request_id,
                } => {
                    ids.insert(answered.as_str(), request_id.as_str());
                }
                Line::Sent(_) => {}
            }
        }
        // A call journaled twice (a compaction's rewrite racing nothing, but a hand-edited
        // file may) is replayed once.
        let mut seen: HashSet<&str> = HashSet::new();
        let unsettled: Vec<Unsettled> = read
            .records
            .iter()
            .filter_map(|l| match l {
                Line::Sent(p)
                    if !done.contains(p.call.as_str())
                        && !settled.contains(&p.call)
                        && seen.insert(p.call.as_str()) =>
                {
                    Some(Unsettled {
                        call: p.clone(),
                        request_id: ids.get(p.call.as_str()).map(|s| s.to_string()),
                    })
                }
                _ => None,
            })
            .collect();
        let appender = JsonlAppender::open(&path)?;
        Ok((
            Journal {
                file: Mutex::new(Open {
                    appender,
                    calls: HashMap::new(),
                    lines: read.records.len(),
                }),
            },
            unsettled,
        ))
    }

    /// Empties the journal (after its unsettled calls were written to the ledger).
    pub fn reset(&self, home: &Home) -> Result<(), pegasus_store::StoreError> {
        let path = home.pending_calls_file();
        let mut file = lock(&self.file);
        pegasus_store::write_atomic(&path, b"")?;
        file.appender = JsonlAppender::open(&path)?;
        file.calls.clear();
        file.lines = 0;
        Ok(())
    }

    /// Records durably that `p` is about to be sent (blocking: an fsync).
    /// Past [`COMPACT_AFTER`] lines, the journal is first rewritten atomically with only the
    /// calls still open (a crash during it leaves the old file or the new one, both complete).
    pub fn sent(&self, p: &PendingCall) -> Result<(), pegasus_store::StoreError> {
        let mut file = lock(&self.file);
        if file.lines >= COMPACT_AFTER && file.lines > 4 * file.calls.len() {
            let mut text = String::new();
            for (call, request_id) in file.calls.values() {
                let mut lines = vec![Line::Sent(call.clone())];
                if let Some(id) = request_id {
                    lines.push(Line::Answered {
                        answered: call.call.clone(),
                        request_id: id.clone(),
                    });
                }
                for line in lines {
                    let line = serde_json::to_string(&line)
                        .map_err(|e| pegasus_store::StoreError::Invalid(e.to_string()))?;
                    text.push_str(&line);
                    text.push('\n');
                }
            }
            let path = file.appender.path().to_path_buf();
            pegasus_store::write_atomic(&path, text.as_bytes())?;
            file.appender = JsonlAppender::open(&path)?;
            file.lines = text.lines().count();
        }
        file.appender.append_durable(&Line::Sent(p.clone()))?;
        file.calls.insert(p.call.clone(), (p.clone(), None));
        file.lines += 1;
        Ok(())
    }

    /// Records the provider's response id of open call `call` (written, not synced: the
    /// kernel keeps it through a kill of pegasusd; a power cut only loses the id, never the
    /// call, whose `sent` line is durable). Once per call.
    pub fn answered(&self, call: &str, request_id: &str) {
        let mut file = lock(&self.file);
        let Some(open) = file.calls.get_mut(call) else {
            return;
        };
        if open.1.is_some() {
            return;
        }
        open.1 = Some(request_id.to_string());
        file.lines += 1;
        if let Err(e) = file.appender.append(&Line::Answered {
            answered: call.to_string(),
            request_id: request_id.to_string(),
        }) {
            tracing::warn!(call, "cannot write to the call journal: {e}");
        }
    }

    /// Records that `call` ended without a bill, or with its ledger line written (not synced:
    /// losing it only makes the next start count the call's worst case).
    pub fn done(&self, call: &str) {
        let mut file = lock(&self.file);
        file.calls.remove(call);
        file.lines += 1;
        if let Err(e) = file.appender.append(&Line::Done {
            done: call.to_string(),
        }) {
            tracing::warn!(call, "cannot write to the call journal: {e}");
        }
    }

    /// Lines in the journal file now.
    #[cfg(test)]
    fn lines(&self) -> usize {
        lock(&self.file).lines
    }
}

/// USD reserved by the calls in flight, by UTC day, project and task: the same sums as the
/// ledger's, held only while a call is open (added at admission, removed when it ends).
pub type Reserved = pegasus_store::LedgerTotals;

/// A conservative count of a request body's prompt tokens: 3 bytes of its JSON per token.
pub fn estimate_input_tokens(body: &serde_json::Value) -> u64 {
    (body.to_string().len() as u64).div_ceil(3)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn pending(call: &str) -> PendingCall {
        PendingCall {
            call: call.into(),
            ts: Utc::now(),
            project: "p".into(),
            task: Some("t".into()),
            role: None,
            model: "fa/m".into(),
            input_tokens: 10,
            output_tokens: 20,
            usd: Some(0.5),
            fallback_from: None,
        }
    }

    /// A fallback model's call replayed after a crash still names the model asked for, and an
    /// older journal line without the field reads as no fallback.
    #[test]
    fn a_journaled_fallback_call_keeps_the_model_asked_for() {
        let call = PendingCall {
            fallback_from: Some("fa/first".into()),
            ..pending("c1")
        };
        let line = serde_json::to_string(&call).unwrap();
        let back: PendingCall = serde_json::from_str(&line).unwrap();
        assert_eq!(back, call);
        let entry = back.estimated_entry(None);
        assert_eq!(entry.fallback_from.as_deref(), Some("fa/first"));
        assert_eq!(entry.model, "fa/m");
        let old = serde_json::to_string(&pending("c2")).unwrap();
        assert!(!old.contains("fallback_from"), "{old}");
        let old: PendingCall = serde_json::from_str(&old).unwrap();
        assert_eq!(old.estimated_entry(None).fallback_from, None);
    }

    #[test]
    fn only_calls_neither_done_nor_in_the_ledger_are_unsettled() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::new(dir.path());
        std::fs::create_dir_all(dir.path().join("costs")).unwrap();
        let (j, none) = Journal::recover(&home, &HashSet::new()).unwrap();
        assert!(none.is_empty());
        for c in ["a", "b", "c"] {
            j.sent(&pending(c)).unwrap();
        }
        j.done("b");
        drop(j);
        let settled = HashSet::from(["c".to_string()]);
        let (j, unsettled) = Journal::recover(&home, &settled).unwrap();
        assert_eq!(unsettled.len(), 1);
        assert_eq!(unsettled[0].call.call, "a");
        assert_eq!(unsettled[0].request_id, None);
        let e = unsettled[0].call.estimated_entry(None);
        assert!(e.estimated && e.usd == Some(0.5) && e.call.as_deref() == Some("a"));
        j.reset(&home).unwrap();
        let (_, after) = Journal::recover(&home, &HashSet::new()).unwrap();
        assert!(after.is_empty());
    }

    /// The journal is compacted while pegasusd runs: two lines per call would otherwise grow
    /// it until the next start. Open calls survive the rewrite and still recover.
    #[test]
    fn the_journal_keeps_only_open_calls_when_it_grows() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::new(dir.path());
        std::fs::create_dir_all(dir.path().join("costs")).unwrap();
        let (j, _) = Journal::recover(&home, &HashSet::new()).unwrap();
        j.sent(&pending("open-1")).unwrap();
        for n in 0..COMPACT_AFTER {
            let c = format!("c{n}");
            j.sent(&pending(&c)).unwrap();
            j.done(&c);
        }
        j.sent(&pending("open-2")).unwrap();
        assert!(j.lines() < COMPACT_AFTER + 2, "{}", j.lines());
        let on_disk = std::fs::read_to_string(home.pending_calls_file()).unwrap();
        assert!(on_disk.lines().count() <= COMPACT_AFTER + 2);
        drop(j);
        let (_, unsettled) = Journal::recover(&home, &HashSet::new()).unwrap();
        let mut open: Vec<&str> = unsettled.iter().map(|p| p.call.call.as_str()).collect();
        open.sort();
        assert_eq!(open, ["open-1", "open-2"]);
    }

    /// The window of issue 32 item 10: pegasusd killed after the provider's answer began to
    /// arrive and before its ledger line. The replayed line carries the answer's request id
    /// (read from the journal, which the kill cannot take back), so the call is matched to its
    /// answer; kept through a compaction too.
    #[test]
    fn a_call_answered_before_a_kill_is_replayed_with_its_request_id() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::new(dir.path());
        std::fs::create_dir_all(dir.path().join("costs")).unwrap();
        let (j, _) = Journal::recover(&home, &HashSet::new()).unwrap();
        j.sent(&pending("answered")).unwrap();
        j.answered("answered", "msg_1");
        // Only the first id counts, and a closed call's is not written.
        j.answered("answered", "msg_2");
        j.answered("unknown", "msg_3");
        j.sent(&pending("unanswered")).unwrap();
        for n in 0..COMPACT_AFTER {
            let c = format!("c{n}");
            j.sent(&pending(&c)).unwrap();
            j.done(&c);
        }
        j.sent(&pending("last")).unwrap();
        drop(j); // killed: no `done`, no ledger line
        let (_, unsettled) = Journal::recover(&home, &HashSet::new()).unwrap();
        let mut got: Vec<(String, Option<String>)> = unsettled
            .iter()
            .map(|u| (u.call.call.clone(), u.request_id.clone()))
            .collect();
        got.sort();
        assert_eq!(
            got,
            [
                ("answered".to_string(), Some("msg_1".to_string())),
                ("last".to_string(), None),
                ("unanswered".to_string(), None)
            ]
        );
        let e = unsettled
            .iter()
            .find(|u| u.call.call == "answered")
            .map(|u| u.call.estimated_entry(u.request_id.clone()))
            .unwrap();
        assert_eq!(e.request_id.as_deref(), Some("msg_1"));
        assert_eq!(e.call.as_deref(), Some("answered"));
    }

    #[test]
    fn reservations_add_up_and_release() {
        let mut r = Reserved::default();
        let d = Utc::now().date_naive();
        r.add(d, "p", Some("t"), 1.0);
        r.add(d, "q", None, 2.0);
        assert_eq!(r.day(d), 3.0);
        assert_eq!(r.project("p"), 1.0);
        assert_eq!(r.task("t"), 1.0);
        r.remove(d, "p", Some("t"), 1.0);
        assert_eq!(r.day(d), 2.0);
        assert_eq!(r.project("p"), 0.0);
        assert_eq!(r.task("t"), 0.0);
    }
}
