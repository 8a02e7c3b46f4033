//! The tool I/O schema registry: each tool's input and output JSON Schemas
//! (Draft 2020-12), compiled once and cached by fingerprint.
//!
//! A schema's [`Fingerprint`] is the SHA-256 of its canonical JSON (RFC 8785,
//! [`crate::canonical`]). [`SchemaRegistry::register`] compiles a schema only
//! when no compiled schema with the same fingerprint is cached, so tools that
//! share a schema share one validator, and re-registering a tool with a
//! changed schema (a new fingerprint) compiles it afresh and drops the stale
//! entry. [`SchemaRegistry::stats`] makes this observable.
//!
//! Validation: [`SchemaRegistry::validate_input`] reports `INVALID_TOOL_INPUT`
//! with the JSON pointer of the first failing place (it goes into the error's
//! `data.pointer`); [`SchemaRegistry::validate_output`] reports
//! `INTERNAL_ERROR`: output outside its schema is the server's fault, is
//! logged, and is never sent as a success.
//!
//! Limits: compiling and validating use the `jsonschema` crate and exist only
//! with the `std` feature. Without it the registry, fingerprints and the tool
//! I/O record check remain, but general schema validation is compiled out:
//! a schema's top-level `"type": "object"` is still checked, and the schemas
//! of the built-in `evidence_query` tool (recognized by fingerprint, see
//! [`BuiltinSchema`]) are checked by deserializing into their typed forms
//! ([`crate::evidence::EvidenceQueryArguments`], [`crate::evidence::EvidenceResult`]).
//! Schemas may only refer to their own `$defs`: nothing is ever fetched.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
#[cfg(feature = "json-schema")]
use alloc::string::ToString;
use alloc::sync::Arc;
use core::fmt;

use serde_json::Value;

use crate::canonical;
use crate::envelope::Id;
use crate::error::{CanonicalError, ErrorObject};

/// The JSON Schema of the `evidence_query` tool's arguments
/// (`spec/schemas/evidence_query.input.schema.json`, embedded from the copy
/// in this crate's `schemas/`, which `scripts/sync-embedded` keeps equal).
pub const EVIDENCE_QUERY_INPUT_SCHEMA: &str =
    include_str!("../schemas/evidence_query.input.schema.json");

/// The JSON Schema of the `evidence_query` tool's result, an EvidenceResult
/// (`spec/schemas/evidence_query.output.schema.json`, embedded from this
/// crate's copy in `schemas/`).
pub const EVIDENCE_QUERY_OUTPUT_SCHEMA: &str =
    include_str!("../schemas/evidence_query.output.schema.json");

/// The JSON Schema of a strict JSON-RPC request envelope
/// (`spec/schemas/envelope.schema.json`, embedded from this crate's copy in
/// `schemas/`).
pub const ENVELOPE_SCHEMA: &str = include_str!("../schemas/envelope.schema.json");

/// A tool's name, description and I/O schemas, as `tools/list` shows them.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolIo {
    /// The tool name, e.g. `evidence_query`.
    pub name: String,
    /// What the tool does, for a person.
    pub description: String,
    /// JSON Schema (Draft 2020-12) of the tool's `arguments`.
    pub input_schema: Value,
    /// JSON Schema of the tool's structured result, when it declares one.
    pub output_schema: Option<Value>,
}

impl ToolIo {
    /// The built-in `evidence_query` tool with the schemas from `spec/schemas/`.
    pub fn evidence_query() -> Result<ToolIo, ToolIoError> {
        let parse = |text: &str, which: &str| {
            serde_json::from_str::<Value>(text).map_err(|error| {
                ToolIoError::new(
                    CanonicalError::InternalError,
                    String::new(),
                    format!("built-in {which} schema of evidence_query is not JSON: {error}"),
                )
            })
        };
        Ok(ToolIo {
            name: String::from("evidence_query"),
            description: String::from("Resolve a Decision Gate evidence query."),
            input_schema: parse(EVIDENCE_QUERY_INPUT_SCHEMA, "input")?,
            output_schema: Some(parse(EVIDENCE_QUERY_OUTPUT_SCHEMA, "output")?),
        })
    }
}

