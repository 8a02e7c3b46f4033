//! # evidence-wire-metrics
//!
//! Prometheus metrics for evidence-wire servers and callers, fed by what
//! the sans-IO core already reports: each connection's [`ServerEvent`]s
//! (the `Handled` record of every message, each query handed out, frame
//! errors) and each answer the adapter hands back. The core counts
//! nothing and keeps no global state; the one registry lives in a
//! [`Metrics`] value the adapter owns (cheap to clone, shared by every
//! connection), and is rendered for `GET /metrics` by [`Metrics::encode`]
//! in the OpenMetrics text format that Prometheus scrapes.
//!
//! What is counted (every name starts with `evidence_wire_`):
//!
//! | metric | type | labels |
//! | --- | --- | --- |
//! | `requests_total` | counter | `transport`, `method`, `tool`, `outcome` (`ok` or the canonical error name) |
//! | `queries_total` | counter | `transport`, `check`, `outcome` (`ok`, the evidence error code, `cancelled`, `expired`) |
//! | `check_duration_seconds` | histogram | `check` (from hand-out to answer; 1 ms to 33 s buckets) |
//! | `in_flight` | gauge | `transport` (queries handed out and not yet answered) |
//! | `overload_refusals_total` | counter | `transport` (`OVERLOADED` answers: over the cap, or shutting down) |
//! | `dropped_frames_total` | counter | `transport`, `reason` (the frame error, or the HTTP body failure) |
//! | `child_restarts_total` | counter | `provider` (a process client's restarts: [`Metrics::restart_hook`]) |
//!
//! Limits: a label value a peer could choose is bounded. A method the
//! server does not serve is `other`; a tool the server does not know is
//! `unknown` (a known one comes from the server's own registry); check ids,
//! evidence error codes and provider names keep their own value for the
//! first [`MAX_LABEL_VALUES`] distinct ones, then `other`. So the number of
//! series stays bounded whatever peers send.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use evidence_wire::error::CanonicalError;
use evidence_wire::frame::FrameError;
use evidence_wire::server::{ServerEvent, Ticket};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Distinct values a label a peer or a provider may choose (check id,
/// evidence error code, provider name) keeps before the rest read `other`.
pub const MAX_LABEL_VALUES: usize = 64;

/// The methods counted under their own name; any other is `other`.
const KNOWN_METHODS: [&str; 10] = [
    "initialize",
    "ping",
    "server/discover",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "notifications/initialized",
    "notifications/cancelled",
];

/// Which transport a count belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Transport {
    /// stdin/stdout.
    Stdio,
    /// HTTP.
    Http,
}

