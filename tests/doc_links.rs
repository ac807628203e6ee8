//! The README and the documents under `docs/` link to each other and to files of this
//! repository; every relative link must lead to a file that exists, so a moved or renamed
//! document breaks this test instead of a newcomer's reading.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

/// README.md and every `docs/*.md`.
fn documents(root: &Path) -> Vec<PathBuf> {
    let mut docs = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            docs.push(path);
        }
    }
    docs.sort();
    docs
}

/// The targets of a Markdown text's links (`[text](target)`, `![alt](target)`) and of its
/// HTML images (`src="target"`).
fn link_targets(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in text.match_indices("](") {
        let rest = &text[i + 2..];
        if let Some(end) = rest.find(')') {
            out.push(rest[..end].to_string());
        }
    }
    for (i, _) in text.match_indices("src=\"") {
        let rest = &text[i + 5..];
        if let Some(end) = rest.find('"') {
            out.push(rest[..end].to_string());
        }
    }
    out
}

/// A target that names a file of this repository: not a web address, not an anchor alone.
fn local_file(target: &str) -> Option<&str> {
    let target = target.split_whitespace().next()?;
    if target.contains("://") || target.starts_with("mailto:") || target.starts_with('#') {
        return None;
    }
    Some(target.split('#').next().unwrap_or(target))
}

#[test]
fn every_relative_link_in_the_docs_resolves() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut checked = 0;
    let mut broken = Vec::new();
    for doc in documents(root) {
        let text = std::fs::read_to_string(&doc).unwrap();
        let dir = doc.parent().unwrap();
        for target in link_targets(&text) {
            let Some(file) = local_file(&target) else {
                continue;
            };
            checked += 1;
            if !dir.join(file).exists() {
                broken.push(format!(
                    "{}: {target}",
                    doc.strip_prefix(root).unwrap().display()
                ));
            }
        }
    }
    assert!(
        checked > 10,
        "the docs link to each other ({checked} links found)"
    );
    assert!(broken.is_empty(), "links that lead nowhere: {broken:#?}");
}

#[test]
fn the_link_reader_finds_links_and_images() {
    let text = "see [the guide](docs/GUIDE.md#models), ![shot](a.png) and \
                <img src=\"b.png\" alt=\"x\"> or [web](https://example.com)";
    let targets = link_targets(text);
    assert_eq!(
        targets,
        [
            "docs/GUIDE.md#models",
            "a.png",
            "https://example.com",
            "b.png"
        ]
    );
    let files: Vec<_> = targets.iter().filter_map(|t| local_file(t)).collect();
    assert_eq!(files, ["docs/GUIDE.md", "a.png", "b.png"]);
}
