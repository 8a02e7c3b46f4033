//! Shared helpers for the evidence-wire conformance and interop tests.
//!
//! The tests themselves live in `tests/tests/`; this library only locates the
//! external conformance vectors in `../shared/vectors/`.

#![forbid(unsafe_code)]

use std::path::PathBuf;

/// The folder holding the external conformance vectors.
///
/// `EVIDENCE_WIRE_VECTORS` overrides it; otherwise it is `../shared/vectors`
/// next to the repository root (where CI and developers have it).
pub fn vectors_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("EVIDENCE_WIRE_VECTORS") {
        return PathBuf::from(dir);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/vectors")
}
