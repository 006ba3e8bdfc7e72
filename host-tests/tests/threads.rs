//! Real threads (more than this machine has cores) writing, reading,
//! truncating and punching one file at once. Every page written carries a
//! stamp naming its writer, sequence number and page, so a read can tell a
//! torn page, a misplaced page, stale data after a punch or truncate, and a
//! lost write. Every operation is timed with a global logical clock; the
//! checker then requires each value read (and each final value) to be one
//! that some linearization of the overlapping operations allows.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use pollfs_core::dev::BlockDevice;
use pollfs_core::{Config, Fs};
use pollfs_host_tests::rng::Rng;
use pollfs_host_tests::watchdog::{Watchdog, Worker};

const PAGE: usize = 4096;

/// One operation's effect on one page, with its start and end times.
#[derive(Clone, Copy, Debug)]
struct Event {
    page: u64,
    /// The stamp written, or 0 for a zeroing operation (punch, truncate).
    value: u64,
    start: u64,
    end: u64,
}

#[derive(Clone, Copy, Debug)]
struct Params {
    seed: u64,
    pages: u64,
    cache_pages: u32,
    block_size: u32,
    ops_per_thread: usize,
    file_lock: bool,
}

fn stamp(writer: u64, seq: u64, page: u64) -> u64 {
    (writer << 56) | (seq << 24) | page
}

fn page_bytes(value: u64) -> Vec<u8> {
    value.to_le_bytes().repeat(PAGE / 8)
}

/// Checks that a page read is one stamp repeated (or zero) and is for the
/// right page; returns the stamp.
fn decode(buf: &[u8], page: u64, ctx: &str) -> u64 {
    let first = u64::from_le_bytes(buf[..8].try_into().unwrap());
    for (i, w) in buf.chunks_exact(8).enumerate() {
        let v = u64::from_le_bytes(w.try_into().unwrap());
        assert_eq!(
            v, first,
            "{ctx}: torn page {page}: word {i} is {v:#x}, word 0 is {first:#x}"
        );
    }
    if first != 0 {
        assert_eq!(
            first & 0xff_ffff,
            page,
            "{ctx}: page {page} holds page {}'s data ({first:#x})",
            first & 0xff_ffff
        );
    }
    first
}

struct Shared {
    clock: AtomicU64,
    events: Mutex<Vec<Event>>,
    reads: Mutex<Vec<Event>>,
}

impl Shared {
    fn now(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::SeqCst)
    }
}

fn writer<D: BlockDevice>(fs: &Fs<D>, sh: &Shared, p: Params, id: u64, w: Worker) {
    let f = fs.open("f").unwrap();
    let mut rng = Rng::new(p.seed ^ (id << 32));
    let mut events = Vec::new();
    for seq in 1..=p.ops_per_thread as u64 {
        let first = rng.below(p.pages);
        let n = (rng.below(4) + 1).min(p.pages - first);
        w.doing(format!("writer {id}: write pages {first}..{}", first + n));
        let mut buf = Vec::with_capacity(n as usize * PAGE);
        for page in first..first + n {
            buf.extend(page_bytes(stamp(id, seq, page)));
        }
        let start = sh.now();
        f.write_all_at(&buf, first * PAGE as u64).unwrap();
        let end = sh.now();
        for page in first..first + n {
            events.push(Event {
                page,
                value: stamp(id, seq, page),
                start,
                end,
            });
        }
    }
    sh.events.lock().unwrap().extend(events);
}

