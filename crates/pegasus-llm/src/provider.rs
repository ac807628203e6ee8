//! Which endpoint a model id goes to, and with which key.
//!
//! Model ids are `provider/model`; the provider part names an entry of config.yml `providers:`,
//! which says the wire format (`kind`), the URL and the environment variable holding the key.
//! Keys are read from the environment at call time, never stored: a user who exports a key
//! after pegasusd started does not need to restart it, and no key ever reaches a worker.

use crate::lock;
use pegasus_proto::llm::LlmError;
use pegasus_store::{Config, ProviderConfig};

/// The two wire formats the gateway speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Anthropic Messages API (`POST /v1/messages`).
    Anthropic,
    /// OpenAI Chat Completions and every server compatible with it (Ollama, vLLM, OpenRouter...).
    OpenAi,
}

/// A model id resolved against the config: everything needed to address the call.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// The provider's name in config.yml (`anthropic`, `ollama`, ...).
    pub provider: String,
    /// The model id as the provider knows it (no provider prefix; may itself contain `/`).
    pub model: String,
    /// `provider/model`, the id prices and the ledger use.
    pub full: String,
    /// The wire format the provider speaks.
    pub kind: Kind,
    /// Base URL with any trailing `/` removed, so paths can be appended verbatim.
    pub base_url: String,
    /// Environment variable holding the key; `None` = the server wants no auth (Ollama).
    pub api_key_env: Option<String>,
    /// A server of the user's own (`local: true`): no key needed, free unless priced.
    pub local: bool,
}

/// The model a request would use: empty means the config's default model.
pub fn resolve_model(config: &Config, model: &str) -> String {
    let model = model.trim();
    if model.is_empty() {
        config.default_model.clone()
    } else {
        model.to_string()
    }
}

/// Splits `provider/model` at the first `/` (so `openrouter/meta-llama/llama-3` is provider
/// `openrouter`, model `meta-llama/llama-3`) and looks the provider up.
pub fn resolve(config: &Config, model: &str) -> Result<Target, LlmError> {
    let full = resolve_model(config, model);
    let Some((provider, name)) = full.split_once('/') else {
        return Err(LlmError::BadModel(full));
    };
    if provider.is_empty() || name.is_empty() {
        return Err(LlmError::BadModel(full));
    }
    let Some(pc) = config.providers.get(provider) else {
        return Err(LlmError::UnknownProvider {
            provider: provider.to_string(),
            model: full.clone(),
        });
    };
    Ok(Target {
        provider: provider.to_string(),
        model: name.to_string(),
        full: full.clone(),
        kind: kind_of(provider, pc)?,
        base_url: pc.base_url.trim_end_matches('/').to_string(),
        api_key_env: pc.api_key_env.clone().filter(|e| !e.trim().is_empty()),
        local: pc.local,
    })
}

fn kind_of(name: &str, pc: &ProviderConfig) -> Result<Kind, LlmError> {
    match pc.kind.as_str() {
        "anthropic" => Ok(Kind::Anthropic),
        "openai" => Ok(Kind::OpenAi),
        other => Err(LlmError::Other(format!(
            "provider {name} has kind `{other}` in config.yml: use `anthropic` or `openai`"
        ))),
    }
}

/// `request` carrying `key` as `kind` wants it: Anthropic's `x-api-key` header, else a bearer
/// token.
pub fn authorize(
    request: reqwest::RequestBuilder,
    kind: Kind,
    key: Option<&str>,
) -> reqwest::RequestBuilder {
    match (key, kind) {
        (Some(k), Kind::Anthropic) => request.header("x-api-key", k),
        (Some(k), Kind::OpenAi) => request.bearer_auth(k),
        (None, _) => request,
    }
}

/// Keys taken out of the environment by [`take_keys_from_env`], by variable name.
static KEYS: std::sync::Mutex<Option<std::collections::HashMap<String, String>>> =
    std::sync::Mutex::new(None);

