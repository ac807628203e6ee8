//! `list_dir{path}`: the entries of a workdir folder.

use serde::Deserialize;

use crate::tool::{ToolCtx, ToolOutput, TypedTool};

/// Lists a folder inside the workdir: folders end in `/`, files show their size.
pub struct ListDir;

/// The arguments of `list_dir`, as its schema describes them.
#[derive(Deserialize)]
pub struct Args {
    #[serde(default)]
    path: String,
}

impl TypedTool for ListDir {
    type Args = Args;

    fn name(&self) -> &str {
        "list_dir"
    }

    fn description(&self) -> &str {
        "List a folder of the working directory (`.` for the workdir itself). Folders end in `/`, symlinks in `@`."
    }

    fn concurrent(&self) -> bool {
        true
    }

    fn schema(&self) -> serde_json::Value {
        super::string_args(&[("path", "folder path relative to the workdir")], &[])
    }

    async fn run(&self, args: Args, ctx: &ToolCtx) -> Result<ToolOutput, String> {
        let entries = std::fs::read_dir(ctx.resolve(&args.path)?)
            .map_err(|e| format!("cannot list {}: {e}", args.path))?;
        let mut lines: Vec<String> = entries
            .filter_map(|e| e.ok())
            .map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                // DirEntry metadata does not follow symlinks: show them as such, the
                // model can still read through them when they stay inside.
                match e.metadata() {
                    Ok(m) if m.file_type().is_symlink() => format!("{name}@"),
                    Ok(m) if m.is_dir() => format!("{name}/"),
                    Ok(m) => format!("{name}  ({} bytes)", m.len()),
                    Err(_) => name,
                }
            })
            .collect();
        lines.sort();
        if lines.is_empty() {
            return Ok(ToolOutput::ok("(empty)"));
        }
        Ok(ToolOutput::ok(lines.join("\n")))
    }
}
