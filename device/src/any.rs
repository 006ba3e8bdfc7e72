//! [`AnyDevice`]: one concrete device type for every device a
//! [`DeviceSpec`](crate::DeviceSpec) names, for callers with no generics
//! (the C library); [`DeviceJob`] for callers that want the concrete type
//! (the bench's hot paths, the NVMe tools that talk to the controller).
//!
//! Every device is a shape over legs that share one frame arena: one leg,
//! a mirror or a stripe ([`Shape`]). A leg is RAM or a file moving data
//! through the arena, or the NVMe device that owns it ([`Leg`]). The
//! arena's kind (plain memory, the emulated controllers' DMA memory, a
//! VFIO container's, the frames NVMe/TCP copies through) is the one choice
//! that cannot be made at run time per command, so it is the top of
//! [`AnyDevice`]'s dispatch.

use std::sync::Arc;

use pollfs_core::dev::either::Either;
use pollfs_core::dev::file::FileDevice;
use pollfs_core::dev::ram::{RamDevice, RamFrames};
use pollfs_core::dev::{
    BlockDevice, Command, Completion, DevError, DeviceQueue, FrameArena, Geometry, Tag,
};
use pollfs_core::units::{FrameId, Nanos};
use pollfs_core::volume::mirror::MirrorQueue;
use pollfs_core::volume::{Mirror, Stripe, VolumeError};
use pollfs_core::{DeviceCounts, DeviceHealth};
use pollfs_driver::tcp::net::TcpDevice;
use pollfs_driver::tcp::TcpFrames;
use pollfs_driver::{EmuFrames, EmulatedDevice, NvmeDevice, Transport};

use crate::control::server::ControlServer;
use crate::error::{OpenError, OpenErrorKind};
use crate::file::Created;
use crate::given::{Given, GivenQueue};
use crate::lock::DeviceLock;

#[cfg(target_os = "linux")]
use pollfs_driver::vfio::VfioDevice;
#[cfg(target_os = "linux")]
type VfioFrames = <VfioDevice as BlockDevice>::Frames;

/// A leg over arena `N::Frames`: RAM or a file moving data through it, or
/// the NVMe device `N` that owns it.
pub type Leg<N> = Either<
    Either<RamDevice<<N as BlockDevice>::Frames>, FileDevice<<N as BlockDevice>::Frames>>,
    N,
>;

/// One leg, a mirror, or a stripe, over legs with NVMe devices of type `N`.
pub enum Shape<N: BlockDevice> {
    /// A single device.
    One(Leg<N>),
    /// RAID-1.
    Mirror(Mirror<Leg<N>>),
    /// RAID-0.
    Stripe(Stripe<Leg<N>>),
}

impl<N: BlockDevice> std::fmt::Debug for Shape<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Shape::One(_) => write!(f, "One"),
            Shape::Mirror(m) => write!(f, "{m:?}"),
            Shape::Stripe(_) => write!(f, "Stripe"),
        }
    }
}

/// A queue of a [`Shape`].
pub enum ShapeQueue<N: BlockDevice> {
    /// Of a single device.
    One(<Leg<N> as BlockDevice>::Queue),
    /// Of a mirror.
    Mirror(MirrorQueue<Leg<N>>),
    /// Of a stripe.
    Stripe(<Stripe<Leg<N>> as BlockDevice>::Queue),
}

impl<N: BlockDevice> std::fmt::Debug for ShapeQueue<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ShapeQueue({} in flight)", self.in_flight())
    }
}

macro_rules! each_shape {
    ($value:expr, $x:ident => $body:expr) => {
        match $value {
            Shape::One($x) => $body,
            Shape::Mirror($x) => $body,
            Shape::Stripe($x) => $body,
        }
    };
}

macro_rules! each_queue {
    ($value:expr, $x:ident => $body:expr) => {
        match $value {
            ShapeQueue::One($x) => $body,
            ShapeQueue::Mirror($x) => $body,
            ShapeQueue::Stripe($x) => $body,
        }
    };
}

