//! Replays the checked-in corpora of every core fuzz target
//! (`fuzz/corpus/<target>/`) through the targets' own checks and
//! interpreters (`fuzz/fuzz_targets/common/*.rs`), so `cargo test` guards
//! every input a fuzzer has found; and a cheap stand-in for the fuzzer
//! itself: a fixed pseudo-random stream of inputs through the stateful
//! interpreters.

use std::path::{Path, PathBuf};

#[path = "../../../fuzz/fuzz_targets/common/canonical.rs"]
mod canonical_checks;
#[path = "../../../fuzz/fuzz_targets/common/client_ops.rs"]
mod client_ops;
#[path = "../../../fuzz/fuzz_targets/common/envelope.rs"]
mod envelope_checks;
#[path = "../../../fuzz/fuzz_targets/common/frame.rs"]
mod frame_checks;
#[path = "../../../fuzz/fuzz_targets/common/server_ops.rs"]
mod server_ops;

/// The corpus folder of fuzz target `target`.
pub(crate) fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target)
}

/// Every input of `target`'s corpus, sorted by file name, with its name.
pub(crate) fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = corpus_dir(target);
    let mut inputs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&path).unwrap())
        })
        .collect();
    inputs.sort();
    inputs
}

/// `count` pseudo-random inputs of up to `max_len` bytes, the same every run.
pub(crate) fn arbitrary_inputs(count: usize, max_len: u64) -> Vec<Vec<u8>> {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..count)
        .map(|_| {
            let len = (state % max_len) as usize;
            (0..len)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    (state >> 24) as u8
                })
                .collect()
        })
        .collect()
}

/// Runs `run` on every input of `target`, naming the one that breaks.
fn replay(target: &str, minimum: usize, run: impl Fn(&[u8])) {
    let inputs = corpus(target);
    assert!(
        inputs.len() >= minimum,
        "the corpus of {target} holds its {minimum} seeds"
    );
    for (name, input) in inputs {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&input)));
        assert!(outcome.is_ok(), "{target}/{name} breaks an invariant");
    }
}

mod frame {
    //! The framing targets, and what a few seeds decode to (so the checks
    //! are shown to see real frames).
    use evidence_wire::frame::{FrameError, Framing};

    use super::frame_checks as checks;
    use super::{corpus, corpus_dir, replay};

    fn whole(data: &[u8], framing: Option<Framing>) -> checks::Outcome {
        checks::decode(data, framing, checks::DECODER_LIMITS, || usize::MAX)
    }

    #[test]
    fn named_seeds_are_present() {
        for target in ["frame_decoder", "frame_chunking"] {
            let inputs = corpus(target);
            let names: Vec<_> = inputs.iter().map(|(name, _)| name.as_str()).collect();
            for seed in [
                "single",
                "dg_first_message",
                "huge_content_length",
                "ndjson_two_lines",
            ] {
                assert!(names.contains(&seed), "{target} lacks the seed {seed}");
            }
        }
    }

    #[test]
    fn frame_decoder_corpus_replays() {
        // The 26 framing vectors, DG's first message and NDJSON seeds.
        replay("frame_decoder", 30, checks::run_decoder);
    }

    #[test]
    fn frame_chunking_corpus_replays() {
        replay("frame_chunking", 30, checks::run_chunking);
    }

    #[test]
    fn seeds_decode_to_their_frames() {
        let read = |name: &str| std::fs::read(corpus_dir("frame_decoder").join(name)).unwrap();
        // DG's real first message: one Content-Length frame holding a request.
        let dg = whole(&read("dg_first_message"), None);
        assert_eq!(dg.framing, Some(Framing::ContentLength));
        assert_eq!(dg.finish, Ok(()));
        let [Ok((_, body))] = dg.frames.as_slice() else {
            panic!("one frame expected: {:?}", dg.frames)
        };
        let body: serde_json::Value = serde_json::from_slice(body).unwrap();
        assert_eq!(body["method"], "tools/call");
        // Two NDJSON lines: two frames, at their offsets.
        let lines = whole(&read("ndjson_two_lines"), None);
        assert_eq!(lines.framing, Some(Framing::NewlineDelimited));
        assert_eq!(lines.frames.len(), 2);
        // A declared length over the limit is skipped, not buffered, then the
        // input ends inside it.
        let huge = whole(&read("huge_content_length"), Some(Framing::ContentLength));
        assert!(matches!(
            huge.frames.first(),
            Some(Err(FrameError::BodyTooLarge { .. }))
        ));
    }
}

