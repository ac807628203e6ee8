//! `pegasusctl chat`: a message to the MainAgent, answered with its reply.

use crate::{error::RequestError, supervisor::Supervisor};
use pegasus_proto::Channel;

pub(crate) async fn chat(
    sup: &Supervisor,
    from: Channel,
    text: String,
) -> Result<String, RequestError> {
    sup.ask_main(from, text).await
}
