//! `setup` against a fake sysfs/procfs tree.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use super::setup::{bind, release, SetupError};
use super::sysfs::Host;

const ADDR: &str = "0000:01:00.0";

/// Removes a fake root's tree when the test ends, passed or failed.
struct Tree(PathBuf);

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A fresh fake root: one NVMe function in IOMMU group 7, both drivers
/// registered, root user, nothing mounted; and its tree's remover.
fn fake(driver: Option<&str>) -> (PathBuf, Tree) {
    static N: AtomicU32 = AtomicU32::new(0);
    let root = std::env::temp_dir().join(format!(
        "pollfs-setup-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = fs::remove_dir_all(&root);
    let dev = root.join("sys/bus/pci/devices").join(ADDR);
    fs::create_dir_all(&dev).unwrap();
    fs::create_dir_all(root.join("sys/kernel/iommu_groups/7")).unwrap();
    symlink(
        root.join("sys/kernel/iommu_groups/7"),
        dev.join("iommu_group"),
    )
    .unwrap();
    for d in ["nvme", "vfio-pci"] {
        fs::create_dir_all(root.join("sys/bus/pci/drivers").join(d)).unwrap();
        fs::write(root.join("sys/bus/pci/drivers").join(d).join("unbind"), "").unwrap();
    }
    if let Some(d) = driver {
        symlink(root.join("sys/bus/pci/drivers").join(d), dev.join("driver")).unwrap();
    }
    fs::write(dev.join("driver_override"), "(null)\n").unwrap();
    fs::write(root.join("sys/bus/pci/drivers_probe"), "").unwrap();
    fs::create_dir_all(root.join("sys/kernel/mm/hugepages/hugepages-2048kB")).unwrap();
    fs::write(root.join(super::sysfs::HUGEPAGES), "0\n").unwrap();
    fs::create_dir_all(root.join("proc/self")).unwrap();
    fs::write(
        root.join("proc/self/status"),
        "Name:\tpollfs\nUid:\t0\t0\t0\t0\n",
    )
    .unwrap();
    fs::write(
        root.join("proc/mounts"),
        "proc /proc proc rw 0 0\n/dev/sda1 / ext4 rw 0 0\n",
    )
    .unwrap();
    (root.clone(), Tree(root))
}

/// The kernel nvme driver's namespace and partition directories.
fn add_namespace(root: &Path) {
    let ns = root
        .join("sys/bus/pci/devices")
        .join(ADDR)
        .join("nvme/nvme0/nvme0n1");
    fs::create_dir_all(ns.join("nvme0n1p2")).unwrap();
    fs::write(ns.join("dev"), "259:0\n").unwrap();
    fs::write(ns.join("nvme0n1p2/dev"), "259:2\n").unwrap();
}

/// What the kernel would do on drivers_probe: bind to the override.
fn pretend_probe(root: &Path, to: &str) {
    let link = root.join("sys/bus/pci/devices").join(ADDR).join("driver");
    let _ = fs::remove_file(&link);
    symlink(root.join("sys/bus/pci/drivers").join(to), link).unwrap();
}

fn read(root: &Path, rel: &str) -> String {
    fs::read_to_string(root.join(rel)).unwrap()
}

#[test]
fn not_root_is_refused() {
    let (root, _tree) = fake(Some("nvme"));
    fs::write(root.join("proc/self/status"), "Uid:\t0\t1000\t1000\t1000\n").unwrap();
    assert_eq!(bind(&Host::new(&root), ADDR, 0), Err(SetupError::NotRoot));
    assert!(SetupError::NotRoot.to_string().contains("root"));
}

#[test]
fn missing_device_and_bad_address() {
    let (root, _tree) = fake(None);
    let host = Host::new(&root);
    assert_eq!(
        bind(&host, "0000:02:00.0", 0),
        Err(SetupError::NoDevice("0000:02:00.0".into()))
    );
    assert!(matches!(
        bind(&host, "2:00.0", 0),
        Err(SetupError::BadAddress(_))
    ));
}

#[test]
fn no_iommu_group_is_explained() {
    let (root, _tree) = fake(Some("nvme"));
    fs::remove_file(
        root.join("sys/bus/pci/devices")
            .join(ADDR)
            .join("iommu_group"),
    )
    .unwrap();
    let e = bind(&Host::new(&root), ADDR, 0).unwrap_err();
    assert_eq!(e, SetupError::NoIommuGroup(ADDR.into()));
    assert!(e.to_string().contains("intel_iommu=on"));
}

#[test]
fn mounted_partition_is_refused_and_nothing_is_written() {
    let (root, _tree) = fake(Some("nvme"));
    add_namespace(&root);
    fs::write(
        root.join("proc/mounts"),
        "/dev/sda1 / ext4 rw 0 0\n/dev/nvme0n1p2 /data xfs rw 0 0\n",
    )
    .unwrap();
    let e = bind(&Host::new(&root), ADDR, 0).unwrap_err();
    assert_eq!(
        e,
        SetupError::Mounted {
            dev: "nvme0n1p2".into(),
            at: "/data".into()
        }
    );
    assert_eq!(read(&root, "sys/bus/pci/drivers/nvme/unbind"), "");
    assert_eq!(read(&root, "sys/bus/pci/drivers_probe"), "");
}

#[test]
fn unmounted_controller_is_unbound_overridden_and_probed() {
    let (root, _tree) = fake(Some("nvme"));
    add_namespace(&root);
    // The fake kernel does not react to writes, so the device stays on
    // nvme and bind reports that honestly.
    let e = bind(&Host::new(&root), ADDR, 0).unwrap_err();
    assert_eq!(
        e,
        SetupError::NotBound {
            want: "vfio-pci",
            got: Some("nvme".into())
        }
    );
    assert_eq!(read(&root, "sys/bus/pci/drivers/nvme/unbind"), ADDR);
    let dev = format!("sys/bus/pci/devices/{ADDR}");
    assert_eq!(read(&root, &format!("{dev}/driver_override")), "vfio-pci");
    assert_eq!(read(&root, "sys/bus/pci/drivers_probe"), ADDR);
}

#[test]
fn bound_device_gets_hugepages_and_reports_its_group() {
    let (root, _tree) = fake(None);
    pretend_probe(&root, "vfio-pci");
    let done = bind(&Host::new(&root), ADDR, 32).unwrap();
    assert!(done.iter().any(|l| l.contains("IOMMU group 7")), "{done:?}");
    assert_eq!(read(&root, super::sysfs::HUGEPAGES), "32");
}

#[test]
fn missing_vfio_driver_is_explained() {
    let (root, _tree) = fake(Some("nvme"));
    fs::remove_dir_all(root.join("sys/bus/pci/drivers/vfio-pci")).unwrap();
    let e = bind(&Host::new(&root), ADDR, 0).unwrap_err();
    assert_eq!(e, SetupError::DriverMissing("vfio-pci"));
}

#[test]
fn reset_clears_the_override_and_probes_for_nvme() {
    let (root, _tree) = fake(Some("vfio-pci"));
    let e = release(&Host::new(&root), ADDR).unwrap_err();
    assert!(matches!(e, SetupError::NotBound { want: "nvme", .. }));
    assert_eq!(read(&root, "sys/bus/pci/drivers/vfio-pci/unbind"), ADDR);
    assert_eq!(
        read(
            &root,
            &format!("sys/bus/pci/devices/{ADDR}/driver_override")
        ),
        "\n"
    );
    assert_eq!(read(&root, "sys/bus/pci/drivers_probe"), ADDR);
    pretend_probe(&root, "nvme");
    let done = release(&Host::new(&root), ADDR).unwrap();
    assert!(done[0].contains("already bound to nvme"));
}
