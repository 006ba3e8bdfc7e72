//! [`open`]: the one set of rules for opening what a
//! [`DeviceSpec`] names, and [`open_fs`] for the filesystem on it.
//!
//! - A `file:` leg that does not exist is made at [`OpenOptions::size`]
//!   if [`OpenOptions::create`], and removed again if the open (or what
//!   it was for) fails; one that exists keeps its size unless
//!   [`OpenOptions::grow`]. Each is locked: exclusively unless the access
//!   is [`Access::Read`], so two processes never write one device file.
//! - `emu` and `ram` legs are new, zeroed, [`OpenOptions::size`] bytes.
//! - [`Access::Format`] refuses, before anything is written, a leg too
//!   small for a filesystem and one that holds anything (a signature, any
//!   non-zero byte; [`crate::signature`]) unless forced; a mirror is made
//!   anew. [`OpenOptions::replace`] looks at the new leg of a mirror the
//!   same way.
//! - A mirror opened with [`OpenOptions::control`] serves its control
//!   socket ([`crate::control`]) for as long as the device is open.
//! - The legs of a volume share one frame arena: the DMA memory of the
//!   emulated controllers (all `emu` legs are controllers on one emulated
//!   memory), the DMA memory of one VFIO container that every `vfio` leg's
//!   controller is attached to (one IOMMU space, the frames mapped once),
//!   the plain frames every `nvme-tcp://` leg copies through (a TCP
//!   controller reaches any frame, so any number of them share one
//!   arena), or plain memory when every leg is `ram` or `file:`. RAM and
//!   file legs move data through whichever it is. Legs of two of the
//!   kinds `emu`, `vfio` and `nvme-tcp` have frames of different kinds
//!   and are refused ([`Arenas`]); so is one controller named twice.

use std::sync::Arc;
use std::time::Duration;

use pollfs_core::dev::either::Either;
use pollfs_core::dev::file::FileDevice;
use pollfs_core::dev::ram::{RamDevice, RamFrames};
use pollfs_core::dev::{BlockDevice, FrameArena};
use pollfs_core::hosted::monotonic_clock;
use pollfs_core::persist::format::Layout;
use pollfs_core::volume::mirror::WINDOW_FRAMES;
use pollfs_core::volume::{Mirror, MirrorEvent, Stripe};
use pollfs_core::Fs;
use pollfs_driver::emu::{EmuConfig, EmuMemory, StdClock};
use pollfs_driver::tcp::TcpFrames;
use pollfs_driver::{DriverConfig, EmuFrames, NvmeDevice};

use crate::any::{AnyDevice, Arena, Closer, Held, Inner, Leg, NvmeLeg, Shape};
use crate::control::server::ControlServer;
use crate::error::{Arenas, DriverFault, OpenError, OpenErrorKind};
use crate::signature::{self, Found};
use crate::spec::{DeviceSpec, Leaf};
use crate::{control, file, lock};

/// What the device is opened for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Reading only: device files are locked shared, a mirror is opened
    /// read-only.
    Read,
    /// Reading and writing what is there.
    Write,
    /// Writing a new filesystem over the whole device: what is there is
    /// looked at first and refused unless `force`.
    Format {
        /// Overwrite a device that holds something.
        force: bool,
    },
}

/// How to open a device.
#[derive(Clone, Copy, Debug)]
pub struct OpenOptions {
    /// What for.
    pub access: Access,
    /// Page frames the caller uses (page cache and metadata, or I/O
    /// buffers); a mirror adds its own.
    pub frames: u32,
    /// Size of `emu` and `ram` legs and of `file:` legs made here.
    pub size: u64,
    /// Make `file:` legs that do not exist.
    pub create: bool,
    /// Extend a `file:` leg shorter than `size` (a regular file only).
    pub grow: bool,
    /// For the NVMe driver (`emu`, `vfio:` and `nvme-tcp://` legs).
    pub driver: DriverConfig,
    /// The identity of a mirror [`Access::Format`] makes (a new one if
    /// `None`).
    pub mirror_uuid: Option<u64>,
    /// After an unclean shutdown, the mirror leg to keep.
    pub prefer: Option<usize>,
    /// Told of a mirror's events (a leg failing, a resync) as they
    /// happen, with the name of the leg the event is about as the spec
    /// gives it (the mirror's, for an event about no one leg).
    pub on_mirror_event: Option<fn(&MirrorEvent, &str)>,
    /// Told when a forced format overwrites what a leg holds.
    pub on_overwrite: Option<fn(&str, Found)>,
    /// How long to wait for a `file:` leg another process holds (a mount
    /// that was just unmounted holds it until it has written its
    /// checkpoint); zero refuses it at once.
    pub lock_wait: Duration,
    /// Told once, with the leg and the wait, when a `file:` leg is found
    /// in use and `lock_wait` is not zero.
    pub on_lock_wait: Option<fn(&str, Duration)>,
    /// Serve a mirror's control socket while the device is open, so that
    /// `pollfs mirror` can administer it from another process
    /// ([`crate::control`]). Other devices have none.
    pub control: bool,
    /// Open a mirror with this leg a new device in place of a failed one
    /// (`Mirror::replace`, with [`Access::Write`]): the new device is
    /// looked at first, as a format looks at a device, and refused if it
    /// holds anything, unless `force_replace`.
    pub replace: Option<usize>,
    /// Overwrite what the new device of `replace` holds.
    pub force_replace: bool,
}

