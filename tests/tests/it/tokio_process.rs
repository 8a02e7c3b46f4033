//! The tokio child-process client against a real child: the
//! `tokio-test-provider` (tests/src/bin, served by the tokio stdio server)
//! in both framings,
//! pipelined queries, and a provider that crashes, hangs, prints garbage or
//! answers with the wrong id: each yields its typed error and the next
//! query succeeds after the restart. (The bundled CLI provider behind this
//! client is covered by the cross-adapter matrix in `tests/`.)

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use evidence_wire::client::{ClientConfig, QueryError};
use evidence_wire::evidence::{EvidenceContext, EvidenceQuery, TriggerTime};
use evidence_wire::frame::Framing;
use evidence_wire_tokio::{LogSink, ProcessConfig, ProcessProvider, ProviderError};
use serde_json::{Value, json};

const PROVIDER: &str = env!("CARGO_BIN_EXE_tokio-test-provider");

fn context() -> EvidenceContext {
    let mut context = EvidenceContext::adhoc(TriggerTime::UnixMillis(1_710_000_000_000));
    context.run_id = "run-1".to_owned();
    context
}

fn query(check: &str, params: Value) -> EvidenceQuery {
    EvidenceQuery::new("test", check).with_params(params)
}

struct Fixture {
    provider: ProcessProvider,
    log: Arc<Mutex<Vec<String>>>,
}

fn start(framing: Framing, handshake: bool, timeout_ms: u64) -> Fixture {
    let log = Arc::new(Mutex::new(Vec::new()));
    let sink_log = Arc::clone(&log);
    let sink: LogSink = Arc::new(move |line: &str| {
        sink_log.lock().expect("log lock").push(line.to_owned());
    });
    let mut client = ClientConfig::default();
    client.framing = framing;
    client.handshake = handshake;
    client.request_timeout_ms = timeout_ms;
    let config = ProcessConfig::new(vec![PROVIDER.to_owned()])
        .with_client(client)
        .with_log(sink)
        .with_backoff(Duration::from_millis(20), Duration::from_millis(200));
    Fixture {
        provider: ProcessProvider::spawn(config).expect("spawn the test provider"),
        log,
    }
}

async fn ask(
    provider: &ProcessProvider,
    check: &str,
    params: Value,
) -> Result<Value, ProviderError> {
    let answer = tokio::time::timeout(
        Duration::from_secs(20),
        provider.query(&query(check, params), &context()),
    )
    .await
    .expect("every query gets an outcome in bounded time")?;
    Ok(serde_json::to_value(answer.result()).expect("json"))
}

async fn assert_echo_works(provider: &ProcessProvider, marker: &str) {
    let result = ask(provider, "echo", json!(marker))
        .await
        .expect("echo answered");
    assert_eq!(result["value"]["value"]["params"], marker);
    assert_eq!(result["evidence_hash"]["algorithm"], "sha256");
}