impl Transport {
    fn label(self) -> &'static str {
        match self {
            Transport::Stdio => "stdio",
            Transport::Http => "http",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    transport: &'static str,
    method: &'static str,
    tool: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueryLabels {
    transport: &'static str,
    check: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CheckLabels {
    check: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TransportLabels {
    transport: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DropLabels {
    transport: &'static str,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProviderLabels {
    provider: String,
}

/// A label whose values come from outside: the first
/// [`MAX_LABEL_VALUES`] distinct ones are kept, the rest read `other`.
#[derive(Default)]
struct Bounded {
    seen: Mutex<HashSet<String>>,
}

impl Bounded {
    fn label(&self, value: &str) -> String {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.contains(value) {
            return value.to_owned();
        }
        if seen.len() < MAX_LABEL_VALUES {
            seen.insert(value.to_owned());
            return value.to_owned();
        }
        "other".to_owned()
    }
}

fn latency_histogram() -> Histogram {
    // 1 ms, 2 ms, … 32.8 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

struct Inner {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    queries: Family<QueryLabels, Counter>,
    latency: Family<CheckLabels, Histogram, fn() -> Histogram>,
    in_flight: Family<TransportLabels, Gauge>,
    overload: Family<TransportLabels, Counter>,
    dropped: Family<DropLabels, Counter>,
    restarts: Family<ProviderLabels, Counter>,
    checks: Bounded,
    codes: Bounded,
    providers: Bounded,
}

/// The registry and every metric of a process. Clone it freely: clones
/// share the counts. See the crate docs for what is counted.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// A fresh registry with every metric registered (at zero).
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("evidence_wire");
        let requests = Family::<RequestLabels, Counter>::default();
        let queries = Family::<QueryLabels, Counter>::default();
        let latency = Family::<CheckLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            latency_histogram,
        );
        let in_flight = Family::<TransportLabels, Gauge>::default();
        let overload = Family::<TransportLabels, Counter>::default();
        let dropped = Family::<DropLabels, Counter>::default();
        let restarts = Family::<ProviderLabels, Counter>::default();
        registry.register(
            "requests",
            "JSON-RPC messages handled, by transport, method, tool and outcome (ok or the canonical error)",
            requests.clone(),
        );
        registry.register(
            "queries",
            "evidence queries answered, by transport, check and outcome (ok, the evidence error code, cancelled, expired)",
            queries.clone(),
        );
        registry.register(
            "check_duration_seconds",
            "time from handing an evidence query to the provider to its answer, by check",
            latency.clone(),
        );
        registry.register(
            "in_flight",
            "queries handed to the provider and not yet answered, by transport",
            in_flight.clone(),
        );
        registry.register(
            "overload_refusals",
            "calls answered OVERLOADED (over the in-flight cap, or shutting down), by transport",
            overload.clone(),
        );
        registry.register(
            "dropped_frames",
            "messages dropped unread (frame errors, HTTP bodies too large or unreadable), by transport and reason",
            dropped.clone(),
        );
        registry.register(
            "child_restarts",
            "restarts of child-process providers by the caller's supervisor, by provider",
            restarts.clone(),
        );
        Metrics {
            inner: Arc::new(Inner {
                registry,
                requests,
                queries,
                latency,
                in_flight,
                overload,
                dropped,
                restarts,
                checks: Bounded::default(),
                codes: Bounded::default(),
                providers: Bounded::default(),
            }),
        }
    }

    /// The counts of one connection (or one HTTP request): feed it every
    /// server event and every answer.
    pub fn connection(&self, transport: Transport) -> ConnectionMetrics {
        ConnectionMetrics {
            metrics: self.clone(),
            transport,
            started: HashMap::new(),
        }
    }

    /// A call refused `OVERLOADED` by the adapter itself (e.g. HTTP's
    /// `503` when every call slot is taken, or while shutting down).
    pub fn overload_refused(&self, transport: Transport) {
        self.inner
            .overload
            .get_or_create(&TransportLabels {
                transport: transport.label(),
            })
            .inc();
    }

    /// A message dropped by the adapter before the core saw it (e.g.
    /// `body_too_large`, `body_unreadable` on HTTP).
    pub fn frame_dropped(&self, transport: Transport, reason: &'static str) {
        self.inner
            .dropped
            .get_or_create(&DropLabels {
                transport: transport.label(),
                reason,
            })
            .inc();
    }

    /// A process client restarted the child of `provider`.
    pub fn child_restarted(&self, provider: &str) {
        let provider = self.inner.providers.label(provider);
        self.inner
            .restarts
            .get_or_create(&ProviderLabels { provider })
            .inc();
    }

    /// A hook for a process client's supervisor (the `with_restart_hook`
    /// of `ProcessConfig`) that counts the restarts of `provider`.
    pub fn restart_hook(&self, provider: &str) -> Arc<dyn Fn() + Send + Sync> {
        let metrics = self.clone();
        let provider = provider.to_owned();
        Arc::new(move || metrics.child_restarted(&provider))
    }

    /// Every metric in the OpenMetrics text format (what `GET /metrics`
    /// answers, as `application/openmetrics-text`).
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.inner.registry);
        text
    }

    fn in_flight(&self, transport: Transport) -> Gauge {
        self.inner
            .in_flight
            .get_or_create(&TransportLabels {
                transport: transport.label(),
            })
            .clone()
    }
}

/// The counts of one connection: which queries are in flight and since
/// when. Dropping it takes whatever is still in flight off the gauge.
pub struct ConnectionMetrics {
    metrics: Metrics,
    transport: Transport,
    /// Tickets handed out: the check (`None` for a tool call) and when.
    started: HashMap<Ticket, (Option<String>, Instant)>,
}

impl fmt::Debug for ConnectionMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectionMetrics")
            .field("transport", &self.transport)
            .field("in_flight", &self.started.len())
            .finish()
    }
}

