//! The mirror against a model, and under a filesystem:
//!
//! - random writes, reads, flushes and control steps on several queues at
//!   once, with legs failing (writes, flushes, reads, or everything after a
//!   countdown) and coming back, checked against a model of the volume's
//!   pages: every read sees the model, every completion succeeds while one
//!   healthy leg is in sync, a leg that lacks a completed write could never
//!   be taken as a source after a crash (from the headers on the media),
//!   and once every leg is back and resynced the legs equal the model;
//! - a leg failing in the middle of a sync-heavy filesystem workload: every
//!   synced byte is there, on the running mirror and after a crash; the
//!   leg rejoins and is copied while writers keep writing, and the legs end
//!   byte-equal;
//! - the copy a short absence costs: a leg away while a few files are
//!   synced is copied only in the bitmap's regions written meanwhile,
//!   against the whole leg without the bitmap (the figures are printed);
//! - legs of different kinds (RAM and emulated NVMe) in one mirror, and a
//!   stripe over two emulated controllers that share DMA memory.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use pollfs_core::dev::either::Either;
use pollfs_core::dev::fault::{FaultPlan, FaultyDevice};
use pollfs_core::dev::ram::{RamDevice, RamFrames};
use pollfs_core::dev::{BlockDevice, Command, CommandKind, DevError, DeviceQueue, FrameArena, Tag};
use pollfs_core::hosted::monotonic_clock;
use pollfs_core::units::{FrameId, Lba, Nanos, PAGE_SIZE};
use pollfs_core::volume::header::Header;
use pollfs_core::volume::mirror::{assemble, MirrorQueue, HEADER_PAGES, WINDOW_FRAMES};
use pollfs_core::volume::{LegState, Mirror, OpenOptions, Stripe};
use pollfs_core::Fs;
use pollfs_driver::emu::{EmuConfig, EmuFrames, EmuMemory, StdClock};
use pollfs_driver::{DriverConfig, NvmeDevice};
use pollfs_host_tests::deferred::DeferredDevice;
use pollfs_host_tests::model::pattern;
use pollfs_host_tests::rng::Rng;
use pollfs_host_tests::setup::config;

type Leg = FaultyDevice<DeferredDevice<RamDevice>>;

fn idle() {
    std::thread::yield_now()
}

/// Pages of the model test's mirror.
const PAGES: u64 = 200;
const OP_FRAMES: u32 = 64;

struct Legs {
    rams: Vec<RamDevice>,
    plans: Vec<FaultPlan>,
}

impl Legs {
    fn new(n: usize, data_pages: u64, frames: u32) -> Legs {
        let arena = Arc::new(RamFrames::new(frames));
        let bytes = (data_pages + HEADER_PAGES) * PAGE_SIZE as u64;
        Legs {
            rams: (0..n)
                .map(|_| RamDevice::with_arena(bytes, 4096, arena.clone()).unwrap())
                .collect(),
            plans: (0..n).map(|_| FaultPlan::new()).collect(),
        }
    }
    /// The legs as devices whose commands run late and out of order.
    fn devices(&self, seed: u64) -> Vec<Leg> {
        self.rams
            .iter()
            .zip(&self.plans)
            .enumerate()
            .map(|(i, (r, p))| {
                let deferred = DeferredDevice::new(r.clone(), seed ^ (i as u64) << 48);
                FaultyDevice::new(deferred, p.clone())
            })
            .collect()
    }
    /// Page `page` of leg `leg`'s medium.
    fn page(&self, leg: usize, page: u64) -> Vec<u8> {
        let mut v = vec![0u8; PAGE_SIZE];
        self.rams[leg].read_raw(page * PAGE_SIZE as u64, &mut v);
        v
    }
    /// Each leg's newest header, read off the media as a crash would
    /// leave them.
    fn headers(&self) -> Vec<Option<Header>> {
        self.rams
            .iter()
            .map(|r| {
                let pages = r.bytes() / PAGE_SIZE as u64;
                (pages - HEADER_PAGES..pages)
                    .filter_map(|p| {
                        let mut b = vec![0u8; PAGE_SIZE];
                        r.read_raw(p * PAGE_SIZE as u64, &mut b);
                        Header::decode(&b).ok()
                    })
                    .max_by_key(|h| h.generation)
            })
            .collect()
    }
}

