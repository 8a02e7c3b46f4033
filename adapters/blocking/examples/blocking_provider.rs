//! An evidence provider on stdio with blocking std I/O (no async runtime):
//! checks run on a small pool of worker threads.
//!
//! ```text
//! cargo run -p evidence-wire-blocking --example blocking_provider
//! ```
use evidence_wire_blocking::prelude::*;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct File {
    /// A path on this machine.
    path: String,
}

/// The file's size in bytes; the evidence names the file it measured.
fn file_size(file: File, context: &CheckContext) -> Result<u64, CheckError> {
    let metadata = std::fs::metadata(&file.path)
        .map_err(|error| CheckError::new("file_unreadable", format!("{}: {error}", file.path)))?;
    context.set_ref(format!("file://{}", file.path));
    Ok(metadata.len())
}

fn main() -> Result<(), ServeError> {
    let provider = Provider::new("disk", "Facts about files on this machine.").check(Check::new(
        "file_size",
        "The size of params.path in bytes.",
        file_size,
    ));
    serve_stdio(provider, 4)
}
