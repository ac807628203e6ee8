//! `pegasusd`, the supervisor daemon: one per home, PID-locked.
//!
//! What it is for: owning the home directory while it runs — the PID lock, the control socket
//! that `pegasusctl` talks to, the restart scan, and one supervised `project-worker` OS process
//! per active project (spawned, handshaken, restarted with backoff after a crash, stopped
//! gracefully), the LLM gateway (from `pegasus-llm`) that answers every worker's model calls,
//! and the MainAgent.
//!
//! Every client — the control socket, the MainAgent's tools, the scheduler, and beside the core
//! the dashboard (`pegasus-dashboard`) and Telegram (`pegasus-telegram`), started through
//! [`DaemonOptions::clients`] — comes in through one [`FrontDoor`]: requests, and subscriptions
//! to the event bus.
//!
//! What it is not for: the files' formats (that is `pegasus-store`) or the wire format (that is
//! `pegasus-proto`); and no project work runs in this process — that is what workers are for.

mod accept;
mod activity;
mod approval_clock;
mod approval_counts;
mod bus;
mod control;
mod crash_notices;
mod daemon;
pub mod error;
pub mod front_door;
pub mod gate;
mod handlers;
mod limits;
mod llm_proxy;
mod log_prune;
mod main_agent;
mod model_check;
mod peer;
mod pending;
mod pidlock;
mod remote;
mod scheduler;
mod slot;
mod spawn;
mod supervisor;
mod sweeper;
mod watchdog;
mod web_search;
mod worker_server;

pub use daemon::{run, DaemonOptions};
pub use error::{RequestError, SupervisorError};
pub use front_door::{Client, FrontDoor};
pub use pidlock::PidLock;
