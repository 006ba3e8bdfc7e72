//! File operations in a session: the explicit-context API. Each takes the
//! session to run in and the file to work on; the `_async` forms return the
//! engine's future, for callers that run their own executor, and the others
//! run it with the session's polling loop.

use alloc::sync::Arc;

use super::file::File;
use super::read::{Cached, ReadPos};
use super::{Allocate, Session};
use crate::dev::BlockDevice;
use crate::error::{ConfigError, Error, RangeError, Result, SpaceError};
use crate::lock::Held;
use crate::stats::Counter;

impl<D: BlockDevice> Session<D> {
    /// A file of this session's filesystem, or an error: inode numbers of
    /// two filesystems mean nothing to each other.
    fn mine(&self, f: &File<D>) -> Result<()> {
        if Arc::ptr_eq(&self.fs, &f.fs.shared) {
            Ok(())
        } else {
            Err(Error::Config(ConfigError::ForeignFile))
        }
    }

    /// Reads up to `buf.len()` bytes of `f` at `offset`; returns how many
    /// were read (fewer at EOF, 0 at or past it). Holes read as zeros.
    pub async fn read_at_async(&self, f: &File<D>, buf: &mut [u8], offset: u64) -> Result<usize> {
        self.mine(f)?;
        let n = self.read_inode(&f.inode, &f.readahead, buf, offset).await?;
        self.counters.read(n);
        Ok(n)
    }

    /// Fills `buf` from `offset`, or fails with [`RangeError::EndOfFile`]
    /// if the file ends first (what was read is in `buf`).
    pub async fn read_exact_at_async(
        &self,
        f: &File<D>,
        mut buf: &mut [u8],
        mut offset: u64,
    ) -> Result<()> {
        while !buf.is_empty() {
            let n = self.read_at_async(f, buf, offset).await?;
            if n == 0 {
                return Err(RangeError::EndOfFile.into());
            }
            buf = &mut buf[n..];
            offset += n as u64;
        }
        Ok(())
    }

    /// Writes `buf` to `f` at `offset`, extending the file if it ends past
    /// EOF. Returns the bytes written (short only if the device fills up or
    /// fails part-way; an error if nothing could be written).
    pub async fn write_at_async(&self, f: &File<D>, buf: &[u8], offset: u64) -> Result<usize> {
        self.mine(f)?;
        let n = self.write_inode(&f.inode, buf, offset).await?;
        self.counters.write(n);
        Ok(n)
    }

    /// Writes all of `buf` at `offset`.
    pub async fn write_all_at_async(
        &self,
        f: &File<D>,
        mut buf: &[u8],
        mut offset: u64,
    ) -> Result<()> {
        while !buf.is_empty() {
            let n = self.write_at_async(f, buf, offset).await?;
            if n == 0 {
                return Err(SpaceError::DeviceFull.into());
            }
            buf = &buf[n..];
            offset += n as u64;
        }
        Ok(())
    }

    /// Truncates or extends `f` to `size` bytes.
    pub async fn set_len_async(&self, f: &File<D>, size: u64) -> Result<()> {
        self.mine(f)?;
        self.resize_inode(&f.inode, size).await
    }

    /// Deallocates `[offset, offset + len)` of `f`: it reads as zeros
    /// afterwards and its whole blocks are freed. The size does not change.
    pub async fn punch_hole_async(&self, f: &File<D>, offset: u64, len: u64) -> Result<()> {
        self.mine(f)?;
        self.punch_inode(&f.inode, offset, len).await
    }

    /// `fallocate` on `[offset, offset + len)` of `f`: reserves blocks,
    /// zeroes or punches the range as `what` asks, with fallocate(2)'s
    /// size rules (see [`Allocate`]).
    pub async fn allocate_async(
        &self,
        f: &File<D>,
        offset: u64,
        len: u64,
        what: Allocate,
    ) -> Result<()> {
        self.mine(f)?;
        self.allocate_inode(&f.inode, offset, len, what).await
    }

    /// Makes everything written to `f` so far durable (data and the
    /// metadata needed to read it).
    pub async fn sync_data_async(&self, f: &File<D>) -> Result<()> {
        self.mine(f)?;
        self.counters.add(Counter::syncs, 1);
        self.sync_inode(&f.inode).await
    }

    /// Like [`Session::sync_data_async`], and also metadata-only changes
    /// (there are none that `sync_data` leaves out yet: size and extents
    /// are all an inode has, and both are needed to read the data).
    pub async fn sync_all_async(&self, f: &File<D>) -> Result<()> {
        self.sync_data_async(f).await
    }

    /// Reads `buf` from `offset` past the page cache, as O_DIRECT does:
    /// `offset` and `buf.len()` must be multiples of 4096
    /// ([`RangeError::Unaligned`] otherwise; the buffer's address may be
    /// anything). Pages the cache holds are copied from it; the others come
    /// from the device. Returns the bytes read (fewer at EOF).
    pub async fn read_direct_async(
        &self,
        f: &File<D>,
        buf: &mut [u8],
        offset: u64,
    ) -> Result<usize> {
        self.mine(f)?;
        let n = self.read_direct_inode(&f.inode, buf, offset).await?;
        self.counters.read(n);
        Ok(n)
    }

