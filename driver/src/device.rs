//! [`NvmeDevice`]: the engine's [`BlockDevice`] on an NVMe controller,
//! over any [`Transport`].
//!
//! The page-cache frames come from the transport (DMA memory on PCIe, so
//! Read and Write move data straight to and from page-cache memory). Each
//! `open_queue` creates one I/O queue pair on the controller.

use alloc::boxed::Box;
use alloc::sync::Arc;

use pollfs_core::dev::{BlockDevice, DevError, Geometry};
use pollfs_core::DeviceHealth;

use crate::clock::Clock;
use crate::controller::{Controller, DriverConfig, MPS};
use crate::error::DriverError;
use crate::io_queue::NvmeQueue;
use crate::transport::Transport;

/// An NVMe namespace as a pollfs block device.
pub struct NvmeDevice<T: Transport> {
    ctrl: Arc<Controller<T>>,
    frames: Arc<T::Frames>,
    geometry: Geometry,
}

impl<T: Transport> core::fmt::Debug for NvmeDevice<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("NvmeDevice")
            .field("geometry", &self.geometry)
            .finish_non_exhaustive()
    }
}

impl<T: Transport> NvmeDevice<T> {
    /// Brings up the controller behind `transport`, allocates `frames`
    /// page frames from it, and derives the geometry from Identify.
    /// `clock` bounds the blocking admin sequences (bring-up, reset, queue
    /// creation).
    pub fn new(
        transport: T,
        clock: impl Clock + 'static,
        config: DriverConfig,
        frames: u32,
    ) -> Result<Self, DriverError<T::Error>> {
        let (ctrl, geometry) = Self::bring_up(transport, clock, config)?;
        let frames = Arc::new(ctrl.transport().alloc_frames(frames)?);
        Ok(NvmeDevice {
            ctrl: Arc::new(ctrl),
            frames,
            geometry,
        })
    }

    /// As [`new`](Self::new), with page frames another device already
    /// has: several controllers that reach the same DMA memory serve one
    /// page cache that way (the legs of a `pollfs_core::volume`). The
    /// caller vouches that this controller can reach `arena` (on PCIe:
    /// the same IOVA space, as with controllers in one VFIO container).
    pub fn with_arena(
        transport: T,
        clock: impl Clock + 'static,
        config: DriverConfig,
        arena: Arc<T::Frames>,
    ) -> Result<Self, DriverError<T::Error>> {
        let (ctrl, geometry) = Self::bring_up(transport, clock, config)?;
        Ok(NvmeDevice {
            ctrl: Arc::new(ctrl),
            frames: arena,
            geometry,
        })
    }

    /// The controller brought up, and the geometry Identify gives it.
    fn bring_up(
        transport: T,
        clock: impl Clock + 'static,
        config: DriverConfig,
    ) -> Result<(Controller<T>, Geometry), DriverError<T::Error>> {
        let ctrl = Controller::new(transport, Box::new(clock), config)?;
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
            // Force Unit Access is part of every NVMe Write command.
            fua: true,
        };
        geometry
            .validate()
            .map_err(|_| DriverError::Unsupported("geometry"))?;
        if geometry.capacity_pages() == 0 {
            return Err(DriverError::Unsupported("namespace smaller than a page"));
        }
        Ok((ctrl, geometry))
    }
    /// The page-cache frames, to share with another device.
    pub fn arena(&self) -> Arc<T::Frames> {
        self.frames.clone()
    }
    /// The controller, for admin work (logs, identify data, resets).
    pub fn controller(&self) -> &Arc<Controller<T>> {
        &self.ctrl
    }
    /// Passes the caller's time to the controller while no queue is
    /// polled: a fabric controller needs Keep Alive to keep the
    /// association (see [`Controller::tick`]).
    pub fn tick(&self, now: pollfs_core::units::Nanos) {
        self.ctrl.tick(now);
    }
    /// Opens a queue, keeping the driver's own type (with stats and
    /// driver errors) rather than the engine's.
    pub fn open_nvme_queue(&self) -> Result<NvmeQueue<T>, DriverError<T::Error>> {
        NvmeQueue::open(self.ctrl.clone(), self.frames.clone(), self.geometry)
    }
}

impl<T: Transport> BlockDevice for NvmeDevice<T> {
    type Queue = NvmeQueue<T>;
    type Frames = T::Frames;
    fn geometry(&self) -> Geometry {
        self.geometry
    }
    fn frames(&self) -> &T::Frames {
        &self.frames
    }
    fn open_queue(&self) -> Result<NvmeQueue<T>, DevError> {
        self.open_nvme_queue().map_err(DevError::from)
    }
    fn health(&self) -> DeviceHealth {
        self.ctrl.health()
    }
}
