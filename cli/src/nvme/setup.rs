//! `pollfs setup PCI_ADDR`: hands an NVMe controller to vfio-pci so the
//! driver can own it from user space, and reserves hugepages;
//! `pollfs setup --reset PCI_ADDR` gives it back to the kernel's nvme
//! driver. Binding uses `driver_override` + `drivers_probe`, which (unlike
//! `new_id`) affects only this one function.
//!
//! Taking a controller away from the kernel while one of its namespaces
//! is mounted would pull a filesystem out from under the kernel, so that
//! is refused, as is anything that cannot work (no IOMMU group, not root).

use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::anyhow;
use clap::Args as ClapArgs;

use super::sysfs::{valid_pci_address, Host, HUGEPAGES};

/// Asks the PCI core to find a driver for a device, relative to the root.
/// (Not reached through the device's directory: that is a symlink, and
/// `..` would follow its target.)
const PROBE: &str = "sys/bus/pci/drivers_probe";

/// Arguments of `pollfs setup`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// PCI address of the controller, e.g. 0000:01:00.0.
    pub pci_addr: String,
    /// Give the controller back to the kernel's nvme driver.
    #[arg(long)]
    pub reset: bool,
    /// 2 MiB hugepages to have reserved (the pool only grows).
    #[arg(long, default_value_t = 64)]
    pub hugepages: u64,
    /// Root of the sysfs/procfs tree (for tests).
    #[arg(long, default_value = "/", hide = true)]
    pub root: PathBuf,
}

/// Why setup refused or failed.
#[derive(Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SetupError {
    /// The address is not `dddd:bb:dd.f`.
    BadAddress(String),
    /// Binding drivers needs root.
    NotRoot,
    /// No such PCI function.
    NoDevice(String),
    /// The function has no IOMMU group: no IOMMU, or it is off.
    NoIommuGroup(String),
    /// A namespace of the controller is mounted.
    Mounted {
        /// The block device.
        dev: String,
        /// Where it is mounted.
        at: String,
    },
    /// The named driver is not loaded.
    DriverMissing(&'static str),
    /// After probing, the device is not bound to the wanted driver.
    NotBound {
        /// The wanted driver.
        want: &'static str,
        /// What it is bound to instead.
        got: Option<String>,
    },
    /// A sysfs or procfs access failed.
    Io(String),
}

impl fmt::Display for SetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SetupError::BadAddress(a) => write!(f, "{a}: not a PCI address (dddd:bb:dd.f)"),
            SetupError::NotRoot => write!(f, "binding drivers needs root (run with sudo)"),
            SetupError::NoDevice(a) => write!(f, "{a}: no such PCI device"),
            SetupError::NoIommuGroup(a) => write!(
                f,
                "{a}: no IOMMU group; enable the IOMMU (intel_iommu=on or amd_iommu=on, and VT-d/AMD-Vi in firmware)"
            ),
            SetupError::Mounted { dev, at } => write!(
                f,
                "/dev/{dev} is mounted on {at}; unmount it before taking the controller from the kernel"
            ),
            SetupError::DriverMissing(d) => write!(f, "driver {d} is not loaded (modprobe {d})"),
            SetupError::NotBound { want, got } => write!(
                f,
                "device did not bind to {want} (bound to {})",
                got.as_deref().unwrap_or("nothing")
            ),
            SetupError::Io(e) => write!(f, "{e}"),
        }
    }
}

fn io(what: &Path) -> impl FnOnce(std::io::Error) -> SetupError + '_ {
    move |e| SetupError::Io(format!("{}: {e}", what.display()))
}

/// Runs `pollfs setup`.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let host = Host::new(&args.root);
    let done = if args.reset {
        release(&host, &args.pci_addr)
    } else {
        bind(&host, &args.pci_addr, args.hugepages)
    };
    for line in done.map_err(|e| anyhow!("{e}"))? {
        println!("{line}");
    }
    Ok(())
}

