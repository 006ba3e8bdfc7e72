//! Regression tests for issue 31's findings on work beside the user's:
//! writers changing dirty counts while another session sorts files by
//! them (finding 12), the log thread against mount (finding 13), and
//! invariant checks beside it (finding 14).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pollfs_core::dev::fault::{FaultPlan, FaultyDevice};
use pollfs_core::dev::ram::RamDevice;
use pollfs_core::dev::{CommandKind, DevError};
use pollfs_core::{Config, Fs};
use pollfs_host_tests::deadline::{Crew, DEADLINE, STALL};
use pollfs_host_tests::model::pattern;
use pollfs_host_tests::setup::{config, fsck_clean};

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

/// Blocks of the device of [`half_full_log`]: 8 MiB, a log of 64 blocks.
const HALF_FULL_BLOCKS: u64 = 2048;

/// A cleanly synced image whose log is over half full and was never
/// checkpointed: files written and synced in one commit, then one small
/// metadata sync per log block (data goes home, not into the log) until
/// more than half the log is in use. Built without the log thread, with
/// commits told a background step checkpoints (so they do not until three
/// quarters); returns the device's bytes.
fn half_full_log() -> Vec<u8> {
    let dev = RamDevice::new(HALF_FULL_BLOCKS * 4096, 4096, 96).unwrap();
    let quiet = Config {
        background: None,
        log_data_pages: 0,
        ..config(64)
    };
    let fs = Fs::format(dev.clone(), quiet, 13).unwrap();
    fs.set_background_steps(true);
    // Enough inodes that loading them takes a while.
    let files: Vec<_> = (0..200)
        .map(|i| {
            let f = fs.create(&format!("f{i}")).unwrap();
            f.write_all_at(&pattern(i, 0, 5000), 0).unwrap();
            f
        })
        .collect();
    fs.sync().unwrap();
    let log_blocks = HALF_FULL_BLOCKS / 32;
    for i in 0..log_blocks / 2 + 4 {
        files[0].set_len(5000 + i).unwrap();
        files[0].sync_all().unwrap();
    }
    let st = fs.stats();
    assert_eq!(st.checkpoints, 0, "the log was never checkpointed");
    assert!(
        st.log_writes > log_blocks / 2,
        "{} log writes",
        st.log_writes
    );
    fs.check_invariants().unwrap();
    drop(files);
    drop(fs);
    let mut image = vec![0; (HALF_FULL_BLOCKS * 4096) as usize];
    dev.read_raw(0, &mut image);
    image
}

/// Finding 13: a mount started the log thread before it had loaded the
/// checkpoint's chain, the extents and the tree; on an image whose log is
/// over half full the thread checkpoints at once, with blocks from an
/// allocator that did not know them yet, and a clean image was refused as
/// `Corrupt { Inconsistent }` or mounted with leaked blocks. Each round
/// mounts the same image with the thread, lets its checkpoint finish, then
/// checks the image it left, mounted without the thread.
#[test]
fn a_clean_image_with_a_half_full_log_mounts_every_time() {
    let image = half_full_log();
    let dev = RamDevice::new(HALF_FULL_BLOCKS * 4096, 4096, 96).unwrap();
    // Threads that keep both cores busy, so the mounting thread is
    // preempted at random points, as on a loaded machine.
    let stop = Arc::new(AtomicBool::new(false));
    let _stop = StopOnDrop(stop.clone());
    let spinners: Vec<_> = (0..3)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    for round in 0..200 {
        dev.write_raw(0, &image);
        let fs = Fs::mount(dev.clone(), config(64))
            .unwrap_or_else(|e| panic!("round {round}: a clean image was refused: {e:?}"));
        let deadline = Instant::now() + Duration::from_secs(20);
        while fs.stats().background_checkpoints == 0 {
            assert!(
                Instant::now() < deadline,
                "round {round}: no checkpoint in 20 s"
            );
            std::thread::yield_now();
        }
        // The last handle stops the thread and waits for it.
        drop(fs);
        let quiet = Config {
            background: None,
            ..config(64)
        };
        let fs = Fs::mount(dev.clone(), quiet)
            .unwrap_or_else(|e| panic!("round {round}: refused after the checkpoint: {e:?}"));
        if let Err(e) = fs.check_invariants() {
            panic!("round {round}: {e:?}");
        }
        assert_eq!(fs.list().len(), 200, "round {round}");
        drop(fs);
        fsck_clean(&dev);
    }
    stop.store(true, Ordering::Relaxed);
    for t in spinners {
        t.join().unwrap();
    }
}