/// Size of `emu` and `ram` devices and of new files when none is given.
pub const DEFAULT_SIZE: u64 = 256 << 20;

impl OpenOptions {
    /// For `access` with `frames` frames, and the defaults for the rest.
    pub fn new(access: Access, frames: u32) -> OpenOptions {
        OpenOptions {
            access,
            frames,
            size: DEFAULT_SIZE,
            create: false,
            grow: false,
            driver: DriverConfig::default(),
            mirror_uuid: None,
            prefer: None,
            on_mirror_event: None,
            on_overwrite: None,
            lock_wait: Duration::ZERO,
            on_lock_wait: None,
            control: false,
            replace: None,
            force_replace: false,
        }
    }

    fn exclusive(&self) -> bool {
        self.access != Access::Read
    }
}

/// A new filesystem's (or mirror's) uuid, different on every call: a
/// format must never take the log an earlier filesystem left on the
/// device for its own.
pub fn new_uuid() -> u64 {
    static MADE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let made = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    t ^ (u64::from(std::process::id()) << 40) ^ pollfs_core::rng::mix(made)
}

/// Opens the device `spec` names, as `options` say. Files it made are
/// kept.
pub fn open(spec: &DeviceSpec, options: &OpenOptions) -> Result<AnyDevice, OpenError> {
    let mut dev = open_pending(spec, options)?;
    dev.keep_made();
    Ok(dev)
}

/// Opens the device and runs `job` on it at its concrete type: files the
/// open made are kept only if `job` succeeds, and a writable mirror is
/// closed after it.
pub fn run<J: crate::any::DeviceJob>(
    spec: &DeviceSpec,
    options: &OpenOptions,
    job: J,
) -> Result<J::Output, J::Error> {
    open_pending(spec, options)?.run(job)
}

/// Opens the device and the filesystem on it: formats it for
/// [`Access::Format`], and always for a device that lives wholly in
/// memory (nothing is there to mount); mounts it otherwise. Files the
/// open made are removed again if the format fails.
pub fn open_fs(
    spec: &DeviceSpec,
    options: &OpenOptions,
    config: pollfs_core::Config,
) -> Result<Fs<AnyDevice>, OpenError> {
    open_fs_with(spec, options, config, |_| Ok(()))
}

/// As [`open_fs`], with `before` run on the device before the filesystem
/// is formatted or mounted on it: to check what the caller needs of it
/// (queues), or to take its [`Closer`](crate::Closer).
pub fn open_fs_with<E: From<OpenError>>(
    spec: &DeviceSpec,
    options: &OpenOptions,
    config: pollfs_core::Config,
    before: impl FnOnce(&mut AnyDevice) -> Result<(), E>,
) -> Result<Fs<AnyDevice>, E> {
    let format = matches!(options.access, Access::Format { .. }) || spec.in_memory();
    if !format {
        if let Some(leg) = spec.memory_leg() {
            return Err(OpenError::new(leg, OpenErrorKind::NothingThere).into());
        }
    }
    let mut dev = open_pending(spec, options)?;
    before(&mut dev)?;
    let what = spec.to_string();
    let fs_error = |e| OpenError::new(&what, OpenErrorKind::Fs(e));
    let made = dev.take_made();
    let fs = if format {
        Fs::format(dev, config, new_uuid())
    } else {
        Fs::mount(dev, config)
    }
    .map_err(fs_error)?;
    for file in made {
        file.keep();
    }
    Ok(fs)
}

