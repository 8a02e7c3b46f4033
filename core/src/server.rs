//! The provider-side connection state machine (sans-IO).
//!
//! A [`Server`] takes the bytes a caller sent ([`Server::handle_input`]),
//! answers the protocol's chores itself (`initialize`, `ping`,
//! `tools/list`, `resources/*`, errors for anything malformed) and hands the
//! embedding code one [`ServerEvent::EvidenceQuery`] per `evidence_query`
//! call. The embedder answers whenever it likes with [`Server::respond`];
//! many queries may be in flight and answers may come in any order. Framed
//! output bytes come out of [`Server::poll_transmit`].
//!
//! Tool arguments are read in one parse that refuses any object naming a
//! member twice, at any depth ([`crate::unique`]: `query`, `context`, a
//! check's `params`; so are the params of `initialize`, `resources/read`
//! and `notifications/cancelled`), answered `INVALID_TOOL_INPUT` with the
//! member's JSON pointer in `data.pointer` (a notification is only
//! recorded); `tools/call`'s own `name` and `arguments` are read by a typed
//! parse that refuses them twice too. They are then checked against the
//! tool's input schema in the [`crate::schema::SchemaRegistry`] (with
//! `std`; a failure is answered `INVALID_TOOL_INPUT` with `data.pointer`). The built-in `evidence_query`
//! tool uses, and `tools/list` shows, exactly the schemas of
//! `spec/schemas/evidence_query.{input,output}.schema.json`, compiled once
//! per process; its arguments are then read into their typed form.
//!
//! With a capabilities contract ([`ServerConfig::with_contract`],
//! [`ServerContract`]) one definition drives three things: `tools/list`
//! shows `evidence_query` with the contract's checks in its description and
//! its input schema narrowed to them (`query.check_id` an `enum`,
//! `query.provider_id` a `const`); every query is checked against the
//! contract after the schema and before an event, and a refused one (unknown
//! check, another provider's id, params outside the check's `params_schema`)
//! is answered at once as an `EvidenceResult` error (`unknown_check`,
//! `provider_mismatch`, `invalid_params`), never reaching the embedder; and
//! [`Server::contract_json`] is the `capabilities_path` JSON.
//!
//! Framing is detected from the first byte of input and mirrored on
//! output. The dialect (Decision Gate or MCP) is chosen per connection: MCP
//! once the peer sends `initialize`, Decision Gate otherwise, unless
//! [`DialectChoice`] forces one.
//!
//! The server does no I/O, reads no clock and spawns nothing. Every
//! malformed message gets a JSON-RPC error and the connection goes on while
//! the stream is in sync; after a fatal framing error the connection is
//! closed for input and says so ([`Server::is_input_closed`]). Limits: frame
//! limits from [`frame::Limits`], envelope nesting from the
//! [`envelope::Policy`], and at most [`ServerConfig::max_in_flight`] queries
//! waiting for an answer (more are answered `OVERLOADED`).

use alloc::borrow::ToOwned;
use alloc::collections::{BTreeMap, BTreeSet, VecDeque};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;

use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::contract::{ContractError, ProviderContract};
use crate::envelope::{self, Id, Incoming, Message, Policy};
use crate::error::CanonicalError;
use crate::evidence::{
    self, EVIDENCE_QUERY_TOOL, EvidenceContext, EvidenceError, EvidenceQuery,
    EvidenceQueryArguments, EvidenceResult,
};
use crate::frame::{self, Decoder, FrameError, Framing, Limits};
use crate::unique::{self, Duplicate, UniqueError};

/// MCP protocol versions this server speaks, newest first.
pub const SUPPORTED_PROTOCOL_VERSIONS: [&str; 2] = ["2025-11-25", "2025-06-18"];

/// How many cancelled tickets a connection remembers (to refuse a late
/// answer for one with [`RespondError::Cancelled`] rather than
/// [`RespondError::UnknownTicket`]).
pub const CANCELLED_MEMORY: usize = 1024;

pub use crate::dialect::{Dialect, DialectChoice, HashProfile};

/// Name and version reported in `serverInfo`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerInfo {
    /// The implementation's name.
    pub name: String,
    /// Its version.
    pub version: String,
}

impl Default for ServerInfo {
    fn default() -> Self {
        ServerInfo {
            name: "evidence-wire".to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
        }
    }
}

/// A tool as `tools/list` shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolDefinition {
    /// The tool's name.
    pub name: String,
    /// What it does (every tool has one; MCP clients show it).
    pub description: String,
    /// JSON Schema of its arguments (an object schema).
    pub input_schema: Value,
    /// JSON Schema of its structured output, if declared.
    pub output_schema: Option<Value>,
}

impl ToolDefinition {
    /// The `evidence_query` tool, with exactly the input and output JSON
    /// Schemas of `spec/schemas/evidence_query.{input,output}.schema.json`
    /// ([`crate::schema::ToolIo::evidence_query`]): `tools/list` shows them and
    /// the server validates arguments against the input schema.
    pub fn evidence_query() -> Self {
        ToolDefinition::shared_evidence_query().as_ref().clone()
    }

    /// The built-in definition, made once per process with `std` (a
    /// connection shares it rather than parse or copy the schemas).
    fn shared_evidence_query() -> Arc<ToolDefinition> {
        #[cfg(feature = "std")]
        {
            static DEFINITION: std::sync::OnceLock<Arc<ToolDefinition>> =
                std::sync::OnceLock::new();
            Arc::clone(DEFINITION.get_or_init(|| Arc::new(ToolDefinition::parse_evidence_query())))
        }
        #[cfg(not(feature = "std"))]
        Arc::new(ToolDefinition::parse_evidence_query())
    }

    fn parse_evidence_query() -> Self {
        match crate::schema::ToolIo::evidence_query() {
            Ok(io) => ToolDefinition {
                name: io.name,
                description: io.description,
                input_schema: io.input_schema,
                output_schema: io.output_schema,
            },
            // The schemas are compiled into the crate and a test parses
            // them, so this cannot happen; answer with a minimal object
            // schema rather than panic.
            Err(_) => ToolDefinition {
                name: EVIDENCE_QUERY_TOOL.to_owned(),
                description: "Resolve a Decision Gate evidence query.".to_owned(),
                input_schema: json!({"type": "object"}),
                output_schema: None,
            },
        }
    }

    /// The `evidence_query` tool under `contract`: the built-in definition
    /// with the contract's checks listed in the description and the input
    /// schema refined so that `query.check_id` (and the older `predicate`)
    /// is an `enum` of the contract's check ids and `query.provider_id` is
    /// `const` the contract's provider id. Every instance of the refined
    /// schema is an instance of the built-in one, which the server keeps
    /// validating against; the contract itself is checked after it.
    pub fn for_contract(contract: &ProviderContract) -> Self {
        let base = ToolDefinition::shared_evidence_query();
        let ids: Vec<Value> = contract
            .checks
            .iter()
            .map(|check| Value::from(check.check_id.as_str()))
            .collect();
        let mut input_schema = base.input_schema.clone();
        if let Some(Value::Object(properties)) =
            input_schema.pointer_mut("/$defs/EvidenceQuery/properties")
        {
            for key in ["check_id", "predicate"] {
                if let Some(Value::Object(property)) = properties.get_mut(key) {
                    property.insert("enum".to_owned(), Value::Array(ids.clone()));
                }
            }
            if let Some(Value::Object(property)) = properties.get_mut("provider_id") {
                property.insert(
                    "const".to_owned(),
                    Value::from(contract.provider_id.as_str()),
                );
            }
        }
        let mut description = format!(
            "{}\n\nProvider {:?} answers these checks (query.check_id):",
            base.description, contract.provider_id
        );
        for check in &contract.checks {
            description.push_str(&format!(
                "\n- {}: {} (params {})",
                check.check_id,
                check.description,
                if check.params_required {
                    "required"
                } else {
                    "optional"
                }
            ));
        }
        ToolDefinition {
            name: EVIDENCE_QUERY_TOOL.to_owned(),
            description,
            input_schema,
            output_schema: base.output_schema.clone(),
        }
    }

