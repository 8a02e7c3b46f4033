//! What the CLI's test binaries share: the binary under test, a fixed query
//! context, a temporary directory removed on drop, and a child killed on
//! drop (so a failing test leaves no server behind).

#![allow(dead_code)] // each test binary uses its own part

use std::path::PathBuf;
use std::process::Child;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The `evidence-wire` binary this package builds.
pub const BIN: &str = env!("CARGO_BIN_EXE_evidence-wire");

/// A context with a fixed trigger time, so time checks are reproducible.
pub const CONTEXT: &str = r#"{"tenant_id":1,"namespace_id":1,"run_id":"run-1","scenario_id":"s","stage_id":"st","trigger_id":"t","trigger_time":{"kind":"unix_millis","value":1710000000000},"correlation_id":null}"#;

/// A fresh directory under the system's temp dir, named after the test
/// binary, the process and a counter; removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new() -> TempDir {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "evidence-wire-{}-{}-{}",
            env!("CARGO_CRATE_NAME"),
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path).expect("temp dir");
        TempDir(path)
    }

    /// Writes `contents` to `name` inside the directory (parents created).
    pub fn write(&self, name: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        let path = self.0.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("parent dir");
        }
        std::fs::write(&path, contents).expect("write file");
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Kills the child when dropped, so a failing test leaves no server behind.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
