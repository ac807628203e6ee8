//! `pegasusctl run ...`: status reads the run files (no daemon needed); cancel, pause and
//! resume go through the daemon (cancel and pause are written to the run file, which the
//! run's loop re-reads at every step).

use crate::{cli::RunCommand, output, CtlError};
use pegasus_proto::ctl::CtlRequest;
use pegasus_store::Home;

pub async fn run(home: &Home, json: bool, cmd: RunCommand) -> Result<(), CtlError> {
    let (name, action) = match cmd {
        RunCommand::Status { name } => {
            pegasus_store::validate_name(&name)?;
            let dir = home.project_dir(&name);
            if !dir.join("PROJECT.md").exists() {
                return Err(CtlError::Failed(format!(
                    "project {name} not found: see `pegasusctl project list`"
                )));
            }
            let store =
                pegasus_runs::RunStore::open(&dir).map_err(|e| CtlError::Failed(e.to_string()))?;
            let Some(run) = store
                .latest()
                .map_err(|e| CtlError::Failed(e.to_string()))?
            else {
                return Err(CtlError::Failed(format!(
                    "project {name} has no run: start one with `pegasusctl project run {name} --brief TEXT`"
                )));
            };
            if json {
                return super::print_json(&run);
            }
            print!("{}", output::run_details(&run));
            return Ok(());
        }
        RunCommand::Cancel { name } => (name, "cancel"),
        RunCommand::Pause { name } => (name, "pause"),
        RunCommand::Resume { name } => (name, "resume"),
    };
    super::mutate(
        home,
        json,
        CtlRequest::RunControl {
            project: name,
            action: action.into(),
        },
    )
    .await
}
