//! Shared helpers for the evidence-wire conformance and interop tests, and
//! the pieces its two rmcp peer binaries share ([`rmcp_peer`]).
//!
//! The tests themselves live in `tests/tests/`; this library locates the
//! external conformance vectors in `../shared/vectors/` and holds what the
//! rmcp peers have in common.

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

pub mod rmcp_peer {
    //! What the two rmcp peers share (`rmcp-provider`, the interop peer, and
    //! `bench-rmcp-stdio`, the benchmarks' peer): the `evidence_query` tool,
    //! the server info, and evidence hashed with crates independent of
    //! evidence-wire (SHA-256 from `sha2` over the RFC 8785 canonical JSON
    //! from `serde_json_canonicalizer`).

    use rmcp::model::{
        ErrorData, Implementation, ListToolsResult, ServerCapabilities, ServerConfig, Tool,
    };
    use serde_json::{Map, Value, json};
    use sha2::{Digest, Sha256};

    /// A tools-only server announcing itself as `name`.
    pub fn server_config(name: &str) -> ServerConfig {
        let mut config = ServerConfig::new(ServerCapabilities::builder().enable_tools().build());
        config.server_info = Implementation::new(name, env!("CARGO_PKG_VERSION"));
        config
    }

    /// The one tool, `evidence_query`, taking `query` and `context` objects.
    pub fn tools() -> ListToolsResult {
        let mut properties = Map::new();
        properties.insert("query".to_owned(), json!({"type": "object"}));
        properties.insert("context".to_owned(), json!({"type": "object"}));
        let mut schema = Map::new();
        schema.insert("type".to_owned(), json!("object"));
        schema.insert("properties".to_owned(), Value::Object(properties));
        schema.insert("required".to_owned(), json!(["query", "context"]));
        ListToolsResult::with_all_items(vec![Tool::new(
            "evidence_query",
            "Resolve a Decision Gate evidence query.",
            schema,
        )])
    }

    /// Hex SHA-256 of the RFC 8785 canonical form of `value`; a value that
    /// cannot be canonicalized is the caller's invalid-params error.
    pub fn sha256_canonical(value: &Value) -> Result<String, ErrorData> {
        let canonical = serde_json_canonicalizer::to_vec(value).map_err(|error| {
            ErrorData::invalid_params(format!("not canonicalizable: {error}"), None)
        })?;
        Ok(Sha256::digest(&canonical)
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect())
    }

    /// A verified-lane EvidenceResult carrying `value` as JSON with `hash`.
    pub fn evidence(value: &Value, hash: String) -> Value {
        json!({
            "value": {"kind": "json", "value": value},
            "lane": "verified",
            "error": null,
            "evidence_hash": {"algorithm": "sha256", "value": hash},
            "evidence_ref": null,
            "evidence_anchor": null,
            "signature": null,
            "content_type": "application/json"
        })
    }

    /// The invalid-params error for a tool other than `evidence_query`, if
    /// `name` is one.
    pub fn check_tool(name: &str) -> Result<(), ErrorData> {
        if name == "evidence_query" {
            Ok(())
        } else {
            Err(ErrorData::invalid_params(
                format!("unknown tool {name:?}"),
                None,
            ))
        }
    }
}
