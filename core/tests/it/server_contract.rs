//! The capabilities contract drives the server: one definition of the
//! checks gives `tools/list`, the check of every `evidence_query` before the
//! embedder sees it, and the contract JSON Decision Gate reads from
//! `capabilities_path`.

use evidence_wire::contract::{
    CheckContract, CheckExample, Comparator, ContractError, ContractTransport, Determinism,
    ProviderContract,
};
use evidence_wire::evidence::{EvidenceResult, EvidenceValue};
use evidence_wire::schema::CompiledSchema;
use evidence_wire::server::{
    Dialect, DialectChoice, INVALID_PARAMS, PROVIDER_MISMATCH, Server, ServerConfig,
    ServerContract, ServerEvent, ToolDefinition, UNKNOWN_CHECK,
};
use proptest::prelude::*;
use serde_json::{Value, json};

// ---------------------------------------------------------------- helpers

fn check(id: &str, required: bool, schema: Value, example_params: Value) -> CheckContract {
    CheckContract {
        check_id: id.to_owned(),
        description: format!("The {id} check."),
        determinism: Determinism::External,
        params_required: required,
        params_schema: schema,
        result_schema: json!({"type": "integer"}),
        allowed_comparators: vec![Comparator::Equals, Comparator::NotEquals],
        anchor_types: vec![],
        content_types: vec!["application/json".to_owned()],
        examples: vec![CheckExample {
            description: format!("{id} example"),
            params: example_params,
            result: json!(7),
        }],
    }
}

fn sample_contract() -> ProviderContract {
    ProviderContract {
        provider_id: "files".to_owned(),
        name: "File checks".to_owned(),
        description: "Checks of files.".to_owned(),
        transport: ContractTransport::Mcp,
        config_schema: json!({"type": "object"}),
        checks: vec![
            check(
                "file_size",
                true,
                json!({"type": "object", "properties": {"path": {"type": "string", "minLength": 1}},
                       "required": ["path"], "additionalProperties": false}),
                json!({"path": "report.json"}),
            ),
            check(
                "uptime",
                false,
                json!({"type": "object", "additionalProperties": false}),
                Value::Null,
            ),
        ],
        notes: vec!["Reads files.".to_owned()],
    }
}

fn server_for(contract: ProviderContract, dialect: Dialect) -> Server {
    let contract = ServerContract::new(contract).expect("the contract is valid");
    let mut config = ServerConfig::default().with_contract(contract);
    config.dialect = DialectChoice::Fixed(dialect);
    Server::new(config)
}

fn context() -> Value {
    json!({"tenant_id":1,"namespace_id":1,"run_id":"r","scenario_id":"s","stage_id":"st",
           "trigger_id":"t","trigger_time":{"kind":"unix_millis","value":1710000000000_i64},
           "correlation_id":null})
}

fn arguments(provider: &str, check: &str, params: Option<Value>) -> Value {
    let mut query = json!({"provider_id": provider, "check_id": check});
    if let Some(params) = params {
        query["params"] = params;
    }
    json!({"query": query, "context": context()})
}

fn call(id: u64, arguments: &Value) -> Vec<u8> {
    let mut body = json!({"jsonrpc":"2.0","id":id,"method":"tools/call",
        "params":{"name":"evidence_query","arguments":arguments}})
    .to_string()
    .into_bytes();
    body.push(b'\n');
    body
}

fn events(server: &mut Server) -> Vec<ServerEvent> {
    std::iter::from_fn(|| server.poll_event()).collect()
}

fn replies(server: &mut Server) -> Vec<Value> {
    std::iter::from_fn(|| server.poll_transmit())
        .flat_map(|bytes| {
            bytes
                .split(|byte| *byte == b'\n')
                .filter(|line| !line.is_empty())
                .map(|line| serde_json::from_slice::<Value>(line).expect("a reply is JSON"))
                .collect::<Vec<_>>()
        })
        .collect()
}

