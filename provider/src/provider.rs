//! A provider declared in Rust: a name, and its checks.
//!
//! [`Provider`] collects [`Check`]s and is everything an adapter needs:
//! its capabilities contract is generated from the checks
//! ([`Provider::contract`], what Decision Gate reads from
//! `capabilities_path`), it is the [`Handler`] that answers
//! `evidence_query`, and it turns into a [`Service`] with that contract
//! installed, so the server checks every query (check id, provider id,
//! params against the derived schema) before a check function runs. The
//! server also fills `evidence_hash` with the profile the connection needs
//! and signs when a key is configured: a check function does neither.
//!
//! Limits: none of its own (see [`crate::check`]).

use std::collections::BTreeMap;
use std::fmt;

use evidence_wire::contract::{ContractError, ContractTransport, ProviderContract};
use evidence_wire::evidence::{EvidenceContext, EvidenceError, EvidenceQuery, EvidenceResult};
use evidence_wire::server::{ServerConfig, ServerContract, UNKNOWN_CHECK};
use serde_json::json;

use crate::check::Check;
use crate::handler::{Answer, CallContext, Handler, IntoService, ServeError, Service};
use crate::root::EvidenceRoot;

/// Up to this many checks, [`Provider::find_check`] looks through the list.
const LINEAR_LOOKUP_MAX: usize = 16;

/// An evidence provider: its id, what it does, and its checks.
///
/// ```
/// use evidence_wire_provider::{Check, CheckContext, CheckError, NoParams, Provider};
///
/// fn answer(_: NoParams, _: &CheckContext) -> Result<u64, CheckError> {
///     Ok(42)
/// }
///
/// let provider = Provider::new("demo", "Answers questions about nothing.")
///     .check(Check::new("answer", "The answer.", answer));
/// let contract = provider.contract();
/// assert_eq!(contract.checks[0].result_schema["type"], "integer");
/// ```
#[derive(Clone)]
pub struct Provider {
    id: String,
    name: String,
    description: String,
    notes: Vec<String>,
    checks: Vec<Check>,
    index: BTreeMap<String, usize>,
    /// The evidence root the checks read from ([`Provider::root`]).
    root: Option<EvidenceRoot>,
    /// The key every result with a value is signed with.
    #[cfg(feature = "signatures")]
    signer: Option<crate::signing::EvidenceSigner>,
    /// Every call's deadline ([`Provider::call_timeout`]).
    call_timeout: Option<core::time::Duration>,
}

impl fmt::Debug for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Provider")
            .field("id", &self.id)
            .field("checks", &self.checks)
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

impl Provider {
    /// A provider answering to `id` (the `provider_id` queries carry, and
    /// the provider's `name` in Decision Gate's configuration) with no
    /// checks yet.
    pub fn new(id: impl Into<String>, description: impl Into<String>) -> Self {
        let id = id.into();
        Provider {
            name: id.clone(),
            id,
            description: description.into(),
            notes: Vec::new(),
            checks: Vec::new(),
            index: BTreeMap::new(),
            root: None,
            #[cfg(feature = "signatures")]
            signer: None,
            call_timeout: None,
        }
    }

    /// Adds `check`; a check with the same id replaces the earlier one.
    pub fn check(mut self, check: Check) -> Self {
        match self.index.get(check.id()) {
            Some(&position) => {
                if let Some(slot) = self.checks.get_mut(position) {
                    *slot = check;
                }
            }
            None => {
                self.index.insert(check.id().to_owned(), self.checks.len());
                self.checks.push(check);
            }
        }
        self
    }

