//! The page-cache frames in DMA memory, and where they sit on the bus.
//!
//! The frames are one DMA region, so Read and Write commands point their
//! PRPs straight at page-cache memory: no bounce buffers on the data path.

use alloc::vec::Vec;

use pollfs_core::dev::{frame_span, DevError, FrameArena};
use pollfs_core::units::{FrameId, PAGE_SIZE};
use spin::RwLock;

use crate::controller::MPS;
use crate::error::DriverError;
use crate::pcie::hal::{DmaAllocator, DmaError, DmaRegion, Iova, REGION_PAGE};

// A frame is one page of the region: `read_page`/`write_page` take the
// frame's index as the region's page.
const _: () = assert!(PAGE_SIZE == REGION_PAGE);

/// Where a frame arena sits on the bus.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameMap {
    /// Bus address of frame 0; frames are contiguous 4 KiB pages.
    pub base: Iova,
    /// Number of frames.
    pub count: u32,
}

impl FrameMap {
    /// No frames (the admin queue carries none).
    pub const EMPTY: FrameMap = FrameMap {
        base: Iova(0),
        count: 0,
    };
    /// Bus address of `frame`, if it exists.
    pub fn iova(&self, frame: FrameId) -> Option<Iova> {
        if frame.0 >= self.count {
            return None;
        }
        self.base.checked_add(u64::from(frame.0) * MPS as u64)
    }
}

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
    pub fn new<A: DmaAllocator<Region = D>>(
        dma: &A,
        count: u32,
    ) -> Result<Self, DriverError<DmaError>> {
        let bytes = (count as usize)
            .checked_mul(PAGE_SIZE)
            .ok_or(DriverError::Transport(DmaError::NoMemory))?;
        let region = dma.alloc(bytes.max(PAGE_SIZE))?;
        Ok(NvmeFrames {
            region,
            locks: (0..count).map(|_| RwLock::new(())).collect(),
        })
    }
    /// The DMA region the frames live in.
    pub fn region(&self) -> &D {
        &self.region
    }
    /// Where the frames sit on the bus.
    pub fn map(&self) -> FrameMap {
        FrameMap {
            base: self.region.iova(),
            count: self.locks.len() as u32,
        }
    }
    /// Where `[offset, offset + len)` of `frame` starts in its page, and
    /// the frame's lock when the region needs one (it does not when its
    /// pages are each accessed as a unit: frames are whole, aligned
    /// pages). The span is checked once here for every copy; the region
    /// is handed the frame's page and the offset in it, so its own check
    /// of the same span folds away.
    #[inline(always)]
    fn span(
        &self,
        frame: FrameId,
        offset: usize,
        len: usize,
    ) -> Result<(usize, Option<&RwLock<()>>), DevError> {
        let r = frame_span(self.frame_count(), frame, offset, len)?;
        if self.region.page_atomic() {
            return Ok((r.start, None));
        }
        let lock = self.locks.get(frame.index()).ok_or(DevError::FrameRange)?;
        Ok((r.start, Some(lock)))
    }
}

/// The region refused an access the frame check allowed: the region is
/// smaller than its frames (a bug), reported like any frame range error.
fn region_error(_: DmaError) -> DevError {
    DevError::FrameRange
}

impl<D: DmaRegion> FrameArena for NvmeFrames<D> {
    fn frame_count(&self) -> u32 {
        self.locks.len() as u32
    }
    // Every cached read comes through here. The hint (the call stays)
    // counts 6 instructions fewer per cached read in `just read-cost
    // read`; forcing the inlining into the cache's read counts 15 more.
    #[inline]
    fn read(&self, frame: FrameId, offset: usize, dst: &mut [u8]) -> Result<(), DevError> {
        let (at, lock) = self.span(frame, offset, dst.len())?;
        let _g = lock.map(RwLock::read);
        self.region
            .read_page(frame.index(), at, dst)
            .map_err(region_error)
    }
    fn write(&self, frame: FrameId, offset: usize, src: &[u8]) -> Result<(), DevError> {
        let (at, lock) = self.span(frame, offset, src.len())?;
        let _g = lock.map(RwLock::write);
        self.region
            .write_page(frame.index(), at, src)
            .map_err(region_error)
    }
    fn fill(&self, frame: FrameId, offset: usize, len: usize, byte: u8) -> Result<(), DevError> {
        let (at, lock) = self.span(frame, offset, len)?;
        let _g = lock.map(RwLock::write);
        let at = frame.index() * PAGE_SIZE + at;
        self.region.fill(at, len, byte).map_err(region_error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pcie::hal::fake::VecRegion;

    struct VecDma;
    impl DmaAllocator for VecDma {
        type Region = VecRegion;
        fn alloc(&self, len: usize) -> Result<VecRegion, DmaError> {
            Ok(VecRegion::new(len, 0x4000_0000))
        }
    }

    #[test]
    fn frames_map_to_bus_pages_and_refuse_copies_past_their_page() {
        let frames = NvmeFrames::new(&VecDma, 3).unwrap();
        let map = frames.map();
        assert_eq!(map.iova(FrameId(2)), Some(Iova(0x4000_2000)));
        assert_eq!(map.iova(FrameId(3)), None);
        assert_eq!(FrameMap::EMPTY.iova(FrameId(0)), None);
        assert_eq!(
            frames.fill(FrameId(1), 4090, 100, 0xaa),
            Err(DevError::FrameRange)
        );
        frames.fill(FrameId(1), 4090, 6, 0xaa).unwrap();
        let mut page = [0u8; PAGE_SIZE];
        frames.read(FrameId(1), 0, &mut page).unwrap();
        assert_eq!(page[4089], 0);
        assert!(page[4090..].iter().all(|&b| b == 0xaa));
        frames.read(FrameId(2), 0, &mut page).unwrap();
        assert!(page.iter().all(|&b| b == 0), "nothing spilled over");
        assert_eq!(
            frames.read(FrameId(3), 0, &mut page),
            Err(DevError::FrameRange)
        );
    }
}
