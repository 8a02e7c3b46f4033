//! The bundled checks called directly (`BundledProvider::answer`), for what
//! an adversarial review found: JSONPath expressions that crashed the
//! parser, answers that grew with the input instead of the limits, context
//! lost on `jsonpath_not_found`, RFC 3339 offsets out of range, and HTTP
//! destinations outside the allow-list's host, port or address rules.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic

#[cfg(feature = "http")]
use std::io::{BufRead, BufReader, Write};
#[cfg(feature = "http")]
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use evidence_wire::evidence::{
    EvidenceContext, EvidenceQuery, EvidenceResult, EvidenceValue, TriggerTime,
};
use evidence_wire_bundled::{BundledProvider, MAX_RESULT_DEPTH};
use evidence_wire_config::BundledConfig;
use serde_json::{Value, json};

struct Root(PathBuf);

impl Root {
    fn new() -> Root {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "evidence-wire-bundled-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path).expect("temp dir");
        Root(path)
    }

    fn write(&self, name: &str, text: &str) {
        std::fs::write(self.0.join(name), text).expect("write");
    }

    fn provider(&self, adjust: impl FnOnce(&mut BundledConfig)) -> BundledProvider {
        let mut config = BundledConfig::default();
        config.root = self.0.clone();
        adjust(&mut config);
        BundledProvider::new(&config).expect("provider")
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn ask(provider: &BundledProvider, check: &str, params: Value) -> EvidenceResult {
    let query = EvidenceQuery::new("evidence-wire", check).with_params(params);
    let context = EvidenceContext::adhoc(TriggerTime::UnixMillis(1_710_000_000_000));
    provider.answer(&query, &context)
}

fn value(result: &EvidenceResult) -> Value {
    match &result.value {
        Some(EvidenceValue::Json(raw)) => serde_json::from_str(raw.get()).expect("json"),
        other => panic!("no JSON value: {other:?}, error {:?}", result.error),
    }
}

fn error_code(result: &EvidenceResult) -> &str {
    assert!(result.value.is_none(), "{result:?}");
    result
        .error
        .as_ref()
        .map(|error| error.code.as_str())
        .unwrap_or("")
}

/// A document `depth` arrays deep with `leaves` zeros at the bottom.
fn nested(depth: usize, leaves: usize) -> String {
    let zeros = vec!["0"; leaves].join(",");
    format!("{}{zeros}{}", "[".repeat(depth), "]".repeat(depth))
}

#[test]
fn crash_expressions_are_refused_before_parsing() {
    let root = Root::new();
    root.write("d.json", r#"{"a": 1}"#);
    let provider = root.provider(|_| {});
    let attacks = [
        format!("$[?{}@.a{}]", "(".repeat(1000), ")".repeat(1000)),
        format!("{}@.a{}", "$[?!".repeat(500), "]".repeat(500)),
        format!("$[?{}@.a{}]", "@[?".repeat(400), "]".repeat(400)),
        format!("$[?{}@.a{} > 1]", "length(".repeat(400), ")".repeat(400)),
    ];
    for attack in attacks {
        let provider = provider.clone();
        let expression = attack.clone();
        // A small stack: the refusal must not depend on stack size.
        let result = std::thread::Builder::new()
            .stack_size(128 * 1024)
            .spawn(move || {
                ask(
                    &provider,
                    "json_path",
                    json!({"file": "d.json", "jsonpath": expression}),
                )
            })
            .expect("spawn")
            .join()
            .expect("no crash");
        assert_eq!(error_code(&result), "invalid_jsonpath", "{result:?}");
        let error = result.error.as_ref().expect("error");
        assert!(error.message.contains("32 deep"), "{}", error.message);
        assert_eq!(
            error.details.as_ref().expect("details")["jsonpath"],
            json!(attack)
        );
        assert!(result.evidence_ref.is_some() && result.evidence_anchor.is_some());
    }
    // Over the length limit (a caller that skipped the params schema).
    let long = format!("$.a{}", " ".repeat(5000));
    let result = ask(
        &provider,
        "json_path",
        json!({"file": "d.json", "jsonpath": long}),
    );
    assert_eq!(error_code(&result), "invalid_jsonpath");
    assert!(
        result
            .error
            .as_ref()
            .expect("error")
            .message
            .contains("4096")
    );
    // Still answering, and ordinary expressions work.
    let result = ask(
        &provider,
        "json_path",
        json!({"file": "d.json", "jsonpath": "$.a"}),
    );
    assert_eq!(value(&result), json!(1));
}

#[test]
fn jsonpath_not_found_keeps_reference_anchor_and_expression() {
    let root = Root::new();
    root.write("report.json", r#"{"status": "approved"}"#);
    let provider = root.provider(|_| {});
    let result = ask(
        &provider,
        "json_path",
        json!({"file": "./report.json", "jsonpath": "$.missing"}),
    );
    assert_eq!(error_code(&result), "jsonpath_not_found");
    let error = result.error.as_ref().expect("error");
    assert_eq!(error.details, Some(json!({"jsonpath": "$.missing"})));
    assert_eq!(
        result.evidence_ref.as_ref().expect("ref").uri,
        "dg+file://evidence-root/report.json"
    );
    let anchor = result.evidence_anchor.as_ref().expect("anchor");
    assert_eq!(anchor.anchor_type, "file_path_rooted");
    assert_eq!(
        anchor.anchor_value,
        r#"{"path":"report.json","root_id":"evidence-root"}"#
    );
}

#[test]
fn the_result_is_capped_in_nodes_bytes_and_depth() {
    let root = Root::new();
    // 120 levels deep, ~100 KB: `$..*` used to answer about 120 copies of it.
    root.write("deep.json", &nested(120, 50_000));
    root.write(
        "wide.json",
        &format!("[{}]", vec!["\"xxxxxxxxxx\""; 30_000].join(",")),
    );
    let provider = root.provider(|_| {});

    // The review's query: refused before it runs (each level copies).
    let result = ask(
        &provider,
        "json_path",
        json!({"file": "deep.json", "jsonpath": "$..*"}),
    );
    assert_eq!(error_code(&result), "size_limit_exceeded", "{result:?}");
    let error = result.error.as_ref().expect("error");
    assert!(
        error.message.contains("max_evaluation_cost"),
        "{}",
        error.message
    );

    // 30000 nodes selected: over the 10000 default.
    let result = ask(
        &provider,
        "json_path",
        json!({"file": "wide.json", "jsonpath": "$[*]"}),
    );
    assert_eq!(error_code(&result), "size_limit_exceeded", "{result:?}");
    let error = result.error.as_ref().expect("error");
    assert!(
        error.message.contains("max_result_nodes"),
        "{}",
        error.message
    );
    assert_eq!(
        error.details.as_ref().expect("details")["limit"],
        json!("max_result_nodes")
    );

    // The whole 420 KB document is over the 256 KiB default.
    let result = ask(&provider, "json_path", json!({"file": "wide.json"}));
    assert_eq!(error_code(&result), "size_limit_exceeded");
    assert!(
        result
            .error
            .as_ref()
            .expect("error")
            .message
            .contains("max_result_bytes")
    );

    // A value deeper than an answer may carry.
    let result = ask(
        &provider,
        "json_path",
        json!({"file": "deep.json", "jsonpath": "$[0]"}),
    );
    assert_eq!(error_code(&result), "size_limit_exceeded");
    assert!(
        result
            .error
            .as_ref()
            .expect("error")
            .message
            .contains("max_result_depth")
    );
    let shallow = 120 - MAX_RESULT_DEPTH;
    let path = format!("${}", "[0]".repeat(shallow));
    let result = ask(
        &provider,
        "json_path",
        json!({"file": "deep.json", "jsonpath": path}),
    );
    assert!(result.error.is_none(), "{:?}", result.error);

    // Lower limits from the settings apply.
    let tight = root.provider(|config| {
        config.json.max_result_nodes = 3;
        config.json.max_result_bytes = 1024;
    });
    root.write("small.json", r#"{"a": [1, 2, 3, 4], "b": "x"}"#);
    let result = ask(
        &tight,
        "json_path",
        json!({"file": "small.json", "jsonpath": "$.a[*]"}),
    );
    assert_eq!(error_code(&result), "size_limit_exceeded");
    let result = ask(
        &tight,
        "json_path",
        json!({"file": "small.json", "jsonpath": "$.a[0:3]"}),
    );
    assert_eq!(value(&result), json!([1, 2, 3]));
    let result = ask(
        &tight,
        "json_path",
        json!({"file": "wide.json", "jsonpath": "$[0]"}),
    );
    assert_eq!(value(&result), json!("xxxxxxxxxx"));
}

#[test]
fn expressions_whose_evaluation_explodes_are_refused_before_it_runs() {
    let root = Root::new();
    // 20 levels of single-element arrays around a wide array.
    root.write("deep.json", &nested(20, 20_000));
    root.write("flat.json", &format!("[{}]", vec!["1"; 30_000].join(",")));
    let provider = root.provider(|config| config.json.max_file_bytes = 64 * 1024);
    for (file, expression) in [
        // Doubles the node list per segment: 2^20 copies of the bottom array.
        ("deep.json", format!("${}", "[0,0]".repeat(20))),
        // Each node once per ancestor.
        ("deep.json", "$..*..*..*".to_owned()),
        // The whole document again for every candidate.
        ("flat.json", "$[?count($..*) > 0]".to_owned()),
    ] {
        let started = std::time::Instant::now();
        let result = ask(
            &provider,
            "json_path",
            json!({"file": file, "jsonpath": expression}),
        );
        assert_eq!(
            error_code(&result),
            "size_limit_exceeded",
            "{expression}: {result:?}"
        );
        assert!(
            result
                .error
                .as_ref()
                .expect("error")
                .message
                .contains("max_evaluation_cost"),
            "{expression}"
        );
        assert!(started.elapsed() < Duration::from_secs(2), "{expression}");
    }
    // The same shapes on a small document are fine.
    root.write("tiny.json", r#"[[1, [2]], {"a": [3]}]"#);
    let result = ask(
        &provider,
        "json_path",
        json!({"file": "tiny.json", "jsonpath": "$..*..*"}),
    );
    assert!(result.error.is_none(), "{:?}", result.error);
    let result = ask(
        &provider,
        "json_path",
        json!({"file": "tiny.json", "jsonpath": "$[?count($..*) > 0]"}),
    );
    assert!(result.error.is_none(), "{:?}", result.error);
}

#[test]
fn time_offsets_must_lie_within_23_59() {
    let provider = Root::new().provider(|_| {});
    for offset in ["+25:00", "-24:00", "+23:60", "+0530"] {
        let timestamp = format!("2024-01-01T00:00:00{offset}");
        for check in ["time_after", "time_before"] {
            let result = ask(&provider, check, json!({"timestamp": timestamp}));
            assert_eq!(error_code(&result), "invalid_params", "{check} {timestamp}");
        }
    }
    for (timestamp, after) in [
        ("2024-01-01T00:00:00+23:59", true),
        ("2024-03-09T16:00:00-23:59", false),
        ("2024-03-09 15:59:59Z", true),
    ] {
        let result = ask(&provider, "time_after", json!({"timestamp": timestamp}));
        assert_eq!(value(&result), json!(after), "{timestamp}");
    }
}

/// A loopback HTTP server answering `200 OK` / `hello` to `requests`
/// connections; its port.
#[cfg(feature = "http")]
fn http_server(requests: usize) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(requests) {
            let Ok(mut stream) = stream else { continue };
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let mut line = String::new();
            while reader.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
                if line == "\r\n" {
                    break;
                }
                line.clear();
            }
            let _ = stream.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
            );
        }
    });
    port
}

#[cfg(feature = "http")]
#[test]
fn http_destinations_follow_host_port_and_address_rules() {
    let port = http_server(3);
    let url = format!("http://127.0.0.1:{port}/health");
    let make = |hosts: &[String], private: bool| {
        Root::new().provider(|config| {
            config.http.allow_hosts = hosts.to_vec();
            config.http.allow_insecure_http = true;
            config.http.allow_private_addresses = private;
            config.http.timeout_ms = 2000;
        })
    };
    let exact = format!("127.0.0.1:{port}");
    // host:port allows that port only; a bare host the default port only.
    for (hosts, allowed) in [
        (vec!["127.0.0.1".to_owned()], false),
        (
            vec![format!("127.0.0.1:{}", port.wrapping_add(1).max(1))],
            false,
        ),
        (vec![exact.clone()], true),
        (vec!["localhost".to_owned(), exact.clone()], true),
    ] {
        let result = ask(&make(&hosts, true), "http_status", json!({"url": url}));
        if allowed {
            assert_eq!(value(&result), json!(200), "{hosts:?}");
        } else {
            assert_eq!(error_code(&result), "http_host_not_allowed", "{hosts:?}");
            let message = &result.error.as_ref().expect("error").message;
            assert!(message.contains(&format!("\"{exact}\"")), "{message}");
        }
    }
    // Loopback is refused unless allowed, after resolution (also by name).
    let refused = ask(
        &make(std::slice::from_ref(&exact), false),
        "http_status",
        json!({"url": url}),
    );
    assert_eq!(
        error_code(&refused),
        "http_address_not_allowed",
        "{refused:?}"
    );
    assert!(
        refused
            .error
            .as_ref()
            .expect("error")
            .message
            .contains("loopback")
    );
    let by_name = format!("http://localhost:{port}/");
    let refused = ask(
        &make(&[format!("localhost:{port}")], false),
        "http_status",
        json!({"url": by_name}),
    );
    assert_eq!(
        error_code(&refused),
        "http_address_not_allowed",
        "{refused:?}"
    );
    let result = ask(&make(&[exact], true), "http_body_hash", json!({"url": url}));
    assert_eq!(
        value(&result)["value"],
        json!("2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824")
    );
}
