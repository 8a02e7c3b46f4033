//! Docs resources: every document is listed, a read returns exactly the
//! indexed body, and search and resources agree (one set of bytes).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic

use std::path::PathBuf;
use std::sync::Arc;

use evidence_wire_docs::{DocsLimits, DocsRegistry, MIME_TYPE, URI_PREFIX};

fn spec_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../spec"))
}

fn default_registry() -> DocsRegistry {
    DocsRegistry::with_default_corpus(DocsLimits::default()).unwrap()
}

#[test]
fn list_names_every_document_once() {
    let registry = default_registry();
    let list = registry.list();
    assert_eq!(list.len(), registry.docs().len());
    assert!(list.len() >= 8, "the default corpus has the spec documents");
    let mut uris: Vec<&str> = list.iter().map(|entry| entry.uri).collect();
    for (entry, doc) in list.iter().zip(registry.docs()) {
        assert_eq!(entry.uri, format!("{URI_PREFIX}{}", doc.id()));
        assert_eq!(entry.name, doc.id());
        assert_eq!(entry.title, doc.title());
        assert_eq!(entry.mime_type, MIME_TYPE);
        assert!(!entry.description.is_empty());
    }
    uris.sort_unstable();
    uris.dedup();
    assert_eq!(uris.len(), list.len(), "URIs are unique");
}

#[test]
fn default_corpus_embeds_the_spec_files_byte_for_byte() {
    if !spec_dir().is_dir() {
        eprintln!(
            "note: {} is absent (a packaged crate): nothing to compare the corpus with",
            spec_dir().display()
        );
        return;
    }
    let registry = default_registry();
    let expected = [
        ("overview", "README.md"),
        ("protocol", "protocol.md"),
        ("framing", "framing.md"),
        ("errors", "errors.md"),
        ("security", "security.md"),
        ("docs-search", "docs-search.md"),
        ("calling-a-provider", "guides/calling-a-provider.md"),
        ("provider-quickstart", "guides/provider-quickstart.md"),
    ];
    for (id, file) in expected {
        let on_disk = std::fs::read_to_string(spec_dir().join(file)).unwrap();
        let read = registry
            .read(&format!("{URI_PREFIX}{id}"))
            .unwrap_or_else(|| panic!("{id} is served"));
        assert_eq!(read.text, on_disk, "{id} is {file} exactly");
        assert_eq!(read.mime_type, MIME_TYPE);
    }
    // Every spec/*.md present on disk is in the corpus.
    let embedded: Vec<&str> = registry.docs().iter().map(|doc| doc.body()).collect();
    for entry in std::fs::read_dir(spec_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) == Some("md") {
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(
                embedded.contains(&text.as_str()),
                "{} is not in the default corpus; copy it to docs/corpus/ and add it to docs/src/corpus.rs",
                path.display()
            );
        }
    }
}

#[test]
fn read_returns_the_indexed_bytes_and_shares_them() {
    let registry = default_registry();
    for doc in registry.docs() {
        let read = registry.read(doc.uri()).unwrap();
        assert_eq!(read.text, doc.body());
        assert_eq!(read.uri, doc.uri());
        // Same allocation, not a copy.
        assert!(std::ptr::eq(read.text.as_ptr(), doc.body().as_ptr()));
    }
    let resources = registry.resources();
    assert_eq!(resources.len(), registry.docs().len());
    for (resource, doc) in resources.iter().zip(registry.docs()) {
        assert!(Arc::ptr_eq(&resource.text, &doc.body_shared()));
        assert_eq!(resource.uri, doc.uri());
        assert_eq!(resource.mime_type, MIME_TYPE);
    }
}

#[test]
fn unknown_and_traversal_uris_are_not_found() {
    let registry = default_registry();
    for uri in [
        "decision-gate://docs/nope",
        "decision-gate://docs/../../etc/passwd",
        "decision-gate://docs/framing/../errors",
        "decision-gate://docs/FRAMING",
        "decision-gate://docs/framing ",
        "decision-gate://docs/",
        "file:///etc/passwd",
        "framing",
        "",
    ] {
        assert!(registry.read(uri).is_none(), "{uri:?} is unknown");
    }
}

#[test]
fn search_sections_are_slices_of_the_served_documents() {
    let registry = default_registry();
    for query in [
        "framing limits",
        "error codes",
        "evidence hash",
        "dialect",
        "",
    ] {
        let output = registry.search(query, Some(10)).unwrap();
        assert!(!output.sections.is_empty(), "{query:?} finds something");
        for hit in &output.sections {
            let covered = output
                .docs_covered
                .iter()
                .find(|doc| doc.id == hit.doc_id)
                .expect("every section's document is covered");
            let served = registry.read(covered.uri).unwrap().text;
            // The content points into the served body itself.
            let start = hit.content.as_ptr() as usize;
            let base = served.as_ptr() as usize;
            assert!(
                start >= base && start + hit.content.len() <= base + served.len(),
                "section {:?} of {} is a slice of the served bytes",
                hit.heading,
                hit.doc_id
            );
            assert_eq!(covered.role, hit.role);
        }
        for doc in &output.docs_covered {
            assert!(
                output.sections.iter().any(|hit| hit.doc_id == doc.id),
                "{} is covered only if it gave a section",
                doc.id
            );
        }
    }
}
