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
    let since = since
        .map(|s| {
            chrono::NaiveDate::parse_from_str(&s, "%Y-%m-%d")
                .map_err(|_| CtlError::Failed(format!("bad --since `{s}`: use YYYY-MM-DD")))
        })
        .transpose()?;
    let report = pegasus_store::cost_report(&home.ledger_file(), project.as_deref(), since)?;
    if json {
        return super::print_json(&report);
    }
    let t = &report.total;
    println!(
        "total ${:.4} over {} calls ({} input, {} output, {} cache-read, {} cache-write tokens)",
        t.usd, t.calls, t.input_tokens, t.output_tokens, t.cache_read_tokens, t.cache_write_tokens
    );
    if t.estimated_calls > 0 {
        let (n, verb) = match t.estimated_calls {
            1 => ("1 call".to_string(), "is"),
            n => (format!("{n} calls"), "are"),
        };
        println!(
            "{n} {verb} counted at an estimated cost: the provider sent no (or partial) token counts, the answer was cut, its caller went away, or pegasusd stopped before recording it"
        );
    }
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
