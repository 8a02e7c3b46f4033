//! The provider SDK driven through the core server, with no adapter: a
//! provider declared with typed checks gets its contract derived from the
//! types, the server refuses bad params before a check runs, sync, inline
//! and async checks answer, a panic is answered, provenance is kept on
//! errors, and the answer is hashed by the server.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use evidence_wire::server::{Server, ServerEvent};
use evidence_wire_provider::CallContext;
use evidence_wire_provider::prelude::*;
use evidence_wire_provider::{Answer, IntoService, Work, complete, dispatch};
use serde_json::{Value, json};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Repo {
    /// The repository directory (default: the current one).
    path: Option<String>,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Lookup {
    key: String,
    #[serde(default)]
    fail: bool,
}

fn provider(calls: Arc<AtomicUsize>) -> Provider {
    let counted = Arc::clone(&calls);
    Provider::new("git", "Facts about a git repository.")
        .check(
            Check::new(
                "head_commit",
                "The commit HEAD points at.",
                |repo: Repo, _: &CheckContext| {
                    Ok(format!(
                        "commit-of-{}",
                        repo.path.unwrap_or_else(|| ".".into())
                    ))
                },
            )
            .example("the current directory", json!({}), json!("commit-of-.")),
        )
        .check(
            Check::new(
                "is_clean",
                "Whether the work tree is clean.",
                |_: NoParams, _: &CheckContext| Ok(true),
            )
            .inline(),
        )
        .check(Check::new(
            "lookup",
            "A value by key; records where it came from.",
            move |lookup: Lookup, context: &CheckContext| {
                counted.fetch_add(1, Ordering::SeqCst);
                context.set_ref(format!("memory://{}", lookup.key));
                if lookup.fail {
                    return Err(CheckError::new("not_found", "no such key")
                        .with_details(json!({"key": lookup.key})));
                }
                Ok(json!({"key": lookup.key, "n": 1}))
            },
        ))
        .check(Check::new_async(
            "slow_count",
            "Counts asynchronously.",
            |_: NoParams, context: CheckContext| async move {
                let millis = match context.context().trigger_time {
                    TriggerTime::UnixMillis(millis) => millis,
                    TriggerTime::Logical(tick) => tick,
                };
                Ok::<i64, CheckError>(millis)
            },
        ))
        .check(Check::new(
            "boom",
            "Panics.",
            |_: NoParams, _: &CheckContext| -> Result<bool, CheckError> {
                panic!("a bug in the check")
            },
        ))
}

#[test]
fn the_contract_is_derived_from_the_types() {
    let contract = provider(Arc::default()).contract();
    assert_eq!(contract.provider_id, "git");
    let head = &contract.checks[0];
    assert_eq!(head.check_id, "head_commit");
    assert_eq!(head.params_schema["type"], "object");
    assert!(head.params_schema["properties"]["path"].is_object());
    assert!(!head.params_required, "path is optional");
    assert_eq!(head.result_schema["type"], "string");
    assert_eq!(
        head.allowed_comparators,
        vec![
            Comparator::Equals,
            Comparator::NotEquals,
            Comparator::Contains,
            Comparator::InSet,
            Comparator::Exists,
            Comparator::NotExists
        ]
    );
    let clean = &contract.checks[1];
    assert_eq!(
        clean.params_schema,
        json!({"type": "object", "additionalProperties": false})
    );
    assert_eq!(clean.result_schema["type"], "boolean");
    let lookup = &contract.checks[2];
    assert!(lookup.params_required);
    // serde_json::Value declares no type: Decision Gate's dynamic marker.
    assert_eq!(
        lookup.result_schema["x-decision-gate"]["dynamic_type"],
        true
    );
    assert_eq!(lookup.allowed_comparators.len(), 16);
    assert_eq!(contract.checks[3].result_schema["type"], "integer");
    // The contract is valid (examples checked against the schemas).
    provider(Arc::default())
        .server_contract()
        .expect("a valid contract");
}

/// Sends one Decision Gate query for `check` with `params` and runs every
/// job to completion on this thread; returns the EvidenceResult answered.
fn ask(check: &str, params: Value) -> Value {
    ask_with(provider(Arc::default()), check, params)
}

fn ask_with(provider: Provider, check: &str, params: Value) -> Value {
    let service = provider.into_service().expect("service");
    let mut server: Server = service.connection();
    let body = json!({
        "jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "evidence_query", "arguments": {
            "query": {"provider_id": "git", "check_id": check, "params": params},
            "context": {"tenant_id": 1, "namespace_id": 1, "run_id": "r", "scenario_id": "s",
                "stage_id": "st", "trigger_id": "t",
                "trigger_time": {"kind": "unix_millis", "value": 1710000000000_i64}}
        }}
    })
    .to_string();
    server.handle_input(format!("Content-Length: {}\r\n\r\n{body}", body.len()).as_bytes());
    while let Some(event) = server.poll_event() {
        if let Work::Run { ticket, job } = dispatch(service.handler().as_ref(), event) {
            let completion = job.run_blocking();
            complete(&mut server, ticket, completion).expect("in flight");
        }
    }
    let out = server.poll_transmit().expect("an answer");
    let text = String::from_utf8(out).expect("utf-8");
    let body: Value = serde_json::from_str(text.split_once("\r\n\r\n").unwrap().1).unwrap();
    body["result"]["content"][0]["json"].clone()
}

