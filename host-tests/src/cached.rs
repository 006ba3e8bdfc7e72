//! One cached file and random 4 KiB overwrites of it: the setup and the
//! loop that the criterion bench `overwrite_4k_64MiB` (`benches/cache.rs`)
//! and the cost examples (`examples/write_cost.rs`,
//! `examples/disjoint_writers.rs`) share, so that what the examples count
//! under callgrind is what the bench times; and the emulated device over
//! either kind of DMA memory ([`Memory`]) for the read examples.

use std::time::{Duration, Instant};

use pollfs_core::units::PAGE_SIZE;
use pollfs_core::{Config, File, Fs};
use pollfs_driver::emu::StdClock;
use pollfs_driver::{
    DriverConfig, EmuConfig, EmuController, EmuMemory, EmulatedDevice, NvmeDevice, PcieTransport,
};

use crate::rng::Rng;

/// The file every workload here writes.
pub const FILE: &str = "f";

/// The emulated controller's DMA memory, where the page cache's frames
/// live and every cached read and write copies its page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Memory {
    /// Plain bytes in page-locked pages (`EmuMemory::new`).
    Locked,
    /// Atomic words read and written by VFIO memory's own code
    /// (`EmuMemory::with_split_reads`): a real controller's memory path.
    Words,
}

impl Memory {
    /// The memory an example's argument names: `locked` or `words`.
    pub fn parse(arg: &str) -> Option<Memory> {
        match arg {
            "locked" => Some(Memory::Locked),
            "words" => Some(Memory::Words),
            _ => None,
        }
    }
}

/// The driver on an emulated controller over a zeroed namespace of
/// `bytes` bytes in 4 KiB blocks, with `frames` page-cache frames in
/// `memory`.
pub fn emulated(bytes: u64, frames: u32, memory: Memory) -> EmulatedDevice {
    match memory {
        Memory::Locked => NvmeDevice::emulated(bytes, 4096, frames).unwrap(),
        Memory::Words => {
            let emu = EmuConfig {
                bytes,
                block_size: 4096,
                ..EmuConfig::default()
            };
            let memory = EmuMemory::with_split_reads();
            let ctrl = EmuController::new(emu, memory.clone());
            let transport = PcieTransport::new(ctrl, memory);
            NvmeDevice::new(transport, StdClock::new(), DriverConfig::default(), frames).unwrap()
        }
    }
}

/// A filesystem on the emulated NVMe controller holding [`FILE`], `size`
/// bytes of 0xa5, written and synced, with a cache that holds every page
/// of it and lets every page be dirty at once. `file_lock` as in
/// [`Config`].
pub fn fs_with_file(size: u64, file_lock: bool) -> Fs<EmulatedDevice> {
    fs_with_file_on(size, file_lock, Memory::Locked)
}

/// As [`fs_with_file`], the cache's frames in `memory`.
pub fn fs_with_file_on(size: u64, file_lock: bool, memory: Memory) -> Fs<EmulatedDevice> {
    let pages = (size / PAGE_SIZE as u64) as u32;
    let dev = emulated(size + (16 << 20), pages + 64, memory);
    let config = Config {
        cache_pages: pages + 64,
        dirty_limit_pages: pages,
        file_lock,
        ..pollfs_hosted::config()
    };
    let fs = Fs::new(dev, config).unwrap();
    let f = fs.create(FILE).unwrap();
    let chunk = vec![0xa5u8; 1 << 20];
    for off in (0..size).step_by(chunk.len()) {
        f.write_all_at(&chunk, off).unwrap();
    }
    f.sync_data().unwrap();
    fs
}

/// Overwrites every page of [`FILE`] once, unsynced, so that every later
/// overwrite finds its page cached and already dirty: the steady state of
/// the overwrite bench.
pub fn dirty_every_page(fs: &Fs<EmulatedDevice>) {
    let f = fs.open(FILE).unwrap();
    let page = vec![0xa5u8; PAGE_SIZE];
    for off in (0..f.len()).step_by(PAGE_SIZE) {
        f.write_at(&page, off).unwrap();
    }
}

/// `writes` overwrites of random pages of [`FILE`], split over `threads`
/// threads, each through `write` (the examples pass an `#[inline(never)]`
/// function for callgrind to count between); the time they took.
/// Thread `t` writes pages of byte `t` from a generator seeded `t + 7`,
/// within the file or, with `disjoint`, within its own `1/threads` share
/// of it.
pub fn overwrite(
    fs: &Fs<EmulatedDevice>,
    threads: u64,
    writes: u64,
    disjoint: bool,
    write: fn(&File<EmulatedDevice>, &[u8], u64),
) -> Duration {
    let start = Instant::now();
    std::thread::scope(|scope| {
        for t in 0..threads {
            scope.spawn(move || {
                let f = fs.open(FILE).unwrap();
                let pages = f.len() / PAGE_SIZE as u64;
                let (first, span) = if disjoint {
                    (t * (pages / threads), pages / threads)
                } else {
                    (0, pages)
                };
                let buf = vec![t as u8; PAGE_SIZE];
                let mut rng = Rng::new(t + 7);
                for _ in 0..writes / threads {
                    let page = first + rng.below(span);
                    write(&f, &buf, page * PAGE_SIZE as u64);
                }
            });
        }
    });
    start.elapsed()
}
