//! The battery: what `check-provider` asks the provider and how each
//! answer is graded. Every line it adds to the [`Report`] is explained in
//! `spec/guides/checking-a-provider.md`.
//!
//! Sessions (each a fresh child on stdio, or a fresh in-memory connection
//! to a service in this process, so that one probe cannot spoil the next;
//! over HTTP each request is its own exchange anyway):
//!
//! 1. Decision Gate's way (Content-Length, no handshake): its first
//!    message, `tools/list`, the served contract (without `--contract`),
//!    then every check of the contract: its examples, params that violate
//!    its `params_schema`, a repeat of a deterministic check, latency
//!    samples; then an unknown `check_id`.
//! 2. Newline-delimited JSON, and 3. the MCP handshake: capabilities,
//!    reported as `warn` when missing (Decision Gate's templates do neither).
//! 4. 64 pipelined queries. 5.–7. An oversized frame, a garbage line and a
//!    truncated frame, each between two valid queries. 8. Queries while
//!    nobody reads the provider's stderr.
//!
//! When Decision Gate's first message gets no usable answer the rest is
//! not run (one `fail` line says so): every later line would fail for the
//! same reason.
//!
//! Each stdio session ends the provider's whole process group and gives
//! its pipes a deadline to close ([`super::process`], [`super::session`]);
//! `transport.shutdown` says how that went over the battery: processes
//! that outlived the provider, pipes still held after it.
//!
//! Limits: every request waits at most the configured timeout; a probe
//! for a capability at most [`PROBE_TIMEOUT_MS`]; the end of each stdio
//! session at most [`TERM_GRACE`] for its processes to exit after
//! SIGTERM, [`REAP_DEADLINE`] to reap the provider, and
//! [`PIPE_CLOSE_DEADLINE`] for its pipes to close; latency samples and
//! pipelined queries are fixed counts; evidence keeps excerpts only.

use std::time::{Duration, Instant};

use evidence_wire::canonical::{self, Options, Profile};
use evidence_wire::client::{Client, ClientConfig, QueryError};
use evidence_wire::contract::{CheckContract, Determinism, ProviderContract};
use evidence_wire::dialect;
use evidence_wire::evidence::{
    self, EvidenceContext, EvidenceQuery, EvidenceResult, KeySet, TriggerTime, TrustPolicy,
    VerifyError,
};
use evidence_wire::frame::Framing;
use evidence_wire::text::truncate_chars;
use serde_json::{Map, Value, json};

use super::process::{REAP_DEADLINE, TERM_GRACE};
use super::report::{Report, Status, millis};
use super::session::{
    Endpoint, Exit, ExitLog, Outcome, PIPE_CLOSE_DEADLINE, Session, SessionConfig, StderrMode,
};

/// The longest wait for a capability probe (newline-delimited JSON, the
/// MCP handshake): a provider that lacks one usually stays silent.
pub const PROBE_TIMEOUT_MS: u64 = 1500;
/// Queries written at once by the pipelining probe.
pub const PIPELINED: usize = 64;
/// Queries sent while nobody reads the provider's stderr.
pub const STDERR_QUERIES: usize = 16;
/// Body size of the oversized frame: one byte over Decision Gate's 1 MiB cap.
pub const OVERSIZED_BODY_BYTES: usize = 1024 * 1024 + 1;
/// The `check_id` no provider has.
pub const UNKNOWN_CHECK_ID: &str = "check-provider-unknown-check";
/// Bytes left unread in a stderr pipe that explain a stalled provider: a
/// pipe holds about 64 KiB (Linux) before its writer blocks, and a writer
/// blocks with less in it when its next write does not fit.
const FULL_PIPE_BYTES: u64 = 16 * 1024;
/// Latency above this at p99 is worth a warning: half of Decision Gate's
/// HTTP request timeout (10 s).
const SLOW_P99: Duration = Duration::from_secs(5);

/// Where the contract comes from.
#[derive(Clone, Debug)]
pub enum ContractInput {
    /// `--contract FILE`, parsed (or why not).
    File {
        /// The path as given.
        path: String,
        /// The contract, or the parse error.
        parsed: Result<ProviderContract, String>,
    },
    /// The bundled provider's own (no `--command`, no `--url`).
    Bundled(ProviderContract),
    /// Known to the caller (a provider's own `Provider::contract`, in its
    /// tests); `source` says where it came from in `contract.source`.
    Given {
        /// Where it came from, for the report.
        source: String,
        /// The contract.
        contract: ProviderContract,
    },
    /// None given: ask the provider for one.
    None,
}

/// Signature keys of `--key-file` and `--key`.
#[derive(Clone, Debug)]
pub struct Keys {
    /// The keys by key id.
    pub set: KeySet,
    /// How they were given, for the report.
    pub names: Vec<String>,
}

/// What to check and how.
pub struct Battery {
    /// The provider.
    pub endpoint: Endpoint,
    /// The contract.
    pub contract: ContractInput,
    /// `--provider-id`.
    pub provider_id: Option<String>,
    /// `--key-file` and `--key`.
    pub keys: Option<Keys>,
    /// How long each request may wait.
    pub timeout_ms: u64,
    /// Latency samples per check.
    pub samples: usize,
    /// How each stdio session's provider ended (filled as the battery runs).
    pub exits: ExitLog,
}

/// The URI under which a provider may serve its own capabilities contract
/// (`resources/read`), as `evidence-wire contract` prints it.
pub const CONTRACT_URI: &str = "decision-gate://contract";

/// A query the battery knows an answer for (or only that it should be answered).
#[derive(Clone, Debug)]
struct Probe {
    query: EvidenceQuery,
    /// The fingerprint of its answer when the check is deterministic.
    expected: Option<String>,
}

/// How one answer reads.
enum Read {
    /// A readable EvidenceResult.
    Evidence(Box<EvidenceResult>),
    /// A `tools/call` result with no readable EvidenceResult.
    Unreadable(String),
    /// A JSON-RPC error.
    RpcError { code: i64, message: String },
    /// No answer (timeout, dropped, lost connection).
    Failed(QueryError),
}

/// What a check answered over the battery: results with a value (for the
/// schema, hash and signature lines) and latencies.
#[derive(Default)]
struct Record {
    values: Vec<(String, EvidenceResult)>,
    errors: Vec<String>,
    latencies: Vec<Duration>,
}

/// Decision Gate's context of its first message (wire-facts §2): tenant 1,
/// namespace 1, trigger time 1710000000000 (unix ms), no correlation id.
pub fn decision_gate_context() -> EvidenceContext {
    let mut context = EvidenceContext::adhoc(TriggerTime::UnixMillis(1_710_000_000_000));
    context.run_id = "run-1".to_owned();
    context.scenario_id = "s".to_owned();
    context.stage_id = "st".to_owned();
    context.trigger_id = "t".to_owned();
    context
}

/// The framed bytes a client writes for `query` (for the report's evidence).
fn bytes_of(query: &EvidenceQuery, context: &EvidenceContext) -> String {
    let mut client = Client::new(ClientConfig::default());
    client.query(query, context, 0);
    let bytes = client.poll_transmit().unwrap_or_default();
    truncate_chars(&String::from_utf8_lossy(&bytes), 2048)
}

/// Canonical JSON (Decision Gate's profile) of `value`, for comparisons.
fn canonical_of(value: &Value) -> String {
    let text = serde_json::to_vec(value).unwrap_or_default();
    canonical::to_vec_with(&text, &Options::with_profile(Profile::DecisionGate))
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_else(|_| value.to_string())
}

/// What must be equal for two answers to be "the same": the value, the
/// error code and the declared hash.
fn fingerprint(result: &EvidenceResult) -> String {
    let value = result
        .value
        .as_ref()
        .and_then(|value| value.to_value().ok())
        .unwrap_or(Value::Null);
    canonical_of(&json!({
        "value": value,
        "error": result.error.as_ref().map(|error| error.code.clone()),
        "evidence_hash": result.evidence_hash.as_ref().map(|hash| hash.value.clone()),
    }))
}

fn read(outcome: Option<&Outcome>) -> Read {
    let Some(outcome) = outcome else {
        return Read::Failed(QueryError::ConnectionLost("no outcome recorded".to_owned()));
    };
    match &outcome.result {
        Ok(raw) => match dialect::from_tool_result(raw) {
            Ok((result, _shape)) => Read::Evidence(Box::new(result)),
            Err(error) => Read::Unreadable(error.to_string()),
        },
        Err(QueryError::Provider { code, message, .. }) => Read::RpcError {
            code: *code,
            message: message.clone(),
        },
        Err(error) => Read::Failed(error.clone()),
    }
}

/// One-line description of what an answer was.
fn describe(read: &Read) -> String {
    match read {
        Read::Evidence(result) => describe_result(result),
        Read::Unreadable(detail) => format!("an unreadable result ({detail})"),
        Read::RpcError { code, message } => {
            format!("JSON-RPC error {code} ({})", truncate_chars(message, 160))
        }
        Read::Failed(error) => describe_failure(error),
    }
}

