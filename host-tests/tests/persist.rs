//! Durability without crashes: format, write, sync, remount, and corrupted
//! images that must give clear errors.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;

use pollfs_core::dev::ram::RamDevice;
use pollfs_core::dev::BlockDevice;
use pollfs_core::error::Damage;
use pollfs_core::{Error, Fs};
use pollfs_host_tests::model::pattern;
use pollfs_host_tests::setup::config;

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
    let a = s.create("a").unwrap();
    a.write_all_at(&pattern(1, 0, 300_000), 0).unwrap();
    a.sync_all().unwrap();
    let b = s.create("b").unwrap();
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
    let s = fs.session().unwrap();
    let a = s.open("a").unwrap();
    assert_eq!(a.len(), 100_000);
    let mut buf = vec![0; 100_000];
    a.read_at(&mut buf, 0).unwrap();
    assert_eq!(buf, pattern(1, 0, 100_000));
    let c = s.open("c").unwrap();
    let mut buf = vec![0; 5000];
    c.read_at(&mut buf, 0).unwrap();
    assert_eq!(buf, pattern(2, 0, 5000));
    fs.check_invariants().unwrap();
    let report = pollfs_core::persist::check(
        &dev,
        pollfs_core::hosted::monotonic_clock,
        std::thread::yield_now,
    )
    .unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!(report.files, 2);
}

#[test]
fn many_syncs_fill_the_log_and_checkpoint() {
    let dev = device();
    let fs = Fs::format(dev.clone(), config(64), 7).unwrap();
    let s = fs.session().unwrap();
    let f = s.create("log").unwrap();
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
    let s = fs.session().unwrap();
    let f = s.open("log").unwrap();
    assert_eq!(f.len(), 300_000);
    let mut buf = vec![0; 100];
    f.read_at(&mut buf, 2999 * 100).unwrap();
    assert_eq!(buf, pattern(2999, 2999 * 100, 100));
}

#[test]
fn sync_costs_match_the_fast_fsync_design() {
    let dev = device();
    let fs = Fs::format(dev.clone(), config(64), 9).unwrap();
    let s = fs.session().unwrap();
    let f = s.create("f").unwrap();
    f.write_all_at(&pattern(1, 0, 64 * 1024), 0).unwrap();
    f.sync_data().unwrap();
    // Overwrite inside EOF: data writes and one flush, no log write.
    let before = fs.stats();
    f.write_all_at(&pattern(2, 4096, 4096), 4096).unwrap();
    f.sync_data().unwrap();
    let d = fs.stats().since(&before);
    assert_eq!((d.dev_writes, d.dev_flushes), (1, 1), "overwrite: {d:?}");
    // Append: one data write, one flush, one (FUA) log write.
    let before = fs.stats();
    f.write_all_at(&pattern(3, 65536, 4096), 65536).unwrap();
    f.sync_data().unwrap();
    let d = fs.stats().since(&before);
    assert_eq!((d.dev_writes, d.dev_flushes), (2, 1), "append: {d:?}");
}

#[test]
fn eight_concurrent_syncs_share_flushes() {
    let dev = RamDevice::new(32 << 20, 4096, 200).unwrap();
    let fs = Fs::format(dev.clone(), config(150), 11).unwrap();
    let s = fs.session().unwrap();
    let files: Vec<_> = (0..8)
        .map(|i| s.create(&format!("f{i}")).unwrap())
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
    // The checkpoint's checksum.
    let mut block = vec![0u8; 4096];
    dev.read_raw(4096, &mut block);
    let sb = pollfs_core::persist::format::Superblock::decode(&block).unwrap();
    let ckpt = sb.ckpt.block * 4096;
    let mut first = vec![0u8; 4096];
    dev.read_raw(ckpt, &mut first);
    first[44] ^= 0xff;
    dev.write_raw(ckpt, &first);
    match Fs::mount(dev.clone(), config(64)) {
        Err(Error::Corrupt {
            damage: Damage::Checkpoint(what),
            ..
        }) => assert!(what.contains("checksum"), "{what}"),
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

/// The README's example, as written there.
#[test]
fn readme_example_runs() -> Result<(), pollfs_core::Error> {
    use pollfs_core::{hosted, Fs};
    use pollfs_driver::NvmeDevice;

    let dev = NvmeDevice::emulated(64 << 20, 4096, 1024)?;
    let fs = Fs::format(dev, hosted::config(), 0x1234)?;
    let s = fs.session()?;
    let f = s.create("db")?;
    f.write_all_at(b"hello", 0)?;
    f.sync_data()?;
    let mut buf = [0u8; 5];
    f.read_at(&mut buf, 0)?;
    assert_eq!(&buf, b"hello");
    Ok(())
}

#[test]
fn failed_log_writes_and_flushes_are_reported_and_retried() {
    use pollfs_core::dev::fault::{FaultPlan, FaultyDevice};
    use pollfs_core::dev::{CommandKind, DevError};
    let ram = device();
    let plan = FaultPlan::new();
    let fs = Fs::format(FaultyDevice::new(ram.clone(), plan.clone()), config(64), 3).unwrap();
    let s = fs.session().unwrap();
    let f = s.create("f").unwrap();
    f.write_all_at(&pattern(1, 0, 10_000), 0).unwrap();
    // The flush before the log write fails: this sync and the next report
    // it; nothing is lost.
    plan.fail(CommandKind::Flush, 2, DevError::Media);
    assert_eq!(f.sync_data(), Err(Error::Io(DevError::Media)));
    assert_eq!(f.sync_data(), Err(Error::Io(DevError::Media)));
    f.sync_data().unwrap();
    // Now the log write itself fails (writes: data first, then the log).
    f.write_all_at(&pattern(2, 10_000, 5000), 10_000).unwrap();
    plan.fail(CommandKind::Write, u64::MAX, DevError::Media);
    assert!(f.sync_all().is_err());
    plan.heal();
    f.sync_all().unwrap();
    drop(f);
    drop(s);
    drop(fs);
    let fs = mount(&ram);
    let s = fs.session().unwrap();
    let f = s.open("f").unwrap();
    assert_eq!(f.len(), 15_000);
    let mut buf = vec![0; 15_000];
    f.read_at(&mut buf, 0).unwrap();
    assert_eq!(&buf[..10_000], &pattern(1, 0, 10_000)[..]);
    assert_eq!(&buf[10_000..], &pattern(2, 10_000, 5000)[..]);
    let report = pollfs_core::persist::check(
        &ram,
        pollfs_core::hosted::monotonic_clock,
        std::thread::yield_now,
    )
    .unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}
