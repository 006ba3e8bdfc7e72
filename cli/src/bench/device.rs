//! The device a bench runs on. Every engine run formats a fresh pollfs on
//! it; what was on it before is looked at once, before the first run, and
//! a device that holds anything is refused unless `--force` was given.

use std::cell::Cell;
use std::fmt;
use std::path::PathBuf;

use pollfs_core::dev::file::FileDevice;
use pollfs_core::dev::ram::RamDevice;
use pollfs_core::dev::BlockDevice;
use pollfs_driver::{DriverConfig, EmuConfig, NvmeDevice};

use super::engine::{self, Engine};
use super::limits;
use super::plan::Phase;
use super::run::Progress;
use super::sample::Sample;

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
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Emu => write!(f, "the emulated controller"),
            Device::Ram => write!(f, "ram"),
            Device::File(p) => write!(f, "file:{}", p.display()),
            Device::Vfio(a) => write!(f, "vfio:{a}"),
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
        if spec == "emu" {
            return Ok(Device::Emu);
        }
        if spec == "ram" {
            return Ok(Device::Ram);
        }
        if let Some(path) = spec.strip_prefix("file:").filter(|p| !p.is_empty()) {
            return Ok(Device::File(PathBuf::from(path)));
        }
        if let Some(addr) = spec.strip_prefix("vfio:").filter(|a| !a.is_empty()) {
            return Ok(Device::Vfio(addr.to_string()));
        }
        Err(format!(
            "unknown device '{spec}': use emu, ram, file:PATH or vfio:PCI_ADDR"
        ))
    }

    /// Queues the device offers (a bench thread holds one each), where
    /// that is known before it is brought up.
    pub fn queue_limit(&self) -> Option<u32> {
        match self {
            Device::Emu => Some(emu_queues()),
            Device::Ram | Device::File(_) | Device::Vfio(_) => None,
        }
    }

    /// True if the device's blocks are held in this process's memory.
    pub fn in_memory(&self) -> bool {
        matches!(self, Device::Emu | Device::Ram)
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
            Device::Vfio(addr) => self.run_vfio(addr, phase, engine, progress),
            #[cfg(not(target_os = "linux"))]
            Device::Vfio(_) => Err("VFIO needs Linux".to_string()),
        }
    }

    #[cfg(target_os = "linux")]
    fn run_vfio(
        &self,
        addr: &str,
        phase: &Phase<'_>,
        engine: Engine,
        progress: &Progress,
    ) -> Result<Vec<Sample>, String> {
        use crate::units::show_bytes;
        let what = format!("vfio:{addr}");
        let frames = engine::frames(phase)?;
        let config = DriverConfig::default();
        let dev = NvmeDevice::vfio(addr, config, frames, pollfs_driver::emu::StdClock::new())
            .map_err(|e| {
                format!("{what}: {e} (is it bound to vfio-pci? see `pollfs setup {addr}`)")
            })?;
        // Everything is checked before the first write.
        let queues = u32::from(dev.controller().info().io_queues);
        if phase.threads() > queues {
            return Err(limits::too_many_threads(phase, queues, &what));
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
            crate::signature::refuse_unless_forced(&what, &head, self.force)?;
            self.checked.set(true);
        }
        engine::pollfs(phase, dev, engine, progress)
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
        assert!(Device::parse("tape")
            .unwrap_err()
            .contains("unknown device"));
    }
}
