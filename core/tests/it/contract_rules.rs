//! Decision Gate's contract rules (`ProviderContract::check_decision_gate_rules`),
//! as data: result schemas its strict validation accepts or refuses
//! (reference/wire-facts.md §5: a `type`, an `enum`, or
//! `"x-decision-gate": {"dynamic_type": true}`), comparators that do or do
//! not suit a result type, `x-decision-gate.allowed_comparators`, reserved
//! provider ids and the contract size. Each violation names its place in
//! the contract and its rule.

use evidence_wire::contract::{
    CheckContract, CheckExample, Comparator, ContractTransport, Determinism, ProviderContract,
    RULE_ALLOWED_COMPARATORS_OVERRIDE, RULE_COMPARATOR_FOR_TYPE, RULE_CONTRACT_SIZE,
    RULE_RESERVED_PROVIDER_ID, RULE_RESULT_SCHEMA_TYPE,
};
use serde_json::{Value, json};

fn contract(result_schema: Value, comparators: &[Comparator]) -> ProviderContract {
    ProviderContract {
        provider_id: "files".to_owned(),
        name: "files".to_owned(),
        description: "test provider".to_owned(),
        transport: ContractTransport::Mcp,
        config_schema: json!({"type": "object"}),
        checks: vec![CheckContract {
            check_id: "probe".to_owned(),
            description: "a probe".to_owned(),
            determinism: Determinism::External,
            params_required: false,
            params_schema: json!({"type": "object"}),
            result_schema,
            allowed_comparators: comparators.to_vec(),
            anchor_types: vec![],
            content_types: vec![],
            examples: vec![CheckExample {
                description: "none".to_owned(),
                params: Value::Null,
                result: Value::Null,
            }],
        }],
        notes: vec![],
    }
}

fn rules(contract: &ProviderContract) -> Vec<&'static str> {
    contract
        .check_decision_gate_rules()
        .iter()
        .map(|violation| violation.rule)
        .collect()
}

#[test]
fn result_schemas_under_strict_validation() {
    use Comparator::*;
    // (result_schema, accepted by the strict type rule)
    let table: &[(Value, bool)] = &[
        (json!({"type": "integer"}), true),
        (json!({"type": "string", "format": "date-time"}), true),
        (json!({"type": ["string", "null"]}), true),
        (json!({"enum": ["a", "b"]}), true),
        (json!({"enum": [null]}), true),
        (
            json!({"description": "any", "x-decision-gate": {"dynamic_type": true}}),
            true,
        ),
        (
            json!({"oneOf": [{"type": "string"}, {"type": "null"}]}),
            true,
        ),
        (
            json!({"anyOf": [{"type": "integer"}, {"type": "number"}]}),
            true,
        ),
        (json!({"type": "array", "items": {"type": "string"}}), true),
        // Refused: what our json_path declared before ({}), and its kin.
        (json!({}), false),
        (json!(true), false),
        (json!({"description": "any value"}), false),
        (json!({"x-decision-gate": {"dynamic_type": false}}), false),
        (
            json!({"x-decision-gate": {"dynamic_type": "yes"}, "type": "string"}),
            false,
        ),
        (json!({"x-decision-gate": [], "type": "string"}), false),
        (json!({"enum": []}), false),
        (json!({"enum": [1, "one"]}), false),
        (json!({"enum": [[1]]}), false),
        (json!({"type": []}), false),
        (json!({"type": 7}), false),
        (json!({"type": "date"}), false),
        (json!({"oneOf": []}), false),
        (
            json!({"oneOf": [{"type": "string"}], "anyOf": [{"type": "string"}]}),
            false,
        ),
        (
            json!({"anyOf": [{"type": "string"}, {"description": "untyped"}]}),
            false,
        ),
    ];
    for (schema, accepted) in table {
        let found = rules(&contract(schema.clone(), &[Exists]));
        let refused = found.contains(&RULE_RESULT_SCHEMA_TYPE);
        assert_eq!(!refused, *accepted, "{schema}: {found:?}");
        if refused {
            let violation = &contract(schema.clone(), &[Exists]).check_decision_gate_rules()[0];
            assert_eq!(violation.location, "checks[0].result_schema");
            assert!(
                violation.to_string().contains("result_schema_type"),
                "{violation}"
            );
        }
    }
}

