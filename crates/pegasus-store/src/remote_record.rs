//! What pegasusd alone decides for a remote project (DESIGN.md §12, §14). A remote project's folder
//! sits on storage its worker's host writes too, so its PROJECT.md cannot say where the worker
//! runs or what Pegasus runs for it: a host that wrote `launcher: local`, a workdir and MCP
//! commands there, then crashed its worker, would be restarted on pegasusd's own host running
//! them. So at a remote project's first launch pegasusd keeps its launcher and the keys that
//! name a place or a command ([`PINNED_KEYS`]) in `<home>/remote/<name>.json`, outside
//! `projects/`, and launches it only where that record says and only while its PROJECT.md
//! still says the same; a change made outside pegasusd refuses the start until the user, who
//! alone can, removes the record (the refusal says so).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::{Result, StoreError};
use crate::home::Home;
use crate::project::ProjectFile;

/// The PROJECT.md keys (besides `launcher`) that name a place or a command Pegasus uses.
pub const PINNED_KEYS: [&str; 5] = ["workdir", "repos", "hydrate", "verify", "mcp_servers"];

/// The largest record read.
const MAX_RECORD: u64 = 1 << 20;

/// One remote project's record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RemoteRecord {
    /// The launcher (a name under config.yml `launchers:`, never `local`).
    pub launcher: String,
    /// Each of [`PINNED_KEYS`] its PROJECT.md had (JSON of the YAML value), absent ones left out.
    pub keys: BTreeMap<String, serde_json::Value>,
}

impl RemoteRecord {
    /// The record of project `file` launched by `launcher`.
    pub fn of(launcher: &str, file: &ProjectFile) -> Self {
        RemoteRecord {
            launcher: launcher.to_string(),
            keys: pinned(file),
        }
    }

    /// The keys whose value in `file` (launched by `launcher`, its PROJECT.md's or the default)
    /// differs from this record; empty when it may start as recorded.
    pub fn changed(&self, launcher: &str, file: &ProjectFile) -> Vec<&'static str> {
        let now = pinned(file);
        let mut out = Vec::new();
        if launcher != self.launcher {
            out.push("launcher");
        }
        out.extend(
            PINNED_KEYS
                .iter()
                .filter(|k| now.get(**k) != self.keys.get(**k))
                .copied(),
        );
        out
    }
}

fn pinned(file: &ProjectFile) -> BTreeMap<String, serde_json::Value> {
    PINNED_KEYS
        .iter()
        .filter_map(|k| {
            let v = file.get(k).filter(|v| !v.is_null())?;
            // A YAML value JSON cannot hold (a non-string key) is kept as its text.
            let json = serde_json::to_value(&v)
                .unwrap_or_else(|_| serde_json::Value::String(format!("{v:?}")));
            Some((k.to_string(), json))
        })
        .collect()
}

/// Where project `name`'s record is kept.
pub fn path(home: &Home, name: &str) -> PathBuf {
    home.remote_records_dir().join(format!("{name}.json"))
}

/// Project `name`'s record, `None` when it has none. A record that does not read is an error
/// (never taken as "none", which would let PROJECT.md decide again).
pub fn read(home: &Home, name: &str) -> std::result::Result<Option<RemoteRecord>, String> {
    let p = path(home, name);
    match crate::read::read_text_limited(&p, MAX_RECORD) {
        Ok(text) => serde_json::from_str(&text).map(Some).map_err(|e| {
            format!(
                "{}: {e}; remove it to let pegasusd record the project again",
                p.display()
            )
        }),
        Err(crate::read::ReadError::NotFound) => Ok(None),
        Err(e) => Err(format!("{} {e}", p.display())),
    }
}

/// Keeps project `name`'s record (atomically; `remote/` is the user's alone).
pub fn write(home: &Home, name: &str, record: &RemoteRecord) -> Result<()> {
    let dir = home.remote_records_dir();
    crate::atomic::create_dir_all_durable(&dir)?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
        .map_err(StoreError::io(&dir))?;
    let bytes = serde_json::to_vec_pretty(record)
        .map_err(|e| StoreError::Invalid(format!("cannot encode the remote record: {e}")))?;
    crate::atomic::write_atomic(&path(home, name), &bytes)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::path::Path;

    fn file(extra: &str) -> ProjectFile {
        let md = format!("---\nname: p\nstatus: active\ncreated: 2026-01-01T00:00:00Z\nsuspended: null\ncompleted: null\n{extra}---\n\n## Goal\n\nx\n");
        ProjectFile::parse(&md, Path::new("PROJECT.md")).unwrap()
    }

    #[test]
    fn a_record_round_trips_and_names_every_key_changed_outside_pegasusd() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::new(dir.path());
        assert_eq!(read(&home, "p").unwrap(), None);
        let f = file("launcher: box\nworkdir: /w\nverify: [make test]\n");
        let rec = RemoteRecord::of("box", &f);
        write(&home, "p", &rec).unwrap();
        assert_eq!(read(&home, "p").unwrap(), Some(rec.clone()));
        assert!(rec.changed("box", &f).is_empty());
        // Unknown keys and the body are the project's own business.
        assert!(rec
            .changed(
                "box",
                &file("launcher: box\nworkdir: /w\nverify: [make test]\nbudget_usd: 3\n")
            )
            .is_empty());
        let hostile = file("launcher: local\nworkdir: /etc\nverify: [make test]\nmcp_servers: {x: {command: sh}}\n");
        assert_eq!(
            rec.changed("local", &hostile),
            vec!["launcher", "workdir", "mcp_servers"]
        );
        // A damaged record is an error, never "no record".
        std::fs::write(path(&home, "p"), "{").unwrap();
        assert!(read(&home, "p").is_err());
    }
}
