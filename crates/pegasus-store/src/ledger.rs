//! Read side of `costs/ledger.jsonl`, the one-line-per-LLM-call cost record (DESIGN.md §5).
//!
//! The gateway writes the ledger (through [`crate::JsonlAppender`]); this module is the one
//! reader of it ([`read_ledger`]) and the one way to sum it ([`LedgerTotals`]), used by the
//! gateway's budgets (which keep the totals in memory and add each line as they write it), by
//! runs, by `pegasusctl cost` and by the daemon-less listings. Lines it cannot use are skipped:
//! a damaged ledger must never stop the daemon.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::home::Home;
use crate::jsonl::{read_jsonl, JsonlRead};
use std::path::Path;

/// One ledger line: what one LLM call cost and on whose behalf. `usd` is `None` when the model
/// has no known price (the tokens are still recorded).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LedgerEntry {
    /// When the call finished.
    pub ts: DateTime<Utc>,
    /// The project that made the call (`main` for the MainAgent).
    pub project: String,
    /// The task it was for, if any.
    #[serde(default)]
    pub task: Option<String>,
    /// The role that made it, if any.
    #[serde(default)]
    pub role: Option<String>,
    /// The `provider/model` actually used.
    #[serde(default)]
    pub model: String,
    /// Prompt tokens billed at the input price.
    #[serde(default)]
    pub input_tokens: u64,
    /// Completion tokens.
    #[serde(default)]
    pub output_tokens: u64,
    /// Prompt tokens served from the provider cache.
    #[serde(default)]
    pub cache_read_tokens: u64,
    /// Prompt tokens written to the provider cache.
    #[serde(default)]
    pub cache_write_tokens: u64,
    /// Cost in US dollars, if the price was known.
    #[serde(default)]
    pub usd: Option<f64>,
    /// The provider's request id, for disputes.
    #[serde(default)]
    pub request_id: Option<String>,
    /// The gateway's id of the call (as in `costs/pending.jsonl`): a journaled call with a
    /// ledger line is settled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<String>,
    /// The cost and tokens are the call's worst case, not what the provider reported: its
    /// answer could not be read, or pegasusd died before it could record it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub estimated: bool,
    /// The model the call asked for first, when `model` answered as its fallback (DESIGN.md §5
    /// fallback models); absent when the model asked for answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback_from: Option<String>,
}

impl LedgerEntry {
    /// The one rule for what a line's price counts for, in every sum of the ledger (budgets,
    /// `cost`, runs, the dashboard): a finite price >= 0; anything else (no price, a negative
    /// or non-finite one from a hand-edited ledger) is an unpriced call and adds nothing, so no
    /// line can lower a total below what was spent.
    pub fn counted_usd(&self) -> Option<f64> {
        self.usd.filter(|u| u.is_finite() && *u >= 0.0)
    }
}

/// Reads the whole ledger: every line that parses, in file order, and how many did not. A
/// missing ledger is empty.
pub fn read_ledger(path: &Path) -> Result<JsonlRead<LedgerEntry>> {
    read_jsonl::<LedgerEntry>(path)
}

/// USD by UTC day, project and task: the sums every budget and listing needs. Only priced
/// lines count (an unpriced call has `usd: None`). The gateway also keeps what its calls in
/// flight reserve in one (`pegasus_llm::journal::Reserved`): admission adds both up per scope.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LedgerTotals {
    days: HashMap<NaiveDate, f64>,
    projects: HashMap<String, f64>,
    tasks: HashMap<String, f64>,
}