    fn to_listing(&self, dialect: Dialect) -> Value {
        let mut tool = Map::new();
        tool.insert("name".to_owned(), Value::from(self.name.as_str()));
        tool.insert(
            "description".to_owned(),
            Value::from(self.description.as_str()),
        );
        match dialect {
            Dialect::DecisionGate => {
                tool.insert("input_schema".to_owned(), self.input_schema.clone());
            }
            Dialect::Mcp => {
                tool.insert("inputSchema".to_owned(), self.input_schema.clone());
                if let Some(output) = &self.output_schema {
                    tool.insert("outputSchema".to_owned(), output.clone());
                }
            }
        }
        Value::Object(tool)
    }
}

/// A provider's capabilities contract bound to its server: the one
/// definition of its checks that drives `tools/list`, the check of every
/// `evidence_query` before it reaches the embedder, and the contract JSON
/// Decision Gate reads from `capabilities_path` ([`ServerContract::contract_json`]).
///
/// Made once with [`ServerContract::new`], which validates the contract and
/// (with `std`) compiles every check's `params_schema`; cloning shares the
/// compiled form, so a server per HTTP request costs nothing more. Set it
/// with [`ServerConfig::with_contract`].
#[derive(Clone)]
pub struct ServerContract {
    inner: Arc<ContractInner>,
}

struct ContractInner {
    contract: ProviderContract,
    tool: Arc<ToolDefinition>,
    #[cfg(feature = "std")]
    validators: BTreeMap<String, crate::contract::ParamsValidator>,
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
/// The `error.code` of an answer that would be larger than the frame limit.
pub const ANSWER_SIZE_LIMIT_EXCEEDED: &str = "size_limit_exceeded";
/// The `error.code` of an answer that would nest deeper than the envelope depth limit.
pub const ANSWER_DEPTH_LIMIT_EXCEEDED: &str = "depth_limit_exceeded";
/// The `error.code` of a value that cannot be canonicalized under the
/// connection's hash profile (e.g. an integer beyond ±(2^53 − 1) under RFC 8785).
pub const VALUE_NOT_CANONICALIZABLE: &str = "value_not_canonicalizable";

impl ServerContract {
    /// Validates `contract` ([`ProviderContract::validate`] against its own
    /// `provider_id`), compiles each check's `params_schema` (with `std`) and
    /// derives the `evidence_query` tool definition from it.
    pub fn new(contract: ProviderContract) -> Result<Self, ContractError> {
        contract.validate(&contract.provider_id)?;
        #[cfg(feature = "std")]
        let validators = {
            let mut validators = BTreeMap::new();
            for (index, check) in contract.checks.iter().enumerate() {
                let validator =
                    check
                        .params_validator()
                        .map_err(|error| ContractError::InvalidSchema {
                            location: format!("checks[{index}].params_schema"),
                            detail: error.to_string(),
                        })?;
                validators.insert(check.check_id.clone(), validator);
            }
            validators
        };
        let tool = Arc::new(ToolDefinition::for_contract(&contract));
        Ok(ServerContract {
            inner: Arc::new(ContractInner {
                contract,
                tool,
                #[cfg(feature = "std")]
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
    /// `params_schema` (`invalid_params`; without `std` only presence and
    /// object shape are checked). The error is what the server answers, as
    /// an `EvidenceResult` error (an expected failure, fail closed), never
    /// a JSON-RPC error.
    pub fn check_query(&self, query: &EvidenceQuery) -> Result<(), EvidenceError> {
        let contract = &self.inner.contract;
        let Some(check) = contract.check(&query.check_id) else {
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
        #[cfg(feature = "std")]
        let checked = match self.inner.validators.get(&check.check_id) {
            Some(validator) => validator.validate(params),
            None => check.validate_params(params),
        };
        #[cfg(not(feature = "std"))]
        let checked = check.validate_params(params);
        checked.map_err(|error| EvidenceError::new(INVALID_PARAMS, error.to_string()))
    }
}

/// A tool answered inside the core, synchronously and deterministically
/// (such as docs search): arguments in, structured result or failure out.
pub type InlineTool = Arc<dyn Fn(&Value) -> Result<Value, ToolFailure> + Send + Sync>;

/// Why a tool could not produce a result.
#[derive(Clone, Debug, PartialEq)]
pub enum ToolFailure {
    /// The arguments are wrong: answered `INVALID_TOOL_INPUT` with this detail.
    InvalidInput(String),
    /// The tool ran and failed: answered as a tool result with `isError: true`.
    Failed(String),
}

/// One MCP resource, as `resources/list` shows it and `resources/read` serves it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resource {
    /// Its URI.
    pub uri: String,
    /// A short name.
    pub name: String,
    /// A title for people.
    pub title: Option<String>,
    /// What it holds.
    pub description: Option<String>,
    /// Its media type.
    pub mime_type: String,
    /// Its text.
    pub text: Arc<str>,
}

/// Which tools a caller may see and call.
///
/// A tool that is not visible is answered exactly like an unknown tool.
pub type ToolFilter = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// Everything that shapes a server connection.
#[derive(Clone)]
#[non_exhaustive]
pub struct ServerConfig {
    /// Frame limits.
    pub limits: Limits,
    /// Input framing; `None` detects it from the first byte.
    pub framing: Option<Framing>,
    /// Envelope validation policy.
    pub policy: Policy,
    /// How the dialect is chosen.
    pub dialect: DialectChoice,
    /// `serverInfo`.
    pub server_info: ServerInfo,
    /// `instructions` in the `initialize` result.
    pub instructions: Option<String>,
    /// Most queries waiting for an answer at once (default 64).
    pub max_in_flight: usize,
    /// Whether `resources/list` and `resources/read` are served.
    pub resources_enabled: bool,
    /// Visibility filter for tools (`None`: all visible).
    pub tool_filter: Option<ToolFilter>,
    /// Authorization for visible tools (`None`: all callable): a call of a
    /// visible tool it refuses is answered `FORBIDDEN`. Built by
    /// [`crate::policy::ToolPolicy::apply`] from `[server.auth] allowed_tools`.
    pub tool_authorizer: Option<ToolFilter>,
    /// The provider's capabilities contract (`None`: any check id and
    /// params are handed to the embedder). When set, `tools/list` shows the
    /// `evidence_query` tool derived from it and every query is checked
    /// against it before an [`ServerEvent::EvidenceQuery`] is emitted.
    pub contract: Option<ServerContract>,
    /// Which canonicalization profile the `evidence_hash` of every answer
    /// is computed with (default: the profile the connection's dialect
    /// verifies with, see [`crate::dialect`]).
    pub hash_profile: HashProfile,
    /// Signs every successful evidence result (`None`: unsigned).
    #[cfg(feature = "signatures")]
    pub signer: Option<crate::evidence::EvidenceSigner>,
}

impl ServerConfig {
    /// This configuration serving `contract` (see [`ServerContract`]).
    pub fn with_contract(mut self, contract: ServerContract) -> Self {
        self.contract = Some(contract);
        self
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            limits: Limits::default(),
            framing: None,
            policy: Policy::default(),
            dialect: DialectChoice::Auto,
            server_info: ServerInfo::default(),
            instructions: None,
            max_in_flight: 64,
            resources_enabled: true,
            tool_filter: None,
            tool_authorizer: None,
            contract: None,
            hash_profile: HashProfile::FollowDialect,
            #[cfg(feature = "signatures")]
            signer: None,
        }
    }
}

impl fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerConfig")
            .field("limits", &self.limits)
            .field("framing", &self.framing)
            .field("policy", &self.policy)
            .field("dialect", &self.dialect)
            .field("server_info", &self.server_info)
            .field("max_in_flight", &self.max_in_flight)
            .field("resources_enabled", &self.resources_enabled)
            .field("contract", &self.contract)
            .field("hash_profile", &self.hash_profile)
            .finish_non_exhaustive()
    }
}

/// A handle on one query in flight, given with its event and used to answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ticket(u64);

impl Ticket {
    /// The ticket's number (unique per connection).
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ticket {}", self.0)
    }
}

/// What the server tells the embedding code.
#[derive(Debug)]
#[non_exhaustive]
pub enum ServerEvent {
    /// An `evidence_query` call: answer it with [`Server::respond`].
    EvidenceQuery {
        /// Use it to answer.
        ticket: Ticket,
        /// The question.
        query: EvidenceQuery,
        /// Its context.
        context: EvidenceContext,
    },
    /// A call of a tool registered with [`Server::register_tool`]: answer it
    /// with [`Server::respond_tool`].
    ToolCall {
        /// Use it to answer.
        ticket: Ticket,
        /// The tool.
        name: String,
        /// Its arguments (validated against its input schema when the
        /// schema registry is available).
        arguments: Value,
    },
    /// The peer cancelled a query; its ticket is now dead (an answer for
    /// it is refused and nothing is sent).
    Cancelled {
        /// The cancelled ticket.
        ticket: Ticket,
        /// The peer's reason, if given.
        reason: Option<String>,
    },
    /// The peer finished the MCP handshake.
    Initialized {
        /// The negotiated protocol version.
        protocol_version: String,
        /// The peer's `clientInfo`, if sent.
        client_info: Option<Value>,
    },
    /// One message was handled; the record a validation log keeps. Made
    /// when the message is validated, except for a call handed out as
    /// [`ServerEvent::ToolCall`]: its record waits for
    /// [`Server::respond_tool`] (or the peer's cancellation) and carries the
    /// answer actually sent, e.g. `INTERNAL_ERROR` when the result fails
    /// the tool's output schema. `evidence_query` calls are recorded when
    /// validated: their answers are typed evidence results, sent as given.
    Handled(Outcome),
    /// A framing error; the stream is still in sync and an error was answered.
    FramingError(FrameError),
    /// A fatal framing error: no more input is read; answer what is in
    /// flight and close.
    Fatal(FrameError),
}

/// The outcome of one incoming message, for validation logs.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// The request id, when it was readable.
    pub id: Option<Value>,
    /// The method, when it was readable.
    pub method: Option<String>,
    /// The tool called, for `tools/call`.
    pub tool: Option<String>,
    /// The canonical error answered, or `None` when the message was accepted.
    pub error: Option<CanonicalError>,
    /// What was wrong, for a person.
    pub detail: Option<String>,
}

/// Why [`Server::respond`] refused an answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RespondError {
    /// No query in flight has this ticket (never issued, or already answered).
    #[error("{0} is not in flight (never issued, or already answered)")]
    UnknownTicket(Ticket),
    /// The peer cancelled this query; nothing is sent.
    #[error("{0} was cancelled by the peer; the answer is dropped")]
    Cancelled(Ticket),
    /// The ticket belongs to another kind of call (a tool call answered
    /// with an evidence result, or the reverse).
    #[error("{0} belongs to a different kind of call")]
    WrongKind(Ticket),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CallKind {
    Evidence,
    Tool,
}

#[derive(Debug)]
struct Pending {
    id: Value,
    kind: CallKind,
    dialect: Dialect,
    batch: Option<u64>,
    tool: String,
}

#[derive(Debug, Default)]
struct Batch {
    replies: Vec<Vec<u8>>,
    outstanding: usize,
    sealed: bool,
}

enum ToolKind {
    Evidence,
    External,
    Inline(InlineTool),
}

struct Tool {
    /// Shared: the built-in definition is made once per process.
    definition: Arc<ToolDefinition>,
    kind: ToolKind,
}

/// The provider side of one connection. See the module docs.
pub struct Server {
    config: ServerConfig,
    decoder: Decoder,
    dialect: Dialect,
    tools: Vec<Tool>,
    resources: Vec<Resource>,
    pending: BTreeMap<Ticket, Pending>,
    cancelled: BTreeSet<Ticket>,
    cancelled_order: VecDeque<Ticket>,
    batches: BTreeMap<u64, Batch>,
    next_ticket: u64,
    next_batch: u64,
    events: VecDeque<ServerEvent>,
    transmits: VecDeque<Vec<u8>>,
    input_closed: bool,
    #[cfg(feature = "std")]
    schemas: crate::schema::SchemaRegistry,
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Server")
            .field("dialect", &self.dialect)
            .field("in_flight", &self.pending.len())
            .field("input_closed", &self.input_closed)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// A connection serving `evidence_query`.
    pub fn new(config: ServerConfig) -> Self {
        let decoder = match config.framing {
            Some(framing) => Decoder::with_framing(framing, config.limits),
            None => Decoder::new(config.limits),
        };
        let dialect = match config.dialect {
            DialectChoice::Fixed(dialect) => dialect,
            DialectChoice::Auto => Dialect::DecisionGate,
        };
        let mut server = Server {
            config,
            decoder,
            dialect,
            tools: Vec::new(),
            resources: Vec::new(),
            pending: BTreeMap::new(),
            cancelled: BTreeSet::new(),
            cancelled_order: VecDeque::new(),
            batches: BTreeMap::new(),
            next_ticket: 0,
            next_batch: 0,
            events: VecDeque::new(),
            transmits: VecDeque::new(),
            input_closed: false,
            #[cfg(feature = "std")]
            schemas: evidence_query_schemas(),
        };
        // The schema registry (std) already holds the built-in schemas; a
        // contract's definition only narrows them (see
        // `ToolDefinition::for_contract`), and its checks run after them.
        let definition = match &server.config.contract {
            Some(contract) => Arc::clone(&contract.inner.tool),
            None => ToolDefinition::shared_evidence_query(),
        };
        server.tools.push(Tool {
            definition,
            kind: ToolKind::Evidence,
        });
        server
    }

