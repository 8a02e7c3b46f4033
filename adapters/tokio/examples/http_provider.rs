//! An evidence provider over HTTP (tokio), open only to callers that send
//! the bearer token.
//!
//! ```text
//! EVIDENCE_WIRE_TOKEN=change-me cargo run -p evidence-wire-tokio --example http_provider -- 127.0.0.1:8080
//! ```
//!
//! Then `POST http://127.0.0.1:8080/rpc` (Decision Gate's `mcp` provider
//! `url`) or `/mcp` (MCP clients), with `Authorization: Bearer change-me`.
//! Ctrl-C stops it.
use evidence_wire_tokio::prelude::*;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct File {
    /// A path on this machine.
    path: String,
}

fn file_exists(file: File, _: &CheckContext) -> Result<bool, CheckError> {
    Ok(std::path::Path::new(&file.path).exists())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let address = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8080".to_owned());
    let token = std::env::var("EVIDENCE_WIRE_TOKEN")
        .map_err(|_| "set EVIDENCE_WIRE_TOKEN to the bearer token callers must send")?;
    let provider = Provider::new("files", "Facts about files on this machine.").check(Check::new(
        "file_exists",
        "Whether params.path exists.",
        file_exists,
    ));

    let config = HttpServerConfig::default().with_bearer_token(token);
    let listener = bind_http(address.parse()?, &config).await?;
    eprintln!("listening on http://{}/rpc", listener.local_addr()?);
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    serve_http(listener, provider, config, ctrl_c).await?;
    Ok(())
}
