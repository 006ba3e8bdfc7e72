//! Crash consistency: run a workload on a recording device, then at every
//! write boundary build the images a power cut could leave, recover each,
//! and check it against the workload's oracle (`crash::files`): synced
//! files exact, no byte from elsewhere, fsck clean, the same state on a
//! second recovery, and a filesystem that keeps working.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use pollfs_core::dev::ram::RamDevice;
use pollfs_core::Fs;
use std::collections::BTreeMap;

use pollfs_host_tests::crash::files::{
    check_state, generated, read_state, run_ops, until_full, workloads, Op, Oracle, CACHE,
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

/// Runs `ops` on a device with FUA, or without (`fua` false: every
/// durable write is followed by a flush).
fn run_workload(ops: &[Op], fua: bool) -> Run {
    let ram = RamDevice::new(DEV_BYTES, 4096, FRAMES).unwrap();
    let mut base = vec![0u8; DEV_BYTES as usize];
    // Format outside the recording: crashes during mkfs are not the point.
    drop(Fs::format(ram.clone(), config(CACHE), 0xC0FFEE).unwrap());
    ram.read_raw(0, &mut base);
    let dev = if fua {
        RecordingDevice::new(ram)
    } else {
        RecordingDevice::without_fua(ram)
    };
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
    let boundaries: Vec<usize> = (0..=run.events.len())
        .filter(|&i| {
            i == 0
                || i == run.events.len()
                || matches!(run.events[i - 1], Event::Write { .. } | Event::Flush)
        })
        .collect();
    // Crash images with logged data whose own recovery is crashed too.
    let mut recoveries = 0;
    for at in boundaries {
        for (desc, image) in crash_images(&run.base, &run.events, at, &mut rng) {
            let ctx = format!("{label}: {desc}");
            // A state with event `at` torn has that event's operation under
            // way: it touched its files.
            let in_flight = desc.contains("during");
            let dev = device_from(&image, FRAMES);
            if recoveries < RECOVERY_CRASHES && data_pages(&dev) > 0 {
                recoveries += 1;
                let state = read_state(&dev, &ctx);
                checked += recovery_survives_crashes(&image, &state, &mut rng, &ctx);
            }
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

/// Crash images per run whose recovery is crashed at every point.
const RECOVERY_CRASHES: usize = 3;

/// Pages of logged data fsck finds on `dev`.
fn data_pages(dev: &RamDevice) -> usize {
    pollfs_core::persist::check(
        dev,
        pollfs_core::hosted::monotonic_clock,
        std::thread::yield_now,
    )
    .map_or(0, |r| r.data_pages)
}

/// Mount writes logged data to its blocks and retires it with a log write
/// of Home records: a crash at any point of that, and a mount of what it
/// left, must give the same files (replaying logged data is idempotent, and never writes
/// it over what came after). Returns the states checked.
fn recovery_survives_crashes(
    image: &[u8],
    expect: &BTreeMap<String, Vec<u8>>,
    rng: &mut Rng,
    ctx: &str,
) -> usize {
    let dev = RecordingDevice::new(device_from(image, FRAMES));
    drop(Fs::mount(dev.clone(), config(CACHE)).unwrap());
    let events = dev.events();
    assert!(
        events.iter().any(|e| matches!(e, Event::Write { .. })),
        "{ctx}: recovery of logged data wrote nothing"
    );
    let mut checked = 0;
    for at in 0..=events.len() {
        for (desc, img) in crash_images(image, &events, at, rng) {
            let again = read_state(&device_from(&img, FRAMES), ctx);
            assert_eq!(
                &again, expect,
                "{ctx}: a crash during recovery ({desc}) changed the files"
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
        // One seed in three on a device without FUA.
        let run = run_workload(&generated(seed, 40), seed % 3 != 2);
        total += check_run(&run, seed, &format!("seed {seed}"));
    }
    println!("crash states checked: {total}");
    assert!(total > 500, "only {total} crash states");
}

#[test]
fn running_out_of_space_survives_every_crash_point() {
    let mut total = 0;
    for seed in 0..2 {
        let run = run_workload(&until_full(seed), seed % 2 == 0);
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
            "fallocate across EOF inside its last page, each mode, fsync",
            vec![
                Create(0),
                Write(0, 0, 5000),
                SyncAll(0),
                Allocate(
                    0,
                    0,
                    8000,
                    pollfs_core::Allocate::Reserve { keep_size: false },
                ),
                SyncData(0),
                Allocate(
                    0,
                    100,
                    30_000,
                    pollfs_core::Allocate::Reserve { keep_size: true },
                ),
                Allocate(
                    0,
                    7000,
                    2000,
                    pollfs_core::Allocate::ZeroRange { keep_size: false },
                ),
                SyncAll(0),
                Allocate(
                    0,
                    50,
                    100,
                    pollfs_core::Allocate::ZeroRange { keep_size: true },
                ),
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
        (
            "a logged page overwritten in place and synced",
            vec![
                Create(0),
                Write(0, 0, 4096),
                SyncData(0),
                Write(0, 0, 40_000),
                SyncData(0),
                Write(0, 8192, 100),
                SyncData(0),
            ],
        ),
        (
            "a logged page punched, its block reused, then synced",
            vec![
                Create(0),
                Write(0, 0, 40_000),
                SyncAll(0),
                Write(0, 4096, 4096),
                SyncData(0),
                Punch(0, 4096, 4096),
                SyncData(0),
                Write(0, 4096, 4096),
                SyncData(0),
                Write(0, 0, 40_000),
                SyncData(0),
            ],
        ),
        (
            "logged appends, then a truncate below them and an extend",
            vec![
                Create(0),
                Write(0, 0, 3000),
                SyncData(0),
                Write(0, 3000, 3000),
                SyncAll(0),
                SetLen(0, 1000),
                SetLen(0, 9000),
                SyncData(0),
            ],
        ),
    ];
    let mut total = 0;
    for (i, (name, ops)) in cases.iter().enumerate() {
        for fua in [true, false] {
            let run = run_workload(ops, fua);
            total += check_run(&run, i as u64, &format!("{name} (fua {fua})"));
        }
    }
    println!("crash states checked: {total}");
}
