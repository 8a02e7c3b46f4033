//! `rmcp-provider` (a binary of the tests crate): a tiny evidence provider built on rmcp, the official
//! Rust MCP SDK, serving newline-delimited JSON-RPC on stdin/stdout (rmcp's
//! own stdio transport). The interop test `interop_rmcp.rs` queries it with
//! our client (`ProcessProvider`, MCP handshake, newline framing).
//!
//! It shares no code with evidence-wire: the hash is SHA-256 (`sha2`) of
//! the RFC 8785 canonical JSON of the value (`serde_json_canonicalizer`).
//! Checks of `evidence_query`:
//!   echo      value = params.value, evidence_hash computed here
//!   bad_hash  value = params.value with a wrong evidence_hash
//!   invalid   a JSON-RPC invalid-params error
//! The result is MCP-shaped: `structuredContent` plus the JSON as a text item.

#![forbid(unsafe_code)]

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ErrorData, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

struct Provider;

fn evidence(value: &Value, hash: String) -> Value {
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

fn sha256_canonical(value: &Value) -> Result<String, ErrorData> {
    let canonical = serde_json_canonicalizer::to_vec(value).map_err(|error| {
        ErrorData::invalid_params(format!("not canonicalizable: {error}"), None)
    })?;
    Ok(Sha256::digest(&canonical)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect())
}

impl ServerHandler for Provider {
    fn get_info(&self) -> ServerConfig {
        let mut config = ServerConfig::new(ServerCapabilities::builder().enable_tools().build());
        config.server_info = Implementation::new("rmcp-provider", env!("CARGO_PKG_VERSION"));
        config
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = json!({
            "type": "object",
            "properties": {"query": {"type": "object"}, "context": {"type": "object"}},
            "required": ["query", "context"]
        });
        let Value::Object(schema) = schema else {
            return Err(ErrorData::internal_error("schema is not an object", None));
        };
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
        let query = arguments.get("query").cloned().unwrap_or(Value::Null);
        let value = query
            .pointer("/params/value")
            .cloned()
            .unwrap_or(Value::Null);
        let check = query.get("check_id").and_then(Value::as_str).unwrap_or("");
        let result = match check {
            "echo" => evidence(&value, sha256_canonical(&value)?),
            "bad_hash" => evidence(&value, "0".repeat(64)),
            other => {
                return Err(ErrorData::invalid_params(
                    format!("unsupported check {other:?}"),
                    None,
                ));
            }
        };
        Ok(CallToolResult::structured(result).into())
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let service = Provider.serve(rmcp::transport::stdio()).await?;
        service.waiting().await?;
        Ok(())
    })
}
