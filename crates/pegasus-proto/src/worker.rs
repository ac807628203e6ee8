//! The supervisor ↔ worker link: one enum per direction.
//!
//! A worker connects to `<home>/run/w.sock`, proves who it is with [`Hello`] (the per-spawn
//! token was handed to it on stdin), is answered with [`Init`], loads its project and says
//! [`FromWorker::Ready`]. From then on the supervisor sends work and the worker reports.

use crate::channel::Channel;
use crate::event::WorkerEvent;
use crate::llm::{ChatRequest, ChatResponse, LlmError};
use serde::{Deserialize, Serialize};

/// The environment variable in which the supervisor gives a spawned worker its own pid. The
/// worker arms `PR_SET_PDEATHSIG` first thing and exits if its parent is not that pid any more,
/// so it can never outlive the supervisor even though nothing runs between fork and exec.
pub const SUPERVISOR_PID_ENV: &str = "PEGASUS_SUPERVISOR_PID";

/// The environment variable in which the supervisor, having raised its own soft
/// `RLIMIT_NOFILE` for its listeners, gives a spawned worker the soft limit it was started
/// with; the worker lowers its own back to it first thing, so its commands get the usual one.
pub const OPEN_FILES_ENV: &str = "PEGASUS_OPEN_FILES";

/// Supervisor → worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ToWorker {
    /// Answer to a valid hello: what the worker needs beyond its project path.
    Init(Init),
    /// A message for the project agent. The worker persists it before acknowledging.
    Message(InboundMessage),
    /// Liveness probe; answered with [`FromWorker::Pong`] carrying the same nonce.
    Ping {
        /// Any number; the pong carries it back.
        nonce: u64,
    },
    /// Stop taking work, flush, say [`FromWorker::ShutdownComplete`], exit 0.
    Shutdown,
    /// The gateway's answer to [`FromWorker::LlmRequest`] with the same id.
    LlmResponse {
        /// The [`FromWorker::LlmRequest`] id it answers.
        id: u64,
        /// The model's answer, or why the call failed.
        result: Result<ChatResponse, LlmError>,
    },
    /// Tasks changed on disk (retried, replayed, answered): look for ready tasks to run.
    TasksChanged,
    /// Drive the autonomous run with this id (new, or resumed after a pause).
    RunStart {
        /// The run's id, as in the project's `runs/<id>.json`.
        run_id: String,
    },
    /// Approval request `id` has its answer on disk (`<project>/approvals/`): read it.
    ApprovalAnswered {
        /// The approval's id (`ap-...`).
        id: String,
    },
    /// The project model's context window as its server said it, after [`Init`]: the answer
    /// to an `Init` whose `window_pending` was set, or a change (a server restarted with
    /// another size, a refusal that named a smaller one). Applies from the next task on.
    ContextWindow {
        /// The window, in tokens.
        window: u64,
    },
    /// pegasusd's answer to [`FromWorker::WebSearch`] with the same id: the results, or one
    /// line saying why there are none (for the model).
    WebSearchResult {
        /// The [`FromWorker::WebSearch`] id it answers.
        id: u64,
        /// The results, best first, or why the search failed.
        result: Result<Vec<SearchHit>, String>,
    },
    /// Part of pegasusd's answer to [`FromWorker::RelayRequest`] with the same id: its head,
    /// then its body's chunks as they arrive, then its end (DESIGN.md §18).
    RelayAnswer {
        /// The [`FromWorker::RelayRequest`] id it answers.
        id: u64,
        /// This part of the answer.
        part: RelayPart,
    },
}

/// The provider API a harness's model endpoint speaks (DESIGN.md §18).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RelayApi {
    /// Anthropic Messages (`POST /v1/messages`, `POST /v1/messages/count_tokens`): Claude Code.
    /// Needs a provider of kind `anthropic`.
    Anthropic,
    /// OpenAI Responses (`POST /v1/responses`): Codex. Needs a provider of kind `openai`.
    OpenAi,
}

impl RelayApi {
    /// The body of an error answer in this API's own shape (Anthropic:
    /// `{"type":"error","error":{"type":..,"message":..}}`; OpenAI:
    /// `{"error":{"message":..,"type":..,"param":null,"code":..}}`), its type chosen by
    /// `status` as the real API does, so a harness shows `message` as it would the provider's.
    /// OpenAI's 429 is `insufficient_quota`, the real API's "no money left", which Codex does
    /// not retry: pegasusd answers a budget refusal with it.
    pub fn error_body(self, status: u16, message: &str) -> String {
        let value = match self {
            RelayApi::Anthropic => {
                let kind = match status {
                    401 => "authentication_error",
                    402 => "billing_error",
                    403 => "permission_error",
                    404 => "not_found_error",
                    413 => "request_too_large",
                    429 => "rate_limit_error",
                    529 => "overloaded_error",
                    500..=599 => "api_error",
                    _ => "invalid_request_error",
                };
                serde_json::json!({"type": "error", "error": {"type": kind, "message": message}})
            }
            RelayApi::OpenAi => {
                let (kind, code) = match status {
                    401 => ("invalid_request_error", Some("invalid_api_key")),
                    404 => ("invalid_request_error", Some("model_not_found")),
                    429 => ("insufficient_quota", Some("insufficient_quota")),
                    500..=599 => ("server_error", None),
                    _ => ("invalid_request_error", None),
                };
                serde_json::json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
            }
        };
        value.to_string()
    }