fn reader<D: BlockDevice>(fs: &Fs<D>, sh: &Shared, p: Params, id: u64, w: Worker) {
    let f = fs.open("f").unwrap();
    let mut rng = Rng::new(p.seed ^ (id << 40));
    let mut seen = Vec::new();
    for i in 0..p.ops_per_thread {
        // Mix random reads with sequential scans (which read ahead).
        let (first, n) = if i % 8 < 2 {
            (0, p.pages)
        } else {
            (rng.below(p.pages), rng.below(3) + 1)
        };
        let n = n.min(p.pages - first);
        w.doing(format!("reader {id}: read pages {first}..{}", first + n));
        let mut buf = vec![0u8; n as usize * PAGE];
        let start = sh.now();
        let got = f.read_at(&mut buf, first * PAGE as u64).unwrap();
        let end = sh.now();
        // A short read means a truncate was in progress: those pages read
        // as zeros, which the checker allows only while one was.
        for k in 0..n {
            let page = first + k;
            let lo = k as usize * PAGE;
            let value = if lo + PAGE <= got {
                decode(&buf[lo..lo + PAGE], page, &format!("reader {id} op {i}"))
            } else {
                assert!(
                    lo >= got,
                    "reader {id}: short read {got} splits page {page}"
                );
                0
            };
            seen.push(Event {
                page,
                value,
                start,
                end,
            });
        }
    }
    sh.reads.lock().unwrap().extend(seen);
}

fn shrinker<D: BlockDevice>(fs: &Fs<D>, sh: &Shared, p: Params, id: u64, w: Worker) {
    let f = fs.open("f").unwrap();
    let mut rng = Rng::new(p.seed ^ (id << 48));
    let mut events = Vec::new();
    let full = p.pages * PAGE as u64;
    for i in 0..p.ops_per_thread / 2 {
        if rng.chance(50) {
            let first = rng.below(p.pages);
            let n = (rng.below(8) + 1).min(p.pages - first);
            w.doing(format!("shrinker: punch pages {first}..{}", first + n));
            let start = sh.now();
            f.punch_hole(first * PAGE as u64, n * PAGE as u64).unwrap();
            let end = sh.now();
            events.extend((first..first + n).map(|page| Event {
                page,
                value: 0,
                start,
                end,
            }));
        } else {
            let keep = rng.below(p.pages);
            w.doing(format!(
                "shrinker: truncate to {keep} pages and extend back (op {i})"
            ));
            let start = sh.now();
            f.set_len(keep * PAGE as u64).unwrap();
            // Writers may have extended it meanwhile; never shrink here.
            if f.len() < full {
                f.set_len(full).unwrap();
            }
            let end = sh.now();
            events.extend((keep..p.pages).map(|page| Event {
                page,
                value: 0,
                start,
                end,
            }));
        }
        if i % 16 == 0 {
            w.doing("shrinker: sync");
            f.sync_data().unwrap();
        }
    }
    sh.events.lock().unwrap().extend(events);
}

/// True if `v` read during `[rs, re]` is allowed: some event `c` that wrote
/// `v` started before the read ended, and no event on the page lies wholly
/// between `c`'s end and the read's start.
fn allowed(events: &[Event], v: u64, rs: u64, re: u64) -> bool {
    events
        .iter()
        .filter(|c| c.value == v && c.start < re)
        .any(|c| !events.iter().any(|x| x.start > c.end && x.end < rs))
}

/// Reads of one page must also agree with each other: if read `a` ended
/// before read `b` began and they saw different values, the write of `b`'s
/// value must be able to come after `a` (it cannot have ended before `a`
/// started). This catches data that vanishes and then comes back.
fn check_read_order(page: u64, events: &[Event], reads: &mut [Event], seed: u64) {
    reads.sort_by_key(|r| r.start);
    for (i, b) in reads.iter().enumerate() {
        let latest = events
            .iter()
            .filter(|c| c.value == b.value)
            .map(|c| c.end)
            .max()
            .unwrap_or(0);
        for a in &reads[..i] {
            assert!(
                !(a.end < b.start && a.value != b.value && latest < a.start),
                "seed {seed}: page {page}: read {:#x} during [{}, {}] after read {:#x} during [{}, {}], \
                 but every write of {:#x} ended before the earlier read began",
                b.value,
                b.start,
                b.end,
                a.value,
                a.start,
                a.end,
                b.value
            );
        }
    }
}

