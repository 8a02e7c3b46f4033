//! `file_size` and `json_path`: files under the evidence root.
//!
//! Paths are resolved under the SDK's evidence root
//! ([`evidence_wire_provider::root`], the provider's one implementation):
//! a path is relative, without `..`, and must still lie under the root once
//! symlinks are resolved (`path_outside_root`); a file is read only when it
//! is a regular file no larger than `max_file_bytes` (checked from the
//! metadata before reading and again while reading, in case it grew),
//! opened without blocking (a fifo is refused, never waited on).
//!
//! `json_path` runs in this order, each step bounded before the next one
//! costs anything: the expression is scanned ([`jsonpath::scan`]: length and
//! nesting) and parsed; the rest runs on one of the provider's
//! `max_concurrent` document threads ([`crate::pool`]); the file is read and
//! parsed (serde_json stops at 128 levels); the evaluation cost is estimated from
//! the expression and the document and refused over its budget; the
//! JSONPath is evaluated and its node count checked; the nodes are written
//! as compact JSON up to `max_result_bytes` and [`MAX_RESULT_DEPTH`]. Every
//! failure after the path is resolved carries the file's `evidence_ref` and
//! `evidence_anchor`, as Decision Gate's `json.path` does, and
//! `jsonpath_not_found` and `invalid_jsonpath` carry
//! `details: {"jsonpath": …}`.

use std::sync::Arc;

use evidence_wire::evidence::EvidenceError;
use evidence_wire::text::truncate_chars;
use evidence_wire_config::BundledConfig;
use evidence_wire_provider::{CheckContext, CheckError, EvidenceRoot, RootedPath};
use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::checks::{JsonPathParams, SelectedJson};
use crate::jsonpath::{self, DocumentSize, MAX_JSONPATH_CHARS, MAX_RESULT_DEPTH, Overflow, Shape};
use crate::pool::Refused;
use crate::{EVALUATION_COST_PER_FILE_BYTE, Inner};

/// `file_size`: the size of a regular file, from its metadata.
pub(crate) fn file_size(
    root: &EvidenceRoot,
    relative: &str,
    context: &CheckContext,
) -> Result<u64, CheckError> {
    let file = root.resolve(relative)?;
    let size = file.metadata()?.len();
    file.record(context, Some(size));
    Ok(size)
}

/// `json_path`: the file, or the nodes a JSONPath selects in it.
pub(crate) fn json_path(
    inner: &Arc<Inner>,
    params: &JsonPathParams,
    context: &CheckContext,
) -> Result<SelectedJson, CheckError> {
    let file = inner.root.resolve(&params.file)?;
    // Success or failure, from here on the answer names the file (Decision
    // Gate's json.path keeps its reference and anchor on errors too).
    file.record(context, None);
    let path = params.jsonpath.as_deref().map(parse).transpose()?;
    let job_inner = Arc::clone(inner);
    let pool = &inner.pool;
    let raw = pool
        .run(inner.queue_timeout, context.cancellation(), move || {
            select(&job_inner.config, &file, path)
        })
        .unwrap_or_else(|refused| Err(pool_refusal(refused, pool.capacity(), inner)))?;
    Ok(SelectedJson(raw))
}

/// An expression checked and parsed, ready for a document.
struct ParsedPath {
    expression: String,
    shape: Shape,
    path: serde_json_path::JsonPath,
}

/// Scans (length, nesting) and then parses `expression`.
fn parse(expression: &str) -> Result<ParsedPath, EvidenceError> {
    let shape = jsonpath::scan(expression)
        .map_err(|refusal| invalid_jsonpath(expression, refusal.explain()))?;
    let path = serde_json_path::JsonPath::parse(expression).map_err(|error| {
        invalid_jsonpath(
            expression,
            format!("it is not an RFC 9535 JSONPath: {error}"),
        )
    })?;
    Ok(ParsedPath {
        expression: expression.to_owned(),
        shape,
        path,
    })
}

fn pool_refusal(refused: Refused, capacity: usize, inner: &Inner) -> EvidenceError {
    match refused {
        Refused::Busy => EvidenceError::new(
            "provider_busy",
            format!(
                "all {capacity} json_path threads stayed busy for {} ms; try again later",
                inner.queue_timeout.as_millis()
            ),
        )
        .with_details(json!({"limit": "max_concurrent", "max": capacity})),
        Refused::Lost => EvidenceError::new(
            "internal_error",
            "the json_path evaluation stopped without an answer",
        ),
        // Nobody reads this answer (the call was cancelled).
        Refused::Cancelled => EvidenceError::new(
            "cancelled",
            "the call was cancelled before the json_path evaluation finished",
        ),
    }
}