impl LedgerTotals {
    /// Sums what was read.
    pub fn from_entries<'a>(entries: impl IntoIterator<Item = &'a LedgerEntry>) -> Self {
        let mut t = LedgerTotals::default();
        for e in entries {
            t.add_entry(e);
        }
        t
    }

    /// Reads and sums the ledger at `path`.
    pub fn load(path: &Path) -> Result<Self> {
        Ok(Self::from_entries(&read_ledger(path)?.records))
    }

    /// Counts one ledger line.
    pub fn add_entry(&mut self, e: &LedgerEntry) {
        if let Some(usd) = e.counted_usd() {
            self.add(e.ts.date_naive(), &e.project, e.task.as_deref(), usd);
        }
    }

    /// Counts one priced call on `day` (UTC). A price that is not a finite number >= 0 is
    /// ignored (config refuses negative prices; this keeps a hand-edited ledger from
    /// bypassing a budget).
    pub fn add(&mut self, day: NaiveDate, project: &str, task: Option<&str>, usd: f64) {
        if !(usd.is_finite() && usd >= 0.0) {
            return;
        }
        *self.days.entry(day).or_insert(0.0) += usd;
        *self.projects.entry(project.to_string()).or_insert(0.0) += usd;
        if let Some(task) = task {
            *self.tasks.entry(task.to_string()).or_insert(0.0) += usd;
        }
    }

    /// Takes back what [`LedgerTotals::add`] counted with the same arguments (a reservation
    /// released); a sum that falls to about zero is dropped, so released calls leave no keys.
    pub fn remove(&mut self, day: NaiveDate, project: &str, task: Option<&str>, usd: f64) {
        fn sub<K: Borrow<Q> + Hash + Eq, Q: Hash + Eq + ?Sized>(
            m: &mut HashMap<K, f64>,
            k: &Q,
            usd: f64,
        ) {
            if let Some(v) = m.get_mut(k) {
                *v -= usd;
                if *v <= 1e-12 {
                    m.remove(k);
                }
            }
        }
        if !(usd.is_finite() && usd >= 0.0) {
            return;
        }
        sub(&mut self.days, &day, usd);
        sub(&mut self.projects, project, usd);
        if let Some(task) = task {
            sub(&mut self.tasks, task, usd);
        }
    }

    /// Spent on `day` (UTC), all projects together.
    pub fn day(&self, day: NaiveDate) -> f64 {
        self.days.get(&day).copied().unwrap_or(0.0)
    }

    /// Spent by `project` over the whole ledger.
    pub fn project(&self, project: &str) -> f64 {
        self.projects.get(project).copied().unwrap_or(0.0)
    }

    /// Spent on `task` over the whole ledger.
    pub fn task(&self, task: &str) -> f64 {
        self.tasks.get(task).copied().unwrap_or(0.0)
    }

    /// Spent per project over the whole ledger.
    pub fn projects(&self) -> &HashMap<String, f64> {
        &self.projects
    }
}

/// Sum of `usd` per project over the whole ledger (lines without `usd` or unparsable are
/// skipped). A missing ledger is an empty map.
pub fn project_costs(home: &Home) -> Result<HashMap<String, f64>> {
    Ok(LedgerTotals::load(&home.ledger_file())?.projects)
}

/// The ledger summed for `pegasusctl cost` and the dashboard's `/api/costs` (one shape for both).
#[derive(Debug, Default, Serialize)]
pub struct CostBucket {
    /// Ledger lines (LLM calls) summed here.
    pub calls: u64,
    /// US dollars of the priced calls (see [`LedgerEntry::counted_usd`]).
    pub usd: f64,
    /// Calls without a usable price: counted here, adding nothing to `usd`.
    pub unpriced_calls: u64,
    /// Calls whose cost is an estimate (worst case), not the provider's usage: cut off by a
    /// crash after being sent, or answered with a body that could not be read.
    pub estimated_calls: u64,
    /// Prompt tokens billed at the input price.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
    /// Prompt tokens served from the provider cache.
    pub cache_read_tokens: u64,
    /// Prompt tokens written to the provider cache.
    pub cache_write_tokens: u64,
}

impl CostBucket {
    /// Counts one ledger line into this bucket.
    pub fn add(&mut self, e: &LedgerEntry) {
        self.calls += 1;
        if e.estimated {
            self.estimated_calls += 1;
        }
        // The one rule of every sum of the ledger ([`LedgerEntry::counted_usd`]).
        match e.counted_usd() {
            Some(usd) => self.usd += usd,
            None => self.unpriced_calls += 1,
        }
        self.input_tokens += e.input_tokens;
        self.output_tokens += e.output_tokens;
        self.cache_read_tokens += e.cache_read_tokens;
        self.cache_write_tokens += e.cache_write_tokens;
    }
}

