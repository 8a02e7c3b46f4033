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
        // A scenario passes when the suite exits 0, reports 0 failed checks
        // and at least one passed check (a scenario that ran no check must
        // not count), and prints no FAILURE.
        let counts = check_counts(&output.stdout);
        let passed = output.success()
            && !counts.is_empty()
            && counts.iter().all(|&(ok, failed)| ok >= 1 && failed == 0)
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

/// The `(passed, failed)` check counts the suite prints: `Passed: 3/3, 0
/// failed, 0 warnings` for one scenario, or `N passed, M failed` in its
/// summary lines. Empty when no count is printed.
fn check_counts(text: &str) -> Vec<(u64, u64)> {
    let number = |word: &str| -> Option<u64> { word.trim().parse().ok() };
    let mut counts = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.trim().strip_prefix("Passed: ") {
            // "3/3, 0 failed, 0 warnings"
            let mut parts = rest.split(',');
            let ok = parts
                .next()
                .and_then(|ratio| ratio.split('/').next())
                .and_then(number);
            let failed = parts
                .next()
                .and_then(|part| part.trim().strip_suffix(" failed"))
                .and_then(number);
            if let (Some(ok), Some(failed)) = (ok, failed) {
                counts.push((ok, failed));
            }
        } else if let Some((head, tail)) = line.split_once(" passed, ") {
            // "✓ ping: 1 passed, 0 failed" or "Total: 1 passed, 0 failed"
            let ok = head.rsplit(' ').next().and_then(number);
            let failed = tail
                .split_whitespace()
                .next()
                .and_then(number)
                .filter(|_| tail.contains("failed"));
            if let (Some(ok), Some(failed)) = (ok, failed) {
                counts.push((ok, failed));
            }
        }
    }
    counts
}

#[test]
fn check_counts_reads_the_suite_summaries() {
    assert_eq!(
        check_counts("Test Results:\nPassed: 3/3, 0 failed, 0 warnings\n"),
        vec![(3, 0)]
    );
    assert_eq!(
        check_counts("\u{2713} ping: 1 passed, 0 failed\n\nTotal: 1 passed, 0 failed\n"),
        vec![(1, 0), (1, 0)]
    );
    assert_eq!(
        check_counts("Passed: 0/0, 0 failed, 0 warnings"),
        vec![(0, 0)]
    );
    assert_eq!(
        check_counts("Passed: 2/3, 1 failed, 0 warnings"),
        vec![(2, 1)]
    );
    assert!(check_counts("no summary at all").is_empty());
}
