//! The MCP conformance suite (`@modelcontextprotocol/conformance`, npm, on
//! the Node 22 that `node@22` provides) against `evidence-wire serve --http`:
//! one run of the whole suite (`--suite all`) with the baseline
//! `tests/peers/conformance-expected-failures.yaml`.
//!
//! The suite itself fails the run on a scenario that fails (or warns) and is
//! not in the baseline, and on a baseline entry that passes, so the baseline
//! is exactly the scenarios that do not apply to a tools-and-resources
//! server (`tests/README.md` says what each needs). On top, this test reads
//! the suite's per-scenario results (`-o DIR`, `checks.json`) and requires:
//! every scenario of the suite is either one that must pass or a baseline
//! entry (never both); the ones that must pass have passing checks and no
//! failure or warning; `server-sse-polling`'s POST with
//! `MCP-Protocol-Version: 2025-03-26` is answered 200 (it was a 400); and
//! `tests/README.md` names every baseline entry.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic

use crate::interop_support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use interop_support::{
    HttpServer, PEER_TIMEOUT, peers_base, peers_dir, peers_node, repo_root, run,
};
use serde_json::Value;

/// The scenarios of conformance 0.1.16 that apply to an evidence provider:
/// each must pass with no failure and no warning.
const APPLICABLE: [&str; 5] = [
    "server-initialize",
    "ping",
    "tools-list",
    "resources-list",
    "dns-rebinding-protection",
];

/// How many scenarios `--suite all` of conformance 0.1.16 runs.
const SUITE_SIZE: usize = 32;

/// The scenario names of the baseline file (`server:` list).
fn baseline(path: &Path) -> Vec<String> {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    let mut in_server = false;
    let mut names = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or_default();
        if line.trim().is_empty() {
            continue;
        }
        if !line.starts_with(' ') {
            in_server = line.trim() == "server:";
        } else if let (true, Some(name)) = (in_server, line.trim().strip_prefix("- ")) {
            names.push(name.trim().to_owned());
        }
    }
    names
}

/// The scenario a result folder of `-o DIR` belongs to:
/// `server-<scenario>-<YYYY-MM-DDTHH-MM-SS-mmmZ>`.
fn scenario_of(folder: &str) -> Option<&str> {
    const STAMP: usize = "-2026-11-24T09-04-53-668Z".len();
    let rest = folder.strip_prefix("server-")?;
    let cut = rest.len().checked_sub(STAMP)?;
    (rest.ends_with('Z') && rest.get(cut..cut + 1) == Some("-")).then(|| &rest[..cut])
}

/// Every scenario's checks, from the suite's `-o DIR`.
fn results(dir: &Path) -> BTreeMap<String, Vec<Value>> {
    let mut results = BTreeMap::new();
    let entries = std::fs::read_dir(dir).unwrap_or_else(|error| panic!("{dir:?}: {error}"));
    for entry in entries.flatten() {
        let folder = entry.file_name().to_string_lossy().into_owned();
        let scenario = scenario_of(&folder)
            .unwrap_or_else(|| panic!("unexpected result folder {folder}"))
            .to_owned();
        let path = entry.path().join("checks.json");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
        let checks: Vec<Value> = serde_json::from_str(&text)
            .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
        assert!(
            results.insert(scenario.clone(), checks).is_none(),
            "{scenario} ran twice"
        );
    }
    results
}

fn count(checks: &[Value], status: &str) -> usize {
    checks
        .iter()
        .filter(|check| check["status"] == status)
        .count()
}

