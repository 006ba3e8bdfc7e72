//! A block device backed by a regular file (`std` feature), for users
//! without NVMe. Commands run synchronously with `pread`/`pwrite` when they
//! are submitted; flush is `fdatasync`. Frames live in ordinary memory.

extern crate std;

use alloc::sync::Arc;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::immediate::{Execute, ImmediateQueue};
use super::ram::RamFrames;
use super::{BlockDevice, Command, DevError, FrameArena, Geometry};
use crate::units::PAGE_SIZE;

/// The medium of a [`FileDevice`].
#[derive(Debug)]
pub struct Inner<A = RamFrames> {
    file: File,
    geometry: Geometry,
    frames: Arc<A>,
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
                geometry,
                frames: arena,
            }),
        })
    }

    /// The device's frame arena, to share with another device.
    pub fn arena(&self) -> Arc<A> {
        self.inner.frames.clone()
    }
}

impl<A: FrameArena> Inner<A> {
    fn execute(&self, command: &Command<'_>) -> Result<(), DevError> {
        command.validate(&self.geometry)?;
        let bs = u64::from(self.geometry.block_size);
        let mut page = [0u8; PAGE_SIZE];
        let io = |_| DevError::Media;
        match *command {
            Command::Read { lba, frames } => {
                for (i, &f) in frames.iter().enumerate() {
                    self.file
                        .read_exact_at(&mut page, lba.0 * bs + (i * PAGE_SIZE) as u64)
                        .map_err(io)?;
                    self.frames.write(f, 0, &page)?;
                }
            }
            Command::Write { lba, frames, fua } => {
                for (i, &f) in frames.iter().enumerate() {
                    self.frames.read(f, 0, &mut page)?;
                    self.file
                        .write_all_at(&page, lba.0 * bs + (i * PAGE_SIZE) as u64)
                        .map_err(io)?;
                }
                if fua {
                    self.file.sync_data().map_err(io)?;
                }
            }
            Command::Flush => self.file.sync_data().map_err(io)?,
            Command::Deallocate { lba, blocks } | Command::WriteZeroes { lba, blocks } => {
                let zero = [0u8; PAGE_SIZE];
                let (mut pos, end) = (lba.0 * bs, (lba.0 + blocks) * bs);
                while pos < end {
                    let n = (end - pos).min(PAGE_SIZE as u64) as usize;
                    self.file.write_all_at(&zero[..n], pos).map_err(io)?;
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
