//! `pegasusctl stop`: graceful daemon shutdown; returns once the daemon is gone.

use crate::{
    client::{ok, Client},
    CtlError,
};
use pegasus_proto::ctl::CtlRequest;
use pegasus_store::Home;

pub async fn run(home: &Home, json: bool) -> Result<(), CtlError> {
    let mut client = Client::connect(home).await?;
    ok(client.request(CtlRequest::Stop).await?)?;
    // The daemon keeps this connection until it exits, so its close means "stopped".
    client.wait_closed().await;
    if json {
        return super::print_json(&serde_json::json!({"stopped": true}));
    }
    println!("pegasusd stopped");
    Ok(())
}
