//! The device a bench runs on. Every engine run formats a fresh pollfs on
//! it; what was on it before is looked at once, before the first run, and
//! a device that holds anything is refused unless `--force` was given.

use std::cell::Cell;
use std::fmt;
use std::path::PathBuf;

use pollfs_core::dev::file::FileDevice;
use pollfs_core::dev::ram::RamDevice;
use pollfs_core::dev::BlockDevice;
use pollfs_core::volume::mirror::HEADER_PAGES;
use pollfs_driver::{DriverConfig, EmuConfig, NvmeDevice};

use super::engine::{self, Engine};
use super::limits;
use super::plan::Phase;
use super::run::Progress;
use super::sample::Sample;
use crate::volume::{self, Leaf, Open, Volume, VolumeJob};

/// Where the bench runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Device {
    /// The emulated NVMe controller over a namespace in memory.
    Emu,
    /// Memory, without a driver.
    Ram,
    /// A file (or block device) through `pread`/`pwrite`.
    File(PathBuf),
    /// A controller bound to vfio-pci.
    Vfio(String),
    /// An NVMe/TCP subsystem, by its `nvme-tcp://` name.
    Tcp(String),
    /// A stripe or mirror of the above.
    Volume(Volume),
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Emu => write!(f, "the emulated controller"),
            Device::Ram => write!(f, "ram"),
            Device::File(p) => write!(f, "file:{}", p.display()),
            Device::Vfio(a) => write!(f, "vfio:{a}"),
            Device::Tcp(name) => write!(f, "{name}"),
            Device::Volume(v) => write!(f, "{v}"),
        }
    }
}

/// I/O queues the emulated controller grants the driver: what the driver
/// asks for, capped by what the controller offers, both at the defaults
/// `NvmeDevice::emulated` brings them up with.
pub fn emu_queues() -> u32 {
    let asked = DriverConfig::default().max_io_queues;
    let offered = EmuConfig::default().max_io_queues;
    u32::from(asked.min(offered))
}

impl Device {
    /// Parses `--device`.
    pub fn parse(spec: &str) -> Result<Device, String> {
        if volume::is_volume(spec) {
            return Volume::parse(spec).map(Device::Volume);
        }
        Ok(match Leaf::parse(spec)? {
            Leaf::Emu => Device::Emu,
            Leaf::Ram => Device::Ram,
            Leaf::File(path) => Device::File(path),
            Leaf::Vfio(addr) => Device::Vfio(addr),
            Leaf::Tcp(address) => Device::Tcp(address.to_string()),
        })
    }

    /// Queues the device offers (a bench thread holds one each), where
    /// that is known before it is brought up.
    pub fn queue_limit(&self) -> Option<u32> {
        match self {
            Device::Emu => Some(emu_queues()),
            Device::Volume(v) if v.legs.contains(&Leaf::Emu) => Some(emu_queues()),
            Device::Ram
            | Device::File(_)
            | Device::Vfio(_)
            | Device::Tcp(_)
            | Device::Volume(_) => None,
        }
    }

    /// True if the device's blocks are held in this process's memory.
    pub fn in_memory(&self) -> bool {
        match self {
            Device::Volume(v) => v.legs.iter().all(Leaf::in_memory),
            d => matches!(d, Device::Emu | Device::Ram),
        }
    }
}

/// The device, and whether its previous contents have been checked.
#[derive(Debug)]
pub struct Target {
    /// The device.
    pub device: Device,
    force: bool,
    /// Set once the device was found empty (or `--force` given): later runs
    /// find the filesystem the bench itself wrote.
    checked: Cell<bool>,
}

impl Target {
    /// `device`; `checked` if its contents were already looked at.
    pub fn new(device: Device, force: bool, checked: bool) -> Target {
        Target {
            device,
            force,
            checked: Cell::new(checked),
        }
    }

    /// Runs `phase` with a pollfs `engine` on a fresh pollfs on the device.
    pub fn run(
        &self,
        phase: &Phase<'_>,
        engine: Engine,
        progress: &Progress,
    ) -> Result<Vec<Sample>, String> {
        let bytes = phase.device_bytes();
        let frames = engine::frames(phase)?;
        match &self.device {
            Device::Emu => {
                let dev = NvmeDevice::emulated(bytes, 4096, frames)
                    .map_err(|e| format!("emulated NVMe: {e}"))?;
                let queues = u32::from(dev.controller().info().io_queues);
                if phase.threads() > queues {
                    return Err(limits::too_many_threads(
                        phase,
                        queues,
                        "the emulated controller",
                    ));
                }
                engine::pollfs(phase, dev, engine, progress)
            }
            Device::Ram => {
                let dev = RamDevice::new(bytes, 4096, frames).map_err(|e| e.to_string())?;
                engine::pollfs(phase, dev, engine, progress)
            }
            Device::File(path) => {
                let dev = FileDevice::open(path, bytes, frames)
                    .map_err(|e| format!("file:{}: {e}", path.display()))?;
                engine::pollfs(phase, dev, engine, progress)
            }
            #[cfg(target_os = "linux")]
            Device::Vfio(addr) => {
                let what = format!("vfio:{addr}");
                let config = DriverConfig::default();
                let dev =
                    NvmeDevice::vfio(addr, config, frames, pollfs_driver::emu::StdClock::new())
                        .map_err(|e| {
                            format!(
                                "{what}: {e} (is it bound to vfio-pci? see `pollfs setup {addr}`)"
                            )
                        })?;
                self.run_nvme(&what, dev, phase, engine, progress)
            }
            #[cfg(not(target_os = "linux"))]
            Device::Vfio(_) => Err("VFIO needs Linux".to_string()),
            Device::Tcp(name) => {
                let address = crate::nvme::parse_tcp(name)?;
                let dev = crate::nvme::tcp_device(&address, DriverConfig::default(), frames)?;
                self.run_nvme(name, dev, phase, engine, progress)
            }
            Device::Volume(v) => self.run_volume(v, phase, engine, progress),
        }
    }

