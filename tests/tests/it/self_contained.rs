//! The repository stands alone: no tracked file names a path that climbs
//! out of the repository root, or the project's sibling folders beside it.
//!
//! A relative path is resolved from every directory it could be meant
//! relative to: a Markdown or other document's own folder; for Rust code the
//! file's folder and each folder up to its crate's root (`include_str!` and
//! `#[path]` are file-relative, `env!("CARGO_MANIFEST_DIR")` joins are
//! crate-relative); for scripts the file's folder and the repository root
//! (they `cd` there). Climbing above the root from any of them fails the
//! test, with the file, the line and the path.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic

use std::path::{Component, Path, PathBuf};
use std::process::Command;

fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate sits in the repository")
        .to_path_buf()
}

/// Every tracked file (relative paths). Outside a git checkout (a source
/// archive), every file under the root except build and peer folders.
fn tracked_files(root: &Path) -> Vec<PathBuf> {
    let listed = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(root)
        .output();
    if let Ok(out) = listed
        && out.status.success()
        && !out.stdout.is_empty()
    {
        return out
            .stdout
            .split(|b| *b == 0)
            .filter(|name| !name.is_empty())
            .map(|name| PathBuf::from(String::from_utf8_lossy(name).into_owned()))
            .collect();
    }
    let mut files = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(root.join(&dir)).unwrap() {
            let entry = entry.unwrap();
            let relative = dir.join(entry.file_name());
            let name = entry.file_name();
            if [".git", "target", ".peers", "node_modules"].contains(&name.to_str().unwrap_or("")) {
                continue;
            }
            if entry.file_type().unwrap().is_dir() {
                stack.push(relative);
            } else {
                files.push(relative);
            }
        }
    }
    files
}

/// The folders (relative to the root) a relative path on `line` of `file`
/// may be resolved from.
fn bases(root: &Path, file: &Path, line: &str) -> Vec<PathBuf> {
    let folder = file.parent().unwrap_or(Path::new("")).to_path_buf();
    let extension = file.extension().and_then(|e| e.to_str()).unwrap_or("");
    let is_script = file.starts_with("scripts") || file.starts_with(".ci") || extension == "sh";
    if extension == "rs" {
        if line.contains("#[path") {
            // Relative to the module's own folder: `foo/` beside `foo.rs`.
            let own = match file.file_stem().and_then(|s| s.to_str()) {
                Some("mod" | "main" | "lib") | None => folder,
                Some(stem) => folder.join(stem),
            };
            return vec![own];
        }
        if line.contains("include_str!") || line.contains("include_bytes!") {
            return vec![folder];
        }
        // Run-time paths: from the crate's root (where `cargo test` runs
        // and what `CARGO_MANIFEST_DIR` names), and the file's folder.
        let mut crate_root = Some(folder.as_path());
        while let Some(dir) = crate_root {
            if root.join(dir).join("Cargo.toml").is_file() {
                break;
            }
            crate_root = dir.parent();
        }
        let crate_root = crate_root.unwrap_or(Path::new("")).to_path_buf();
        return vec![crate_root, folder];
    }
    if is_script {
        // `cd "$(dirname "$0")/.."` is relative to the script's folder;
        // other paths to the root the scripts `cd` to.
        if line.contains("dirname") {
            return vec![folder];
        }
        return vec![folder, PathBuf::new()];
    }
    vec![folder]
}

