//! A memory-backed block device (no_std).
//!
//! Commands execute when they are submitted and complete on the next `poll`,
//! so the engine sees the same submit-then-poll protocol as on NVMe. Data is
//! held in 64 KiB chunks, each behind its own lock, so queues on different
//! threads rarely touch the same lock.

use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;

use spin::RwLock;

use super::immediate::{Execute, ImmediateQueue};
use super::{BlockDevice, Command, DevError, FrameArena, Geometry};
use crate::units::{FrameId, PAGE_SIZE};

const CHUNK: usize = 64 * 1024;

/// Page frames in ordinary memory, one lock per frame.
#[derive(Debug)]
pub struct RamFrames {
    frames: Vec<RwLock<Box<[u8]>>>,
}

impl RamFrames {
    /// `count` zeroed frames.
    pub fn new(count: u32) -> RamFrames {
        let frames = (0..count)
            .map(|_| RwLock::new(vec![0u8; PAGE_SIZE].into_boxed_slice()))
            .collect();
        RamFrames { frames }
    }
}

/// One frame's bytes.
type Frame = RwLock<Box<[u8]>>;

impl RamFrames {
    /// Frame `frame` and the range of it `[offset, offset + len)`, checked.
    fn span(
        &self,
        frame: FrameId,
        offset: usize,
        len: usize,
    ) -> Result<(&Frame, core::ops::Range<usize>), DevError> {
        let r = super::frame_span(self.frame_count(), frame, offset, len)?;
        let f = self.frames.get(frame.index()).ok_or(DevError::FrameRange)?;
        Ok((f, r))
    }
}

impl FrameArena for RamFrames {
    fn frame_count(&self) -> u32 {
        self.frames.len() as u32
    }
    fn read(&self, frame: FrameId, offset: usize, dst: &mut [u8]) -> Result<(), DevError> {
        let (f, r) = self.span(frame, offset, dst.len())?;
        dst.copy_from_slice(&f.read()[r]);
        Ok(())
    }
    fn write(&self, frame: FrameId, offset: usize, src: &[u8]) -> Result<(), DevError> {
        let (f, r) = self.span(frame, offset, src.len())?;
        f.write()[r].copy_from_slice(src);
        Ok(())
    }
    fn fill(&self, frame: FrameId, offset: usize, len: usize, byte: u8) -> Result<(), DevError> {
        let (f, r) = self.span(frame, offset, len)?;
        f.write()[r].fill(byte);
        Ok(())
    }
}

/// The medium of a [`RamDevice`] (its blocks, and the frames it moves them
/// to and from).
#[derive(Debug)]
pub struct RamInner<A = RamFrames> {
    geometry: Geometry,
    chunks: Vec<RwLock<Box<[u8]>>>,
    frames: Arc<A>,
}

impl<A: FrameArena> RamInner<A> {
    /// Copies device bytes `[pos, pos + dst.len())` into `dst`.
    fn read_bytes(&self, mut pos: usize, dst: &mut [u8]) {
        let mut done = 0;
        while done < dst.len() {
            let (c, off) = (pos / CHUNK, pos % CHUNK);
            let n = (CHUNK - off).min(dst.len() - done);
            if let Some(chunk) = self.chunks.get(c) {
                dst[done..done + n].copy_from_slice(&chunk.read()[off..off + n]);
            }
            done += n;
            pos += n;
        }
    }
    fn write_bytes(&self, mut pos: usize, src: Option<&[u8]>, len: usize) {
        let mut done = 0;
        while done < len {
            let (c, off) = (pos / CHUNK, pos % CHUNK);
            let n = (CHUNK - off).min(len - done);
            if let Some(chunk) = self.chunks.get(c) {
                let mut chunk = chunk.write();
                match src {
                    Some(src) => chunk[off..off + n].copy_from_slice(&src[done..done + n]),
                    None => chunk[off..off + n].fill(0),
                }
            }
            done += n;
            pos += n;
        }
    }
    fn execute(&self, command: &Command<'_>) -> Result<(), DevError> {
        command.validate(&self.geometry)?;
        if let Command::Read { frames, .. } | Command::Write { frames, .. } = command {
            if frames.iter().any(|f| f.0 >= self.frames.frame_count()) {
                return Err(DevError::InvalidRequest);
            }
        }
        let bs = self.geometry.block_size as usize;
        let mut page = [0u8; PAGE_SIZE];
        match *command {
            Command::Read { lba, frames } => {
                for (i, &f) in frames.iter().enumerate() {
                    self.read_bytes(lba.0 as usize * bs + i * PAGE_SIZE, &mut page);
                    self.frames.write(f, 0, &page)?;
                }
            }
            Command::Write { lba, frames, .. } => {
                for (i, &f) in frames.iter().enumerate() {
                    self.frames.read(f, 0, &mut page)?;
                    self.write_bytes(lba.0 as usize * bs + i * PAGE_SIZE, Some(&page), PAGE_SIZE);
                }
            }
            Command::Deallocate { lba, blocks } | Command::WriteZeroes { lba, blocks } => {
                self.write_bytes(lba.0 as usize * bs, None, blocks as usize * bs);
            }
            Command::Flush => {}
        }
        Ok(())
    }
}

