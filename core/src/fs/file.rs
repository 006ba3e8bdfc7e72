//! File handles.

use alloc::sync::Arc;
use core::cell::Cell;

use super::inode::Inode;
use super::read::Readahead;
use super::Session;
use crate::dev::BlockDevice;
use crate::error::Result;

/// An open file, borrowed from the [`Session`] that opened it.
///
/// The synchronous methods mirror `std::os::unix::fs::FileExt` and
/// `std::fs::File`; each has an `_async` twin returning the engine's future,
/// for callers that run their own executor.
pub struct File<'s, D: BlockDevice> {
    session: &'s Session<D>,
    inode: Arc<Inode>,
    readahead: Cell<Readahead>,
}

impl<D: BlockDevice> core::fmt::Debug for File<'_, D> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("File")
            .field("ino", &self.inode.id)
            .finish_non_exhaustive()
    }
}

impl<'s, D: BlockDevice> File<'s, D> {
    pub(crate) fn new(session: &'s Session<D>, inode: Arc<Inode>) -> File<'s, D> {
        File {
            session,
            inode,
            readahead: Cell::new(Readahead::default()),
        }
    }

    /// The file's size in bytes.
    pub fn len(&self) -> u64 {
        self.inode.size()
    }

    /// True if the file is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The file's inode number.
    pub fn ino(&self) -> u64 {
        self.inode.id.0
    }

    /// Reads up to `buf.len()` bytes at `offset`; returns how many were read
    /// (fewer at EOF, 0 at or past it). Holes read as zeros.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        self.session.block_on(self.read_at_async(buf, offset))
    }

    /// Writes `buf` at `offset`, extending the file if it ends past EOF.
    /// Returns the bytes written (short only if the device fills up or fails
    /// part-way; an error if nothing could be written).
    pub fn write_at(&self, buf: &[u8], offset: u64) -> Result<usize> {
        self.session.block_on(self.write_at_async(buf, offset))
    }

    /// Writes all of `buf` at `offset`.
    pub fn write_all_at(&self, mut buf: &[u8], mut offset: u64) -> Result<()> {
        while !buf.is_empty() {
            let n = self.write_at(buf, offset)?;
            if n == 0 {
                return Err(crate::error::SpaceError::DeviceFull.into());
            }
            buf = &buf[n..];
            offset += n as u64;
        }
        Ok(())
    }

    /// Truncates or extends the file to `size` bytes.
    pub fn set_len(&self, size: u64) -> Result<()> {
        self.session.block_on(self.set_len_async(size))
    }

    /// Deallocates `[offset, offset + len)`: it reads as zeros afterwards and
    /// its whole blocks are freed. The size does not change.
    pub fn punch_hole(&self, offset: u64, len: u64) -> Result<()> {
        self.session.block_on(self.punch_hole_async(offset, len))
    }

    /// Makes everything written so far durable (data and the metadata needed
    /// to read it).
    pub fn sync_data(&self) -> Result<()> {
        self.session.block_on(self.sync_data_async())
    }

    /// Like [`File::sync_data`], and also metadata-only changes.
    pub fn sync_all(&self) -> Result<()> {
        self.session.block_on(self.sync_all_async())
    }

    /// Future of [`File::read_at`].
    pub async fn read_at_async(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        self.session
            .read(&self.inode, &self.readahead, buf, offset)
            .await
    }

    /// Future of [`File::write_at`].
    pub async fn write_at_async(&self, buf: &[u8], offset: u64) -> Result<usize> {
        self.session.write(&self.inode, buf, offset).await
    }

    /// Future of [`File::set_len`].
    pub async fn set_len_async(&self, size: u64) -> Result<()> {
        self.session.set_len(&self.inode, size).await
    }

    /// Future of [`File::punch_hole`].
    pub async fn punch_hole_async(&self, offset: u64, len: u64) -> Result<()> {
        self.session.punch_hole(&self.inode, offset, len).await
    }

    /// Future of [`File::sync_data`].
    pub async fn sync_data_async(&self) -> Result<()> {
        self.session.sync(&self.inode).await
    }

    /// Future of [`File::sync_all`]. Until the metadata log exists, all
    /// metadata lives in memory, so this is the same as `sync_data`.
    pub async fn sync_all_async(&self) -> Result<()> {
        self.session.sync(&self.inode).await
    }
}

impl<D: BlockDevice> Drop for File<'_, D> {
    fn drop(&mut self) {
        self.session.fs.close(&self.inode);
    }
}
