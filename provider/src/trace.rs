//! What the SDK and the adapters tell `tracing`, and the W3C trace
//! context a call carries.
//!
//! **Spans.** Every call (`tools/call`, `evidence_query` or another tool)
//! gets one span, `evidence_wire::call` (level INFO, target of the same
//! name), opened by [`crate::dispatch_from`] and carried by the call's
//! [`crate::Job`]: the handler builds its answer inside it and the work
//! runs inside it, on the blocking pool or as a task; it closes when the
//! work has produced the answer. Its fields: `transport` (`stdio`,
//! `http`, or empty for a call made in this process), `method`
//! (`tools/call`), `id` (the JSON-RPC id), `ticket` (the connection's
//! number for the call), `tool`, `check_id` (for `evidence_query`),
//! `trace_id` and `parent_id` (the caller's trace context, when it sent
//! one), then `outcome` (`ok`, `error`: the answer carries an error) and
//! `duration_ms`, recorded when the work ends.
//!
//! **Events** (all with a target under `evidence_wire::`):
//!
//! | target | level | when |
//! | --- | --- | --- |
//! | `evidence_wire::refusal` | DEBUG | a message refused for what it is (envelope, params, size, unknown tool; over HTTP the admission: token, `Origin`, `Host`, body limit) |
//! | `evidence_wire::refusal` | INFO | a call refused because a limit was reached (the in-flight or concurrency cap: `OVERLOADED`) or the server drains |
//! | `evidence_wire::call` | DEBUG | the peer cancelled a call |
//! | `evidence_wire::stream` | WARN | the input stream broke beyond repair (fatal framing error) |
//! | `evidence_wire::drain` | INFO / WARN | a drain started / its deadline passed with calls still running |
//! | `evidence_wire::shed` | INFO | the HTTP server closed an idle connection to let a new one in |
//! | `evidence_wire::child` | INFO / WARN | a child provider started, restarted, or its supervisor noted why / could not be started |
//!
//! Nothing here costs more than a few branches while no subscriber
//! listens: a disabled span records nothing, reads no clock and wraps no
//! work.
//!
//! **Trace context.** A call's [`TraceContext`] comes from its own
//! `params._meta.traceparent` (and `tracestate`) when valid, else, over
//! HTTP, from the request's `traceparent` (and `tracestate`) headers: the
//! message's own `_meta` wins. Invalid input is ignored (the call simply
//! has none). A check reads it with [`crate::CheckContext::trace`] (a
//! handler with [`crate::CallContext::trace`]); it is recorded on the
//! call's span as `trace_id` and `parent_id`, and in validation-log
//! records as `traceId`. The libraries depend on no OpenTelemetry crate:
//! an application that exports spans links each call's span to the
//! caller's trace with [`set_remote_parent`] (the CLI's `otlp` feature
//! does, with `tracing-opentelemetry`).

use std::sync::OnceLock;

pub use evidence_wire::trace::{SpanId, TraceContext, TraceId};

/// Makes `span` (a call's, enabled) a child of the caller's span that
/// `parent` names: what an OpenTelemetry bridge does with
/// `OpenTelemetrySpanExt::set_parent`.
pub type RemoteParent = fn(span: &tracing::Span, parent: &TraceContext);

static REMOTE_PARENT: OnceLock<RemoteParent> = OnceLock::new();

/// Installs `hook`, called with each call's span (when a subscriber
/// enabled it) and the trace context the call carries, so that an
/// exporter can make the span a child of the caller's. Once per process:
/// false (and `hook` ignored) when one is installed already.
pub fn set_remote_parent(hook: RemoteParent) -> bool {
    REMOTE_PARENT.set(hook).is_ok()
}

/// Hands an enabled call span and its trace context to the installed hook.
pub(crate) fn link_remote_parent(span: &tracing::Span, parent: &TraceContext) {
    if let Some(hook) = REMOTE_PARENT.get() {
        hook(span, parent);
    }
}