/// Reads every provider's key variable once and keeps the values in this process's memory
/// only. Returns the names of the variables that held a key; the caller then scrubs and removes
/// them from the environment (see pegasusd's start), so no child (worker, `exec`, MainAgent
/// command) inherits them. Call it at start, before any thread exists.
pub fn take_keys_from_env(config: &Config) -> Vec<String> {
    let mut keys = lock(&KEYS);
    let keys = keys.get_or_insert_with(Default::default);
    let mut taken = Vec::new();
    for pc in config.providers.values() {
        let Some(env) = pc.api_key_env.as_deref().filter(|e| !e.trim().is_empty()) else {
            continue;
        };
        if let Ok(value) = std::env::var(env) {
            if !value.trim().is_empty() {
                keys.insert(env.to_string(), value.trim().to_string());
                taken.push(env.to_string());
            }
        }
    }
    taken
}

/// The API key for `target`: taken at start by [`take_keys_from_env`], else read from its
/// environment variable now (library users and tests that never took them). `Ok(None)` when
/// the provider needs no key; `MissingKey` when it needs one that is unset or empty.
pub fn credential(target: &Target) -> Result<Option<String>, LlmError> {
    let Some(env) = &target.api_key_env else {
        return Ok(None);
    };
    let kept = lock(&KEYS).as_ref().and_then(|k| k.get(env).cloned());
    match kept.or_else(|| std::env::var(env).ok()) {
        Some(key) if !key.trim().is_empty() => Ok(Some(key.trim().to_string())),
        // A local server takes a key when one is set and works without.
        _ if target.local => Ok(None),
        _ => Err(LlmError::MissingKey {
            provider: target.provider.clone(),
            env: env.clone(),
        }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn config() -> Config {
        let mut c = Config::default();
        c.providers.insert(
            "openrouter".into(),
            ProviderConfig {
                kind: "openai".into(),
                base_url: "https://openrouter.ai/api/v1/".into(),
                api_key_env: Some("PEGASUS_TEST_OPENROUTER_KEY_UNSET".into()),
                local: false,
            },
        );
        c.providers.insert(
            "ollama".into(),
            ProviderConfig {
                kind: "openai".into(),
                base_url: "http://127.0.0.1:11434/v1".into(),
                api_key_env: None,
                local: false,
            },
        );
        c.providers.insert(
            "weird".into(),
            ProviderConfig {
                kind: "gemini".into(),
                base_url: "http://x".into(),
                api_key_env: None,
                local: false,
            },
        );
        c
    }

    #[test]
    fn empty_model_is_the_default_model() {
        let c = config();
        assert_eq!(resolve_model(&c, ""), "anthropic/claude-sonnet-4-5");
        let t = resolve(&c, "").unwrap();
        assert_eq!(t.provider, "anthropic");
        assert_eq!(t.model, "claude-sonnet-4-5");
        assert_eq!(t.kind, Kind::Anthropic);
    }

    #[test]
    fn splits_at_the_first_slash_and_trims_the_url() {
        let t = resolve(&config(), "openrouter/meta-llama/llama-3").unwrap();
        assert_eq!(t.provider, "openrouter");
        assert_eq!(t.model, "meta-llama/llama-3");
        assert_eq!(t.full, "openrouter/meta-llama/llama-3");
        assert_eq!(t.base_url, "https://openrouter.ai/api/v1");
        assert_eq!(t.kind, Kind::OpenAi);
    }

    #[test]
    fn bad_and_unknown_models_are_refused() {
        let c = config();
        assert_eq!(
            resolve(&c, "gpt-4o"),
            Err(LlmError::BadModel("gpt-4o".into()))
        );
        assert_eq!(resolve(&c, "/x"), Err(LlmError::BadModel("/x".into())));
        assert_eq!(
            resolve(&c, "openai/"),
            Err(LlmError::BadModel("openai/".into()))
        );
        assert_eq!(
            resolve(&c, "nope/x"),
            Err(LlmError::UnknownProvider {
                provider: "nope".into(),
                model: "nope/x".into()
            })
        );
        assert!(matches!(resolve(&c, "weird/x"), Err(LlmError::Other(m)) if m.contains("gemini")));
    }

    #[test]
    fn credentials_come_from_the_environment() {
        let c = config();
        assert_eq!(credential(&resolve(&c, "ollama/llama3").unwrap()), Ok(None));
        assert_eq!(
            credential(&resolve(&c, "openrouter/x").unwrap()),
            Err(LlmError::MissingKey {
                provider: "openrouter".into(),
                env: "PEGASUS_TEST_OPENROUTER_KEY_UNSET".into()
            })
        );
    }
}
