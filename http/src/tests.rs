//! The HTTP layer's own tests (unit level: the decisions, not the sockets).

use crate::admit::*;
use crate::budget::*;
use crate::exchange::*;
use crate::reply::*;
use crate::route::*;
use crate::*;
use alloc::borrow::ToOwned;
use alloc::format;
use alloc::string::String;
use alloc::string::ToString;
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use core::net::{IpAddr, SocketAddr};
use core::net::{Ipv4Addr, Ipv6Addr};
use evidence_wire::dialect::McpRevision;
use evidence_wire::error::CanonicalError;
use evidence_wire::evidence::EvidenceResult;
use evidence_wire::server::{
    Dialect, DialectChoice, MessageHeaders, Server, ServerConfig, ServerEvent,
};
use serde_json::Value;

fn head<'a>(method: &'a str, path: &'a str) -> RequestHead<'a> {
    RequestHead {
        method,
        path,
        ..RequestHead::default()
    }
}

fn body_json(reply: &HttpReply) -> Value {
    serde_json::from_slice(&reply.body).expect("JSON body")
}

#[test]
fn routes_known_paths_and_methods() {
    assert_eq!(route("POST", "/rpc"), Route::Call(Endpoint::Rpc));
    assert_eq!(route("POST", "/mcp"), Route::Call(Endpoint::Mcp));
    assert_eq!(route("GET", "/healthz"), Route::Health);
    assert_eq!(route("HEAD", "/readyz"), Route::Ready);
    assert_eq!(
        route("GET", "/mcp"),
        Route::MethodNotAllowed { allow: "POST" }
    );
    assert_eq!(
        route("DELETE", "/rpc"),
        Route::MethodNotAllowed { allow: "POST" }
    );
    assert_eq!(
        route("POST", "/healthz"),
        Route::MethodNotAllowed { allow: "GET, HEAD" }
    );
    assert_eq!(
        route("post", "/rpc"),
        Route::MethodNotAllowed { allow: "POST" }
    );
    assert_eq!(route("POST", "/rpc/"), Route::NotFound);
    assert_eq!(route("GET", "/"), Route::NotFound);
}

#[test]
fn method_not_allowed_carries_allow_and_json() {
    let Admission::Reply(reply) = admit(&HttpPolicy::default(), &head("GET", "/mcp")) else {
        panic!("GET /mcp is refused");
    };
    assert_eq!(reply.status, 405);
    assert_eq!(reply.header("allow"), Some("POST"));
    assert_eq!(body_json(&reply)["error"]["code"], -32600);
}

#[test]
fn unknown_path_is_404_json() {
    let Admission::Reply(reply) = admit(&HttpPolicy::default(), &head("POST", "/nope")) else {
        panic!("refused");
    };
    assert_eq!(reply.status, 404);
    assert_eq!(reply.header("content-type"), Some("application/json"));
    assert_eq!(body_json(&reply)["error"]["code"], -32601);
}

#[test]
fn probes_answer_status_json() {
    for (path, status) in [("/healthz", "ok"), ("/readyz", "ready")] {
        let Admission::Reply(reply) = admit(&HttpPolicy::default(), &head("GET", path)) else {
            panic!("probe");
        };
        assert_eq!(reply.status, 200);
        assert_eq!(body_json(&reply)["status"], status);
    }
}

#[test]
fn status_comes_from_the_canonical_table() {
    for error in CanonicalError::ALL {
        assert_eq!(status_for(error), error.http_status());
    }
    assert_eq!(status_for(CanonicalError::PayloadTooLarge), 413);
    assert_eq!(status_for(CanonicalError::Unauthenticated), 401);
}

#[test]
fn secrets_compare_by_content_not_prefix() {
    assert!(secrets_equal(b"s3cret", b"s3cret"));
    assert!(!secrets_equal(b"s3cret", b"s3cre"));
    assert!(!secrets_equal(b"s3cret", b"s3cret "));
    assert!(!secrets_equal(b"s3cret", b"S3cret"));
    assert!(!secrets_equal(b"", b"x"));
    assert!(secrets_equal(b"", b""));
}

#[test]
fn bearer_header_parsing() {
    let token = Some("tok-123");
    assert_eq!(check_bearer(None, None), BearerCheck::NotRequired);
    assert_eq!(
        check_bearer(None, Some(b"Bearer x")),
        BearerCheck::NotRequired
    );
    assert_eq!(check_bearer(token, None), BearerCheck::Missing);
    assert_eq!(
        check_bearer(token, Some(b"Bearer tok-123")),
        BearerCheck::Accepted
    );
    assert_eq!(
        check_bearer(token, Some(b"bearer   tok-123 ")),
        BearerCheck::Accepted
    );
    assert_eq!(
        check_bearer(token, Some(b"BEARER tok-123")),
        BearerCheck::Accepted
    );
    assert_eq!(
        check_bearer(token, Some(b"Bearer tok-124")),
        BearerCheck::Invalid
    );
    assert_eq!(
        check_bearer(token, Some(b"Bearer tok-1234")),
        BearerCheck::Invalid
    );
    assert_eq!(
        check_bearer(token, Some(b"Basic dG9rLTEyMw==")),
        BearerCheck::Missing
    );
    assert_eq!(check_bearer(token, Some(b"Bearer")), BearerCheck::Missing);
    assert_eq!(
        check_bearer(token, Some(b"Bearertok-123")),
        BearerCheck::Missing
    );
    assert_eq!(check_bearer(token, Some(b"\xff\xfe")), BearerCheck::Missing);
}

