//! Durability without crashes: format, write, sync, remount, and corrupted
//! images that must give clear errors.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;

use pollfs_core::dev::ram::RamDevice;
use pollfs_core::dev::BlockDevice;
use pollfs_core::error::{Damage, IndexDamage};
use pollfs_core::persist::index::PageDamage;
use pollfs_core::{Error, File, Fs, InodeId, NewInode};
use pollfs_host_tests::model::pattern;
use pollfs_host_tests::setup::{config, fsck_clean};

fn device() -> RamDevice {
    RamDevice::new(32 << 20, 4096, 96).unwrap()
}

fn mount(dev: &RamDevice) -> Fs<RamDevice> {
    Fs::mount(dev.clone(), config(64)).unwrap()
}

#[test]
fn synced_files_survive_a_remount() {
    let dev = device();
    let fs = Fs::format(dev.clone(), config(64), 42).unwrap();
    let s = fs.session().unwrap();
    let a = fs.create("a").unwrap();
    a.write_all_at(&pattern(1, 0, 300_000), 0).unwrap();
    a.sync_all().unwrap();
    let b = fs.create("b").unwrap();
    b.write_all_at(&pattern(2, 0, 5000), 0).unwrap();
    b.sync_data().unwrap();
    fs.rename("b", "c").unwrap();
    a.set_len(100_000).unwrap();
    a.sync_all().unwrap();
    drop((a, b));
    drop(s);
    drop(fs);

    let fs = mount(&dev);
    assert_eq!(fs.list(), ["a", "c"]);
    let a = fs.open("a").unwrap();
    assert_eq!(a.len(), 100_000);
    let mut buf = vec![0; 100_000];
    a.read_at(&mut buf, 0).unwrap();
    assert_eq!(buf, pattern(1, 0, 100_000));
    let c = fs.open("c").unwrap();
    let mut buf = vec![0; 5000];
    c.read_at(&mut buf, 0).unwrap();
    assert_eq!(buf, pattern(2, 0, 5000));
    fs.check_invariants().unwrap();
    let report = fsck_clean(&dev);
    assert_eq!(report.files, 3, "two files and the root");
}

#[test]
fn many_syncs_fill_the_log_and_checkpoint() {
    let dev = device();
    let fs = Fs::format(dev.clone(), config(64), 7).unwrap();
    let s = fs.session().unwrap();
    let f = fs.create("log").unwrap();
    // Each append + sync is one log write; enough of them wrap the log
    // several times, forcing checkpoints.
    for i in 0..3000u64 {
        f.write_all_at(&pattern(i, i * 100, 100), i * 100).unwrap();
        f.sync_data().unwrap();
    }
    drop(f);
    drop(s);
    drop(fs);
    let fs = mount(&dev);
    let f = fs.open("log").unwrap();
    assert_eq!(f.len(), 300_000);
    let mut buf = vec![0; 100];
    f.read_at(&mut buf, 2999 * 100).unwrap();
    assert_eq!(buf, pattern(2999, 2999 * 100, 100));
}

/// Device writes and flushes of one write and sync on `dev`'s
/// filesystem `fs` (file `f`).
fn costs<D: BlockDevice>(
    fs: &Fs<D>,
    f: &pollfs_core::File<D>,
    off: u64,
    len: usize,
    all: bool,
) -> (u64, u64) {
    let before = fs.stats();
    f.write_all_at(&pattern(off, off, len), off).unwrap();
    if all {
        f.sync_all().unwrap();
    } else {
        f.sync_data().unwrap();
    }
    let d = fs.stats().since(&before);
    (d.dev_writes, d.dev_flushes)
}

