//! `pollfs mkfs` and `pollfs fsck`.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use crate::progress::{Metered, Spinner};
use anyhow::bail;
use pollfs_core::dev::BlockDevice;
use pollfs_core::hosted::{config, monotonic_clock};
use pollfs_core::Fs;
use pollfs_device::units::parse_size;
use pollfs_device::{
    file, new_uuid, Access, DeviceJob, DeviceSpec, Leaf, OpenError, OpenErrorKind, DEFAULT_SIZE,
};

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
    device: DeviceSpec,
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
    device: DeviceSpec,
    /// Repair what can be repaired: a log with a damaged write in its middle
    /// (what precedes the damage is kept), extents outside the data area or
    /// past EOF, blocks owned twice, a damaged superblock copy. Without it,
    /// fsck only checks and changes nothing.
    #[arg(long)]
    repair: bool,
}

/// Frames a tool needs: a small cache plus the metadata frames.
const FRAMES: u32 = 256;

/// Writes an empty filesystem. Every check is made before the first
/// write; files made for it are removed again if it fails.
pub fn mkfs(args: &MkfsArgs) -> anyhow::Result<()> {
    let spec = &args.device;
    if let Some(l) = spec.memory_leg() {
        bail!("{spec}: {l} lives in memory and keeps nothing after mkfs");
    }
    let size = args
        .size
        .as_deref()
        .map(parse_size)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--size {}: {e}", e.input()))?;
    if let Some(size) = size {
        // A size is for the files mkfs makes: every other device keeps its
        // own.
        for leaf in spec.legs() {
            let fixed = match leaf {
                Leaf::File(path) => file::inspect(path)
                    .ok()
                    .flatten()
                    .filter(|e| e.len != size)
                    .map(|e| Some(e.len)),
                _ => Some(None),
            };
            if let Some(bytes) = fixed {
                return Err(OpenError::new(leaf, OpenErrorKind::SizeFixed { bytes }).into());
            }
        }
    }
    let options = pollfs_device::OpenOptions {
        size: size.unwrap_or(DEFAULT_SIZE),
        create: true,
        ..crate::device::options(Access::Format { force: args.force }, FRAMES)
    };
    pollfs_device::run(spec, &options, Mkfs)
}

struct Mkfs;

impl DeviceJob for Mkfs {
    type Output = ();
    type Error = anyhow::Error;
    fn run<D: BlockDevice>(self, dev: D, what: &str) -> anyhow::Result<()> {
        let cfg = pollfs_core::Config {
            cache_pages: 64,
            ..config()
        };
        let fs = Fs::format(dev, cfg, new_uuid())
            .map_err(|e| OpenError::new(what, OpenErrorKind::Fs(e)))?;
        println!(
            "{what}: pollfs filesystem, {} data blocks of 4 KiB free",
            fs.free_blocks()
        );
        Ok(())
    }
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

/// Checks (or repairs) the filesystem on `dev`; `spinner` is cleared
/// before anything is printed.
fn fsck_on<D: BlockDevice>(
    dev: &D,
    what: &str,
    repair: bool,
    spinner: Spinner,
) -> anyhow::Result<()> {
    let report = if repair {
        let r = pollfs_core::persist::repair(dev, monotonic_clock, std::thread::yield_now);
        drop(spinner);
        let r = r.map_err(|e| anyhow::anyhow!("{what}: cannot repair: {e}"))?;
        for fixed in &r.repaired {
            println!("{what}: repaired: {fixed}");
        }
        if r.repaired.is_empty() {
            println!("{what}: nothing needed repair");
        }
        r.after
    } else {
        let r = pollfs_core::persist::check(dev, monotonic_clock, std::thread::yield_now);
        drop(spinner);
        r.map_err(|e| anyhow::anyhow!("{what}: {e}"))?
    };
    print_report(what, &report);
    if !report.problems.is_empty() {
        bail!(
            "{what}: the filesystem has {} problem(s){}",
            report.problems.len(),
            if repair {
                " that repair could not fix"
            } else {
                "; `pollfs fsck --repair` may fix them"
            }
        );
    }
    Ok(())
}

/// `fsck` on any device; it is opened for writing only to repair.
struct Fsck {
    repair: bool,
}

impl DeviceJob for Fsck {
    type Output = ();
    type Error = anyhow::Error;
    fn run<D: BlockDevice>(self, dev: D, what: &str) -> anyhow::Result<()> {
        let moved = Arc::new(AtomicU64::new(0));
        let dev = Metered::new(dev, moved.clone());
        let doing = if self.repair { "repairing" } else { "checking" };
        let spinner = Spinner::start(&format!("{what}: {doing}"), moved);
        fsck_on(&dev, what, self.repair, spinner)
    }
}

/// Checks a filesystem (and with `--repair`, repairs it); fails if it has
/// any problem left.
pub fn fsck(args: &FsckArgs) -> anyhow::Result<()> {
    let spec = &args.device;
    if let Some(l) = spec.memory_leg() {
        return Err(OpenError::new(l, OpenErrorKind::NothingThere).into());
    }
    // Repair writes; a check only reads, beside other checks.
    let access = if args.repair {
        Access::Write
    } else {
        Access::Read
    };
    let options = crate::device::options(access, FRAMES);
    pollfs_device::run(
        spec,
        &options,
        Fsck {
            repair: args.repair,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use pollfs_device::signature::Found;
    use pollfs_device::{SpecError, SpecProblem};
    use pollfs_driver::tcp::target::{TargetConfig, TestTarget};

    fn kind(e: anyhow::Error) -> OpenErrorKind {
        e.downcast::<OpenError>().unwrap().kind
    }

    #[test]
    fn mkfs_and_fsck_work_over_nvme_tcp_and_refuse_to_overwrite() {
        let t = TestTarget::start(TargetConfig::default()).unwrap();
        let device: DeviceSpec = t.url(true, false).parse().unwrap();
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
        assert!(matches!(
            kind(mkfs(&args).unwrap_err()),
            OpenErrorKind::HoldsData(Found::Pollfs)
        ));
        let with_size = mkfs(&MkfsArgs {
            size: Some("1g".into()),
            force: true,
            ..args
        });
        assert!(matches!(
            kind(with_size.unwrap_err()),
            OpenErrorKind::SizeFixed { bytes: None }
        ));
        let bad = "nvme-tcp://127.0.0.1:1/".parse::<DeviceSpec>();
        assert!(matches!(
            bad,
            Err(SpecError {
                problem: SpecProblem::Tcp(_),
                ..
            })
        ));
    }

    #[test]
    fn mkfs_makes_a_file_keeps_an_existing_size_and_fsck_reads_it() {
        let p = std::env::temp_dir().join(format!("pollfs-tools-{}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        let device: DeviceSpec = format!("file:{}", p.display()).parse().unwrap();
        let args = MkfsArgs {
            device: device.clone(),
            size: Some("64m".into()),
            force: false,
        };
        mkfs(&args).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 64 << 20);
        let other_size = MkfsArgs {
            size: Some("128m".into()),
            force: true,
            ..args
        };
        assert!(matches!(
            kind(mkfs(&other_size).unwrap_err()),
            OpenErrorKind::SizeFixed { bytes: Some(b) } if b == 64 << 20
        ));
        fsck(&FsckArgs {
            device,
            repair: false,
        })
        .unwrap();
        let memory = FsckArgs {
            device: "mirror:(emu,emu)".parse().unwrap(),
            repair: false,
        };
        assert!(matches!(
            kind(fsck(&memory).unwrap_err()),
            OpenErrorKind::NothingThere
        ));
        std::fs::remove_file(&p).unwrap();
    }
}
