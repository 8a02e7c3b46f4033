//! Every case of `core/tests/vectors/framing/content_length_cases.json`, fed
//! whole, byte by byte and in seeded random chunks, with the outcome asserted.

use evidence_wire::frame::{Decoder, FrameError, Framing, Limits};

fn base64_decode(text: &str) -> Vec<u8> {
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0);
    for c in text.bytes().filter(|c| *c != b'=') {
        let v = alphabet.iter().position(|a| *a == c).expect("base64") as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}

fn kind(error: &FrameError) -> &'static str {
    match error {
        FrameError::BodyTooLarge { .. } => "BodyTooLarge",
        FrameError::LineTooLong { .. } => "LineTooLong",
        FrameError::HeaderTooLarge { .. } => "HeaderTooLarge",
        FrameError::MalformedHeaderLine { .. } => "MalformedHeaderLine",
        FrameError::InvalidContentLength { .. } => "InvalidContentLength",
        FrameError::ContentLengthOverflow { .. } => "ContentLengthOverflow",
        FrameError::ConflictingContentLength { .. } => "ConflictingContentLength",
        FrameError::MissingContentLength { .. } => "MissingContentLength",
        FrameError::UnsupportedCharset { .. } => "UnsupportedCharset",
        FrameError::Truncated { .. } => "Truncated",
        _ => "other",
    }
}

#[derive(Debug, PartialEq)]
struct Outcome {
    frames: Vec<Vec<u8>>,
    errors: Vec<&'static str>,
    finish: Result<(), &'static str>,
}

fn run(mut decoder: Decoder, input: &[u8], chunks: &[usize]) -> Outcome {
    let mut outcome = Outcome {
        frames: vec![],
        errors: vec![],
        finish: Ok(()),
    };
    let mut rest = input;
    let mut sizes = chunks.iter().cycle();
    while !rest.is_empty() {
        let n = (*sizes.next().unwrap()).clamp(1, rest.len());
        decoder.push(&rest[..n]);
        rest = &rest[n..];
        while let Some(item) = decoder.poll_frame() {
            match item {
                Ok(frame) => outcome.frames.push(frame.body.to_vec()),
                Err(error) => outcome.errors.push(kind(&error)),
            }
        }
    }
    outcome.finish = decoder.finish().map_err(|e| kind(&e));
    outcome
}

/// Our asserted outcome per case: (frames, errors, finish).
/// Where we differ from the file's "recommended", the comment says why.
fn expected(id: &str, body: &[u8]) -> (usize, Vec<&'static str>, Result<(), &'static str>) {
    match id {
        "single"
        | "content_type_after"
        | "content_type_before"
        | "content_type_utf8_legacy_spelling"
        | "header_name_lowercase"
        | "header_name_mixed_case"
        | "no_space_after_colon"
        | "extra_spaces_around_value"
        | "leading_zeros"
        | "utf8_multibyte_body_bytes_not_chars"
        | "unknown_extra_header" => (1, vec![], Ok(())),
        "two_back_to_back" => (2, vec![], Ok(())),
        // Differs from "recommended" (error_or_incomplete): bare LF line endings are
        // accepted here, as DG's own reader does (spec/framing.md).
        "lf_only_line_endings" => (1, vec![], Ok(())),
        // The frame itself is fine; the empty / invalid body is the envelope
        // layer's -32700, not a framing error.
        "zero_length_body" | "invalid_json_body" => (1, vec![], Ok(())),
        // 40 bytes are taken (not valid JSON: -32700 upstream); the 5 leftover
        // bytes start a header block that never ends.
        "utf16_length_instead_of_bytes_is_wrong" | "declared_shorter_than_json" => {
            (1, vec![], Err("Truncated"))
        }
        "missing_content_length" | "garbage_before_header" => {
            (0, vec!["MissingContentLength"], Ok(()))
        }
        "nan_content_length" | "negative_content_length" | "numeric_prefix_garbage" => {
            (0, vec!["InvalidContentLength"], Ok(()))
        }
        "body_shorter_than_declared_then_eof" => (0, vec![], Err("Truncated")),
        "duplicate_content_length_differs" => (0, vec!["ConflictingContentLength"], Ok(())),
        // Auto-detection reads it as newline-delimited JSON (what MCP clients send).
        "bare_json_line_no_headers" => (1, vec![], Ok(())),
        "huge_content_length" => (0, vec!["BodyTooLarge"], Err("Truncated")),
        other => panic!(
            "case {other} has no asserted outcome (body {} bytes)",
            body.len()
        ),
    }
}

#[test]
fn every_framing_vector_whole_bytewise_and_chunked() {
    let path = crate::vectors_dir().join("framing/content_length_cases.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let file: serde_json::Value = serde_json::from_str(&text).unwrap();
    let cases = file["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 26);
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for case in cases {
        let id = case["id"].as_str().unwrap();
        let input = base64_decode(case["input_b64"].as_str().unwrap());
        let (frames, errors, finish) = expected(id, &input);
        let mut random = Vec::new();
        for _ in 0..16 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            random.push((seed % 23 + 1) as usize);
        }
        let whole = run(Decoder::new(Limits::default()), &input, &[usize::MAX]);
        for chunks in [vec![1], random] {
            let split = run(Decoder::new(Limits::default()), &input, &chunks);
            assert_eq!(
                whole, split,
                "case {id}: chunking {chunks:?} changed the outcome"
            );
        }
        assert_eq!(whole.frames.len(), frames, "case {id}: frames {:?}", whole);
        assert_eq!(whole.errors, errors, "case {id}");
        assert_eq!(whole.finish, finish, "case {id}");
        if case["recommended"]["outcome"] == "messages" {
            for body in &whole.frames {
                serde_json::from_slice::<serde_json::Value>(body)
                    .unwrap_or_else(|e| panic!("case {id}: body is not the JSON message: {e}"));
            }
        }
    }
}

#[test]
fn bare_json_line_under_forced_content_length_is_a_malformed_header() {
    let input = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"example\"}\n";
    let out = run(
        Decoder::with_framing(Framing::ContentLength, Limits::default()),
        input,
        &[usize::MAX],
    );
    assert_eq!(out.frames.len(), 0);
    assert_eq!(out.errors, vec!["MalformedHeaderLine"]);
}