    /// The capabilities contract this server enforces, if any.
    pub fn contract(&self) -> Option<&ServerContract> {
        self.config.contract.as_ref()
    }

    /// The contract JSON for Decision Gate's `capabilities_path` (what
    /// `evidence-wire contract` prints), if a contract is set.
    pub fn contract_json(&self) -> Option<String> {
        self.config
            .contract
            .as_ref()
            .map(ServerContract::contract_json)
    }

    /// Replace the `evidence_query` tool's definition (e.g. a description
    /// or an input schema naming the provider's checks).
    pub fn set_evidence_tool(&mut self, definition: ToolDefinition) {
        if let Some(tool) = self
            .tools
            .iter_mut()
            .find(|tool| matches!(tool.kind, ToolKind::Evidence))
        {
            let definition = Arc::new(ToolDefinition {
                name: EVIDENCE_QUERY_TOOL.to_owned(),
                ..definition
            });
            tool.definition = Arc::clone(&definition);
            self.register_schemas(&definition);
        }
    }

    /// Register a tool whose calls become [`ServerEvent::ToolCall`] events.
    pub fn register_tool(&mut self, definition: ToolDefinition) {
        self.add_tool(definition, ToolKind::External);
    }

    /// Register a tool answered inside the core by `handler`.
    pub fn register_inline_tool(&mut self, definition: ToolDefinition, handler: InlineTool) {
        self.add_tool(definition, ToolKind::Inline(handler));
    }

    /// Registers (or replaces) a tool's schemas in the schema registry; a
    /// schema that does not compile leaves the tool answering `INTERNAL_ERROR`.
    fn register_schemas(&mut self, definition: &ToolDefinition) {
        #[cfg(feature = "std")]
        self.schemas.register(crate::schema::ToolIo {
            name: definition.name.clone(),
            description: definition.description.clone(),
            input_schema: definition.input_schema.clone(),
            output_schema: definition.output_schema.clone(),
        });
        #[cfg(not(feature = "std"))]
        let _ = definition;
    }

