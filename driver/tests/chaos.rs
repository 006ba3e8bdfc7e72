//! Random fault schedules against a model of the medium: whatever the
//! emulated controller does (latency, reordering, error statuses with and
//! without DNR, dropped completions, fatal status), every request comes
//! back, nothing panics, and every read that succeeds returns what the last
//! successful write put there.

// Test helpers outside #[test] functions unwrap too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

/// Polls every queue at time `now`, handing each completion (tagged with
/// its queue's index) to `on`.
fn reap<Q: DeviceQueue>(
    qs: &mut [Q],
    now: u64,
    mut on: impl FnMut((usize, Tag), Result<(), DevError>),
) {
    for (qi, q) in qs.iter_mut().enumerate() {
        let mut done = Vec::new();
        q.poll(Nanos(now), usize::MAX, &mut |c| done.push(c));
        for c in done {
            on((qi, c.tag), c.result);
        }
    }
}

use std::collections::HashMap;

use common::*;
use pollfs_core::dev::{BlockDevice, Command, DevError, DeviceQueue, FrameArena, Tag};
use pollfs_core::units::{FrameId, Lba, Nanos, PAGE_SIZE};
use pollfs_driver::emu::EmuConfig;
use pollfs_driver::spec::status::{generic, Status, StatusType};
use pollfs_driver::{DriverConfig, QueueStats};

use pollfs_core::rng::SplitMix64 as Rng;

/// What the test knows about one 4 KiB page of the medium.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Page {
    /// Holds the bytes of this write version.
    Known(u64),
    /// A write to it failed or is in doubt.
    Unknown,
}

struct Pending {
    write: bool,
    first_page: u64,
    frames: Vec<FrameId>,
    version: u64,
}

fn page_bytes(version: u64, page: u64) -> Vec<u8> {
    (0..PAGE_SIZE)
        .map(|i| (version.wrapping_mul(131) ^ page.wrapping_mul(7) ^ i as u64) as u8)
        .collect()
}

