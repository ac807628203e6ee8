//! The price table: what a call cost, and how large a model's context window is.
//!
//! The shipped table (`data/prices.yml`) is compiled in, so a fresh install prices the common
//! models without any file; config.yml `prices:` extends and overrides it. A model without an
//! entry has *no* price: its cost is `None`, never 0, so an unpriced model can never slip
//! under a budget unnoticed as "free".

use std::collections::BTreeMap;

use pegasus_proto::llm::{LlmError, Usage};
use pegasus_store::PriceConfig;
use serde::de::DeserializeOwned;

/// The table shipped with Pegasus.
const SHIPPED: &str = include_str!("../../../data/prices.yml");

/// Prices keyed by `provider/model` or by a glob pattern with `*`.
#[derive(Debug, Clone, Default)]
pub struct PriceTable {
    entries: BTreeMap<String, PriceConfig>,
}

impl PriceTable {
    /// The shipped table with `overrides` (config.yml `prices:`) applied on top.
    pub fn new(overrides: &BTreeMap<String, PriceConfig>) -> Result<PriceTable, LlmError> {
        Ok(PriceTable {
            entries: shipped_with(SHIPPED, "prices.yml", overrides)?,
        })
    }

    /// The entry for `model` (see [`lookup`]).
    pub fn get(&self, model: &str) -> Option<&PriceConfig> {
        lookup(&self.entries, model)
    }

    /// What `usage` cost on `model` in USD; `None` when the model has no price.
    pub fn cost(&self, model: &str, usage: &Usage) -> Option<f64> {
        self.get(model).map(|p| cost_of(p, usage))
    }

    /// The model's context window in tokens, if the table knows it.
    pub fn context_window(&self, model: &str) -> Option<u64> {
        self.get(model).and_then(|p| p.context_window)
    }
}

/// A shipped table (`data/{name}`, compiled in as `shipped`) with config.yml's `overrides` on
/// top.
pub(crate) fn shipped_with<V: DeserializeOwned + Clone>(
    shipped: &str,
    name: &str,
    overrides: &BTreeMap<String, V>,
) -> Result<BTreeMap<String, V>, LlmError> {
    let mut entries: BTreeMap<String, V> = serde_norway::from_str(shipped)
        .map_err(|e| LlmError::Other(format!("shipped data/{name} is broken: {e}")))?;
    entries.extend(overrides.iter().map(|(k, v)| (k.clone(), v.clone())));
    Ok(entries)
}

/// The entry for `model` in a table keyed by `provider/model` or by a glob pattern with `*`:
/// an exact key first, then the most specific matching pattern, then the same two steps for
/// the id without a date suffix (providers report `claude-sonnet-4-5-20250929` for
/// `claude-sonnet-4-5`).
pub(crate) fn lookup<'a, V>(entries: &'a BTreeMap<String, V>, model: &str) -> Option<&'a V> {
    let find = |model: &str| {
        entries.get(model).or_else(|| {
            entries
                .iter()
                .filter(|(k, _)| k.contains('*') && glob_match(k, model))
                // Most literal characters = most specific; ties go to the longer key.
                .max_by_key(|(k, _)| (k.chars().filter(|&c| c != '*').count(), k.len()))
                .map(|(_, v)| v)
        })
    };
    find(model).or_else(|| strip_date_suffix(model).and_then(find))
}

/// USD for `usage` at price `p` (per million tokens). Cache prices default to the input price:
/// over-estimating a cache hit is safer for a budget than guessing a discount.
pub fn cost_of(p: &PriceConfig, usage: &Usage) -> f64 {
    let cache_read = p.cache_read.unwrap_or(p.input);
    let cache_write = p.cache_write.unwrap_or(p.input);
    (usage.input_tokens as f64 * p.input
        + usage.output_tokens as f64 * p.output
        + usage.cache_read_tokens as f64 * cache_read
        + usage.cache_write_tokens as f64 * cache_write)
        / 1e6
}

/// `*` matches any run of characters (including `/`); everything else is literal.
fn glob_match(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, rest) = match parts.split_first() {
        Some(x) => x,
        None => return text.is_empty(),
    };
    let Some(mut tail) = text.strip_prefix(first) else {
        return false;
    };
    let Some((last, middle)) = rest.split_last() else {
        return tail.is_empty();
    };
    for part in middle {
        match tail.find(part) {
            Some(i) => tail = &tail[i + part.len()..],
            None => return false,
        }
    }
    tail.len() >= last.len() && tail.ends_with(last)
}

