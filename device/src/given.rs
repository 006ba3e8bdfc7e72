//! A device the caller built, as an [`AnyDevice`](crate::AnyDevice):
//! [`AnyDevice::from_device`](crate::AnyDevice::from_device).
//!
//! Callers with no generics (the C library) work on `AnyDevice` only. A
//! test that needs its own device under them (the SQLite VFS's crash test
//! records every write) passes it in here at construction, as redb's tests
//! pass their backend, instead of a build feature swapping the library's
//! device type. The device is reached through a vtable: its type is the
//! caller's, not one a spec names. Its frames are plain memory
//! ([`RamFrames`]), like those of RAM and file devices.

use std::sync::Arc;

use pollfs_core::dev::ram::RamFrames;
use pollfs_core::dev::{BlockDevice, Command, Completion, DevError, DeviceQueue, Geometry, Tag};
use pollfs_core::units::Nanos;
use pollfs_core::{DeviceCounts, DeviceHealth};

/// What [`Given`] needs of a device, object-safe: a [`BlockDevice`] over
/// plain memory frames whose queue is boxed.
trait DynDevice: Send + Sync + 'static {
    fn geometry(&self) -> Geometry;
    fn frames(&self) -> &RamFrames;
    fn open_queue(&self) -> Result<GivenQueue, DevError>;
    fn health(&self) -> DeviceHealth;
    fn leg_counts(&self) -> Vec<DeviceCounts>;
}

impl<D: BlockDevice<Frames = RamFrames>> DynDevice for D
where
    D::Queue: 'static,
{
    fn geometry(&self) -> Geometry {
        BlockDevice::geometry(self)
    }
    fn frames(&self) -> &RamFrames {
        BlockDevice::frames(self)
    }
    fn open_queue(&self) -> Result<GivenQueue, DevError> {
        Ok(GivenQueue(Box::new(BlockDevice::open_queue(self)?)))
    }
    fn health(&self) -> DeviceHealth {
        BlockDevice::health(self)
    }
    fn leg_counts(&self) -> Vec<DeviceCounts> {
        BlockDevice::leg_counts(self)
    }
}

/// A caller's device, shared by the [`AnyDevice`](crate::AnyDevice) that
/// holds it and that device's frames.
#[derive(Clone)]
pub struct Given(Arc<dyn DynDevice>);

impl Given {
    pub(crate) fn new<D: BlockDevice<Frames = RamFrames>>(dev: D) -> Given
    where
        D::Queue: 'static,
    {
        Given(Arc::new(dev))
    }

    pub(crate) fn frame_count(&self) -> u32 {
        use pollfs_core::dev::FrameArena;
        self.0.frames().frame_count()
    }

    /// Runs `job` on the device (through the vtable: the caller's own type
    /// is not known here).
    pub(crate) fn run<J: crate::DeviceJob>(
        self,
        job: J,
        what: &str,
    ) -> Result<J::Output, J::Error> {
        job.run(self, what)
    }
}

impl std::fmt::Debug for Given {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Given({:?})", self.0.geometry())
    }
}

impl BlockDevice for Given {
    type Queue = GivenQueue;
    type Frames = RamFrames;
    fn geometry(&self) -> Geometry {
        self.0.geometry()
    }
    fn frames(&self) -> &RamFrames {
        self.0.frames()
    }
    fn open_queue(&self) -> Result<GivenQueue, DevError> {
        self.0.open_queue()
    }
    fn health(&self) -> DeviceHealth {
        self.0.health()
    }
    fn leg_counts(&self) -> Vec<DeviceCounts> {
        self.0.leg_counts()
    }
}

/// A queue of a [`Given`] device.
pub struct GivenQueue(Box<dyn DeviceQueue>);

impl std::fmt::Debug for GivenQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GivenQueue({} in flight)", self.0.in_flight())
    }
}

impl DeviceQueue for GivenQueue {
    fn submit(&mut self, command: &Command<'_>) -> Result<Tag, DevError> {
        self.0.submit(command)
    }
    fn poll(&mut self, now: Nanos, max: usize, done: &mut dyn FnMut(Completion)) -> usize {
        self.0.poll(now, max, done)
    }
    fn in_flight(&self) -> usize {
        self.0.in_flight()
    }
}
