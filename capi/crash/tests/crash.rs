//! Crash safety of SQLite on the pollfs VFS, end to end: SQLite (the
//! system's libsqlite3) in rollback-journal mode with `synchronous=EXTRA`
//! and in WAL mode with `synchronous=FULL` (SQLite's durable settings), on
//! pollfs on host-tests' recording device (passed to the library as an
//! `AnyDevice`). At every write
//! boundary, the images a power cut could leave (unflushed writes lost,
//! all landed, reordered, a subset, the write in flight torn) are mounted,
//! the database opened through the VFS (SQLite rolls back a hot journal
//! or replays the WAL), and `PRAGMA integrity_check` must say `ok` and the
//! table must hold exactly the committed transactions: those whose COMMIT
//! returned before the crash, and possibly the one under way.
//!
//! Run with `cargo test -p pollfs-capi-crash --features sqlite --test crash`
//! (`just capi-crash`). `POLLFS_SQLITE_CRASH_TXNS` sets the transactions
//! per workload (default 12).
#![allow(clippy::unwrap_used, clippy::expect_used)]

// The VFS (C) and libsqlite3, which this crate's build script links into
// its library: named here so that the test links them.
extern crate pollfs_capi_crash;

mod sqlite_ffi;

use std::collections::BTreeMap;

use pollfs::embed::into_handle;
use pollfs_core::dev::ram::RamDevice;
use pollfs_core::Fs;
use pollfs_device::AnyDevice;
use pollfs_host_tests::crash::{crash_images, device_from, Event, RecordingDevice};
use pollfs_host_tests::rng::Rng;
use pollfs_host_tests::setup::config;
use sqlite_ffi::{Db, Registered};

const DEV_BYTES: u64 = 8 << 20;
const FRAMES: u32 = 160;
const CACHE: u32 = 96;
const KEYS: u64 = 64;

type Model = BTreeMap<i64, String>;

