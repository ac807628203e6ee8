//! `edit_file{path, old, new}`: replace one exact snippet of a workdir file.

use serde::Deserialize;

use crate::tool::{parse_args, Tool, ToolCtx, ToolFuture, ToolOutput};

/// Replaces the one occurrence of `old` with `new`. Requiring exactly one occurrence makes the
/// model quote enough context that the edit lands where it meant, instead of silently editing
/// the first of several look-alikes.
pub struct EditFile;

#[derive(Deserialize)]
struct Args {
    path: String,
    old: String,
    new: String,
}

impl Tool for EditFile {
    fn spec(&self) -> pegasus_proto::llm::ToolSpec {
        super::spec(
            "edit_file",
            "Replace the text `old` with `new` in a file. `old` must occur exactly once; include enough surrounding lines to make it unique.",
            serde_json::json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "file path relative to the workdir"},
                    "old": {"type": "string", "description": "exact text to replace (must occur once)"},
                    "new": {"type": "string", "description": "replacement text"}
                },
                "required": ["path", "old", "new"]
            }),
        )
    }

    fn call<'a>(&'a self, input: serde_json::Value, ctx: &'a ToolCtx) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: Args = match parse_args("edit_file", input) {
                Ok(a) => a,
                Err(e) => return e,
            };
            let path = match ctx.resolve_for_write(&args.path) {
                Ok(p) => p,
                Err(e) => return ToolOutput::error(e),
            };
            if args.old.is_empty() {
                return ToolOutput::error("`old` is empty; quote the text to replace");
            }
            // Regular files only, and not larger than what the model could have read whole.
            let cap = 4 * super::READ_CAP_BYTES as u64;
            let text = match pegasus_store::read_text_limited(&path, cap) {
                Ok(t) => t,
                Err(e) => return ToolOutput::error(format!("cannot edit {}: it {e}", args.path)),
            };
            match text.matches(&args.old).count() {
                1 => {}
                0 => {
                    return ToolOutput::error(format!(
                        "`old` does not occur in {}; read the file and quote it exactly",
                        args.path
                    ))
                }
                n => {
                    return ToolOutput::error(format!(
                        "`old` occurs {n} times in {}; include more context so it occurs once",
                        args.path
                    ))
                }
            }
            let edited = text.replacen(&args.old, &args.new, 1);
            match super::write_text(&path, &edited) {
                Ok(()) => ToolOutput::ok(format!("edited {}", args.path)),
                Err(e) => ToolOutput::error(format!("cannot write {}: {e}", args.path)),
            }
        })
    }
}