    fn add_tool(&mut self, definition: ToolDefinition, kind: ToolKind) {
        self.register_schemas(&definition);
        self.tools
            .retain(|tool| tool.definition.name != definition.name);
        self.tools.push(Tool {
            definition: Arc::new(definition),
            kind,
        });
    }

    /// Serve `resource` through `resources/list` and `resources/read`.
    pub fn add_resource(&mut self, resource: Resource) {
        self.resources
            .retain(|existing| existing.uri != resource.uri);
        self.resources.push(resource);
    }

    /// The dialect answers currently get.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The framing of the input (and output), once detected.
    pub fn framing(&self) -> Option<Framing> {
        self.decoder.framing()
    }

    /// How many queries are waiting for an answer.
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }

    /// True after a fatal framing error or the end of input: no more
    /// messages will be read.
    pub fn is_input_closed(&self) -> bool {
        self.input_closed
    }

    /// True when input is closed, nothing is in flight and every output
    /// byte has been taken: the adapter may close the connection.
    pub fn is_finished(&self) -> bool {
        self.input_closed && self.pending.is_empty() && self.transmits.is_empty()
    }

    /// Feed bytes read from the peer. Empty input means end of stream.
    ///
    /// Every complete message in the buffer is handled before this returns.
    pub fn handle_input(&mut self, input: &[u8]) {
        if self.input_closed {
            return;
        }
        if input.is_empty() {
            self.handle_end_of_input();
            return;
        }
        self.decoder.push(input);
        self.drain_frames();
    }

    /// The peer closed its side: check for a truncated last frame, then
    /// stop reading. Queries in flight may still be answered.
    pub fn handle_end_of_input(&mut self) {
        if self.input_closed {
            return;
        }
        self.drain_frames();
        // A fatal error while draining already closed input and said so.
        if !self.input_closed {
            if let Err(error) = self.decoder.finish() {
                self.events.push_back(ServerEvent::FramingError(error));
            }
        }
        self.input_closed = true;
    }

    /// The next event for the embedding code.
    pub fn poll_event(&mut self) -> Option<ServerEvent> {
        self.events.pop_front()
    }