/// The commands of a small sync: its data rides in its log write, so on a
/// device with FUA an overwrite or an append with fdatasync or fsync is
/// one write; without FUA, one write and one flush. A sync too large for
/// the log writes the pages to their blocks, flushes, and logs the inode
/// only if it changed.
#[test]
fn sync_costs_match_the_fast_fsync_design() {
    use pollfs_host_tests::crash::RecordingDevice;
    for fua in [true, false] {
        let ram = device();
        drop(Fs::format(ram.clone(), config(64), 9).unwrap());
        let dev = if fua {
            RecordingDevice::new(ram.clone())
        } else {
            RecordingDevice::without_fua(ram.clone())
        };
        let fs = Fs::mount(dev, config(64)).unwrap();
        let f = fs.create("f").unwrap();
        f.write_all_at(&pattern(1, 0, 64 * 1024), 0).unwrap();
        f.sync_data().unwrap();
        let flush = u64::from(!fua);
        let one = (1, flush);
        assert_eq!(
            costs(&fs, &f, 4096, 4096, false),
            one,
            "overwrite, fdatasync"
        );
        assert_eq!(costs(&fs, &f, 65536, 4096, false), one, "append, fdatasync");
        assert_eq!(costs(&fs, &f, 69632, 4096, true), one, "append, fsync");
        assert_eq!(
            costs(&fs, &f, 8192, 100, false),
            one,
            "100 bytes, fdatasync"
        );
        // Four pages still fit one log write.
        assert_eq!(costs(&fs, &f, 16384, 4 * 4096, false), one, "4 pages");
        // Eight do not: written in place (the pages logged before too),
        // a flush, and a log write of home records for the logged ones.
        let (w, fl) = costs(&fs, &f, 0, 8 * 4096, false);
        assert!(
            fl == 1 + flush && (2..=9).contains(&w),
            "fua {fua}, 8 pages: {w} writes {fl} flushes"
        );
        // Nothing new: no command at all.
        let before = fs.stats();
        f.sync_data().unwrap();
        let d = fs.stats().since(&before);
        assert_eq!((d.dev_writes, d.dev_flushes), (0, 0), "idle sync");
        // What was logged is on the device after a remount, and the file
        // reads back whole.
        let want = {
            let mut b = vec![0u8; f.len() as usize];
            f.read_exact_at(&mut b, 0).unwrap();
            b
        };
        drop(f);
        drop(fs);
        let fs = mount(&ram);
        let f = fs.open("f").unwrap();
        let mut got = vec![0u8; want.len()];
        f.read_exact_at(&mut got, 0).unwrap();
        assert!(got == want, "fua {fua}: contents after a remount");
    }
}

#[test]
fn eight_concurrent_syncs_share_flushes() {
    let dev = RamDevice::new(32 << 20, 4096, 200).unwrap();
    let fs = Fs::format(dev.clone(), config(150), 11).unwrap();
    let files: Vec<_> = (0..8)
        .map(|i| fs.create(&format!("f{i}")).unwrap())
        .collect();
    for (i, f) in files.iter().enumerate() {
        f.write_all_at(&pattern(i as u64, 0, 4096), 0).unwrap();
    }
    let before = fs.stats();
    // Eight tasks on one thread, interleaved by a simple round-robin poll.
    let mut futs: Vec<_> = files.iter().map(|f| Box::pin(f.sync_all_async())).collect();
    let mut done = vec![false; futs.len()];
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    while done.iter().any(|d| !d) {
        for (i, fut) in futs.iter_mut().enumerate() {
            if !done[i] {
                if let std::task::Poll::Ready(r) = fut.as_mut().poll(&mut cx) {
                    r.unwrap();
                    done[i] = true;
                }
            }
        }
    }
    let d = fs.stats().since(&before);
    assert!(
        d.dev_flushes <= 2,
        "8 concurrent syncs took {} flushes",
        d.dev_flushes
    );
    println!(
        "8 concurrent syncs: {} flushes, {} device writes",
        d.dev_flushes, d.dev_writes
    );
}

