//! The device a bench runs on. Every engine run formats a fresh pollfs on
//! it; what was on it before is looked at once, before the first run, and
//! a device that holds anything is refused unless `--force` was given.

use std::cell::Cell;

use pollfs_core::dev::BlockDevice;
use pollfs_core::volume::mirror::HEADER_PAGES;
use pollfs_device::units::show_bytes;
use pollfs_device::{Access, DeviceJob, DeviceSpec, Leaf, OpenOptions};
use pollfs_driver::{DriverConfig, EmuConfig};

use super::engine::{self, Engine};
use super::limits;
use super::plan::Phase;
use super::run::Progress;
use super::sample::Sample;

/// I/O queues the emulated controller grants the driver: what the driver
/// asks for, capped by what the controller offers, both at the defaults
/// `NvmeDevice::emulated` brings them up with.
pub fn emu_queues() -> u32 {
    let asked = DriverConfig::default().max_io_queues;
    let offered = EmuConfig::default().max_io_queues;
    u32::from(asked.min(offered))
}

/// Queues `device` offers (a bench thread holds one each), where that is
/// known before it is brought up.
pub fn queue_limit(device: &DeviceSpec) -> Option<u32> {
    device.legs().contains(&Leaf::Emu).then(emu_queues)
}

/// The device, and whether its previous contents have been checked.
#[derive(Debug)]
pub struct Target {
    /// The device.
    pub device: DeviceSpec,
    force: bool,
    /// Set once the device was found empty (or `--force` given): later runs
    /// find the filesystem the bench itself wrote.
    checked: Cell<bool>,
    /// Serve a mirror's control socket (`--control`).
    pub control: bool,
}

impl Target {
    /// `device`; `checked` if its contents were already looked at.
    pub fn new(device: DeviceSpec, force: bool, checked: bool) -> Target {
        Target {
            device,
            force,
            checked: Cell::new(checked),
            control: false,
        }
    }

    /// Runs `phase` with a pollfs `engine` on a fresh pollfs on the
    /// device: legs sized for the phase (`file:` legs made if missing and
    /// grown if short, and every leg looked at before the first run), a
    /// mirror made anew.
    pub fn run(
        &self,
        phase: &Phase<'_>,
        engine: Engine,
        progress: &Progress,
    ) -> anyhow::Result<Vec<Sample>> {
        let needed = phase.device_bytes();
        let legs = self.device.legs().len() as u64;
        let page = pollfs_core::units::PAGE_SIZE as u64;
        let size = match &self.device {
            DeviceSpec::Stripe { chunk, .. } => {
                needed.div_ceil(legs).div_ceil(*chunk) * chunk + chunk
            }
            DeviceSpec::Mirror(_) => needed.div_ceil(page) * page + HEADER_PAGES * page,
            DeviceSpec::One(Leaf::Emu) => phase.emu_device_bytes(),
            DeviceSpec::One(_) => needed,
        };
        // Once looked at, the device holds what the bench wrote: later
        // runs format over it without a word.
        let checked = self.checked.get();
        let mut options = OpenOptions {
            size,
            create: true,
            grow: true,
            mirror_uuid: Some(0x5eed_0001),
            control: self.control,
            ..crate::device::options(
                Access::Format {
                    force: self.force || checked,
                },
                engine::frames(phase)?,
            )
        };
        if checked {
            options.on_overwrite = None;
        }
        let dev = pollfs_device::open(&self.device, &options)?;
        let what = self.device.to_string();
        // Everything is checked before the first write.
        if let Some(queues) = dev.io_queues() {
            if phase.threads() > u32::from(queues) {
                anyhow::bail!(limits::too_many_threads(phase, u32::from(queues), &what));
            }
        }
        // A controller's namespace has its own size; the rest were sized
        // here.
        let fixed = matches!(&self.device, DeviceSpec::One(Leaf::Vfio(_) | Leaf::Tcp(_)));
        let capacity = dev.geometry().capacity_pages().saturating_mul(page);
        if fixed && needed > capacity {
            anyhow::bail!(
                "{}: needs {} of device, and {what} holds {}",
                phase.label(),
                show_bytes(needed),
                show_bytes(capacity)
            );
        }
        self.checked.set(true);
        dev.run(BenchRun {
            phase,
            engine,
            progress,
        })
    }
}

/// One bench run, at the device's own type (the engine's hot path is
/// compiled for each).
struct BenchRun<'a, 'p> {
    phase: &'a Phase<'p>,
    engine: Engine,
    progress: &'a Progress,
}

impl DeviceJob for BenchRun<'_, '_> {
    type Output = Vec<Sample>;
    type Error = anyhow::Error;
    fn run<D: BlockDevice>(self, dev: D, _what: &str) -> anyhow::Result<Vec<Sample>> {
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
    fn emulated_legs_limit_the_threads() {
        let limit = |s: &str| queue_limit(&s.parse().unwrap());
        assert_eq!(limit("emu"), Some(64));
        assert_eq!(limit("stripe:(emu,ram)"), Some(64));
        assert_eq!(limit("ram"), None);
        assert_eq!(limit("file:/x"), None);
    }
}