/// The path `text` names, resolved from `base`: `None` when it climbs above
/// the root.
fn resolve(base: &Path, text: &str) -> Option<PathBuf> {
    let mut depth: Vec<String> = base
        .components()
        .filter_map(|c| match c {
            Component::Normal(part) => Some(part.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    for part in text.trim_start_matches('/').split('/') {
        match part {
            "" | "." => {}
            ".." => {
                depth.pop()?;
            }
            other => depth.push(other.to_owned()),
        }
    }
    Some(depth.iter().collect())
}

/// Path-like tokens in `line` that contain a `..` segment (URIs aside).
fn climbing_tokens(line: &str) -> Vec<&str> {
    let is_path_byte = |b: u8| b.is_ascii_alphanumeric() || b"_-./:~$".contains(&b);
    let bytes = line.as_bytes();
    let mut out = Vec::new();
    let mut start = 0;
    while start < bytes.len() {
        if !is_path_byte(bytes[start]) {
            start += 1;
            continue;
        }
        let mut end = start;
        while end < bytes.len() && is_path_byte(bytes[end]) {
            end += 1;
        }
        let token = &line[start..end];
        let climbs = token.split('/').any(|part| part == "..");
        if climbs && !token.contains("://") {
            out.push(token);
        }
        start = end;
    }
    out
}

/// Names of the folders that sit beside the repository on the project's
/// own machines, which a clone elsewhere does not have.
const SIBLING_NAMES: &[&str] = &[
    "shared/vectors",
    "shared/reference",
    "shared/seeds",
    "shared/hooks",
    "shared/DESIGN.md",
    "EVIDENCE_WIRE_VECTORS",
];

/// Every place in `text` (the contents of `file`) that points outside the
/// repository, as `file:line: why`.
fn outside_references(root: &Path, file: &Path, text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let bases = bases(root, file, line);
        for name in SIBLING_NAMES {
            if line.contains(name) {
                found.push(format!(
                    "{}:{}: names `{name}`, which is not in the repository",
                    file.display(),
                    number + 1
                ));
            }
        }
        for token in climbing_tokens(line) {
            // `$VAR/..` and `~/..` start outside any base we know: flag them.
            let anchored = token.starts_with('$') || token.starts_with('~');
            if anchored || bases.iter().any(|base| resolve(base, token).is_none()) {
                found.push(format!(
                    "{}:{}: `{token}` climbs out of the repository root",
                    file.display(),
                    number + 1
                ));
            }
        }
    }
    found
}

#[test]
fn no_tracked_file_points_outside_the_repository() {
    let root = repository_root();
    let this_file = Path::new("tests/tests/it/self_contained.rs");
    let mut found = Vec::new();
    let mut scanned = 0;
    for file in tracked_files(&root) {
        if file == this_file {
            continue; // its own examples
        }
        let Ok(bytes) = std::fs::read(root.join(&file)) else {
            continue; // a symlink to nowhere, or removed since listing
        };
        if bytes.contains(&0) {
            continue; // binary
        }
        scanned += 1;
        let text = String::from_utf8_lossy(&bytes);
        found.extend(outside_references(&root, &file, &text));
    }
    assert!(
        scanned > 300,
        "only {scanned} files scanned: is this the repository?"
    );
    assert!(
        found.is_empty(),
        "{} reference(s) outside the repository (vendor what is needed under it):\n{}",
        found.len(),
        found.join("\n")
    );
}

#[test]
fn the_guard_flags_what_climbs_out_and_keeps_what_stays_in() {
    let root = repository_root();
    let flagged =
        |file: &str, text: &str| !outside_references(&root, Path::new(file), text).is_empty();
    // What the core's vector tests used to read.
    assert!(flagged(
        "core/tests/it/frame_vectors.rs",
        r#"PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/x"))"#
    ));
    assert!(flagged(
        "core/src/envelope/scan.rs",
        "let dir = \"/../../elsewhere\";"
    ));
    assert!(flagged("scripts/test", "cat ../outside/file"));
    assert!(flagged("scripts/test", r#"cd "$(dirname "$0")/../..""#));
    assert!(flagged("README.md", "see [this](../../outside.md)"));
    assert!(flagged(
        "spec/guides/x.md",
        "see [this](../../../outside.md)"
    ));
    assert!(flagged("spec/x.md", "read from `shared/vectors/jcs`"));
    // Paths that stay inside.
    assert!(!flagged(
        "core/src/envelope/scan.rs",
        r#"join("../fuzz/corpus/x")"#
    ));
    assert!(!flagged(
        "core/tests/it/fuzz_corpus.rs",
        r#"#[path = "../../../fuzz/a.rs"]"#
    ));
    assert!(!flagged(
        "spec/guides/x.md",
        "see [the README](../../README.md)"
    ));
    assert!(!flagged("scripts/test", r#"cd "$(dirname "$0")/..""#));
    assert!(!flagged(
        "spec/x.md",
        "`decision-gate://docs/../../etc/passwd` is refused"
    ));
    assert!(!flagged(
        "tests/peers/x.mjs",
        r#"resolve(here, "../../.peers/node")"#
    ));
}