/// A block device held in memory. Cloning shares the same medium.
///
/// Its frames are an arena of any kind, shared through an `Arc`: its own
/// [`RamFrames`] by default, or another device's arena, so that several
/// devices can serve one page cache (the legs of a volume, `crate::volume`).
#[derive(Debug)]
pub struct RamDevice<A = RamFrames> {
    inner: Arc<RamInner<A>>,
}

impl<A> Clone for RamDevice<A> {
    fn clone(&self) -> Self {
        RamDevice {
            inner: self.inner.clone(),
        }
    }
}

impl RamDevice {
    /// A zeroed device of `bytes` bytes (rounded down to whole pages) with
    /// `frames` DMA frames and the given block size (512 or 4096).
    pub fn new(bytes: u64, block_size: u32, frames: u32) -> Result<RamDevice, DevError> {
        RamDevice::with_arena(bytes, block_size, Arc::new(RamFrames::new(frames)))
    }
}

impl<A: FrameArena> RamDevice<A> {
    /// A zeroed device of `bytes` bytes (rounded down to whole pages) and
    /// the given block size (512 or 4096), moving data to and from the
    /// frames of `arena`.
    pub fn with_arena(bytes: u64, block_size: u32, arena: Arc<A>) -> Result<Self, DevError> {
        let pages = bytes / PAGE_SIZE as u64;
        let total = usize::try_from(pages * PAGE_SIZE as u64).map_err(|_| DevError::BadGeometry)?;
        let geometry = Geometry {
            block_size,
            capacity: pages * (PAGE_SIZE as u64 / u64::from(block_size.max(1))),
            max_transfer: 128 * 1024,
            queue_depth: 256,
            fua: true,
        };
        geometry.validate()?;
        let chunks = (0..total.div_ceil(CHUNK))
            .map(|i| RwLock::new(vec![0u8; CHUNK.min(total - i * CHUNK)].into_boxed_slice()))
            .collect();
        Ok(RamDevice {
            inner: Arc::new(RamInner {
                geometry,
                chunks,
                frames: arena,
            }),
        })
    }

    /// The device's frame arena, to share with another device.
    pub fn arena(&self) -> Arc<A> {
        self.inner.frames.clone()
    }

    /// The same device with another maximum transfer size (bytes, a
    /// multiple of 4 KiB). Only before any queue is opened.
    pub fn with_max_transfer(self, max_transfer: u32) -> Result<Self, DevError> {
        let mut inner = Arc::try_unwrap(self.inner).map_err(|_| DevError::InvalidRequest)?;
        inner.geometry.max_transfer = max_transfer;
        inner.geometry.validate()?;
        Ok(RamDevice {
            inner: Arc::new(inner),
        })
    }

    /// The same device with another queue depth (commands one queue holds
    /// before `submit` says it is full). Only before any queue is opened.
    pub fn with_queue_depth(self, depth: u32) -> Result<Self, DevError> {
        let mut inner = Arc::try_unwrap(self.inner).map_err(|_| DevError::InvalidRequest)?;
        inner.geometry.queue_depth = depth;
        inner.geometry.validate()?;
        Ok(RamDevice {
            inner: Arc::new(inner),
        })
    }

    /// Copies raw device bytes out, for tests and tools that inspect the medium.
    pub fn read_raw(&self, offset: u64, dst: &mut [u8]) {
        self.inner.read_bytes(offset as usize, dst);
    }

    /// Copies raw bytes onto the medium, bypassing queues (for tests that
    /// build device images, such as crash states).
    pub fn write_raw(&self, offset: u64, src: &[u8]) {
        self.inner
            .write_bytes(offset as usize, Some(src), src.len());
    }

    /// Capacity in bytes.
    pub fn bytes(&self) -> u64 {
        self.inner.geometry.capacity * u64::from(self.inner.geometry.block_size)
    }
}

