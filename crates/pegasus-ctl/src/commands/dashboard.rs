//! `pegasusctl dashboard`: the dashboard's URL with its token in the fragment (never sent to the
//! server by the browser; the page exchanges it for a session cookie).

use crate::CtlError;
use pegasus_store::Home;

pub async fn run(home: &Home, json: bool) -> Result<(), CtlError> {
    // Only a running daemon serves it: refused with exit 3 otherwise.
    drop(crate::client::Client::connect(home).await?);
    let addr = std::fs::read_to_string(home.dashboard_addr_file()).map_err(|_| {
        CtlError::Failed(
            "the dashboard is not listening: see the pegasusd log (is `dashboard.listen` in use by another program?)"
                .into(),
        )
    })?;
    let token = pegasus_store::read_text_limited(&home.dashboard_token_file(), 4096)
        .map_err(|e| CtlError::Failed(format!("cannot read the dashboard token: {e}")))?;
    let url = format!("http://{}/#token={}", addr.trim(), token.trim());
    if json {
        return super::print_json(&serde_json::json!({"url": url}));
    }
    println!("{url}");
    Ok(())
}
