//! Replays the checked-in corpus of the `client_ops` fuzz target
//! (`fuzz/corpus/client_ops/`) through the target's own interpreter and
//! invariants (`fuzz/fuzz_targets/common/client_ops.rs`), so `cargo test`
//! guards every input a fuzzer has found.

#[path = "../../fuzz/fuzz_targets/common/client_ops.rs"]
mod ops;

use std::path::Path;

#[test]
fn client_ops_corpus_replays() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/client_ops");
    let mut inputs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    inputs.sort();
    assert!(inputs.len() >= 6, "the seed corpus is present");
    for path in inputs {
        let data = std::fs::read(&path).unwrap();
        let outcome = std::panic::catch_unwind(|| ops::run(&data));
        assert!(outcome.is_ok(), "{} breaks an invariant", path.display());
    }
}

#[test]
fn arbitrary_bytes_keep_the_invariants() {
    // A cheap stand-in for the fuzzer in `cargo test`: a fixed
    // pseudo-random stream of inputs.
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..300 {
        let len = (state % 400) as usize;
        let data: Vec<u8> = (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 24) as u8
            })
            .collect();
        ops::run(&data);
    }
}
