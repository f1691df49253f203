//! The crate graph is the one docs/ARCHITECTURE.md draws ("Crate arrows"): every dependency of a
//! workspace crate on another (normal, dev or build) is written there, and everything written
//! there is a dependency. No server, no root: it reads files.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .and_then(Path::parent)
        .unwrap()
}

/// The Lizard crates a `Cargo.toml` depends on, in any dependency table.
fn lizard_deps(manifest: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut in_deps = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            let table = line.trim_matches(|c| c == '[' || c == ']');
            in_deps = table.ends_with("dependencies");
            // `[dependencies.lizard-x]` form.
            if let Some(name) = table.rsplit('.').next().filter(|n| n.starts_with("lizard")) {
                if table.contains("dependencies.") {
                    out.insert(name.to_string());
                }
            }
            continue;
        }
        if !in_deps {
            continue;
        }
        let name = line.split(['=', '.', ' ']).next().unwrap_or("").trim();
        if name.starts_with("lizard") {
            out.insert(name.to_string());
        }
    }
    out
}

/// The arrows ARCHITECTURE.md writes between its `crate-arrows` markers.
fn documented() -> BTreeMap<String, BTreeSet<String>> {
    let doc = std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap();
    let start = doc
        .find("<!-- crate-arrows -->")
        .expect("the crate-arrows block");
    let end = doc
        .find("<!-- /crate-arrows -->")
        .expect("the crate-arrows block's end");
    doc[start + "<!-- crate-arrows -->".len()..end]
        .lines()
        .filter_map(|l| l.split_once("->"))
        .map(|(from, to)| {
            (
                from.trim().to_string(),
                to.split_whitespace().map(str::to_string).collect(),
            )
        })
        .collect()
}

#[test]
fn every_crate_arrow_is_the_documented_one() {
    let mut actual = BTreeMap::new();
    for entry in std::fs::read_dir(root().join("crates")).unwrap() {
        let dir = entry.unwrap().path();
        let Ok(manifest) = std::fs::read_to_string(dir.join("Cargo.toml")) else {
            continue;
        };
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        actual.insert(name, lizard_deps(&manifest));
    }
    assert!(actual.len() >= 10, "found only {actual:?}");
    let documented = documented();
    assert_eq!(
        actual, documented,
        "the crate arrows (left: the Cargo.toml files, right: docs/ARCHITECTURE.md, \
         \"Crate arrows\") differ: change the code or the document, deliberately"
    );
}

#[test]
fn the_manifest_reader_finds_every_table() {
    let m = "[package]\nname = \"x\"\n[dependencies]\nlizard-proto.workspace = true\n\
             serde = \"1\"\nlizard-jail = { path = \"../lizard-jail\" }\n\
             [dev-dependencies]\nlizard-http.workspace = true\n\
             [dependencies.lizard-egress]\nworkspace = true\n[lints]\nlizard-fake = 1\n";
    let got: Vec<String> = lizard_deps(m).into_iter().collect();
    assert_eq!(
        got,
        [
            "lizard-egress",
            "lizard-http",
            "lizard-jail",
            "lizard-proto"
        ]
    );
}
