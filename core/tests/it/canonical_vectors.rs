//! Every file of the RFC 8785 vector set in `core/tests/vectors/jcs/`:
//! the six upstream input/output pairs (byte-exact, and against their hex
//! twins), the ES6 number files (1k, 10k and the gzipped 100k prefix), RFC
//! 8785 Appendix B, the RFC's worked examples, the extra edge cases and the
//! must-reject cases.
//!
//! One rule of ours changes what some of these vectors expect: under the
//! RFC 8785 profile an integer literal outside the I-JSON safe range
//! ±(2^53 − 1) is refused (`UnsafeInteger`), because RFC 8785 would read it
//! as a double that other integers share. Where a vector feeds such a
//! literal, the test asserts the refusal and checks the vector's double
//! semantics on the same number spelled with a fraction (`….0`), which
//! keeps them.

use std::io::Read;
use std::path::PathBuf;

use evidence_wire::canonical::{
    self, CanonicalizeErrorKind, Options, Profile, hex_lower, to_vec, to_vec_with, write_number,
};
use serde_json::Value;

fn jcs_dir() -> PathBuf {
    crate::vectors_dir().join("jcs")
}

fn read(relative: &str) -> Vec<u8> {
    let path = jcs_dir().join(relative);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex_lower(&sha2::Sha256::digest(bytes))
}