/// Finding 14: `check_invariants` holds only with nothing in flight, and
/// a hosted user cannot stop the log thread, so a check beside its step
/// reported dirty counts and leaked blocks that a check a moment later
/// did not. Now a check pauses the background step. Each round makes
/// pages due home and the log due a checkpoint (small syncs on a log of
/// 64 blocks), then checks at once, while the thread works.
#[test]
fn invariant_checks_beside_a_busy_log_thread_report_nothing() {
    let dev = RamDevice::new(HALF_FULL_BLOCKS * 4096, 4096, 96).unwrap();
    let fs = Fs::format(dev, config(64), 14).unwrap();
    let f = fs.create("f").unwrap();
    f.write_all_at(&pattern(1, 0, 40 * 4096), 0).unwrap();
    f.sync_data().unwrap();
    let mut problems = Vec::new();
    for round in 0..400u64 {
        for i in 0..6 {
            let off = ((round * 7 + i) % 40) * 4096 + i;
            f.write_all_at(&pattern(round, off, 100), off).unwrap();
            f.sync_data().unwrap();
        }
        if let Err(e) = fs.check_invariants() {
            problems.push((round, e));
        }
    }
    let st = fs.stats();
    assert!(
        st.homed_pages > 0 && st.background_checkpoints > 0,
        "the thread worked beside the checks: {st:?}"
    );
    assert!(
        problems.is_empty(),
        "{} checks failed: {problems:?}",
        problems.len()
    );
}

/// Finding 14: a background step that failed was dropped in a catch-all,
/// and nothing told the user. Paused, small syncs make pages due home;
/// then every write fails, the pause ends, and the log thread's step
/// fails: `Stats::background_errors` counts it. Healed, the thread writes
/// the pages home and a check finds nothing wrong.
#[test]
fn a_failing_background_step_is_counted() {
    let plan = FaultPlan::new();
    let dev = RamDevice::new(HALF_FULL_BLOCKS * 4096, 4096, 96).unwrap();
    let fs = Fs::format(FaultyDevice::new(dev, plan.clone()), config(64), 15).unwrap();
    let f = fs.create("f").unwrap();
    f.write_all_at(&pattern(1, 0, 40 * 4096), 0).unwrap();
    f.sync_data().unwrap();
    let paused = fs.pause_background();
    // A log of 64 blocks: a share of 16 pages for data, due from 4.
    for i in 0..8u64 {
        f.write_all_at(&pattern(i, i * 4096, 100), i * 4096)
            .unwrap();
        f.sync_data().unwrap();
    }
    assert_eq!(fs.stats().homed_pages, 0, "no step ran while paused");
    plan.fail(CommandKind::Write, u64::MAX, DevError::Media);
    drop(paused);
    let deadline = Instant::now() + Duration::from_secs(20);
    while fs.stats().background_errors == 0 {
        assert!(Instant::now() < deadline, "no failed step counted in 20 s");
        std::thread::yield_now();
    }
    plan.heal();
    while fs.stats().homed_pages == 0 {
        assert!(
            Instant::now() < deadline,
            "nothing written home once healed"
        );
        std::thread::yield_now();
    }
    fs.check_invariants().unwrap();
}
