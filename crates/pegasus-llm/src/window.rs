//! Learning a model's context window from the software that serves it (DESIGN.md §5), for a model
//! neither the shipped table nor config.yml knows: a local model's window is whatever its
//! server was started with, so only the server can say.
//!
//! Each server says it its own way (shapes from their sources and a real llama.cpp server):
//! llama.cpp `GET /props` → `default_generation_settings.n_ctx` (the window of one slot, which
//! is what one request gets); vLLM `GET /v1/models` → `data[i].max_model_len`, llama.cpp's
//! `/v1/models` → `data[i].meta.n_ctx`; Ollama `POST /api/show {"model"}` → `num_ctx` in its
//! `parameters` text when the model sets one, else the model's trained `*.context_length` capped
//! at 4096, the context Ollama gives a model unless told otherwise (`OLLAMA_CONTEXT_LENGTH`).
//!
//! What a server said is remembered in `windows.state.json` ([`load_remembered`],
//! [`save_remembered`]), so a restarted pegasusd knows it without asking: a worker's start
//! never waits for a model server (DESIGN.md §12).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::provider::{authorize, Target};

/// How long one probe request may take; a server that does not answer is not waited for.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// Ollama's context for a model that sets no `num_ctx`.
const OLLAMA_DEFAULT_CTX: u64 = 4096;

/// The server's root URL: the base URL without a trailing `/v1` (OpenAI-compatible servers are
/// configured with it, their own endpoints sit beside it).
fn root(base_url: &str) -> &str {
    base_url.strip_suffix("/v1").unwrap_or(base_url)
}

/// Whether `target`'s server is asked for its window: a server of the user's own, that is a
/// `local: true` provider or one whose base URL's host is a loopback address (127.0.0.0/8,
/// `::1`, `localhost`), which can only be serving software on this machine (an Ollama
/// configured without `local: true` still says its window). The hosted APIs do not say, and a
/// request they do not serve is not worth making at every worker start.
pub fn asked(target: &Target) -> bool {
    target.local || on_loopback(&target.base_url)
}

/// Whether `base_url`'s host is a loopback address or `localhost`.
fn on_loopback(base_url: &str) -> bool {
    let Ok(url) = reqwest::Url::parse(base_url) else {
        return false;
    };
    let Some(host) = url.host_str() else {
        return false;
    };
    let host = host.trim_end_matches('.');
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    match bare.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(a)) => a.is_loopback(),
        Ok(std::net::IpAddr::V6(a)) => {
            a.is_loopback() || a.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
        Err(_) => false,
    }
}

/// The context window `target`'s server reports for its model, if it says. The three ways
/// are asked at once, so a server that does not answer costs [`PROBE_TIMEOUT`], not three of
/// them (llama.cpp's `/props` is preferred, then `/v1/models`, then Ollama's `/api/show`).
pub async fn probe(http: &reqwest::Client, target: &Target, key: Option<&str>) -> Option<u64> {
    let root = root(&target.base_url);
    let get_json = |r: reqwest::RequestBuilder| async move {
        let resp = authorize(r, target.kind, key)
            .timeout(PROBE_TIMEOUT)
            .send()
            .await
            .ok()?;
        if !resp.status().is_success() {
            return None;
        }
        resp.json::<Value>().await.ok()
    };
    let show = http
        .post(format!("{root}/api/show"))
        .json(&serde_json::json!({ "model": target.model }));
    let (props, models, show) = futures_util::join!(
        get_json(http.get(format!("{root}/props"))),
        get_json(http.get(format!("{root}/v1/models"))),
        get_json(show),
    );
    props
        .and_then(|v| llama_props(&v))
        .or_else(|| models.and_then(|v| listed_window(&v, &target.model)))
        .or_else(|| show.and_then(|v| ollama_show(&v)))
}

fn positive(v: Option<&Value>) -> Option<u64> {
    v.and_then(Value::as_u64).filter(|&n| n > 0)
}

/// llama.cpp `/props`.
pub fn llama_props(v: &Value) -> Option<u64> {
    positive(v.pointer("/default_generation_settings/n_ctx"))
}

