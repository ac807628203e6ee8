//! `docs/ARCHITECTURE.md` is the map a newcomer reads first; this keeps it true. Every path it
//! names in backquotes (a file or folder of this repository) must exist, every crate of the
//! workspace must be on the map, and its crate table is the one crate table: each crate's row
//! says, word for word, the `description` of the crate's own Cargo.toml.
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

/// The rows of the crate table: (crate folder name, its one concern).
fn crate_table(doc: &str) -> Vec<(String, String)> {
    doc.lines()
        .filter_map(|line| line.strip_prefix("| `crates/"))
        .filter_map(|rest| {
            let (name, rest) = rest.split_once("` | ")?;
            let (concern, _) = rest.split_once(" | ")?;
            Some((name.to_string(), concern.trim().to_string()))
        })
        .collect()
}

/// The `description` line of a crate's Cargo.toml.
fn cargo_description(root: &Path, name: &str) -> Option<String> {
    let toml = std::fs::read_to_string(root.join("crates").join(name).join("Cargo.toml")).ok()?;
    toml.lines()
        .find_map(|l| l.strip_prefix("description = \""))
        .map(|d| d.trim_end_matches('"').to_string())
}

#[test]
fn the_crate_table_says_what_each_crate_says_of_itself() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let table = crate_table(&doc());
    assert!(
        table.len() > 10,
        "docs/ARCHITECTURE.md has its crate table: {table:?}"
    );
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let Some(description) = cargo_description(root, &name) else {
            panic!("crates/{name}/Cargo.toml has no `description = \"...\"` line: give it one, and the same words in the crate table of docs/ARCHITECTURE.md");
        };
        match table.iter().find(|(n, _)| *n == name) {
            None => panic!(
                "crate {name} has no row in the crate table of docs/ARCHITECTURE.md: add `| `crates/{name}` | {description} | ... |`"
            ),
            Some((_, concern)) => assert_eq!(
                concern, &description,
                "the crate table of docs/ARCHITECTURE.md and crates/{name}/Cargo.toml's description disagree: make them the same words"
            ),
        }
    }
    for (name, _) in &table {
        assert!(
            root.join("crates").join(name).is_dir(),
            "the crate table of docs/ARCHITECTURE.md names crates/{name}, which does not exist"
        );
    }
}