#[test]
fn comparators_must_suit_the_result_type() {
    use Comparator::*;
    // (result_schema, comparators, the positions refused)
    let table: &[(Value, &[Comparator], &[usize])] = &[
        (
            json!({"type": "integer"}),
            &[Equals, GreaterThan, InSet, Exists],
            &[],
        ),
        (json!({"type": "integer"}), &[Equals, Contains], &[1]),
        (
            json!({"type": "boolean"}),
            &[Equals, NotEquals, InSet, Exists, NotExists],
            &[],
        ),
        (json!({"type": "boolean"}), &[Equals, GreaterThan], &[1]),
        (json!({"type": "string"}), &[Equals, Contains, InSet], &[]),
        // lex_* need an opt-in for strings.
        (json!({"type": "string"}), &[Equals, LexGreaterThan], &[1]),
        (
            json!({"type": "string", "x-decision-gate": {"allowed_comparators": ["equals", "lex_greater_than"]}}),
            &[Equals, LexGreaterThan],
            &[],
        ),
        // With an override list, a comparator outside it is refused too.
        (
            json!({"type": "string", "x-decision-gate": {"allowed_comparators": ["equals"]}}),
            &[Equals, Contains],
            &[1],
        ),
        // What our http_body_hash allowed before: equals on an object.
        (
            json!({"type": "object"}),
            &[Equals, NotEquals, DeepEquals, DeepNotEquals],
            &[0, 1, 2, 3],
        ),
        (json!({"type": "object"}), &[Exists, NotExists], &[]),
        (
            json!({"type": "array", "items": {"type": "integer"}}),
            &[Contains, Exists],
            &[],
        ),
        (
            json!({"type": "array", "items": {"type": "object"}}),
            &[Contains],
            &[0],
        ),
        (json!({"type": "null"}), &[Equals, Exists], &[]),
        (
            json!({"type": ["integer", "string"]}),
            &[Equals, GreaterThan, Contains],
            &[1, 2],
        ),
        (
            json!({"x-decision-gate": {"dynamic_type": true}}),
            &Comparator::ALL,
            &[],
        ),
    ];
    for (schema, comparators, refused) in table {
        let violations = contract(schema.clone(), comparators).check_decision_gate_rules();
        let found: Vec<usize> = violations
            .iter()
            .filter(|violation| violation.rule == RULE_COMPARATOR_FOR_TYPE)
            .map(|violation| {
                let location = violation
                    .location
                    .strip_prefix("checks[0].allowed_comparators[")
                    .and_then(|rest| rest.strip_suffix(']'))
                    .unwrap_or_else(|| panic!("location {}", violation.location));
                location.parse().expect("index")
            })
            .collect();
        assert_eq!(found, *refused, "{schema} {comparators:?}: {violations:?}");
    }
}

#[test]
fn allowed_comparators_overrides_are_checked() {
    use Comparator::*;
    for (schema, refused) in [
        (
            json!({"type": "string", "x-decision-gate": {"allowed_comparators": []}}),
            true,
        ),
        (
            json!({"type": "string", "x-decision-gate": {"allowed_comparators": ["bigger"]}}),
            true,
        ),
        (
            json!({"type": "string", "x-decision-gate": {"allowed_comparators": ["greater_than"]}}),
            true,
        ),
        (
            json!({"type": "string", "x-decision-gate": {"allowed_comparators": ["equals"]}}),
            false,
        ),
    ] {
        let found = rules(&contract(schema.clone(), &[Equals]));
        assert_eq!(
            found.contains(&RULE_ALLOWED_COMPARATORS_OVERRIDE),
            refused,
            "{schema}: {found:?}"
        );
    }
}

#[test]
fn reserved_ids_and_size() {
    let mut reserved = contract(json!({"type": "integer"}), &[Comparator::Equals]);
    reserved.provider_id = "json".to_owned();
    assert_eq!(rules(&reserved), [RULE_RESERVED_PROVIDER_ID]);

    let mut big = contract(json!({"type": "integer"}), &[Comparator::Equals]);
    big.notes = vec!["x".repeat(1024 * 1024)];
    assert_eq!(rules(&big), [RULE_CONTRACT_SIZE]);

    let fine = contract(json!({"type": "integer"}), &[Comparator::Equals]);
    assert!(fine.check_decision_gate_rules().is_empty());
}
