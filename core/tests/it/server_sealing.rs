//! What the server does to an answer before it goes out (`Server::respond`):
//! the `evidence_hash` is computed under the profile the connection's peer
//! verifies with (Decision Gate's own canonicalization on a Decision Gate
//! connection, RFC 8785 after the MCP handshake), a configured key signs,
//! and an answer the caller would drop (larger than the frame limit, nested
//! deeper than the envelope depth limit) is replaced by an EvidenceResult
//! error naming the limit.
//!
//! The expected hashes and signatures are Decision Gate's own (worked
//! examples in `spec/evidence.md` and `spec/guides/decision-gate.md`).

use evidence_wire::canonical::Profile;
use evidence_wire::dialect::HashProfile;
use evidence_wire::evidence::{self, EvidenceResult, EvidenceSigner, EvidenceValue, TrustPolicy};
use evidence_wire::server::{Server, ServerConfig, ServerEvent, Ticket};
use serde_json::Value;

/// Decision Gate's first message: `tools/call` of `evidence_query`, no handshake.
const DG_CALL: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"evidence_query","arguments":{"query":{"provider_id":"stub","check_id":"probe","params":{"mode":"plain"}},"context":{"tenant_id":1,"namespace_id":1,"run_id":"run-1","scenario_id":"s","stage_id":"st","trigger_id":"t","trigger_time":{"kind":"unix_millis","value":1710000000000},"correlation_id":null}}}}"#;

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;