#[test]
fn typed_checks_answer_and_the_server_hashes() {
    let answer = ask("head_commit", json!({"path": "/repo"}));
    assert_eq!(answer["value"]["value"], "commit-of-/repo");
    assert_eq!(answer["evidence_hash"]["algorithm"], "sha256");
    assert_eq!(ask("is_clean", json!({}))["value"]["value"], true);
    // Absent params read as an empty object.
    assert_eq!(ask("is_clean", Value::Null)["value"]["value"], true);
    assert_eq!(
        ask("slow_count", Value::Null)["value"]["value"],
        1710000000000_i64
    );
}

#[test]
fn bad_params_never_reach_the_function() {
    let calls = Arc::new(AtomicUsize::new(0));
    let answer = ask_with(provider(Arc::clone(&calls)), "lookup", json!({"key": 5}));
    assert_eq!(answer["error"]["code"], "invalid_params", "{answer}");
    let answer = ask_with(provider(Arc::clone(&calls)), "lookup", json!({}));
    assert_eq!(answer["error"]["code"], "invalid_params", "{answer}");
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    let answer = ask_with(provider(Arc::clone(&calls)), "lookup", json!({"key": "k"}));
    assert_eq!(answer["value"]["value"], json!({"key": "k", "n": 1}));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    // An unknown check and another provider's id are refused by the server.
    assert_eq!(ask("nope", json!({}))["error"]["code"], "unknown_check");
}

#[test]
fn errors_keep_their_provenance() {
    let answer = ask("lookup", json!({"key": "gone", "fail": true}));
    assert!(answer["value"].is_null());
    assert_eq!(answer["error"]["code"], "not_found");
    assert_eq!(answer["error"]["details"]["key"], "gone");
    assert_eq!(answer["evidence_ref"]["uri"], "memory://gone");
    assert!(answer["evidence_hash"].is_null());
}

#[test]
fn a_panicking_check_is_answered_with_an_internal_error() {
    let answer = ask("boom", json!({}));
    assert_eq!(answer["error"]["code"], "internal_error", "{answer}");
}

#[test]
fn each_kind_of_check_says_where_it_runs() {
    let provider = provider(Arc::default());
    let context = EvidenceContext::adhoc(TriggerTime::UnixMillis(1));
    let query = |check: &str| evidence_wire::evidence::EvidenceQuery::new("git", check);
    assert!(matches!(
        provider.answer(query("is_clean"), context.clone(), CallContext::new()),
        Answer::Ready(_)
    ));
    assert!(matches!(
        provider.answer(query("head_commit"), context.clone(), CallContext::new()),
        Answer::Blocking(_)
    ));
    assert!(matches!(
        provider.answer(query("slow_count"), context, CallContext::new()),
        Answer::Async(_)
    ));
}

