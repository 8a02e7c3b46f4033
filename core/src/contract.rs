//! The Decision Gate capabilities contract of a provider.
//!
//! Decision Gate does not ask a provider what it can do at run time: it reads
//! a JSON *capabilities contract* from the `capabilities_path` of the
//! provider's configuration. A [`ProviderContract`] names the provider and
//! lists its checks; each [`CheckContract`] says what params it takes
//! (`params_schema`), what it answers (`result_schema`), which comparators a
//! gate may apply to the answer, and gives examples.
//!
//! A provider declares its checks once, as a [`ProviderContract`], and hands
//! it to the server as a [`crate::server::ServerContract`] (through
//! [`crate::server::ServerConfig::with_contract`]). From that one definition
//! the server derives its `tools/list` entry for `evidence_query` (checks in
//! the description, `query.check_id` an `enum` of their ids), checks every
//! query against it before the provider code runs (check id, provider id,
//! params against `params_schema`), and prints it for `capabilities_path`
//! ([`crate::server::ServerContract::contract_json`], what `evidence-wire
//! contract` outputs). A server without a contract lists the built-in
//! definition and hands every query on unchecked.
//!
//! Every field is required and unknown fields are rejected, as Decision Gate
//! does. [`ProviderContract::validate`] checks what serde cannot (ids, the
//! canonical comparator order, params consistency); with the `std` feature it
//! also compiles every schema (JSON Schema 2020-12, via `jsonschema`) and
//! checks each example against its schemas. Without `std` a schema is only
//! checked to be a JSON object or boolean.
//!
//! Decision Gate applies rules of its own on top of these (reserved names,
//! a size limit on the hashed contract, and, under its default strict
//! validation, a declared result type and comparators that suit it):
//! [`ProviderContract::check_decision_gate_rules`] lists every violation,
//! with its place and the rule's name (module `rules`).
//!
//! Limits: a contract is configuration, read from a local file whose size
//! the loader bounds ([`MAX_CONTRACT_BYTES`]); nothing here reads files.

use alloc::borrow::ToOwned;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

mod rules;

pub use rules::{
    MAX_SCHEMA_NESTING, RESERVED_PROVIDER_IDS, RULE_ALLOWED_COMPARATORS_OVERRIDE,
    RULE_COMPARATOR_FOR_TYPE, RULE_CONTRACT_SIZE, RULE_RESERVED_PROVIDER_ID,
    RULE_RESULT_SCHEMA_TYPE, RuleViolation,
};

/// The largest capabilities contract file a loader should read (1 MiB).
pub const MAX_CONTRACT_BYTES: u64 = 1024 * 1024;

/// How a gate may compare a check's result, in Decision Gate's canonical
/// order (the order of the variants, which is also the `Ord` order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Comparator {
    /// `equals`
    Equals,
    /// `not_equals`
    NotEquals,
    /// `greater_than`
    GreaterThan,
    /// `greater_than_or_equal`
    GreaterThanOrEqual,
    /// `less_than`
    LessThan,
    /// `less_than_or_equal`
    LessThanOrEqual,
    /// `lex_greater_than`
    LexGreaterThan,
    /// `lex_greater_than_or_equal`
    LexGreaterThanOrEqual,
    /// `lex_less_than`
    LexLessThan,
    /// `lex_less_than_or_equal`
    LexLessThanOrEqual,
    /// `contains`
    Contains,
    /// `in_set`
    InSet,
    /// `deep_equals`
    DeepEquals,
    /// `deep_not_equals`
    DeepNotEquals,
    /// `exists`
    Exists,
    /// `not_exists`
    NotExists,
}

impl Comparator {
    /// Every comparator, in canonical order.
    pub const ALL: [Comparator; 16] = [
        Comparator::Equals,
        Comparator::NotEquals,
        Comparator::GreaterThan,
        Comparator::GreaterThanOrEqual,
        Comparator::LessThan,
        Comparator::LessThanOrEqual,
        Comparator::LexGreaterThan,
        Comparator::LexGreaterThanOrEqual,
        Comparator::LexLessThan,
        Comparator::LexLessThanOrEqual,
        Comparator::Contains,
        Comparator::InSet,
        Comparator::DeepEquals,
        Comparator::DeepNotEquals,
        Comparator::Exists,
        Comparator::NotExists,
    ];