fn describe_result(result: &EvidenceResult) -> String {
    match (&result.value, &result.error) {
        (_, Some(error)) => format!(
            "an EvidenceResult error {} ({})",
            error.code,
            truncate_chars(&error.message, 160)
        ),
        (Some(value), None) => format!(
            "the value {}",
            truncate_chars(&canonical_of(&value.to_value().unwrap_or(Value::Null)), 160)
        ),
        (None, None) => "an EvidenceResult with neither value nor error".to_owned(),
    }
}

fn describe_failure(error: &QueryError) -> String {
    match error {
        QueryError::ConnectionLost(reason) => format!("no answer: {reason}"),
        QueryError::Timeout(ms) => format!("no answer within {ms} ms"),
        other => format!("no usable answer: {other}"),
    }
}

fn outcome_evidence(outcome: Option<&Outcome>) -> Value {
    match outcome {
        None => Value::Null,
        Some(outcome) => json!({
            "latency_ms": outcome.latency.as_secs_f64() * 1000.0,
            "result": match &outcome.result {
                Ok(raw) => Value::String(truncate_chars(raw.get(), 4096)),
                Err(error) => Value::String(error.to_string()),
            },
            "http_status": outcome.http_status,
        }),
    }
}

/// `d` in seconds, or in milliseconds under one.
fn seconds(d: Duration) -> String {
    if d.subsec_millis() == 0 && d.as_secs() > 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}

impl Battery {
    fn session(
        &self,
        label: &'static str,
        framing: Framing,
        handshake: bool,
        timeout_ms: u64,
    ) -> SessionConfig {
        SessionConfig {
            label,
            exits: self.exits.clone(),
            framing,
            handshake,
            timeout_ms,
            stderr: StderrMode::Drain,
        }
    }

    fn open(&self, config: &SessionConfig) -> Result<Session, String> {
        Session::open(&self.endpoint, config)
    }

    /// Runs everything and fills `report`.
    pub fn run(&self, report: &mut Report) {
        let started = Instant::now();
        self.sessions(report);
        if self.endpoint.is_process() {
            self.shutdown(report);
        }
        report.elapsed = started.elapsed();
    }

    /// Every session of the battery, in order.
    fn sessions(&self, report: &mut Report) {
        let context = decision_gate_context();
        let main_config = self.session("main", Framing::ContentLength, false, self.timeout_ms);
        let mut session = match self.open(&main_config) {
            Ok(session) => session,
            Err(error) => {
                report.add("transport.first_message", Status::Fail, error, Value::Null);
                return;
            }
        };

        // What the contract says. A contract the provider serves is read
        // first, on a session of its own, so that Decision Gate's first
        // message stays the first message of the main session.
        let served = match &self.contract {
            ContractInput::None => Some(self.served_contract()),
            _ => None,
        };
        let given = match &self.contract {
            ContractInput::File { parsed, .. } => parsed.as_ref().ok().cloned(),
            ContractInput::Bundled(contract) | ContractInput::Given { contract, .. } => {
                Some(contract.clone())
            }
            ContractInput::None => served.as_ref().and_then(|served| served.contract.clone()),
        };
        let provider_id = self
            .provider_id
            .clone()
            .or_else(|| given.as_ref().map(|contract| contract.provider_id.clone()));

        // 1. Decision Gate's first message.
        let first_query = first_query(given.as_ref(), provider_id.as_deref());
        let usable = self.first_message(&mut session, &first_query, &context, report);
        if !usable {
            report.add(
                "battery",
                Status::Fail,
                "the rest of the battery was not run: the provider gave no usable answer to Decision Gate's first message (see transport.first_message)",
                Value::Null,
            );
            return;
        }

        // 2. tools/list.
        let listed = self.tools_list(&mut session, report);

        // 3. The contract.
        let contract = self.contract_lines(served, given, provider_id.as_deref(), report);
        let provider_id = provider_id
            .or_else(|| contract.as_ref().map(|c| c.provider_id.clone()))
            .or_else(|| listed.provider_id.clone())
            .unwrap_or_else(|| first_query.provider_id.clone());

        // 4. Per check.
        let mut probes = Vec::new();
        match &contract {
            Some(contract) => {
                for check in &contract.checks {
                    self.check_lines(
                        &mut session,
                        check,
                        &provider_id,
                        &context,
                        &mut probes,
                        report,
                    );
                }
            }
            None => {
                for check_id in &listed.check_ids {
                    self.listed_check_lines(
                        &mut session,
                        check_id,
                        &provider_id,
                        &context,
                        &mut probes,
                        report,
                    );
                }
            }
        }
        self.unknown_check(&mut session, &provider_id, &context, report);
        let main_notes = session.notes().clone();
        let main_stderr = session.stderr();
        drop(session);
        // The query the transport and robustness probes ask: the first one
        // that got an answer, else Decision Gate's first message.
        let reference = probes
            .first()
            .map_or_else(|| first_query.clone(), |probe| probe.query.clone());
        if probes.is_empty() {
            probes.push(Probe {
                query: first_query.clone(),
                expected: None,
            });
        }

        // 5. Capabilities: newline-delimited JSON, the MCP handshake.
        if !self.endpoint.is_http() {
            self.ndjson(&reference, &context, report);
        }
        self.handshake(&reference, &context, report);

        // 6. Robustness.
        let pipelined_notes = self.pipelined(&probes, &context, report);
        self.broken_frames(&reference, &context, report);
        if !self.endpoint.is_http() {
            self.stdout_clean(&[&main_notes, &pipelined_notes], report);
        }
        if self.endpoint.is_process() {
            self.stderr_unread(&reference, &context, &main_stderr, report);
        }
    }

    /// `transport.shutdown` (stdio): how the provider's processes ended
    /// with each session: a `warn` line for each kind of trouble (pipes
    /// held past their deadline, processes that outlived the provider, a
    /// provider not reaped), else one `pass` line.
    fn shutdown(&self, report: &mut Report) {
        let name = "transport.shutdown";
        let exits = self.exits.all();
        if exits.is_empty() {
            return;
        }
        let evidence = Value::Array(
            exits
                .iter()
                .map(|exit| {
                    json!({
                        "session": exit.session,
                        "exited_before": exit.ending.exited_before,
                        "outlived_by_its_processes": exit.ending.outlived,
                        "sigkill": exit.ending.killed,
                        "unreaped": exit.ending.unreaped,
                        "open_pipes": exit.open,
                        "pipe_deadline_ms": exit.pipe_deadline.as_secs_f64() * 1000.0,
                    })
                })
                .collect(),
        );
        // "the main session", "the main session (and 2 more: a, b)".
        let sessions = |exits: &[&Exit]| {
            let mut labels = exits.iter().map(|exit| exit.session);
            let first = labels.next().unwrap_or_default();
            let rest: Vec<&str> = labels.collect();
            if rest.is_empty() {
                format!("the {first} session")
            } else {
                format!(
                    "the {first} session (and {} more: {})",
                    rest.len(),
                    rest.join(", ")
                )
            }
        };
        let mut troubled = false;
        let held: Vec<&Exit> = exits.iter().filter(|exit| !exit.open.is_empty()).collect();
        if let Some(first) = held.first() {
            troubled = true;
            report.add(
                name,
                Status::Warn,
                format!(
                    "{} stayed open {} after the provider's process group was ended, at the end of {}: a process outside its process group holds {} (one that called setsid, a daemon it started); check-provider cannot end it and stopped waiting at that deadline, but a caller that waits for the provider's output to end would hang",
                    first.open.join(" and "),
                    seconds(first.pipe_deadline),
                    sessions(&held),
                    if first.open.len() == 1 { "it" } else { "them" }
                ),
                evidence.clone(),
            );
        }
        let outlived: Vec<&Exit> = exits.iter().filter(|exit| exit.ending.outlived).collect();
        if let Some(first) = outlived.first() {
            troubled = true;
            report.add(
                name,
                Status::Warn,
                format!(
                    "the provider exited by itself ({}) while processes it started kept running in its process group, in {}: a launcher that does not exec, or a child it does not end; check-provider ended them with the group, but a caller that stops only the process it started leaves them running",
                    first.ending.exited_before.as_deref().unwrap_or("exited"),
                    sessions(&outlived)
                ),
                evidence.clone(),
            );
        }
        let unreaped: Vec<&Exit> = exits.iter().filter(|exit| exit.ending.unreaped).collect();
        if !unreaped.is_empty() {
            troubled = true;
            report.add(
                name,
                Status::Warn,
                format!(
                    "the provider's process had not exited {} after SIGKILL to its process group, at the end of {}; check-provider stopped waiting for it",
                    seconds(REAP_DEADLINE),
                    sessions(&unreaped)
                ),
                evidence.clone(),
            );
        }
        if troubled {
            return;
        }
        let killed = exits.iter().filter(|exit| exit.ending.killed).count();
        let exited = exits
            .iter()
            .filter(|exit| exit.ending.exited_before.is_some())
            .count();
        let mut how = format!(
            "the provider's processes ended with each of its {} sessions (SIGTERM to its process group",
            exits.len()
        );
        if exited > 0 {
            how.push_str(&format!(
                "; in {exited} the provider had exited by itself before"
            ));
        }
        if killed > 0 {
            how.push_str(&format!(
                "; in {killed} some were still running {} later and got SIGKILL",
                seconds(TERM_GRACE)
            ));
        }
        how.push_str("), and its stdout and stderr closed");
        report.add(name, Status::Pass, how, evidence);
    }

