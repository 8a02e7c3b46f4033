//! The evidence types read and write exactly the shapes the seeds show and
//! Decision Gate sends.

use evidence_wire::dialect::{
    McpRevision, Speech, ToolResultShape, evidence_tool_result, from_tool_result,
};
use evidence_wire::evidence::{
    EvidenceAnchor, EvidenceContext, EvidenceQuery, EvidenceQueryArguments, EvidenceResult,
    EvidenceValue, Lane, TriggerTime,
};
use serde_json::{Value, json};

/// Decision Gate's first message (wire-facts §2), its `arguments`.
const DG_ARGUMENTS: &str = r#"{"query":{"provider_id":"stub","check_id":"probe","params":{"mode":"plain"}},"context":{"tenant_id":1,"namespace_id":1,"run_id":"run-1","scenario_id":"s","stage_id":"st","trigger_id":"t","trigger_time":{"kind":"unix_millis","value":1710000000000},"correlation_id":null}}"#;

/// The EvidenceResult of the seed's example response (file-provider).
const SEED_RESULT: &str = r#"{
"value": { "kind": "json", "value": 1024 },
"lane": "verified",
"error": null,
"evidence_hash": null,
"evidence_ref": { "uri": "dg+file://evidence-root/report.json" },
"evidence_anchor": {
"anchor_type": "file_path_rooted",
"anchor_value": "{\"path\":\"report.json\",\"root_id\":\"evidence-root\",\"size\":1024}"
},
"signature": null,
"content_type": "application/json"
}"#;

#[test]
fn decision_gate_arguments_round_trip_byte_for_byte() {
    let arguments: EvidenceQueryArguments = serde_json::from_str(DG_ARGUMENTS).unwrap();
    assert_eq!(arguments.query.check_id, "probe");
    assert_eq!(arguments.query.params, Some(json!({"mode": "plain"})));
    assert_eq!(arguments.context.tenant_id.get(), 1);
    assert_eq!(
        arguments.context.trigger_time,
        TriggerTime::UnixMillis(1_710_000_000_000)
    );
    assert_eq!(arguments.context.correlation_id, None);
    assert_eq!(serde_json::to_string(&arguments).unwrap(), DG_ARGUMENTS);
}