enum Kind {
    Write(u8),
    Read,
    Flush,
}

struct Pending {
    kind: Kind,
    pages: std::ops::Range<u64>,
    frames: Vec<FrameId>,
}

/// The model test's state.
struct World {
    legs: Legs,
    m: Mirror<Leg>,
    queues: Vec<MirrorQueue<Leg>>,
    /// Each page holds one byte repeated.
    model: Vec<u8>,
    free: Vec<FrameId>,
    pending: BTreeMap<(usize, Tag), Pending>,
    busy: BTreeSet<u64>,
    /// Legs with a fault planned.
    faulty: BTreeSet<usize>,
    next_value: u8,
    completions: usize,
    seed: u64,
}

impl World {
    fn states(&self) -> Vec<LegState> {
        self.m.status().legs.iter().map(|(s, _)| *s).collect()
    }

    fn submit(&mut self, q: usize, kind: Kind, pages: std::ops::Range<u64>) {
        let n = (pages.end - pages.start) as usize;
        if pages.clone().any(|p| self.busy.contains(&p)) || self.free.len() < n {
            return;
        }
        let frames: Vec<FrameId> = self.free.split_off(self.free.len() - n);
        let arena = self.m.frames();
        let lba = Lba(pages.start);
        let cmd = match kind {
            Kind::Write(v) => {
                for f in &frames {
                    arena.fill(*f, 0, PAGE_SIZE, v).unwrap();
                }
                Command::Write {
                    lba,
                    frames: &frames,
                    fua: v % 7 == 0,
                }
            }
            Kind::Read => {
                for f in &frames {
                    arena.fill(*f, 0, PAGE_SIZE, 0xEE).unwrap();
                }
                Command::Read {
                    lba,
                    frames: &frames,
                }
            }
            Kind::Flush => Command::Flush,
        };
        match self.queues[q].submit(&cmd) {
            Ok(tag) => {
                self.busy.extend(pages.clone());
                self.pending.insert(
                    (q, tag),
                    Pending {
                        kind,
                        pages,
                        frames,
                    },
                );
            }
            Err(DevError::QueueFull) => self.free.extend(frames),
            Err(e) => panic!("submit: {e}"),
        }
    }

    fn poll(&mut self, q: usize, max: usize) {
        let mut done = Vec::new();
        self.queues[q].poll(Nanos(0), max, &mut |c| done.push(c));
        for c in done {
            let p = self
                .pending
                .remove(&(q, c.tag))
                .expect("a tag we submitted");
            assert_eq!(
                c.result,
                Ok(()),
                "seed {}: a healthy leg in sync always exists: {:?}",
                self.seed,
                self.m.take_events()
            );
            self.completions += 1;
            for page in p.pages.clone() {
                self.busy.remove(&page);
            }
            match p.kind {
                Kind::Write(v) => {
                    for page in p.pages.clone() {
                        self.model[page as usize] = v;
                    }
                    self.no_source_lacks(p.pages.clone());
                }
                Kind::Read => {
                    for (page, f) in p.pages.clone().zip(&p.frames) {
                        let mut b = vec![0u8; PAGE_SIZE];
                        self.m.frames().read(*f, 0, &mut b).unwrap();
                        let want = self.model[page as usize];
                        assert!(
                            b.iter().all(|&x| x == want),
                            "page {page}: read {} not {want}",
                            b[0]
                        );
                    }
                }
                Kind::Flush => {}
            }
            self.free.extend(p.frames);
        }
    }

