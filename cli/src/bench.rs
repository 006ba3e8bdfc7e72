//! `pollfs bench`: the same random mix run by pollfs, by pollfs with a
//! file-wide lock, and by the kernel (pread/pwrite through its page cache),
//! one after another in one process, so the ratios are measured under the
//! same conditions.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use pollfs_core::dev::file::FileDevice;
use pollfs_core::dev::ram::RamDevice;
use pollfs_core::dev::BlockDevice;
use pollfs_core::Fs;
use pollfs_driver::NvmeDevice;

/// Options of `pollfs bench`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Seconds each engine runs.
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// Threads per engine.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// File size, in MiB.
    #[arg(long, default_value_t = 64)]
    size_mib: u64,
    /// Block size of each I/O, in bytes.
    #[arg(long, default_value_t = 4096)]
    bs: usize,
    /// Percentage of reads in the mix.
    #[arg(long, default_value_t = 50)]
    read_pct: u64,
    /// Device: `emu` (the emulated NVMe controller, driven by the real
    /// driver), `ram` (memory-backed, no driver) or `file:PATH`.
    #[arg(long, default_value = "emu")]
    device: String,
    /// Directory for the kernel baseline's file (tmpfs by default).
    #[arg(long, default_value = "/dev/shm")]
    kernel_dir: PathBuf,
    /// Run only pollfs (no baselines).
    #[arg(long)]
    pollfs_only: bool,
}

/// A result row.
struct Row {
    engine: String,
    ops: u64,
    secs: f64,
    /// Counters worth a look, printed under the table.
    note: String,
}

impl Row {
    fn iops(&self) -> f64 {
        self.ops as f64 / self.secs
    }
}

/// A tiny seeded generator (SplitMix64), one per thread.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// Runs `op(thread, rng, is_read, offset)` on `threads` threads for
/// `seconds` and returns the total operation count and elapsed seconds.
fn drive<S: Sync>(
    args: &Args,
    state: &S,
    op: impl Fn(&S, &mut dyn FnMut() -> Option<(bool, u64)>) -> Result<u64, String> + Sync,
) -> Result<(u64, f64), String> {
    let stop = AtomicBool::new(false);
    let blocks = args.size_mib * (1 << 20) / args.bs as u64;
    let start = Instant::now();
    let total = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..args.threads)
            .map(|t| {
                let stop = &stop;
                let op = &op;
                scope.spawn(move || {
                    let mut rng = Rng(t as u64 * 7919 + 1);
                    let mut next = || {
                        if stop.load(Ordering::Relaxed) {
                            return None;
                        }
                        let r = rng.next();
                        let is_read = r % 100 < args.read_pct;
                        Some((is_read, (r >> 8) % blocks * args.bs as u64))
                    };
                    op(state, &mut next)
                })
            })
            .collect();
        std::thread::sleep(Duration::from_secs_f64(args.seconds));
        stop.store(true, Ordering::Relaxed);
        let mut total = 0;
        for h in handles {
            total += h
                .join()
                .map_err(|_| "a bench thread panicked".to_string())??;
        }
        Ok::<u64, String>(total)
    })?;
    Ok((total, start.elapsed().as_secs_f64()))
}

fn run_pollfs<D: BlockDevice>(args: &Args, dev: D, file_lock: bool) -> Result<Row, String> {
    let size = args.size_mib << 20;
    let pages = u32::try_from(size / 4096).map_err(|_| "file too large")?;
    // The whole file fits in the cache and may be dirty, as in the kernel
    // baseline, whose dirty limits are far above this file's size.
    let config = pollfs_core::Config {
        cache_pages: pages + 64,
        dirty_limit_pages: pages,
        file_lock,
        ..pollfs_core::hosted::config()
    };
    let fs = Fs::new(dev, config).map_err(|e| e.to_string())?;
    {
        let s = fs.session().map_err(|e| e.to_string())?;
        let f = s.create("bench").map_err(|e| e.to_string())?;
        let chunk = vec![0x5au8; 1 << 20];
        for off in (0..size).step_by(chunk.len()) {
            f.write_all_at(&chunk, off).map_err(|e| e.to_string())?;
        }
        f.sync_data().map_err(|e| e.to_string())?;
    }
    let before = fs.stats();
    let (ops, secs) = drive(args, &fs, |fs, next| {
        let s = fs.session().map_err(|e| e.to_string())?;
        let f = s.open("bench").map_err(|e| e.to_string())?;
        let mut buf = vec![0u8; args.bs];
        let mut n = 0;
        while let Some((is_read, off)) = next() {
            if is_read {
                f.read_at(&mut buf, off).map_err(|e| e.to_string())?;
            } else {
                f.write_at(&buf, off).map_err(|e| e.to_string())?;
            }
            n += 1;
        }
        Ok(n)
    })?;
    let engine = if file_lock { "pollfs-locked" } else { "pollfs" };
    let d = fs.stats().since(&before);
    let per_op = |n: u64| n as f64 / ops.max(1) as f64;
    let note = format!(
        "hit rate {:.3}, lock waits/op {:.4}, device reads/op {:.4}, writes/op {:.4}, throttles {}",
        d.hit_rate(),
        per_op(d.lock_waits),
        per_op(d.dev_reads),
        per_op(d.dev_writes),
        d.dirty_throttles
    );
    Ok(Row {
        engine: engine.into(),
        ops,
        secs,
        note,
    })
}

