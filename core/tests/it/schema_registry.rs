//! The tool I/O schema registry: fingerprints (SHA-256 of canonical JSON),
//! compile cache hits and misses, invalidation on change, input failures
//! reported with their JSON pointer, output failures as `INTERNAL_ERROR`,
//! the built-in typed checks, and the tool I/O record check.

use evidence_wire::envelope::Id;
use evidence_wire::error::CanonicalError;
use evidence_wire::schema::{
    BuiltinSchema, CacheStats, EVIDENCE_QUERY_INPUT_SCHEMA, EVIDENCE_QUERY_OUTPUT_SCHEMA,
    Fingerprint, SchemaRegistry, ToolIo, check_tool_io_record,
};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::sync::Arc;

fn tool(name: &str, input: Value, output: Option<Value>) -> ToolIo {
    ToolIo {
        name: name.into(),
        description: format!("test tool {name}"),
        input_schema: input,
        output_schema: output,
    }
}

fn list_schema() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "required": ["a"],
        "properties": {
            "a": {"type": "array", "items": {"type": "integer"}},
            "b/c": {"type": "array", "items": {"type": "string"}},
            "m~n": {"type": "object", "additionalProperties": {"type": "boolean"}}
        }
    })
}

fn good_query() -> Value {
    json!({
        "query": {"provider_id": "files", "check_id": "exists", "params": {"path": "/x"}},
        "context": {"tenant_id": 1, "namespace_id": "2", "run_id": "r", "scenario_id": "s",
                    "stage_id": "st", "trigger_id": "t", "trigger_time": {"kind": "logical", "value": 1}}
    })
}

fn good_result() -> Value {
    json!({"value": {"kind": "json", "value": {"a": 1}}, "lane": "verified", "error": null,
           "evidence_hash": null, "evidence_ref": null, "evidence_anchor": null,
           "signature": null, "content_type": "application/json"})
}

