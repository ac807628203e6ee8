//! The built-in tools, one file per tool (DESIGN.md §6). Their names and JSON arguments are a
//! contract with the model and with role allowlists: do not rename them.

use std::sync::Arc;

use crate::tool::{Tool, ToolCtx, ToolOutput};

pub mod ask_user;
pub mod edit_file;
pub mod exec;
pub mod list_dir;
pub mod memory_append;
pub mod memory_list;
pub mod memory_read;
pub mod memory_write;
pub mod notify;
pub mod propose_task;
pub mod read_file;
pub mod spawn_subagent;
pub mod use_skill;
pub mod web_fetch;
pub mod web_search;
pub mod write_file;

/// The built-in tools of a project agent, in the order the model sees them. `ask_user` and
/// `propose_task` reach a role only through its `tools:` allowlist (`data/roles/`).
pub fn builtins() -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(read_file::ReadFile),
        Arc::new(write_file::WriteFile),
        Arc::new(edit_file::EditFile),
        Arc::new(list_dir::ListDir),
        Arc::new(exec::Exec),
        Arc::new(memory_list::MemoryList),
        Arc::new(memory_read::MemoryRead),
        Arc::new(memory_write::MemoryWrite),
        Arc::new(memory_append::MemoryAppend),
        Arc::new(notify::Notify),
        Arc::new(spawn_subagent::SpawnSubagent),
        Arc::new(use_skill::UseSkill),
        Arc::new(ask_user::AskUser),
        Arc::new(propose_task::ProposeTask),
    ]
}

/// The web tools (DESIGN.md §16 "The web") under config.yml's `web:`: `web_fetch` always,
/// `web_search` when `web.search` names a backend and there is a `searcher` to ask.
pub fn web(
    config: &pegasus_store::web::WebConfig,
    searcher: Option<Arc<dyn web_search::WebSearch>>,
) -> Vec<Arc<dyn Tool>> {
    let mut tools: Vec<Arc<dyn Tool>> = vec![Arc::new(web_fetch::WebFetch::new(&config.fetch))];
    if let (Some(_), Some(searcher)) = (&config.search, searcher) {
        tools.push(Arc::new(web_search::WebSearchTool::new(searcher)));
    }
    tools
}

/// The schema of an object of string arguments, each `(name, description)` (`""` for none):
/// the model must give the `required` ones and may give the `optional` ones.
pub(crate) fn string_args(
    required: &[(&str, &str)],
    optional: &[(&str, &str)],
) -> serde_json::Value {
    let property = |(name, description): &(&str, &str)| {
        let mut p = serde_json::json!({"type": "string"});
        if !description.is_empty() {
            p["description"] = (*description).into();
        }
        (name.to_string(), p)
    };
    let names: Vec<&str> = required.iter().map(|(name, _)| *name).collect();
    serde_json::json!({
        "type": "object",
        "properties": required.iter().chain(optional).map(property).collect::<serde_json::Map<_, _>>(),
        "required": names
    })
}

/// Largest file `read_file`/`memory_read` return whole; bigger ones are cut and say so, so one
/// call cannot flood the context window.
pub(crate) const READ_CAP_BYTES: usize = 256 * 1024;

/// Reads a text file for the model: lossy UTF-8, cut at [`READ_CAP_BYTES`] with a note.
pub(crate) fn read_text(path: &std::path::Path, shown: &str) -> ToolOutput {
    use pegasus_store::ReadError;
    if path.is_dir() {
        return ToolOutput::error(format!("{shown} is a directory; use list_dir"));
    }
    // Never more than the cap is read (a 1 GiB file costs 256 KiB), and a FIFO or device is
    // refused at once instead of blocking the turn.
    match pegasus_store::read_capped(path, READ_CAP_BYTES as u64) {
        Ok(c) if c.truncated() => ToolOutput::ok(format!(
            "{}\n[truncated: the file has {} bytes, only the first {READ_CAP_BYTES} are shown]",
            String::from_utf8_lossy(&c.bytes),
            c.size
        )),
        Ok(c) => ToolOutput::ok(String::from_utf8_lossy(&c.bytes).into_owned()),
        Err(ReadError::NotFound) => ToolOutput::error(format!("{shown} does not exist")),
        Err(ReadError::NotRegular) => ToolOutput::error(format!(
            "{shown} is not a regular file (a FIFO, device or socket): read_file reads regular files only"
        )),
        Err(e) => ToolOutput::error(format!("cannot read {shown}: {e}")),
    }
}

/// Writes a whole file atomically, creating missing parent folders, so a crash never leaves a
/// half-written file for the next turn to read.
pub(crate) fn write_text(path: &std::path::Path, content: &str) -> Result<(), String> {
    if path.is_dir() {
        return Err("it is a directory".into());
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
    }
    pegasus_store::write_atomic(path, content.as_bytes()).map_err(|e| e.to_string())
}

/// The arguments of `memory_write` and `memory_append`: a file of the memory folder and text.
#[derive(serde::Deserialize)]
pub struct MemoryText {
    pub(crate) path: String,
    pub(crate) content: String,
}

/// The file a memory tool acts on: `path` resolved inside the memory folder (created if
/// missing), or the tool error to give the model.
pub(crate) fn memory_path(ctx: &ToolCtx, path: &str) -> Result<std::path::PathBuf, String> {
    std::fs::create_dir_all(&ctx.memory_dir)
        .map_err(|e| format!("memory is not available: {e}"))?;
    crate::paths::resolve_inside(&ctx.memory_dir, path, "memory folder")
}