impl<N: BlockDevice> Shape<N> {
    fn geometry(&self) -> Geometry {
        each_shape!(self, d => d.geometry())
    }
    fn frame_count(&self) -> u32 {
        each_shape!(self, d => d.frames().frame_count())
    }
    fn health(&self) -> DeviceHealth {
        each_shape!(self, d => d.health())
    }
    fn leg_counts(&self) -> Vec<DeviceCounts> {
        each_shape!(self, d => d.leg_counts())
    }
    fn open_queue(&self) -> Result<ShapeQueue<N>, DevError> {
        Ok(match self {
            Shape::One(d) => ShapeQueue::One(d.open_queue()?),
            Shape::Mirror(d) => ShapeQueue::Mirror(d.open_queue()?),
            Shape::Stripe(d) => ShapeQueue::Stripe(d.open_queue()?),
        })
    }
    fn run<J: DeviceJob>(self, job: J, what: &str) -> Result<J::Output, J::Error>
    where
        N: NvmeLeg,
    {
        match self {
            Shape::One(Either::Left(Either::Left(ram))) => job.run(ram, what),
            Shape::One(Either::Left(Either::Right(file))) => job.run(file, what),
            Shape::One(Either::Right(nvme)) => nvme.run(job, what),
            Shape::Mirror(m) => job.run_mirror(m, what),
            Shape::Stripe(s) => job.run_stripe(s, what),
        }
    }
}

impl<N: BlockDevice> DeviceQueue for ShapeQueue<N> {
    fn submit(&mut self, command: &Command<'_>) -> Result<Tag, DevError> {
        each_queue!(self, q => q.submit(command))
    }
    fn poll(&mut self, now: Nanos, max: usize, done: &mut dyn FnMut(Completion)) -> usize {
        each_queue!(self, q => q.poll(now, max, done))
    }
    fn in_flight(&self) -> usize {
        each_queue!(self, q => q.in_flight())
    }
}

/// The NVMe device type of a leg: hands a single device to
/// [`DeviceJob::run_nvme`].
pub trait NvmeLeg: BlockDevice + Sized {
    /// Runs `job` on this device alone.
    fn run<J: DeviceJob>(self, job: J, what: &str) -> Result<J::Output, J::Error>;
    /// I/O queues its controller granted.
    fn io_queues(&self) -> Option<u16>;
}

impl<T: Transport> NvmeLeg for NvmeDevice<T> {
    fn run<J: DeviceJob>(self, job: J, what: &str) -> Result<J::Output, J::Error> {
        job.run_nvme(self, what)
    }
    fn io_queues(&self) -> Option<u16> {
        Some(self.controller().info().io_queues)
    }
}

/// Plain memory has no controller: a leg of this type is never built.
impl NvmeLeg for RamDevice {
    fn run<J: DeviceJob>(self, job: J, what: &str) -> Result<J::Output, J::Error> {
        job.run(self, what)
    }
    fn io_queues(&self) -> Option<u16> {
        None
    }
}

/// Work to run on an opened device, at its concrete type.
pub trait DeviceJob {
    /// What the work produces.
    type Output;
    /// Its error, which can also say why the device failed to close.
    type Error: From<OpenError>;
    /// Runs on the device.
    fn run<D: BlockDevice>(self, dev: D, what: &str) -> Result<Self::Output, Self::Error>;
    /// Runs on a mirror (by default as on any device).
    fn run_mirror<L: BlockDevice>(
        self,
        m: Mirror<L>,
        what: &str,
    ) -> Result<Self::Output, Self::Error>
    where
        Self: Sized,
    {
        self.run(m, what)
    }
    /// Runs on a stripe (by default as on any device).
    fn run_stripe<L: BlockDevice>(
        self,
        s: Stripe<L>,
        what: &str,
    ) -> Result<Self::Output, Self::Error>
    where
        Self: Sized,
    {
        self.run(s, what)
    }
    /// Runs on a single NVMe controller (by default as on any device).
    fn run_nvme<T: Transport>(
        self,
        dev: NvmeDevice<T>,
        what: &str,
    ) -> Result<Self::Output, Self::Error>
    where
        Self: Sized,
    {
        self.run(dev, what)
    }
}