#[tokio::test]
async fn answers_in_both_framings() {
    for (framing, handshake) in [
        (Framing::ContentLength, false),
        (Framing::NewlineDelimited, true),
    ] {
        let fixture = start(framing, handshake, 10_000);
        assert_echo_works(&fixture.provider, "framing").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_queries_run_concurrently() {
    let fixture = start(Framing::ContentLength, false, 10_000);
    let started = Instant::now();
    let mut queries = tokio::task::JoinSet::new();
    for index in 0..8u64 {
        let provider = fixture.provider.clone();
        queries.spawn(async move {
            let result = ask(&provider, "slow", json!({"ms": 300 + index})).await;
            (index, result)
        });
    }
    let mut answered = Vec::new();
    while let Some(joined) = queries.join_next().await {
        let (index, result) = joined.expect("task");
        let result = result.expect("answered");
        assert_eq!(
            result["value"]["value"]["slept_ms"],
            300 + index,
            "answers matched by id"
        );
        answered.push(index);
    }
    answered.sort_unstable();
    assert_eq!(answered, (0..8).collect::<Vec<_>>());
    // Eight 300 ms queries one after another would take 2.4 s.
    assert!(
        started.elapsed() < Duration::from_millis(2000),
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_crash_fails_the_query_and_the_next_one_succeeds() {
    let fixture = start(Framing::ContentLength, false, 10_000);
    assert_echo_works(&fixture.provider, "before").await;
    let error = ask(&fixture.provider, "crash", Value::Null)
        .await
        .unwrap_err();
    assert!(
        matches!(error, ProviderError::Query(QueryError::ConnectionLost(_))),
        "crash → connection lost, got {error:?}"
    );
    assert_eq!(error.code(), "provider_unavailable");
    assert_echo_works(&fixture.provider, "after").await;
}

/// The restart hook (what `evidence_wire_metrics::Metrics::restart_hook`
/// plugs in as the `child_restarts_total` counter) is called once per
/// restart, never for the first start.
#[tokio::test]
async fn each_restart_calls_the_restart_hook_once() {
    let restarts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = Arc::clone(&restarts);
    let hook: evidence_wire_tokio::provider::caller::RestartHook = Arc::new(move || {
        counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    });
    let mut client = ClientConfig::default();
    client.request_timeout_ms = 10_000;
    let config = ProcessConfig::new(vec![PROVIDER.to_owned()])
        .with_client(client)
        .with_log(Arc::new(|_: &str| {}))
        .with_backoff(Duration::from_millis(20), Duration::from_millis(200))
        .with_restart_hook(hook);
    let provider = ProcessProvider::spawn(config).expect("spawn the test provider");
    assert_echo_works(&provider, "first").await;
    assert_eq!(restarts.load(std::sync::atomic::Ordering::SeqCst), 0);
    for round in 1..=2 {
        assert!(ask(&provider, "crash", Value::Null).await.is_err());
        assert_echo_works(&provider, "after").await;
        assert_eq!(
            restarts.load(std::sync::atomic::Ordering::SeqCst),
            round,
            "one restart per crash"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_fails_every_query_in_flight_exactly_once() {
    let fixture = start(Framing::ContentLength, false, 10_000);
    let slow = {
        let provider = fixture.provider.clone();
        tokio::spawn(async move { ask(&provider, "slow", json!({"ms": 2000})).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let crash = ask(&fixture.provider, "crash", Value::Null).await;
    let slow = slow.await.expect("task");
    assert!(matches!(
        crash,
        Err(ProviderError::Query(QueryError::ConnectionLost(_)))
    ));
    assert!(
        matches!(
            slow,
            Err(ProviderError::Query(QueryError::ConnectionLost(_)))
        ),
        "the other query in flight fails too: {slow:?}"
    );
    assert_echo_works(&fixture.provider, "after").await;
}

#[tokio::test]
async fn a_hang_times_out_and_the_next_query_succeeds() {
    let fixture = start(Framing::ContentLength, false, 400);
    let started = Instant::now();
    let error = ask(&fixture.provider, "hang", Value::Null)
        .await
        .unwrap_err();
    assert!(
        matches!(error, ProviderError::Query(QueryError::Timeout(400))),
        "hang → timeout, got {error:?}"
    );
    assert!(started.elapsed() >= Duration::from_millis(400));
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_echo_works(&fixture.provider, "after").await;
    let log = fixture.log.lock().expect("log").join("\n");
    assert!(
        log.contains("did not answer in time"),
        "restart logged: {log}"
    );
}

/// A hung check while the child keeps answering others: only that query
/// times out. The child is not restarted, so a query in flight at that
/// moment is answered rather than lost.
#[tokio::test]
async fn a_hang_among_answers_times_out_alone() {
    let fixture = start(Framing::ContentLength, false, 1_500);
    let provider = &fixture.provider;
    let hang = ask(provider, "hang", Value::Null);
    let others = async {
        // Sent after the hang and answered at once: the child is alive.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_echo_works(provider, "alive").await;
        // In flight from 1 s to 2 s, across the hang's timeout at 1.5 s.
        tokio::time::sleep(Duration::from_millis(950)).await;
        ask(provider, "slow", json!({"ms": 1_000})).await
    };
    let (hang, slow) = tokio::join!(hang, others);
    assert!(
        matches!(hang, Err(ProviderError::Query(QueryError::Timeout(1_500)))),
        "hang → timeout, got {hang:?}"
    );
    let slow = slow.expect("the query in flight at the hang's timeout is answered");
    assert_eq!(slow["value"]["value"]["slept_ms"], 1_000);
    let log = fixture.log.lock().expect("log").join("\n");
    assert!(!log.contains("did not answer in time"), "no restart: {log}");
}

#[tokio::test]
async fn garbage_desynchronizes_and_the_next_query_succeeds() {
    let fixture = start(Framing::ContentLength, false, 5_000);
    let started = Instant::now();
    let error = ask(&fixture.provider, "garbage", Value::Null)
        .await
        .unwrap_err();
    let ProviderError::Query(QueryError::ConnectionLost(reason)) = &error else {
        panic!("garbage → connection lost, got {error:?}");
    };
    assert!(reason.contains("desynchronized"), "{reason}");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "failed at once, not by timeout"
    );
    assert_echo_works(&fixture.provider, "after").await;
}

#[tokio::test]
async fn a_wrong_id_is_never_taken_as_the_answer() {
    let fixture = start(Framing::ContentLength, false, 500);
    let error = ask(&fixture.provider, "wrong_id", Value::Null)
        .await
        .unwrap_err();
    assert!(
        matches!(error, ProviderError::Query(QueryError::Timeout(500))),
        "wrong id → no answer → timeout, got {error:?}"
    );
    let log = fixture.log.lock().expect("log").join("\n");
    assert!(
        log.contains("987654321"),
        "the stray answer is logged: {log}"
    );
    assert_echo_works(&fixture.provider, "after").await;
}

#[tokio::test]
async fn stderr_goes_to_the_log_sink() {
    let fixture = start(Framing::ContentLength, false, 10_000);
    let result = ask(&fixture.provider, "stderr", Value::Null)
        .await
        .expect("answered");
    assert_eq!(result["value"]["value"], "logged");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let found = fixture
            .log
            .lock()
            .expect("log")
            .iter()
            .any(|line| line == "test-provider: note from stderr");
        if found {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "stderr line never reached the log"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_panicking_provider_handler_answers_an_error_result() {
    let fixture = start(Framing::NewlineDelimited, true, 10_000);
    let result = ask(&fixture.provider, "panic", Value::Null)
        .await
        .expect("answered");
    assert_eq!(result["error"]["code"], "internal_error");
    assert_echo_works(&fixture.provider, "after").await;
}

#[tokio::test]
async fn a_missing_program_is_a_spawn_error() {
    let error = ProcessProvider::spawn(ProcessConfig::new(vec![
        "/nonexistent/evidence-wire-provider".to_owned(),
    ]))
    .unwrap_err();
    assert!(matches!(error, ProviderError::Spawn { .. }), "{error:?}");
    assert!(
        error
            .to_string()
            .contains("/nonexistent/evidence-wire-provider")
    );
    let empty = ProcessProvider::spawn(ProcessConfig::new(Vec::new())).unwrap_err();
    assert!(empty.to_string().contains("empty command"));
}

#[test]
fn spawn_outside_a_runtime_is_an_error_not_a_panic() {
    let error = ProcessProvider::spawn(ProcessConfig::new(vec![PROVIDER.to_owned()])).unwrap_err();
    assert!(error.to_string().contains("tokio runtime"), "{error}");
}
