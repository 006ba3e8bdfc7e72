//! Cached 4 KiB overwrites of a 64 MiB file by 1 and 2 threads (the
//! criterion bench `overwrite_4k_64MiB`), for two kinds of measurement:
//!
//! - `write_cost time [rounds]`: both thread counts in one run, alternated
//!   `rounds` times, printing each round's ns per write and the ratio of
//!   2-thread to 1-thread throughput, beside the same for plain 4 KiB
//!   copies into 64 MiB of memory (the ceiling the machine allows).
//! - `write_cost count THREADS [writes] [locked|words]`: a fixed number of
//!   writes through the `#[inline(never)]` function `one_write`, for
//!   `valgrind --tool=callgrind --collect-bus=yes --toggle-collect='write_cost::one_write*'`:
//!   instructions and atomic read-modify-write instructions (callgrind's
//!   `Ge`) per write, which do not depend on the machine's speed. With
//!   `words` the DMA memory is accessed as VFIO memory is
//!   (`cached::Memory::Words`).
//!
//! Every page is written once before measuring, so every write finds its
//! page cached and already dirty: the bench's steady state.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use pollfs_core::units::PAGE_SIZE as BS;
use pollfs_core::File;
use pollfs_driver::EmulatedDevice;
use pollfs_host_tests::cached::{dirty_every_page, fs_with_file_on, overwrite, Memory};
use pollfs_host_tests::rng::Rng;

const SIZE: u64 = 64 << 20;

#[inline(never)]
fn one_write(f: &File<EmulatedDevice>, buf: &[u8], off: u64) {
    f.write_at(buf, off).unwrap();
}

/// The same pattern on plain memory: `writes` random 4 KiB copies into a
/// 64 MiB buffer split over `threads` threads (each its own share of the
/// buffer, so no line is written by both), the ceiling the machine puts on
/// the file's ratio.
fn memcpy(mem: &mut [u8], threads: u64, writes: u64) -> Duration {
    let start = Instant::now();
    let share = mem.len() / threads as usize;
    std::thread::scope(|scope| {
        for (t, part) in mem.chunks_mut(share).enumerate() {
            scope.spawn(move || {
                let buf = vec![t as u8; BS];
                let mut rng = Rng::new(t as u64 + 7);
                let blocks = (part.len() / BS) as u64;
                for _ in 0..writes / threads {
                    let at = rng.below(blocks) as usize * BS;
                    part[at..at + BS].copy_from_slice(&buf);
                    std::hint::black_box(&part[at]);
                }
            });
        }
    });
    start.elapsed()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let memory = match args.get(3).filter(|_| args[0] == "count") {
        None => Memory::Locked,
        Some(arg) => Memory::parse(arg).unwrap_or_else(|| {
            eprintln!("write_cost: memory {arg:?}: give `locked` (the default) or `words`");
            std::process::exit(2);
        }),
    };
    let fs = fs_with_file_on(SIZE, false, memory);
    dirty_every_page(&fs);
    match args.first().map(String::as_str) {
        Some("count") => {
            let threads = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(1);
            let writes = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(20_000);
            overwrite(&fs, threads, writes, false, one_write);
            println!("writes {writes} threads {threads}");
        }
        _ => {
            let rounds: u32 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(5);
            let writes = 1_000_000;
            // Warm both paths (threads, sessions) before timing.
            overwrite(&fs, 1, writes / 10, false, one_write);
            overwrite(&fs, 2, writes / 10, false, one_write);
            let mut mem = vec![0x5au8; SIZE as usize];
            for r in 0..rounds {
                let per = |d: Duration| d.as_nanos() as f64 / writes as f64;
                let one = per(overwrite(&fs, 1, writes, false, one_write));
                let two = per(overwrite(&fs, 2, writes, false, one_write));
                let m1 = per(memcpy(&mut mem, 1, writes));
                let m2 = per(memcpy(&mut mem, 2, writes));
                println!(
                    "round {r}: 1 thread {one:.0} ns/write, 2 threads {two:.0} ns/write, ratio {:.2}; \
                     memcpy {m1:.0} and {m2:.0} ns, ratio {:.2}",
                    one / two,
                    m1 / m2
                );
            }
        }
    }
}
