//! Crash safety end to end: redb with `Durability::Immediate` on pollfs on
//! a device that records every write and flush (host-tests'
//! `RecordingDevice`). At every write boundary, the images a power cut
//! could leave (unflushed writes lost, all landed, reordered, a subset,
//! the write in flight torn) are mounted, redb is opened on the file (it
//! may repair), and the table must be exactly the state after the last
//! commit that returned before the crash, or, while the next commit was
//! under way, the state after that one: never a transaction that was
//! aborted or dropped, never part of a commit. Each recovered database
//! must then take a new commit and show it after reopening.
//!
//! `POLLFS_REDB_CRASH_TXNS` sets the write transactions per workload
//! (default 16; `just redb-crash` runs more in a release build).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{contents, value, Model, TABLE};
use pollfs_core::dev::ram::RamDevice;
use pollfs_core::dev::BlockDevice;
use pollfs_core::Fs;
use pollfs_host_tests::crash::{crash_images, device_from, Event, RecordingDevice};
use pollfs_host_tests::rng::Rng;
use pollfs_host_tests::setup::config;
use pollfs_redb::PollfsBackend;
use redb::{Database, Durability};

const DEV_BYTES: u64 = 8 << 20;
const FRAMES: u32 = 96;
const CACHE: u32 = 48;
const KEYS: u64 = 200;

