//! The canonical error table, row by row.

use evidence_wire::error::{CanonicalError, UnknownErrorCode};
use evidence_wire::id::Id;
use serde_json::json;
use std::collections::HashSet;

#[test]
fn every_row_matches_the_table() {
    let table = [
        ("INVALID_ENVELOPE", 400, -32600, "Invalid MCP envelope"),
        ("INVALID_TOOL_INPUT", 422, -32602, "Invalid tool input"),
        ("TOOL_NOT_FOUND", 404, -32001, "Unknown tool"),
        ("INTERNAL_ERROR", 500, -32603, "Internal error"),
        ("PARSE_ERROR", 400, -32700, "Parse error"),
        ("METHOD_NOT_FOUND", 404, -32601, "Method not found"),
        ("UNAUTHENTICATED", 401, -32004, "Unauthenticated"),
        ("FORBIDDEN", 403, -32003, "Forbidden"),
        ("PAYLOAD_TOO_LARGE", 413, -32070, "Payload too large"),
        ("RATE_LIMITED", 429, -32071, "Rate limited"),
        ("OVERLOADED", 503, -32072, "Overloaded"),
        ("RESOURCE_NOT_FOUND", 404, -32002, "Resource not found"),
        ("HEADER_MISMATCH", 400, -32020, "Header mismatch"),
        (
            "UNSUPPORTED_PROTOCOL_VERSION",
            400,
            -32022,
            "Unsupported protocol version",
        ),
    ];
    assert_eq!(table.len(), CanonicalError::ALL.len());
    for (name, status, code, message) in table {
        let error: CanonicalError = name.parse().unwrap();
        assert_eq!(error.name(), name);
        assert_eq!(error.http_status(), status, "{name}");
        assert_eq!(error.jsonrpc_code(), code, "{name}");
        assert_eq!(error.message(), message, "{name}");
        assert_eq!(error.kind(), name.to_ascii_lowercase(), "{name}");
        assert_eq!(CanonicalError::from_jsonrpc_code(code), Some(error));
        assert_eq!(CanonicalError::try_from(name), Ok(error));
    }
}

#[test]
fn codes_and_names_are_distinct() {
    let codes: HashSet<_> = CanonicalError::ALL
        .iter()
        .map(|e| e.jsonrpc_code())
        .collect();
    let names: HashSet<_> = CanonicalError::ALL.iter().map(|e| e.name()).collect();
    assert_eq!(codes.len(), CanonicalError::ALL.len());
    assert_eq!(names.len(), CanonicalError::ALL.len());
}

#[test]
fn unknown_code_names_are_rejected_without_fallback() {
    for name in [
        "",
        "NOT_A_CODE",
        "invalid_envelope",
        "Invalid_Envelope",
        " TOOL_NOT_FOUND",
    ] {
        assert_eq!(
            name.parse::<CanonicalError>(),
            Err(UnknownErrorCode(name.to_string())),
            "{name:?}"
        );
    }
    assert!(UnknownErrorCode("X".into()).to_string().contains("`X`"));
    assert_eq!(CanonicalError::from_jsonrpc_code(-32000), None);
}

#[test]
fn error_object_echoes_the_request_id_or_null() {
    let with_id =
        CanonicalError::ToolNotFound.error_object(Some(&Id::Number(7)), Some("no tool `x`"));
    assert_eq!(
        serde_json::to_value(&with_id).unwrap(),
        json!({"code": -32001, "message": "Unknown tool",
               "data": {"kind": "tool_not_found", "retryable": false, "request_id": 7, "detail": "no tool `x`"}})
    );
    let without = CanonicalError::ParseError.error_object(None, None);
    assert_eq!(
        serde_json::to_value(&without).unwrap(),
        json!({"code": -32700, "message": "Parse error",
               "data": {"kind": "parse_error", "retryable": false, "request_id": null}})
    );
    assert!(CanonicalError::Overloaded.retryable());
    assert!(CanonicalError::RateLimited.retryable());
    assert!(!CanonicalError::InternalError.retryable());
}

/// `spec/errors.md` documents exactly the rows of the code, with the same
/// status, code, message, kind and retryability.
#[test]
fn spec_errors_md_matches_the_table() {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../spec/errors.md")).unwrap();
    let rows: Vec<Vec<String>> = text
        .lines()
        .filter(|line| line.starts_with("| `"))
        .map(|line| {
            line.trim_matches('|')
                .split('|')
                .map(|cell| cell.trim().trim_matches('`').to_string())
                .collect()
        })
        .collect();
    assert_eq!(
        rows.len(),
        CanonicalError::ALL.len(),
        "one documented row per error"
    );
    for (row, error) in rows.iter().zip(CanonicalError::ALL) {
        assert_eq!(row[0], error.name());
        assert_eq!(row[1], error.http_status().to_string(), "{}", error.name());
        assert_eq!(row[2], error.jsonrpc_code().to_string(), "{}", error.name());
        assert_eq!(row[3], error.message(), "{}", error.name());
        assert_eq!(row[4], error.kind(), "{}", error.name());
        assert_eq!(
            row[5],
            if error.retryable() { "yes" } else { "no" },
            "{}",
            error.name()
        );
    }
}

#[test]
fn error_objects_of_every_row_render_code_message_and_kind() {
    for error in CanonicalError::ALL {
        let object =
            serde_json::to_value(error.error_object(Some(&Id::from("req-1")), None)).unwrap();
        assert_eq!(object["code"], error.jsonrpc_code());
        assert_eq!(object["message"], error.message());
        assert_eq!(object["data"]["kind"], error.kind());
        assert_eq!(object["data"]["request_id"], "req-1");
        assert!(object["data"].get("pointer").is_none());
        assert_eq!(
            error.to_string(),
            format!("{} ({})", error.name(), error.message())
        );
    }
    let with_pointer = CanonicalError::InvalidToolInput
        .error_object(None, Some("bad"))
        .with_pointer("/query/check_id");
    assert_eq!(
        serde_json::to_value(with_pointer).unwrap()["data"]["pointer"],
        "/query/check_id"
    );
}