impl ConnectionMetrics {
    /// Count one server event (call it for every event, before handing it
    /// on).
    pub fn observe(&mut self, event: &ServerEvent) {
        let inner = &self.metrics.inner;
        let transport = self.transport.label();
        match event {
            ServerEvent::Handled(outcome) => {
                let method = match outcome.method.as_deref() {
                    None => "none",
                    Some(_) if outcome.error == Some(CanonicalError::MethodNotFound) => "other",
                    Some(method) => KNOWN_METHODS
                        .into_iter()
                        .find(|known| *known == method)
                        .unwrap_or("other"),
                };
                let tool = match (&outcome.tool, outcome.error) {
                    (None, _) => String::new(),
                    (Some(_), Some(CanonicalError::ToolNotFound)) => "unknown".to_owned(),
                    // Any other tool named here is one the server serves.
                    (Some(tool), _) => tool.clone(),
                };
                let outcome_label = outcome.error.map_or("ok", CanonicalError::name);
                inner
                    .requests
                    .get_or_create(&RequestLabels {
                        transport,
                        method,
                        tool,
                        outcome: outcome_label,
                    })
                    .inc();
                if outcome.error == Some(CanonicalError::Overloaded) {
                    self.metrics.overload_refused(self.transport);
                }
            }
            ServerEvent::EvidenceQuery { ticket, query, .. } => {
                let check = inner.checks.label(&query.check_id);
                self.start(*ticket, Some(check));
            }
            ServerEvent::ToolCall { ticket, .. } => self.start(*ticket, None),
            ServerEvent::Cancelled { ticket, .. } => self.finish(*ticket, "cancelled"),
            ServerEvent::FramingError(error) | ServerEvent::Fatal(error) => {
                self.metrics
                    .frame_dropped(self.transport, drop_reason(error));
            }
            _ => {}
        }
    }

    /// The embedder answered `ticket`: `error_code` is the evidence
    /// error's code when the result carries one (`None`: evidence).
    pub fn answered(&mut self, ticket: Ticket, error_code: Option<&str>) {
        let outcome = match error_code {
            None => "ok".to_owned(),
            Some(code) => self.metrics.inner.codes.label(code),
        };
        self.finish(ticket, &outcome);
    }

    /// Every query still in flight was answered with the retryable error
    /// at the drain deadline.
    pub fn expired(&mut self) {
        let tickets: Vec<Ticket> = self.started.keys().copied().collect();
        for ticket in tickets {
            self.finish(ticket, "expired");
        }
    }

    fn start(&mut self, ticket: Ticket, check: Option<String>) {
        self.metrics.in_flight(self.transport).inc();
        self.started.insert(ticket, (check, Instant::now()));
    }

    fn finish(&mut self, ticket: Ticket, outcome: &str) {
        let Some((check, since)) = self.started.remove(&ticket) else {
            return;
        };
        self.metrics.in_flight(self.transport).dec();
        // Tool calls count in flight only.
        let Some(check) = check else {
            return;
        };
        let inner = &self.metrics.inner;
        inner
            .latency
            .get_or_create(&CheckLabels {
                check: check.clone(),
            })
            .observe(since.elapsed().as_secs_f64());
        inner
            .queries
            .get_or_create(&QueryLabels {
                transport: self.transport.label(),
                check,
                outcome: outcome.to_owned(),
            })
            .inc();
    }
}

impl Drop for ConnectionMetrics {
    fn drop(&mut self) {
        let gauge = self.metrics.in_flight(self.transport);
        for _ in self.started.drain() {
            gauge.dec();
        }
    }
}