/// The shape, by the kind of its legs' arena.
#[derive(Debug)]
pub(crate) enum Inner {
    /// RAM and file legs over plain memory.
    Host(Shape<RamDevice>),
    /// Emulated controllers (and RAM and file legs) over their DMA memory.
    Emu(Shape<EmulatedDevice>),
    /// A controller bound to vfio-pci (and RAM and file legs) over its
    /// DMA memory.
    #[cfg(target_os = "linux")]
    Vfio(Shape<VfioDevice>),
    /// NVMe/TCP controllers (and RAM and file legs) over plain frames.
    Tcp(Shape<TcpDevice>),
    /// A device the caller built ([`AnyDevice::from_device`]).
    Given(Given),
}

macro_rules! each_inner {
    ($value:expr, $x:ident => $body:expr) => {
        match $value {
            Inner::Host($x) => $body,
            Inner::Emu($x) => $body,
            #[cfg(target_os = "linux")]
            Inner::Vfio($x) => $body,
            Inner::Tcp($x) => $body,
            Inner::Given($x) => $body,
        }
    };
}

/// The legs' frame arena, shared.
#[derive(Clone, Debug)]
pub(crate) enum Arena {
    Host(Arc<RamFrames>),
    Emu(Arc<EmuFrames>),
    #[cfg(target_os = "linux")]
    Vfio(Arc<VfioFrames>),
    Tcp(Arc<TcpFrames>),
    /// A caller's device's own frames.
    Given(Given),
}

/// The frames of an [`AnyDevice`]: its legs' arena, less what a mirror
/// keeps for its own I/O at the end.
#[derive(Debug)]
pub struct AnyFrames {
    arena: Arena,
    count: u32,
}

impl AnyFrames {
    fn arena(&self, frame: FrameId) -> Result<&dyn FrameArena, DevError> {
        if frame.0 >= self.count {
            return Err(DevError::FrameRange);
        }
        Ok(match &self.arena {
            Arena::Host(a) => &**a,
            Arena::Emu(a) => &**a,
            #[cfg(target_os = "linux")]
            Arena::Vfio(a) => &**a,
            Arena::Tcp(a) => &**a,
            Arena::Given(d) => d.frames(),
        })
    }
}

impl FrameArena for AnyFrames {
    fn frame_count(&self) -> u32 {
        self.count
    }
    fn read(&self, frame: FrameId, offset: usize, dst: &mut [u8]) -> Result<(), DevError> {
        self.arena(frame)?.read(frame, offset, dst)
    }
    fn write(&self, frame: FrameId, offset: usize, src: &[u8]) -> Result<(), DevError> {
        self.arena(frame)?.write(frame, offset, src)
    }
    fn fill(&self, frame: FrameId, offset: usize, len: usize, byte: u8) -> Result<(), DevError> {
        self.arena(frame)?.fill(frame, offset, len, byte)
    }
}

/// A queue of an [`AnyDevice`].
// Made once per thread and kept: a box would put a pointer chase in every
// submit and poll to save bytes nobody copies.
#[allow(clippy::large_enum_variant)]
pub enum AnyQueue {
    /// Over plain memory.
    Host(ShapeQueue<RamDevice>),
    /// Over emulated DMA memory.
    Emu(ShapeQueue<EmulatedDevice>),
    /// Over VFIO DMA memory.
    #[cfg(target_os = "linux")]
    Vfio(ShapeQueue<VfioDevice>),
    /// Over NVMe/TCP frames.
    Tcp(ShapeQueue<TcpDevice>),
    /// Of a caller's device.
    Given(GivenQueue),
}

impl std::fmt::Debug for AnyQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AnyQueue({} in flight)", self.in_flight())
    }
}

