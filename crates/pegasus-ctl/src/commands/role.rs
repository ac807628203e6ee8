//! `pegasusctl role ...`: list and show read the role files (built-in + <home>/roles); assign
//! goes through the daemon, the only writer of PROJECT.md.

use crate::{cli::RoleCommand, output, CtlError};
use pegasus_proto::ctl::CtlRequest;
use pegasus_store::Home;

pub async fn run(home: &Home, json: bool, cmd: RoleCommand) -> Result<(), CtlError> {
    match cmd {
        RoleCommand::List => {
            let roles = pegasus_roles::load_roles(&home.roles_dir()).map_err(CtlError::failed)?;
            if json {
                return super::print_json(&roles);
            }
            print!("{}", output::role_table(&roles));
            Ok(())
        }
        RoleCommand::Show { id } => {
            let role =
                pegasus_roles::find_role(&home.roles_dir(), &id).map_err(CtlError::failed)?;
            if json {
                return super::print_json(&role);
            }
            print!("{}", output::role_details(&role));
            Ok(())
        }
        RoleCommand::Assign { name, role, vars } => {
            let mut variables = Vec::new();
            for v in vars {
                let Some((k, val)) = v.split_once('=') else {
                    return Err(CtlError::Failed(format!(
                        "bad --var `{v}`: use --var name=value"
                    )));
                };
                variables.push((k.trim().to_string(), val.to_string()));
            }
            let req = CtlRequest::RoleAssign {
                project: name,
                role,
                variables,
            };
            super::mutate(home, json, req).await
        }
    }
}
