//! What a child-process client needs from a runtime: the small trait each
//! adapter implements so that [`ChildLoop`](super::child_loop::ChildLoop)
//! (the loop around the core's supervisor) is written once.
//!
//! [`Runtime`] is four things: start a child with piped stdio (a child
//! that is killed when dropped), look whether it has exited, run a task
//! concurrently (a task, or a thread of its own), and run blocking work (a
//! blocking pool, or a thread). [`AsyncRuntime`] adds a timer, for
//! [`ChildLoop::run`](super::child_loop::ChildLoop::run); a runtime without
//! one runs the loop on a thread of its own with
//! [`ChildLoop::run_blocking`](super::child_loop::ChildLoop::run_blocking).
//! The child's pipes are `futures-io` streams ([`AsyncRead`],
//! [`AsyncWrite`]): the pumps that move its bytes are written once over
//! them.
//!
//! Limits: the loop builds the [`Command`] (program, arguments, piped
//! stdio, on Unix a process group of its own); a runtime must keep those
//! settings (convert it, as `tokio::process::Command::from` and
//! `async_process::Command::from` do, or spawn it as it is).
//!
//! # Implementing it
//!
//! A runtime of plain threads (what the blocking adapter does): every
//! task gets a thread of its own and runs there under `block_on`, so its
//! blocking reads and writes (through `AssertAsync`) stall only that
//! thread.
//!
//! ```
//! use std::future::Future;
//! use std::io;
//! use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, ExitStatus};
//!
//! use evidence_wire_provider::caller::runtime::{Piped, Runtime};
//! use futures_lite::io::AssertAsync;
//!
//! struct Threads;
//!
//! /// A std child, killed when dropped (std's is not).
//! struct Killed(Child);
//!
//! impl Drop for Killed {
//!     fn drop(&mut self) {
//!         let _ = self.0.kill();
//!     }
//! }
//!
//! impl Runtime for Threads {
//!     type Child = Killed;
//!     type Stdin = AssertAsync<ChildStdin>;
//!     type Stdout = AssertAsync<ChildStdout>;
//!     type Stderr = AssertAsync<ChildStderr>;
//!
//!     fn spawn_child(&self, mut command: Command) -> io::Result<Piped<Self>> {
//!         let mut child = command.spawn()?;
//!         let id = child.id();
//!         let (stdin, stdout, stderr) = (child.stdin.take(), child.stdout.take(), child.stderr.take());
//!         Piped::new(Killed(child), Some(id), stdin.map(AssertAsync::new), stdout.map(AssertAsync::new), stderr.map(AssertAsync::new))
//!     }
//!
//!     fn try_wait(child: &mut Killed) -> io::Result<Option<ExitStatus>> {
//!         child.0.try_wait()
//!     }
//!
//!     fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
//!         self.spawn_blocking(move || futures_lite::future::block_on(task));
//!     }
//!
//!     fn spawn_blocking(&self, work: impl FnOnce() + Send + 'static) {
//!         let _ = std::thread::Builder::new().spawn(work);
//!     }
//! }
//! ```
//!
//! An async runtime maps the same methods to its own process type and
//! `spawn`/`spawn_blocking`, adapts the pipes to `futures-io` if they are
//! not (tokio's are not: a small wrapper does), and adds
//! [`AsyncRuntime::sleep_until`] (smol: `async_io::Timer::at`; tokio:
//! `tokio::time::sleep_until`).

use std::future::Future;
use std::io;
use std::process::{Command, ExitStatus};
use std::time::Instant;

pub use futures_lite::io::{AsyncRead, AsyncWrite};

/// The plumbing a child-process client needs from a runtime (see the
/// module's docs for an implementation).
pub trait Runtime {
    /// A running child, as the runtime holds it; dropping it kills the
    /// child's own process if it still runs (tokio's and async-process's
    /// `kill_on_drop(true)`; a `std::process::Child` needs a wrapper). On
    /// Unix the loop signals the child's process group itself first.
    type Child: Send + 'static;
    /// The child's stdin.
    type Stdin: AsyncWrite + Unpin + Send + 'static;
    /// The child's stdout.
    type Stdout: AsyncRead + Unpin + Send + 'static;
    /// The child's stderr.
    type Stderr: AsyncRead + Unpin + Send + 'static;

    /// Starts `command` (its three streams piped, on Unix in a process
    /// group of its own: keep both) and hands back the child with its
    /// pipes ([`Piped::new`]).
    fn spawn_child(&self, command: Command) -> io::Result<Piped<Self>>;

    /// The child's exit status once it has exited (reaping it), `None`
    /// while it runs; never waits.
    fn try_wait(child: &mut Self::Child) -> io::Result<Option<ExitStatus>>;

    /// Runs `task` concurrently with the caller: a task of the runtime's,
    /// or a thread of its own. It is not cancelled before it ends, unless
    /// the runtime itself goes away (the pumps end by themselves when their
    /// child's pipes close or the loop no longer listens).
    fn spawn(&self, task: impl Future<Output = ()> + Send + 'static);

    /// Runs blocking `work` where it may block: a blocking pool, or a
    /// thread of its own. Used to end a child's process group (a few
    /// short sleeps, up to about three seconds for a group that ignores
    /// SIGTERM).
    fn spawn_blocking(&self, work: impl FnOnce() + Send + 'static);
}

/// A runtime with a timer: the loop runs as one of its tasks
/// ([`ChildLoop::run`](super::child_loop::ChildLoop::run)).
pub trait AsyncRuntime: Runtime {
    /// Completes at `at` (or at once when it has passed).
    fn sleep_until(&self, at: Instant) -> impl Future<Output = ()> + Send;
}

/// A started child and its three pipes.
#[non_exhaustive]
pub struct Piped<R: Runtime + ?Sized> {
    /// The child.
    pub child: R::Child,
    /// Its process id (on Unix, also its process group's).
    pub id: u32,
    /// Its stdin.
    pub stdin: R::Stdin,
    /// Its stdout.
    pub stdout: R::Stdout,
    /// Its stderr.
    pub stderr: R::Stderr,
}

impl<R: Runtime + ?Sized> Piped<R> {
    /// The child with what the runtime's spawn gave: an error when the id
    /// or a pipe is missing (the child is then dropped, so killed).
    pub fn new(
        child: R::Child,
        id: Option<u32>,
        stdin: Option<R::Stdin>,
        stdout: Option<R::Stdout>,
        stderr: Option<R::Stderr>,
    ) -> io::Result<Self> {
        match (id, stdin, stdout, stderr) {
            (Some(id), Some(stdin), Some(stdout), Some(stderr)) => Ok(Piped {
                child,
                id,
                stdin,
                stdout,
                stderr,
            }),
            // Dropped, the child is killed.
            _ => Err(io::Error::other(
                "the child was started without its id or one of its pipes",
            )),
        }
    }
}