    /// The status of this API's own "no money left" answer, which its harness does not retry:
    /// Anthropic's 400 (a credit balance too low), OpenAI's 429 `insufficient_quota`. pegasusd
    /// answers every budget refusal (a cap, the watchdog's spending rate) with it.
    pub fn no_money_status(self) -> u16 {
        match self {
            RelayApi::Anthropic => 400,
            RelayApi::OpenAi => 429,
        }
    }

    /// The whole answer pegasusd gives a call it refuses itself: a head of `status`, the body
    /// [`RelayApi::error_body`] with `message`, and the end with the typed reason.
    pub fn refusal(self, status: u16, message: &str, reason: LlmError) -> [RelayPart; 3] {
        [
            RelayPart::Head {
                status,
                headers: vec![("content-type".into(), "application/json".into())],
            },
            RelayPart::Chunk(self.error_body(status, message).into_bytes()),
            RelayPart::End {
                refusal: Some(reason),
            },
        ]
    }
}

/// One request a harness sent to its worker's relay endpoint, relayed to pegasusd as it came:
/// the body is forwarded unchanged but for `model`, which pegasusd maps to the project's
/// provider (DESIGN.md §18).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RelayRequest {
    /// The API of the endpoint it came to.
    pub api: RelayApi,
    /// `GET` or `POST`.
    pub method: String,
    /// The path with its query, as the harness sent it (`/v1/messages?beta=true`).
    pub path: String,
    /// The JSON body as the harness sent it (empty for a `GET`).
    pub body: String,
    /// The headers the provider needs to see (`anthropic-beta`, `anthropic-version`, ...), by
    /// lowercase name; never a credential.
    pub headers: Vec<(String, String)>,
    /// The task the harness works for: its spend counts there (and its budget applies).
    pub task: Option<String>,
    /// The role that task runs as, for the ledger line.
    pub role: Option<String>,
}

/// One part of the answer to a [`RelayRequest`], in order: one `Head`, any number of `Chunk`s,
/// one `End`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum RelayPart {
    /// The answer's status and the headers the harness should see (`content-type`,
    /// `request-id`, ...).
    Head {
        /// The HTTP status.
        status: u16,
        /// The headers, by lowercase name.
        headers: Vec<(String, String)>,
    },
    /// Bytes of the body, as they arrived from the provider.
    Chunk(Vec<u8>),
    /// The answer broke off upstream (cut, stalled, too large), why: the harness sees its
    /// connection cut, as it would the provider's.
    Cut(String),
    /// The answer is complete. `refusal`: pegasusd refused the call itself (a budget, an
    /// unpriced model, a provider of the wrong kind), and the body said so in the API's own
    /// error shape; the worker keeps it for the harness's runner (a budget ends the task
    /// `budget`).
    End {
        /// Why pegasusd refused the call, if it did.
        refusal: Option<LlmError>,
    },
}

/// One result of a web search.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearchHit {
    /// The page's title.
    pub title: String,
    /// Its address.
    pub url: String,
    /// What the search engine quotes of it.
    pub snippet: String,
}

/// Settings the worker cannot find on its own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Init {
    /// pegasusd's [`crate::PROTOCOL_VERSION`]; the worker exits on another number.
    pub protocol_version: u32,
    /// pegasusd's settings (config.yml as it loaded and validated them), as JSON: pegasusd is
    /// the one reader of config.yml, and a worker never parses it again.
    pub config_json: String,
    /// How often the worker says [`FromWorker::Heartbeat`].
    pub heartbeat_ms: u64,
    /// The project's model (`provider/model`), resolved by the gateway (project model, else
    /// `default_model`), so every call of the worker names it explicitly.
    pub model: String,
    /// That model's context window in tokens (the model table, else what its server says,
    /// else `default_context_window`), for compaction.
    pub context_window: Option<u64>,
    /// The model's server is being asked for its window and has not answered yet:
    /// `context_window` is `default_context_window` until [`ToWorker::ContextWindow`] comes.
    /// The worker is Ready at once all the same; its first model call waits for the window
    /// (a short deadline, then the default) so it never overruns a small one.
    #[serde(default)]
    pub window_pending: bool,
    /// For a worker on another host (DESIGN.md §14), which has only its project folder: the home's
    /// roles, global skills and preferences. `None` for a local worker, which reads them from
    /// the home itself.
    pub home_files: Option<HomeFiles>,
}

