//! The bundled provider as an SDK provider, driven through the core server
//! with no adapter: it turns into a service with its contract installed,
//! the server refuses params outside the derived schemas before a check
//! runs and hashes the answers, and each check runs where the table says
//! (clock and environment checks inline, file and HTTP checks on the
//! blocking pool).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use evidence_wire::evidence::{EvidenceContext, EvidenceQuery, TriggerTime};
use evidence_wire::server::Server;
use evidence_wire_bundled::BundledProvider;
use evidence_wire_config::BundledConfig;
use evidence_wire_provider::{Answer, Handler, IntoService, Work, complete, dispatch};
use serde_json::{Value, json};

struct Root(PathBuf);

impl Root {
    fn new() -> Root {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "evidence-wire-bundled-service-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path).expect("temp dir");
        std::fs::write(path.join("report.json"), r#"{"status": "approved"}"#).expect("write");
        Root(path)
    }

    fn provider(&self) -> BundledProvider {
        let mut config = BundledConfig::default();
        config.root = self.0.clone();
        BundledProvider::new(&config).expect("provider")
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One Decision Gate query through a fresh connection of the provider's
/// service, every job run to completion here; the EvidenceResult answered.
fn ask(provider: &BundledProvider, check: &str, params: Value) -> Value {
    let service = provider.clone().into_service().expect("service");
    let mut server: Server = service.connection();
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "evidence_query", "arguments": {
            "query": {"provider_id": "evidence-wire", "check_id": check, "params": params},
            "context": {"tenant_id": 1, "namespace_id": 1, "run_id": "r", "scenario_id": "s",
                "stage_id": "st", "trigger_id": "t",
                "trigger_time": {"kind": "unix_millis", "value": 1_710_000_000_000_i64}}
        }}
    })
    .to_string();
    server.handle_input(format!("Content-Length: {}\r\n\r\n{body}", body.len()).as_bytes());
    while let Some(event) = server.poll_event() {
        if let Work::Run { ticket, job } = dispatch(service.handler().as_ref(), event) {
            complete(&mut server, ticket, job.run_blocking()).expect("in flight");
        }
    }
    let out = String::from_utf8(server.poll_transmit().expect("an answer")).expect("utf-8");
    let (_, body) = out.split_once("\r\n\r\n").expect("a framed answer");
    let body: Value = serde_json::from_str(body).expect("JSON");
    body["result"]["content"][0]["json"].clone()
}

#[test]
fn the_service_answers_and_hashes() {
    let root = Root::new();
    let provider = root.provider();
    let answer = ask(&provider, "time_now", json!({}));
    assert_eq!(answer["value"]["value"], json!(1_710_000_000_000_i64));
    assert_eq!(answer["evidence_hash"]["algorithm"], "sha256");
    let answer = ask(
        &provider,
        "json_path",
        json!({"file": "report.json", "jsonpath": "$.status"}),
    );
    assert_eq!(answer["value"]["value"], "approved", "{answer}");
    assert_eq!(
        answer["evidence_ref"]["uri"],
        "dg+file://evidence-root/report.json"
    );
    assert_eq!(answer["evidence_anchor"]["anchor_type"], "file_path_rooted");
    assert_eq!(
        ask(&provider, "file_size", json!({"path": "report.json"}))["value"]["value"],
        22
    );
}

#[test]
fn params_outside_the_derived_schemas_are_refused_by_the_server() {
    let root = Root::new();
    let provider = root.provider();
    for (check, params) in [
        // Accepted by the check's type (null reads as absent) but not by
        // the schema, which says string: the server decides first.
        (
            "json_path",
            json!({"file": "report.json", "jsonpath": null}),
        ),
        ("json_path", json!({"file": ""})),
        (
            "json_path",
            json!({"file": "report.json", "jsonpath": "$".repeat(4097)}),
        ),
        ("time_after", json!({"timestamp": true})),
        ("time_now", json!({"x": 1})),
        ("env_get", json!({"key": ""})),
        ("http_status", json!({"url": "x".repeat(2049)})),
    ] {
        let answer = ask(&provider, check, params.clone());
        assert_eq!(
            answer["error"]["code"], "invalid_params",
            "{check} {params}: {answer}"
        );
        assert!(answer["value"].is_null());
    }
    // The same `null` jsonpath called directly (no server): the whole file.
    let direct = provider.answer(
        &EvidenceQuery::new("evidence-wire", "json_path")
            .with_params(json!({"file": "report.json", "jsonpath": null})),
        &EvidenceContext::adhoc(TriggerTime::UnixMillis(1)),
    );
    assert!(direct.error.is_none(), "{direct:?}");
    // Another provider's id and an unknown check.
    assert_eq!(
        ask(&provider, "nope", json!({}))["error"]["code"],
        "unknown_check"
    );
}

