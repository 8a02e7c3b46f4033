//! `rmcp-provider` (a binary of the tests crate): a tiny evidence provider built on rmcp, the official
//! Rust MCP SDK, serving newline-delimited JSON-RPC on stdin/stdout (rmcp's
//! own stdio transport). The interop test `interop_rmcp.rs` queries it with
//! our client (`ProcessProvider`, MCP handshake, newline framing).
//!
//! It shares no code with evidence-wire: the hash is SHA-256 (`sha2`) of
//! the RFC 8785 canonical JSON of the value (`serde_json_canonicalizer`),
//! in `evidence_wire_tests::rmcp_peer`, which the benchmarks' rmcp peer uses too.
//! Checks of `evidence_query`:
//!   echo      value = params.value, evidence_hash computed here
//!   bad_hash  value = params.value with a wrong evidence_hash
//!   invalid   a JSON-RPC invalid-params error
//! The result is MCP-shaped: `structuredContent` plus the JSON as a text item.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic
#![forbid(unsafe_code)]

use evidence_wire_tests::rmcp_peer::{EvidencePeer, evidence, sha256_canonical};
use rmcp::ServiceExt;
use rmcp::model::ErrorData;
use serde_json::{Map, Value};

fn answer(arguments: &Map<String, Value>) -> Result<Value, ErrorData> {
    let query = arguments.get("query").cloned().unwrap_or(Value::Null);
    let value = query
        .pointer("/params/value")
        .cloned()
        .unwrap_or(Value::Null);
    let check = query.get("check_id").and_then(Value::as_str).unwrap_or("");
    match check {
        "echo" => Ok(evidence(&value, sha256_canonical(&value)?)),
        "bad_hash" => Ok(evidence(&value, "0".repeat(64))),
        other => Err(ErrorData::invalid_params(
            format!("unsupported check {other:?}"),
            None,
        )),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let peer = EvidencePeer {
            name: "rmcp-provider",
            answer,
        };
        let service = peer.serve(rmcp::transport::stdio()).await?;
        service.waiting().await?;
        Ok(())
    })
}