/// The home's files a remote worker gets over its link, each as its path below the home's
/// folder of that kind and its text.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct HomeFiles {
    /// `roles/<id>.md`, as `<id>.md`.
    pub roles: Vec<(String, String)>,
    /// `skills/<name>/SKILL.md`, as `<name>/SKILL.md`.
    pub skills: Vec<(String, String)>,
    /// `preferences.md`.
    pub preferences: Option<String>,
}

/// One inbound message: who sent it and what it says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InboundMessage {
    /// Unique id chosen by the supervisor, echoed in [`FromWorker::MessagePersisted`].
    pub id: String,
    /// Where it comes from (sent as its word: `cli`, `main`, `telegram:<chat>`, ...).
    pub from: Channel,
    /// The message as its sender wrote it.
    pub text: String,
    /// The sender's own id for it (DESIGN.md §11: `--id`, `Idempotency-Key`, Telegram's update):
    /// recorded with the message, so a repeat is recognised across restarts and answered with
    /// [`FromWorker::MessageRepeated`] instead of being recorded and run again.
    pub client_id: Option<String>,
}

/// Worker → supervisor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum FromWorker {
    /// First frame on a new connection.
    Hello(Hello),
    /// The project is loaded; the worker takes messages.
    Ready,
    /// Answer to [`ToWorker::Ping`].
    Pong {
        /// The nonce of the ping it answers.
        nonce: u64,
    },
    /// "Still alive" while idle or busy: the process and its socket work. (The watchdog's silent
    /// timeout looks at agent events and gateway answers instead, since a hung agent still beats.)
    Heartbeat,
    /// The message with this id is durably in `session/current.jsonl`.
    MessagePersisted {
        /// The [`InboundMessage::id`] it was given.
        id: String,
    },
    /// Something the project wants the MainAgent to know.
    Notify {
        /// What the project's agent wants said, one message.
        text: String,
        /// A label for pegasusd's log; `info` is the only one sent today.
        kind: String,
    },
    /// What the agent is doing (task transitions, stages, tool calls, usage, text deltas).
    Event(WorkerEvent),
    /// A model call for the gateway in pegasusd; answered by [`ToWorker::LlmResponse`].
    LlmRequest {
        /// The worker's id for the call, unique on its connection; echoed by the answer and by
        /// [`FromWorker::LlmCancel`].
        id: u64,
        /// The call, as the agent built it.
        request: ChatRequest,
        /// pegasusd publishes the answer's text on the project's event bus as it arrives
        /// (`WorkerEvent::TextDelta` of the request's task), for `project log -f`, `send
        /// --wait`, the dashboard and Telegram: the task's own agent loop asks for it.
        deltas: bool,
    },
    /// The worker no longer wants the answer to this request (its task was cancelled).
    LlmCancel {
        /// The [`FromWorker::LlmRequest`] id to drop.
        id: u64,
    },
    /// A `web_search` call, made by pegasusd (which holds the backend's key, DESIGN.md §16 "The
    /// web"); answered by [`ToWorker::WebSearchResult`].
    WebSearch {
        /// The worker's id for the search, unique on its connection.
        id: u64,
        /// What to search for.
        query: String,
        /// Results wanted (pegasusd bounds it); `None` = its default.
        count: Option<u32>,
    },
    /// A harness's model call, relayed by the worker's endpoint (DESIGN.md §18); answered by
    /// [`ToWorker::RelayAnswer`] parts with the same id.
    RelayRequest {
        /// The worker's id for the call, unique on its connection (shared with
        /// [`FromWorker::LlmRequest`]'s ids).
        id: u64,
        /// The request as the harness sent it.
        request: RelayRequest,
    },
    /// The harness went away before the answer to this relayed call ended: pegasusd cancels
    /// it upstream (what arrived is metered).
    RelayCancel {
        /// The [`FromWorker::RelayRequest`] id to drop.
        id: u64,
    },
    /// The agent's answer to the inbound message `message_id`, for its sender. `answered` is
    /// false when the message's task stopped without an answer (failed, blocked, capped): then
    /// `text` says why and what to do.
    Reply {
        /// The [`InboundMessage::id`] it answers.
        message_id: String,
        /// The agent's answer, or why there is none and what to do.
        text: String,
        /// Whether the task answered the message.
        answered: bool,
    },
    /// The worker cannot run (bad PROJECT.md, unreadable config); it exits after sending this.
    Fatal {
        /// One line that says what is wrong and what to do.
        reason: String,
    },
    /// Answer to [`ToWorker::Shutdown`]: everything is flushed, exit follows.
    ShutdownComplete,
    /// Message `id` carries the client id of message `original`, which the worker already
    /// has (DESIGN.md §11): it was neither recorded nor queued again. `same_text`: a repeat, whose
    /// sender gets `original` (and, if it waits, the original's reply, sent as a
    /// [`FromWorker::Reply`] of `original` when it is already known); otherwise the id was
    /// reused with another text and the message is refused.
    MessageRepeated {
        /// The new message's [`InboundMessage::id`].
        id: String,
        /// The id of the message that already has this client id.
        original: String,
        /// Whether the new message's text is the same as the original's.
        same_text: bool,
    },
}

