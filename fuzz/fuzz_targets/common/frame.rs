//! The checks of the `frame_decoder` and `frame_chunking` fuzz targets,
//! shared with `core/tests/it/fuzz_corpus.rs` (which replays both corpora
//! through them), so the targets and the replay can never drift apart.
//!
//! Every input is decoded under the three framing choices (auto-detect,
//! Content-Length, newline-delimited). Invariants: no panic; no frame body
//! over `max_body_bytes`; once `poll_frame` says `None` the decoder holds at
//! most one unfinished frame's worth of bytes (`max(max_header_bytes,
//! max_body_bytes + 1)`, the 1 being a line's trailing `\r`), so memory
//! stays bounded whatever the peer sends;
//! frame offsets increase; `finish` always answers; a fatal error is sticky
//! (input stops there, as an adapter closes the stream) and input after
//! `finish` is refused. Chunking: any split of the same bytes
//! gives exactly the same frames, offsets, errors and detected framing as
//! feeding them whole.

use evidence_wire::frame::{Decoder, FrameError, Framing, Limits};

/// Limits of the `frame_decoder` target: small, so fuzzing reaches them.
pub const DECODER_LIMITS: Limits = Limits {
    max_header_bytes: 256,
    max_body_bytes: 1024,
};

/// Limits of the `frame_chunking` target.
pub const CHUNKING_LIMITS: Limits = Limits {
    max_header_bytes: 64,
    max_body_bytes: 256,
};

/// The framing choices every input is decoded under.
pub const FRAMINGS: [Option<Framing>; 3] = [
    None,
    Some(Framing::ContentLength),
    Some(Framing::NewlineDelimited),
];

/// What decoding one stream produced: each frame as (offset, body) or its
/// error, then the result of `finish`, and the framing in use at the end.
#[derive(Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Frames and errors in order.
    pub frames: Vec<Result<(u64, Vec<u8>), FrameError>>,
    /// What `finish` said.
    pub finish: Result<(), FrameError>,
    /// `Decoder::framing` after `finish`.
    pub framing: Option<Framing>,
}

/// Decodes `data` pushed in pieces of the given sizes (the last piece takes
/// whatever is left), checking the invariants after every push.
pub fn decode(
    data: &[u8],
    framing: Option<Framing>,
    limits: Limits,
    mut sizes: impl FnMut() -> usize,
) -> Outcome {
    let mut decoder = match framing {
        Some(framing) => Decoder::with_framing(framing, limits),
        None => Decoder::new(limits),
    };
    // An NDJSON line may hold one trailing `\r` beyond the body limit.
    let bound = limits
        .max_header_bytes
        .max(limits.max_body_bytes.saturating_add(1));
    let mut frames = Vec::new();
    let mut last_offset = None;
    let mut rest = data;
    let mut dead = false;
    while !rest.is_empty() && !dead {
        let (piece, tail) = rest.split_at(sizes().clamp(1, rest.len()));
        rest = tail;
        decoder.push(piece);
        while let Some(frame) = decoder.poll_frame() {
            // Like an adapter, stop reading once the stream is dead.
            dead |= frame.as_ref().is_err_and(FrameError::is_fatal);
            let frame = frame.map(|frame| (frame.offset, frame.body.to_vec()));
            if let Ok((offset, body)) = &frame {
                assert!(body.len() <= limits.max_body_bytes, "frame over the limit");
                assert!(
                    last_offset.is_none_or(|last| *offset > last),
                    "frame offsets must increase"
                );
                last_offset = Some(*offset);
            }
            frames.push(frame);
        }
        assert!(
            dead || decoder.buffered_len() <= bound,
            "decoder holds {} bytes after draining, over the bound of {bound}",
            decoder.buffered_len()
        );
    }
    let finish = decoder.finish();
    if let Err(error) = &finish {
        if error.is_fatal() {
            // Sticky: finish repeats it.
            assert_eq!(decoder.finish().as_ref(), Err(error));
        }
    }
    // Input after finish is an API misuse, refused and sticky.
    decoder.push(b"{}\n");
    let after = decoder.poll_frame();
    let expected = match &finish {
        Err(error) if error.is_fatal() => error.clone(),
        _ => FrameError::InputAfterFinish,
    };
    assert_eq!(after, Some(Err(expected.clone())));
    assert_eq!(
        decoder.poll_frame(),
        None,
        "a fatal error is reported once per push"
    );
    assert_eq!(decoder.finish(), Err(expected));
    Outcome {
        frames,
        finish,
        framing: decoder.framing(),
    }
}

/// The `frame_decoder` target: the raw bytes pushed whole.
pub fn run_decoder(data: &[u8]) {
    for framing in FRAMINGS {
        decode(data, framing, DECODER_LIMITS, || usize::MAX);
    }
}

/// The `frame_chunking` target: the first byte seeds a sequence of chunk
/// sizes (1 to 32 bytes); the rest is decoded whole, in those chunks and
/// byte by byte, and all three must agree.
pub fn run_chunking(data: &[u8]) {
    let Some((&seed, rest)) = data.split_first() else {
        return;
    };
    for framing in FRAMINGS {
        let whole = decode(rest, framing, CHUNKING_LIMITS, || usize::MAX);
        let mut state = u32::from(seed) | 0x100;
        let chunked = decode(rest, framing, CHUNKING_LIMITS, || {
            // xorshift32: a reproducible, seed-dependent sequence of sizes.
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            (state % 32) as usize + 1
        });
        assert_eq!(whole, chunked, "chunked decoding differs (seed {seed})");
        if rest.len() <= 4096 {
            let bytewise = decode(rest, framing, CHUNKING_LIMITS, || 1);
            assert_eq!(whole, bytewise, "byte-by-byte decoding differs");
        }
    }
}
