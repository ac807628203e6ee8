//! `pegasusctl cost [--project NAME] [--since DATE]`: totals from `costs/ledger.jsonl`, read
//! from the file (the daemon need not run). Calls of models with no known price are counted
//! separately, never as free.

use crate::CtlError;
use pegasus_store::Home;

pub fn run(
    home: &Home,
    json: bool,
    project: Option<String>,
    since: Option<String>,
) -> Result<(), CtlError> {
    let report = report(home, project.as_deref(), since.as_deref())?;
    if json {
        return super::print_json(&report);
    }
    print!("{}", text(&report));
    Ok(())
}

/// The ledger's totals, of one project or all, from a UTC day (`YYYY-MM-DD`) on or all time.
pub(crate) fn report(
    home: &Home,
    project: Option<&str>,
    since: Option<&str>,
) -> Result<pegasus_store::CostReport, CtlError> {
    let since = since
        .map(|s| {
            chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d")
                .map_err(|_| CtlError::Failed(format!("bad --since `{s}`: use YYYY-MM-DD")))
        })
        .transpose()?;
    Ok(pegasus_store::cost_report(
        &home.ledger_file(),
        project,
        since,
    )?)
}

/// The report as `cost` prints it.
pub(crate) fn text(report: &pegasus_store::CostReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let t = &report.total;
    let _ = writeln!(
        out,
        "total ${:.4} over {} calls ({} input, {} output, {} cache-read, {} cache-write tokens)",
        t.usd, t.calls, t.input_tokens, t.output_tokens, t.cache_read_tokens, t.cache_write_tokens
    );
    if t.estimated_calls > 0 {
        let (n, verb) = match t.estimated_calls {
            1 => ("1 call".to_string(), "is"),
            n => (format!("{n} calls"), "are"),
        };
        let _ = writeln!(
            out,
            "{n} {verb} counted at an estimated cost: the provider sent no (or partial) token counts, the answer was cut, its caller went away, or pegasusd stopped before recording it"
        );
    }
    if t.unpriced_calls > 0 {
        let _ = writeln!(
            out,
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
        let _ = writeln!(out, "\nby {title}:");
        for (key, b) in map {
            let _ = writeln!(out, "  {key:<32} ${:>10.4}  {:>6} calls", b.usd, b.calls);
        }
    }
    out
}