#[test]
fn damaged_images_give_clear_errors() {
    let dev = device();
    drop(Fs::format(dev.clone(), config(64), 5).unwrap());
    // Both superblocks gone.
    let blank = device();
    match Fs::mount(blank, config(64)) {
        Err(Error::Corrupt { block, damage }) => {
            assert!(block <= 1 && damage == Damage::NotPollfs, "{damage}")
        }
        other => panic!("mounting a blank device gave {other:?}"),
    }
    // A bit flipped in the index's root page.
    let mut block = vec![0u8; 4096];
    dev.read_raw(4096, &mut block);
    let sb = pollfs_core::persist::format::Superblock::decode(&block).unwrap();
    let root = sb.root.block * 4096;
    let mut page = vec![0u8; 4096];
    dev.read_raw(root, &mut page);
    page[100] ^= 0xff;
    dev.write_raw(root, &page);
    match Fs::mount(dev.clone(), config(64)) {
        Err(Error::Corrupt {
            block,
            damage: Damage::Index(IndexDamage::Page(PageDamage::Checksum)),
        }) if block == sb.root.block => {}
        other => panic!("{other:?}"),
    }
    let report = pollfs_core::persist::check(
        &dev,
        pollfs_core::hosted::monotonic_clock,
        std::thread::yield_now,
    )
    .unwrap();
    assert!(!report.problems.is_empty());
    assert!(dev.geometry().capacity > 0);
}

