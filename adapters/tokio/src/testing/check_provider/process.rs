//! The provider's processes (issue 38). Each session's provider is spawned
//! as the leader of a process group of its own, and the whole group ends
//! with the session: SIGTERM to the group, at most [`TERM_GRACE`] for every
//! process in it to exit, SIGKILL to whatever is left; then the provider's
//! own process is reaped, waiting at most [`REAP_DEADLINE`]. A launcher
//! that does not `exec` (`sh -c './provider; true'`, npm-style scripts), the
//! provider under it, and whatever they started in the group (a `sleep`
//! holding the pipes) all end, and nothing waits for them unbounded.
//!
//! A process that left the group (`setsid`, a daemon) is out of reach: the
//! session only stops waiting for the pipes it holds, after a deadline
//! (see [`super::session`]), and the report says so.
//!
//! A process of the group that exits stays in it, a zombie, until its
//! parent reaps it; one whose parent died first is reaped by init, and in
//! a container whose init reaps nothing it stays forever, so the group
//! would never look empty. On Linux check-provider therefore adopts the
//! orphans of its providers (a child subreaper, [`adopt_orphans`]) and
//! reaps those of an ending group itself.
//!
//! Because the provider no longer shares check-provider's process group,
//! Ctrl-C at a terminal no longer reaches it: the command line ends every
//! group still running when it gets SIGINT or SIGTERM ([`end_all_then`]).
//!
//! Signals go through `rustix` (already in the lockfile, `unsafe`-free to
//! call, and its errors tell "no such process group" apart); the group
//! itself comes from the standard library's `CommandExt::process_group`.
//! Elsewhere than Unix there are no process groups: only the provider's
//! own process is killed.
//!
//! The group id is the provider's pid, which stays reserved while the
//! provider is not reaped or any process of the group exists: signalling
//! it then reaches only the provider's processes. A provider that exited
//! during its session is reaped then (to read its status); when its
//! session ends and its group is found empty, the group is not signalled
//! at all. Only an interrupt ([`end_all_then`]) signals the group of such a
//! provider without looking first, within that session.

use std::io;
use std::process::{Child, Command, ExitStatus};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

/// After SIGTERM, how long the provider's process group has to exit
/// before the rest of it gets SIGKILL.
pub const TERM_GRACE: Duration = Duration::from_secs(1);
/// After the group was signalled, how long reaping the provider's own
/// process may wait.
pub const REAP_DEADLINE: Duration = Duration::from_secs(2);
/// How often a wait for processes looks again.
const POLL: Duration = Duration::from_millis(10);

/// The process groups (their leaders' pids) started and not yet ended.
static LIVE: Mutex<Vec<u32>> = Mutex::new(Vec::new());

fn live() -> MutexGuard<'static, Vec<u32>> {
    LIVE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How a provider's processes ended.
#[derive(Clone, Debug, Default)]
pub struct Ending {
    /// The provider's process had exited by itself (its status) before it
    /// was stopped.
    pub exited_before: Option<String>,
    /// It had, and other processes of its group were still running.
    pub outlived: bool,
    /// Some of the group was still there [`TERM_GRACE`] after SIGTERM and
    /// got SIGKILL.
    pub killed: bool,
    /// The provider's process was not reaped within [`REAP_DEADLINE`].
    pub unreaped: bool,
}

/// A provider process leading a process group of its own; the group is
/// ended when this is dropped, if [`Tree::end`] did not end it before.
pub struct Tree {
    child: Child,
    status: Option<ExitStatus>,
    ending: Option<Ending>,
}

impl Tree {
    /// Spawns `command` as the leader of a new process group.
    pub fn spawn(command: &mut Command) -> io::Result<Tree> {
        #[cfg(unix)]
        {
            use std::os::unix::process::CommandExt;
            command.process_group(0);
        }
        // Spawned and registered under one lock: a signal that ends every
        // group finds this one registered, or finds it not started yet and
        // keeps it from starting.
        let mut live = live();
        let child = command.spawn()?;
        live.push(child.id());
        Ok(Tree {
            child,
            status: None,
            ending: None,
        })
    }

    /// The provider's process (to take its pipes).
    pub fn child(&mut self) -> &mut Child {
        &mut self.child
    }

