//! One check of a provider: a typed function, and what its contract says.
//!
//! A [`Check`] is made from a function `Fn(P, &CheckContext) -> Result<R, CheckError>`
//! (or an async one with [`Check::new_async`]): `P` is the check's params
//! (`serde::Deserialize` + `schemars::JsonSchema`), `R` its result
//! (`serde::Serialize` + `schemars::JsonSchema`). Both JSON Schemas are
//! derived from the types, the comparators a gate may apply default from
//! the result's type (Decision Gate's compatibility matrix,
//! [`default_comparators`]), and the rest of the contract entry
//! (determinism, examples, anchor and content types) is set with builder
//! methods. The function never sees params that failed the derived schema:
//! the server checks them against the contract first.
//!
//! Params are strict: a member the params type does not declare is refused
//! (`invalid_params`), because the derived schema closes the object
//! (`"additionalProperties": false`, see [`close_params_schema`]) and the
//! server enforces it with or without the `json-schema` feature. A type
//! that accepts other members says so with
//! `#[schemars(extend("additionalProperties" = true))]` or a
//! `#[serde(flatten)]` map member.
//!
//! Limits: none of its own; params are bounded by the frame limits before
//! they reach a check, and the answer by [`evidence_wire::server`]'s answer
//! guards.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use evidence_wire::contract::{CheckContract, CheckExample, Comparator, Determinism};
use evidence_wire::evidence::{
    EvidenceAnchor, EvidenceContext, EvidenceError, EvidenceQuery, EvidenceRef, EvidenceResult,
    EvidenceValue,
};
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use std::time::{Duration, Instant};

use crate::cancel::{CancelReason, Cancellation};
use crate::handler::{Answer, CallContext, Caller};
use crate::root::EvidenceRoot;
use crate::trace::TraceContext;

/// The `error.code` of params the check's type cannot read (after they
/// passed the derived schema; a schema the type does not fully describe).
pub const INVALID_PARAMS: &str = "invalid_params";

// `internal_error` (a result that cannot be encoded as JSON) is the
// handler's code for any failure of the provider itself: one constant.
use crate::handler::INTERNAL_ERROR;

/// An expected failure of a check: a code a gate can match on, a message
/// for a person, and optional structured details. It becomes the
/// `EvidenceResult.error` the caller sees; it is never a JSON-RPC error.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckError {
    error: EvidenceError,
}

impl CheckError {
    /// A failure with a stable machine-readable `code` (e.g.
    /// `file_not_found`) and a `message` saying what was wrong and what to do.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        CheckError {
            error: EvidenceError::new(code, message),
        }
    }

    /// The same failure with structured `details`.
    pub fn with_details(mut self, details: Value) -> Self {
        self.error = self.error.with_details(details);
        self
    }

    /// The error code.
    pub fn code(&self) -> &str {
        &self.error.code
    }

    /// The error as it goes on the wire.
    pub fn into_evidence_error(self) -> EvidenceError {
        self.error
    }
}

impl fmt::Display for CheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.error.code, self.error.message)
    }
}

impl std::error::Error for CheckError {}

impl From<EvidenceError> for CheckError {
    fn from(error: EvidenceError) -> Self {
        CheckError { error }
    }
}