    /// Runs on a new volume: legs sized for the phase (`file:` legs made
    /// if missing, and every leg looked at before the first run), a mirror
    /// made anew.
    fn run_volume(
        &self,
        v: &Volume,
        phase: &Phase<'_>,
        engine: Engine,
        progress: &Progress,
    ) -> Result<Vec<Sample>, String> {
        let needed = phase.device_bytes();
        let legs = v.legs.len() as u64;
        let page = pollfs_core::units::PAGE_SIZE as u64;
        let bytes = match v.chunk {
            Some(chunk) => needed.div_ceil(legs).div_ceil(chunk) * chunk + chunk,
            None => needed.div_ceil(page) * page + HEADER_PAGES * page,
        };
        let open = Open {
            bytes,
            create: true,
            make: v.chunk.is_none().then_some(0x5eed_0001),
            writable: true,
            ..Open::existing(engine::frames(phase)?)
        };
        let run = BenchRun {
            phase,
            engine,
            progress,
            check: !self.checked.get(),
            force: self.force,
        };
        let samples = volume::run(v, &v.to_string(), &open, run)?;
        self.checked.set(true);
        Ok(samples)
    }

    /// Runs on a controller the bench does not own: its queue count,
    /// capacity and contents are checked before the first write.
    fn run_nvme<T: pollfs_driver::Transport>(
        &self,
        what: &str,
        dev: NvmeDevice<T>,
        phase: &Phase<'_>,
        engine: Engine,
        progress: &Progress,
    ) -> Result<Vec<Sample>, String> {
        use crate::units::show_bytes;
        // Everything is checked before the first write.
        let queues = u32::from(dev.controller().info().io_queues);
        if phase.threads() > queues {
            return Err(limits::too_many_threads(phase, queues, what));
        }
        let capacity = dev
            .geometry()
            .capacity_pages()
            .saturating_mul(pollfs_core::units::PAGE_SIZE as u64);
        let needed = phase.device_bytes();
        if needed > capacity {
            return Err(format!(
                "{}: needs {} of device, and {what} holds {}",
                phase.label(),
                show_bytes(needed),
                show_bytes(capacity)
            ));
        }
        if !self.checked.get() {
            let head =
                crate::signature::read_device_head(&dev).map_err(|e| format!("{what}: {e}"))?;
            crate::signature::refuse_unless_forced(what, &head, self.force)?;
            self.checked.set(true);
        }
        engine::pollfs(phase, dev, engine, progress)
    }
}

/// One bench run on a volume.
struct BenchRun<'a, 'p> {
    phase: &'a Phase<'p>,
    engine: Engine,
    progress: &'a Progress,
    /// Refuse legs that hold anything (before the first run).
    check: bool,
    force: bool,
}

impl VolumeJob for BenchRun<'_, '_> {
    type Output = Vec<Sample>;
    fn check_leg<D: BlockDevice>(&mut self, leg: &D, what: &str) -> Result<(), String> {
        if self.check {
            let head =
                crate::signature::read_device_head(leg).map_err(|e| format!("{what}: {e}"))?;
            crate::signature::refuse_unless_forced(what, &head, self.force)?;
        }
        Ok(())
    }
    fn run<D: BlockDevice>(self, dev: D, _what: &str) -> Result<Vec<Sample>, String> {
        engine::pollfs(self.phase, dev, self.engine, self.progress)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_help_states_the_emulated_queue_limit() {
        // `--device` and `--numjobs` help say 64: change them with this.
        assert_eq!(emu_queues(), 64);
    }

    #[test]
    fn devices_parse() {
        assert_eq!(Device::parse("emu"), Ok(Device::Emu));
        assert_eq!(
            Device::parse("file:/tmp/x"),
            Ok(Device::File(PathBuf::from("/tmp/x")))
        );
        assert!(Device::parse("file:").is_err());
        assert_eq!(
            Device::parse("nvme-tcp://127.0.0.1:4420/testnqn"),
            Ok(Device::Tcp("nvme-tcp://127.0.0.1:4420/testnqn".into()))
        );
        assert!(Device::parse("nvme-tcp://127.0.0.1:4420/").is_err());
        assert!(matches!(
            Device::parse("mirror:(emu,nvme-tcp://127.0.0.1:4420/testnqn)"),
            Ok(Device::Volume(_))
        ));
        assert!(Device::parse("tape")
            .unwrap_err()
            .contains("unknown device"));
    }
}