#[test]
fn cancellation_and_observation_are_routed() {
    let service = provider(Arc::default()).into_service().unwrap();
    let mut server = service.connection();
    let body = r#"{"jsonrpc":"2.0","id":"x","method":"ping"}"#;
    server.handle_input(format!("{body}\n").as_bytes());
    let mut observed = 0;
    while let Some(event) = server.poll_event() {
        assert!(matches!(event, ServerEvent::Handled(_)));
        if let Work::Observed = dispatch(service.handler().as_ref(), event) {
            observed += 1;
        }
    }
    assert_eq!(observed, 1);
}

/// A handler whose method panics while it builds its answer (an inline
/// check computes its result inside `dispatch`) still gets its call
/// answered: `dispatch` yields a ready `internal_error` job instead of
/// unwinding into the adapter's read loop.
#[test]
fn a_handler_that_panics_in_dispatch_is_answered() {
    let inline_boom = Provider::new("git", "Panics inline.").check(
        Check::new(
            "boom",
            "Panics where the query is read.",
            |_: NoParams, _: &CheckContext| -> Result<bool, CheckError> {
                panic!("a bug in an inline check")
            },
        )
        .inline(),
    );
    let answer = ask_with(inline_boom, "boom", json!({}));
    assert_eq!(answer["error"]["code"], "internal_error", "{answer}");

    struct Broken;
    impl evidence_wire_provider::Handler for Broken {
        fn evidence_query(
            &self,
            _: evidence_wire::evidence::EvidenceQuery,
            _: EvidenceContext,
            _call: evidence_wire_provider::CallContext,
        ) -> Answer<evidence_wire::evidence::EvidenceResult> {
            panic!("a bug before any answer exists")
        }
    }
    let service = evidence_wire_provider::Service::new(
        evidence_wire::server::ServerConfig::default(),
        Broken,
    );
    let mut server = service.connection();
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "evidence_query", "arguments": {
            "query": {"provider_id": "any", "check_id": "any"},
            "context": {"tenant_id": 1, "namespace_id": 1, "run_id": "r", "scenario_id": "s",
                "stage_id": "st", "trigger_id": "t",
                "trigger_time": {"kind": "logical", "value": 1}}
        }}
    });
    server.handle_input(format!("{body}\n").as_bytes());
    let mut answered = 0;
    while let Some(event) = server.poll_event() {
        if let Work::Run { ticket, job } = dispatch(service.handler().as_ref(), event) {
            let completion = job.into_ready().expect("a ready internal_error answer");
            complete(&mut server, ticket, completion).expect("in flight");
            answered += 1;
        }
    }
    assert_eq!(answered, 1);
    let out = String::from_utf8(server.poll_transmit().expect("an answer")).unwrap();
    let body: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        body["result"]["content"][0]["json"]["error"]["code"], "internal_error",
        "{body}"
    );
}

#[test]
fn only_a_ready_job_is_taken_where_it_was_read() {
    let service = provider(Arc::default()).into_service().unwrap();
    let handler = service.handler();
    let context = EvidenceContext::adhoc(TriggerTime::UnixMillis(1));
    let query = |check: &str| evidence_wire::evidence::EvidenceQuery::new("git", check);
    let mut server = service.connection();
    for (check, ready) in [
        ("is_clean", true),
        ("head_commit", false),
        ("slow_count", false),
    ] {
        let body = json!({
            "jsonrpc": "2.0", "id": check, "method": "tools/call",
            "params": {"name": "evidence_query", "arguments": {
                "query": query(check), "context": context.clone()}}
        });
        server.handle_input(format!("{body}\n").as_bytes());
        while let Some(event) = server.poll_event() {
            if let Work::Run { job, .. } = dispatch(handler.as_ref(), event) {
                assert_eq!(job.into_ready().is_ok(), ready, "{check}");
            }
        }
    }
}