#[test]
fn failed_log_writes_and_flushes_are_reported_and_retried() {
    use pollfs_core::dev::fault::{FaultPlan, FaultyDevice};
    use pollfs_core::dev::{CommandKind, DevError};
    let ram = device();
    let plan = FaultPlan::new();
    let fs = Fs::format(FaultyDevice::new(ram.clone(), plan.clone()), config(64), 3).unwrap();
    let s = fs.session().unwrap();
    let f = fs.create("f").unwrap();
    // Too many pages for the log: written in place, then flushed.
    f.write_all_at(&pattern(1, 0, 40_000), 0).unwrap();
    // The flush before the log write fails: this sync and the next report
    // it; nothing is lost.
    plan.fail(CommandKind::Flush, 2, DevError::Media);
    assert_eq!(f.sync_data(), Err(Error::Io(DevError::Media)));
    assert_eq!(f.sync_data(), Err(Error::Io(DevError::Media)));
    f.sync_data().unwrap();
    // Now the log write itself fails, for a large sync (data first, then
    // the log) and for a small one (its data in the log write).
    f.write_all_at(&pattern(2, 10_000, 25_000), 10_000).unwrap();
    plan.fail(CommandKind::Write, u64::MAX, DevError::Media);
    assert!(f.sync_all().is_err());
    plan.heal();
    f.sync_all().unwrap();
    f.write_all_at(&pattern(3, 36_000, 3000), 36_000).unwrap();
    plan.fail(CommandKind::Write, 1, DevError::Media);
    assert_eq!(f.sync_data(), Err(Error::Io(DevError::Media)));
    f.sync_data().unwrap();
    drop(f);
    drop(s);
    drop(fs);
    let fs = mount(&ram);
    let f = fs.open("f").unwrap();
    assert_eq!(f.len(), 40_000);
    let mut buf = vec![0; 40_000];
    f.read_at(&mut buf, 0).unwrap();
    let mut want = pattern(1, 0, 40_000);
    want[10_000..35_000].copy_from_slice(&pattern(2, 10_000, 25_000));
    want[36_000..39_000].copy_from_slice(&pattern(3, 36_000, 3000));
    assert!(buf == want, "contents after the failures and a remount");
    let report = pollfs_core::persist::check(
        &ram,
        pollfs_core::hosted::monotonic_clock,
        std::thread::yield_now,
    )
    .unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

/// fsck's repair: a log write damaged in the middle of the log makes mount
/// refuse; repair keeps what precedes the damage, leaves an image fsck
/// calls clean, which mounts with every byte synced before the damaged
/// write, and works on.
#[test]
fn repair_keeps_what_precedes_a_hole_in_the_log() {
    use pollfs_host_tests::image;
    let dev = device();
    {
        let fs = Fs::format(dev.clone(), config(64), 9).unwrap();
        let f = fs.create("f").unwrap();
        for i in 0..6u64 {
            f.write_all_at(&pattern(i, i * 3000, 3000), i * 3000)
                .unwrap();
            f.sync_data().unwrap();
        }
    }
    let frames = image::live_frames(&dev);
    assert_eq!(frames.len(), 6, "one log write per sync");
    let sb = image::superblock(&dev);
    let at = (sb.layout.log_start + frames[3].block) * 4096 + 60;
    let mut b = [0u8; 1];
    dev.read_raw(at, &mut b);
    dev.write_raw(at, &[b[0] ^ 0x10]);
    match Fs::mount(dev.clone(), config(64)) {
        Err(Error::Corrupt {
            damage: Damage::LogHole { lsn, later_lsn },
            ..
        }) => assert!(later_lsn > lsn, "{lsn} {later_lsn}"),
        other => panic!("mount of a log with a hole gave {other:?}"),
    }
    let clock = pollfs_core::hosted::monotonic_clock;
    let before = pollfs_core::persist::check(&dev, clock, std::thread::yield_now).unwrap();
    assert!(!before.problems.is_empty());
    let r = pollfs_core::persist::repair(&dev, clock, std::thread::yield_now).unwrap();
    assert!(
        r.repaired.iter().any(|x| x.contains("log write")),
        "{:?}",
        r.repaired
    );
    assert!(r.after.problems.is_empty(), "{:?}", r.after.problems);
    let fs = mount(&dev);
    let s = fs.session().unwrap();
    let f = fs.open("f").unwrap();
    assert_eq!(f.len(), 9000, "the three syncs before the damaged write");
    let mut buf = vec![0; 9000];
    f.read_at(&mut buf, 0).unwrap();
    for i in 0..3u64 {
        let at = (i * 3000) as usize;
        assert_eq!(&buf[at..at + 3000], &pattern(i, i * 3000, 3000)[..]);
    }
    // It works on: more syncs, a remount, fsck clean.
    f.write_all_at(&pattern(9, 9000, 5000), 9000).unwrap();
    f.sync_all().unwrap();
    drop(f);
    drop(s);
    fs.unmount().unwrap();
    let fs = mount(&dev);
    assert_eq!(fs.open("f").unwrap().len(), 14_000);
    let report = pollfs_core::persist::check(&dev, clock, std::thread::yield_now).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

/// Repair drops what breaks an invariant: a checksum-valid record that maps
/// blocks past its file's EOF and a block another file owns.
#[test]
fn repair_drops_extents_past_eof_and_blocks_owned_twice() {
    use pollfs_core::persist::record::Record;
    use pollfs_host_tests::image;
    let dev = device();
    let (a, b) = {
        let fs = Fs::format(dev.clone(), config(64), 10).unwrap();
        let a = fs.create("a").unwrap();
        a.write_all_at(&pattern(1, 0, 8192), 0).unwrap();
        let b = fs.create("b").unwrap();
        b.write_all_at(&pattern(2, 0, 8192), 0).unwrap();
        fs.sync().unwrap();
        // As the records hold them.
        (a.ino().get(), b.ino().get())
    };
    let sb = image::superblock(&dev);
    let data = sb.layout.data_start;
    // `a` keeps its two blocks but claims a third past its EOF; `b`
    // claims one of `a`'s blocks.
    let state = |ino, size, extents: Vec<(u64, u64, u64)>| {
        let mut meta =
            pollfs_core::persist::record::InodeMeta::new(pollfs_core::Kind::File, 0o644, 0, 0, 0);
        meta.nlink = 1;
        meta.size = size;
        meta.extents = extents
            .into_iter()
            .map(|(file_block, dev, len)| pollfs_core::space::Extent {
                file_block,
                dev: pollfs_core::units::BlockNo(dev),
                len,
            })
            .collect();
        Record::Inode { ino, meta }
    };
    let fs = mount(&dev);
    let (a_ext, b_ext): (Vec<_>, Vec<_>) = {
        let blocks = |name: &str| {
            let f = fs.open(name).unwrap();
            let mut v = Vec::new();
            // The extents are not public: find them by looking for each
            // page's bytes on the device.
            for p in 0..2u64 {
                let mut page = vec![0; 4096];
                f.read_at(&mut page, p * 4096).unwrap();
                for blk in data..sb.layout.blocks {
                    let mut on = vec![0; 4096];
                    dev.read_raw(blk * 4096, &mut on);
                    if on == page {
                        v.push((p, blk, 1));
                        break;
                    }
                }
            }
            v
        };
        (blocks("a"), blocks("b"))
    };
    drop(fs);
    assert_eq!((a_ext.len(), b_ext.len()), (2, 2));
    let mut a_bad = a_ext.clone();
    a_bad.push((5, b_ext[0].1 + 100, 1));
    let mut b_bad = b_ext.clone();
    b_bad[1].1 = a_ext[0].1;
    image::append_frame(&dev, &[state(a, 8192, a_bad), state(b, 8192, b_bad)]);
    assert!(matches!(
        Fs::mount(dev.clone(), config(64)),
        Err(Error::Corrupt {
            damage: Damage::Inconsistent { .. },
            ..
        })
    ));
    let clock = pollfs_core::hosted::monotonic_clock;
    let r = pollfs_core::persist::repair(&dev, clock, std::thread::yield_now).unwrap();
    assert_eq!(r.repaired.len(), 2, "{:?}", r.repaired);
    assert!(r.after.problems.is_empty(), "{:?}", r.after.problems);
    let fs = mount(&dev);
    fs.check_invariants().unwrap();
    let mut buf = vec![0; 8192];
    fs.open("a").unwrap().read_at(&mut buf, 0).unwrap();
    assert_eq!(buf, pattern(1, 0, 8192), "a keeps its blocks");
}

/// `Fs::sync` makes everything durable, names included, with no file
/// handle; `Fs::unmount` also checkpoints, so the next mount replays
/// nothing; dropping without either keeps only what was synced.
#[test]
fn fs_sync_and_unmount_cover_everything() {
    let clock = pollfs_core::hosted::monotonic_clock;
    let dev = device();
    {
        let fs = Fs::format(dev.clone(), config(64), 11).unwrap();
        let s = fs.session().unwrap();
        for name in ["a", "b", "c"] {
            fs.create(name)
                .unwrap()
                .write_all_at(name.as_bytes(), 0)
                .unwrap();
        }
        drop(s);
        fs.remove("a").unwrap();
        fs.rename("b", "d").unwrap();
        fs.sync().unwrap();
        // Not synced: lost with the drop, as in a power cut.
        fs.rename("c", "e").unwrap();
    }
    let fs = mount(&dev);
    assert_eq!(fs.list(), ["c", "d"]);
    let mut buf = [0u8; 1];
    fs.open("d").unwrap().read_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"b");
    fs.rename("c", "e").unwrap();
    fs.unmount().unwrap();
    let report = pollfs_core::persist::check(&dev, clock, std::thread::yield_now).unwrap();
    assert_eq!(report.log_writes, 0, "unmount left a log to replay");
    assert_eq!(mount(&dev).list(), ["d", "e"]);
}

#[test]
fn allocated_blocks_and_sizes_survive_a_remount() {
    use pollfs_core::Allocate;
    let dev = device();
    let fs = Fs::format(dev.clone(), config(64), 12).unwrap();
    let a = fs.create("a").unwrap();
    a.write_all_at(&pattern(3, 0, 5000), 0).unwrap();
    a.allocate(0, 8000, Allocate::Reserve { keep_size: false })
        .unwrap();
    a.allocate(1000, 20_000, Allocate::Reserve { keep_size: true })
        .unwrap();
    a.allocate(100, 50, Allocate::ZeroRange { keep_size: false })
        .unwrap();
    a.sync_all().unwrap();
    let blocks = a.metadata().blocks;
    drop(a);
    drop(fs);

    let fs = mount(&dev);
    let a = fs.open("a").unwrap();
    assert_eq!((a.len(), a.metadata().blocks), (8000, blocks));
    let mut want = pattern(3, 0, 5000);
    want[100..150].fill(0);
    want.resize(8000, 0);
    let mut buf = vec![1; 8000];
    a.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(buf, want);
    fs.check_invariants().unwrap();
    fsck_clean(&dev);
}

/// A hosted mount (its log thread running) with one file of 100 pages,
/// synced, and the file's bytes. The cache holds 64 pages and throttles
/// writers past 32 dirty ones: fewer small syncs than that leave their
/// pages logged for the log thread.
fn one_synced_file(dev: &RamDevice, uuid: u64) -> (Fs<RamDevice>, File<RamDevice>, Vec<u8>) {
    let fs = Fs::format(dev.clone(), config(64), uuid).unwrap();
    let f = fs.create("f").unwrap();
    f.write_all_at(&pattern(1, 0, 100 * 4096), 0).unwrap();
    f.sync_all().unwrap();
    let mut want = vec![0u8; 100 * 4096];
    f.read_exact_at(&mut want, 0).unwrap();
    (fs, f, want)
}

/// Writes `len` bytes of pattern `i` at `off` into `f` and `want`, and
/// syncs the data: a small sync, its page logged.
fn small_sync(f: &File<RamDevice>, want: &mut [u8], i: u64, off: u64, len: usize) {
    let bytes = pattern(i + 2, off, len);
    f.write_all_at(&bytes, off).unwrap();
    want[off as usize..off as usize + len].copy_from_slice(&bytes);
    f.sync_data().unwrap();
}

/// Remounts `dev` and checks that file "f" holds `want`.
fn remount_holds(dev: &RamDevice, want: &[u8], what: &str) {
    let fs = mount(dev);
    let mut got = vec![0u8; want.len()];
    fs.open("f").unwrap().read_exact_at(&mut got, 0).unwrap();
    assert!(got == want, "contents after a remount ({what})");
}

/// The write-home thread of a hosted mount (`Config::background`, the
/// thread `pollfs_hosted::config` names): small syncs past the log's low-water mark for data
/// wake it, it writes logged pages home, and the mount's last handle
/// stops it (the drop returns). What was synced survives a remount.
#[test]
fn the_write_home_thread_writes_logged_pages_home() {
    let dev = device();
    let (fs, f, mut want) = one_synced_file(&dev, 11);
    // 32 MiB: a log of 256 blocks, a share of 64 pages, due from 16. Past
    // the mark, below the share and below the cache's dirty limit, so the
    // thread alone may write them home (no sync finds the share full and
    // no writer is throttled).
    for i in 0..24u64 {
        small_sync(&f, &mut want, i, (i * 37 % 100) * 4096 + i, 200);
    }
    // The thread was woken when pages came due; it runs on its own time.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while fs.stats().homed_pages == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the write-home thread wrote nothing in 20 s"
        );
        std::thread::yield_now();
    }
    assert_eq!(fs.stats().home_on_sync, 0);
    drop(f);
    drop(fs);
    remount_holds(&dev, &want, "24 syncs");
}

