//! The host runs the agent on a tokio task and records inbound messages from another: the
//! types must allow it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{send, settings, text, Fixture, ScriptedModel};

fn assert_send<T: Send>(_: &T) {}
fn assert_send_sync<T: Send + Sync>() {}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_can_be_spawned_while_messages_are_recorded_elsewhere() {
    assert_send_sync::<pegasus_agent::SessionHandle>();
    assert_send_sync::<pegasus_agent::ToolSet>();
    let fx = Fixture::new();
    let model = ScriptedModel::new();
    model.push(text("hi"));
    let (mut agent, _rx) = fx.open(model.clone(), settings());
    let handle = agent.session_handle();
    send(&mut agent, "m1", "hello");
    let run = async move {
        let out = agent.run().await.unwrap();
        (agent, out)
    };
    assert_send(&run);
    let task = tokio::spawn(run);
    let from = pegasus_proto::Channel::Telegram(Some(1));
    pegasus_agent::record_inbound(&handle, "m2", &from, "meanwhile").unwrap();
    let (mut agent, out) = task.await.unwrap();
    assert_eq!(out.text, "hi");
    agent.enqueue("m2", &from, "meanwhile");
    assert!(agent.has_queued());
    let loaded = pegasus_store::load_session(&fx.dir).unwrap();
    assert_eq!(loaded.records.len(), 4);
}
