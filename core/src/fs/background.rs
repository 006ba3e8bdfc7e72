//! The log's background work as the engine offers it to whoever drives it:
//! the engine starts no thread. A driver (the hosted layer's thread in
//! `pollfs-hosted`, an application's reactor, a test that runs steps at
//! chosen points) is named in [`Config::background`](super::Config) and
//! started by the mount once it has finished loading (`Fs::start`): a step
//! before that could checkpoint, and so allocate blocks that the load had
//! not yet reserved for the checkpoint chain or a file.
//!
//! The driver gets a [`BackgroundWork`]: the mount's shared state, not its
//! handles, so it never keeps the mount alive. It gives back a
//! [`BackgroundDriver`]: the waker the engine calls when a sync makes work
//! due while the driver sleeps, and a guard the mount's handles own, so
//! that dropping the last `Fs` or `File` stops the driver (the guard's
//! drop joins a thread, say). [`Fs::pause_background`](super::Fs) keeps
//! steps out whoever drives them; a failed step counts itself in
//! [`Stats::background_errors`](crate::Stats).

use alloc::boxed::Box;
use alloc::sync::Arc;

use super::{Session, Shared};
use crate::dev::BlockDevice;
use crate::error::Result;
use crate::sync::Mutex;

/// A mount's background work, for its driver.
pub trait BackgroundWork: Send + Sync {
    /// True if a step has work: logged pages due home, or a checkpoint due.
    fn due(&self) -> bool;
    /// One step ([`Session::background_step`]) on the work's own session,
    /// opened at the first step, after the user's threads opened theirs.
    /// A session that cannot be opened (no device queue left) is counted
    /// in [`Stats::background_errors`](crate::Stats) like a failed step.
    fn step(&self) -> Result<usize>;
    /// Says whether commits leave checkpoints to the steps (see
    /// [`Fs::set_background_steps`](super::Fs::set_background_steps)): a
    /// driver turns it on while it runs and off when it stops.
    fn set_steps(&self, on: bool);
}

/// How the engine wakes a driver that sleeps until work is due.
///
/// No wake-up is lost if the driver marks itself asleep, then looks at
/// [`BackgroundWork::due`] once more before it sleeps, and the engine, after
/// a sync made work due, looks at [`asleep`](Self::asleep) (both
/// sequentially consistent): either the driver sees the work or the engine
/// sees the mark.
pub trait BackgroundWaker: Send + Sync {
    /// True if the driver is asleep or about to be.
    fn asleep(&self) -> bool;
    /// Wakes it.
    fn wake(&self);
}

/// A running driver, as its start returns it.
pub struct BackgroundDriver {
    /// Called when a sync makes work due while the driver sleeps.
    pub waker: Arc<dyn BackgroundWaker>,
    /// Owned by the mount's handles; dropped with the last, it must stop
    /// the driver (and may wait for a step in progress to end).
    pub guard: Box<dyn Send + Sync>,
}

impl core::fmt::Debug for BackgroundDriver {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("BackgroundDriver")
            .field("asleep", &self.waker.asleep())
            .finish_non_exhaustive()
    }
}

/// Starts a driver for a mount that has finished loading; `None` if it
/// could not (then syncs write home themselves when the log's share for
/// data is full, and checkpoint when the log is half full).
pub type StartBackground = fn(Arc<dyn BackgroundWork>) -> Option<BackgroundDriver>;

/// The engine's side of [`BackgroundWork`] for one mount.
pub(crate) struct Work<D: BlockDevice> {
    shared: Arc<Shared<D>>,
    /// The driver's session; taken only by the driver's steps, one at a
    /// time, so never contended.
    session: Mutex<Option<Session<D>>>,
}

impl<D: BlockDevice> Work<D> {
    pub(crate) fn new(shared: Arc<Shared<D>>) -> Work<D> {
        Work {
            shared,
            session: Mutex::new(None),
        }
    }
}

impl<D: BlockDevice> BackgroundWork for Work<D> {
    fn due(&self) -> bool {
        self.shared.journal.background_due()
    }

    fn step(&self) -> Result<usize> {
        let mut session = self.session.lock();
        if session.is_none() {
            match Session::open(self.shared.clone()) {
                Ok(s) => *session = Some(s),
                Err(e) => {
                    self.shared.counters.lock().1.background_errors += 1;
                    return Err(e);
                }
            }
        }
        match session.as_ref() {
            Some(s) => s.background_step(),
            None => Ok(0),
        }
    }

    fn set_steps(&self, on: bool) {
        self.shared.journal.set_background(on);
    }
}

/// Starts `shared`'s driver, if its configuration names one and it has a
/// log (`Fs::new` has nothing to write home, ever).
pub(crate) fn start<D: BlockDevice>(shared: &Arc<Shared<D>>) -> Option<BackgroundDriver> {
    let start = shared.config.background?;
    if !shared.journal.has_log() {
        return None;
    }
    let driver = start(Arc::new(Work::new(shared.clone())))?;
    shared.waker.call_once(|| driver.waker.clone());
    Some(driver)
}
