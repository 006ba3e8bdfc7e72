//! `just scale`: how pollfs's costs grow with the number of files, at the
//! library (no FUSE in the way), and the same workload on any mounted
//! filesystem (ext4, xfs) through POSIX calls.
//!
//! For each file count N, each phase runs in a child process of its own,
//! so its memory figures are its own:
//!
//! 1. `create`: format a file-backed device, create N files of 100 bytes
//!    in directories of 1,000, sync; the create rate and resident memory.
//! 2. `syncs`: mount; resident memory after the mount and the mount's
//!    time; then a sync-heavy job (4 KiB random overwrites of one 64 MiB
//!    file, each followed by `sync_data`): sync p50, p99, p99.9, max, the
//!    checkpoints it wrote and the mean bytes each wrote (format 6 writes
//!    the index pages that changed; format 5 wrote the whole image), the
//!    device bytes written per sync; then a listing of every directory
//!    and a stat of every file (each inode built from the durable view,
//!    and let go again once idle): its time, the inodes still in memory
//!    and the heap after it; then the unmount's time.
//! 3. `fsck`: fsck's time and peak memory, and the checkpoint's size (the
//!    index's pages and the rest of the checkpoint's blocks).
//! 4. `bigdir`: one directory of N entries (at most 1,000,000): the mean
//!    time of a lookup and of a create in it.
//!
//! `scale posix DIR N...` runs phases 1, 2 and 4 with std::fs under DIR
//! (mount, unmount and fsck of a kernel filesystem are timed by the
//! Justfile recipe around it). Timings on a shared machine are rough:
//! compare within one run; counts and memory are steady.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs::{File as StdFile, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use pollfs_core::dev::file::FileDevice;
use pollfs_core::persist::META_FRAMES;
use pollfs_core::rng::SplitMix64;
use pollfs_core::{Config, Fs, InodeId, NewInode};

const CACHE_PAGES: u32 = 16_384;
const PER_DIR: u64 = 1000;
const SYNC_FILE: u64 = 64 << 20;
const WHO: NewInode = NewInode {
    perm: 0o644,
    uid: 0,
    gid: 0,
};

/// The table's columns after the engine and the file count: each title,
/// and the `key=value` key a phase prints its figure under.
const COLUMNS: [(&str, &str); 22] = [
    ("create/s", "create_rate"),
    ("RSS after create MB", "rss_create_mb"),
    ("heap after create MB", "heap_create_mb"),
    ("mount ms", "mount_ms"),
    ("RSS after mount MB", "rss_mount_mb"),
    ("heap after mount MB", "heap_mount_mb"),
    ("sync p50 us", "p50_us"),
    ("p99 us", "p99_us"),
    ("p99.9 us", "p999_us"),
    ("max us", "max_us"),
    ("checkpoints", "checkpoints"),
    ("KiB per checkpoint", "kib_per_checkpoint"),
    ("device KiB/sync", "kib_per_sync"),
    ("stat all ms", "stat_all_ms"),
    ("inodes in memory after stat", "inodes_after_stat"),
    ("heap after stat MB", "heap_stat_mb"),
    ("umount ms", "umount_ms"),
    ("fsck ms", "fsck_ms"),
    ("fsck peak MB", "fsck_peak_mb"),
    ("checkpoint KiB", "checkpoint_kib"),
    ("lookup in N-dir us", "bigdir_lookup_us"),
    ("create in N-dir us", "bigdir_create_us"),
];

fn usage() -> ! {
    eprintln!(
        "usage: scale pollfs DIR N [N...] | scale posix DIR N [N...]\n\
         (each N a file count; DIR holds the device file, or is the mounted filesystem;\n\
         POLLFS_SCALE_SYNCS sets the syncs of the sync job, default 20000)"
    );
    std::process::exit(2)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("pollfs") | Some("posix") if args.len() >= 4 => {
            let dir = PathBuf::from(&args[2]);
            let counts: Vec<u64> = args[3..]
                .iter()
                .map(|a| {
                    a.replace(['_', ','], "")
                        .parse()
                        .unwrap_or_else(|_| usage())
                })
                .collect();
            let titles: Vec<&str> = COLUMNS.iter().map(|c| c.0).collect();
            println!("| engine | files | {} |", titles.join(" | "));
            println!("|---|---:|{}", "---:|".repeat(COLUMNS.len()));
            for n in counts {
                row(&args[1], &dir, n);
            }
        }
        Some("phase") if args.len() == 5 => {
            let n: u64 = args[4].parse().unwrap_or_else(|_| usage());
            phase(&args[2], Path::new(&args[3]), n);
        }
        _ => usage(),
    }
}

