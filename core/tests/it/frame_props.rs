//! Property and hostile-input tests of the framing decoder.

use evidence_wire::frame::{Decoder, FrameError, Framing, Limits, encode};
use proptest::prelude::*;

fn drain(decoder: &mut Decoder, out: &mut Vec<Result<Vec<u8>, FrameError>>) {
    while let Some(item) = decoder.poll_frame() {
        out.push(item.map(|f| f.body.to_vec()));
    }
}

fn decode(
    framing: Option<Framing>,
    limits: Limits,
    input: &[u8],
    cuts: &[usize],
) -> Vec<Result<Vec<u8>, FrameError>> {
    let decoder = match framing {
        Some(f) => Decoder::with_framing(f, limits),
        None => Decoder::new(limits),
    };
    decode_with(decoder, input, cuts)
}

fn decode_with(
    mut decoder: Decoder,
    input: &[u8],
    cuts: &[usize],
) -> Vec<Result<Vec<u8>, FrameError>> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
    cuts.sort_unstable();
    for cut in cuts.into_iter().chain([input.len()]) {
        decoder.push(&input[start..cut]);
        start = cut;
        drain(&mut decoder, &mut out);
    }
    if let Err(e) = decoder.finish() {
        out.push(Err(e));
    }
    out
}

fn json_body() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u32>(), 0..20).prop_map(|v| serde_json::to_vec(&v).unwrap())
}

proptest! {
    /// `with_fallback` only changes what an unrecognised start picks: with
    /// Content-Length as the fallback it is `new`, and whenever the stream
    /// opens with `{`, `[` or `Content-` (any case) it is `new` for any
    /// fallback, however the bytes are chunked.
    #[test]
    fn fallback_changes_only_unrecognised_starts(
        lead in "[ \r\n\t]{0,3}",
        start in prop_oneof![
            Just(b"{".to_vec()),
            Just(b"[".to_vec()),
            Just(b"Content-".to_vec()),
            Just(b"cOnTeNt-".to_vec()),
            Just(b"Conn".to_vec()),
            Just(b"c".to_vec()),
            any::<u8>().prop_map(|byte| vec![byte]),
        ],
        rest in proptest::collection::vec(any::<u8>(), 0..200),
        cuts in proptest::collection::vec(any::<usize>(), 0..8),
    ) {
        let recognised = matches!(start.first(), Some(b'{' | b'['))
            || start.eq_ignore_ascii_case(b"content-");
        let mut input = lead.into_bytes();
        input.extend(start);
        input.extend(rest);
        let limits = Limits::default();
        let detected = decode_with(Decoder::new(limits), &input, &cuts);
        prop_assert_eq!(
            &decode_with(Decoder::with_fallback(Framing::ContentLength, limits), &input, &cuts),
            &detected
        );
        if recognised {
            prop_assert_eq!(
                &decode_with(Decoder::with_fallback(Framing::NewlineDelimited, limits), &input, &cuts),
                &detected
            );
        }
    }

    #[test]
    fn encode_then_decode_is_identity(bodies in proptest::collection::vec(json_body(), 1..8), nd in any::<bool>()) {
        let framing = if nd { Framing::NewlineDelimited } else { Framing::ContentLength };
        let mut stream = Vec::new();
        for body in &bodies { encode(framing, body, &mut stream).unwrap(); }
        let out = decode(None, Limits::default(), &stream, &[]);
        let expected: Vec<_> = bodies.into_iter().map(Ok).collect();
        prop_assert_eq!(out, expected);
    }

    #[test]
    fn any_chunking_gives_the_same_frames_and_errors(
        parts in proptest::collection::vec(prop_oneof![
            json_body().prop_map(|b| { let mut s = Vec::new(); encode(Framing::ContentLength, &b, &mut s).unwrap(); s }),
            Just(b"Content-Length: 99999\r\n\r\n".to_vec()),
            Just(b"Content-Length: x\r\n\r\n".to_vec()),
            Just(b"\r\n".to_vec()),
            proptest::collection::vec(any::<u8>(), 0..40),
        ], 1..10),
        cuts in proptest::collection::vec(any::<usize>(), 0..30),
        forced in any::<bool>(),
    ) {
        let stream: Vec<u8> = parts.concat();
        let limits = Limits { max_header_bytes: 64, max_body_bytes: 200 };
        let framing = if forced { Some(Framing::ContentLength) } else { None };
        let whole = decode(framing, limits, &stream, &[]);
        let split = decode(framing, limits, &stream, &cuts);
        let bytewise: Vec<usize> = (0..stream.len()).collect();
        prop_assert_eq!(&whole, &split);
        prop_assert_eq!(&whole, &decode(framing, limits, &stream, &bytewise));
    }

    #[test]
    fn ndjson_chunking_invariance(lines in proptest::collection::vec("[ -~]{0,300}", 1..10), cuts in proptest::collection::vec(any::<usize>(), 0..30)) {
        let stream = lines.join("\r\n").into_bytes();
        let limits = Limits { max_header_bytes: 64, max_body_bytes: 100 };
        let whole = decode(Some(Framing::NewlineDelimited), limits, &stream, &[]);
        prop_assert_eq!(whole, decode(Some(Framing::NewlineDelimited), limits, &stream, &cuts));
    }

    #[test]
    fn skipping_an_oversized_body_buffers_at_most_header_limit_plus_one_chunk(declared in 2_000u64..10_000_000, chunk in 1usize..5_000) {
        let limits = Limits { max_header_bytes: 256, max_body_bytes: 1_000 };
        let mut decoder = Decoder::new(limits);
        decoder.push(format!("Content-Length: {declared}\r\n\r\n").as_bytes());
        let data = vec![b'x'; chunk];
        let mut fed = 0u64;
        while fed < declared.min(200_000) {
            decoder.push(&data);
            fed += chunk as u64;
            while decoder.poll_frame().is_some() {}
            prop_assert!(decoder.buffered_len() <= limits.max_header_bytes + chunk);
        }
    }
}

