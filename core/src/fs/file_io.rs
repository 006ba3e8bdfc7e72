//! `File`'s own I/O methods (hosted builds): each borrows a session from
//! the mount's lender for the one operation (see `lender`) and gives it
//! back when the operation ends.

use super::lender::{lend, Lent};
use super::{Allocate, File};
use crate::dev::BlockDevice;
use crate::error::Result;

/// The handle's operations, each in a session lent by [`lend`].
impl<D: BlockDevice> File<D> {
    // Always inlined: the cached read's whole cost is a few hundred
    // instructions, and a call here returns its result through memory.
    #[inline(always)]
    fn session(&self) -> Result<Lent<'_, D>> {
        lend(&self.fs)
    }

    /// Reads up to `buf.len()` bytes at `offset`; returns how many were read
    /// (fewer at EOF, 0 at or past it). Holes read as zeros.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        // Lent through this file's own handle: the session is of the
        // file's filesystem, which `Session::read_at` would check again.
        self.session()?.read_at_mine(self, buf, offset)
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
