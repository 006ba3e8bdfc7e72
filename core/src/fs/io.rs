//! Sessions: a thread's handle on the filesystem, owning one device queue.
//!
//! Device commands are submitted on the session's own queue and awaited by
//! polling it, so the I/O path takes no lock shared with other threads.

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::cell::RefCell;
use core::future::poll_fn;
use core::task::Poll;

use super::file::File;
use super::inode::{Inode, Unblock};
use super::Shared;
use crate::dev::{BlockDevice, Command, DevError, DeviceQueue, Tag};
use crate::error::Result;
use crate::lock::{Held, Mode, RangeGuard, RangeLock, StripedGuard, StripedLock};
use crate::stats::{Counter, Counters};
use crate::sync::block_on;
use crate::units::ByteRange;

/// Completions reaped per poll.
const POLL_BATCH: usize = 64;

/// A thread's view of the filesystem. Not `Sync`: each thread opens its own
/// with [`Fs::session`](super::Fs::session), and opens files through it.
pub struct Session<D: BlockDevice> {
    pub(crate) fs: Arc<Shared<D>>,
    queue: RefCell<D::Queue>,
    /// Completions reaped from the queue and not yet claimed by their waiter.
    done: RefCell<Vec<(Tag, core::result::Result<(), DevError>)>>,
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
    pub(crate) fn new(
        fs: Arc<Shared<D>>,
        counters: Arc<Counters>,
        id: usize,
    ) -> Result<Session<D>> {
        let queue = fs.dev.open_queue()?;
        Ok(Session {
            fs,
            queue: RefCell::new(queue),
            done: RefCell::new(Vec::new()),
            counters,
            drain_hint: id,
        })
    }

    /// Creates `name`, which must not exist, and opens it.
    pub fn create(&self, name: &str) -> Result<File<'_, D>> {
        let inode = self.fs_handle().create_inode(name)?;
        Ok(File::new(self, inode))
    }

    /// Opens the existing file `name`.
    pub fn open(&self, name: &str) -> Result<File<'_, D>> {
        let inode = self.fs_handle().open_inode(name)?;
        Ok(File::new(self, inode))
    }

    /// Opens `name`, creating it if it does not exist.
    pub fn open_or_create(&self, name: &str) -> Result<File<'_, D>> {
        match self.open(name) {
            Err(crate::Error::Namespace(crate::error::NamespaceError::NotFound)) => {
                self.create(name)
            }
            other => other,
        }
    }

    fn fs_handle(&self) -> super::Fs<D> {
        super::Fs {
            shared: self.fs.clone(),
        }
    }

    /// Runs an engine future to completion on this thread.
    pub fn block_on<F: core::future::Future>(&self, f: F) -> F::Output {
        block_on(f, self.fs.config.idle)
    }

    /// Reaps completions from the queue into `done`.
    fn reap(&self) {
        let now = (self.fs.config.clock)();
        let mut done = self.done.borrow_mut();
        self.queue
            .borrow_mut()
            .poll(now, POLL_BATCH, &mut |c| done.push((c.tag, c.result)));
    }

    /// Submits `cmd`, waiting for queue space if the queue is full.
    pub(crate) async fn submit(&self, cmd: &Command<'_>) -> core::result::Result<Tag, DevError> {
        loop {
            let r = self.queue.borrow_mut().submit(cmd);
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
    pub(crate) async fn wait(&self, tag: Tag) -> core::result::Result<(), DevError> {
        poll_fn(|cx| {
            for attempt in 0..2 {
                let mut done = self.done.borrow_mut();
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
            // Polled mode: nothing will wake us, so ask to be polled again.
            cx.waker().wake_by_ref();
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
        inode.writers.block();
        let unblock = Unblock(&inode.writers);
        inode.writers.drained().await;
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