    /// The next framed bytes to write to the peer.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.transmits.pop_front()
    }

    /// Answer the evidence query of `ticket`.
    ///
    /// The server seals the result before sending it: a result with a
    /// value gets its `evidence_hash` computed under the profile the
    /// connection needs ([`ServerConfig::hash_profile`]; any hash the
    /// embedder set is replaced) and, when a [`ServerConfig::signer`] is
    /// set, a signature. A result the embedder already signed is sent as
    /// given. An answer its own caller would drop is replaced by an
    /// `EvidenceResult` error saying why: a value that cannot be
    /// canonicalized under the profile (`value_not_canonicalizable`), an
    /// answer larger than the frame limit (`size_limit_exceeded`) or nested
    /// deeper than the envelope depth limit (`depth_limit_exceeded`).
    pub fn respond(&mut self, ticket: Ticket, result: EvidenceResult) -> Result<(), RespondError> {
        let pending = self.take_pending(ticket, CallKind::Evidence)?;
        let result = self.seal(result, pending.dialect);
        let body =
            self.encode_evidence_answer(&pending.id, pending.dialect, pending.batch, &result);
        self.reply(pending.batch, body);
        Ok(())
    }

    /// `result` as it goes on the wire: hashed under the connection's
    /// profile and signed when a signer is configured (see [`Server::respond`]).
    fn seal(&self, mut result: EvidenceResult, dialect: Dialect) -> EvidenceResult {
        if result.value.is_none() || result.signature.is_some() {
            return result;
        }
        let profile = self.config.hash_profile.for_dialect(dialect);
        #[cfg(feature = "signatures")]
        if let Some(signer) = &self.config.signer {
            return match signer.seal(result.clone(), profile) {
                Ok(sealed) => sealed,
                Err(error) => uncanonicalizable(result, profile, &error),
            };
        }
        match result.value.as_ref().map(|value| value.digest(profile)) {
            Some(Ok(digest)) => {
                result.evidence_hash = Some(digest);
                result
            }
            Some(Err(error)) => uncanonicalizable(result, profile, &error),
            None => result,
        }
    }

    /// The JSON-RPC answer carrying `result` in `dialect`, or, when that
    /// answer would break the caller's own limits (frame size, envelope
    /// depth), the answer carrying an `EvidenceResult` error that names
    /// the limit instead.
    fn encode_evidence_answer(
        &self,
        id: &Value,
        dialect: Dialect,
        batch: Option<u64>,
        result: &EvidenceResult,
    ) -> Vec<u8> {
        let encode = |result: &EvidenceResult| match dialect {
            Dialect::DecisionGate => {
                encode_result(id, &evidence::to_decision_gate_tool_result(result))
            }
            Dialect::Mcp => encode_result(id, &evidence::to_mcp_tool_result(result)),
        };
        let body = encode(result);
        match self.answer_limit_broken(&body, batch) {
            None => body,
            Some(error) => {
                let mut refused = EvidenceResult::with_error(error);
                refused.evidence_ref = result.evidence_ref.clone();
                refused.evidence_anchor = result.evidence_anchor.clone();
                encode(&refused)
            }
        }
    }

    /// Why `body` (an answer, inside `batch` if any) would be dropped by a
    /// caller with this server's own limits, if it would: larger than the
    /// frame limit, or nested deeper than the envelope depth limit.
    fn answer_limit_broken(&self, body: &[u8], batch: Option<u64>) -> Option<EvidenceError> {
        // A batch reply is one array around the replies: one level and a
        // few bytes more.
        let in_batch = usize::from(batch.is_some());
        let size_limit = self.config.limits.max_body_bytes;
        if body.len().saturating_add(in_batch.saturating_mul(2)) > size_limit {
            return Some(
                EvidenceError::new(
                    ANSWER_SIZE_LIMIT_EXCEEDED,
                    format!(
                        "the answer would be {} bytes, more than the {size_limit}-byte frame limit a caller accepts; narrow the query (e.g. a more specific JSONPath) or raise [server.limits] max_body_bytes on both sides",
                        body.len()
                    ),
                )
                .with_details(json!({"limit_bytes": size_limit, "answer_bytes": body.len()})),
            );
        }
        // serde_json (which every caller here parses with) refuses a 128th
        // level whatever the envelope policy allows.
        let depth_limit = self
            .config
            .policy
            .depth_limit()
            .min(SERDE_JSON_MAX_DEPTH)
            .saturating_sub(in_batch);
        if envelope::nesting_exceeds(body, depth_limit).is_some() {
            return Some(
                EvidenceError::new(
                    ANSWER_DEPTH_LIMIT_EXCEEDED,
                    format!(
                        "the answer would nest deeper than the {depth_limit}-level envelope depth limit a caller accepts (the value itself is nested too deeply); select a shallower part of it"
                    ),
                )
                .with_details(json!({"limit_depth": depth_limit})),
            );
        }
        None
    }

    /// Answer the tool call of `ticket` with a structured result or a failure.
    pub fn respond_tool(
        &mut self,
        ticket: Ticket,
        result: Result<Value, ToolFailure>,
    ) -> Result<(), RespondError> {
        let pending = self.take_pending(ticket, CallKind::Tool)?;
        // The call's record was held back until now (see `handle_message`):
        // it carries what was actually sent, an error included.
        let outcome = self.answer_tool(
            &pending.id,
            pending.batch,
            pending.dialect,
            pending.tool,
            result,
        );
        self.push_deferred_outcome(pending.id, outcome);
        Ok(())
    }

    /// The `Handled` record of a call answered after it was validated.
    fn push_deferred_outcome(&mut self, id: Value, outcome: RequestOutcome) {
        self.events.push_back(ServerEvent::Handled(Outcome {
            id: Some(id),
            method: Some(TOOLS_CALL.to_owned()),
            tool: outcome.tool,
            error: outcome.error,
            detail: outcome.detail,
        }));
    }

    fn take_pending(&mut self, ticket: Ticket, kind: CallKind) -> Result<Pending, RespondError> {
        if self.cancelled.remove(&ticket) {
            self.cancelled_order
                .retain(|cancelled| *cancelled != ticket);
            return Err(RespondError::Cancelled(ticket));
        }
        match self.pending.get(&ticket) {
            None => Err(RespondError::UnknownTicket(ticket)),
            Some(pending) if pending.kind != kind => Err(RespondError::WrongKind(ticket)),
            Some(_) => self
                .pending
                .remove(&ticket)
                .ok_or(RespondError::UnknownTicket(ticket)),
        }
    }

    fn drain_frames(&mut self) {
        while let Some(next) = self.decoder.poll_frame() {
            match next {
                Ok(frame) => self.handle_body(&frame.body),
                Err(error) if error.is_fatal() => {
                    self.events.push_back(ServerEvent::Fatal(error));
                    self.input_closed = true;
                    return;
                }
                Err(error) => {
                    let canonical = match error {
                        FrameError::BodyTooLarge { .. }
                        | FrameError::LineTooLong { .. }
                        | FrameError::HeaderTooLarge { .. } => CanonicalError::PayloadTooLarge,
                        _ => CanonicalError::ParseError,
                    };
                    let detail = error.to_string();
                    let body = encode_error(None, canonical, Some(&detail));
                    self.reply(None, body);
                    self.events.push_back(ServerEvent::Handled(Outcome {
                        id: None,
                        method: None,
                        tool: None,
                        error: Some(canonical),
                        detail: Some(detail),
                    }));
                    self.events.push_back(ServerEvent::FramingError(error));
                }
            }
        }
    }

    fn handle_body(&mut self, body: &[u8]) {
        match envelope::validate(body, &self.config.policy) {
            Err(rejection) => {
                let id = rejection.id.as_ref().map(id_value);
                if rejection.answerable {
                    let body = encode_error(id.as_ref(), rejection.error, Some(&rejection.detail));
                    self.reply(None, body);
                }
                self.events.push_back(ServerEvent::Handled(Outcome {
                    id,
                    method: None,
                    tool: None,
                    error: Some(rejection.error),
                    detail: Some(rejection.detail),
                }));
            }
            Ok(Incoming::Single(message)) => self.handle_message(message, None),
            Ok(Incoming::Batch(entries)) => {
                let batch_id = self.next_batch;
                self.next_batch = self.next_batch.wrapping_add(1);
                self.batches.insert(batch_id, Batch::default());
                for entry in entries {
                    match entry {
                        Ok(message) => self.handle_message(message, Some(batch_id)),
                        Err(rejection) => {
                            let id = rejection.id.as_ref().map(id_value);
                            if rejection.answerable {
                                let body = encode_error(
                                    id.as_ref(),
                                    rejection.error,
                                    Some(&rejection.detail),
                                );
                                self.reply(Some(batch_id), body);
                            }
                            self.events.push_back(ServerEvent::Handled(Outcome {
                                id,
                                method: None,
                                tool: None,
                                error: Some(rejection.error),
                                detail: Some(rejection.detail),
                            }));
                        }
                    }
                }
                if let Some(batch) = self.batches.get_mut(&batch_id) {
                    batch.sealed = true;
                }
                self.flush_batch(batch_id);
            }
        }
    }

    fn handle_message(&mut self, message: Message<'_>, batch: Option<u64>) {
        match message {
            Message::Request(request) => {
                let id = id_value(&request.id);
                let method = request.method.to_string();
                let outcome = self.handle_request(&id, &method, request.params, batch);
                // A call handed to the embedder is recorded when it is
                // answered (`respond_tool`) or cancelled, with what was
                // actually sent.
                if outcome.deferred {
                    return;
                }
                self.events.push_back(ServerEvent::Handled(Outcome {
                    id: Some(id),
                    method: Some(method),
                    tool: outcome.tool,
                    error: outcome.error,
                    detail: outcome.detail,
                }));
            }
            Message::Notification(notification) => {
                let refused = self.handle_notification(&notification.method, notification.params);
                self.events.push_back(ServerEvent::Handled(Outcome {
                    id: None,
                    method: Some(notification.method.to_string()),
                    tool: None,
                    error: refused.as_ref().map(|_| CanonicalError::InvalidToolInput),
                    detail: refused,
                }));
            }
            Message::Response(response) => {
                // This server sends no requests, so a response answers nothing.
                self.events.push_back(ServerEvent::Handled(Outcome {
                    id: Some(id_value(&response.id)),
                    method: None,
                    tool: None,
                    error: None,
                    detail: Some("unsolicited response ignored".to_owned()),
                }));
            }
        }
    }

    /// Acts on a notification; `Some(detail)` when its params were refused
    /// (a notification gets no answer, so this is only recorded).
    fn handle_notification(&mut self, method: &str, params: Option<&RawValue>) -> Option<String> {
        match method {
            "notifications/initialized" => {}
            "notifications/cancelled" => {
                let params = match read_params(params) {
                    Ok(params) => params,
                    Err(duplicate) => {
                        return Some(format!(
                            "notifications/cancelled ignored: its params are refused: {duplicate}"
                        ));
                    }
                };
                let request_id = params.get("requestId")?;
                let reason = params
                    .get("reason")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let found = self
                    .pending
                    .iter()
                    .find(|(_, pending)| &pending.id == request_id)
                    .map(|(ticket, _)| *ticket);
                if let Some(ticket) = found {
                    if let Some(pending) = self.pending.remove(&ticket) {
                        self.remember_cancelled(ticket);
                        if pending.kind == CallKind::Tool {
                            // Its record was held back for the answer,
                            // which will never be sent.
                            let outcome = RequestOutcome {
                                tool: Some(pending.tool.clone()),
                                error: None,
                                detail: Some(
                                    "cancelled by the peer before it was answered; nothing was sent"
                                        .to_owned(),
                                ),
                                deferred: false,
                            };
                            self.push_deferred_outcome(pending.id.clone(), outcome);
                        }
                        // A cancelled request gets no answer; a batch stops
                        // waiting for it.
                        if let Some(batch) = pending.batch {
                            if let Some(state) = self.batches.get_mut(&batch) {
                                state.outstanding = state.outstanding.saturating_sub(1);
                            }
                            self.flush_batch(batch);
                        }
                        self.events
                            .push_back(ServerEvent::Cancelled { ticket, reason });
                    }
                }
            }
            _ => {}
        }
        None
    }

    fn handle_request(
        &mut self,
        id: &Value,
        method: &str,
        params: Option<&RawValue>,
        batch: Option<u64>,
    ) -> RequestOutcome {
        if self.pending.values().any(|pending| &pending.id == id) {
            let detail = format!("request id {id} is already in flight; use a fresh id");
            return self.reply_error(id, batch, CanonicalError::InvalidEnvelope, detail, None);
        }
        match method {
            "initialize" => {
                let params = match read_params(params) {
                    Ok(params) => params,
                    Err(duplicate) => {
                        return self.reply_duplicate(
                            id,
                            batch,
                            "initialize params",
                            duplicate,
                            None,
                        );
                    }
                };
                let requested = params
                    .get("protocolVersion")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let version = SUPPORTED_PROTOCOL_VERSIONS
                    .iter()
                    .find(|supported| **supported == requested)
                    .copied()
                    .unwrap_or(SUPPORTED_PROTOCOL_VERSIONS[0]);
                if self.config.dialect == DialectChoice::Auto {
                    self.dialect = Dialect::Mcp;
                }
                let mut capabilities = Map::new();
                capabilities.insert("tools".to_owned(), json!({"listChanged": false}));
                if self.config.resources_enabled {
                    capabilities.insert("resources".to_owned(), json!({}));
                }
                let mut result = Map::new();
                result.insert("protocolVersion".to_owned(), Value::from(version));
                result.insert("capabilities".to_owned(), Value::Object(capabilities));
                result.insert(
                    "serverInfo".to_owned(),
                    json!({
                        "name": self.config.server_info.name,
                        "version": self.config.server_info.version,
                    }),
                );
                if let Some(instructions) = &self.config.instructions {
                    result.insert(
                        "instructions".to_owned(),
                        Value::from(instructions.as_str()),
                    );
                }
                self.events.push_back(ServerEvent::Initialized {
                    protocol_version: version.to_owned(),
                    client_info: params.get("clientInfo").cloned(),
                });
                self.reply_ok(id, batch, &Value::Object(result))
            }
            "ping" => self.reply_ok(id, batch, &json!({})),
            "tools/list" => {
                let dialect = self.dialect;
                let tools: Vec<Value> = self
                    .tools
                    .iter()
                    .filter(|tool| self.is_visible(&tool.definition.name))
                    .map(|tool| tool.definition.to_listing(dialect))
                    .collect();
                self.reply_ok(id, batch, &json!({ "tools": tools }))
            }
            "tools/call" => self.handle_tool_call(id, params, batch),
            "resources/list" if self.config.resources_enabled => {
                let resources: Vec<Value> = self
                    .resources
                    .iter()
                    .map(|resource| {
                        let mut entry = Map::new();
                        entry.insert("uri".to_owned(), Value::from(resource.uri.as_str()));
                        entry.insert("name".to_owned(), Value::from(resource.name.as_str()));
                        if let Some(title) = &resource.title {
                            entry.insert("title".to_owned(), Value::from(title.as_str()));
                        }
                        if let Some(description) = &resource.description {
                            entry.insert(
                                "description".to_owned(),
                                Value::from(description.as_str()),
                            );
                        }
                        entry.insert(
                            "mimeType".to_owned(),
                            Value::from(resource.mime_type.as_str()),
                        );
                        Value::Object(entry)
                    })
                    .collect();
                self.reply_ok(id, batch, &json!({ "resources": resources }))
            }
            "resources/read" if self.config.resources_enabled => {
                let params = match read_params(params) {
                    Ok(params) => params,
                    Err(duplicate) => {
                        return self.reply_duplicate(
                            id,
                            batch,
                            "resources/read params",
                            duplicate,
                            None,
                        );
                    }
                };
                let Some(uri) = params.get("uri").and_then(Value::as_str) else {
                    return self.reply_error(
                        id,
                        batch,
                        CanonicalError::InvalidToolInput,
                        "resources/read needs params.uri, a string".to_owned(),
                        None,
                    );
                };
                match self.resources.iter().find(|resource| resource.uri == uri) {
                    Some(resource) => {
                        let contents = json!({
                            "contents": [{
                                "uri": resource.uri,
                                "mimeType": resource.mime_type,
                                "text": &*resource.text,
                            }]
                        });
                        self.reply_ok(id, batch, &contents)
                    }
                    None => {
                        let detail = format!("no resource has the URI {uri:?}; see resources/list");
                        self.reply_error(id, batch, CanonicalError::ResourceNotFound, detail, None)
                    }
                }
            }
            _ => {
                let detail = format!("method {method:?} is not served here");
                self.reply_error(id, batch, CanonicalError::MethodNotFound, detail, None)
            }
        }
    }

    fn handle_tool_call(
        &mut self,
        id: &Value,
        params: Option<&RawValue>,
        batch: Option<u64>,
    ) -> RequestOutcome {
        #[derive(serde::Deserialize)]
        struct CallParams<'a> {
            #[serde(borrow)]
            name: alloc::borrow::Cow<'a, str>,
            #[serde(default, borrow)]
            arguments: Option<&'a RawValue>,
        }
        let Some(raw) = params else {
            return self.reply_error(
                id,
                batch,
                CanonicalError::InvalidToolInput,
                "tools/call needs params {name, arguments}".to_owned(),
                None,
            );
        };
        let call: CallParams<'_> = match serde_json::from_str(raw.get()) {
            Ok(call) => call,
            Err(error) => {
                let detail = format!("tools/call params must be {{name, arguments}}: {error}");
                return self.reply_error(id, batch, CanonicalError::InvalidToolInput, detail, None);
            }
        };
        let name = call.name.into_owned();
        let index = self
            .tools
            .iter()
            .position(|tool| tool.definition.name == name);
        let index = match index {
            Some(index) if self.is_visible(&name) => index,
            _ => {
                // Hidden tools are answered exactly like unknown ones.
                let detail = format!("no tool named {name:?}; see tools/list");
                return self.reply_error(
                    id,
                    batch,
                    CanonicalError::ToolNotFound,
                    detail,
                    Some(name),
                );
            }
        };
        let authorized = (self.config.tool_authorizer.as_ref()).is_none_or(|allow| allow(&name));
        if !authorized {
            let detail = format!("tool {name:?} is not in server.auth.allowed_tools");
            return self.reply_error(id, batch, CanonicalError::Forbidden, detail, Some(name));
        }
        let arguments_text = call.arguments.map(RawValue::get).unwrap_or("{}");
        let Some(tool) = self.tools.get(index) else {
            return self.reply_error(
                id,
                batch,
                CanonicalError::InternalError,
                "tool table changed".to_owned(),
                Some(name),
            );
        };
        // Inline tools answer at once and hold no ticket, so only calls
        // that wait for the embedder count against the limit.
        let waits = !matches!(tool.kind, ToolKind::Inline(_));
        if waits && self.pending.len() >= self.config.max_in_flight {
            let detail = format!(
                "{} queries are already in flight (the limit); retry later",
                self.pending.len()
            );
            return self.reply_error(id, batch, CanonicalError::Overloaded, detail, Some(name));
        }
        match &tool.kind {
            ToolKind::Evidence => {
                let arguments = match self.evidence_arguments(&name, arguments_text) {
                    Ok(arguments) => arguments,
                    Err(EvidenceInputError::Duplicate(duplicate)) => {
                        let place = format!("arguments of tool `{name}`");
                        return self.reply_duplicate(id, batch, &place, duplicate, Some(name));
                    }
                    Err(EvidenceInputError::Schema(violation)) => {
                        return self.reply_tool_io_error(id, batch, violation, name);
                    }
                    Err(EvidenceInputError::Typed(detail)) => {
                        return self.reply_error(
                            id,
                            batch,
                            CanonicalError::InvalidToolInput,
                            detail,
                            Some(name),
                        );
                    }
                };
                let refusal = (self.config.contract.as_ref())
                    .and_then(|contract| contract.check_query(&arguments.query).err());
                if let Some(error) = refusal {
                    return self.answer_refused_query(id, batch, name, error);
                }
                let ticket = self.issue_ticket(id, CallKind::Evidence, batch, &name);
                self.events.push_back(ServerEvent::EvidenceQuery {
                    ticket,
                    query: arguments.query,
                    context: arguments.context,
                });
                RequestOutcome::accepted(Some(name))
            }
            ToolKind::External | ToolKind::Inline(_) => {
                let arguments: Value = match unique::from_str(arguments_text) {
                    Ok(Value::Object(object)) => Value::Object(object),
                    Err(UniqueError::Duplicate(duplicate)) => {
                        let place = format!("arguments of tool `{name}`");
                        return self.reply_duplicate(id, batch, &place, duplicate, Some(name));
                    }
                    Ok(_) | Err(_) => {
                        return self.reply_error(
                            id,
                            batch,
                            CanonicalError::InvalidToolInput,
                            "tool arguments must be a JSON object".to_owned(),
                            Some(name),
                        );
                    }
                };
                #[cfg(feature = "std")]
                if let Err(violation) = self.schemas.validate_input(&name, &arguments) {
                    return self.reply_tool_io_error(id, batch, violation, name);
                }
                if let ToolKind::Inline(handler) = &tool.kind {
                    let handler = Arc::clone(handler);
                    let result = handler(&arguments);
                    return self.answer_tool(id, batch, self.dialect, name, result);
                }
                let ticket = self.issue_ticket(id, CallKind::Tool, batch, &name);
                self.events.push_back(ServerEvent::ToolCall {
                    ticket,
                    name: name.clone(),
                    arguments,
                });
                RequestOutcome {
                    deferred: true,
                    ..RequestOutcome::accepted(Some(name))
                }
            }
        }
    }

    /// The arguments of an `evidence_query` call: parsed once, refusing a
    /// member named twice anywhere (`query`, `context`, the check's
    /// `params`, at any depth: the provider may read any of it), checked
    /// against the tool's input schema in the registry (with `std`), then
    /// read into their typed form, which also checks what the schema cannot
    /// (an id that fits in 64 bits, for one).
    fn evidence_arguments(
        &self,
        name: &str,
        text: &str,
    ) -> Result<EvidenceQueryArguments, EvidenceInputError> {
        let typed = |error: serde_json::Error| {
            EvidenceInputError::Typed(format!(
                "evidence_query arguments must be {{query, context}} as spec/evidence.md describes: {error}"
            ))
        };
        let value = match unique::from_str(text) {
            Ok(value) => value,
            Err(UniqueError::Duplicate(duplicate)) => {
                return Err(EvidenceInputError::Duplicate(duplicate));
            }
            Err(UniqueError::Syntax(error)) => return Err(typed(error)),
        };
        #[cfg(feature = "std")]
        self.schemas
            .validate_input(name, &value)
            .map_err(EvidenceInputError::Schema)?;
        #[cfg(not(feature = "std"))]
        let _ = name;
        <EvidenceQueryArguments as serde::Deserialize>::deserialize(&value).map_err(typed)
    }

    /// Answers a request whose `place` (the tool's arguments, or a method's
    /// params) names a member twice: `INVALID_TOOL_INPUT`, the member and
    /// its JSON pointer (relative to `place`) in the detail and in
    /// `data.pointer`.
    fn reply_duplicate(
        &mut self,
        id: &Value,
        batch: Option<u64>,
        place: &str,
        duplicate: Duplicate,
        tool: Option<String>,
    ) -> RequestOutcome {
        let error = CanonicalError::InvalidToolInput;
        let detail = format!("{place}: {duplicate}");
        let object = error
            .to_error_object(Some(id), Some(&detail))
            .with_pointer(duplicate.pointer);
        self.reply(batch, encode_error_object(Some(id), &object));
        RequestOutcome {
            tool,
            error: Some(error),
            detail: Some(detail),
            deferred: false,
        }
    }

    /// Answers an `evidence_query` the contract refused, at once and
    /// without an event: an `EvidenceResult` carrying `error` in the
    /// connection's dialect, as the embedder's answer would be. Its record
    /// has no canonical error (the call succeeded at the JSON-RPC level)
    /// and says what was refused.
    fn answer_refused_query(
        &mut self,
        id: &Value,
        batch: Option<u64>,
        tool: String,
        error: EvidenceError,
    ) -> RequestOutcome {
        let detail = format!(
            "refused by the capabilities contract, answered as evidence error {}: {}",
            error.code, error.message
        );
        let result = EvidenceResult::with_error(error);
        let body = match self.dialect {
            Dialect::DecisionGate => {
                encode_result(id, &evidence::to_decision_gate_tool_result(&result))
            }
            Dialect::Mcp => encode_result(id, &evidence::to_mcp_tool_result(&result)),
        };
        self.reply(batch, body);
        RequestOutcome {
            tool: Some(tool),
            error: None,
            detail: Some(detail),
            deferred: false,
        }
    }

    /// Answers a tool I/O failure with its JSON pointer in `data.pointer`.
    #[cfg(feature = "std")]
    fn reply_tool_io_error(
        &mut self,
        id: &Value,
        batch: Option<u64>,
        violation: crate::schema::ToolIoError,
        tool: String,
    ) -> RequestOutcome {
        let object = violation
            .error
            .to_error_object(Some(id), Some(&violation.detail))
            .with_pointer(violation.pointer);
        self.reply(batch, encode_error_object(Some(id), &object));
        RequestOutcome {
            tool: Some(tool),
            error: Some(violation.error),
            detail: Some(violation.detail),
            deferred: false,
        }
    }

    /// Without `std` there is no schema registry, so no schema failure.
    #[cfg(not(feature = "std"))]
    fn reply_tool_io_error(
        &mut self,
        id: &Value,
        batch: Option<u64>,
        violation: crate::schema::ToolIoError,
        tool: String,
    ) -> RequestOutcome {
        self.reply_error(id, batch, violation.error, violation.detail, Some(tool))
    }

    /// Answers a tool call with what its handler produced, the same way
    /// whether the tool ran inline or the embedder answered later: a result
    /// outside the tool's output schema is answered `INTERNAL_ERROR` (with
    /// `data.pointer`) and never sent as a success; `InvalidInput` is
    /// answered `INVALID_TOOL_INPUT`; `Failed` is a result with
    /// `isError: true`. The outcome is what was sent.
    fn answer_tool(
        &mut self,
        id: &Value,
        batch: Option<u64>,
        dialect: Dialect,
        tool: String,
        result: Result<Value, ToolFailure>,
    ) -> RequestOutcome {
        match result {
            Ok(structured) => {
                #[cfg(feature = "std")]
                if let Err(violation) = self.schemas.validate_output(&tool, &structured) {
                    return self.reply_tool_io_error(id, batch, violation, tool);
                }
                let text = serde_json::to_string(&structured).unwrap_or_default();
                let payload = match dialect {
                    Dialect::DecisionGate => json!({
                        "content": [{"type": "json", "json": structured}]
                    }),
                    Dialect::Mcp => json!({
                        "content": [{"type": "text", "text": text}],
                        "structuredContent": structured,
                        "isError": false,
                    }),
                };
                self.reply(batch, encode_result(id, &payload));
                RequestOutcome::accepted(Some(tool))
            }
            Err(ToolFailure::InvalidInput(detail)) => self.reply_error(
                id,
                batch,
                CanonicalError::InvalidToolInput,
                detail,
                Some(tool),
            ),
            Err(ToolFailure::Failed(message)) => {
                let payload = json!({
                    "content": [{"type": "text", "text": message}],
                    "isError": true,
                });
                self.reply(batch, encode_result(id, &payload));
                RequestOutcome::accepted(Some(tool))
            }
        }
    }

    fn issue_ticket(
        &mut self,
        id: &Value,
        kind: CallKind,
        batch: Option<u64>,
        tool: &str,
    ) -> Ticket {
        let ticket = Ticket(self.next_ticket);
        self.next_ticket = self.next_ticket.wrapping_add(1);
        if let Some(batch) = batch {
            if let Some(state) = self.batches.get_mut(&batch) {
                state.outstanding = state.outstanding.saturating_add(1);
            }
        }
        self.pending.insert(
            ticket,
            Pending {
                id: id.clone(),
                kind,
                dialect: self.dialect,
                batch,
                tool: tool.to_owned(),
            },
        );
        ticket
    }

    /// Remember a cancelled ticket so that a later answer for it is refused
    /// as [`RespondError::Cancelled`]; only the most recent
    /// [`CANCELLED_MEMORY`] are kept (older ones read as unknown), so a peer
    /// that cancels forever cannot grow this without bound.
    fn remember_cancelled(&mut self, ticket: Ticket) {
        if self.cancelled.insert(ticket) {
            self.cancelled_order.push_back(ticket);
        }
        while self.cancelled_order.len() > CANCELLED_MEMORY {
            if let Some(oldest) = self.cancelled_order.pop_front() {
                self.cancelled.remove(&oldest);
            }
        }
    }

    fn is_visible(&self, tool: &str) -> bool {
        match &self.config.tool_filter {
            Some(filter) => filter(tool),
            None => true,
        }
    }

    fn reply_ok(&mut self, id: &Value, batch: Option<u64>, result: &Value) -> RequestOutcome {
        let body = encode_result(id, result);
        self.reply(batch, body);
        RequestOutcome::accepted(None)
    }

    fn reply_error(
        &mut self,
        id: &Value,
        batch: Option<u64>,
        error: CanonicalError,
        detail: String,
        tool: Option<String>,
    ) -> RequestOutcome {
        let body = encode_error(Some(id), error, Some(&detail));
        self.reply(batch, body);
        RequestOutcome {
            tool,
            error: Some(error),
            detail: Some(detail),
            deferred: false,
        }
    }

    fn reply(&mut self, batch: Option<u64>, body: Vec<u8>) {
        match batch {
            None => self.transmit(&body),
            Some(batch_id) => {
                if let Some(batch) = self.batches.get_mut(&batch_id) {
                    batch.replies.push(body);
                    if batch.sealed {
                        batch.outstanding = batch.outstanding.saturating_sub(1);
                    }
                }
                self.flush_batch(batch_id);
            }
        }
    }

    fn flush_batch(&mut self, batch_id: u64) {
        let ready = match self.batches.get(&batch_id) {
            Some(batch) => batch.sealed && batch.outstanding == 0,
            None => false,
        };
        if !ready {
            return;
        }
        let Some(batch) = self.batches.remove(&batch_id) else {
            return;
        };
        // A batch of notifications only gets no reply at all.
        if batch.replies.is_empty() {
            return;
        }
        let mut body = Vec::new();
        body.push(b'[');
        for (index, reply) in batch.replies.iter().enumerate() {
            if index > 0 {
                body.push(b',');
            }
            body.extend_from_slice(reply);
        }
        body.push(b']');
        self.transmit(&body);
    }

    fn transmit(&mut self, body: &[u8]) {
        let framing = self
            .decoder
            .framing()
            .or(self.config.framing)
            .unwrap_or(Framing::ContentLength);
        let mut out = Vec::with_capacity(body.len().saturating_add(32));
        if frame::encode(framing, body, &mut out).is_err() {
            // Only a body with a raw newline fails, and serde_json never
            // writes one; answer an internal error rather than break the stream.
            out.clear();
            let fallback = encode_error(
                None,
                CanonicalError::InternalError,
                Some("answer could not be framed"),
            );
            if frame::encode(framing, &fallback, &mut out).is_err() {
                return;
            }
        }
        self.transmits.push_back(out);
    }
}

