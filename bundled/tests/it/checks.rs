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
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use evidence_wire::evidence::{
    EvidenceContext, EvidenceQuery, EvidenceResult, EvidenceValue, TriggerTime,
};
use evidence_wire_bundled::{BundledProvider, MAX_RESULT_DEPTH};
use evidence_wire_config::BundledConfig;
use proptest::prelude::*;
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

fn ask_at(provider: &BundledProvider, check: &str, params: Value, trigger: i64) -> EvidenceResult {
    let query = EvidenceQuery::new("evidence-wire", check).with_params(params);
    let context = EvidenceContext::adhoc(TriggerTime::UnixMillis(trigger));
    provider.answer(&query, &context)
}

/// `time_after` and `time_before` answer as a threshold of exactly
/// `millis` (unix milliseconds) must: neither at `millis`, after from
/// `millis + 1`, before up to `millis - 1`.
fn assert_threshold(provider: &BundledProvider, timestamp: &Value, millis: i64) {
    for (trigger, after, before) in [
        (millis - 1, false, true),
        (millis, false, false),
        (millis + 1, true, false),
    ] {
        for (check, expected) in [("time_after", after), ("time_before", before)] {
            let result = ask_at(provider, check, json!({"timestamp": timestamp}), trigger);
            assert_eq!(
                value(&result),
                json!(expected),
                "{check} {timestamp} at {trigger}: the threshold must be {millis}"
            );
        }
    }
}

/// 0000-01-01T00:00:00Z and 9999-12-31T23:59:59.999Z in unix milliseconds:
/// the instants an RFC 3339 date-time can name in UTC.
const FIRST_RFC3339_MILLIS: i64 = -62_167_219_200_000;
const LAST_RFC3339_MILLIS: i64 = 253_402_300_799_999;

/// The error message of a refused timestamp (asserting `invalid_params`).
fn refusal(provider: &BundledProvider, timestamp: &Value) -> String {
    let mut messages = Vec::new();
    for check in ["time_after", "time_before"] {
        let result = ask(provider, check, json!({"timestamp": timestamp}));
        assert_eq!(error_code(&result), "invalid_params", "{check} {timestamp}");
        messages.push(result.error.expect("error").message);
    }
    assert_eq!(messages[0], messages[1]);
    messages.swap_remove(0)
}

/// Issue 38 item 13: the whole RFC 3339 `date-time` grammar within
/// 0000-01-01T00:00:00Z..=9999-12-31T23:59:59.999999999Z, fractions of
/// any length truncated (never rounded) to milliseconds, and leap seconds
/// as Decision Gate's `time` crate reads them.
#[test]
fn every_rfc3339_date_time_in_range_is_read_exactly() {
    let provider = Root::new().provider(|_| {});
    for (timestamp, millis) in [
        // The ends of the range (jiff's own range ends a day earlier).
        ("9999-12-31T23:59:59Z", LAST_RFC3339_MILLIS - 999),
        ("9999-12-31T23:59:59.999999999Z", LAST_RFC3339_MILLIS),
        (
            "9999-12-31T23:59:59.999999999999999999999Z",
            LAST_RFC3339_MILLIS,
        ),
        ("9999-12-31t23:59:59.9999z", LAST_RFC3339_MILLIS),
        ("9999-12-31T23:59:59.999999999+00:00", LAST_RFC3339_MILLIS),
        ("9999-12-31T23:59:59.999999999-00:00", LAST_RFC3339_MILLIS),
        (
            "9999-12-31T23:59:59+23:59",
            LAST_RFC3339_MILLIS - 999 - 86_340_000,
        ),
        ("0000-01-01T00:00:00Z", FIRST_RFC3339_MILLIS),
        (
            "0000-01-01T00:00:00-23:59",
            FIRST_RFC3339_MILLIS + 86_340_000,
        ),
        (
            "0000-03-01T00:00:00Z",
            FIRST_RFC3339_MILLIS + 60 * 86_400_000,
        ), // 0000 is a leap year
        // Fractions of any length: truncated, never rounded up.
        ("2024-01-01T00:00:00.1234567891234Z", 1_704_067_200_123),
        (
            "2024-01-01T00:00:00.99999999999999999999Z",
            1_704_067_200_999,
        ),
        ("2024-01-01T00:00:00.0009Z", 1_704_067_200_000),
        ("2024-01-01T00:00:00.5Z", 1_704_067_200_500),
        ("2024-01-01T05:29:59.9999999999+05:30", 1_704_067_199_999),
        ("2024-01-01 00:00:00Z", 1_704_067_200_000),
        // Before 1970 truncation is toward the past too (not toward zero).
        ("1969-12-31T23:59:59.9999Z", -1),
        ("1969-12-31T23:59:59.999999999999Z", -1),
        ("1969-12-31T23:59:59.0001Z", -1_000),
        ("1970-01-01T00:00:00.0009Z", 0),
        // Leap seconds: the last second of a month in UTC, read as the
        // last millisecond before the next minute (whatever its fraction).
        ("1998-12-31T23:59:60Z", 915_148_799_999),
        ("1998-12-31T18:59:60-05:00", 915_148_799_999),
        ("1999-01-01T05:29:60+05:30", 915_148_799_999),
        ("2016-12-31T23:59:60.5Z", 1_483_228_799_999),
        ("2015-06-30T23:59:60.000Z", 1_435_708_799_999),
        ("9999-12-31T23:59:60Z", LAST_RFC3339_MILLIS),
        ("2024-02-29T12:00:00Z", 1_709_208_000_000),
    ] {
        assert_threshold(&provider, &json!(timestamp), millis);
    }
    for (timestamp, why) in [
        // Offsets that move the instant out of the range.
        (
            "9999-12-31T23:59:59-00:01",
            "9999-12-31T23:59:59.999999999Z",
        ),
        (
            "9999-12-31T23:00:00-23:59",
            "9999-12-31T23:59:59.999999999Z",
        ),
        ("0000-01-01T00:00:00+00:01", "0000-01-01T00:00:00Z"),
        ("0000-01-01T23:58:59.999+23:59", "0000-01-01T00:00:00Z"),
        (
            "9999-12-31T23:59:60-00:01",
            "9999-12-31T23:59:59.999999999Z",
        ),
        // Leap seconds elsewhere than at the end of a month in UTC.
        ("2024-01-01T12:00:60Z", "leap second"),
        ("1998-12-31T23:59:60-05:00", "leap second"),
        ("1998-12-30T23:59:60Z", "leap second"),
        // Calendar and clock fields.
        ("2023-02-29T00:00:00Z", "day"),
        ("2024-04-31T00:00:00Z", "day"),
        ("2024-00-10T00:00:00Z", "month"),
        ("2024-13-01T00:00:00Z", "month"),
        ("2024-01-00T00:00:00Z", "day"),
        ("2024-01-01T24:00:00Z", "hour"),
        ("2024-01-01T23:60:00Z", "minute"),
        ("2024-01-01T23:59:61Z", "second"),
    ] {
        let message = refusal(&provider, &json!(timestamp));
        assert!(message.contains(why), "{timestamp}: {message}");
        assert!(message.contains(timestamp), "{timestamp}: {message}");
    }
}

