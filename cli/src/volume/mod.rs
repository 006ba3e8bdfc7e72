//! Volumes on the command line: `mirror:(...)` and `stripe:CHUNK:(...)`
//! wherever a device is named (`spec` gives the syntax), and the
//! `pollfs mirror` command (`admin`).
//!
//! The legs of a volume share one frame arena (`pollfs_core::volume`), so
//! opening one decides the arena from the legs: the DMA memory of the
//! emulated controllers (all `emu` legs are controllers on one emulated
//! memory), the DMA memory of the one `vfio` leg, the plain frames every
//! `nvme-tcp://` leg copies through (a TCP controller reaches any frame,
//! so any number of them share one arena), or plain memory when every leg
//! is `ram` or `file:`. RAM and file legs move data through whichever it
//! is. Two `vfio` legs would need one IOMMU container for both
//! controllers, which the driver does not set up yet, and legs of two of
//! the kinds `emu`, `vfio` and `nvme-tcp` have frames of different kinds:
//! both are refused.

pub mod admin;
pub mod spec;

use std::path::PathBuf;
use std::sync::Arc;

use pollfs_core::dev::either::Either;
use pollfs_core::dev::file::FileDevice;
use pollfs_core::dev::ram::{RamDevice, RamFrames};
use pollfs_core::dev::{BlockDevice, FrameArena};
use pollfs_core::hosted::monotonic_clock;
use pollfs_core::volume::mirror::WINDOW_FRAMES;
use pollfs_core::volume::{Mirror, MirrorEvent, OpenOptions, Stripe};
use pollfs_driver::emu::{EmuConfig, EmuFrames, EmuMemory, StdClock};
use pollfs_driver::tcp::{TcpAddress, TcpFrames};
use pollfs_driver::{DriverConfig, NvmeDevice};

use crate::{devfile, devlock};
pub use spec::{is_volume, Spec};

/// A single device, as a leg of a volume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Leaf {
    /// An emulated NVMe controller over a namespace in memory.
    Emu,
    /// Memory, without a driver.
    Ram,
    /// A file or block device through `pread`/`pwrite`.
    File(PathBuf),
    /// A controller bound to vfio-pci.
    Vfio(String),
    /// An NVMe/TCP subsystem.
    Tcp(Box<TcpAddress>),
}

impl Leaf {
    /// Parses one of the single-device forms.
    pub fn parse(s: &str) -> Result<Leaf, String> {
        match s {
            "emu" => Ok(Leaf::Emu),
            "ram" => Ok(Leaf::Ram),
            _ => {
                if let Some(path) = s.strip_prefix("file:").filter(|p| !p.is_empty()) {
                    return Ok(Leaf::File(PathBuf::from(path)));
                }
                if let Some(addr) = s.strip_prefix("vfio:").filter(|a| !a.is_empty()) {
                    return Ok(Leaf::Vfio(addr.to_string()));
                }
                if TcpAddress::is_tcp(s) {
                    return crate::nvme::parse_tcp(s).map(|a| Leaf::Tcp(Box::new(a)));
                }
                Err(format!(
                    "unknown device '{s}': use emu, ram, file:PATH, vfio:PCI_ADDR, \
                     nvme-tcp://HOST:PORT/NQN, mirror:(DEV,DEV,...) or \
                     stripe:CHUNK:(DEV,DEV,...)"
                ))
            }
        }
    }
    /// True if its blocks live in this process's memory.
    pub fn in_memory(&self) -> bool {
        matches!(self, Leaf::Emu | Leaf::Ram)
    }
}

impl std::fmt::Display for Leaf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Leaf::Emu => write!(f, "emu"),
            Leaf::Ram => write!(f, "ram"),
            Leaf::File(p) => write!(f, "file:{}", p.display()),
            Leaf::Vfio(a) => write!(f, "vfio:{a}"),
            Leaf::Tcp(a) => write!(f, "{a}"),
        }
    }
}

/// A volume's kind and its legs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Volume {
    /// `None` for a mirror, the chunk size for a stripe.
    pub chunk: Option<u64>,
    /// The legs, in order.
    pub legs: Vec<Leaf>,
}

impl std::fmt::Display for Volume {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let legs = self
            .legs
            .iter()
            .map(|l| Spec::Leaf(l.to_string()))
            .collect();
        let spec = match self.chunk {
            Some(chunk) => Spec::Stripe { chunk, legs },
            None => Spec::Mirror(legs),
        };
        write!(f, "{spec}")
    }
}