/// What a check knows about the query it answers, whether anybody still
/// waits for the answer, and where it records where its evidence came
/// from.
///
/// Cheap to clone (the clones share one record). A check that reads a file
/// or a URL says so with [`CheckContext::set_ref`] and
/// [`CheckContext::set_anchor`]; the reference and anchor go into the
/// answer whether the check succeeds or fails (as Decision Gate's own
/// `json.path` keeps them on `jsonpath_not_found`).
///
/// A long blocking check stops early once its call is cancelled (the
/// caller went away, cancelled, or the server shuts down):
/// [`CheckContext::is_cancelled`] between steps, or
/// [`Cancellation::on_cancel`] to interrupt what it blocks on. Its answer is
/// dropped then, so any error will do. An async check is simply dropped.
///
/// The call may also have a deadline ([`CheckContext::deadline`], from the
/// server's `call_timeout`): [`CheckContext::remaining`] says how long the
/// check has left, and [`CheckContext::is_cancelled`] turns true once it
/// passed. The caller still waits then: answer an error saying the check
/// ran out of time ([`CheckContext::cancel_reason`] is
/// [`CancelReason::Deadline`]). An async check bounds its own waits with
/// its runtime's timer and [`CheckContext::remaining`].
///
/// Besides the query it carries who asked ([`CheckContext::caller`]), the
/// request's `_meta` ([`CheckContext::meta`]) and the provider's
/// [`EvidenceRoot`] ([`CheckContext::root`]).
#[derive(Clone, Debug)]
pub struct CheckContext {
    inner: Arc<ContextInner>,
}

#[derive(Debug)]
struct ContextInner {
    query: EvidenceQuery,
    context: EvidenceContext,
    call: CallContext,
    root: Option<EvidenceRoot>,
    provenance: Mutex<Provenance>,
}

#[derive(Clone, Debug, Default)]
struct Provenance {
    evidence_ref: Option<EvidenceRef>,
    evidence_anchor: Option<EvidenceAnchor>,
    content_type: Option<String>,
}

impl CheckContext {
    /// The context of `query` asked under `context`, in `call`.
    pub fn new(query: EvidenceQuery, context: EvidenceContext, call: CallContext) -> Self {
        CheckContext::with_parts(query, context, call, None)
    }

    fn with_parts(
        query: EvidenceQuery,
        context: EvidenceContext,
        call: CallContext,
        root: Option<EvidenceRoot>,
    ) -> Self {
        CheckContext {
            inner: Arc::new(ContextInner {
                query,
                context,
                call,
                root,
                provenance: Mutex::new(Provenance::default()),
            }),
        }
    }

    /// The same context with `root` as its evidence root (what
    /// [`crate::Provider::root`] gives every check; for a context built by
    /// hand, in a test).
    pub fn with_root(self, root: EvidenceRoot) -> Self {
        let inner = &self.inner;
        let copy = CheckContext::with_parts(
            inner.query.clone(),
            inner.context.clone(),
            inner.call.clone(),
            Some(root),
        );
        *copy.provenance() = self.provenance().clone();
        copy
    }

    /// The call's cancellation: cancelled once nobody waits for the answer.
    pub fn cancellation(&self) -> &Cancellation {
        self.inner.call.cancellation()
    }

    /// True once nobody waits for the answer, or the call's deadline
    /// passed: a blocking check may stop (see [`CheckContext::cancel_reason`]).
    pub fn is_cancelled(&self) -> bool {
        self.cancel_reason().is_some()
    }

    /// Why the check may stop: the call was cancelled (its answer reaches
    /// nobody), or [`CancelReason::Deadline`] once its deadline passed (the
    /// caller still waits for an answer: say that time ran out). `None`
    /// while the check should go on.
    pub fn cancel_reason(&self) -> Option<CancelReason> {
        if let Some(reason) = self.cancellation().reason() {
            return Some(reason);
        }
        let deadline = self.deadline()?;
        (Instant::now() >= deadline).then_some(CancelReason::Deadline)
    }

    /// When the answer is due: the server's `call_timeout` after the call
    /// was handed out (`None`: no deadline).
    pub fn deadline(&self) -> Option<Instant> {
        self.inner.call.deadline()
    }

    /// How long the check has left before its deadline (zero once it
    /// passed; `None`: no deadline).
    pub fn remaining(&self) -> Option<Duration> {
        self.deadline()
            .map(|deadline| deadline.saturating_duration_since(Instant::now()))
    }

    /// Who asked: Decision Gate or an MCP client, over which transport,
    /// authenticated or not.
    pub fn caller(&self) -> &Caller {
        self.inner.call.caller()
    }

