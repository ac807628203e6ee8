//! The passthrough path of the gateway (DESIGN.md §18): a harness's own request (Anthropic
//! Messages, OpenAI Responses), relayed by its worker, forwarded to the project's provider with
//! only `model` mapped and the real key added, its answer streamed back as it arrives.

use pegasus_proto::worker::{RelayPart, RelayRequest};
use tokio::sync::mpsc::UnboundedSender;

use crate::Gateway;

impl Gateway {
    /// Relays one request of a harness of `project`: every part of its answer (head, chunks,
    /// end) goes to `out` in order; the text of a streamed answer to `deltas` as it arrives.
    /// Returns what the call cost, when it was metered. Dropping the future cancels the call
    /// upstream (what arrived is metered).
    pub async fn relay(
        &self,
        project: &str,
        request: RelayRequest,
        out: &UnboundedSender<RelayPart>,
        deltas: Option<UnboundedSender<String>>,
    ) -> Option<f64> {
        let _ = (project, deltas);
        let body = request
            .api
            .error_body(501, "the relay is not built yet in this pegasusd");
        let _ = out.send(RelayPart::Head {
            status: 501,
            headers: vec![("content-type".into(), "application/json".into())],
        });
        let _ = out.send(RelayPart::Chunk(body.into_bytes()));
        let _ = out.send(RelayPart::End { refusal: None });
        None
    }
}
