//! What shapes a server: limits, policies, the dialect, the contract,
//! signing, and the tools and resources it offers. Built once and shared
//! (`Arc`) by every connection, which then costs only its own state.
//!
//! Limits: [`ServerConfig::limits`] (frames), [`ServerConfig::policy`]
//! (envelopes), [`ServerConfig::max_in_flight`] (queries waiting).

use alloc::borrow::ToOwned;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;

use super::contract::ServerContract;
use super::tools::{InlineTool, Resource, Tool, ToolDefinition, ToolFilter, ToolKind};
use crate::dialect::{DialectChoice, HashProfile};
use crate::envelope::Policy;
use crate::evidence::EVIDENCE_QUERY_TOOL;
use crate::frame::{Framing, Limits};

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

/// What a framed connection does when [`ServerConfig::max_in_flight`]
/// queries already wait for an answer and another message arrives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Overload {
    /// Hold the message (it stays in the decoder's buffer, unread) and ask
    /// for no more input ([`super::Server::wants_input`] is false) until an
    /// answer frees a slot: the peer is slowed by its pipe filling up and
    /// loses nothing. What is buffered beyond the cap is at most the rest
    /// of the last chunk the adapter read. The default.
    #[default]
    Backpressure,
    /// Answer every call over the cap at once with the retryable
    /// `OVERLOADED` error (503 / -32072).
    Refuse,
}

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
    /// What a framed connection ([`super::Server::handle_input`]) does
    /// with a message that arrives while `max_in_flight` queries wait:
    /// hold it, and ask for no more input, until one is answered
    /// ([`Overload::Backpressure`], the default), or answer a call
    /// `OVERLOADED` at once ([`Overload::Refuse`]). Unframed messages
    /// ([`super::Server::handle_message`], HTTP) are always refused: their
    /// transport answers `503` with `Retry-After` instead.
    pub overload: Overload,
    /// Whether `resources/list` and `resources/read` are served.
    pub resources_enabled: bool,
    /// Visibility filter for tools (`None`: all visible).
    pub tool_filter: Option<ToolFilter>,
    /// Authorization for visible tools (`None`: all callable): a call of a
    /// visible tool it refuses is answered `FORBIDDEN`. Built by
    /// `ToolPolicy::apply` (crate `evidence-wire-config`) from `[server.auth] allowed_tools`.
    pub tool_authorizer: Option<ToolFilter>,
    /// The provider's capabilities contract (`None`: any check id and
    /// params are handed to the embedder). When set, `tools/list` shows the
    /// `evidence_query` tool derived from it and every query is checked
    /// against it before an [`super::ServerEvent::EvidenceQuery`] is emitted.
    pub contract: Option<ServerContract>,
    /// Which canonicalization profile the `evidence_hash` of every answer
    /// is computed with (default: the profile the connection's dialect
    /// verifies with, see [`crate::dialect`]).
    pub hash_profile: HashProfile,
    /// How long one call may take (`None`, the default: no limit of the
    /// server's own). The adapters give every call's context a deadline
    /// this far from when its work is handed out
    /// (`evidence_wire_provider::CallContext::deadline`): a check reads
    /// how much time it has left, and a blocking check polling for
    /// cancellation sees the deadline pass. The core keeps no clock: it
    /// only carries the setting.
    pub call_timeout: Option<core::time::Duration>,
    /// Signs every successful evidence result (`None`: unsigned).
    #[cfg(feature = "signatures")]
    pub signer: Option<crate::evidence::EvidenceSigner>,
    /// The tools besides `evidence_query`, and the resources.
    pub(crate) registry: Registry,
    /// Searchers the server runs over each message.
    pub(crate) finders: Finders,
}

/// The tools and resources of a configuration, and the schemas their
/// arguments are checked against (compiled once, with `std`).
#[derive(Clone)]
pub(crate) struct Registry {
    /// The definition of `evidence_query`: the built-in one (shared by
    /// every configuration) unless replaced.
    pub(crate) evidence: Arc<ToolDefinition>,
    /// Whether [`ServerConfig::set_evidence_tool`] replaced it (then it
    /// wins over a contract's).
    pub(crate) evidence_replaced: bool,
    /// Whether `evidence_query` arguments are still checked against the
    /// built-in input schema (false once a definition of that name
    /// registered its own): the one-pass read ([`super::arguments`]) is
    /// exact only against the built-in one.
    pub(crate) evidence_schema_builtin: bool,
    /// Every other tool, in the order added.
    pub(crate) tools: Vec<Tool>,
    /// The resources, in the order added.
    pub(crate) resources: Vec<Resource>,
    /// Input and output schemas of every tool, `evidence_query` included.
    #[cfg(feature = "json-schema")]
    pub(crate) schemas: crate::schema::SchemaRegistry,
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            evidence: ToolDefinition::shared_evidence_query(),
            evidence_replaced: false,
            evidence_schema_builtin: true,
            tools: Vec::new(),
            resources: Vec::new(),
            #[cfg(feature = "json-schema")]
            schemas: super::tools::evidence_query_schemas(),
        }
    }
}

impl ServerConfig {
    /// This configuration serving `contract` (see [`ServerContract`]).
    pub fn with_contract(mut self, contract: ServerContract) -> Self {
        self.contract = Some(contract);
        self
    }

