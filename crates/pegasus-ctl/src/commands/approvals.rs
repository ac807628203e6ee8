//! `pegasusctl approvals [NAME]`, `approve ID [--always]`, `deny ID [--reason T]` (SPEC §11).
//! The list reads the request files and needs no daemon; an answer goes through the daemon,
//! which records it (first answer wins), edits PROJECT.md for `--always` and wakes the worker.

use crate::CtlError;
use pegasus_proto::ctl::{ApprovalInfo, CtlRequest};
use pegasus_store::Home;

pub fn list(home: &Home, json: bool, name: Option<String>) -> Result<(), CtlError> {
    if let Some(n) = &name {
        super::project_dir(home, n)?;
    }
    let waiting = pegasus_store::approvals::waiting(&home.projects_dir(), name.as_deref());
    if json {
        return super::print_json(&waiting);
    }
    print!("{}", table(&waiting));
    Ok(())
}

/// The human listing: one block per request, the command line in full.
pub(crate) fn table(waiting: &[ApprovalInfo]) -> String {
    if waiting.is_empty() {
        return "no tool call is waiting for approval\n".to_string();
    }
    let mut out = String::new();
    for a in waiting {
        out.push_str(&format!(
            "{}  {}  task {}  {}  asked {}\n    {}\n",
            a.id, a.project, a.task, a.tool, a.asked_at, a.summary
        ));
    }
    out.push_str(
        "answer with `pegasusctl approve ID [--always]` or `pegasusctl deny ID [--reason TEXT]`\n",
    );
    out
}

pub async fn answer(
    home: &Home,
    json: bool,
    id: String,
    approve: bool,
    always: bool,
    reason: Option<String>,
) -> Result<(), CtlError> {
    if !pegasus_store::approvals::valid_id(&id) {
        return Err(CtlError::Failed(format!(
            "`{id}` is not an approval id (they look like ap-k3m9x2q7rt): see `pegasusctl approvals`"
        )));
    }
    let req = CtlRequest::ApprovalAnswer {
        id,
        approve,
        always,
        reason,
    };
    super::mutate(home, json, req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_shows_the_whole_command_line_and_how_to_answer() {
        let t = table(&[ApprovalInfo {
            id: "ap-abc".into(),
            project: "web".into(),
            task: "t-1".into(),
            tool: "exec".into(),
            summary: "rm -rf build && make".into(),
            asked_at: "2026-11-26T10:00:00Z".into(),
        }]);
        assert!(t.contains("rm -rf build && make"));
        assert!(t.contains("pegasusctl approve ID"));
        assert_eq!(table(&[]), "no tool call is waiting for approval\n");
    }
}