    /// The wire name, e.g. `greater_than_or_equal`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Comparator::Equals => "equals",
            Comparator::NotEquals => "not_equals",
            Comparator::GreaterThan => "greater_than",
            Comparator::GreaterThanOrEqual => "greater_than_or_equal",
            Comparator::LessThan => "less_than",
            Comparator::LessThanOrEqual => "less_than_or_equal",
            Comparator::LexGreaterThan => "lex_greater_than",
            Comparator::LexGreaterThanOrEqual => "lex_greater_than_or_equal",
            Comparator::LexLessThan => "lex_less_than",
            Comparator::LexLessThanOrEqual => "lex_less_than_or_equal",
            Comparator::Contains => "contains",
            Comparator::InSet => "in_set",
            Comparator::DeepEquals => "deep_equals",
            Comparator::DeepNotEquals => "deep_not_equals",
            Comparator::Exists => "exists",
            Comparator::NotExists => "not_exists",
        }
    }
}

impl fmt::Display for Comparator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether a check's answer depends only on its inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Determinism {
    /// The same params and context always give the same answer.
    Deterministic,
    /// The answer depends on the trigger time of the context.
    TimeDependent,
    /// The answer depends on the outside world (files, network, environment).
    External,
}

/// The transport a contract declares; Decision Gate knows only `mcp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContractTransport {
    /// JSON-RPC `tools/call` of `evidence_query` over stdio or HTTP.
    #[default]
    Mcp,
}

/// One example of a check: params sent and result returned.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckExample {
    /// What the example shows.
    pub description: String,
    /// The `query.params` of the example (`null` when the check takes none).
    pub params: Value,
    /// The value the check answers.
    pub result: Value,
}

/// What one check of a provider takes and answers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckContract {
    /// The `query.check_id` that selects this check; unique in the contract.
    pub check_id: String,
    /// What the check answers, for a person.
    pub description: String,
    /// Whether the answer depends only on the inputs.
    pub determinism: Determinism,
    /// True when `query.params` must be present.
    pub params_required: bool,
    /// JSON Schema (2020-12) of `query.params`; an object schema.
    pub params_schema: Value,
    /// JSON Schema (2020-12) of the answered value.
    pub result_schema: Value,
    /// Comparators a gate may apply; non-empty, canonical order, no repeats.
    pub allowed_comparators: Vec<Comparator>,
    /// The anchor types the check's evidence carries (e.g. `file_path_rooted`).
    pub anchor_types: Vec<String>,
    /// The content types of the check's evidence (e.g. `application/json`).
    pub content_types: Vec<String>,
    /// Examples, each checked against the schemas under `std`.
    pub examples: Vec<CheckExample>,
}

/// A provider's capabilities contract, as read from `capabilities_path`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderContract {
    /// The provider id; must equal the provider's name in the configuration.
    pub provider_id: String,
    /// A display name.
    pub name: String,
    /// What the provider does, for a person.
    pub description: String,
    /// Always `mcp`.
    pub transport: ContractTransport,
    /// JSON Schema (2020-12) of the provider's own configuration.
    pub config_schema: Value,
    /// The checks; non-empty, unique `check_id`s.
    pub checks: Vec<CheckContract>,
    /// Free-form notes for operators.
    pub notes: Vec<String>,
}

