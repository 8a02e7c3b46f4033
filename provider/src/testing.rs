//! Testing a provider in its own `cargo test`: an in-process client that
//! asks it questions the way its callers do, and checks what it answers.
//!
//! [`TestClient`] talks to a [`Provider`](crate::Provider) or a
//! [`Service`] with no process and no socket: its requests go into a
//! connection of the service ([`Service::connection`]) as bytes, every call
//! is dispatched to the handler as an adapter would dispatch it, and the
//! answers come back as bytes into the core's caller-side
//! [`Client`], which verifies each one before the test sees it.
//!
//! - [`TestClient::decision_gate`] asks as Decision Gate does:
//!   Content-Length frames, no handshake, `tools/call evidence_query`, hashes
//!   checked under Decision Gate's canonical-JSON profile.
//! - [`TestClient::mcp`] asks as an MCP client does: newline-delimited
//!   JSON, the `initialize` handshake first, hashes under RFC 8785.
//! - [`TestClient::require_signature`] trusts only results signed by the
//!   given keys (what Decision Gate's `require_signature` does).
//! - [`TestClient::check_contract`] holds the provider's contract to
//!   Decision Gate's rules (the ones `check-provider` reports as
//!   `contract.valid` and `contract.rules`).
//!
//! ```
//! use evidence_wire_provider::prelude::*;
//! use evidence_wire_provider::testing::TestClient;
//!
//! fn answer(_: NoParams, _: &CheckContext) -> Result<u64, CheckError> {
//!     Ok(42)
//! }
//!
//! let provider = Provider::new("demo", "Answers.").check(Check::new("answer", "42.", answer));
//! let mut client = TestClient::decision_gate(provider).unwrap();
//! client.check_contract().unwrap();
//! let evidence = client.query("answer", serde_json::json!({})).unwrap();
//! assert_eq!(evidence.value(), Some(serde_json::json!(42)));
//! assert!(evidence.verified().hash().is_some(), "hashed, and the hash checked");
//! ```
//!
//! Where the work runs: on the test's thread. A ready or blocking check is
//! called there; an async check is driven to its end there with
//! `futures_lite::future::block_on`, which suits a future that needs no
//! runtime. One that does (a tokio timer, a tokio socket) is run by the
//! runtime adapter's own test client (`evidence_wire_tokio::testing`),
//! which is this one with a tokio runtime ([`TestClient::with_runner`]).
//!
//! Limits: the connection's frame limits are the service's; nothing here
//! waits (every call is answered before [`TestClient::query`] returns, so
//! a call that is never answered is reported at once, not timed out).

use std::fmt;

use evidence_wire::client::{Client, ClientConfig, ClientEvent, QueryError, RequestId};
use evidence_wire::contract::ProviderContract;
#[cfg(feature = "signatures")]
use evidence_wire::evidence::TrustPolicy;
use evidence_wire::evidence::{
    EvidenceAnchor, EvidenceContext, EvidenceQuery, TriggerTime, VerifiedEvidence,
};
use evidence_wire::frame::Framing;
use evidence_wire::server::Server;
use serde_json::Value;

use crate::handler::{
    CallSource, Completion, IntoService, Job, ServeError, Service, Work, complete, dispatch_from,
};

/// How the client's calls are run to their answer.
pub type Runner = Box<dyn FnMut(Job) -> Completion + Send>;

/// A caller of a provider in this process. See the module docs.
pub struct TestClient {
    service: Service,
    server: Server,
    client: Client,
    /// The client's configuration (kept to rebuild it with a trust policy).
    config: ClientConfig,
    source: CallSource,
    runner: Runner,
    provider_id: String,
    context: EvidenceContext,
    /// The client's clock, in milliseconds (moved on by one per query:
    /// nothing here waits).
    now: u64,
}

impl fmt::Debug for TestClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestClient")
            .field("provider_id", &self.provider_id)
            .field("dialect", &self.client.dialect())
            .finish_non_exhaustive()
    }
}

/// One verified answer.
#[derive(Clone, Debug)]
pub struct Evidence {
    verified: VerifiedEvidence,
}

impl Evidence {
    /// The answer as the core's client verified it (its hash checked under
    /// the caller's profile, its signature when one is required).
    pub fn verified(&self) -> &VerifiedEvidence {
        &self.verified
    }

    /// The value, as JSON (`None` for an error result).
    pub fn value(&self) -> Option<Value> {
        let value = self.verified.result().value.as_ref()?;
        value.to_value().ok()
    }

