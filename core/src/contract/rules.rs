//! Decision Gate's own rules for a capabilities contract, beyond what
//! [`ProviderContract::validate`] checks: the ones it applies when it loads
//! the contract and, with its default strict validation, when a scenario
//! uses a check (reference/wire-facts.md §4–§5).
//!
//! Each rule has a stable name ([`RuleViolation::rule`]):
//!
//! | rule | what Decision Gate does otherwise |
//! | --- | --- |
//! | [`RULE_RESERVED_PROVIDER_ID`] | `time`, `env`, `json`, `http` name its built-ins: a `[[providers]]` entry of type `mcp` cannot use them |
//! | [`RULE_CONTRACT_SIZE`] | it hashes the contract's canonical JSON with a 1 MiB limit and refuses a larger one |
//! | [`RULE_RESULT_SCHEMA_TYPE`] | strict validation refuses `scenario_define` with `-32602 "schema missing type declaration"` (or a sibling message) unless a `result_schema` declares a `type`, a scalar `enum` of one type, or `"x-decision-gate": {"dynamic_type": true}`; each option of a `oneOf` / `anyOf` likewise |
//! | [`RULE_COMPARATOR_FOR_TYPE`] | strict validation refuses a condition whose comparator does not suit the result type ("not allowed for schema type"), or that needs an explicit opt-in in `x-decision-gate.allowed_comparators` ("requires explicit opt-in"): a comparator the contract allows but no scenario can use |
//! | [`RULE_ALLOWED_COMPARATORS_OVERRIDE`] | an `x-decision-gate.allowed_comparators` list that is empty, unreadable, or names a comparator the type forbids is refused |
//!
//! The type classes and what each allows (strict validation): boolean and
//! enum: equals, not_equals, in_set, exists, not_exists; integer, number,
//! `date` and `date-time` strings: those plus the four orderings; string:
//! equals, not_equals, contains, in_set, exists, not_exists, with the four
//! `lex_*` orderings by opt-in; `uuid` string as enum; array of scalars:
//! contains, exists, not_exists, deep equality by opt-in; array of other
//! items and object: exists, not_exists, deep equality by opt-in; null:
//! equals, not_equals, exists, not_exists; dynamic: all sixteen. A union
//! (`type` array, `oneOf`, `anyOf`) allows what every non-null member
//! allows.
//!
//! No recursion here follows anything but the schema's own `items`,
//! `oneOf` and `anyOf` nesting, and that is bounded by
//! [`MAX_SCHEMA_NESTING`] (a contract is operator input read from a file of
//! at most 1 MiB, but a contract check must not be the thing that crashes).

use alloc::borrow::ToOwned;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use serde_json::Value;

use super::{Comparator, MAX_CONTRACT_BYTES, ProviderContract};

/// Rule: the provider id is not one of Decision Gate's built-in names.
pub const RULE_RESERVED_PROVIDER_ID: &str = "reserved_provider_id";
/// Rule: the contract's JSON is at most [`MAX_CONTRACT_BYTES`].
pub const RULE_CONTRACT_SIZE: &str = "contract_size";
/// Rule: a `result_schema` declares its type (strict validation).
pub const RULE_RESULT_SCHEMA_TYPE: &str = "result_schema_type";
/// Rule: every allowed comparator suits the result type (strict validation).
pub const RULE_COMPARATOR_FOR_TYPE: &str = "comparator_for_type";
/// Rule: `x-decision-gate.allowed_comparators` is well formed.
pub const RULE_ALLOWED_COMPARATORS_OVERRIDE: &str = "allowed_comparators_override";

/// The provider names Decision Gate reserves for its built-ins.
pub const RESERVED_PROVIDER_IDS: [&str; 4] = ["time", "env", "json", "http"];

/// The deepest `items` / `oneOf` / `anyOf` nesting of a result schema
/// that the type rules follow.
pub const MAX_SCHEMA_NESTING: usize = 32;

/// One way a contract breaks a Decision Gate rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleViolation {
    /// Where, e.g. `checks[4].result_schema` or
    /// `checks[1].allowed_comparators[2]`.
    pub location: String,
    /// The rule's stable name, one of the `RULE_*` constants.
    pub rule: &'static str,
    /// What is wrong, what Decision Gate answers, and what to do.
    pub detail: String,
}

impl fmt::Display for RuleViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: {}", self.location, self.rule, self.detail)
    }
}

