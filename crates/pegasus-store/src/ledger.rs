//! Read side of `costs/ledger.jsonl`, the one-line-per-LLM-call cost record (SPEC §5).
//!
//! The gateway writes the ledger (through [`crate::JsonlAppender`]); this module only sums it,
//! for budgets and the dashboard. Lines it cannot use are skipped: a damaged ledger must never
//! stop the daemon.

use std::collections::HashMap;

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::home::Home;
use crate::jsonl::read_jsonl;

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
}

/// Just the fields the sums need, so a line with an odd extra field still counts.
#[derive(Deserialize)]
struct Cost {
    ts: DateTime<Utc>,
    project: String,
    usd: Option<f64>,
}

fn costs(home: &Home) -> Result<Vec<(DateTime<Utc>, String, f64)>> {
    let read = read_jsonl::<Cost>(&home.ledger_file())?;
    Ok(read
        .records
        .into_iter()
        .filter_map(|c| {
            c.usd
                .filter(|u| u.is_finite())
                .map(|u| (c.ts, c.project, u))
        })
        .collect())
}

/// Sum of `usd` per project over the whole ledger (lines without `usd` or unparsable are
/// skipped). A missing ledger is an empty map.
pub fn project_costs(home: &Home) -> Result<HashMap<String, f64>> {
    let mut out = HashMap::new();
    for (_, project, usd) in costs(home)? {
        *out.entry(project).or_insert(0.0) += usd;
    }
    Ok(out)
}

/// Sum of `usd` for lines dated `day` (UTC); the daily budget is checked against this.
pub fn cost_on(home: &Home, day: NaiveDate) -> Result<f64> {
    Ok(costs(home)?
        .into_iter()
        .filter(|(ts, _, _)| ts.date_naive() == day)
        .map(|(_, _, usd)| usd)
        // A fold from +0.0, not `sum()`: an empty float sum is -0.0 and prints as "$-0.00".
        .fold(0.0, |a, b| a + b))
}

/// Sum of `usd` for lines whose `ts` is today (UTC).
pub fn cost_today(home: &Home) -> Result<f64> {
    cost_on(home, Utc::now().date_naive())
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
        assert_eq!(cost_today(&home).unwrap(), 1.75);
        assert_eq!(cost_on(&home, old.date_naive()).unwrap(), 2.0);
    }

    #[test]
    fn missing_ledger_is_zero() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::new(dir.path());
        assert!(project_costs(&home).unwrap().is_empty());
        assert_eq!(cost_today(&home).unwrap(), 0.0);
    }
}