fn chaos(seed: u64, block_size: u32) -> (QueueStats, u32) {
    let mut rng = Rng::new(seed);
    let emu = EmuConfig {
        bytes: 4 << 20,
        block_size,
        mdts: 1, // 8 KiB: multi-page requests are split
        ..EmuConfig::default()
    };
    let config = DriverConfig {
        io_entries: 16,
        max_transfer: Some(32 * 1024),
        max_resets: 1000,
        command_timeout: 1_000_000,
        abort_timeout: 1_000_000,
        health_interval: 100_000,
        ..DriverConfig::default()
    };
    let frames_total = 256u32;
    let (dev, ctrl) = device(emu, config, frames_total);
    // Two queues: a reset one of them causes must be survived by both.
    let mut qs = [
        dev.open_nvme_queue().unwrap(),
        dev.open_nvme_queue().unwrap(),
    ];
    let bpp = dev.geometry().blocks_per_page();
    let pages = 64u64;
    let mut model = vec![Page::Known(0); pages as usize];
    for p in 0..pages {
        ctrl.write_medium(p * PAGE_SIZE as u64, &page_bytes(0, p));
    }
    let mut busy = vec![false; pages as usize];
    let mut free: Vec<FrameId> = (0..frames_total).map(FrameId).collect();
    let mut pending: HashMap<(usize, Tag), Pending> = HashMap::new();
    let mut now = 0u64;
    let mut version = 0u64;
    let mut checked_reads = 0;

    let mut complete = |tag: (usize, Tag),
                        result: Result<(), DevError>,
                        pending: &mut HashMap<(usize, Tag), Pending>,
                        model: &mut Vec<Page>,
                        busy: &mut Vec<bool>,
                        free: &mut Vec<FrameId>| {
        let p = pending.remove(&tag).expect("completion for a known tag");
        for (i, f) in p.frames.iter().enumerate() {
            let page = p.first_page + i as u64;
            busy[page as usize] = false;
            if p.write {
                model[page as usize] = match result {
                    Ok(()) => Page::Known(p.version),
                    Err(_) => Page::Unknown,
                };
            } else if result.is_ok() {
                if let Page::Known(v) = model[page as usize] {
                    let mut got = vec![0u8; PAGE_SIZE];
                    dev.frames().read(*f, 0, &mut got).unwrap();
                    assert!(
                        got == page_bytes(v, page),
                        "seed {seed}: page {page} != v{v}"
                    );
                    checked_reads += 1;
                }
            }
            free.push(*f);
        }
    };

    for _ in 0..600 {
        match rng.below(10) {
            0..=4 => {
                // A read or write of 1..=8 pages that are not in flight.
                let n = 1 + rng.below(8);
                let first = rng.below(pages - n + 1);
                let range = first as usize..(first + n) as usize;
                if busy[range.clone()].iter().any(|&b| b) || free.len() < n as usize {
                    continue;
                }
                let frames: Vec<FrameId> = (0..n).map(|_| free.pop().unwrap()).collect();
                let write = rng.below(2) == 0;
                version += 1;
                if write {
                    for (i, f) in frames.iter().enumerate() {
                        dev.frames()
                            .write(*f, 0, &page_bytes(version, first + i as u64))
                            .unwrap();
                    }
                }
                let lba = Lba(first * bpp);
                let cmd = if write {
                    Command::Write {
                        lba,
                        frames: &frames,
                        fua: rng.below(4) == 0,
                    }
                } else {
                    Command::Read {
                        lba,
                        frames: &frames,
                    }
                };
                let qi = rng.below(2) as usize;
                match qs[qi].submit(&cmd) {
                    Ok(tag) => {
                        busy[range].iter_mut().for_each(|b| *b = true);
                        let old = pending.insert(
                            (qi, tag),
                            Pending {
                                write,
                                first_page: first,
                                frames,
                                version,
                            },
                        );
                        assert!(
                            old.is_none(),
                            "seed {seed}: tag {tag:?} reused while pending"
                        );
                    }
                    Err(DevError::QueueFull) => free.extend(frames),
                    Err(e) => panic!("seed {seed}: submit failed with {e:?}"),
                }
            }
            5 => {
                let latency = [0, 0, 50_000, 2_000_000][rng.below(4) as usize];
                let reorder = rng.below(3) == 0;
                ctrl.set_faults(|f| {
                    f.latency = latency;
                    f.reorder = reorder;
                });
            }
            6 => {
                let dnr = rng.below(2) == 0;
                let sc =
                    [generic::INTERNAL_ERROR, generic::DATA_TRANSFER_ERROR][rng.below(2) as usize];
                let n = 1 + rng.below(3) as u32;
                ctrl.set_faults(|f| {
                    f.fail_io = n;
                    f.error_status = Some(Status::new(StatusType::Generic, sc, dnr));
                });
            }
            7 => {
                let abortable = rng.below(2) == 0;
                ctrl.set_faults(|f| {
                    f.drop_io = 1;
                    f.stuck_abortable = abortable;
                });
            }
            8 if rng.below(4) == 0 => ctrl.set_fatal(),
            _ => {}
        }
        now += rng.below(400_000);
        reap(&mut qs, now, |tag, result| {
            complete(tag, result, &mut pending, &mut model, &mut busy, &mut free)
        });
    }
    // Calm the device down; everything must come back.
    ctrl.set_faults(|f| *f = Default::default());
    for _ in 0..200 {
        if pending.is_empty() {
            break;
        }
        now += 500_000;
        reap(&mut qs, now, |tag, result| {
            complete(tag, result, &mut pending, &mut model, &mut busy, &mut free)
        });
    }
    assert!(
        pending.is_empty(),
        "seed {seed}: {} requests never came back",
        pending.len()
    );
    assert_eq!(qs[0].in_flight() + qs[1].in_flight(), 0);
    let [mut q, q1] = qs;
    assert!(!dev.controller().is_dead(), "seed {seed}");
    // After the storm the queue still works and agrees with the model.
    let frames: Vec<FrameId> = (0..pages.min(frames_total as u64))
        .map(|i| FrameId(i as u32))
        .collect();
    for chunk in 0..pages / 8 {
        let f = &frames[(chunk * 8) as usize..(chunk * 8 + 8) as usize];
        let tag = q
            .submit(&Command::Read {
                lba: Lba(chunk * 8 * bpp),
                frames: f,
            })
            .unwrap();
        // Time keeps moving, so a controller left fatal is noticed and reset.
        let mut result = None;
        for _ in 0..100 {
            now += 500_000;
            result = wait_at(&mut q, tag, Nanos(now));
            if result.is_some() {
                break;
            }
        }
        assert_eq!(result, Some(Ok(())), "seed {seed}: final read");
        for (i, fr) in f.iter().enumerate() {
            let page = chunk * 8 + i as u64;
            if let Page::Known(v) = model[page as usize] {
                let mut got = vec![0u8; PAGE_SIZE];
                dev.frames().read(*fr, 0, &mut got).unwrap();
                assert!(got == page_bytes(v, page), "seed {seed}: final page {page}");
            }
        }
    }
    assert!(checked_reads > 0, "seed {seed}: no read was checked");
    let mut stats = q.stats();
    stats.resyncs += q1.stats().resyncs;
    stats.retries += q1.stats().retries;
    stats.timeouts += q1.stats().timeouts;
    (stats, dev.controller().resets())
}

#[test]
fn random_fault_schedules_keep_data_and_complete_everything() {
    let mut total = QueueStats::default();
    let mut resets = 0;
    for seed in 1..=12u64 {
        let (s, r) = chaos(seed * 0x9e37_79b9, if seed % 2 == 0 { 4096 } else { 512 });
        total.retries += s.retries;
        total.timeouts += s.timeouts;
        total.resyncs += s.resyncs;
        resets += r;
    }
    // The schedules did reach the recovery paths.
    assert!(total.retries > 0 && total.timeouts > 0 && total.resyncs > 0 && resets > 0);
}
