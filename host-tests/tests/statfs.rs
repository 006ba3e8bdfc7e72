//! `Fs::statfs`: the data area's blocks, free and available space, and
//! inode counts, on a formatted filesystem (with a journal, so blocks are
//! held back for checkpoints and freed blocks wait for a commit).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use pollfs_core::dev::ram::RamDevice;
use pollfs_core::units::MAX_INODE;
use pollfs_core::{Error, Fs};
use pollfs_host_tests::setup::config;

const PAGE: usize = 4096;

fn formatted(bytes: u64) -> Fs<RamDevice> {
    let ram = RamDevice::new(bytes, 4096, 64 + pollfs_core::persist::META_FRAMES).unwrap();
    Fs::format(ram, config(64), 7).unwrap()
}

#[test]
fn counts_follow_writes_removes_and_new_inodes() {
    let fs = formatted(16 << 20);
    let empty = fs.statfs();
    let device = fs.geometry().capacity_pages();
    assert!(
        empty.blocks > 0 && empty.blocks < device,
        "the data area ({}) is the device ({device}) less superblocks and log",
        empty.blocks
    );
    assert!(empty.free <= empty.blocks);
    assert!(
        empty.available < empty.free,
        "blocks are held back for a checkpoint"
    );
    assert_eq!((empty.inodes, empty.inodes_free), (1, MAX_INODE - 1));

    let f = fs.create("a").unwrap();
    f.write_all_at(&[1u8; 10 * PAGE], 0).unwrap();
    fs.mkdir("d").unwrap();
    let used = fs.statfs();
    assert_eq!(used.free, empty.free - 10);
    assert_eq!((used.inodes, used.inodes_free), (3, MAX_INODE - 3));

    drop(f);
    fs.remove("a").unwrap();
    let removed = fs.statfs();
    assert_eq!(
        removed.free, empty.free,
        "freed blocks count before a commit"
    );
    assert_eq!((removed.inodes, removed.inodes_free), (2, MAX_INODE - 3));
    fs.sync().unwrap();
    assert_eq!(fs.statfs().free, empty.free);
}

#[test]
fn nothing_is_available_once_data_fills_the_device() {
    let fs = formatted(4 << 20);
    let f = fs.create("fill").unwrap();
    let chunk = vec![3u8; 16 * PAGE];
    let mut off = 0u64;
    loop {
        match f.write_at(&chunk, off) {
            Ok(n) => off += n as u64,
            Err(Error::Space(_)) => break,
            Err(e) => panic!("{e}"),
        }
    }
    let full = fs.statfs();
    assert_eq!(full.available, 0, "{full:?}");
    assert!(full.free > 0, "the blocks held back stay free: {full:?}");
    let data = f.metadata().blocks;
    assert_eq!(data, off.div_ceil(PAGE as u64));
    assert!(
        full.blocks - full.free >= data,
        "every block of the file is in use: {full:?}, {data} data blocks"
    );
}