/// Why a capabilities contract was refused.
///
/// `location` fields name the place in the contract, e.g.
/// `checks[1].params_schema`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ContractError {
    /// The text is not JSON, or not the shape of a contract.
    #[error(
        "contract is not valid at line {line}, column {column}: {detail} (every field of a contract is required and unknown fields are refused)"
    )]
    Parse {
        /// 1-based line of the error.
        line: usize,
        /// 1-based column of the error.
        column: usize,
        /// What serde reported.
        detail: String,
    },
    /// `provider_id` is not the provider's configured name.
    #[error(
        "contract provider_id `{found}` does not match the provider name `{expected}`; make them equal"
    )]
    ProviderIdMismatch {
        /// The configured provider name.
        expected: String,
        /// The `provider_id` in the contract.
        found: String,
    },
    /// A required text field is empty or has surrounding whitespace.
    #[error("{location} must be non-empty with no leading or trailing whitespace, found {found:?}")]
    BadText {
        /// Where.
        location: String,
        /// The text found.
        found: String,
    },
    /// The contract has no checks.
    #[error("contract declares no checks; add at least one entry to `checks`")]
    NoChecks,
    /// Two checks share an id.
    #[error(
        "checks[{second}].check_id `{check_id}` repeats checks[{first}].check_id; check ids must be unique"
    )]
    DuplicateCheckId {
        /// The repeated id.
        check_id: String,
        /// Index of the first check with that id.
        first: usize,
        /// Index of the repeat.
        second: usize,
    },
    /// `allowed_comparators` is empty.
    #[error(
        "checks[{index}].allowed_comparators of check `{check_id}` is empty; list at least one comparator"
    )]
    NoComparators {
        /// Index of the check.
        index: usize,
        /// The check id.
        check_id: String,
    },
    /// A comparator appears twice.
    #[error(
        "checks[{index}].allowed_comparators of check `{check_id}` lists `{comparator}` twice; remove the repeat"
    )]
    DuplicateComparator {
        /// Index of the check.
        index: usize,
        /// The check id.
        check_id: String,
        /// The repeated comparator.
        comparator: Comparator,
    },
    /// The comparators are not in canonical order.
    #[error(
        "checks[{index}].allowed_comparators of check `{check_id}` lists `{after}` after `{before}`; list comparators in canonical order (equals, not_equals, greater_than, greater_than_or_equal, less_than, less_than_or_equal, lex_greater_than, lex_greater_than_or_equal, lex_less_than, lex_less_than_or_equal, contains, in_set, deep_equals, deep_not_equals, exists, not_exists)"
    )]
    ComparatorsOutOfOrder {
        /// Index of the check.
        index: usize,
        /// The check id.
        check_id: String,
        /// The comparator listed first.
        before: Comparator,
        /// The comparator listed after it, which belongs before it.
        after: Comparator,
    },
    /// A schema is not a valid JSON Schema.
    #[error("{location} is not a valid JSON Schema (2020-12): {detail}")]
    InvalidSchema {
        /// Where, e.g. `checks[0].result_schema`.
        location: String,
        /// Why.
        detail: String,
    },
    /// `params_required` and `params_schema` disagree.
    #[error("checks[{index}] (check `{check_id}`): {detail}")]
    ParamsInconsistent {
        /// Index of the check.
        index: usize,
        /// The check id.
        check_id: String,
        /// What disagrees and how to fix it.
        detail: String,
    },
    /// An example does not match the check's schemas.
    #[error("{location} does not match the check's {schema} at `{pointer}`: {detail}")]
    InvalidExample {
        /// Where, e.g. `checks[0].examples[1].params`.
        location: String,
        /// `params_schema` or `result_schema`.
        schema: &'static str,
        /// JSON pointer of the first failure in the example.
        pointer: String,
        /// Why.
        detail: String,
    },
}

/// Why the params of a query were refused by a check.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParamsError {
    /// The check requires params and the query has none.
    #[error("check `{check_id}` requires params; send `query.params` as an object")]
    Missing {
        /// The check id.
        check_id: String,
    },
    /// Params are present but not a JSON object.
    #[error("params of check `{check_id}` must be a JSON object, found {found}")]
    NotAnObject {
        /// The check id.
        check_id: String,
        /// The JSON type found.
        found: &'static str,
    },
    /// Params do not match `params_schema`.
    #[error("params of check `{check_id}` do not match its params_schema at `{pointer}`: {detail}")]
    SchemaMismatch {
        /// The check id.
        check_id: String,
        /// JSON pointer of the first failure inside the params (`""` = the whole object).
        pointer: String,
        /// What the schema said.
        detail: String,
    },
    /// The check's own `params_schema` does not compile (the contract was not validated).
    #[error("params_schema of check `{check_id}` is not a valid JSON Schema: {detail}")]
    InvalidSchema {
        /// The check id.
        check_id: String,
        /// Why.
        detail: String,
    },
}