/// The error result sent instead of `result` when its value cannot be
/// canonicalized (and so hashed) under `profile`; reference and anchor are kept.
fn uncanonicalizable(
    result: EvidenceResult,
    profile: crate::canonical::Profile,
    error: &crate::canonical::CanonicalizeError,
) -> EvidenceResult {
    use crate::canonical::CanonicalizeErrorKind;
    let refusal = match &error.kind {
        CanonicalizeErrorKind::TooDeep(limit) => EvidenceError::new(
            ANSWER_DEPTH_LIMIT_EXCEEDED,
            format!(
                "the value nests deeper than the {limit} levels canonical JSON accepts, so it cannot be hashed; select a shallower part of it"
            ),
        )
        .with_details(json!({"limit_depth": limit})),
        CanonicalizeErrorKind::TooLarge(limit) => EvidenceError::new(
            ANSWER_SIZE_LIMIT_EXCEEDED,
            format!(
                "the value is larger than the {limit} bytes canonical JSON accepts, so it cannot be hashed"
            ),
        )
        .with_details(json!({"limit_bytes": limit})),
        _ => EvidenceError::unhashable(error, profile),
    };
    let mut refused = EvidenceResult::with_error(refusal);
    refused.evidence_ref = result.evidence_ref;
    refused.evidence_anchor = result.evidence_anchor;
    refused
}

