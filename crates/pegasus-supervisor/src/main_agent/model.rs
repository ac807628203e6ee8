//! The MainAgent's model: the gateway itself, called directly (it lives in this process).

use pegasus_agent::ChatModel;
use pegasus_llm::Gateway;
use pegasus_proto::llm::{ChatRequest, ChatResponse, LlmError};
use std::{future::Future, pin::Pin};

pub(crate) struct GatewayModel(pub Gateway);

impl ChatModel for GatewayModel {
    fn chat(
        &self,
        request: ChatRequest,
    ) -> Pin<Box<dyn Future<Output = Result<ChatResponse, LlmError>> + Send + '_>> {
        Box::pin(self.0.chat(request, None))
    }

    fn chat_streaming(
        &self,
        request: ChatRequest,
        deltas: tokio::sync::mpsc::UnboundedSender<String>,
    ) -> Pin<Box<dyn Future<Output = Result<ChatResponse, LlmError>> + Send + '_>> {
        Box::pin(self.0.chat(request, Some(deltas)))
    }
}