impl ProviderContract {
    /// Every violation of Decision Gate's contract rules that
    /// [`validate`](Self::validate) does not already check (see the module
    /// docs of `contract::rules` for the list), each with its place in the
    /// contract and the rule's name. Empty when Decision Gate would load the
    /// contract and accept a scenario using any of its comparators.
    pub fn check_decision_gate_rules(&self) -> Vec<RuleViolation> {
        let mut violations = Vec::new();
        if RESERVED_PROVIDER_IDS.contains(&self.provider_id.as_str()) {
            violations.push(RuleViolation {
                location: "provider_id".to_owned(),
                rule: RULE_RESERVED_PROVIDER_ID,
                detail: format!(
                    "`{}` names a Decision Gate built-in; an external provider needs another name",
                    self.provider_id
                ),
            });
        }
        if let Ok(text) = serde_json::to_vec(self) {
            if text.len() as u64 > MAX_CONTRACT_BYTES {
                violations.push(RuleViolation {
                    location: "contract".to_owned(),
                    rule: RULE_CONTRACT_SIZE,
                    detail: format!(
                        "the contract is {} bytes of JSON, more than the {MAX_CONTRACT_BYTES} Decision Gate hashes; shorten descriptions and examples",
                        text.len()
                    ),
                });
            }
        }
        for (index, check) in self.checks.iter().enumerate() {
            let location = format!("checks[{index}].result_schema");
            let allowances = match allowances(&check.result_schema, 0) {
                Ok(allowances) => allowances,
                Err(why) => {
                    violations.push(RuleViolation {
                        location,
                        rule: RULE_RESULT_SCHEMA_TYPE,
                        detail: format!(
                            "{why}; Decision Gate's strict validation refuses every scenario using check `{}` (-32602 \"schema missing type declaration\" or a sibling message). Declare a \"type\", a scalar \"enum\", or \"x-decision-gate\": {{\"dynamic_type\": true}} for a result whose type depends on the data",
                            check.check_id
                        ),
                    });
                    continue;
                }
            };
            let overrides = match allowed_override(&check.result_schema) {
                Ok(overrides) => overrides,
                Err(why) => {
                    violations.push(RuleViolation {
                        location: format!("{location}.x-decision-gate.allowed_comparators"),
                        rule: RULE_ALLOWED_COMPARATORS_OVERRIDE,
                        detail: why,
                    });
                    None
                }
            };
            if let Some(overrides) = &overrides {
                for comparator in overrides {
                    if allowances.of(*comparator) == Allowance::Forbidden {
                        violations.push(RuleViolation {
                            location: format!("{location}.x-decision-gate.allowed_comparators"),
                            rule: RULE_ALLOWED_COMPARATORS_OVERRIDE,
                            detail: format!(
                                "lists `{comparator}`, which the result type of check `{}` does not allow; remove it",
                                check.check_id
                            ),
                        });
                    }
                }
            }
            for (position, comparator) in check.allowed_comparators.iter().enumerate() {
                let listed = overrides
                    .as_ref()
                    .is_none_or(|overrides| overrides.contains(comparator));
                let why = match allowances.of(*comparator) {
                    Allowance::Forbidden => Some(format!(
                        "`{comparator}` does not suit the result type of check `{}`; Decision Gate refuses such a condition (\"not allowed for schema type\"); remove it from allowed_comparators",
                        check.check_id
                    )),
                    Allowance::OptIn if overrides.is_none() => Some(format!(
                        "`{comparator}` needs an explicit opt-in for the result type of check `{}` (\"requires explicit opt-in\"); list it in result_schema's \"x-decision-gate\": {{\"allowed_comparators\": [...]}} or remove it",
                        check.check_id
                    )),
                    _ if !listed => Some(format!(
                        "`{comparator}` is missing from result_schema's x-decision-gate.allowed_comparators of check `{}`, so Decision Gate refuses it (\"not in allowed_comparators\"); add it there or remove it here",
                        check.check_id
                    )),
                    _ => None,
                };
                if let Some(detail) = why {
                    violations.push(RuleViolation {
                        location: format!("checks[{index}].allowed_comparators[{position}]"),
                        rule: RULE_COMPARATOR_FOR_TYPE,
                        detail,
                    });
                }
            }
        }
        violations
    }
}

/// Whether strict validation lets a condition use a comparator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Allowance {
    Allowed,
    OptIn,
    Forbidden,
}

/// The type classes of strict validation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TypeClass {
    Dynamic,
    Boolean,
    Integer,
    Number,
    String,
    Enum,
    ArrayScalar,
    ArrayComplex,
    Object,
    Null,
    Date,
    DateTime,
    Uuid,
}

