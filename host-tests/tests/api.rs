//! The file API's contract: names, ranges, errors, counters, batching.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use pollfs_core::error::{NameError, NamespaceError, RangeError};
use pollfs_core::{Error, MAX_FILE_SIZE, MAX_NAME_LEN};
use pollfs_host_tests::model::pattern;
use pollfs_host_tests::setup::ram_fs;

#[test]
fn names_are_checked() {
    let fs = ram_fs(4 << 20, 64);
    let bad = |e| Error::Namespace(NamespaceError::Name(e));
    assert_eq!(fs.create("").unwrap_err(), bad(NameError::Empty));
    assert_eq!(
        fs.create(&"x".repeat(MAX_NAME_LEN + 1)).unwrap_err(),
        bad(NameError::TooLong)
    );
    // A path names a file through its directories; `a` does not exist.
    assert_eq!(
        fs.create("a/b").unwrap_err(),
        Error::Namespace(NamespaceError::NotFound)
    );
    let who = pollfs_core::NewInode::new(0o644, 0, 0);
    let root = pollfs_core::InodeId::ROOT;
    assert_eq!(
        fs.create_in(root, "a/b", who).unwrap_err(),
        bad(NameError::BadByte)
    );
    assert_eq!(fs.create("a\0b").unwrap_err(), bad(NameError::BadByte));
    assert_eq!(
        fs.create_in(root, "..", who).unwrap_err(),
        bad(NameError::Dots)
    );
    let long = "y".repeat(MAX_NAME_LEN);
    drop(fs.create(&long).unwrap());
    drop(fs.create("b").unwrap());
    assert_eq!(
        fs.create("b").unwrap_err(),
        Error::Namespace(NamespaceError::Exists)
    );
    assert_eq!(
        fs.open("nope").unwrap_err(),
        Error::Namespace(NamespaceError::NotFound)
    );
    assert_eq!(
        fs.remove("nope").unwrap_err(),
        Error::Namespace(NamespaceError::NotFound)
    );
    assert_eq!(
        fs.rename("nope", "x").unwrap_err(),
        Error::Namespace(NamespaceError::NotFound)
    );
    assert_eq!(fs.list(), vec!["b".to_string(), long]);
}

#[test]
fn ranges_are_checked_and_nothing_changes_on_error() {
    let fs = ram_fs(4 << 20, 64);
    let f = fs.create("f").unwrap();
    f.write_all_at(b"hello", 0).unwrap();
    assert_eq!(
        f.write_at(b"x", u64::MAX).unwrap_err(),
        Error::Range(RangeError::Overflow)
    );
    assert_eq!(
        f.write_at(b"xy", MAX_FILE_SIZE - 1).unwrap_err(),
        Error::Range(RangeError::TooLarge)
    );
    assert_eq!(
        f.set_len(MAX_FILE_SIZE + 1).unwrap_err(),
        Error::Range(RangeError::TooLarge)
    );
    assert_eq!(
        f.punch_hole(u64::MAX, 2).unwrap_err(),
        Error::Range(RangeError::Overflow)
    );
    let mut buf = [0u8; 8];
    assert_eq!(f.read_at(&mut buf, u64::MAX).unwrap(), 0);
    assert_eq!(f.read_at(&mut buf, 2).unwrap(), 3);
    assert_eq!(&buf[..3], b"llo");
    assert_eq!(f.write_at(b"", 1 << 30).unwrap(), 0);
    assert_eq!(f.len(), 5, "an empty write does not extend the file");
    // The largest legal write: one byte at the last offset.
    assert_eq!(f.write_at(b"z", MAX_FILE_SIZE - 1).unwrap(), 1);
    assert_eq!(f.len(), MAX_FILE_SIZE);
    f.set_len(5).unwrap();
    fs.check_invariants().unwrap();
}