/// A schema registry holding the built-in `evidence_query` tool, compiled
/// once per process and cloned (cheaply, sharing the compiled schemas) for
/// each connection: compiling the two schemas costs milliseconds, and the
/// HTTP adapter makes a [`Server`] per request.
#[cfg(feature = "std")]
fn evidence_query_schemas() -> crate::schema::SchemaRegistry {
    static REGISTRY: std::sync::OnceLock<crate::schema::SchemaRegistry> =
        std::sync::OnceLock::new();
    REGISTRY
        .get_or_init(|| {
            let definition = ToolDefinition::shared_evidence_query();
            let mut registry = crate::schema::SchemaRegistry::new();
            registry.register(crate::schema::ToolIo {
                name: definition.name.clone(),
                description: definition.description.clone(),
                input_schema: definition.input_schema.clone(),
                output_schema: definition.output_schema.clone(),
            });
            registry
        })
        .clone()
}

/// Why the arguments of an `evidence_query` call were refused.
enum EvidenceInputError {
    /// An object in them names a member twice (answered with `data.pointer`).
    Duplicate(Duplicate),
    /// They fail the tool's input schema (answered with `data.pointer`).
    #[cfg_attr(not(feature = "std"), allow(dead_code))]
    Schema(crate::schema::ToolIoError),
    /// They fit the schema but not the typed form.
    Typed(String),
}