    /// The provider's exit status, once it has exited (never waits).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.status = Some(status);
            }
        }
        self.status
    }

    /// Ends the provider's process group (SIGTERM, [`TERM_GRACE`], SIGKILL)
    /// and reaps the provider, waiting at most about `TERM_GRACE +
    /// REAP_DEADLINE`. Ending it again returns the first ending.
    pub fn end(&mut self) -> Ending {
        if let Some(ending) = &self.ending {
            return ending.clone();
        }
        let mut ending = Ending {
            exited_before: self.exited().map(|status| status.to_string()),
            ..Ending::default()
        };
        #[cfg(unix)]
        if let Some(group) = group::of(self.child.id()) {
            // Processes of the group that exited are no longer there once reaped.
            self.reap_group(group);
            ending.outlived = ending.exited_before.is_some() && group::present(group);
            // A provider reaped with nothing left of its group: nothing to
            // signal (and its id may no longer be its own).
            let emptied = ending.exited_before.is_some() && !ending.outlived;
            if !emptied {
                ending.killed = self.terminate(group);
            }
        }
        #[cfg(not(unix))]
        if self.exited().is_none() {
            let _ = self.child.kill();
        }
        let until = Instant::now() + REAP_DEADLINE;
        while self.exited().is_none() {
            if Instant::now() >= until {
                ending.unreaped = true;
                break;
            }
            thread::sleep(POLL);
        }
        let id = self.child.id();
        live().retain(|leader| *leader != id);
        self.ending = Some(ending.clone());
        ending
    }

    /// SIGTERM to `group`, at most [`TERM_GRACE`] for it to empty, SIGKILL
    /// to the rest; true when SIGKILL was sent.
    #[cfg(unix)]
    fn terminate(&mut self, group: group::Pid) -> bool {
        if !group::signal(group, group::TERM) {
            if self.status.is_none() {
                // Nobody in the group it may signal, yet the provider runs
                // (a set-user-ID program): what the standard library can do.
                let _ = self.child.kill();
            }
            return false;
        }
        let until = Instant::now() + TERM_GRACE;
        loop {
            // Reaping the provider and its orphans lets the group empty.
            self.reap_group(group);
            if self.status.is_some() && !group::present(group) {
                return false;
            }
            if Instant::now() >= until {
                return group::signal(group, group::KILL);
            }
            thread::sleep(POLL);
        }
    }

    /// Reaps every exited process of `group` that is check-provider's to
    /// reap: the provider, and orphans it adopted (see [`adopt_orphans`]).
    #[cfg(unix)]
    fn reap_group(&mut self, group: group::Pid) {
        use std::os::unix::process::ExitStatusExt;
        let _ = self.exited();
        let leader = i32::try_from(self.child.id()).unwrap_or(0);
        while let Some((pid, status)) = group::reap(group) {
            if pid == leader {
                self.status.get_or_insert(ExitStatus::from_raw(status));
            }
        }
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = self.end();
    }
}

/// Makes this process a child subreaper (Linux): the orphans of the
/// providers it starts become its children, so that ending a session can
/// reap them and see their group empty. Elsewhere a no-op. Call it once,
/// before the battery runs (the command line does); without it a group
/// whose orphans nobody reaps (a container whose init reaps nothing) is
/// signalled and given up on after [`TERM_GRACE`].
pub fn adopt_orphans() -> Result<(), String> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    if let Err(error) = rustix::process::set_child_subreaper(Some(rustix::process::getpid())) {
        return Err(format!(
            "cannot adopt the orphans of the provider ({error}); a process group it leaves may take {} to end",
            TERM_GRACE.as_secs()
        ));
    }
    Ok(())
}

/// Ends every provider process group still running (SIGTERM to each,
/// [`TERM_GRACE`] for them to exit, SIGKILL to the rest), then calls
/// `then`, with no new provider able to start meanwhile: what a command
/// line does when it is interrupted (`then` exits).
pub fn end_all_then<T>(then: impl FnOnce() -> T) -> T {
    // Held until `then` returns: no provider starts after this.
    let leaders = live();
    #[cfg(unix)]
    {
        let groups: Vec<_> = leaders.iter().filter_map(|id| group::of(*id)).collect();
        for group in &groups {
            group::signal(*group, group::TERM);
        }
        let until = Instant::now() + TERM_GRACE;
        while Instant::now() < until && groups.iter().any(|group| group::present(*group)) {
            thread::sleep(POLL);
        }
        for group in &groups {
            group::signal(*group, group::KILL);
        }
    }
    let outcome = then();
    drop(leaders);
    outcome
}

/// Process groups, by their leader's pid.
#[cfg(unix)]
mod group {
    use rustix::io::Errno;
    pub use rustix::process::Pid;
    use rustix::process::{
        Signal, WaitOptions, kill_process_group, test_kill_process_group, waitpgid,
    };

    pub const TERM: Signal = Signal::TERM;
    pub const KILL: Signal = Signal::KILL;

    /// The group `leader` leads.
    pub fn of(leader: u32) -> Option<Pid> {
        i32::try_from(leader)
            .ok()
            .filter(|raw| *raw > 0)
            .and_then(Pid::from_raw)
    }

    /// Sends `signal` to every process of `group`; false when there is
    /// none (or none it may signal).
    pub fn signal(group: Pid, signal: Signal) -> bool {
        kill_process_group(group, signal).is_ok()
    }

    /// True while some process of `group` exists (one it may not signal
    /// counts, and so does a zombie).
    pub fn present(group: Pid) -> bool {
        !matches!(test_kill_process_group(group), Err(Errno::SRCH))
    }

    /// Reaps one exited child of this process in `group`, if any: its
    /// pid and raw wait status.
    pub fn reap(group: Pid) -> Option<(i32, i32)> {
        match waitpgid(group, WaitOptions::NOHANG) {
            Ok(Some((pid, status))) => Some((pid.as_raw_nonzero().get(), status.as_raw())),
            _ => None,
        }
    }
}