#[test]
fn holes_extend_and_truncate_read_back_as_zeros() {
    let fs = ram_fs(4 << 20, 64);
    let f = fs.create("f").unwrap();
    f.write_all_at(&[7u8; 100], 10_000).unwrap();
    let mut buf = vec![1u8; 10_100];
    assert_eq!(f.read_at(&mut buf, 0).unwrap(), 10_100);
    assert!(buf[..10_000].iter().all(|&b| b == 0));
    assert!(buf[10_000..].iter().all(|&b| b == 7));
    f.set_len(10_050).unwrap();
    f.set_len(20_000).unwrap();
    let mut buf = vec![1u8; 100];
    assert_eq!(f.read_at(&mut buf, 10_000).unwrap(), 100);
    assert!(
        buf[..50].iter().all(|&b| b == 7) && buf[50..].iter().all(|&b| b == 0),
        "the tail past a truncate reads zero"
    );
    assert_eq!(
        fs.stats().dev_reads,
        0,
        "holes are never read from the device"
    );
    fs.check_invariants().unwrap();
}

#[test]
fn remove_and_rename_free_blocks_when_the_last_handle_closes() {
    let fs = ram_fs(4 << 20, 64);
    let total = fs.free_blocks();
    let a = fs.create("a").unwrap();
    a.write_all_at(&pattern(1, 0, 5 * 4096), 0).unwrap();
    let b = fs.create("b").unwrap();
    b.write_all_at(&pattern(2, 0, 3 * 4096), 0).unwrap();
    assert_eq!(fs.free_blocks(), total - 8);
    fs.rename("a", "b").unwrap();
    assert_eq!(fs.list(), ["b"]);
    // The replaced file is still open: its data stays readable.
    let mut buf = vec![0; 3 * 4096];
    b.read_at(&mut buf, 0).unwrap();
    assert_eq!(buf, pattern(2, 0, 3 * 4096));
    drop(b);
    assert_eq!(fs.free_blocks(), total - 5);
    let again = fs.open("b").unwrap();
    let mut buf = vec![0; 5 * 4096];
    again.read_at(&mut buf, 0).unwrap();
    assert_eq!(buf, pattern(1, 0, 5 * 4096));
    fs.remove("b").unwrap();
    assert_eq!(fs.free_blocks(), total - 5, "open handles keep the blocks");
    drop(again);
    drop(a);
    assert_eq!(fs.free_blocks(), total);
    fs.check_invariants().unwrap();
}

#[test]
fn writeback_sends_one_command_per_contiguous_run() {
    let fs = ram_fs(16 << 20, 1024);
    let f = fs.create("seq").unwrap();
    for i in 0..256u64 {
        f.write_all_at(&pattern(i, 0, 4096), i * 4096).unwrap();
    }
    let before = fs.stats();
    f.sync_data().unwrap();
    let d = fs.stats().since(&before);
    let max = u64::from(fs.geometry().max_transfer);
    assert_eq!(d.dev_writes, (256 * 4096) / max, "{d:?}");
    assert_eq!(d.dev_write_bytes, 256 * 4096);
    assert_eq!(d.dev_flushes, 1);
}

#[test]
fn sequential_cold_read_is_batched_into_max_transfer_commands() {
    // A 2 MiB cache over an 8 MiB file: the first 4 MiB are cold.
    let fs = ram_fs(64 << 20, 512);
    let f = fs.create("big").unwrap();
    let data = pattern(9, 0, 8 << 20);
    for chunk in 0..8u64 {
        f.write_all_at(
            &data[(chunk as usize) << 20..((chunk as usize + 1) << 20)],
            chunk << 20,
        )
        .unwrap();
    }
    f.sync_data().unwrap();
    // Push every page of `big` out of the cache.
    let scratch = fs.create("scratch").unwrap();
    scratch.write_all_at(&data[..4 << 20], 0).unwrap();
    scratch.sync_data().unwrap();
    let before = fs.stats();
    let mut buf = vec![0u8; 64 << 10];
    for off in (0..4u64 << 20).step_by(buf.len()) {
        assert_eq!(f.read_at(&mut buf, off).unwrap(), buf.len());
        assert_eq!(buf, data[off as usize..off as usize + buf.len()]);
    }
    let d = fs.stats().since(&before);
    let max = u64::from(fs.geometry().max_transfer);
    // Readahead runs past the 4 MiB read: judge commands against the bytes
    // they actually moved.
    assert!(d.dev_read_bytes >= 4 << 20);
    let ideal = d.dev_read_bytes.div_ceil(max);
    assert!(
        d.dev_reads as f64 <= 1.01 * ideal as f64,
        "{} reads for {ideal} ideal",
        d.dev_reads
    );
    assert!(d.readahead_pages > 0);
    assert_eq!(d.dev_read_bytes % 4096, 0);
}

