//! Regression tests for reported engine defects, one or more per report,
//! each asserting the correct behaviour. Work that can hang runs on worker
//! threads under a deadline (`pollfs_host_tests::deadline`), so a deadlock
//! fails its test with the stuck operations named instead of hanging the
//! suite. Crafted images are built with `pollfs_host_tests::image`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pollfs_core::dev::ram::RamDevice;
use pollfs_core::error::SpaceError;
use pollfs_core::persist::format::FRAME_HEADER;
use pollfs_core::persist::record::Record;
use pollfs_core::persist::{CheckReport, META_FRAMES};
use pollfs_core::space::Extent;
use pollfs_core::units::{BlockNo, PAGE_SIZE};
use pollfs_core::{Config, Error, Fs, MAX_FILE_SIZE};
use pollfs_host_tests::deadline::{self, guarded, Crew, DEADLINE, STALL};
use pollfs_host_tests::image;
use pollfs_host_tests::model::pattern;
use pollfs_host_tests::rng::Rng;

/// A hosted config whose idle hook lets a stuck test cancel its workers.
fn cfg(cache_pages: u32) -> Config {
    Config {
        idle: deadline::idle,
        ..pollfs_host_tests::setup::config(cache_pages)
    }
}

/// A RAM device of `bytes` with enough frames for `cache` pages plus the
/// metadata frames a formatted filesystem keeps.
fn ram(bytes: u64, cache: u32) -> RamDevice {
    RamDevice::new(bytes, 4096, cache + META_FRAMES).unwrap()
}

fn fsck(dev: &RamDevice) -> pollfs_core::Result<CheckReport> {
    pollfs_core::persist::check(
        dev,
        pollfs_core::hosted::monotonic_clock,
        std::thread::yield_now,
    )
}

// ---------------------------------------------------------------------------
// Defect 1: concurrent syncs of one file with writers inside EOF.

const STORM_FILE: u64 = 2 << 20;
/// How long the writers of a threaded run keep writing.
fn storm_time() -> Duration {
    Duration::from_secs(if cfg!(feature = "soak") { 30 } else { 2 })
}

/// `syncers` threads call `sync_data` in a loop on one 2 MiB file while
/// `writers` threads overwrite it inside EOF (4 KiB to 64 KiB at random
/// offsets) for two seconds, on a formatted filesystem or one from
/// `Fs::new`, with a cache of `cache` pages. Returns every worker's result;
/// a stall fails the test.
fn sync_storm(
    formatted: bool,
    cache: u32,
    syncers: usize,
    writers: usize,
) -> Vec<(String, Result<(), String>)> {
    let dev = ram(64 << 20, cache);
    let fs = if formatted {
        Fs::format(dev, cfg(cache), 0x5157).unwrap()
    } else {
        Fs::new(dev, cfg(cache)).unwrap()
    };
    {
        let f = fs.create("f").unwrap();
        for off in (0..STORM_FILE).step_by(64 << 10) {
            f.write_all_at(&pattern(0, off, 64 << 10), off).unwrap();
        }
        f.sync_data().unwrap();
    }
    let writers_left = Arc::new(AtomicUsize::new(writers));
    let mut crew = Crew::new();
    for w in 0..writers {
        let (fs, left) = (fs.clone(), writers_left.clone());
        crew.spawn(&format!("writer {w}"), move |h| {
            // Tell the syncers to stop however this writer ends.
            struct Done(Arc<AtomicUsize>);
            impl Drop for Done {
                fn drop(&mut self) {
                    self.0.fetch_sub(1, Ordering::SeqCst);
                }
            }
            let _done = Done(left);
            let f = fs.open("f").map_err(|e| format!("open: {e:?}"))?;
            let mut rng = Rng::new(0xD1 + w as u64);
            let start = Instant::now();
            for i in 0u64.. {
                if start.elapsed() > storm_time() {
                    break;
                }
                let len = 4096 + rng.below(60 * 1024 + 1);
                let off = rng.below(STORM_FILE - len + 1);
                h.doing(format!("write_at({len} bytes, offset {off}), op {i}"));
                let buf = pattern(1 + i + ((w as u64) << 32), off, len as usize);
                f.write_all_at(&buf, off)
                    .map_err(|e| format!("write_at({len} bytes, offset {off}), op {i}: {e:?}"))?;
            }
            Ok(())
        });
    }
    for k in 0..syncers {
        let (fs, left) = (fs.clone(), writers_left.clone());
        crew.spawn(&format!("syncer {k}"), move |h| {
            let f = fs.open("f").map_err(|e| format!("open: {e:?}"))?;
            let mut n = 0u64;
            while left.load(Ordering::SeqCst) > 0 {
                h.doing(format!("sync_data #{n}"));
                f.sync_data()
                    .map_err(|e| format!("sync_data #{n}: {e:?}"))?;
                n += 1;
            }
            Ok(())
        });
    }
    crew.finish(STALL, DEADLINE)
}

