//! `pollfs mkfs` and `pollfs fsck`.

use std::path::Path;

use pollfs_core::dev::file::FileDevice;
use pollfs_core::dev::BlockDevice;
use pollfs_core::hosted::{config, monotonic_clock};
use pollfs_core::persist::format::Layout;
use pollfs_core::Fs;

use crate::units::{parse_size, show_bytes};
use crate::volume::{self, Open, Volume, VolumeJob};
use crate::{devfile, devlock, signature};

/// Options of `pollfs mkfs`.
#[derive(clap::Args, Debug)]
pub struct MkfsArgs {
    /// The device: `file:PATH`, `vfio:PCI_ADDR`, `nvme-tcp://HOST:PORT/NQN`
    /// (`?hdgst=1&ddgst=1` for digests), or a volume of them,
    /// `mirror:(DEV,DEV,...)` or `stripe:CHUNK:(DEV,DEV,...)` (a `,`, `(`,
    /// `)` or `\` in a leg's name is written with a `\` before it). A
    /// file that does not exist is created at `--size` (each new leg of a
    /// volume, too); an existing file or block device keeps its size. A device that holds anything (a filesystem, a partition
    /// table, swap, any non-zero byte in its first 68 KiB) is refused
    /// unless `--force` is given.
    device: String,
    /// Size of a new device file, e.g. `1g` (k/m/g/t suffixes, powers of
    /// 1024) [default: 256m]. Only for a file that does not exist yet.
    #[arg(long)]
    size: Option<String>,
    /// Write over a device that holds data or another filesystem.
    #[arg(long)]
    force: bool,
}

/// Options of `pollfs fsck`.
#[derive(clap::Args, Debug)]
pub struct FsckArgs {
    /// The device: `file:PATH`, `vfio:PCI_ADDR`, `nvme-tcp://HOST:PORT/NQN`,
    /// `mirror:(DEV,DEV,...)` or `stripe:CHUNK:(DEV,DEV,...)`. A mirror is
    /// read from the legs in sync (after an unclean shutdown, from one of
    /// them).
    device: String,
    /// Repair what can be repaired: a log with a damaged write in its middle
    /// (what precedes the damage is kept), extents outside the data area or
    /// past EOF, blocks owned twice, a damaged superblock copy. Without it,
    /// fsck only checks and changes nothing.
    #[arg(long)]
    repair: bool,
}

/// Frames a tool needs: a small cache plus the metadata frames.
const FRAMES: u32 = 256;
/// Size of a new device file when `--size` is not given.
const DEFAULT_SIZE: u64 = 256 << 20;
const BLOCK: u64 = 4096;

/// The message for a device too small to hold a filesystem.
fn too_small(what: &str, bytes: u64) -> String {
    let min = Layout::min_blocks();
    format!(
        "{what}: {} is too small for a pollfs filesystem, which needs at least {} \
         ({min} blocks of 4 KiB)",
        show_bytes(bytes),
        show_bytes(min * BLOCK)
    )
}

fn open_file(path: &Path, bytes: u64) -> Result<FileDevice, String> {
    FileDevice::open(path, bytes, FRAMES).map_err(|e| format!("file:{}: {e}", path.display()))
}

/// An existing device file, at its own size.
fn existing_file(path: &Path) -> Result<FileDevice, String> {
    let existing = devfile::inspect(path)?
        .ok_or_else(|| format!("file:{}: no such device file", path.display()))?;
    open_file(path, existing.len)
}

#[cfg(target_os = "linux")]
fn vfio_device(addr: &str) -> Result<pollfs_driver::vfio::VfioDevice, String> {
    pollfs_driver::NvmeDevice::vfio(
        addr,
        Default::default(),
        FRAMES,
        pollfs_driver::emu::StdClock::new(),
    )
    .map_err(|e| format!("{addr}: {e} (is it bound to vfio-pci? see `pollfs setup {addr}`)"))
}

