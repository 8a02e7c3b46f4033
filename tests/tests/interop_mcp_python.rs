//! Interop with the official MCP Python SDK client (`mcp` on PyPI, pinned in
//! `tests/peers/requirements.txt`, installed by `scripts/peers`).
//!
//! `tests/peers/mcp_python_client.py` spawns `evidence-wire serve` over
//! newline-delimited stdio through the SDK's own stdio transport and runs
//! the sequence every MCP host runs: connect (the SDK probes
//! `server/discover`, then falls back to `initialize`), `tools/list`,
//! `tools/call evidence_query` (the SDK parses and validates the result),
//! docs search, `resources/list` and `resources/read`, an unknown resource
//! and an unknown tool. Its report is checked against independent
//! expectations by `interop_support::check_mcp_sdk_report`. The same
//! sequence runs over streamable HTTP against `evidence-wire serve --http`.

mod interop_support;

use std::process::Command;

use interop_support::{
    HttpServer, PEER_TIMEOUT, check_mcp_sdk_report, cli_binary, peer_script, run, venv_python,
};

#[test]
fn python_sdk_client_over_stdio() {
    let Some(python) = venv_python() else { return };
    let mut command = Command::new(python);
    command
        .arg(peer_script("mcp_python_client.py"))
        .args(["--stdio", &cli_binary(), "serve"]);
    let output = run(&mut command, b"", PEER_TIMEOUT);
    let report = output.report("the MCP Python SDK client");
    // The SDK negotiated one of the versions we support.
    let version = report["protocol_version"].as_str().unwrap_or_default();
    assert!(
        evidence_wire::server::SUPPORTED_PROTOCOL_VERSIONS.contains(&version),
        "negotiated {version:?}"
    );
    check_mcp_sdk_report(&report);
}

#[test]
fn python_sdk_client_over_streamable_http() {
    let Some(python) = venv_python() else { return };
    let server = HttpServer::start();
    let mut command = Command::new(python);
    command
        .arg(peer_script("mcp_python_client.py"))
        .args(["--http", &server.mcp_url()]);
    let output = run(&mut command, b"", PEER_TIMEOUT);
    if !output.success() {
        eprintln!("server log:\n{}", server.log());
    }
    let report = output.report("the MCP Python SDK client over HTTP");
    check_mcp_sdk_report(&report);
}