    /// `transport.first_message`; true when the answer is usable.
    fn first_message(
        &self,
        session: &mut Session,
        query: &EvidenceQuery,
        context: &EvidenceContext,
        report: &mut Report,
    ) -> bool {
        let id = session.query(query, context);
        session.wait(&[id]);
        let outcome = session.outcome(id);
        let mut evidence = json!({
            "sent": bytes_of(query, context),
            "answer": outcome_evidence(outcome),
        });
        let latency = outcome.map(|o| o.latency).unwrap_or_default();
        let framing = session.answer_framing();
        let notes = session.notes();
        let answered = read(outcome);
        let unknown = if let (true, Some(first)) =
            (notes.unknown_ids.is_empty(), notes.invalid.first())
        {
            format!("; meanwhile it wrote something that is not a protocol message: {first}")
        } else if notes.unknown_ids.is_empty() {
            String::new()
        } else {
            format!(
                "; meanwhile it answered with id {}, which was never sent (answer with the request's id)",
                notes
                    .unknown_ids
                    .iter()
                    .map(Value::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        let name = "transport.first_message";
        let what = format!(
            "Decision Gate's first message ({}, no handshake, check {:?})",
            if self.endpoint.is_http() {
                "one HTTP POST"
            } else {
                "Content-Length"
            },
            query.check_id
        );
        match &answered {
            Read::Failed(error) => {
                // A provider that died usually said why on its stderr.
                let held = match error {
                    QueryError::Timeout(_) | QueryError::TimeoutAfterDrop { .. } => session
                        .exit_note()
                        .map(|note| format!("; {note}"))
                        .unwrap_or_default(),
                    _ => String::new(),
                };
                let said = match error {
                    QueryError::ConnectionLost(_) => {
                        let words = session.last_words(Duration::from_millis(500));
                        if let Some(map) = evidence.as_object_mut() {
                            map.insert("stderr".to_owned(), json!(words.sample));
                        }
                        words
                            .sample
                            .first()
                            .map(|line| format!("; its stderr says: {line}"))
                            .unwrap_or_default()
                    }
                    _ => String::new(),
                };
                report.add(
                    name,
                    Status::Fail,
                    format!("{what}: {}{held}{unknown}{said}", describe_failure(error)),
                    evidence,
                );
                return false;
            }
            Read::Unreadable(detail) => {
                report.add(
                    name,
                    Status::Fail,
                    format!("{what} was answered, but with no EvidenceResult in it: {detail}"),
                    evidence,
                );
                return false;
            }
            _ => {}
        }
        if framing == Some(Framing::NewlineDelimited) {
            report.add(
                name,
                Status::Fail,
                format!("{what} was answered in newline-delimited JSON; Decision Gate reads only Content-Length frames: answer in the request's framing"),
                evidence,
            );
            return true;
        }
        if let Read::Evidence(result) = &answered {
            // Decision Gate reads only content[0], which must be a json item.
            let first = outcome
                .and_then(|o| o.result.as_ref().ok())
                .and_then(|raw| serde_json::from_str::<Value>(raw.get()).ok())
                .and_then(|value| value.pointer("/content/0").cloned());
            let kind = first
                .as_ref()
                .and_then(|item| item.get("type"))
                .and_then(Value::as_str)
                .map(str::to_owned);
            if kind.as_deref() != Some("json")
                || first.as_ref().and_then(|item| item.get("json")).is_none()
            {
                report.add(
                    name,
                    Status::Fail,
                    format!(
                        "{what} was answered with content[0] {}; Decision Gate reads only content[0] and needs {{\"type\":\"json\",\"json\":<EvidenceResult>}} there (a text item is an error to it)",
                        kind.map_or_else(|| "missing".to_owned(), |kind| format!("of type {kind:?}"))
                    ),
                    evidence,
                );
                return true;
            }
            report.add(
                name,
                Status::Pass,
                format!(
                    "{what} answered in {} with a json content item holding {}{unknown}",
                    millis(latency),
                    describe_result(result)
                ),
                evidence,
            );
            return true;
        }
        report.add(
            name,
            Status::Pass,
            format!(
                "{what} answered in {} with {} (Decision Gate records a JSON-RPC error as provider_error){unknown}",
                millis(latency),
                describe(&answered)
            ),
            evidence,
        );
        true
    }

    /// `transport.tools_list`: what it lists.
    fn tools_list(&self, session: &mut Session, report: &mut Report) -> Listed {
        let id = session.request("tools/list", None);
        session.wait(&[id]);
        let outcome = session.outcome(id);
        let evidence = outcome_evidence(outcome);
        let name = "transport.tools_list";
        let mut listed = Listed::default();
        let result = match outcome.map(|o| &o.result) {
            Some(Ok(raw)) => serde_json::from_str::<Value>(raw.get()).unwrap_or(Value::Null),
            Some(Err(error)) => {
                report.add(
                    name,
                    Status::Fail,
                    format!("tools/list was not answered with a list: {error}; answer it with {{\"tools\":[{{\"name\":\"evidence_query\",\"input_schema\":{{\"type\":\"object\"}}}}]}}"),
                    evidence,
                );
                return listed;
            }
            None => Value::Null,
        };
        let tool = result
            .get("tools")
            .and_then(Value::as_array)
            .and_then(|tools| {
                tools
                    .iter()
                    .find(|tool| tool.get("name").and_then(Value::as_str) == Some("evidence_query"))
            });
        let Some(tool) = tool else {
            report.add(
                name,
                Status::Fail,
                "tools/list does not list a tool named evidence_query",
                evidence,
            );
            return listed;
        };
        let (key, schema) = match (tool.get("input_schema"), tool.get("inputSchema")) {
            (Some(schema), _) => ("input_schema", schema),
            (None, Some(schema)) => ("inputSchema", schema),
            (None, None) => {
                report.add(
                    name,
                    Status::Fail,
                    "tools/list lists evidence_query without an input schema (neither input_schema nor inputSchema)",
                    evidence,
                );
                return listed;
            }
        };
        if !schema.is_object() {
            report.add(
                name,
                Status::Fail,
                format!("evidence_query's {key} is not a JSON Schema object"),
                evidence,
            );
            return listed;
        }
        find_check_ids(schema, 0, &mut listed);
        report.add(
            name,
            Status::Pass,
            format!(
                "lists evidence_query with {key}{}",
                if listed.check_ids.is_empty() {
                    String::new()
                } else {
                    format!(" (check ids: {})", listed.check_ids.join(", "))
                }
            ),
            evidence,
        );
        listed
    }

    /// `contract.source`, `contract.valid`, `contract.rules`: the contract
    /// the rest uses, if any.
    fn contract_lines(
        &self,
        served: Option<Served>,
        given: Option<ProviderContract>,
        provider_id: Option<&str>,
        report: &mut Report,
    ) -> Option<ProviderContract> {
        let contract = match &self.contract {
            ContractInput::File { path, parsed } => match parsed {
                Ok(_) => {
                    report.add(
                        "contract.source",
                        Status::Pass,
                        format!("--contract {path}"),
                        Value::Null,
                    );
                    given
                }
                Err(error) => {
                    report.add(
                        "contract.source",
                        Status::Fail,
                        format!("--contract {path} is not a capabilities contract: {error}; the per-check battery uses only what tools/list says"),
                        Value::Null,
                    );
                    None
                }
            },
            ContractInput::Given { source, .. } => {
                report.add("contract.source", Status::Pass, source.clone(), Value::Null);
                given
            }
            ContractInput::Bundled(_) => {
                report.add(
                    "contract.source",
                    Status::Pass,
                    "the bundled provider's own contract (what `evidence-wire contract` prints)",
                    Value::Null,
                );
                given
            }
            ContractInput::None => {
                let served = served.unwrap_or_else(|| Served {
                    contract: None,
                    status: Status::Warn,
                    reason: "no contract".to_owned(),
                    evidence: Value::Null,
                });
                report.add(
                    "contract.source",
                    served.status,
                    served.reason,
                    served.evidence,
                );
                served.contract
            }
        };
        let contract = contract?;
        let expected = provider_id.unwrap_or(&contract.provider_id);
        match contract.validate(expected) {
            Ok(()) => report.add(
                "contract.valid",
                Status::Pass,
                format!(
                    "{} check{}; every field present, schemas compile, examples match them",
                    contract.checks.len(),
                    if contract.checks.len() == 1 { "" } else { "s" }
                ),
                Value::Null,
            ),
            Err(error) => report.add(
                "contract.valid",
                Status::Fail,
                error.to_string(),
                Value::Null,
            ),
        }
        let violations = contract.check_decision_gate_rules();
        if violations.is_empty() {
            report.add(
                "contract.rules",
                Status::Pass,
                "meets every rule Decision Gate applies when it loads capabilities_path and when it validates a scenario (strict validation included)",
                Value::Null,
            );
        }
        for violation in &violations {
            report.add(
                "contract.rules",
                Status::Fail,
                violation.to_string(),
                json!({"location": violation.location, "rule": violation.rule}),
            );
        }
        Some(contract)
    }

    /// Asks the provider for its contract, `resources/read` of
    /// [`CONTRACT_URI`], on a session of its own.
    fn served_contract(&self) -> Served {
        let config = self.session(
            "served contract",
            Framing::ContentLength,
            false,
            self.timeout_ms,
        );
        let mut session = match self.open(&config) {
            Ok(session) => session,
            Err(error) => {
                return Served {
                    contract: None,
                    status: Status::Fail,
                    reason: error,
                    evidence: Value::Null,
                };
            }
        };
        let id = session.request("resources/read", Some(&json!({"uri": CONTRACT_URI})));
        session.wait(&[id]);
        let outcome = session.outcome(id);
        let evidence = outcome_evidence(outcome);
        let text = outcome
            .and_then(|o| o.result.as_ref().ok())
            .and_then(|raw| serde_json::from_str::<Value>(raw.get()).ok())
            .and_then(|value| {
                value
                    .pointer("/contents/0/text")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            });
        let Some(text) = text else {
            let why = match outcome.map(|o| &o.result) {
                Some(Err(error)) => error.to_string(),
                _ => "no contents[0].text in the answer".to_owned(),
            };
            return Served {
                contract: None,
                status: Status::Warn,
                reason: format!(
                    "no contract: none given (--contract FILE) and the provider serves none at resources/read {CONTRACT_URI} ({why}); examples, result schemas, params and determinism cannot be checked, so the per-check battery uses only what tools/list says"
                ),
                evidence,
            };
        };
        match ProviderContract::from_json_str(&text) {
            Ok(contract) => Served {
                contract: Some(contract),
                status: Status::Pass,
                reason: format!("served by the provider at resources/read {CONTRACT_URI}"),
                evidence,
            },
            Err(error) => Served {
                contract: None,
                status: Status::Fail,
                reason: format!(
                    "the provider serves {CONTRACT_URI}, but it is not a capabilities contract: {error}; the per-check battery uses only what tools/list says"
                ),
                evidence,
            },
        }
    }

    /// Every line of one contract check.
    fn check_lines(
        &self,
        session: &mut Session,
        check: &CheckContract,
        provider_id: &str,
        context: &EvidenceContext,
        probes: &mut Vec<Probe>,
        report: &mut Report,
    ) {
        let prefix = format!("check.{}", check.check_id);
        let deterministic = check.determinism == Determinism::Deterministic;
        let mut record = Record::default();
        let query_with = |params: &Value| {
            EvidenceQuery::new(provider_id, check.check_id.clone()).with_params(params.clone())
        };
        let mut base_queries = Vec::new();

        // Examples.
        if check.examples.is_empty() {
            report.add(
                format!("{prefix}.examples"),
                Status::Warn,
                "the contract gives no example: nothing to compare an answer with (add one; Decision Gate shows them to scenario authors)",
                Value::Null,
            );
        }
        for (index, example) in check.examples.iter().enumerate() {
            let query = query_with(&example.params);
            let id = session.query(&query, context);
            session.wait(&[id]);
            let outcome = session.outcome(id);
            let answered = read(outcome);
            let evidence = json!({"params": example.params, "expected": example.result, "answer": outcome_evidence(outcome)});
            let name = format!("{prefix}.example[{index}]");
            let label = format!("example {:?}", example.description);
            remember(&mut record, outcome, &answered, &label);
            let (status, reason) = grade_example(&answered, &example.result, check.determinism);
            report.add(name, status, format!("{label}: {reason}"), evidence);
            if let Read::Evidence(result) = &answered {
                probes.push(Probe {
                    query: query.clone(),
                    expected: deterministic.then(|| fingerprint(result)),
                });
            }
            base_queries.push(query);
        }
        if base_queries.is_empty() && !check.params_required {
            base_queries.push(EvidenceQuery::new(provider_id, check.check_id.clone()));
        }

        // Params that violate params_schema.
        self.params_lines(
            session,
            check,
            &prefix,
            provider_id,
            context,
            &mut record,
            report,
        );

        // Determinism.
        if deterministic {
            match base_queries.first() {
                None => report.add(
                    format!("{prefix}.deterministic"),
                    Status::Warn,
                    "declared deterministic, but there are no example params to ask it twice with",
                    Value::Null,
                ),
                Some(query) => {
                    let first = session.query(query, context);
                    session.wait(&[first]);
                    let second = session.query(query, context);
                    session.wait(&[second]);
                    let (a, b) = (read(session.outcome(first)), read(session.outcome(second)));
                    remember(&mut record, session.outcome(first), &a, "repeat 1");
                    remember(&mut record, session.outcome(second), &b, "repeat 2");
                    let evidence = json!({"first": outcome_evidence(session.outcome(first)), "second": outcome_evidence(session.outcome(second))});
                    let (status, reason) = match (&a, &b) {
                        (Read::Evidence(a), Read::Evidence(b)) if fingerprint(a) == fingerprint(b) => (
                            Status::Pass,
                            "declared deterministic: the same query twice gave the same value and hash".to_owned(),
                        ),
                        (Read::Evidence(a), Read::Evidence(b)) => (
                            Status::Fail,
                            format!(
                                "declared deterministic, but the same query twice gave {} and then {}; declare it time_dependent or external, or make it deterministic",
                                truncate_chars(&fingerprint(a), 200),
                                truncate_chars(&fingerprint(b), 200)
                            ),
                        ),
                        (other, Read::Evidence(_)) | (_, other) => (
                            Status::Fail,
                            format!("declared deterministic, but asked twice it gave {}", describe(other)),
                        ),
                    };
                    report.add(format!("{prefix}.deterministic"), status, reason, evidence);
                }
            }
        }

        // Latency samples.
        while record.latencies.len() < self.samples && !base_queries.is_empty() {
            let Some(query) = base_queries.get(record.latencies.len() % base_queries.len()) else {
                break;
            };
            let id = session.query(query, context);
            session.wait(&[id]);
            let outcome = session.outcome(id);
            let answered = read(outcome);
            if matches!(answered, Read::Failed(_)) {
                break;
            }
            remember(&mut record, outcome, &answered, "latency sample");
        }

        self.value_lines(check, &prefix, &record, report);
        latency_line(&prefix, &record, report);
    }

    /// `check.<id>.params`: params generated to violate `params_schema`.
    #[allow(clippy::too_many_arguments)]
    fn params_lines(
        &self,
        session: &mut Session,
        check: &CheckContract,
        prefix: &str,
        provider_id: &str,
        context: &EvidenceContext,
        record: &mut Record,
        report: &mut Report,
    ) {
        let name = format!("{prefix}.params");
        let cases = invalid_params(check);
        if cases.is_empty() {
            report.add(
                name,
                Status::Pass,
                "nothing to generate: params_schema has no required member and no typed property a query could get wrong",
                json!({"params_schema": check.params_schema}),
            );
            return;
        }
        for (how, params) in cases {
            let mut query = EvidenceQuery::new(provider_id, check.check_id.clone());
            if let Some(params) = &params {
                query = query.with_params(params.clone());
            }
            let id = session.query(&query, context);
            session.wait(&[id]);
            let outcome = session.outcome(id);
            let answered = read(outcome);
            record.latencies.extend(outcome.map(|o| o.latency));
            let evidence = json!({"params": params, "answer": outcome_evidence(outcome)});
            let (status, reason) = match &answered {
                Read::Evidence(result) if result.error.is_some() && result.value.is_none() => (
                    Status::Pass,
                    format!("{how}: answered {}", describe_result(result)),
                ),
                Read::Evidence(result) => (
                    Status::Fail,
                    format!(
                        "{how}: answered {} although the params violate params_schema; answer an EvidenceResult error (value null, error {{code: \"invalid_params\", …}})",
                        describe_result(result)
                    ),
                ),
                Read::RpcError { .. } => (
                    Status::Fail,
                    format!(
                        "{how}: answered {} where an EvidenceResult error belongs (value null, error {{code: \"invalid_params\", …}}); Decision Gate records a JSON-RPC error as provider_error, not as the check's answer",
                        describe(&answered)
                    ),
                ),
                other => (Status::Fail, format!("{how}: {}", describe(other))),
            };
            report.add(name.clone(), status, reason, evidence);
        }
    }

    /// `check.<id>.result_schema`, `.hash`, `.signature`: over every value
    /// the check answered.
    fn value_lines(
        &self,
        check: &CheckContract,
        prefix: &str,
        record: &Record,
        report: &mut Report,
    ) {
        let none = |what: &str| {
            format!(
                "no value to check {what}: every answer of this check was an error ({})",
                if record.errors.is_empty() {
                    "none answered".to_owned()
                } else {
                    truncate_chars(&record.errors.join("; "), 240)
                }
            )
        };
        // result_schema.
        let name = format!("{prefix}.result_schema");
        if record.values.is_empty() {
            report.add(
                name,
                Status::Warn,
                none("against result_schema"),
                Value::Null,
            );
        } else {
            match jsonschema::draft202012::new(&check.result_schema) {
                Err(error) => report.add(
                    name,
                    Status::Fail,
                    format!("result_schema does not compile: {error}"),
                    Value::Null,
                ),
                Ok(validator) => {
                    let mut failure = None;
                    let mut checked = 0usize;
                    for (label, result) in &record.values {
                        let Some(value) = result.value.as_ref().and_then(|v| v.to_value().ok())
                        else {
                            continue;
                        };
                        checked += 1;
                        if let Some(error) = validator.iter_errors(&value).next() {
                            failure.get_or_insert((
                                label.clone(),
                                value.clone(),
                                error.instance_path().as_str().to_owned(),
                                error.to_string(),
                            ));
                        }
                    }
                    match failure {
                        None => report.add(
                            name,
                            Status::Pass,
                            format!("all {checked} values answered match result_schema"),
                            Value::Null,
                        ),
                        Some((label, value, pointer, detail)) => report.add(
                            name,
                            Status::Fail,
                            format!(
                                "{label}: the value {} does not match result_schema at {:?}: {detail}",
                                truncate_chars(&canonical_of(&value), 160),
                                pointer
                            ),
                            json!({"value": value, "result_schema": check.result_schema}),
                        ),
                    }
                }
            }
        }
        // evidence_hash under both profiles.
        let name = format!("{prefix}.hash");
        if record.values.is_empty() {
            report.add(name, Status::Warn, none("a hash of"), Value::Null);
        } else {
            let (status, reason, evidence) = grade_hashes(&record.values);
            report.add(name, status, reason, evidence);
        }
        // Signatures.
        if let Some(keys) = &self.keys {
            let name = format!("{prefix}.signature");
            if record.values.is_empty() {
                report.add(name, Status::Warn, none("a signature on"), Value::Null);
            } else {
                let policy = TrustPolicy::RequireSignature {
                    keys: keys.set.clone(),
                };
                let mut failure = None;
                let mut signers = Vec::new();
                for (label, result) in &record.values {
                    match evidence::verify(result.clone(), &policy, Profile::DecisionGate) {
                        Ok(verified) => {
                            if let Some(signer) = verified.signer() {
                                if !signers.iter().any(|s: &String| s == signer) {
                                    signers.push(signer.to_owned());
                                }
                            }
                        }
                        Err(error) => {
                            failure.get_or_insert((label.clone(), error));
                        }
                    }
                }
                match failure {
                    None => report.add(
                        name,
                        Status::Pass,
                        format!(
                            "all {} values signed (ed25519) by key {} and verified over Decision Gate's canonical digest",
                            record.values.len(),
                            signers.join(", ")
                        ),
                        Value::Null,
                    ),
                    Some((label, error)) => report.add(
                        name,
                        Status::Fail,
                        format!(
                            "{label}: {error} ({}); the keys given: {}",
                            error.kind(),
                            keys.names.join(", ")
                        ),
                        Value::Null,
                    ),
                }
            }
        }
    }

    /// The lines of a check known only from tools/list (no contract).
    fn listed_check_lines(
        &self,
        session: &mut Session,
        check_id: &str,
        provider_id: &str,
        context: &EvidenceContext,
        probes: &mut Vec<Probe>,
        report: &mut Report,
    ) {
        let prefix = format!("check.{check_id}");
        let query = EvidenceQuery::new(provider_id, check_id);
        let mut record = Record::default();
        let id = session.query(&query, context);
        session.wait(&[id]);
        let outcome = session.outcome(id);
        let answered = read(outcome);
        remember(&mut record, outcome, &answered, "without params");
        let evidence = outcome_evidence(outcome);
        let (status, reason) = match &answered {
            Read::Evidence(result) => {
                probes.push(Probe {
                    query: query.clone(),
                    expected: None,
                });
                (
                    Status::Pass,
                    format!(
                        "known from tools/list only; asked without params, it answered {}",
                        describe_result(result)
                    ),
                )
            }
            Read::RpcError { .. } => (
                Status::Warn,
                format!(
                    "known from tools/list only; asked without params, it answered {} (an EvidenceResult error is what Decision Gate can record)",
                    describe(&answered)
                ),
            ),
            other => (
                Status::Fail,
                format!(
                    "known from tools/list only; asked without params: {}",
                    describe(other)
                ),
            ),
        };
        report.add(format!("{prefix}.answer"), status, reason, evidence);
        while record.latencies.len() < self.samples {
            let id = session.query(&query, context);
            session.wait(&[id]);
            let outcome = session.outcome(id);
            let answered = read(outcome);
            if matches!(answered, Read::Failed(_)) {
                break;
            }
            remember(&mut record, outcome, &answered, "latency sample");
        }
        if !record.values.is_empty() {
            let (status, reason, evidence) = grade_hashes(&record.values);
            report.add(format!("{prefix}.hash"), status, reason, evidence);
        }
        latency_line(&prefix, &record, report);
    }

    /// `unknown_check`: a check id no provider has must be an error.
    fn unknown_check(
        &self,
        session: &mut Session,
        provider_id: &str,
        context: &EvidenceContext,
        report: &mut Report,
    ) {
        let query = EvidenceQuery::new(provider_id, UNKNOWN_CHECK_ID);
        let id = session.query(&query, context);
        session.wait(&[id]);
        let outcome = session.outcome(id);
        let answered = read(outcome);
        let evidence = outcome_evidence(outcome);
        let (status, reason) = match &answered {
            Read::Evidence(result) if result.error.is_some() && result.value.is_none() => (
                Status::Pass,
                format!(
                    "check_id {UNKNOWN_CHECK_ID:?}: answered {}",
                    describe_result(result)
                ),
            ),
            Read::RpcError { .. } => (
                Status::Pass,
                format!(
                    "check_id {UNKNOWN_CHECK_ID:?}: answered {} (Decision Gate records it as provider_error; an EvidenceResult error such as unknown_check says more)",
                    describe(&answered)
                ),
            ),
            Read::Evidence(result) => (
                Status::Fail,
                format!(
                    "check_id {UNKNOWN_CHECK_ID:?}, which no contract declares, was answered with {}; an unknown check must be an error",
                    describe_result(result)
                ),
            ),
            other => (
                Status::Fail,
                format!("check_id {UNKNOWN_CHECK_ID:?}: {}", describe(other)),
            ),
        };
        report.add("unknown_check", status, reason, evidence);
    }

    /// `transport.ndjson`: does it also speak newline-delimited JSON?
    fn ndjson(&self, query: &EvidenceQuery, context: &EvidenceContext, report: &mut Report) {
        let name = "transport.ndjson";
        let config = self.session(
            "newline-delimited JSON",
            Framing::NewlineDelimited,
            false,
            self.timeout_ms.min(PROBE_TIMEOUT_MS),
        );
        let mut session = match self.open(&config) {
            Ok(session) => session,
            Err(error) => return report.add(name, Status::Fail, error, Value::Null),
        };
        let id = session.query(query, context);
        session.wait(&[id]);
        let outcome = session.outcome(id);
        let answered = read(outcome);
        let evidence = outcome_evidence(outcome);
        let (status, reason) = match (&answered, session.answer_framing()) {
            (Read::Failed(error), _) => (
                Status::Warn,
                format!("does not speak newline-delimited JSON ({}); fine for Decision Gate, whose templates do not either, but MCP clients (one JSON message per line) cannot use it", describe_failure(error)),
            ),
            (_, Some(Framing::ContentLength)) => (
                Status::Warn,
                "answered a newline-delimited request in Content-Length framing; MCP clients need the answer framed as the request was".to_owned(),
            ),
            (answered, _) => (
                Status::Pass,
                format!(
                    "also speaks newline-delimited JSON (answered in {} with {})",
                    millis(outcome.map(|o| o.latency).unwrap_or_default()),
                    describe(answered)
                ),
            ),
        };
        report.add(name, status, reason, evidence);
    }

    /// `transport.mcp_handshake`: does it answer `initialize`?
    fn handshake(&self, query: &EvidenceQuery, context: &EvidenceContext, report: &mut Report) {
        let name = "transport.mcp_handshake";
        let config = self.session(
            "MCP handshake",
            Framing::ContentLength,
            true,
            self.timeout_ms.min(PROBE_TIMEOUT_MS),
        );
        let mut session = match self.open(&config) {
            Ok(session) => session,
            Err(error) => return report.add(name, Status::Fail, error, Value::Null),
        };
        let list = session.request("tools/list", None);
        let id = session.query(query, context);
        session.wait(&[list, id]);
        let notes = session.notes().clone();
        let evidence = json!({"tools_list": outcome_evidence(session.outcome(list)), "query": outcome_evidence(session.outcome(id)), "initialized": notes.initialized});
        let Some(version) = notes.initialized else {
            let why = notes
                .fatal
                .unwrap_or_else(|| "no answer to initialize".to_owned());
            return report.add(
                name,
                Status::Warn,
                format!("no MCP handshake ({why}); fine for Decision Gate, which sends none, but MCP clients start with initialize"),
                evidence,
            );
        };
        let camel = session
            .outcome(list)
            .and_then(|o| o.result.as_ref().ok())
            .and_then(|raw| serde_json::from_str::<Value>(raw.get()).ok())
            .and_then(|value| {
                value.get("tools").and_then(Value::as_array).map(|tools| {
                    tools.iter().any(|tool| {
                        tool.get("name").and_then(Value::as_str) == Some("evidence_query")
                            && tool.get("inputSchema").is_some()
                    })
                })
            })
            .unwrap_or(false);
        let answered = read(session.outcome(id));
        // Over HTTP the MCP dialect follows the MCP-Protocol-Version header,
        // which this checker does not send: only stdio shows inputSchema here.
        let camel = camel || self.endpoint.is_http();
        let (status, reason) = match (&answered, camel) {
            (Read::Failed(error), _) => (
                Status::Warn,
                format!(
                    "answers initialize (protocolVersion {version}) but not the query after it: {}",
                    describe_failure(error)
                ),
            ),
            (_, false) => (
                Status::Warn,
                format!(
                    "answers initialize (protocolVersion {version}), but tools/list after it shows no inputSchema for evidence_query; MCP clients read inputSchema"
                ),
            ),
            (answered, true) if self.endpoint.is_http() => (
                Status::Pass,
                format!(
                    "answers initialize (protocolVersion {version}); then the query gets {}",
                    describe(answered)
                ),
            ),
            (answered, true) => (
                Status::Pass,
                format!(
                    "answers initialize (protocolVersion {version}); then tools/list shows inputSchema and the query gets {}",
                    describe(answered)
                ),
            ),
        };
        report.add(name, status, reason, evidence);
    }

    /// `robustness.pipelined`: 64 queries written at once; returns the
    /// session's notes (for `transport.stdout`).
    fn pipelined(
        &self,
        probes: &[Probe],
        context: &EvidenceContext,
        report: &mut Report,
    ) -> super::session::Notes {
        let name = "robustness.pipelined";
        let config = self.session("pipelined", Framing::ContentLength, false, self.timeout_ms);
        let mut session = match self.open(&config) {
            Ok(session) => session,
            Err(error) => {
                report.add(name, Status::Fail, error, Value::Null);
                return super::session::Notes::default();
            }
        };
        let started = Instant::now();
        let ids: Vec<_> = probes
            .iter()
            .cycle()
            .take(PIPELINED)
            .map(|probe| (session.query(&probe.query, context), probe))
            .collect();
        let all: Vec<_> = ids.iter().map(|(id, _)| *id).collect();
        session.wait(&all);
        let took = started.elapsed();
        // A second answer to an id comes right after the first, if at all.
        session.linger(Duration::from_millis(100));
        let notes = session.notes().clone();
        let mut unanswered = Vec::new();
        let mut wrong = Vec::new();
        for (id, probe) in &ids {
            match read(session.outcome(*id)) {
                Read::Failed(error) => {
                    unanswered.push(format!("{} ({})", id.get(), describe_failure(&error)))
                }
                Read::Evidence(result) => {
                    if let Some(expected) = &probe.expected {
                        if fingerprint(&result) != *expected {
                            wrong.push(format!(
                                "id {} (check {}) got {}",
                                id.get(),
                                probe.query.check_id,
                                truncate_chars(&fingerprint(&result), 160)
                            ));
                        }
                    }
                }
                _ => {}
            }
        }
        let evidence = json!({
            "unanswered": unanswered,
            "mismatched": wrong,
            "repeated_ids": notes.repeated_ids,
            "unknown_ids": notes.unknown_ids,
            "elapsed_ms": took.as_secs_f64() * 1000.0,
        });
        let (status, reason) = if !unanswered.is_empty() {
            (
                Status::Fail,
                format!(
                    "{} of {PIPELINED} queries written at once got no answer, e.g. id {}",
                    unanswered.len(),
                    unanswered.first().cloned().unwrap_or_default()
                ),
            )
        } else if !notes.repeated_ids.is_empty() {
            (
                Status::Fail,
                format!(
                    "answered id {} more than once; each request gets exactly one answer",
                    notes.repeated_ids.first().copied().unwrap_or_default()
                ),
            )
        } else if !notes.unknown_ids.is_empty() {
            (
                Status::Fail,
                format!(
                    "answered with id {}, which was never sent",
                    notes
                        .unknown_ids
                        .first()
                        .map(Value::to_string)
                        .unwrap_or_default()
                ),
            )
        } else if !wrong.is_empty() {
            (
                Status::Fail,
                format!(
                    "answers do not match their queries: {} (a deterministic check answered differently than when asked alone: answers under the wrong id?)",
                    wrong.first().cloned().unwrap_or_default()
                ),
            )
        } else {
            (
                Status::Pass,
                format!(
                    "{PIPELINED} queries written at once, each answered once under its own id, in {}",
                    millis(took)
                ),
            )
        };
        report.add(name, status, reason, evidence);
        notes
    }

    /// `robustness.oversized_frame`, `.garbage_line`, `.truncated_frame`.
    fn broken_frames(&self, query: &EvidenceQuery, context: &EvidenceContext, report: &mut Report) {
        let http = self.endpoint.is_http();
        let request = |id: i64| {
            let params = json!({"name": "evidence_query", "arguments": {"query": query, "context": context}});
            serde_json::to_vec(
                &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}),
            )
            .unwrap_or_default()
        };
        for kind in [Broken::Oversized, Broken::Garbage, Broken::Truncated] {
            let config = self.session(kind.label(), Framing::ContentLength, false, self.timeout_ms);
            let name = kind.name();
            let mut session = match self.open(&config) {
                Ok(session) => session,
                Err(error) => {
                    report.add(name, Status::Fail, error, Value::Null);
                    continue;
                }
            };
            // A first query, so the stream is established...
            let warm = session.query(query, context);
            session.wait(&[warm]);
            // ...the broken bytes...
            let unknown_before = session.notes().unknown_ids.len();
            let mut broken_id = None;
            let what = match kind {
                Broken::Oversized => {
                    let id = session.expect_reply();
                    let mut body = request(id.get());
                    body.resize(OVERSIZED_BODY_BYTES.max(body.len()), b' ');
                    frame_raw(&mut session, &body, http);
                    broken_id = Some(id);
                    format!(
                        "a {}-byte request (one byte over Decision Gate's 1 MiB limit)",
                        body.len()
                    )
                }
                Broken::Garbage => {
                    let line: &[u8] = b"garbage line: this is not a frame\r\n";
                    session.send_raw(line);
                    if http {
                        "a body that is a line of text, not JSON".to_owned()
                    } else {
                        "a line of text that is neither a header nor JSON".to_owned()
                    }
                }
                Broken::Truncated => {
                    let body = request(0);
                    let cut = body.get(..body.len() / 2).unwrap_or_default();
                    frame_raw(&mut session, cut, http);
                    format!(
                        "a frame whose body is a request cut after {} of its {} bytes",
                        cut.len(),
                        body.len()
                    )
                }
            };
            // ...then a valid query that must be answered.
            let follow = session.query(query, context);
            session.wait(&[follow]);
            // An answer to the broken request, if any, came before the
            // follow-up's (or right after it, from a concurrent provider).
            if let Some(id) = broken_id {
                if session.outcome(id).is_none() {
                    session.linger(Duration::from_millis(50));
                    session.cancel(id);
                }
            }
            let followed = read(session.outcome(follow));
            let on_broken = broken_id.map(|id| read(session.outcome(id)));
            let held = match &followed {
                Read::Failed(QueryError::Timeout(_) | QueryError::TimeoutAfterDrop { .. }) => {
                    session.exit_note()
                }
                _ => None,
            };
            let exited = session.exited();
            let evidence = json!({
                "broken": what,
                "answer_to_broken": broken_id.map(|id| outcome_evidence(session.outcome(id))),
                "follow_up": outcome_evidence(session.outcome(follow)),
                "provider_exited": exited,
            });
            // An error for input it could not read carries id null.
            let null_answers = session
                .notes()
                .unknown_ids
                .iter()
                .skip(unknown_before)
                .filter(|id| id.is_null())
                .count();
            let refused = session.notes().http_failures.first().copied().or_else(|| {
                broken_id.and_then(|id| session.outcome(id).and_then(|o| o.http_status))
            });
            let also = match (&on_broken, null_answers) {
                _ if refused.is_some_and(|status| status != 0) => format!(
                    "; the broken input itself was refused with HTTP {}",
                    refused.unwrap_or_default()
                ),
                (Some(Read::Failed(QueryError::Cancelled)) | None, 1..) => {
                    "; the broken input itself was answered with an error carrying id null"
                        .to_owned()
                }
                (Some(Read::Failed(QueryError::Cancelled)), 0) => {
                    "; the broken request itself got no answer of its own".to_owned()
                }
                (Some(Read::Failed(_)) | None, _) => String::new(),
                (Some(read), _) => format!("; the broken request itself got {}", describe(read)),
            };
            let (status, reason) = match &followed {
                Read::Failed(error) => (
                    Status::Fail,
                    format!(
                        "after {what}, the next valid query got {}{}; answer an error for the broken input (or skip it) and go on",
                        describe_failure(error),
                        match (held, exited) {
                            (Some(note), _) => format!(" ({note})"),
                            (None, Some(status)) => format!(" (the provider exited: {status})"),
                            (None, None) => String::new(),
                        }
                    ),
                ),
                other => (
                    Status::Pass,
                    format!(
                        "after {what}, the next valid query got {}{also}",
                        describe(other)
                    ),
                ),
            };
            report.add(name, status, reason, evidence);
        }
    }

    /// `transport.stdout`: nothing but frames on stdout.
    fn stdout_clean(&self, notes: &[&super::session::Notes], report: &mut Report) {
        let count: usize = notes.iter().map(|n| n.invalid_count).sum();
        let first = notes.iter().flat_map(|n| n.invalid.iter()).next().cloned();
        let evidence =
            json!({"invalid": notes.iter().flat_map(|n| n.invalid.iter()).collect::<Vec<_>>()});
        match first {
            None => report.add(
                "transport.stdout",
                Status::Pass,
                "stdout carried only protocol messages (logs, if any, went to stderr)",
                evidence,
            ),
            Some(first) => report.add(
                "transport.stdout",
                Status::Fail,
                format!(
                    "wrote {count} thing{} on stdout that {} not a protocol message, first: {first}; Decision Gate's client stops at the first (every framing error ends the connection): write logs to stderr",
                    if count == 1 { "" } else { "s" },
                    if count == 1 { "is" } else { "are" }
                ),
                evidence,
            ),
        }
    }

    /// `robustness.stderr`: the provider keeps answering while nobody
    /// reads its stderr.
    fn stderr_unread(
        &self,
        query: &EvidenceQuery,
        context: &EvidenceContext,
        drained: &super::session::StderrSummary,
        report: &mut Report,
    ) {
        let name = "robustness.stderr";
        let mut config = self.session(
            "unread stderr",
            Framing::ContentLength,
            false,
            self.timeout_ms,
        );
        config.stderr = StderrMode::Unread;
        let mut session = match self.open(&config) {
            Ok(session) => session,
            Err(error) => return report.add(name, Status::Fail, error, Value::Null),
        };
        // One at a time; the first left unanswered ends the probe (the
        // provider is stuck, and every later query would wait its timeout).
        let mut answered = 0usize;
        for _ in 0..STDERR_QUERIES {
            let id = session.query(query, context);
            session.wait(&[id]);
            if matches!(read(session.outcome(id)), Read::Failed(_)) {
                break;
            }
            answered += 1;
        }
        let unanswered = STDERR_QUERIES - answered;
        let held = session.stderr();
        // Read after the provider's process group ended: only a process
        // outside it keeps the pipe open past the deadline.
        let open = if held.ended {
            String::new()
        } else {
            format!(
                "; its stderr did not close within {} after the provider's process group was ended: a process outside the group still holds it (the bytes counted are those read by then)",
                seconds(PIPE_CLOSE_DEADLINE)
            )
        };
        let evidence = json!({
            "unanswered": unanswered,
            "stderr_held_bytes": held.bytes,
            "stderr_closed": held.ended,
            "stderr_sample": held.sample,
            "stderr_during_battery": {"bytes": drained.bytes, "lines": drained.lines, "sample": drained.sample},
        });
        if unanswered == 0 {
            report.add(
                name,
                Status::Pass,
                format!(
                    "answered {STDERR_QUERIES} queries while nobody read its stderr (it wrote {} bytes there; {} line{} over the rest of the battery){open}",
                    held.bytes,
                    drained.lines,
                    if drained.lines == 1 { "" } else { "s" }
                ),
                evidence,
            );
        } else if held.bytes >= FULL_PIPE_BYTES {
            report.add(
                name,
                Status::Fail,
                format!(
                    "stopped answering after {answered} of {STDERR_QUERIES} queries while nobody read its stderr, which held {} bytes: a full pipe (about 64 KiB) blocks its writer, so a caller that does not drain stderr hangs this provider; log less, or without blocking{open}",
                    held.bytes
                ),
                evidence,
            );
        } else {
            report.add(
                name,
                Status::Fail,
                format!(
                    "stopped answering after {answered} of {STDERR_QUERIES} queries ({unanswered} not asked or unanswered) while nobody read its stderr, which held only {} bytes, so something else stalled it{open}",
                    held.bytes
                ),
                evidence,
            );
        }
    }
}

/// What asking the provider for its contract gave: the contract, and the
/// `contract.source` line.
struct Served {
    contract: Option<ProviderContract>,
    status: Status,
    reason: String,
    evidence: Value,
}

/// The kinds of broken input.
#[derive(Clone, Copy)]
enum Broken {
    Oversized,
    Garbage,
    Truncated,
}

impl Broken {
    fn label(self) -> &'static str {
        match self {
            Broken::Oversized => "oversized frame",
            Broken::Garbage => "garbage line",
            Broken::Truncated => "truncated frame",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Broken::Oversized => "robustness.oversized_frame",
            Broken::Garbage => "robustness.garbage_line",
            Broken::Truncated => "robustness.truncated_frame",
        }
    }
}