/// Opens the device; files it made are removed again if it is dropped
/// before they are kept.
pub(crate) fn open_pending(
    spec: &DeviceSpec,
    options: &OpenOptions,
) -> Result<AnyDevice, OpenError> {
    let legs = spec.legs();
    let frames = match spec {
        DeviceSpec::Mirror(legs) => options.frames + legs.len() as u32 + WINDOW_FRAMES,
        _ => options.frames,
    };
    let emu = legs.iter().filter(|l| **l == Leaf::Emu).count();
    let vfio: Vec<&String> = legs
        .iter()
        .filter_map(|l| match l {
            Leaf::Vfio(a) => Some(a),
            _ => None,
        })
        .collect();
    let tcp = legs.iter().filter(|l| matches!(l, Leaf::Tcp(_))).count();
    let mixed = |a| Err(OpenError::new(spec, OpenErrorKind::Arenas(a)));
    let mut open = Opening {
        spec,
        options,
        held: Held::default(),
    };
    match (emu, vfio.as_slice()) {
        _ if tcp > 0 && (emu > 0 || !vfio.is_empty()) => mixed(Arenas::TcpWithDma),
        (0, []) if tcp > 0 => {
            let arena = Arc::new(TcpFrames::new(frames));
            let legs = open.legs(&arena, |leaf| match leaf {
                Leaf::Tcp(address) => {
                    let tcp = address
                        .load_options()
                        .map_err(|e| OpenError::new(leaf, OpenErrorKind::KeyFile(e)))?;
                    NvmeDevice::tcp_on(address, tcp, options.driver, arena.clone())
                        .map_err(|e| driver_error(leaf, e, None))
                }
                _ => Err(not_host(leaf)),
            })?;
            open.finish(legs, Arena::Tcp(arena), Inner::Tcp)
        }
        (0, []) => {
            let arena = Arc::new(RamFrames::new(frames));
            let legs = open.legs::<RamDevice>(&arena, |leaf| Err(not_host(leaf)))?;
            open.finish(legs, Arena::Host(arena), Inner::Host)
        }
        (_, []) => {
            let memory = EmuMemory::new();
            let arena = Arc::new(
                EmuFrames::new(&memory, frames)
                    .map_err(|e| driver_error("emulated memory", e, None))?,
            );
            let emu = EmuConfig {
                bytes: options.size,
                block_size: 4096,
                ..EmuConfig::default()
            };
            let legs = open.legs(&arena, |leaf| {
                NvmeDevice::emulated_on(
                    emu,
                    options.driver,
                    &memory,
                    arena.clone(),
                    StdClock::new(),
                )
                .map(|(d, _)| d)
                .map_err(|e| driver_error(leaf, e, None))
            })?;
            open.finish(legs, Arena::Emu(arena), Inner::Emu)
        }
        #[cfg(target_os = "linux")]
        (0, _) => open.vfio(&vfio, frames),
        #[cfg(not(target_os = "linux"))]
        (0, _) => Err(OpenError::new(spec, OpenErrorKind::NoVfio)),
        _ => mixed(Arenas::EmuWithVfio),
    }
}

fn driver_error(
    what: impl std::fmt::Display,
    e: impl Into<DriverFault>,
    hint: Option<String>,
) -> OpenError {
    OpenError::new(
        what,
        OpenErrorKind::Driver {
            error: e.into(),
            hint,
        },
    )
}

/// What to check when a controller could not be taken through VFIO.
#[cfg(target_os = "linux")]
fn vfio_hint(addr: &str) -> String {
    format!("is it bound to vfio-pci, and not in use by another process? see `pollfs setup {addr}`")
}

/// An NVMe leg where the arena has no controller of its kind: the arena
/// rules above keep this from happening.
fn not_host(leaf: &Leaf) -> OpenError {
    OpenError::new(leaf, OpenErrorKind::Arenas(Arenas::EmuWithVfio))
}

/// One open under way: what it holds so far.
struct Opening<'a> {
    spec: &'a DeviceSpec,
    options: &'a OpenOptions,
    held: Held,
}

