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
//!
//! Cost: a query's series (its check's latency histogram and its `ok`
//! counter per transport) and the `in_flight` gauges are looked up once
//! and kept, so answering a query hashes no label set (an HTTP request is
//! one connection: this is paid on every request). The series still
//! appear at their first use, as the registry's own lookup would create
//! them.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Instant;

use evidence_wire::error::CanonicalError;
use evidence_wire::evidence::EVIDENCE_QUERY_TOOL;
use evidence_wire::frame::FrameError;
use evidence_wire::server::{ServerEvent, Ticket};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

pub use prometheus_client;

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

pub use evidence_wire::Transport;

/// One `T` per transport.
#[derive(Default)]
struct PerTransport<T> {
    stdio: T,
    http: T,
}

impl<T> PerTransport<T> {
    fn get(&self, transport: Transport) -> &T {
        match transport {
            Transport::Stdio => &self.stdio,
            // A transport added later counts with HTTP until it gets its
            // own series.
            _ => &self.http,
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
/// Each kept value carries a `T` (made once, with the value), so what
/// depends only on the value is looked up once. The values are kept in
/// order (a few comparisons of at most [`MAX_LABEL_VALUES`] entries, no
/// hashing).
struct Bounded<T> {
    seen: Mutex<BTreeMap<String, Arc<T>>>,
    other: OnceLock<Arc<T>>,
    make: fn(&str) -> T,
}

impl<T> Bounded<T> {
    fn new(make: fn(&str) -> T) -> Self {
        Bounded {
            seen: Mutex::new(BTreeMap::new()),
            other: OnceLock::new(),
            make,
        }
    }

    /// The kept value for `value`: its own while fewer than
    /// [`MAX_LABEL_VALUES`] are kept, else `other`'s.
    fn get(&self, value: &str) -> Arc<T> {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(kept) = seen.get(value) {
            return Arc::clone(kept);
        }
        if seen.len() < MAX_LABEL_VALUES {
            let kept = Arc::new((self.make)(value));
            seen.insert(value.to_owned(), Arc::clone(&kept));
            return kept;
        }
        drop(seen);
        Arc::clone(self.other.get_or_init(|| Arc::new((self.make)("other"))))
    }
}

/// A bounded label value by itself.
struct Name(String);

impl Bounded<Name> {
    fn label(&self, value: &str) -> String {
        self.get(value).0.clone()
    }
}

/// The series of one check (one kept `check` label value), each made at
/// its first use.
struct CheckSeries {
    check: String,
    latency: OnceLock<Histogram>,
    /// `queries_total{outcome="ok"}`, by transport.
    ok: PerTransport<OnceLock<Counter>>,
}

impl CheckSeries {
    fn new(check: &str) -> Self {
        CheckSeries {
            check: check.to_owned(),
            latency: OnceLock::new(),
            ok: PerTransport::default(),
        }
    }
}

fn latency_histogram() -> Histogram {
    // 1 ms, 2 ms, … 32.8 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// Every metric (each a handle: clones share the series).
struct Families {
    requests: Family<RequestLabels, Counter>,
    queries: Family<QueryLabels, Counter>,
    latency: Family<CheckLabels, Histogram, fn() -> Histogram>,
    in_flight: Family<TransportLabels, Gauge>,
    overload: Family<TransportLabels, Counter>,
    dropped: Family<DropLabels, Counter>,
    restarts: Family<ProviderLabels, Counter>,
}

impl Families {
    /// Registers every metric in `registry`, under the `evidence_wire` prefix.
    fn register(&self, registry: &mut Registry) {
        let registry = registry.sub_registry_with_prefix("evidence_wire");
        registry.register(
            "requests",
            "JSON-RPC messages handled, by transport, method, tool and outcome (ok or the canonical error)",
            self.requests.clone(),
        );
        registry.register(
            "queries",
            "evidence queries answered, by transport, check and outcome (ok, the evidence error code, cancelled, expired)",
            self.queries.clone(),
        );
        registry.register(
            "check_duration_seconds",
            "time from handing an evidence query to the provider to its answer, by check",
            self.latency.clone(),
        );
        registry.register(
            "in_flight",
            "queries handed to the provider and not yet answered, by transport",
            self.in_flight.clone(),
        );
        registry.register(
            "overload_refusals",
            "calls answered OVERLOADED (over the in-flight cap, or shutting down), by transport",
            self.overload.clone(),
        );
        registry.register(
            "dropped_frames",
            "messages dropped unread (frame errors, HTTP bodies too large or unreadable), by transport and reason",
            self.dropped.clone(),
        );
        registry.register(
            "child_restarts",
            "restarts of child-process providers by the caller's supervisor, by provider",
            self.restarts.clone(),
        );
    }
}

struct Inner {
    /// This value's own registry (what [`Metrics::encode`] renders).
    registry: Registry,
    families: Families,
    /// The `in_flight` gauges, by transport.
    in_flight_gauges: PerTransport<OnceLock<Gauge>>,
    /// The `requests` counter of the usual message, an `evidence_query`
    /// call answered without a JSON-RPC error, by transport (kept, so the
    /// usual message costs no label set: no `String`, no hash).
    usual_calls: PerTransport<OnceLock<Counter>>,
    checks: Bounded<CheckSeries>,
    codes: Bounded<Name>,
    providers: Bounded<Name>,
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
        let families = Families {
            requests: Family::default(),
            queries: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
            in_flight: Family::default(),
            overload: Family::default(),
            dropped: Family::default(),
            restarts: Family::default(),
        };
        let mut registry = Registry::default();
        families.register(&mut registry);
        Metrics {
            inner: Arc::new(Inner {
                registry,
                families,
                in_flight_gauges: PerTransport::default(),
                usual_calls: PerTransport::default(),
                checks: Bounded::new(CheckSeries::new),
                codes: Bounded::new(|value| Name(value.to_owned())),
                providers: Bounded::new(|value| Name(value.to_owned())),
            }),
        }
    }

    /// Registers every metric in `registry` too, the one the application
    /// owns and serves on its own `/metrics`: the same series (they share
    /// their counts with this value and its clones), named as in the crate
    /// docs. `registry` must be of the [`prometheus_client`] this crate
    /// re-exports. Register once per registry: each call adds the metrics
    /// again.
    ///
    /// ```
    /// use evidence_wire_metrics::{Metrics, prometheus_client::registry::Registry};
    ///
    /// let mut registry = Registry::default();
    /// let metrics = Metrics::new();
    /// metrics.register(&mut registry);
    /// metrics.overload_refused(evidence_wire_metrics::Transport::Http);
    /// let mut text = String::new();
    /// evidence_wire_metrics::prometheus_client::encoding::text::encode(&mut text, &registry)?;
    /// assert!(text.contains(r#"evidence_wire_overload_refusals_total{transport="http"} 1"#), "{text}");
    /// # Ok::<(), std::fmt::Error>(())
    /// ```
    pub fn register(&self, registry: &mut Registry) {
        self.inner.families.register(registry);
    }

    /// The counts of one connection (or one HTTP request): feed it every
    /// server event and every answer.
    pub fn connection(&self, transport: Transport) -> ConnectionMetrics {
        ConnectionMetrics {
            metrics: self.clone(),
            transport,
            started: BTreeMap::new(),
        }
    }

    /// A call refused `OVERLOADED` by the adapter itself (e.g. HTTP's
    /// `503` when every call slot is taken, or while shutting down).
    pub fn overload_refused(&self, transport: Transport) {
        self.inner
            .families
            .overload
            .get_or_create(&TransportLabels {
                transport: transport.as_str(),
            })
            .inc();
    }

    /// A message dropped by the adapter before the core saw it (e.g.
    /// `body_too_large`, `body_unreadable` on HTTP).
    pub fn frame_dropped(&self, transport: Transport, reason: &'static str) {
        self.inner
            .families
            .dropped
            .get_or_create(&DropLabels {
                transport: transport.as_str(),
                reason,
            })
            .inc();
    }

    /// A process client restarted the child of `provider`.
    pub fn child_restarted(&self, provider: &str) {
        let provider = self.inner.providers.label(provider);
        self.inner
            .families
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

    /// Makes the series of a server of `transport` answering `checks`, at
    /// zero: its `in_flight` gauge, its refusal counter, the usual call's
    /// request counter, and each check's `queries_total{outcome="ok"}` and
    /// `check_duration_seconds`. So they are on `/metrics` before the first
    /// request, and a rate or an alert over them has a series from the
    /// start. (Past [`MAX_LABEL_VALUES`] checks, the rest share `other`.)
    pub fn announce<'a>(&self, transport: Transport, checks: impl IntoIterator<Item = &'a str>) {
        let inner = &self.inner;
        let label = transport.as_str();
        let _ = self.in_flight(transport);
        let _ = inner
            .families
            .overload
            .get_or_create(&TransportLabels { transport: label });
        inner.usual_calls.get(transport).get_or_init(|| {
            inner
                .families
                .requests
                .get_or_create(&RequestLabels {
                    transport: label,
                    method: "tools/call",
                    tool: EVIDENCE_QUERY_TOOL.to_owned(),
                    outcome: "ok",
                })
                .clone()
        });
        for check in checks {
            let series = inner.checks.get(check);
            series.ok.get(transport).get_or_init(|| {
                inner
                    .families
                    .queries
                    .get_or_create(&QueryLabels {
                        transport: label,
                        check: series.check.clone(),
                        outcome: "ok".to_owned(),
                    })
                    .clone()
            });
            series.latency.get_or_init(|| {
                inner
                    .families
                    .latency
                    .get_or_create(&CheckLabels {
                        check: series.check.clone(),
                    })
                    .clone()
            });
        }
    }

    fn in_flight(&self, transport: Transport) -> &Gauge {
        let inner = &self.inner;
        inner.in_flight_gauges.get(transport).get_or_init(|| {
            inner
                .families
                .in_flight
                .get_or_create(&TransportLabels {
                    transport: transport.as_str(),
                })
                .clone()
        })
    }
}

/// The counts of one connection: which queries are in flight and since
/// when. Dropping it takes whatever is still in flight off the gauge.
pub struct ConnectionMetrics {
    metrics: Metrics,
    transport: Transport,
    /// Tickets handed out: the check (`None` for a tool call) and when.
    started: BTreeMap<Ticket, (Option<Arc<CheckSeries>>, Instant)>,
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
        let transport = self.transport.as_str();
        match event {
            ServerEvent::Handled(outcome)
                if outcome.error.is_none()
                    && outcome.method.as_deref() == Some("tools/call")
                    && outcome.tool.as_deref() == Some(EVIDENCE_QUERY_TOOL) =>
            {
                // The labels the general arm below would make.
                inner
                    .usual_calls
                    .get(self.transport)
                    .get_or_init(|| {
                        inner
                            .families
                            .requests
                            .get_or_create(&RequestLabels {
                                transport,
                                method: "tools/call",
                                tool: EVIDENCE_QUERY_TOOL.to_owned(),
                                outcome: "ok",
                            })
                            .clone()
                    })
                    .inc();
            }
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
                    (Some(tool), _) => tool.clone().into_owned(),
                };
                let outcome_label = outcome.error.map_or("ok", CanonicalError::name);
                inner
                    .families
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
                let check = inner.checks.get(&query.check_id);
                self.start(*ticket, Some(check));
            }
            ServerEvent::ToolCall { ticket, .. } => self.start(*ticket, None),
            ServerEvent::Cancelled { ticket, .. } => {
                self.finish(*ticket, Outcome::Other("cancelled"));
            }
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
        match error_code {
            None => self.finish(ticket, Outcome::Ok),
            Some(code) => {
                let code = self.metrics.inner.codes.label(code);
                self.finish(ticket, Outcome::Other(&code));
            }
        }
    }

    /// Every query still in flight was answered with the retryable error
    /// at the drain deadline.
    pub fn expired(&mut self) {
        let tickets: Vec<Ticket> = self.started.keys().copied().collect();
        for ticket in tickets {
            self.finish(ticket, Outcome::Other("expired"));
        }
    }

    fn start(&mut self, ticket: Ticket, check: Option<Arc<CheckSeries>>) {
        self.metrics.in_flight(self.transport).inc();
        self.started.insert(ticket, (check, Instant::now()));
    }

    fn finish(&mut self, ticket: Ticket, outcome: Outcome<'_>) {
        let Some((check, since)) = self.started.remove(&ticket) else {
            return;
        };
        self.metrics.in_flight(self.transport).dec();
        // Tool calls count in flight only.
        let Some(series) = check else {
            return;
        };
        let inner = &self.metrics.inner;
        series
            .latency
            .get_or_init(|| {
                inner
                    .families
                    .latency
                    .get_or_create(&CheckLabels {
                        check: series.check.clone(),
                    })
                    .clone()
            })
            .observe(since.elapsed().as_secs_f64());
        let queries = |outcome: &str| {
            inner
                .families
                .queries
                .get_or_create(&QueryLabels {
                    transport: self.transport.as_str(),
                    check: series.check.clone(),
                    outcome: outcome.to_owned(),
                })
                .clone()
        };
        match outcome {
            Outcome::Ok => series
                .ok
                .get(self.transport)
                .get_or_init(|| queries("ok"))
                .inc(),
            Outcome::Other(outcome) => queries(outcome).inc(),
        };
    }
}

/// The `outcome` label of an answered query.
#[derive(Clone, Copy)]
enum Outcome<'a> {
    /// `ok`: its counter is kept with the check's series.
    Ok,
    /// Any other (an evidence error code, `cancelled`, `expired`).
    Other(&'a str),
}

impl Drop for ConnectionMetrics {
    fn drop(&mut self) {
        // (Made here if it is not yet: the series shows once any
        // connection of the transport has ended.)
        let gauge = self.metrics.in_flight(self.transport);
        for _ in 0..self.started.len() {
            gauge.dec();
        }
        self.started.clear();
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
    use std::collections::HashSet;

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

    /// The series kept with each check (and the `in_flight` gauges) count
    /// exactly as looking each one up in the registry does: they appear
    /// at their first use, not before; each transport and each outcome
    /// keeps its own counter; the `other` check shares one set.
    #[test]
    fn kept_series_count_as_registry_lookups() {
        let metrics = Metrics::new();
        let nothing_yet = metrics.encode();
        for absent in [
            "in_flight{",
            "queries_total{",
            "check_duration_seconds_count{",
        ] {
            assert!(!nothing_yet.contains(absent), "{absent} in {nothing_yet}");
        }
        // A connection that hands out nothing still shows the gauge once
        // it ends, as before.
        drop(metrics.connection(Transport::Stdio));
        let text = metrics.encode();
        assert!(
            text.contains("evidence_wire_in_flight{transport=\"stdio\"} 0"),
            "{text}"
        );
        assert!(!text.contains("in_flight{transport=\"http\"}"), "{text}");

        let mut config = ServerConfig::default();
        config.max_in_flight = 1000;
        // 70 distinct checks: the last 6 read `other`. Each is answered
        // `ok` on both transports, and check-0 also with an error code.
        for transport in [Transport::Stdio, Transport::Http] {
            let mut counts = metrics.connection(transport);
            let mut server = Server::new(config.clone());
            for id in 0..70 {
                server.handle_input(&line(call(id, &format!("check-{id}"))));
            }
            server.handle_input(&line(call(70, "check-0")));
            while let Some(event) = server.poll_event() {
                counts.observe(&event);
                if let ServerEvent::EvidenceQuery { ticket, query, .. } = event {
                    let code = (query.check_id == "check-0" && ticket.get() > 65).then_some("boom");
                    counts.answered(ticket, code);
                }
            }
        }
        let text = metrics.encode();
        for expected in [
            r#"evidence_wire_queries_total{transport="stdio",check="check-0",outcome="ok"} 1"#,
            r#"evidence_wire_queries_total{transport="http",check="check-0",outcome="ok"} 1"#,
            r#"evidence_wire_queries_total{transport="stdio",check="check-0",outcome="boom"} 1"#,
            r#"evidence_wire_queries_total{transport="http",check="check-0",outcome="boom"} 1"#,
            r#"evidence_wire_queries_total{transport="stdio",check="check-63",outcome="ok"} 1"#,
            r#"evidence_wire_queries_total{transport="stdio",check="other",outcome="ok"} 6"#,
            r#"evidence_wire_queries_total{transport="http",check="other",outcome="ok"} 6"#,
            r#"evidence_wire_check_duration_seconds_count{check="check-0"} 4"#,
            r#"evidence_wire_check_duration_seconds_count{check="check-5"} 2"#,
            r#"evidence_wire_check_duration_seconds_count{check="other"} 12"#,
            r#"evidence_wire_in_flight{transport="stdio"} 0"#,
            r#"evidence_wire_in_flight{transport="http"} 0"#,
        ] {
            assert!(text.contains(expected), "{expected}\nin\n{text}");
        }
        assert!(!text.contains("check=\"check-64\""), "{text}");
        let queries = text
            .lines()
            .filter(|line| line.starts_with("evidence_wire_queries_total{"))
            .count();
        // 64 kept checks and `other`, `ok` on each transport, plus check-0's
        // `boom` on each.
        assert_eq!(queries, 65 * 2 + 2, "{text}");
    }

    /// Issue 38 item 9: a server's series are there, at zero, before its
    /// first request.
    #[test]
    fn announced_series_show_at_zero_before_the_first_request() {
        let metrics = Metrics::new();
        metrics.announce(Transport::Http, ["time_now", "file_size"]);
        let text = metrics.encode();
        for expected in [
            r#"evidence_wire_in_flight{transport="http"} 0"#,
            r#"evidence_wire_overload_refusals_total{transport="http"} 0"#,
            r#"evidence_wire_requests_total{transport="http",method="tools/call",tool="evidence_query",outcome="ok"} 0"#,
            r#"evidence_wire_queries_total{transport="http",check="time_now",outcome="ok"} 0"#,
            r#"evidence_wire_queries_total{transport="http",check="file_size",outcome="ok"} 0"#,
            r#"evidence_wire_check_duration_seconds_count{check="time_now"} 0"#,
        ] {
            assert!(text.contains(expected), "{expected}\nin\n{text}");
        }
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