fn assert_all_ok(what: &str, results: &[(String, Result<(), String>)]) {
    let failed: Vec<String> = results
        .iter()
        .filter_map(|(n, r)| r.as_ref().err().map(|e| format!("  {n}: {e}")))
        .collect();
    assert!(failed.is_empty(), "{what}:\n{}", failed.join("\n"));
}

#[test]
fn defect_1_syncs_and_writers_formatted_32_pages() {
    let r = sync_storm(true, 32, 2, 2);
    assert_all_ok("formatted, 32-page cache, 2 syncers + 2 writers", &r);
}

#[test]
fn defect_1_syncs_and_writers_formatted_256_pages() {
    let r = sync_storm(true, 256, 2, 2);
    assert_all_ok("formatted, 256-page cache, 2 syncers + 2 writers", &r);
}

#[test]
fn defect_1_syncs_and_writers_new_32_pages() {
    let r = sync_storm(false, 32, 2, 2);
    assert_all_ok("Fs::new, 32-page cache, 2 syncers + 2 writers", &r);
}

#[test]
fn defect_1_syncs_and_writers_new_256_pages() {
    let r = sync_storm(false, 256, 2, 2);
    assert_all_ok("Fs::new, 256-page cache, 2 syncers + 2 writers", &r);
}

#[test]
fn defect_1_one_syncer_one_writer_never_exhaust_the_cache() {
    for formatted in [true, false] {
        for cache in [32, 256] {
            let r = sync_storm(formatted, cache, 1, 1);
            let what = if formatted { "formatted" } else { "Fs::new" };
            assert_all_ok(
                &format!("{what}, {cache}-page cache, 1 syncer + 1 writer"),
                &r,
            );
        }
    }
}

/// The same race on one thread under the deterministic scheduler: two
/// tasks syncing one file while two write inside its EOF, over many
/// schedules. Every schedule replays from its seed.
#[test]
fn defect_1_two_syncers_two_writers_every_schedule_completes() {
    use pollfs_host_tests::sched::choice::Choices;
    use pollfs_host_tests::sched::scenario::{Op, Scenario, SPAN};
    use pollfs_host_tests::sched::{self, Options};
    let w = |off: u64, len: u64| Op::Write { file: 0, off, len };
    let sync = Op::Sync { file: 0 };
    let mut failed = Vec::new();
    for cache_pages in [8, 16] {
        let scenario = Scenario {
            initial: vec![SPAN],
            cache_pages,
            readahead_pages: 0,
            block_size: 4096,
            preempt_percent: 20,
            dirty_start: false,
            journal: true,
            tasks: vec![
                vec![sync; 4],
                vec![sync; 4],
                vec![w(0, 8192), w(4096, 16384), w(20000, 8192), w(0, 4096)],
                vec![w(4096, 8192), w(0, 12288), w(24576, 8192), w(8192, 4096)],
            ],
        };
        for seed in 0..200 {
            if let Err(f) = sched::run(&scenario, Choices::from_seed(seed), Options::default()) {
                let text = f.to_string();
                let first = text.lines().next().unwrap_or_default().to_string();
                failed.push(format!(
                    "{cache_pages}-page cache, schedule seed {seed}: {first}"
                ));
            }
        }
    }
    assert!(
        failed.is_empty(),
        "{} of 400 schedules fail; the first few:\n{}",
        failed.len(),
        failed[..failed.len().min(5)].join("\n")
    );
}

// ---------------------------------------------------------------------------
// Defect 2: unsynced bytes past the durable EOF reach the device through a
// writeback that logs no size; after a crash, growing the file shows them.

