//! Sessions: the context an operation runs in, owning one device queue.
//!
//! Device commands are submitted on the session's own queue and awaited by
//! polling it. A session serves one operation at a time (one thread's, or
//! one task's, lent to it for the operation), so its queue's lock is never
//! contended and the I/O path takes no lock shared with other threads.

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::future::poll_fn;
use core::task::{Poll, Waker};

use super::inode::{Inode, Unblock};
use super::Shared;
use crate::dev::{BlockDevice, Command, DevError, DeviceQueue, Tag};
use crate::error::Result;
use crate::lock::{Held, Mode, RangeGuard, RangeLock, StripedGuard, StripedLock};
use crate::stats::{Counter, Counters};
use crate::sync::{block_on, Mutex};
use crate::units::ByteRange;

/// Completions reaped per poll.
const POLL_BATCH: usize = 64;

/// The context file operations run in: one device queue and its counters.
/// Open one per thread with [`Fs::session`](super::Fs::session) and pass it
/// to the operations (`session.read_at(&file, ..)`), or, on a hosted build,
/// let [`File`](super::File)'s own methods borrow the calling thread's.
pub struct Session<D: BlockDevice> {
    pub(crate) fs: Arc<Shared<D>>,
    /// Taken for each submit and poll; only the operation the session
    /// serves takes it, so it is never contended.
    queue: Mutex<D::Queue>,
    /// Completions reaped from the queue and not yet claimed by their waiter.
    done: Mutex<Vec<(Tag, core::result::Result<(), DevError>)>>,
    pub(crate) counters: Arc<Counters>,
    /// Which write-drain slot this session's writers use.
    pub(crate) drain_hint: usize,
}

impl<D: BlockDevice> core::fmt::Debug for Session<D> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Session").finish_non_exhaustive()
    }
}

impl<D: BlockDevice> Drop for Session<D> {
    fn drop(&mut self) {
        self.fs.retire_counters(&self.counters);
    }
}

impl<D: BlockDevice> Session<D> {
    /// A new session of `fs`, with a device queue of its own.
    pub(crate) fn open(fs: Arc<Shared<D>>) -> Result<Session<D>> {
        let queue = fs.dev.open_queue()?;
        let counters = Arc::new(Counters::default());
        let id = fs.register_counters(&counters);
        Ok(Session {
            fs,
            queue: Mutex::new(queue),
            done: Mutex::new(Vec::new()),
            counters,
            drain_hint: id,
        })
    }

    /// Runs an engine future to completion on this thread.
    pub fn block_on<F: core::future::Future>(&self, f: F) -> F::Output {
        block_on(f, self.fs.config.idle)
    }

    /// Reaps completions from the queue into `done`.
    fn reap(&self) {
        let now = (self.fs.config.clock)();
        let mut done = self.done.lock();
        self.queue
            .lock()
            .poll(now, POLL_BATCH, &mut |c| done.push((c.tag, c.result)));
    }

    /// Submits `cmd`, waiting for queue space if the queue is full.
    pub(crate) async fn submit(&self, cmd: &Command<'_>) -> core::result::Result<Tag, DevError> {
        loop {
            let r = self.queue.lock().submit(cmd);
            match r {
                Ok(tag) => {
                    self.counters.command(cmd.kind(), cmd.data_bytes());
                    return Ok(tag);
                }
                Err(DevError::QueueFull) => {
                    self.reap();
                    crate::sync::yield_now().await;
                }
                Err(e) => {
                    self.counters.add(Counter::dev_errors, 1);
                    return Err(e);
                }
            }
        }
    }

    /// Waits for the command `tag` by polling the queue.
    ///
    /// In polled mode the device signals nothing: someone must look. Under
    /// [`Session::block_on`] the caller's loop polls again at once (an
    /// SPDK-style reactor). Under any other executor the waker is handed to
    /// [`Config::park`](super::Config::park), which wakes it when the queue
    /// is worth looking at again: at once by default; with
    /// `pollfs_hosted::config`, after a short spin and then on a timer
    /// with growing delays (hybrid polling), so a task waiting on a slow
    /// device does not burn a core.
    pub(crate) async fn wait(&self, tag: Tag) -> core::result::Result<(), DevError> {
        let mut polls = 0u32;
        poll_fn(|cx| {
            for attempt in 0..2 {
                let mut done = self.done.lock();
                if let Some(i) = done.iter().position(|(t, _)| *t == tag) {
                    let (_, r) = done.swap_remove(i);
                    if r.is_err() {
                        self.counters.add(Counter::dev_errors, 1);
                    }
                    return Poll::Ready(r);
                }
                drop(done);
                if attempt == 0 {
                    self.reap();
                }
            }
            if !cx.waker().will_wake(Waker::noop()) {
                (self.fs.config.park)(cx.waker(), polls);
            }
            polls = polls.saturating_add(1);
            Poll::Pending
        })
        .await
    }

    /// Submits `cmd` and waits for it.
    pub(crate) async fn run(&self, cmd: &Command<'_>) -> core::result::Result<(), DevError> {
        let tag = self.submit(cmd).await?;
        self.wait(tag).await
    }

    /// Takes the inode lock (the whole file) in `mode`.
    pub(crate) async fn inode_lock<'a>(
        &self,
        inode: &'a Inode,
        mode: Mode,
        held: &'a Held,
    ) -> RangeGuard<'a> {
        self.lock(&inode.inode_lock, ByteRange::from(0), mode, held)
            .await
    }

    /// Shuts out writers that hold no inode lock and waits for those in
    /// flight; they may enter again when the guard drops.
    pub(crate) async fn drain_writers<'a>(&self, inode: &'a Inode) -> Unblock<'a> {
        inode.writers().block();
        let unblock = Unblock(inode.writers());
        inode.writers().drained().await;
        unblock
    }

    /// Takes `range` of a striped lock, counting the wait if there is one.
    pub(crate) async fn lock_striped<'a>(
        &self,
        lock: &'a StripedLock,
        range: ByteRange,
        mode: Mode,
        held: &'a Held,
    ) -> StripedGuard<'a> {
        let (guard, waited) = lock.lock(range, mode, held).await;
        if waited {
            self.counters.add(Counter::lock_waits, 1);
        }
        guard
    }

    /// Takes `range` of `lock`, counting the wait if there is one.
    pub(crate) async fn lock<'a>(
        &self,
        lock: &'a RangeLock,
        range: ByteRange,
        mode: Mode,
        held: &'a Held,
    ) -> RangeGuard<'a> {
        let acquire = lock.lock(range, mode, held);
        if acquire.must_wait() {
            self.counters.add(Counter::lock_waits, 1);
        }
        acquire.await
    }
}

#[cfg(test)]
mod tests {
    use crate::dev::ram::RamDevice;
    use crate::fs::{Config, Fs};

    #[test]
    fn live_sessions_never_share_a_number() {
        let dev = RamDevice::new(16 << 20, 4096, 64).unwrap();
        let config = Config {
            cache_pages: 32,
            dirty_limit_pages: 16,
            ..Config::default()
        };
        let fs = Fs::new(dev, config).unwrap();
        let a = fs.session().unwrap();
        let b = fs.session().unwrap();
        drop(a);
        // Two sessions live again, as before `a` closed: the new one must
        // not take the number (and write-drain slot) `b` has.
        let c = fs.session().unwrap();
        assert_ne!(b.drain_hint, c.drain_hint);
    }
}