    /// The `_meta` of the request's `tools/call` params, when it sent one
    /// (MCP clients may: a progress token, a trace context).
    pub fn meta(&self) -> Option<&Map<String, Value>> {
        self.inner.call.meta()
    }

    /// The caller's W3C trace context, when it sent a valid one (in the
    /// request's `_meta`, or over HTTP in its `traceparent` header): the
    /// trace the check's own outgoing calls continue. See [`crate::trace`].
    pub fn trace(&self) -> Option<&TraceContext> {
        self.inner.call.trace()
    }

    /// Everything the adapter said about the call.
    pub fn call(&self) -> &CallContext {
        &self.inner.call
    }

    /// The provider's evidence root ([`crate::Provider::root`]), or
    /// `root_unavailable` when it has none, ready for `?`:
    /// `context.root()?.read(&params.path, context)?`.
    pub fn root(&self) -> Result<&EvidenceRoot, CheckError> {
        self.inner.root.as_ref().ok_or_else(|| {
            CheckError::new(
                crate::root::ROOT_UNAVAILABLE,
                "this provider has no evidence root; give it one (Provider::root with EvidenceRoot::open, or --root DIR)",
            )
        })
    }

    /// The query as the caller sent it (check id, provider id, raw params).
    pub fn query(&self) -> &EvidenceQuery {
        &self.inner.query
    }

    /// The run the query belongs to: tenant, namespace, trigger time.
    pub fn context(&self) -> &EvidenceContext {
        &self.inner.context
    }

    /// Records where the evidence came from (e.g. `dg+file://root/report.json`).
    pub fn set_ref(&self, uri: impl Into<String>) {
        self.provenance().evidence_ref = Some(EvidenceRef { uri: uri.into() });
    }

    /// Records a stable anchor of the evidence.
    pub fn set_anchor(&self, anchor: EvidenceAnchor) {
        self.provenance().evidence_anchor = Some(anchor);
    }

    /// Sets the content type of the answer (default `application/json`).
    pub fn set_content_type(&self, content_type: impl Into<String>) {
        self.provenance().content_type = Some(content_type.into());
    }

    fn provenance(&self) -> std::sync::MutexGuard<'_, Provenance> {
        // A check that panicked while holding the lock leaves a record
        // that is still plain data: keep using it.
        self.inner
            .provenance
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// `outcome` as the EvidenceResult that goes on the wire, carrying the
    /// reference, anchor and content type recorded here.
    pub fn finish<R: Serialize>(&self, outcome: Result<R, CheckError>) -> EvidenceResult {
        let mut result = match outcome {
            Ok(value) => match EvidenceValue::json(&value) {
                Ok(value) => EvidenceResult::with_value(value),
                Err(error) => EvidenceResult::with_error(EvidenceError::new(
                    INTERNAL_ERROR,
                    format!("the check's result cannot be encoded as JSON: {error}"),
                )),
            },
            Err(error) => EvidenceResult::with_error(error.into_evidence_error()),
        };
        let provenance = self.provenance();
        result.evidence_ref = provenance.evidence_ref.clone();
        result.evidence_anchor = provenance.evidence_anchor.clone();
        if result.value.is_some() {
            if let Some(content_type) = &provenance.content_type {
                result.content_type = Some(content_type.clone());
            }
        }
        result
    }
}

/// Params of a check that takes none: the schema is an empty object (no
/// members allowed), and an absent `params` reads as it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NoParams;

impl<'de> serde::Deserialize<'de> for NoParams {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Empty {}
        let _: Empty = Empty::deserialize(deserializer)?;
        Ok(NoParams)
    }
}

impl JsonSchema for NoParams {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "NoParams".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"type": "object", "additionalProperties": false})
    }
}

/// Starts a check on its params and context; the flag says the check is
/// [`Check::inline`], so a blocking one may run right here.
type Start = dyn Fn(Value, CheckContext, bool) -> Answer<EvidenceResult> + Send + Sync;

/// One check of a provider: its contract entry and its function.
#[derive(Clone)]
pub struct Check {
    contract: CheckContract,
    comparators_set: bool,
    inline: bool,
    start: Arc<Start>,
}