#[test]
fn fingerprint_is_sha256_of_canonical_json() {
    let schema: Value = serde_json::from_str(EVIDENCE_QUERY_OUTPUT_SCHEMA).unwrap();
    // Independent oracle: another RFC 8785 implementation, another SHA-256 call.
    let canonical = serde_json_canonicalizer::to_vec(&schema).unwrap();
    let expected: [u8; 32] = Sha256::digest(&canonical).into();
    let fingerprint = Fingerprint::of(&schema);
    assert_eq!(fingerprint.0, expected);
    // The input schema bounds ids by `"maximum": 18446744073709551615`, an
    // integer RFC 8785 would round to a double other integers share (and
    // refuses as I-JSON): its fingerprint is the SHA-256 of the exact
    // compact form instead, so a schema bounded by 18446744073709551614
    // does not share its cache entry.
    let input: Value = serde_json::from_str(EVIDENCE_QUERY_INPUT_SCHEMA).unwrap();
    let compact = serde_json::to_vec(&input).unwrap();
    assert!(String::from_utf8_lossy(&compact).contains("18446744073709551615"));
    let exact: [u8; 32] = Sha256::digest(&compact).into();
    assert_eq!(Fingerprint::of(&input).0, exact);
    let neighbour: Value = serde_json::from_str(
        &EVIDENCE_QUERY_INPUT_SCHEMA.replace("18446744073709551615", "18446744073709551614"),
    )
    .unwrap();
    assert_ne!(Fingerprint::of(&neighbour), Fingerprint::of(&input));
    assert_eq!(fingerprint.to_hex().len(), 64);
    assert_eq!(fingerprint.to_string(), fingerprint.to_hex());
    // Member order and whitespace do not matter; any change of content does.
    let reordered: Value =
        serde_json::from_str(r#"{ "required":["a"], "type" : "object" }"#).unwrap();
    assert_eq!(
        Fingerprint::of(&reordered),
        Fingerprint::of(&json!({"type": "object", "required": ["a"]}))
    );
    assert_ne!(
        Fingerprint::of(&reordered),
        Fingerprint::of(&json!({"type": "object", "required": ["b"]}))
    );
}

#[test]
fn load_tool_io_returns_both_compiled_schemas() {
    let mut registry = SchemaRegistry::new();
    assert!(registry.load_tool_io("evidence_query").is_none());
    let builtin = ToolIo::evidence_query().unwrap();
    registry.register(builtin.clone());
    let loaded = registry.load_tool_io("evidence_query").expect("registered");
    assert_eq!(loaded.tool, builtin);
    assert_eq!(
        loaded.input.fingerprint(),
        Fingerprint::of(&builtin.input_schema)
    );
    let output = loaded
        .output
        .as_ref()
        .expect("evidence_query declares an output schema");
    assert_eq!(Some(output.schema()), builtin.output_schema.as_ref());
    assert_eq!(
        loaded.input.builtin(),
        Some(BuiltinSchema::EvidenceQueryInput)
    );
    assert_eq!(output.builtin(), Some(BuiltinSchema::EvidenceQueryOutput));
    assert_eq!(
        registry.stats(),
        CacheStats {
            compiled: 2,
            hits: 0,
            evicted: 0
        }
    );
    // Loading again compiles nothing and hands out the same compiled schemas.
    let again = registry.load_tool_io("evidence_query").unwrap();
    assert!(Arc::ptr_eq(&loaded.input, &again.input));
    assert_eq!(registry.stats().compiled, 2);
}

#[test]
fn cache_hits_on_the_same_fingerprint_and_misses_after_a_change() {
    let mut registry = SchemaRegistry::new();
    registry.register(tool("one", list_schema(), None));
    assert_eq!(
        registry.stats(),
        CacheStats {
            compiled: 1,
            hits: 0,
            evicted: 0
        }
    );
    // Same schema, written in another member order: same fingerprint, a hit.
    let text = serde_json::to_string(&list_schema()).unwrap();
    let mut reordered: serde_json::Map<String, Value> = serde_json::from_str(&text).unwrap();
    let required = reordered.remove("required").unwrap();
    reordered.insert("required".into(), required);
    registry.register(tool("two", Value::Object(reordered), None));
    assert_eq!(
        registry.stats(),
        CacheStats {
            compiled: 1,
            hits: 1,
            evicted: 0
        }
    );
    assert_eq!(registry.cached_schemas(), 1);
    let one = registry.load_tool_io("one").unwrap();
    let two = registry.load_tool_io("two").unwrap();
    assert!(
        Arc::ptr_eq(&one.input, &two.input),
        "shared compiled schema"
    );
    // Re-registering unchanged is a hit too.
    registry.register(tool("one", list_schema(), None));
    assert_eq!(
        registry.stats(),
        CacheStats {
            compiled: 1,
            hits: 2,
            evicted: 0
        }
    );
    drop((one, two));

    // A changed schema: new fingerprint, compiled afresh; the old one stays
    // while tool "two" uses it.
    let mut changed = list_schema();
    changed["required"] = json!(["a", "b/c"]);
    registry.register(tool("one", changed.clone(), None));
    assert_eq!(
        registry.stats(),
        CacheStats {
            compiled: 2,
            hits: 2,
            evicted: 0
        }
    );
    assert_eq!(registry.cached_schemas(), 2);
    let one = registry.load_tool_io("one").unwrap();
    assert_eq!(one.input.fingerprint(), Fingerprint::of(&changed));
    assert_ne!(one.input.fingerprint(), Fingerprint::of(&list_schema()));
    // The new schema is in force: "b/c" is now required.
    let input = json!({"a": [1]});
    assert!(registry.validate_input("two", &input).is_ok());
    assert_eq!(
        registry.validate_input("one", &input).unwrap_err().pointer,
        ""
    );
    // Once no tool uses the old fingerprint, it is evicted.
    drop(one);
    registry.register(tool("two", changed, None));
    assert_eq!(
        registry.stats(),
        CacheStats {
            compiled: 2,
            hits: 3,
            evicted: 1
        }
    );
    assert_eq!(registry.cached_schemas(), 1);
    assert!(registry.unregister("one"));
    assert!(!registry.unregister("one"));
    assert!(registry.unregister("two"));
    assert_eq!(registry.cached_schemas(), 0);
    assert_eq!(registry.stats().evicted, 2);
}

#[test]
fn invalid_input_is_reported_with_its_pointer() {
    let mut registry = SchemaRegistry::new();
    registry.register(tool("lists", list_schema(), None));
    for (input, pointer) in [
        (json!({"a": [1, 2, "x"]}), "/a/2"),
        (json!({"a": [], "b/c": ["ok", 7]}), "/b~1c/1"),
        (json!({"a": [], "m~n": {"flag": "yes"}}), "/m~0n/flag"),
        (json!({"a": "not a list"}), "/a"),
        (json!({}), ""),
        (json!([1]), ""),
    ] {
        let failure = registry.validate_input("lists", &input).unwrap_err();
        assert_eq!(failure.error, CanonicalError::InvalidToolInput, "{input}");
        assert_eq!(failure.pointer, pointer, "{input}");
        assert!(
            failure.detail.contains(&format!("`{pointer}`")),
            "{}",
            failure.detail
        );
        let object = serde_json::to_value(failure.to_error_object(Some(&Id::Number(5)))).unwrap();
        assert_eq!(object["code"], -32602);
        assert_eq!(object["message"], "Invalid tool input");
        assert_eq!(object["data"]["kind"], "invalid_tool_input");
        assert_eq!(object["data"]["pointer"], pointer);
        assert_eq!(object["data"]["request_id"], 5);
    }
    assert!(
        registry
            .validate_input("lists", &json!({"a": [1, 2]}))
            .is_ok()
    );

    // The built-in tool: a real query passes, broken ones point at the culprit.
    registry.register(ToolIo::evidence_query().unwrap());
    assert!(
        registry
            .validate_input("evidence_query", &good_query())
            .is_ok()
    );
    let mut zero_tenant = good_query();
    zero_tenant["context"]["tenant_id"] = json!(0);
    let failure = registry
        .validate_input("evidence_query", &zero_tenant)
        .unwrap_err();
    assert_eq!(failure.pointer, "/context/tenant_id");
    let mut bad_time = good_query();
    bad_time["context"]["trigger_time"]["value"] = json!("soon");
    let failure = registry
        .validate_input("evidence_query", &bad_time)
        .unwrap_err();
    assert_eq!(failure.pointer, "/context/trigger_time/value");
    // Unknown tools are TOOL_NOT_FOUND.
    let failure = registry.validate_input("nope", &json!({})).unwrap_err();
    assert_eq!(failure.error, CanonicalError::ToolNotFound);
}

#[test]
fn output_outside_its_schema_is_an_internal_error() {
    let mut registry = SchemaRegistry::new();
    registry.register(ToolIo::evidence_query().unwrap());
    assert!(
        registry
            .validate_output("evidence_query", &good_result())
            .is_ok()
    );
    let mut bad = good_result();
    bad["evidence_hash"] = json!({"algorithm": "sha256", "value": "ABC"});
    let failure = registry
        .validate_output("evidence_query", &bad)
        .unwrap_err();
    assert_eq!(failure.error, CanonicalError::InternalError);
    assert_eq!(failure.pointer, "/evidence_hash");
    let object = serde_json::to_value(failure.to_error_object(None)).unwrap();
    assert_eq!(
        (
            object["code"].as_i64(),
            object["data"]["request_id"].is_null()
        ),
        (Some(-32603), true)
    );
    let mut missing = good_result();
    missing.as_object_mut().unwrap().remove("lane");
    assert_eq!(
        registry
            .validate_output("evidence_query", &missing)
            .unwrap_err()
            .error,
        CanonicalError::InternalError
    );
    // No output schema: anything goes.
    registry.register(tool("free", json!({"type": "object"}), None));
    assert!(registry.validate_output("free", &json!([1, "x"])).is_ok());
}

#[test]
fn a_schema_that_does_not_compile_leaves_the_tool_broken() {
    let mut registry = SchemaRegistry::new();
    let broken = tool(
        "broken",
        json!({"type": "object"}),
        Some(json!({"type": 12})),
    );
    let problem = registry.try_register(broken.clone()).unwrap_err();
    assert_eq!(problem.error, CanonicalError::InternalError);
    assert!(
        problem.detail.contains("output schema of tool `broken`"),
        "{}",
        problem.detail
    );
    assert!(
        registry.load_tool_io("broken").is_none(),
        "try_register changed nothing"
    );
    assert_eq!(
        registry.cached_schemas(),
        0,
        "the input schema compiled for nothing is dropped"
    );
    registry.register(broken);
    assert!(registry.load_tool_io("broken").is_none());
    let failure = registry.validate_input("broken", &json!({})).unwrap_err();
    assert_eq!(failure.error, CanonicalError::InternalError);
    assert!(
        failure.detail.contains("broken schema"),
        "{}",
        failure.detail
    );
    assert!(
        registry
            .try_register(tool("scalar", json!(5), None))
            .is_err()
    );
}

#[test]
fn builtin_typed_checks_agree_with_the_schemas() {
    let input: Value = serde_json::from_str(EVIDENCE_QUERY_INPUT_SCHEMA).unwrap();
    let output: Value = serde_json::from_str(EVIDENCE_QUERY_OUTPUT_SCHEMA).unwrap();
    assert_eq!(
        BuiltinSchema::recognize(Fingerprint::of(&input)),
        Some(BuiltinSchema::EvidenceQueryInput)
    );
    assert_eq!(
        BuiltinSchema::recognize(Fingerprint::of(&output)),
        Some(BuiltinSchema::EvidenceQueryOutput)
    );
    assert_eq!(
        BuiltinSchema::recognize(Fingerprint::of(&list_schema())),
        None
    );
    let mut registry = SchemaRegistry::new();
    registry.register(ToolIo::evidence_query().unwrap());
    let mut inputs = vec![good_query()];
    let edits: [(&str, Value); 6] = [
        ("/context/tenant_id", json!(0)),
        ("/context/namespace_id", json!("x")),
        ("/query/check_id", json!(5)),
        ("/context/trigger_time/kind", json!("later")),
        ("/context/run_id", Value::Null),
        ("/query/provider_id", json!(["p"])),
    ];
    for (pointer, value) in edits {
        let mut edited = good_query();
        *edited.pointer_mut(pointer).unwrap() = value;
        inputs.push(edited);
    }
    let mut with_predicate = good_query();
    let query = with_predicate["query"].as_object_mut().unwrap();
    let check = query.remove("check_id").unwrap();
    query.insert("predicate".into(), check);
    inputs.push(with_predicate);
    inputs.push(json!({"query": good_query()["query"].clone()}));
    for instance in &inputs {
        let by_schema = registry.validate_input("evidence_query", instance).is_ok();
        let typed = BuiltinSchema::EvidenceQueryInput
            .validate_typed(instance)
            .is_ok();
        assert_eq!(by_schema, typed, "{instance}");
    }
    assert!(
        BuiltinSchema::EvidenceQueryInput
            .validate_typed(&good_query())
            .is_ok()
    );
    let mut results = vec![good_result()];
    for (member, value) in [
        ("lane", json!("trusted")),
        ("value", json!({"kind": "bytes", "value": [1, 256]})),
        ("signature", json!({"scheme": "ed25519"})),
        ("content_type", json!(7)),
    ] {
        let mut edited = good_result();
        edited[member] = value;
        results.push(edited);
    }
    for instance in &results {
        let by_schema = registry.validate_output("evidence_query", instance).is_ok();
        let typed = BuiltinSchema::EvidenceQueryOutput
            .validate_typed(instance)
            .is_ok();
        assert_eq!(by_schema, typed, "{instance}");
    }
    assert_eq!(
        BuiltinSchema::EvidenceQueryOutput
            .validate_typed(&json!("x"))
            .unwrap_err()
            .pointer,
        ""
    );
}

#[test]
fn tool_io_records() {
    let record = json!({"tool": "evidence_query", "input": {"q": 1}, "output": {"r": 2}});
    assert!(check_tool_io_record(&record, "evidence_query").is_ok());
    let cases = [
        (
            json!({"tool": "other", "input": {}, "output": {}}),
            CanonicalError::InternalError,
            "/tool",
        ),
        (
            json!({"input": {}, "output": {}}),
            CanonicalError::InternalError,
            "/tool",
        ),
        (
            json!({"tool": 5, "input": {}, "output": {}}),
            CanonicalError::InternalError,
            "/tool",
        ),
        (
            json!({"tool": "evidence_query", "input": [], "output": {}}),
            CanonicalError::InvalidToolInput,
            "/input",
        ),
        (
            json!({"tool": "evidence_query", "output": {}}),
            CanonicalError::InvalidToolInput,
            "/input",
        ),
        (
            json!({"tool": "evidence_query", "input": {}, "output": "done"}),
            CanonicalError::InternalError,
            "/output",
        ),
        (
            json!({"tool": "evidence_query", "input": {}}),
            CanonicalError::InternalError,
            "/output",
        ),
        (
            json!(["evidence_query", {}, {}]),
            CanonicalError::InternalError,
            "",
        ),
    ];
    for (record, error, pointer) in cases {
        let failure = check_tool_io_record(&record, "evidence_query").unwrap_err();
        assert_eq!(
            (failure.error, failure.pointer.as_str()),
            (error, pointer),
            "{record}"
        );
    }
    let failure = check_tool_io_record(
        &json!({"tool": "x", "input": {}, "output": {}}),
        "evidence_query",
    )
    .unwrap_err();
    assert!(failure.detail.contains("`x`") && failure.detail.contains("`evidence_query`"));
}

/// The server answers a `tools/call` whose arguments fail the tool's input
/// schema with `INVALID_TOOL_INPUT` carrying the pointer in `data.pointer`.
#[test]
fn server_reports_the_pointer_of_invalid_tool_input() {
    use evidence_wire::server::{Server, ServerConfig, ToolDefinition};
    let mut config = ServerConfig::default();
    config.add_tool(ToolDefinition {
        name: "lists".into(),
        description: "takes lists".into(),
        input_schema: list_schema(),
        output_schema: None,
    });
    let mut server = Server::new(config);
    server.handle_input(
        b"{\"jsonrpc\":\"2.0\",\"id\":\"c-1\",\"method\":\"tools/call\",\"params\":{\"name\":\"lists\",\"arguments\":{\"a\":[1,\"x\"]}}}\n",
    );
    let reply = server.poll_transmit().expect("one reply");
    let reply: Value = serde_json::from_slice(&reply).unwrap();
    assert_eq!(reply["id"], "c-1");
    assert_eq!(reply["error"]["code"], -32602);
    assert_eq!(reply["error"]["message"], "Invalid tool input");
    assert_eq!(reply["error"]["data"]["pointer"], "/a/1");
    assert_eq!(reply["error"]["data"]["request_id"], "c-1");
}

/// The `evidence_query` schemas as the files in `spec/schemas/` hold them,
/// read from disk (not through the crate's `include_str!` constants).
fn spec_schema(file: &str) -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../spec/schemas")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"))
}

