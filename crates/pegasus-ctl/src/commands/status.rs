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
    if json {
        return super::print_json(&status);
    }
    print!("{}", output::status(&status));
    if !status.problems.is_empty() {
        println!("\nproblems (found at start; fix them and restart pegasusd):");
        for p in &status.problems {
            println!("  {p}");
        }
    }
    if !status.waiting.is_empty() {
        println!("\nwaiting for you:");
        for w in &status.waiting {
            println!("  {w}");
        }
    }
    Ok(())
}
