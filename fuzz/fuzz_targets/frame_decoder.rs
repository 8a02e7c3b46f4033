//! Frame decoder on raw bytes: never panics, never buffers past its limits,
//! and `finish` always answers.
#![no_main]

use evidence_wire::frame::{Decoder, Limits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = Limits { max_header_bytes: 256, max_body_bytes: 1024 };
    let mut decoder = Decoder::new(limits);
    decoder.push(data);
    while let Some(frame) = decoder.poll_frame() {
        if let Ok(frame) = frame {
            assert!(frame.body.len() <= limits.max_body_bytes);
        }
    }
    let _ = decoder.finish();
});