/// The log thread also checkpoints (`Session::background_step`), with
/// frames of its own, while syncs go on committing: small syncs on a
/// 32 MiB device (a log of 256 blocks, half full every few dozen syncs)
/// until the thread has written checkpoints, then a remount shows every
/// synced byte and fsck finds nothing wrong.
#[test]
fn the_log_thread_checkpoints_beside_syncs() {
    let dev = device();
    let (fs, f, mut want) = one_synced_file(&dev, 12);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut i = 0u64;
    while fs.stats().background_checkpoints < 20 {
        assert!(
            std::time::Instant::now() < deadline,
            "the log thread wrote {} checkpoints in 60 s ({i} syncs)",
            fs.stats().background_checkpoints
        );
        small_sync(&f, &mut want, i, (i * 37 % 100) * 4096 + i % 3000, 300);
        i += 1;
    }
    drop(f);
    drop(fs);
    remount_holds(&dev, &want, &format!("{i} syncs"));
    fsck_clean(&dev);
}

/// A filesystem of `files` files of 100 bytes in directories of 100,
/// unmounted (so its index holds them all).
fn filled(files: u64) -> RamDevice {
    let dev = RamDevice::new(64 << 20, 4096, 96).unwrap();
    let fs = Fs::format(dev.clone(), config(64), 11).unwrap();
    for d in 0..files.div_ceil(100) {
        fs.mkdir(&format!("d{d}")).unwrap();
    }
    for i in 0..files {
        let f = fs.create(&format!("d{}/f{i}", i / 100)).unwrap();
        f.write_all_at(&pattern(i, 0, 100), 0).unwrap();
    }
    fs.unmount().unwrap();
    dev
}