fn json_type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn check_text(location: impl FnOnce() -> String, text: &str) -> Result<(), ContractError> {
    if text.is_empty() || text.trim() != text {
        return Err(ContractError::BadText {
            location: location(),
            found: text.to_owned(),
        });
    }
    Ok(())
}

impl ProviderContract {
    /// Parses a contract from JSON text (every field required, unknown fields refused).
    ///
    /// This does not [`validate`](Self::validate) it.
    pub fn from_json_str(text: &str) -> Result<ProviderContract, ContractError> {
        serde_json::from_str(text).map_err(|error| ContractError::Parse {
            line: error.line(),
            column: error.column(),
            detail: format!("{error}"),
        })
    }

    /// The check with id `check_id`, if any.
    pub fn check(&self, check_id: &str) -> Option<&CheckContract> {
        self.checks.iter().find(|check| check.check_id == check_id)
    }

    /// Checks everything serde cannot: `provider_id` equals
    /// `expected_provider_id`, ids and texts are non-empty and trimmed,
    /// check ids unique, comparators non-empty, unique and in canonical
    /// order, `params_schema` an object schema consistent with
    /// `params_required`, and (with `std`) every schema compiles and every
    /// example matches its schemas. Returns the first problem found.
    pub fn validate(&self, expected_provider_id: &str) -> Result<(), ContractError> {
        check_text(|| "provider_id".to_owned(), &self.provider_id)?;
        if self.provider_id != expected_provider_id {
            return Err(ContractError::ProviderIdMismatch {
                expected: expected_provider_id.to_owned(),
                found: self.provider_id.clone(),
            });
        }
        check_text(|| "name".to_owned(), &self.name)?;
        check_text(|| "description".to_owned(), &self.description)?;
        check_schema("config_schema", &self.config_schema)?;
        if self.checks.is_empty() {
            return Err(ContractError::NoChecks);
        }
        for (index, check) in self.checks.iter().enumerate() {
            if let Some(first) = self
                .checks
                .iter()
                .take(index)
                .position(|earlier| earlier.check_id == check.check_id)
            {
                return Err(ContractError::DuplicateCheckId {
                    check_id: check.check_id.clone(),
                    first,
                    second: index,
                });
            }
            check.validate_at(index)?;
        }
        Ok(())
    }
}

impl CheckContract {
    /// Validates this check as entry `index` of a contract (see
    /// [`ProviderContract::validate`]).
    pub fn validate_at(&self, index: usize) -> Result<(), ContractError> {
        check_text(|| format!("checks[{index}].check_id"), &self.check_id)?;
        check_text(|| format!("checks[{index}].description"), &self.description)?;
        self.validate_comparators(index)?;
        self.validate_params_shape(index)?;
        check_schema(
            &format!("checks[{index}].params_schema"),
            &self.params_schema,
        )?;
        check_schema(
            &format!("checks[{index}].result_schema"),
            &self.result_schema,
        )?;
        for (position, text) in self.anchor_types.iter().enumerate() {
            check_text(|| format!("checks[{index}].anchor_types[{position}]"), text)?;
        }
        for (position, text) in self.content_types.iter().enumerate() {
            check_text(
                || format!("checks[{index}].content_types[{position}]"),
                text,
            )?;
        }
        for (position, example) in self.examples.iter().enumerate() {
            check_text(
                || format!("checks[{index}].examples[{position}].description"),
                &example.description,
            )?;
            self.validate_example(index, position, example)?;
        }
        Ok(())
    }

    fn validate_comparators(&self, index: usize) -> Result<(), ContractError> {
        if self.allowed_comparators.is_empty() {
            return Err(ContractError::NoComparators {
                index,
                check_id: self.check_id.clone(),
            });
        }
        for (position, comparator) in self.allowed_comparators.iter().enumerate() {
            if self
                .allowed_comparators
                .iter()
                .take(position)
                .any(|earlier| earlier == comparator)
            {
                return Err(ContractError::DuplicateComparator {
                    index,
                    check_id: self.check_id.clone(),
                    comparator: *comparator,
                });
            }
        }
        for pair in self.allowed_comparators.windows(2) {
            if let [before, after] = pair {
                if before > after {
                    return Err(ContractError::ComparatorsOutOfOrder {
                        index,
                        check_id: self.check_id.clone(),
                        before: *before,
                        after: *after,
                    });
                }
            }
        }
        Ok(())
    }

