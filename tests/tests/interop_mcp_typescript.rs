//! Interop with the official MCP TypeScript SDK client
//! (`@modelcontextprotocol/sdk` on npm, pinned in `tests/peers/package-lock.json`,
//! installed by `scripts/peers`, run on the Node 22 that `node@22` provides).
//!
//! `tests/peers/mcp_ts_client.mjs` spawns `evidence-wire serve` through the
//! SDK's `StdioClientTransport` (newline-delimited) and runs the same
//! sequence as the Python SDK test; its report is checked by
//! `interop_support::check_mcp_sdk_report`. The same sequence runs over
//! streamable HTTP (`StreamableHTTPClientTransport`) against
//! `evidence-wire serve --http`.

mod interop_support;

use std::process::Command;

use interop_support::{
    HttpServer, PEER_TIMEOUT, check_mcp_sdk_report, cli_binary, peer_script, peers_node, run,
};

#[test]
fn typescript_sdk_client_over_stdio() {
    let Some(node) = peers_node() else { return };
    let mut command = Command::new(node);
    command
        .arg(peer_script("mcp_ts_client.mjs"))
        .args(["--stdio", &cli_binary(), "serve"]);
    let output = run(&mut command, b"", PEER_TIMEOUT);
    let report = output.report("the MCP TypeScript SDK client");
    check_mcp_sdk_report(&report);
}

#[test]
fn typescript_sdk_client_over_streamable_http() {
    let Some(node) = peers_node() else { return };
    let server = HttpServer::start();
    let mut command = Command::new(node);
    command
        .arg(peer_script("mcp_ts_client.mjs"))
        .args(["--http", &server.mcp_url()]);
    let output = run(&mut command, b"", PEER_TIMEOUT);
    if !output.success() {
        eprintln!("server log:\n{}", server.log());
    }
    let report = output.report("the MCP TypeScript SDK client over HTTP");
    check_mcp_sdk_report(&report);
}