    /// Writes `buf` at `offset` past the page cache, as O_DIRECT does (the
    /// same alignment as [`Session::read_direct_async`]): cached pages of
    /// the range are written back if dirty and dropped, and the data goes
    /// to the device before the call returns (durable after the next
    /// sync, like any write). Extends the file if it ends past EOF.
    pub async fn write_direct_async(&self, f: &File<D>, buf: &[u8], offset: u64) -> Result<usize> {
        self.mine(f)?;
        let n = self.write_direct_inode(&f.inode, buf, offset).await?;
        self.counters.write(n);
        Ok(n)
    }

    /// Synchronous [`Session::read_direct_async`].
    pub fn read_direct(&self, f: &File<D>, buf: &mut [u8], offset: u64) -> Result<usize> {
        self.block_on(self.read_direct_async(f, buf, offset))
    }
    /// Synchronous [`Session::write_direct_async`].
    pub fn write_direct(&self, f: &File<D>, buf: &[u8], offset: u64) -> Result<usize> {
        self.block_on(self.write_direct_async(f, buf, offset))
    }

    /// Synchronous [`Session::read_at_async`]. Pages the cache holds are
    /// copied without building the future; the future runs only for the
    /// rest of a read that must wait or fill.
    #[inline]
    pub fn read_at(&self, f: &File<D>, buf: &mut [u8], offset: u64) -> Result<usize> {
        self.mine(f)?;
        self.read_at_mine(f, buf, offset)
    }
    /// [`Session::read_at`] for a file of this session's filesystem (a
    /// session lent through the file's own handle is one by construction).
    /// A read its page answers whole is done here; any other goes out of
    /// line, so the common one is straight-line code.
    #[inline(always)]
    pub(crate) fn read_at_mine(&self, f: &File<D>, buf: &mut [u8], offset: u64) -> Result<usize> {
        debug_assert!(self.mine(f).is_ok(), "a file of another filesystem");
        if self.read_hit(&f.inode, &f.readahead, buf, offset) {
            // The session's own counters: a load and a store each, no
            // cache line shared with another core.
            self.counters.read(buf.len());
            return Ok(buf.len());
        }
        let n = self.read_not_hit(f, buf, offset)?;
        self.counters.read(n);
        Ok(n)
    }
    /// A [`Session::read_at`] that is not one page's hit: across pages,
    /// past EOF, a page to wait for or to fill, or file-lock mode.
    #[inline(never)]
    fn read_not_hit(&self, f: &File<D>, buf: &mut [u8], offset: u64) -> Result<usize> {
        match self.read_cached(&f.inode, &f.readahead, buf, offset) {
            Cached::Done(r) => r,
            Cached::Rest(at) => self.read_rest_blocking(f, at, buf),
            Cached::Locked => self.read_locked(f, buf, offset),
        }
    }
    /// [`Session::read_at`] in file-lock mode: the future, out of line
    /// (not [`Session::read_at_async`], which would count the read again).
    #[inline(never)]
    fn read_locked(&self, f: &File<D>, buf: &mut [u8], offset: u64) -> Result<usize> {
        self.block_on(self.read_inode(&f.inode, &f.readahead, buf, offset))
    }
    /// The rest of a [`Session::read_at`] that must wait or fill: out of
    /// line, so the cached path does not carry the future's frame.
    #[cold]
    #[inline(never)]
    fn read_rest_blocking(&self, f: &File<D>, at: ReadPos, buf: &mut [u8]) -> Result<usize> {
        self.block_on(async {
            let held = Held::new();
            self.read_rest(&f.inode, at, buf, &held).await
        })
    }
    /// Synchronous [`Session::read_exact_at_async`].
    pub fn read_exact_at(&self, f: &File<D>, buf: &mut [u8], offset: u64) -> Result<()> {
        self.block_on(self.read_exact_at_async(f, buf, offset))
    }
    /// Synchronous [`Session::write_at_async`].
    pub fn write_at(&self, f: &File<D>, buf: &[u8], offset: u64) -> Result<usize> {
        self.block_on(self.write_at_async(f, buf, offset))
    }
    /// Synchronous [`Session::write_all_at_async`].
    pub fn write_all_at(&self, f: &File<D>, buf: &[u8], offset: u64) -> Result<()> {
        self.block_on(self.write_all_at_async(f, buf, offset))
    }
    /// Synchronous [`Session::set_len_async`].
    pub fn set_len(&self, f: &File<D>, size: u64) -> Result<()> {
        self.block_on(self.set_len_async(f, size))
    }
    /// Synchronous [`Session::punch_hole_async`].
    pub fn punch_hole(&self, f: &File<D>, offset: u64, len: u64) -> Result<()> {
        self.block_on(self.punch_hole_async(f, offset, len))
    }
    /// Synchronous [`Session::allocate_async`].
    pub fn allocate(&self, f: &File<D>, offset: u64, len: u64, what: Allocate) -> Result<()> {
        self.block_on(self.allocate_async(f, offset, len, what))
    }
    /// Synchronous [`Session::sync_data_async`].
    pub fn sync_data(&self, f: &File<D>) -> Result<()> {
        self.block_on(self.sync_data_async(f))
    }
    /// Synchronous [`Session::sync_all_async`].
    pub fn sync_all(&self, f: &File<D>) -> Result<()> {
        self.block_on(self.sync_all_async(f))
    }
}
