//! What a sync costs on the file backend (`file:IMG`, the device a mount
//! on a disk uses), counted in its system calls, never timed: on a disk a
//! sync's time is its waits for the medium, so the counts are the cost.
//!
//! - A small sync (its pages' bytes go in the log) is one FUA log write:
//!   one `pwrite` through the `O_DSYNC` descriptor and nothing else.
//! - A sync too big for the log's data share writes each run of its pages
//!   with one `pwrite` and flushes once; an overwrite in place needs no
//!   more, an append also writes its record to the log with FUA after the
//!   flush (its data before the record that maps it): two waits for the
//!   medium, as ext4's ordered mode has (data, then the journal's commit
//!   block).
//! - A sync with nothing new waits for nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use pollfs_core::dev::file::{FileCalls, FileDevice};
use pollfs_core::persist::META_FRAMES;
use pollfs_core::{Config, Fs};

const CACHE_PAGES: u32 = 256;

/// An image file of its own under the temporary directory, removed when
/// dropped.
struct Image(PathBuf);

impl Image {
    fn new(name: &str) -> Image {
        let path = std::env::temp_dir().join(format!(
            "pollfs-sync-cost-{}-{name}.img",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&path);
        Image(path)
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn format(image: &Image) -> (FileDevice, Fs<FileDevice>) {
    let dev = FileDevice::open(&image.0, 64 << 20, CACHE_PAGES + META_FRAMES).unwrap();
    let config = Config {
        cache_pages: CACHE_PAGES,
        dirty_limit_pages: CACHE_PAGES / 2,
        ..Config::default()
    };
    let fs = Fs::format(dev.clone(), config, 7).unwrap();
    (dev, fs)
}

/// The file's calls made by `f`.
fn counted(dev: &FileDevice, f: impl FnOnce()) -> FileCalls {
    let before = dev.calls();
    f();
    dev.calls().since(&before)
}

#[test]
fn a_small_sync_is_one_fua_write_and_no_other_call() {
    let image = Image::new("small");
    let (dev, fs) = format(&image);
    let s = fs.session().unwrap();
    let f = fs.create("wal").unwrap();
    s.write_all_at(&f, &[1; 4096], 0).unwrap();
    s.sync_data(&f).unwrap();
    // An overwrite in place, an append (a SQLite WAL commit: one write
    // and an fdatasync), and an append that spans two pages.
    let cases: [(&str, u64, usize); 3] = [
        ("overwrite", 0, 4096),
        ("append", 4096, 4096),
        ("append across pages", 3 * 4096 - 24, 4096 + 24),
    ];
    for (what, at, len) in cases {
        for sync_all in [false, true] {
            let calls = counted(&dev, || {
                s.write_all_at(&f, &vec![2; len], at).unwrap();
                if sync_all {
                    s.sync_all(&f).unwrap();
                } else {
                    s.sync_data(&f).unwrap();
                }
            });
            let expected = FileCalls {
                dsync_writes: 1,
                ..FileCalls::default()
            };
            assert_eq!(calls, expected, "{what}, sync_all {sync_all}");
        }
    }
}

#[test]
fn a_sync_with_nothing_new_makes_no_call() {
    let image = Image::new("nothing");
    let (dev, fs) = format(&image);
    let s = fs.session().unwrap();
    let f = fs.create("a").unwrap();
    s.write_all_at(&f, &[1; 4096], 0).unwrap();
    s.sync_data(&f).unwrap();
    let calls = counted(&dev, || s.sync_data(&f).unwrap());
    assert_eq!(calls, FileCalls::default());
}

#[test]
fn a_big_overwrite_is_one_write_per_run_and_one_flush() {
    let image = Image::new("big-overwrite");
    let (dev, fs) = format(&image);
    let s = fs.session().unwrap();
    let f = fs.create("big").unwrap();
    s.write_all_at(&f, &[1; 64 * 4096], 0).unwrap();
    s.sync_data(&f).unwrap();
    // Sixteen pages in place, more than the log's share for data: they go
    // home, contiguous on the device, so one command carries them; the
    // size and the extents did not change, so no record either.
    let calls = counted(&dev, || {
        s.write_all_at(&f, &[3; 16 * 4096], 0).unwrap();
        s.sync_data(&f).unwrap();
    });
    let expected = FileCalls {
        writes: 1,
        fdatasyncs: 1,
        ..FileCalls::default()
    };
    assert_eq!(calls, expected);
}

#[test]
fn a_big_append_is_one_write_per_run_one_flush_and_one_fua_write() {
    let image = Image::new("big-append");
    let (dev, fs) = format(&image);
    let s = fs.session().unwrap();
    let f = fs.create("big").unwrap();
    s.write_all_at(&f, &[1; 4096], 0).unwrap();
    s.sync_data(&f).unwrap();
    // Sixteen new pages: their data, a flush (the data before the record
    // that maps it), then the record in one FUA log write.
    let calls = counted(&dev, || {
        s.write_all_at(&f, &[3; 16 * 4096], 4096).unwrap();
        s.sync_data(&f).unwrap();
    });
    let expected = FileCalls {
        writes: 1,
        dsync_writes: 1,
        fdatasyncs: 1,
        ..FileCalls::default()
    };
    assert_eq!(calls, expected);
}
