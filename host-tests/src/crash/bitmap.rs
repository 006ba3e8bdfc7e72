//! Crash consistency of a mirror's write-intent bitmap: a block workload
//! on a two-leg mirror in which leg 1 leaves and returns and the bitmap is
//! marked and cleared throughout, checked at every point of the legs'
//! common order. Each leg's image is built as a power cut would leave it
//! (`crash_images`), the pair is assembled (keeping either leg as the
//! source when it can be), a failed leg is taken back, and the resync runs
//! to the end. Then the legs must agree on every data byte, and every
//! sector must hold the value its last synced write gave it or a value
//! written after that one.
//!
//! The workload writes without a flush before clearing passes, so a clear
//! that does not flush first leaves a region clean that the legs hold
//! differently (`Mutant::BitmapClearsBeforeFlush`), and writes while leg
//! 1 is out, so a write that skips its mark is missed by the resync
//! (`Mutant::BitmapSkipsMark`).

use std::sync::{Arc, Mutex};

use pollfs_core::dev::ram::{RamDevice, RamFrames};
use pollfs_core::dev::{BlockDevice, Command, DeviceQueue, FrameArena};
use pollfs_core::hosted::monotonic_clock;
use pollfs_core::units::{FrameId, Lba, Nanos, PAGE_SIZE};
use pollfs_core::volume::mirror::{LegState, HEADER_PAGES, WINDOW_FRAMES};
use pollfs_core::volume::{Mirror, OpenOptions, VolumeError};

use super::{crash_images, Event, RecordingDevice};
use crate::rng::Rng;

/// 8 MiB of data: 8 regions of 1 MiB (256 pages).
pub const DATA_PAGES: u64 = 2048;
const REGION_PAGES: u64 = 256;
const LEG_BYTES: u64 = (DATA_PAGES + HEADER_PAGES) * PAGE_SIZE as u64;
const FRAMES: u32 = 8 + 2 + WINDOW_FRAMES;

/// One step of the workload.
#[derive(Clone, Copy, Debug)]
pub enum Step {
    /// Write page `.0` with a value of its own.
    Write(u64),
    /// Flush the mirror.
    Flush,
    /// Drop leg `.0`.
    Fail(usize),
    /// Take leg `.0` back.
    Rejoin(usize),
    /// Run the control section `.0` times (clearing passes, resync).
    Control(u32),
}

/// The workload: clears after unflushed writes, leg 1 away while regions
/// 3 and 5 are written, and back while regions 0, 5 and 6 are.
pub fn workload() -> Vec<Step> {
    use Step::*;
    let r = |region: u64, page: u64| Write(region * REGION_PAGES + page);
    vec![
        r(0, 1),
        r(2, 7),
        Flush,
        r(1, 3),
        Control(8),
        r(2, 8),
        Flush,
        Control(8),
        r(0, 2),
        Fail(1),
        r(3, 0),
        r(5, 9),
        Flush,
        r(3, 1),
        Control(8),
        Rejoin(1),
        r(0, 1),
        Control(3),
        r(5, 10),
        Control(3),
        r(6, 0),
        Control(400),
        Flush,
        r(4, 4),
        Control(8),
        r(4, 5),
        Flush,
    ]
}

/// What the run did, in the legs' common order.
#[derive(Debug)]
pub struct Run {
    base: [Vec<u8>; 2],
    events: [Vec<Event>; 2],
    order: Vec<usize>,
    /// Per write (its id is its index + 1): page, and the order length
    /// once it completed.
    writes: Vec<(u64, usize)>,
    /// Per flush: the writes before it, and the order length once it
    /// completed.
    flushes: Vec<(usize, usize)>,
    /// Regions marked after each step.
    pub dirty: Vec<u32>,
}

impl Run {
    /// Points of the order a crash can come at.
    pub fn points(&self) -> usize {
        self.order.len() + 1
    }
}

fn idle() {
    std::thread::yield_now()
}

