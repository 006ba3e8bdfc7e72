//! NVMe over PCIe (NVMe 1.4): the [`Transport`] for a controller reached
//! through its BAR0 registers and DMA memory.
//!
//! - [`hal`]: the two hardware boundaries PCIe needs, register access
//!   ([`hal::Registers`]) and DMA memory ([`hal::DmaAllocator`]), with
//!   fakes for tests.
//! - [`ring`]: SQ/CQ rings, phase tags and doorbells.
//! - [`prp`]: describing a transfer's pages with PRP entries and lists.
//! - [`qpair`]: [`PcieQpair`], a ring pair plus per-command PRP scratch.
//! - [`frames`]: the page-cache frames in DMA memory ([`NvmeFrames`]).
//! - [`words`]: byte access to shared DMA memory as atomic words.
//! - `page_copy` (feature `emu`): a whole page's copy in 32-byte moves.
//! - `emu` (feature `emu`) and `vfio` (feature `vfio`): the two providers
//!   of registers and DMA memory, an emulated controller over plain memory
//!   and a real one through VFIO.
//!
//! Properties are BAR0 registers here, so this transport never needs the
//! admin queue to read them; queues are host rings the controller learns
//! about from AQA/ASQ/ACQ (admin) and Create I/O CQ/SQ (I/O).

pub mod frames;
pub mod hal;
pub mod prp;
pub mod qpair;
pub mod ring;
pub mod words;

#[cfg(feature = "emu")]
pub mod emu;
#[cfg(feature = "emu")]
pub(crate) mod page_copy;
#[cfg(all(feature = "vfio", target_os = "linux"))]
pub mod vfio;

use alloc::sync::Arc;

use pollfs_core::units::Nanos;

pub use frames::{FrameMap, NvmeFrames};
pub use qpair::PcieQpair;

use crate::error::DriverError;
use crate::pcie::hal::DmaError;
use crate::spec::command::SubmissionEntry;
use crate::spec::regs::{offset, Aqa, Cap};
use crate::transport::{AdminCommands, Property, QpairSpec, Transport, TransportError};
use hal::{DmaAllocator, Registers};

/// A controller on PCIe: its register file and the DMA memory it reaches.
pub struct PcieTransport<R: Registers, A: DmaAllocator> {
    regs: Arc<R>,
    dma: A,
}

impl<R: Registers, A: DmaAllocator> core::fmt::Debug for PcieTransport<R, A> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PcieTransport").finish_non_exhaustive()
    }
}

impl<R: Registers, A: DmaAllocator> PcieTransport<R, A> {
    /// The controller behind `regs`, with queues and frames from `dma`.
    pub fn new(regs: Arc<R>, dma: A) -> Self {
        PcieTransport { regs, dma }
    }
    /// The register file.
    pub fn regs(&self) -> &Arc<R> {
        &self.regs
    }
    /// The DMA allocator.
    pub fn dma(&self) -> &A {
        &self.dma
    }
    /// CAP.DSTRD, read when a queue is set up (doorbell offsets depend
    /// on it).
    fn doorbell_stride(&self) -> u32 {
        Cap(self.regs.read64(offset::CAP)).doorbell_stride()
    }
}

// Returned by every poll of every PCIe queue: small enough to travel in
// registers.
const _: () = assert!(core::mem::size_of::<crate::qpair::ProtocolError<DmaError>>() <= 8);

impl TransportError for DmaError {
    const NAME: &'static str = "DMA";
}

impl From<DmaError> for DriverError<DmaError> {
    fn from(e: DmaError) -> Self {
        DriverError::Transport(e)
    }
}

impl<R: Registers + 'static, A: DmaAllocator + 'static> Transport for PcieTransport<R, A> {
    /// PCIe's own failures are its DMA memory's.
    type Error = DmaError;
    type Qpair = PcieQpair<R, A>;
    type Frames = NvmeFrames<A::Region>;

    fn get_property(
        &self,
        _admin: &mut dyn AdminCommands<DmaError>,
        property: Property,
    ) -> Result<u64, DriverError<DmaError>> {
        let at = property.offset();
        Ok(if property.is_64bit() {
            self.regs.read64(at)
        } else {
            u64::from(self.regs.read32(at))
        })
    }
    fn set_property(
        &self,
        _admin: &mut dyn AdminCommands<DmaError>,
        property: Property,
        value: u64,
    ) -> Result<(), DriverError<DmaError>> {
        let at = property.offset();
        if property.is_64bit() {
            self.regs.write64(at, value);
        } else {
            self.regs.write32(at, value as u32);
        }
        Ok(())
    }
    fn tick(&self, now: Nanos) {
        self.regs.tick(now);
    }

    fn create_admin_qpair(&self, entries: u16) -> Result<Self::Qpair, DriverError<DmaError>> {
        // One scratch page per command id holds identify and log data.
        PcieQpair::new(
            self.regs.clone(),
            &self.dma,
            0,
            entries,
            self.doorbell_stride(),
            1,
            FrameMap::EMPTY,
        )
    }
    fn enable_admin(&self, admin: &mut Self::Qpair) -> Result<(), DriverError<DmaError>> {
        use crate::transport::Qpair as _;
        let n = admin.entries();
        self.regs.write32(offset::AQA, Aqa::new(n, n).0);
        self.regs.write64(offset::ASQ, admin.sq_iova().0);
        self.regs.write64(offset::ACQ, admin.cq_iova().0);
        Ok(())
    }

    fn alloc_frames(&self, count: u32) -> Result<Self::Frames, DriverError<DmaError>> {
        NvmeFrames::new(&self.dma, count)
    }
    fn create_qpair(
        &self,
        spec: QpairSpec,
        frames: &Arc<Self::Frames>,
    ) -> Result<Self::Qpair, DriverError<DmaError>> {
        PcieQpair::new(
            self.regs.clone(),
            &self.dma,
            spec.qid,
            spec.entries,
            self.doorbell_stride(),
            spec.max_frames,
            frames.map(),
        )
    }
    /// Create I/O CQ first, then the SQ bound to it (5.3, 5.4); if the SQ
    /// fails, the CQ is deleted again.
    fn connect_qpair(
        &self,
        qp: &mut Self::Qpair,
        admin: &mut dyn AdminCommands<DmaError>,
    ) -> Result<(), DriverError<DmaError>> {
        use crate::transport::Qpair as _;
        let (qid, n) = (qp.qid(), qp.entries());
        admin.run(SubmissionEntry::create_io_cq(qid, n, qp.cq_iova().0))?;
        let sq = SubmissionEntry::create_io_sq(qid, n, qp.sq_iova().0, qid);
        if let Err(e) = admin.run(sq) {
            let _ = admin.run(SubmissionEntry::delete_io_cq(qid));
            return Err(e);
        }
        Ok(())
    }
    /// Delete I/O SQ (which makes the controller finish or abort what it
    /// holds), then its CQ (5.6, 5.5).
    fn disconnect_qpair(
        &self,
        qid: u16,
        admin: &mut dyn AdminCommands<DmaError>,
    ) -> Result<(), DriverError<DmaError>> {
        let sq = admin.run(SubmissionEntry::delete_io_sq(qid));
        if let Err(e) = sq {
            if !matches!(e, DriverError::Admin { .. }) {
                return Err(e);
            }
        }
        let cq = admin.run(SubmissionEntry::delete_io_cq(qid));
        sq.and(cq).map(drop)
    }
}