/// SHA-256 of a schema's canonical JSON: the cache key.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint(pub [u8; 32]);

impl Fingerprint {
    /// The fingerprint of `schema`.
    ///
    /// If the schema cannot be canonicalized (nesting beyond the canonicalizer's
    /// limit, or an integer past ±(2^53 − 1), which RFC 8785 would round to a
    /// double other integers share), the SHA-256 of its compact `serde_json`
    /// form is used instead: still deterministic, exact for every integer a
    /// [`Value`] holds, and changing with every change of the schema.
    pub fn of(schema: &Value) -> Fingerprint {
        let compact = serde_json::to_vec(schema).unwrap_or_default();
        match canonical::sha256(&compact, &canonical::Options::default()) {
            Ok(digest) => Fingerprint(digest),
            Err(_) => {
                let mut hasher = <sha2::Sha256 as sha2::Digest>::new();
                sha2::Digest::update(&mut hasher, &compact);
                Fingerprint(sha2::Digest::finalize(hasher).into())
            }
        }
    }

    /// Lowercase hex, 64 digits.
    pub fn to_hex(&self) -> String {
        canonical::hex_lower(&self.0)
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({})", self.to_hex())
    }
}

/// A schema of a built-in tool, recognized by fingerprint, whose instances
/// also have a typed Rust form.
///
/// With the `std` feature the `jsonschema` validator is authoritative; without
/// it, [`CompiledSchema::validate`] falls back to [`BuiltinSchema::validate_typed`]
/// for these schemas, so the built-in tool keeps real input and output checks
/// in a no_std build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BuiltinSchema {
    /// [`EVIDENCE_QUERY_INPUT_SCHEMA`]: typed as [`crate::evidence::EvidenceQueryArguments`].
    EvidenceQueryInput,
    /// [`EVIDENCE_QUERY_OUTPUT_SCHEMA`]: typed as [`crate::evidence::EvidenceResult`].
    EvidenceQueryOutput,
}

impl BuiltinSchema {
    /// The built-in schema whose fingerprint is `fingerprint`, if any.
    pub fn recognize(fingerprint: Fingerprint) -> Option<BuiltinSchema> {
        [
            (
                BuiltinSchema::EvidenceQueryInput,
                EVIDENCE_QUERY_INPUT_SCHEMA,
            ),
            (
                BuiltinSchema::EvidenceQueryOutput,
                EVIDENCE_QUERY_OUTPUT_SCHEMA,
            ),
        ]
        .into_iter()
        .find(|(_, text)| {
            serde_json::from_str::<Value>(text)
                .is_ok_and(|schema| Fingerprint::of(&schema) == fingerprint)
        })
        .map(|(builtin, _)| builtin)
    }

    /// Checks `instance` by deserializing it into the typed form. Serde does
    /// not report where it failed, so the pointer is `""` (the whole value)
    /// and the message names the problem.
    pub fn validate_typed(self, instance: &Value) -> Result<(), SchemaViolation> {
        let outcome = match self {
            BuiltinSchema::EvidenceQueryInput => {
                <crate::evidence::EvidenceQueryArguments as serde::Deserialize>::deserialize(
                    instance,
                )
                .map(drop)
            }
            BuiltinSchema::EvidenceQueryOutput => {
                <crate::evidence::EvidenceResult as serde::Deserialize>::deserialize(instance)
                    .map(drop)
            }
        };
        outcome.map_err(|error| SchemaViolation {
            pointer: String::new(),
            message: format!("{error}"),
        })
    }
}

/// One schema, compiled.
pub struct CompiledSchema {
    fingerprint: Fingerprint,
    schema: Value,
    builtin: Option<BuiltinSchema>,
    #[cfg(feature = "json-schema")]
    validator: jsonschema::Validator,
}

impl fmt::Debug for CompiledSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompiledSchema")
            .field("fingerprint", &self.fingerprint)
            .finish_non_exhaustive()
    }
}

