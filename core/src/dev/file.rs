//! A block device backed by a regular file (`std` feature), for users
//! without NVMe. Commands run synchronously when they are submitted: one
//! `pread` or `pwrite` per command, whatever its length; a FUA write is
//! one `pwrite` through a second descriptor opened `O_DSYNC` (the write
//! and the flush of its range in one system call, as a FUA write makes
//! only itself durable); flush is `fdatasync`. Frames live in ordinary
//! memory. The device counts its system calls ([`FileDevice::calls`]): a
//! sync's cost on a disk is those calls, and tests hold the count.

extern crate std;

use alloc::sync::Arc;
use alloc::vec;
use core::sync::atomic::{AtomicU64, Ordering};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use super::immediate::{Execute, ImmediateQueue};
use super::ram::RamFrames;
use super::{BlockDevice, Command, DevError, FrameArena, Geometry};
use crate::units::PAGE_SIZE;

/// The medium of a [`FileDevice`].
#[derive(Debug)]
pub struct Inner<A = RamFrames> {
    file: File,
    /// The same file opened `O_DSYNC`, for FUA writes.
    dsync: File,
    geometry: Geometry,
    frames: Arc<A>,
    calls: Calls,
}

/// The system calls a [`FileDevice`] has made on its file, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileCalls {
    /// `pread`s.
    pub reads: u64,
    /// `pwrite`s without `O_DSYNC` (writes, deallocates, write-zeroes).
    pub writes: u64,
    /// `pwrite`s through the `O_DSYNC` descriptor (FUA writes): each
    /// flushes its own range.
    pub dsync_writes: u64,
    /// `fdatasync`s (flushes).
    pub fdatasyncs: u64,
}

impl FileCalls {
    /// The calls that wait for the medium: flushes and FUA writes.
    pub fn durable(&self) -> u64 {
        self.fdatasyncs + self.dsync_writes
    }

    /// The difference `self - earlier`, kind by kind (zero where
    /// `earlier` is the later snapshot).
    pub fn since(&self, earlier: &FileCalls) -> FileCalls {
        FileCalls {
            reads: self.reads.saturating_sub(earlier.reads),
            writes: self.writes.saturating_sub(earlier.writes),
            dsync_writes: self.dsync_writes.saturating_sub(earlier.dsync_writes),
            fdatasyncs: self.fdatasyncs.saturating_sub(earlier.fdatasyncs),
        }
    }
}

/// Live counts behind [`FileCalls`].
#[derive(Debug, Default)]
struct Calls {
    reads: AtomicU64,
    writes: AtomicU64,
    dsync_writes: AtomicU64,
    fdatasyncs: AtomicU64,
}

impl Calls {
    fn one(cell: &AtomicU64) {
        cell.fetch_add(1, Ordering::Relaxed);
    }
}

/// A block device stored in a file. Clones share the file.
///
/// Like [`super::ram::RamDevice`], it moves data through any frame arena:
/// its own by default, or one it shares with other devices.
#[derive(Debug)]
pub struct FileDevice<A = RamFrames> {
    inner: Arc<Inner<A>>,
}

impl<A> Clone for FileDevice<A> {
    fn clone(&self) -> Self {
        FileDevice {
            inner: self.inner.clone(),
        }
    }
}

impl FileDevice {
    /// Opens (creating if needed) `path` as a device of `bytes` bytes with
    /// 4096-byte blocks and `frames` DMA frames. The file is extended to
    /// `bytes` if shorter; it is never truncated.
    pub fn open(path: &Path, bytes: u64, frames: u32) -> std::io::Result<FileDevice> {
        FileDevice::open_with_arena(path, bytes, Arc::new(RamFrames::new(frames)))
    }
}