/// What the checkpoint of an unmount writes after one file's permission
/// bits changed and were synced: (its bytes, the bytes of a checkpoint
/// of everything).
fn one_change(dev: &RamDevice) -> (u64, u64) {
    let fs = mount(dev);
    let f = fs.lookup("d0/f7").unwrap();
    fs.set_attr(
        f,
        pollfs_core::fs::SetAttr {
            perm: Some(0o600),
            ..Default::default()
        },
    )
    .unwrap();
    fs.sync().unwrap();
    let before = fs.stats();
    fs.clone().unmount().unwrap();
    let d = fs.stats().since(&before);
    assert_eq!(d.checkpoints, 1, "{d:?}");
    // The whole view, for scale: what format 5 wrote every time.
    let whole = pollfs_core::persist::check(
        dev,
        pollfs_core::hosted::monotonic_clock,
        std::thread::yield_now,
    )
    .unwrap();
    assert!(whole.problems.is_empty(), "{:?}", whole.problems);
    (d.checkpoint_bytes, whole.checkpoint_blocks * 4096)
}

/// A checkpoint writes the pages that hold what changed and the branches
/// above them, not the whole metadata: one file's change costs the same
/// few pages with 300 files as with 3,000 (counted, not timed).
#[test]
fn a_checkpoint_writes_what_changed_not_the_filesystem() {
    let small = one_change(&filled(300));
    let large = one_change(&filled(3000));
    println!("one change: {small:?} with 300 files, {large:?} with 3,000 (bytes written, bytes of the index)");
    for (written, whole) in [small, large] {
        // A leaf and the branches above it: at most a page per level.
        assert!(written <= 4 * 4096, "{written} bytes for one change");
        assert!(written > 0);
        assert!(whole >= 4 * written, "the index is {whole} bytes");
    }
    assert!(
        large.1 >= 8 * small.1 / 2,
        "the index grows with the files: {small:?} {large:?}"
    );
    assert!(
        large.0 <= small.0 + 4096,
        "one more level at most: {small:?} {large:?}"
    );
}