/// A new filesystem's uuid, different on every call: a format must never
/// take the log an earlier filesystem left on the device (the bench
/// formats one device once per phase) for its own.
pub(crate) fn uuid() -> u64 {
    static MADE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let made = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    t ^ (u64::from(std::process::id()) << 40) ^ made.wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

fn mkfs_on<D: BlockDevice>(dev: D, what: &str) -> Result<(), String> {
    let cfg = pollfs_core::Config {
        cache_pages: 64,
        ..config()
    };
    let fs = Fs::format(dev, cfg, uuid()).map_err(|e| format!("{what}: {e}"))?;
    println!(
        "{what}: pollfs filesystem, {} data blocks of 4 KiB free",
        fs.free_blocks()
    );
    Ok(())
}

/// `mkfs file:PATH`: every check is made before the first write, and a
/// file created here is removed again if formatting fails.
fn mkfs_file(path: &Path, args: &MkfsArgs) -> Result<(), String> {
    let what = format!("file:{}", path.display());
    let size = args
        .size
        .as_deref()
        .map(parse_size)
        .transpose()
        .map_err(|e| format!("--size {}: {e}", e.input()))?;
    let min_blocks = Layout::min_blocks();
    match devfile::inspect(path)? {
        Some(existing) => {
            if size.is_some_and(|s| s != existing.len) {
                return Err(format!(
                    "{what}: exists ({}); mkfs keeps an existing file's size, so --size is \
                     only for a new file",
                    show_bytes(existing.len)
                ));
            }
            if existing.len / BLOCK < min_blocks {
                return Err(format!(
                    "{}; mkfs keeps an existing file's size",
                    too_small(&what, existing.len)
                ));
            }
            let _lock = devlock::lock(path, true)?;
            signature::refuse_unless_forced(&what, &existing.head, args.force)?;
            mkfs_on(open_file(path, existing.len)?, &what)
        }
        None => {
            let size = size.unwrap_or(DEFAULT_SIZE);
            if size / BLOCK < min_blocks {
                return Err(too_small(&what, size));
            }
            let created = devfile::Created::new(path, size)?;
            let _lock = devlock::lock(path, true)?;
            mkfs_on(open_file(path, size)?, &what)?;
            created.keep();
            Ok(())
        }
    }
}

/// `mkfs` on a volume: each leg is checked as a device would be (a leg
/// that holds anything is refused without `--force`), new `file:` legs are
/// made at `--size`, and a mirror gets new headers before the filesystem.
struct MkfsVolume<'a> {
    args: &'a MkfsArgs,
}

impl VolumeJob for MkfsVolume<'_> {
    type Output = ();
    fn check_leg<D: BlockDevice>(&mut self, leg: &D, what: &str) -> Result<(), String> {
        let capacity = leg.geometry().capacity_pages();
        if capacity < Layout::min_blocks() {
            return Err(too_small(what, capacity * BLOCK));
        }
        let head = signature::read_device_head(leg).map_err(|e| format!("{what}: {e}"))?;
        signature::refuse_unless_forced(what, &head, self.args.force)
    }
    fn run<D: BlockDevice>(self, dev: D, what: &str) -> Result<(), String> {
        let capacity = dev.geometry().capacity_pages();
        if capacity < Layout::min_blocks() {
            return Err(too_small(what, capacity * BLOCK));
        }
        mkfs_on(dev, what)
    }
}

fn mkfs_volume(args: &MkfsArgs) -> Result<(), String> {
    let volume = Volume::parse(&args.device)?;
    if let Some(l) = volume.legs.iter().find(|l| l.in_memory()) {
        return Err(format!("{}: leg {l} keeps nothing after mkfs", args.device));
    }
    let size = args
        .size
        .as_deref()
        .map(parse_size)
        .transpose()
        .map_err(|e| format!("--size {}: {e}", e.input()))?;
    let open = Open {
        bytes: size.unwrap_or(DEFAULT_SIZE),
        create: true,
        make: volume.chunk.is_none().then(uuid),
        writable: true,
        ..Open::existing(FRAMES)
    };
    volume::run(&volume, &args.device, &open, MkfsVolume { args })
}

/// `mkfs` on an NVMe device: every check before the first write.
fn mkfs_nvme<D: BlockDevice>(dev: D, what: &str, args: &MkfsArgs) -> Result<(), String> {
    if args.size.is_some() {
        return Err("--size is only for a new device file".into());
    }
    let capacity = dev.geometry().capacity_pages();
    if capacity < Layout::min_blocks() {
        return Err(too_small(what, capacity * BLOCK));
    }
    let head = signature::read_device_head(&dev).map_err(|e| format!("{what}: {e}"))?;
    signature::refuse_unless_forced(what, &head, args.force)?;
    mkfs_on(dev, what)
}

fn tcp_device(name: &str) -> Result<pollfs_driver::tcp::net::TcpDevice, String> {
    let address = crate::nvme::parse_tcp(name)?;
    crate::nvme::tcp_device(&address, Default::default(), FRAMES)
}

/// Writes an empty filesystem.
pub fn mkfs(args: &MkfsArgs) -> Result<(), String> {
    if volume::is_volume(&args.device) {
        return mkfs_volume(args);
    }
    if let Some(path) = args.device.strip_prefix("file:") {
        return mkfs_file(Path::new(path), args);
    }
    if pollfs_driver::tcp::TcpAddress::is_tcp(&args.device) {
        return mkfs_nvme(tcp_device(&args.device)?, &args.device, args);
    }
    #[cfg(target_os = "linux")]
    if let Some(addr) = args.device.strip_prefix("vfio:") {
        if args.size.is_some() {
            return Err("--size is only for a new device file".into());
        }
        return mkfs_nvme(vfio_device(addr)?, &format!("vfio:{addr}"), args);
    }
    Err(format!(
        "unknown device '{}': use file:PATH, vfio:PCI_ADDR, nvme-tcp://HOST:PORT/NQN, \
         mirror:(DEV,DEV,...) or stripe:CHUNK:(DEV,DEV,...)",
        args.device
    ))
}

