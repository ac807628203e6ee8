//! Cost look-ups from the gateway's ledger (`costs/ledger.jsonl`, one line per LLM call).
//!
//! A run never adds up response costs itself: the ledger is the one record of spend, and the
//! executor's calls (made by the agent, out of this crate's sight) land there under the same
//! task id as the summary and review. Summing the ledger by task id therefore counts every
//! call of an attempt exactly once, including the ones made before a crash.

use std::collections::HashMap;
use std::path::Path;

use chrono::NaiveDate;
use pegasus_store::{read_ledger, LedgerEntry};

/// The ledger's lines, through the store's one reader.
fn lines(ledger: &Path) -> Vec<LedgerEntry> {
    match read_ledger(ledger) {
        Ok(read) => read.records,
        Err(e) => {
            // A ledger we cannot read must not stop a run; its cost shows as 0 and the log says why.
            tracing::warn!("cannot read the ledger for run costs: {e}");
            Vec::new()
        }
    }
}

/// Spend of one task id: the sum of its priced lines, and how many lines had no price.
pub fn ledger_cost_for_task(ledger: &Path, task_id: &str) -> (f64, u32) {
    spend(ledger, |line| line.task.as_deref() == Some(task_id))
}

/// Spend of one run, split the way the run file shows it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunCosts {
    /// The plan call (`<run>-plan`): priced sum and unpriced lines.
    pub plan: (f64, u32),
    /// Per phase number, over every attempt (`<run>-p<n>-a<k>` for any k).
    pub phases: HashMap<u32, (f64, u32)>,
}

/// Spend of a run from one read of the ledger. Phases are summed over *every* attempt id found
/// in the ledger rather than 1..=attempt, so spend of an interrupted attempt is never dropped
/// whatever the counter says; lines are added in file order so the sums are reproducible.
pub fn ledger_costs_for_run(ledger: &Path, run_id: &str) -> RunCosts {
    let plan_id = format!("{run_id}-plan");
    let phase_prefix = format!("{run_id}-p");
    let mut out = RunCosts::default();
    for line in lines(ledger) {
        let Some(task) = line.task.as_deref() else {
            continue;
        };
        if task == plan_id {
            add(&mut out.plan, &line);
        } else if let Some(phase) = task
            .strip_prefix(&phase_prefix)
            .and_then(phase_of_attempt_suffix)
        {
            add(out.phases.entry(phase).or_insert((0.0, 0)), &line);
        }
    }
    out
}

/// `<n>-a<k>` → n; anything else (another run whose id merely starts like this one) → None.
fn phase_of_attempt_suffix(rest: &str) -> Option<u32> {
    let (phase, attempt) = rest.split_once("-a")?;
    let digits = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
    if !digits(phase) || !digits(attempt) {
        return None;
    }
    phase.parse().ok()
}

/// Spend of every project on `day` (UTC): the daily limit is global, like the gateway's.
pub fn ledger_cost_on_day(ledger: &Path, day: NaiveDate) -> f64 {
    spend(ledger, |line| line.ts.date_naive() == day).0
}

/// The spend of the lines `keep` selects: the sum of the priced ones, and how many had no
/// price.
fn spend(ledger: &Path, keep: impl Fn(&LedgerEntry) -> bool) -> (f64, u32) {
    let mut sum = (0.0, 0);
    for line in lines(ledger).iter().filter(|line| keep(line)) {
        add(&mut sum, line);
    }
    sum
}

/// Unknown, negative or non-finite prices are counted as unpriced, never guessed as 0
/// silently: the ledger's one rule ([`LedgerEntry::counted_usd`]).
fn add((usd, unpriced): &mut (f64, u32), line: &LedgerEntry) {
    match line.counted_usd() {
        Some(u) => *usd += u,
        None => *unpriced += 1,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use chrono::Utc;

    #[test]
    fn sums_by_exact_task_id_and_counts_unpriced_lines() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = dir.path().join("ledger.jsonl");
        let now = Utc::now().to_rfc3339();
        let text = [
            format!(r#"{{"ts":"{now}","project":"p","task":"r-1-p1-a1","model":"m","usd":0.5}}"#),
            format!(r#"{{"ts":"{now}","project":"p","task":"r-1-p1-a1","model":"m","usd":0.25}}"#),
            format!(r#"{{"ts":"{now}","project":"p","task":"r-1-p1-a1","model":"m","usd":null}}"#),
            // A hand-edited negative price lowers nothing: unpriced, as in every other sum.
            format!(r#"{{"ts":"{now}","project":"p","task":"r-1-p1-a1","model":"m","usd":-5.0}}"#),
            format!(r#"{{"ts":"{now}","project":"p","task":"r-1-p1-a10","model":"m","usd":4.0}}"#),
            format!(r#"{{"ts":"{now}","project":"p","model":"m","usd":8.0}}"#),
            "not json".to_string(),
        ]
        .join("\n")
            + "\n";
        std::fs::write(&ledger, text).unwrap();
        assert_eq!(ledger_cost_for_task(&ledger, "r-1-p1-a1"), (0.75, 2));
        assert_eq!(ledger_cost_for_task(&ledger, "r-1-p2-a1"), (0.0, 0));
        let run = ledger_costs_for_run(&ledger, "r-1");
        assert_eq!(run.plan, (0.0, 0));
        assert_eq!(run.phases.get(&1), Some(&(4.75, 2)));
        assert_eq!(run.phases.len(), 1);
        assert_eq!(ledger_costs_for_run(&ledger, "r").phases.len(), 0);
        assert_eq!(ledger_cost_on_day(&ledger, Utc::now().date_naive()), 12.75);
        assert_eq!(
            ledger_cost_on_day(&ledger, Utc::now().date_naive() - chrono::Days::new(1)),
            0.0
        );
    }

    #[test]
    fn missing_ledger_costs_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = dir.path().join("none.jsonl");
        assert_eq!(ledger_cost_for_task(&ledger, "x"), (0.0, 0));
    }
}
