//! A `files` evidence provider: facts about the files under its evidence
//! root, each answer naming its file the way Decision Gate's own file
//! providers do (`dg+file://evidence-root/<path>`, a `file_path_rooted`
//! anchor). Paths that leave the root, special files and files over 1 MiB
//! are refused by the SDK's `EvidenceRoot`, with the bundled provider's
//! error codes.
//!
//! ```text
//! cargo run -p evidence-wire-tokio --example files_provider -- serve --root DIR
//! ```
use evidence_wire_tokio::prelude::*;
use evidence_wire_tokio::wire::canonical::hex_lower;
use evidence_wire_tokio::wire::serde_json::json;
use sha2::{Digest, Sha256};

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct File {
    /// A path under the evidence root, e.g. `reports/coverage.json`.
    path: String,
}

fn file_sha256(file: File, context: &CheckContext) -> Result<String, CheckError> {
    let bytes = context.root()?.read(&file.path, context)?;
    Ok(hex_lower(&Sha256::digest(&bytes)))
}

fn line_count(file: File, context: &CheckContext) -> Result<u64, CheckError> {
    let bytes = context.root()?.read(&file.path, context)?;
    let newlines = bytes.iter().filter(|byte| **byte == b'\n').count();
    let unterminated = bytes.last().is_some_and(|byte| *byte != b'\n');
    Ok(u64::try_from(newlines + usize::from(unterminated)).unwrap_or(u64::MAX))
}

/// The provider; its evidence root is given where it is served. The
/// examples read `notes.txt`, three lines: `one`, `two`, `three` (no final
/// newline).
pub fn files() -> Provider {
    let notes = || json!({"path": "notes.txt"});
    let digest = "058053d87c818d699cde0f00d670bca0e1c6ad857caa9758ea6a556d7c64fcee";
    let sha256 = "The lowercase hex SHA-256 of the file at params.path.";
    let lines = "The number of lines of the file at params.path.";
    Provider::new("files", "Facts about files under the evidence root.")
        .check(
            Check::new("file_sha256", sha256, file_sha256)
                .anchor_types(["file_path_rooted"])
                .example("the digest of notes.txt", notes(), json!(digest)),
        )
        .check(
            Check::new("line_count", lines, line_count)
                .anchor_types(["file_path_rooted"])
                .example("notes.txt has three lines", notes(), json!(3)),
        )
}

fn main() -> std::process::ExitCode {
    files().run() // `serve --root DIR` opens the evidence root
}
