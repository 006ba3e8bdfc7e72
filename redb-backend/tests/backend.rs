//! The backend's contract with redb: exact reads, zeroed growth, errors
//! redb can report, whole-file locks, and use from several threads.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::ErrorKind;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::{assert_matches, Model, TABLE};
use pollfs_core::dev::ram::RamDevice;
use pollfs_core::Fs;
use pollfs_driver::NvmeDevice;
use pollfs_host_tests::setup::config;
use pollfs_redb::PollfsBackend;
use redb::{
    CommitError, Database, DatabaseError, ReadableDatabase, ReadableTableMetadata, StorageBackend,
    StorageError,
};

fn ram_fs(bytes: u64) -> Fs<RamDevice> {
    let dev = RamDevice::new(bytes, 4096, 96).unwrap();
    Fs::format(dev, config(64), 7).unwrap()
}

#[test]
fn reads_are_exact_and_growth_reads_zeros() {
    let fs = ram_fs(8 << 20);
    let b = PollfsBackend::new(fs.create("f").unwrap());
    assert_eq!(b.len().unwrap(), 0);
    b.set_len(10_000).unwrap();
    assert_eq!(b.len().unwrap(), 10_000);
    let mut buf = vec![0xAA; 10_000];
    b.read(0, &mut buf).unwrap();
    assert!(buf.iter().all(|&x| x == 0));
    b.write(4090, b"hello, redb").unwrap();
    let mut got = [0u8; 11];
    b.read(4090, &mut got).unwrap();
    assert_eq!(&got, b"hello, redb");
    // Past the end: an error, never zeros or a short read.
    let e = b.read(9_995, &mut [0u8; 10]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::UnexpectedEof);
    let e = b.read(20_000, &mut [0u8; 1]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::UnexpectedEof);
    b.read(10_000, &mut []).unwrap();
    // Shrinking and growing again zeroes what was cut off.
    b.set_len(4095).unwrap();
    b.set_len(10_000).unwrap();
    b.read(4090, &mut got).unwrap();
    assert_eq!(&got, b"hello\0\0\0\0\0\0");
    b.sync_data().unwrap();
    b.close().unwrap();
}

#[test]
fn a_second_database_on_an_open_file_is_refused() {
    let fs = ram_fs(16 << 20);
    let open = |name: &str| {
        Database::builder()
            .create_with_backend(PollfsBackend::new(fs.open_or_create(name).unwrap()))
    };
    let db = open("db").unwrap();
    assert!(matches!(
        open("db"),
        Err(DatabaseError::DatabaseAlreadyOpen)
    ));
    // Another file is another database.
    let other = open("other").unwrap();
    drop(db);
    let db = open("db").unwrap();
    drop((db, other));
    // A read-only database shares the file with another read-only one.
    let ro = |name: &str| {
        Database::builder().open_read_only_with_backend(PollfsBackend::new(fs.open(name).unwrap()))
    };
    let r1 = ro("db").unwrap();
    let r2 = ro("db").unwrap();
    assert!(matches!(
        open("db"),
        Err(DatabaseError::DatabaseAlreadyOpen)
    ));
    drop((r1, r2));
    open("db").unwrap();
}

/// A full device: the commit that does not fit fails with ENOSPC, and the
/// database reopens (on a remount) with everything committed before.
#[test]
fn a_full_device_fails_the_commit_with_enospc_and_loses_nothing() {
    let ram = RamDevice::new(4 << 20, 4096, 96).unwrap();
    let fs = Fs::format(ram.clone(), config(64), 9).unwrap();
    let db = Database::builder()
        .create_with_backend(PollfsBackend::new(fs.create("db").unwrap()))
        .unwrap();
    let mut model = Model::new();
    let mut failure = None;
    for i in 0..1000u64 {
        let txn = db.begin_write().unwrap();
        let v = vec![(i % 251) as u8 + 1; 64 * 1024];
        let inserted = {
            let mut t = txn.open_table(TABLE).unwrap();
            t.insert(i, v.as_slice()).map(|_| ())
        };
        let result = inserted
            .map_err(CommitError::from)
            .and_then(|()| txn.commit());
        match result {
            Ok(()) => {
                model.insert(i, v);
            }
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    let failure = failure.expect("the device never filled up");
    let io = match &failure {
        CommitError::Storage(StorageError::Io(e)) => e,
        other => panic!("expected an I/O error, got {other:?}"),
    };
    assert_eq!(io.raw_os_error(), Some(28), "{failure}: not ENOSPC");
    assert!(model.len() > 5, "only {} commits fitted", model.len());
    drop(db);
    drop(fs);
    // Dropping the filesystem is a power cut: only what was synced stays.
    let fs = Fs::mount(ram, config(64)).unwrap();
    let db = Database::builder()
        .create_with_backend(PollfsBackend::new(fs.open("db").unwrap()))
        .unwrap();
    assert_matches(&db, &model, "after ENOSPC and a remount");
}

/// Readers on other threads see only whole commits while one writer
/// commits durably: every transaction adds key `n` and sets the counter
/// key (`u64::MAX`) to `n`.
#[test]
fn readers_on_other_threads_see_whole_commits() {
    let dev = NvmeDevice::emulated(64 << 20, 4096, 544).unwrap();
    let fs = Fs::format(dev, config(512), 11).unwrap();
    let db = Arc::new(
        Database::builder()
            .set_cache_size(256 << 10)
            .create_with_backend(PollfsBackend::new(fs.create("db").unwrap()))
            .unwrap(),
    );
    {
        let txn = db.begin_write().unwrap();
        txn.open_table(TABLE)
            .unwrap()
            .insert(u64::MAX, &0u64.to_le_bytes()[..])
            .unwrap();
        txn.commit().unwrap();
    }
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (db, done) = (db.clone(), done.clone());
            std::thread::spawn(move || {
                let mut seen = 0;
                let mut reads = 0;
                while !done.load(Ordering::Acquire) || reads == 0 {
                    let txn = db.begin_read().unwrap();
                    let t = txn.open_table(TABLE).unwrap();
                    let counter = t.get(u64::MAX).unwrap().unwrap();
                    let n = u64::from_le_bytes(counter.value().try_into().unwrap());
                    assert!(n >= seen, "the counter went back from {seen} to {n}");
                    assert_eq!(t.len().unwrap(), n + 1, "a torn commit at {n}");
                    if n > 0 {
                        assert!(t.get(n).unwrap().is_some(), "key {n} missing");
                    }
                    seen = n;
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    for n in 1..=200u64 {
        let txn = db.begin_write().unwrap();
        {
            let mut t = txn.open_table(TABLE).unwrap();
            t.insert(n, &[n as u8; 300][..]).unwrap();
            t.insert(u64::MAX, &n.to_le_bytes()[..]).unwrap();
        }
        txn.commit().unwrap();
    }
    done.store(true, Ordering::Release);
    for r in readers {
        assert!(r.join().unwrap() > 0);
    }
}
