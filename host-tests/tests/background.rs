//! Regression tests for issue 31's findings on work beside the user's:
//! writers changing dirty counts while another session sorts files by
//! them (finding 12), the log thread against mount (finding 13), and
//! invariant checks beside it (finding 14).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pollfs_core::dev::ram::RamDevice;
use pollfs_core::Fs;
use pollfs_host_tests::deadline::{Crew, DEADLINE, STALL};
use pollfs_host_tests::model::pattern;
use pollfs_host_tests::setup::config;

/// Files each dirtying thread keeps dirty: past twenty, the standard
/// library's sort leaves insertion sort and can see an inconsistent order.
const FILES: usize = 300;

/// Sets its flag when dropped, so a thread's end (or panic) stops the
/// others.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Finding 12: writing a large file through a small cache writes other
/// files back, most dirty first; their dirty counts changed under the sort
/// (two threads dirtying and syncing them, the write-home thread cleaning
/// them), and the sort panicked ("does not correctly implement a total
/// order") through the caller's write, leaving the files it had opened
/// open.
#[test]
fn writing_through_a_small_cache_while_others_move_dirty_counts_does_not_panic() {
    let dev = RamDevice::new(64 << 20, 4096, 160).unwrap();
    let fs = Fs::format(dev, config(128), 31).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let mut crew = Crew::new();
    for t in 0..2u64 {
        let fs = fs.clone();
        let stop = stop.clone();
        crew.spawn(&format!("dirtier {t}"), move |w| {
            let files: Vec<_> = (0..FILES)
                .map(|i| fs.create(&format!("d{t}-{i}")).unwrap())
                .collect();
            let mut round = 0u64;
            while !stop.load(Ordering::Relaxed) {
                w.doing(format!("round {round}"));
                for (i, f) in files.iter().enumerate() {
                    // A varying number of pages, so counts differ and move.
                    let pages = 1 + (round + i as u64 + t) % 3;
                    let off = (round % 4) * 4096;
                    f.write_all_at(&pattern(round, off, pages as usize * 4096), off)
                        .unwrap();
                    if (round + i as u64) % 5 == 0 {
                        f.sync_data().unwrap();
                    }
                }
                round += 1;
            }
            Ok(())
        });
    }
    {
        let fs = fs.clone();
        let stop = stop.clone();
        crew.spawn("large writer", move |w| {
            // However this thread ends, the others stop.
            let _stop = StopOnDrop(stop);
            let f = fs.create("large").unwrap();
            let chunk = pattern(7, 0, 256 * 1024);
            let start = Instant::now();
            let mut off = 0;
            while start.elapsed() < Duration::from_secs(3) {
                w.doing(format!("write at {off}"));
                f.write_all_at(&chunk, off % (16 << 20)).unwrap();
                off += chunk.len() as u64;
            }
            Ok(())
        });
    }
    for (name, r) in crew.finish(STALL, DEADLINE) {
        r.unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    fs.sync().unwrap();
}
