//! Standard output for the stdio servers of every adapter, without the
//! standard library's line buffering.
//!
//! `std::io::stdout()` is line-buffered: a write is cut after its last
//! newline and the rest waits for the next `flush`. A stdio server frames a
//! whole batch of answers into one buffer, so on Content-Length framing
//! (whose last answer does not end with a newline) line buffering turns
//! each batch into two system calls and two wake-ups of the peer; tokio's
//! and smol's standard outputs write through it too. [`unbuffered_stdout`]
//! writes each batch as it is.
//!
//! Limits: on Unix it holds a duplicate of descriptor 1 for as long as it
//! lives (see [`unbuffered_stdout`]); elsewhere it is `std::io::stdout()`.

use std::io::{self, Write};

/// Standard output for a stdio server, without the standard library's line
/// buffering: see [`unbuffered_stdout`].
#[derive(Debug)]
pub struct UnbufferedStdout(Sink);

#[derive(Debug)]
enum Sink {
    /// A duplicate of the standard output's descriptor (Unix).
    #[cfg(unix)]
    File(std::fs::File),
    /// `std::io::stdout()` itself (elsewhere, or when duplicating failed).
    Std(io::Stdout),
}

/// Standard output as the stdio servers write it: each `write` goes to the
/// descriptor as it is.
///
/// On Unix this writes to a duplicate of descriptor 1 (whatever
/// `std::io::stdout()` still buffers is flushed first); elsewhere, or if
/// the descriptor cannot be duplicated, it is `std::io::stdout()`. The
/// adapters' `serve_stdio` functions use it.
///
/// The duplicate is open as long as the value lives, which for a server's
/// output is as long as the server runs (the blocking adapter's io thread
/// is detached and keeps it until its input ends). A program that goes on
/// after serving and closes its standard output to signal the end to its
/// peer should pass `std::io::stdout()` instead.
#[must_use]
pub fn unbuffered_stdout() -> UnbufferedStdout {
    let stdout = io::stdout();
    #[cfg(unix)]
    {
        use std::os::fd::AsFd;
        // Whatever was printed before serving goes first.
        let _ = stdout.lock().flush();
        if let Ok(descriptor) = stdout.as_fd().try_clone_to_owned() {
            return UnbufferedStdout(Sink::File(std::fs::File::from(descriptor)));
        }
    }
    UnbufferedStdout(Sink::Std(stdout))
}

impl UnbufferedStdout {
    /// The duplicate of descriptor 1 as a file (for an executor that wraps
    /// files, e.g. `tokio::fs::File::from_std`), or `None` when this is
    /// `std::io::stdout()` itself.
    pub fn into_file(self) -> Option<std::fs::File> {
        match self.0 {
            #[cfg(unix)]
            Sink::File(file) => Some(file),
            Sink::Std(_) => None,
        }
    }
}

impl Write for UnbufferedStdout {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        match &mut self.0 {
            #[cfg(unix)]
            Sink::File(file) => file.write(bytes),
            Sink::Std(stdout) => stdout.write(bytes),
        }
    }

    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        match &mut self.0 {
            #[cfg(unix)]
            Sink::File(file) => file.write_all(bytes),
            Sink::Std(stdout) => stdout.write_all(bytes),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.0 {
            #[cfg(unix)]
            Sink::File(file) => file.flush(),
            Sink::Std(stdout) => stdout.flush(),
        }
    }
}