impl fmt::Debug for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Check")
            .field("check_id", &self.contract.check_id)
            .field("inline", &self.inline)
            .finish_non_exhaustive()
    }
}

impl Check {
    /// A check answered by the blocking function `run`, on a thread of the
    /// adapter's blocking pool (file and network reads are fine here).
    ///
    /// `id` is the `query.check_id` that selects it; `description` says what
    /// it answers, for the contract and `tools/list`. Params and result
    /// schemas are derived from `P` and `R`; the comparators default from
    /// `R`'s type; determinism defaults to [`Determinism::External`].
    pub fn new<P, R, F>(id: impl Into<String>, description: impl Into<String>, run: F) -> Self
    where
        P: DeserializeOwned + JsonSchema + Send + 'static,
        R: Serialize + JsonSchema + 'static,
        F: Fn(P, &CheckContext) -> Result<R, CheckError> + Send + Sync + 'static,
    {
        let run = Arc::new(run);
        let start = move |params: Value, context: CheckContext, inline: bool| {
            match read_params::<P>(params) {
                Err(error) => Answer::Ready(context.finish::<()>(Err(error))),
                // Run here: no job to box, no handle on the function to take.
                Ok(params) if inline => {
                    let outcome = run(params, &context);
                    Answer::Ready(context.finish(outcome))
                }
                Ok(params) => {
                    let run = Arc::clone(&run);
                    Answer::Blocking(Box::new(move || {
                        let outcome = run(params, &context);
                        context.finish(outcome)
                    }))
                }
            }
        };
        Check::from_parts::<P, R>(id.into(), description.into(), Arc::new(start))
    }

