//! `project-worker`: the OS process of one active project.
//!
//! What it is for: everything that happens inside a project — connecting back to pegasusd,
//! proving it is the process that was spawned, loading its own config and PROJECT.md, persisting
//! every inbound message durably to `session/current.jsonl` before acknowledging it, running the
//! project agent (from `pegasus-agent`) on it with a model that proxies to the gateway in
//! pegasusd, and sending the answer back; answering pings, heartbeats, stopping cleanly.
//!
//! What it is not for: LLM credentials (it never has any) or PROJECT.md writes (only the
//! supervisor writes it). It dies with its supervisor: it arms `PR_SET_PDEATHSIG` as it starts, and
//! an end of stream on its socket makes it flush and exit.

mod attempt;
pub mod code_task;
mod connection;
pub mod error;
pub mod harness;
mod logging;
pub mod mcp;
pub mod mcp_deferred;
mod merge_approval;
mod planning;
pub mod project_ctx;
mod proxy;
pub mod relay;
mod review;
pub mod sends;
mod serve;
mod work_queue;
mod worker;

pub use error::WorkerError;
pub use pegasus_proto::worker::RelayApi;
pub use relay::{Relay, RelayEndpoint};
#[doc(hidden)]
pub use worker::proxy_link;
pub use worker::{run, WorkerArgs};