    /// A leg that does not hold a completed write must not be one a crash
    /// now could assemble the mirror from.
    fn no_source_lacks(&self, pages: std::ops::Range<u64>) {
        let headers = self.legs.headers();
        for leg in 0..self.legs.rams.len() {
            let lacks = pages.clone().any(|p| {
                let want = self.model[p as usize];
                self.legs.page(leg, p).iter().any(|&x| x != want)
            });
            if lacks {
                assert!(
                    assemble(&headers, Some(leg)).is_err(),
                    "seed {}: leg {leg} lacks a completed write but could be a source after a crash",
                    self.seed
                );
            }
        }
    }

    /// Plans a fault on `leg` if another leg in sync stays healthy.
    fn inject(&mut self, leg: usize, rng: &mut Rng) {
        let states = self.states();
        let spare = (0..states.len())
            .any(|l| l != leg && states[l] == LegState::InSync && !self.faulty.contains(&l));
        if !spare || self.faulty.contains(&leg) {
            return;
        }
        let plan = &self.legs.plans[leg];
        match rng.below(4) {
            0 => plan.fail(CommandKind::Write, 1 + rng.below(3), DevError::Media),
            1 => plan.fail(CommandKind::Flush, 1, DevError::Timeout),
            2 => plan.fail(CommandKind::Read, u64::MAX, DevError::Media),
            _ => plan.fail_after(rng.below(30)),
        }
        self.faulty.insert(leg);
    }

    /// Heals `leg` and takes it back if it was dropped. Commands sent
    /// before the heal may still fail, so the leg counts as healthy only
    /// once they have all finished.
    fn heal(&mut self, leg: usize) {
        self.legs.plans[leg].heal();
        self.drain();
        self.faulty.remove(&leg);
        if self.states()[leg] == LegState::Failed {
            self.m.rejoin(leg).unwrap();
        }
    }

    /// Polls until every operation has completed.
    fn drain(&mut self) {
        for _ in 0..10_000 {
            if self.pending.is_empty() {
                return;
            }
            for q in 0..self.queues.len() {
                self.poll(q, 64);
            }
            self.m.poll_control(Nanos(0));
        }
        panic!("seed {}: operations never completed", self.seed);
    }
}

fn model_run(seed: u64, ops: usize) {
    let mut rng = Rng::new(seed);
    let n = 2 + (seed % 2) as usize;
    let legs = Legs::new(n, PAGES, OP_FRAMES + n as u32 + WINDOW_FRAMES);
    let m = Mirror::create(
        legs.devices(0),
        seed,
        OpenOptions::default(),
        monotonic_clock,
        idle,
    )
    .unwrap();
    // Clearing passes at every control step: the bitmap's marks and clears
    // race the writes, the failures and the resyncs.
    m.set_clear_delay(Nanos(0));
    let queues = (0..3).map(|_| m.open_queue().unwrap()).collect();
    let mut w = World {
        legs,
        m,
        queues,
        model: vec![0; PAGES as usize],
        free: (0..OP_FRAMES).map(FrameId).collect(),
        pending: BTreeMap::new(),
        busy: BTreeSet::new(),
        faulty: BTreeSet::new(),
        next_value: 1,
        completions: 0,
        seed,
    };
    for _ in 0..ops {
        let q = rng.below(3) as usize;
        let at = rng.below(PAGES);
        let pages = at..(at + 1 + rng.below(4)).min(PAGES);
        match rng.below(100) {
            0..=34 => {
                let v = w.next_value;
                w.next_value = w.next_value.wrapping_add(1).max(1);
                w.submit(q, Kind::Write(v), pages);
            }
            35..=54 => w.submit(q, Kind::Read, pages),
            55..=59 => w.submit(q, Kind::Flush, 0..0),
            60..=84 => w.poll(q, 1 + rng.below(8) as usize),
            85..=91 => {
                w.m.poll_control(Nanos(0));
            }
            92..=95 => w.inject(rng.below(n as u64) as usize, &mut rng),
            _ => w.heal(rng.below(n as u64) as usize),
        }
    }
    // Everything back, copied, and quiet.
    for leg in 0..n {
        w.heal(leg);
    }
    for _ in 0..10_000 {
        for q in 0..3 {
            w.poll(q, 64);
        }
        // A failure decided before the heal may still arrive.
        for leg in 0..n {
            if w.states()[leg] == LegState::Failed {
                w.m.rejoin(leg).unwrap();
            }
        }
        if !w.m.poll_control(Nanos(0)) && w.pending.is_empty() {
            break;
        }
    }
    assert!(
        w.pending.is_empty(),
        "seed {seed}: operations never completed"
    );
    assert!(
        w.states().iter().all(|s| *s == LegState::InSync),
        "seed {seed}: {:?} {:?}",
        w.states(),
        w.m.take_events()
    );
    for leg in 0..n {
        for p in 0..PAGES {
            let want = w.model[p as usize];
            assert!(
                w.legs.page(leg, p).iter().all(|&x| x == want),
                "seed {seed}: leg {leg} page {p} is not {want}"
            );
        }
    }
    assert!(
        w.completions > ops / 4,
        "seed {seed}: {} completions",
        w.completions
    );
    // Quiet, every leg in sync: the bitmap clears.
    for _ in 0..1000 {
        if w.m.status().dirty_regions == 0 {
            break;
        }
        w.m.poll_control(Nanos(0));
    }
    assert_eq!(w.m.status().dirty_regions, 0, "seed {seed}: never cleared");
}