fn run_kernel(args: &Args, dir: &Path) -> Result<Row, String> {
    let size = args.size_mib << 20;
    let path = dir.join(format!("pollfs-bench-{}", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let chunk = vec![0x5au8; 1 << 20];
    for off in (0..size).step_by(chunk.len()) {
        file.write_all_at(&chunk, off).map_err(|e| e.to_string())?;
    }
    let result = drive(args, &file, |file, next| {
        let mut buf = vec![0u8; args.bs];
        let mut n = 0;
        while let Some((is_read, off)) = next() {
            if is_read {
                file.read_exact_at(&mut buf, off)
                    .map_err(|e| e.to_string())?;
            } else {
                file.write_all_at(&buf, off).map_err(|e| e.to_string())?;
            }
            n += 1;
        }
        Ok(n)
    });
    let _ = std::fs::remove_file(&path);
    let (ops, secs) = result?;
    Ok(Row {
        engine: format!("kernel ({})", dir.display()),
        ops,
        secs,
        note: String::new(),
    })
}

fn device_run(args: &Args, file_lock: bool) -> Result<Row, String> {
    let size = args.size_mib << 20;
    let frames = u32::try_from(size / 4096 + 64).map_err(|_| "file too large")?;
    let bytes = size + (16 << 20);
    match args.device.as_str() {
        "emu" => {
            let dev = NvmeDevice::emulated(bytes, 4096, frames).map_err(|e| e.to_string())?;
            run_pollfs(args, dev, file_lock)
        }
        "ram" => run_pollfs(
            args,
            RamDevice::new(bytes, 4096, frames).map_err(|e| e.to_string())?,
            file_lock,
        ),
        other => match other.strip_prefix("file:") {
            Some(path) => {
                let dev = FileDevice::open(Path::new(path), bytes, frames)
                    .map_err(|e| format!("{path}: {e}"))?;
                run_pollfs(args, dev, file_lock)
            }
            None => Err(format!(
                "unknown device '{other}' (use emu, ram or file:PATH)"
            )),
        },
    }
}

/// Runs the bench and prints the table.
pub fn run(args: &Args) -> Result<(), String> {
    if args.bs == 0
        || args.bs as u64 > args.size_mib << 20
        || args.threads == 0
        || args.read_pct > 100
    {
        return Err("need bs > 0, bs <= file size, threads > 0 and read_pct <= 100".into());
    }
    println!(
        "pollfs bench: {} B random I/O, {}% reads, {} MiB cached file, {} thread(s), {:.1} s per engine, device {}",
        args.bs, args.read_pct, args.size_mib, args.threads, args.seconds, args.device
    );
    let mut rows = vec![device_run(args, false)?];
    if !args.pollfs_only {
        rows.push(device_run(args, true)?);
        let dir = if args.kernel_dir.is_dir() {
            args.kernel_dir.clone()
        } else {
            std::env::temp_dir()
        };
        rows.push(run_kernel(args, &dir)?);
    }
    let base = rows.last().map_or(1.0, Row::iops);
    println!(
        "{:<22} {:>14} {:>12} {:>12}",
        "engine", "IOPS", "MiB/s", "vs last row"
    );
    for r in &rows {
        println!(
            "{:<22} {:>14.0} {:>12.1} {:>11.2}x",
            r.engine,
            r.iops(),
            r.iops() * args.bs as f64 / f64::from(1 << 20),
            r.iops() / base
        );
    }
    for r in rows.iter().filter(|r| !r.note.is_empty()) {
        println!("  {}: {}", r.engine, r.note);
    }
    Ok(())
}