/// A queue on a [`RamDevice`].
pub type RamQueue<A = RamFrames> = ImmediateQueue<RamInner<A>>;

impl<A: FrameArena> Execute for RamInner<A> {
    fn geometry(&self) -> Geometry {
        self.geometry
    }
    fn execute(&self, command: &Command<'_>) -> Result<(), DevError> {
        RamInner::execute(self, command)
    }
}

impl<A: FrameArena + 'static> BlockDevice for RamDevice<A> {
    type Queue = RamQueue<A>;
    type Frames = A;
    fn geometry(&self) -> Geometry {
        self.inner.geometry
    }
    fn frames(&self) -> &A {
        &self.inner.frames
    }
    fn open_queue(&self) -> Result<RamQueue<A>, DevError> {
        Ok(ImmediateQueue::new(self.inner.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::DeviceQueue;
    use crate::units::{Lba, Nanos};

    fn run(q: &mut RamQueue, c: Command<'_>) -> Result<(), DevError> {
        let tag = q.submit(&c)?;
        let mut out = None;
        q.poll(Nanos(0), 8, &mut |c| out = Some(c));
        let c = out.ok_or(DevError::Timeout)?;
        assert_eq!(c.tag, tag);
        c.result
    }

    #[test]
    fn write_then_read_through_frames() {
        let dev = RamDevice::new(1 << 20, 512, 4).unwrap();
        let mut q = dev.open_queue().unwrap();
        dev.frames().fill(FrameId(0), 0, PAGE_SIZE, 0xab).unwrap();
        run(
            &mut q,
            Command::Write {
                lba: Lba(8),
                frames: &[FrameId(0)],
                fua: false,
            },
        )
        .unwrap();
        run(
            &mut q,
            Command::Read {
                lba: Lba(8),
                frames: &[FrameId(1)],
            },
        )
        .unwrap();
        let mut buf = [0u8; 16];
        dev.frames().read(FrameId(1), 100, &mut buf).unwrap();
        assert_eq!(buf, [0xab; 16]);
        run(
            &mut q,
            Command::WriteZeroes {
                lba: Lba(8),
                blocks: 8,
            },
        )
        .unwrap();
        run(
            &mut q,
            Command::Read {
                lba: Lba(8),
                frames: &[FrameId(1)],
            },
        )
        .unwrap();
        dev.frames().read(FrameId(1), 100, &mut buf).unwrap();
        assert_eq!(buf, [0; 16]);
    }

    #[test]
    fn frame_copies_outside_a_frame_are_refused_not_clipped() {
        let dev = RamDevice::new(1 << 20, 4096, 4).unwrap();
        let f = dev.frames();
        let mut buf = [7u8; 16];
        assert_eq!(f.read(FrameId(4), 0, &mut buf), Err(DevError::FrameRange));
        assert_eq!(
            f.read(FrameId(0), PAGE_SIZE - 8, &mut buf),
            Err(DevError::FrameRange)
        );
        assert_eq!(
            f.read(FrameId(0), usize::MAX, &mut buf),
            Err(DevError::FrameRange)
        );
        assert_eq!(
            f.write(FrameId(0), PAGE_SIZE - 8, &buf),
            Err(DevError::FrameRange)
        );
        assert_eq!(f.fill(FrameId(9), 0, 1, 0), Err(DevError::FrameRange));
        assert_eq!(buf, [7u8; 16], "nothing copied");
        assert_eq!(f.read(FrameId(3), PAGE_SIZE - 16, &mut buf), Ok(()));
    }

    #[test]
    fn out_of_range_and_oversized_commands_fail() {
        let dev = RamDevice::new(1 << 20, 4096, 64).unwrap();
        let mut q = dev.open_queue().unwrap();
        let cap = dev.geometry().capacity;
        let e = run(
            &mut q,
            Command::Read {
                lba: Lba(cap),
                frames: &[FrameId(0)],
            },
        );
        assert_eq!(e, Err(DevError::OutOfRange));
        let many = [FrameId(0); 33];
        let e = run(
            &mut q,
            Command::Read {
                lba: Lba(0),
                frames: &many,
            },
        );
        assert_eq!(e, Err(DevError::InvalidRequest));
        let e = run(
            &mut q,
            Command::Deallocate {
                lba: Lba(u64::MAX),
                blocks: 2,
            },
        );
        assert_eq!(e, Err(DevError::OutOfRange));
    }
}