/// `/v1/models`: vLLM's `max_model_len` or llama.cpp's `meta.n_ctx` of the entry whose id is
/// `model` (or the only entry: llama.cpp serves one model whatever name it is asked for).
pub fn listed_window(v: &Value, model: &str) -> Option<u64> {
    let data = v.get("data").and_then(Value::as_array)?;
    let entry = data
        .iter()
        .find(|m| m.get("id").and_then(Value::as_str) == Some(model))
        .or_else(|| (data.len() == 1).then(|| &data[0]))?;
    positive(entry.get("max_model_len")).or_else(|| positive(entry.pointer("/meta/n_ctx")))
}

/// Ollama `/api/show`.
pub fn ollama_show(v: &Value) -> Option<u64> {
    let set = v
        .get("parameters")
        .and_then(Value::as_str)
        .and_then(|p| {
            p.lines().find_map(|l| {
                let mut words = l.split_whitespace();
                (words.next() == Some("num_ctx"))
                    .then(|| words.next().and_then(|n| n.parse::<u64>().ok()))
                    .flatten()
            })
        })
        .filter(|&n| n > 0);
    if set.is_some() {
        return set;
    }
    let trained = v
        .get("model_info")
        .and_then(Value::as_object)?
        .iter()
        .find(|(k, _)| k.ends_with(".context_length"))
        .and_then(|(_, n)| positive(Some(n)))?;
    Some(trained.min(OLLAMA_DEFAULT_CTX))
}

/// One remembered window: what the server at `base_url` said for a model, and when (`window:
/// 0`: it did not say, so `default_context_window` applies). A model whose provider now has
/// another base URL is asked again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RememberedWindow {
    /// The provider's base URL when the server was asked.
    pub base_url: String,
    /// The context window in tokens the server said; 0 when it did not say.
    pub window: u64,
    /// When the server was asked.
    pub learned: DateTime<Utc>,
}

/// The file's shape: `{"windows": {"provider/model": {base_url, window, learned}}}`.
#[derive(Debug, Default, Serialize, Deserialize)]
struct RememberedFile {
    #[serde(default)]
    windows: BTreeMap<String, RememberedWindow>,
}

/// Largest `windows.state.json` read (one entry is ~150 bytes).
const REMEMBERED_CAP: u64 = 1 << 20;

/// The windows remembered in `path`, by `provider/model`. A missing file is none; an
/// unreadable one (torn by hand, too large, not a regular file) is none too, with a warning:
/// it only caches what the servers say, and they are asked again.
pub fn load_remembered(path: &Path) -> BTreeMap<String, RememberedWindow> {
    let read = match pegasus_store::read_capped(path, REMEMBERED_CAP) {
        Ok(c) if c.size <= REMEMBERED_CAP => c.bytes,
        Ok(c) => {
            tracing::warn!(file = %path.display(), size = c.size,
                "the remembered context windows are too large to read; asking the servers again");
            return BTreeMap::new();
        }
        Err(pegasus_store::ReadError::NotFound) => return BTreeMap::new(),
        Err(e) => {
            tracing::warn!(file = %path.display(), "cannot read the remembered context windows ({e}); asking the servers again");
            return BTreeMap::new();
        }
    };
    match serde_json::from_slice::<RememberedFile>(&read) {
        // `window: 0` is kept: the server did not say, and the default applies.
        Ok(f) => f.windows,
        Err(e) => {
            tracing::warn!(file = %path.display(), "the remembered context windows are unreadable ({e}); asking the servers again");
            BTreeMap::new()
        }
    }
}

/// Writes `windows` to `path` atomically (blocking: an fsync).
pub fn save_remembered(
    path: &Path,
    windows: &BTreeMap<String, RememberedWindow>,
) -> Result<(), pegasus_store::StoreError> {
    let file = RememberedFile {
        windows: windows.clone(),
    };
    let mut text = serde_json::to_vec_pretty(&file)
        .map_err(|e| pegasus_store::StoreError::Invalid(e.to_string()))?;
    text.push(b'\n');
    pegasus_store::write_atomic(path, &text)
}