/// JSON Schema calls `1000.0` (and `1e3`) an integer, so the params schema
/// (`"type": ["integer", "string"]`) lets it through: the check reads it as
/// that integer, and refuses a fraction as the schema does.
#[test]
fn a_number_without_a_fraction_is_an_integer_timestamp() {
    let provider = Root::new().provider(|_| {});
    for (text, millis) in [
        ("1000.0", 1000),
        ("1e3", 1000),
        ("1.0E3", 1000),
        ("-1000.000", -1000),
        ("-0.0", 0),
        ("1893456000000.0", 1_893_456_000_000),
    ] {
        let number: Value = serde_json::from_str(text).expect("JSON");
        assert!(number.is_f64(), "{text} reads as a float");
        assert_threshold(&provider, &number, millis);
    }
    for text in ["1000.5", "-0.25", "1e-3", "1e19", "-1e19", "1e300"] {
        let number: Value = serde_json::from_str(text).expect("JSON");
        let message = refusal(&provider, &number);
        assert!(message.contains(&number.to_string()), "{text}: {message}");
    }
}

/// Days since 1970-01-01 as a proleptic Gregorian (year, month, day)
/// (Howard Hinnant's `civil_from_days`): the test's own calendar, not the
/// provider's.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Any instant of the range, written in RFC 3339 at any offset with a
    /// fraction of any length, reads as that instant truncated to the
    /// milliseconds the fraction names.
    #[test]
    fn rfc3339_spellings_read_as_their_instant(
        seconds in (FIRST_RFC3339_MILLIS / 1000)..=(LAST_RFC3339_MILLIS / 1000),
        nanos in 0i64..1_000_000_000,
        offset_minutes in -1439i64..=1439,
        digits in 0usize..=24,
        extra in "[0-9]{15}",
        separator in prop::sample::select(vec!['T', 't', ' ']),
        utc in prop::sample::select(vec!["Z", "z", "+00:00", "-00:00", ""]),
    ) {
        let offset_minutes = if utc.is_empty() { offset_minutes } else { 0 };
        let local = seconds + offset_minutes * 60;
        let (year, month, day) = civil_from_days(local.div_euclid(86_400));
        // Not every instant can be written at every offset.
        prop_assume!((0..=9999).contains(&year));
        let time_of_day = local.rem_euclid(86_400);
        let (hour, minute, second) = (time_of_day / 3600, time_of_day / 60 % 60, time_of_day % 60);
        let nine = format!("{nanos:09}");
        let fraction = if digits <= 9 {
            nine[..digits].to_owned()
        } else {
            format!("{nine}{}", &extra[..digits - 9])
        };
        let dot = if digits == 0 { "" } else { "." };
        let offset = if utc.is_empty() {
            let sign = if offset_minutes < 0 { '-' } else { '+' };
            let magnitude = offset_minutes.abs();
            format!("{sign}{:02}:{:02}", magnitude / 60, magnitude % 60)
        } else {
            utc.to_owned()
        };
        let text = format!(
            "{year:04}-{month:02}-{day:02}{separator}{hour:02}:{minute:02}:{second:02}{dot}{fraction}{offset}"
        );
        let written_millis = if digits >= 3 {
            nanos / 1_000_000
        } else {
            let unit = 10i64.pow(u32::try_from(3 - digits).expect("small"));
            nanos / 1_000_000 / unit * unit
        };
        static PROVIDER: OnceLock<BundledProvider> = OnceLock::new();
        let provider = PROVIDER
            .get_or_init(|| BundledProvider::new(&BundledConfig::default()).expect("provider"));
        assert_threshold(provider, &json!(text), seconds * 1000 + written_millis);
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