#[test]
fn auth_refusal_has_challenge_and_canonical_body() {
    let policy = HttpPolicy {
        bearer_token: Some("tok".to_owned()),
        ..HttpPolicy::default()
    };
    let Admission::Reply(missing) = admit(&policy, &head("POST", "/rpc")) else {
        panic!("refused");
    };
    assert_eq!(missing.status, 401);
    assert_eq!(
        missing.header("www-authenticate"),
        Some(r#"Bearer realm="evidence-wire""#)
    );
    assert_eq!(body_json(&missing)["error"]["code"], -32004);
    let wrong = RequestHead {
        authorization: HeaderField::One(b"Bearer nope"),
        ..head("POST", "/rpc")
    };
    let Admission::Reply(wrong) = admit(&policy, &wrong) else {
        panic!("refused");
    };
    assert_eq!(wrong.status, 401);
    assert!(
        wrong
            .header("www-authenticate")
            .is_some_and(|value| value.contains("invalid_token"))
    );
    let right = RequestHead {
        authorization: HeaderField::One(b"Bearer tok"),
        ..head("POST", "/rpc")
    };
    assert!(matches!(admit(&policy, &right), Admission::Call(_)));
    // Probes stay open for orchestrators.
    assert!(matches!(
        admit(&policy, &head("GET", "/healthz")),
        Admission::Reply(HttpReply { status: 200, .. })
    ));
}

#[test]
fn origin_rules() {
    let policy = HttpPolicy {
        allowed_origins: vec!["https://Gate.Example.com".to_owned()],
        ..HttpPolicy::default()
    };
    assert!(origin_allowed(&policy, None));
    assert!(origin_allowed(&policy, Some(b"https://gate.example.com")));
    assert!(origin_allowed(&policy, Some(b"https://gate.example.com/")));
    assert!(!origin_allowed(
        &policy,
        Some(b"https://gate.example.com:8443")
    ));
    assert!(!origin_allowed(&policy, Some(b"http://gate.example.com")));
    assert!(!origin_allowed(&policy, Some(b"https://evil.example")));
    assert!(!origin_allowed(&policy, Some(b"null")));
    assert!(origin_allowed(&policy, Some(b"http://localhost:5173")));
    assert!(origin_allowed(&policy, Some(b"http://127.0.0.1")));
    assert!(origin_allowed(&policy, Some(b"http://[::1]:8080")));
    assert!(!origin_allowed(
        &policy,
        Some(b"http://localhost.evil.example")
    ));
    assert!(!origin_allowed(
        &policy,
        Some(b"http://localhost@evil.example")
    ));
    assert!(!origin_allowed(&policy, Some(b"http://127.0.0.1:99999x")));
    let strict = HttpPolicy {
        allow_loopback_origins: false,
        ..HttpPolicy::default()
    };
    assert!(!origin_allowed(&strict, Some(b"http://localhost:5173")));
    let refused = RequestHead {
        origin: HeaderField::One(b"https://evil.example"),
        ..head("POST", "/mcp")
    };
    let Admission::Reply(reply) = admit(&policy, &refused) else {
        panic!("refused");
    };
    assert_eq!(reply.status, 403);
    assert_eq!(body_json(&reply)["error"]["code"], -32003);
}

#[test]
fn loopback_bind_rule() {
    let v4 = |a, b, c, d| IpAddr::V4(Ipv4Addr::new(a, b, c, d));
    assert!(check_bind(v4(127, 0, 0, 1), false).is_ok());
    assert!(check_bind(v4(127, 1, 2, 3), false).is_ok());
    assert!(check_bind(IpAddr::V6(Ipv6Addr::LOCALHOST), false).is_ok());
    let mapped = IpAddr::V6(Ipv4Addr::new(127, 0, 0, 1).to_ipv6_mapped());
    assert!(check_bind(mapped, false).is_ok());
    let refused = check_bind(v4(0, 0, 0, 0), false).unwrap_err();
    assert!(refused.to_string().contains("bearer token"));
    assert!(check_bind(v4(192, 168, 1, 2), false).is_err());
    assert!(check_bind(IpAddr::V6(Ipv6Addr::UNSPECIFIED), false).is_err());
    assert!(check_bind(v4(0, 0, 0, 0), true).is_ok());
}

#[test]
fn sse_negotiation() {
    // The usual values skip the parse, with its answer.
    for usual in USUAL_ACCEPT {
        assert!(!ranges_want_sse(usual));
    }
    assert!(!wants_sse(None));
    assert!(wants_sse(Some(b"text/event-stream")));
    assert!(wants_sse(Some(b"Text/Event-Stream; charset=utf-8")));
    assert!(!wants_sse(Some(b"application/json, text/event-stream")));
    assert!(!wants_sse(Some(b"*/*")));
    assert!(wants_sse(Some(b"text/event-stream, application/json;q=0")));
    assert!(wants_sse(Some(
        b"text/event-stream, application/json;q=0.000"
    )));
    assert!(!wants_sse(Some(b"text/event-stream;q=0, application/json")));
    assert!(!wants_sse(Some(
        b"text/event-stream, application/json;q=0.5"
    )));
}

#[test]
fn sse_event_encoding() {
    let mut out = Vec::new();
    encode_sse_event(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#, &mut out);
    assert_eq!(
        out,
        b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n"
    );
    let mut multi = Vec::new();
    encode_sse_event(b"{\r\n\"a\":1\n}", &mut multi);
    assert_eq!(
        multi,
        b"event: message\ndata: {\ndata: \"a\":1\ndata: }\n\n"
    );
}

#[test]
fn body_limit_declared_and_counted() {
    let limit = BodyLimit::new(10);
    assert!(limit.check_declared(None).is_ok());
    assert!(limit.check_declared(Some(b"10")).is_ok());
    assert_eq!(
        limit.check_declared(Some(b"11")),
        Err(BodyTooLarge { limit: 10 })
    );
    assert!(
        limit
            .check_declared(Some(b"99999999999999999999999"))
            .is_err()
    );
    assert!(
        limit.check_declared(Some(b"abc")).is_ok(),
        "left to the HTTP parser"
    );
    let mut counted = BodyLimit::new(10);
    assert!(counted.accept(4).is_ok());
    assert!(counted.accept(6).is_ok());
    assert_eq!(counted.received(), 10);
    assert!(counted.accept(1).is_err());
    assert!(counted.accept(usize::MAX).is_err());
    let policy = HttpPolicy {
        max_body_bytes: 5,
        ..HttpPolicy::default()
    };
    let declared = RequestHead {
        content_length: HeaderField::One(b"6"),
        ..head("POST", "/rpc")
    };
    let Admission::Reply(reply) = admit(&policy, &declared) else {
        panic!("too large");
    };
    assert_eq!(reply.status, 413);
    assert_eq!(body_json(&reply)["error"]["code"], -32070);
    assert_eq!(
        body_json(&reply)["error"]["data"]["kind"],
        "payload_too_large"
    );
}

#[test]
fn mcp_headers() {
    let policy = HttpPolicy::default();
    let with = |session: Option<&'static [u8]>, version: Option<&'static [u8]>| {
        admit(
            &policy,
            &RequestHead {
                session_id: session.into(),
                protocol_version: version.into(),
                ..head("POST", "/rpc")
            },
        )
    };
    let Admission::Call(plan) = with(Some(b"abc-123"), Some(b"2025-06-18")) else {
        panic!("admitted");
    };
    assert_eq!(plan.session_id.as_deref(), Some("abc-123"));
    assert_eq!(plan.dialect, Some(Dialect::Mcp));
    let Admission::Call(plan) = with(None, None) else {
        panic!("admitted");
    };
    assert_eq!(plan.dialect, None);
    assert!(matches!(
        with(Some(b"has space"), None),
        Admission::Reply(HttpReply { status: 400, .. })
    ));
    assert!(matches!(
        with(None, Some(b"1999-01-01")),
        Admission::Reply(HttpReply { status: 400, .. })
    ));
    let Admission::Call(plan) = admit(&policy, &head("POST", "/mcp")) else {
        panic!("admitted");
    };
    assert_eq!(plan.dialect, Some(Dialect::Mcp));
    // The plan's dialect applies unless the configuration forces one.
    let listing = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    let mut forced = ServerConfig::default();
    forced.dialect = DialectChoice::Fixed(Dialect::DecisionGate);
    let forced = Arc::new(forced);
    let reply = Exchange::start(&forced, plan.clone(), listing).into_reply();
    assert!(body_json(&reply)["result"]["tools"][0]["input_schema"].is_object());
    let auto = Arc::new(ServerConfig::default());
    let reply = Exchange::start(&auto, plan, listing).into_reply();
    assert!(body_json(&reply)["result"]["tools"][0]["inputSchema"].is_object());
}

fn plan(endpoint: Endpoint, sse: bool) -> CallPlan {
    CallPlan {
        endpoint,
        // As `admit` decides: /mcp always speaks MCP.
        dialect: (endpoint == Endpoint::Mcp).then_some(Dialect::Mcp),
        revision: None,
        headers: MessageHeaders::default(),
        sse,
        session_id: Some("s-1".to_owned()),
        body_limit: BodyLimit::new(1024),
    }
}

fn run(endpoint: Endpoint, sse: bool, body: &[u8]) -> HttpReply {
    let plan = plan(endpoint, sse);
    let mut exchange = Exchange::start(&Arc::new(ServerConfig::default()), plan, body);
    while let Some(event) = exchange.poll_event() {
        if let ServerEvent::EvidenceQuery { ticket, .. } = event {
            let value = evidence_wire::evidence::EvidenceValue::json(&"hello").expect("value");
            exchange
                .server_mut()
                .respond(ticket, EvidenceResult::with_value(value))
                .expect("respond");
        }
    }
    assert!(exchange.is_finished());
    exchange.into_reply()
}

#[test]
fn exchange_answers_like_stdio() {
    let request = br#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#;
    let reply = run(Endpoint::Rpc, false, request);
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("mcp-session-id"), Some("s-1"));
    let mut stdio = Server::new(ServerConfig::default());
    let mut framed = request.to_vec();
    framed.push(b'\n');
    stdio.handle_input(&framed);
    let mut expected = stdio.poll_transmit().expect("stdio answer");
    assert_eq!(expected.pop(), Some(b'\n'));
    assert_eq!(reply.body, expected);
}

#[test]
fn exchange_accepts_pretty_printed_bodies() {
    let reply = run(
        Endpoint::Rpc,
        false,
        b"{\n  \"jsonrpc\": \"2.0\",\n  \"id\": 1,\n  \"method\": \"ping\"\n}",
    );
    assert_eq!(reply.status, 200);
    assert_eq!(body_json(&reply)["result"], serde_json::json!({}));
}

#[test]
fn exchange_notification_is_202_empty() {
    let reply = run(
        Endpoint::Mcp,
        false,
        br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    );
    assert_eq!(reply.status, 202);
    assert!(reply.body.is_empty());
    assert_eq!(reply.header("content-type"), None);
}

#[test]
fn exchange_error_statuses_per_endpoint() {
    let unknown = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"nope","arguments":{}}}"#;
    assert_eq!(run(Endpoint::Rpc, false, unknown).status, 404);
    let on_mcp = run(Endpoint::Mcp, false, unknown);
    assert_eq!(
        on_mcp.status, 200,
        "MCP SDK clients read JSON-RPC errors only on 200"
    );
    assert_eq!(body_json(&on_mcp)["error"]["code"], -32001);
    let garbage = b"not json";
    assert_eq!(run(Endpoint::Rpc, false, garbage).status, 400);
    assert_eq!(run(Endpoint::Mcp, false, garbage).status, 400);
    assert_eq!(run(Endpoint::Rpc, false, b"").status, 400);
}