/// The first place where an instance fails its schema.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchemaViolation {
    /// JSON pointer (RFC 6901) into the instance; `""` is the whole instance.
    pub pointer: String,
    /// What the schema wanted there.
    pub message: String,
}

impl CompiledSchema {
    /// Compiles `schema` as Draft 2020-12.
    pub fn compile(schema: &Value) -> Result<CompiledSchema, String> {
        if !matches!(schema, Value::Object(_) | Value::Bool(_)) {
            return Err(String::from("a JSON Schema is an object or a boolean"));
        }
        #[cfg(feature = "json-schema")]
        let validator = jsonschema::draft202012::options()
            .should_validate_formats(true)
            .build(schema)
            .map_err(|error| format!("not a valid Draft 2020-12 schema: {error}"))?;
        let fingerprint = Fingerprint::of(schema);
        Ok(CompiledSchema {
            fingerprint,
            schema: schema.clone(),
            builtin: BuiltinSchema::recognize(fingerprint),
            #[cfg(feature = "json-schema")]
            validator,
        })
    }

    /// The cache key.
    pub fn fingerprint(&self) -> Fingerprint {
        self.fingerprint
    }

    /// The schema as registered.
    pub fn schema(&self) -> &Value {
        &self.schema
    }

    /// The built-in tool schema this is, if it is one.
    pub fn builtin(&self) -> Option<BuiltinSchema> {
        self.builtin
    }

    /// Validates `instance`, reporting the first failure.
    ///
    /// Without `std`, a top-level `"type": "object"` is checked, and built-in
    /// schemas ([`BuiltinSchema`]) are checked through their typed forms.
    pub fn validate(&self, instance: &Value) -> Result<(), SchemaViolation> {
        #[cfg(feature = "json-schema")]
        {
            match self.validator.iter_errors(instance).next() {
                None => Ok(()),
                Some(error) => Err(SchemaViolation {
                    pointer: error.instance_path().as_str().to_string(),
                    message: error.to_string(),
                }),
            }
        }
        #[cfg(not(feature = "json-schema"))]
        {
            let wants_object = self.schema.get("type").and_then(Value::as_str) == Some("object");
            if wants_object && !instance.is_object() {
                return Err(SchemaViolation {
                    pointer: String::new(),
                    message: String::from("expected an object"),
                });
            }
            match self.builtin {
                Some(builtin) => builtin.validate_typed(instance),
                None => Ok(()),
            }
        }
    }
}

/// A registered tool with its compiled schemas.
#[derive(Debug)]
pub struct LoadedToolIo {
    /// The tool as registered.
    pub tool: ToolIo,
    /// Its compiled input schema.
    pub input: Arc<CompiledSchema>,
    /// Its compiled output schema, when it declares one.
    pub output: Option<Arc<CompiledSchema>>,
}

/// Compile-cache counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Schemas compiled (cache misses).
    pub compiled: u64,
    /// Schemas found already compiled under the same fingerprint (cache hits).
    pub hits: u64,
    /// Compiled schemas dropped because no tool uses their fingerprint any more.
    pub evicted: u64,
}

/// Why a tool's input, output or registration was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{detail}")]
pub struct ToolIoError {
    /// `INVALID_TOOL_INPUT`, `INTERNAL_ERROR` or `TOOL_NOT_FOUND`.
    pub error: CanonicalError,
    /// JSON pointer of the first failing place (`""` = the whole value).
    pub pointer: String,
    /// What was wrong, for a person.
    pub detail: String,
}

impl ToolIoError {
    fn new(error: CanonicalError, pointer: String, detail: String) -> Self {
        ToolIoError {
            error,
            pointer,
            detail,
        }
    }

    /// The JSON-RPC error object, with the pointer in `data.pointer`.
    pub fn to_error_object(&self, request_id: Option<&Id<'_>>) -> ErrorObject {
        self.error
            .error_object(request_id, Some(&self.detail))
            .with_pointer(self.pointer.clone())
    }
}

#[derive(Clone)]
enum Entry {
    Ready(Arc<LoadedToolIo>),
    Broken { problem: String },
}

