//! The worker's life: handshake, load, serve, stop.

use crate::{connection, logging, WorkerError};
use pegasus_proto::worker::{FromWorker, InboundMessage, ToWorker};
use pegasus_store::{Config, Home, ProjectFile, Session};
use std::{io::BufRead, path::PathBuf, time::Duration};
use tokio::sync::mpsc;

/// What `project-worker` is started with: only its project folder. The spawn token is read from
/// stdin by [`run`].
#[derive(Debug, Clone)]
pub struct WorkerArgs {
    pub project_dir: PathBuf,
}

/// Runs the worker to completion. `Ok` = a requested shutdown or the supervisor went away.
pub fn run(args: WorkerArgs) -> Result<(), WorkerError> {
    let project_dir = std::path::absolute(&args.project_dir).unwrap_or(args.project_dir);
    let home = pegasus_store::home_of_project(&project_dir)
        .ok_or_else(|| WorkerError::NotAProject(project_dir.display().to_string()))?;
    let name = project_dir
        .file_name()
        .and_then(|n| n.to_str())
        .map(str::to_string)
        .ok_or_else(|| WorkerError::NotAProject(project_dir.display().to_string()))?;
    let mut token = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut token)
        .map_err(WorkerError::Token)?;
    logging::init(&home.logs_dir(), &name);
    // One thread is plenty for a worker and keeps its memory small; heavy tool work will use
    // processes of its own.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(WorkerError::Runtime)?;
    let result = runtime.block_on(serve(home, project_dir, name, token.trim().to_string()));
    if let Err(e) = &result {
        tracing::error!("worker stops: {e}");
    }
    result
}

async fn serve(
    home: Home,
    project_dir: PathBuf,
    name: String,
    token: String,
) -> Result<(), WorkerError> {
    let conn = connection::connect(&home.worker_socket(), &name, token).await?;
    let (mut reader, mut writer, init) = (conn.reader, conn.writer, conn.init);

    // The worker loads its own config and project; a failure is reported, then we exit.
    let loaded = Config::load(std::path::Path::new(&init.config_path))
        .and_then(|config| Ok((config, ProjectFile::load(&project_dir)?)))
        .and_then(|(config, project)| Ok((config, project, Session::open(&project_dir, &name)?)));
    let (_config, _project, mut session) = match loaded {
        Ok(loaded) => loaded,
        Err(e) => {
            let _ = writer
                .write(&FromWorker::Fatal {
                    reason: e.to_string(),
                })
                .await;
            return Err(e.into());
        }
    };
    writer.write(&FromWorker::Ready).await?;
    tracing::info!(project = %name, pid = std::process::id(), "worker ready");

    // Frame reads are not cancel safe, so they run in their own task and arrive on a channel.
    let (tx, mut rx) = mpsc::channel::<Result<Option<ToWorker>, String>>(64);
    tokio::spawn(async move {
        loop {
            let ev = reader.read::<ToWorker>().await.map_err(|e| e.to_string());
            let end = !matches!(ev, Ok(Some(_)));
            if tx.send(ev).await.is_err() || end {
                break;
            }
        }
    });
    let mut heartbeat = tokio::time::interval(Duration::from_millis(init.heartbeat_ms.max(100)));
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            ev = rx.recv() => match ev {
                Some(Ok(Some(ToWorker::Message(msg)))) => {
                    let id = msg.id.clone();
                    persist(&mut session, msg)?;
                    writer.write(&FromWorker::MessagePersisted { id }).await?;
                }
                Some(Ok(Some(ToWorker::Ping { nonce }))) => writer.write(&FromWorker::Pong { nonce }).await?,
                Some(Ok(Some(ToWorker::Shutdown))) => {
                    // Every turn is already durable; nothing is buffered past a turn boundary.
                    tracing::info!("shutdown requested");
                    writer.write(&FromWorker::ShutdownComplete).await?;
                    return Ok(());
                }
                Some(Ok(Some(ToWorker::LlmResponse { .. } | ToWorker::LlmDelta { .. }))) => {
                    tracing::warn!("an LLM answer for no pending request");
                }
                Some(Ok(Some(ToWorker::Init(_)))) => tracing::warn!("ignoring a second init"),
                Some(Ok(None)) | None => {
                    tracing::info!("supervisor closed the connection; exiting");
                    return Ok(());
                }
                Some(Err(e)) => return Err(WorkerError::Handshake(format!("bad frame from pegasusd: {e}"))),
            },
            _ = heartbeat.tick() => writer.write(&FromWorker::Heartbeat).await?,
        }
    }
}

/// Appends one inbound message to the session as one durable turn.
fn persist(session: &mut Session, msg: InboundMessage) -> Result<(), WorkerError> {
    use pegasus_store::{ContentBlock, Role, SessionMessage, SessionRecord};
    let record = SessionRecord::Message(SessionMessage {
        id: Some(msg.id),
        role: Role::User,
        from: Some(msg.from),
        content: vec![ContentBlock::Text { text: msg.text }],
        model: None,
        usage: None,
        ts: chrono::Utc::now(),
    });
    session.append_turn(&[record])?;
    Ok(())
}
