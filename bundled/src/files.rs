//! `file_size` and `json_path`: files under the evidence root.
//!
//! A path is relative, without `..`, and must still lie under the root once
//! symlinks are resolved (`path_outside_root`); a file is read only when it
//! is a regular file no larger than `max_file_bytes` (checked from the
//! metadata before reading and again while reading, in case it grew).
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

use std::fs;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

use std::sync::Arc;

use evidence_wire::evidence::{EvidenceAnchor, EvidenceError};
use evidence_wire::text::truncate_chars;
use evidence_wire_config::BundledConfig;
use evidence_wire_provider::{CheckContext, CheckError};
use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::checks::{JsonPathParams, SelectedJson};
use crate::jsonpath::{self, DocumentSize, MAX_JSONPATH_CHARS, MAX_RESULT_DEPTH, Overflow, Shape};
use crate::pool::Refused;
use crate::{EVALUATION_COST_PER_FILE_BYTE, Inner};

/// A path under the root, resolved.
struct Resolved {
    /// The canonical path on disk.
    path: PathBuf,
    /// The path as the caller gave it, normalized with `/` separators.
    display: String,
}

fn resolve(config: &BundledConfig, relative: &str) -> Result<Resolved, EvidenceError> {
    let outside = || {
        EvidenceError::new(
            "path_outside_root",
            format!(
                "{relative:?} is not inside the evidence root {:?}; give a relative path without `..`",
                config.root_id
            ),
        )
    };
    let path = Path::new(relative);
    if relative.is_empty()
        || path
            .components()
            .any(|component| !matches!(component, Component::Normal(_) | Component::CurDir))
    {
        return Err(outside());
    }
    let root = fs::canonicalize(&config.root).map_err(|error| {
        EvidenceError::new(
            "root_unavailable",
            format!(
                "the evidence root {} cannot be opened: {error}",
                config.root.display()
            ),
        )
    })?;
    let joined = root.join(path);
    let resolved = match fs::canonicalize(&joined) {
        Ok(resolved) => resolved,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Err(EvidenceError::new(
                "file_not_found",
                format!("no file {relative:?} under the evidence root"),
            ));
        }
        Err(error) => {
            return Err(EvidenceError::new(
                "file_unreadable",
                format!("cannot open {relative:?}: {error}"),
            ));
        }
    };
    if !resolved.starts_with(&root) {
        return Err(outside());
    }
    let display = path
        .components()
        .filter_map(|component| match component {
            Component::Normal(part) => Some(part.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("/");
    Ok(Resolved {
        path: resolved,
        display,
    })
}

/// The metadata of a regular file, or the error saying what it is instead.
fn regular_file(path: &Path, relative: &str) -> Result<fs::Metadata, EvidenceError> {
    let metadata = fs::metadata(path).map_err(|error| {
        EvidenceError::new(
            "file_unreadable",
            format!("cannot stat {relative:?}: {error}"),
        )
    })?;
    if !metadata.is_file() {
        return Err(EvidenceError::new(
            "not_a_file",
            format!("{relative:?} is not a regular file"),
        ));
    }
    Ok(metadata)
}

fn read_file(
    config: &BundledConfig,
    path: &Path,
    relative: &str,
) -> Result<Vec<u8>, EvidenceError> {
    let limit = config.json.max_file_bytes;
    let metadata = regular_file(path, relative)?;
    if metadata.len() > limit {
        return Err(file_too_large(relative, limit));
    }
    let file = fs::File::open(path).map_err(|error| {
        EvidenceError::new(
            "file_unreadable",
            format!("cannot open {relative:?}: {error}"),
        )
    })?;
    let mut bytes = Vec::new();
    // Read at most one byte past the limit, in case the file grew.
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|error| {
            EvidenceError::new(
                "file_unreadable",
                format!("cannot read {relative:?}: {error}"),
            )
        })?;
    if bytes.len() as u64 > limit {
        return Err(file_too_large(relative, limit));
    }
    Ok(bytes)
}

fn file_too_large(relative: &str, limit: u64) -> EvidenceError {
    EvidenceError::new(
        "file_too_large",
        format!("{relative:?} is larger than the {limit}-byte limit"),
    )
}

/// Records the file as the answer's reference and anchor
/// (`dg+file://<root_id>/<path>`, `file_path_rooted`).
fn record_file(context: &CheckContext, config: &BundledConfig, display: &str, size: Option<u64>) {
    context.set_ref(format!("dg+file://{}/{}", config.root_id, display));
    context.set_anchor(EvidenceAnchor::file_path_rooted(
        &config.root_id,
        display,
        size,
    ));
}

/// `file_size`: the size of a regular file, from its metadata.
pub(crate) fn file_size(
    config: &BundledConfig,
    relative: &str,
    context: &CheckContext,
) -> Result<u64, CheckError> {
    let resolved = resolve(config, relative)?;
    let size = regular_file(&resolved.path, relative)?.len();
    record_file(context, config, &resolved.display, Some(size));
    Ok(size)
}

/// `json_path`: the file, or the nodes a JSONPath selects in it.
pub(crate) fn json_path(
    inner: &Arc<Inner>,
    params: &JsonPathParams,
    context: &CheckContext,
) -> Result<SelectedJson, CheckError> {
    let config = &inner.config;
    let relative = params.file.as_str();
    let resolved = resolve(config, relative)?;
    // Success or failure, from here on the answer names the file (Decision
    // Gate's json.path keeps its reference and anchor on errors too).
    record_file(context, config, &resolved.display, None);
    let path = params.jsonpath.as_deref().map(parse).transpose()?;
    let job_inner = Arc::clone(inner);
    let relative = relative.to_owned();
    let pool = &inner.pool;
    let raw = pool
        .run(inner.queue_timeout, context.cancellation(), move || {
            select(&job_inner.config, &resolved.path, &relative, path)
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
    path: &Path,
    relative: &str,
    parsed: Option<ParsedPath>,
) -> Result<Box<RawValue>, EvidenceError> {
    let limits = &config.json;
    let max_result_bytes = usize::try_from(limits.max_result_bytes).unwrap_or(usize::MAX);
    let max_result_nodes = usize::try_from(limits.max_result_nodes).unwrap_or(usize::MAX);
    let bytes = read_file(config, path, relative)?;
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