/// Writes `body` raw: in a Content-Length frame on stdio, as the whole
/// POST body over HTTP.
fn frame_raw(session: &mut Session, body: &[u8], http: bool) {
    if http {
        session.send_raw(body);
    } else {
        let mut bytes = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
        bytes.extend_from_slice(body);
        session.send_raw(&bytes);
    }
}

/// What `tools/list` told about the checks.
#[derive(Default)]
struct Listed {
    check_ids: Vec<String>,
    provider_id: Option<String>,
}

/// Looks in an input schema for `check_id` (an `enum`) and `provider_id`
/// (a `const`), at most 8 levels deep.
fn find_check_ids(schema: &Value, depth: usize, listed: &mut Listed) {
    if depth > 8 {
        return;
    }
    match schema {
        Value::Object(map) => {
            if let Some(Value::Object(properties)) = map.get("properties") {
                if let Some(ids) = properties
                    .get("check_id")
                    .and_then(|p| p.get("enum"))
                    .and_then(Value::as_array)
                {
                    if listed.check_ids.is_empty() {
                        listed.check_ids = ids
                            .iter()
                            .filter_map(Value::as_str)
                            .map(str::to_owned)
                            .collect();
                    }
                }
                if let Some(id) = properties
                    .get("provider_id")
                    .and_then(|p| p.get("const"))
                    .and_then(Value::as_str)
                {
                    listed.provider_id.get_or_insert_with(|| id.to_owned());
                }
            }
            for value in map.values() {
                find_check_ids(value, depth + 1, listed);
            }
        }
        Value::Array(items) => {
            for value in items {
                find_check_ids(value, depth + 1, listed);
            }
        }
        _ => {}
    }
}

