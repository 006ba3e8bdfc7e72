//! redb on pollfs against redb on its own file backend, in one run:
//! durable commits of one small insert each, a bulk insert in a few
//! transactions, and random point reads.
//!
//! ```text
//! cargo run --release -p pollfs-redb --example compare -- [--ext4 DIR] [--shm DIR]
//!     [--commit-secs S] [--bulk KEYS] [--bulk-txns N] [--reads N] [--redb-cache BYTES] [--spin]
//! ```
//!
//! Engines: `pollfs` (a pollfs filesystem on the emulated NVMe controller,
//! through the real driver), `tmpfs` (redb's file backend on a file under
//! `--shm`, default /dev/shm) and, with `--ext4 DIR`, `ext4` (the same on a
//! file under DIR; `just redb-bench` mounts an ext4 image on a loop device
//! for it). Every engine is wrapped in the same counting backend, so the
//! table also says how many syncs and writes a commit costs. The engines
//! take turns in rounds, so load from elsewhere falls on all of them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pollfs_core::{Config, Fs};
use pollfs_driver::NvmeDevice;
use pollfs_host_tests::rng::Rng;
use pollfs_redb::PollfsBackend;
use redb::backends::FileBackend;
use redb::{BackendError, Database, Durability, ReadableDatabase, StorageBackend, TableDefinition};

const TABLE: TableDefinition<u64, &[u8]> = TableDefinition::new("bench");
const VALUE: [u8; 16] = *b"0123456789abcdef";

struct Args {
    shm: PathBuf,
    ext4: Option<PathBuf>,
    commit_secs: f64,
    bulk: u64,
    bulk_txns: u64,
    reads: u64,
    redb_cache: usize,
    /// pollfs waits for the device by spinning, not by yielding the
    /// thread (`pollfs_hosted::config`'s choice, which on a busy machine gives
    /// the core away for a scheduler slice at each wait).
    spin: bool,
}

fn args() -> Args {
    let mut a = Args {
        shm: "/dev/shm".into(),
        ext4: None,
        commit_secs: 2.0,
        bulk: 1_000_000,
        bulk_txns: 10,
        reads: 1_000_000,
        redb_cache: 16 << 20,
        spin: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--spin" {
            a.spin = true;
            continue;
        }
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--shm" => a.shm = value().into(),
            "--ext4" => a.ext4 = Some(value().into()),
            "--commit-secs" => a.commit_secs = value().parse().expect("--commit-secs"),
            "--bulk" => a.bulk = value().parse().expect("--bulk"),
            "--bulk-txns" => a.bulk_txns = value().parse().expect("--bulk-txns"),
            "--reads" => a.reads = value().parse().expect("--reads"),
            "--redb-cache" => a.redb_cache = value().parse().expect("--redb-cache"),
            other => panic!("unknown argument {other} (see the example's doc comment)"),
        }
    }
    a
}

/// Backend calls, counted the same way for every engine.
#[derive(Debug, Default)]
struct Calls {
    syncs: AtomicU64,
    writes: AtomicU64,
    write_bytes: AtomicU64,
    reads: AtomicU64,
}

#[derive(Debug)]
struct Counting<B> {
    inner: B,
    calls: Arc<Calls>,
}

impl<B: StorageBackend> StorageBackend for Counting<B> {
    fn len(&self) -> Result<u64, io::Error> {
        self.inner.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
        self.calls.reads.fetch_add(1, Ordering::Relaxed);
        self.inner.read(offset, out)
    }
    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> Result<(), io::Error> {
        self.calls.syncs.fetch_add(1, Ordering::Relaxed);
        self.inner.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        self.calls.writes.fetch_add(1, Ordering::Relaxed);
        self.calls
            .write_bytes
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        self.inner.write(offset, data)
    }
    fn close(&self) -> Result<(), io::Error> {
        self.inner.close()
    }
    fn try_lock_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.try_lock_range(s, e)
    }
    fn try_lock_shared_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.try_lock_shared_range(s, e)
    }
    fn lock_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_range(s, e)
    }
    fn lock_shared_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_shared_range(s, e)
    }
    fn unlock_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<(), BackendError> {
        self.inner.unlock_range(s, e)
    }
    fn query_lock_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.query_lock_range(s, e)
    }
}

/// One engine: its database and what is measured on it.
struct Engine {
    name: String,
    db: Database,
    calls: Arc<Calls>,
    /// The database's size in bytes.
    len: Box<dyn Fn() -> u64>,
    /// What the engine says about the run (pollfs: its device counters).
    note: Box<dyn Fn() -> Option<String>>,
    commits: u64,
    commit_secs: f64,
    commit_lat_us: Vec<f64>,
    commit_syncs: u64,
    commit_writes: u64,
    bulk_keys: u64,
    bulk_secs: f64,
    reads: u64,
    read_secs: f64,
    backend_reads: u64,
}

