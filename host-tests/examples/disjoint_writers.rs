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

use pollfs_core::File;
use pollfs_driver::EmulatedDevice;
use pollfs_host_tests::cached::{dirty_every_page, fs_with_file, overwrite};

const SIZE: u64 = 64 << 20;

#[inline(never)]
fn one_write(f: &File<EmulatedDevice>, buf: &[u8], off: u64) {
    f.write_at(buf, off).unwrap();
}

fn main() {
    let writes: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000);
    let fs = fs_with_file(SIZE, false);
    dirty_every_page(&fs);
    overwrite(&fs, 2, writes, true, one_write);
    println!("writes {writes} threads 2 (disjoint halves)");
}