/// The query of Decision Gate's first message: the contract's first
/// example, or Decision Gate's own probe (wire-facts §2).
fn first_query(contract: Option<&ProviderContract>, provider_id: Option<&str>) -> EvidenceQuery {
    let example = contract.and_then(|contract| {
        contract.checks.iter().find_map(|check| {
            check
                .examples
                .first()
                .map(|example| (contract.provider_id.clone(), check, example))
        })
    });
    match example {
        Some((contract_id, check, example)) => {
            EvidenceQuery::new(provider_id.unwrap_or(&contract_id), check.check_id.clone())
                .with_params(example.params.clone())
        }
        None => EvidenceQuery::new(provider_id.unwrap_or("stub"), "probe")
            .with_params(json!({"mode": "plain"})),
    }
}

/// Keeps what an answer says for the check's value lines.
fn remember(record: &mut Record, outcome: Option<&Outcome>, answered: &Read, label: &str) {
    if let Some(outcome) = outcome {
        if !matches!(answered, Read::Failed(_)) {
            record.latencies.push(outcome.latency);
        }
    }
    match answered {
        Read::Evidence(result) if result.value.is_some() => {
            record.values.push((label.to_owned(), (**result).clone()));
        }
        other => {
            let text = describe(other);
            if record.errors.len() < 8 && !record.errors.contains(&text) {
                record.errors.push(text);
            }
        }
    }
}