fn checks(host: &Host, addr: &str) -> Result<PathBuf, SetupError> {
    if !valid_pci_address(addr) {
        return Err(SetupError::BadAddress(addr.to_string()));
    }
    if !host
        .is_root()
        .map_err(|e| SetupError::Io(format!("/proc/self/status: {e}")))?
    {
        return Err(SetupError::NotRoot);
    }
    let dev = host.device(addr);
    if !dev.exists() {
        return Err(SetupError::NoDevice(addr.to_string()));
    }
    Ok(dev)
}

/// Binds `addr` to vfio-pci and grows the hugepage pool to `hugepages`.
/// Returns what it did, for the user.
pub fn bind(host: &Host, addr: &str, hugepages: u64) -> Result<Vec<String>, SetupError> {
    let dev = checks(host, addr)?;
    let Some(group) = host.iommu_group(addr) else {
        return Err(SetupError::NoIommuGroup(addr.to_string()));
    };
    if !host.has_driver("vfio-pci") {
        return Err(SetupError::DriverMissing("vfio-pci"));
    }
    let mut done = Vec::new();
    let current = host.driver(addr);
    if current.as_deref() != Some("vfio-pci") {
        if current.as_deref() == Some("nvme") {
            let blocks = host.block_devices(addr);
            let mounts = host
                .mounts_of(&blocks)
                .map_err(|e| SetupError::Io(format!("/proc/mounts: {e}")))?;
            if let Some((dev, at)) = mounts.into_iter().next() {
                return Err(SetupError::Mounted { dev, at });
            }
        }
        if let Some(d) = &current {
            let unbind = dev.join("driver/unbind");
            host.write(&unbind, addr).map_err(io(&unbind))?;
            done.push(format!("{addr}: unbound from {d}"));
        }
        let ov = dev.join("driver_override");
        host.write(&ov, "vfio-pci").map_err(io(&ov))?;
        let probe = Path::new(PROBE);
        host.write(probe, addr).map_err(io(probe))?;
        let got = host.driver(addr);
        if got.as_deref() != Some("vfio-pci") {
            return Err(SetupError::NotBound {
                want: "vfio-pci",
                got,
            });
        }
    }
    done.push(format!(
        "{addr}: bound to vfio-pci, IOMMU group {group} (/dev/vfio/{group})"
    ));
    let have = host.hugepages().unwrap_or(0);
    if have < hugepages {
        let p = Path::new(HUGEPAGES);
        host.write(p, &hugepages.to_string()).map_err(io(p))?;
        let now = host.hugepages().unwrap_or(0);
        if now < hugepages {
            done.push(format!(
                "hugepages: only {now} of {hugepages} 2 MiB pages could be reserved"
            ));
        } else {
            done.push(format!("hugepages: {now} x 2 MiB reserved"));
        }
    } else {
        done.push(format!("hugepages: {have} x 2 MiB already reserved"));
    }
    Ok(done)
}

/// Gives `addr` back to the kernel's nvme driver.
pub fn release(host: &Host, addr: &str) -> Result<Vec<String>, SetupError> {
    let dev = checks(host, addr)?;
    let mut done = Vec::new();
    let ov = dev.join("driver_override");
    // An empty override lets the normal driver match again.
    host.write(&ov, "\n").map_err(io(&ov))?;
    match host.driver(addr) {
        Some(d) if d == "nvme" => {
            done.push(format!("{addr}: already bound to nvme"));
            return Ok(done);
        }
        Some(d) => {
            let unbind = dev.join("driver/unbind");
            host.write(&unbind, addr).map_err(io(&unbind))?;
            done.push(format!("{addr}: unbound from {d}"));
        }
        None => {}
    }
    if !host.has_driver("nvme") {
        return Err(SetupError::DriverMissing("nvme"));
    }
    let probe = Path::new(PROBE);
    host.write(probe, addr).map_err(io(probe))?;
    let got = host.driver(addr);
    if got.as_deref() != Some("nvme") {
        return Err(SetupError::NotBound { want: "nvme", got });
    }
    done.push(format!("{addr}: bound to nvme"));
    Ok(done)
}
