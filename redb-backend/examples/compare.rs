//! redb on pollfs against redb on its own file backend, in one run:
//! durable commits of one small insert each, a bulk insert in a few
//! transactions, and random point reads.
//!
//! ```text
//! cargo run --release -p pollfs-redb --example compare -- [--ext4 DIR] [--shm DIR]
//!     [--commit-secs S] [--bulk KEYS] [--bulk-txns N] [--reads N] [--redb-cache BYTES]
//! ```
//!
//! Engines: `pollfs` (a pollfs filesystem on the emulated NVMe controller,
//! through the real driver), `tmpfs` (redb's file backend on a file under
//! `--shm`, default /dev/shm) and, with `--ext4 DIR`, `ext4` (the same on a
//! file under DIR; `just redb-bench` mounts an ext4 image on a loop device
//! for it). Every engine is wrapped in the same counting backend, so the
//! table also says how many syncs and writes a commit costs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pollfs_core::{hosted, Fs};
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
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
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

/// One engine's results.
struct Row {
    name: String,
    commits_per_sec: f64,
    commit_p50_us: f64,
    commit_p99_us: f64,
    syncs_per_commit: f64,
    writes_per_commit: f64,
    bulk_keys_per_sec: f64,
    bulk_secs: f64,
    reads_per_sec: f64,
    backend_reads_per_get: f64,
    db_bytes: u64,
    /// What the engine says about the run (pollfs: its device counters).
    note: Option<String>,
}

/// The key of bulk entry `i`: scattered over the key space, as hashed
/// keys would be.
fn bulk_key(i: u64) -> u64 {
    let mut z = i.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z ^ (z >> 31)
}

fn run(name: &str, a: &Args, backend: impl StorageBackend, len: impl Fn() -> u64) -> Row {
    let calls = Arc::new(Calls::default());
    let db = Database::builder()
        .set_cache_size(a.redb_cache)
        .create_with_backend(Counting {
            inner: backend,
            calls: calls.clone(),
        })
        .unwrap();
    {
        let txn = db.begin_write().unwrap();
        txn.open_table(TABLE).unwrap();
        txn.commit().unwrap();
    }
    // Durable commits of one small insert each, for a while. Their keys
    // are below the bulk keys' range only by chance: it does not matter.
    let (syncs0, writes0) = (
        calls.syncs.load(Ordering::Relaxed),
        calls.writes.load(Ordering::Relaxed),
    );
    let mut lat = Vec::new();
    let start = Instant::now();
    let until = Duration::from_secs_f64(a.commit_secs);
    let mut n = 0u64;
    while start.elapsed() < until {
        let t = Instant::now();
        let mut txn = db.begin_write().unwrap();
        txn.set_durability(Durability::Immediate).unwrap();
        txn.open_table(TABLE)
            .unwrap()
            .insert(n, &VALUE[..])
            .unwrap();
        txn.commit().unwrap();
        lat.push(t.elapsed().as_secs_f64() * 1e6);
        n += 1;
    }
    let commit_secs = start.elapsed().as_secs_f64();
    let syncs = calls.syncs.load(Ordering::Relaxed) - syncs0;
    let writes = calls.writes.load(Ordering::Relaxed) - writes0;
    lat.sort_by(f64::total_cmp);
    let pct = |p: f64| lat[((lat.len() - 1) as f64 * p) as usize];
    // Bulk insert.
    let start = Instant::now();
    let per_txn = a.bulk.div_ceil(a.bulk_txns);
    let mut i = 0;
    while i < a.bulk {
        let txn = db.begin_write().unwrap();
        {
            let mut t = txn.open_table(TABLE).unwrap();
            for j in i..(i + per_txn).min(a.bulk) {
                t.insert(bulk_key(j), &VALUE[..]).unwrap();
            }
        }
        txn.commit().unwrap();
        i += per_txn;
    }
    let bulk_secs = start.elapsed().as_secs_f64();
    // Random point reads of bulk keys.
    let reads0 = calls.reads.load(Ordering::Relaxed);
    let mut rng = Rng::new(42);
    let start = Instant::now();
    {
        let txn = db.begin_read().unwrap();
        let t = txn.open_table(TABLE).unwrap();
        for _ in 0..a.reads {
            let k = bulk_key(rng.below(a.bulk));
            assert!(t.get(k).unwrap().is_some(), "{name}: key {k} missing");
        }
    }
    let read_secs = start.elapsed().as_secs_f64();
    let backend_reads = calls.reads.load(Ordering::Relaxed) - reads0;
    drop(db);
    Row {
        name: name.into(),
        commits_per_sec: n as f64 / commit_secs,
        commit_p50_us: pct(0.5),
        commit_p99_us: pct(0.99),
        syncs_per_commit: syncs as f64 / n as f64,
        writes_per_commit: writes as f64 / n as f64,
        bulk_keys_per_sec: a.bulk as f64 / bulk_secs,
        bulk_secs,
        reads_per_sec: a.reads as f64 / read_secs,
        backend_reads_per_get: backend_reads as f64 / a.reads as f64,
        db_bytes: len(),
        note: None,
    }
}

