//! The `tools/call` pipeline: a call's params read (in one pass for the
//! usual `evidence_query`), the tool found and its visibility and
//! authorization checked, the in-flight cap and the drain applied, the
//! arguments read and checked (duplicates, the input schema, the typed
//! form, the contract), and the call either answered here (an inline
//! tool, a refusal) or handed to the embedder with a ticket. The refusal
//! encoders of the pipeline live here too.
//!
//! Limits: those of the server (see the parent module).

use alloc::borrow::{Cow, ToOwned};
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;

use serde_json::Value;
use serde_json::value::RawValue;

use crate::dialect::{self, Speech};
use crate::envelope::{self, Id};
use crate::error::CanonicalError;
use crate::evidence::{EvidenceError, EvidenceQueryArguments, EvidenceResult};
use crate::trace::TraceContext;
use crate::unique::{self, Duplicate, UniqueError};

use super::{
    CallInfo, CallKind, Dialect, RequestOutcome, Server, ServerEvent, ToolFailure, ToolKind,
    arguments,
};

impl Server {
    pub(super) fn handle_tool_call(
        &mut self,
        id: &Id<'static>,
        params: Option<&RawValue>,
        batch: Option<u64>,
        ready: Option<EvidenceQueryArguments>,
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
        // What the embedder is told of the call (read before any refusal,
        // so that a refused call's record carries its trace id too).
        let call = self.call_info(id, raw);
        self.call_trace = call.trace.as_ref().map(TraceContext::trace_id);
        // The usual `evidence_query` call, arguments included, in one pass
        // (exact only against the built-in input schema); any other call
        // or shape is read the full way below.
        let ready = match ready {
            Some(read) => Some(read),
            None if self.config.registry.evidence_schema_builtin => {
                arguments::read_call(raw, self.config.policy.depth_limit())
            }
            None => None,
        };
        let (name, arguments_text) = if ready.is_some() {
            (Cow::Borrowed(crate::evidence::EVIDENCE_QUERY_TOOL), "{}")
        } else {
            let call: CallParams<'_> = match serde_json::from_str(raw.get()) {
                Ok(call) => call,
                Err(error) => {
                    let detail = format!("tools/call params must be {{name, arguments}}: {error}");
                    return self.reply_error(
                        id,
                        batch,
                        CanonicalError::InvalidToolInput,
                        detail,
                        None,
                    );
                }
            };
            let text = call.arguments.map(RawValue::get).unwrap_or("{}");
            (Cow::Owned(call.name.into_owned()), text)
        };
        // The configuration is shared: hold it here while `self` answers.
        let config = Arc::clone(&self.config);
        let found = config
            .tools()
            .find(|(definition, _)| definition.name == name);
        let kind = match found {
            Some((_, kind)) if self.is_visible(&name) => kind,
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
        let authorized = (config.tool_authorizer.as_ref()).is_none_or(|allow| allow(&name));
        if !authorized {
            let detail = format!("tool {name:?} is not in server.auth.allowed_tools");
            return self.reply_error(id, batch, CanonicalError::Forbidden, detail, Some(name));
        }
        // Inline tools answer at once and hold no ticket, so only calls
        // that wait for the embedder count against the limit.
        let waits = !matches!(kind, ToolKind::Inline(_));
        if waits && self.draining {
            let detail = "the server is shutting down and takes no new calls; send the call again, to another instance or after the restart".to_owned();
            return self.reply_error(id, batch, CanonicalError::Overloaded, detail, Some(name));
        }
        if waits && self.pending.len() >= config.max_in_flight {
            let detail = format!(
                "{} queries are already in flight (the limit); retry later",
                self.pending.len()
            );
            return self.reply_error(id, batch, CanonicalError::Overloaded, detail, Some(name));
        }
        match kind {
            ToolKind::Evidence => {
                let read = match ready {
                    Some(arguments) => Ok(arguments),
                    None => self.evidence_arguments(&name, arguments_text),
                };
                let arguments = match read {
                    Ok(arguments) => arguments,
                    Err(EvidenceInputError::Duplicate(duplicate)) => {
                        let place = format!("arguments of tool `{name}`");
                        return self.refuse_duplicate_argument(id, batch, &place, duplicate, name);
                    }
                    Err(EvidenceInputError::Schema(violation)) => {
                        return self.reply_tool_io_error(id, batch, self.speech, violation, name);
                    }
                    Err(EvidenceInputError::Typed(detail)) => {
                        let object =
                            CanonicalError::InvalidToolInput.error_object(Some(id), Some(&detail));
                        return self.refuse_tool_input(
                            id,
                            batch,
                            self.speech,
                            object,
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
                let ticket = self.issue_ticket(id, CallKind::Evidence, batch, name.clone());
                self.events.push_back(ServerEvent::EvidenceQuery {
                    ticket,
                    query: arguments.query,
                    context: arguments.context,
                    call,
                });
                RequestOutcome::accepted(Some(name))
            }
            ToolKind::External | ToolKind::Inline(_) => {
                let arguments: Value = match unique::from_str(arguments_text) {
                    Ok(Value::Object(object)) => Value::Object(object),
                    Err(UniqueError::Duplicate(duplicate)) => {
                        let place = format!("arguments of tool `{name}`");
                        return self.refuse_duplicate_argument(id, batch, &place, duplicate, name);
                    }
                    Ok(_) | Err(_) => {
                        let detail = "tool arguments must be a JSON object".to_owned();
                        let object =
                            CanonicalError::InvalidToolInput.error_object(Some(id), Some(&detail));
                        return self.refuse_tool_input(
                            id,
                            batch,
                            self.speech,
                            object,
                            detail,
                            Some(name),
                        );
                    }
                };
                #[cfg(feature = "json-schema")]
                if let Err(violation) = self
                    .config
                    .registry
                    .schemas
                    .validate_input(&name, &arguments)
                {
                    return self.reply_tool_io_error(id, batch, self.speech, violation, name);
                }
                if let ToolKind::Inline(handler) = kind {
                    let handler = Arc::clone(handler);
                    let result = handler(&arguments);
                    return self.answer_tool(id, batch, self.speech, name, result);
                }
                let ticket = self.issue_ticket(id, CallKind::Tool, batch, name.clone());
                self.events.push_back(ServerEvent::ToolCall {
                    ticket,
                    name: name.clone().into_owned(),
                    arguments,
                    call,
                });
                RequestOutcome {
                    deferred: true,
                    ..RequestOutcome::accepted(Some(name))
                }
            }
        }
    }

    /// What the embedder is told about the call `id` whose params are
    /// `raw`: the dialect of the request, its id, its `_meta` when it is an
    /// object, and its trace context (`_meta`'s when valid, else the HTTP
    /// headers'). The params are read again only when they may hold
    /// `_meta` (its bytes, or an escape that could spell them); the usual
    /// Decision Gate call has none and costs one substring search.
    fn call_info(&self, id: &Id<'static>, raw: &RawValue) -> CallInfo {
        #[derive(serde::Deserialize)]
        struct Params {
            #[serde(rename = "_meta", default)]
            meta: Option<serde_json::Map<String, Value>>,
        }
        let mut info = CallInfo::new(self.speech.dialect);
        info.id = Some(id.clone());
        let bytes = raw.get().as_bytes();
        if self.config.finders.meta.find(bytes).is_some() || memchr::memchr(b'\\', bytes).is_some()
        {
            // A `_meta` that is not an object (or named twice) reads as
            // none: `_meta` is only passed on.
            if let Ok(Params { meta: Some(meta) }) = serde_json::from_str::<Params>(raw.get()) {
                info.trace = TraceContext::from_meta(&meta);
                info.meta = Some(meta);
            }
        }
        if info.trace.is_none() {
            info.trace = (self.headers.as_ref()).and_then(|headers| headers.trace.clone());
        }
        info
    }

    /// The arguments of an `evidence_query` call: parsed once, refusing a
    /// member named twice anywhere (`query`, `context`, the check's
    /// `params`, at any depth: the provider may read any of it), checked
    /// against the tool's input schema in the registry (with `std`), then
    /// read into their typed form, which also checks what the schema cannot
    /// (an id that fits in 64 bits, for one).
    pub(super) fn evidence_arguments(
        &self,
        name: &str,
        text: &str,
    ) -> Result<EvidenceQueryArguments, EvidenceInputError> {
        // The common, plainly valid arguments in one typed pass; anything
        // else goes the full way below, which words every refusal.
        if self.config.registry.evidence_schema_builtin {
            if let Some(arguments) = arguments::read(text) {
                return Ok(arguments);
            }
        }
        self.evidence_arguments_in_full(name, text)
    }

    /// [`Server::evidence_arguments`] the full way: the duplicate-refusing
    /// parse into a value, the input schema, then the typed read.
    pub(super) fn evidence_arguments_in_full(
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
        #[cfg(feature = "json-schema")]
        self.config
            .registry
            .schemas
            .validate_input(name, &value)
            .map_err(EvidenceInputError::Schema)?;
        #[cfg(not(feature = "json-schema"))]
        let _ = name;
        <EvidenceQueryArguments as serde::Deserialize>::deserialize(&value).map_err(typed)
    }

    /// Answers a request whose `place` (the tool's arguments, or a method's
    /// params) names a member twice: `INVALID_TOOL_INPUT`, the member and
    /// its JSON pointer (relative to `place`) in the detail and in
    /// `data.pointer`.
    pub(super) fn reply_duplicate(
        &mut self,
        id: &Id<'static>,
        batch: Option<u64>,
        place: &str,
        duplicate: Duplicate,
        tool: Option<Cow<'static, str>>,
    ) -> RequestOutcome {
        let error = CanonicalError::InvalidToolInput;
        let detail = format!("{place}: {duplicate}");
        let object = error
            .error_object(Some(id), Some(&detail))
            .with_pointer(duplicate.pointer);
        self.reply(batch, envelope::encode_error_object(Some(id), &object));
        RequestOutcome {
            tool,
            error: Some(error),
            detail: Some(detail),
            deferred: false,
        }
    }

    /// Refuses tool arguments that name a member twice (see
    /// [`Server::refuse_tool_input`]): the member and its JSON pointer in
    /// the detail and in `data.pointer`.
    pub(super) fn refuse_duplicate_argument(
        &mut self,
        id: &Id<'static>,
        batch: Option<u64>,
        place: &str,
        duplicate: Duplicate,
        tool: Cow<'static, str>,
    ) -> RequestOutcome {
        let detail = format!("{place}: {duplicate}");
        let object = CanonicalError::InvalidToolInput
            .error_object(Some(id), Some(&detail))
            .with_pointer(duplicate.pointer);
        self.refuse_tool_input(id, batch, self.speech, object, detail, Some(tool))
    }

    /// Answers an `evidence_query` the contract refused, at once and
    /// without an event: an `EvidenceResult` carrying `error` in the
    /// connection's dialect, as the embedder's answer would be. Its record
    /// has no canonical error (the call succeeded at the JSON-RPC level)
    /// and says what was refused.
    pub(super) fn answer_refused_query(
        &mut self,
        id: &Id<'static>,
        batch: Option<u64>,
        tool: Cow<'static, str>,
        error: EvidenceError,
    ) -> RequestOutcome {
        let detail = format!(
            "refused by the capabilities contract, answered as evidence error {}: {}",
            error.code, error.message
        );
        let result = EvidenceResult::with_error(error);
        let body = dialect::encode_evidence_reply(id, &result, self.speech);
        self.reply(batch, body);
        RequestOutcome {
            tool: Some(tool),
            error: None,
            detail: Some(detail),
            deferred: false,
        }
    }

    /// Answers a tool I/O failure with its JSON pointer in `data.pointer`.
    #[cfg(feature = "json-schema")]
    pub(super) fn reply_tool_io_error(
        &mut self,
        id: &Id<'static>,
        batch: Option<u64>,
        speech: Speech,
        violation: crate::schema::ToolIoError,
        tool: Cow<'static, str>,
    ) -> RequestOutcome {
        let object = violation
            .error
            .error_object(Some(id), Some(&violation.detail))
            .with_pointer(violation.pointer);
        if violation.error == CanonicalError::InvalidToolInput {
            return self.refuse_tool_input(id, batch, speech, object, violation.detail, Some(tool));
        }
        self.reply(batch, envelope::encode_error_object(Some(id), &object));
        RequestOutcome {
            tool: Some(tool),
            error: Some(violation.error),
            detail: Some(violation.detail),
            deferred: false,
        }
    }

    /// Answers tool arguments that were refused (outside the input schema,
    /// a member named twice, the wrong shape): as a tool result with
    /// `isError: true` carrying the canonical error object as text where
    /// the speech's revision asks for it (SEP-1303: MCP 2025-11-25 on,
    /// unless the policy keeps JSON-RPC errors), so a model can read and
    /// correct it; otherwise as the JSON-RPC error `INVALID_TOOL_INPUT`.
    pub(super) fn refuse_tool_input(
        &mut self,
        id: &Id<'static>,
        batch: Option<u64>,
        speech: Speech,
        object: crate::error::ErrorObject,
        detail: String,
        tool: Option<Cow<'static, str>>,
    ) -> RequestOutcome {
        let as_result = speech.dialect == Dialect::Mcp
            && speech.revision.input_errors_as_tool_results()
            && !self.config.policy.tool_input_errors_always_jsonrpc();
        if as_result {
            let text = serde_json::to_string(&object).unwrap_or_default();
            let result = dialect::failed_tool_result(&text, speech);
            self.reply(batch, envelope::encode_reply(id, &result));
            return RequestOutcome {
                tool,
                error: None,
                detail: Some(format!(
                    "answered as a tool result with isError (SEP-1303): {detail}"
                )),
                deferred: false,
            };
        }
        self.reply(batch, envelope::encode_error_object(Some(id), &object));
        RequestOutcome {
            tool,
            error: Some(CanonicalError::InvalidToolInput),
            detail: Some(detail),
            deferred: false,
        }
    }

    /// Without `std` there is no schema registry, so no schema failure.
    #[cfg(not(feature = "json-schema"))]
    pub(super) fn reply_tool_io_error(
        &mut self,
        id: &Id<'static>,
        batch: Option<u64>,
        speech: Speech,
        violation: crate::schema::ToolIoError,
        tool: Cow<'static, str>,
    ) -> RequestOutcome {
        let object = violation
            .error
            .error_object(Some(id), Some(&violation.detail));
        if violation.error == CanonicalError::InvalidToolInput {
            return self.refuse_tool_input(id, batch, speech, object, violation.detail, Some(tool));
        }
        self.reply_error(id, batch, violation.error, violation.detail, Some(tool))
    }

    /// Answers a tool call with what its handler produced, the same way
    /// whether the tool ran inline or the embedder answered later: a result
    /// outside the tool's output schema is answered `INTERNAL_ERROR` (with
    /// `data.pointer`) and never sent as a success; `InvalidInput` is
    /// answered `INVALID_TOOL_INPUT`; `Failed` is a result with
    /// `isError: true`. The outcome is what was sent.
    pub(super) fn answer_tool(
        &mut self,
        id: &Id<'static>,
        batch: Option<u64>,
        speech: Speech,
        tool: Cow<'static, str>,
        result: Result<Value, ToolFailure>,
    ) -> RequestOutcome {
        match result {
            Ok(structured) => {
                #[cfg(feature = "json-schema")]
                if let Err(violation) = self
                    .config
                    .registry
                    .schemas
                    .validate_output(&tool, &structured)
                {
                    return self.reply_tool_io_error(id, batch, speech, violation, tool);
                }
                let payload = dialect::structured_tool_result(&structured, speech);
                self.reply(batch, envelope::encode_reply(id, &payload));
                RequestOutcome::accepted(Some(tool))
            }
            Err(ToolFailure::InvalidInput(detail)) => {
                let object = CanonicalError::InvalidToolInput.error_object(Some(id), Some(&detail));
                self.refuse_tool_input(id, batch, speech, object, detail, Some(tool))
            }
            Err(ToolFailure::Failed(message)) => {
                let payload = dialect::failed_tool_result(&message, speech);
                self.reply(batch, envelope::encode_reply(id, &payload));
                RequestOutcome::accepted(Some(tool))
            }
        }
    }
}

/// Why the arguments of an `evidence_query` call were refused.
pub(super) enum EvidenceInputError {
    /// An object in them names a member twice (answered with `data.pointer`).
    Duplicate(Duplicate),
    /// They fail the tool's input schema (answered with `data.pointer`).
    #[cfg_attr(not(feature = "json-schema"), allow(dead_code))]
    Schema(crate::schema::ToolIoError),
    /// They fit the schema but not the typed form.
    Typed(String),
}