#[derive(Clone, Copy, Debug)]
enum Writeback {
    /// `Session::drop_caches` writes back every dirty page.
    DropCaches,
    /// With a dirty limit of one page, the file's unsynced page and another
    /// file's put the cache over it; the next writer, to a third file,
    /// writes both of them back.
    DirtyLimit,
}

const STALE: u8 = 0x22;

/// A file synced at 5,000 bytes, then written with `STALE` at 6,000..7,000
/// (the same block as the durable EOF) and not synced; `how` writes that
/// block back; then the power is cut (the filesystem is dropped unsynced).
/// Returns the device.
fn stale_tail_image(how: Writeback) -> RamDevice {
    let cache = 16;
    let dev = ram(16 << 20, cache);
    let config = Config {
        dirty_limit_pages: 1,
        ..cfg(cache)
    };
    let fs = Fs::format(dev.clone(), config, 0x57A1).unwrap();
    let s = fs.session().unwrap();
    let f = fs.create("f").unwrap();
    f.write_all_at(&pattern(1, 0, 5000), 0).unwrap();
    f.sync_all().unwrap();
    f.write_all_at(&[STALE; 1000], 6000).unwrap();
    match how {
        Writeback::DropCaches => {
            s.drop_caches().unwrap();
        }
        Writeback::DirtyLimit => {
            let h = fs.create("h").unwrap();
            h.write_all_at(&[0x44; 100], 0).unwrap();
            let g = fs.create("g").unwrap();
            g.write_all_at(&[0x33; 100], 0).unwrap();
        }
    }
    // The scenario needs the unsynced bytes on the device: look for them in
    // the data area, at their offset within a block.
    let sb = image::superblock(&dev);
    let mut block = vec![0u8; PAGE_SIZE];
    let on_device = (sb.layout.data_start..sb.layout.blocks).any(|b| {
        dev.read_raw(b * PAGE_SIZE as u64, &mut block);
        block[6000 - 4096..7000 - 4096].iter().all(|&x| x == STALE)
    });
    assert!(
        on_device,
        "setup ({how:?}): the unsynced bytes did not reach the device"
    );
    drop(f);
    drop(s);
    drop(fs);
    dev
}

/// Checks a recovered file grown to `len` bytes: the synced 5,000 bytes,
/// then zeros past the recovered size (the unsynced write may survive only
/// if the recovered size covers it).
fn check_grown(what: &str, recovered: u64, bytes: &[u8]) {
    assert!(
        recovered == 5000 || recovered == 7000,
        "{what}: recovered size {recovered}, expected 5000 (or 7000 with the write)"
    );
    assert_eq!(
        &bytes[..5000],
        &pattern(1, 0, 5000)[..],
        "{what}: synced bytes"
    );
    let past: Vec<usize> = (recovered as usize..8000)
        .filter(|&i| bytes[i] != 0)
        .collect();
    assert!(
        past.is_empty(),
        "{what}: {} bytes past the recovered size {recovered} are not zero \
         (first at {}: {:#04x}); unsynced data from before the crash is exposed",
        past.len(),
        past[0],
        bytes[past[0]]
    );
}

#[test]
fn defect_2_set_len_after_crash_shows_zeros_not_unsynced_bytes() {
    let dev = stale_tail_image(Writeback::DropCaches);
    let fs = Fs::mount(dev, cfg(16)).unwrap();
    let f = fs.open("f").unwrap();
    let recovered = f.len();
    f.set_len(8192).unwrap();
    let mut buf = vec![0u8; 8192];
    assert_eq!(f.read_at(&mut buf, 0).unwrap(), 8192);
    check_grown("set_len(8192) after recovery", recovered, &buf);
}

#[test]
fn defect_2_write_past_eof_after_crash_shows_zeros_not_unsynced_bytes() {
    let dev = stale_tail_image(Writeback::DirtyLimit);
    let fs = Fs::mount(dev, cfg(16)).unwrap();
    let f = fs.open("f").unwrap();
    let recovered = f.len();
    f.write_all_at(&[0x55; 100], 8000).unwrap();
    let mut buf = vec![0u8; 8100];
    assert_eq!(f.read_at(&mut buf, 0).unwrap(), 8100);
    check_grown("write at 8000 after recovery", recovered, &buf);
    assert!(buf[8000..].iter().all(|&b| b == 0x55));
}