fn number_text(value: f64) -> String {
    let mut out = Vec::new();
    write_number(value, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

const UPSTREAM: [&str; 6] = [
    "arrays",
    "french",
    "structures",
    "unicode",
    "values",
    "weird",
];

#[test]
fn upstream_pairs_are_byte_exact() {
    for name in UPSTREAM {
        let input = read(&format!("input/{name}.json"));
        let expected = read(&format!("output/{name}.json"));
        let actual = to_vec(&input).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            String::from_utf8_lossy(&actual),
            String::from_utf8_lossy(&expected),
            "{name}"
        );
        assert_eq!(actual, expected, "{name}: bytes differ");
        // The hash sink sees exactly the same bytes.
        let digest = canonical::sha256(&input, &Options::default()).unwrap();
        assert_eq!(hex_lower(&digest), sha256_hex(&expected), "{name}");
    }
}

#[test]
fn upstream_outputs_match_their_hex_twins() {
    for name in UPSTREAM {
        let hex = String::from_utf8(read(&format!("outhex/{name}.txt"))).unwrap();
        let bytes: Vec<u8> = hex
            .split_whitespace()
            .map(|pair| u8::from_str_radix(pair, 16).unwrap())
            .collect();
        let input = read(&format!("input/{name}.json"));
        assert_eq!(to_vec(&input).unwrap(), bytes, "{name}");
    }
}

#[test]
fn upstream_outputs_are_fixed_points() {
    for name in UPSTREAM {
        let expected = read(&format!("output/{name}.json"));
        assert_eq!(to_vec(&expected).unwrap(), expected, "{name}");
    }
}

/// Checks one `hex-ieee,expected` line three ways: formatting the double
/// directly, and canonicalizing two JSON spellings of it (Rust's shortest
/// round-trip text and its exponent form) through the parser.
fn check_es6_line(line: &str) {
    let (hex, expected) = line
        .split_once(',')
        .unwrap_or_else(|| panic!("bad line {line:?}"));
    let bits = u64::from_str_radix(hex, 16).unwrap();
    let value = f64::from_bits(bits);
    assert_eq!(number_text(value), expected, "bits {hex}");
    for spelling in [format!("{value:?}"), format!("{value:e}")] {
        let canonical = to_vec(spelling.as_bytes()).unwrap_or_else(|e| panic!("{spelling}: {e}"));
        assert_eq!(
            String::from_utf8_lossy(&canonical),
            expected,
            "bits {hex} spelled {spelling}"
        );
    }
    // The expected text is canonical, so it is its own canonical form;
    // except that ECMAScript prints doubles up to 1e21 as plain integers,
    // and an integer literal past 2^53 − 1 is refused as input (I-JSON).
    match to_vec(expected.as_bytes()) {
        Ok(again) => assert_eq!(again, expected.as_bytes(), "bits {hex}"),
        Err(error) => {
            assert!(
                is_unsafe_integer_literal(expected),
                "bits {hex}: {expected} refused: {error}"
            );
            assert!(
                matches!(error.kind, CanonicalizeErrorKind::UnsafeInteger { ref pointer, .. } if pointer.is_empty()),
                "bits {hex}: {error}"
            );
        }
    }
}

/// An integer literal (no fraction, no exponent) whose magnitude is past
/// 2^53 − 1: computed independently of the library, with `u128`
/// arithmetic and a length cut-off.
fn is_unsafe_integer_literal(text: &str) -> bool {
    let digits = text.strip_prefix('-').unwrap_or(text);
    !digits.is_empty()
        && digits.bytes().all(|byte| byte.is_ascii_digit())
        && (digits.len() > 38 || digits.parse::<u128>().unwrap() > (1u128 << 53) - 1)
}

fn check_es6_file(text: &str, lines: usize, sha256: &str) {
    assert_eq!(sha256_hex(text.as_bytes()), sha256, "file content changed");
    let mut count = 0;
    for line in text.lines() {
        check_es6_line(line);
        count += 1;
    }
    assert_eq!(count, lines);
}

#[test]
fn es6_numbers_1000() {
    let text = String::from_utf8(read("es6numbers/es6testfile_1000.txt")).unwrap();
    check_es6_file(
        &text,
        1_000,
        "be18b62b6f69cdab33a7e0dae0d9cfa869fda80ddc712221570f9f40a5878687",
    );
}

#[test]
fn es6_numbers_10000() {
    let text = String::from_utf8(read("es6numbers/es6testfile_10000.txt")).unwrap();
    check_es6_file(
        &text,
        10_000,
        "b9f7a8e75ef22a835685a52ccba7f7d6bdc99e34b010992cbc5864cd12be6892",
    );
}

#[test]
fn es6_numbers_100000_gzip() {
    let compressed = read("es6numbers/es6testfile_100000.txt.gz");
    let mut text = String::new();
    flate2::read::GzDecoder::new(compressed.as_slice())
        .read_to_string(&mut text)
        .unwrap();
    check_es6_file(
        &text,
        100_000,
        "22776e6d4b49fa294a0d0f349268e5c28808fe7e0cb2bcbe28f63894e494d4c7",
    );
}

#[test]
fn es6_static_edge_values_are_the_head_of_the_test_file() {
    // `es6_static_u64s.txt` lists the hand-picked bit patterns that open the
    // generated files; every one of them must format as the file says.
    let statics = String::from_utf8(read("es6numbers/es6_static_u64s.txt")).unwrap();
    let file = String::from_utf8(read("es6numbers/es6testfile_1000.txt")).unwrap();
    let expected: std::collections::HashMap<u64, &str> = file
        .lines()
        .filter_map(|line| line.split_once(','))
        .map(|(hex, text)| (u64::from_str_radix(hex, 16).unwrap(), text))
        .collect();
    let mut checked = 0;
    for line in statics.lines() {
        let hex = line.trim().trim_start_matches("0x");
        let bits = u64::from_str_radix(hex, 16).unwrap_or_else(|e| panic!("{line:?}: {e}"));
        let text = expected
            .get(&bits)
            .unwrap_or_else(|| panic!("{line} is not in the 1,000-line file"));
        assert_eq!(number_text(f64::from_bits(bits)), *text, "{line}");
        checked += 1;
    }
    assert_eq!(checked, 168);
}

#[test]
fn rfc8785_appendix_b() {
    let text = String::from_utf8(read("extra/rfc8785_appendix_b.csv")).unwrap();
    let mut rows = 0;
    for line in text.lines().filter(|line| !line.starts_with('#')) {
        let mut fields = line.splitn(3, ',');
        let (hex, expected) = (fields.next().unwrap(), fields.next().unwrap());
        let value = f64::from_bits(u64::from_str_radix(hex, 16).unwrap());
        rows += 1;
        if expected.is_empty() {
            let error = write_number(value, &mut Vec::new()).unwrap_err();
            assert_eq!(
                error.kind,
                CanonicalizeErrorKind::NumberOutOfRange,
                "{line}"
            );
        } else {
            assert_eq!(number_text(value), expected, "{line}");
            let spelled = format!("{value:e}");
            assert_eq!(to_vec(spelled.as_bytes()).unwrap(), expected.as_bytes());
        }
    }
    assert_eq!(rows, 26);
}

fn cases(file: &str, list: &str) -> Vec<Value> {
    let document: Value = serde_json::from_slice(&read(file)).unwrap();
    document[list].as_array().unwrap().clone()
}

fn check_case(case: &Value) {
    let id = case["id"].as_str().unwrap();
    let input = case["input"].as_str().unwrap();
    let expected = case["expected"].as_str().unwrap();
    let sha256 = case["sha256"].as_str().unwrap();
    let actual = to_vec(input.as_bytes()).unwrap_or_else(|e| panic!("{id}: {e}"));
    assert_eq!(String::from_utf8_lossy(&actual), expected, "{id}");
    assert_eq!(sha256_hex(expected.as_bytes()), sha256, "{id}: vector file");
    let digest = canonical::sha256(input.as_bytes(), &Options::default()).unwrap();
    assert_eq!(hex_lower(&digest), sha256, "{id}: hash sink");
}

#[test]
fn rfc8785_worked_examples() {
    let all = cases("extra/rfc8785_examples.json", "cases");
    assert_eq!(all.len(), 4);
    all.iter().for_each(check_case);
}

/// The edge cases whose input is an integer literal past 2^53 − 1.
const UNSAFE_INTEGER_CASES: [&str; 4] = [
    "bigint_u64_max",
    "bigint_2p53p1",
    "bigint_i64_min",
    "bigint_18digits",
];

/// A case `[N]` with `N` past the I-JSON safe range: refused under RFC
/// 8785 with the literal and its pointer; kept verbatim under Decision
/// Gate's profile (all four fit 64 bits); and spelled `[N.0]` it keeps the
/// vector's double semantics, bytes and hash.
fn check_unsafe_integer_case(case: &Value) {
    let id = case["id"].as_str().unwrap();
    let input = case["input"].as_str().unwrap();
    let literal = input.trim_start_matches('[').trim_end_matches(']');
    assert!(is_unsafe_integer_literal(literal), "{id}");
    let error = to_vec(input.as_bytes()).expect_err(id);
    assert_eq!(
        error.kind,
        CanonicalizeErrorKind::UnsafeInteger {
            literal: literal.to_owned(),
            pointer: "/0".to_owned(),
        },
        "{id}"
    );
    assert_eq!(error.offset, 1, "{id}");
    assert!(error.to_string().contains("decision-gate"), "{id}: {error}");
    let dg = to_vec_with(
        input.as_bytes(),
        &Options::with_profile(Profile::DecisionGate),
    )
    .unwrap();
    assert_eq!(dg, input.as_bytes(), "{id}");
    let fraction = format!("[{literal}.0]");
    let mut spelled = case.clone();
    spelled["input"] = Value::from(fraction);
    check_case(&spelled);
}

#[test]
fn extra_edge_cases() {
    let all = cases("extra/edge_cases.json", "cases");
    assert_eq!(all.len(), 25);
    let mut unsafe_integers = 0;
    for case in &all {
        if UNSAFE_INTEGER_CASES.contains(&case["id"].as_str().unwrap()) {
            check_unsafe_integer_case(case);
            unsafe_integers += 1;
        } else {
            check_case(case);
        }
    }
    assert_eq!(unsafe_integers, UNSAFE_INTEGER_CASES.len());
}

#[test]
fn must_error_cases_are_rejected_with_their_kind() {
    let all = cases("extra/edge_cases.json", "must_error");
    assert_eq!(all.len(), 8);
    for case in &all {
        let id = case["id"].as_str().unwrap();
        let input = case["input"].as_str().unwrap();
        for profile in [Profile::Rfc8785, Profile::DecisionGate] {
            let error =
                to_vec_with(input.as_bytes(), &Options::with_profile(profile)).expect_err(id);
            let expected_kind = match id {
                "err_lone_high_surrogate" | "err_lone_low_surrogate" | "err_lone_surrogate_key" => {
                    matches!(error.kind, CanonicalizeErrorKind::LoneSurrogate)
                }
                "err_duplicate_key" | "err_duplicate_key_escaped" => {
                    error.kind == CanonicalizeErrorKind::DuplicateKey("a".to_owned())
                }
                "err_number_overflow" => error.kind == CanonicalizeErrorKind::NumberOutOfRange,
                "err_nan_literal" | "err_infinity_literal" => {
                    matches!(error.kind, CanonicalizeErrorKind::Syntax(_))
                }
                other => panic!("unknown must_error case {other}"),
            };
            assert!(expected_kind, "{id} ({profile:?}): wrong error {error}");
            // Errors point at the offending place, after the opening '['/'{'.
            assert!(
                error.offset >= 1 && error.offset < input.len(),
                "{id}: {error}"
            );
        }
    }
}
