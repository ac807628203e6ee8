//! One handler file per control verb, mirroring `pegasus-ctl/src/commands/<verb>.rs` (pueue's
//! layout): a verb is two small files found by the same name, one on each side of the socket.
//!
//! [`dispatch`] is the only place that maps a [`CtlRequest`] to its handler and a handler's
//! typed result to the one [`CtlResponse`] a client gets; errors stay typed
//! ([`RequestError`]) until here, where they become the one line a user reads.

pub(crate) mod approvals;
pub(crate) mod chat;
pub(crate) mod follow;
pub(crate) mod project;
pub(crate) mod role;
pub(crate) mod run;
pub(crate) mod status;
pub(crate) mod stop;
pub(crate) mod task;

use crate::{error::RequestError, supervisor::Supervisor};
use pegasus_proto::{
    ctl::{AddTask, CtlRequest, CtlResponse},
    Channel,
};
use pegasus_tasks::TaskState;
use std::sync::Arc;

/// What a client asks through the front door: a request of the control protocol, or one that
/// only the daemon's own clients ask (no client on a socket can say it).
#[derive(Debug)]
pub(crate) enum Request {
    /// A request of the control protocol, whoever sends it.
    Ctl(CtlRequest),
    /// A task added `planned`, waiting for `task approve` (a scheduled job without `auto`);
    /// [`CtlRequest::TaskAdd`] adds it `ready`.
    AddPlannedTask(AddTask),
}

/// One request from `from` (the control socket's `cli`, the dashboard, Telegram, the
/// scheduler, a slot's idle suspend), one response; what it records (a message's sender, a
/// task event's actor) names `from`. `Follow` and `Hello` never get here: the connection
/// handles them.
pub(crate) async fn dispatch(sup: &Arc<Supervisor>, from: &Channel, req: Request) -> CtlResponse {
    let result = match req {
        Request::Ctl(req) => ctl(sup, from, req).await,
        Request::AddPlannedTask(add) => {
            let from = from.clone();
            blocking(sup, move |s| {
                let projects = &s.listing.projects;
                task::add(&s.home, projects, &s.slots, add, TaskState::Planned, &from)
            })
            .await
            .map(|(id, message)| CtlResponse::TaskAdded { id, message })
        }
    };
    result.unwrap_or_else(|e| CtlResponse::Failed {
        kind: e.kind(),
        message: e.to_string(),
    })
}

/// A request of the control protocol, to its handler.
async fn ctl(
    sup: &Arc<Supervisor>,
    from: &Channel,
    req: CtlRequest,
) -> Result<CtlResponse, RequestError> {
    let done = |message: String| CtlResponse::Done { message };
    let shown = |p| CtlResponse::Project(Box::new(p));
    match req {
        CtlRequest::Hello { .. } => Err(RequestError::refused("already said hello")),
        CtlRequest::Follow { .. } => Err(RequestError::refused(
            "follow opens its own connection: it takes no other request",
        )),
        CtlRequest::Status => blocking(sup, |s| {
            status::status(
                &s.listing,
                &s.main_held,
                &s.waiting,
                s.uptime_s(),
                s.problems(),
            )
        })
        .await
        .map(CtlResponse::Status),
        CtlRequest::ProjectCreate(create) => {
            project::create(&sup.listing, &sup.lifecycle_lock, create)
                .await
                .map(shown)
        }
        CtlRequest::ProjectList { status } => {
            blocking(sup, move |s| project::list(&s.listing, status))
                .await
                .map(CtlResponse::Projects)
        }
        CtlRequest::ProjectShow { name } => {
            blocking(sup, move |s| project::info(&s.listing, &name))
                .await
                .map(shown)
        }
        CtlRequest::ProjectLifecycle { name, verb } => {
            let verb = project::store_verb(verb);
            project::lifecycle(&sup.listing, &sup.lifecycle_lock, &name, verb)
                .await
                .map(shown)
        }
        CtlRequest::ProjectSend {
            name,
            text,
            wait,
            client_id,
        } => project::send(
            &sup.slots,
            &sup.listing.projects,
            &name,
            from.clone(),
            text,
            wait,
            client_id,
        )
        .await
        .map(|(id, reply)| match reply {
            Some(text) => CtlResponse::Reply { id, text },
            None => CtlResponse::Sent { id },
        }),
        CtlRequest::Chat { text } => {
            chat::chat(&sup.main, from.clone(), text)
                .await
                .map(|text| CtlResponse::Reply {
                    id: String::new(),
                    text,
                })
        }
        CtlRequest::TaskVerb { id, verb } => {
            let from = from.clone();
            blocking(sup, move |s| {
                task::verb(&s.home, &s.slots, &id, verb, &from)
            })
            .await
            .map(done)
        }
        CtlRequest::TaskAdd(add) => {
            let from = from.clone();
            blocking(sup, move |s| {
                let projects = &s.listing.projects;
                task::add(&s.home, projects, &s.slots, add, TaskState::Ready, &from)
            })
            .await
            .map(|(id, message)| CtlResponse::TaskAdded { id, message })
        }
        CtlRequest::TaskAnswer { id, text } => {
            let from = from.clone();
            blocking(sup, move |s| {
                task::answer(&s.home, &s.slots, &id, &text, &from)
            })
            .await
            .map(done)
        }
        CtlRequest::RoleAssign {
            project,
            role,
            variables,
        } => role::assign(&sup.home, &sup.lifecycle_lock, &project, &role, variables)
            .await
            .map(done),
        CtlRequest::RunStart {
            project,
            brief,
            max_attempts,
        } => blocking(sup, move |s| {
            run::start(&s.home, &s.slots, &project, &brief, max_attempts)
        })
        .await
        .map(done),
        CtlRequest::RunControl { project, action } => blocking(sup, move |s| {
            run::control(&s.home, &s.slots, &project, action)
        })
        .await
        .map(done),
        CtlRequest::Stop => Ok(done(stop::stop(&sup.home, &sup.shutdown))),
        CtlRequest::Approvals { project } => blocking(sup, move |s| {
            approvals::list(&s.approvals, project.as_deref())
        })
        .await
        .map(CtlResponse::Approvals),
        CtlRequest::ApprovalAnswer {
            id,
            approve,
            always,
            reason,
        } => approvals::answer(
            &sup.approvals,
            &sup.lifecycle_lock,
            &id,
            approve,
            always,
            reason,
            from,
        )
        .await
        .map(done),
    }
}

/// Runs a handler that reads or writes files (task locks, fsyncs, the project scan) on the
/// blocking pool ([`pegasus_fs::blocking`]), so a slow disk never stalls the daemon's async
/// threads.
async fn blocking<T: Send + 'static>(
    sup: &Arc<Supervisor>,
    f: impl FnOnce(&Supervisor) -> Result<T, RequestError> + Send + 'static,
) -> Result<T, RequestError> {
    let sup = sup.clone();
    pegasus_fs::blocking(move || f(&sup))
        .await
        .unwrap_or_else(|e| Err(RequestError::failed_inside("the request", e)))
}
