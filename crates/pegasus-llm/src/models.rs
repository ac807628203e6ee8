//! The model table (DESIGN.md §5): each model's context window, output limit and whether it thinks
//! (Anthropic) or reasons (OpenAI). Shipped in `data/models.yml`, extended by config.yml
//! `models:`; a model neither knows gets conservative defaults, never "unknown".

use std::collections::BTreeMap;

use pegasus_proto::llm::LlmError;
use pegasus_store::{Config, ModelConfig};

use crate::prices::{lookup, shipped_with};

/// The table shipped with Pegasus.
const SHIPPED: &str = include_str!("../../../data/models.yml");

/// Output tokens assumed for a model the table does not know.
pub const DEFAULT_MAX_OUTPUT: u32 = 4096;

/// What the gateway knows about one model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelInfo {
    /// Tokens the model can see, prompt and answer together.
    pub context_window: u64,
    /// Most tokens one answer may have; a call's `max_tokens` is capped by it.
    pub max_output_tokens: u32,
    /// Anthropic extended thinking (`thinking` blocks).
    pub thinking: bool,
    /// An OpenAI reasoning model: `max_completion_tokens` and `reasoning_effort`.
    pub reasoning: bool,
    /// Whether a table had an entry (else these are the defaults).
    pub known: bool,
    /// Whether a table gave the context window (else it is `default_context_window`, and the
    /// model's server may know better).
    pub window_known: bool,
}

/// Model capabilities keyed by `provider/model` or a glob pattern.
#[derive(Debug, Clone, Default)]
pub struct ModelTable {
    entries: BTreeMap<String, ModelConfig>,
    default_context_window: u64,
}

impl ModelTable {
    /// The shipped table with config.yml `models:` on top.
    pub fn new(config: &Config) -> Result<ModelTable, LlmError> {
        Ok(ModelTable {
            entries: shipped_with(SHIPPED, "models.yml", &config.models)?,
            default_context_window: config.default_context_window,
        })
    }

    /// What `model` (`provider/model`) can do: an exact key, else the most specific pattern,
    /// else the same for the id without a date suffix, else the defaults. `fallback_window`
    /// is a context window known elsewhere (an old `prices` entry).
    pub fn info(&self, model: &str, fallback_window: Option<u64>) -> ModelInfo {
        match lookup(&self.entries, model) {
            Some(m) => ModelInfo {
                context_window: m
                    .context_window
                    .or(fallback_window)
                    .unwrap_or(self.default_context_window),
                max_output_tokens: m.max_output_tokens.unwrap_or(DEFAULT_MAX_OUTPUT),
                thinking: m.thinking,
                reasoning: m.reasoning,
                known: true,
                window_known: m.context_window.is_some() || fallback_window.is_some(),
            },
            None => ModelInfo {
                context_window: fallback_window.unwrap_or(self.default_context_window),
                max_output_tokens: DEFAULT_MAX_OUTPUT,
                thinking: false,
                reasoning: false,
                known: false,
                window_known: fallback_window.is_some(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn shipped_models_overrides_and_defaults() {
        let mut config = Config::default();
        config.models.insert(
            "openai/gpt-4o".into(),
            ModelConfig {
                context_window: Some(64_000),
                max_output_tokens: None,
                thinking: false,
                reasoning: false,
            },
        );
        config.default_context_window = 100_000;
        let t = ModelTable::new(&config).unwrap();
        let sonnet = t.info("anthropic/claude-sonnet-4-5-20250929", None);
        assert!(sonnet.thinking && !sonnet.reasoning && sonnet.known);
        assert_eq!(sonnet.context_window, 200_000);
        let o4 = t.info("openai/o4-mini", None);
        assert!(o4.reasoning && !o4.thinking);
        assert_eq!(t.info("openai/gpt-4o", None).context_window, 64_000);
        assert!(t.info("fake/x-thinking", None).thinking);
        assert!(t.info("fake/x-reasoning", None).reasoning);
        assert!(!t.info("fake/x", None).thinking);
        let unknown = t.info("nobody/x", None);
        assert_eq!(
            (
                unknown.context_window,
                unknown.max_output_tokens,
                unknown.known
            ),
            (100_000, DEFAULT_MAX_OUTPUT, false)
        );
        assert_eq!(t.info("nobody/x", Some(50_000)).context_window, 50_000);
    }

    /// Every model the shipped price table names has an entry in the model table.
    #[test]
    fn every_priced_model_is_in_the_model_table() {
        let prices: BTreeMap<String, serde_norway::Value> =
            serde_norway::from_str(include_str!("../../../data/prices.yml")).unwrap();
        let t = ModelTable::new(&Config::default()).unwrap();
        for model in prices.keys() {
            assert!(
                t.entries.contains_key(model),
                "{model} is priced but not in data/models.yml"
            );
        }
    }
}
