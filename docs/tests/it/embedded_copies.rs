//! The corpus is a copy of `spec/` kept inside this crate (`corpus/`), so
//! the crate builds from its package alone. These tests keep the copy
//! honest: every file under `corpus/` equals its original under `spec/`
//! (run `scripts/sync-embedded` after editing `spec/`), every spec document
//! and guide has a copy, and every copy is served by the default corpus.
//! The comparisons with `spec/` are skipped, with a note, where `spec/` is
//! absent (a packaged crate).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic

use std::fs;
use std::path::{Path, PathBuf};

use evidence_wire_docs::{DocsLimits, DocsRegistry};

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn corpus_dir() -> PathBuf {
    crate_dir().join("corpus")
}

/// `spec/` of the repository, or `None` (with a note) when it is absent.
fn spec_dir() -> Option<PathBuf> {
    let spec = crate_dir().join("../spec");
    if spec.is_dir() {
        Some(spec)
    } else {
        eprintln!(
            "note: {} is absent (a packaged crate): the corpus copies are not compared with their originals",
            spec.display()
        );
        None
    }
}

/// Every file below `dir`, as paths relative to `dir`, sorted.
fn files_below(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(relative) = pending.pop() {
        for entry in fs::read_dir(dir.join(&relative)).unwrap() {
            let entry = entry.unwrap();
            let path = relative.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                pending.push(path);
            } else {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

#[test]
fn every_corpus_copy_equals_its_spec_original() {
    let Some(spec) = spec_dir() else { return };
    let copies = files_below(&corpus_dir());
    assert!(!copies.is_empty(), "corpus/ holds the embedded documents");
    let mut stale = Vec::new();
    for relative in &copies {
        let original = spec.join(relative);
        let copy = fs::read(corpus_dir().join(relative)).unwrap();
        match fs::read(&original) {
            Ok(original) if original == copy => {}
            Ok(_) => stale.push(format!("{} differs from spec/", relative.display())),
            Err(error) => stale.push(format!(
                "{} has no original ({}: {error}); remove the copy or restore the original",
                relative.display(),
                original.display()
            )),
        }
    }
    assert!(
        stale.is_empty(),
        "docs/corpus/ is out of date with spec/: {stale:?}; run scripts/sync-embedded"
    );
}

#[test]
fn every_spec_document_and_guide_has_a_copy() {
    let Some(spec) = spec_dir() else { return };
    let copies = files_below(&corpus_dir());
    let mut missing = Vec::new();
    for folder in ["", "guides"] {
        for entry in fs::read_dir(spec.join(folder)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().and_then(|ext| ext.to_str()) != Some("md") {
                continue;
            }
            let relative = Path::new(folder).join(path.file_name().unwrap());
            if !copies.contains(&relative) {
                missing.push(relative.display().to_string());
            }
        }
    }
    assert!(
        missing.is_empty(),
        "spec documents missing from the corpus: {missing:?}; copy each to docs/corpus/ and add it to docs/src/corpus.rs"
    );
}

#[test]
fn every_corpus_copy_is_served() {
    let registry = DocsRegistry::with_default_corpus(DocsLimits::default()).unwrap();
    for relative in files_below(&corpus_dir()) {
        let text = fs::read_to_string(corpus_dir().join(&relative)).unwrap();
        assert!(
            registry.docs().iter().any(|doc| doc.body() == text),
            "corpus/{} is not in the default corpus; add it to docs/src/corpus.rs",
            relative.display()
        );
    }
}
