//! Cached 4 KiB reads of a 4 MiB file, for counting instructions per read:
//! `read_cost [reads]` makes a fixed number of random reads through the
//! `#[inline(never)]` function `one_read`, for
//! `valgrind --tool=callgrind --toggle-collect='read_cost::one_read*'`
//! (`just read-cost`): instructions per cached read, the page copy
//! included, which do not depend on the machine's speed.
//!
//! Every page is read once before counting, so every counted read finds
//! its page in the cache: the bench's steady state for a 4 MiB file.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use pollfs_core::{Config, File, Fs};
use pollfs_driver::{EmulatedDevice, NvmeDevice};
use pollfs_host_tests::rng::Rng;

const BS: usize = 4096;
const SIZE: u64 = 4 << 20;
const BLOCKS: u64 = SIZE / BS as u64;

fn fs_with_file() -> (Fs<EmulatedDevice>, File<EmulatedDevice>) {
    let pages = BLOCKS as u32;
    let dev = NvmeDevice::emulated(SIZE + (16 << 20), 4096, pages + 64).unwrap();
    let config = Config {
        cache_pages: pages + 64,
        ..pollfs_core::hosted::config()
    };
    let fs = Fs::new(dev, config).unwrap();
    let f = fs.create("f").unwrap();
    let chunk = vec![0xa5u8; 1 << 20];
    for off in (0..SIZE).step_by(chunk.len()) {
        f.write_all_at(&chunk, off).unwrap();
    }
    f.sync_data().unwrap();
    let mut buf = vec![0u8; BS];
    for off in (0..SIZE).step_by(BS) {
        f.read_exact_at(&mut buf, off).unwrap();
    }
    (fs, f)
}

#[inline(never)]
fn one_read(f: &File<EmulatedDevice>, buf: &mut [u8], off: u64) -> usize {
    f.read_at(buf, off).unwrap()
}

fn main() {
    let reads: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    let (_fs, f) = fs_with_file();
    let mut buf = vec![0u8; BS];
    let mut rng = Rng::new(7);
    let mut total = 0usize;
    for _ in 0..reads {
        total += one_read(&f, &mut buf, rng.below(BLOCKS) * BS as u64);
    }
    assert_eq!(total as u64, reads * BS as u64);
    println!("reads {reads}");
}