/// Seeds per run: `POLLFS_MIRROR_SEEDS`, or 1000 with the `soak` feature,
/// or 48.
fn seeds() -> u64 {
    std::env::var("POLLFS_MIRROR_SEEDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(if cfg!(feature = "soak") { 1000 } else { 48 })
}

#[test]
fn random_io_with_failing_and_returning_legs_matches_the_model() {
    for seed in 0..seeds() {
        model_run(seed, 2000);
    }
}

/// Writes `files` files with syncs, returning each one's synced bytes.
fn sync_heavy<D: BlockDevice>(fs: &Fs<D>, round: u64, files: usize) -> BTreeMap<String, Vec<u8>> {
    let mut synced = BTreeMap::new();
    for i in 0..files {
        let name = format!("f{i}");
        let f = fs.open_or_create(&name).unwrap();
        let data = pattern(round * 100 + i as u64, 0, 20_000 + i * 3000);
        f.write_all_at(&data, 0).unwrap();
        f.sync_all().unwrap();
        synced.insert(name, data);
    }
    synced
}

fn assert_files<D: BlockDevice>(fs: &Fs<D>, want: &BTreeMap<String, Vec<u8>>, ctx: &str) {
    for (name, data) in want {
        let f = fs.open(name).unwrap();
        let mut got = vec![0u8; data.len()];
        assert_eq!(f.read_at(&mut got, 0).unwrap(), data.len(), "{ctx}: {name}");
        assert!(got == *data, "{ctx}: {name} differs");
    }
}

#[test]
fn a_leg_lost_mid_workload_loses_no_synced_byte_and_rejoins_while_writers_write() {
    let data_pages = 4096;
    let frames = 160 + 2 + WINDOW_FRAMES;
    let legs = Legs::new(2, data_pages, frames);
    let m = Mirror::create(
        legs.devices(0),
        1,
        OpenOptions::default(),
        monotonic_clock,
        idle,
    )
    .unwrap();
    let fs = Fs::format(m.clone(), config(128), 77).unwrap();
    let mut synced = sync_heavy(&fs, 1, 4);
    // Leg 1 dies part-way through the next round of syncs.
    legs.plans[1].fail_after(5);
    synced.extend(sync_heavy(&fs, 2, 6));
    assert_eq!(m.status().legs[1].0, LegState::Failed);
    assert_files(&fs, &synced, "after the failure");
    // A crash now: the images as they are, assembled, still hold every
    // synced byte, and leg 1 (which missed writes) is not trusted.
    let images: Vec<Vec<u8>> = legs
        .rams
        .iter()
        .map(|r| {
            let mut v = vec![0u8; r.bytes() as usize];
            r.read_raw(0, &mut v);
            v
        })
        .collect();
    {
        let copy = Legs::new(2, data_pages, frames);
        for (r, image) in copy.rams.iter().zip(&images) {
            r.write_raw(0, image);
        }
        let m2 = Mirror::open(
            copy.devices(0),
            OpenOptions::default(),
            monotonic_clock,
            idle,
        )
        .unwrap();
        assert_eq!(m2.status().legs[1].0, LegState::Failed);
        let fs2 = Fs::mount(m2, config(64)).unwrap();
        assert_files(&fs2, &synced, "after a crash");
    }
    // Leg 1 comes back and is copied while two writers keep writing and
    // syncing; a third thread polls the control section.
    legs.plans[1].heal();
    m.rejoin(1).unwrap();
    let done = AtomicBool::new(false);
    let fs = Arc::new(fs);
    let results: Vec<BTreeMap<String, Vec<u8>>> = std::thread::scope(|s| {
        let writers: Vec<_> = (0..2u64)
            .map(|t| {
                let fs = fs.clone();
                let done = &done;
                s.spawn(move || {
                    let mut mine = BTreeMap::new();
                    let mut round = 0;
                    while !done.load(Ordering::Acquire) || round < 3 {
                        round += 1;
                        let name = format!("w{t}");
                        let f = fs.open_or_create(&name).unwrap();
                        let data = pattern(1000 + t * 100 + round, 0, 40_000);
                        f.write_all_at(&data, 0).unwrap();
                        f.sync_data().unwrap();
                        mine.insert(name, data);
                    }
                    mine
                })
            })
            .collect();
        let (m, done) = (&m, &done);
        s.spawn(move || {
            m.settle(monotonic_clock, idle).unwrap();
            done.store(true, Ordering::Release);
        });
        writers.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for r in results {
        synced.extend(r);
    }
    assert_eq!(m.status().legs[1].0, LegState::InSync);
    assert_files(&fs, &synced, "after the resync");
    Arc::into_inner(fs).unwrap().unmount().unwrap();
    m.close(monotonic_clock, idle).unwrap();
    for p in 0..data_pages {
        assert!(
            legs.page(0, p) == legs.page(1, p),
            "the legs differ at page {p}"
        );
    }
    // Leg 1 alone, as the only source, has everything.
    let ro = OpenOptions {
        writable: false,
        ..OpenOptions::default()
    };
    let m = Mirror::open(legs.devices(0), ro, monotonic_clock, idle).unwrap();
    legs.plans[0].fail(CommandKind::Read, u64::MAX, DevError::Media);
    let fs = Fs::mount(m, config(64)).unwrap();
    assert_files(&fs, &synced, "read from leg 1 only");
}

#[test]
fn a_short_absence_is_copied_only_where_it_was_written() {
    // 64 MiB legs, as in `just vm-mirror-test`: 64 regions of 1 MiB.
    let data_pages = 16384 - HEADER_PAGES;
    let frames = 160 + 2 + WINDOW_FRAMES;
    let legs = Legs::new(2, data_pages, frames);
    let m = Mirror::create(
        legs.devices(0),
        2,
        OpenOptions::default(),
        monotonic_clock,
        idle,
    )
    .unwrap();
    let fs = Fs::format(m.clone(), config(128), 78).unwrap();
    let mut synced = sync_heavy(&fs, 1, 8);
    // The regions written so far are cleared once idle for a clearing
    // period (made short here so the test need not wait 5 to 10 s).
    m.set_clear_delay(Nanos(0));
    for _ in 0..20 {
        m.poll_control(monotonic_clock());
    }
    let before = m.status().dirty_regions;
    let mib = |blocks: u64| blocks as f64 * 4096.0 / f64::from(1 << 20);
    let mut absence = |whole: bool, round: u64| {
        let copied = m.status().resync_copied;
        m.fail_leg(1).unwrap();
        synced.extend(sync_heavy(&fs, round, 2));
        let dirty = m.status().dirty_regions;
        if whole {
            m.rejoin_whole(1).unwrap();
        } else {
            m.rejoin(1).unwrap();
        }
        m.settle(monotonic_clock, idle).unwrap();
        assert_eq!(m.status().legs[1].0, LegState::InSync);
        (m.status().resync_copied - copied, dirty)
    };
    let (bitmap, dirty) = absence(false, 2);
    let (whole, _) = absence(true, 3);
    let st = m.status();
    println!(
        "a rejoin after a short absence (2 files of ~20 KiB synced) copied {:.1} MiB with the \
         bitmap ({dirty} of {} regions of {} MiB marked; {before} marked before the leg left) \
         and {:.1} MiB without it (the whole leg)",
        mib(bitmap),
        st.regions,
        st.region_bytes >> 20,
        mib(whole),
    );
    assert_eq!(whole, m.geometry().capacity);
    assert!(bitmap * 8 <= whole, "{bitmap} of {whole} blocks copied");
    assert_files(&fs, &synced, "after both resyncs");
    fs.unmount().unwrap();
    m.close(monotonic_clock, idle).unwrap();
    for p in 0..data_pages {
        assert!(
            legs.page(0, p) == legs.page(1, p),
            "the legs differ at page {p}"
        );
    }
}

#[test]
fn a_ram_leg_and_an_emulated_nvme_leg_mirror_one_filesystem() {
    type Mixed = Either<RamDevice<EmuFrames>, pollfs_driver::EmulatedDevice>;
    let bytes = 16 << 20;
    let emu = EmuConfig {
        bytes,
        block_size: 4096,
        ..EmuConfig::default()
    };
    let (nvme, ctrl) =
        NvmeDevice::emulated_with(emu, DriverConfig::default(), 200, StdClock::new()).unwrap();
    let ram = RamDevice::with_arena(bytes, 4096, nvme.arena()).unwrap();
    let legs: Vec<Mixed> = vec![Either::Left(ram.clone()), Either::Right(nvme)];
    let m = Mirror::create(legs, 5, OpenOptions::default(), monotonic_clock, idle).unwrap();
    let fs = Fs::format(m.clone(), config(64), 5).unwrap();
    let synced = sync_heavy(&fs, 3, 5);
    fs.unmount().unwrap();
    m.close(monotonic_clock, idle).unwrap();
    let pages = m.geometry().capacity_pages();
    let (mut a, mut b) = (vec![0u8; PAGE_SIZE], vec![0u8; PAGE_SIZE]);
    for p in 0..pages {
        ram.read_raw(p * PAGE_SIZE as u64, &mut a);
        ctrl.read_medium(p * PAGE_SIZE as u64, &mut b);
        assert!(a == b, "the legs differ at page {p}");
    }
    assert!(ctrl.stats().writes > 0);
    let fs = Fs::mount(m, config(64)).unwrap();
    assert_files(&fs, &synced, "remounted");
}

#[test]
fn a_stripe_over_two_emulated_controllers_on_one_dma_memory_holds_a_filesystem() {
    let mem = EmuMemory::new();
    let arena = Arc::new(EmuFrames::new(&mem, 200).unwrap());
    let emu = EmuConfig {
        bytes: 8 << 20,
        block_size: 512,
        ..EmuConfig::default()
    };
    let legs: Vec<_> = (0..2)
        .map(|_| {
            let clock = StdClock::new();
            NvmeDevice::emulated_on(emu, DriverConfig::default(), &mem, arena.clone(), clock)
                .unwrap()
        })
        .collect();
    let ctrls: Vec<_> = legs.iter().map(|(_, c)| c.clone()).collect();
    let s = Stripe::new(legs.into_iter().map(|(d, _)| d).collect(), 64 << 10).unwrap();
    assert_eq!(s.geometry().capacity, 2 * (8 << 20) / 512);
    let fs = Fs::format(s, config(64), 9).unwrap();
    let synced = sync_heavy(&fs, 4, 6);
    assert_files(&fs, &synced, "on the stripe");
    for c in &ctrls {
        assert!(
            c.stats().writes > 0,
            "both controllers took writes: {:?}",
            c.stats()
        );
    }
    fs.unmount().unwrap();
}
