//! The 4 MiB cached 4 KiB random read against memcpy, measured so that a
//! busy machine still gives a usable ratio: `read_ratio [rounds]
//! [offset]` alternates batches of 2,000 reads through `File::read_at`
//! (the file of the criterion bench `cached_read_4k/pollfs/4MiB`, built by
//! [`fs_with_file`]) with batches of 2,000 copies of a 4 KiB page at a
//! random offset of one 4 MiB `Vec` (`cached_read_4k/memcpy/4MiB`), and
//! prints the per-read time of each at the fastest batch, the first
//! quartile and the median, with memcpy's time over pollfs's at each.
//!
//! Criterion times one function after the other, so load that comes and
//! goes between them moves its ratio; here both see the same load, batch
//! by batch. On a quiet machine the criterion bench is the reference.
//!
//! Both copies land in one destination buffer, a `vec![0u8; 4096]` as in
//! the bench, or, given `offset`, a buffer starting `offset` bytes into a
//! 4 KiB page. Its place moves the ratio by itself: the page-cache frames
//! are page-aligned (as in a VFIO arena) and the memcpy source starts 16
//! bytes past a page (the allocator's header of a large `Vec`), so a
//! destination co-aligned with one source is off by 16 bytes against the
//! other, and the copy that is off runs slower.
//!
//! Given `words` (anywhere after `rounds`), a second file system whose
//! DMA memory is kept as atomic words and copied by VFIO memory's own
//! code (`cached::Memory::Words`, a real controller's memory path) is
//! read in batches of its own between the two, and its time and ratio are
//! printed too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::Instant;

use pollfs_host_tests::cached::{fs_with_file, fs_with_file_on, Memory, FILE};
use pollfs_host_tests::rng::Rng;

const BS: usize = 4096;
const SIZE: u64 = 4 << 20;
const BLOCKS: u64 = SIZE / BS as u64;
const BATCH: u32 = 2000;

/// Nanoseconds per operation of one batch of `BATCH` calls of `op`.
fn batch(mut op: impl FnMut()) -> f64 {
    let start = Instant::now();
    for _ in 0..BATCH {
        op();
    }
    start.elapsed().as_nanos() as f64 / f64::from(BATCH)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(500);
    let (mut offset, mut words) = (None, false);
    for arg in args {
        match (arg.parse::<usize>(), Memory::parse(&arg)) {
            (Ok(o), _) => offset = Some(o),
            (_, Some(Memory::Words)) => words = true,
            _ => {
                eprintln!("read_ratio: {arg:?}: give [rounds] [offset] [words]");
                std::process::exit(2);
            }
        }
    }
    let fs = fs_with_file(SIZE, false);
    let f = fs.open(FILE).unwrap();
    let vfio = words.then(|| fs_with_file_on(SIZE, false, Memory::Words));
    let vfio_file = vfio.as_ref().map(|fs| fs.open(FILE).unwrap());
    let src = vec![0xa5u8; SIZE as usize];
    let mut backing = vec![0u8; BS + offset.map_or(0, |_| 2 * BS)];
    let skip = offset.map_or(0, |o| (BS + o % BS - backing.as_ptr() as usize % BS) % BS);
    let buf = &mut backing[skip..skip + BS];
    println!(
        "destination at byte {} of its page, memcpy source at byte {}",
        buf.as_ptr() as usize % BS,
        src.as_ptr() as usize % BS
    );
    let mut rng = Rng::new(1);
    let (mut pollfs, mut on_words, mut memcpy) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        pollfs.push(batch(|| {
            let off = rng.below(BLOCKS) * BS as u64;
            black_box(f.read_at(buf, off).unwrap());
        }));
        if let Some(f) = &vfio_file {
            on_words.push(batch(|| {
                let off = rng.below(BLOCKS) * BS as u64;
                black_box(f.read_at(buf, off).unwrap());
            }));
        }
        memcpy.push(batch(|| {
            let off = rng.below(BLOCKS) as usize * BS;
            buf.copy_from_slice(&src[off..off + BS]);
            black_box(&*buf);
        }));
    }
    pollfs.sort_by(f64::total_cmp);
    on_words.sort_by(f64::total_cmp);
    memcpy.sort_by(f64::total_cmp);
    for (name, q) in [("fastest", 0.0), ("p25", 0.25), ("median", 0.5)] {
        let at = |v: &[f64]| v[((v.len() - 1) as f64 * q) as usize];
        let (p, m) = (at(&pollfs), at(&memcpy));
        let words = if on_words.is_empty() {
            String::new()
        } else {
            let w = at(&on_words);
            format!(", on words {w:6.1} ns, ratio {:.3}", m / w)
        };
        println!(
            "{name:>8}: pollfs {p:6.1} ns, memcpy {m:6.1} ns, ratio {:.3}{words}",
            m / p
        );
    }
}
