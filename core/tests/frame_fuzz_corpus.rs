//! Replays the checked-in fuzz corpora of the framing targets
//! (`fuzz/corpus/frame_decoder/`, `fuzz/corpus/frame_chunking/`) through the
//! targets' own checks (`fuzz/fuzz_targets/common/frame.rs`), so `cargo test`
//! guards every input a fuzzer has found, and pins what a few seeds decode to
//! so the checks are shown to see real frames.

#[path = "../../fuzz/fuzz_targets/common/frame.rs"]
mod checks;

use evidence_wire::frame::{FrameError, Framing};
use std::path::{Path, PathBuf};

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target)
}

fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
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
    let names: Vec<_> = inputs.iter().map(|(name, _)| name.as_str()).collect();
    for seed in [
        "single",
        "dg_first_message",
        "huge_content_length",
        "ndjson_two_lines",
    ] {
        assert!(names.contains(&seed), "{target} lacks the seed {seed}");
    }
    assert!(
        inputs.len() >= 30,
        "the corpus of {target} holds the 26 framing vectors, DG's first message and NDJSON seeds"
    );
    inputs
}

fn whole(data: &[u8], framing: Option<Framing>) -> checks::Outcome {
    checks::decode(data, framing, checks::DECODER_LIMITS, || usize::MAX)
}

#[test]
fn frame_decoder_corpus_replays() {
    for (name, input) in corpus("frame_decoder") {
        eprintln!("replaying frame_decoder/{name}");
        checks::run_decoder(&input);
    }
}

#[test]
fn frame_chunking_corpus_replays() {
    for (name, input) in corpus("frame_chunking") {
        eprintln!("replaying frame_chunking/{name}");
        checks::run_chunking(&input);
    }
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