    /// The error's code, for an error result.
    pub fn error_code(&self) -> Option<&str> {
        let error = self.verified.result().error.as_ref()?;
        Some(error.code.as_str())
    }

    /// The error's message, for an error result.
    pub fn error_message(&self) -> Option<&str> {
        let error = self.verified.result().error.as_ref()?;
        Some(error.message.as_str())
    }

    /// The `evidence_ref` URI, when the check recorded one.
    pub fn evidence_ref(&self) -> Option<&str> {
        let evidence_ref = self.verified.result().evidence_ref.as_ref()?;
        Some(evidence_ref.uri.as_str())
    }

    /// The `evidence_anchor`, when the check recorded one.
    pub fn anchor(&self) -> Option<&EvidenceAnchor> {
        self.verified.result().evidence_anchor.as_ref()
    }
}

/// The contract of a provider broke a rule Decision Gate applies: every
/// problem found, each on its line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContractProblems(pub Vec<String>);

impl fmt::Display for ContractProblems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Decision Gate would refuse this contract: {}",
            self.0.join("; ")
        )
    }
}

impl std::error::Error for ContractProblems {}

/// Decision Gate's context of its first message: tenant 1, namespace 1,
/// trigger time 1710000000000 (unix ms), no correlation id (what
/// `check-provider` sends too).
pub fn decision_gate_context() -> EvidenceContext {
    let mut context = EvidenceContext::adhoc(TriggerTime::UnixMillis(1_710_000_000_000));
    context.run_id = "run-1".to_owned();
    context.scenario_id = "s".to_owned();
    context.stage_id = "st".to_owned();
    context.trigger_id = "t".to_owned();
    context
}

impl TestClient {
    /// A client asking `service` as Decision Gate does: Content-Length
    /// frames, no handshake, hashes under its canonical-JSON profile.
    /// Queries name the contract's provider id (set another with
    /// [`TestClient::provider_id`]).
    pub fn decision_gate(service: impl IntoService) -> Result<Self, ServeError> {
        TestClient::new(service, ClientConfig::default())
    }

    /// A client asking `service` as an MCP client does: newline-delimited
    /// JSON, the `initialize` handshake before the first query, hashes
    /// under RFC 8785.
    pub fn mcp(service: impl IntoService) -> Result<Self, ServeError> {
        let mut config = ClientConfig::default();
        config.framing = Framing::NewlineDelimited;
        config.handshake = true;
        TestClient::new(service, config)
    }

    /// A client of `service` configured by `config` (framing, handshake,
    /// trust policy, profile).
    pub fn new(service: impl IntoService, config: ClientConfig) -> Result<Self, ServeError> {
        let service = service.into_service()?;
        let provider_id = service
            .config()
            .contract
            .as_ref()
            .map(|contract| contract.contract().provider_id.clone())
            .unwrap_or_default();
        Ok(TestClient {
            server: service.connection(),
            source: CallSource::new(None).timeout(service.config().call_timeout),
            service,
            client: Client::new(config.clone()),
            config,
            runner: Box::new(Job::run_blocking),
            provider_id,
            context: decision_gate_context(),
            now: 0,
        })
    }

    /// The same client trusting only results signed by one of `keys`
    /// (Decision Gate's `require_signature`): an unsigned result, or one
    /// signed by another key, fails [`TestClient::query`] with
    /// [`QueryError::Verification`].
    #[cfg(feature = "signatures")]
    #[cfg_attr(docsrs, doc(cfg(feature = "signatures")))]
    pub fn require_signature(mut self, keys: evidence_wire::evidence::KeySet) -> Self {
        self.config.trust = TrustPolicy::RequireSignature { keys };
        self.client = Client::new(self.config.clone());
        self
    }

    /// The same client putting `provider_id` in its queries.
    pub fn provider_id(mut self, provider_id: impl Into<String>) -> Self {
        self.provider_id = provider_id.into();
        self
    }

    /// The same client sending `context` with its queries (default
    /// [`decision_gate_context`]).
    pub fn context(mut self, context: EvidenceContext) -> Self {
        self.context = context;
        self
    }

    /// The same client running each call with `runner` (a runtime's
    /// `block_on`, say) instead of on this thread with
    /// [`Job::run_blocking`].
    pub fn with_runner(mut self, runner: impl FnMut(Job) -> Completion + Send + 'static) -> Self {
        self.runner = Box::new(runner);
        self
    }

    /// The service's contract, when it has one (a provider's always does).
    pub fn contract(&self) -> Option<ProviderContract> {
        let contract = self.service.config().contract.as_ref()?;
        Some(contract.contract().clone())
    }