/// The window a context-overflow refusal names, if it does (llama.cpp's `error.n_ctx`).
pub fn from_refusal(body: &str) -> Option<u64> {
    let v: Value = serde_json::from_str(body).ok()?;
    positive(v.pointer("/error/n_ctx"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::provider::Kind;
    use serde_json::json;

    #[test]
    fn each_server_says_it_its_own_way() {
        // Trimmed from a real llama.cpp server (xllamacpp) started with n_ctx 1024.
        let props =
            json!({"default_generation_settings": {"n_ctx": 1024, "params": {}}, "total_slots": 1});
        assert_eq!(llama_props(&props), Some(1024));
        let llama_models = json!({"object": "list", "data": [{"id": "SmolLM2-135M-Instruct.Q4_1.gguf", "owned_by": "llamacpp", "meta": {"n_ctx": 1024, "n_ctx_train": 8192}}]});
        assert_eq!(listed_window(&llama_models, "anything"), Some(1024));
        let vllm = json!({"object": "list", "data": [
            {"id": "Qwen/Qwen2.5-7B-Instruct", "object": "model", "max_model_len": 32768},
            {"id": "other", "max_model_len": 4096}]});
        assert_eq!(
            listed_window(&vllm, "Qwen/Qwen2.5-7B-Instruct"),
            Some(32768)
        );
        assert_eq!(listed_window(&vllm, "missing"), None);
        let openai = json!({"object": "list", "data": [{"id": "gpt-4o", "object": "model"}]});
        assert_eq!(listed_window(&openai, "gpt-4o"), None);
        let ollama_set = json!({"parameters": "stop \"<|eot|>\"\nnum_ctx                        8192", "model_info": {"llama.context_length": 131072}});
        assert_eq!(ollama_show(&ollama_set), Some(8192));
        let ollama = json!({"parameters": "temperature 0.7", "model_info": {"general.architecture": "qwen2", "qwen2.context_length": 32768}});
        assert_eq!(ollama_show(&ollama), Some(4096));
        let small = json!({"model_info": {"gemma.context_length": 2048}});
        assert_eq!(ollama_show(&small), Some(2048));
        assert_eq!(root("http://127.0.0.1:8080/v1"), "http://127.0.0.1:8080");
        assert_eq!(root("http://127.0.0.1:8080"), "http://127.0.0.1:8080");
        let refusal = r#"{"error":{"code":400,"message":"request (3031 tokens) exceeds the available context size (1024 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":3031,"n_ctx":1024}}"#;
        assert_eq!(from_refusal(refusal), Some(1024));
        assert_eq!(from_refusal("{}"), None);
    }

    /// What a server said survives a restart; a damaged file is nothing remembered, never an
    /// error (the servers are asked again).
    #[test]
    fn remembered_windows_round_trip_and_a_damaged_file_is_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("windows.state.json");
        assert!(load_remembered(&path).is_empty());
        let mut windows = BTreeMap::new();
        windows.insert(
            "local/m".to_string(),
            RememberedWindow {
                base_url: "http://127.0.0.1:8080/v1".into(),
                window: 4096,
                learned: Utc::now(),
            },
        );
        save_remembered(&path, &windows).unwrap();
        assert_eq!(load_remembered(&path), windows);
        std::fs::write(&path, b"{\"windows\": {\"local/m\": ").unwrap();
        assert!(load_remembered(&path).is_empty());
        std::fs::remove_file(&path).unwrap();
        std::fs::create_dir(&path).unwrap();
        assert!(load_remembered(&path).is_empty());
    }

    #[test]
    fn servers_on_this_machine_and_local_providers_are_asked() {
        let target = |base_url: &str, local: bool| Target {
            provider: "ollama".into(),
            model: "qwen2.5:7b".into(),
            full: "ollama/qwen2.5:7b".into(),
            kind: Kind::OpenAi,
            base_url: base_url.into(),
            api_key_env: None,
            local,
        };
        for url in [
            "http://127.0.0.1:11434/v1",
            "http://127.8.9.10:8080",
            "http://localhost:11434/v1",
            "http://LOCALHOST:11434",
            "http://[::1]:8000/v1",
            "http://[::ffff:127.0.0.1]:8000/v1",
            "https://localhost./v1",
        ] {
            assert!(asked(&target(url, false)), "{url} is this machine");
        }
        for url in [
            "https://api.openai.com/v1",
            "https://api.anthropic.com",
            "http://192.168.1.20:11434/v1",
            "http://10.0.0.5:8000/v1",
            "http://[2001:db8::1]:8000",
            "http://localhost.example.com/v1",
            "http://128.0.0.1/v1",
            "not a url",
        ] {
            assert!(!asked(&target(url, false)), "{url} is not this machine");
        }
        // `local: true` is the user saying it is theirs, wherever it runs.
        assert!(asked(&target("http://192.168.1.20:11434/v1", true)));
        assert!(asked(&target("https://gpu-box.example.com/v1", true)));
    }
}
