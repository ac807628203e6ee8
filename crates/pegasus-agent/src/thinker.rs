//! The Thinker: one model call with the transcript and the tool list.

use pegasus_proto::llm::{
    Block, CallMeta, ChatRequest, ChatResponse, LlmError, Message, Role, ToolSpec,
};

use crate::outbox::send_event;
use crate::outcome::StopKind;
use crate::tool::ToolCtx;
use pegasus_proto::WorkerEvent;

/// Builds the request for one turn: the settings' model and `max_tokens`, and the task the
/// spend counts towards.
pub fn request(
    ctx: &ToolCtx,
    system: &str,
    messages: &[Message],
    tools: Vec<ToolSpec>,
    role: Option<String>,
) -> ChatRequest {
    ChatRequest {
        model: ctx.settings.model.clone(),
        system: system.to_string(),
        messages: messages.to_vec(),
        tools,
        max_tokens: ctx.settings.answer_tokens(),
        temperature: ctx.settings.temperature,
        thinking: ctx.settings.thinking.clone(),
        timeout_s: None,
        // Streamed from the provider (DESIGN.md §5); only the loop's own calls forward the text.
        stream: true,
        meta: CallMeta {
            project: ctx.settings.project.clone(),
            task: ctx.task_id.clone(),
            role,
        },
    }
}

/// One call outside the conversation and without tools (a summary, a reflection): `system`
/// and one user message, `text`.
pub async fn ask(ctx: &ToolCtx, system: &str, text: String) -> Result<ChatResponse, StopKind> {
    let messages = [Message {
        role: Role::User,
        content: vec![Block::Text { text }],
    }];
    let req = request(ctx, system, &messages, Vec::new(), None);
    think(ctx, req).await
}

/// Makes the call and reports it as a `model_response` event; a failure becomes the stop it
/// means for the run.
pub async fn think(ctx: &ToolCtx, req: ChatRequest) -> Result<ChatResponse, StopKind> {
    report(ctx, ctx.model.chat(req).await)
}

/// [`think`] for a task's own agent (depth 0): the answer's text is sent as `text_delta`
/// events while it arrives, for `log -f`, `send --wait` and `chat`. The deltas are never
/// written to the session; the finished message is, once, by the loop.
pub async fn think_streaming(ctx: &ToolCtx, req: ChatRequest) -> Result<ChatResponse, StopKind> {
    if ctx.depth > 0 || !req.stream {
        return think(ctx, req).await;
    }
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let call = ctx.model.chat_streaming(req, tx);
    tokio::pin!(call);
    let forward = |text: String| {
        send_event(
            &ctx.notices,
            WorkerEvent::TextDelta {
                task: ctx.task_id.clone(),
                text,
            },
        )
    };
    let result = loop {
        tokio::select! {
            biased;
            Some(text) = rx.recv() => forward(text),
            r = &mut call => break r,
        }
    };
    // What arrived with the last chunk, before the answer was handed over.
    while let Ok(text) = rx.try_recv() {
        forward(text);
    }
    report(ctx, result)
}

fn report(ctx: &ToolCtx, result: Result<ChatResponse, LlmError>) -> Result<ChatResponse, StopKind> {
    match result {
        Ok(resp) => {
            send_event(
                &ctx.notices,
                WorkerEvent::ModelUsage {
                    task: ctx.task_id.clone(),
                    depth: ctx.depth,
                    model: resp.model.clone(),
                    usage: resp.usage,
                    cost_usd: resp.cost_usd,
                    stop_reason: resp.stop_reason,
                },
            );
            Ok(resp)
        }
        Err(e @ LlmError::BudgetExceeded { .. }) => Err(StopKind::Budget(e.to_string())),
        Err(e @ LlmError::ContextTooLong { .. }) => Err(StopKind::ContextTooLong(e.to_string())),
        Err(e) => Err(StopKind::ModelError(e.to_string())),
    }
}
