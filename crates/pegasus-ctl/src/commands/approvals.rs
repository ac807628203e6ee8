//! `pegasusctl approvals [NAME]`, `approve ID [--always]`, `deny ID [--reason T]` (DESIGN.md §11).
//! The list reads the request files and needs no daemon; an answer goes through the daemon,
//! which records it (first answer wins), edits PROJECT.md for `--always` and wakes the worker.

use crate::CtlError;
use pegasus_proto::ctl::{ApprovalInfo, CtlRequest};
use pegasus_store::Home;

pub fn list(home: &Home, json: bool, name: Option<String>, full: bool) -> Result<(), CtlError> {
    let waiting = waiting(home, name.as_deref())?;
    if json {
        return super::print_json(&waiting);
    }
    print!("{}", table(&waiting, full));
    Ok(())
}

/// The calls waiting for approval, of one project or all, from the request files.
pub(crate) fn waiting(home: &Home, name: Option<&str>) -> Result<Vec<ApprovalInfo>, CtlError> {
    if let Some(n) = name {
        super::project_dir(home, n)?;
    }
    Ok(pegasus_approvals::waiting(&home.projects_dir(), name))
}

/// The human listing: one block per request, the command line in full, everything escaped
/// (control, escape, bidi and zero-width characters written out); with `full`, each call's
/// whole input under it.
pub(crate) fn table(waiting: &[ApprovalInfo], full: bool) -> String {
    use pegasus_proto::shown::escape;
    if waiting.is_empty() {
        return "no tool call is waiting for approval\n".to_string();
    }
    let mut out = String::new();
    for a in waiting {
        out.push_str(&format!(
            "{}  {}  task {}  {}  asked {}\n    {}\n",
            escape(&a.id),
            escape(&a.project),
            escape(&a.task),
            escape(&a.tool),
            escape(&a.asked_at),
            escape(&a.summary)
        ));
        if full && !a.input.is_empty() {
            let pretty = serde_json::from_str::<serde_json::Value>(&a.input)
                .ok()
                .and_then(|v| serde_json::to_string_pretty(&v).ok())
                .unwrap_or_else(|| a.input.clone());
            out.push_str("    whole input:\n");
            for line in pretty.lines() {
                out.push_str(&format!("      {}\n", escape(line)));
            }
        }
    }
    out.push_str(
        "answer with `pegasusctl approve ID [--always]` or `pegasusctl deny ID [--reason TEXT]`",
    );
    if !full {
        out.push_str("; `pegasusctl approvals --full` shows each call's whole input");
    }
    out.push('\n');
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
    super::mutate(home, json, answer_request(id, approve, always, reason)?).await
}

/// The request that answers approval `id`, once `id` looks like one.
pub(crate) fn answer_request(
    id: String,
    approve: bool,
    always: bool,
    reason: Option<String>,
) -> Result<CtlRequest, CtlError> {
    if !pegasus_approvals::valid_id(&id) {
        return Err(CtlError::Failed(format!(
            "`{id}` is not an approval id (they look like ap-k3m9x2q7rt): see `pegasusctl approvals`"
        )));
    }
    Ok(CtlRequest::ApprovalAnswer {
        id,
        approve,
        always,
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_shows_the_whole_command_line_and_how_to_answer() {
        let a = ApprovalInfo {
            id: "ap-abc".into(),
            project: "web".into(),
            task: "t-1".into(),
            tool: "exec".into(),
            summary: "rm -rf build && make".into(),
            asked_at: "2026-11-26T10:00:00Z".into(),
            input: r#"{"command":"rm -rf build && make"}"#.into(),
        };
        let t = table(std::slice::from_ref(&a), false);
        assert!(t.contains("rm -rf build && make"));
        assert!(t.contains("pegasusctl approve ID"));
        assert!(t.contains("approvals --full"));
        assert_eq!(table(&[], false), "no tool call is waiting for approval\n");
        // Nothing reaches the terminal raw, the summary nor the whole input.
        let sneaky = ApprovalInfo {
            summary: "touch X #\r\x1b[2Kls -la".into(),
            input: serde_json::json!({"command": "touch X #\r\x1b[2Kls -la \u{202e}"}).to_string(),
            ..a
        };
        let t = table(&[sneaky], true);
        assert!(t.contains("touch X #\\r\\x1b[2Kls -la"), "{t}");
        assert!(t.contains("\\u{202e}"), "{t}");
        assert!(
            !t.contains('\r') && !t.contains('\x1b') && !t.contains('\u{202e}'),
            "{t}"
        );
    }
}