/// An example's answer against its `result`.
fn grade_example(answered: &Read, expected: &Value, determinism: Determinism) -> (Status, String) {
    let kind = match determinism {
        Determinism::Deterministic => "deterministic",
        Determinism::TimeDependent => "time_dependent",
        Determinism::External => "external",
    };
    // A deterministic check must reproduce its example; the others may
    // depend on the clock or the world (the trigger time here is Decision
    // Gate's 1710000000000).
    let mismatch = if determinism == Determinism::Deterministic {
        Status::Fail
    } else {
        Status::Warn
    };
    match answered {
        Read::Evidence(result) => match (&result.value, &result.error) {
            (Some(value), None) => {
                let value = value.to_value().unwrap_or(Value::Null);
                if canonical_of(&value) == canonical_of(expected) {
                    (Status::Pass, "answered the example's result".to_owned())
                } else {
                    (
                        mismatch,
                        format!(
                            "answered {} where the example says {} (the check is {kind})",
                            truncate_chars(&canonical_of(&value), 160),
                            truncate_chars(&canonical_of(expected), 160)
                        ),
                    )
                }
            }
            _ => (
                mismatch,
                format!(
                    "answered {} where the example says {} (the check is {kind}{})",
                    describe_result(result),
                    truncate_chars(&canonical_of(expected), 160),
                    if determinism == Determinism::External {
                        ": its answer depends on the world the provider runs in"
                    } else {
                        ""
                    }
                ),
            ),
        },
        other => (Status::Fail, describe(other)),
    }
}