#[test]
fn exchange_evidence_query_in_both_dialects() {
    let call = br#"{"jsonrpc":"2.0","id":"q","method":"tools/call","params":{"name":"evidence_query","arguments":{"query":{"provider_id":"p","check_id":"c"},"context":{"tenant_id":1,"namespace_id":1,"run_id":"r","scenario_id":"s","stage_id":"st","trigger_id":"t","trigger_time":{"kind":"unix_millis","value":1}}}}}"#;
    let rpc = body_json(&run(Endpoint::Rpc, false, call));
    assert_eq!(rpc["result"]["content"][0]["type"], "json");
    // Without MCP-Protocol-Version a request is taken to speak
    // 2025-03-26, which has no structuredContent.
    let mcp = body_json(&run(Endpoint::Mcp, false, call));
    assert_eq!(mcp["result"]["content"][0]["type"], "text");
    assert!(mcp["result"].get("structuredContent").is_none());
    // The header of a later revision brings it.
    let mut plan = plan(Endpoint::Mcp, false);
    plan.revision = Some(McpRevision::V2025_11_25);
    let config = Arc::new(ServerConfig::default());
    let mut exchange = Exchange::start(&config, plan, call);
    while let Some(event) = exchange.poll_event() {
        if let ServerEvent::EvidenceQuery { ticket, .. } = event {
            let value = evidence_wire::evidence::EvidenceValue::json(&"hello").expect("value");
            exchange
                .server_mut()
                .respond(ticket, EvidenceResult::with_value(value))
                .expect("respond");
        }
    }
    let mcp = body_json(&exchange.into_reply());
    assert!(mcp["result"]["structuredContent"].is_object());
}

