//! Extra documents from `[docs] extra_paths`: path traversal (symlinks
//! out of the configured paths), size and count limits, scan rules, and
//! ranking that does not depend on the order of the configured paths.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use evidence_wire_config::DocsConfig;
use evidence_wire_docs::{
    DocsError, DocsLimits, DocsProblem, DocsRegistry, DocsSurface, MAX_SCAN_DEPTH, load_extra,
};

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "evidence-wire-docs-{}-{}-{name}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }

    fn write(&self, relative: &str, text: &str) -> PathBuf {
        let path = self.0.join(relative);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, text).unwrap();
        path
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.0.join(relative)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn ids(registry: &DocsRegistry) -> Vec<&str> {
    registry.docs().iter().map(|doc| doc.id()).collect()
}

fn empty_registry(limits: DocsLimits) -> DocsRegistry {
    DocsRegistry::new(limits)
}

#[test]
fn loads_files_and_directories_sorted_by_path() {
    let dir = TempDir::new("load");
    dir.write(
        "notes/zeta.md",
        "# Zeta notes\n\nHow to rotate keys.\n\n## Rotation\n\nSteps.\n",
    );
    dir.write("notes/sub/alpha.md", "# Alpha\n\nWhy we verify.\n");
    dir.write("notes/ignored.txt", "not markdown");
    dir.write("notes/.hidden.md", "# Hidden\n");
    dir.write("notes/.git/config.md", "# In a dot directory\n");
    let single = dir.write("single/My Runbook.md", "# Runbook\n\nOn-call steps.\n");
    let mut registry = empty_registry(DocsLimits::default());
    let warnings = registry.load_extra_paths(&[dir.path("notes"), single]);
    assert!(warnings.is_empty(), "{warnings:?}");
    // Sorted by canonical path: notes/sub/alpha, notes/zeta, single/My Runbook.
    assert_eq!(ids(&registry), ["alpha", "zeta", "my-runbook"]);
    let zeta = registry.doc("zeta").unwrap();
    assert_eq!(zeta.title(), "Zeta notes");
    assert_eq!(zeta.description(), "How to rotate keys.");
    assert_eq!(zeta.uri(), "decision-gate://docs/zeta");
    let hits = registry.search("rotation", None).unwrap();
    assert_eq!(hits.sections[0].doc_id, "zeta");
    assert_eq!(hits.sections[0].heading, "Rotation");
}

#[test]
fn extra_path_order_does_not_change_the_catalog_or_ranking() {
    let dir = TempDir::new("order");
    dir.write(
        "a/limits.md",
        "# Limits\n\n## Body limit\n\nOne MiB by default.\n",
    );
    dir.write(
        "b/limit-notes.md",
        "# Limit notes\n\n## Body limit\n\nRaise it with care.\n",
    );
    dir.write("c/other.md", "# Other\n\nThe body limit is configurable.\n");
    let paths = [dir.path("a"), dir.path("b"), dir.path("c")];
    let orders: [[usize; 3]; 4] = [[0, 1, 2], [2, 1, 0], [1, 2, 0], [2, 0, 1]];
    let mut answers = Vec::new();
    for order in orders {
        let shuffled: Vec<PathBuf> = order.iter().map(|index| paths[*index].clone()).collect();
        let mut registry = DocsRegistry::with_default_corpus(DocsLimits::default()).unwrap();
        assert!(registry.load_extra_paths(&shuffled).is_empty());
        let ranking =
            serde_json::to_vec(&registry.search("body limit", Some(10)).unwrap()).unwrap();
        let listing = serde_json::to_vec(&registry.list()).unwrap();
        answers.push((ranking, listing));
    }
    assert!(answers.windows(2).all(|pair| pair[0] == pair[1]));
    // The same directory listed twice (or through `..`) loads once.
    let mut registry = empty_registry(DocsLimits::default());
    let twice = [dir.path("a"), dir.path("b/../a")];
    assert!(registry.load_extra_paths(&twice).is_empty());
    assert_eq!(ids(&registry), ["limits"]);
}