/// The `reason` label of a frame error.
fn drop_reason(error: &FrameError) -> &'static str {
    match error {
        FrameError::BodyTooLarge { .. } => "body_too_large",
        FrameError::LineTooLong { .. } => "line_too_long",
        FrameError::HeaderTooLarge { .. } => "header_too_large",
        FrameError::MalformedHeaderLine { .. } => "malformed_header",
        FrameError::InvalidContentLength { .. }
        | FrameError::ContentLengthOverflow { .. }
        | FrameError::ConflictingContentLength { .. }
        | FrameError::MissingContentLength { .. } => "bad_content_length",
        FrameError::UnsupportedCharset { .. } => "unsupported_charset",
        FrameError::Truncated { .. } => "truncated",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use evidence_wire::evidence::{EvidenceResult, EvidenceValue};
    use evidence_wire::server::{Server, ServerConfig};

    fn call(id: u64, check: &str) -> Vec<u8> {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"evidence_query","arguments":{{"query":{{"provider_id":"p","check_id":"{check}"}},"context":{{"tenant_id":1,"namespace_id":1,"run_id":"r","scenario_id":"s","stage_id":"st","trigger_id":"t","trigger_time":{{"kind":"unix_millis","value":0}}}}}}}}}}"#
        )
        .into_bytes()
    }

    fn line(mut bytes: Vec<u8>) -> Vec<u8> {
        bytes.push(b'\n');
        bytes
    }

    /// A stdio connection's events and answers, counted.
    #[test]
    fn a_connection_is_counted_from_its_events() {
        let metrics = Metrics::new();
        let mut counts = metrics.connection(Transport::Stdio);
        let mut config = ServerConfig::default();
        config.limits.max_body_bytes = 2048;
        let mut server = Server::new(config);
        let mut input = Vec::new();
        input.extend(line(call(1, "time_now")));
        input.extend(line(call(2, "file_size")));
        input.extend(b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"no/such\"}\n");
        input.extend(line(vec![b'x'; 3000]));
        input.extend(line(call(4, "time_now")));
        server.handle_input(&input);
        let mut tickets = Vec::new();
        while let Some(event) = server.poll_event() {
            counts.observe(&event);
            if let ServerEvent::EvidenceQuery { ticket, .. } = event {
                tickets.push(ticket);
            }
        }
        assert_eq!(tickets.len(), 3);
        let text = metrics.encode();
        assert!(
            text.contains("evidence_wire_in_flight{transport=\"stdio\"} 3"),
            "{text}"
        );
        counts.answered(tickets[0], None);
        counts.answered(tickets[1], Some("file_not_found"));
        let value = EvidenceValue::json(&1).unwrap();
        server
            .respond(tickets[0], EvidenceResult::with_value(value))
            .unwrap();
        drop(counts);
        let text = metrics.encode();
        for expected in [
            r#"evidence_wire_requests_total{transport="stdio",method="tools/call",tool="evidence_query",outcome="ok"} 3"#,
            r#"evidence_wire_requests_total{transport="stdio",method="other",tool="",outcome="METHOD_NOT_FOUND"} 1"#,
            r#"evidence_wire_queries_total{transport="stdio",check="time_now",outcome="ok"} 1"#,
            r#"evidence_wire_queries_total{transport="stdio",check="file_size",outcome="file_not_found"} 1"#,
            r#"evidence_wire_check_duration_seconds_count{check="time_now"} 1"#,
            r#"evidence_wire_in_flight{transport="stdio"} 0"#,
        ] {
            assert!(text.contains(expected), "{expected}\nin\n{text}");
        }
        assert!(
            text.contains("evidence_wire_dropped_frames_total{transport=\"stdio\",reason="),
            "{text}"
        );
        assert!(text.trim_end().ends_with("# EOF"), "{text}");
    }

    /// Peer-chosen names cannot grow the series without bound.
    #[test]
    fn peer_chosen_labels_are_bounded() {
        let metrics = Metrics::new();
        let mut counts = metrics.connection(Transport::Http);
        let mut config = ServerConfig::default();
        config.max_in_flight = 1000;
        let mut server = Server::new(config);
        for id in 0..200 {
            server.handle_input(&line(call(id, &format!("check-{id}"))));
            server.handle_input(
                format!("{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/x{id}\"}}\n").as_bytes(),
            );
            server.handle_input(
                format!(
                    "{{\"jsonrpc\":\"2.0\",\"id\":\"t{id}\",\"method\":\"tools/call\",\"params\":{{\"name\":\"tool-{id}\"}}}}\n"
                )
                .as_bytes(),
            );
        }
        while let Some(event) = server.poll_event() {
            counts.observe(&event);
            if let ServerEvent::EvidenceQuery { ticket, .. } = event {
                counts.answered(ticket, Some(&format!("code-{}", ticket.get())));
            }
        }
        let text = metrics.encode();
        assert!(text.contains("check=\"other\""));
        assert!(text.contains("outcome=\"other\""));
        assert!(text.contains("tool=\"unknown\""));
        assert!(!text.contains("tool-1"));
        assert!(!text.contains("notifications/x"));
        let checks: HashSet<&str> = text
            .split("check=\"")
            .skip(1)
            .filter_map(|rest| rest.split('"').next())
            .collect();
        assert_eq!(checks.len(), MAX_LABEL_VALUES + 1, "{checks:?}");
    }

    #[test]
    fn restarts_and_adapter_refusals() {
        let metrics = Metrics::new();
        let hook = metrics.restart_hook("git");
        hook();
        hook();
        metrics.overload_refused(Transport::Http);
        metrics.frame_dropped(Transport::Http, "body_too_large");
        let text = metrics.encode();
        assert!(
            text.contains(r#"evidence_wire_child_restarts_total{provider="git"} 2"#),
            "{text}"
        );
        assert!(text.contains(r#"evidence_wire_overload_refusals_total{transport="http"} 1"#));
        assert!(text.contains(
            r#"evidence_wire_dropped_frames_total{transport="http",reason="body_too_large"} 1"#
        ));
    }
}
