//! One handler file per control verb, mirroring `pegasus-ctl/src/commands/<verb>.rs` (pueue's
//! layout): a verb is two small files found by the same name, one on each side of the socket.
//!
//! [`dispatch`] is the only place that maps a [`CtlRequest`] to its handler and a handler's
//! typed result to the one [`CtlResponse`] a client gets; errors stay typed
//! ([`RequestError`]) until here, where they become the one line a user reads.

pub(crate) mod chat;
pub(crate) mod follow;
pub(crate) mod project;
pub(crate) mod role;
pub(crate) mod run;
pub(crate) mod status;
pub(crate) mod stop;
pub(crate) mod task;

use crate::{error::RequestError, supervisor::Supervisor};
use pegasus_proto::ctl::{CtlRequest, CtlResponse};
use std::sync::Arc;

/// One request, one response. `Follow` and `Hello` never get here: the connection handles them.
pub(crate) async fn dispatch(sup: &Arc<Supervisor>, req: CtlRequest) -> CtlResponse {
    let done = |message: String| CtlResponse::Done { message };
    let result: Result<CtlResponse, RequestError> = match req {
        CtlRequest::Hello { .. } => Err(RequestError::refused("already said hello")),
        CtlRequest::Follow { .. } => Err(RequestError::refused(
            "follow opens its own connection: it takes no other request",
        )),
        CtlRequest::Status => status::status(sup).map(CtlResponse::Status),
        CtlRequest::ProjectCreate(create) => project::create(sup, create)
            .await
            .map(|p| CtlResponse::Project(Box::new(p))),
        CtlRequest::ProjectList { status } => project::list(sup, status).map(CtlResponse::Projects),
        CtlRequest::ProjectShow { name } => {
            project::info(sup, &name).map(|p| CtlResponse::Project(Box::new(p)))
        }
        CtlRequest::ProjectLifecycle { name, verb } => {
            project::lifecycle(sup, &name, project::store_verb(verb))
                .await
                .map(|p| CtlResponse::Project(Box::new(p)))
        }
        CtlRequest::ProjectSend { name, text, wait } => {
            project::send(sup, &name, "cli", text, wait)
                .await
                .map(|(id, reply)| match reply {
                    Some(text) => CtlResponse::Reply { id, text },
                    None => CtlResponse::Sent { id },
                })
        }
        CtlRequest::Chat { text } => chat::chat(sup, text).await.map(|text| CtlResponse::Reply {
            id: String::new(),
            text,
        }),
        CtlRequest::TaskVerb { id, verb } => task::verb(sup, &id, verb).map(done),
        CtlRequest::TaskAnswer { id, text } => task::answer(sup, &id, &text).map(done),
        CtlRequest::RoleAssign {
            project,
            role,
            variables,
        } => role::assign(sup, &project, &role, variables)
            .await
            .map(done),
        CtlRequest::RunStart {
            project,
            brief,
            max_attempts,
        } => run::start(sup, &project, &brief, max_attempts).map(done),
        CtlRequest::RunControl { project, action } => run::control(sup, &project, action).map(done),
        CtlRequest::Stop => Ok(done(stop::stop(sup))),
    };
    result.unwrap_or_else(|e| CtlResponse::Error {
        message: e.to_string(),
    })
}