/// Who the connecting worker claims to be, and the token that proves it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    /// The worker's [`crate::PROTOCOL_VERSION`]; another number than pegasusd's is refused.
    pub protocol_version: u32,
    /// The project it serves, as its folder name under `projects/`.
    pub project: String,
    /// The worker's own process id (on its host, for a remote worker).
    pub pid: u32,
    /// The per-spawn token pegasusd gave the worker on stdin (for a remote worker, the token its
    /// certificate was enrolled with).
    pub token: String,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::{decode, encode};

    /// Every relay frame crosses the codec unchanged, a body of any bytes included.
    #[test]
    fn relay_frames_round_trip() {
        let request = RelayRequest {
            api: RelayApi::Anthropic,
            method: "POST".into(),
            path: "/v1/messages?beta=true".into(),
            body: r#"{"model":"claude-x","max_tokens":128000,"stream":true}"#.into(),
            headers: vec![("anthropic-beta".into(), "a,b".into())],
            task: Some("t-1".into()),
            role: None,
        };
        for frame in [
            FromWorker::RelayRequest { id: 3, request },
            FromWorker::RelayCancel { id: 3 },
        ] {
            assert_eq!(
                decode::<FromWorker>(&encode(&frame).unwrap()).unwrap(),
                frame
            );
        }
        let refusal = LlmError::BudgetExceeded {
            scope: "task t-1".into(),
            limit: 2.0,
            spent: 2.5,
        };
        let parts = [
            RelayPart::Head {
                status: 200,
                headers: vec![("content-type".into(), "text/event-stream".into())],
            },
            RelayPart::Chunk(vec![0, 159, 146, 150, b'\n']),
            RelayPart::Cut("stream stalled".into()),
            RelayPart::End { refusal: None },
            RelayPart::End {
                refusal: Some(refusal),
            },
        ];
        for part in parts {
            let frame = ToWorker::RelayAnswer { id: 9, part };
            assert_eq!(decode::<ToWorker>(&encode(&frame).unwrap()).unwrap(), frame);
        }
    }

    /// The error bodies are the APIs' own shapes, typed by status as the real APIs do.
    #[test]
    fn error_bodies_have_each_api_s_shape() {
        let table = [
            (
                RelayApi::Anthropic,
                401,
                "/error/type",
                "authentication_error",
            ),
            (
                RelayApi::Anthropic,
                400,
                "/error/type",
                "invalid_request_error",
            ),
            (RelayApi::Anthropic, 404, "/error/type", "not_found_error"),
            (RelayApi::Anthropic, 413, "/error/type", "request_too_large"),
            (RelayApi::Anthropic, 502, "/error/type", "api_error"),
            (RelayApi::OpenAi, 401, "/error/code", "invalid_api_key"),
            (RelayApi::OpenAi, 429, "/error/code", "insufficient_quota"),
            (
                RelayApi::OpenAi,
                400,
                "/error/type",
                "invalid_request_error",
            ),
            (RelayApi::OpenAi, 502, "/error/type", "server_error"),
        ];
        for (api, status, pointer, want) in table {
            let body: serde_json::Value =
                serde_json::from_str(&api.error_body(status, "what to do")).unwrap();
            assert_eq!(
                body.pointer(pointer).unwrap(),
                want,
                "{api:?} {status}: {body}"
            );
            assert_eq!(body.pointer("/error/message").unwrap(), "what to do");
            if api == RelayApi::Anthropic {
                assert_eq!(body["type"], "error");
            }
        }
    }

    /// A budget refusal is each API's own "no money left", which its harness does not retry:
    /// Anthropic's 400 `invalid_request_error` (as a credit balance too low), OpenAI's 429
    /// `insufficient_quota`.
    #[test]
    fn a_budget_refusal_is_each_apis_no_money_answer() {
        for (api, status, kind) in [
            (RelayApi::Anthropic, 400, "invalid_request_error"),
            (RelayApi::OpenAi, 429, "insufficient_quota"),
        ] {
            assert_eq!(api.no_money_status(), status);
            let body: serde_json::Value =
                serde_json::from_str(&api.error_body(api.no_money_status(), "no")).unwrap();
            assert_eq!(body["error"]["type"], kind, "{api:?}: {body}");
        }
    }
}
