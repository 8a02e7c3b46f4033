//! OTLP export of `serve`'s and `wrap`'s spans (cargo feature `otlp`, off
//! by default; tested by `cargo test -p evidence-wire-cli --features otlp
//! --test it otlp`, which the default `cargo test` does not build).
//!
//! Set `OTEL_EXPORTER_OTLP_ENDPOINT` (e.g. `http://localhost:4318`, an
//! OpenTelemetry collector's or Jaeger's OTLP/HTTP port) and the spans
//! that pass `RUST_LOG` (by default `evidence_wire=info`, so every call's
//! `evidence_wire::call` span) are batched and sent as OTLP/HTTP protobuf,
//! under the service name `OTEL_SERVICE_NAME` (default `evidence-wire`);
//! the other standard `OTEL_EXPORTER_OTLP_*` variables apply too. A call
//! that carried a W3C trace context (`traceparent` header or
//! `_meta.traceparent`) becomes a child of the caller's span, in the
//! caller's trace. Without the endpoint nothing is exported.

use std::sync::OnceLock;

use opentelemetry::Context;
use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId, TraceState, TracerProvider as _,
};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Subscriber;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::{EnvFilter, Layer};

/// The variable naming the collector.
const ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// The same for traces only.
const TRACES_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";

/// The provider, kept to flush its batch at exit ([`shutdown`]).
static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// The OTLP layer, when `OTEL_EXPORTER_OTLP_ENDPOINT` (or
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set and the exporter can be
/// built; `None` otherwise (a failure is said on stderr).
pub fn layer<S>() -> Option<impl Layer<S>>
where
    S: Subscriber + for<'span> LookupSpan<'span>,
{
    let configured = [ENDPOINT, TRACES_ENDPOINT]
        .iter()
        .any(|name| std::env::var_os(name).is_some_and(|value| !value.is_empty()));
    if !configured {
        return None;
    }
    let exporter = match opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()
    {
        Ok(exporter) => exporter,
        Err(error) => {
            eprintln!("evidence-wire: OTLP export off: the exporter cannot be built: {error}");
            return None;
        }
    };
    let mut resource = Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name("evidence-wire");
    }
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource.build())
        .build();
    let tracer = provider.tracer("evidence-wire");
    let _ = PROVIDER.set(provider);
    evidence_wire_tokio::provider::trace::set_remote_parent(link_remote_parent);
    let directives = std::env::var(crate::logging::FILTER_VARIABLE)
        .ok()
        .filter(|directives| !directives.trim().is_empty())
        .unwrap_or_else(|| "warn,evidence_wire=info".to_owned());
    let filter = EnvFilter::try_new(directives)
        .unwrap_or_else(|_| EnvFilter::new("warn,evidence_wire=info"));
    Some(
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_filter(filter),
    )
}

/// Makes a call's span a child of the caller's span in the caller's trace.
fn link_remote_parent(span: &tracing::Span, parent: &evidence_wire_tokio::provider::TraceContext) {
    let state = parent
        .tracestate()
        .and_then(|state| state.parse::<TraceState>().ok())
        .unwrap_or_default();
    let remote = SpanContext::new(
        TraceId::from_bytes(parent.trace_id().to_bytes()),
        SpanId::from_bytes(parent.parent_id().to_bytes()),
        TraceFlags::new(parent.flags()),
        true,
        state,
    );
    let _ = span.set_parent(Context::new().with_remote_span_context(remote));
}

/// Sends the spans still batched (at the end of `serve` or `wrap`).
pub fn shutdown() {
    if let Some(provider) = PROVIDER.get() {
        let _ = provider.shutdown();
    }
}
