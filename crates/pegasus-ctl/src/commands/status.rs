//! `pegasusctl status`.

use crate::{
    client::{ok, Client},
    output, CtlError,
};
use pegasus_proto::ctl::{CtlRequest, CtlResponse};
use pegasus_store::Home;

pub async fn run(home: &Home, json: bool) -> Result<(), CtlError> {
    let mut client = Client::connect(home).await?;
    let CtlResponse::Status(status) = ok(client.request(CtlRequest::Status).await?)? else {
        return Err(CtlError::Failed("unexpected answer to status".into()));
    };
    // Questions and pending merges, read from the task files of the listed projects.
    let waiting: Vec<String> = status
        .projects
        .iter()
        .filter(|p| p.error.is_none())
        .flat_map(|p| pegasus_tasks::waiting_on_user(&home.project_dir(&p.name), &p.name))
        .collect();
    if json {
        let mut value = serde_json::to_value(&status).map_err(CtlError::failed)?;
        if let Some(obj) = value.as_object_mut() {
            obj.insert("waiting".into(), serde_json::json!(waiting));
        }
        return super::print_json(&value);
    }
    print!("{}", output::status(&status));
    if !waiting.is_empty() {
        println!(
            "
waiting for you:"
        );
        for w in waiting {
            println!("  {w}");
        }
    }
    Ok(())
}
