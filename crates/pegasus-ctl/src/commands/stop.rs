//! `pegasusctl stop`: graceful daemon shutdown; returns once the daemon has exited (it released
//! the home's pid lock), with one progress line while its workers finish. `--no-wait` returns
//! as soon as the daemon has begun to stop.

use crate::{
    client::{ok, Client},
    CtlError,
};
use pegasus_proto::ctl::CtlRequest;
use pegasus_store::{daemon_lock::DaemonLock, Home};
use std::time::{Duration, Instant};

/// How long a stop may take before `stop` gives up waiting (the daemon goes on stopping).
const PATIENCE: Duration = Duration::from_secs(600);
/// How long before the progress line is printed: a quick stop prints none.
const QUIET: Duration = Duration::from_millis(300);

pub async fn run(home: &Home, json: bool, no_wait: bool) -> Result<(), CtlError> {
    let mut client = Client::connect(home).await?;
    ok(client.request(CtlRequest::Stop).await?)?;
    if no_wait {
        if json {
            return super::print_json(&serde_json::json!({"stopped": false, "stopping": true}));
        }
        println!("pegasusd is stopping (`pegasusctl status` says when it has exited)");
        return Ok(());
    }
    // The daemon drops idle connections as it begins to stop; it has exited when it lets go
    // of the home's pid lock.
    client.wait_closed().await;
    drop(client);
    let started = Instant::now();
    let mut told = false;
    loop {
        let pid = match pegasus_store::daemon_lock::peek(&home.pid_file()) {
            DaemonLock::Free => break,
            DaemonLock::Held { pid, .. } => pid,
        };
        let waited = started.elapsed();
        if !told && waited >= QUIET {
            told = true;
            let pid = pid.map_or_else(|| "unknown".into(), |p| p.to_string());
            eprintln!(
                "pegasusd (pid {pid}) is stopping: waiting for its workers to finish their current step..."
            );
        }
        if waited >= PATIENCE {
            return Err(CtlError::Failed(format!(
                "pegasusd is still stopping after {} s; see its log in {}",
                PATIENCE.as_secs(),
                home.logs_dir().display()
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if json {
        return super::print_json(&serde_json::json!({"stopped": true}));
    }
    println!("pegasusd stopped");
    Ok(())
}