fn legs_holding(images: [&[u8]; 2]) -> Vec<RamDevice> {
    let arena = Arc::new(RamFrames::new(FRAMES));
    images
        .iter()
        .map(|image| {
            let leg = RamDevice::with_arena(LEG_BYTES, 4096, arena.clone()).expect("ram leg");
            leg.write_raw(0, image);
            leg
        })
        .collect()
}

fn image(leg: &RamDevice) -> Vec<u8> {
    let mut v = vec![0u8; LEG_BYTES as usize];
    leg.read_raw(0, &mut v);
    v
}

/// Submits `cmd` and polls until it completes.
fn run_cmd<Q: DeviceQueue>(q: &mut Q, cmd: &Command<'_>) -> Result<(), String> {
    let tag = q.submit(cmd).map_err(|e| format!("submit: {e}"))?;
    for _ in 0..100_000 {
        let mut out = None;
        q.poll(monotonic_clock(), 64, &mut |c| {
            if c.tag == tag {
                out = Some(c.result);
            }
        });
        if let Some(r) = out {
            return r.map_err(|e| format!("{cmd:?}: {e}"));
        }
        idle();
    }
    Err(format!("{cmd:?} never completed"))
}

/// Runs `steps` on a new mirror over recording legs.
pub fn run(steps: &[Step]) -> Result<Run, String> {
    let blank = vec![0u8; LEG_BYTES as usize];
    let rams = legs_holding([&blank, &blank]);
    let m = Mirror::create(
        rams.clone(),
        0xB17,
        OpenOptions::default(),
        monotonic_clock,
        idle,
    )
    .map_err(|e| e.to_string())?;
    m.close(monotonic_clock, idle).map_err(|e| e.to_string())?;
    let base = [image(&rams[0]), image(&rams[1])];
    let order: Arc<Mutex<Vec<usize>>> = Arc::default();
    let legs: Vec<RecordingDevice> = rams
        .iter()
        .enumerate()
        .map(|(i, r)| RecordingDevice::in_order(r.clone(), order.clone(), i))
        .collect();
    let m = Mirror::open(legs.clone(), OpenOptions::default(), monotonic_clock, idle)
        .map_err(|e| e.to_string())?;
    m.set_clear_delay(Nanos(0));
    let mut q = m.open_queue().map_err(|e| e.to_string())?;
    let len = || order.lock().map_or(0, |o| o.len());
    let (mut writes, mut flushes, mut dirty) = (Vec::new(), Vec::new(), Vec::new());
    for step in steps {
        match *step {
            Step::Write(page) => {
                let id = writes.len() as u32 + 1;
                fill(m.frames(), id)?;
                let cmd = Command::Write {
                    lba: Lba(page),
                    frames: &[FrameId(0)],
                    fua: false,
                };
                run_cmd(&mut q, &cmd)?;
                writes.push((page, len()));
            }
            Step::Flush => {
                run_cmd(&mut q, &Command::Flush)?;
                flushes.push((writes.len(), len()));
            }
            Step::Fail(leg) => m.fail_leg(leg).map_err(|e| e.to_string())?,
            Step::Rejoin(leg) => m.rejoin(leg).map_err(|e| e.to_string())?,
            Step::Control(n) => {
                for _ in 0..n {
                    m.poll_control(monotonic_clock());
                }
            }
        }
        dirty.push(m.status().dirty_regions);
    }
    drop(q);
    let order = order.lock().map_err(|e| e.to_string())?.clone();
    Ok(Run {
        base,
        events: [legs[0].events(), legs[1].events()],
        order,
        writes,
        flushes,
        dirty,
    })
}

fn fill<F: FrameArena>(frames: &F, id: u32) -> Result<(), String> {
    let page: Vec<u8> = id.to_le_bytes().repeat(PAGE_SIZE / 4);
    frames
        .write(FrameId(0), 0, &page)
        .map_err(|e| e.to_string())
}