#[test]
fn the_server_registers_and_lists_exactly_the_spec_schema_files() {
    use evidence_wire::server::{Server, ServerConfig, ToolDefinition};
    let input = spec_schema("evidence_query.input.schema.json");
    let output = spec_schema("evidence_query.output.schema.json");
    // One source of truth: the constants are the files...
    assert_eq!(
        serde_json::from_str::<Value>(EVIDENCE_QUERY_INPUT_SCHEMA).unwrap(),
        input
    );
    assert_eq!(
        serde_json::from_str::<Value>(EVIDENCE_QUERY_OUTPUT_SCHEMA).unwrap(),
        output
    );
    // ...the registry's tool and the server's definition are made from them...
    let io = ToolIo::evidence_query().unwrap();
    assert_eq!(io.input_schema, input);
    assert_eq!(io.output_schema.as_ref(), Some(&output));
    let mut registry = SchemaRegistry::new();
    registry.register(io);
    let loaded = registry.load_tool_io("evidence_query").unwrap();
    assert_eq!(loaded.input.fingerprint(), Fingerprint::of(&input));
    assert_eq!(
        loaded
            .output
            .as_ref()
            .map(|compiled| compiled.fingerprint()),
        Some(Fingerprint::of(&output))
    );
    let definition = ToolDefinition::evidence_query();
    assert_eq!(definition.input_schema, input);
    assert_eq!(definition.output_schema.as_ref(), Some(&output));

    // ...and tools/list shows them, in both dialects.
    let mut server = Server::new(ServerConfig::default());
    let list = |server: &mut Server, id: u32| -> Value {
        server.handle_input(
            format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/list\"}}\n").as_bytes(),
        );
        let reply: Value = serde_json::from_slice(&server.poll_transmit().unwrap()).unwrap();
        reply["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|tool| tool["name"] == "evidence_query")
            .cloned()
            .expect("evidence_query is listed")
    };
    let decision_gate = list(&mut server, 1);
    assert_eq!(decision_gate["input_schema"], input);
    server.handle_input(
        b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{}}}\n",
    );
    let _ = server.poll_transmit();
    let mcp = list(&mut server, 3);
    assert_eq!(mcp["inputSchema"], input);
    assert_eq!(mcp["outputSchema"], output);

    // The server validates calls against the file's constraints: an empty
    // provider_id breaks its `minLength: 1`, reported with that pointer.
    assert_eq!(
        input["$defs"]["EvidenceQuery"]["properties"]["provider_id"]["minLength"],
        1
    );
    server.handle_input(
        br#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"evidence_query","arguments":{"query":{"provider_id":"","check_id":"c"},"context":{"tenant_id":1,"namespace_id":1,"run_id":"r","scenario_id":"s","stage_id":"st","trigger_id":"t","trigger_time":{"kind":"logical","value":1}}}}}
"#,
    );
    let reply: Value = serde_json::from_slice(&server.poll_transmit().unwrap()).unwrap();
    assert_eq!(reply["error"]["code"], -32602, "{reply}");
    assert_eq!(reply["error"]["data"]["pointer"], "/query/provider_id");
}