fn framed(body: &str) -> Vec<u8> {
    format!("Content-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
}

/// Sends Decision Gate's call (after an MCP handshake when `mcp`), answers
/// it with `result`, and returns the EvidenceResult as the caller reads it.
fn answer(config: ServerConfig, mcp: bool, result: EvidenceResult) -> Value {
    let mut server = Server::new(config);
    if mcp {
        server.handle_input(&framed(INITIALIZE));
    }
    server.handle_input(&framed(DG_CALL));
    let ticket = query_ticket(&mut server);
    server.respond(ticket, result).expect("ticket in flight");
    let reply = last_reply(&mut server);
    if mcp {
        reply["result"]["structuredContent"].clone()
    } else {
        reply["result"]["content"][0]["json"].clone()
    }
}

fn query_ticket(server: &mut Server) -> Ticket {
    let mut ticket = None;
    while let Some(event) = server.poll_event() {
        if let ServerEvent::EvidenceQuery { ticket: issued, .. } = event {
            ticket = Some(issued);
        }
    }
    ticket.expect("an evidence query")
}

/// The last JSON-RPC message written, its Content-Length header removed.
fn last_reply(server: &mut Server) -> Value {
    let mut last = Vec::new();
    while let Some(bytes) = server.poll_transmit() {
        last = bytes;
    }
    let text = String::from_utf8(last).expect("utf-8");
    let body = text.split_once("\r\n\r\n").expect("a framed reply").1;
    serde_json::from_str(body).expect("JSON")
}

fn json_result(text: &str) -> EvidenceResult {
    EvidenceResult::with_value(EvidenceValue::json_text(text).expect("JSON"))
}

fn hash_of(answer: &Value) -> &str {
    answer["evidence_hash"]["value"]
        .as_str()
        .expect("evidence_hash.value")
}

/// A value on which Decision Gate's canonicalization and RFC 8785 differ
/// (member order of `"a b"`, `"a!"`, `"a"`, `"ab"`).
const KEY_ORDER: &str = r#"{"a":1,"a b":2,"a!":3,"ab":4}"#;
/// Decision Gate's hash of [`KEY_ORDER`] (wire-facts §1).
const KEY_ORDER_DG_HASH: &str = "89ed29440c9fd56dfbfe957bfe2126ad4c4059916d27ffa8ad15b6bdaeaf92ba";

#[test]
fn a_decision_gate_connection_gets_decision_gates_hash() {
    let answer = answer(ServerConfig::default(), false, json_result(KEY_ORDER));
    assert_eq!(hash_of(&answer), KEY_ORDER_DG_HASH);
    // And Decision Gate's integer rule: beyond 2^53 printed verbatim.
    let answer = answer_of(r#"{"a b":1,"a":2,"n":9007199254740993}"#);
    assert_eq!(
        hash_of(&answer),
        "d8a324fae07e90e275c3c73412629b2e8c2cdb23f2465e6f666658524285d74d"
    );
}

fn answer_of(text: &str) -> Value {
    answer(ServerConfig::default(), false, json_result(text))
}

#[test]
fn an_mcp_connection_gets_the_rfc8785_hash() {
    let answer = answer(ServerConfig::default(), true, json_result(KEY_ORDER));
    let expected = EvidenceValue::json_text(KEY_ORDER)
        .unwrap()
        .digest(Profile::Rfc8785)
        .unwrap();
    assert_eq!(hash_of(&answer), expected.value);
    assert_ne!(hash_of(&answer), KEY_ORDER_DG_HASH);
}

#[test]
fn configuration_can_fix_the_profile() {
    let mut config = ServerConfig::default();
    config.hash_profile = HashProfile::Fixed(Profile::Rfc8785);
    let rfc = answer(config, false, json_result(KEY_ORDER));
    assert_ne!(hash_of(&rfc), KEY_ORDER_DG_HASH);
    let mut config = ServerConfig::default();
    config.hash_profile = HashProfile::Fixed(Profile::DecisionGate);
    let dg = answer(config, true, json_result(KEY_ORDER));
    assert_eq!(hash_of(&dg), KEY_ORDER_DG_HASH);
}

#[test]
fn a_wrong_hash_from_the_embedder_is_replaced() {
    let mut result = json_result("\"hello\"");
    result.evidence_hash = Some(evidence::HashDigest::sha256(&[0u8; 32]));
    let answer = answer(ServerConfig::default(), false, result);
    assert_eq!(
        hash_of(&answer),
        "5aa762ae383fbb727af3c7a36d4940a5b8c40a989452d2304fc958ff3f354e7a"
    );
}

#[test]
fn error_results_carry_no_hash() {
    let result = EvidenceResult::with_error(evidence::EvidenceError::new("nope", "no"));
    let answer = answer(ServerConfig::default(), false, result);
    assert!(answer["evidence_hash"].is_null());
    assert!(answer["signature"].is_null());
}

/// The seed of wire-facts §1's signature vector: 32 bytes of 0x07.
fn signer(key_id: &str) -> EvidenceSigner {
    EvidenceSigner::from_seed(key_id, &[7u8; 32])
}

fn signature_hex(answer: &Value) -> String {
    answer["signature"]["signature"]
        .as_array()
        .expect("signature bytes")
        .iter()
        .map(|byte| format!("{:02x}", byte.as_u64().unwrap()))
        .collect()
}

#[test]
fn a_configured_key_signs_what_decision_gate_verifies() {
    let mut config = ServerConfig::default();
    config.signer = Some(signer("keys/provider.pub"));
    let answer = answer(config, false, json_result("\"hello\""));
    assert_eq!(answer["signature"]["scheme"], "ed25519");
    assert_eq!(answer["signature"]["key_id"], "keys/provider.pub");
    // Decision Gate's signature of "hello" under this key (wire-facts §1).
    assert_eq!(
        signature_hex(&answer),
        "e4285475a284b843913b0a8d21709cd9d5e709f9a3ecc5c7a774fb31ba6f7c13587f6d247e8869fe7c693513911fc1755a9d8fb07ebf437e1ba81de36318190f"
    );
    assert_eq!(
        evidence::EvidenceSigner::from_seed("x", &[7u8; 32]).public_key(),
        hex32("ea4a6c63e29c520abef5507b132ec5f9954776aebebe7b92421eea691446d22c")
    );
}

#[test]
fn signed_answers_verify_under_the_connections_profile() {
    for (mcp, profile) in [(false, Profile::DecisionGate), (true, Profile::Rfc8785)] {
        let mut config = ServerConfig::default();
        config.signer = Some(signer("k1"));
        let answer = answer(config, mcp, json_result(KEY_ORDER));
        let result: EvidenceResult = serde_json::from_value(answer).unwrap();
        let mut keys = evidence::KeySet::new();
        keys.insert_bytes("k1", &signer("k1").public_key()).unwrap();
        let policy = TrustPolicy::RequireSignature { keys };
        let verified = evidence::verify(result, &policy, profile).expect("verifies");
        assert_eq!(verified.signer(), Some("k1"));
        assert_eq!(verified.profile(), profile);
    }
}

#[test]
fn bytes_values_are_hashed_and_signed_as_raw_bytes() {
    let mut config = ServerConfig::default();
    config.signer = Some(signer("k"));
    let result = EvidenceResult::with_value(EvidenceValue::Bytes(b"hello".to_vec()));
    let answer = answer(config, false, result);
    assert_eq!(
        hash_of(&answer),
        "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
    );
    assert_eq!(
        signature_hex(&answer),
        "c5755f265bf56529c52c1dab058d80e2f887ec8eaf9f283be89ef5351268619210504cded322e1dd39b9da0cf47dfeb266c3431a0033cd83d292cc5638f75807"
    );
}

#[test]
fn an_answer_over_the_frame_limit_becomes_a_size_error() {
    let mut config = ServerConfig::default();
    config.limits.max_body_bytes = 4096;
    let big = format!("\"{}\"", "x".repeat(5000));
    let mut result = json_result(&big);
    result.evidence_ref = Some(evidence::EvidenceRef {
        uri: "dg+file://root/big.json".to_owned(),
    });
    let answer = answer(config, false, result);
    assert!(answer["value"].is_null());
    assert_eq!(answer["error"]["code"], "size_limit_exceeded");
    assert_eq!(answer["error"]["details"]["limit_bytes"], 4096);
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("4096-byte")
    );
    // Where the evidence came from is kept.
    assert_eq!(answer["evidence_ref"]["uri"], "dg+file://root/big.json");
}

/// Issue 38 item 4: a batch is one message, so its members share the frame
/// limit (with room kept for the members not answered yet). Eight answers
/// of a fifth of the limit each: four fit, the others become size errors,
/// and the batch's answer stays under the limit (it was eight fifths of
/// it).
#[test]
fn a_batch_answer_stays_within_the_frame_limit() {
    use evidence_wire::envelope::Policy;
    let mut config = ServerConfig::default();
    config.limits.max_body_bytes = 20_000;
    config.policy = Policy::jsonrpc();
    let mut server = Server::new(config);
    let calls: Vec<String> = (1..=8)
        .map(|id| DG_CALL.replacen(r#""id":1"#, &format!(r#""id":{id}"#), 1))
        .collect();
    server.handle_input(&framed(&format!("[{}]", calls.join(","))));
    let mut tickets = Vec::new();
    while let Some(event) = server.poll_event() {
        if let ServerEvent::EvidenceQuery { ticket, .. } = event {
            tickets.push(ticket);
        }
    }
    assert_eq!(tickets.len(), 8);
    let value = format!("\"{}\"", "z".repeat(3600));
    for ticket in tickets {
        server
            .respond(ticket, json_result(&value))
            .expect("in flight");
    }
    let mut framed_answer = Vec::new();
    while let Some(bytes) = server.poll_transmit() {
        framed_answer.extend_from_slice(&bytes);
    }
    let text = String::from_utf8(framed_answer).expect("utf-8");
    let body = text.split_once("\r\n\r\n").expect("a framed reply").1;
    assert!(
        body.len() <= 20_000,
        "the batch's answer is {} bytes",
        body.len()
    );
    let answers: Vec<Value> = serde_json::from_str(body).expect("a JSON array");
    assert_eq!(answers.len(), 8);
    let refused: Vec<&Value> = answers
        .iter()
        .map(|answer| &answer["result"]["content"][0]["json"])
        .filter(|result| result["error"]["code"] == "size_limit_exceeded")
        .collect();
    assert_eq!(refused.len(), 4, "{body}");
    for result in refused {
        assert!(result["value"].is_null());
        assert!(
            result["error"]["details"]["batch_answer_bytes"]
                .as_u64()
                .unwrap()
                > 20_000
        );
    }
}

#[test]
fn the_mcp_answer_counts_both_copies_against_the_limit() {
    // The MCP answer carries the result twice (text and structuredContent):
    // a value that fits once but not twice is refused there only.
    let mut config = ServerConfig::default();
    config.limits.max_body_bytes = 5000;
    let value = format!("\"{}\"", "y".repeat(3000));
    let dg = answer(config.clone(), false, json_result(&value));
    assert!(dg["error"].is_null(), "{dg}");
    let mcp = answer(config, true, json_result(&value));
    assert_eq!(mcp["error"]["code"], "size_limit_exceeded");
}

#[test]
fn an_answer_deeper_than_the_envelope_limit_becomes_a_depth_error() {
    // The caller's envelope depth limit (128 levels) counts the wrapper too:
    // a 124-deep value fits in neither dialect's answer.
    for mcp in [false, true] {
        let deep = format!("{}{}", "[".repeat(124), "]".repeat(124));
        let refused = answer(ServerConfig::default(), mcp, json_result(&deep));
        assert_eq!(
            refused["error"]["code"], "depth_limit_exceeded",
            "{refused}"
        );
        // A shallow enough value passes.
        let fits = format!("{}{}", "[".repeat(90), "]".repeat(90));
        let passed = answer_with(mcp, &fits);
        assert!(passed["error"].is_null(), "{passed}");
    }
}

fn answer_with(mcp: bool, text: &str) -> Value {
    answer(ServerConfig::default(), mcp, json_result(text))
}

#[test]
fn what_the_server_sends_is_never_dropped_by_its_own_client() {
    // Every answer the server writes is read by a client with the default
    // limits: as the evidence, or as the error result that replaced it.
    use evidence_wire::client::{Client, ClientConfig, ClientEvent};
    use evidence_wire::evidence::{EvidenceContext, EvidenceQuery, TriggerTime};
    for depth in [
        1usize, 60, 100, 110, 118, 119, 120, 121, 122, 123, 124, 125, 126, 127, 130,
    ] {
        for mcp in [false, true] {
            let mut client_config = ClientConfig::default();
            client_config.handshake = mcp;
            let mut client = Client::new(client_config);
            let mut server = Server::new(ServerConfig::default());
            let query = EvidenceQuery::new("p", "c");
            let context = EvidenceContext::adhoc(TriggerTime::UnixMillis(1));
            let id = client.query(&query, &context, 0);
            let mut answered = None;
            for _round in 0..4 {
                while let Some(bytes) = client.poll_transmit() {
                    server.handle_input(&bytes);
                }
                while let Some(event) = server.poll_event() {
                    if let ServerEvent::EvidenceQuery { ticket, .. } = event {
                        let value = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
                        server.respond(ticket, json_result(&value)).unwrap();
                    }
                }
                while let Some(bytes) = server.poll_transmit() {
                    client.handle_input(&bytes);
                }
                while let Some(event) = client.poll_event() {
                    if let ClientEvent::Answer {
                        id: answered_id,
                        outcome,
                    } = event
                    {
                        assert_eq!(answered_id, id);
                        answered = Some(outcome);
                    }
                }
            }
            let outcome = answered.unwrap_or_else(|| {
                panic!("depth {depth}, mcp {mcp}: the client dropped the answer")
            });
            let verified = outcome.unwrap_or_else(|error| {
                panic!("depth {depth}, mcp {mcp}: the client refused the answer: {error}")
            });
            let result = verified.result();
            assert!(
                result.value.is_some()
                    || result.error.as_ref().map(|error| error.code.as_str())
                        == Some("depth_limit_exceeded"),
                "depth {depth}, mcp {mcp}: {result:?}"
            );
        }
    }
}

fn hex32(hex: &str) -> [u8; 32] {
    let mut out = [0u8; 32];
    for (index, slot) in out.iter_mut().enumerate() {
        *slot = u8::from_str_radix(&hex[index * 2..index * 2 + 2], 16).unwrap();
    }
    out
}

#[test]
fn an_ambiguous_integer_is_refused_only_where_rfc8785_hashes() {
    // Under RFC 8785 (an MCP connection) two integers beyond 2^53 would
    // share a hash: refused, naming the pointer. Decision Gate's profile
    // keeps them exact.
    let value = r#"{"n":[9007199254740993]}"#;
    let mcp = answer(ServerConfig::default(), true, json_result(value));
    assert_eq!(mcp["error"]["code"], "value_not_canonicalizable", "{mcp}");
    assert_eq!(mcp["error"]["details"]["pointer"], "/n/0");
    assert!(mcp["value"].is_null());
    let dg = answer(ServerConfig::default(), false, json_result(value));
    assert!(dg["error"].is_null(), "{dg}");
    assert_eq!(dg["evidence_hash"]["algorithm"], "sha256");
}