/// Issue 38 item 13: `1000.0` passes the params schema (`integer`, as
/// JSON Schema counts it), so the check reads it as 1000; `1000.5` is
/// refused as `invalid_params`, by the server's schema and by the check
/// called directly alike.
#[test]
fn the_schema_and_the_check_agree_on_integer_timestamps() {
    let root = Root::new();
    let provider = root.provider();
    for number in ["1000.0", "1e3", "-5.0"] {
        let number: Value = serde_json::from_str(number).expect("JSON");
        let answer = ask(&provider, "time_after", json!({"timestamp": number}));
        assert_eq!(answer["value"]["value"], true, "{number}: {answer}");
        let answer = ask(&provider, "time_before", json!({"timestamp": number}));
        assert_eq!(answer["value"]["value"], false, "{number}: {answer}");
    }
    // At the trigger time itself: neither after nor before.
    let answer = ask(
        &provider,
        "time_after",
        json!({"timestamp": 1_710_000_000_000.0_f64}),
    );
    assert_eq!(answer["value"]["value"], false, "{answer}");
    for check in ["time_after", "time_before"] {
        let served = ask(&provider, check, json!({"timestamp": 1000.5}));
        assert_eq!(served["error"]["code"], "invalid_params", "{served}");
        let served_message = served["error"]["message"].as_str().expect("message");
        let direct = provider.answer(
            &EvidenceQuery::new("evidence-wire", check).with_params(json!({"timestamp": 1000.5})),
            &EvidenceContext::adhoc(TriggerTime::UnixMillis(1_710_000_000_000)),
        );
        let direct = direct.error.expect("refused");
        assert_eq!(direct.code, "invalid_params");
        for message in [served_message, direct.message.as_str()] {
            assert!(message.contains("1000.5"), "{message}");
            assert!(message.contains("integer"), "{message}");
        }
    }
}

#[test]
fn each_check_runs_where_the_table_says() {
    let root = Root::new();
    let provider = root.provider();
    let context = EvidenceContext::adhoc(TriggerTime::UnixMillis(1_710_000_000_000));
    let params = [
        ("time_now", json!({})),
        ("time_after", json!({"timestamp": 0})),
        ("time_before", json!({"timestamp": 0})),
        ("env_get", json!({"key": "HOME"})),
        ("json_path", json!({"file": "report.json"})),
        ("file_size", json!({"path": "report.json"})),
        ("http_status", json!({"url": "https://example.invalid/"})),
        ("http_body_hash", json!({"url": "https://example.invalid/"})),
    ];
    assert_eq!(
        params
            .iter()
            .map(|(id, _)| id.to_string())
            .collect::<Vec<_>>(),
        BundledProvider::check_ids()
    );
    for (check, params) in params {
        let query = EvidenceQuery::new("evidence-wire", check).with_params(params);
        let inline = matches!(check, "time_now" | "time_after" | "time_before" | "env_get");
        assert_eq!(provider.is_inline(&query), inline, "{check}");
        let call = evidence_wire_provider::CallContext::new();
        let answer = Handler::evidence_query(&provider, query, context.clone(), call);
        match answer {
            Answer::Ready(_) => assert!(inline, "{check} must not run inline"),
            Answer::Blocking(_) => assert!(!inline, "{check} must run inline"),
            Answer::Async(_) => panic!("{check}: no bundled check is async"),
        }
    }
}
