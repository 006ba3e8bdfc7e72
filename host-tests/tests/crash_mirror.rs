//! Crash consistency on a mirror: the file workloads of the crash tests
//! run on a two-leg mirror whose legs record what they are sent, in one
//! order across both. At every point of that order each leg's image is
//! built as a power cut would leave it (its own unflushed writes lost,
//! landed, reordered, partly landed, the write under way torn), so a
//! mirrored write can be on one leg and not the other. Each pair of images
//! is assembled as a mirror twice, keeping leg 0 and then leg 1 as the
//! source, and each must recover to a state the oracle accepts
//! (`crash::files`); then the resync must leave both legs byte-equal.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use pollfs_core::dev::ram::{RamDevice, RamFrames};
use pollfs_core::hosted::monotonic_clock;
use pollfs_core::units::PAGE_SIZE;
use pollfs_core::volume::mirror::{HEADER_PAGES, WINDOW_FRAMES};
use pollfs_core::volume::{Mirror, OpenOptions, VolumeError};
use pollfs_core::Fs;
use pollfs_host_tests::crash::files::{check_state, crash_config, generated, run_ops, Op, Oracle};
use pollfs_host_tests::crash::{crash_images, Event, RecordingDevice};
use pollfs_host_tests::rng::Rng;

const DATA_BYTES: u64 = 8 << 20;
const LEG_BYTES: u64 = DATA_BYTES + HEADER_PAGES * PAGE_SIZE as u64;
const FRAMES: u32 = 96 + 2 + WINDOW_FRAMES;

fn idle() {
    std::thread::yield_now()
}