/// Tools by name, with their schemas compiled once per fingerprint.
///
/// A clone is cheap and shares the compiled schemas (`Arc`s): a server
/// connection starts from a clone of one registry compiled once per
/// process. A schema stays cached while any clone still uses it.
#[derive(Clone, Default)]
pub struct SchemaRegistry {
    tools: BTreeMap<String, Entry>,
    compiled: BTreeMap<Fingerprint, Arc<CompiledSchema>>,
    stats: CacheStats,
}

impl fmt::Debug for SchemaRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SchemaRegistry")
            .field("tools", &self.tools.keys().collect::<alloc::vec::Vec<_>>())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl SchemaRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        SchemaRegistry::default()
    }

    /// Registers (or replaces) `tool`, compiling its schemas unless cached.
    ///
    /// A tool whose schema does not compile stays registered as broken: its
    /// calls fail with `INTERNAL_ERROR` naming the problem, and
    /// [`SchemaRegistry::load_tool_io`] returns `None` for it. Use
    /// [`SchemaRegistry::try_register`] to be told at once.
    pub fn register(&mut self, tool: ToolIo) {
        if let Err(problem) = self.try_register(tool.clone()) {
            self.tools.insert(
                tool.name,
                Entry::Broken {
                    problem: problem.detail,
                },
            );
            self.evict_unused();
        }
    }

    /// Registers (or replaces) `tool`; an error (and no change to the
    /// registered tools) when one of its schemas does not compile.
    pub fn try_register(&mut self, tool: ToolIo) -> Result<Arc<LoadedToolIo>, ToolIoError> {
        let input = self.compile_cached(&tool.name, "input", &tool.input_schema)?;
        let output = match &tool.output_schema {
            Some(schema) => match self.compile_cached(&tool.name, "output", schema) {
                Ok(compiled) => Some(compiled),
                Err(problem) => {
                    // The input schema may have been compiled just now for
                    // nothing: drop it unless another tool uses it.
                    drop(input);
                    self.evict_unused();
                    return Err(problem);
                }
            },
            None => None,
        };
        let loaded = Arc::new(LoadedToolIo {
            tool,
            input,
            output,
        });
        self.tools
            .insert(loaded.tool.name.clone(), Entry::Ready(Arc::clone(&loaded)));
        self.evict_unused();
        Ok(loaded)
    }

    /// Removes a tool; true when it was registered.
    pub fn unregister(&mut self, tool_id: &str) -> bool {
        let removed = self.tools.remove(tool_id).is_some();
        self.evict_unused();
        removed
    }

    /// The tool's compiled input and output schemas; `None` when unknown
    /// (or registered with a schema that does not compile).
    pub fn load_tool_io(&self, tool_id: &str) -> Option<Arc<LoadedToolIo>> {
        match self.tools.get(tool_id)? {
            Entry::Ready(loaded) => Some(Arc::clone(loaded)),
            Entry::Broken { .. } => None,
        }
    }

    /// Cache counters since the registry was created.
    pub fn stats(&self) -> CacheStats {
        self.stats
    }

    /// How many distinct compiled schemas are cached.
    pub fn cached_schemas(&self) -> usize {
        self.compiled.len()
    }

    /// Validates a call's `arguments` against the tool's input schema:
    /// `INVALID_TOOL_INPUT` with the pointer of the first failure.
    pub fn validate_input(&self, tool_id: &str, input: &Value) -> Result<(), ToolIoError> {
        let loaded = self.ready(tool_id)?;
        loaded.input.validate(input).map_err(|violation| {
            ToolIoError::new(
                CanonicalError::InvalidToolInput,
                violation.pointer.clone(),
                format!(
                    "arguments of tool `{tool_id}` fail its input schema at `{}`: {}; fix that value and call again",
                    violation.pointer, violation.message
                ),
            )
        })
    }

    /// Validates a tool's structured result against its output schema before
    /// it is sent: `INTERNAL_ERROR` when it does not match. No output schema
    /// means anything goes.
    pub fn validate_output(&self, tool_id: &str, output: &Value) -> Result<(), ToolIoError> {
        let loaded = self.ready(tool_id)?;
        let Some(schema) = &loaded.output else {
            return Ok(());
        };
        schema.validate(output).map_err(|violation| {
            ToolIoError::new(
                CanonicalError::InternalError,
                violation.pointer.clone(),
                format!(
                    "result of tool `{tool_id}` fails its output schema at `{}`: {}",
                    violation.pointer, violation.message
                ),
            )
        })
    }

    fn ready(&self, tool_id: &str) -> Result<&LoadedToolIo, ToolIoError> {
        match self.tools.get(tool_id) {
            Some(Entry::Ready(loaded)) => Ok(loaded),
            Some(Entry::Broken { problem }) => Err(ToolIoError::new(
                CanonicalError::InternalError,
                String::new(),
                format!("tool `{tool_id}` is registered with a broken schema: {problem}"),
            )),
            None => Err(ToolIoError::new(
                CanonicalError::ToolNotFound,
                String::new(),
                format!("no tool named `{tool_id}` is registered; see tools/list"),
            )),
        }
    }

    fn compile_cached(
        &mut self,
        tool_id: &str,
        which: &str,
        schema: &Value,
    ) -> Result<Arc<CompiledSchema>, ToolIoError> {
        let fingerprint = Fingerprint::of(schema);
        if let Some(compiled) = self.compiled.get(&fingerprint) {
            self.stats.hits = self.stats.hits.saturating_add(1);
            return Ok(Arc::clone(compiled));
        }
        let compiled = CompiledSchema::compile(schema).map_err(|problem| {
            ToolIoError::new(
                CanonicalError::InternalError,
                String::new(),
                format!("{which} schema of tool `{tool_id}`: {problem}"),
            )
        })?;
        self.stats.compiled = self.stats.compiled.saturating_add(1);
        let compiled = Arc::new(compiled);
        self.compiled.insert(fingerprint, Arc::clone(&compiled));
        Ok(compiled)
    }

    /// Drops compiled schemas that no registered tool uses.
    fn evict_unused(&mut self) {
        let before = self.compiled.len();
        self.compiled
            .retain(|_, compiled| Arc::strong_count(compiled) > 1);
        let dropped = before.saturating_sub(self.compiled.len());
        self.stats.evicted = self
            .stats
            .evicted
            .saturating_add(u64::try_from(dropped).unwrap_or(u64::MAX));
    }
}