#[test]
fn exchange_sse_reply_is_one_event() {
    let reply = run(
        Endpoint::Mcp,
        true,
        br#"{"jsonrpc":"2.0","id":9,"method":"ping"}"#,
    );
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("content-type"), Some("text/event-stream"));
    assert_eq!(
        reply.body,
        b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":9,\"result\":{}}\n\n"
    );
}

#[test]
fn fixed_replies_are_canonical_json() {
    let too_large = payload_too_large_reply(7);
    assert_eq!(too_large.status, 413);
    assert!(
        body_json(&too_large)["error"]["data"]["detail"]
            .as_str()
            .is_some_and(|detail| detail.contains('7'))
    );
    let overloaded = overloaded_reply(3);
    assert_eq!(overloaded.status, 503);
    assert_eq!(overloaded.header("retry-after"), Some("1"));
    assert_eq!(body_json(&overloaded)["error"]["code"], -32072);
    let unreadable = unreadable_body_reply("timed out");
    assert_eq!(unreadable.status, 400);
    assert_eq!(body_json(&unreadable)["error"]["code"], -32700);
}

#[test]
fn draining_is_not_ready_and_refuses_new_calls_retryably() {
    let policy = HttpPolicy::default();
    let draining = Lifecycle::Draining;
    let Admission::Reply(ready) = admit_during(&policy, &head("GET", "/readyz"), draining) else {
        panic!("a probe");
    };
    assert_eq!(ready.status, 503);
    assert_eq!(body_json(&ready)["status"], "draining");
    let Admission::Reply(alive) = admit_during(&policy, &head("GET", "/healthz"), draining) else {
        panic!("a probe");
    };
    assert_eq!(alive.status, 200, "still alive while draining");
    let Admission::Reply(refused) = admit_during(&policy, &head("POST", "/rpc"), draining) else {
        panic!("no new call while draining");
    };
    assert_eq!(refused.status, 503);
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert_eq!(body_json(&refused)["error"]["code"], -32072);
    assert_eq!(body_json(&refused)["error"]["data"]["retryable"], true);
    // Serving: the same requests are taken.
    assert!(matches!(
        admit(&policy, &head("GET", "/readyz")),
        Admission::Reply(HttpReply { status: 200, .. })
    ));
    assert!(matches!(
        admit(&policy, &head("POST", "/rpc")),
        Admission::Call(_)
    ));
    // Authentication still comes first while draining.
    let authenticated = HttpPolicy {
        bearer_token: Some("tok".to_owned()),
        ..HttpPolicy::default()
    };
    assert!(matches!(
        admit_during(&authenticated, &head("POST", "/rpc"), draining),
        Admission::Reply(HttpReply { status: 401, .. })
    ));
}

#[test]
fn metrics_are_off_public_or_behind_the_token() {
    let off = HttpPolicy::default();
    assert!(matches!(
        admit(&off, &head("GET", "/metrics")),
        Admission::Reply(HttpReply { status: 404, .. })
    ));
    let public = HttpPolicy {
        metrics: MetricsAccess::Public,
        bearer_token: Some("tok".to_owned()),
        ..HttpPolicy::default()
    };
    assert!(matches!(
        admit(&public, &head("GET", "/metrics")),
        Admission::Metrics
    ));
    assert!(matches!(
        admit(&public, &head("POST", "/metrics")),
        Admission::Reply(HttpReply { status: 405, .. })
    ));
    let authenticated = HttpPolicy {
        metrics: MetricsAccess::Authenticated,
        ..public.clone()
    };
    assert!(matches!(
        admit(&authenticated, &head("GET", "/metrics")),
        Admission::Reply(HttpReply { status: 401, .. })
    ));
    let with_token = RequestHead {
        authorization: HeaderField::One(b"Bearer tok"),
        ..head("GET", "/metrics")
    };
    assert!(matches!(
        admit(&authenticated, &with_token),
        Admission::Metrics
    ));
    assert!(matches!(
        admit_during(&authenticated, &with_token, Lifecycle::Draining),
        Admission::Metrics
    ));
    let reply = metrics_reply(b"# EOF\n".to_vec());
    assert_eq!(reply.header("content-type"), Some(CONTENT_TYPE_METRICS));
}