macro_rules! each_any_queue {
    ($value:expr, $x:ident => $body:expr) => {
        match $value {
            AnyQueue::Host($x) => $body,
            AnyQueue::Emu($x) => $body,
            #[cfg(target_os = "linux")]
            AnyQueue::Vfio($x) => $body,
            AnyQueue::Tcp($x) => $body,
            AnyQueue::Given($x) => $body,
        }
    };
}

impl DeviceQueue for AnyQueue {
    fn submit(&mut self, command: &Command<'_>) -> Result<Tag, DevError> {
        each_any_queue!(self, q => q.submit(command))
    }
    fn poll(&mut self, now: Nanos, max: usize, done: &mut dyn FnMut(Completion)) -> usize {
        each_any_queue!(self, q => q.poll(now, max, done))
    }
    fn in_flight(&self) -> usize {
        each_any_queue!(self, q => q.in_flight())
    }
}

/// Closes a writable mirror cleanly once the device is done with (so the
/// next open needs no resync): by [`Closer::close`], which says if that
/// failed, or when dropped.
pub struct Closer(Option<Box<dyn FnOnce() -> Result<(), VolumeError> + Send + Sync>>);

impl Closer {
    pub(crate) fn none() -> Closer {
        Closer(None)
    }
    pub(crate) fn mirror<L: BlockDevice>(m: &Mirror<L>) -> Closer {
        let m = m.clone();
        Closer(Some(Box::new(move || {
            m.close(pollfs_core::hosted::monotonic_clock, std::thread::yield_now)
        })))
    }
    /// Closes the mirror (if there is one to close) after its last use.
    pub fn close(mut self) -> Result<(), VolumeError> {
        self.0.take().map_or(Ok(()), |close| close())
    }
}

impl Drop for Closer {
    fn drop(&mut self) {
        if let Some(close) = self.0.take() {
            // Nobody to tell: a mirror left open is resynced at its next
            // open, which is safe, only slower.
            let _ = close();
        }
    }
}

impl std::fmt::Debug for Closer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Closer({})",
            if self.0.is_some() { "mirror" } else { "-" }
        )
    }
}

/// What an open holds until the device is closed: the device locks, and
/// the files it made (removed again if what they were made for fails).
#[derive(Debug, Default)]
pub(crate) struct Held {
    pub(crate) made: Vec<Created>,
    pub(crate) locks: Vec<DeviceLock>,
}

/// What a device's legs are legs of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LegKind {
    /// A mirror's.
    Mirror,
    /// A stripe's.
    Stripe,
}

/// Any device a [`DeviceSpec`](crate::DeviceSpec) names, opened: a
/// [`BlockDevice`] with no type parameters. It holds the device files'
/// locks, and closes a writable mirror cleanly when dropped.
#[derive(Debug)]
pub struct AnyDevice {
    // Dropped in this order: the control server (which holds the mirror),
    // the device, then the mirror's close, then the locks.
    pub(crate) control: Option<ControlServer>,
    pub(crate) inner: Inner,
    pub(crate) frames: AnyFrames,
    pub(crate) what: String,
    pub(crate) io_queues: Option<u16>,
    pub(crate) closer: Closer,
    pub(crate) held: Held,
}

impl AnyDevice {
    pub(crate) fn new(
        inner: Inner,
        arena: Arena,
        what: String,
        io_queues: Option<u16>,
        closer: Closer,
        held: Held,
    ) -> AnyDevice {
        let count = each_inner!(&inner, s => s.frame_count());
        AnyDevice {
            control: None,
            inner,
            frames: AnyFrames { arena, count },
            what,
            io_queues,
            closer,
            held,
        }
    }

    /// `dev`, a device the caller built (over plain memory frames), as an
    /// `AnyDevice`: for code with no generics (the C library) over a device
    /// no spec names, such as a test's recording device. It holds no
    /// locks and made no files; `what` names it in messages.
    pub fn from_device<D>(dev: D, what: &str) -> AnyDevice
    where
        D: BlockDevice<Frames = RamFrames>,
        D::Queue: 'static,
    {
        let given = Given::new(dev);
        AnyDevice::new(
            Inner::Given(given.clone()),
            Arena::Given(given),
            what.to_string(),
            None,
            Closer::none(),
            Held::default(),
        )
    }

