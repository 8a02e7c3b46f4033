//! An evidence provider on stdio with smol, its check an async function.
//!
//! ```text
//! cargo run -p evidence-wire-smol --example smol_provider
//! ```
use evidence_wire_smol::prelude::*;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct File {
    /// A text file on this machine.
    path: String,
}

/// How many lines the file has, read without blocking the executor.
async fn line_count(file: File, _: CheckContext) -> Result<u64, CheckError> {
    let text = smol::fs::read_to_string(&file.path)
        .await
        .map_err(|error| CheckError::new("file_unreadable", format!("{}: {error}", file.path)))?;
    Ok(text.lines().count() as u64)
}

fn main() -> Result<(), ServeError> {
    let provider = Provider::new("text", "Facts about text files.").check(
        Check::new_async(
            "line_count",
            "The number of lines of params.path.",
            line_count,
        )
        .determinism(Determinism::External),
    );
    smol::block_on(serve_stdio(provider))
}