impl Engine {
    fn new(
        name: &str,
        a: &Args,
        backend: impl StorageBackend,
        len: Box<dyn Fn() -> u64>,
        note: Box<dyn Fn() -> Option<String>>,
    ) -> Engine {
        let calls = Arc::new(Calls::default());
        let db = Database::builder()
            .set_cache_size(a.redb_cache)
            .create_with_backend(Counting {
                inner: backend,
                calls: calls.clone(),
            })
            .unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(TABLE).unwrap();
        txn.commit().unwrap();
        Engine {
            name: name.into(),
            db,
            calls,
            len,
            note,
            commits: 0,
            commit_secs: 0.0,
            commit_lat_us: Vec::new(),
            commit_syncs: 0,
            commit_writes: 0,
            bulk_keys: 0,
            bulk_secs: 0.0,
            reads: 0,
            read_secs: 0.0,
            backend_reads: 0,
        }
    }

    /// Durable commits of one small insert each, for `secs`. Their keys
    /// may meet bulk keys later: it does not matter.
    fn commits(&mut self, secs: f64) {
        let (syncs0, writes0) = (
            self.calls.syncs.load(Ordering::Relaxed),
            self.calls.writes.load(Ordering::Relaxed),
        );
        let start = Instant::now();
        let until = Duration::from_secs_f64(secs);
        while start.elapsed() < until {
            let t = Instant::now();
            let mut txn = self.db.begin_write().unwrap();
            txn.set_durability(Durability::Immediate).unwrap();
            txn.open_table(TABLE)
                .unwrap()
                .insert(self.commits, &VALUE[..])
                .unwrap();
            txn.commit().unwrap();
            self.commit_lat_us.push(t.elapsed().as_secs_f64() * 1e6);
            self.commits += 1;
        }
        self.commit_secs += start.elapsed().as_secs_f64();
        self.commit_syncs += self.calls.syncs.load(Ordering::Relaxed) - syncs0;
        self.commit_writes += self.calls.writes.load(Ordering::Relaxed) - writes0;
    }

    /// Bulk entries `keys` in one durable transaction.
    fn bulk(&mut self, keys: std::ops::Range<u64>) {
        let start = Instant::now();
        let txn = self.db.begin_write().unwrap();
        {
            let mut t = txn.open_table(TABLE).unwrap();
            for j in keys.clone() {
                t.insert(bulk_key(j), &VALUE[..]).unwrap();
            }
        }
        txn.commit().unwrap();
        self.bulk_secs += start.elapsed().as_secs_f64();
        self.bulk_keys += keys.end - keys.start;
    }

    /// `n` random point reads of the first `bulk` bulk keys, in one read
    /// transaction.
    fn reads(&mut self, n: u64, bulk: u64, rng: &mut Rng) {
        let reads0 = self.calls.reads.load(Ordering::Relaxed);
        let start = Instant::now();
        {
            let txn = self.db.begin_read().unwrap();
            let t = txn.open_table(TABLE).unwrap();
            for _ in 0..n {
                let k = bulk_key(rng.below(bulk));
                assert!(
                    t.get(k).unwrap().is_some(),
                    "{}: key {k} missing",
                    self.name
                );
            }
        }
        self.read_secs += start.elapsed().as_secs_f64();
        self.reads += n;
        self.backend_reads += self.calls.reads.load(Ordering::Relaxed) - reads0;
    }

    fn commits_per_sec(&self) -> f64 {
        self.commits as f64 / self.commit_secs
    }
    fn bulk_keys_per_sec(&self) -> f64 {
        self.bulk_keys as f64 / self.bulk_secs
    }
    fn reads_per_sec(&self) -> f64 {
        self.reads as f64 / self.read_secs
    }
    fn commit_pct(&self, p: f64) -> f64 {
        let mut lat = self.commit_lat_us.clone();
        lat.sort_by(f64::total_cmp);
        lat.get(((lat.len().max(1) - 1) as f64 * p) as usize)
            .copied()
            .unwrap_or(0.0)
    }
}

/// The key of bulk entry `i`: scattered over the key space, as hashed
/// keys would be.
fn bulk_key(i: u64) -> u64 {
    pollfs_core::rng::mix(i.wrapping_add(1))
}

/// redb's file backend on a new file in `dir` (unlinked at once: it
/// lives until the database closes).
fn file_engine(name: &str, dir: &Path, a: &Args) -> Engine {
    let path = dir.join("pollfs-redb-bench.redb");
    let _ = std::fs::remove_file(&path);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    std::fs::remove_file(&path).unwrap();
    let probe = file.try_clone().unwrap();
    Engine::new(
        name,
        a,
        FileBackend::new(file).unwrap(),
        Box::new(move || probe.metadata().map(|m| m.len()).unwrap_or(0)),
        Box::new(|| None),
    )
}

