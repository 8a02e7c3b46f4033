//! Replays the checked-in corpus of the `bundled_params` fuzz target
//! (`fuzz/corpus/bundled_params/`) through the target's own checks
//! (`fuzz/fuzz_targets/common/bundled_params.rs`): no panic, exactly one
//! of value and error, `json_path` values within their byte limit. The
//! `regression_*` seeds are the inputs that crashed or blew up the
//! provider before (issue 20); each must be refused with its code.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic

#[path = "../../../fuzz/fuzz_targets/common/bundled_params.rs"]
mod checks;

use std::path::Path;

#[test]
fn bundled_params_corpus_replays() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/bundled_params");
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("entry").path())
        .collect();
    entries.sort();
    let expected = [
        ("regression_nested_parens_1000", "invalid_jsonpath"),
        ("regression_nested_not_filters_500", "invalid_jsonpath"),
        ("regression_nested_filters_400", "invalid_jsonpath"),
        ("regression_nested_calls_400", "invalid_jsonpath"),
        ("regression_descendant_all_wide", "size_limit_exceeded"),
        ("regression_doubling_selectors", "size_limit_exceeded"),
        ("regression_descendant_chain", "size_limit_exceeded"),
        (
            "regression_absolute_query_per_candidate",
            "size_limit_exceeded",
        ),
        ("regression_offset_25", "invalid_params"),
    ];
    let (mut values, mut errors) = (0, 0);
    for path in &entries {
        let data = std::fs::read(path).expect("seed");
        let name = path
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        // Each seed on a small stack, as a worker thread would run it with
        // room to spare: a parser recursion would overflow here first.
        let outcome = std::thread::Builder::new()
            .stack_size(512 * 1024)
            .spawn(move || checks::run(&data))
            .expect("spawn")
            .join()
            .unwrap_or_else(|_| panic!("{name}: an invariant broke"));
        if let Some((_, code)) = expected.iter().find(|(seed, _)| *seed == name) {
            assert_eq!(outcome.as_deref(), Some(*code), "{name}");
        }
        match outcome {
            None => values += 1,
            Some(_) => errors += 1,
        }
    }
    assert!(
        values >= 10 && errors >= 15,
        "the corpus holds answers and refusals: {values} values, {errors} errors"
    );
}
