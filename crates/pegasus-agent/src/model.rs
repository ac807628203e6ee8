//! The agent's only way to reach a model: [`ChatModel`], defined in `pegasus-proto` beside the
//! chat types so that runs and the supervisor reach it without the agent crate.

pub use pegasus_proto::llm::{ChatFuture, ChatModel};