fn file_engine(name: &str, dir: &Path, a: &Args) -> Row {
    let path = dir.join("pollfs-redb-bench.redb");
    let _ = std::fs::remove_file(&path);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let backend = FileBackend::new(file).unwrap();
    let p = path.clone();
    let row = run(name, a, backend, move || {
        std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0)
    });
    std::fs::remove_file(&path).unwrap();
    row
}

fn pollfs_engine(a: &Args) -> Row {
    // 2 GiB namespace, a 512 MiB page cache (plus the engine's 32
    // metadata frames), all in memory.
    let dev = NvmeDevice::emulated(2 << 30, 4096, (128 << 10) + 32).unwrap();
    let fs = Fs::format(dev, hosted::config(), 0xBE4C).unwrap();
    let file = fs.create("bench.redb").unwrap();
    let f = file.clone();
    let mut row = run(
        "pollfs (emulated NVMe)",
        a,
        PollfsBackend::new(file),
        move || f.len(),
    );
    let s = fs.stats();
    row.note = Some(format!(
        "pollfs device commands over the whole run: {} writes, {} flushes, {} log writes, {} reads",
        s.dev_writes, s.dev_flushes, s.log_writes, s.dev_reads
    ));
    row
}

fn main() {
    let a = args();
    let mut rows = vec![
        pollfs_engine(&a),
        file_engine("redb file on tmpfs", &a.shm, &a),
    ];
    if let Some(dir) = &a.ext4 {
        rows.push(file_engine("redb file on ext4 (loop)", dir, &a));
    }
    println!(
        "redb on each engine: durable commits = one 16-byte insert per Durability::Immediate transaction for {} s; \
         bulk = {} keys (u64 -> 16 bytes, scattered keys) in {} transactions; reads = {} random gets of bulk keys in one read transaction; \
         redb cache {} MiB",
        a.commit_secs,
        a.bulk,
        a.bulk_txns,
        a.reads,
        a.redb_cache >> 20
    );
    println!(
        "{:<26} {:>10} {:>9} {:>9} {:>7} {:>7} {:>11} {:>8} {:>10} {:>8} {:>8}",
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
    for r in &rows {
        println!(
            "{:<26} {:>10.0} {:>9.1} {:>9.1} {:>7.2} {:>7.2} {:>11.0} {:>8.2} {:>10.0} {:>8.3} {:>8.1}",
            r.name,
            r.commits_per_sec,
            r.commit_p50_us,
            r.commit_p99_us,
            r.syncs_per_commit,
            r.writes_per_commit,
            r.bulk_keys_per_sec,
            r.bulk_secs,
            r.reads_per_sec,
            r.backend_reads_per_get,
            r.db_bytes as f64 / f64::from(1 << 20)
        );
    }
    for r in &rows {
        if let Some(note) = &r.note {
            println!("{note}");
        }
    }
    let p = &rows[0];
    for r in &rows[1..] {
        println!(
            "pollfs / {:<26} commits {:.2}x, bulk insert {:.2}x, point reads {:.2}x",
            r.name,
            p.commits_per_sec / r.commits_per_sec,
            p.bulk_keys_per_sec / r.bulk_keys_per_sec,
            p.reads_per_sec / r.reads_per_sec
        );
    }
}
