//! `pegasusctl role assign PROJECT ROLE [--var k=v]`: recorded in PROJECT.md `roles:`
//! (replacing an earlier assignment of the same role); the worker picks it up when it next
//! starts. `role list` and `role show` read the files and need no daemon.

use crate::error::RequestError;
use pegasus_store::{Home, ProjectFile};

/// Assigns `role` to `project`, its PROJECT.md changed under `lifecycle_lock` (the lock of
/// every PROJECT.md read-modify-write).
pub(crate) async fn assign(
    home: &Home,
    lifecycle_lock: &tokio::sync::Mutex<()>,
    project: &str,
    role: &str,
    variables: Vec<(String, String)>,
) -> Result<String, RequestError> {
    pegasus_store::validate_name(project)?;
    let found = pegasus_roles::find_role(&home.roles_dir(), role)?;
    let mut assignment = pegasus_roles::Assignment::new(&found.id);
    assignment.variables = variables.into_iter().collect();
    pegasus_roles::validate_assignment(&assignment, &found)?;
    let _guard = lifecycle_lock.lock().await;
    let dir = home.project_dir(project);
    let mut file = ProjectFile::load(&dir)?;
    let mut list = file
        .roles()
        .clone()
        .map_err(pegasus_roles::RoleError::from)?;
    list.retain(|a| a.role != assignment.role);
    list.push(assignment);
    file.set_roles(&list)?;
    file.save(&dir)?;
    Ok(format!(
        "role {} assigned to project {project}; its worker uses it from its next start (`pegasusctl project suspend/resume {project}`)",
        found.id
    ))
}