fn tools_list(server: &mut Server) -> Value {
    server.handle_input(b"{\"jsonrpc\":\"2.0\",\"id\":99,\"method\":\"tools/list\"}\n");
    let _ = events(server);
    let mut replies = replies(server);
    assert_eq!(replies.len(), 1, "{replies:?}");
    let reply = replies.remove(0);
    reply["result"]["tools"]
        .as_array()
        .and_then(|tools| tools.iter().find(|tool| tool["name"] == "evidence_query"))
        .cloned()
        .unwrap_or_else(|| panic!("evidence_query is listed: {reply}"))
}

/// The EvidenceResult an answer carries, in either dialect.
fn evidence_of(reply: &Value) -> Value {
    match reply["result"].get("structuredContent") {
        Some(structured) => structured.clone(),
        None => reply["result"]["content"][0]["json"].clone(),
    }
}

/// Sends one call and expects it refused by the contract with `code`:
/// answered at once, as an EvidenceResult error, with no EvidenceQuery event.
fn expect_refused(server: &mut Server, arguments: &Value, code: &str) -> Value {
    server.handle_input(&call(1, arguments));
    let events = events(server);
    assert!(
        !events
            .iter()
            .any(|event| matches!(event, ServerEvent::EvidenceQuery { .. })),
        "a refused query must not reach the embedder: {events:?}"
    );
    let handled: Vec<_> = events
        .iter()
        .filter_map(|event| match event {
            ServerEvent::Handled(outcome) => Some(outcome),
            _ => None,
        })
        .collect();
    assert_eq!(handled.len(), 1, "{events:?}");
    assert_eq!(handled[0].error, None, "not a JSON-RPC error: {handled:?}");
    assert!(
        handled[0].detail.as_deref().unwrap_or("").contains(code),
        "{handled:?}"
    );
    let replies = replies(server);
    assert_eq!(replies.len(), 1, "{replies:?}");
    let reply = &replies[0];
    assert_eq!(reply["id"], json!(1));
    assert!(
        reply.get("error").is_none(),
        "not a JSON-RPC error: {reply}"
    );
    let evidence = evidence_of(reply);
    assert_eq!(evidence["error"]["code"], json!(code), "{reply}");
    assert_eq!(evidence["value"], Value::Null, "{reply}");
    assert_eq!(server.in_flight(), 0);
    evidence
}

/// Sends one call and expects it handed to the embedder as is.
fn expect_emitted(server: &mut Server, arguments: &Value) {
    server.handle_input(&call(2, arguments));
    let events = events(server);
    let emitted: Vec<_> = events
        .iter()
        .filter_map(|event| match event {
            ServerEvent::EvidenceQuery { ticket, query, .. } => Some((*ticket, query)),
            _ => None,
        })
        .collect();
    assert_eq!(emitted.len(), 1, "{events:?}");
    let (ticket, query) = emitted[0];
    assert_eq!(query.provider_id, arguments["query"]["provider_id"]);
    assert_eq!(query.check_id, arguments["query"]["check_id"]);
    let sent = arguments["query"].get("params").filter(|p| !p.is_null());
    assert_eq!(query.params.as_ref(), sent);
    assert!(
        replies(server).is_empty(),
        "nothing answered before respond"
    );
    let value = EvidenceValue::json(&json!(7)).expect("a JSON value");
    server
        .respond(ticket, EvidenceResult::with_value(value))
        .expect("the ticket is in flight");
    let replies = replies(server);
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert_eq!(
        evidence_of(&replies[0])["value"],
        json!({"kind": "json", "value": 7})
    );
}

// ---------------------------------------------------------------- tools/list