fn txns() -> usize {
    std::env::var("POLLFS_SQLITE_CRASH_TXNS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(12)
}

struct Run {
    base: Vec<u8>,
    events: Vec<Event>,
    /// `states[0]` before the workload; `states[i + 1]` after commit `i`.
    states: Vec<Model>,
    /// Each commit's event counts when COMMIT was issued and returned.
    commits: Vec<(usize, usize)>,
}

/// `dev` as the one device type libpollfs works on.
fn any(dev: RecordingDevice) -> AnyDevice {
    AnyDevice::from_device(dev, "recording")
}

fn open_db(fs: Fs<AnyDevice>, ctx: &str) -> (Registered, Db) {
    let reg = Registered::new(into_handle(fs));
    let db = Db::open("/test.db").unwrap_or_else(|e| panic!("{ctx}: open: {e}"));
    (reg, db)
}

fn run_workload(seed: u64, journal: &str) -> Run {
    let mut rng = Rng::new(seed);
    let ram = RamDevice::new(DEV_BYTES, 4096, FRAMES).unwrap();
    {
        // The filesystem and an empty table, outside the recording.
        let fs = Fs::format(
            any(RecordingDevice::new(ram.clone())),
            config(CACHE),
            0x5A17 ^ seed,
        )
        .unwrap();
        let keep = fs.clone();
        let (reg, db) = open_db(fs, "setup");
        db.exec(&format!("PRAGMA journal_mode={journal}")).unwrap();
        db.exec("CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT NOT NULL)")
            .unwrap();
        drop(db);
        drop(reg);
        keep.unmount().unwrap();
    }
    let mut base = vec![0u8; DEV_BYTES as usize];
    ram.read_raw(0, &mut base);
    let dev = RecordingDevice::new(ram);
    let fs = Fs::mount(any(dev.clone()), config(CACHE)).unwrap();
    let keep = fs.clone();
    let (reg, db) = open_db(fs, "workload");
    // In rollback-journal mode the commit point is the journal's removal,
    // which FULL does not sync (SQLite syncs the directory after it only
    // with EXTRA): a crash right after a COMMIT under FULL may bring the
    // journal back and roll that commit back, on any filesystem. WAL
    // commits are durable under FULL.
    let sync = if journal == "wal" { "FULL" } else { "EXTRA" };
    db.exec(&format!("PRAGMA synchronous={sync}")).unwrap();
    let mut states = vec![Model::new()];
    let mut commits = Vec::new();
    for i in 0..txns() {
        let mut next = states.last().unwrap().clone();
        db.exec("BEGIN").unwrap();
        for _ in 0..1 + rng.below(8) {
            let k = rng.below(KEYS) as i64;
            if rng.chance(75) {
                // Values of a few bytes to a few pages, so that some
                // transactions span several pages.
                let most = if rng.chance(20) { 9000 } else { 200 };
                let len = 8 + rng.below(most) as usize;
                let v: String = (0..len)
                    .map(|j| char::from(b'a' + ((i + j + k as usize) % 26) as u8))
                    .collect();
                db.exec(&format!("INSERT OR REPLACE INTO t VALUES({k}, '{v}')"))
                    .unwrap();
                next.insert(k, v);
            } else {
                db.exec(&format!("DELETE FROM t WHERE k = {k}")).unwrap();
                next.remove(&k);
            }
        }
        if rng.chance(15) {
            db.exec("ROLLBACK").unwrap();
            continue;
        }
        let started = dev.len();
        db.exec("COMMIT").unwrap();
        commits.push((started, dev.len()));
        states.push(next);
    }
    drop(db);
    drop(reg);
    keep.unmount().unwrap();
    Run {
        base,
        events: dev.events(),
        states,
        commits,
    }
}

/// The states a crash after `events[..at]` may recover.
fn allowed(run: &Run, at: usize) -> Vec<usize> {
    let k = run.commits.iter().filter(|c| c.1 <= at).count();
    let mut ok = vec![k];
    if run.commits.get(k).is_some_and(|c| c.0 <= at) {
        ok.push(k + 1);
    }
    ok
}

fn recover(image: &[u8], ctx: &str) -> Model {
    let dev = RecordingDevice::new(device_from(image, FRAMES));
    let fs = Fs::mount(any(dev), config(CACHE))
        .unwrap_or_else(|e| panic!("{ctx}: pollfs recovery failed: {e}"));
    let (reg, db) = open_db(fs, ctx);
    let check = db
        .rows("PRAGMA integrity_check")
        .unwrap_or_else(|e| panic!("{ctx}: integrity_check: {e}"));
    assert_eq!(check, vec![(0, "ok".to_string())], "{ctx}: integrity_check");
    let rows = db
        .rows("SELECT k, v FROM t ORDER BY k")
        .unwrap_or_else(|e| panic!("{ctx}: reading the table: {e}"));
    drop(db);
    drop(reg);
    rows.into_iter().collect()
}

fn check(seed: u64, journal: &str) -> usize {
    let run = run_workload(seed, journal);
    assert!(
        run.commits.len() > 2,
        "seed {seed}: too few commits to test"
    );
    let mut rng = Rng::new(seed ^ 0xC4A5);
    let mut checked = 0;
    for at in 0..=run.events.len() {
        let ok = allowed(&run, at);
        for (desc, image) in crash_images(&run.base, &run.events, at, &mut rng) {
            let ctx = format!("{journal} seed {seed}: {desc}");
            let got = recover(&image, &ctx);
            assert!(
                ok.iter().any(|&s| run.states[s] == got),
                "{ctx}: {} rows, state {:?} (None: no committed state), not one of {ok:?}",
                got.len(),
                (0..run.states.len()).find(|&s| run.states[s] == got),
            );
            checked += 1;
        }
    }
    checked
}

/// One test, as the VFS registration is process-wide: both journal modes
/// in turn.
#[test]
fn every_crash_image_holds_exactly_the_committed_transactions() {
    let mut total = 0;
    for (seed, journal) in [(1, "delete"), (2, "wal"), (3, "delete"), (4, "wal")] {
        total += check(seed, journal);
    }
    assert!(total > 100, "only {total} crash images");
    println!("{total} crash images checked");
}