impl Opening<'_> {
    /// A volume whose NVMe legs are the controllers at `addrs`, bound to
    /// vfio-pci: all in one VFIO container (one IOMMU space), every one
    /// attached before the page-cache frames are mapped there once, so
    /// every controller reaches every frame at one bus address.
    #[cfg(target_os = "linux")]
    fn vfio(mut self, addrs: &[&String], frames: u32) -> Result<AnyDevice, OpenError> {
        use pollfs_driver::vfio::VfioContainer;
        let options = self.options;
        for (i, addr) in addrs.iter().enumerate() {
            if addrs[..i].contains(addr) {
                let leaf = Leaf::Vfio((*addr).clone());
                return Err(OpenError::new(leaf, OpenErrorKind::NamedTwice));
            }
        }
        let container = VfioContainer::open().map_err(|e| driver_error(self.spec, e, None))?;
        let mut bars = Vec::with_capacity(addrs.len());
        for &addr in addrs {
            let leaf = Leaf::Vfio(addr.clone());
            let bar = container
                .attach(addr)
                .map_err(|e| driver_error(&leaf, e, Some(vfio_hint(addr))))?;
            bars.push((addr, Some(bar)));
        }
        let arena = container
            .frames(frames)
            .map_err(|e| driver_error(self.spec, e, None))?;
        let legs = self.legs(&arena, |leaf| {
            let Leaf::Vfio(addr) = leaf else {
                return Err(not_host(leaf));
            };
            let bar = bars
                .iter_mut()
                .find(|(a, _)| *a == addr)
                .and_then(|(_, bar)| bar.take())
                .ok_or_else(|| not_host(leaf))?;
            NvmeDevice::vfio_attached(
                &container,
                bar,
                options.driver,
                arena.clone(),
                StdClock::new(),
            )
            .map_err(|e| driver_error(leaf, e, Some(vfio_hint(addr))))
        })?;
        self.finish(legs, Arena::Vfio(arena), Inner::Vfio)
    }

    /// Opens every leg over `arena`; `nvme` opens the NVMe ones.
    fn legs<N: BlockDevice>(
        &mut self,
        arena: &Arc<N::Frames>,
        mut nvme: impl FnMut(&Leaf) -> Result<N, OpenError>,
    ) -> Result<Vec<Leg<N>>, OpenError>
    where
        N::Frames: FrameArena + 'static,
    {
        let legs = self.spec.legs();
        let mut out = Vec::with_capacity(legs.len());
        for leaf in legs {
            let leg = match leaf {
                Leaf::Ram => RamDevice::with_arena(self.options.size, 4096, arena.clone())
                    .map(|d| Either::Left(Either::Left(d)))
                    .map_err(|e| driver_error(leaf, e, None))?,
                Leaf::File(path) => Either::Left(Either::Right(self.file(leaf, path, arena)?)),
                _ => Either::Right(nvme(leaf)?),
            };
            self.check(leaf, &leg)?;
            out.push(leg);
        }
        Ok(out)
    }

    /// A `file:` leg: looked at, made if missing (and asked for), locked,
    /// opened.
    fn file<A: FrameArena + 'static>(
        &mut self,
        leaf: &Leaf,
        path: &std::path::Path,
        arena: &Arc<A>,
    ) -> Result<FileDevice<A>, OpenError> {
        let options = self.options;
        let io = |e| OpenError::new(leaf, OpenErrorKind::File(e));
        let len = match file::inspect(path).map_err(io)? {
            Some(existing) if options.grow && !existing.block_device => {
                existing.len.max(options.size)
            }
            Some(existing) => existing.len,
            None if options.create => {
                self.held
                    .made
                    .push(file::Created::new(path, options.size).map_err(io)?);
                options.size
            }
            None => return Err(OpenError::new(leaf, OpenErrorKind::NoSuchFile)),
        };
        let said = || {
            if let Some(tell) = options.on_lock_wait {
                tell(&leaf.to_string(), options.lock_wait);
            }
        };
        let held = lock::lock_waiting(path, options.exclusive(), options.lock_wait, said).map_err(
            |e| match e {
                lock::LockError::InUse => OpenError::new(leaf, OpenErrorKind::InUse),
                lock::LockError::Io(e) => io(e),
            },
        )?;
        self.held.locks.push(held);
        FileDevice::open_with_arena(path, len, arena.clone()).map_err(io)
    }

    /// Before a format, and for the new device of a replace: a leg too
    /// small, or one that holds anything (unless forced), is refused.
    fn check<D: BlockDevice>(&self, leaf: &Leaf, leg: &D) -> Result<(), OpenError> {
        let replacing = self
            .options
            .replace
            .and_then(|l| self.spec.legs().get(l).cloned());
        let force = match self.options.access {
            Access::Format { force } => force,
            _ if replacing.as_ref() == Some(leaf) => self.options.force_replace,
            _ => return Ok(()),
        };
        let pages = leg.geometry().capacity_pages();
        let min = Layout::min_blocks();
        if pages < min {
            return Err(OpenError::new(
                leaf,
                OpenErrorKind::TooSmall {
                    bytes: pages * 4096,
                    min: min * 4096,
                },
            ));
        }
        let made = match leaf {
            Leaf::File(path) => self.held.made.iter().any(|m| m.path() == path),
            _ => false,
        };
        if leaf.in_memory() || made {
            return Ok(());
        }
        let head = signature::read_device_head(leg).map_err(|e| driver_error(leaf, e, None))?;
        match signature::identify(&head) {
            None => Ok(()),
            Some(found) if force => {
                if let Some(tell) = self.options.on_overwrite {
                    tell(&leaf.to_string(), found);
                }
                Ok(())
            }
            Some(found) => Err(OpenError::new(leaf, OpenErrorKind::HoldsData(found))),
        }
    }

    /// Puts the legs together as the spec says.
    fn finish<N: NvmeLeg>(
        self,
        mut legs: Vec<Leg<N>>,
        arena: Arena,
        inner: fn(Shape<N>) -> Inner,
    ) -> Result<AnyDevice, OpenError> {
        let spec = self.spec;
        let options = self.options;
        let volume_error = |e| OpenError::new(spec, OpenErrorKind::Volume(e));
        let mut io_queues = None;
        let mut closer = Closer::none();
        let mut control = None;
        let shape = match spec {
            DeviceSpec::One(_) => {
                let leg = legs
                    .pop()
                    .ok_or_else(|| volume_error(pollfs_core::volume::VolumeError::NoLegs))?;
                if let Either::Right(nvme) = &leg {
                    io_queues = nvme_queues(nvme);
                }
                Shape::One(leg)
            }
            DeviceSpec::Stripe { chunk, .. } => {
                Shape::Stripe(Stripe::new(legs, *chunk).map_err(volume_error)?)
            }
            DeviceSpec::Mirror(_) => {
                let writable = options.exclusive();
                let mirror_options = pollfs_core::volume::OpenOptions {
                    writable,
                    prefer: options.prefer,
                    on_event: options.on_mirror_event.map(|tell| event_hook(tell, spec)),
                };
                let idle = std::thread::yield_now;
                let mirror = match (options.access, options.replace) {
                    (Access::Format { .. }, _) => Mirror::create(
                        legs,
                        options.mirror_uuid.unwrap_or_else(new_uuid),
                        mirror_options,
                        monotonic_clock,
                        idle,
                    ),
                    (Access::Write, Some(leg)) => {
                        Mirror::replace(legs, leg, mirror_options, monotonic_clock, idle)
                    }
                    (Access::Read | Access::Write, _) => {
                        Mirror::open(legs, mirror_options, monotonic_clock, idle)
                    }
                }
                .map_err(volume_error)?;
                if writable {
                    closer = Closer::mirror(&mirror);
                }
                if options.control {
                    control = Some(serve(spec, &mirror)?);
                }
                Shape::Mirror(mirror)
            }
        };
        let mut dev = AnyDevice::new(
            inner(shape),
            arena,
            spec.to_string(),
            io_queues,
            closer,
            self.held,
        );
        dev.control = control;
        Ok(dev)
    }
}