fn txns() -> usize {
    std::env::var("POLLFS_REDB_CRASH_TXNS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(16)
}

fn open<D: BlockDevice>(fs: &Fs<D>) -> Result<Database, redb::DatabaseError> {
    let file = fs.open("db").expect("the database file is there");
    Database::builder()
        .set_cache_size(256 << 10)
        .create_with_backend(PollfsBackend::new(file))
}

/// A commit: the device's event count when `commit` was called and when
/// it returned.
#[derive(Clone, Copy, Debug)]
struct Commit {
    started_at: usize,
    returned_at: usize,
}

struct Run {
    base: Vec<u8>,
    events: Vec<Event>,
    /// `states[0]` before any commit of the workload; `states[i + 1]`
    /// after `commits[i]`.
    states: Vec<Model>,
    commits: Vec<Commit>,
    aborted: usize,
}

/// Runs `txns` write transactions on a recording device, every commit
/// `Immediate`; commits use one-phase or two-phase commit, with or
/// without quick-repair, as the seed decides.
fn run_workload(seed: u64, txns: usize) -> Run {
    let mut rng = Rng::new(seed);
    let ram = RamDevice::new(DEV_BYTES, 4096, FRAMES).unwrap();
    // Making the filesystem and the database is outside the recording.
    {
        let fs = Fs::format(ram.clone(), config(CACHE), 0x4ED8 ^ seed).unwrap();
        fs.create("db").unwrap();
        let db = open(&fs).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(TABLE).unwrap();
        txn.commit().unwrap();
        drop(db);
        fs.unmount().unwrap();
    }
    let mut base = vec![0u8; DEV_BYTES as usize];
    ram.read_raw(0, &mut base);
    let dev = RecordingDevice::new(ram);
    let fs = Fs::mount(dev.clone(), config(CACHE)).unwrap();
    let db = open(&fs).unwrap();
    let mut states = vec![Model::new()];
    let mut commits = Vec::new();
    let mut aborted = 0;
    for i in 0..txns {
        let mut txn = db.begin_write().unwrap();
        txn.set_durability(Durability::Immediate).unwrap();
        txn.set_two_phase_commit(rng.chance(30));
        txn.set_quick_repair(rng.chance(30));
        let mut next = states.last().unwrap().clone();
        {
            let mut table = txn.open_table(TABLE).unwrap();
            for _ in 0..1 + rng.below(6) {
                let key = rng.below(KEYS);
                if rng.chance(70) {
                    let v = value(&mut rng, key, i as u64 + (seed << 32));
                    table.insert(key, v.as_slice()).unwrap();
                    next.insert(key, v);
                } else {
                    table.remove(key).unwrap();
                    next.remove(&key);
                }
            }
        }
        match rng.below(100) {
            0..=79 => {
                let started_at = dev.len();
                txn.commit().unwrap();
                commits.push(Commit {
                    started_at,
                    returned_at: dev.len(),
                });
                states.push(next);
            }
            80..=89 => {
                txn.abort().unwrap();
                aborted += 1;
            }
            _ => {
                drop(txn);
                aborted += 1;
            }
        }
    }
    // Closing and unmounting write too: crash points there as well.
    drop(db);
    fs.unmount().unwrap();
    Run {
        base,
        events: dev.events(),
        states,
        commits,
        aborted,
    }
}

/// The states a crash after `events[..at]` (or during `events[at]`) may
/// recover: the last commit that returned, or the one under way.
fn allowed(run: &Run, at: usize) -> Vec<usize> {
    let k = run.commits.iter().filter(|c| c.returned_at <= at).count();
    let mut ok = vec![k];
    if run.commits.get(k).is_some_and(|c| c.started_at <= at) {
        ok.push(k + 1);
    }
    ok
}

/// Checks every crash state of `run`; returns how many.
fn check_run(run: &Run, seed: u64) -> usize {
    let mut rng = Rng::new(seed ^ 0xC4A5);
    let mut checked = 0;
    let boundaries: Vec<usize> = (0..=run.events.len()).collect();
    for at in boundaries {
        let ok = allowed(run, at);
        for (desc, image) in crash_images(&run.base, &run.events, at, &mut rng) {
            let ctx = format!("seed {seed}: {desc}");
            let dev = device_from(&image, FRAMES);
            let recovered = recover(&dev, &ctx);
            let Some(&state) = ok.iter().find(|&&s| run.states[s] == recovered) else {
                let near = (0..run.states.len()).find(|&s| run.states[s] == recovered);
                panic!(
                    "{ctx}: redb holds {} keys: state {near:?} (None: no committed state), not one of {ok:?}",
                    recovered.len(),
                );
            };
            keeps_working(&dev, &run.states[state], &ctx);
            checked += 1;
        }
    }
    checked
}

/// Mounts the image and reads the table through redb.
fn recover(dev: &RamDevice, ctx: &str) -> Model {
    let fs = Fs::mount(dev.clone(), config(CACHE))
        .unwrap_or_else(|e| panic!("{ctx}: pollfs recovery failed: {e}"));
    let db = open(&fs).unwrap_or_else(|e| panic!("{ctx}: redb does not open: {e}"));
    contents(&db)
}

/// The recovered database takes a commit, and shows it after a reopen on
/// a remount.
fn keeps_working(dev: &RamDevice, state: &Model, ctx: &str) {
    let mut want = state.clone();
    {
        let fs = Fs::mount(dev.clone(), config(CACHE)).unwrap();
        let db = open(&fs).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(TABLE)
            .unwrap()
            .insert(u64::MAX, &b"after the crash"[..])
            .unwrap();
        txn.commit().unwrap();
        want.insert(u64::MAX, b"after the crash".to_vec());
        drop(db);
        fs.unmount().unwrap();
    }
    let fs = Fs::mount(dev.clone(), config(CACHE)).unwrap();
    let db = open(&fs).unwrap();
    assert!(
        contents(&db) == want,
        "{ctx}: the commit made after recovery is not there after a remount"
    );
}

fn crash_test(seed: u64) {
    let run = run_workload(seed, txns());
    let checked = check_run(&run, seed);
    println!(
        "seed {seed}: {} transactions ({} committed, {} aborted or dropped), {} device events, {checked} crash states checked",
        run.commits.len() + run.aborted,
        run.commits.len(),
        run.aborted,
        run.events.len()
    );
    assert!(run.commits.len() > 5 && run.aborted > 0);
}

#[test]
fn redb_survives_every_crash_point_seed_1() {
    crash_test(1);
}

#[test]
fn redb_survives_every_crash_point_seed_2() {
    crash_test(2);
}
