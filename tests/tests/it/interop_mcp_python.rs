//! Interop with the official MCP Python SDK clients (`mcp` on PyPI), three
//! generations, each over stdio and over streamable HTTP:
//!
//! - `mcp` 2.x (`tests/peers/requirements.txt`, `.peers/venv`) in its default
//!   `auto` mode: it probes `server/discover`, finds 2026-07-28 and speaks it
//!   statelessly (no `initialize`);
//! - `mcp` 2.x pinned to 2026-07-28 (`Client(mode="2026-07-28")`: no probe,
//!   every request carries the revision in `_meta`);
//! - the old-generation `mcp` 1.9.x (`tests/peers/requirements-old.txt`,
//!   `.peers/venv-old`), which sends `initialize` at 2025-03-26 and refuses
//!   any other answer.
//!
//! `tests/peers/mcp_python_client.py` (2.x) and `mcp_python_old_client.py`
//! (1.9) run the sequence every MCP host runs against `evidence-wire serve`
//! (spawned through the SDK's own stdio transport) or `evidence-wire serve
//! --http`: connect, `tools/list`, `tools/call evidence_query` (the SDK parses
//! and validates the result), docs search, `resources/list`, `resources/read`,
//! `resources/templates/list`, an unknown resource, bad arguments and an
//! unknown tool. Their reports (the SDK's view and every message as it went
//! over the wire) are checked against independent expectations for the
//! negotiated revision by `interop_support::check_mcp_sdk_report`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic

use crate::interop_support;

use std::process::Command;

use interop_support::{
    HttpServer, PEER_TIMEOUT, Revision, check_mcp_sdk_report, cli_binary, peer_script, run,
    venv_old_python, venv_python,
};

/// Where the script's server is: spawned over stdio, or an HTTP endpoint.
enum Target<'a> {
    Stdio,
    Http(&'a HttpServer),
}

fn drive(python: String, script: &str, mode: Option<&str>, target: Target<'_>, revision: Revision) {
    let mut command = Command::new(python);
    command.arg(peer_script(script));
    if let Some(mode) = mode {
        command.args(["--mode", mode]);
    }
    match target {
        Target::Stdio => command.args(["--stdio", &cli_binary(), "serve"]),
        Target::Http(server) => command.args(["--http", &server.mcp_url()]),
    };
    let output = run(&mut command, b"", PEER_TIMEOUT);
    let what = format!("{script} (mode {mode:?})");
    if let (false, Target::Http(server)) = (output.success(), &target) {
        eprintln!("server log:\n{}", server.log());
    }
    check_mcp_sdk_report(&output.report(&what), revision);
}

#[test]
fn python_sdk_auto_mode_discovers_2026_07_28_over_stdio() {
    let Some(python) = venv_python() else { return };
    drive(
        python,
        "mcp_python_client.py",
        Some("auto"),
        Target::Stdio,
        Revision::V2026_07_28,
    );
}

#[test]
fn python_sdk_auto_mode_discovers_2026_07_28_over_streamable_http() {
    let Some(python) = venv_python() else { return };
    let server = HttpServer::start();
    let target = Target::Http(&server);
    drive(
        python,
        "mcp_python_client.py",
        Some("auto"),
        target,
        Revision::V2026_07_28,
    );
}

#[test]
fn python_sdk_pinned_to_2026_07_28_over_stdio() {
    let Some(python) = venv_python() else { return };
    let mode = Some("2026-07-28");
    drive(
        python,
        "mcp_python_client.py",
        mode,
        Target::Stdio,
        Revision::V2026_07_28,
    );
}

#[test]
fn python_sdk_pinned_to_2026_07_28_over_streamable_http() {
    let Some(python) = venv_python() else { return };
    let server = HttpServer::start();
    let mode = Some("2026-07-28");
    let target = Target::Http(&server);
    drive(
        python,
        "mcp_python_client.py",
        mode,
        target,
        Revision::V2026_07_28,
    );
}

#[test]
fn python_sdk_1_9_speaks_2025_03_26_over_stdio() {
    let Some(python) = venv_old_python() else {
        return;
    };
    let script = "mcp_python_old_client.py";
    drive(python, script, None, Target::Stdio, Revision::V2025_03_26);
}

#[test]
fn python_sdk_1_9_speaks_2025_03_26_over_streamable_http() {
    let Some(python) = venv_old_python() else {
        return;
    };
    let server = HttpServer::start();
    let script = "mcp_python_old_client.py";
    drive(
        python,
        script,
        None,
        Target::Http(&server),
        Revision::V2025_03_26,
    );
}