    /// The device's name, as its spec gives it.
    pub fn name(&self) -> &str {
        &self.what
    }

    /// What the legs of a mirror or a stripe are, and their names by
    /// position, as the spec gives them; `None` for a single device (or
    /// one no spec names).
    pub fn legs(&self) -> Option<(LegKind, Vec<String>)> {
        let names = |legs: &[crate::Leaf]| legs.iter().map(ToString::to_string).collect();
        match crate::DeviceSpec::parse(&self.what).ok()? {
            crate::DeviceSpec::One(_) => None,
            crate::DeviceSpec::Mirror(legs) => Some((LegKind::Mirror, names(&legs))),
            crate::DeviceSpec::Stripe { legs, .. } => Some((LegKind::Stripe, names(&legs))),
        }
    }

    /// Where the mirror's control socket is, if one is served
    /// ([`OpenOptions::control`](crate::OpenOptions::control)).
    pub fn control_socket(&self) -> Option<&std::path::Path> {
        self.control.as_ref().map(ControlServer::path)
    }

    /// I/O queues the controller granted, for a single NVMe device.
    pub fn io_queues(&self) -> Option<u16> {
        self.io_queues
    }

    /// What closes a writable mirror cleanly: call [`Closer::close`] on it
    /// after the device (and the filesystem on it) is gone, to hear if
    /// closing failed. Left in place, it closes the mirror when the
    /// device is dropped and says nothing.
    pub fn take_closer(&mut self) -> Closer {
        std::mem::replace(&mut self.closer, Closer::none())
    }

    /// Files the open made, which are removed again if dropped before
    /// [`keep_made`](Self::keep_made) is called on them.
    pub(crate) fn take_made(&mut self) -> Vec<Created> {
        std::mem::take(&mut self.held.made)
    }

    /// Keeps the files the open made.
    pub(crate) fn keep_made(&mut self) {
        for file in self.take_made() {
            file.keep();
        }
    }

    /// Runs `job` on the device at its concrete type. A writable mirror is
    /// closed after it, and files the open made are kept only if it
    /// succeeds.
    pub fn run<J: DeviceJob>(self, job: J) -> Result<J::Output, J::Error> {
        let AnyDevice {
            control,
            inner,
            what,
            closer,
            held,
            ..
        } = self;
        let out = each_inner!(inner, s => s.run(job, &what));
        drop(control);
        let closed = closer.close();
        let out = out?;
        closed.map_err(|e| OpenError::new(&what, OpenErrorKind::Volume(e)))?;
        for file in held.made {
            file.keep();
        }
        Ok(out)
    }
}

impl BlockDevice for AnyDevice {
    type Queue = AnyQueue;
    type Frames = AnyFrames;
    fn geometry(&self) -> Geometry {
        each_inner!(&self.inner, s => s.geometry())
    }
    fn frames(&self) -> &AnyFrames {
        &self.frames
    }
    fn open_queue(&self) -> Result<AnyQueue, DevError> {
        Ok(match &self.inner {
            Inner::Host(s) => AnyQueue::Host(s.open_queue()?),
            Inner::Emu(s) => AnyQueue::Emu(s.open_queue()?),
            #[cfg(target_os = "linux")]
            Inner::Vfio(s) => AnyQueue::Vfio(s.open_queue()?),
            Inner::Tcp(s) => AnyQueue::Tcp(s.open_queue()?),
            Inner::Given(d) => AnyQueue::Given(d.open_queue()?),
        })
    }
    fn health(&self) -> DeviceHealth {
        each_inner!(&self.inner, s => s.health())
    }
    fn leg_counts(&self) -> Vec<DeviceCounts> {
        each_inner!(&self.inner, s => s.leg_counts())
    }
}