/// The values sector `s` of page `page` may hold after a crash at `at`:
/// its last synced write's (0 if none) and every later write's.
fn allowed(run: &Run, page: u64, at: usize) -> Vec<u32> {
    let synced = run
        .flushes
        .iter()
        .filter(|&&(_, done)| done <= at)
        .map(|&(before, _)| before)
        .max()
        .unwrap_or(0);
    let ids: Vec<u32> = (0..run.writes.len())
        .filter(|&i| run.writes[i].0 == page)
        .map(|i| i as u32 + 1)
        .collect();
    let last_synced = ids.iter().rev().find(|&&id| (id as usize) <= synced);
    let mut ok = vec![last_synced.copied().unwrap_or(0)];
    ok.extend(ids.iter().filter(|&&id| Some(&id) > last_synced));
    ok
}

/// Checks every crash point of `run`; the first failure, described.
pub fn check(run: &Run, seed: u64) -> Result<usize, String> {
    let mut rng = Rng::new(seed);
    let data = (DATA_PAGES * PAGE_SIZE as u64) as usize;
    let pages: Vec<u64> = {
        let mut p: Vec<u64> = run.writes.iter().map(|w| w.0).collect();
        p.sort_unstable();
        p.dedup();
        p
    };
    let mut checked = 0;
    for at in 0..run.points() {
        let per_leg: Vec<Vec<(String, Vec<u8>)>> = (0..2)
            .map(|leg| {
                let done = run.order[..at].iter().filter(|&&l| l == leg).count();
                let owns = run.order.get(at) == Some(&leg);
                crash_images(&run.base[leg], &run.events[leg], done, &mut rng)
                    .into_iter()
                    .filter(|(desc, _)| owns || !desc.contains("during"))
                    .collect()
            })
            .collect();
        let pairs = per_leg[0].len().max(per_leg[1].len());
        for i in 0..pairs {
            let (d0, i0) = &per_leg[0][i % per_leg[0].len()];
            let (d1, i1) = &per_leg[1][(i * 3 + 1) % per_leg[1].len()];
            for prefer in 0..2 {
                let ctx = format!("event {at}, source leg {prefer}: leg 0 {d0}; leg 1 {d1}");
                let options = OpenOptions {
                    prefer: Some(prefer),
                    ..OpenOptions::default()
                };
                let m = match Mirror::open(legs_holding([i0, i1]), options, monotonic_clock, idle) {
                    Ok(m) => m,
                    // Not a source this crash allows.
                    Err(VolumeError::LegState { .. }) => continue,
                    Err(e) => return Err(format!("{ctx}: open: {e}")),
                };
                let failed = m.status().legs.iter().position(|l| l.0 == LegState::Failed);
                if let Some(leg) = failed {
                    m.rejoin(leg).map_err(|e| format!("{ctx}: rejoin: {e}"))?;
                }
                m.settle(monotonic_clock, idle)
                    .map_err(|e| format!("{ctx}: settle: {e}"))?;
                let (a, b) = (image(&m.legs()[0]), image(&m.legs()[1]));
                if let Some(p) = a[..data].iter().zip(&b[..data]).position(|(x, y)| x != y) {
                    return Err(format!(
                        "{ctx}: after the resync the legs differ at page {} (region {})",
                        p / PAGE_SIZE,
                        p / PAGE_SIZE / REGION_PAGES as usize
                    ));
                }
                for &page in &pages {
                    let ok = allowed(run, page, at);
                    let at_page = page as usize * PAGE_SIZE;
                    for s in 0..PAGE_SIZE / 512 {
                        let o = at_page + s * 512;
                        let v = u32::from_le_bytes([a[o], a[o + 1], a[o + 2], a[o + 3]]);
                        if !ok.contains(&v) {
                            return Err(format!(
                                "{ctx}: page {page} sector {s} holds write {v}, not one of {ok:?}"
                            ));
                        }
                    }
                }
                checked += 1;
            }
        }
    }
    Ok(checked)
}
