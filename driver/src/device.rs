//! [`NvmeDevice`]: the engine's [`BlockDevice`] on an NVMe controller.
//!
//! The page cache's frames are one DMA region allocated from the driver's
//! DMA memory, so Read and Write commands point their PRPs straight at
//! page-cache memory. Each `open_queue` creates one I/O queue pair on the
//! controller.

use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;

use pollfs_core::dev::{frame_span, BlockDevice, DevError, FrameArena, Geometry};
use pollfs_core::units::{FrameId, PAGE_SIZE};
use spin::RwLock;

use crate::controller::{Controller, DriverConfig, MPS};
use crate::error::DriverError;
use crate::hal::{Clock, DmaAllocator, DmaRegion, Registers};
use crate::io_queue::{FrameMap, NvmeQueue};

/// The page-cache frames, inside DMA memory. Each frame has a lock so an
/// engine `read` never sees half of a concurrent `write` (the device's own
/// accesses happen only while the engine holds the page for I/O).
pub struct NvmeFrames<D: DmaRegion> {
    region: D,
    locks: Vec<RwLock<()>>,
}

impl<D: DmaRegion> core::fmt::Debug for NvmeFrames<D> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("NvmeFrames")
            .field("frames", &self.locks.len())
            .field("iova", &self.region.iova())
            .finish()
    }
}

impl<D: DmaRegion> NvmeFrames<D> {
    /// `count` frames from `dma`.
    pub fn new<A: DmaAllocator<Region = D>>(dma: &A, count: u32) -> Result<Self, DriverError> {
        let bytes = (count as usize)
            .checked_mul(PAGE_SIZE)
            .ok_or(DriverError::Dma(crate::hal::DmaError::NoMemory))?;
        let region = dma.alloc(bytes.max(PAGE_SIZE))?;
        Ok(NvmeFrames {
            region,
            locks: (0..count).map(|_| RwLock::new(())).collect(),
        })
    }
    /// Where the frames sit on the bus.
    pub fn map(&self) -> FrameMap {
        FrameMap {
            base: self.region.iova().0,
            count: self.locks.len() as u32,
        }
    }
    /// Where `[offset, offset + len)` of `frame` lies in the region, and
    /// the frame's lock; checked once here for every copy.
    fn span(
        &self,
        frame: FrameId,
        offset: usize,
        len: usize,
    ) -> Result<(usize, &RwLock<()>), DevError> {
        let r = frame_span(self.locks.len() as u32, frame, offset, len)?;
        let lock = self.locks.get(frame.index()).ok_or(DevError::FrameRange)?;
        Ok((frame.index() * PAGE_SIZE + r.start, lock))
    }
}

/// The region refused an access the frame check allowed: the region is
/// smaller than its frames (a bug), reported like any frame range error.
fn region_error(_: crate::hal::DmaError) -> DevError {
    DevError::FrameRange
}

impl<D: DmaRegion> FrameArena for NvmeFrames<D> {
    fn frame_count(&self) -> u32 {
        self.locks.len() as u32
    }
    fn read(&self, frame: FrameId, offset: usize, dst: &mut [u8]) -> Result<(), DevError> {
        let (at, lock) = self.span(frame, offset, dst.len())?;
        // A region whose pages are each accessed as a unit needs no second
        // lock (frames are whole, aligned pages).
        let _g = (!self.region.page_atomic()).then(|| lock.read());
        self.region.read(at, dst).map_err(region_error)
    }
    fn write(&self, frame: FrameId, offset: usize, src: &[u8]) -> Result<(), DevError> {
        let (at, lock) = self.span(frame, offset, src.len())?;
        let _g = (!self.region.page_atomic()).then(|| lock.write());
        self.region.write(at, src).map_err(region_error)
    }
    fn fill(&self, frame: FrameId, offset: usize, len: usize, byte: u8) -> Result<(), DevError> {
        let (at, lock) = self.span(frame, offset, len)?;
        let _g = (!self.region.page_atomic()).then(|| lock.write());
        self.region.fill(at, len, byte).map_err(region_error)
    }
}

/// An NVMe namespace as a pollfs block device.
pub struct NvmeDevice<R: Registers + 'static, A: DmaAllocator + 'static> {
    ctrl: Arc<Controller<R, A>>,
    frames: Arc<NvmeFrames<A::Region>>,
    geometry: Geometry,
}

impl<R: Registers + 'static, A: DmaAllocator + 'static> core::fmt::Debug for NvmeDevice<R, A> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("NvmeDevice")
            .field("geometry", &self.geometry)
            .field("frames", &self.frames)
            .finish_non_exhaustive()
    }
}

impl<R: Registers + 'static, A: DmaAllocator + 'static> NvmeDevice<R, A> {
    /// Brings up the controller behind `regs`, allocates `frames` page
    /// frames from `dma`, and derives the geometry from Identify. `clock`
    /// bounds the blocking admin sequences (bring-up, reset, queue
    /// creation).
    pub fn new(
        regs: R,
        dma: A,
        clock: impl Clock + 'static,
        config: DriverConfig,
        frames: u32,
    ) -> Result<Self, DriverError> {
        let ctrl = Controller::new(regs, dma, Box::new(clock), config)?;
        let info = *ctrl.info();
        let ns = info.namespace;
        let requested = match config.max_transfer {
            Some(m) => u64::from(m),
            None => info.mdts_bytes.min(1 << 20),
        };
        // One request must fit in the queue's command ids even when split:
        // each command carries at most MDTS and at most 65536 blocks.
        let block_size = u64::from(ns.block_size.max(1));
        let per_command = info.mdts_bytes.min(65536 * block_size);
        let ids = u64::from(info.io_entries.saturating_sub(1).max(1));
        let max_transfer = requested
            .min(per_command.saturating_mul(ids))
            .min(u64::from(u32::MAX)) as u32;
        let geometry = Geometry {
            block_size: ns.block_size,
            capacity: ns.nsze,
            max_transfer: max_transfer / MPS as u32 * MPS as u32,
            queue_depth: u32::from(info.io_entries) - 1,
        };
        geometry
            .validate()
            .map_err(|_| DriverError::Unsupported("geometry"))?;
        if geometry.capacity_pages() == 0 {
            return Err(DriverError::Unsupported("namespace smaller than a page"));
        }
        let frames = Arc::new(NvmeFrames::new(ctrl.dma(), frames)?);
        Ok(NvmeDevice {
            ctrl: Arc::new(ctrl),
            frames,
            geometry,
        })
    }
    /// The controller, for admin work (logs, identify data, resets).
    pub fn controller(&self) -> &Arc<Controller<R, A>> {
        &self.ctrl
    }
    /// Opens a queue, keeping the driver's own type (with stats and
    /// driver errors) rather than the engine's.
    pub fn open_nvme_queue(&self) -> Result<NvmeQueue<R, A>, DriverError> {
        NvmeQueue::open(self.ctrl.clone(), self.frames.clone(), self.geometry)
    }
}

impl<R: Registers + 'static, A: DmaAllocator + 'static> BlockDevice for NvmeDevice<R, A> {
    type Queue = NvmeQueue<R, A>;
    type Frames = NvmeFrames<A::Region>;
    fn geometry(&self) -> Geometry {
        self.geometry
    }
    fn frames(&self) -> &NvmeFrames<A::Region> {
        &self.frames
    }
    fn open_queue(&self) -> Result<NvmeQueue<R, A>, DevError> {
        self.open_nvme_queue().map_err(DevError::from)
    }
}
