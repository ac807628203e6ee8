//! The worker's life: handshake, load, serve, stop.

use crate::{connection, logging, proxy::ProxyModel, WorkerError};
use pegasus_agent::{record_inbound, Agent, AgentSettings, Notice, ToolSet};
use pegasus_proto::worker::{FromWorker, InboundMessage, ToWorker};
use pegasus_store::{Config, Home, ProjectFile};
use std::{io::BufRead, path::PathBuf, sync::Arc, time::Duration};
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
    let (reader, mut writer, init) = (conn.reader, conn.writer, conn.init);

    // Frames out go through one queue (the agent, the model proxy and this loop all write).
    let (out, out_rx) = mpsc::unbounded_channel::<FromWorker>();
    let (notices, mut notice_rx) = mpsc::unbounded_channel::<Notice>();
    let proxy = ProxyModel::new(out.clone());

    // The worker loads its own config and project; a failure is reported, then we exit.
    let loaded = Config::load(std::path::Path::new(&init.config_path))
        .map_err(WorkerError::from)
        .and_then(|config| Ok((config, ProjectFile::load(&project_dir)?)))
        .and_then(|(config, project)| {
            let mut settings = AgentSettings::from_config(
                &config,
                init.model.clone(),
                init.context_window,
                Some(name.clone()),
            );
            settings.exec_registry = Some(home.exec_registry(&name));
            let workdir = project
                .workdir()
                .map(PathBuf::from)
                .unwrap_or_else(|| project_dir.join("workdir"));
            Ok(Agent::open(
                &project_dir,
                &workdir,
                &name,
                project.body().to_string(),
                home.skills_dir(),
                ToolSet::project_tools(),
                Arc::new(proxy.clone()),
                notices,
                settings,
            )?)
        });
    let agent = match loaded {
        Ok(agent) => agent,
        Err(e) => {
            let _ = writer
                .write(&FromWorker::Fatal {
                    reason: e.to_string(),
                })
                .await;
            return Err(e);
        }
    };
    let session = agent.session_handle();
    let writer_task = tokio::spawn(write_frames(writer, out_rx));
    let (agent_tx, agent_rx) = mpsc::unbounded_channel::<InboundMessage>();
    tokio::spawn(run_agent(agent, agent_rx, out.clone()));
    let _ = out.send(FromWorker::Ready);
    tracing::info!(project = %name, pid = std::process::id(), model = %init.model, "worker ready");

    // Frame reads are not cancel safe, so they run in their own task and arrive on a channel.
    let (tx, mut rx) = mpsc::channel::<Result<Option<ToWorker>, String>>(64);
    tokio::spawn(read_frames(reader, tx));
    let mut heartbeat = tokio::time::interval(Duration::from_millis(init.heartbeat_ms.max(100)));
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            ev = rx.recv() => match ev {
                Some(Ok(Some(ToWorker::Message(msg)))) => {
                    // Durable before acknowledged: the ack is the sender's proof.
                    record_inbound(&session, &msg.id, &msg.from, &msg.text)?;
                    let _ = out.send(FromWorker::MessagePersisted { id: msg.id.clone() });
                    let _ = agent_tx.send(msg);
                }
                Some(Ok(Some(ToWorker::Ping { nonce }))) => {
                    let _ = out.send(FromWorker::Pong { nonce });
                }
                Some(Ok(Some(ToWorker::LlmResponse { id, result }))) => proxy.complete(id, result),
                Some(Ok(Some(ToWorker::LlmDelta { .. }))) => {}
                Some(Ok(Some(ToWorker::Shutdown))) => {
                    // Every turn is already durable (one fdatasync per turn); a task still
                    // running is closed as `process restarted` when the project loads again.
                    tracing::info!("shutdown requested");
                    let _ = out.send(FromWorker::ShutdownComplete);
                    let _ = writer_task.await;
                    return Ok(());
                }
                Some(Ok(Some(ToWorker::Init(_)))) => tracing::warn!("ignoring a second init"),
                Some(Ok(None)) | None => {
                    tracing::info!("supervisor closed the connection; exiting");
                    proxy.fail_all();
                    return Ok(());
                }
                Some(Err(e)) => return Err(WorkerError::Handshake(format!("bad frame from pegasusd: {e}"))),
            },
            notice = notice_rx.recv() => match notice {
                Some(Notice::Notify { text }) => {
                    let _ = out.send(FromWorker::Notify { text, kind: "info".into() });
                }
                Some(Notice::Event { kind, data_json }) => {
                    let _ = out.send(FromWorker::Event { kind, data_json });
                }
                None => {}
            },
            _ = heartbeat.tick() => {
                let _ = out.send(FromWorker::Heartbeat);
            }
        }
    }
}

type Reader =
    pegasus_proto::FrameReader<tokio::io::ReadHalf<interprocess::local_socket::tokio::Stream>>;
type Writer =
    pegasus_proto::FrameWriter<tokio::io::WriteHalf<interprocess::local_socket::tokio::Stream>>;

async fn read_frames(mut reader: Reader, tx: mpsc::Sender<Result<Option<ToWorker>, String>>) {
    loop {
        let ev = reader.read::<ToWorker>().await.map_err(|e| e.to_string());
        let end = !matches!(ev, Ok(Some(_)));
        if tx.send(ev).await.is_err() || end {
            break;
        }
    }
}

/// Writes queued frames in order; ends after `ShutdownComplete` or when the socket fails (the
/// supervisor is gone: pegasusd dying takes this process down with it anyway).
async fn write_frames(mut writer: Writer, mut rx: mpsc::UnboundedReceiver<FromWorker>) {
    while let Some(frame) = rx.recv().await {
        let last = matches!(frame, FromWorker::ShutdownComplete);
        if let Err(e) = writer.write(&frame).await {
            tracing::warn!("cannot write to pegasusd: {e}");
            break;
        }
        if last {
            break;
        }
    }
}

/// The project agent: one run at a time; messages that arrive meanwhile are answered together
/// by the next run.
async fn run_agent(
    mut agent: Agent,
    mut rx: mpsc::UnboundedReceiver<InboundMessage>,
    out: mpsc::UnboundedSender<FromWorker>,
) {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while let Ok(more) = rx.try_recv() {
            batch.push(more);
        }
        for m in &batch {
            agent.enqueue(&m.id, &m.from, &m.text);
        }
        let text = match agent.run().await {
            Ok(outcome) => outcome.text,
            Err(e) => {
                tracing::error!("agent run failed: {e}");
                format!("the project agent failed: {e}")
            }
        };
        for m in batch {
            let _ = out.send(FromWorker::Reply {
                message_id: m.id,
                text: text.clone(),
            });
        }
    }
}
