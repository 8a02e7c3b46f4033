//! Every closed table a document or schema lists equals the code's: the
//! canonical error codes and the record channels of the validation-log
//! schema, the transports of the configuration schema, and the MCP
//! revisions of `spec/protocol.md` and of the vendored MCP schemas. A row
//! added to the code without its document (or the reverse) fails here.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic

use std::collections::BTreeSet;
use std::path::Path;

use evidence_wire::Transport;
use evidence_wire::dialect::McpRevision;
use evidence_wire::error::CanonicalError;
use evidence_wire_log::record::Channel;
use serde_json::Value;

fn repository_file(relative: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

fn json_file(relative: &str) -> Value {
    serde_json::from_str(&repository_file(relative)).unwrap()
}

fn strings(value: &Value) -> BTreeSet<String> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {value}"))
        .iter()
        .map(|item| item.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn the_validation_log_schema_lists_every_error_code_and_channel() {
    let schema = json_file("spec/schemas/validation-log.schema.json");
    let codes = strings(
        schema
            .pointer("/properties/error/oneOf/1/properties/code/enum")
            .unwrap(),
    );
    let ours: BTreeSet<String> = CanonicalError::ALL
        .iter()
        .map(|e| e.name().to_owned())
        .collect();
    assert_eq!(codes, ours, "error.code enum vs CanonicalError::ALL");
    let channels = strings(schema.pointer("/properties/transport/enum").unwrap());
    let ours: BTreeSet<String> = Channel::ALL.iter().map(|c| c.as_str().to_owned()).collect();
    assert_eq!(channels, ours, "transport enum vs record::Channel::ALL");
}

#[test]
fn the_configuration_schema_lists_every_transport() {
    let schema = json_file("spec/schemas/config.schema.json");
    let listed = strings(
        schema
            .pointer("/$defs/Server/properties/transport/enum")
            .unwrap(),
    );
    let ours: BTreeSet<String> = Transport::ALL
        .iter()
        .map(|t| t.as_str().to_owned())
        .collect();
    assert_eq!(listed, ours);
}

#[test]
fn mcp_revisions_are_ordered_documented_and_vendored() {
    // ALL is newest first and in the enum's order; HANDSHAKE is ALL
    // without the stateless ones; the latest handshake is its first.
    let mut sorted = McpRevision::ALL.to_vec();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(sorted, McpRevision::ALL.to_vec());
    let handshake: Vec<McpRevision> = McpRevision::ALL
        .into_iter()
        .filter(|revision| !revision.is_stateless())
        .collect();
    assert_eq!(handshake, McpRevision::HANDSHAKE.to_vec());
    assert_eq!(McpRevision::LATEST_HANDSHAKE, McpRevision::HANDSHAKE[0]);
    // spec/protocol.md's revision table names exactly these.
    let protocol = repository_file("spec/protocol.md");
    let documented: BTreeSet<String> = protocol
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split('`').next())
        .filter(|name| name.len() == 10 && name.starts_with("20"))
        .map(str::to_owned)
        .collect();
    let ours: BTreeSet<String> = McpRevision::ALL
        .iter()
        .map(|r| r.as_str().to_owned())
        .collect();
    assert_eq!(documented, ours, "the revision table of spec/protocol.md");
    // The conformance vectors hold each revision's official schema.
    let vendored: BTreeSet<String> = std::fs::read_dir(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../core/tests/vectors/mcp/schema"),
    )
    .unwrap()
    .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
    .collect();
    assert_eq!(vendored, ours, "core/tests/vectors/mcp/schema/<revision>");
}

/// Each default is written once: the configuration's defaults are the
/// core's (frame limits, in-flight cap, drain deadline).
#[test]
fn configuration_defaults_are_the_cores() {
    let limits = evidence_wire_config::ServerLimits::default();
    let frame = evidence_wire::frame::Limits::default();
    assert_eq!(limits.max_body_bytes, frame.max_body_bytes);
    assert_eq!(limits.max_header_bytes, frame.max_header_bytes);
    assert_eq!(
        limits.max_in_flight,
        evidence_wire::server::ServerConfig::default().max_in_flight
    );
    assert_eq!(
        evidence_wire_config::DEFAULT_DRAIN_TIMEOUT_MS,
        evidence_wire::server::DEFAULT_DRAIN_TIMEOUT_MS
    );
}

/// The crates whose README lists their cargo features.
const CRATES_WITH_FEATURES: &[&str] = &[
    "core",
    "http",
    "provider",
    "bundled",
    "adapters/blocking",
    "adapters/smol",
    "adapters/tokio",
    "adapters/cli",
];

/// The features a `Cargo.toml`'s `[features]` table declares (`default` aside).
fn declared_features(manifest: &str) -> BTreeSet<String> {
    let mut in_features = false;
    let mut names = BTreeSet::new();
    for line in manifest.lines() {
        if line.starts_with('[') {
            in_features = line.trim() == "[features]";
            continue;
        }
        if !in_features || line.starts_with([' ', '#', ']']) {
            continue;
        }
        if let Some((name, _)) = line.split_once('=') {
            let name = name.trim();
            if !name.is_empty() && name != "default" {
                names.insert(name.to_owned());
            }
        }
    }
    names
}

/// Each crate's README says which feature brings what: a row of its
/// feature table for every feature its manifest declares, and none for a
/// feature it does not.
#[test]
fn every_cargo_feature_is_in_its_crates_readme() {
    for krate in CRATES_WITH_FEATURES {
        let declared = declared_features(&repository_file(&format!("{krate}/Cargo.toml")));
        assert!(
            !declared.is_empty(),
            "{krate}/Cargo.toml declares no features: update CRATES_WITH_FEATURES"
        );
        let readme = repository_file(&format!("{krate}/README.md"));
        let mut in_table = false;
        let mut documented = BTreeSet::new();
        for line in readme.lines() {
            if line.starts_with("| feature | default | brings |") {
                in_table = true;
                continue;
            }
            if in_table {
                let Some(row) = line.strip_prefix("| `") else {
                    if !line.starts_with("| ---") {
                        in_table = false;
                    }
                    continue;
                };
                if let Some((name, _)) = row.split_once('`') {
                    documented.insert(name.to_owned());
                }
            }
        }
        assert_eq!(
            documented, declared,
            "{krate}/README.md's feature table (| feature | default | brings |) must list exactly the features of {krate}/Cargo.toml"
        );
    }
}
