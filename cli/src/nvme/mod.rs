//! NVMe tools on the pollfs driver: `identify`, `perf` and `setup`.
//!
//! `identify` and `perf` take a DEVICE: `emu` for the emulated controller
//! (no hardware needed, useful to check the tools and the driver's own CPU
//! cost), `vfio:<pci-address>` for a controller bound to vfio-pci (see
//! `setup`), or `nvme-tcp://HOST:PORT/NQN` for an NVMe/TCP subsystem
//! (`?hdgst=1&ddgst=1` asks for header and data digests, `&kato=MS` sets
//! the Keep Alive Timeout, `&reconnect=MS` how long a reset keeps trying
//! to reach the target). All run the same generic code over
//! [`NvmeDevice`], so what is tested on `emu` is what runs on hardware.
//! `perf` and `identify` also take a stripe or mirror of such devices
//! (`crate::volume`).

pub mod identify;
pub mod perf;
pub mod setup;
#[cfg(test)]
mod setup_tests;
mod sysfs;

use std::sync::Arc;

use pollfs_driver::emu::StdClock;
use pollfs_driver::tcp::net::TcpDevice;
use pollfs_driver::tcp::TcpAddress;
use pollfs_driver::{DriverConfig, EmuConfig, NvmeDevice, Transport};

/// Where the driver finds its controller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// The emulated controller over a RAM namespace.
    Emu,
    /// A controller bound to vfio-pci, by PCI address.
    Vfio(String),
    /// An NVMe/TCP subsystem.
    Tcp(Box<TcpAddress>),
    /// A stripe or mirror of `emu`, `ram`, `vfio:` or `nvme-tcp://` legs.
    Volume(crate::volume::Volume),
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Emu => write!(f, "emu"),
            Target::Vfio(a) => write!(f, "vfio:{a}"),
            Target::Tcp(a) => write!(f, "{a}"),
            Target::Volume(v) => write!(f, "{v}"),
        }
    }
}

impl std::str::FromStr for Target {
    type Err = String;
    fn from_str(s: &str) -> Result<Target, String> {
        if crate::volume::is_volume(s) {
            let volume = crate::volume::Volume::parse(s)?;
            if let Some(l) = volume
                .legs
                .iter()
                .find(|l| matches!(l, crate::volume::Leaf::File(_)))
            {
                return Err(format!(
                    "{s}: leg {l}: the NVMe tools take emu, ram, vfio: and nvme-tcp:// legs"
                ));
            }
            return Ok(Target::Volume(volume));
        }
        if TcpAddress::is_tcp(s) {
            return parse_tcp(s).map(|a| Target::Tcp(Box::new(a)));
        }
        match s.strip_prefix("vfio:") {
            _ if s == "emu" => Ok(Target::Emu),
            Some(addr) if sysfs::valid_pci_address(addr) => Ok(Target::Vfio(addr.to_string())),
            Some(addr) => Err(format!("{addr}: not a PCI address (dddd:bb:dd.f)")),
            None => Err(format!(
                "{s}: expected `emu`, `vfio:dddd:bb:dd.f` or `nvme-tcp://HOST:PORT/NQN`"
            )),
        }
    }
}

/// Parses an `nvme-tcp://HOST:PORT/NQN?hdgst=1&ddgst=1` device name.
pub fn parse_tcp(s: &str) -> Result<TcpAddress, String> {
    TcpAddress::parse(s).map_err(|e| format!("{s}: {e}"))
}

/// Connects to an NVMe/TCP subsystem with `frames` page frames.
pub fn tcp_device(
    address: &TcpAddress,
    config: DriverConfig,
    frames: u32,
) -> Result<TcpDevice, String> {
    NvmeDevice::tcp_with(address, address.options(), config, frames)
        .map_err(|e| format!("{address}: {e}"))
}

/// Namespace size of the `emu` target.
pub const EMU_BYTES: u64 = 256 << 20;

/// Work that runs on whichever device the user named.
pub trait DeviceJob {
    /// What the job produces.
    type Output;
    /// Runs on a brought-up device.
    fn run<T: Transport>(self, dev: &NvmeDevice<T>) -> Result<Self::Output, String>;
}

/// Brings up `target` with `frames` page frames of DMA memory and runs
/// `job` on it. Dropping the device at the end shuts the controller down.
pub fn with_device<J: DeviceJob>(
    target: &Target,
    config: DriverConfig,
    frames: u32,
    job: J,
) -> Result<J::Output, String> {
    match target {
        Target::Emu => {
            let emu = EmuConfig {
                bytes: EMU_BYTES,
                block_size: 4096,
                ..EmuConfig::default()
            };
            let (dev, _ctrl): (_, Arc<_>) =
                NvmeDevice::emulated_with(emu, config, frames, StdClock::new())
                    .map_err(|e| format!("emulated controller: {e}"))?;
            job.run(&dev)
        }
        #[cfg(target_os = "linux")]
        Target::Vfio(addr) => {
            let dev = NvmeDevice::vfio(addr, config, frames, StdClock::new()).map_err(|e| {
                format!("{addr}: {e} (is it bound to vfio-pci? see `pollfs setup {addr}`)")
            })?;
            job.run(&dev)
        }
        #[cfg(not(target_os = "linux"))]
        Target::Vfio(_) => Err("VFIO needs Linux".to_string()),
        Target::Tcp(address) => job.run(&tcp_device(address, config, frames)?),
        Target::Volume(v) => Err(format!("{v}: a volume, not one controller")),
    }
}

#[cfg(test)]
mod tests {
    use super::Target;

    #[test]
    fn targets_parse() {
        assert_eq!("emu".parse::<Target>(), Ok(Target::Emu));
        assert_eq!(
            "vfio:0000:01:00.0".parse::<Target>(),
            Ok(Target::Vfio("0000:01:00.0".to_string()))
        );
        assert!("vfio:01:00.0".parse::<Target>().is_err());
        assert!("/dev/nvme0n1".parse::<Target>().is_err());
        let Ok(Target::Tcp(a)) = "nvme-tcp://127.0.0.1:4420/testnqn?hdgst=1".parse::<Target>()
        else {
            panic!("an nvme-tcp device");
        };
        assert_eq!(
            (a.port, a.subnqn.as_str(), a.header_digest),
            (4420, "testnqn", true)
        );
        let e = "nvme-tcp://127.0.0.1:4420".parse::<Target>().unwrap_err();
        assert!(e.contains("NQN"), "{e}");
    }
}
