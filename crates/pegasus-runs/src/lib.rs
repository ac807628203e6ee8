//! Autonomous runs (DESIGN.md §9, seed 002): one brief turned into numbered phases, each executed by
//! the project's agent, summarised by a cheap model, reviewed by a strong one and retried with
//! the reviewer's feedback until it is approved or out of attempts.
//!
//! What it is for: the run's state machine and its files. A run lives in
//! `<project>/runs/<id>.json` (rewritten atomically on every change, so a `kill -9` at any point
//! leaves a run that [`RunEngine::drive`] picks up where it was) and `runs/<id>.events.jsonl`
//! (an append-only log of every step). Cancel and pause come from outside through
//! [`RunStore::request`] and are honoured at the top of the next loop turn; costs are read back
//! from the gateway's own ledger, per phase across every attempt, so nothing is estimated twice.
//!
//! What it is not for: it does not do a phase's work (a [`PhaseExecutor`] does: in the worker,
//! the project agent with its tools), it holds no credentials and knows no provider (model calls
//! go through a [`pegasus_proto::llm::ChatModel`]), it does not enforce budgets (the gateway refuses
//! over-budget calls; a run only pauses when told so), and it never spawns anything: the caller
//! decides when to [`RunEngine::drive`] a run, including the [`RunStore::unfinished`] ones on
//! boot.
//!
//! Two rules set it apart from the public implementations of seed 002: nothing defaults to
//! approval (the review's first line must be exactly `APPROVED`; see [`verdict`]), and no record
//! stays `executing` after an error or a crash (see [`engine`] and [`status`]).
//!
//! Map: [`status`] (the two state machines), [`run`] (the persisted records), [`store`] (the
//! files), [`events`] (the log lines), [`plan`] (reading the planner's answer), [`verdict`]
//! (reading the reviewer's answer), [`prompt`] (every prompt text), [`ledger`] (cost look-ups),
//! [`executor`], [`settings`], [`engine`] (the loop).

pub mod engine;
pub mod error;
pub mod events;
pub mod executor;
pub mod ledger;
pub mod plan;
pub mod prompt;
pub mod run;
pub mod settings;
pub mod status;
pub mod store;
pub mod verdict;

pub use engine::RunEngine;
pub use error::RunError;
pub use events::{EventLine, RunEvent};
pub use executor::{ExecError, ExecuteFuture, PhaseExecutor};
pub use ledger::{ledger_cost_for_task, ledger_cost_on_day, ledger_costs_for_run, RunCosts};
pub use plan::{parse_plan, PlannedPhase};
pub use run::{Phase, Run, RunRequest};
pub use settings::RunSettings;
pub use status::{PhaseStatus, PhaseTrigger, RunStatus, RunTrigger};
pub use store::RunStore;
pub use verdict::{parse_verdict, ReviewVerdict};