/// What handling one request came to, for its `Handled` record.
struct RequestOutcome {
    tool: Option<String>,
    error: Option<CanonicalError>,
    detail: Option<String>,
    /// The call waits for the embedder ([`ServerEvent::ToolCall`]): its
    /// record is made when it is answered or cancelled, not now.
    deferred: bool,
}

impl RequestOutcome {
    fn accepted(tool: Option<String>) -> Self {
        RequestOutcome {
            tool,
            error: None,
            detail: None,
            deferred: false,
        }
    }
}

/// The deepest nesting serde_json parses (its recursion limit refuses the
/// 128th level): no answer may nest deeper, whatever the envelope policy.
const SERDE_JSON_MAX_DEPTH: usize = 127;

/// The method of every tool call.
const TOOLS_CALL: &str = "tools/call";

fn id_value(id: &Id<'_>) -> Value {
    id.to_value()
}

/// A method's params as a value (`null` when absent or unreadable, which
/// the envelope check makes rare), refusing a member named twice anywhere.
fn read_params(params: Option<&RawValue>) -> Result<Value, Duplicate> {
    match params.map(|raw| unique::from_str(raw.get())) {
        None | Some(Err(UniqueError::Syntax(_))) => Ok(Value::Null),
        Some(Ok(value)) => Ok(value),
        Some(Err(UniqueError::Duplicate(duplicate))) => Err(duplicate),
    }
}

/// The JSON-RPC success response `{"jsonrpc":"2.0","id":…,"result":…}`.
pub fn encode_result<T: serde::Serialize + ?Sized>(id: &Value, result: &T) -> Vec<u8> {
    #[derive(serde::Serialize)]
    struct Success<'a, T: ?Sized> {
        jsonrpc: &'static str,
        #[serde(serialize_with = "envelope::serialize_id_value")]
        id: &'a Value,
        result: &'a T,
    }
    serde_json::to_vec(&Success {
        jsonrpc: "2.0",
        id,
        result,
    })
    .unwrap_or_default()
}

/// The JSON-RPC error response for a canonical error; `id` is `null` when
/// the request id could not be read.
pub fn encode_error(id: Option<&Value>, error: CanonicalError, detail: Option<&str>) -> Vec<u8> {
    encode_error_object(id, &error.to_error_object(id, detail))
}

/// The JSON-RPC error response carrying `object`; `id` is `null` when the
/// request id could not be read. Ids are echoed as sent (`-0` included).
fn encode_error_object(id: Option<&Value>, object: &crate::error::ErrorObject) -> Vec<u8> {
    #[derive(serde::Serialize)]
    struct Failure<'a> {
        jsonrpc: &'static str,
        #[serde(serialize_with = "envelope::serialize_id_value")]
        id: &'a Value,
        error: &'a crate::error::ErrorObject,
    }
    serde_json::to_vec(&Failure {
        jsonrpc: "2.0",
        id: id.unwrap_or(&Value::Null),
        error: object,
    })
    .unwrap_or_default()
}
