//! Writing `costs/ledger.jsonl`: one durable line per successful call.
//!
//! The line is fsynced before the call returns, so a crash right after a call cannot lose money
//! that was spent; the running totals are updated right after, from the same entry, so they
//! agree with the file. The totals have their own lock so a budget check never waits for an
//! fsync.

use std::sync::{Arc, Mutex};

use pegasus_proto::llm::LlmError;
use pegasus_store::{Home, JsonlAppender, LedgerEntry};

use crate::budget::Totals;
use crate::lock;

/// The ledger file and the totals it feeds.
#[derive(Debug, Clone)]
pub struct Ledger {
    file: Arc<Mutex<JsonlAppender>>,
    totals: Arc<Mutex<Totals>>,
}

impl Ledger {
    /// Opens (creating if needed) the home's ledger and sums what it already holds; also
    /// returns the call ids its lines settle (for the journal's recovery).
    pub fn open(home: &Home) -> Result<(Ledger, std::collections::HashSet<String>), LlmError> {
        let path = home.ledger_file();
        let read = pegasus_store::read_ledger(&path).map_err(|e| LlmError::Other(e.to_string()))?;
        if read.skipped > 0 || read.torn_tail {
            tracing::warn!(
                ledger = %path.display(),
                skipped = read.skipped,
                torn_tail = read.torn_tail,
                "ignored unreadable ledger lines when summing spend"
            );
        }
        let totals = Totals::from_entries(&read.records);
        let settled = read.records.iter().filter_map(|e| e.call.clone()).collect();
        let file = JsonlAppender::open(&path).map_err(|e| LlmError::Other(e.to_string()))?;
        Ok((
            Ledger {
                file: Arc::new(Mutex::new(file)),
                totals: Arc::new(Mutex::new(totals)),
            },
            settled,
        ))
    }

    /// [`Ledger::record`] on the calling thread (start-up recovery).
    pub fn record_blocking(&self, entry: LedgerEntry) {
        Self::write(&self.file, &self.totals, entry);
    }

    fn write(file: &Mutex<JsonlAppender>, totals: &Mutex<Totals>, entry: LedgerEntry) {
        // The totals are updated while the file lock is held, so two calls ending together
        // are added in file order and the totals always equal a fresh read of the file.
        let mut file = lock(file);
        if let Err(e) = file.append_durable(&entry) {
            tracing::error!(error = %e, model = %entry.model, usd = ?entry.usd,
                "could not write the cost ledger line");
        }
        lock(totals).add_entry(&entry);
        drop(file);
    }

    /// Appends `entry` durably and counts it. Runs on a blocking thread (fsync). A write error
    /// is logged, not returned: the provider has already billed the call, and failing it would
    /// only make the caller pay for it again. The totals count it either way.
    pub async fn record(&self, entry: LedgerEntry) {
        let (file, totals) = (self.file.clone(), self.totals.clone());
        let done = pegasus_fs::blocking(move || Self::write(&file, &totals, entry)).await;
        if let Err(e) = done {
            tracing::error!(error = %e, "ledger writer task failed");
        }
    }

    /// Reads the totals (a short lock; never held across an await).
    pub fn with_totals<R>(&self, f: impl FnOnce(&Totals) -> R) -> R {
        f(&lock(&self.totals))
    }
}