impl TypeClass {
    fn is_scalar(self) -> bool {
        !matches!(
            self,
            TypeClass::Dynamic
                | TypeClass::ArrayScalar
                | TypeClass::ArrayComplex
                | TypeClass::Object
        )
    }

    fn allowance(self, comparator: Comparator) -> Allowance {
        use Comparator::*;
        let ordering = matches!(
            comparator,
            GreaterThan | GreaterThanOrEqual | LessThan | LessThanOrEqual
        );
        let lex = matches!(
            comparator,
            LexGreaterThan | LexGreaterThanOrEqual | LexLessThan | LexLessThanOrEqual
        );
        let presence = matches!(comparator, Exists | NotExists);
        let equality = matches!(comparator, Equals | NotEquals);
        let deep = matches!(comparator, DeepEquals | DeepNotEquals);
        let yes = |allowed: bool| {
            if allowed {
                Allowance::Allowed
            } else {
                Allowance::Forbidden
            }
        };
        match self {
            TypeClass::Dynamic => Allowance::Allowed,
            TypeClass::Boolean | TypeClass::Enum | TypeClass::Uuid => {
                yes(equality || presence || comparator == InSet)
            }
            TypeClass::Integer | TypeClass::Number | TypeClass::Date | TypeClass::DateTime => {
                yes(equality || presence || ordering || comparator == InSet)
            }
            TypeClass::String if lex => Allowance::OptIn,
            TypeClass::String => {
                yes(equality || presence || comparator == InSet || comparator == Contains)
            }
            TypeClass::ArrayScalar if deep => Allowance::OptIn,
            TypeClass::ArrayScalar => yes(presence || comparator == Contains),
            TypeClass::ArrayComplex | TypeClass::Object if deep => Allowance::OptIn,
            TypeClass::ArrayComplex | TypeClass::Object => yes(presence),
            TypeClass::Null => yes(equality || presence),
        }
    }
}

/// What a result schema allows, per comparator (canonical order).
struct Allowances([Allowance; 16]);

impl Allowances {
    fn of_class(class: TypeClass) -> Allowances {
        Allowances(Comparator::ALL.map(|comparator| class.allowance(comparator)))
    }

    fn of(&self, comparator: Comparator) -> Allowance {
        Comparator::ALL
            .iter()
            .position(|known| *known == comparator)
            .and_then(|index| self.0.get(index).copied())
            .unwrap_or(Allowance::Forbidden)
    }

    /// The stricter of the two, comparator by comparator.
    fn meet(self, other: &Allowances) -> Allowances {
        let mut merged = self.0;
        for (mine, theirs) in merged.iter_mut().zip(other.0.iter()) {
            *mine = (*mine).max(*theirs);
        }
        Allowances(merged)
    }
}

/// What strict validation allows for `schema`, or why it refuses it.
fn allowances(schema: &Value, nesting: usize) -> Result<Allowances, String> {
    if nesting > MAX_SCHEMA_NESTING {
        return Err(format!(
            "the schema nests oneOf / anyOf / items more than {MAX_SCHEMA_NESTING} deep"
        ));
    }
    let one_of = schema.get("oneOf");
    let any_of = schema.get("anyOf");
    if one_of.is_some() && any_of.is_some() {
        return Err("the schema has both oneOf and anyOf".to_owned());
    }
    if let Some(options) = one_of.or(any_of) {
        let Some(options) = options.as_array().filter(|options| !options.is_empty()) else {
            return Err("oneOf / anyOf must be a non-empty array of schemas".to_owned());
        };
        let mut members = Vec::new();
        let mut null_only = Vec::new();
        for option in options {
            if null_schema(option)? {
                null_only.push(option);
            } else {
                members.push(option);
            }
        }
        if members.is_empty() {
            members = null_only;
        }
        let mut merged: Option<Allowances> = None;
        for member in members {
            let next = allowances(member, nesting + 1)?;
            merged = Some(match merged {
                None => next,
                Some(merged) => merged.meet(&next),
            });
        }
        return merged.ok_or_else(|| "oneOf / anyOf has no usable option".to_owned());
    }
    let classes = type_classes(schema, nesting)?;
    let mut merged: Option<Allowances> = None;
    for class in classes {
        let next = Allowances::of_class(class);
        merged = Some(match merged {
            None => next,
            Some(merged) => merged.meet(&next),
        });
    }
    merged.ok_or_else(|| "the schema declares no type".to_owned())
}