#[test]
fn a_proxied_request_needs_a_bearer_token() {
    let open = HttpPolicy::default();
    for (name, proxied_head) in [
        (
            "Forwarded",
            RequestHead {
                forwarded: HeaderField::One(b"for=192.0.2.7"),
                ..head("POST", "/rpc")
            },
        ),
        (
            "X-Forwarded-For",
            RequestHead {
                x_forwarded_for: HeaderField::One(b"192.0.2.7"),
                ..head("POST", "/rpc")
            },
        ),
        (
            "X-Real-IP",
            RequestHead {
                x_real_ip: HeaderField::One(b"192.0.2.7"),
                ..head("POST", "/mcp")
            },
        ),
    ] {
        let Admission::Reply(reply) = admit(&open, &proxied_head) else {
            panic!("{name}: refused");
        };
        assert_eq!(reply.status, 403, "{name}");
        let detail = body_json(&reply)["error"]["data"]["detail"].clone();
        assert!(
            detail.as_str().is_some_and(|d| d.contains(name)),
            "{detail}"
        );
        // With a token the usual checks apply instead.
        let guarded = HttpPolicy {
            bearer_token: Some("tok".to_owned()),
            ..HttpPolicy::default()
        };
        assert!(matches!(
            admit(&guarded, &proxied_head),
            Admission::Reply(HttpReply { status: 401, .. })
        ));
    }
    // The probes stay open.
    let probe = RequestHead {
        x_forwarded_for: HeaderField::One(b"192.0.2.7"),
        ..head("GET", "/readyz")
    };
    assert!(matches!(
        admit(&open, &probe),
        Admission::Reply(HttpReply { status: 200, .. })
    ));
    assert!(check_behind_proxy(true, false).is_err());
    assert!(check_behind_proxy(true, true).is_ok());
    assert!(check_behind_proxy(false, false).is_ok());
}

#[test]
fn behind_a_proxy_the_forwarded_host_and_origin_are_checked() {
    let policy = HttpPolicy {
        bearer_token: Some("tok".to_owned()),
        behind_proxy: true,
        allowed_hosts: vec!["gate.example.com".to_owned()],
        ..HttpPolicy::default()
    };
    let through = |forwarded: &'static [u8], origin: Option<&'static [u8]>| RequestHead {
        // nginx's default Host is the upstream's name.
        host: HeaderField::One(b"replicas"),
        forwarded: HeaderField::One(forwarded),
        origin: origin.map_or(HeaderField::Absent, HeaderField::One),
        authorization: HeaderField::One(b"Bearer tok"),
        server_address: loopback(8080),
        ..head("POST", "/rpc")
    };
    assert!(matches!(
        admit(
            &policy,
            &through(b"for=192.0.2.7;host=gate.example.com", None)
        ),
        Admission::Call(_)
    ));
    // The nearest proxy's element counts, not the client's own.
    assert!(matches!(
        admit(
            &policy,
            &through(
                b"host=gate.example.com, for=192.0.2.7;host=\"evil.example\"",
                None
            )
        ),
        Admission::Reply(HttpReply { status: 421, .. })
    ));
    assert!(matches!(
        admit(
            &policy,
            &through(
                b"for=192.0.2.7;host=gate.example.com",
                Some(b"http://localhost:3000")
            )
        ),
        Admission::Reply(HttpReply { status: 403, .. })
    ));
    let by_x_header = RequestHead {
        forwarded: HeaderField::Absent,
        x_forwarded_host: HeaderField::One(b"evil.example, gate.example.com"),
        ..through(b"", None)
    };
    assert!(matches!(admit(&policy, &by_x_header), Admission::Call(_)));
    let repeated = RequestHead {
        x_forwarded_host: HeaderField::Repeated(2),
        ..by_x_header
    };
    assert!(matches!(
        admit(&policy, &repeated),
        Admission::Reply(HttpReply { status: 400, .. })
    ));
    // Not behind a proxy: the raw Host must name the loopback bind.
    let direct = HttpPolicy {
        behind_proxy: false,
        ..policy.clone()
    };
    assert!(matches!(
        admit(
            &direct,
            &through(b"for=192.0.2.7;host=gate.example.com", None)
        ),
        Admission::Reply(HttpReply { status: 421, .. })
    ));
}

/// Issue 38 item 7: `X-Forwarded-Host` comes before `Forwarded`'s
/// `host=` (as the configuration and deployment documents say); when
/// both are sent they must agree, and `host=` is named once.
#[test]
fn forwarded_hosts_follow_the_documents_and_must_agree() {
    let policy = HttpPolicy {
        bearer_token: Some("tok".to_owned()),
        behind_proxy: true,
        allowed_hosts: vec!["gate.example.com".to_owned()],
        ..HttpPolicy::default()
    };
    let head_with =
        |x_forwarded: Option<&'static [u8]>, forwarded: Option<&'static [u8]>| RequestHead {
            host: HeaderField::One(b"replicas"),
            x_forwarded_host: x_forwarded.map_or(HeaderField::Absent, HeaderField::One),
            forwarded: forwarded.map_or(HeaderField::Absent, HeaderField::One),
            authorization: HeaderField::One(b"Bearer tok"),
            server_address: loopback(8080),
            ..head("POST", "/rpc")
        };
    let status = |head: &RequestHead<'_>| match admit(&policy, head) {
        Admission::Call(_) => 200,
        Admission::Reply(reply) => reply.status,
        Admission::Metrics => 0,
    };
    // X-Forwarded-Host is read first.
    let first = head_with(Some(b"gate.example.com"), None);
    assert_eq!(forwarded_host(&first), Ok(Some(&b"gate.example.com"[..])));
    assert_eq!(status(&first), 200);
    // Both, agreeing (case aside): served.
    let agreeing = head_with(
        Some(b"Gate.Example.com"),
        Some(b"for=192.0.2.7;host=gate.example.com"),
    );
    assert_eq!(status(&agreeing), 200);
    // Both, disagreeing: refused, whichever is the allowed one.
    for (x_forwarded, forwarded) in [
        (
            &b"gate.example.com"[..],
            &b"for=192.0.2.7;host=evil.example"[..],
        ),
        (
            &b"evil.example"[..],
            &b"for=192.0.2.7;host=gate.example.com"[..],
        ),
    ] {
        let head = RequestHead {
            x_forwarded_host: HeaderField::One(x_forwarded),
            forwarded: HeaderField::One(forwarded),
            ..head_with(None, None)
        };
        assert!(matches!(
            forwarded_host(&head),
            Err(ForwardedHostError::Disagree(..))
        ));
        assert_eq!(status(&head), 400);
    }
    // host= twice in the element: refused.
    let twice = head_with(
        None,
        Some(b"for=192.0.2.7;host=gate.example.com;host=evil.example"),
    );
    assert_eq!(
        forwarded_host(&twice),
        Err(ForwardedHostError::DuplicateHost)
    );
    assert_eq!(status(&twice), 400);
}