impl<A: FrameArena> FileDevice<A> {
    /// As [`FileDevice::open`], moving data through the frames of `arena`.
    pub fn open_with_arena(path: &Path, bytes: u64, arena: Arc<A>) -> std::io::Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        if file.metadata()?.len() < bytes {
            file.set_len(bytes)?;
        }
        let dsync = OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_DSYNC)
            .open(path)?;
        let geometry = Geometry {
            block_size: PAGE_SIZE as u32,
            capacity: bytes / PAGE_SIZE as u64,
            max_transfer: 128 * 1024,
            queue_depth: 256,
            // A write with FUA syncs the file's data before it completes.
            fua: true,
        };
        Ok(FileDevice {
            inner: Arc::new(Inner {
                file,
                dsync,
                geometry,
                frames: arena,
                calls: Calls::default(),
            }),
        })
    }

    /// The device's frame arena, to share with another device.
    pub fn arena(&self) -> Arc<A> {
        self.inner.frames.clone()
    }

    /// The system calls made on the file so far, by every clone.
    pub fn calls(&self) -> FileCalls {
        let c = &self.inner.calls;
        let get = |cell: &AtomicU64| cell.load(Ordering::Relaxed);
        FileCalls {
            reads: get(&c.reads),
            writes: get(&c.writes),
            dsync_writes: get(&c.dsync_writes),
            fdatasyncs: get(&c.fdatasyncs),
        }
    }
}

/// The most bytes of zeros one `pwrite` of a deallocate or write-zeroes
/// writes.
const ZEROS_MAX: u64 = 1 << 20;

impl<A: FrameArena> Inner<A> {
    fn execute(&self, command: &Command<'_>) -> Result<(), DevError> {
        command.validate(&self.geometry)?;
        let bs = u64::from(self.geometry.block_size);
        let io = |_| DevError::Media;
        let c = &self.calls;
        match *command {
            Command::Read { lba, frames } => {
                // One pread for the command (at most max_transfer), then
                // a copy into each frame.
                let mut buf = vec![0u8; frames.len() * PAGE_SIZE];
                Calls::one(&c.reads);
                self.file.read_exact_at(&mut buf, lba.0 * bs).map_err(io)?;
                for (&f, page) in frames.iter().zip(buf.chunks_exact(PAGE_SIZE)) {
                    self.frames.write(f, 0, page)?;
                }
            }
            Command::Write { lba, frames, fua } => {
                let mut buf = vec![0u8; frames.len() * PAGE_SIZE];
                for (&f, page) in frames.iter().zip(buf.chunks_exact_mut(PAGE_SIZE)) {
                    self.frames.read(f, 0, page)?;
                }
                let (file, count) = if fua {
                    (&self.dsync, &c.dsync_writes)
                } else {
                    (&self.file, &c.writes)
                };
                Calls::one(count);
                file.write_all_at(&buf, lba.0 * bs).map_err(io)?;
            }
            Command::Flush => {
                Calls::one(&c.fdatasyncs);
                self.file.sync_data().map_err(io)?;
            }
            Command::Deallocate { lba, blocks } | Command::WriteZeroes { lba, blocks } => {
                let (mut pos, end) = (lba.0 * bs, (lba.0 + blocks) * bs);
                let zeros = vec![0u8; (end - pos).min(ZEROS_MAX) as usize];
                while pos < end {
                    let n = (end - pos).min(ZEROS_MAX) as usize;
                    Calls::one(&c.writes);
                    self.file.write_all_at(&zeros[..n], pos).map_err(io)?;
                    pos += n as u64;
                }
            }
        }
        Ok(())
    }
}

/// A queue on a [`FileDevice`].
pub type FileQueue<A = RamFrames> = ImmediateQueue<Inner<A>>;

impl<A: FrameArena> Execute for Inner<A> {
    fn geometry(&self) -> Geometry {
        self.geometry
    }
    fn execute(&self, command: &Command<'_>) -> Result<(), DevError> {
        Inner::execute(self, command)
    }
}

impl<A: FrameArena + 'static> BlockDevice for FileDevice<A> {
    type Queue = FileQueue<A>;
    type Frames = A;
    fn geometry(&self) -> Geometry {
        self.inner.geometry
    }
    fn frames(&self) -> &A {
        &self.inner.frames
    }
    fn open_queue(&self) -> Result<FileQueue<A>, DevError> {
        Ok(ImmediateQueue::new(self.inner.clone()))
    }
}
