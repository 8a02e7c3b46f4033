//! Replays the checked-in fuzz corpora of the framing targets (`fuzz/corpus/`)
//! with the same checks the fuzz targets make, so `cargo test` guards every
//! input a fuzzer has found.

use evidence_wire::frame::{Decoder, Limits};
use std::path::Path;

fn decode(data: &[u8], chunk: usize, limits: Limits) -> Vec<Result<Vec<u8>, String>> {
    let mut decoder = Decoder::new(limits);
    let mut out = Vec::new();
    for piece in data.chunks(chunk.max(1)) {
        decoder.push(piece);
        while let Some(frame) = decoder.poll_frame() {
            let frame = frame.map(|f| f.body.to_vec()).map_err(|e| e.to_string());
            if let Ok(body) = &frame {
                assert!(body.len() <= limits.max_body_bytes);
            }
            out.push(frame);
        }
    }
    out.push(
        decoder
            .finish()
            .map(|()| Vec::new())
            .map_err(|e| e.to_string()),
    );
    out
}

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut inputs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| std::fs::read(entry.unwrap().path()).unwrap())
        .collect();
    inputs.sort();
    assert!(
        inputs.len() >= 27,
        "the corpus of {target} holds the framing vectors and DG's first message"
    );
    inputs
}

#[test]
fn frame_decoder_corpus_replays() {
    for input in corpus("frame_decoder") {
        decode(
            &input,
            usize::MAX,
            Limits {
                max_header_bytes: 256,
                max_body_bytes: 1024,
            },
        );
    }
}

#[test]
fn frame_chunking_corpus_replays() {
    let limits = Limits {
        max_header_bytes: 64,
        max_body_bytes: 256,
    };
    for input in corpus("frame_chunking") {
        let Some((&first, rest)) = input.split_first() else {
            continue;
        };
        let chunk = usize::from(first % 17) + 1;
        assert_eq!(
            decode(rest, usize::MAX, limits),
            decode(rest, chunk, limits)
        );
    }
}
