//! `pegasusctl chat [TEXT]`: talk to the MainAgent; interactive (one line, one answer) when no
//! TEXT is given.

use crate::{
    client::{ok, Client},
    CtlError,
};
use pegasus_proto::ctl::{CtlRequest, CtlResponse};
use pegasus_store::Home;
use std::io::{BufRead, Write};

async fn ask(client: &mut Client, text: String) -> Result<String, CtlError> {
    match ok(client.request(CtlRequest::Chat { text }).await?)? {
        CtlResponse::Reply { text, .. } => Ok(text),
        other => Err(CtlError::Failed(format!(
            "unexpected answer to chat: {other:?}"
        ))),
    }
}

pub async fn run(
    home: &Home,
    json: bool,
    text: Option<String>,
    stream: bool,
) -> Result<(), CtlError> {
    let mut client = Client::connect(home).await?;
    let stream = super::wants_stream(stream, json);
    if let Some(text) = text {
        if stream {
            // The MainAgent's deltas are on the bus under `main`.
            let (reply, streamed) = super::streaming(home, "main", ask(&mut client, text)).await;
            super::finish_stream(&streamed, &reply?);
            return Ok(());
        }
        let reply = ask(&mut client, text).await?;
        if json {
            return super::print_json(&serde_json::json!({"reply": reply}));
        }
        println!("{reply}");
        return Ok(());
    }
    let stdin = std::io::stdin();
    let mut line = String::new();
    // pegasusd closes a control connection silent for 15 minutes: after a long pause at the
    // prompt, the next question goes over a fresh one.
    let mut last = std::time::Instant::now();
    loop {
        print!("you> ");
        let _ = std::io::stdout().flush();
        line.clear();
        if stdin
            .lock()
            .read_line(&mut line)
            .map_err(|e| CtlError::Failed(format!("cannot read stdin: {e}")))?
            == 0
        {
            println!();
            return Ok(());
        }
        let text = line.trim();
        if text.is_empty() {
            continue;
        }
        if matches!(text, "/quit" | "/exit") {
            return Ok(());
        }
        if last.elapsed() > std::time::Duration::from_secs(10 * 60) {
            client = Client::connect(home).await?;
        }
        if stream {
            print!("main> ");
            let (reply, streamed) =
                super::streaming(home, "main", ask(&mut client, text.to_string())).await;
            match reply {
                Ok(reply) => super::finish_stream(&streamed, &reply),
                Err(e) => eprintln!("\npegasusctl: {e}"),
            }
            last = std::time::Instant::now();
            continue;
        }
        match ask(&mut client, text.to_string()).await {
            Ok(reply) => println!("main> {reply}"),
            Err(e) => eprintln!("pegasusctl: {e}"),
        }
        last = std::time::Instant::now();
    }
}
