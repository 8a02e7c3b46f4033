//! The bundled provider's generated contract against Decision Gate and
//! against what it promised before it was generated:
//!
//! - it equals the checked-in golden file `tests/data/contract.golden.json`
//!   (byte for byte what `evidence-wire contract` prints; regenerate with
//!   `EVIDENCE_WIRE_BLESS=1 cargo test -p evidence-wire-bundled --test it contract::`);
//! - its comparators equal those of the equivalent built-ins
//!   (reference/wire-facts.md §5, as a table), and every contract the
//!   provider can generate (any provider id, any configuration) passes
//!   Decision Gate's rules (`ProviderContract::check_decision_gate_rules`);
//!   the only thing that varies is the provider id;
//! - the derived params and result schemas accept and refuse exactly what
//!   the hand-written contract of before (`tests/data/contract.handwritten.json`)
//!   accepted and refused, on its examples, its refusal cases and edge cases.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic

use std::path::PathBuf;

use evidence_wire::contract::{Comparator, ProviderContract};
use evidence_wire_bundled::{BundledProvider, MAX_JSONPATH_CHARS};
use evidence_wire_config::BundledConfig;
use proptest::prelude::*;
use serde_json::{Value, json};

fn provider_with_id(id: &str) -> Result<BundledProvider, String> {
    let mut config = BundledConfig::default();
    config.provider_id = id.to_owned();
    BundledProvider::new(&config)
}

fn contract() -> ProviderContract {
    BundledProvider::new(&BundledConfig::default())
        .expect("provider")
        .contract()
}

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// What `evidence-wire contract` prints for the default configuration.
fn printed_contract() -> String {
    let provider = BundledProvider::new(&BundledConfig::default()).expect("provider");
    format!("{}\n", provider.server_contract().contract_json())
}

#[test]
fn the_generated_contract_equals_the_golden_file() {
    let path = data("contract.golden.json");
    let generated = printed_contract();
    if std::env::var_os("EVIDENCE_WIRE_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("write the golden file");
        return;
    }
    let golden = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        golden == generated,
        "the bundled provider's contract differs from {}.\n\
         If the change is intended (a check, a schema, a description of the table in bundled/src/checks.rs), \
         regenerate it with\n  EVIDENCE_WIRE_BLESS=1 cargo test -p evidence-wire-bundled --test it contract::\n\
         and review the diff. Generated:\n{generated}",
        path.display()
    );
}

/// Decision Gate's built-ins (wire-facts §5), by the bundled check that
/// stands for each; `file_size` has no built-in and takes Decision Gate's
/// strict-validation rule for an integer result.
fn decision_gate_table() -> Vec<(&'static str, &'static str, Vec<Comparator>)> {
    use Comparator::*;
    let integer = vec![
        Equals,
        NotEquals,
        GreaterThan,
        GreaterThanOrEqual,
        LessThan,
        LessThanOrEqual,
        InSet,
        Exists,
        NotExists,
    ];
    vec![
        ("time_now", "time.now", integer.clone()),
        (
            "time_after",
            "time.after",
            vec![Equals, NotEquals, InSet, Exists, NotExists],
        ),
        (
            "time_before",
            "time.before",
            vec![Equals, NotEquals, InSet, Exists, NotExists],
        ),
        (
            "env_get",
            "env.get",
            vec![Equals, NotEquals, Contains, InSet, Exists, NotExists],
        ),
        ("json_path", "json.path", Comparator::ALL.to_vec()),
        ("file_size", "(integer rule)", integer.clone()),
        ("http_status", "http.status", integer),
        ("http_body_hash", "http.body_hash", vec![Exists, NotExists]),
    ]
}

#[test]
fn comparators_equal_the_decision_gate_built_ins() {
    let contract = contract();
    let table = decision_gate_table();
    assert_eq!(
        contract
            .checks
            .iter()
            .map(|check| check.check_id.as_str())
            .collect::<Vec<_>>(),
        table.iter().map(|(ours, _, _)| *ours).collect::<Vec<_>>(),
        "the table covers every check"
    );
    for (ours, theirs, comparators) in table {
        let check = contract.check(ours).expect("check");
        assert_eq!(
            check.allowed_comparators, comparators,
            "{ours} must allow what Decision Gate's {theirs} allows"
        );
        let mut sorted = check.allowed_comparators.clone();
        sorted.sort();
        assert_eq!(sorted, check.allowed_comparators, "{ours}: canonical order");
    }
}

#[test]
fn the_contract_meets_decision_gates_rules() {
    let contract = contract();
    contract.validate(&contract.provider_id).expect("valid");
    let violations = contract.check_decision_gate_rules();
    assert!(violations.is_empty(), "{violations:#?}");
    // json_path answers whatever the file holds: Decision Gate's own form.
    let json_path = contract.check("json_path").expect("json_path");
    assert_eq!(
        json_path.result_schema["x-decision-gate"]["dynamic_type"],
        json!(true)
    );
}

