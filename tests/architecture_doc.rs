//! `docs/ARCHITECTURE.md` is the map a newcomer reads first; this keeps it true. Every path it
//! names in backquotes (a file or folder of this repository) must exist, and every crate of
//! the workspace must be on the map.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

fn doc() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/ARCHITECTURE.md"))
        .expect("docs/ARCHITECTURE.md")
}

/// The backquoted spans that look like repository paths.
fn named_paths(doc: &str) -> Vec<String> {
    doc.split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| {
            (s.starts_with("crates/") || s.starts_with("bin/") || s.starts_with("docs/"))
                && !s.contains(' ')
                && !s.contains('<')
        })
        .map(|s| s.trim_end_matches('/').to_string())
        .collect()
}

#[test]
fn every_path_the_architecture_doc_names_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let paths = named_paths(&doc());
    assert!(paths.len() > 30, "the doc names the files of each hop");
    let missing: Vec<_> = paths.iter().filter(|p| !root.join(p).exists()).collect();
    assert!(
        missing.is_empty(),
        "docs/ARCHITECTURE.md names paths that do not exist: {missing:?}"
    );
}

#[test]
fn every_crate_is_on_the_map() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = doc();
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        assert!(
            doc.contains(&format!("`crates/{name}`")),
            "crate {name} is missing from docs/ARCHITECTURE.md"
        );
    }
}
