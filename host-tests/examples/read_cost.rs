//! Cached 4 KiB reads of a 4 MiB file through `File::read_at`, the path
//! that borrows the calling thread's session, for
//! `valgrind --tool=callgrind --toggle-collect='read_cost::one_read*'`:
//! the instructions per read, which do not depend on the machine's speed.
//!
//! `read_cost [reads]`. Every page is read once before measuring, so every
//! read finds its page cached: the steady state of `pollfs bench --rw
//! randread` on a file that fits the cache.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use pollfs_core::{Config, File, Fs};
use pollfs_driver::{EmulatedDevice, NvmeDevice};
use pollfs_host_tests::rng::Rng;

const BS: usize = 4096;
const SIZE: u64 = 4 << 20;
const BLOCKS: u64 = SIZE / BS as u64;

#[inline(never)]
fn one_read(f: &File<EmulatedDevice>, buf: &mut [u8], off: u64) {
    f.read_at(buf, off).unwrap();
}

fn main() {
    let reads: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    let pages = BLOCKS as u32 + 64;
    let dev = NvmeDevice::emulated(SIZE + (16 << 20), 4096, pages).unwrap();
    let config = Config {
        cache_pages: pages,
        ..pollfs_core::hosted::config()
    };
    let fs = Fs::new(dev, config).unwrap();
    let f = fs.create("f").unwrap();
    f.write_all_at(&vec![0xa5u8; SIZE as usize], 0).unwrap();
    f.sync_data().unwrap();
    let mut buf = vec![0u8; BS];
    for off in (0..SIZE).step_by(BS) {
        f.read_exact_at(&mut buf, off).unwrap();
    }
    let mut rng = Rng::new(7);
    for _ in 0..reads {
        one_read(&f, &mut buf, rng.below(BLOCKS) * BS as u64);
    }
    println!("reads {reads}");
}
