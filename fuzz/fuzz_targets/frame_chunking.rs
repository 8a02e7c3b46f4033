//! Any chunking of the same bytes gives the same frames and errors as
//! feeding them whole. The first byte of the input picks the chunk size.
#![no_main]

use evidence_wire::frame::{Decoder, Limits};
use libfuzzer_sys::fuzz_target;

fn decode(data: &[u8], chunk: usize) -> Vec<Result<Vec<u8>, String>> {
    let limits = Limits { max_header_bytes: 64, max_body_bytes: 256 };
    let mut decoder = Decoder::new(limits);
    let mut out = Vec::new();
    for piece in data.chunks(chunk.max(1)) {
        decoder.push(piece);
        while let Some(frame) = decoder.poll_frame() {
            out.push(frame.map(|f| f.body.to_vec()).map_err(|e| e.to_string()));
        }
    }
    out.push(decoder.finish().map(|()| Vec::new()).map_err(|e| e.to_string()));
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else { return };
    let chunk = usize::from(first % 17) + 1;
    assert_eq!(decode(rest, usize::MAX), decode(rest, chunk));
});
