//! Ending a provider child and everything it started.
//!
//! Each child is spawned as the leader of a process group of its own
//! (`CommandExt::process_group(0)`), so a launcher that does not `exec`
//! (`sh -c './provider; true'`, npm-style scripts) and the provider under
//! it end together: [`end`] sends SIGTERM to the group, gives it
//! [`TERM_GRACE`] to exit, sends SIGKILL to whatever is left, then reaps
//! the leader, waiting at most [`REAP_DEADLINE`]. It blocks (short sleeps),
//! so the loop runs it with [`Runtime::spawn_blocking`]. A child dropped
//! without being ended (the loop itself was dropped, e.g. with its
//! runtime) gets SIGKILL to its group at once ([`kill_now`]).
//!
//! The group id is the leader's pid, which stays reserved while the leader
//! is not reaped or any process of the group exists: the group is signalled
//! before the leader is reaped, and after that only while some process of
//! it is still there.
//!
//! Limits: a process that left the group (`setsid`, a daemon) is out of
//! reach; a group's orphans are reaped by init, and a zombie keeps the
//! group present, so such a group gets SIGKILL after the grace (harmless).
//! Elsewhere than Unix there are no process groups: the child's own
//! process is killed by dropping it (a runtime's child kills its process
//! when dropped).

use std::time::Duration;

use super::runtime::Runtime;

/// After SIGTERM, how long a stopped child's process group has to exit
/// before the rest of it gets SIGKILL (the same grace as
/// `evidence-wire check-provider`'s).
pub const TERM_GRACE: Duration = Duration::from_secs(1);
/// After the group was signalled, how long reaping the child may wait.
pub const REAP_DEADLINE: Duration = Duration::from_secs(2);

/// Ends the process group `leader` (the child's pid) leads and reaps the
/// child; blocks for at most about `TERM_GRACE + REAP_DEADLINE`.
pub(crate) fn end<R: Runtime>(child: R::Child, leader: u32) {
    #[cfg(unix)]
    {
        let mut child = child;
        unix::end::<R>(&mut child, leader);
    }
    // Dropped, the child is killed.
    #[cfg(not(unix))]
    let _ = (child, leader);
}

/// SIGKILL to the group `leader` leads (the child not reaped yet), now.
pub(crate) fn kill_now(leader: u32) {
    #[cfg(unix)]
    unix::kill_now(leader);
    #[cfg(not(unix))]
    let _ = leader;
}

#[cfg(unix)]
mod unix {
    use std::thread;
    use std::time::{Duration, Instant};

    use rustix::io::Errno;
    use rustix::process::{Pid, Signal, kill_process, kill_process_group, test_kill_process_group};

    use super::{REAP_DEADLINE, TERM_GRACE};
    use crate::caller::runtime::Runtime;

    /// How often a wait for processes looks again.
    const POLL: Duration = Duration::from_millis(10);

    /// The pid (and group id) `leader`.
    fn pid(leader: u32) -> Option<Pid> {
        i32::try_from(leader)
            .ok()
            .filter(|raw| *raw > 0)
            .and_then(Pid::from_raw)
    }

    /// Sends `signal` to every process of the group `leader` leads, or, when
    /// there is none it may signal (a set-user-ID program), to the leader
    /// itself unless it is `reaped` (its id may then be another's).
    fn signal(leader: Pid, signal: Signal, reaped: bool) {
        if kill_process_group(leader, signal).is_err() && !reaped {
            let _ = kill_process(leader, signal);
        }
    }

    /// True while some process of the group exists (a zombie counts).
    fn present(group: Pid) -> bool {
        !matches!(test_kill_process_group(group), Err(Errno::SRCH))
    }

    /// True once the child has exited and is reaped (an error: it is not
    /// ours to reap any more).
    fn reaped<R: Runtime>(child: &mut R::Child) -> bool {
        !matches!(R::try_wait(child), Ok(None))
    }

    /// SIGTERM, at most [`TERM_GRACE`] for the group to empty (reaping the
    /// leader meanwhile), SIGKILL to the rest, then at most
    /// [`REAP_DEADLINE`] to reap the leader.
    pub(super) fn end<R: Runtime>(child: &mut R::Child, leader: u32) {
        let Some(leader) = pid(leader) else {
            return;
        };
        signal(leader, Signal::TERM, false);
        let until = Instant::now() + TERM_GRACE;
        let mut done = false;
        loop {
            done = done || reaped::<R>(child);
            if done && !present(leader) {
                return;
            }
            if Instant::now() >= until {
                break;
            }
            thread::sleep(POLL);
        }
        // Reaped, the leader's id is still the group's while it is present.
        signal(leader, Signal::KILL, done);
        let until = Instant::now() + REAP_DEADLINE;
        while !done && Instant::now() < until {
            thread::sleep(POLL);
            done = reaped::<R>(child);
        }
    }

    /// SIGKILL to the group (the leader not reaped yet).
    pub(super) fn kill_now(leader: u32) {
        if let Some(leader) = pid(leader) {
            signal(leader, Signal::KILL, false);
        }
    }
}
