//! `pegasusctl chat`: a message to the MainAgent, answered with its reply.

use crate::{error::RequestError, supervisor::Supervisor};

pub(crate) async fn chat(sup: &Supervisor, text: String) -> Result<String, RequestError> {
    sup.ask_main("cli", text).await
}