#[test]
fn defect_2_set_len_then_drop_caches_after_crash_shows_zeros() {
    let dev = stale_tail_image(Writeback::DropCaches);
    let fs = Fs::mount(dev, cfg(16)).unwrap();
    let s = fs.session().unwrap();
    let f = fs.open("f").unwrap();
    let recovered = f.len();
    f.set_len(8192).unwrap();
    s.drop_caches().unwrap();
    let mut buf = vec![0u8; 8192];
    assert_eq!(f.read_at(&mut buf, 0).unwrap(), 8192);
    check_grown("set_len(8192), drop_caches, read", recovered, &buf);
}

// ---------------------------------------------------------------------------
// Defect 3: a file with more extents than one log write holds.

#[test]
fn defect_3_oversized_sync_succeeds_and_poisons_nothing() {
    const PAGES: u64 = 6000;
    let cache = 256;
    let dev = ram(256 << 20, cache);
    let mut failures = Vec::new();
    let frag_synced;
    {
        let fs = Fs::format(dev.clone(), cfg(cache), 0xF4A6).unwrap();
        let frag = fs.create("frag").unwrap();
        // Every other page: one extent per page.
        for i in 0..PAGES {
            let off = 2 * i * PAGE_SIZE as u64;
            frag.write_all_at(&pattern(i, off, PAGE_SIZE), off).unwrap();
        }
        let r = frag.sync_data();
        frag_synced = r.is_ok();
        if let Err(e) = r {
            failures.push(format!("sync of a file with {PAGES} extents: {e:?}"));
        }
        let other = fs.create("other").unwrap();
        other.write_all_at(&pattern(7, 0, 10_000), 0).unwrap();
        if let Err(e) = other.sync_data() {
            failures.push(format!("a later sync of another file: {e:?}"));
        }
        if !frag_synced {
            // The failed record must not stay queued once its file is gone.
            drop(frag);
            fs.remove("frag").unwrap();
            other
                .write_all_at(&pattern(8, 10_000, 5000), 10_000)
                .unwrap();
            if let Err(e) = other.sync_data() {
                failures.push(format!(
                    "sync of another file after removing the fragmented one: {e:?}"
                ));
            }
        }
    }
    let fs = Fs::mount(dev.clone(), cfg(cache)).unwrap();
    match fs.open("other") {
        Ok(o) if !failures.iter().any(|f| f.contains("another file")) => {
            let mut want = pattern(7, 0, 10_000);
            if !frag_synced {
                want.extend(pattern(8, 10_000, 5000));
            }
            let mut buf = vec![0u8; want.len()];
            o.read_at(&mut buf, 0).unwrap();
            if o.len() != want.len() as u64 || buf != want {
                failures.push("after remount: file 'other' lost synced data".into());
            }
        }
        Ok(_) => {}
        Err(e) => failures.push(format!("after remount: 'other': {e:?}")),
    }
    if frag_synced {
        let f = fs.open("frag").unwrap();
        assert_eq!(f.len(), (2 * PAGES - 1) * PAGE_SIZE as u64);
        let mut buf = vec![0u8; 2 * PAGE_SIZE];
        for i in (0..PAGES).step_by(97) {
            let off = 2 * i * PAGE_SIZE as u64;
            f.read_at(&mut buf, off).unwrap();
            if buf[..PAGE_SIZE] != pattern(i, off, PAGE_SIZE)[..]
                || (i + 1 < PAGES && buf[PAGE_SIZE..].iter().any(|&b| b != 0))
            {
                failures.push(format!("after remount: 'frag' page {} is wrong", 2 * i));
                break;
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---------------------------------------------------------------------------
// Defect 4: the checkpoint area fills with long names.

fn long_name(i: usize) -> String {
    let mut s = format!("{i:05}-");
    s.extend(std::iter::repeat_n('n', 255 - s.len()));
    s
}

#[test]
fn defect_4_metadata_full_only_when_full_and_recoverable() {
    let cache = 64;
    let dev = ram(16 << 20, cache);
    let fs = Fs::format(dev.clone(), cfg(cache), 0x4E41).unwrap();
    let layout = image::superblock(&dev).layout;
    // A checkpoint holds one Create (1 + 8 + 2 + 255 bytes) and one State
    // with no extents (1 + 8 + 8 + 4) per empty file, in frames of data
    // blocks: the whole data area is the most it can take.
    let per_file = (1 + 8 + 2 + 255) + (1 + 8 + 8 + 4);
    let room = layout.data_blocks() as usize * (PAGE_SIZE - FRAME_HEADER);
    let fits = |n: usize| n * per_file <= room;
    let s = fs.session().unwrap();
    let mut created = Vec::new();
    let mut failed_at = None;
    for i in 0..2000 {
        let name = long_name(i);
        let f = fs.create(&name).unwrap();
        created.push(name);
        if let Err(e) = f.sync_all() {
            failed_at = Some((i, e));
            break;
        }
    }
    if let Some((i, e)) = failed_at {
        assert_eq!(
            e,
            Error::Space(SpaceError::MetadataFull),
            "sync of file {i} failed"
        );
        assert!(
            !fits(i + 1),
            "sync of file {i} reported MetadataFull, but {} such files fit the \
             {}-block data area ({} would)",
            i + 1,
            layout.data_blocks(),
            room / per_file
        );
    }
    // Remove every other file (and the one whose sync failed).
    let mut survivors = Vec::new();
    for (i, name) in created.iter().enumerate() {
        if i % 2 == 0 || failed_at.as_ref().is_some_and(|(k, _)| *k == i) {
            fs.remove(name).unwrap();
        } else {
            survivors.push(name.clone());
        }
    }
    let keep = fs.open(&survivors[0]).unwrap();
    let r = keep.sync_all();
    assert!(
        r.is_ok(),
        "after removing half of {} files, sync still fails: {r:?}",
        created.len()
    );
    let after = fs.create("after").unwrap();
    after.write_all_at(b"works again", 0).unwrap();
    let r = after.sync_all();
    assert!(r.is_ok(), "a new file's sync after the removals: {r:?}");
    survivors.push("after".to_string());
    survivors.sort();
    drop((keep, after));
    drop(s);
    drop(fs);
    let fs = Fs::mount(dev.clone(), cfg(cache));
    let fs = fs.unwrap_or_else(|e| panic!("remount after the removals: {e:?}"));
    assert_eq!(fs.list(), survivors, "remount lists the surviving files");
    let report = fsck(&dev).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

// ---------------------------------------------------------------------------
// Defect 5: one corrupt frame in the middle of the log.

const APPEND: usize = 3000;

/// A file written in 8 appends with a sync after each (8 live log writes,
/// no checkpoint), then one payload byte of the 4th live log write flipped.
fn corrupt_mid_log() -> RamDevice {
    let cache = 64;
    let dev = ram(16 << 20, cache);
    {
        let fs = Fs::format(dev.clone(), cfg(cache), 0xC0DE).unwrap();
        let f = fs.create("f").unwrap();
        for i in 0..8 {
            let off = (i * APPEND) as u64;
            f.write_all_at(&pattern(i as u64, off, APPEND), off)
                .unwrap();
            f.sync_data().unwrap();
        }
        assert_eq!(fs.stats().checkpoints, 0, "setup: no checkpoint expected");
    }
    let frames = image::live_frames(&dev);
    assert_eq!(frames.len(), 8, "setup: 8 live log writes: {frames:?}");
    for (i, fr) in frames.iter().enumerate() {
        let size = fr.records.iter().rev().find_map(|r| match r {
            Record::Inode { meta, .. } => Some(meta.size),
            _ => None,
        });
        let want = ((i + 1) * APPEND) as u64;
        assert_eq!(
            size,
            Some(want),
            "setup: log write {i} logs the size {want}"
        );
    }
    let sb = image::superblock(&dev);
    let fourth = &frames[3];
    assert!(fourth.frame.payload_len > 10);
    let at = (sb.layout.log_start + fourth.block) * PAGE_SIZE as u64 + FRAME_HEADER as u64 + 10;
    let mut b = [0u8; 1];
    dev.read_raw(at, &mut b);
    dev.write_raw(at, &[b[0] ^ 0x01]);
    assert_eq!(
        image::live_frames(&dev).len(),
        3,
        "setup: the flip breaks frame 4"
    );
    dev
}

#[test]
fn defect_5_corrupt_mid_log_frame_is_an_error_for_mount_and_fsck() {
    let dev = corrupt_mid_log();
    let mut failures = Vec::new();
    match Fs::mount(dev.clone(), cfg(64)) {
        Err(_) => {}
        Ok(fs) => {
            let len = fs.open("f").map(|f| f.len()).unwrap_or(0);
            failures.push(format!(
                "mount succeeded with file 'f' at {len} of its {} synced bytes",
                8 * APPEND
            ));
        }
    }
    let report = fsck(&dev);
    match &report {
        Ok(r) if r.problems.is_empty() => failures.push(format!(
            "fsck reports no problem (replayed {} log writes)",
            r.log_writes
        )),
        _ => {}
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn defect_5_mount_refuses_a_mid_log_corruption_before_new_writes_bury_it() {
    let dev = corrupt_mid_log();
    let first = Fs::mount(dev.clone(), cfg(64));
    let Ok(fs) = first else {
        return;
    };
    // Today's sequence: the mount is accepted; one ordinary write and sync
    // later, the log replays stale records and the next mount fails.
    let len = {
        let f = fs.open("f").unwrap();
        let len = f.len();
        let g = fs.create("g").unwrap();
        g.write_all_at(&pattern(9, 0, 4 * APPEND), 0).unwrap();
        g.sync_data().unwrap();
        len
    };
    drop(fs);
    let second = Fs::mount(dev.clone(), cfg(64)).map(|_| ());
    panic!(
        "the first mount accepted a log with a corrupt 4th frame (file at {len} of {} \
         synced bytes); after one write and sync, the next mount gives {second:?}",
        8 * APPEND
    );
}

// ---------------------------------------------------------------------------
// Defect 6: a crafted size past MAX_FILE_SIZE.

/// A formatted device whose log creates "big" with a size past
/// `MAX_FILE_SIZE` (a checksum-valid log write with the right uuid and the
/// next sequence number).
fn oversized_file_image() -> RamDevice {
    let dev = ram(16 << 20, 64);
    drop(Fs::format(dev.clone(), cfg(64), 0xB16).unwrap());
    image::append_frame(
        &dev,
        &[
            file_inode(7, MAX_FILE_SIZE + 2 * PAGE_SIZE as u64, Vec::new()),
            link("big", 7),
        ],
    );
    dev
}

/// Set by `defect_6_...` for the child process that runs the read.
const CHILD: &str = "POLLFS_DEFECTS_CHILD";

/// The read of defect 6, run in a child process by the test below: today it
/// spins in the page cache without ever reaching a point where a thread
/// could be cancelled, so only a process can be stopped.
#[test]
#[ignore = "run in a child process by defect_6_size_past_max_file_size_is_refused_or_read_returns"]
fn defect_6_child_read_at_max_file_size() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let fs = Fs::mount(oversized_file_image(), cfg(64)).unwrap();
    let f = fs.open("big").unwrap();
    let mut buf = vec![0u8; PAGE_SIZE];
    // Either answer is fine, so long as it comes back.
    let r = f.read_at(&mut buf, MAX_FILE_SIZE);
    println!("read_at(4096 bytes, MAX_FILE_SIZE) returned {r:?}");
}

#[test]
fn defect_6_size_past_max_file_size_is_refused_or_read_returns() {
    let dev = oversized_file_image();
    let mounted = guarded("Fs::mount", move || Fs::mount(dev, cfg(64)).map(|_| ()));
    if mounted.is_err() {
        return;
    }
    let name = "defect_6_child_read_at_max_file_size";
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            name,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > STALL {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!(
                "the image mounts, and read_at(4096 bytes, MAX_FILE_SIZE) of a file sized \
                 past MAX_FILE_SIZE did not return within {STALL:?}"
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().unwrap();
    assert!(
        status.success(),
        "the child running the read failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

// ---------------------------------------------------------------------------
// Defect 7: fsck and mount disagree on a superblock's block size.

#[test]
fn defect_7_fsck_and_mount_agree_on_a_block_size_mismatch() {
    let dev = ram(16 << 20, 64);
    drop(Fs::format(dev.clone(), cfg(64), 0x75).unwrap());
    let good = image::superblock(&dev);
    assert_eq!(good.lba_size, 4096);
    // The newest copy says 512: the other copy still fits the device, so
    // both use it, and fsck says what is wrong with the newest one.
    let mut sb = good;
    sb.lba_size = 512;
    sb.generation += 1;
    image::write_superblock(&dev, &sb);
    let mount = Fs::mount(dev.clone(), cfg(64)).map(|_| ());
    let report = fsck(&dev).unwrap();
    assert!(
        mount.is_ok() && report.problems.is_empty(),
        "one copy for 512-byte blocks: mount gives {mount:?}, fsck {:?}",
        report.problems
    );
    assert!(
        report.notes.iter().any(|n| n.contains("512")),
        "fsck names the bad copy: {:?}",
        report.notes
    );
    // Both copies say 512: both refuse, naming the block sizes.
    sb.generation += 1;
    image::write_superblock(&dev, &sb);
    let mount = Fs::mount(dev.clone(), cfg(64)).map(|_| ());
    let report = fsck(&dev);
    let fsck_clean = report.as_ref().is_ok_and(|r| r.problems.is_empty());
    assert!(
        mount.is_err() && !fsck_clean,
        "a 512-byte superblock on a 4096-byte device: mount gives {mount:?}, fsck gives {:?}",
        report.map(|r| r.problems)
    );
    let msg = format!("{}", mount.unwrap_err());
    assert!(msg.contains("512") && msg.contains("4096"), "{msg}");
}

// ---------------------------------------------------------------------------
// Defect 8: arithmetic on values read from the device.

#[test]
fn defect_8_superblock_generation_at_u64_max_does_not_panic() {
    let dev = ram(16 << 20, 64);
    drop(Fs::format(dev.clone(), cfg(64), 0x6E).unwrap());
    let mut sb = image::superblock(&dev);
    sb.generation = u64::MAX;
    image::write_superblock(&dev, &sb);
    let d = dev.clone();
    // Sync until a checkpoint writes the next superblock generation, or a
    // sync refuses (an error is a fine answer; a panic is not).
    let (synced, stopped) = guarded("syncs until a checkpoint", move || {
        let Ok(fs) = Fs::mount(d, cfg(64)) else {
            return (0, true);
        };
        let f = fs.create("f").unwrap();
        let mut synced = 0;
        for i in 0..1000u64 {
            let r = f.write_all_at(&pattern(i, i * 100, 100), i * 100);
            if r.and_then(|()| f.sync_data()).is_err() {
                return (synced, true);
            }
            synced = i + 1;
            if fs.stats().checkpoints > 0 {
                return (synced, true);
            }
        }
        (synced, false)
    });
    if synced == 0 {
        return;
    }
    assert!(stopped, "setup: {synced} syncs, no checkpoint and no error");
    // Whatever the syncs reported as durable must be there after a remount.
    let d = dev.clone();
    let back = guarded("remount", move || {
        let fs = Fs::mount(d, cfg(64)).map_err(|e| format!("{e:?}"))?;
        let f = fs.open("f").map_err(|e| format!("{e:?}"))?;
        let mut buf = vec![0u8; f.len() as usize];
        f.read_at(&mut buf, 0).unwrap();
        Ok::<_, String>(buf)
    });
    let want: Vec<u8> = (0..synced).flat_map(|i| pattern(i, i * 100, 100)).collect();
    match back {
        Ok(got) => assert!(
            got.get(..want.len()) == Some(&want[..]),
            "{synced} syncs succeeded; after a remount the file has {} of {} bytes right",
            got.iter().zip(&want).take_while(|(a, b)| a == b).count(),
            want.len()
        ),
        Err(e) => panic!("{synced} syncs succeeded, then the remount failed: {e}"),
    }
}

#[test]
fn defect_8_create_record_with_inode_u64_max_does_not_panic() {
    let dev = ram(16 << 20, 64);
    drop(Fs::format(dev.clone(), cfg(64), 0x1E).unwrap());
    image::append_frame(
        &dev,
        &[file_inode(u64::MAX, 0, Vec::new()), link("x", u64::MAX)],
    );
    guarded("mount, create and sync", move || {
        if let Ok(fs) = Fs::mount(dev, cfg(64)) {
            if let Ok(f) = fs.create("y") {
                let _ = f.write_all_at(b"y", 0);
                let _ = f.sync_all();
            };
        }
    });
}

#[test]
fn defect_8_fsck_of_an_extent_of_length_u64_max_reports_it() {
    let dev = ram(16 << 20, 64);
    drop(Fs::format(dev.clone(), cfg(64), 0xE7).unwrap());
    let data = image::superblock(&dev).layout.data_start;
    image::append_frame(
        &dev,
        &[
            file_inode(
                7,
                2 * PAGE_SIZE as u64,
                vec![
                    Extent {
                        file_block: 0,
                        dev: BlockNo(data),
                        len: 1,
                    },
                    Extent {
                        file_block: 1,
                        dev: BlockNo(data + 1),
                        len: u64::MAX,
                    },
                ],
            ),
            link("f", 7),
        ],
    );
    let d = dev.clone();
    let report = guarded("persist::check", move || fsck(&d).map(|r| r.problems));
    assert!(
        report.as_ref().map_or(true, |p| !p.is_empty()),
        "fsck finds nothing wrong"
    );
    let mounted = guarded("Fs::mount", move || Fs::mount(dev, cfg(64)).map(|_| ()));
    assert!(
        mounted.is_err(),
        "mount accepted an extent of length u64::MAX"
    );
}

// ---------------------------------------------------------------------------
// Defect 9: freed blocks are reusable only after a sync.

/// How the full file gives its blocks back.
#[derive(Clone, Copy, Debug)]
enum Free {
    Remove,
    Truncate,
    Punch,
}

fn reuse_freed_space_without_sync(how: Free) {
    let cache = 64;
    let dev = ram(16 << 20, cache);
    let fs = Fs::format(dev, cfg(cache), 0x9F).unwrap();
    let chunk = pattern(1, 0, 64 << 10);
    let mut filled = 0u64;
    let big = fs.create("big").unwrap();
    loop {
        match big.write_at(&chunk, filled) {
            Ok(n) => filled += n as u64,
            Err(Error::Space(SpaceError::DeviceFull)) => break,
            Err(e) => panic!("filling the device: {e:?}"),
        }
    }
    big.sync_all().unwrap();
    assert!(filled > 8 << 20, "setup: filled only {filled} bytes");
    match how {
        Free::Remove => {
            drop(big);
            fs.remove("big").unwrap();
        }
        Free::Truncate => big.set_len(0).unwrap(),
        Free::Punch => big.punch_hole(0, filled).unwrap(),
    }
    // Nine tenths of the space just freed, with no sync in between.
    let want = filled / 10 * 9;
    let new = fs.create("new").unwrap();
    let mut off = 0;
    while off < want {
        let n = (want - off).min(chunk.len() as u64) as usize;
        if let Err(e) = new.write_all_at(&chunk[..n], off) {
            panic!(
                "{how:?} of a {filled}-byte file, no sync: writing a new file fails at \
                 {off} of {want} bytes: {e:?}"
            );
        }
        off += n as u64;
    }
}

#[test]
fn defect_9_space_freed_by_remove_is_reusable_without_sync() {
    reuse_freed_space_without_sync(Free::Remove);
}

#[test]
fn defect_9_space_freed_by_truncate_is_reusable_without_sync() {
    reuse_freed_space_without_sync(Free::Truncate);
}

#[test]
fn defect_9_space_freed_by_punch_hole_is_reusable_without_sync() {
    reuse_freed_space_without_sync(Free::Punch);
}

/// A checksum-valid inode record of a regular file, for crafted images.
fn file_inode(ino: u64, size: u64, extents: Vec<Extent>) -> Record {
    let mut meta = pollfs_core::persist::record::InodeMeta::new(
        pollfs_core::persist::record::Kind::File,
        0o644,
        0,
        0,
        0,
    );
    meta.size = size;
    meta.extents = extents;
    Record::Inode { ino, meta }
}

/// A link of `ino` into the root as `name`.
fn link(name: &str, ino: u64) -> Record {
    Record::Link {
        parent: pollfs_core::units::ROOT_INO,
        name: name.into(),
        ino,
    }
}
