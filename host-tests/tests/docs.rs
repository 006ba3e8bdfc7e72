//! The design (docs/design.md and its parts, docs/design/*.md) stays true
//! to the code: every type, trait, enum variant
//! or function it names in backticks as `CamelCase` (alone, or followed by
//! `::item`, `<..>` or `(..)`) is defined somewhere in the workspace's
//! sources, unless it is one of the few outside names listed here. A type
//! renamed or removed without its description fails this test.

#![allow(clippy::expect_used)]

use std::path::{Path, PathBuf};

/// Names the design uses that belong to std or to redb, not to pollfs.
const OUTSIDE: &[&str] = &[
    "Arc",
    "Rc",
    "Send",
    "From",
    "UnexpectedEof",
    "Database",
    "StorageBackend",
    "ExclusiveWriter",
    "SingleWriter",
    "MultiWriter",
    // fuser's trait (its extension for the ring is in vendor/fuser) and
    // the io-uring crate's command entry.
    "Filesystem",
    "UringCmd80",
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host-tests sits in the workspace")
        .to_path_buf()
}

fn sources(dir: &Path, out: &mut String) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        let name = e.file_name();
        if name == "target" || name.to_string_lossy().starts_with('.') {
            continue;
        }
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push_str(&std::fs::read_to_string(&path).unwrap_or_default());
            out.push('\n');
        }
    }
}

/// The `CamelCase` names in backticks: a name alone or followed by
/// `::item`, `<..>` or `(..)`.
fn named_types(doc: &str) -> Vec<String> {
    let mut names: Vec<String> = doc
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|t| !t.contains('\n'))
        .filter_map(|t| {
            let t = t.trim();
            let end = t
                .find(|c: char| !c.is_ascii_alphanumeric() && c != '_')
                .unwrap_or(t.len());
            let (name, rest) = t.split_at(end);
            let camel = name.starts_with(|c: char| c.is_ascii_uppercase())
                && name.chars().any(|c| c.is_ascii_lowercase());
            let shaped = rest.is_empty()
                || rest.starts_with("::")
                || (rest.starts_with('<') && rest.ends_with('>'))
                || (rest.starts_with('(') && rest.ends_with(')'));
            (camel && shaped).then(|| name.to_string())
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Whether `src` defines `name`: as a type, trait, function, or an enum
/// variant or constant at the start of a line.
fn defines(src: &str, name: &str) -> bool {
    let declared = ["struct", "enum", "trait", "type", "union", "fn"]
        .iter()
        .any(|kw| {
            src.match_indices(&format!("{kw} {name}")).any(|(i, m)| {
                let after = src[i + m.len()..].chars().next();
                !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
            })
        });
    declared
        || src.lines().any(|line| {
            line.trim_start()
                .strip_prefix(name)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with([',', '(', ' ', '{', '=']))
        })
}

#[test]
fn every_type_design_md_names_exists() {
    let root = workspace();
    let mut doc = std::fs::read_to_string(root.join("docs/design.md")).expect("docs/design.md");
    let mut parts: Vec<PathBuf> = std::fs::read_dir(root.join("docs/design"))
        .expect("docs/design")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    parts.sort();
    assert!(parts.len() >= 10, "the design's parts: {parts:?}");
    for part in &parts {
        doc.push_str(&std::fs::read_to_string(part).expect("a part of the design"));
    }
    let mut src = String::new();
    for dir in [
        "core",
        "driver",
        "host-tests",
        "cli",
        "device",
        "capi",
        "redb-backend",
        "fuzz",
        "vendor",
    ] {
        sources(&root.join(dir), &mut src);
    }
    let names = named_types(&doc);
    assert!(names.len() > 40, "too few names found: {names:?}");
    let missing: Vec<&String> = names
        .iter()
        .filter(|n| !OUTSIDE.contains(&n.as_str()) && !defines(&src, n))
        .collect();
    assert!(
        missing.is_empty(),
        "the design names types the code no longer has: {missing:?}"
    );
}

#[test]
fn a_name_the_code_does_not_have_is_found() {
    let doc = "The `Journal` stages records; the `MetaSink` hears of changes.";
    let src = "pub enum Journal { Log, Memory }";
    let names = named_types(doc);
    assert_eq!(names, ["Journal", "MetaSink"]);
    assert!(defines(src, "Journal"));
    assert!(!defines(src, "MetaSink"));
}