#[test]
fn tools_list_is_derived_from_the_contract_in_both_dialects() {
    let base = ToolDefinition::evidence_query();
    for (dialect, key) in [
        (Dialect::DecisionGate, "input_schema"),
        (Dialect::Mcp, "inputSchema"),
    ] {
        let mut server = server_for(sample_contract(), dialect);
        let tool = tools_list(&mut server);
        let description = tool["description"].as_str().expect("a description");
        assert!(description.starts_with(&base.description), "{description}");
        for check in &sample_contract().checks {
            assert!(description.contains(&check.check_id), "{description}");
            assert!(description.contains(&check.description), "{description}");
        }
        let mut schema = tool[key].clone();
        let properties = "/$defs/EvidenceQuery/properties";
        let query = schema.pointer_mut(properties).expect("query properties");
        assert_eq!(query["check_id"]["enum"], json!(["file_size", "uptime"]));
        assert_eq!(query["predicate"]["enum"], json!(["file_size", "uptime"]));
        assert_eq!(query["provider_id"]["const"], json!("files"));
        // Nothing else differs from the spec schema: it stays the one source.
        for key in ["check_id", "predicate"] {
            query[key].as_object_mut().map(|p| p.remove("enum"));
        }
        query["provider_id"]
            .as_object_mut()
            .map(|p| p.remove("const"));
        assert_eq!(schema, base.input_schema);
        if dialect == Dialect::Mcp {
            assert_eq!(Some(&tool["outputSchema"]), base.output_schema.as_ref());
        }
    }
}

#[test]
fn without_a_contract_tools_list_keeps_the_built_in_definition() {
    let mut server = Server::new(ServerConfig::default());
    let tool = tools_list(&mut server);
    let base = ToolDefinition::evidence_query();
    assert_eq!(tool["input_schema"], base.input_schema);
    assert_eq!(tool["description"], json!(base.description));
    assert!(server.contract().is_none() && server.contract_json().is_none());
    // And any check id still reaches the embedder.
    expect_emitted(&mut server, &arguments("anyone", "anything", None));
}

// ---------------------------------------------------------------- query checks

#[test]
fn an_unknown_check_is_answered_unknown_check_without_an_event() {
    for dialect in [Dialect::DecisionGate, Dialect::Mcp] {
        let mut server = server_for(sample_contract(), dialect);
        let evidence = expect_refused(
            &mut server,
            &arguments("files", "probe", None),
            UNKNOWN_CHECK,
        );
        let message = evidence["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("probe") && message.contains("file_size, uptime"),
            "{message}"
        );
    }
}

#[test]
fn another_providers_id_is_answered_provider_mismatch_without_an_event() {
    let mut server = server_for(sample_contract(), Dialect::DecisionGate);
    let evidence = expect_refused(
        &mut server,
        &arguments("stub", "uptime", None),
        PROVIDER_MISMATCH,
    );
    let message = evidence["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("files") && message.contains("stub"),
        "{message}"
    );
}

#[cfg(feature = "json-schema")]
#[test]
fn params_outside_the_check_schema_are_answered_invalid_params_without_an_event() {
    let cases = [
        (None, ""),
        (Some(Value::Null), ""),
        (Some(json!({})), "path"),
        (Some(json!({"path": 3})), "/path"),
        (Some(json!({"path": ""})), "/path"),
        (Some(json!({"path": "a", "extra": true})), "extra"),
        (Some(json!(["path"])), "object"),
    ];
    for dialect in [Dialect::DecisionGate, Dialect::Mcp] {
        let mut server = server_for(sample_contract(), dialect);
        for (params, mention) in &cases {
            let evidence = expect_refused(
                &mut server,
                &arguments("files", "file_size", params.clone()),
                INVALID_PARAMS,
            );
            let message = evidence["error"]["message"].as_str().unwrap_or_default();
            assert!(
                message.contains("file_size") && message.contains(mention),
                "{params:?}: {message}"
            );
        }
        // A check without required params refuses unexpected ones too.
        expect_refused(
            &mut server,
            &arguments("files", "uptime", Some(json!({"x": 1}))),
            INVALID_PARAMS,
        );
    }
}