    fn validate_params_shape(&self, index: usize) -> Result<(), ContractError> {
        let inconsistent = |detail: String| ContractError::ParamsInconsistent {
            index,
            check_id: self.check_id.clone(),
            detail,
        };
        let schema = match &self.params_schema {
            Value::Object(schema) => schema,
            other => {
                return Err(inconsistent(format!(
                    "params_schema must be a JSON Schema object such as {{\"type\":\"object\"}}, found {}",
                    json_type_name(other)
                )));
            }
        };
        match schema.get("type") {
            None => {}
            Some(Value::String(kind)) if kind == "object" => {}
            Some(Value::Array(kinds)) if kinds.iter().any(|k| k == "object") => {}
            Some(other) => {
                return Err(inconsistent(format!(
                    "params_schema has \"type\": {other}, but params are always a JSON object; use \"type\": \"object\""
                )));
            }
        }
        if !self.params_required {
            if let Some(Value::Array(required)) = schema.get("required") {
                if !required.is_empty() {
                    return Err(inconsistent(
                        "params_required is false but params_schema lists required properties; set params_required = true or drop `required`".to_owned(),
                    ));
                }
            }
        }
        Ok(())
    }

    fn validate_example(
        &self,
        index: usize,
        position: usize,
        example: &CheckExample,
    ) -> Result<(), ContractError> {
        let location = || format!("checks[{index}].examples[{position}].params");
        if example.params.is_null() {
            if self.params_required {
                return Err(ContractError::InvalidExample {
                    location: location(),
                    schema: "params_schema",
                    pointer: String::new(),
                    detail: "the check requires params but the example has none".to_owned(),
                });
            }
        } else {
            #[cfg(feature = "json-schema")]
            if let Some((pointer, detail)) =
                first_schema_error(&self.params_schema, &example.params)
            {
                return Err(ContractError::InvalidExample {
                    location: location(),
                    schema: "params_schema",
                    pointer,
                    detail,
                });
            }
        }
        #[cfg(feature = "json-schema")]
        if let Some((pointer, detail)) = first_schema_error(&self.result_schema, &example.result) {
            return Err(ContractError::InvalidExample {
                location: format!("checks[{index}].examples[{position}].result"),
                schema: "result_schema",
                pointer,
                detail,
            });
        }
        Ok(())
    }

    /// Checks the `query.params` of a query against this check, before the
    /// provider is called. `Value::Null` stands for absent params.
    ///
    /// Without `json-schema`, presence, object shape and unknown members
    /// are checked (a member `params_schema` does not list is refused
    /// when the schema closes the object with `"additionalProperties":
    /// false` and has no `patternProperties`, with the message the
    /// `json-schema` path gives); with it the params are validated against
    /// `params_schema` and the error names the JSON pointer of the first
    /// failure. This compiles the schema on every call; with the
    /// `json-schema` feature, keep a `ParamsValidator`
    /// (`CheckContract::params_validator`) to validate many queries.
    pub fn validate_params(&self, params: &Value) -> Result<(), ParamsError> {
        self.validate_params_presence(params)?;
        #[cfg(feature = "json-schema")]
        if !params.is_null() {
            return self.params_validator()?.validate(params);
        }
        #[cfg(not(feature = "json-schema"))]
        self.validate_params_members(params)?;
        Ok(())
    }

    /// The members of `params` a closed `params_schema` (top-level
    /// `"additionalProperties": false`, no `patternProperties`) does not
    /// list in `properties` are refused, all named, as JSON Schema
    /// validation words it.
    #[cfg(not(feature = "json-schema"))]
    fn validate_params_members(&self, params: &Value) -> Result<(), ParamsError> {
        let (Value::Object(params), Value::Object(schema)) = (params, &self.params_schema) else {
            return Ok(());
        };
        if schema.get("additionalProperties") != Some(&Value::Bool(false))
            || schema.contains_key("patternProperties")
        {
            return Ok(());
        }
        let listed = schema.get("properties").and_then(Value::as_object);
        let unknown: Vec<&str> = params
            .keys()
            .filter(|name| !listed.is_some_and(|listed| listed.contains_key(name.as_str())))
            .map(String::as_str)
            .collect();
        if unknown.is_empty() {
            return Ok(());
        }
        let quoted: Vec<String> = unknown.iter().map(|name| format!("'{name}'")).collect();
        Err(ParamsError::SchemaMismatch {
            check_id: self.check_id.clone(),
            pointer: String::new(),
            detail: format!(
                "Additional properties are not allowed ({} {} unexpected)",
                quoted.join(", "),
                if unknown.len() == 1 { "was" } else { "were" }
            ),
        })
    }

