//! Two writer threads on disjoint halves of one 64 MiB file: what they
//! share on the write path, counted in a way that does not depend on the
//! machine's speed.
//!
//! `disjoint_writers [writes]` makes `writes` cached 4 KiB overwrites,
//! half on each of two threads, each at random pages of its own half of
//! the file, through the `#[inline(never)]` function `one_write`. Run it
//! (release build) under
//! `valgrind --tool=callgrind --collect-bus=yes --collect-atstart=no --toggle-collect='disjoint_writers::one_write*'`
//! and read the profile with `callgrind_annotate --sort=Ge`: callgrind's
//! `Ge` counts the atomic read-modify-write instructions per write, each
//! one a line the writing core must own exclusively, and the per-function
//! profile says whose they are.
//!
//! Callgrind cannot see plain stores to a line both threads write (a
//! lock's request list, say): the extent lock's unit tests hold that its
//! stripes keep their requests inside their own padded slots.
//!
//! Every page is written once before the run, so every counted write finds
//! its page cached and already dirty (the steady state of the
//! `overwrite_4k_64MiB` bench).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use pollfs_core::{Config, File, Fs};
use pollfs_driver::{EmulatedDevice, NvmeDevice};
use pollfs_host_tests::rng::Rng;

const BS: usize = 4096;
const SIZE: u64 = 64 << 20;
const BLOCKS: u64 = SIZE / BS as u64;

fn fs_with_file() -> Fs<EmulatedDevice> {
    let pages = BLOCKS as u32;
    let dev = NvmeDevice::emulated(SIZE + (16 << 20), 4096, pages + 64).unwrap();
    let config = Config {
        cache_pages: pages + 64,
        dirty_limit_pages: pages,
        ..pollfs_core::hosted::config()
    };
    let fs = Fs::new(dev, config).unwrap();
    let f = fs.create("f").unwrap();
    let chunk = vec![0xa5u8; 1 << 20];
    for off in (0..SIZE).step_by(chunk.len()) {
        f.write_all_at(&chunk, off).unwrap();
    }
    f.sync_data().unwrap();
    for off in (0..SIZE).step_by(BS) {
        f.write_at(&chunk[..BS], off).unwrap();
    }
    fs
}

#[inline(never)]
fn one_write(f: &File<EmulatedDevice>, buf: &[u8], off: u64) {
    f.write_at(buf, off).unwrap();
}

fn main() {
    let writes: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000);
    let fs = fs_with_file();
    let half = BLOCKS / 2;
    std::thread::scope(|scope| {
        for t in 0..2u64 {
            let fs = &fs;
            scope.spawn(move || {
                let f = fs.open("f").unwrap();
                let buf = vec![t as u8; BS];
                let mut rng = Rng::new(t + 7);
                for _ in 0..writes / 2 {
                    let page = t * half + rng.below(half);
                    one_write(&f, &buf, page * BS as u64);
                }
            });
        }
    });
    println!("writes {writes} threads 2 (disjoint halves)");
}
