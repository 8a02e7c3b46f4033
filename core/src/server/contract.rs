//! A provider's capabilities contract bound to its server: the one
//! definition of its checks behind `tools/list`, the check of every query
//! before the embedder sees it, and the `capabilities_path` JSON.
//!
//! Limits: a contract is configuration; its schemas are compiled once.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;

use serde_json::Value;

use super::tools::ToolDefinition;
use crate::contract::{ContractError, ProviderContract};
use crate::evidence::{EvidenceError, EvidenceQuery};

/// A provider's capabilities contract bound to its server: the one
/// definition of its checks that drives `tools/list`, the check of every
/// `evidence_query` before it reaches the embedder, and the contract JSON
/// Decision Gate reads from `capabilities_path` ([`ServerContract::contract_json`]).
///
/// Made once with [`ServerContract::new`], which validates the contract and
/// (with `std`) compiles every check's `params_schema`; cloning shares the
/// compiled form, so a server per HTTP request costs nothing more. Set it
/// with [`ServerConfig::with_contract`](crate::server::ServerConfig::with_contract).
#[derive(Clone)]
pub struct ServerContract {
    pub(crate) inner: Arc<ContractInner>,
}

pub(crate) struct ContractInner {
    contract: ProviderContract,
    pub(crate) tool: Arc<ToolDefinition>,
    /// Each check's index in `contract.checks`, by check id: one lookup
    /// per query finds the check and its validator.
    by_id: BTreeMap<String, usize>,
    /// The compiled `params_schema` of each check, in `contract.checks` order.
    #[cfg(feature = "json-schema")]
    validators: Vec<crate::contract::ParamsValidator>,
}

impl fmt::Debug for ServerContract {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerContract")
            .field("provider_id", &self.inner.contract.provider_id)
            .field("checks", &self.inner.contract.checks.len())
            .finish_non_exhaustive()
    }
}

/// The `error.code` of an `evidence_query` naming a check the contract does not have.
pub const UNKNOWN_CHECK: &str = "unknown_check";
/// The `error.code` of an `evidence_query` whose `provider_id` is not the contract's.
pub const PROVIDER_MISMATCH: &str = "provider_mismatch";
/// The `error.code` of an `evidence_query` whose params fail the check's `params_schema`.
pub const INVALID_PARAMS: &str = "invalid_params";
impl ServerContract {
    /// Validates `contract` ([`ProviderContract::validate`] against its own
    /// `provider_id`), compiles each check's `params_schema` (with `std`) and
    /// derives the `evidence_query` tool definition from it.
    pub fn new(contract: ProviderContract) -> Result<Self, ContractError> {
        contract.validate(&contract.provider_id)?;
        #[cfg(feature = "json-schema")]
        let validators = {
            let mut validators = Vec::with_capacity(contract.checks.len());
            for (index, check) in contract.checks.iter().enumerate() {
                let validator =
                    check
                        .params_validator()
                        .map_err(|error| ContractError::InvalidSchema {
                            location: format!("checks[{index}].params_schema"),
                            detail: error.to_string(),
                        })?;
                validators.push(validator);
            }
            validators
        };
        // Check ids are unique (`validate` refused duplicates).
        let by_id = contract
            .checks
            .iter()
            .enumerate()
            .map(|(index, check)| (check.check_id.clone(), index))
            .collect();
        let tool = Arc::new(ToolDefinition::for_contract(&contract));
        Ok(ServerContract {
            inner: Arc::new(ContractInner {
                contract,
                tool,
                by_id,
                #[cfg(feature = "json-schema")]
                validators,
            }),
        })
    }

    /// The contract.
    pub fn contract(&self) -> &ProviderContract {
        &self.inner.contract
    }

    /// The `evidence_query` tool as `tools/list` shows it under this contract.
    pub fn tool_definition(&self) -> ToolDefinition {
        self.inner.tool.as_ref().clone()
    }

    /// The contract as Decision Gate reads it from `capabilities_path`:
    /// pretty-printed JSON, fields in declaration order, no trailing newline.
    pub fn contract_json(&self) -> String {
        serde_json::to_string_pretty(&self.inner.contract).unwrap_or_default()
    }

    /// Checks a query against the contract before the embedder sees it:
    /// the check exists (`unknown_check`), `provider_id` is the contract's
    /// (`provider_mismatch`), and the params validate against the check's
    /// `params_schema` (`invalid_params`; without `json-schema` only
    /// presence, object shape and members a closed schema does not list
    /// are checked). The error is what the server answers, as
    /// an `EvidenceResult` error (an expected failure, fail closed), never
    /// a JSON-RPC error.
    pub fn check_query(&self, query: &EvidenceQuery) -> Result<(), EvidenceError> {
        let contract = &self.inner.contract;
        let found = self
            .inner
            .by_id
            .get(&query.check_id)
            .and_then(|&index| contract.checks.get(index).map(|check| (index, check)));
        let Some((index, check)) = found else {
            let ids: Vec<&str> = contract
                .checks
                .iter()
                .map(|check| check.check_id.as_str())
                .collect();
            return Err(EvidenceError::new(
                UNKNOWN_CHECK,
                format!(
                    "this provider has no check {:?}; its checks are {}",
                    query.check_id,
                    ids.join(", ")
                ),
            ));
        };
        if query.provider_id != contract.provider_id {
            return Err(EvidenceError::new(
                PROVIDER_MISMATCH,
                format!(
                    "this provider is {:?} but query.provider_id is {:?}; send the query to that provider, or make the configured provider name, the contract's provider_id and query.provider_id equal",
                    contract.provider_id, query.provider_id
                ),
            ));
        }
        let params = query.params.as_ref().unwrap_or(&Value::Null);
        #[cfg(feature = "json-schema")]
        let checked = match self.inner.validators.get(index) {
            Some(validator) => validator.validate(params),
            None => check.validate_params(params),
        };
        #[cfg(not(feature = "json-schema"))]
        let checked = {
            let _ = index;
            check.validate_params(params)
        };
        checked.map_err(|error| EvidenceError::new(INVALID_PARAMS, error.to_string()))
    }
}
