//! The sysfs and procfs facts `setup` reads and the files it writes, all
//! below one root directory so the logic can be tested against a fake tree.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

pub use pollfs_device::spec::valid_pci_address;

/// A view of the host's sysfs and procfs under `root` (`/` normally).
#[derive(Clone, Debug)]
pub struct Host {
    root: PathBuf,
}

impl Host {
    /// The tree under `root`.
    pub fn new(root: impl Into<PathBuf>) -> Host {
        Host { root: root.into() }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// The PCI function's sysfs directory.
    pub fn device(&self, addr: &str) -> PathBuf {
        self.path("sys/bus/pci/devices").join(addr)
    }

    /// Whether the effective user is root, from `/proc/self/status`
    /// ("Uid: real effective saved fs").
    pub fn is_root(&self) -> io::Result<bool> {
        let status = fs::read_to_string(self.path("proc/self/status"))?;
        Ok(status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|l| l.split_whitespace().nth(1))
            == Some("0"))
    }

    /// The IOMMU group number, if the device has one.
    pub fn iommu_group(&self, addr: &str) -> Option<String> {
        let link = fs::read_link(self.device(addr).join("iommu_group")).ok()?;
        Some(link.file_name()?.to_string_lossy().into_owned())
    }

    /// The name of the driver the device is bound to, if any.
    pub fn driver(&self, addr: &str) -> Option<String> {
        let link = fs::read_link(self.device(addr).join("driver")).ok()?;
        Some(link.file_name()?.to_string_lossy().into_owned())
    }

    /// Whether a driver of that name is registered (its module loaded).
    pub fn has_driver(&self, name: &str) -> bool {
        self.path("sys/bus/pci/drivers").join(name).is_dir()
    }

    /// The block devices of the controller's namespaces and their
    /// partitions (`nvme0n1`, `nvme0n1p1`, ...), as the kernel nvme driver
    /// lays them out: `<device>/nvme/nvmeX/nvmeXnY/nvmeXnYpZ`.
    pub fn block_devices(&self, addr: &str) -> Vec<String> {
        let mut out = Vec::new();
        for ctrl in entries(&self.device(addr).join("nvme")) {
            for ns in entries(&ctrl) {
                let name = file_name(&ns);
                if !name.contains('n') || !name.starts_with("nvme") || !ns.join("dev").exists() {
                    continue;
                }
                for part in entries(&ns) {
                    let p = file_name(&part);
                    if p.starts_with(&name) && part.join("dev").exists() {
                        out.push(p);
                    }
                }
                out.push(name);
            }
        }
        out.sort();
        out
    }

    /// Mount points of `/dev/<name>` for any of `names`, from /proc/mounts.
    pub fn mounts_of(&self, names: &[String]) -> io::Result<Vec<(String, String)>> {
        let mounts = fs::read_to_string(self.path("proc/mounts"))?;
        Ok(mounts
            .lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                let dev = f.next()?.strip_prefix("/dev/")?;
                let at = f.next()?;
                names
                    .iter()
                    .any(|n| n == dev)
                    .then(|| (dev.to_string(), at.to_string()))
            })
            .collect())
    }

    /// Writes `value` to a sysfs attribute below the root.
    pub fn write(&self, rel: &Path, value: &str) -> io::Result<()> {
        fs::write(self.root.join(rel), value)
    }

    /// The number of reserved 2 MiB hugepages.
    pub fn hugepages(&self) -> io::Result<u64> {
        let s = fs::read_to_string(self.path(HUGEPAGES))?;
        s.trim()
            .parse()
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "nr_hugepages"))
    }
}

/// The 2 MiB hugepage pool, relative to the root.
pub const HUGEPAGES: &str = "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages";

fn entries(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default()
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}