/// What [`cost_report`] returns: the selected ledger lines summed in total and per project,
/// UTC day and model.
#[derive(Debug, Default, Serialize)]
pub struct CostReport {
    /// Every selected line.
    pub total: CostBucket,
    /// Per project name (`main` for the MainAgent).
    pub by_project: BTreeMap<String, CostBucket>,
    /// Per UTC day, keyed `YYYY-MM-DD`.
    pub by_day: BTreeMap<String, CostBucket>,
    /// Per `provider/model`.
    pub by_model: BTreeMap<String, CostBucket>,
    /// Ledger lines that did not parse and were left out (of the whole file, before selection).
    pub skipped_lines: usize,
}

/// Sums `ledger` (optionally one project's lines, from one UTC day on).
pub fn cost_report(
    ledger: &std::path::Path,
    project: Option<&str>,
    since: Option<chrono::NaiveDate>,
) -> crate::Result<CostReport> {
    let read = read_ledger(ledger)?;
    let mut report = CostReport {
        skipped_lines: read.skipped,
        ..CostReport::default()
    };
    for e in read.records.iter().filter(|e| {
        project.is_none_or(|p| e.project == p) && since.is_none_or(|d| e.ts.date_naive() >= d)
    }) {
        report.total.add(e);
        for (by, key) in [
            (&mut report.by_project, e.project.clone()),
            (&mut report.by_day, e.ts.date_naive().to_string()),
            (&mut report.by_model, e.model.clone()),
        ] {
            by.entry(key).or_default().add(e);
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::jsonl::JsonlAppender;

    fn entry(ts: DateTime<Utc>, project: &str, usd: Option<f64>) -> LedgerEntry {
        LedgerEntry {
            ts,
            project: project.into(),
            task: None,
            role: None,
            model: "anthropic/x".into(),
            input_tokens: 10,
            output_tokens: 5,
            cache_read_tokens: 0,
            cache_write_tokens: 0,
            usd,
            request_id: None,
            call: None,
            estimated: false,
            fallback_from: None,
        }
    }

    #[test]
    fn sums_per_project_and_per_day_skipping_bad_lines() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::new(dir.path());
        let now = Utc::now();
        let old = now - chrono::Duration::days(3);
        let mut w = JsonlAppender::open(&home.ledger_file()).unwrap();
        w.append(&entry(now, "a", Some(1.5))).unwrap();
        w.append(&entry(old, "a", Some(2.0))).unwrap();
        w.append(&entry(now, "b", None)).unwrap();
        w.append(&entry(now, "b", Some(0.25))).unwrap();
        w.append(&serde_json::json!({"garbage": true})).unwrap();
        w.sync().unwrap();
        let per = project_costs(&home).unwrap();
        assert_eq!(per.get("a"), Some(&3.5));
        assert_eq!(per.get("b"), Some(&0.25));
        let totals = LedgerTotals::load(&home.ledger_file()).unwrap();
        assert_eq!(totals.day(now.date_naive()), 1.75);
        assert_eq!(totals.day(old.date_naive()), 2.0);
    }

    #[test]
    fn missing_ledger_is_zero() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::new(dir.path());
        assert!(project_costs(&home).unwrap().is_empty());
        let totals = LedgerTotals::load(&home.ledger_file()).unwrap();
        assert_eq!(totals.day(Utc::now().date_naive()), 0.0);
    }

    #[test]
    fn the_one_reader_skips_a_torn_tail_and_the_totals_agree_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.jsonl");
        let mut a = JsonlAppender::open(&path).unwrap();
        let now = Utc::now();
        a.append_durable(&entry(now, "p", Some(1.0))).unwrap();
        a.append_durable(&entry(now, "q", None)).unwrap();
        a.append_durable(&entry(now, "p", Some(0.5))).unwrap();
        drop(a);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut f, b"{\"ts\":\"2026-").unwrap();
        let read = read_ledger(&path).unwrap();
        assert_eq!((read.records.len(), read.torn_tail), (3, true));
        let t = LedgerTotals::from_entries(&read.records);
        assert_eq!(t.project("p"), 1.5);
        assert_eq!(t.project("q"), 0.0, "unpriced calls cost nothing");
        assert_eq!(t.day(now.date_naive()), 1.5);
        let mut by_hand = LedgerTotals::default();
        for e in &read.records {
            by_hand.add_entry(e);
        }
        assert_eq!(by_hand, t);
    }
}
