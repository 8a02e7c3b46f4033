//! Replays the checked-in corpus of the `canonical` fuzz target
//! (`fuzz/corpus/canonical/`, seeded from the JCS vectors) through the
//! target's own checks (`fuzz/fuzz_targets/common/canonical.rs`): agreement
//! with `serde_json_canonicalizer`, idempotence under both profiles, and both
//! profiles validating alike.

#[path = "../../fuzz/fuzz_targets/common/canonical.rs"]
mod checks;

use std::path::Path;

#[test]
fn canonical_corpus_replays() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/canonical");
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    entries.sort();
    let (mut accepted, mut rejected) = (0, 0);
    for path in &entries {
        let data = std::fs::read(path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy();
        let ok = checks::run(&data);
        // Seeds named after a must-error vector must be rejected.
        if name.starts_with("edge_err_") {
            assert!(!ok, "{name} must be rejected");
        }
        if ok {
            accepted += 1;
        } else {
            rejected += 1;
        }
    }
    assert!(
        accepted >= 40 && rejected >= 8,
        "corpus holds the JCS vectors: {accepted} accepted, {rejected} rejected"
    );
}
