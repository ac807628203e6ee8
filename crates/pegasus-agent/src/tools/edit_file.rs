//! `edit_file{path, old, new}`: replace one exact snippet of a workdir file.

use serde::Deserialize;

use crate::tool::{ToolCtx, ToolOutput, TypedTool};

/// Replaces the one occurrence of `old` with `new`. Requiring exactly one occurrence makes the
/// model quote enough context that the edit lands where it meant, instead of silently editing
/// the first of several look-alikes.
pub struct EditFile;

/// The arguments of `edit_file`, as its schema describes them.
#[derive(Deserialize)]
pub struct Args {
    path: String,
    old: String,
    new: String,
}

impl TypedTool for EditFile {
    type Args = Args;

    fn name(&self) -> &str {
        "edit_file"
    }

    fn description(&self) -> &str {
        "Replace the text `old` with `new` in a file. `old` must occur exactly once; include enough surrounding lines to make it unique."
    }

    fn schema(&self) -> serde_json::Value {
        super::string_args(
            &[
                ("path", "file path relative to the workdir"),
                ("old", "exact text to replace (must occur once)"),
                ("new", "replacement text"),
            ],
            &[],
        )
    }

    async fn run(&self, args: Args, ctx: &ToolCtx) -> Result<ToolOutput, String> {
        let path = ctx.resolve_for_write(&args.path)?;
        if args.old.is_empty() {
            return Err("`old` is empty; quote the text to replace".into());
        }
        // Regular files only, and not larger than what the model could have read whole.
        let cap = 4 * super::READ_CAP_BYTES as u64;
        let text = pegasus_store::read_text_limited(&path, cap)
            .map_err(|e| format!("cannot edit {}: it {e}", args.path))?;
        match text.matches(&args.old).count() {
            1 => {}
            0 => {
                return Err(format!(
                    "`old` does not occur in {}; read the file and quote it exactly",
                    args.path
                ))
            }
            n => {
                return Err(format!(
                    "`old` occurs {n} times in {}; include more context so it occurs once",
                    args.path
                ))
            }
        }
        let edited = text.replacen(&args.old, &args.new, 1);
        super::write_text(&path, &edited)
            .map_err(|e| format!("cannot write {}: {e}", args.path))?;
        Ok(ToolOutput::ok(format!("edited {}", args.path)))
    }
}