/// A closed `params_schema` (`additionalProperties: false`) refuses
/// unknown members with or without the `json-schema` feature, in the same
/// words when the schema lists `properties` (the SDK's derived schemas
/// do): the built-in check and the full validator agree.
#[test]
fn unknown_params_members_are_refused_with_or_without_json_schema() {
    for dialect in [Dialect::DecisionGate, Dialect::Mcp] {
        let mut server = server_for(sample_contract(), dialect);
        let evidence = expect_refused(
            &mut server,
            &arguments(
                "files",
                "file_size",
                Some(json!({"path": "a.json", "pth": "b"})),
            ),
            INVALID_PARAMS,
        );
        let message = evidence["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("Additional properties are not allowed ('pth' was unexpected)"),
            "{message}"
        );
        // A closed schema without `properties`: every member is unknown
        // (the full validator words it per member, "False schema does not
        // allow 1"; the built-in check names them all).
        let evidence = expect_refused(
            &mut server,
            &arguments("files", "uptime", Some(json!({"a": 1, "b": 2}))),
            INVALID_PARAMS,
        );
        let message = evidence["error"]["message"].as_str().unwrap_or_default();
        #[cfg(not(feature = "json-schema"))]
        assert!(message.contains("('a', 'b' were unexpected)"), "{message}");
        assert!(message.contains("uptime"), "{message}");
        // Declared members pass.
        expect_emitted(
            &mut server,
            &arguments("files", "file_size", Some(json!({"path": "a.json"}))),
        );
    }
    // A schema that does not close the object lets other members through.
    let mut open = sample_contract();
    open.checks[0].params_schema = json!({"type": "object",
        "properties": {"path": {"type": "string"}}, "required": ["path"]});
    let mut server = server_for(open, Dialect::DecisionGate);
    expect_emitted(
        &mut server,
        &arguments(
            "files",
            "file_size",
            Some(json!({"path": "a.json", "extra": 1})),
        ),
    );
}

#[test]
fn valid_queries_are_emitted_and_answered_by_the_embedder() {
    for dialect in [Dialect::DecisionGate, Dialect::Mcp] {
        let mut server = server_for(sample_contract(), dialect);
        expect_emitted(
            &mut server,
            &arguments("files", "file_size", Some(json!({"path": "a.json"}))),
        );
        expect_emitted(&mut server, &arguments("files", "uptime", None));
        expect_emitted(&mut server, &arguments("files", "uptime", Some(json!({}))));
    }
}

#[test]
fn the_older_predicate_name_is_checked_like_check_id() {
    let mut server = server_for(sample_contract(), Dialect::DecisionGate);
    let mut legacy = arguments("files", "uptime", None);
    let query = legacy["query"].as_object_mut().expect("an object");
    query.remove("check_id");
    query.insert("predicate".to_owned(), json!("nope"));
    expect_refused(&mut server, &legacy, UNKNOWN_CHECK);
}

// ---------------------------------------------------------------- contract JSON

#[test]
fn the_contract_json_round_trips_through_validate() {
    let contract = sample_contract();
    let server = server_for(contract.clone(), Dialect::DecisionGate);
    let text = server.contract_json().expect("a contract is set");
    assert_eq!(
        text,
        serde_json::to_string_pretty(&contract).expect("serializes")
    );
    let parsed = ProviderContract::from_json_str(&text).expect("parses");
    parsed.validate("files").expect("validates");
    assert_eq!(parsed, contract);
    assert_eq!(
        server.contract().map(ServerContract::contract),
        Some(&contract)
    );
    // The parsed contract drives an identical server.
    let again = ServerContract::new(parsed).expect("valid");
    assert_eq!(
        again.tool_definition(),
        ServerContract::new(contract)
            .expect("valid")
            .tool_definition()
    );
}

#[cfg(feature = "json-schema")]
#[test]
fn an_invalid_contract_is_refused_before_serving() {
    let mut duplicate = sample_contract();
    duplicate.checks.push(duplicate.checks[0].clone());
    assert!(matches!(
        ServerContract::new(duplicate),
        Err(ContractError::DuplicateCheckId { .. })
    ));
    let mut bad_schema = sample_contract();
    bad_schema.checks[0].params_schema = json!({"type": "object", "minProperties": "two"});
    assert!(matches!(
        ServerContract::new(bad_schema),
        Err(ContractError::InvalidSchema { .. })
    ));
    let mut bad_example = sample_contract();
    bad_example.checks[0].examples[0].params = json!({"path": 1});
    assert!(matches!(
        ServerContract::new(bad_example),
        Err(ContractError::InvalidExample { .. })
    ));
}