/// `x-20250929` -> `x`, `x-2024-08-06` -> `x`; `None` when there is no such suffix.
fn strip_date_suffix(model: &str) -> Option<&str> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if let Some((head, tail)) = model.rsplit_once('-') {
        if tail.len() == 8 && digits(tail) {
            return Some(head);
        }
    }
    let mut it = model.rsplitn(4, '-');
    let (d, m, y, head) = (it.next()?, it.next()?, it.next()?, it.next()?);
    (y.len() == 4 && m.len() == 2 && d.len() == 2 && digits(y) && digits(m) && digits(d))
        .then_some(head)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn usage(i: u64, o: u64, r: u64, w: u64) -> Usage {
        Usage {
            input_tokens: i,
            output_tokens: o,
            cache_read_tokens: r,
            cache_write_tokens: w,
        }
    }

    fn price(input: f64, output: f64) -> PriceConfig {
        PriceConfig {
            input,
            output,
            ..PriceConfig::default()
        }
    }

    #[test]
    fn shipped_table_prices_the_common_models() {
        let t = PriceTable::new(&BTreeMap::new()).unwrap();
        let sonnet = t.get("anthropic/claude-sonnet-4-5").unwrap();
        assert_eq!((sonnet.input, sonnet.output), (3.0, 15.0));
        assert_eq!(sonnet.cache_read, Some(0.3));
        assert_eq!(sonnet.cache_write, Some(3.75));
        assert_eq!(t.context_window("openai/gpt-4.1-mini"), Some(1_047_576));
        assert_eq!(t.get("openai/gpt-4o-mini").unwrap().input, 0.15);
        assert_eq!(t.get("anthropic/claude-opus-4-1").unwrap().output, 75.0);
        assert_eq!(
            t.cost("ollama/llama3.1:8b", &usage(1000, 1000, 0, 0)),
            Some(0.0)
        );
        assert_eq!(t.context_window("fake/anything"), Some(200_000));
    }

    #[test]
    fn cost_counts_every_kind_of_token() {
        let t = PriceTable::new(&BTreeMap::new()).unwrap();
        // Sonnet: 3 in, 15 out, 0.3 cache read, 3.75 cache write per million.
        let c = t
            .cost(
                "anthropic/claude-sonnet-4-5",
                &usage(1_000_000, 100_000, 2_000_000, 400_000),
            )
            .unwrap();
        assert!((c - (3.0 + 1.5 + 0.6 + 1.5)).abs() < 1e-9, "{c}");
    }

    #[test]
    fn absent_cache_prices_default_to_the_input_price() {
        let c = cost_of(&price(2.0, 4.0), &usage(0, 0, 1_000_000, 500_000));
        assert!((c - 3.0).abs() < 1e-9, "{c}");
    }

    #[test]
    fn unknown_model_has_no_price_not_zero() {
        let t = PriceTable::new(&BTreeMap::new()).unwrap();
        assert_eq!(
            t.cost("anthropic/claude-unknown-9", &usage(10, 10, 0, 0)),
            None
        );
        assert_eq!(t.context_window("nobody/x"), None);
    }

    #[test]
    fn config_overrides_and_extends_and_the_most_specific_pattern_wins() {
        let over = BTreeMap::from([
            ("anthropic/claude-sonnet-4-5".to_string(), price(1.0, 1.0)),
            ("fa/*".to_string(), price(5.0, 5.0)),
            ("fa/big-*".to_string(), price(7.0, 7.0)),
        ]);
        let t = PriceTable::new(&over).unwrap();
        assert_eq!(t.get("anthropic/claude-sonnet-4-5").unwrap().input, 1.0);
        assert_eq!(t.get("fa/x").unwrap().input, 5.0);
        assert_eq!(t.get("fa/big-one").unwrap().input, 7.0);
        assert_eq!(t.get("anthropic/claude-haiku-4-5").unwrap().input, 1.0);
    }

    #[test]
    fn dated_model_ids_use_the_undated_price() {
        let t = PriceTable::new(&BTreeMap::new()).unwrap();
        assert_eq!(
            t.get("anthropic/claude-sonnet-4-5-20250929").unwrap().input,
            3.0
        );
        assert_eq!(t.get("openai/gpt-4o-2024-08-06").unwrap().input, 2.5);
        assert_eq!(t.get("openai/gpt-4o-mini-2024-07-18").unwrap().input, 0.15);
        assert_eq!(strip_date_suffix("gpt-4o"), None);
    }

    #[test]
    fn glob_matching() {
        assert!(glob_match("ollama/*", "ollama/llama3/8b"));
        assert!(glob_match("*", ""));
        assert!(glob_match("a*b*c", "a-x-b-y-c"));
        assert!(!glob_match("a*b*c", "a-x-c"));
        assert!(!glob_match("ab*ba", "aba"));
        assert!(!glob_match("ollama/*", "openai/x"));
        assert!(glob_match("exact", "exact"));
        assert!(!glob_match("exact", "exact2"));
    }
}
