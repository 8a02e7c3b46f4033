//! Issue 38 item 11: a FIFO named as the configuration file or as a file
//! it names used to block `Config::load` until a writer came (opening a
//! FIFO for reading waits for one). Every file is now opened through
//! `open_regular_file`, which refuses anything but a regular file before
//! opening it. Each call runs on a thread of its own under a deadline, so
//! a regression fails (and is unblocked) instead of hanging.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code may panic
#![cfg(unix)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use evidence_wire_config::{Config, open_regular_file, read_ca_cert, read_signing_seed};

/// A fresh directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let path = std::env::temp_dir().join(format!(
            "evidence-wire-config-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A FIFO at `path`, mode 0600 (a signing key's permission check passes).
fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("run mkfifo");
    assert!(status.success());
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// The error of `load` (which must fail) within 10 s; past that the FIFO
/// is opened for writing to unblock the reader, and the test fails.
fn refused_in_time<T: Send + 'static>(
    fifo: &Path,
    what: &str,
    load: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> String {
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(load());
    });
    match finished.recv_timeout(Duration::from_secs(10)) {
        Ok(Ok(_)) => panic!("{what}: a FIFO was accepted"),
        Ok(Err(error)) => error,
        Err(_) => {
            // Unblock the reader, then fail.
            let _ = std::fs::OpenOptions::new().write(true).open(fifo);
            panic!("{what}: still blocked on the FIFO after 10 s");
        }
    }
}

fn assert_names_the_fifo(error: &str, fifo: &Path, what: &str) {
    assert!(
        error.contains(&fifo.display().to_string())
            && error.contains("it is a FIFO (named pipe), not a regular file"),
        "{what}: {error}"
    );
}

#[test]
fn fifos_are_refused_before_they_are_opened() {
    let dir = TempDir::new("fifos");
    let fifo = dir.0.join("named.fifo");
    mkfifo(&fifo);

    let path = fifo.clone();
    let error = refused_in_time(&fifo, "Config::load", move || {
        Config::load(&path).map_err(|error| error.to_string())
    });
    assert_names_the_fifo(&error, &fifo, "Config::load");
    assert!(error.starts_with("config: "), "{error}");

    // Files the configuration names: a contract, a CA certificate, a seed.
    let config = dir.0.join("evidence-wire.toml");
    std::fs::write(
        &config,
        "[[providers]]\nname = \"mine\"\ntype = \"mcp\"\ncommand = [\"./mine\"]\ncapabilities_path = \"named.fifo\"\n",
    )
    .unwrap();
    let error = refused_in_time(&fifo, "capabilities_path", move || {
        Config::load(&config).map_err(|error| error.to_string())
    });
    assert_names_the_fifo(&error, &fifo, "capabilities_path");
    assert!(
        error.starts_with("providers[0].capabilities_path: "),
        "{error}"
    );

    let path = fifo.clone();
    let error = refused_in_time(&fifo, "read_ca_cert", move || {
        read_ca_cert("--ca-cert", &path).map_err(|error| error.to_string())
    });
    assert_names_the_fifo(&error, &fifo, "read_ca_cert");

    let path = fifo.clone();
    let error = refused_in_time(&fifo, "read_signing_seed", move || {
        read_signing_seed("bundled.signing.key_file", &path).map_err(|error| error.to_string())
    });
    assert_names_the_fifo(&error, &fifo, "read_signing_seed");
}

#[test]
fn open_regular_file_follows_symlinks_to_files_and_says_what_else_it_found() {
    let dir = TempDir::new("kinds");
    let file = dir.0.join("file.txt");
    std::fs::write(&file, "text").unwrap();
    let link = dir.0.join("link.txt");
    std::os::unix::fs::symlink(&file, &link).unwrap();
    for path in [&file, &link] {
        assert!(open_regular_file(path).is_ok(), "{}", path.display());
    }
    let error = open_regular_file(&dir.0).unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput);
    assert!(
        error
            .to_string()
            .starts_with("it is a directory, not a regular file"),
        "{error}"
    );
    let error = open_regular_file(Path::new("/dev/null")).unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("it is a character device, not a regular file"),
        "{error}"
    );
    // A missing file is the OS's error, as before.
    let error = open_regular_file(&dir.0.join("missing")).unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::NotFound);
}
