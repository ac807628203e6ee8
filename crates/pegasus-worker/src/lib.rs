//! `project-worker`: the OS process of one active project.
//!
//! What it is for: everything that happens inside a project — for now connecting back to
//! pegasusd, proving it is the process that was spawned, loading its own config and PROJECT.md,
//! persisting every inbound message durably to `session/current.jsonl`, answering pings, sending
//! heartbeats and stopping cleanly. The agent loop and tools arrive on top of this.
//!
//! What it is not for: LLM credentials (it never has any) or PROJECT.md writes (only the
//! supervisor writes it). It dies with its supervisor: `PR_SET_PDEATHSIG` is armed at spawn, and
//! an end of stream on its socket makes it flush and exit.

mod connection;
pub mod error;
mod logging;
mod worker;

pub use error::WorkerError;
pub use worker::{run, WorkerArgs};
