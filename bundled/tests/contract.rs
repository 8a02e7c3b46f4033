//! The bundled provider's contract against Decision Gate: its comparators
//! equal those of the equivalent built-ins (reference/wire-facts.md §5,
//! as a table), every result schema passes Decision Gate's strict rule
//! (`ProviderContract::check_decision_gate_rules` finds nothing), and the
//! JSONPath length limit is in the params schema.

use evidence_wire::contract::{Comparator, ProviderContract};
use evidence_wire_bundled::{BundledProvider, BundledSettings, MAX_JSONPATH_CHARS};

fn contract() -> ProviderContract {
    BundledProvider::new(BundledSettings::default())
        .expect("provider")
        .contract()
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
        serde_json::json!(true)
    );
}

#[test]
fn the_jsonpath_length_limit_is_in_the_params_schema() {
    let contract = contract();
    let json_path = contract.check("json_path").expect("json_path");
    assert_eq!(
        json_path.params_schema["properties"]["jsonpath"]["maxLength"],
        serde_json::json!(MAX_JSONPATH_CHARS)
    );
    let too_long =
        serde_json::json!({"file": "a.json", "jsonpath": "$".repeat(MAX_JSONPATH_CHARS + 1)});
    assert!(json_path.validate_params(&too_long).is_err());
    let longest = serde_json::json!({"file": "a.json", "jsonpath": "$".repeat(MAX_JSONPATH_CHARS)});
    assert!(json_path.validate_params(&longest).is_ok());
}
