//! `bench-rmcp-stdio`: the rmcp peer of the end-to-end stdio benchmark, and
//! (with `--http`) of the HTTP one: an evidence provider built on rmcp, the
//! official Rust MCP SDK, with a `time_now` check equivalent to the bundled
//! provider's: read `context.trigger_time.value`, return it as JSON evidence
//! hashed with SHA-256 (`sha2`) of its RFC 8785 canonical form
//! (`serde_json_canonicalizer`), MCP-shaped (`structuredContent` plus the
//! JSON as a text item, which is what `CallToolResult::structured` writes).
//!
//! Built only with the `bench-peers` feature (scripts/bench).
//! - `bench-rmcp-stdio`: newline-delimited JSON-RPC on stdin/stdout (rmcp's
//!   own stdio transport), until stdin ends.
//! - `bench-rmcp-stdio --http`: rmcp's streamable-HTTP server in stateless
//!   JSON-response mode on `127.0.0.1:0` (hyper HTTP/1.1), printing
//!   `listening <port>` on stdout; it stops when stdin ends.
//!
//! Limits: rmcp's defaults (its HTTP body cap; no stdio line cap).

#![forbid(unsafe_code)]

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ErrorData, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::io::AsyncReadExt;

#[derive(Clone)]
struct Provider;

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
        config.server_info = Implementation::new("bench-rmcp", env!("CARGO_PKG_VERSION"));
        config
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let Value::Object(schema) = json!({
            "type": "object",
            "properties": {"query": {"type": "object"}, "context": {"type": "object"}},
            "required": ["query", "context"]
        }) else {
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
        let check = arguments
            .get("query")
            .and_then(|query| query.get("check_id"))
            .and_then(Value::as_str);
        if check != Some("time_now") {
            return Err(ErrorData::invalid_params(
                format!("unsupported check {check:?}"),
                None,
            ));
        }
        let Some(value) = arguments
            .get("context")
            .and_then(|context| context.pointer("/trigger_time/value"))
            .filter(|value| value.is_i64())
        else {
            return Err(ErrorData::invalid_params(
                "context.trigger_time.value must be an integer",
                None,
            ));
        };
        let hash = sha256_canonical(value)?;
        let result = json!({
            "value": {"kind": "json", "value": value},
            "lane": "verified",
            "error": null,
            "evidence_hash": {"algorithm": "sha256", "value": hash},
            "evidence_ref": null,
            "evidence_anchor": null,
            "signature": null,
            "content_type": "application/json"
        });
        Ok(CallToolResult::structured(result).into())
    }
}

async fn serve_http() -> Result<(), Box<dyn std::error::Error>> {
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None);
    let service = StreamableHttpService::new(
        || Ok(Provider),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
    println!("listening {}", listener.local_addr()?.port());
    let accept = async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            let service = hyper_util::service::TowerToHyperService::new(service.clone());
            tokio::spawn(async move {
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(io, service)
                    .await;
            });
        }
    };
    // Stop when the driver closes our stdin.
    let stdin_closed = async {
        let mut stdin = tokio::io::stdin();
        let mut sink = [0u8; 64];
        while matches!(stdin.read(&mut sink).await, Ok(n) if n > 0) {}
    };
    tokio::select! {
        () = accept => {}
        () = stdin_closed => {}
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let http = std::env::args().any(|arg| arg == "--http");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        if http {
            return serve_http().await;
        }
        let service = Provider.serve(rmcp::transport::stdio()).await?;
        service.waiting().await?;
        Ok(())
    })
}
