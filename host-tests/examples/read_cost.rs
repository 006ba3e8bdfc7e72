//! Cached 4 KiB reads of a 4 MiB file, for counting instructions per read:
//! `read_cost [reads] [words]` makes a fixed number of random reads through
//! the `#[inline(never)]` function `one_read`, for
//! `valgrind --tool=callgrind --toggle-collect='read_cost::one_read*'`
//! (`just read-cost`): instructions per cached read, the page copy
//! included, which do not depend on the machine's speed.
//!
//! The emulated controller's DMA memory is page-locked memory by default;
//! with `words` it is kept as atomic words and accessed by VFIO memory's
//! own code (`EmuMemory::with_split_reads`, as `io_cost split`), so the
//! count is a real controller's: its page copy is `WordView`'s.
//!
//! Every page is read once before counting, so every counted read finds
//! its page in the cache: the bench's steady state for a 4 MiB file.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use pollfs_core::{Config, File, Fs};
use pollfs_driver::EmulatedDevice;
use pollfs_host_tests::cached::{emulated, Memory};
use pollfs_host_tests::rng::Rng;

const BS: usize = 4096;
const SIZE: u64 = 4 << 20;
const BLOCKS: u64 = SIZE / BS as u64;

fn fs_with_file(memory: Memory) -> (Fs<EmulatedDevice>, File<EmulatedDevice>) {
    let pages = BLOCKS as u32;
    let dev = emulated(SIZE + (16 << 20), pages + 64, memory);
    let config = Config {
        cache_pages: pages + 64,
        ..pollfs_hosted::config()
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
    let mut args = std::env::args().skip(1);
    let reads: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let memory = match args.next() {
        None => Memory::Locked,
        Some(arg) => Memory::parse(&arg).unwrap_or_else(|| {
            eprintln!("read_cost: memory {arg:?}: give `locked` (the default) or `words`");
            std::process::exit(2);
        }),
    };
    let (_fs, f) = fs_with_file(memory);
    let mut buf = vec![0u8; BS];
    let mut rng = Rng::new(7);
    let mut total = 0usize;
    for _ in 0..reads {
        total += one_read(&f, &mut buf, rng.below(BLOCKS) * BS as u64);
    }
    assert_eq!(total as u64, reads * BS as u64);
    println!("reads {reads}");
}
