//! Running a workload on a recording device and checking every crash
//! state it could leave (what `tests/crash.rs` and the planted durability
//! bugs of `tests/mutants.rs` share): at every write boundary, the images
//! a power cut could leave, each recovered and checked against the
//! workload's oracle ([`files::check_state`]); a few of them with their own
//! recovery crashed at every point.

use std::collections::BTreeMap;

use pollfs_core::dev::ram::RamDevice;
use pollfs_core::Fs;

use super::files::{check_state, crash_config, read_state, run_ops, Op, Oracle};
use super::{crash_images, device_from, Event, RecordingDevice};
use crate::rng::Rng;

/// Bytes of the crash tests' device.
const DEV_BYTES: u64 = 8 << 20;
/// DMA frames of the crash tests' device.
const FRAMES: u32 = 96;

/// A workload's run: what the device saw, from what, and the oracle.
#[derive(Debug)]
pub struct Run {
    events: Vec<Event>,
    base: Vec<u8>,
    /// What the workload taught the oracle.
    pub oracle: Oracle,
}

/// Runs `ops` on a device with FUA, or without (`fua` false: every
/// durable write is followed by a flush).
pub fn run_workload(ops: &[Op], fua: bool) -> Run {
    let ram = RamDevice::new(DEV_BYTES, 4096, FRAMES).unwrap();
    let mut base = vec![0u8; DEV_BYTES as usize];
    // Format outside the recording: crashes during mkfs are not the point.
    drop(Fs::format(ram.clone(), crash_config(), 0xC0FFEE).unwrap());
    ram.read_raw(0, &mut base);
    let dev = if fua {
        RecordingDevice::new(ram)
    } else {
        RecordingDevice::without_fua(ram)
    };
    let fs = Fs::mount(dev.clone(), crash_config()).unwrap();
    let oracle = run_ops(&fs, &|| dev.len(), ops);
    Run {
        events: dev.events(),
        base,
        oracle,
    }
}

/// Checks every crash state of a run; returns how many were checked.
pub fn check_run(run: &Run, seed: u64, label: &str) -> usize {
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
    drop(Fs::mount(dev.clone(), crash_config()).unwrap());
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