mod envelope {
    //! The `envelope` target, and the outcome of a few named seeds.
    use evidence_wire::envelope::{Id, Incoming, Message, Policy, validate};
    use evidence_wire::error::CanonicalError;

    use super::envelope_checks as checks;
    use super::{corpus_dir, replay};

    #[test]
    fn envelope_corpus_replays() {
        // The seeds: 15 JSON-RPC examples, MCP messages, hostile cases.
        replay("envelope", 60, checks::run);
    }

    #[test]
    fn named_seeds_have_their_outcomes() {
        let read = |name: &str| std::fs::read(corpus_dir("envelope").join(name)).unwrap();
        let mcp = Policy::mcp();
        let code =
            |name: &str, policy: &Policy| validate(&read(name), policy).err().map(|r| r.error);
        assert_eq!(
            code("deep_129", &mcp),
            Some(CanonicalError::InvalidEnvelope)
        );
        assert_eq!(
            code("deep_open_brackets", &Policy::jsonrpc()),
            Some(CanonicalError::InvalidEnvelope)
        );
        assert_eq!(
            code("duplicate_id", &mcp),
            Some(CanonicalError::InvalidEnvelope)
        );
        assert_eq!(code("invalid_utf8", &mcp), Some(CanonicalError::ParseError));
        assert_eq!(code("empty", &mcp), Some(CanonicalError::ParseError));
        // The frame layer strips a BOM; a body that still has one is not JSON.
        assert_eq!(code("bom_prefixed", &mcp), Some(CanonicalError::ParseError));
        assert_eq!(code("strict_uuid", &Policy::strict().uuid_ids(true)), None);
        assert_eq!(code("mcp_call-tool-request", &mcp), None);
        // DG's real first message (the body of its first frame) is a request.
        let dg_first = read("dg_first_message");
        let Ok(Incoming::Single(Message::Request(first))) = validate(&dg_first, &mcp) else {
            panic!("dg_first_message is a request")
        };
        assert_eq!(first.method, "tools/call");
        assert_eq!(first.id, Id::from(1_i64));
        let escaped = read("escaped_strings");
        let Ok(Incoming::Single(Message::Request(request))) = validate(&escaped, &mcp) else {
            panic!("escaped_strings is a request")
        };
        assert_eq!(request.id, Id::from("a\"b\u{1f600}"));
        assert_eq!(request.method, "t/x");
        // A lone surrogate is not a readable string id.
        let rejection = validate(&read("lone_surrogate"), &mcp).unwrap_err();
        assert!(matches!(
            rejection.error,
            CanonicalError::InvalidEnvelope | CanonicalError::ParseError
        ));
        assert_eq!(rejection.id, None);
    }
}

mod canonical {
    //! The `canonical` target (seeded from the JCS vectors): agreement with
    //! `serde_json_canonicalizer`, idempotence under both profiles, and both
    //! profiles validating alike.
    use super::canonical_checks as checks;
    use super::corpus;

    #[test]
    fn canonical_corpus_replays() {
        let (mut accepted, mut rejected) = (0, 0);
        for (name, data) in corpus("canonical") {
            let ok = checks::run(&data);
            // Seeds named after a must-error vector must be rejected.
            if name.starts_with("edge_err_") {
                assert!(!ok, "{name} must be rejected");
            }
            if ok {
                accepted += 1;
            } else {
                rejected += 1;
            }
        }
        assert!(
            accepted >= 40 && rejected >= 8,
            "corpus holds the JCS vectors: {accepted} accepted, {rejected} rejected"
        );
    }
}

mod stateful {
    //! The `server_ops` and `client_ops` targets: the corpora and a fixed
    //! stream of arbitrary inputs through their interpreters and invariants.
    use super::{arbitrary_inputs, client_ops, replay, server_ops};

    #[test]
    fn server_ops_corpus_replays() {
        replay("server_ops", 6, server_ops::run);
    }

    #[test]
    fn client_ops_corpus_replays() {
        replay("client_ops", 6, client_ops::run);
    }

    #[test]
    fn arbitrary_bytes_keep_the_server_invariants() {
        for input in arbitrary_inputs(300, 400) {
            server_ops::run(&input);
        }
    }

    #[test]
    fn arbitrary_bytes_keep_the_client_invariants() {
        for input in arbitrary_inputs(300, 400) {
            client_ops::run(&input);
        }
    }
}