#[test]
fn counters_count_hits_misses_and_evictions() {
    let fs = ram_fs(16 << 20, 16);
    let f = fs.create("f").unwrap();
    f.write_all_at(&pattern(1, 0, 64 * 4096), 0).unwrap();
    f.sync_data().unwrap();
    let before = fs.stats();
    let mut buf = [0u8; 100];
    // Random (non-sequential) single-page reads: a miss, then a hit.
    f.read_at(&mut buf, 40 * 4096 + 7).unwrap();
    f.read_at(&mut buf, 40 * 4096 + 900).unwrap();
    let d = fs.stats().since(&before);
    assert_eq!((d.cache_misses, d.cache_hits), (1, 1), "{d:?}");
    assert!(fs.stats().evictions > 0);
    assert!(fs.metadata_bytes_per_page() <= 64);
}

#[test]
fn the_dirty_limit_throttles_writers_instead_of_failing_them() {
    let fs = ram_fs(16 << 20, 32);
    let f = fs.create("f").unwrap();
    let data = pattern(5, 0, 200 * 4096);
    f.write_all_at(&data, 0).unwrap();
    assert!(
        fs.dirty_pages() <= 16 + 1,
        "dirty pages {} over the limit",
        fs.dirty_pages()
    );
    assert!(fs.stats().dirty_throttles > 0);
    let mut back = vec![0; data.len()];
    f.read_at(&mut back, 0).unwrap();
    assert_eq!(back, data);
}

/// `File::allocate`'s size rules and block counts (fallocate(2)).
mod allocate {
    use super::*;
    use pollfs_core::error::SpaceError;
    use pollfs_core::Allocate;

    const RESERVE: Allocate = Allocate::Reserve { keep_size: false };
    const KEEP: Allocate = Allocate::Reserve { keep_size: true };

    #[test]
    fn linux_modes_map_to_requests_and_the_rest_is_refused() {
        use Allocate::*;
        let from = Allocate::from_linux;
        assert_eq!(from(0), Some(RESERVE));
        assert_eq!(from(1), Some(KEEP));
        assert_eq!(from(3), Some(PunchHole));
        assert_eq!(from(0x10), Some(ZeroRange { keep_size: false }));
        assert_eq!(from(0x11), Some(ZeroRange { keep_size: true }));
        // Punch without keep-size, collapse, insert, unshare, mixtures.
        for refused in [2, 0x08, 0x09, 0x20, 0x21, 0x40, 0x13, 0x80] {
            assert_eq!(from(refused), None, "mode {refused:#x}");
        }
    }

    #[test]
    fn reserve_grows_the_file_wherever_the_old_eof_lies() {
        let fs = ram_fs(8 << 20, 64);
        // The two cases the mount showed: EOF inside the range's only
        // page, and inside its last page.
        for (old, len) in [(100u64, 4096u64), (5000, 8000), (4096, 4097), (0, 1)] {
            let f = fs.create(&format!("f{old}")).unwrap();
            let data = pattern(old, 0, old as usize);
            f.write_all_at(&data, 0).unwrap();
            f.allocate(0, len, RESERVE).unwrap();
            assert_eq!(f.len(), len, "old EOF {old}");
            assert_eq!(f.metadata().blocks, len.div_ceil(4096));
            let mut back = vec![1u8; len as usize];
            f.read_exact_at(&mut back, 0).unwrap();
            assert_eq!(&back[..old as usize], &data[..], "data kept");
            assert!(back[old as usize..].iter().all(|&b| b == 0));
        }
        fs.check_invariants().unwrap();
    }