/// A format 5 image (its version field says so, with a valid checksum)
/// is refused by name, not read as something else.
#[test]
fn an_image_of_format_5_is_refused_by_name() {
    let dev = device();
    drop(Fs::format(dev.clone(), config(64), 5).unwrap());
    for copy in 0..2u64 {
        let mut block = vec![0u8; 4096];
        dev.read_raw(copy * 4096, &mut block);
        block[8..12].copy_from_slice(&5u32.to_le_bytes());
        dev.write_raw(copy * 4096, &block);
    }
    match Fs::mount(dev.clone(), config(64)) {
        Err(
            e @ Error::Corrupt {
                damage:
                    Damage::Version {
                        found: 5,
                        supported: 6,
                    },
                ..
            },
        ) => {
            let said = e.to_string();
            assert!(
                said.contains("format version 5, but this pollfs reads version 6"),
                "{said}"
            );
        }
        other => panic!("{other:?}"),
    }
}

/// Index pages that are whole and checksum-valid but not what their
/// parent names (an older page where a newer one belongs, a page written
/// for another block), and an item that does not decode, are refused by
/// mount and reported by fsck, each as what it is.
#[test]
fn crafted_index_pages_are_refused_as_what_they_are() {
    let base = filled(300);
    let sb = {
        let mut b = vec![0u8; 4096];
        base.read_raw(0, &mut b);
        let a = pollfs_core::persist::format::Superblock::decode(&b).unwrap();
        base.read_raw(4096, &mut b);
        let c = pollfs_core::persist::format::Superblock::decode(&b).unwrap();
        if a.generation > c.generation {
            a
        } else {
            c
        }
    };
    assert!(sb.root.level >= 1, "a tree with branches");
    let page = |dev: &RamDevice, block: u64| {
        let mut p = vec![0u8; 4096];
        dev.read_raw(block * 4096, &mut p);
        p
    };
    let seal = pollfs_core::persist::index::page::seal;
    // The root's first child: (block, generation) at the start of the
    // root's payload.
    let root = page(&base, sb.root.block);
    let child = u64::from_le_bytes(root[40..48].try_into().unwrap());
    let refused = |dev: &RamDevice, want: &dyn Fn(&Damage) -> bool| {
        match Fs::mount(dev.clone(), config(64)) {
            Err(Error::Corrupt { damage, .. }) if want(&damage) => {}
            other => panic!("{other:?}"),
        }
        let report = pollfs_core::persist::check(
            dev,
            pollfs_core::hosted::monotonic_clock,
            std::thread::yield_now,
        )
        .unwrap();
        assert!(!report.problems.is_empty());
    };
    let copy = || {
        let mut all = vec![0u8; 64 << 20];
        base.read_raw(0, &mut all);
        let d = RamDevice::new(64 << 20, 4096, 96).unwrap();
        d.write_raw(0, &all);
        d
    };
    // An older generation in a whole page: a lost write.
    let dev = copy();
    let mut p = page(&dev, child);
    let gen = u64::from_le_bytes(p[24..32].try_into().unwrap());
    p[24..32].copy_from_slice(&(gen - 1).to_le_bytes());
    seal(&mut p);
    dev.write_raw(child * 4096, &p);
    refused(
        &dev,
        &|d| matches!(d, Damage::Index(IndexDamage::Page(PageDamage::Stale { found })) if *found == gen - 1),
    );
    // A page written for another block.
    let dev = copy();
    let mut p = page(&dev, child);
    p[32..40].copy_from_slice(&(child + 1).to_le_bytes());
    seal(&mut p);
    dev.write_raw(child * 4096, &p);
    refused(
        &dev,
        &|d| matches!(d, Damage::Index(IndexDamage::Page(PageDamage::Misplaced { written_for })) if *written_for == child + 1),
    );
    // The first item of the first leaf (an inode's: the root directory's)
    // given an unknown kind: its value starts after the key (17 bytes)
    // and its length (2).
    let dev = copy();
    let mut block = child;
    let mut level = sb.root.level - 1;
    while level > 0 {
        let p = page(&dev, block);
        block = u64::from_le_bytes(p[40..48].try_into().unwrap());
        level -= 1;
    }
    let mut p = page(&dev, block);
    assert_eq!(p[40 + 8], 1, "the first item is an inode's");
    p[40 + 17 + 2] = 99;
    seal(&mut p);
    dev.write_raw(block * 4096, &p);
    refused(&dev, &|d| {
        matches!(d, Damage::Index(IndexDamage::Item { .. }))
    });
}