/// RAM legs over one arena holding `images`.
fn legs_holding(images: [&[u8]; 2]) -> Vec<RamDevice> {
    let arena = Arc::new(RamFrames::new(FRAMES));
    images
        .iter()
        .map(|image| {
            let leg = RamDevice::with_arena(LEG_BYTES, 4096, arena.clone()).unwrap();
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

struct Run {
    base: [Vec<u8>; 2],
    events: [Vec<Event>; 2],
    /// Which leg each event was sent to, in the order they were sent.
    order: Vec<usize>,
    oracle: Oracle,
}

fn run_workload(ops: &[Op]) -> Run {
    let blank = vec![0u8; LEG_BYTES as usize];
    let rams = legs_holding([&blank, &blank]);
    // Made, formatted and closed outside the recording.
    let m = Mirror::create(
        rams.clone(),
        0x5EED,
        OpenOptions::default(),
        monotonic_clock,
        idle,
    )
    .unwrap();
    drop(Fs::format(m.clone(), crash_config(), 0xC0FFEE).unwrap());
    m.close(monotonic_clock, idle).unwrap();
    let base = [image(&rams[0]), image(&rams[1])];
    let order: Arc<Mutex<Vec<usize>>> = Arc::default();
    let legs: Vec<RecordingDevice> = rams
        .iter()
        .enumerate()
        .map(|(i, r)| RecordingDevice::in_order(r.clone(), order.clone(), i))
        .collect();
    let m = Mirror::open(legs.clone(), OpenOptions::default(), monotonic_clock, idle).unwrap();
    let fs = Fs::mount(m, crash_config()).unwrap();
    let oracle = run_ops(&fs, &|| order.lock().unwrap().len(), ops);
    drop(fs);
    let order = order.lock().unwrap().clone();
    Run {
        base,
        events: [legs[0].events(), legs[1].events()],
        order,
        oracle,
    }
}

/// What a check of one run saw.
#[derive(Default)]
struct Tally {
    checked: usize,
    /// States whose legs differed in the filesystem's blocks.
    split: usize,
    /// Assemblies refused because the preferred leg missed a header write.
    refused: usize,
}

/// Checks crash states at every point of the run's order.
fn check_run(run: &Run, seed: u64, label: &str, tally: &mut Tally) {
    let mut rng = Rng::new(seed ^ 0x3177);
    for at in 0..=run.order.len() {
        let per_leg: Vec<Vec<(String, Vec<u8>)>> = (0..2)
            .map(|leg| {
                let done = run.order[..at].iter().filter(|&&l| l == leg).count();
                // Only the leg that owns event `at` can be in the middle of it.
                let owns = run.order.get(at) == Some(&leg);
                crash_images(&run.base[leg], &run.events[leg], done, &mut rng)
                    .into_iter()
                    .filter(|(desc, _)| owns || !desc.contains("during"))
                    .collect()
            })
            .collect();
        // Every variant of each leg, against a variant of the other.
        let pairs = per_leg[0].len().max(per_leg[1].len());
        let shift = rng.below(per_leg[1].len() as u64) as usize;
        for i in 0..pairs {
            let (d0, i0) = &per_leg[0][i % per_leg[0].len()];
            let (d1, i1) = &per_leg[1][(i + shift) % per_leg[1].len()];
            let data = DATA_BYTES as usize;
            if i0[..data] != i1[..data] {
                tally.split += 1;
            }
            let in_flight = d0.contains("during") || d1.contains("during");
            for prefer in 0..2 {
                let ctx =
                    format!("{label}: event {at}, source leg {prefer}: leg 0 {d0}; leg 1 {d1}");
                let open = || {
                    let options = OpenOptions {
                        prefer: Some(prefer),
                        ..OpenOptions::default()
                    };
                    Mirror::open(legs_holding([i0, i1]), options, monotonic_clock, idle)
                };
                let m = match open() {
                    Ok(m) => m,
                    Err(VolumeError::LegState { .. }) => {
                        // The crash cut the open's header writes short: the
                        // leg without the newest header is stale, and
                        // cannot be the source.
                        let h = Mirror::inspect(&legs_holding([i0, i1]), monotonic_clock, idle)
                            .unwrap();
                        let (g0, g1) = (h[0].unwrap().generation, h[1].unwrap().generation);
                        assert!(g0 != g1, "{ctx}: refused with equal generations");
                        tally.refused += 1;
                        continue;
                    }
                    Err(e) => panic!("{ctx}: {e}"),
                };
                check_state(&run.oracle, at, in_flight, &m, &|| open().unwrap(), &ctx);
                m.settle(monotonic_clock, idle).unwrap();
                let (a, b) = (image(&m.legs()[0]), image(&m.legs()[1]));
                if let Some(p) = a[..data].iter().zip(&b[..data]).position(|(x, y)| x != y) {
                    panic!("{ctx}: after the resync the legs differ at byte {p}");
                }
                tally.checked += 1;
            }
        }
    }
}

#[test]
fn mirrored_workloads_recover_from_either_leg_at_every_crash_point() {
    use Op::*;
    let mut tally = Tally::default();
    let cases: Vec<(String, Vec<Op>)> = vec![
        (
            "append then fsync".into(),
            vec![
                Create(0),
                Write(0, 0, 5000),
                SyncAll(0),
                Write(0, 5000, 9000),
                SyncData(0),
            ],
        ),
        (
            "rename over a synced file".into(),
            vec![
                Create(0),
                Write(0, 0, 8000),
                SyncAll(0),
                Create(1),
                Write(1, 0, 3000),
                SyncAll(1),
                Rename(1, 0),
                SyncAll(1),
            ],
        ),
    ];
    let generated = (0..4).map(|seed| (format!("seed {seed}"), generated(seed, 12)));
    for (i, (label, ops)) in cases.into_iter().chain(generated).enumerate() {
        let run = run_workload(&ops);
        check_run(&run, i as u64, &label, &mut tally);
    }
    println!(
        "mirror crash states checked: {} ({} with the legs apart; {} refused sources)",
        tally.checked, tally.split, tally.refused
    );
    assert!(tally.checked > 300, "only {} states", tally.checked);
    assert!(
        tally.split > 50,
        "only {} states had the legs apart",
        tally.split
    );
}