#[test]
fn hostile_stream_completes_with_errors_and_bounded_memory() {
    let limits = Limits::default();
    let bound = limits.max_header_bytes + 64 * 1024;
    let mut decoder = Decoder::with_framing(Framing::ContentLength, limits);
    let mut errors = Vec::new();
    let mut check = |decoder: &mut Decoder| {
        while let Some(item) = decoder.poll_frame() {
            if let Err(e) = item {
                errors.push(e);
            }
        }
        assert!(
            decoder.buffered_len() <= bound,
            "buffered {}",
            decoder.buffered_len()
        );
    };
    decoder.push(b"Content-Length: 999999999999\r\n\r\n");
    check(&mut decoder);
    // 100 MB header line, in 64 KiB chunks (never allocated whole).
    let mut hostile = Decoder::with_framing(Framing::ContentLength, limits);
    let chunk = vec![b'A'; 64 * 1024];
    for _ in 0..(100 * 1024 * 1024 / chunk.len()) {
        hostile.push(&chunk);
        check(&mut hostile);
    }
    hostile.push(b"\r\n\r\nContent-Length: 2\r\n\r\n{}");
    let mut frames = 0;
    while let Some(item) = hostile.poll_frame() {
        if item.is_ok() {
            frames += 1;
        }
    }
    assert_eq!(
        frames, 1,
        "the decoder recovers after the oversized header line"
    );
    // 10^6 empty lines.
    let mut lines = Decoder::new(limits);
    let empties = vec![b'\n'; 1_000_000];
    lines.push(&empties);
    check(&mut lines);
    lines.push(b"{}\n");
    assert_eq!(lines.poll_frame().unwrap().unwrap().body.as_ref(), b"{}");
    assert_eq!(
        errors
            .iter()
            .filter(|e| matches!(e, FrameError::BodyTooLarge { .. }))
            .count(),
        1
    );
    assert!(
        errors
            .iter()
            .any(|e| matches!(e, FrameError::HeaderTooLarge { .. }))
    );
}

fn all(input: &[u8], framing: Option<Framing>) -> Vec<Result<Vec<u8>, FrameError>> {
    decode(framing, Limits::default(), input, &[])
}

#[test]
fn header_rules() {
    let ok = |s: &[u8]| all(s, Some(Framing::ContentLength));
    assert_eq!(
        ok(b"Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}"),
        vec![Ok(b"{}".to_vec())]
    );
    assert_eq!(
        ok(b"Content-Length:\t2 \nContent-Type: application/json; charset=UTF8\n\n{}"),
        vec![Ok(b"{}".to_vec())]
    );
    let latin = ok(b"Content-Length: 2\r\nContent-Type: x; charset=latin1\r\n\r\n{}Content-Length: 2\r\n\r\n[]");
    assert!(matches!(
        latin[0],
        Err(FrameError::UnsupportedCharset { .. })
    ));
    assert_eq!(
        latin[1],
        Ok(b"[]".to_vec()),
        "the stream stays in sync after a bad charset"
    );
    for bad in [&b"+2"[..], b"0x2", b"2 2", b"", b"-0"] {
        let mut input = b"Content-Length: ".to_vec();
        input.extend_from_slice(bad);
        input.extend_from_slice(b"\r\n\r\n{}");
        assert!(
            matches!(ok(&input)[0], Err(FrameError::InvalidContentLength { .. })),
            "{bad:?}"
        );
    }
    let overflow = ok(b"Content-Length: 99999999999999999999999\r\n\r\n{}");
    assert!(matches!(
        overflow[0],
        Err(FrameError::ContentLengthOverflow { .. })
    ));
    assert!(overflow[0].as_ref().unwrap_err().is_fatal());
}