/// Checks a tool I/O record `{"tool": …, "input": {…}, "output": {…}}`:
/// `tool` must equal `requested_tool` (else `INTERNAL_ERROR`: the record
/// belongs to another call), `input` must be an object (else
/// `INVALID_TOOL_INPUT`) and `output` an object (else `INTERNAL_ERROR`).
pub fn check_tool_io_record(record: &Value, requested_tool: &str) -> Result<(), ToolIoError> {
    let Some(object) = record.as_object() else {
        return Err(ToolIoError::new(
            CanonicalError::InternalError,
            String::new(),
            String::from("a tool I/O record is an object {tool, input, output}"),
        ));
    };
    let member = |name: &str| object.get(name);
    match member("tool").and_then(Value::as_str) {
        Some(tool) if tool == requested_tool => {}
        other => {
            return Err(ToolIoError::new(
                CanonicalError::InternalError,
                String::from("/tool"),
                format!(
                    "record names tool {}, but `{requested_tool}` was requested",
                    other.map_or_else(|| String::from("nothing"), |tool| format!("`{tool}`"))
                ),
            ));
        }
    }
    if !member("input").is_some_and(Value::is_object) {
        return Err(ToolIoError::new(
            CanonicalError::InvalidToolInput,
            String::from("/input"),
            String::from("`input` must be a JSON object"),
        ));
    }
    if !member("output").is_some_and(Value::is_object) {
        return Err(ToolIoError::new(
            CanonicalError::InternalError,
            String::from("/output"),
            String::from("`output` must be a JSON object"),
        ));
    }
    Ok(())
}