#[cfg(unix)]
#[test]
fn symlinks_out_of_the_configured_paths_are_refused() {
    use std::os::unix::fs::symlink;
    let dir = TempDir::new("traversal");
    let secret = dir.write("secret/passwords.md", "# Secret\n\nhunter2\n");
    dir.write("secret/more/keys.md", "# Keys\n\nprivate\n");
    dir.write("docs/good.md", "# Good\n\nPublic text.\n");
    symlink(&secret, dir.path("docs/evil.md")).unwrap();
    symlink(dir.path("secret/more"), dir.path("docs/linked-dir")).unwrap();
    symlink(dir.path("docs"), dir.path("docs/loop")).unwrap();
    // A link that stays inside is followed.
    symlink(dir.path("docs/good.md"), dir.path("docs/alias.md")).unwrap();

    let mut registry = empty_registry(DocsLimits::default());
    let warnings = registry.load_extra_paths(&[dir.path("docs")]);
    assert_eq!(
        ids(&registry),
        ["good"],
        "alias resolves to good.md, loaded once"
    );
    for doc in registry.docs() {
        assert!(!doc.body().contains("hunter2") && !doc.body().contains("private"));
    }
    let outside: Vec<&str> = warnings
        .iter()
        .filter(|warning| matches!(warning.problem, DocsProblem::OutsideConfiguredPaths(_)))
        .map(|warning| warning.source.as_str())
        .collect();
    assert_eq!(outside.len(), 2, "{warnings:?}");
    assert!(outside.iter().any(|source| source.ends_with("evil.md")));
    assert!(outside.iter().any(|source| source.ends_with("linked-dir")));
    assert!(
        warnings
            .iter()
            .all(|warning| !warning.to_string().is_empty())
    );

    // `..` in a configured path is the operator's explicit choice: it is
    // canonicalized, and only what it names is read.
    let mut registry = empty_registry(DocsLimits::default());
    let warnings = registry.load_extra_paths(&[dir.path("docs/../secret/passwords.md")]);
    assert!(warnings.is_empty());
    assert_eq!(ids(&registry), ["passwords"]);
}