/// Issue 38 item 6: nginx's stock `proxy_pass` adds no forwarding
/// header and rewrites `Host` to the upstream's address, but speaks
/// HTTP/1.0: without a bearer token such a request is refused.
#[test]
fn an_http_1_0_request_counts_as_forwarded() {
    let open = HttpPolicy::default();
    let stock_nginx = RequestHead {
        host: HeaderField::One(b"127.0.0.1:8080"),
        server_address: loopback(8080),
        http_1_0: true,
        ..head("POST", "/rpc")
    };
    let Admission::Reply(reply) = admit(&open, &stock_nginx) else {
        panic!("an HTTP/1.0 request to a token-less server must be refused");
    };
    assert_eq!(reply.status, 403);
    assert!(String::from_utf8_lossy(&reply.body).contains("HTTP/1.0"));
    let local = RequestHead {
        http_1_0: false,
        ..stock_nginx
    };
    assert!(matches!(admit(&open, &local), Admission::Call(_)));
    // With a token, HTTP/1.0 is served like any request.
    let guarded = HttpPolicy {
        bearer_token: Some("tok".to_owned()),
        ..HttpPolicy::default()
    };
    let with_token = RequestHead {
        authorization: HeaderField::One(b"Bearer tok"),
        ..stock_nginx
    };
    assert!(matches!(admit(&guarded, &with_token), Admission::Call(_)));
}

#[test]
fn an_expired_exchange_is_a_retryable_503() {
    let plan = plan(Endpoint::Mcp, false);
    let config = Arc::new(ServerConfig::default());
    let body = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"evidence_query","arguments":{"query":{"provider_id":"p","check_id":"c"},"context":{"tenant_id":1,"namespace_id":1,"run_id":"r","scenario_id":"s","stage_id":"st","trigger_id":"t","trigger_time":{"kind":"unix_millis","value":0}}}}}"#;
    let mut exchange = Exchange::start(&config, plan, body);
    while exchange.poll_event().is_some() {}
    assert_eq!(exchange.in_flight(), 1);
    assert_eq!(exchange.expire(), 1);
    assert!(exchange.is_finished());
    let reply = exchange.into_reply();
    assert_eq!(reply.status, 503);
    assert_eq!(reply.header("retry-after"), Some("1"));
    let answer = body_json(&reply);
    assert_eq!(answer["id"], 7);
    assert_eq!(answer["error"]["code"], -32072);
}

fn loopback(port: u16) -> Option<SocketAddr> {
    Some(SocketAddr::from(([127, 0, 0, 1], port)))
}

#[test]
fn header_fields_count_every_value() {
    let none: [&[u8]; 0] = [];
    assert_eq!(HeaderField::from_values(none), HeaderField::Absent);
    assert_eq!(
        HeaderField::from_values([b"a".as_slice()]),
        HeaderField::One(b"a")
    );
    assert_eq!(
        HeaderField::from_values([b"a".as_slice(), b"a", b"b"]),
        HeaderField::Repeated(3)
    );
    assert_eq!(HeaderField::Repeated(2).value(), None);
    assert_eq!(
        HeaderField::from(Some(b"x".as_slice())).value(),
        Some(&b"x"[..])
    );
}