    #[test]
    fn reserve_maps_holes_and_keeps_data() {
        let fs = ram_fs(8 << 20, 64);
        let f = fs.create("a").unwrap();
        f.write_all_at(&[7u8; 4096], 3 * 4096).unwrap();
        assert_eq!(f.metadata().blocks, 1);
        let before = fs.free_blocks();
        f.allocate(100, 10 * 4096, RESERVE).unwrap();
        assert_eq!(f.len(), 100 + 10 * 4096);
        // Pages 0..=10 are all mapped (page 10 holds the range's tail).
        assert_eq!(f.metadata().blocks, 11);
        assert_eq!(before - fs.free_blocks(), 10);
        let mut page = [0u8; 4096];
        f.read_exact_at(&mut page, 3 * 4096).unwrap();
        assert_eq!(page, [7u8; 4096], "data in the range is kept");
        fs.check_invariants().unwrap();
    }

    #[test]
    fn keep_size_never_changes_the_size_and_reserves_inside_eof() {
        let fs = ram_fs(8 << 20, 64);
        let f = fs.create("a").unwrap();
        f.set_len(8 * 4096 + 100).unwrap();
        // Past EOF: accepted, nothing reserved there (see `Allocate`).
        f.allocate(0, 20 * 4096, KEEP).unwrap();
        assert_eq!((f.len(), f.metadata().blocks), (8 * 4096 + 100, 9));
        f.allocate(100 * 4096, 4096, KEEP).unwrap();
        assert_eq!((f.len(), f.metadata().blocks), (8 * 4096 + 100, 9));
        fs.check_invariants().unwrap();
    }

    #[test]
    fn punch_and_zero_range_read_back_zeros_with_their_size_rules() {
        let fs = ram_fs(8 << 20, 64);
        let f = fs.create("a").unwrap();
        f.write_all_at(&[9u8; 16384], 0).unwrap();
        f.allocate(100, 5000, Allocate::PunchHole).unwrap();
        let zero_keep = Allocate::ZeroRange { keep_size: true };
        f.allocate(12000, 10000, zero_keep).unwrap();
        let mut all = [0u8; 16384];
        f.read_exact_at(&mut all, 0).unwrap();
        for (i, &b) in all.iter().enumerate() {
            let zero = (100..5100).contains(&i) || i >= 12000;
            assert_eq!(b, if zero { 0 } else { 9 }, "byte {i}");
        }
        assert_eq!(f.len(), 16384, "KEEP_SIZE kept the size");
        let zero = Allocate::ZeroRange { keep_size: false };
        f.allocate(16000, 1000, zero).unwrap();
        assert_eq!(f.len(), 17000);
        // Zeroing allocates: the punched page 1 is mapped again.
        f.allocate(0, 17000, zero).unwrap();
        assert_eq!((f.len(), f.metadata().blocks), (17000, 5));
        assert_eq!(
            f.allocate(0, 0, RESERVE).unwrap_err(),
            Error::Range(RangeError::Empty)
        );
        assert_eq!(
            f.allocate(MAX_FILE_SIZE, 1, RESERVE).unwrap_err(),
            Error::Range(RangeError::TooLarge)
        );
        assert_eq!(
            f.allocate(u64::MAX, 2, RESERVE).unwrap_err(),
            Error::Range(RangeError::Overflow)
        );
        fs.check_invariants().unwrap();
    }

    #[test]
    fn a_request_that_cannot_fit_changes_nothing() {
        let fs = ram_fs(8 << 20, 64);
        let f = fs.create("a").unwrap();
        f.write_all_at(&[1u8; 8192], 0).unwrap();
        let free = fs.free_blocks();
        let too_many = (free + 10) * 4096;
        assert_eq!(
            f.allocate(0, too_many, RESERVE).unwrap_err(),
            Error::Space(SpaceError::DeviceFull)
        );
        assert_eq!((f.len(), f.metadata().blocks), (8192, 2));
        assert_eq!(fs.free_blocks(), free);
        f.allocate(0, 10 * 4096, RESERVE).unwrap();
        assert_eq!((f.len(), f.metadata().blocks), (10 * 4096, 10));
        fs.check_invariants().unwrap();
    }
}