/// Params are strict by default (issue 41 item 6): the derived schema
/// closes the object, so a member the type does not declare (a misspelt
/// one) is refused before the function runs; a type that says what other
/// members are (an `extend`, a flattened map) keeps them; a schema the
/// SDK cannot close soundly (an enum's `oneOf`) is left as derived.
#[test]
fn unknown_params_members_are_refused_unless_the_type_opts_out() {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    #[schemars(extend("additionalProperties" = true))]
    struct Open {
        path: String,
    }
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct WithExtras {
        #[allow(dead_code)]
        path: String,
        #[serde(flatten)]
        extras: std::collections::BTreeMap<String, Value>,
    }
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    #[serde(untagged)]
    #[allow(dead_code)]
    enum Either {
        Path { path: String },
        Url { url: String },
    }
    let calls = Arc::new(AtomicUsize::new(0));
    let contract = provider(Arc::clone(&calls)).contract();
    assert_eq!(
        contract.checks[0].params_schema["additionalProperties"],
        false
    );
    assert_eq!(
        contract.checks[2].params_schema["additionalProperties"],
        false
    );
    let answer = ask_with(
        provider(Arc::clone(&calls)),
        "lookup",
        json!({"key": "k", "kee": "typo"}),
    );
    assert_eq!(answer["error"]["code"], "invalid_params", "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains("'kee' was unexpected"), "{message}");
    assert_eq!(calls.load(Ordering::SeqCst), 0, "the function never ran");

    let open = |params: Value| {
        let provider = Provider::new("git", "Open params.")
            .check(Check::new(
                "open",
                "Any members.",
                |open: Open, _: &CheckContext| Ok(open.path),
            ))
            .check(Check::new(
                "extras",
                "Declared extras.",
                |with: WithExtras, _: &CheckContext| Ok(with.extras.len() as u64),
            ))
            .check(Check::new(
                "either",
                "An untagged enum.",
                |_: Either, _: &CheckContext| Ok(true),
            ));
        let contract = provider.contract();
        (
            contract,
            ask_with(provider.clone(), "open", params.clone()),
            ask_with(provider, "extras", params),
        )
    };
    let (contract, answer, extras) = open(json!({"path": "p", "other": 1}));
    assert_eq!(
        contract.checks[0].params_schema["additionalProperties"],
        true
    );
    assert_eq!(answer["value"]["value"], "p", "{answer}");
    assert_eq!(extras["value"]["value"], 1, "{extras}");
    assert!(
        contract.checks[2]
            .params_schema
            .get("additionalProperties")
            .is_none(),
        "{}",
        contract.checks[2].params_schema
    );
}

/// One builder call signs (issue 41 item 2): the key `evidence-wire keygen`
/// writes, read from a file or from its bytes, on a Provider or a
/// Service; what the server answers verifies with the public key, under
/// the key id given. An error result carries no value, so it is not signed.
#[test]
fn one_builder_call_signs_with_the_keygen_key() {
    use evidence_wire::canonical::Profile;
    use evidence_wire::evidence::{EvidenceResult, KeySet, TrustPolicy, verify};
    let dir = std::env::temp_dir().join(format!("ew-sdk-signing-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let seed = dir.join("signing-key");
    std::fs::write(&seed, [7u8; 32]).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&seed, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let public = EvidenceSigner::from_seed("x", &[7u8; 32]).public_key();
    let mut keys = KeySet::new();
    keys.insert_bytes("signing-key.pub", &public).unwrap();
    let policy = TrustPolicy::RequireSignature { keys };
    let check = |answer: Value| {
        let result: EvidenceResult = serde_json::from_value(answer.clone()).unwrap();
        assert_eq!(answer["signature"]["key_id"], "signing-key.pub", "{answer}");
        verify(result, &policy, Profile::DecisionGate).expect("verifies with the public key");
    };

    let from_file = provider(Arc::default())
        .signing_key_file(&seed, "signing-key.pub")
        .unwrap();
    assert_eq!(
        from_file.signing().map(EvidenceSigner::public_key),
        Some(public)
    );
    check(ask_with(
        from_file.clone(),
        "head_commit",
        json!({"path": "/r"}),
    ));
    let from_bytes = provider(Arc::default())
        .signing_key(&[7u8; 32], "signing-key.pub")
        .unwrap();
    check(ask_with(from_bytes, "head_commit", json!({"path": "/r"})));
    // An error result has no value to sign.
    let error = ask_with(from_file, "lookup", json!({"key": "k", "fail": true}));
    assert_eq!(error["error"]["code"], "not_found");
    assert!(error["signature"].is_null(), "{error}");

    // A Service, the same way.
    let service = provider(Arc::default())
        .into_service()
        .unwrap()
        .signing_key_file(&seed, "signing-key.pub")
        .unwrap();
    assert!(service.config().signer.is_some());

    // What is wrong is said with the file's name.
    let text = provider(Arc::default())
        .signing_key_file(dir.join("signing-key.pub"), "k")
        .unwrap_err()
        .to_string();
    assert!(text.contains("signing-key.pub"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A subscriber that keeps every span it is given: name, fields, how
/// often it was entered, whether it closed.
#[derive(Clone, Default)]
struct Capture(Arc<std::sync::Mutex<Vec<SpanRecord>>>);

#[derive(Debug, Default)]
struct SpanRecord {
    name: String,
    fields: std::collections::BTreeMap<String, String>,
    entered: usize,
    handles: usize,
    thread: Option<std::thread::ThreadId>,
}

struct Fields<'a>(&'a mut std::collections::BTreeMap<String, String>);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl Capture {
    fn with<R>(&self, id: &tracing::span::Id, f: impl FnOnce(&mut SpanRecord) -> R) -> R {
        let mut spans = self.0.lock().unwrap();
        let index = usize::try_from(id.into_u64() - 1).unwrap();
        f(&mut spans[index])
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, attributes: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        let mut record = SpanRecord {
            name: attributes.metadata().name().to_owned(),
            handles: 1,
            thread: Some(std::thread::current().id()),
            ..SpanRecord::default()
        };
        attributes.record(&mut Fields(&mut record.fields));
        let mut spans = self.0.lock().unwrap();
        spans.push(record);
        tracing::span::Id::from_u64(spans.len() as u64)
    }

    fn record(&self, id: &tracing::span::Id, values: &tracing::span::Record<'_>) {
        self.with(id, |record| values.record(&mut Fields(&mut record.fields)));
    }

    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}

    fn event(&self, _: &tracing::Event<'_>) {}

    fn enter(&self, id: &tracing::span::Id) {
        self.with(id, |record| record.entered += 1);
    }

    fn exit(&self, _: &tracing::span::Id) {}

    fn clone_span(&self, id: &tracing::span::Id) -> tracing::span::Id {
        self.with(id, |record| record.handles += 1);
        id.clone()
    }

    fn try_close(&self, id: tracing::span::Id) -> bool {
        self.with(&id, |record| {
            record.handles -= 1;
            record.handles == 0
        })
    }
}

/// The global subscriber of this binary's span tests: a scoped one races
/// with the other tests over the callsites' cached interest.
fn capture() -> &'static Capture {
    static CAPTURE: std::sync::OnceLock<Capture> = std::sync::OnceLock::new();
    CAPTURE.get_or_init(|| {
        let capture = Capture::default();
        tracing::subscriber::set_global_default(capture.clone()).expect("the only one");
        capture
    })
}

/// A call on stdio whose `_meta` carries a W3C trace context: the check
/// sees it (`CheckContext::trace`), the call's span carries `trace_id`,
/// `parent_id` and `transport`, and the call's validation record its
/// trace id; an invalid `_meta.traceparent` is ignored (no context, no
/// field, the call answered as usual).
#[test]
fn a_meta_traceparent_reaches_the_check_and_the_span() {
    use evidence_wire_provider::{CallSource, TraceContext, Transport, dispatch_from};

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let provider = Provider::new("traced", "Reports its trace context.").check(
        Check::new(
            "seen",
            "The trace context the check saw.",
            |_: NoParams, context: &CheckContext| {
                Ok(json!({
                    "traceparent": context.trace().map(TraceContext::traceparent),
                    "tracestate": context.trace().and_then(TraceContext::tracestate),
                    "same": context.trace() == context.call().trace(),
                }))
            },
        )
        .inline(),
    );
    let service = provider.into_service().unwrap();
    let source = CallSource::new(Some(Transport::Stdio));
    let capture = capture();
    let ask = |id: u64, meta: Value| {
        let mut server = service.connection();
        let body = json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "evidence_query", "_meta": meta, "arguments": {
                "query": {"provider_id": "traced", "check_id": "seen"},
                "context": {"tenant_id": 1, "namespace_id": 1, "run_id": "r", "scenario_id": "s",
                    "stage_id": "st", "trigger_id": "t",
                    "trigger_time": {"kind": "logical", "value": 1}}
            }}
        });
        server.handle_input(format!("{body}\n").as_bytes());
        let mut trace_ids = Vec::new();
        while let Some(event) = server.poll_event() {
            if let ServerEvent::Handled(outcome) = &event {
                trace_ids.push(outcome.trace_id.map(|id| id.to_string()));
            }
            if let Work::Run { ticket, job } =
                dispatch_from(service.handler().as_ref(), event, &source)
            {
                complete(&mut server, ticket, job.run_blocking()).unwrap();
            }
        }
        let out = String::from_utf8(server.poll_transmit().expect("an answer")).unwrap();
        let answer: Value = serde_json::from_str(out.trim()).unwrap();
        (
            answer["result"]["content"][0]["json"]["value"]["value"].clone(),
            trace_ids,
        )
    };
    let span_of = |id: &str| {
        let spans = capture.0.lock().unwrap();
        let calls: Vec<SpanRecord> = spans
            .iter()
            .filter(|span| span.name == "evidence_wire::call")
            .filter(|span| span.fields.get("check_id").map(String::as_str) == Some("seen"))
            .filter(|span| span.fields.get("id").map(String::as_str) == Some(id))
            .map(|span| SpanRecord {
                name: span.name.clone(),
                fields: span.fields.clone(),
                ..SpanRecord::default()
            })
            .collect();
        assert_eq!(calls.len(), 1, "{spans:?}");
        calls.into_iter().next().unwrap()
    };

    let (seen, records) = ask(9101, json!({"traceparent": PARENT, "tracestate": "rojo=1"}));
    assert_eq!(
        seen,
        json!({"traceparent": PARENT, "tracestate": "rojo=1", "same": true})
    );
    assert_eq!(
        records,
        vec![Some("4bf92f3577b34da6a3ce929d0e0e4736".to_owned())]
    );
    let span = span_of("9101");
    assert_eq!(span.fields["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(span.fields["parent_id"], "00f067aa0ba902b7");
    assert_eq!(span.fields["transport"], "stdio");
    assert_eq!(span.fields["outcome"], "ok");

    // Invalid: an all-zero trace id. Ignored, never an error.
    let invalid = "00-00000000000000000000000000000000-00f067aa0ba902b7-01";
    let (seen, records) = ask(9102, json!({"traceparent": invalid}));
    assert_eq!(
        seen,
        json!({"traceparent": null, "tracestate": null, "same": true})
    );
    assert_eq!(records, vec![None]);
    let span = span_of("9102");
    assert!(!span.fields.contains_key("trace_id"), "{span:?}");
    assert_eq!(span.fields["outcome"], "ok");
}

/// One call, one `evidence_wire::call` span: the check id and the outcome
/// are on it, the work ran inside it (entered), and it is closed once the
/// answer is given; blocking, async and failing checks alike.
#[test]
fn a_call_yields_one_span_with_its_check_and_outcome() {
    for (check, params, outcome) in [
        ("head_commit", json!({}), "ok"),
        ("slow_count", json!(null), "ok"),
        ("lookup", json!({"key": "k", "fail": true}), "error"),
        ("boom", json!(null), "error"),
    ] {
        // Spans are told apart by the thread that opened them (`ask` runs
        // the job on its own thread).
        let capture = capture();
        let before = capture.0.lock().unwrap().len();
        let answer = ask(check, params.clone());
        assert!(answer.is_object(), "{check}: {answer}");
        let spans = capture.0.lock().unwrap();
        let here = std::thread::current().id();
        let calls: Vec<&SpanRecord> = spans[before..]
            .iter()
            .filter(|span| span.name == "evidence_wire::call" && span.thread == Some(here))
            .collect();
        assert_eq!(calls.len(), 1, "{check}: {spans:?}");
        let call = calls[0];
        assert_eq!(call.fields["check_id"], check, "{call:?}");
        assert_eq!(call.fields["tool"], "evidence_query", "{call:?}");
        assert_eq!(call.fields["method"], "tools/call", "{call:?}");
        assert_eq!(call.fields["id"], "7", "the JSON-RPC id: {call:?}");
        assert_eq!(call.fields["ticket"], "0", "the first ticket: {call:?}");
        assert!(
            !call.fields.contains_key("trace_id"),
            "no context: {call:?}"
        );
        assert_eq!(call.fields["outcome"], outcome, "{check}: {call:?}");
        assert!(call.fields.contains_key("duration_ms"), "{call:?}");
        assert!(call.entered >= 2, "built and run inside the span: {call:?}");
        assert_eq!(call.handles, 0, "closed once answered: {call:?}");
    }
}

/// What a check learns of its call, through the server and
/// `dispatch_from`: who asked (dialect, transport, authenticated), the
/// request's `_meta`, the deadline from the configuration's
/// `call_timeout` (a blocking check polling `is_cancelled` sees it pass,
/// with `CancelReason::Deadline`, and its answer still goes out), and the
/// provider's evidence root.
#[test]
fn a_check_sees_its_caller_meta_deadline_and_root() {
    use evidence_wire_provider::{
        CallSource, CancelReason, EvidenceRoot, Transport, dispatch_from,
    };
    use std::time::{Duration, Instant};

    let dir = std::env::temp_dir().join(format!("ew-sdk-root-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("a.txt"), "abc").unwrap();
    let provider = Provider::new("ctx", "Reports its context.")
        .root(EvidenceRoot::open(&dir).unwrap())
        .check(Check::new(
            "context",
            "What the check saw.",
            |_: NoParams, context: &CheckContext| {
                let caller = *context.caller();
                let remaining = context.remaining().expect("a deadline");
                let started = Instant::now();
                // A long blocking check, stopping once it may.
                while !context.is_cancelled() {
                    assert!(
                        started.elapsed() < Duration::from_secs(5),
                        "deadline never seen"
                    );
                    std::thread::sleep(Duration::from_millis(5));
                }
                let size = context.root()?.read("a.txt", context)?.len();
                Ok(json!({
                    "dialect": format!("{:?}", caller.dialect()),
                    "decision_gate": caller.is_decision_gate(),
                    "transport": caller.transport().map(|transport| transport.to_string()),
                    "authenticated": caller.is_authenticated(),
                    "meta": context.meta(),
                    "reason": format!("{:?}", context.cancel_reason()),
                    "waited_ms_at_most": remaining.as_millis() <= 200,
                    "size": size,
                }))
            },
        ));
    let mut service = provider.into_service().unwrap();
    service.config_mut().call_timeout = Some(Duration::from_millis(200));
    let source: CallSource = service.call_source(Transport::Http).authenticated(true);
    let mut server = service.connection();
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "evidence_query", "_meta": {"progressToken": "p1"}, "arguments": {
            "query": {"provider_id": "ctx", "check_id": "context"},
            "context": {"tenant_id": 1, "namespace_id": 1, "run_id": "r", "scenario_id": "s",
                "stage_id": "st", "trigger_id": "t",
                "trigger_time": {"kind": "logical", "value": 1}}
        }}
    });
    server.handle_input(format!("{body}\n").as_bytes());
    while let Some(event) = server.poll_event() {
        if let Work::Run { ticket, job } = dispatch_from(service.handler().as_ref(), event, &source)
        {
            complete(&mut server, ticket, job.run_blocking()).unwrap();
        }
    }
    let out = String::from_utf8(server.poll_transmit().expect("an answer")).unwrap();
    let answer: Value = serde_json::from_str(out.trim()).unwrap();
    let result = &answer["result"]["content"][0]["json"];
    assert_eq!(
        result["value"]["value"],
        json!({
            "dialect": "DecisionGate", "decision_gate": true, "transport": "http",
            "authenticated": true, "meta": {"progressToken": "p1"},
            "reason": format!("{:?}", Some(CancelReason::Deadline)),
            "waited_ms_at_most": true, "size": 3,
        }),
        "{answer}"
    );
    assert_eq!(
        result["evidence_ref"]["uri"],
        "dg+file://evidence-root/a.txt"
    );
    // Without a timeout or a source: no deadline, an in-process caller.
    let plain = CheckContext::new(
        evidence_wire::evidence::EvidenceQuery::new("ctx", "context"),
        EvidenceContext::adhoc(TriggerTime::Logical(1)),
        CallContext::new(),
    );
    assert_eq!((plain.deadline(), plain.caller().transport()), (None, None));
    assert!(!plain.is_cancelled());
    assert_eq!(plain.root().unwrap_err().code(), "root_unavailable");
    let _ = std::fs::remove_dir_all(&dir);
}

mod test_client {
    use evidence_wire::client::QueryError;
    use evidence_wire::evidence::{EvidenceSigner, KeySet, VerifyError};
    use evidence_wire_provider::testing::TestClient;

    use super::*;

    fn files() -> Provider {
        Provider::new("demo", "Answers.")
            .check(Check::new(
                "answer",
                "42, from memory://answer.",
                |_: NoParams, context: &CheckContext| {
                    context.set_ref("memory://answer");
                    Ok(42)
                },
            ))
            .check(Check::new(
                "missing",
                "Always missing.",
                |_: NoParams, _: &CheckContext| {
                    Err::<u64, _>(CheckError::new("file_not_found", "nothing here"))
                },
            ))
    }

    /// As Decision Gate asks (its hash profile) and as an MCP client asks
    /// (after the handshake, RFC 8785): the same value, verified; an error
    /// result is an answer too.
    #[test]
    fn asks_as_decision_gate_and_as_an_mcp_client() {
        use evidence_wire::canonical::Profile;
        let mut gate = TestClient::decision_gate(files()).unwrap();
        let answer = gate.query("answer", Value::Null).unwrap();
        assert_eq!(answer.value(), Some(json!(42)));
        assert_eq!(answer.evidence_ref(), Some("memory://answer"));
        assert_eq!(answer.verified().profile(), Profile::DecisionGate);
        let missing = gate.query("missing", json!({})).unwrap();
        assert_eq!(missing.error_code(), Some("file_not_found"));
        assert_eq!(missing.value(), None);

        let mut mcp = TestClient::mcp(files()).unwrap();
        let answer = mcp.query("answer", json!({})).unwrap();
        assert_eq!(answer.value(), Some(json!(42)));
        assert_eq!(answer.verified().profile(), Profile::Rfc8785);
        // Params outside the schema are refused by the server, not the check.
        let refused = mcp.query("answer", json!({"extra": 1})).unwrap();
        assert_eq!(refused.error_code(), Some("invalid_params"));
        let listed = mcp.request("tools/list", None).unwrap();
        assert_eq!(listed["tools"][0]["name"], "evidence_query");
    }

    /// Under `require_signature`: an unsigned answer fails verification; a
    /// service signing with the trusted key passes; another key fails.
    #[test]
    fn signatures_are_required_and_checked() {
        let signer = EvidenceSigner::from_seed("k1", &[7; 32]);
        let mut keys = KeySet::new();
        keys.insert_bytes("k1", &signer.public_key()).unwrap();

        let mut unsigned = TestClient::decision_gate(files())
            .unwrap()
            .require_signature(keys.clone());
        assert!(matches!(
            unsigned.query("answer", json!({})),
            Err(QueryError::Verification(VerifyError::MissingSignature))
        ));

        let mut service = files().into_service().unwrap();
        service.config_mut().signer = Some(signer);
        let mut signed = TestClient::decision_gate(service.clone())
            .unwrap()
            .require_signature(keys);
        let answer = signed.query("answer", json!({})).unwrap();
        assert_eq!(answer.verified().signer(), Some("k1"));

        let mut other = KeySet::new();
        other
            .insert_bytes(
                "k2",
                &EvidenceSigner::from_seed("k2", &[9; 32]).public_key(),
            )
            .unwrap();
        let mut wrong = TestClient::decision_gate(service)
            .unwrap()
            .require_signature(other);
        assert!(wrong.query("answer", json!({})).is_err());
    }

    /// The contract is held to Decision Gate's rules: a provider named
    /// after a built-in is refused, the usual one passes.
    #[test]
    fn the_contract_is_held_to_decision_gates_rules() {
        TestClient::decision_gate(files())
            .unwrap()
            .check_contract()
            .unwrap();
        let builtin = Provider::new("time", "Shadows a built-in.").check(Check::new(
            "now",
            "Now.",
            |_: NoParams, _: &CheckContext| Ok(1),
        ));
        let problems = TestClient::decision_gate(builtin)
            .unwrap()
            .check_contract()
            .unwrap_err();
        assert!(problems.to_string().contains("time"), "{problems}");
    }
}