    /// A display name (default: the id).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// A note for operators, listed in the contract.
    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.notes.push(note.into());
        self
    }

    /// The same provider answering to another id (the contract follows).
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = id.into();
        self
    }

    /// Gives every check `root` as its evidence root
    /// ([`crate::CheckContext::root`]): the directory its file checks read
    /// under, e.g. `EvidenceRoot::open(dir)?` from a `--root DIR` option.
    /// A later call replaces it.
    pub fn root(mut self, root: EvidenceRoot) -> Self {
        self.root = Some(root);
        self
    }

    /// The evidence root, if the provider has one.
    pub fn evidence_root(&self) -> Option<&EvidenceRoot> {
        self.root.as_ref()
    }

    /// Gives every call a deadline `timeout` after it starts: a check
    /// reads what is left with
    /// [`CheckContext::remaining`](crate::CheckContext::remaining), and a
    /// blocking check polling `is_cancelled` sees the deadline pass.
    /// Default: no deadline. The ready command line's `--call-timeout-ms
    /// MS` sets it (the server's `ServerConfig::call_timeout`).
    pub fn call_timeout(mut self, timeout: core::time::Duration) -> Self {
        self.call_timeout = Some(timeout);
        self
    }

    /// The provider id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Signs every result that carries a value with `signer` (hashed under
    /// the profile the caller verifies with, then signed by the server).
    #[cfg(feature = "signatures")]
    #[cfg_attr(docsrs, doc(cfg(feature = "signatures")))]
    pub fn signer(mut self, signer: crate::signing::EvidenceSigner) -> Self {
        self.signer = Some(signer);
        self
    }

    /// Signs with the ed25519 secret seed in the file `path` (what
    /// `evidence-wire keygen --out PREFIX` writes to PREFIX), under
    /// `key_id`: for Decision Gate, the path of the public key
    /// (`PREFIX.pub`) exactly as its `require_signature` `keys` list
    /// writes it. The error names the file and what is wrong with it.
    ///
    /// ```no_run
    /// # use evidence_wire_provider::prelude::*;
    /// # fn main() -> Result<(), SigningKeyError> {
    /// let provider = Provider::new("git", "Facts about a git working tree.")
    ///     .signing_key_file("signing-key", "signing-key.pub")?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "signatures")]
    #[cfg_attr(docsrs, doc(cfg(feature = "signatures")))]
    pub fn signing_key_file(
        self,
        path: impl AsRef<std::path::Path>,
        key_id: impl Into<String>,
    ) -> Result<Self, crate::signing::SigningKeyError> {
        Ok(self.signer(crate::signing::signer_from_file(path, key_id)?))
    }

    /// Signs with the seed in `bytes` (the contents of a key file: 32 raw
    /// bytes or 64 hex digits), under `key_id` (see
    /// [`Provider::signing_key_file`]).
    #[cfg(feature = "signatures")]
    #[cfg_attr(docsrs, doc(cfg(feature = "signatures")))]
    pub fn signing_key(
        self,
        bytes: &[u8],
        key_id: impl Into<String>,
    ) -> Result<Self, crate::signing::SigningKeyError> {
        Ok(self.signer(crate::signing::signer_from_bytes(bytes, key_id)?))
    }

    /// The key results are signed with, if one is set.
    #[cfg(feature = "signatures")]
    #[cfg_attr(docsrs, doc(cfg(feature = "signatures")))]
    pub fn signing(&self) -> Option<&crate::signing::EvidenceSigner> {
        self.signer.as_ref()
    }

    /// The checks, in the order they were added.
    pub fn checks(&self) -> &[Check] {
        &self.checks
    }

    /// The check answering to `check_id`, if the provider has one.
    pub fn find_check(&self, check_id: &str) -> Option<&Check> {
        // A few checks are found faster by length and then bytes (one
        // comparison of text for the usual id) than by the ordered index
        // (a text comparison per key on the way).
        if self.checks.len() <= LINEAR_LOOKUP_MAX {
            return self.checks.iter().find(|check| check.id() == check_id);
        }
        self.index
            .get(check_id)
            .and_then(|position| self.checks.get(*position))
    }

    /// The capabilities contract, generated from the checks: what
    /// `capabilities_path` holds for Decision Gate.
    pub fn contract(&self) -> ProviderContract {
        ProviderContract {
            provider_id: self.id.clone(),
            name: self.name.clone(),
            description: self.description.clone(),
            transport: ContractTransport::Mcp,
            config_schema: json!({"type": "object"}),
            checks: self
                .checks
                .iter()
                .map(|check| check.contract().clone())
                .collect(),
            notes: self.notes.clone(),
        }
    }

    /// The contract as the server enforces it: validated (ids, comparators,
    /// schemas, examples against the schemas) and compiled.
    pub fn server_contract(&self) -> Result<ServerContract, ContractError> {
        ServerContract::new(self.contract())
    }

    /// A default server configuration serving this provider's contract,
    /// signing with its key ([`Provider::signing_key_file`]), if any, and
    /// giving every call the deadline of [`Provider::call_timeout`], if any.
    pub fn server_config(&self) -> Result<ServerConfig, ContractError> {
        let mut config = ServerConfig::default().with_contract(self.server_contract()?);
        config.call_timeout = self.call_timeout;
        #[cfg(feature = "signatures")]
        if let Some(signer) = &self.signer {
            config.signer = Some(signer.clone());
        }
        Ok(config)
    }

    /// Answers `query`: the check it names runs where its kind says
    /// (inline, blocking pool, executor), with `call`'s cancellation in its
    /// context. A query for a check this provider does not have is answered
    /// `unknown_check` (a server with the contract refuses it before it
    /// gets here).
    pub fn answer(
        &self,
        query: EvidenceQuery,
        context: EvidenceContext,
        call: CallContext,
    ) -> Answer<EvidenceResult> {
        let Some(check) = self.find_check(&query.check_id) else {
            let ids: Vec<&str> = self.checks.iter().map(Check::id).collect();
            return Answer::Ready(EvidenceResult::with_error(EvidenceError::new(
                UNKNOWN_CHECK,
                format!(
                    "this provider has no check {:?}; its checks are {}",
                    query.check_id,
                    ids.join(", ")
                ),
            )));
        };
        check.start(query, context, call, self.root.as_ref())
    }
}

impl Handler for Provider {
    fn evidence_query(
        &self,
        query: EvidenceQuery,
        context: EvidenceContext,
        call: CallContext,
    ) -> Answer<EvidenceResult> {
        self.answer(query, context, call)
    }
}

impl IntoService for Provider {
    fn into_service(self) -> Result<Service, ServeError> {
        let config = self.server_config().map_err(|error| {
            ServeError::Service(format!(
                "the contract of provider {:?} is invalid: {error}",
                self.id
            ))
        })?;
        Ok(Service::new(config, self))
    }
}