    /// A check answered by the async function `run`, as a task of the
    /// adapter's executor. The future must not block.
    pub fn new_async<P, R, F, Fut>(
        id: impl Into<String>,
        description: impl Into<String>,
        run: F,
    ) -> Self
    where
        P: DeserializeOwned + JsonSchema + 'static,
        R: Serialize + JsonSchema + 'static,
        F: Fn(P, CheckContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, CheckError>> + Send + 'static,
    {
        let run = Arc::new(run);
        let start = move |params: Value, context: CheckContext, _inline: bool| match read_params::<P>(
            params,
        ) {
            Err(error) => Answer::Ready(context.finish::<()>(Err(error))),
            Ok(params) => {
                let future = run(params, context.clone());
                Answer::Async(Box::pin(async move {
                    let outcome = future.await;
                    context.finish(outcome)
                }))
            }
        };
        Check::from_parts::<P, R>(id.into(), description.into(), Arc::new(start))
    }

    fn from_parts<P: JsonSchema, R: JsonSchema>(
        check_id: String,
        description: String,
        start: Arc<Start>,
    ) -> Self {
        let params_schema = params_schema::<P>();
        let result_schema = result_schema::<R>();
        let params_required = params_schema
            .get("required")
            .and_then(Value::as_array)
            .is_some_and(|required| !required.is_empty());
        let allowed_comparators = default_comparators(&result_schema);
        Check {
            contract: CheckContract {
                check_id,
                description,
                determinism: Determinism::External,
                params_required,
                params_schema,
                result_schema,
                allowed_comparators,
                anchor_types: Vec::new(),
                content_types: vec![evidence_wire::evidence::CONTENT_TYPE_JSON.to_owned()],
                examples: Vec::new(),
            },
            comparators_set: false,
            inline: false,
            start,
        }
    }

    /// Whether the answer depends only on the inputs, on the trigger time,
    /// or on the outside world (the default).
    pub fn determinism(mut self, determinism: Determinism) -> Self {
        self.contract.determinism = determinism;
        self
    }

    /// The comparators a gate may apply, instead of the defaults for the
    /// result type (any order; the contract lists them in canonical order).
    pub fn comparators(mut self, comparators: impl IntoIterator<Item = Comparator>) -> Self {
        let mut comparators: Vec<Comparator> = comparators.into_iter().collect();
        comparators.sort_unstable();
        comparators.dedup();
        self.contract.allowed_comparators = comparators;
        self.comparators_set = true;
        self
    }

    /// An example of params and the value answered (checked against the
    /// schemas when the provider's contract is built).
    pub fn example(mut self, description: impl Into<String>, params: Value, result: Value) -> Self {
        self.contract.examples.push(CheckExample {
            description: description.into(),
            params,
            result,
        });
        self
    }

    /// The anchor types the evidence carries (e.g. `file_path_rooted`).
    pub fn anchor_types(mut self, types: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.contract.anchor_types = types.into_iter().map(Into::into).collect();
        self
    }

    /// The content types of the evidence (default `application/json`).
    pub fn content_types(mut self, types: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.contract.content_types = types.into_iter().map(Into::into).collect();
        self
    }

    /// Replaces the derived params schema (say, to add bounds the type
    /// cannot express); `params_required` follows its `required` list.
    /// The schema is used as written: say `"additionalProperties": false`
    /// to keep unknown members out.
    pub fn params_schema(mut self, schema: Value) -> Self {
        self.contract.params_required = schema
            .get("required")
            .and_then(Value::as_array)
            .is_some_and(|required| !required.is_empty());
        self.contract.params_schema = schema;
        self
    }

    /// Replaces the derived result schema; the default comparators follow
    /// it unless [`Check::comparators`] set them.
    pub fn result_schema(mut self, schema: Value) -> Self {
        if !self.comparators_set {
            self.contract.allowed_comparators = default_comparators(&schema);
        }
        self.contract.result_schema = schema;
        self
    }

    /// Marks a blocking check as cheap and free of I/O (a computation on
    /// the context, a clock, an environment variable): it is answered where
    /// the query was read, without a trip to the blocking pool.
    pub fn inline(mut self) -> Self {
        self.inline = true;
        self
    }

    /// The check's id.
    pub fn id(&self) -> &str {
        &self.contract.check_id
    }

    /// What the check answers (its contract description).
    pub fn description(&self) -> &str {
        &self.contract.description
    }

    /// Whether the check is answered where the query was read
    /// ([`Check::inline`]); an adapter with its own notion of inline work
    /// (such as a reading thread that answers cheap queries itself) asks
    /// this.
    pub fn is_inline(&self) -> bool {
        self.inline
    }

    /// The check's entry in the capabilities contract.
    pub fn contract(&self) -> &CheckContract {
        &self.contract
    }

    /// Starts answering `query` under `context`: params are read into the
    /// check's type (an error result when they cannot be), then the
    /// function runs where its kind says.
    pub(crate) fn start(
        &self,
        query: EvidenceQuery,
        context: EvidenceContext,
        call: CallContext,
        root: Option<&EvidenceRoot>,
    ) -> Answer<EvidenceResult> {
        let params = query.params.clone().unwrap_or(Value::Null);
        let context = CheckContext::with_parts(query, context, call, root.cloned());
        // An inline blocking check runs inside `start` (see `Check::new`).
        (self.start)(params, context, self.inline)
    }
}

/// Reads params into `P`; absent params read as an empty object, so a
/// params type whose members are all optional needs no params at all.
fn read_params<P: DeserializeOwned>(params: Value) -> Result<P, CheckError> {
    let params = match params {
        Value::Null => Value::Object(Map::new()),
        other => other,
    };
    serde_json::from_value(params).map_err(|error| {
        CheckError::new(
            INVALID_PARAMS,
            format!("params do not fit this check: {error}; see its params_schema in the contract"),
        )
    })
}

/// The params schema of `P`: the derived JSON Schema (2020-12) without the
/// generator's `$schema` and `title` decorations, closed to unknown
/// members ([`close_params_schema`]).
pub fn params_schema<P: JsonSchema>() -> Value {
    let mut schema = schemars::schema_for!(P).to_value();
    tidy(&mut schema);
    close_params_schema(&mut schema);
    schema
}

/// Schema keywords after which a params schema is left as it is: the
/// schema already says what happens to members it does not list, or
/// lists them somewhere `additionalProperties` does not look.
const OPEN_PARAMS_KEYWORDS: [&str; 10] = [
    "additionalProperties",
    "unevaluatedProperties",
    "patternProperties",
    "propertyNames",
    "allOf",
    "anyOf",
    "oneOf",
    "$ref",
    "if",
    "dependentSchemas",
];

/// Params are strict by default: an object schema that lists its
/// `properties` and says nothing of other members gets
/// `"additionalProperties": false`, so a query with a member the type
/// does not declare (a misspelt `pth` for `path`) is refused
/// `invalid_params` before the check runs, by every caller that reads the
/// contract (Decision Gate validates params against it too).
///
/// A params type opts out by saying what other members are:
/// `#[schemars(extend("additionalProperties" = true))]` on the type, or a
/// `#[serde(flatten)]` map member (its schema carries
/// `additionalProperties`). A schema built from `allOf`/`anyOf`/`oneOf`
/// (enums, flattened enums) or a `$ref` is left as derived: close its
/// variants with `#[serde(deny_unknown_fields)]`.
pub fn close_params_schema(schema: &mut Value) {
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    let is_object = object.get("type").and_then(Value::as_str) == Some("object");
    let listed = object.get("properties").is_some_and(Value::is_object);
    let open = OPEN_PARAMS_KEYWORDS
        .iter()
        .any(|keyword| object.contains_key(*keyword));
    if is_object && listed && !open {
        object.insert("additionalProperties".to_owned(), Value::Bool(false));
    }
}

/// The result schema of `R`, ready for Decision Gate's strict validation:
/// a schema that declares no type (such as that of `serde_json::Value`) is
/// marked `"x-decision-gate": {"dynamic_type": true}`, as Decision Gate's
/// own `json.path` is.
pub fn result_schema<R: JsonSchema>() -> Value {
    let mut schema = schemars::schema_for!(R).to_value();
    tidy(&mut schema);
    let declares_type = schema.as_object().is_some_and(|object| {
        ["type", "enum", "const"]
            .iter()
            .any(|key| object.contains_key(*key))
    });
    if declares_type {
        return schema;
    }
    let mut object = match schema {
        Value::Object(object) => object,
        _ => Map::new(),
    };
    object.insert("x-decision-gate".to_owned(), json!({"dynamic_type": true}));
    Value::Object(object)
}

fn tidy(schema: &mut Value) {
    if let Some(object) = schema.as_object_mut() {
        object.remove("$schema");
        object.remove("title");
    }
}

/// The comparators Decision Gate's strict validation allows for a result
/// of `schema`'s type (its compatibility matrix, wire-facts §5): ordering
/// for integers and numbers, `contains` for strings and arrays, equality
/// for scalars, presence for everything, all sixteen for a dynamic type.
/// A type union or anything unrecognised gets presence only.
pub fn default_comparators(schema: &Value) -> Vec<Comparator> {
    use Comparator::*;
    let dynamic = schema
        .pointer("/x-decision-gate/dynamic_type")
        .and_then(Value::as_bool)
        == Some(true);
    if dynamic {
        return Comparator::ALL.to_vec();
    }
    if schema.get("enum").is_some() || schema.get("const").is_some() {
        return vec![Equals, NotEquals, InSet, Exists, NotExists];
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("boolean") => vec![Equals, NotEquals, InSet, Exists, NotExists],
        Some("integer" | "number") => vec![
            Equals,
            NotEquals,
            GreaterThan,
            GreaterThanOrEqual,
            LessThan,
            LessThanOrEqual,
            InSet,
            Exists,
            NotExists,
        ],
        Some("string") => vec![Equals, NotEquals, Contains, InSet, Exists, NotExists],
        Some("array") => vec![Contains, Exists, NotExists],
        _ => vec![Exists, NotExists],
    }
}
