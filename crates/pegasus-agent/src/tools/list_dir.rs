//! `list_dir{path}`: the entries of a workdir folder.

use serde::Deserialize;

use crate::tool::{parse_args, Tool, ToolCtx, ToolFuture, ToolOutput};

/// Lists a folder inside the workdir: folders end in `/`, files show their size.
pub struct ListDir;

#[derive(Deserialize)]
struct Args {
    #[serde(default)]
    path: String,
}

impl Tool for ListDir {
    fn spec(&self) -> pegasus_proto::llm::ToolSpec {
        super::spec(
            "list_dir",
            "List a folder of the working directory (`.` for the workdir itself). Folders end in `/`, symlinks in `@`.",
            serde_json::json!({
                "type": "object",
                "properties": {"path": {"type": "string", "description": "folder path relative to the workdir"}},
                "required": ["path"]
            }),
        )
    }

    fn concurrent(&self) -> bool {
        true
    }

    fn call<'a>(&'a self, input: serde_json::Value, ctx: &'a ToolCtx) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: Args = match parse_args("list_dir", input) {
                Ok(a) => a,
                Err(e) => return e,
            };
            let path = match ctx.resolve(&args.path) {
                Ok(p) => p,
                Err(e) => return ToolOutput::error(e),
            };
            let entries = match std::fs::read_dir(&path) {
                Ok(rd) => rd,
                Err(e) => return ToolOutput::error(format!("cannot list {}: {e}", args.path)),
            };
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
                return ToolOutput::ok("(empty)");
            }
            ToolOutput::ok(lines.join("\n"))
        })
    }
}