impl Volume {
    /// The volume `spec` names; its legs must be single devices.
    pub fn of(spec: &Spec) -> Result<Volume, String> {
        let (chunk, legs) = match spec {
            Spec::Mirror(legs) => (None, legs),
            Spec::Stripe { chunk, legs } => (Some(*chunk), legs),
            Spec::Leaf(s) => return Err(format!("{s}: not a volume")),
        };
        let legs = legs
            .iter()
            .map(|l| match l {
                Spec::Leaf(s) => Leaf::parse(s),
                v => Err(format!(
                    "{v}: a leg of a volume must be a single device (volumes of volumes are not built)"
                )),
            })
            .collect::<Result<_, _>>()?;
        Ok(Volume { chunk, legs })
    }
    /// Parses a volume name.
    pub fn parse(s: &str) -> Result<Volume, String> {
        Volume::of(&spec::parse(s)?)
    }
    /// Frames the legs' arena needs for `frames` of the caller's.
    fn arena_frames(&self, frames: u32) -> u32 {
        match self.chunk {
            Some(_) => frames,
            None => frames + self.legs.len() as u32 + WINDOW_FRAMES,
        }
    }
}

/// How to open a volume's legs and the volume.
#[derive(Clone, Copy, Debug)]
pub struct Open {
    /// Frames the caller uses (page cache and metadata, or I/O buffers).
    pub frames: u32,
    /// Size of `ram` and `emu` legs, and of `file:` legs made here.
    pub bytes: u64,
    /// Make `file:` legs that do not exist (removed again on failure).
    pub create: bool,
    /// For `emu` and `vfio` legs.
    pub driver: DriverConfig,
    /// Make a new mirror with this identity instead of opening one.
    pub make: Option<u64>,
    /// Open a mirror for writing (and close it cleanly after).
    pub writable: bool,
    /// After an unclean shutdown, the leg to keep.
    pub prefer: Option<usize>,
}

impl Open {
    /// Opening existing legs with `frames` frames, for reading.
    pub fn existing(frames: u32) -> Open {
        Open {
            frames,
            bytes: 0,
            create: false,
            driver: DriverConfig::default(),
            make: None,
            writable: false,
            prefer: None,
        }
    }
}

/// Work to run on a volume once it is put together.
pub trait VolumeJob {
    /// What the work produces.
    type Output;
    /// Looks at a leg before the volume is made or opened (to refuse one
    /// that holds data, say).
    fn check_leg<D: BlockDevice>(&mut self, _leg: &D, _what: &str) -> Result<(), String> {
        Ok(())
    }
    /// Runs on the volume.
    fn run<D: BlockDevice>(self, dev: D, what: &str) -> Result<Self::Output, String>;
    /// Runs on a mirror (by default as on any volume).
    fn run_mirror<L: BlockDevice>(self, m: Mirror<L>, what: &str) -> Result<Self::Output, String>
    where
        Self: Sized,
    {
        self.run(m, what)
    }
}

/// Mirror events on stderr as they happen (not the routine header
/// writes).
fn report_event(e: &MirrorEvent) {
    if !matches!(e, MirrorEvent::HeadersWritten { .. }) {
        eprintln!("pollfs: mirror: {e}");
    }
}

fn idle() {
    std::thread::yield_now()
}

/// A leg over arena `N::Frames`: RAM or a file moving data through it, or
/// the NVMe device that owns it.
type Leg<N> = Either<
    Either<RamDevice<<N as BlockDevice>::Frames>, FileDevice<<N as BlockDevice>::Frames>>,
    N,
>;

/// What a run holds on its `file:` legs until it ends: the files it made
/// (removed again if the run fails) and the device locks.
#[derive(Default)]
struct Held {
    made: Vec<devfile::Created>,
    locks: Vec<devlock::DeviceLock>,
}

/// A RAM or file leg over `arena`. A file leg is locked as `devlock` says
/// (exclusive if the volume is written), and one made here goes on `held`.
fn host_leg<A: FrameArena + 'static>(
    leaf: &Leaf,
    arena: &Arc<A>,
    open: &Open,
    held: &mut Held,
) -> Result<Either<RamDevice<A>, FileDevice<A>>, String> {
    match leaf {
        Leaf::Ram => RamDevice::with_arena(open.bytes, 4096, arena.clone())
            .map(Either::Left)
            .map_err(|e| format!("ram: {e}")),
        Leaf::File(path) => {
            let len = match devfile::inspect(path)? {
                Some(existing) => existing.len,
                None if open.create => {
                    held.made.push(devfile::Created::new(path, open.bytes)?);
                    open.bytes
                }
                None => return Err(format!("{leaf}: no such device file")),
            };
            let exclusive = open.writable || open.make.is_some();
            held.locks.push(devlock::lock(path, exclusive)?);
            FileDevice::open_with_arena(path, len, arena.clone())
                .map(Either::Right)
                .map_err(|e| format!("{leaf}: {e}"))
        }
        Leaf::Emu | Leaf::Vfio(_) | Leaf::Tcp(_) => Err(format!("{leaf}: not a host device")),
    }
}