// ---------------------------------------------------------------- property

/// A property type and a value of it for examples.
fn property() -> impl Strategy<Value = (Value, Value)> {
    prop_oneof![
        "[a-z]{1,6}".prop_map(|text| (json!({"type": "string", "minLength": 1}), json!(text))),
        (-1000i64..1000).prop_map(|n| (json!({"type": "integer"}), json!(n))),
        any::<bool>().prop_map(|b| (json!({"type": "boolean"}), json!(b))),
        prop::collection::vec(0u8..10, 0..3).prop_map(|items| (
            json!({"type": "array", "items": {"type": "integer"}}),
            json!(items)
        )),
    ]
}

/// A check with 0..3 properties, some required, and an example of it.
fn arbitrary_check() -> impl Strategy<Value = CheckContract> {
    (
        "[a-z][a-z0-9_]{0,10}",
        prop::collection::btree_map("[a-z]{1,5}", (property(), any::<bool>()), 0..4),
        any::<bool>(),
    )
        .prop_map(|(id, properties, omit_params)| {
            let mut schema_properties = serde_json::Map::new();
            let mut required = Vec::new();
            let mut example = serde_json::Map::new();
            for (name, ((schema, value), is_required)) in properties {
                schema_properties.insert(name.clone(), schema);
                example.insert(name.clone(), value);
                if is_required {
                    required.push(Value::from(name));
                }
            }
            let params_required = !required.is_empty();
            let schema = json!({"type": "object", "properties": schema_properties,
                                "required": required, "additionalProperties": false});
            let params = if omit_params && !params_required {
                Value::Null
            } else {
                Value::Object(example)
            };
            check(&id, params_required, schema, params)
        })
}

fn arbitrary_contract() -> impl Strategy<Value = ProviderContract> {
    (
        "[a-z][a-z0-9-]{0,8}",
        prop::collection::vec(arbitrary_check(), 1..5),
    )
        .prop_map(|(provider_id, mut checks)| {
            let mut seen = std::collections::BTreeSet::new();
            checks.retain(|check| seen.insert(check.check_id.clone()));
            ProviderContract {
                provider_id,
                checks,
                ..sample_contract()
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Every check's own examples pass tools/list's input schema and the
    /// server's contract check, reaching the embedder unchanged; a check
    /// id outside the contract fails both.
    #[cfg(feature = "json-schema")]
#[test]
    fn every_contract_example_is_accepted_by_tools_list_and_the_server(
        contract in arbitrary_contract()
    ) {
        let served = ServerContract::new(contract.clone());
        prop_assert!(served.is_ok(), "{:?}", served.err());
        let mut server = server_for(contract.clone(), Dialect::Mcp);
        let listed = tools_list(&mut server);
        let schema = CompiledSchema::compile(&listed["inputSchema"]).expect("compiles");
        for check in &contract.checks {
            for example in &check.examples {
                let params = Some(example.params.clone()).filter(|p| !p.is_null());
                let call = arguments(&contract.provider_id, &check.check_id, params);
                prop_assert!(schema.validate(&call).is_ok(), "{call}: {:?}", schema.validate(&call));
                expect_emitted(&mut server, &call);
            }
        }
        let stranger = format!("{}x", contract.checks[0].check_id);
        if contract.check(&stranger).is_none() {
            let call = arguments(&contract.provider_id, &stranger, None);
            prop_assert!(schema.validate(&call).is_err());
            expect_refused(&mut server, &call, UNKNOWN_CHECK);
        }
        let text = server.contract_json().expect("set");
        prop_assert_eq!(ProviderContract::from_json_str(&text).ok(), Some(contract));
    }
}