#[test]
fn query_accepts_predicate_alias_and_omits_absent_params() {
    let old: EvidenceQuery = serde_json::from_str(
        r#"{"provider_id":"env","predicate":"get","params":{"key":"DEPLOY_ENV"}}"#,
    )
    .unwrap();
    assert_eq!(old.check_id, "get");
    let written = serde_json::to_string(&old).unwrap();
    assert_eq!(
        written,
        r#"{"provider_id":"env","check_id":"get","params":{"key":"DEPLOY_ENV"}}"#
    );
    for input in [
        r#"{"provider_id":"p","check_id":"c"}"#,
        r#"{"provider_id":"p","check_id":"c","params":null}"#,
    ] {
        let query: EvidenceQuery = serde_json::from_str(input).unwrap();
        assert_eq!(query, EvidenceQuery::new("p", "c"));
        assert_eq!(
            serde_json::to_string(&query).unwrap(),
            r#"{"provider_id":"p","check_id":"c"}"#
        );
    }
    assert_eq!(
        EvidenceQuery::new("p", "c").with_params(Value::Null),
        EvidenceQuery::new("p", "c")
    );
    assert!(serde_json::from_str::<EvidenceQuery>(r#"{"provider_id":"p"}"#).is_err());
}

fn context_with(tenant: &str) -> Result<EvidenceContext, serde_json::Error> {
    serde_json::from_str(&format!(
        r#"{{"tenant_id":{tenant},"namespace_id":3,"run_id":"r","scenario_id":"s","stage_id":"st","trigger_id":"t","trigger_time":{{"kind":"logical","value":7}},"correlation_id":"c-1"}}"#
    ))
}

#[test]
fn context_ids_are_integers_of_at_least_one() {
    let context = context_with("5").unwrap();
    assert_eq!(context.tenant_id.get(), 5);
    assert_eq!(context.namespace_id.get(), 3);
    assert_eq!(context.trigger_time, TriggerTime::Logical(7));
    assert_eq!(context.correlation_id.as_deref(), Some("c-1"));
    // The older string form is accepted only when it parses; output is an integer.
    let text = context_with(r#""12""#).unwrap();
    assert_eq!(text.tenant_id.get(), 12);
    assert!(
        serde_json::to_string(&text)
            .unwrap()
            .starts_with(r#"{"tenant_id":12,"#)
    );
    for bad in ["0", "-1", "1.5", r#""tenant-1""#, r#""0""#, "null", "true"] {
        let error = context_with(bad).unwrap_err().to_string();
        assert!(error.contains("integer >= 1"), "{bad}: {error}");
    }
    assert!(context_with("18446744073709551615").is_ok());
}

#[test]
fn seed_result_reads_and_writes_as_the_seed_shows() {
    let result: EvidenceResult = serde_json::from_str(SEED_RESULT).unwrap();
    assert_eq!(result.lane, Lane::Verified);
    let written = result.to_json_vec();
    let expected: Value = serde_json::from_str(SEED_RESULT).unwrap();
    assert_eq!(serde_json::from_slice::<Value>(&written).unwrap(), expected);
    // Field order as in the seed, every field written (null when absent).
    let text = String::from_utf8(written).unwrap();
    let order: Vec<usize> = [
        "\"value\"",
        "\"lane\"",
        "\"error\"",
        "\"evidence_hash\"",
        "\"evidence_ref\"",
        "\"evidence_anchor\"",
        "\"signature\"",
        "\"content_type\"",
    ]
    .iter()
    .map(|field| text.find(field).unwrap())
    .collect();
    assert!(order.windows(2).all(|pair| pair[0] < pair[1]), "{text}");
}

#[test]
fn older_result_without_lane_and_error_reads_with_defaults() {
    let result: EvidenceResult = serde_json::from_str(
        r#"{"value":{"kind":"json","value":"production"},"evidence_hash":null,"evidence_ref":null,"evidence_anchor":null,"signature":null,"content_type":"application/json"}"#,
    )
    .unwrap();
    assert_eq!(result.lane, Lane::Verified);
    assert_eq!(result.error, None);
    let written: Value = serde_json::from_slice(&result.to_json_vec()).unwrap();
    assert_eq!(written["lane"], "verified");
    assert_eq!(written["error"], Value::Null);
    let asserted: EvidenceResult =
        serde_json::from_str(r#"{"value":null,"lane":"asserted"}"#).unwrap();
    assert_eq!(asserted.lane, Lane::Asserted);
    assert!(serde_json::from_str::<EvidenceResult>(r#"{"lane":"trusted"}"#).is_err());
}

#[test]
fn file_path_rooted_anchor_is_canonical_json_text() {
    let anchor = EvidenceAnchor::file_path_rooted("evidence-root", "report.json", Some(1024));
    assert_eq!(anchor.anchor_type, "file_path_rooted");
    assert_eq!(
        anchor.anchor_value,
        r#"{"path":"report.json","root_id":"evidence-root","size":1024}"#
    );
    let seed: EvidenceResult = serde_json::from_str(SEED_RESULT).unwrap();
    assert_eq!(seed.evidence_anchor, Some(anchor));
    let unsized_anchor = EvidenceAnchor::file_path_rooted("r", "dir/é \"q\".json", None);
    assert_eq!(
        unsized_anchor.anchor_value,
        r#"{"path":"dir/é \"q\".json","root_id":"r"}"#
    );
}

#[test]
fn json_values_keep_their_exact_text() {
    // A big integer survives reading and writing (no float round trip).
    let wire = r#"{"kind":"json","value":{"n":9007199254740993,"f":1.50}}"#;
    let value: EvidenceValue = serde_json::from_str(wire).unwrap();
    assert_eq!(serde_json::to_string(&value).unwrap(), wire);
}

#[test]
fn bytes_values_are_arrays_of_octets() {
    let value: EvidenceValue = serde_json::from_str(r#"{"kind":"bytes","value":[0,255]}"#).unwrap();
    assert_eq!(value, EvidenceValue::Bytes(vec![0, 255]));
    assert_eq!(
        serde_json::to_string(&value).unwrap(),
        r#"{"kind":"bytes","value":[0,255]}"#
    );
    for bad in [
        r#"{"kind":"bytes","value":[256]}"#,
        r#"{"kind":"bytes","value":[-1]}"#,
        r#"{"kind":"bytes","value":"aGVsbG8="}"#,
        r#"{"kind":"text","value":"x"}"#,
        r#"{"kind":"json"}"#,
        r#"{"kind":"json","value":1,"extra":2}"#,
    ] {
        assert!(serde_json::from_str::<EvidenceValue>(bad).is_err(), "{bad}");
    }
    assert_eq!(
        value.to_value().unwrap(),
        json!([0, 255]),
        "bytes read as an array of integers"
    );
}

#[test]
fn tool_results_in_all_three_shapes_read_back() {
    let result: EvidenceResult = serde_json::from_str(SEED_RESULT).unwrap();
    let dg = serde_json::to_string(&evidence_tool_result(&result, Speech::DECISION_GATE)).unwrap();
    assert!(dg.starts_with(r#"{"content":[{"type":"json","json":{"value":"#));
    let mcp = serde_json::to_value(evidence_tool_result(
        &result,
        Speech::mcp(McpRevision::LATEST_HANDSHAKE),
    ))
    .unwrap();
    assert_eq!(mcp["isError"], false);
    let text = mcp["content"][0]["text"].as_str().unwrap();
    assert_eq!(
        text.as_bytes(),
        evidence_wire::canonical::to_vec(&result.to_json_vec()).unwrap(),
        "the text item is the canonical JSON of the result"
    );
    let text_only = json!({"content": [{"type": "text", "text": text}]});
    for (wire, shape) in [
        (dg, ToolResultShape::JsonItem),
        (mcp.to_string(), ToolResultShape::StructuredContent),
        (text_only.to_string(), ToolResultShape::JsonText),
    ] {
        let raw = serde_json::value::RawValue::from_string(wire).unwrap();
        let (read, read_shape) = from_tool_result(&raw).unwrap();
        assert_eq!(read_shape, shape);
        assert_eq!(read, result);
    }
}