#[test]
fn fatal_errors_are_sticky() {
    let mut decoder = Decoder::new(Limits::default());
    decoder.push(b"Content-Length: 99999999999999999999999\r\n\r\n");
    let first = decoder.poll_frame().unwrap().unwrap_err();
    assert!(
        decoder.poll_frame().is_none(),
        "reported once per push, so polling loops end"
    );
    decoder.push(b"Content-Length: 2\r\n\r\n{}");
    assert_eq!(decoder.poll_frame().unwrap().unwrap_err(), first);
    assert!(decoder.poll_frame().is_none());
    assert_eq!(decoder.finish().unwrap_err(), first);
}

#[test]
fn ndjson_rules_and_detection() {
    let mut decoder = Decoder::new(Limits {
        max_header_bytes: 64,
        max_body_bytes: 8,
    });
    decoder.push(b"\xEF\xBB\xBF \n{\"a\":1}\r\n\n  \n[1,2,3,4,5,6,7,8,9]\n{}\n");
    assert_eq!(decoder.framing(), None, "nothing decided before polling");
    let mut out = Vec::new();
    drain(&mut decoder, &mut out);
    assert_eq!(decoder.framing(), Some(Framing::NewlineDelimited));
    assert_eq!(out.len(), 3);
    assert_eq!(out[0], Ok(b"{\"a\":1}".to_vec()));
    assert!(matches!(out[1], Err(FrameError::LineTooLong { .. })));
    assert_eq!(out[2], Ok(b"{}".to_vec()));
    assert_eq!(decoder.finish(), Ok(()));
    let mut cl = Decoder::new(Limits::default());
    cl.push(b"\r\n\r\nContent-Length: 2\r\n\r\n{}\r\n");
    assert_eq!(cl.poll_frame().unwrap().unwrap().body.as_ref(), b"{}");
    assert_eq!(cl.framing(), Some(Framing::ContentLength));
    assert_eq!(cl.finish(), Ok(()), "trailing blank lines are a clean end");
    let mut cut = Decoder::new(Limits::default());
    cut.push(b"{\"a\":");
    assert!(cut.poll_frame().is_none());
    assert!(matches!(cut.finish(), Err(FrameError::Truncated { .. })));
    assert!(matches!(
        encode(Framing::NewlineDelimited, b"{\n}", &mut Vec::new()),
        Err(evidence_wire::frame::FrameEncodeError::EmbeddedNewline { offset: 1 })
    ));
}

#[test]
fn fallback_reads_a_banner_line_as_a_line() {
    // Banners that start like a header (`C...`) too, delivered a byte at a
    // time so the decision waits for `Content-` to be ruled out.
    for banner in ["server 1.0 listening", "Connected to the store", "c"] {
        let input = format!("{banner}\n{{\"a\":1}}\n");
        let cuts: Vec<usize> = (0..input.len()).collect();
        let out = decode_with(
            Decoder::with_fallback(Framing::NewlineDelimited, Limits::default()),
            input.as_bytes(),
            &cuts,
        );
        assert_eq!(
            out,
            [Ok(banner.as_bytes().to_vec()), Ok(b"{\"a\":1}".to_vec())],
            "{banner:?}"
        );
        // Plain detection takes the banner for a header line.
        let detected = all(input.as_bytes(), None);
        assert!(
            matches!(
                detected.first(),
                Some(Err(FrameError::MalformedHeaderLine { .. }))
            ),
            "{banner:?}: {detected:?}"
        );
    }
    // A real header is still a header under an NDJSON fallback.
    let mut decoder = Decoder::with_fallback(Framing::NewlineDelimited, Limits::default());
    decoder.push(b"CONTENT-length: 2\r\n\r\n{}");
    assert_eq!(
        decoder
            .poll_frame()
            .map(|frame| frame.map(|f| f.body.to_vec())),
        Some(Ok(b"{}".to_vec()))
    );
    assert_eq!(decoder.framing(), Some(Framing::ContentLength));
}
