//! The MCP conformance suite (`@modelcontextprotocol/conformance`, npm, on
//! the Node 22 that `node@22` provides) against `evidence-wire serve --http`.
//!
//! Every scenario that applies to a tools-and-resources server runs and
//! must pass; the scenarios that do not apply, and why, are listed in
//! `tests/README.md`. One conformance process per scenario, so a failure
//! names its scenario.

mod interop_support;

use std::process::Command;

use interop_support::{HttpServer, PEER_TIMEOUT, peers_base, peers_node, run};

/// The scenarios of conformance 0.1.16 that apply to an evidence provider.
const APPLICABLE: [&str; 5] = [
    "server-initialize",
    "ping",
    "tools-list",
    "resources-list",
    "dns-rebinding-protection",
];

#[test]
fn conformance_scenarios_that_apply_pass() {
    let Some(node) = peers_node() else { return };
    let suite =
        peers_base().join("node/node_modules/@modelcontextprotocol/conformance/dist/index.js");
    let server = HttpServer::start();
    // The suite may write a results/ folder into its working directory.
    let scratch =
        std::env::temp_dir().join(format!("evidence-wire-conformance-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap_or_else(|error| panic!("{error}"));
    let mut failures = Vec::new();
    for scenario in APPLICABLE {
        let mut command = Command::new(&node);
        command.current_dir(&scratch).arg(&suite).args([
            "server",
            "--url",
            &server.mcp_url(),
            "--scenario",
            scenario,
        ]);
        let output = run(&mut command, b"", PEER_TIMEOUT);
        let passed = output.success()
            && output.stdout.contains(", 0 failed")
            && !output.stdout.contains("FAILURE");
        if !passed {
            failures.push(format!(
                "{scenario} (status {:?}):\n{}\n{}",
                output.status, output.stdout, output.stderr
            ));
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    assert!(
        failures.is_empty(),
        "conformance failures:\n{}\nserver log:\n{}",
        failures.join("\n"),
        server.log()
    );
}