fn run(p: Params) -> pollfs_core::Stats {
    let ram = pollfs_core::dev::ram::RamDevice::new(64 << 20, p.block_size, p.cache_pages).unwrap();
    let config = Config {
        cache_pages: p.cache_pages,
        file_lock: p.file_lock,
        idle: std::thread::yield_now,
        ..Config::default()
    };
    let fs = Fs::new(ram, config).unwrap();
    let full = p.pages * PAGE as u64;
    {
        // Written, not just sized: every page has a block, so the
        // shrinker's first punch or truncate frees some whatever the
        // threads' timing (the stats check below relies on it).
        let f = fs.create("f").unwrap();
        f.write_all_at(&vec![0u8; full as usize], 0).unwrap();
        f.sync_data().unwrap();
    }
    let sh = Shared {
        clock: AtomicU64::new(1),
        events: Mutex::new(Vec::new()),
        reads: Mutex::new(Vec::new()),
    };
    // The initial zeros, before everything.
    sh.events
        .lock()
        .unwrap()
        .extend((0..p.pages).map(|page| Event {
            page,
            value: 0,
            start: 0,
            end: 0,
        }));
    let (dog, workers) = Watchdog::start(6, Duration::from_secs(30));
    std::thread::scope(|scope| {
        let (fs, sh) = (&fs, &sh);
        let mut w = workers.into_iter();
        for id in 1..=3 {
            let wk = w.next().unwrap();
            scope.spawn(move || writer(fs, sh, p, id, wk));
        }
        for id in 4..=5 {
            let wk = w.next().unwrap();
            scope.spawn(move || reader(fs, sh, p, id, wk));
        }
        let wk = w.next().unwrap();
        scope.spawn(move || shrinker(fs, sh, p, 6, wk));
    });
    drop(dog);
    let events = sh.events.into_inner().unwrap();
    let reads = sh.reads.into_inner().unwrap();
    let mut by_page: Vec<Vec<Event>> = vec![Vec::new(); p.pages as usize];
    for e in events {
        by_page[e.page as usize].push(e);
    }
    for r in &reads {
        assert!(
            allowed(&by_page[r.page as usize], r.value, r.start, r.end),
            "seed {}: page {} read {:#x} during [{}, {}], which no order of the operations allows (stale or lost data)",
            p.seed,
            r.page,
            r.value,
            r.start,
            r.end
        );
    }
    let mut reads_by_page: Vec<Vec<Event>> = vec![Vec::new(); p.pages as usize];
    for r in reads {
        reads_by_page[r.page as usize].push(r);
    }
    let f = fs.open("f").unwrap();
    assert_eq!(f.len(), full);
    let mut buf = vec![0u8; PAGE];
    let end = u64::MAX;
    for page in 0..p.pages {
        f.read_at(&mut buf, page * PAGE as u64).unwrap();
        let v = decode(&buf, page, "final");
        assert!(
            allowed(&by_page[page as usize], v, end - 1, end),
            "seed {}: page {page} ends as {v:#x}: a later write was lost",
            p.seed
        );
        let rs = &mut reads_by_page[page as usize];
        rs.push(Event {
            page,
            value: v,
            start: end - 1,
            end,
        });
        check_read_order(page, &by_page[page as usize], rs, p.seed);
    }
    f.sync_data().unwrap();
    drop(f);
    fs.check_invariants().unwrap();
    fs.stats()
}

fn ops() -> usize {
    if cfg!(feature = "soak") {
        20_000
    } else {
        1_500
    }
}

#[test]
fn threads_on_a_large_cache() {
    for seed in 0..3 {
        let st = run(Params {
            seed,
            pages: 48,
            cache_pages: 1024,
            block_size: 4096,
            ops_per_thread: ops(),
            file_lock: false,
        });
        assert!(
            st.dev_deallocates > 0,
            "punch and truncate must have freed blocks"
        );
    }
}

#[test]
fn threads_on_a_tiny_cache_with_eviction_and_writeback() {
    for seed in 10..13 {
        let st = run(Params {
            seed,
            pages: 64,
            cache_pages: 24,
            block_size: 512,
            ops_per_thread: ops(),
            file_lock: false,
        });
        assert!(
            st.evictions > 0 && st.dev_writes > 0 && st.dirty_throttles > 0,
            "{st:?}"
        );
    }
}

#[test]
fn threads_with_the_file_lock() {
    run(Params {
        seed: 20,
        pages: 32,
        cache_pages: 256,
        block_size: 4096,
        ops_per_thread: ops(),
        file_lock: true,
    });
}
