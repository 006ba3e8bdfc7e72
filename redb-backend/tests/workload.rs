//! redb on pollfs against a model: a randomized workload of write
//! transactions (inserts, updates, deletes, range deletes, point reads and
//! range scans checked inside the transaction), most committed, some
//! aborted and some dropped, checked against a `BTreeMap` every few
//! transactions; the database is closed and reopened now and then, and
//! reopened on a remount of the filesystem less often and at the end. On the emulated NVMe device
//! (through the real driver) and on a RAM device.
//!
//! `POLLFS_REDB_TXNS` sets the write transactions per run (default 2000;
//! `just redb-soak` runs many more in a release build).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::{assert_matches, value, Model, SharedDevice, TABLE};
use pollfs_core::dev::ram::RamDevice;
use pollfs_core::dev::BlockDevice;
use pollfs_core::Fs;
use pollfs_driver::NvmeDevice;
use pollfs_host_tests::rng::Rng;
use pollfs_host_tests::setup::config;
use pollfs_redb::PollfsBackend;
use redb::{Database, Durability, ReadableTable};

const DEV_BYTES: u64 = 256 << 20;
/// Cache pages for the engine, and frames (the cache plus 32 the engine
/// keeps for metadata I/O).
const CACHE: u32 = 1024;
const FRAMES: u32 = CACHE + 32;
/// Keys are drawn from `0..KEYS`, so updates and deletes find them.
const KEYS: u64 = 3000;
/// Transactions between checks against the model.
const CHECK_EVERY: usize = 50;
/// Transactions between closing and reopening the database.
const REOPEN_EVERY: usize = 100;
/// Transactions between remounts.
const REMOUNT_EVERY: usize = 500;

fn txns() -> usize {
    std::env::var("POLLFS_REDB_TXNS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2000)
}

/// redb with a small cache of its own, so most reads reach the backend.
fn open<D: BlockDevice>(fs: &Fs<D>) -> Database {
    let file = fs.open_or_create("db").unwrap();
    Database::builder()
        .set_cache_size(128 << 10)
        .create_with_backend(PollfsBackend::new(file))
        .unwrap()
}

#[derive(Debug, Default)]
struct Tally {
    committed: usize,
    aborted: usize,
    dropped: usize,
    checks: usize,
    reopens: usize,
    remounts: usize,
}

/// Runs `txns` write transactions from `seed` on a new filesystem on
/// `dev`, checking as it goes.
fn run<D: BlockDevice>(dev: SharedDevice<D>, seed: u64, txns: usize, label: &str) -> Tally {
    let mut rng = Rng::new(seed);
    let mut fs = Fs::format(dev.clone(), config(CACHE), seed).unwrap();
    let mut db = open(&fs);
    let mut model = Model::new();
    let mut tally = Tally::default();
    {
        let txn = db.begin_write().unwrap();
        txn.open_table(TABLE).unwrap();
        txn.commit().unwrap();
    }
    for i in 0..txns {
        let ctx = format!("{label} seed {seed} txn {i}");
        let remount = (i + 1) % REMOUNT_EVERY == 0 || i + 1 == txns;
        let reopen = !remount && (i + 1) % REOPEN_EVERY == 0;
        // Most commits are not durable (as an application batching would
        // use them); one before each reopen and a quarter of the rest are.
        let durable = remount || reopen || rng.chance(25);
        let mut txn = db.begin_write().unwrap();
        txn.set_durability(if durable {
            Durability::Immediate
        } else {
            Durability::None
        })
        .unwrap();
        let mut next = model.clone();
        {
            let mut table = txn.open_table(TABLE).unwrap();
            for _ in 0..1 + rng.below(8) {
                let key = rng.below(KEYS);
                let hi = key + 1 + rng.below(60);
                match rng.below(100) {
                    0..=54 => {
                        let v = value(&mut rng, key, i as u64);
                        let old = table.insert(key, v.as_slice()).unwrap();
                        let old = old.map(|g| g.value().to_vec());
                        assert_eq!(old, next.insert(key, v), "{ctx}: insert {key}");
                    }
                    55..=74 => {
                        let old = table.remove(key).unwrap().map(|g| g.value().to_vec());
                        assert_eq!(old, next.remove(&key), "{ctx}: remove {key}");
                    }
                    75..=79 => {
                        table.retain_in(key..hi, |_, _| false).unwrap();
                        next.retain(|k, _| !(key..hi).contains(k));
                    }
                    80..=89 => {
                        let got = table.get(key).unwrap().map(|g| g.value().to_vec());
                        assert_eq!(got.as_ref(), next.get(&key), "{ctx}: get {key}");
                    }
                    _ => {
                        let got: Vec<(u64, Vec<u8>)> = table
                            .range(key..hi)
                            .unwrap()
                            .map(|e| {
                                let (k, v) = e.unwrap();
                                (k.value(), v.value().to_vec())
                            })
                            .collect();
                        let want: Vec<(u64, Vec<u8>)> =
                            next.range(key..hi).map(|(k, v)| (*k, v.clone())).collect();
                        assert_eq!(got, want, "{ctx}: range {key}..{hi}");
                    }
                }
            }
        }
        match rng.below(100) {
            _ if durable => {
                txn.commit().unwrap();
                model = next;
                tally.committed += 1;
            }
            0..=84 => {
                txn.commit().unwrap();
                model = next;
                tally.committed += 1;
            }
            85..=92 => {
                txn.abort().unwrap();
                tally.aborted += 1;
            }
            _ => {
                drop(txn);
                tally.dropped += 1;
            }
        }
        if (i + 1) % CHECK_EVERY == 0 {
            assert_matches(&db, &model, &ctx);
            tally.checks += 1;
        }
        if reopen {
            drop(db);
            db = open(&fs);
            assert_matches(&db, &model, &format!("{ctx}, after reopening"));
            tally.checks += 1;
            tally.reopens += 1;
        }
        if remount {
            drop(db);
            fs.unmount().unwrap();
            fs = Fs::mount(dev.clone(), config(CACHE)).unwrap();
            fs.check_invariants()
                .unwrap_or_else(|e| panic!("{ctx}: {e:?}"));
            db = open(&fs);
            assert_matches(&db, &model, &format!("{ctx}, after a remount"));
            tally.checks += 1;
            tally.remounts += 1;
        }
    }
    tally
}

fn report(label: &str, t: &Tally) {
    println!(
        "{label}: {} committed, {} aborted, {} dropped; {} checks against the model, {} reopens, {} remounts",
        t.committed, t.aborted, t.dropped, t.checks, t.reopens, t.remounts
    );
    assert!(t.committed > 0 && t.aborted > 0 && t.dropped > 0 && t.remounts > 0);
}

#[test]
fn randomized_workload_on_emulated_nvme() {
    let dev = NvmeDevice::emulated(DEV_BYTES, 4096, FRAMES).unwrap();
    let t = run(SharedDevice(Arc::new(dev)), 1, txns(), "emulated nvme");
    report("emulated nvme", &t);
}

#[test]
fn randomized_workload_on_ram() {
    let dev = RamDevice::new(DEV_BYTES, 4096, FRAMES).unwrap();
    let t = run(SharedDevice(Arc::new(dev)), 2, txns(), "ram");
    report("ram", &t);
}
