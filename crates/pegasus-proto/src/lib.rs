//! The Pegasus wire protocol, defined once and shared by `pegasusd`, `pegasusctl` and
//! `project-worker`.
//!
//! What it is for: the message enums of both links (supervisor ↔ worker in [`worker`], client ↔
//! daemon in [`ctl`]), the provider-neutral chat types ([`llm`]), the typed events an agent
//! reports ([`event`]) and the one frame codec ([`frame`], [`codec`]) that carries them
//! over a Unix-domain socket as length-prefixed `bincode` payloads with a hard size limit.
//!
//! What it is not for: sockets, processes or files. Whoever owns a connection decides what to do
//! with a frame; this crate only guarantees that bytes from the other side either decode into a
//! known message or give a [`ProtoError`] — never a panic and never an unbounded allocation.

pub mod channel;
pub mod codec;
pub mod ctl;
pub mod error;
pub mod event;
pub mod frame;
pub mod llm;
pub mod project;
pub mod shown;
pub mod worker;

pub use channel::Channel;
pub use codec::{decode, encode};
pub use error::ProtoError;
pub use event::{BusBody, BusEvent, Stage, TaskState, WorkerEvent};
pub use frame::{split_frame, FrameReader, FrameWriter, MAX_FRAME};
pub use project::{ProjectStatus, WorkerState};

/// Version of both links. A peer that says hello with another number is disconnected: the
/// binaries of one installation are always upgraded together, so a mismatch means a stale process.
pub const PROTOCOL_VERSION: u32 = 10;
