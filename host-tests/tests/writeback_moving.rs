//! Writeback under the dirty limit takes the files with the most dirty
//! pages first, and the counts it orders by are other threads' to change
//! while it looks (issue 31, finding 12: a sort that read them at every
//! comparison could see no order at all, and the standard library's sort
//! panics on that). Four writers of 32 files each on a cache of 128
//! pages keep the limit pressed and the counts moving, a fifth thread
//! syncs everything in a loop, and afterwards every page of every file
//! reads back as its writer last left it. With the sort reading the
//! counts at each comparison instead, this test panicked in 5 runs of 5;
//! with 16 files in all, in none (the sort's checks need more to see).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use pollfs_core::dev::ram::RamDevice;
use pollfs_core::persist::META_FRAMES;
use pollfs_core::rng::SplitMix64;
use pollfs_core::Fs;
use pollfs_host_tests::setup::{config, fsck_clean};

const CACHE: u32 = 128;
const WRITERS: u64 = 4;
const FILES: u64 = 32;
const PAGES: u64 = 16;
const WRITES: u64 = 3000;

#[test]
fn writes_survive_dirty_counts_moving_under_writeback() {
    let dev = RamDevice::new(64 << 20, 4096, CACHE + META_FRAMES).unwrap();
    let fs = Arc::new(Fs::format(dev.clone(), config(CACHE), 3).unwrap());
    let done = Arc::new(AtomicBool::new(false));
    let syncer = {
        let (fs, done) = (fs.clone(), done.clone());
        std::thread::spawn(move || {
            let mut syncs = 0u64;
            while !done.load(Ordering::Acquire) {
                fs.sync().unwrap();
                syncs += 1;
                std::thread::yield_now();
            }
            syncs
        })
    };
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let fs = fs.clone();
            std::thread::spawn(move || {
                let files: Vec<_> = (0..FILES)
                    .map(|f| fs.create(&format!("w{w}f{f}")).unwrap())
                    .collect();
                // Per file and page: the round whose byte it holds (0: none).
                let mut model = vec![vec![0u64; PAGES as usize]; FILES as usize];
                let mut rng = SplitMix64::new(w);
                for round in 1..=WRITES {
                    let f = rng.below(FILES) as usize;
                    // Runs of pages, so counts jump by more than one.
                    let first = rng.below(PAGES);
                    let n = (1 + rng.below(8)).min(PAGES - first);
                    let bytes = vec![(round % 251) as u8; (n * 4096) as usize];
                    files[f].write_all_at(&bytes, first * 4096).unwrap();
                    for p in first..first + n {
                        model[f][p as usize] = round;
                    }
                    if rng.chance(5) {
                        files[f].sync_data().unwrap();
                    }
                }
                (files, model)
            })
        })
        .collect();
    let results: Vec<_> = writers.into_iter().map(|t| t.join().unwrap()).collect();
    done.store(true, Ordering::Release);
    let syncs = syncer.join().unwrap();
    assert!(syncs > 0);
    let stats = fs.stats();
    assert!(
        stats.dirty_throttles > 0 || stats.evictions > 0,
        "the cache was never under pressure: {stats:?}"
    );
    for (files, model) in &results {
        for (file, pages) in files.iter().zip(model) {
            for (p, &round) in pages.iter().enumerate() {
                let mut page = vec![0u8; 4096];
                let got = file.read_at(&mut page, p as u64 * 4096).unwrap();
                let want = if round == 0 { 0 } else { (round % 251) as u8 };
                assert!(
                    page[..got].iter().all(|&b| b == want),
                    "page {p}: wanted {want}, found {:?}",
                    &page[..4]
                );
            }
        }
    }
    drop(results);
    let fs = Arc::into_inner(fs).expect("every thread let the filesystem go");
    fs.unmount().unwrap();
    fsck_clean(&dev);
}
