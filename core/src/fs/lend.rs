//! Sessions lent to operations (hosted builds): the calling thread's own
//! session for the filesystem, made on first use, or, when the thread
//! already lent it to another operation (several tasks on one thread), one
//! from the filesystem's pool.
//!
//! A thread that runs one operation at a time only ever touches its own
//! thread-local slot: no lock shared between threads on the I/O path, as
//! with explicit sessions. A session goes back to the slot of the thread an
//! operation ends on (a task may move), or to the pool if that slot is
//! taken. When the last handle on a filesystem drops, the pool is emptied
//! and this thread's slot cleared; other threads' slots are cleared the
//! next time they borrow a session, or when they exit.

use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::any::Any;
use core::ops::Deref;
use core::sync::atomic::Ordering;
use std::cell::RefCell;

use super::{Allocate, File, Session, Shared};
use crate::dev::BlockDevice;
use crate::error::Result;

/// A session parked in a thread's slot, whatever its device type.
trait Parked: Any {
    fn fs_id(&self) -> u64;
    fn closed(&self) -> bool;
    fn into_any(self: Box<Self>) -> Box<dyn Any>;
}

impl<D: BlockDevice> Parked for Session<D> {
    fn fs_id(&self) -> u64 {
        self.fs.id
    }
    fn closed(&self) -> bool {
        self.fs.closed.load(Ordering::Acquire)
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

std::thread_local! {
    /// This thread's sessions, one per filesystem at most.
    static SLOTS: RefCell<Vec<Box<dyn Parked>>> = const { RefCell::new(Vec::new()) };
}

/// A session lent to one operation; given back when dropped.
pub(crate) struct Lent<D: BlockDevice> {
    session: Option<Session<D>>,
}

impl<D: BlockDevice> Deref for Lent<D> {
    type Target = Session<D>;
    fn deref(&self) -> &Session<D> {
        // Present from creation until drop.
        self.session.as_ref().unwrap_or_else(|| unreachable!())
    }
}

impl<D: BlockDevice> Drop for Lent<D> {
    fn drop(&mut self) {
        let Some(session) = self.session.take() else {
            return;
        };
        if session.fs.closed.load(Ordering::Acquire) {
            return;
        }
        let id = session.fs.id;
        let unplaced = SLOTS
            .try_with(|slots| {
                let mut slots = slots.borrow_mut();
                if slots.iter().any(|p| p.fs_id() == id) {
                    Some(session)
                } else {
                    slots.push(Box::new(session));
                    None
                }
            })
            .ok()
            .flatten();
        if let Some(session) = unplaced {
            let shared = session.fs.clone();
            shared.pool.lock().push(session);
        }
    }
}

/// Lends a session of `fs` to one operation.
pub(crate) fn lend<D: BlockDevice>(fs: &Arc<Shared<D>>) -> Result<Lent<D>> {
    let id = fs.id;
    let mine = SLOTS
        .try_with(|slots| {
            let mut slots = slots.borrow_mut();
            // Sessions of filesystems that are gone keep them alive: drop.
            slots.retain(|p| !p.closed());
            let i = slots.iter().position(|p| p.fs_id() == id)?;
            slots
                .swap_remove(i)
                .into_any()
                .downcast::<Session<D>>()
                .ok()
        })
        .ok()
        .flatten();
    let session = match mine {
        Some(s) => *s,
        None => match fs.pool.lock().pop() {
            Some(s) => s,
            None => Session::open(fs.clone())?,
        },
    };
    Ok(Lent {
        session: Some(session),
    })
}

/// Forgets this thread's session of filesystem `id` (its last handle is
/// gone).
pub(crate) fn forget(id: u64) {
    let _ = SLOTS.try_with(|slots| {
        if let Ok(mut slots) = slots.try_borrow_mut() {
            slots.retain(|p| p.fs_id() != id);
        }
    });
}

/// The handle's operations, each in a session lent by [`lend`].
impl<D: BlockDevice> File<D> {
    fn session(&self) -> Result<Lent<D>> {
        lend(&self.fs.shared)
    }

    /// Reads up to `buf.len()` bytes at `offset`; returns how many were read
    /// (fewer at EOF, 0 at or past it). Holes read as zeros.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        self.session()?.read_at(self, buf, offset)
    }
    /// Fills `buf` from `offset`, or fails with
    /// [`RangeError::EndOfFile`](crate::error::RangeError::EndOfFile).
    pub fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.session()?.read_exact_at(self, buf, offset)
    }
    /// Writes `buf` at `offset`, extending the file if it ends past EOF.
    /// Returns the bytes written (short only if the device fills up or
    /// fails part-way; an error if nothing could be written).
    pub fn write_at(&self, buf: &[u8], offset: u64) -> Result<usize> {
        self.session()?.write_at(self, buf, offset)
    }
    /// Writes all of `buf` at `offset`.
    pub fn write_all_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.session()?.write_all_at(self, buf, offset)
    }
    /// Truncates or extends the file to `size` bytes.
    pub fn set_len(&self, size: u64) -> Result<()> {
        self.session()?.set_len(self, size)
    }
    /// Deallocates `[offset, offset + len)`: it reads as zeros afterwards
    /// and its whole blocks are freed. The size does not change.
    pub fn punch_hole(&self, offset: u64, len: u64) -> Result<()> {
        self.session()?.punch_hole(self, offset, len)
    }
    /// `fallocate` on `[offset, offset + len)`: reserves blocks, zeroes
    /// or punches the range as `what` asks, with fallocate(2)'s size
    /// rules (see [`Allocate`]).
    pub fn allocate(&self, offset: u64, len: u64, what: Allocate) -> Result<()> {
        self.session()?.allocate(self, offset, len, what)
    }
    /// Makes everything written so far durable (data and the metadata
    /// needed to read it).
    pub fn sync_data(&self) -> Result<()> {
        self.session()?.sync_data(self)
    }
    /// Like [`File::sync_data`], and also metadata-only changes.
    pub fn sync_all(&self) -> Result<()> {
        self.session()?.sync_all(self)
    }

    /// Reads past the page cache, as O_DIRECT does (see
    /// [`Session::read_direct_async`]).
    pub fn read_direct(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        self.session()?.read_direct(self, buf, offset)
    }
    /// Writes past the page cache, as O_DIRECT does (see
    /// [`Session::write_direct_async`]).
    pub fn write_direct(&self, buf: &[u8], offset: u64) -> Result<usize> {
        self.session()?.write_direct(self, buf, offset)
    }
    /// Future of [`File::read_direct`].
    pub async fn read_direct_async(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        self.session()?.read_direct_async(self, buf, offset).await
    }
    /// Future of [`File::write_direct`].
    pub async fn write_direct_async(&self, buf: &[u8], offset: u64) -> Result<usize> {
        self.session()?.write_direct_async(self, buf, offset).await
    }

    /// Future of [`File::read_at`].
    pub async fn read_at_async(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        self.session()?.read_at_async(self, buf, offset).await
    }
    /// Future of [`File::read_exact_at`].
    pub async fn read_exact_at_async(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.session()?.read_exact_at_async(self, buf, offset).await
    }
    /// Future of [`File::write_at`].
    pub async fn write_at_async(&self, buf: &[u8], offset: u64) -> Result<usize> {
        self.session()?.write_at_async(self, buf, offset).await
    }
    /// Future of [`File::write_all_at`].
    pub async fn write_all_at_async(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.session()?.write_all_at_async(self, buf, offset).await
    }
    /// Future of [`File::set_len`].
    pub async fn set_len_async(&self, size: u64) -> Result<()> {
        self.session()?.set_len_async(self, size).await
    }
    /// Future of [`File::punch_hole`].
    pub async fn punch_hole_async(&self, offset: u64, len: u64) -> Result<()> {
        self.session()?.punch_hole_async(self, offset, len).await
    }
    /// Future of [`File::allocate`].
    pub async fn allocate_async(&self, offset: u64, len: u64, what: Allocate) -> Result<()> {
        self.session()?
            .allocate_async(self, offset, len, what)
            .await
    }
    /// Future of [`File::sync_data`].
    pub async fn sync_data_async(&self) -> Result<()> {
        self.session()?.sync_data_async(self).await
    }
    /// Future of [`File::sync_all`].
    pub async fn sync_all_async(&self) -> Result<()> {
        self.session()?.sync_all_async(self).await
    }
}
