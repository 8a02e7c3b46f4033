//! Ambiguous integers fail closed (issue 20, item 9).
//!
//! RFC 8785 reads every number as an IEEE-754 double, so two different
//! integer literals past 2^53 (`9007199254740993` and `9007199254740992`)
//! would get the same canonical bytes and the same evidence hash. Under the
//! `rfc8785` profile an integer literal (no fraction, no exponent) outside
//! the I-JSON safe range ±(2^53 − 1) is refused with its JSON pointer and a
//! pointer to the `decision-gate` profile; numbers written with a fraction
//! or an exponent keep RFC 8785's double semantics; the `decision-gate`
//! profile keeps Decision Gate's exact 64-bit integers.

use evidence_wire::canonical::{
    CanonicalizeErrorKind, Options, Profile, sha256, to_vec, to_vec_with,
};

fn decision_gate() -> Options {
    Options::with_profile(Profile::DecisionGate)
}

/// The pointer and literal of an `UnsafeInteger` refusal, or a panic.
fn refused(json: &str) -> (String, String, usize) {
    let error = to_vec(json.as_bytes()).expect_err(json);
    match error.kind {
        CanonicalizeErrorKind::UnsafeInteger { literal, pointer } => {
            (literal, pointer, error.offset)
        }
        other => panic!("{json}: refused as {other:?}, not as an unsafe integer"),
    }
}

#[test]
fn the_safe_range_ends_at_2_pow_53_minus_1_on_both_sides() {
    for inside in [
        "9007199254740991",
        "-9007199254740991",
        "9007199254740990",
        "1000000000000000",
        "-1000000000000000",
        "999999999999999",
        "0",
        "-0",
    ] {
        let canonical = to_vec(inside.as_bytes()).unwrap_or_else(|e| panic!("{inside}: {e}"));
        let expected = if inside == "-0" { "0" } else { inside };
        assert_eq!(canonical, expected.as_bytes(), "{inside}");
    }
    for outside in [
        "9007199254740992",
        "-9007199254740992",
        "9007199254740993",
        "-9007199254740993",
        "10000000000000000",
        "18446744073709551615",
        "-9223372036854775808",
        "123456789012345678901234567890",
    ] {
        let (literal, pointer, offset) = refused(outside);
        assert_eq!(literal, outside);
        assert_eq!(pointer, "");
        assert_eq!(offset, 0);
    }
}

#[test]
fn the_two_integers_rfc_8785_would_confuse_are_both_refused() {
    // Before: both hashed to sha256("9007199254740992").
    for json in ["[9007199254740993]", "[9007199254740992]"] {
        let error = sha256(json.as_bytes(), &Options::default()).unwrap_err();
        assert!(
            matches!(error.kind, CanonicalizeErrorKind::UnsafeInteger { .. }),
            "{json}: {error}"
        );
    }
    // Decision Gate's profile tells them apart.
    let a = sha256(b"[9007199254740993]", &decision_gate()).unwrap();
    let b = sha256(b"[9007199254740992]", &decision_gate()).unwrap();
    assert_ne!(a, b);
}

#[test]
fn a_fraction_or_an_exponent_keeps_double_semantics() {
    for (json, expected) in [
        ("9007199254740993.0", "9007199254740992"),
        ("-9007199254740993.0", "-9007199254740992"),
        ("9.007199254740993e15", "9007199254740992"),
        ("1e20", "100000000000000000000"),
        ("18446744073709551615.0", "18446744073709552000"),
        ("1E400", ""),
    ] {
        let result = to_vec(json.as_bytes());
        if expected.is_empty() {
            assert_eq!(
                result.unwrap_err().kind,
                CanonicalizeErrorKind::NumberOutOfRange
            );
        } else {
            assert_eq!(result.unwrap(), expected.as_bytes(), "{json}");
        }
    }
}

#[test]
fn the_decision_gate_profile_keeps_64_bit_integers_exact() {
    for json in [
        "9007199254740993",
        "18446744073709551615",
        "-9223372036854775808",
    ] {
        assert_eq!(
            to_vec_with(json.as_bytes(), &decision_gate()).unwrap(),
            json.as_bytes()
        );
    }
    // Past 64 bits Decision Gate has a double too, as before.
    assert_eq!(
        to_vec_with(b"18446744073709551616", &decision_gate()).unwrap(),
        b"18446744073709552000"
    );
}

#[test]
fn the_refusal_names_the_json_pointer_of_the_value() {
    for (json, pointer) in [
        (r#"{"a":[1,2,{"b":9007199254740992}]}"#, "/a/2/b"),
        (r#"[[],{"x":{}},[0,[1,-9007199254740992]]]"#, "/2/1/1"),
        (
            r#"{"z":1,"a/b":{"m~n":[9007199254740993]}}"#,
            "/a~1b/m~0n/0",
        ),
        (r#"{"\u00e9\n":9007199254740993}"#, "/\u{e9}\n"),
        // Members are named as written, before sorting.
        (
            r#"{"b":{"c":1},"a":[true,null,"x",1.5,9007199254740993]}"#,
            "/a/4",
        ),
        (r#"  9007199254740993  "#, ""),
    ] {
        let (_, found, _) = refused(json);
        assert_eq!(found, pointer, "{json}");
    }
}

#[test]
fn the_message_says_what_to_do() {
    let error = to_vec(br#"{"n":[1,-18446744073709551615]}"#).unwrap_err();
    assert_eq!(error.offset, 8);
    let message = error.to_string();
    for needle in [
        "at byte 8",
        "integer -18446744073709551615",
        "JSON pointer \"/n/1\"",
        "±(2^53 − 1)",
        "`decision-gate` profile",
        "as a string",
    ] {
        assert!(
            message.contains(needle),
            "{needle:?} missing from: {message}"
        );
    }
}

#[test]
fn a_long_literal_is_shortened_in_the_message() {
    let digits = "1".repeat(5000);
    let (literal, _, _) = refused(&format!("[{digits}]"));
    assert!(literal.len() < 60, "{literal}");
    assert!(literal.starts_with("111111"), "{literal}");
    assert!(literal.ends_with("(5000 characters)"), "{literal}");
}

#[test]
fn nothing_is_written_before_the_refusal() {
    let mut sink = Vec::new();
    let error = evidence_wire::canonical::write_with(
        br#"["a long string first", 9007199254740993]"#,
        &Options::default(),
        &mut sink,
    )
    .unwrap_err();
    assert!(matches!(
        error.kind,
        CanonicalizeErrorKind::UnsafeInteger { .. }
    ));
    assert!(sink.is_empty());
}