fn print_report(what: &str, report: &pollfs_core::persist::CheckReport) {
    for n in &report.notes {
        println!("{what}: note: {n}");
    }
    for p in &report.problems {
        println!("{what}: PROBLEM: {p}");
    }
    println!(
        "{what}: {} files, {} data blocks in use, {} checkpoint blocks, {} log writes replayed, \
         {} pages of data in the log, {} problems",
        report.files,
        report.blocks_used,
        report.checkpoint_blocks,
        report.log_writes,
        report.data_pages,
        report.problems.len()
    );
}

fn fsck_on<D: BlockDevice>(dev: &D, what: &str, repair: bool) -> Result<(), String> {
    let report = if repair {
        let r = pollfs_core::persist::repair(dev, monotonic_clock, std::thread::yield_now)
            .map_err(|e| format!("{what}: cannot repair: {e}"))?;
        for fixed in &r.repaired {
            println!("{what}: repaired: {fixed}");
        }
        if r.repaired.is_empty() {
            println!("{what}: nothing needed repair");
        }
        r.after
    } else {
        pollfs_core::persist::check(dev, monotonic_clock, std::thread::yield_now)
            .map_err(|e| format!("{what}: {e}"))?
    };
    print_report(what, &report);
    if report.problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{what}: the filesystem has {} problem(s){}",
            report.problems.len(),
            if repair {
                " that repair could not fix"
            } else {
                "; `pollfs fsck --repair` may fix them"
            }
        ))
    }
}

/// `fsck` on a volume; a mirror is opened for writing only to repair.
struct FsckVolume {
    repair: bool,
}

impl VolumeJob for FsckVolume {
    type Output = ();
    fn run<D: BlockDevice>(self, dev: D, what: &str) -> Result<(), String> {
        fsck_on(&dev, what, self.repair)
    }
}

/// Checks a filesystem (and with `--repair`, repairs it); fails if it has
/// any problem left.
pub fn fsck(args: &FsckArgs) -> Result<(), String> {
    if volume::is_volume(&args.device) {
        let volume = Volume::parse(&args.device)?;
        if let Some(l) = volume.legs.iter().find(|l| l.in_memory()) {
            return Err(format!("{}: leg {l} holds no filesystem", args.device));
        }
        let open = Open {
            writable: args.repair,
            ..Open::existing(FRAMES)
        };
        let job = FsckVolume {
            repair: args.repair,
        };
        return volume::run(&volume, &args.device, &open, job);
    }
    if let Some(path) = args.device.strip_prefix("file:") {
        let dev = existing_file(Path::new(path))?;
        // Repair writes; a check only reads, beside other checks.
        let _lock = devlock::lock(Path::new(path), args.repair)?;
        return fsck_on(&dev, path, args.repair);
    }
    if pollfs_driver::tcp::TcpAddress::is_tcp(&args.device) {
        return fsck_on(&tcp_device(&args.device)?, &args.device, args.repair);
    }
    #[cfg(target_os = "linux")]
    if let Some(addr) = args.device.strip_prefix("vfio:") {
        return fsck_on(&vfio_device(addr)?, addr, args.repair);
    }
    Err(format!(
        "unknown device '{}': use file:PATH, vfio:PCI_ADDR, nvme-tcp://HOST:PORT/NQN, \
         mirror:(DEV,DEV,...) or stripe:CHUNK:(DEV,DEV,...)",
        args.device
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pollfs_driver::tcp::target::{TargetConfig, TestTarget};

    #[test]
    fn mkfs_and_fsck_work_over_nvme_tcp_and_refuse_to_overwrite() {
        let t = TestTarget::start(TargetConfig::default()).unwrap();
        let device = t.url(true, false);
        let args = MkfsArgs {
            device: device.clone(),
            size: None,
            force: false,
        };
        mkfs(&args).unwrap();
        fsck(&FsckArgs {
            device: device.clone(),
            repair: false,
        })
        .unwrap();
        let again = mkfs(&args).unwrap_err();
        assert!(again.contains("pollfs"), "{again}");
        let with_size = mkfs(&MkfsArgs {
            size: Some("1g".into()),
            force: true,
            ..args
        });
        assert!(with_size.unwrap_err().contains("--size"));
        let bad = fsck(&FsckArgs {
            device: "nvme-tcp://127.0.0.1:1/".into(),
            repair: false,
        });
        assert!(bad.unwrap_err().contains("NQN"));
    }
}
