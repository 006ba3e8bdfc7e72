//! `pollfs mkfs` and `pollfs fsck`.

use std::path::Path;

use pollfs_core::dev::file::FileDevice;
use pollfs_core::dev::BlockDevice;
use pollfs_core::hosted::{config, monotonic_clock};
use pollfs_core::Fs;

/// Options of `pollfs mkfs`.
#[derive(clap::Args, Debug)]
pub struct MkfsArgs {
    /// The device: `file:PATH` (created if missing) or `vfio:PCI_ADDR`.
    device: String,
    /// Size for a new device file, e.g. `1g` (an existing file keeps its size).
    #[arg(long, default_value = "256m")]
    size: String,
}

/// Options of `pollfs fsck`.
#[derive(clap::Args, Debug)]
pub struct FsckArgs {
    /// The device: `file:PATH` or `vfio:PCI_ADDR`.
    device: String,
}

/// Frames a tool needs: a small cache plus the metadata frames.
const FRAMES: u32 = 256;

fn file_device(path: &str, bytes: Option<u64>) -> Result<FileDevice, String> {
    let existing = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let bytes = match bytes {
        Some(b) => b.max(existing),
        None if existing > 0 => existing,
        None => return Err(format!("{path}: no such device file")),
    };
    FileDevice::open(Path::new(path), bytes, FRAMES).map_err(|e| format!("{path}: {e}"))
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

fn uuid() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    t ^ (u64::from(std::process::id()) << 40)
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

/// Writes an empty filesystem.
pub fn mkfs(args: &MkfsArgs) -> Result<(), String> {
    if let Some(path) = args.device.strip_prefix("file:") {
        return mkfs_on(
            file_device(
                path,
                Some(
                    crate::units::parse_size(&args.size)
                        .map_err(|e| format!("--size {}: {e}", e.input()))?,
                ),
            )?,
            path,
        );
    }
    #[cfg(target_os = "linux")]
    if let Some(addr) = args.device.strip_prefix("vfio:") {
        return mkfs_on(vfio_device(addr)?, addr);
    }
    Err(format!(
        "unknown device '{}': use file:PATH or vfio:PCI_ADDR",
        args.device
    ))
}

fn fsck_on<D: BlockDevice>(dev: &D, what: &str) -> Result<(), String> {
    let report = pollfs_core::persist::check(dev, monotonic_clock, std::thread::yield_now)
        .map_err(|e| format!("{what}: {e}"))?;
    for n in &report.notes {
        println!("{what}: note: {n}");
    }
    for p in &report.problems {
        println!("{what}: PROBLEM: {p}");
    }
    println!(
        "{what}: {} files, {} data blocks in use, {} log writes replayed, {} problems",
        report.files,
        report.blocks_used,
        report.log_writes,
        report.problems.len()
    );
    if report.problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{what}: the filesystem has {} problem(s)",
            report.problems.len()
        ))
    }
}

/// Checks a filesystem; fails if it has any problem.
pub fn fsck(args: &FsckArgs) -> Result<(), String> {
    if let Some(path) = args.device.strip_prefix("file:") {
        return fsck_on(&file_device(path, None)?, path);
    }
    #[cfg(target_os = "linux")]
    if let Some(addr) = args.device.strip_prefix("vfio:") {
        return fsck_on(&vfio_device(addr)?, addr);
    }
    Err(format!(
        "unknown device '{}': use file:PATH or vfio:PCI_ADDR",
        args.device
    ))
}
