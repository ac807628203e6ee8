//! `pegasusctl chat`: a message to the MainAgent, answered with its reply.

use crate::{error::RequestError, supervisor::MainInbox};
use pegasus_proto::Channel;

pub(crate) async fn chat(
    main: &MainInbox,
    from: Channel,
    text: String,
) -> Result<String, RequestError> {
    main.ask(from, text).await
}
