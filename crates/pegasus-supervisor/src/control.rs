//! The control socket `<home>/run/pegasusd.sock` (mode 0600): `pegasusctl` and later the
//! dashboard. Each connection says hello, then sends requests and gets one response each.
//! A connection that misbehaves is dropped and logged; the daemon lives on.

use crate::supervisor::Supervisor;
use interprocess::local_socket::tokio::{prelude::*, Listener, Stream};
use pegasus_proto::{
    ctl::{CtlRequest, CtlResponse},
    FrameReader, FrameWriter, PROTOCOL_VERSION,
};
use pegasus_store::{ProjectStatus, Verb};
use std::{sync::Arc, time::Duration};

const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

/// Accepts control connections until the daemon stops.
pub(crate) async fn serve(sup: Arc<Supervisor>, listener: Listener) {
    loop {
        match listener.accept().await {
            Ok(stream) => {
                tokio::spawn(connection(sup.clone(), stream));
            }
            Err(e) => {
                tracing::warn!("control socket accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

async fn connection(sup: Arc<Supervisor>, stream: Stream) {
    let (recv, send) = tokio::io::split(stream);
    let mut reader = FrameReader::new(recv);
    let mut writer = FrameWriter::new(send);
    match tokio::time::timeout(HELLO_TIMEOUT, reader.read::<CtlRequest>()).await {
        Ok(Ok(Some(CtlRequest::Hello { protocol_version })))
            if protocol_version == PROTOCOL_VERSION =>
        {
            let welcome = CtlResponse::Welcome {
                daemon_pid: std::process::id(),
                protocol_version,
            };
            if writer.write(&welcome).await.is_err() {
                return;
            }
        }
        Ok(Ok(Some(CtlRequest::Hello { protocol_version }))) => {
            tracing::warn!("dropping control connection: protocol version {protocol_version}");
            let message = format!(
                "pegasusctl speaks protocol {protocol_version}, pegasusd speaks {PROTOCOL_VERSION}: use the pegasusctl of the same build"
            );
            let _ = writer.write(&CtlResponse::Error { message }).await;
            return;
        }
        Ok(Ok(Some(_))) => {
            return tracing::warn!("dropping control connection: request before hello")
        }
        Ok(Ok(None)) => return,
        Ok(Err(e)) => return tracing::warn!("dropping control connection: {e}"),
        Err(_) => return tracing::warn!("dropping control connection: no hello within 5 s"),
    }
    loop {
        let req = match reader.read::<CtlRequest>().await {
            Ok(Some(req)) => req,
            Ok(None) => return,
            Err(e) => return tracing::warn!("dropping control connection: {e}"),
        };
        let resp = dispatch(&sup, req).await;
        if writer.write(&resp).await.is_err() {
            return;
        }
    }
}

/// One request, one response. Refusals are `CtlResponse::Error` with a line that says what to do.
async fn dispatch(sup: &Arc<Supervisor>, req: CtlRequest) -> CtlResponse {
    let result = match req {
        CtlRequest::Hello { .. } => Err("already said hello".to_string()),
        CtlRequest::Status => sup.status().map(CtlResponse::Status),
        CtlRequest::ProjectCreate(create) => sup
            .create(create)
            .await
            .map(|p| CtlResponse::Project(Box::new(p))),
        CtlRequest::ProjectList { status } => list(sup, status),
        CtlRequest::ProjectShow { name } => sup
            .project_info(&name)
            .map(|p| CtlResponse::Project(Box::new(p))),
        CtlRequest::ProjectLifecycle { name, verb } => match Verb::parse(&verb) {
            Some(verb) => sup
                .lifecycle(&name, verb)
                .await
                .map(|p| CtlResponse::Project(Box::new(p))),
            None => Err(format!(
                "unknown verb `{verb}`: use suspend, resume, complete or archive"
            )),
        },
        CtlRequest::Chat { text } => sup.chat(text).await.map(|text| CtlResponse::Reply {
            id: String::new(),
            text,
        }),
        CtlRequest::ProjectSend { name, text, wait } => sup
            .send(&name, "cli", text, wait)
            .await
            .map(|(id, reply)| match reply {
                Some(text) => CtlResponse::Reply { id, text },
                None => CtlResponse::Sent { id },
            }),
        CtlRequest::TaskVerb { id, verb } => sup
            .task_verb(&id, &verb)
            .map(|message| CtlResponse::Done { message }),
        CtlRequest::TaskAnswer { id, text } => sup
            .task_answer(&id, &text)
            .map(|message| CtlResponse::Done { message }),
        CtlRequest::RoleAssign {
            project,
            role,
            variables,
        } => sup
            .role_assign(&project, &role, variables)
            .await
            .map(|message| CtlResponse::Done { message }),
        CtlRequest::RunStart {
            project,
            brief,
            max_attempts,
        } => sup
            .run_start(&project, &brief, max_attempts)
            .map(|message| CtlResponse::Done { message }),
        CtlRequest::RunControl { project, action } => sup
            .run_control(&project, &action)
            .map(|message| CtlResponse::Done { message }),
        CtlRequest::Stop => {
            tracing::info!("stop requested over the control socket");
            sup.shutdown.send_replace(true);
            Ok(CtlResponse::Done {
                message: "pegasusd is stopping".into(),
            })
        }
    };
    result.unwrap_or_else(|message| CtlResponse::Error { message })
}

fn list(sup: &Supervisor, status: Option<String>) -> Result<CtlResponse, String> {
    if let Some(s) = &status {
        if ProjectStatus::parse(s).is_none() && s != "invalid" {
            return Err(format!(
                "unknown status `{s}`: use active, suspended, completed, archived or invalid"
            ));
        }
    }
    let mut infos = sup.project_infos()?;
    if let Some(s) = status {
        infos.retain(|p| p.status == s);
    }
    Ok(CtlResponse::Projects(infos))
}