/// The bounded pipeline of `json_path` on a document thread.
fn select(
    config: &BundledConfig,
    file: &RootedPath,
    parsed: Option<ParsedPath>,
) -> Result<Box<RawValue>, EvidenceError> {
    let limits = &config.json;
    let max_result_bytes = usize::try_from(limits.max_result_bytes).unwrap_or(usize::MAX);
    let max_result_nodes = usize::try_from(limits.max_result_nodes).unwrap_or(usize::MAX);
    let relative = file.requested();
    // At most `max_file_bytes` (the root's limit), checked before reading.
    let bytes = file.read().map_err(CheckError::into_evidence_error)?;
    let document: Value = serde_json::from_slice(&bytes).map_err(|error| {
        EvidenceError::new("invalid_json", format!("{relative:?} is not JSON: {error}"))
    })?;
    drop(bytes);
    let Some(ParsedPath {
        expression,
        shape,
        path,
    }) = parsed
    else {
        return encode(&[&document], true, max_result_bytes);
    };
    let expression = expression.as_str();
    let budget = limits
        .max_file_bytes
        .saturating_mul(EVALUATION_COST_PER_FILE_BYTE);
    let cost = shape.cost(DocumentSize::of(&document));
    if cost > budget {
        return Err(size_limit(
            "max_evaluation_cost",
            budget,
            format!(
                "evaluating {:?} on {relative:?} could cost up to {cost} node visits, more than the {budget} allowed ({EVALUATION_COST_PER_FILE_BYTE} per byte of [bundled.json] max_file_bytes); use fewer descendant segments (`..`), selectors and filter queries, or a smaller file",
                truncate_chars(expression, 256)
            ),
        )
        .with_details(json!({"limit": "max_evaluation_cost", "max": budget, "cost": cost, "jsonpath": expression})));
    }
    let nodes = path.query(&document);
    if nodes.is_empty() {
        return Err(EvidenceError::new(
            "jsonpath_not_found",
            format!("{expression:?} selects nothing in {relative:?}"),
        )
        .with_details(json!({"jsonpath": expression})));
    }
    if nodes.len() > max_result_nodes {
        return Err(size_limit(
            "max_result_nodes",
            limits.max_result_nodes,
            format!(
                "{:?} selects {} nodes in {relative:?}, more than the {} allowed by [bundled.json] max_result_nodes; select fewer nodes",
                truncate_chars(expression, 256),
                nodes.len(),
                limits.max_result_nodes
            ),
        )
        .with_details(json!({"limit": "max_result_nodes", "max": limits.max_result_nodes, "selected": nodes.len(), "jsonpath": expression})));
    }
    let single = nodes.len() == 1;
    let nodes = nodes.all();
    encode(&nodes, single, max_result_bytes).map_err(|mut error| {
        if let Some(Value::Object(members)) = &mut error.details {
            members.insert("jsonpath".to_owned(), Value::from(expression));
        }
        error
    })
}

/// `nodes` written as the value, within the byte and depth limits.
fn encode(
    nodes: &[&Value],
    single: bool,
    max_bytes: usize,
) -> Result<Box<RawValue>, EvidenceError> {
    match jsonpath::encode(nodes, single, max_bytes) {
        Ok(raw) => Ok(raw),
        Err(Overflow::Bytes) => Err(size_limit(
            "max_result_bytes",
            max_bytes as u64,
            format!(
                "the value is larger than {max_bytes} bytes of JSON ([bundled.json] max_result_bytes); select a smaller part of the file"
            ),
        )
        .with_details(json!({"limit": "max_result_bytes", "max": max_bytes}))),
        Err(Overflow::Depth) => Err(size_limit(
            "max_result_depth",
            MAX_RESULT_DEPTH as u64,
            format!(
                "the value nests arrays and objects deeper than {MAX_RESULT_DEPTH} levels, more than an answer may carry; select a part nested less deeply"
            ),
        )
        .with_details(json!({"limit": "max_result_depth", "max": MAX_RESULT_DEPTH}))),
    }
}

/// `size_limit_exceeded` for `limit` (its name and maximum in the message).
fn size_limit(limit: &str, max: u64, message: String) -> EvidenceError {
    EvidenceError::new(
        "size_limit_exceeded",
        format!("{message} (limit {limit} = {max})"),
    )
}

/// `invalid_jsonpath` with `details.jsonpath` (Decision Gate's code and
/// detail for an expression it cannot use).
fn invalid_jsonpath(expression: &str, why: String) -> EvidenceError {
    EvidenceError::new(
        "invalid_jsonpath",
        format!("{:?} is refused: {why}", truncate_chars(expression, 256)),
    )
    .with_details(json!({"jsonpath": detail(expression)}))
}

/// The expression for `details.jsonpath`: whole when it is within the
/// length limit (Decision Gate's built-in echoes it), cut otherwise.
fn detail(expression: &str) -> String {
    if expression.chars().nth(MAX_JSONPATH_CHARS).is_some() {
        truncate_chars(expression, 256)
    } else {
        expression.to_owned()
    }
}
