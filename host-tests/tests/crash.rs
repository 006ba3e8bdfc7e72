//! Crash consistency: run a workload on a recording device, then at every
//! write boundary build the images a power cut could leave, recover each,
//! and check it against the workload's oracle (`crash::files`): synced
//! files exact, no byte from elsewhere, fsck clean, the same state on a
//! second recovery, and a filesystem that keeps working.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use pollfs_core::dev::ram::RamDevice;
use pollfs_core::Fs;
use pollfs_host_tests::crash::files::{
    check_state, generated, run_ops, until_full, workloads, Op, Oracle, CACHE,
};
use pollfs_host_tests::crash::{crash_images, device_from, Event, RecordingDevice};
use pollfs_host_tests::rng::Rng;
use pollfs_host_tests::setup::config;

const DEV_BYTES: u64 = 8 << 20;
const FRAMES: u32 = 96;

struct Run {
    events: Vec<Event>,
    base: Vec<u8>,
    oracle: Oracle,
}

fn run_workload(ops: &[Op]) -> Run {
    let ram = RamDevice::new(DEV_BYTES, 4096, FRAMES).unwrap();
    let mut base = vec![0u8; DEV_BYTES as usize];
    // Format outside the recording: crashes during mkfs are not the point.
    drop(Fs::format(ram.clone(), config(CACHE), 0xC0FFEE).unwrap());
    ram.read_raw(0, &mut base);
    let dev = RecordingDevice::new(ram);
    let fs = Fs::mount(dev.clone(), config(CACHE)).unwrap();
    let oracle = run_ops(&fs, &|| dev.len(), ops);
    Run {
        events: dev.events(),
        base,
        oracle,
    }
}

/// Checks every crash state of a run; returns how many were checked.
fn check_run(run: &Run, seed: u64, label: &str) -> usize {
    let mut rng = Rng::new(seed ^ 0xC4A5);
    let mut checked = 0;
    for at in 0..=run.events.len() {
        for (desc, image) in crash_images(&run.base, &run.events, at, &mut rng) {
            let ctx = format!("{label}: {desc}");
            // A state with event `at` torn has that event's operation under
            // way: it touched its files.
            let in_flight = desc.contains("during");
            let dev = device_from(&image, FRAMES);
            check_state(
                &run.oracle,
                at,
                in_flight,
                &dev,
                &|| device_from(&image, FRAMES),
                &ctx,
            );
            checked += 1;
        }
    }
    checked
}

#[test]
fn generated_workloads_survive_every_crash_point() {
    let mut total = 0;
    for seed in 0..workloads() {
        let run = run_workload(&generated(seed, 40));
        total += check_run(&run, seed, &format!("seed {seed}"));
    }
    println!("crash states checked: {total}");
    assert!(total > 500, "only {total} crash states");
}

#[test]
fn running_out_of_space_survives_every_crash_point() {
    let mut total = 0;
    for seed in 0..2 {
        let run = run_workload(&until_full(seed));
        assert!(
            run.oracle.refused > 0,
            "seed {seed}: the device never filled up"
        );
        total += check_run(&run, seed, &format!("until-full seed {seed}"));
    }
    println!("crash states checked: {total}");
    assert!(total > 100, "only {total} crash states");
}

#[test]
fn known_bug_classes_survive_every_crash_point() {
    use Op::*;
    let cases: Vec<(&str, Vec<Op>)> = vec![
        (
            "append then fsync",
            vec![
                Create(0),
                Write(0, 0, 5000),
                SyncAll(0),
                Write(0, 5000, 9000),
                SyncData(0),
            ],
        ),
        (
            "truncate, extend, fsync",
            vec![
                Create(0),
                Write(0, 0, 20_000),
                SyncAll(0),
                SetLen(0, 3000),
                SetLen(0, 30_000),
                SyncAll(0),
            ],
        ),
        (
            "punch then fsync",
            vec![
                Create(0),
                Write(0, 0, 40_000),
                SyncAll(0),
                Punch(0, 4096, 20_000),
                SyncData(0),
            ],
        ),
        (
            "rename over a synced file",
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
        (
            "fsync of a file whose freed blocks another file reused",
            vec![
                Create(0),
                Write(0, 0, 40_000),
                SyncAll(0),
                SetLen(0, 0),
                Create(1),
                Write(1, 0, 40_000),
                SyncAll(1),
                SyncAll(0),
            ],
        ),
    ];
    let mut total = 0;
    for (i, (name, ops)) in cases.iter().enumerate() {
        let run = run_workload(ops);
        total += check_run(&run, i as u64, name);
    }
    println!("crash states checked: {total}");
}