#[test]
fn oversize_documents_are_skipped_with_a_warning() {
    let dir = TempDir::new("oversize");
    dir.write("docs/a-small.md", "# Small\n\nFine.\n");
    dir.write("docs/b-big.md", &format!("# Big\n\n{}\n", "x".repeat(2000)));
    dir.write("docs/c-small.md", "# Also small\n\nFine too.\n");
    let limits = DocsLimits {
        max_doc_bytes: 1000,
        ..DocsLimits::default()
    };
    let mut registry = empty_registry(limits);
    let warnings = registry.load_extra_paths(&[dir.path("docs")]);
    assert_eq!(ids(&registry), ["a-small", "c-small"]);
    assert_eq!(warnings.len(), 1);
    match &warnings[0].problem {
        DocsProblem::Refused(DocsError::DocTooLarge { id, bytes, limit }) => {
            assert_eq!(id, "b-big");
            assert_eq!(*bytes, 2008);
            assert_eq!(*limit, 1000);
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(warnings[0].to_string().contains("max_doc_bytes"));
}

#[test]
fn total_and_count_limits_are_fail_closed() {
    let dir = TempDir::new("total");
    for name in ["a", "b", "c", "d"] {
        dir.write(
            &format!("docs/{name}.md"),
            &format!("# {name}\n\n{}\n", "y".repeat(90)),
        );
    }
    // Each file is 96 bytes: two fit in 200, the third would not.
    let limits = DocsLimits {
        max_doc_bytes: 150,
        max_total_bytes: 200,
        ..DocsLimits::default()
    };
    let loaded = load_extra(&[dir.path("docs")], &limits);
    let loaded_ids: Vec<&str> = loaded.docs.iter().map(|doc| doc.id.as_str()).collect();
    assert_eq!(loaded_ids, ["a", "b"]);
    assert_eq!(loaded.warnings.len(), 2);
    assert!(loaded.warnings.iter().all(|warning| matches!(
        warning.problem,
        DocsProblem::Refused(DocsError::TotalTooLarge { limit: 200, .. })
    )));

    let limits = DocsLimits {
        max_docs: 3,
        ..DocsLimits::default()
    };
    let mut registry = empty_registry(limits);
    let warnings = registry.load_extra_paths(&[dir.path("docs")]);
    assert_eq!(ids(&registry), ["a", "b", "c"]);
    assert!(matches!(
        warnings.as_slice(),
        [warning] if matches!(warning.problem, DocsProblem::Refused(DocsError::TooManyDocs { limit: 3, .. }))
    ));
}

#[test]
fn extra_documents_count_against_what_the_default_corpus_left() {
    let dir = TempDir::new("remaining");
    dir.write("docs/extra.md", "# Extra\n\nMore.\n");
    let corpus = DocsRegistry::with_default_corpus(DocsLimits::default()).unwrap();
    let limits = DocsLimits {
        max_docs: corpus.docs().len(),
        ..DocsLimits::default()
    };
    let mut full = DocsRegistry::with_default_corpus(limits).unwrap();
    let warnings = full.load_extra_paths(&[dir.path("docs")]);
    assert_eq!(full.docs().len(), corpus.docs().len());
    assert!(matches!(
        warnings[0].problem,
        DocsProblem::Refused(DocsError::TooManyDocs { .. })
    ));
    let limits = DocsLimits {
        max_total_bytes: corpus.total_bytes() + 5,
        ..DocsLimits::default()
    };
    let mut tight = DocsRegistry::with_default_corpus(limits).unwrap();
    let warnings = tight.load_extra_paths(&[dir.path("docs")]);
    assert!(matches!(
        warnings[0].problem,
        DocsProblem::Refused(DocsError::TotalTooLarge { .. })
    ));
}

#[test]
fn default_corpus_over_a_limit_fails_start_up() {
    let small = DocsLimits {
        max_doc_bytes: 100,
        ..DocsLimits::default()
    };
    assert!(matches!(
        DocsRegistry::with_default_corpus(small),
        Err(DocsError::DocTooLarge { .. })
    ));
    let few = DocsLimits {
        max_docs: 2,
        ..DocsLimits::default()
    };
    assert!(matches!(
        DocsRegistry::with_default_corpus(few),
        Err(DocsError::TooManyDocs { limit: 2, .. })
    ));
    let mut config = DocsConfig::default();
    config.max_docs = 1;
    assert!(DocsSurface::from_config(&config).is_err());
    // With the default docs excluded the same limits are fine.
    config.include_default_docs = false;
    assert!(DocsSurface::from_config(&config).is_ok());
}

#[test]
fn unusable_files_are_reported() {
    let dir = TempDir::new("unusable");
    fs::create_dir_all(dir.path("docs")).unwrap();
    fs::write(dir.path("docs/binary.md"), [0xff, 0xfe, 0x00, 0x41]).unwrap();
    dir.write("docs/framing.md", "# My framing\n\nDuplicate id.\n");
    dir.write("docs/---.md", "# No id\n");
    dir.write("plain.txt", "text");
    let mut registry = DocsRegistry::with_default_corpus(DocsLimits::default()).unwrap();
    let before = registry.docs().len();
    let warnings = registry.load_extra_paths(&[
        dir.path("docs"),
        dir.path("plain.txt"),
        dir.path("does-not-exist"),
    ]);
    assert_eq!(registry.docs().len(), before);
    let problems: Vec<&DocsProblem> = warnings.iter().map(|warning| &warning.problem).collect();
    assert!(problems.iter().any(|p| matches!(p, DocsProblem::NotUtf8)));
    assert!(problems.iter().any(|p| matches!(p, DocsProblem::NoId)));
    assert!(
        problems
            .iter()
            .any(|p| matches!(p, DocsProblem::NotMarkdown))
    );
    assert!(
        problems
            .iter()
            .any(|p| matches!(p, DocsProblem::NotFound(_)))
    );
    assert!(problems.iter().any(|p| matches!(
        p,
        DocsProblem::Refused(DocsError::DuplicateId { id }) if id == "framing"
    )));
    assert_eq!(warnings.len(), 5, "{warnings:?}");
    // The embedded framing document is untouched.
    assert_ne!(registry.doc("framing").unwrap().title(), "My framing");
}

#[test]
fn deep_trees_stop_at_the_depth_limit() {
    let dir = TempDir::new("deep");
    let mut relative = String::from("docs");
    for level in 0..=MAX_SCAN_DEPTH + 1 {
        relative.push_str(&format!("/d{level}"));
    }
    dir.write(&format!("{relative}/deep.md"), "# Deep\n");
    dir.write("docs/d0/shallow.md", "# Shallow\n");
    let mut registry = empty_registry(DocsLimits::default());
    let warnings = registry.load_extra_paths(&[dir.path("docs")]);
    assert_eq!(ids(&registry), ["shallow"]);
    assert!(matches!(
        warnings.as_slice(),
        [warning] if matches!(warning.problem, DocsProblem::ScanLimit(_))
    ));
}

#[test]
fn config_extra_paths_feed_the_surface() {
    let dir = TempDir::new("config");
    dir.write(
        "docs/runbook.md",
        "# Runbook\n\n## Paging\n\nPage the owner.\n",
    );
    let text = "[docs]\nextra_paths = [\"docs\"]\nmax_sections = 2\n";
    let config = evidence_wire_config::Config::from_toml_str(text, Path::new(&dir.0)).unwrap();
    let (surface, warnings) = DocsSurface::from_config(&config.docs).unwrap();
    assert!(warnings.is_empty());
    let registry = surface.registry();
    assert_eq!(registry.docs().last().unwrap().id(), "runbook");
    let output = registry.search("paging", None).unwrap();
    assert_eq!(output.sections[0].doc_id, "runbook");
    assert_eq!(registry.limits().max_sections, 2);
}