/// Opens `volume`'s legs and runs `job` on the volume.
pub fn run<J: VolumeJob>(
    volume: &Volume,
    what: &str,
    open: &Open,
    job: J,
) -> Result<J::Output, String> {
    let frames = volume.arena_frames(open.frames);
    let emu = volume.legs.iter().filter(|l| **l == Leaf::Emu).count();
    let vfio: Vec<&String> = volume
        .legs
        .iter()
        .filter_map(|l| match l {
            Leaf::Vfio(a) => Some(a),
            _ => None,
        })
        .collect();
    let tcp = volume
        .legs
        .iter()
        .filter(|l| matches!(l, Leaf::Tcp(_)))
        .count();
    let mut held = Held::default();
    let out = match (emu, vfio.as_slice()) {
        _ if tcp > 0 && (emu > 0 || !vfio.is_empty()) => Err(format!(
            "{what}: nvme-tcp legs copy through plain frames, emu and vfio legs need their DMA \
             memory: they cannot share a page cache"
        )),
        (0, []) if tcp > 0 => {
            let arena = Arc::new(TcpFrames::new(frames));
            let legs: Vec<Leg<pollfs_driver::tcp::net::TcpDevice>> = volume
                .legs
                .iter()
                .map(|l| match l {
                    Leaf::Tcp(address) => {
                        NvmeDevice::tcp_on(address, address.options(), open.driver, arena.clone())
                            .map(Either::Right)
                            .map_err(|e| format!("{address}: {e}"))
                    }
                    host => host_leg(host, &arena, open, &mut held).map(Either::Left),
                })
                .collect::<Result<_, _>>()?;
            finish(volume, legs, what, open, job)
        }
        (0, []) => {
            let arena = Arc::new(RamFrames::new(frames));
            let legs: Vec<Leg<RamDevice>> = volume
                .legs
                .iter()
                .map(|l| host_leg(l, &arena, open, &mut held).map(Either::Left))
                .collect::<Result<_, _>>()?;
            finish(volume, legs, what, open, job)
        }
        (_, []) => {
            let memory = EmuMemory::new();
            let arena = Arc::new(
                EmuFrames::new(&memory, frames).map_err(|e| format!("emulated memory: {e}"))?,
            );
            let emu = EmuConfig {
                bytes: open.bytes,
                block_size: 4096,
                ..EmuConfig::default()
            };
            let legs: Vec<Leg<pollfs_driver::EmulatedDevice>> = volume
                .legs
                .iter()
                .map(|l| match l {
                    Leaf::Emu => NvmeDevice::emulated_on(
                        emu,
                        open.driver,
                        &memory,
                        arena.clone(),
                        StdClock::new(),
                    )
                    .map(|(d, _)| Either::Right(d))
                    .map_err(|e| format!("emulated controller: {e}")),
                    host => host_leg(host, &arena, open, &mut held).map(Either::Left),
                })
                .collect::<Result<_, _>>()?;
            finish(volume, legs, what, open, job)
        }
        #[cfg(target_os = "linux")]
        (0, [addr]) => {
            let nvme =
                NvmeDevice::vfio(addr, open.driver, frames, StdClock::new()).map_err(|e| {
                    format!("{addr}: {e} (is it bound to vfio-pci? see `pollfs setup {addr}`)")
                })?;
            let arena = nvme.arena();
            let mut nvme = Some(nvme);
            let legs: Vec<Leg<pollfs_driver::vfio::VfioDevice>> = volume
                .legs
                .iter()
                .map(|l| match l {
                    Leaf::Vfio(_) => nvme
                        .take()
                        .map(Either::Right)
                        .ok_or_else(|| "one vfio leg".to_string()),
                    host => host_leg(host, &arena, open, &mut held).map(Either::Left),
                })
                .collect::<Result<_, _>>()?;
            finish(volume, legs, what, open, job)
        }
        #[cfg(not(target_os = "linux"))]
        (0, [_]) => Err("VFIO needs Linux".to_string()),
        (0, _) => Err(format!(
            "{what}: two vfio legs need one IOMMU container for both controllers, which \
             pollfs does not set up yet"
        )),
        _ => Err(format!(
            "{what}: emu and vfio legs are in different DMA memories and cannot share a page cache"
        )),
    }?;
    for file in held.made {
        file.keep();
    }
    Ok(out)
}

/// Checks the legs, puts the volume together and runs `job` on it.
fn finish<L: BlockDevice, J: VolumeJob>(
    volume: &Volume,
    legs: Vec<L>,
    what: &str,
    open: &Open,
    mut job: J,
) -> Result<J::Output, String> {
    for (leg, l) in legs.iter().zip(&volume.legs) {
        job.check_leg(leg, &l.to_string())?;
    }
    if let Some(chunk) = volume.chunk {
        let stripe = Stripe::new(legs, chunk).map_err(|e| format!("{what}: {e}"))?;
        return job.run(stripe, what);
    }
    let options = OpenOptions {
        writable: open.writable || open.make.is_some(),
        prefer: open.prefer,
        on_event: Some(report_event),
    };
    let mirror = match open.make {
        Some(uuid) => Mirror::create(legs, uuid, options, monotonic_clock, idle),
        None => Mirror::open(legs, options, monotonic_clock, idle),
    }
    .map_err(|e| format!("{what}: {e}"))?;
    let handle = mirror.clone();
    let out = job.run_mirror(mirror, what);
    if options.writable {
        handle
            .close(monotonic_clock, idle)
            .map_err(|e| format!("{what}: closing: {e}"))?;
    }
    out
}
