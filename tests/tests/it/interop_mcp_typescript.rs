//! Interop with the official MCP TypeScript SDK client
//! (`@modelcontextprotocol/sdk` on npm, installed by `scripts/peers`, run on
//! the Node 22 that `node@22` provides), two generations, each over stdio
//! (`StdioClientTransport`) and streamable HTTP
//! (`StreamableHTTPClientTransport`):
//!
//! - the current SDK (`tests/peers/package-lock.json`, `.peers/node`), which
//!   negotiates 2025-11-25;
//! - the old-generation SDK 1.12.x (`tests/peers/old/package-lock.json`,
//!   `.peers/node-old`), which sends `initialize` at 2025-03-26 and refuses
//!   any other answer.
//!
//! `tests/peers/mcp_ts_client.mjs` runs the same sequence as the Python SDK
//! tests with either SDK (`EVIDENCE_WIRE_PEERS_NODE` picks the install); its
//! report is checked by `interop_support::check_mcp_sdk_report` for the
//! revision that SDK must negotiate.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic

use crate::interop_support;

use std::process::Command;

use interop_support::{
    HttpServer, PEER_TIMEOUT, Revision, check_mcp_sdk_report, cli_binary, peer_script, peers_node,
    peers_node_old, run,
};

/// Run `mcp_ts_client.mjs` with the SDK of `sdk_folder` (`None`: the current
/// one) against `server` (`None`: spawned over stdio).
fn drive(node: &str, sdk_folder: Option<&str>, server: Option<&HttpServer>, revision: Revision) {
    let mut command = Command::new(node);
    command.arg(peer_script("mcp_ts_client.mjs"));
    if let Some(folder) = sdk_folder {
        command.env("EVIDENCE_WIRE_PEERS_NODE", folder);
    }
    match server {
        None => command.args(["--stdio", &cli_binary(), "serve"]),
        Some(server) => command.args(["--http", &server.mcp_url()]),
    };
    let output = run(&mut command, b"", PEER_TIMEOUT);
    if let (false, Some(server)) = (output.success(), server) {
        eprintln!("server log:\n{}", server.log());
    }
    check_mcp_sdk_report(&output.report("the MCP TypeScript SDK client"), revision);
}

#[test]
fn typescript_sdk_client_over_stdio() {
    let Some(node) = peers_node() else { return };
    drive(&node, None, None, Revision::V2025_11_25);
}

#[test]
fn typescript_sdk_client_over_streamable_http() {
    let Some(node) = peers_node() else { return };
    let server = HttpServer::start();
    drive(&node, None, Some(&server), Revision::V2025_11_25);
}

#[test]
fn typescript_sdk_1_12_speaks_2025_03_26_over_stdio() {
    let (Some(node), Some(old)) = (peers_node(), peers_node_old()) else {
        return;
    };
    drive(&node, Some(&old), None, Revision::V2025_03_26);
}

#[test]
fn typescript_sdk_1_12_speaks_2025_03_26_over_streamable_http() {
    let (Some(node), Some(old)) = (peers_node(), peers_node_old()) else {
        return;
    };
    let server = HttpServer::start();
    drive(&node, Some(&old), Some(&server), Revision::V2025_03_26);
}