    /// Holds the service's contract to Decision Gate's rules: every field
    /// present, schemas that compile, examples that match them (with the
    /// `json-schema` feature), and the rules Decision Gate applies when it
    /// loads `capabilities_path` and validates a scenario.
    pub fn check_contract(&self) -> Result<(), ContractProblems> {
        let Some(contract) = self.contract() else {
            return Err(ContractProblems(vec![
                "the service has no contract (ServerConfig::contract); a Provider installs its own"
                    .to_owned(),
            ]));
        };
        let mut problems = Vec::new();
        let expected = if self.provider_id.is_empty() {
            contract.provider_id.clone()
        } else {
            self.provider_id.clone()
        };
        if let Err(error) = contract.validate(&expected) {
            problems.push(error.to_string());
        }
        problems.extend(
            contract
                .check_decision_gate_rules()
                .iter()
                .map(ToString::to_string),
        );
        match problems.is_empty() {
            true => Ok(()),
            false => Err(ContractProblems(problems)),
        }
    }

    /// Asks `check_id` with `params` (`Value::Null`: none), and returns the
    /// answer once the client verified it. An error result is an answer
    /// too ([`Evidence::error_code`]); `Err` is a failure of the exchange
    /// (a JSON-RPC error, a hash or signature that does not verify).
    pub fn query(&mut self, check_id: &str, params: Value) -> Result<Evidence, QueryError> {
        let mut query = EvidenceQuery::new(self.provider_id.clone(), check_id);
        if !params.is_null() {
            query = query.with_params(params);
        }
        let context = self.context.clone();
        self.query_with(&query, &context)
    }

    /// Asks `query` under `context`.
    pub fn query_with(
        &mut self,
        query: &EvidenceQuery,
        context: &EvidenceContext,
    ) -> Result<Evidence, QueryError> {
        self.now = self.now.saturating_add(1);
        let id = self.client.query(query, context, self.now);
        match self.answer(id) {
            Ok(ClientEvent::Answer { outcome, .. }) => {
                outcome.map(|verified| Evidence { verified })
            }
            Ok(_) => Err(QueryError::ConnectionLost(
                "the provider's answer was not a query answer".to_owned(),
            )),
            Err(error) => Err(error),
        }
    }

    /// Sends any request (`tools/list`, `resources/read`) and returns its
    /// `result` as the provider wrote it.
    pub fn request(&mut self, method: &str, params: Option<&Value>) -> Result<Value, QueryError> {
        self.now = self.now.saturating_add(1);
        let id = self.client.request(method, params, self.now);
        match self.answer(id)? {
            ClientEvent::Reply { outcome, .. } => {
                let raw = outcome?;
                serde_json::from_str(raw.get()).map_err(|error| {
                    QueryError::ConnectionLost(format!("the answer is not JSON: {error}"))
                })
            }
            _ => Err(QueryError::ConnectionLost(
                "the provider's answer was not a reply".to_owned(),
            )),
        }
    }

    /// Moves bytes both ways, running every call, until `id` is answered.
    fn answer(&mut self, id: RequestId) -> Result<ClientEvent, QueryError> {
        let handler = std::sync::Arc::clone(self.service.handler());
        loop {
            let mut moved = false;
            while let Some(bytes) = self.client.poll_transmit() {
                self.server.handle_input(&bytes);
                moved = true;
            }
            while let Some(event) = self.server.poll_event() {
                if let Work::Run { ticket, job } =
                    dispatch_from(handler.as_ref(), event, &self.source)
                {
                    let completion = (self.runner)(job);
                    // A ticket the client cancelled is refused: nothing to send.
                    let _ = complete(&mut self.server, ticket, completion);
                }
                moved = true;
            }
            while let Some(bytes) = self.server.poll_transmit() {
                self.client.handle_input(&bytes);
                moved = true;
            }
            while let Some(event) = self.client.poll_event() {
                match &event {
                    ClientEvent::Answer { id: answered, .. }
                    | ClientEvent::Reply { id: answered, .. }
                        if *answered == id =>
                    {
                        return Ok(event);
                    }
                    ClientEvent::Fatal(reason) => {
                        return Err(QueryError::ConnectionLost(reason.clone()));
                    }
                    _ => {}
                }
                moved = true;
            }
            if !moved {
                return Err(QueryError::ConnectionLost(
                    "the provider answered nothing: every call ran, and none answered this request"
                        .to_owned(),
                ));
            }
        }
    }
}