/// Starts the control server of `mirror`.
fn serve<L: BlockDevice>(spec: &DeviceSpec, mirror: &Mirror<L>) -> Result<ControlServer, OpenError>
where
    Mirror<L>: Send + Sync + 'static,
{
    let legs = spec.legs();
    let names = legs.iter().map(ToString::to_string).collect();
    let paths = control::socket_paths(mirror.uuid(), legs);
    ControlServer::start(Arc::new(mirror.clone()), names, &paths)
        .map_err(|e| OpenError::new(spec, OpenErrorKind::Control(e)))
}

/// I/O queues of a single controller.
fn nvme_queues<N: NvmeLeg>(nvme: &N) -> Option<u16> {
    nvme.io_queues()
}

/// `tell` as a mirror's event hook, with the leg each event is about
/// named as `spec` names it (the mirror, for an event about no one leg).
pub fn event_hook(
    tell: fn(&MirrorEvent, &str),
    spec: &DeviceSpec,
) -> pollfs_core::volume::EventHook {
    let mirror = spec.to_string();
    let legs: Vec<String> = spec.legs().iter().map(ToString::to_string).collect();
    std::sync::Arc::new(move |e: &MirrorEvent| {
        let name = e.leg().and_then(|l| legs.get(l)).unwrap_or(&mirror);
        tell(e, name)
    })
}