/// Runs phase `name` in a child; its `key=value` lines.
fn child(name: &str, dir: &Path, n: u64) -> Vec<(String, String)> {
    let exe = std::env::current_exe().expect("own path");
    let out = Command::new(exe)
        .args(["phase", name])
        .arg(dir)
        .arg(n.to_string())
        .output()
        .expect("run a phase");
    if !out.status.success() {
        eprintln!("{}", String::from_utf8_lossy(&out.stderr));
        panic!("phase {name} with {n} files failed");
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn row(engine: &str, dir: &Path, n: u64) {
    let mut kv = Vec::new();
    let prefix = if engine == "pollfs" { "" } else { "posix-" };
    let mut phases = vec!["create", "syncs"];
    if engine == "pollfs" {
        phases.push("fsck");
    }
    phases.push("bigdir");
    for p in phases {
        kv.extend(child(&format!("{prefix}{p}"), dir, n));
    }
    let get = |k: &str| {
        kv.iter()
            .find(|(kk, _)| kk == k)
            .map_or("-".to_string(), |(_, v)| v.clone())
    };
    let cells: Vec<String> = COLUMNS.iter().map(|c| get(c.1)).collect();
    println!("| {engine} | {n} | {} |", cells.join(" | "));
}

/// Resident and peak resident memory of this process, in MB.
fn memory_mb() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// MiB the allocator has handed out and not had back: what the engine
/// holds, where resident memory also keeps what was freed but not
/// returned to the system (recovery's peak, say).
fn heap_mb() -> f64 {
    pollfs_host_tests::heap::in_use_bytes() as f64 / 1048576.0
}

fn device_path(dir: &Path) -> PathBuf {
    dir.join("scale.img")
}

/// Bytes of the device for `n` files: a block each, the sync file, the
/// namespace's metadata, room to spare.
fn device_bytes(n: u64) -> u64 {
    (n * 4096 * 3 + SYNC_FILE * 2 + (256 << 20)).next_multiple_of(1 << 20)
}

fn config() -> Config {
    Config {
        cache_pages: CACHE_PAGES,
        ..pollfs_hosted::config()
    }
}

fn open_device(dir: &Path, n: u64) -> FileDevice {
    FileDevice::open(
        &device_path(dir),
        device_bytes(n),
        CACHE_PAGES + META_FRAMES,
    )
    .expect("open the device file")
}

fn syncs() -> usize {
    std::env::var("POLLFS_SCALE_SYNCS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}

fn out(k: &str, v: impl std::fmt::Display) {
    println!("{k}={v}");
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}

/// p50, p99, p99.9 and max of `lat` (ns), in µs.
fn percentiles(lat: &mut [u64]) {
    lat.sort_unstable();
    let at = |q: f64| lat[((lat.len() as f64 * q) as usize).min(lat.len() - 1)] as f64 / 1e3;
    out("p50_us", format!("{:.1}", at(0.50)));
    out("p99_us", format!("{:.1}", at(0.99)));
    out("p999_us", format!("{:.1}", at(0.999)));
    out(
        "max_us",
        format!("{:.1}", *lat.last().unwrap_or(&0) as f64 / 1e3),
    );
}

fn phase(name: &str, dir: &Path, n: u64) {
    match name {
        "create" => pollfs_create(dir, n),
        "syncs" => pollfs_syncs(dir, n),
        "fsck" => pollfs_fsck(dir, n),
        "bigdir" => pollfs_bigdir(dir, n),
        "posix-create" => posix_create(dir, n),
        "posix-syncs" => posix_syncs(dir),
        "posix-bigdir" => posix_bigdir(dir, n),
        _ => usage(),
    }
}

fn pollfs_create(dir: &Path, n: u64) {
    let _ = std::fs::remove_file(device_path(dir));
    let fs = Fs::format(open_device(dir, n), config(), 0x5ca1e).expect("format");
    let s = fs.session().expect("session");
    let body = [b'x'; 100];
    let start = Instant::now();
    let mut d = InodeId::ROOT;
    for i in 0..n {
        if i % PER_DIR == 0 {
            d = fs
                .mkdir_in(InodeId::ROOT, &format!("d{}", i / PER_DIR), WHO)
                .expect("mkdir");
        }
        let f = fs.create_in(d, &format!("f{i}"), WHO).expect("create");
        s.write_all_at(&f, &body, 0).expect("write");
    }
    let sync = fs
        .create_in(InodeId::ROOT, "syncfile", WHO)
        .expect("create");
    let chunk = vec![1u8; 1 << 20];
    for off in (0..SYNC_FILE).step_by(chunk.len()) {
        s.write_all_at(&sync, &chunk, off).expect("write");
    }
    drop(sync);
    fs.sync().expect("sync");
    let took = start.elapsed();
    out(
        "create_rate",
        format!("{:.0}", n as f64 / took.as_secs_f64()),
    );
    out("rss_create_mb", format!("{:.0}", memory_mb().0));
    out("heap_create_mb", format!("{:.0}", heap_mb()));
    drop(s);
    fs.unmount().expect("unmount");
}

fn pollfs_syncs(dir: &Path, n: u64) {
    let start = Instant::now();
    let fs = Fs::mount(open_device(dir, n), config()).expect("mount");
    out("mount_ms", ms(start.elapsed()));
    out("rss_mount_mb", format!("{:.0}", memory_mb().0));
    out("heap_mount_mb", format!("{:.0}", heap_mb()));
    let s = fs.session().expect("session");
    let f = fs.open("/syncfile").expect("open");
    let before = fs.stats();
    let mut rng = SplitMix64::new(n);
    let page = [7u8; 4096];
    let count = syncs();
    let mut lat = Vec::with_capacity(count);
    for _ in 0..count {
        let off = rng.below(SYNC_FILE / 4096) * 4096;
        s.write_all_at(&f, &page, off).expect("write");
        let t = Instant::now();
        s.sync_data(&f).expect("sync");
        lat.push(t.elapsed().as_nanos() as u64);
    }
    let d = fs.stats().since(&before);
    percentiles(&mut lat);
    out("checkpoints", d.checkpoints);
    out(
        "kib_per_checkpoint",
        format!(
            "{:.1}",
            d.checkpoint_bytes as f64 / 1024.0 / d.checkpoints.max(1) as f64
        ),
    );
    out(
        "kib_per_sync",
        format!("{:.1}", d.dev_write_bytes as f64 / 1024.0 / count as f64),
    );
    drop(f);
    drop(s);
    stat_all(&fs, n);
    let start = Instant::now();
    fs.unmount().expect("unmount");
    out("umount_ms", ms(start.elapsed()));
}

/// Lists every directory and stats every file of the `create` phase:
/// each inode is built from the durable view and, being idle, leaves
/// memory again. The time, the inodes still in memory and the heap after.
fn stat_all<D: pollfs_core::dev::BlockDevice>(fs: &Fs<D>, n: u64) {
    let start = Instant::now();
    let mut seen = 0u64;
    for d in 0..n.div_ceil(PER_DIR) {
        let dir = fs
            .lookup_in(InodeId::ROOT, &format!("d{d}"))
            .expect("lookup");
        let mut after = 0;
        loop {
            let batch = fs.read_dir(dir, after, 256).expect("read_dir");
            let Some(last) = batch.last() else { break };
            after = last.cookie;
            for e in &batch {
                assert_eq!(fs.attr(e.ino).expect("attr").len, 100);
                seen += 1;
            }
        }
    }
    assert_eq!(seen, n);
    out("stat_all_ms", ms(start.elapsed()));
    out("inodes_after_stat", fs.inodes_in_memory());
    out("heap_stat_mb", format!("{:.0}", heap_mb()));
}

fn pollfs_fsck(dir: &Path, n: u64) {
    let dev = open_device(dir, n);
    let (_, peak_before) = memory_mb();
    let start = Instant::now();
    let report = pollfs_core::persist::check(
        &dev,
        pollfs_core::hosted::monotonic_clock,
        std::thread::yield_now,
    )
    .expect("fsck");
    out("fsck_ms", ms(start.elapsed()));
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let (_, peak) = memory_mb();
    out("fsck_peak_mb", format!("{:.0}", peak.max(peak_before)));
    out("checkpoint_kib", report.checkpoint_blocks * 4);
}

fn pollfs_bigdir(dir: &Path, n: u64) {
    let n = n.min(1_000_000);
    let fs = Fs::mount(open_device(dir, n), config()).expect("mount");
    let big = fs.mkdir_in(InodeId::ROOT, "big", WHO).expect("mkdir");
    for i in 0..n {
        drop(fs.create_in(big, &format!("e{i}"), WHO).expect("create"));
    }
    let mut rng = SplitMix64::new(1);
    let probes = 10_000;
    let start = Instant::now();
    for _ in 0..probes {
        fs.lookup_in(big, &format!("e{}", rng.below(n)))
            .expect("lookup");
    }
    out(
        "bigdir_lookup_us",
        format!("{:.2}", start.elapsed().as_secs_f64() * 1e6 / probes as f64),
    );
    let start = Instant::now();
    for i in 0..probes {
        drop(fs.create_in(big, &format!("new{i}"), WHO).expect("create"));
    }
    out(
        "bigdir_create_us",
        format!("{:.2}", start.elapsed().as_secs_f64() * 1e6 / probes as f64),
    );
    // Not kept: the next row formats again.
    drop(fs);
}

fn posix_create(dir: &Path, n: u64) {
    let root = dir.join("scale");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir(&root).expect("mkdir");
    let start = Instant::now();
    let mut d = root.clone();
    for i in 0..n {
        if i % PER_DIR == 0 {
            d = root.join(format!("d{}", i / PER_DIR));
            std::fs::create_dir(&d).expect("mkdir");
        }
        let mut f = StdFile::create(d.join(format!("f{i}"))).expect("create");
        f.write_all(&[b'x'; 100]).expect("write");
    }
    let f = StdFile::create(root.join("syncfile")).expect("create");
    let chunk = vec![1u8; 1 << 20];
    for off in (0..SYNC_FILE).step_by(chunk.len()) {
        f.write_all_at(&chunk, off).expect("write");
    }
    nix_sync();
    let took = start.elapsed();
    out(
        "create_rate",
        format!("{:.0}", n as f64 / took.as_secs_f64()),
    );
}

fn nix_sync() {
    let _ = Command::new("sync").status();
}

fn posix_syncs(dir: &Path) {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(dir.join("scale/syncfile"))
        .expect("open");
    let mut rng = SplitMix64::new(9);
    let page = [7u8; 4096];
    let count = syncs();
    let mut lat = Vec::with_capacity(count);
    for _ in 0..count {
        let off = rng.below(SYNC_FILE / 4096) * 4096;
        f.write_all_at(&page, off).expect("write");
        let t = Instant::now();
        f.sync_data().expect("fdatasync");
        lat.push(t.elapsed().as_nanos() as u64);
    }
    percentiles(&mut lat);
}

fn posix_bigdir(dir: &Path, n: u64) {
    let n = n.min(1_000_000);
    let big = dir.join("scale/big");
    let _ = std::fs::remove_dir_all(&big);
    std::fs::create_dir(&big).expect("mkdir");
    for i in 0..n {
        StdFile::create(big.join(format!("e{i}"))).expect("create");
    }
    let mut rng = SplitMix64::new(1);
    let probes = 10_000;
    let start = Instant::now();
    for _ in 0..probes {
        std::fs::symlink_metadata(big.join(format!("e{}", rng.below(n)))).expect("lookup");
    }
    out(
        "bigdir_lookup_us",
        format!("{:.2}", start.elapsed().as_secs_f64() * 1e6 / probes as f64),
    );
    let start = Instant::now();
    for i in 0..probes {
        StdFile::create(big.join(format!("new{i}"))).expect("create");
    }
    out(
        "bigdir_create_us",
        format!("{:.2}", start.elapsed().as_secs_f64() * 1e6 / probes as f64),
    );
}
