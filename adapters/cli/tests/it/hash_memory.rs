//! Issue 38 item 14 (part): `hash` of a 60 MB JSON array took 1.55 GB of
//! memory and nothing said so. `hash --help` now states the input cap and
//! the memory a JSON input costs per byte (measured with
//! `/usr/bin/time -v`); this test holds the help to the cap the code
//! enforces.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic

use crate::common;
use common::*;

use std::io::Write;
use std::process::{Command, Stdio};

#[test]
fn hash_help_states_the_input_cap_and_the_memory_per_input_byte() {
    let output = Command::new(BIN)
        .args(["hash", "--help"])
        .env_remove("EVIDENCE_WIRE_CONFIG")
        .output()
        .expect("run hash --help");
    assert_eq!(output.status.code(), Some(0));
    // clap wraps long help at the terminal width: compare word by word.
    let help = String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    for stated in [
        "at most 67108864 bytes (64 MiB; larger input is refused, exit 2)",
        "about 20 to 35 bytes of memory per input byte",
        "/usr/bin/time -v",
        "With --bytes, about 2.5 bytes per input byte",
    ] {
        assert!(
            help.contains(stated),
            "hash --help does not say {stated:?}:\n{help}"
        );
    }

    // The cap the help states is the one enforced.
    for (size, code) in [(64 * 1024 * 1024, 0), (64 * 1024 * 1024 + 1, 2)] {
        let mut child = Command::new(BIN)
            .args(["hash", "--bytes"])
            .env_remove("EVIDENCE_WIRE_CONFIG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn hash");
        let mut stdin = child.stdin.take().expect("stdin");
        let writer = std::thread::spawn(move || {
            let _ = stdin.write_all(&vec![b'x'; size]);
        });
        let output = child.wait_with_output().expect("hash output");
        writer.join().expect("writer");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(code), "{size} bytes: {stderr}");
        if code == 2 {
            assert!(stderr.contains("67108864-byte limit"), "{stderr}");
        }
    }
}
