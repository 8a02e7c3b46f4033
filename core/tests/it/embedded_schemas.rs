//! The JSON Schemas the core embeds are copies of `spec/schemas/` kept
//! inside this crate (`schemas/`), so the crate builds from its package
//! alone. Every copy must equal its original (run `scripts/sync-embedded`
//! after editing `spec/schemas/`). Skipped, with a note, where `spec/` is
//! absent (a packaged crate).

use std::fs;
use std::path::PathBuf;

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn every_embedded_schema_equals_its_spec_original() {
    let spec = crate_dir().join("../spec/schemas");
    if !spec.is_dir() {
        eprintln!(
            "note: {} is absent (a packaged crate): the schema copies are not compared with their originals",
            spec.display()
        );
        return;
    }
    let mut copies: Vec<_> = fs::read_dir(crate_dir().join("schemas"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    copies.sort();
    assert!(!copies.is_empty(), "schemas/ holds the embedded schemas");
    let mut stale = Vec::new();
    for name in &copies {
        let copy = fs::read(crate_dir().join("schemas").join(name)).unwrap();
        match fs::read(spec.join(name)) {
            Ok(original) if original == copy => {}
            Ok(_) => stale.push(format!("{} differs from spec/schemas/", name.display())),
            Err(error) => stale.push(format!(
                "{} has no original in spec/schemas/ ({error}); remove the copy or restore the original",
                name.display()
            )),
        }
    }
    assert!(
        stale.is_empty(),
        "core/schemas/ is out of date with spec/schemas/: {stale:?}; run scripts/sync-embedded"
    );
}