#[test]
fn the_jsonpath_length_limit_is_in_the_params_schema() {
    let contract = contract();
    let json_path = contract.check("json_path").expect("json_path");
    assert_eq!(
        json_path.params_schema["properties"]["jsonpath"]["maxLength"],
        json!(MAX_JSONPATH_CHARS)
    );
    let too_long = json!({"file": "a.json", "jsonpath": "$".repeat(MAX_JSONPATH_CHARS + 1)});
    assert!(json_path.validate_params(&too_long).is_err());
    let longest = json!({"file": "a.json", "jsonpath": "$".repeat(MAX_JSONPATH_CHARS)});
    assert!(json_path.validate_params(&longest).is_ok());
}

/// Decision Gate's built-in names are refused as the provider id: the
/// contract would break its rules (`reserved_provider_id`). Before the
/// provider checked the rules, `evidence-wire contract --provider-id time`
/// printed such a contract.
#[test]
fn a_provider_id_decision_gate_refuses_is_refused() {
    for reserved in ["time", "env", "json", "http"] {
        let error = provider_with_id(reserved).expect_err(reserved);
        assert!(
            error.contains("reserved_provider_id") && error.contains("provider_id"),
            "{reserved}: {error}"
        );
    }
    for invalid in ["", " padded "] {
        let error = provider_with_id(invalid).expect_err(invalid);
        assert!(error.contains("provider_id"), "{invalid:?}: {error}");
    }
}

/// The golden contract with `provider_id` replaced.
fn golden_under(id: &str) -> Value {
    let mut golden: Value =
        serde_json::from_str(&printed_contract()).expect("the printed contract is JSON");
    golden["provider_id"] = json!(id);
    golden
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Every contract the provider generates passes Decision Gate's rules,
    /// and differs from the golden one only in its provider id, whatever
    /// the id and the rest of the configuration.
    #[test]
    fn every_generated_contract_meets_decision_gates_rules(
        id in prop_oneof![
            "[ -~]{0,40}",
            "\\PC{1,12}",
            proptest::sample::select(vec!["time", "env", "json", "http", "evidence-wire"])
                .prop_map(str::to_owned),
        ],
        root in "[a-z/]{0,12}",
        root_id in "[a-z0-9.-]{1,12}",
        nodes in 1u64..100_000,
        hosts in proptest::collection::vec("[a-z]{1,8}\\.example(:[1-9][0-9]{1,3})?", 0..3),
    ) {
        let mut config = BundledConfig::default();
        config.provider_id = id.clone();
        config.root = root.into();
        config.root_id = root_id;
        config.json.max_result_nodes = nodes;
        config.http.allow_hosts = hosts;
        match BundledProvider::new(&config) {
            Ok(provider) => {
                let contract = provider.contract();
                let violations = contract.check_decision_gate_rules();
                prop_assert!(violations.is_empty(), "{id:?}: {violations:#?}");
                prop_assert!(contract.validate(&id).is_ok());
                let generated: Value = serde_json::from_str(&provider.server_contract().contract_json())
                    .expect("JSON");
                prop_assert_eq!(generated, golden_under(&id));
            }
            Err(error) => {
                // Refused only for the id, and the refusal says so.
                prop_assert!(error.contains("provider_id"), "{id:?}: {error}");
                let reserved = ["time", "env", "json", "http"].contains(&id.as_str());
                prop_assert!(reserved || id.is_empty() || id.trim() != id, "{id:?}: {error}");
            }
        }
    }
}

/// The hand-written contract of before the table (kept as test data).
fn handwritten() -> ProviderContract {
    let text = std::fs::read_to_string(data("contract.handwritten.json")).expect("old contract");
    ProviderContract::from_json_str(&text).expect("old contract parses")
}

fn validator(schema: &Value) -> jsonschema::Validator {
    jsonschema::draft202012::new(schema).unwrap_or_else(|error| panic!("{schema}: {error}"))
}