/// Looking at every file of a remounted filesystem builds each inode from
/// the durable view, and idle inodes leave memory again: what stays is
/// about what the passes have not looked at yet, not the file count.
#[test]
fn stat_of_every_file_leaves_few_inodes_in_memory() {
    let dev = RamDevice::new(64 << 20, 4096, 96).unwrap();
    let fs = Fs::format(dev.clone(), config(64), 11).unwrap();
    let who = NewInode {
        perm: 0o644,
        uid: 0,
        gid: 0,
    };
    let files = 600u64;
    for i in 0..files {
        let f = fs.create_in(InodeId::ROOT, &format!("f{i}"), who).unwrap();
        f.write_all_at(&i.to_le_bytes(), 0).unwrap();
    }
    fs.sync().unwrap();
    fs.unmount().unwrap();

    let fs = mount(&dev);
    assert!(
        fs.inodes_in_memory() < 4,
        "{} after mount",
        fs.inodes_in_memory()
    );
    let mut seen = 0;
    let mut after = 0;
    loop {
        let batch = fs.read_dir(InodeId::ROOT, after, 64).unwrap();
        let Some(last) = batch.last() else { break };
        after = last.cookie;
        for e in &batch {
            let m = fs.attr(e.ino).unwrap();
            assert_eq!(m.len, 8, "{}", e.name);
            seen += 1;
        }
    }
    assert_eq!(seen, files);
    let held = fs.inodes_in_memory();
    assert!(held < files / 4, "{held} of {files} inodes still in memory");
    fs.check_invariants().unwrap();
    fs.unmount().unwrap();
}