    fn validate_params_presence(&self, params: &Value) -> Result<(), ParamsError> {
        match params {
            Value::Null if self.params_required => Err(ParamsError::Missing {
                check_id: self.check_id.clone(),
            }),
            Value::Null | Value::Object(_) => Ok(()),
            other => Err(ParamsError::NotAnObject {
                check_id: self.check_id.clone(),
                found: json_type_name(other),
            }),
        }
    }

    /// Compiles `params_schema` once for validating many queries.
    #[cfg(feature = "json-schema")]
    #[cfg_attr(docsrs, doc(cfg(feature = "json-schema")))]
    pub fn params_validator(&self) -> Result<ParamsValidator, ParamsError> {
        let validator = jsonschema::draft202012::new(&self.params_schema).map_err(|error| {
            ParamsError::InvalidSchema {
                check_id: self.check_id.clone(),
                detail: format!("{error}"),
            }
        })?;
        Ok(ParamsValidator {
            check_id: self.check_id.clone(),
            params_required: self.params_required,
            validator,
        })
    }
}

/// A check's compiled `params_schema` (see [`CheckContract::params_validator`]).
#[cfg(feature = "json-schema")]
#[cfg_attr(docsrs, doc(cfg(feature = "json-schema")))]
pub struct ParamsValidator {
    check_id: String,
    params_required: bool,
    validator: jsonschema::Validator,
}

#[cfg(feature = "json-schema")]
impl fmt::Debug for ParamsValidator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ParamsValidator")
            .field("check_id", &self.check_id)
            .field("params_required", &self.params_required)
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "json-schema")]
impl ParamsValidator {
    /// Validates `params` (`Value::Null` = absent) as
    /// [`CheckContract::validate_params`] does.
    pub fn validate(&self, params: &Value) -> Result<(), ParamsError> {
        match params {
            Value::Null if self.params_required => {
                return Err(ParamsError::Missing {
                    check_id: self.check_id.clone(),
                });
            }
            Value::Null => return Ok(()),
            Value::Object(_) => {}
            other => {
                return Err(ParamsError::NotAnObject {
                    check_id: self.check_id.clone(),
                    found: json_type_name(other),
                });
            }
        }
        match self.validator.iter_errors(params).next() {
            None => Ok(()),
            Some(error) => Err(ParamsError::SchemaMismatch {
                check_id: self.check_id.clone(),
                pointer: error.instance_path().as_str().to_owned(),
                detail: format!("{error}"),
            }),
        }
    }
}

/// Compiles `schema` as JSON Schema 2020-12 (std) or checks that it is an
/// object or boolean (no_std).
fn check_schema(location: &str, schema: &Value) -> Result<(), ContractError> {
    if !matches!(schema, Value::Object(_) | Value::Bool(_)) {
        return Err(ContractError::InvalidSchema {
            location: location.to_owned(),
            detail: format!(
                "a schema is a JSON object or boolean, found {}",
                json_type_name(schema)
            ),
        });
    }
    #[cfg(feature = "json-schema")]
    jsonschema::draft202012::new(schema).map_err(|error| ContractError::InvalidSchema {
        location: location.to_owned(),
        detail: format!("{error}"),
    })?;
    Ok(())
}

/// The JSON pointer and message of the first failure of `instance` against
/// `schema`, or `None` when it matches (or the schema does not compile,
/// which [`check_schema`] reports).
#[cfg(feature = "json-schema")]
fn first_schema_error(schema: &Value, instance: &Value) -> Option<(String, String)> {
    let validator = jsonschema::draft202012::new(schema).ok()?;
    let error = validator.iter_errors(instance).next()?;
    Some((
        error.instance_path().as_str().to_owned(),
        format!("{error}"),
    ))
}
