//! Shared helpers for the evidence-wire conformance and interop tests, and
//! the pieces its two rmcp peer binaries share ([`rmcp_peer`]).
//!
//! The tests themselves live in `tests/tests/`; this library locates the
//! conformance vectors vendored in `core/tests/vectors/` and holds what the
//! rmcp peers have in common.

#![forbid(unsafe_code)]

use std::path::PathBuf;

/// The folder holding the conformance vectors, vendored inside the core
/// crate (`core/tests/vectors/`; sources and licences in its README).
pub fn vectors_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../core/tests/vectors")
}

pub mod rmcp_peer {
    //! What the two rmcp peers share (`rmcp-provider`, the interop peer, and
    //! `bench-rmcp-stdio`, the benchmarks' peer): an rmcp server with the one
    //! `evidence_query` tool ([`EvidencePeer`]), and evidence hashed with
    //! crates independent of evidence-wire (SHA-256 from `sha2` over the
    //! RFC 8785 canonical JSON from `serde_json_canonicalizer`).

    use rmcp::model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ErrorData, Implementation,
        ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    };
    use rmcp::service::RequestContext;
    use rmcp::{RoleServer, ServerHandler};
    use serde_json::{Map, Value, json};
    use sha2::{Digest, Sha256};

    /// An rmcp server (tools only) with the one tool `evidence_query`,
    /// taking `query` and `context` objects; `answer` turns a call's
    /// arguments into the EvidenceResult (sent as `structuredContent` plus
    /// the JSON as a text item) or the error to answer.
    #[derive(Clone, Copy)]
    pub struct EvidencePeer {
        /// The name in its server info.
        pub name: &'static str,
        /// The result for a call's arguments.
        pub answer: fn(&Map<String, Value>) -> Result<Value, ErrorData>,
    }

    impl ServerHandler for EvidencePeer {
        fn get_info(&self) -> ServerConfig {
            let mut config =
                ServerConfig::new(ServerCapabilities::builder().enable_tools().build());
            config.server_info = Implementation::new(self.name, env!("CARGO_PKG_VERSION"));
            config
        }

        async fn list_tools(
            &self,
            _request: Option<PaginatedRequestParams>,
            _context: RequestContext<RoleServer>,
        ) -> Result<ListToolsResult, ErrorData> {
            let mut properties = Map::new();
            properties.insert("query".to_owned(), json!({"type": "object"}));
            properties.insert("context".to_owned(), json!({"type": "object"}));
            let mut schema = Map::new();
            schema.insert("type".to_owned(), json!("object"));
            schema.insert("properties".to_owned(), Value::Object(properties));
            schema.insert("required".to_owned(), json!(["query", "context"]));
            Ok(ListToolsResult::with_all_items(vec![Tool::new(
                "evidence_query",
                "Resolve a Decision Gate evidence query.",
                schema,
            )]))
        }

        async fn call_tool(
            &self,
            request: CallToolRequestParams,
            _context: RequestContext<RoleServer>,
        ) -> Result<CallToolResponse, ErrorData> {
            if request.name != "evidence_query" {
                return Err(ErrorData::invalid_params(
                    format!("unknown tool {:?}", request.name),
                    None,
                ));
            }
            let arguments = request.arguments.unwrap_or_default();
            Ok(CallToolResult::structured((self.answer)(&arguments)?).into())
        }
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
}

/// The tokio runtime of a benchmarked HTTP server: a current-thread one
/// when the server was started with `--current-thread`, else the
/// multi-thread default (`tests/benches/http.rs` runs every server both
/// ways and keeps each one's best).
#[cfg(feature = "bench-peers")]
pub fn bench_server_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    if std::env::args().any(|arg| arg == "--current-thread") {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
    }
}