    /// Offers a tool whose calls become [`super::ServerEvent::ToolCall`] events
    /// (replacing a tool of the same name).
    pub fn add_tool(&mut self, definition: ToolDefinition) {
        self.insert_tool(definition, ToolKind::External);
    }

    /// Offers a tool answered inside the core by `handler`, synchronously
    /// (replacing a tool of the same name).
    pub fn add_inline_tool(&mut self, definition: ToolDefinition, handler: InlineTool) {
        self.insert_tool(definition, ToolKind::Inline(handler));
    }

    /// Serves `resource` through `resources/list` and `resources/read`
    /// (replacing a resource of the same URI).
    pub fn add_resource(&mut self, resource: Resource) {
        self.registry
            .resources
            .retain(|existing| existing.uri != resource.uri);
        self.registry.resources.push(resource);
    }

    /// Replaces the `evidence_query` tool's definition (e.g. a description
    /// or an input schema naming the provider's checks); its name stays
    /// `evidence_query`. A contract ([`ServerConfig::with_contract`]) sets
    /// one itself.
    pub fn set_evidence_tool(&mut self, definition: ToolDefinition) {
        let definition = ToolDefinition {
            name: EVIDENCE_QUERY_TOOL.to_owned(),
            ..definition
        };
        self.register_schemas(&definition);
        self.registry.evidence = Arc::new(definition);
        self.registry.evidence_replaced = true;
    }

    /// The tools `tools/list` may show, `evidence_query` first, each with
    /// how its calls are answered.
    pub(crate) fn tools(&self) -> impl Iterator<Item = (&ToolDefinition, &ToolKind)> {
        static EVIDENCE: ToolKind = ToolKind::Evidence;
        core::iter::once((self.evidence_tool(), &EVIDENCE)).chain(
            self.registry
                .tools
                .iter()
                .map(|tool| (tool.definition.as_ref(), &tool.kind)),
        )
    }

    /// The `evidence_query` definition in force: a replacement, else the
    /// contract's, else the built-in one.
    pub(crate) fn evidence_tool(&self) -> &ToolDefinition {
        match &self.contract {
            Some(contract) if !self.registry.evidence_replaced => &contract.inner.tool,
            _ => &self.registry.evidence,
        }
    }

    /// The resources, in the order added.
    pub(crate) fn resources(&self) -> &[Resource] {
        &self.registry.resources
    }

    fn insert_tool(&mut self, definition: ToolDefinition, kind: ToolKind) {
        self.register_schemas(&definition);
        self.registry
            .tools
            .retain(|tool| tool.definition.name != definition.name);
        self.registry.tools.push(Tool {
            definition: Arc::new(definition),
            kind,
        });
    }

    /// Registers (or replaces) a tool's schemas; a schema that does not
    /// compile leaves the tool answering `INTERNAL_ERROR`.
    fn register_schemas(&mut self, definition: &ToolDefinition) {
        if definition.name == EVIDENCE_QUERY_TOOL {
            self.registry.evidence_schema_builtin = false;
        }
        #[cfg(feature = "json-schema")]
        self.registry.schemas.register(crate::schema::ToolIo {
            name: definition.name.clone(),
            description: definition.description.clone(),
            input_schema: definition.input_schema.clone(),
            output_schema: definition.output_schema.clone(),
        });
        #[cfg(not(feature = "json-schema"))]
        let _ = definition;
    }
}

/// The default of [`ServerConfig::max_in_flight`]: queries waiting for an
/// answer on one connection (and the HTTP server's default cap on calls).
pub const DEFAULT_MAX_IN_FLIGHT: usize = 64;

/// The default drain deadline of every adapter's graceful shutdown (25 s,
/// under the usual 30 s an orchestrator grants after SIGTERM): how long the
/// queries in flight may run after [`super::Server::drain`] before
/// [`super::Server::expire_in_flight`] answers them retryably.
pub const DEFAULT_DRAIN_TIMEOUT_MS: u64 = 25_000;

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            limits: Limits::default(),
            framing: None,
            policy: Policy::default(),
            dialect: DialectChoice::Auto,
            server_info: ServerInfo::default(),
            instructions: None,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            overload: Overload::Backpressure,
            resources_enabled: true,
            tool_filter: None,
            tool_authorizer: None,
            contract: None,
            hash_profile: HashProfile::FollowDialect,
            call_timeout: None,
            #[cfg(feature = "signatures")]
            signer: None,
            registry: Registry::default(),
            finders: Finders::default(),
        }
    }
}

/// Substring searchers, built once per configuration: building a `memmem`
/// searcher costs more than running it over a usual message.
#[derive(Clone, Debug)]
pub(crate) struct Finders {
    /// `_meta`: whether a request's params may name its own revision.
    pub(crate) meta: memchr::memmem::Finder<'static>,
    /// `tools/call`: whether a message may take a call slot.
    pub(crate) tools_call: memchr::memmem::Finder<'static>,
}

impl Default for Finders {
    fn default() -> Self {
        Finders {
            meta: memchr::memmem::Finder::new(b"_meta"),
            tools_call: memchr::memmem::Finder::new(b"tools/call"),
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
            .field("overload", &self.overload)
            .field("resources_enabled", &self.resources_enabled)
            .field("contract", &self.contract)
            .field("hash_profile", &self.hash_profile)
            .field("call_timeout", &self.call_timeout)
            .field("tools", &self.registry.tools.len())
            .field("resources", &self.registry.resources.len())
            .finish_non_exhaustive()
    }
}
