//! spec/bundled-provider.md against the table of checks: its "Checks"
//! table is generated from the provider (ids, descriptions, params,
//! result types, comparators, determinism, where each check runs) and must
//! equal what the code generates now; the Decision Gate mapping table names
//! exactly the provider's checks. Regenerate the table with
//! `EVIDENCE_WIRE_BLESS=1 cargo test -p evidence-wire-bundled --test it docs::`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic

use std::path::PathBuf;

use evidence_wire::contract::{CheckContract, Comparator, Determinism};
use evidence_wire_bundled::BundledProvider;
use evidence_wire_config::BundledConfig;
use serde_json::Value;

const BEGIN: &str = "<!-- BEGIN generated check table:";
const END: &str = "<!-- END generated check table -->";

fn spec_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../spec/bundled-provider.md")
}

fn params_of(check: &CheckContract) -> String {
    let Some(properties) = check.params_schema["properties"].as_object() else {
        return "none".to_owned();
    };
    let required: Vec<&str> = check.params_schema["required"]
        .as_array()
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let names: Vec<String> = properties
        .keys()
        .map(|name| {
            if required.contains(&name.as_str()) {
                format!("`{name}`")
            } else {
                format!("`{name}` (optional)")
            }
        })
        .collect();
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

fn result_of(check: &CheckContract) -> String {
    let schema = &check.result_schema;
    if schema.pointer("/x-decision-gate/dynamic_type") == Some(&Value::Bool(true)) {
        return "any JSON (dynamic type)".to_owned();
    }
    schema["type"].as_str().unwrap_or("see contract").to_owned()
}

fn comparators_of(check: &CheckContract) -> String {
    if check.allowed_comparators == Comparator::ALL {
        return "all sixteen".to_owned();
    }
    check
        .allowed_comparators
        .iter()
        .map(|comparator| comparator.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn determinism_of(check: &CheckContract) -> &'static str {
    match check.determinism {
        Determinism::Deterministic => "deterministic",
        Determinism::TimeDependent => "time_dependent",
        Determinism::External => "external",
    }
}

/// The table as the provider generates it.
fn generated_table() -> String {
    let provider = BundledProvider::new(&BundledConfig::default()).expect("provider");
    let mut table = String::from(
        "| check | what it answers | params | result | `allowed_comparators` | determinism | runs |\n\
         | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for check in provider.checks() {
        let contract = check.contract();
        table.push_str(&format!(
            "| `{}` | {} | {} | {} | {} | {} | {} |\n",
            contract.check_id,
            contract.description,
            params_of(contract),
            result_of(contract),
            comparators_of(contract),
            determinism_of(contract),
            if check.is_inline() {
                "inline"
            } else {
                "blocking pool"
            },
        ));
    }
    table
}

#[test]
fn the_spec_check_table_is_the_generated_one() {
    let path = spec_path();
    let spec = std::fs::read_to_string(&path).expect("spec/bundled-provider.md");
    let begin = spec.find(BEGIN).expect("the spec has the BEGIN marker");
    let body_start = begin
        + spec[begin..]
            .find("-->\n")
            .map(|end| end + "-->\n".len())
            .expect("the BEGIN marker closes");
    let end = spec.find(END).expect("the spec has the END marker");
    assert!(end >= body_start, "END after BEGIN");
    let generated = generated_table();
    if std::env::var_os("EVIDENCE_WIRE_BLESS").is_some() {
        let updated = format!("{}{generated}{}", &spec[..body_start], &spec[end..]);
        std::fs::write(&path, updated).expect("write the spec");
        return;
    }
    assert!(
        spec[body_start..end] == generated,
        "the check table of {} differs from the table of checks in bundled/src/checks.rs.\n\
         Regenerate it with\n  EVIDENCE_WIRE_BLESS=1 cargo test -p evidence-wire-bundled --test it docs::\n\
         Generated:\n{generated}",
        path.display()
    );
}

/// The check ids named in the first column of the table under `heading`.
fn first_column_ids(spec: &str, heading: &str) -> Vec<String> {
    let start = spec.find(heading).expect(heading);
    let mut ids = Vec::new();
    let mut in_table = false;
    for line in spec[start..].lines().skip(1) {
        if line.starts_with('|') {
            in_table = true;
            let first = line.split('|').nth(1).unwrap_or_default();
            for part in first.split('`').skip(1).step_by(2) {
                ids.push(part.to_owned());
            }
        } else if in_table {
            break;
        }
    }
    ids
}

#[test]
fn the_decision_gate_mapping_names_every_check_once() {
    let spec = std::fs::read_to_string(spec_path()).expect("spec/bundled-provider.md");
    let mut named = first_column_ids(&spec, "## Contract and comparators");
    named.sort();
    let mut ids = BundledProvider::check_ids();
    ids.sort();
    assert_eq!(named, ids);
}

#[test]
fn the_cli_help_lists_every_check_with_its_description() {
    let help = BundledProvider::checks_help();
    let provider = BundledProvider::new(&BundledConfig::default()).expect("provider");
    let lines: Vec<&str> = help.lines().skip(1).collect();
    assert_eq!(lines.len(), provider.checks().len(), "{help}");
    for (line, check) in lines.iter().zip(provider.checks()) {
        let mut words = line.split_whitespace();
        assert_eq!(words.next(), Some(check.id()), "{help}");
        assert!(line.ends_with(check.description()), "{help}");
    }
}