/// Whether a union option stands for `null` alone.
fn null_schema(schema: &Value) -> Result<bool, String> {
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        if values.is_empty() {
            return Err("an enum must hold at least one value".to_owned());
        }
        return Ok(values.iter().all(Value::is_null));
    }
    match schema.get("type") {
        None => Ok(false),
        Some(Value::String(kind)) => Ok(kind == "null"),
        Some(Value::Array(kinds)) => {
            let mut null = false;
            let mut other = false;
            for kind in kinds {
                match kind.as_str() {
                    Some("null") => null = true,
                    Some(_) => other = true,
                    None => return Err("a \"type\" array must hold strings".to_owned()),
                }
            }
            Ok(null && !other)
        }
        Some(_) => Err("\"type\" must be a string or an array of strings".to_owned()),
    }
}

/// The type classes a (non-union) schema declares.
fn type_classes(schema: &Value, nesting: usize) -> Result<Vec<TypeClass>, String> {
    if let Some(meta) = schema.get("x-decision-gate") {
        let Some(meta) = meta.as_object() else {
            return Err("\"x-decision-gate\" must be an object".to_owned());
        };
        if let Some(dynamic) = meta.get("dynamic_type") {
            match dynamic.as_bool() {
                Some(true) => return Ok(Vec::from([TypeClass::Dynamic])),
                Some(false) => {}
                None => {
                    return Err("\"x-decision-gate\".dynamic_type must be a boolean".to_owned());
                }
            }
        }
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        let Some(first) = values.first() else {
            return Err("an enum must hold at least one value".to_owned());
        };
        let kind = |value: &Value| match value {
            Value::Null => 0,
            Value::Bool(_) => 1,
            Value::Number(_) => 2,
            Value::String(_) => 3,
            Value::Array(_) | Value::Object(_) => 4,
        };
        if values.iter().any(|value| kind(value) == 4) {
            return Err("enum values must be scalars (no arrays or objects)".to_owned());
        }
        if values.iter().any(|value| kind(value) != kind(first)) {
            return Err("enum values must all be of one scalar type".to_owned());
        }
        return Ok(Vec::from([if first.is_null() {
            TypeClass::Null
        } else {
            TypeClass::Enum
        }]));
    }
    let Some(declared) = schema.get("type") else {
        return Err("the schema has no \"type\", no \"enum\" and no x-decision-gate.dynamic_type (Decision Gate: \"schema missing type declaration\")".to_owned());
    };
    match declared {
        Value::String(kind) => Ok(Vec::from([class_of(kind, schema, nesting)?])),
        Value::Array(kinds) => {
            let mut classes = Vec::new();
            for kind in kinds {
                let Some(kind) = kind.as_str() else {
                    return Err("a \"type\" array must hold strings".to_owned());
                };
                classes.push(class_of(kind, schema, nesting)?);
            }
            if classes.is_empty() {
                return Err("a \"type\" array must not be empty".to_owned());
            }
            if classes.len() > 1 {
                classes.retain(|class| *class != TypeClass::Null);
            }
            Ok(classes)
        }
        _ => Err("\"type\" must be a string or an array of strings".to_owned()),
    }
}

fn class_of(kind: &str, schema: &Value, nesting: usize) -> Result<TypeClass, String> {
    Ok(match kind {
        "boolean" => TypeClass::Boolean,
        "integer" => TypeClass::Integer,
        "number" => TypeClass::Number,
        "object" => TypeClass::Object,
        "null" => TypeClass::Null,
        "string" => match schema.get("format").and_then(Value::as_str) {
            Some("date-time") => TypeClass::DateTime,
            Some("date") => TypeClass::Date,
            Some("uuid") => TypeClass::Uuid,
            _ => TypeClass::String,
        },
        "array" => {
            let scalar_items = schema
                .get("items")
                .filter(|_| nesting < MAX_SCHEMA_NESTING)
                .and_then(|items| type_classes(items, nesting + 1).ok())
                .is_some_and(|classes| classes.iter().all(|class| class.is_scalar()));
            if scalar_items {
                TypeClass::ArrayScalar
            } else {
                TypeClass::ArrayComplex
            }
        }
        other => return Err(format!("\"type\": \"{other}\" is not a JSON Schema type")),
    })
}

/// `x-decision-gate.allowed_comparators`, when the schema has it.
fn allowed_override(schema: &Value) -> Result<Option<Vec<Comparator>>, String> {
    let Some(list) = schema
        .get("x-decision-gate")
        .and_then(|meta| meta.get("allowed_comparators"))
    else {
        return Ok(None);
    };
    let list: Vec<Comparator> = serde_json::from_value(list.clone())
        .map_err(|error| format!("must be an array of comparator names: {error}"))?;
    if list.is_empty() {
        return Err("must not be empty; list the comparators, or drop the key".to_owned());
    }
    Ok(Some(list))
}