/// `check.<id>.hash`: each value's `evidence_hash` under Decision Gate's
/// profile, then RFC 8785.
fn grade_hashes(values: &[(String, EvidenceResult)]) -> (Status, String, Value) {
    let mut worst = (Status::Pass, String::new());
    let mut hashed = 0usize;
    let mut unhashed = 0usize;
    for (label, result) in values {
        if result.evidence_hash.is_none() {
            unhashed += 1;
            continue;
        }
        hashed += 1;
        let dg = evidence::verify(result.clone(), &TrustPolicy::Audit, Profile::DecisionGate);
        let (status, reason) = match dg {
            Ok(_) => continue,
            Err(dg_error) => {
                match evidence::verify(result.clone(), &TrustPolicy::Audit, Profile::Rfc8785) {
                    Ok(_) => (
                        Status::Warn,
                        format!(
                            "{label}: evidence_hash matches the RFC 8785 canonical JSON of the value but not Decision Gate's, which differs on it; Decision Gate refuses it (\"evidence hash mismatch\"): hash with the decision-gate profile ({})",
                            short(&dg_error)
                        ),
                    ),
                    Err(_) => (
                        Status::Fail,
                        format!(
                            "{label}: evidence_hash matches the value under neither Decision Gate's canonicalization nor RFC 8785 ({})",
                            short(&dg_error)
                        ),
                    ),
                }
            }
        };
        if status > worst.0 {
            worst = (status, reason);
        }
    }
    let evidence = json!({"hashed": hashed, "unhashed": unhashed});
    if worst.0 != Status::Pass {
        return (worst.0, worst.1, evidence);
    }
    if hashed == 0 {
        return (
            Status::Warn,
            format!(
                "no evidence_hash on any of the {unhashed} values (Decision Gate computes one under audit trust; under require_signature a signed hash is needed)"
            ),
            evidence,
        );
    }
    let reason = if unhashed == 0 {
        format!(
            "all {hashed} evidence_hash values match Decision Gate's canonical JSON of the value"
        )
    } else {
        format!(
            "{hashed} evidence_hash values match Decision Gate's canonical JSON of the value; {unhashed} values carry none (Decision Gate computes it)"
        )
    };
    (Status::Pass, reason, evidence)
}

