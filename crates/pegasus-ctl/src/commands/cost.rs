//! `pegasusctl cost [--project NAME] [--since DATE]`: totals from `costs/ledger.jsonl`, read
//! from the file (the daemon need not run). Calls of models with no known price are counted
//! separately, never as free.

use crate::CtlError;
use pegasus_store::{Home, LedgerEntry};
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Default, Serialize)]
struct Bucket {
    calls: u64,
    usd: f64,
    unpriced_calls: u64,
    input_tokens: u64,
    output_tokens: u64,
    cache_read_tokens: u64,
    cache_write_tokens: u64,
}

impl Bucket {
    fn add(&mut self, e: &LedgerEntry) {
        self.calls += 1;
        // The same rule as every other sum of the ledger (`LedgerTotals`): only a finite
        // price >= 0 counts; anything else is an unpriced call.
        match e.usd.filter(|u| u.is_finite() && *u >= 0.0) {
            Some(usd) => self.usd += usd,
            None => self.unpriced_calls += 1,
        }
        self.input_tokens += e.input_tokens;
        self.output_tokens += e.output_tokens;
        self.cache_read_tokens += e.cache_read_tokens;
        self.cache_write_tokens += e.cache_write_tokens;
    }
}

#[derive(Debug, Default, Serialize)]
struct Report {
    total: Bucket,
    by_project: BTreeMap<String, Bucket>,
    by_day: BTreeMap<String, Bucket>,
    by_model: BTreeMap<String, Bucket>,
    skipped_lines: usize,
}

pub fn run(
    home: &Home,
    json: bool,
    project: Option<String>,
    since: Option<String>,
) -> Result<(), CtlError> {
    let since = since
        .map(|s| {
            chrono::NaiveDate::parse_from_str(&s, "%Y-%m-%d")
                .map_err(|_| CtlError::Failed(format!("bad --since `{s}`: use YYYY-MM-DD")))
        })
        .transpose()?;
    let read = pegasus_store::read_ledger(&home.ledger_file())?;
    let mut report = Report {
        skipped_lines: read.skipped,
        ..Report::default()
    };
    for e in read.records.iter().filter(|e| {
        project.as_ref().is_none_or(|p| &e.project == p)
            && since.is_none_or(|d| e.ts.date_naive() >= d)
    }) {
        report.total.add(e);
        report
            .by_project
            .entry(e.project.clone())
            .or_default()
            .add(e);
        report
            .by_day
            .entry(e.ts.date_naive().to_string())
            .or_default()
            .add(e);
        report.by_model.entry(e.model.clone()).or_default().add(e);
    }
    if json {
        return super::print_json(&report);
    }
    let t = &report.total;
    println!(
        "total ${:.4} over {} calls ({} input, {} output, {} cache-read, {} cache-write tokens)",
        t.usd, t.calls, t.input_tokens, t.output_tokens, t.cache_read_tokens, t.cache_write_tokens
    );
    if t.unpriced_calls > 0 {
        println!(
            "{} calls used a model with no known price: add it under prices: in config.yml",
            t.unpriced_calls
        );
    }
    for (title, map) in [
        ("project", &report.by_project),
        ("day", &report.by_day),
        ("model", &report.by_model),
    ] {
        if map.is_empty() {
            continue;
        }
        println!("\nby {title}:");
        for (key, b) in map {
            println!("  {key:<32} ${:>10.4}  {:>6} calls", b.usd, b.calls);
        }
    }
    Ok(())
}