/// Params documents per check: the old examples, the documents the old
/// schemas refused, and edge cases on each bound.
fn params_cases(check: &str) -> Vec<Value> {
    let string_cases = |name: &str| {
        vec![
            json!({name: "a"}),
            json!({name: ""}),
            json!({name: 5}),
            json!({name: null}),
            json!({name: ["a"]}),
            json!({name: "a", "extra": 1}),
            json!({}),
            json!(null),
            json!([]),
            json!("a"),
            json!({"other": "a"}),
        ]
    };
    let mut cases = match check {
        "time_now" => vec![json!({}), json!({"x": 1}), json!(null), json!([]), json!(5)],
        "time_after" | "time_before" => vec![
            json!({"timestamp": 0}),
            json!({"timestamp": -1}),
            json!({"timestamp": 1_893_456_000_000_i64}),
            json!({"timestamp": 1.5}),
            json!({"timestamp": 1.0}),
            json!({"timestamp": 18_446_744_073_709_551_615_u64}),
            json!({"timestamp": "2024-01-01T00:00:00Z"}),
            json!({"timestamp": "not a time"}),
            json!({"timestamp": ""}),
            json!({"timestamp": null}),
            json!({"timestamp": true}),
            json!({"timestamp": {"a": 1}}),
            json!({"timestamp": [1]}),
            json!({"timestamp": 1, "extra": 1}),
            json!({}),
            json!(null),
        ],
        "env_get" => string_cases("key"),
        "file_size" => string_cases("path"),
        "json_path" => {
            let mut cases = string_cases("file");
            cases.extend([
                json!({"file": "a.json", "jsonpath": "$.a"}),
                json!({"file": "a.json", "jsonpath": ""}),
                json!({"file": "a.json", "jsonpath": null}),
                json!({"file": "a.json", "jsonpath": 5}),
                json!({"file": "a.json", "jsonpath": "$".repeat(MAX_JSONPATH_CHARS)}),
                json!({"file": "a.json", "jsonpath": "$".repeat(MAX_JSONPATH_CHARS + 1)}),
                json!({"file": "a.json", "jsonpath": "é".repeat(MAX_JSONPATH_CHARS)}),
                json!({"file": "a.json", "jsonpath": "é".repeat(MAX_JSONPATH_CHARS + 1)}),
                json!({"jsonpath": "$.a"}),
                json!({"file": "", "jsonpath": "$.a"}),
            ]);
            cases
        }
        "http_status" | "http_body_hash" => {
            let mut cases = string_cases("url");
            cases.extend([
                json!({"url": "https://example.com/"}),
                json!({"url": format!("https://e.com/{}", "a".repeat(2048 - 14))}),
                json!({"url": format!("https://e.com/{}", "a".repeat(2048 - 13))}),
                json!({"url": "é".repeat(2048)}),
                json!({"url": "é".repeat(2049)}),
            ]);
            cases
        }
        other => panic!("no cases for {other}"),
    };
    for example in &handwritten().check(check).expect("old check").examples {
        cases.push(example.params.clone());
    }
    cases
}

/// Result documents per check: the old examples and values of each JSON
/// type and bound.
fn result_cases(check: &str) -> Vec<Value> {
    let mut cases = vec![
        json!(null),
        json!(true),
        json!(0),
        json!(-1),
        json!(99),
        json!(100),
        json!(999),
        json!(1000),
        json!(1.5),
        json!(1_710_000_000_000_i64),
        json!("text"),
        json!([1, 2]),
        json!({"a": 1}),
        json!({"algorithm": "sha256", "value": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}),
        json!({"algorithm": "sha512", "value": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}),
        json!({"algorithm": "sha256", "value": "E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855"}),
        json!({"algorithm": "sha256", "value": "e3b0"}),
        json!({"algorithm": "sha256"}),
        json!({"algorithm": "sha256", "value": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "extra": 1}),
    ];
    for example in &handwritten().check(check).expect("old check").examples {
        cases.push(example.result.clone());
    }
    cases
}

#[test]
fn the_derived_schemas_accept_and_refuse_what_the_handwritten_ones_did() {
    let old = handwritten();
    let new = contract();
    assert_eq!(old.checks.len(), new.checks.len());
    let mut compared = 0;
    for (before, after) in old.checks.iter().zip(&new.checks) {
        let id = before.check_id.as_str();
        assert_eq!(id, after.check_id, "same checks in the same order");
        assert_eq!(before.description, after.description, "{id}");
        assert_eq!(before.determinism, after.determinism, "{id}");
        assert_eq!(before.params_required, after.params_required, "{id}");
        assert_eq!(
            before.allowed_comparators, after.allowed_comparators,
            "{id}"
        );
        assert_eq!(before.anchor_types, after.anchor_types, "{id}");
        assert_eq!(before.content_types, after.content_types, "{id}");
        assert_eq!(before.examples, after.examples, "{id}");
        let (old_params, new_params) = (
            validator(&before.params_schema),
            validator(&after.params_schema),
        );
        for case in params_cases(id) {
            assert_eq!(
                old_params.is_valid(&case),
                new_params.is_valid(&case),
                "{id} params {case}: old schema {} / new schema {}",
                before.params_schema,
                after.params_schema
            );
            // The server's own check agrees with the schema.
            assert_eq!(
                after.validate_params(&case).is_ok(),
                new_params.is_valid(&case) || (case.is_null() && !after.params_required),
                "{id} params {case}"
            );
            compared += 1;
        }
        let (old_result, new_result) = (
            validator(&before.result_schema),
            validator(&after.result_schema),
        );
        for case in result_cases(id) {
            assert_eq!(
                old_result.is_valid(&case),
                new_result.is_valid(&case),
                "{id} result {case}: old schema {} / new schema {}",
                before.result_schema,
                after.result_schema
            );
            compared += 1;
        }
    }
    assert!(compared > 250, "{compared} documents compared");
    assert_eq!(old.name, new.name);
    assert_eq!(old.description, new.description);
    assert_eq!(old.notes, new.notes);
    assert_eq!(old.config_schema, new.config_schema);
    assert_eq!(old.transport, new.transport);
}