fn short(error: &VerifyError) -> String {
    match error {
        VerifyError::HashMismatch {
            declared, computed, ..
        } => format!("declared {declared}, Decision Gate computes {computed}"),
        other => other.to_string(),
    }
}

/// `check.<id>.latency`: p50 and p99 of the check's answers.
fn latency_line(prefix: &str, record: &Record, report: &mut Report) {
    let name = format!("{prefix}.latency");
    let mut samples = record.latencies.clone();
    if samples.is_empty() {
        return report.add(name, Status::Warn, "no answer to time", Value::Null);
    }
    samples.sort();
    let rank = |percent: usize| {
        let index = (samples.len() * percent).div_ceil(100).saturating_sub(1);
        samples.get(index).copied().unwrap_or_default()
    };
    let (p50, p99) = (rank(50), rank(99));
    let evidence = json!({
        "samples": samples.len(),
        "p50_ms": p50.as_secs_f64() * 1000.0,
        "p99_ms": p99.as_secs_f64() * 1000.0,
        "max_ms": samples.last().copied().unwrap_or_default().as_secs_f64() * 1000.0,
    });
    let text = format!(
        "p50 {}, p99 {} over {} answers",
        millis(p50),
        millis(p99),
        samples.len()
    );
    if p99 > SLOW_P99 {
        report.add(
            name,
            Status::Warn,
            format!("{text}: slow; Decision Gate's HTTP client gives up after 10 s by default"),
            evidence,
        );
    } else {
        report.add(name, Status::Pass, text, evidence);
    }
}

/// Params that violate a check's `params_schema`, each with how: a
/// missing required member (or missing params when they are required),
/// and a property of the wrong type. Only params the schema really
/// refuses are kept.
fn invalid_params(check: &CheckContract) -> Vec<(String, Option<Value>)> {
    let base: Map<String, Value> = check
        .examples
        .iter()
        .find_map(|example| example.params.as_object().cloned())
        .unwrap_or_default();
    let schema = check.params_schema.as_object();
    let mut cases = Vec::new();
    let required: Vec<String> = schema
        .and_then(|schema| schema.get("required"))
        .and_then(Value::as_array)
        .map(|names| {
            names
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    match required.first() {
        Some(member) => {
            let mut params = base.clone();
            params.remove(member);
            cases.push((
                format!("params without the required member {member:?}"),
                Some(Value::Object(params)),
            ));
        }
        None if check.params_required => {
            cases.push(("no params, though params_required is true".to_owned(), None));
        }
        None => {}
    }
    let typed = schema
        .and_then(|schema| schema.get("properties"))
        .and_then(Value::as_object)
        .and_then(|properties| {
            properties.iter().find_map(|(name, property)| {
                let types: Vec<&str> = match property.get("type") {
                    Some(Value::String(kind)) => vec![kind.as_str()],
                    Some(Value::Array(kinds)) => kinds.iter().filter_map(Value::as_str).collect(),
                    _ => return None,
                };
                wrong_value(&types)
                    .map(|(what, value)| (name.clone(), types.join(" or "), what, value))
            })
        });
    if let Some((name, types, what, value)) = typed {
        let mut params = base.clone();
        params.insert(name.clone(), value);
        cases.push((
            format!("params with {name:?} as {what} (params_schema says {types})"),
            Some(Value::Object(params)),
        ));
    }
    let Ok(validator) = check.params_validator() else {
        return cases;
    };
    cases
        .into_iter()
        .filter(|(_, params)| {
            validator
                .validate(params.as_ref().unwrap_or(&Value::Null))
                .is_err()
        })
        .collect()
}

/// A value of a JSON type none of `types` accepts.
fn wrong_value(types: &[&str]) -> Option<(&'static str, Value)> {
    let accepts = |candidate: &str| {
        types
            .iter()
            .any(|kind| *kind == candidate || (candidate == "integer" && *kind == "number"))
    };
    [
        ("an integer", "integer", json!(12345)),
        ("a string", "string", json!("check-provider")),
        ("a boolean", "boolean", json!(true)),
        ("an array", "array", json!([])),
        ("an object", "object", json!({})),
    ]
    .into_iter()
    .find(|(_, kind, _)| !accepts(kind))
    .map(|(what, _, value)| (what, value))
}