#[test]
fn repeated_singleton_headers_are_400_naming_the_header() {
    let policy = HttpPolicy {
        bearer_token: Some("tok".to_owned()),
        ..HttpPolicy::default()
    };
    let good = RequestHead {
        host: HeaderField::One(b"127.0.0.1:8080"),
        authorization: HeaderField::One(b"Bearer tok"),
        origin: HeaderField::One(b"http://localhost:8080"),
        content_length: HeaderField::One(b"2"),
        protocol_version: HeaderField::One(b"2025-06-18"),
        session_id: HeaderField::One(b"s"),
        server_address: loopback(8080),
        ..head("POST", "/mcp")
    };
    assert!(matches!(admit(&policy, &good), Admission::Call(_)));
    type Repeat = fn(&mut RequestHead<'static>);
    let cases: [(&str, Repeat); 6] = [
        ("Host", |head| head.host = HeaderField::Repeated(2)),
        ("Origin", |head| head.origin = HeaderField::Repeated(2)),
        ("Authorization", |head| {
            head.authorization = HeaderField::Repeated(2);
        }),
        ("Content-Length", |head| {
            head.content_length = HeaderField::Repeated(2);
        }),
        ("MCP-Protocol-Version", |head| {
            head.protocol_version = HeaderField::Repeated(2);
        }),
        ("Mcp-Session-Id", |head| {
            head.session_id = HeaderField::Repeated(2);
        }),
    ];
    for (name, repeat) in cases {
        let mut repeated = good;
        repeat(&mut repeated);
        let Admission::Reply(reply) = admit(&policy, &repeated) else {
            panic!("{name} twice is refused");
        };
        assert_eq!(reply.status, 400, "{name}");
        assert_eq!(body_json(&reply)["error"]["code"], -32600, "{name}");
        let detail = body_json(&reply)["error"]["data"]["detail"].to_string();
        assert!(
            detail.contains(&format!("the {name} header appears 2 times")),
            "{detail}"
        );
    }
    // Probes are answered whatever the headers.
    let probe = RequestHead {
        host: HeaderField::Repeated(2),
        ..head("GET", "/healthz")
    };
    assert!(matches!(
        admit(&policy, &probe),
        Admission::Reply(HttpReply { status: 200, .. })
    ));
}

#[test]
fn host_rules_on_a_loopback_bind() {
    let policy = HttpPolicy::default();
    let server = loopback(8080);
    for host in [
        "127.0.0.1:8080",
        "localhost:8080",
        "LocalHost:8080",
        "[::1]:8080",
        "127.0.0.2:8080",
        " 127.0.0.1:8080 ",
    ] {
        assert!(
            host_allowed(&policy, server, Some(host.as_bytes())),
            "{host}"
        );
    }
    for host in [
        "evil.example:8080",
        "evil.example",
        "127.0.0.1:8081",
        "localhost:80",
        "localhost",
        "localhost.:8080",
        "localhost:8080:8080",
        "localhost:",
        "localhost:99999",
        "[localhost]:8080",
        "[::1]8080",
        "::1:8080",
        "127.1:8080",
        "10.0.0.1:8080",
        "",
    ] {
        assert!(
            !host_allowed(&policy, server, Some(host.as_bytes())),
            "{host:?}"
        );
    }
    assert!(!host_allowed(&policy, server, Some(b"localhost\xff:8080")));
    assert!(
        !host_allowed(&policy, server, None),
        "a missing Host is refused"
    );
    // Port 80: a Host without a port names it.
    assert!(host_allowed(&policy, loopback(80), Some(b"localhost")));
    assert!(host_allowed(&policy, loopback(80), Some(b"127.0.0.1:80")));
    let v6 = Some(SocketAddr::from((Ipv6Addr::LOCALHOST, 9000)));
    assert!(host_allowed(&policy, v6, Some(b"[::1]:9000")));
    assert!(host_allowed(&policy, v6, Some(b"localhost:9000")));
    assert!(!host_allowed(&policy, v6, Some(b"[::2]:9000")));
    // Configured names, compared whole and ignoring case.
    let configured = HttpPolicy {
        allowed_hosts: vec!["gate.internal:8080".to_owned(), "gate.internal".to_owned()],
        ..HttpPolicy::default()
    };
    assert!(host_allowed(
        &configured,
        server,
        Some(b"Gate.Internal:8080")
    ));
    assert!(host_allowed(&configured, server, Some(b"gate.internal")));
    assert!(host_allowed(&configured, server, Some(b"localhost:8080")));
    assert!(!host_allowed(
        &configured,
        server,
        Some(b"gate.internal:9090")
    ));
    assert!(!host_allowed(
        &configured,
        server,
        Some(b"evil.gate.internal:8080")
    ));
}

#[test]
fn host_rules_elsewhere() {
    let public = Some(SocketAddr::from(([0, 0, 0, 0], 8443)));
    let open = HttpPolicy::default();
    assert!(host_allowed(&open, public, Some(b"anything.example")));
    assert!(host_allowed(&open, None, None));
    let listed = HttpPolicy {
        allowed_hosts: vec!["gate.example.com".to_owned()],
        ..HttpPolicy::default()
    };
    assert!(host_allowed(&listed, public, Some(b"gate.example.com")));
    assert!(!host_allowed(&listed, public, Some(b"other.example.com")));
    assert!(!host_allowed(&listed, public, None));
}

#[test]
fn wrong_host_is_421_with_the_forbidden_body() {
    let policy = HttpPolicy::default();
    let rebound = RequestHead {
        host: HeaderField::One(b"attacker.example:8080"),
        server_address: loopback(8080),
        ..head("POST", "/mcp")
    };
    let Admission::Reply(reply) = admit(&policy, &rebound) else {
        panic!("refused");
    };
    assert_eq!(reply.status, 421);
    assert_eq!(body_json(&reply)["error"]["code"], -32003);
    assert_eq!(body_json(&reply)["error"]["data"]["kind"], "forbidden");
    assert!(
        body_json(&reply)["error"]["data"]["detail"]
            .as_str()
            .is_some_and(|detail| detail.contains("attacker.example:8080")
                && detail.contains("allowed_hosts"))
    );
    let missing = RequestHead {
        server_address: loopback(8080),
        ..head("POST", "/mcp")
    };
    let Admission::Reply(reply) = admit(&policy, &missing) else {
        panic!("refused");
    };
    assert_eq!(reply.status, 421);
    let right = RequestHead {
        host: HeaderField::One(b"localhost:8080"),
        server_address: loopback(8080),
        ..head("POST", "/mcp")
    };
    assert!(matches!(admit(&policy, &right), Admission::Call(_)));
}

#[test]
fn single_answers_only() {
    assert!(check_single_answer(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#).is_ok());
    assert!(check_single_answer(b"").is_ok(), "left to the parser");
    assert_eq!(check_single_answer(b" \r\n[{}]"), Err(BatchAnswer));
    assert_eq!(check_single_answer(b"[]"), Err(BatchAnswer));
    assert!(BatchAnswer.to_string().contains("batch"));
}

fn budget(max_connections: usize, max_waiting: usize) -> ConnectionBudget {
    ConnectionBudget::new(ConnectionLimits {
        max_connections,
        max_waiting,
        pressure_head_ms: 100,
    })
}

/// Opens a connection at `now` whose first read finds half a head.
fn half_head(budget: &mut ConnectionBudget, now: u64) -> (ConnectionId, Vec<ConnectionId>) {
    let (id, mut shed) = budget.open(now).expect("room");
    shed.extend(budget.first_read_done(id, now));
    (id, shed)
}

#[test]
fn connection_budget_sheds_the_longest_waiting_once_it_waited_enough() {
    let mut budget = budget(4, 2);
    let (a, shed) = half_head(&mut budget, 0);
    assert!(shed.is_empty());
    let (b, shed) = half_head(&mut budget, 10);
    assert!(shed.is_empty());
    // Over the waiting budget, but nobody has waited 100 ms yet.
    let (c, shed) = half_head(&mut budget, 50);
    assert!(shed.is_empty());
    assert_eq!(budget.waiting_count(), 3);
    // Now the oldest has: it gives way to the next arrival.
    let (d, shed) = half_head(&mut budget, 100);
    assert_eq!(shed, vec![a]);
    assert!(!budget.head_received(a), "a shed connection is not served");
    assert_eq!((budget.open_count(), budget.waiting_count()), (3, 3));
    // Full: the next connection waits until someone has waited enough.
    let (e, shed) = budget.open(105).expect("a free slot");
    assert!(shed.is_empty());
    assert_eq!(budget.room(105), Room::At(110), "b waited since 10");
    assert!(budget.open(109).is_none());
    let (f, shed) = budget.open(110).expect("room by shedding b");
    assert_eq!(shed, vec![b]);
    // Connections in a request are never shed.
    assert!(budget.head_received(c));
    assert!(budget.head_received(d));
    assert!(budget.head_received(e));
    assert!(budget.head_received(f), "a head complete at the first read");
    assert!(budget.first_read_done(f, 110).is_empty());
    assert_eq!((budget.open_count(), budget.waiting_count()), (4, 0));
    assert_eq!(budget.room(10_000), Room::AfterClose);
    assert!(budget.open(10_000).is_none());
    // An idle keep-alive connection waits like a half head.
    assert!(budget.request_done(c, 200).is_empty());
    assert_eq!(budget.room(250), Room::At(300));
    let (_, shed) = budget.open(300).expect("room by shedding idle c");
    assert_eq!(shed, vec![c]);
    budget.close(d);
    budget.close(d);
    assert_eq!(budget.open_count(), 3);
    assert_eq!(budget.room(300), Room::Now);
    assert_eq!(budget.shed_count(), 3);
}

#[test]
fn fresh_connections_are_never_shed() {
    // A burst of arrivals: none has been read yet, so none is shed,
    // however long they have been open.
    let mut budget = budget(3, 1);
    let fresh: Vec<ConnectionId> = (0..3).map(|_| budget.open(0).expect("room").0).collect();
    assert_eq!(budget.room(1_000), Room::AfterClose);
    // The first read of each: a whole head is served; half heads wait.
    assert!(budget.head_received(fresh[2]));
    assert!(budget.first_read_done(fresh[0], 1_000).is_empty());
    assert!(budget.first_read_done(fresh[1], 1_050).is_empty());
    assert!(budget.first_read_done(fresh[1], 1_050).is_empty(), "once");
    assert_eq!(budget.room(1_050), Room::At(1_100));
    // Over the waiting budget: the excess goes once it waited enough,
    // at the next event.
    assert_eq!(budget.request_done(fresh[2], 1_100), vec![fresh[0]]);
    // Limits are clamped to something usable.
    let mut tiny = ConnectionBudget::new(ConnectionLimits {
        max_connections: 0,
        max_waiting: 0,
        pressure_head_ms: 0,
    });
    assert_eq!(tiny.limits().max_connections, 1);
    let (first, _) = tiny.open(0).expect("one slot");
    assert!(tiny.open(0).is_none(), "fresh: not shed");
    assert!(tiny.first_read_done(first, 0).is_empty());
    let (_, shed) = tiny.open(0).expect("by shedding");
    assert_eq!(shed, vec![first]);
}

/// Mounted at any path: a POST is a call (MCP statuses for an MCP client,
/// Decision Gate's for any other caller), anything else `405`.
#[test]
fn a_mounted_layer_routes_by_method_and_caller() {
    let policy = HttpPolicy {
        routing: Routing::Mounted,
        ..HttpPolicy::default()
    };
    let at = |method, accept: Option<&'static [u8]>, version: HeaderField<'static>| RequestHead {
        method,
        path: "/evidence",
        accept,
        protocol_version: version,
        ..RequestHead::default()
    };
    assert_eq!(
        route_for(&policy, &at("POST", None, HeaderField::Absent)),
        Route::Call(Endpoint::Rpc)
    );
    assert_eq!(
        route_for(
            &policy,
            &at(
                "POST",
                Some(b"application/json, text/event-stream"),
                HeaderField::Absent
            )
        ),
        Route::Call(Endpoint::Mcp)
    );
    assert_eq!(
        route_for(&policy, &at("POST", None, HeaderField::One(b"2025-11-25"))),
        Route::Call(Endpoint::Mcp)
    );
    assert_eq!(
        route_for(&policy, &at("GET", None, HeaderField::Absent)),
        Route::MethodNotAllowed { allow: "POST" }
    );
    // The standalone server still routes by path.
    let standalone = HttpPolicy::default();
    assert_eq!(
        route_for(&standalone, &at("POST", None, HeaderField::Absent)),
        Route::NotFound
    );
}