fn pollfs_engine(a: &Args) -> Engine {
    // 2 GiB namespace, a 512 MiB page cache (plus the engine's 32
    // metadata frames), all in memory.
    let dev = NvmeDevice::emulated(2 << 30, 4096, (128 << 10) + 32).unwrap();
    let config = if a.spin {
        Config {
            idle: core::hint::spin_loop,
            ..pollfs_hosted::config()
        }
    } else {
        pollfs_hosted::config()
    };
    let fs = Fs::format(dev, config, 0xBE4C).unwrap();
    let file = fs.create("bench.redb").unwrap();
    let probe = file.clone();
    Engine::new(
        "pollfs (emulated NVMe)",
        a,
        PollfsBackend::new(file),
        Box::new(move || probe.len()),
        Box::new(move || {
            let s = fs.stats();
            Some(format!(
                "pollfs device commands over the whole run: {} writes, {} flushes, {} log writes, {} reads",
                s.dev_writes, s.dev_flushes, s.log_writes, s.dev_reads
            ))
        }),
    )
}

/// Rounds each phase is cut into; engines take turns within a round, so
/// load from elsewhere on the machine falls on all of them alike.
const ROUNDS: u64 = 10;

fn main() {
    let a = args();
    let mut engines = vec![
        pollfs_engine(&a),
        file_engine("redb file on tmpfs", &a.shm, &a),
    ];
    if let Some(dir) = &a.ext4 {
        engines.push(file_engine("redb file on ext4 (loop)", dir, &a));
    }
    for _ in 0..ROUNDS {
        for e in &mut engines {
            e.commits(a.commit_secs / ROUNDS as f64);
        }
    }
    let per_txn = a.bulk.div_ceil(a.bulk_txns);
    let mut at = 0;
    while at < a.bulk {
        let keys = at..(at + per_txn).min(a.bulk);
        for e in &mut engines {
            e.bulk(keys.clone());
        }
        at = keys.end;
    }
    for round in 0..ROUNDS {
        for e in &mut engines {
            // The same keys for every engine.
            let mut rng = Rng::new(round);
            e.reads(a.reads / ROUNDS, a.bulk, &mut rng);
        }
    }
    println!(
        "redb on each engine, taking turns in {ROUNDS} rounds{}: durable commits = one 16-byte insert per \
         Durability::Immediate transaction, {} s per engine; bulk = {} keys (u64 -> 16 bytes, scattered) \
         in {} transactions; reads = {} random gets of bulk keys; redb cache {} MiB",
        if a.spin { " (pollfs spins while it waits)" } else { "" },
        a.commit_secs,
        a.bulk,
        a.bulk_txns,
        a.reads / ROUNDS * ROUNDS,
        a.redb_cache >> 20
    );
    println!(
        "{:<26} {:>10} {:>9} {:>9} {:>7} {:>7} {:>11} {:>8} {:>10} {:>9} {:>7}",
        "engine",
        "commits/s",
        "p50 us",
        "p99 us",
        "sync/c",
        "wr/c",
        "bulk keys/s",
        "bulk s",
        "reads/s",
        "be rd/get",
        "db MiB"
    );
    for e in &engines {
        println!(
            "{:<26} {:>10.0} {:>9.1} {:>9.1} {:>7.2} {:>7.2} {:>11.0} {:>8.2} {:>10.0} {:>9.3} {:>7.1}",
            e.name,
            e.commits_per_sec(),
            e.commit_pct(0.5),
            e.commit_pct(0.99),
            e.commit_syncs as f64 / e.commits as f64,
            e.commit_writes as f64 / e.commits as f64,
            e.bulk_keys_per_sec(),
            e.bulk_secs,
            e.reads_per_sec(),
            e.backend_reads as f64 / e.reads as f64,
            (e.len)() as f64 / f64::from(1 << 20)
        );
    }
    for e in &engines {
        if let Some(note) = (e.note)() {
            println!("{note}");
        }
    }
    let p = &engines[0];
    for e in &engines[1..] {
        println!(
            "pollfs / {:<26} commits {:.2}x (p50 latency {:.2}x), bulk insert {:.2}x, point reads {:.2}x",
            e.name,
            p.commits_per_sec() / e.commits_per_sec(),
            p.commit_pct(0.5) / e.commit_pct(0.5),
            p.bulk_keys_per_sec() / e.bulk_keys_per_sec(),
            p.reads_per_sec() / e.reads_per_sec()
        );
    }
}
