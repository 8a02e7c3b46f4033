//! Tools and resources a server offers: their definitions as `tools/list`
//! and `resources/list` show them, and how a call of each is answered
//! (the built-in `evidence_query`, a tool the embedder answers, or an
//! inline tool answered inside the core).
//!
//! Limits: none of their own; arguments are bounded by the frame and
//! envelope limits before any tool sees them.

use alloc::borrow::ToOwned;
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;

use serde_json::{Map, Value, json};

use crate::contract::ProviderContract;
use crate::dialect::{Dialect, Speech};
use crate::evidence::EVIDENCE_QUERY_TOOL;

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
    pub(crate) fn shared_evidence_query() -> Arc<ToolDefinition> {
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

    /// The tool as `tools/list` shows it in `speech`: `input_schema` for
    /// Decision Gate; `inputSchema` for MCP, with `outputSchema` from
    /// revision 2025-06-18 on (older clients know no structured output).
    pub(crate) fn to_listing(&self, speech: Speech) -> Value {
        let mut tool = Map::new();
        tool.insert("name".to_owned(), Value::from(self.name.as_str()));
        tool.insert(
            "description".to_owned(),
            Value::from(self.description.as_str()),
        );
        match speech.dialect {
            Dialect::DecisionGate => {
                tool.insert("input_schema".to_owned(), self.input_schema.clone());
            }
            Dialect::Mcp => {
                tool.insert("inputSchema".to_owned(), self.input_schema.clone());
                if let (Some(output), true) = (&self.output_schema, speech.has_structured_content())
                {
                    tool.insert("outputSchema".to_owned(), output.clone());
                }
            }
        }
        Value::Object(tool)
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

/// How a call of a registered tool is answered.
#[derive(Clone)]
pub(crate) enum ToolKind {
    /// The built-in `evidence_query`: an [`super::ServerEvent::EvidenceQuery`].
    Evidence,
    /// A [`super::ServerEvent::ToolCall`] the embedder answers.
    External,
    /// Answered inside the core.
    Inline(InlineTool),
}

/// A registered tool.
#[derive(Clone)]
pub(crate) struct Tool {
    /// Shared: the built-in definition is made once per process.
    pub(crate) definition: Arc<ToolDefinition>,
    pub(crate) kind: ToolKind,
}

/// A schema registry holding the built-in `evidence_query` tool, compiled
/// once per process and cloned (cheaply, sharing the compiled schemas) for
/// each connection: compiling the two schemas costs milliseconds, and the
/// HTTP adapter makes a [`Server`](crate::server::Server) per request.
#[cfg(feature = "json-schema")]
pub(crate) fn evidence_query_schemas() -> crate::schema::SchemaRegistry {
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