#[test]
fn conformance_suite_all_passes_against_its_baseline() {
    let Some(node) = peers_node() else { return };
    let suite =
        peers_base().join("node/node_modules/@modelcontextprotocol/conformance/dist/index.js");
    let baseline_file = peers_dir().join("conformance-expected-failures.yaml");
    let expected_failures = baseline(&baseline_file);
    for name in &expected_failures {
        assert!(
            !APPLICABLE.contains(&name.as_str()),
            "{name} must pass; it cannot be in the baseline"
        );
    }
    let readme = std::fs::read_to_string(repo_root().join("tests/README.md"))
        .unwrap_or_else(|error| panic!("tests/README.md: {error}"));
    for name in &expected_failures {
        assert!(
            readme.contains(&format!("`{name}`")),
            "tests/README.md does not say what {name} needs"
        );
    }

    let server = HttpServer::start();
    let scratch =
        std::env::temp_dir().join(format!("evidence-wire-conformance-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let out = scratch.join("results");
    std::fs::create_dir_all(&scratch).unwrap_or_else(|error| panic!("{error}"));
    let mut command = Command::new(&node);
    command
        .current_dir(&scratch)
        .arg(&suite)
        .args(["server", "--url", &server.mcp_url(), "--suite", "all"])
        .arg("--expected-failures")
        .arg(&baseline_file)
        .arg("-o")
        .arg(&out);
    let output = run(&mut command, b"", PEER_TIMEOUT);
    let results = if out.is_dir() {
        results(&out)
    } else {
        BTreeMap::new()
    };
    let _ = std::fs::remove_dir_all(&scratch);
    let context = format!(
        "status {:?}\n--- stdout\n{}\n--- stderr\n{}\n--- server log\n{}",
        output.status,
        output.stdout,
        output.stderr,
        server.log()
    );
    assert!(
        output.success() && output.stdout.contains("Baseline check passed"),
        "the suite does not match its baseline:\n{context}"
    );

    // Every scenario is accounted for, once.
    let ran: BTreeSet<&str> = results.keys().map(String::as_str).collect();
    let accounted: BTreeSet<&str> = APPLICABLE
        .iter()
        .copied()
        .chain(expected_failures.iter().map(String::as_str))
        .collect();
    assert_eq!(
        APPLICABLE.len() + expected_failures.len(),
        accounted.len(),
        "a baseline entry is listed twice"
    );
    assert_eq!(ran, accounted, "scenarios run vs accounted for\n{context}");
    assert_eq!(ran.len(), SUITE_SIZE, "--suite all\n{context}");

    // The ones that apply pass cleanly.
    for scenario in APPLICABLE {
        let checks = &results[scenario];
        assert!(
            count(checks, "SUCCESS") >= 1
                && count(checks, "FAILURE") == 0
                && count(checks, "WARNING") == 0,
            "{scenario}: {checks:#?}"
        );
    }
    // The rest fail or warn (else the suite would call the entry stale).
    for scenario in &expected_failures {
        let checks = &results[scenario.as_str()];
        assert!(
            count(checks, "FAILURE") + count(checks, "WARNING") >= 1,
            "{scenario}: {checks:#?}"
        );
    }
    // server-sse-polling: only warnings (no session id), and its POST with
    // `mcp-protocol-version: 2025-03-26` is answered 200 with JSON.
    let polling = &results["server-sse-polling"];
    assert_eq!(count(polling, "FAILURE"), 0, "{polling:#?}");
    let answer = polling
        .iter()
        .find(|check| check["id"] == "incoming-response")
        .unwrap_or_else(|| panic!("server-sse-polling got no answer: {polling:#?}"));
    assert_eq!(answer["details"]["statusCode"], 200, "{polling:#?}");
}

#[test]
fn the_baseline_reader_and_folder_names() {
    let dir = std::env::temp_dir().join(format!("evidence-wire-baseline-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|error| panic!("{error}"));
    let file = dir.join("baseline.yaml");
    std::fs::write(
        &file,
        "# comment\nserver:\n  # group\n  - ping  # why\n  - tools-list\nclient:\n  - other\n",
    )
    .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(baseline(&file), vec!["ping", "tools-list"]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        scenario_of("server-json-schema-2020-12-2026-11-24T09-04-53-668Z"),
        Some("json-schema-2020-12")
    );
    assert_eq!(
        scenario_of("server-ping-2026-11-24T09-04-53-668Z"),
        Some("ping")
    );
    assert_eq!(scenario_of("client-ping-2026-11-24T09-04-53-668Z"), None);
    assert_eq!(scenario_of("server-ping"), None);
}
