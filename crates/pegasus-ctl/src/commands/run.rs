//! `pegasusctl run ...`: status reads the run files (no daemon needed); cancel, pause and
//! resume go through the daemon (cancel and pause are written to the run file, which the
//! run's loop re-reads at every step).

use crate::{cli::RunCommand, output, CtlError};
use pegasus_proto::ctl::{CtlRequest, RunAction};
use pegasus_store::Home;

pub async fn run(home: &Home, json: bool, cmd: RunCommand) -> Result<(), CtlError> {
    let (name, action) = match cmd {
        RunCommand::Status { name } => {
            let dir = super::project_dir(home, &name)?;
            let store = pegasus_runs::RunStore::open(&dir).map_err(CtlError::failed)?;
            let Some(run) = store.latest().map_err(CtlError::failed)? else {
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
        RunCommand::Cancel { name } => (name, RunAction::Cancel),
        RunCommand::Pause { name } => (name, RunAction::Pause),
        RunCommand::Resume { name } => (name, RunAction::Resume),
    };
    let req = CtlRequest::RunControl {
        project: name,
        action,
    };
    super::mutate(home, json, req).await
}
