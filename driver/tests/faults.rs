//! One test per fault knob of the emulated controller: latency and
//! reordering, error statuses (with and without Do Not Retry), dropped
//! completions (timeout, abort, reset), fatal status, hostile completions
//! and hostile identify data. Time is fake throughout.

// Test helpers outside #[test] functions unwrap too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use pollfs_core::dev::{BlockDevice, Command, Completion, DevError, DeviceQueue};
use pollfs_core::units::{FrameId, Lba, Nanos};
use pollfs_driver::emu::{EmuConfig, EmuController, EmuMemory, Hostile};
use pollfs_driver::pcie::hal::Registers;
use pollfs_driver::spec::status::{generic, Status, StatusType};
use pollfs_driver::{DriverConfig, DriverError, NvmeDevice, PcieTransport};

const SEC: u64 = 1_000_000_000;

fn read(lba: u64, frames: &[FrameId]) -> Command<'_> {
    Command::Read {
        lba: Lba(lba),
        frames,
    }
}

fn poll_all<Q: DeviceQueue>(q: &mut Q, now: u64) -> Vec<Completion> {
    let mut out = Vec::new();
    q.poll(Nanos(now), usize::MAX, &mut |c| out.push(c));
    out
}

#[test]
fn latency_holds_completions_until_caller_time_passes() {
    let (dev, ctrl) = device(EmuConfig::default(), DriverConfig::default(), 8);
    let mut q = dev.open_queue().unwrap();
    ctrl.set_faults(|f| f.latency = 1000);
    q.poll(Nanos(10_000), 1, &mut |_| {});
    let tag = q.submit(&Command::Flush).unwrap();
    assert!(poll_all(&mut q, 10_500).is_empty());
    assert_eq!(q.in_flight(), 1);
    let done = poll_all(&mut q, 11_001);
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].tag, tag);
    assert_eq!(done[0].result, Ok(()));
}

#[test]
fn out_of_order_completions_match_their_requests() {
    let (dev, ctrl) = device(EmuConfig::default(), DriverConfig::default(), 16);
    let mut q = dev.open_queue().unwrap();
    for i in 0..4u32 {
        pattern(dev.frames(), &[FrameId(i)], u64::from(i));
        run(
            &mut q,
            Command::Write {
                lba: Lba(u64::from(i) * 8),
                frames: &[FrameId(i)],
                fua: false,
            },
        )
        .unwrap();
    }
    ctrl.set_faults(|f| f.reorder = true);
    let dst: Vec<FrameId> = (8..12).map(FrameId).collect();
    let tags: Vec<_> = (0..4)
        .map(|i| q.submit(&read(i as u64 * 8, &dst[i..i + 1])).unwrap())
        .collect();
    let done = poll_all(&mut q, 1);
    let order: Vec<_> = done.iter().map(|c| c.tag).collect();
    let mut reversed = tags.clone();
    reversed.reverse();
    assert_eq!(order, reversed, "the emulator released them newest first");
    for i in 0..4u32 {
        assert_eq!(
            contents(dev.frames(), &[FrameId(i)]),
            contents(dev.frames(), &[FrameId(8 + i)])
        );
    }
}

#[test]
fn error_status_with_do_not_retry_fails_at_once() {
    let (dev, ctrl) = device(EmuConfig::default(), DriverConfig::default(), 8);
    let mut q = dev.open_nvme_queue().unwrap();
    ctrl.set_faults(|f| {
        f.fail_io = 1;
        f.error_status = Some(Status::new(StatusType::Media, 0x81, true));
    });
    assert_eq!(run(&mut q, read(0, &[FrameId(0)])), Err(DevError::Media));
    assert_eq!(q.stats().retries, 0);
    assert_eq!(ctrl.stats().injected, 1);
    ctrl.set_faults(|f| {
        f.fail_io = 1;
        f.error_status = Some(Status::new(
            StatusType::Generic,
            generic::LBA_OUT_OF_RANGE,
            true,
        ));
    });
    assert_eq!(
        run(&mut q, read(0, &[FrameId(0)])),
        Err(DevError::OutOfRange)
    );
    assert_eq!(run(&mut q, read(0, &[FrameId(0)])), Ok(()));
}

#[test]
fn error_status_without_do_not_retry_is_retried() {
    let (dev, ctrl) = device(EmuConfig::default(), DriverConfig::default(), 8);
    let mut q = dev.open_nvme_queue().unwrap();
    let transient = Status::new(StatusType::Generic, generic::INTERNAL_ERROR, false);
    ctrl.set_faults(|f| {
        f.fail_io = 2;
        f.error_status = Some(transient);
    });
    assert_eq!(run(&mut q, read(0, &[FrameId(0)])), Ok(()));
    assert_eq!(q.stats().retries, 2);
    // More failures than retries: the device's status comes back.
    ctrl.set_faults(|f| f.fail_io = 10);
    assert_eq!(
        run(&mut q, read(0, &[FrameId(0)])),
        Err(DevError::Status(0x0006))
    );
    assert_eq!(q.stats().retries, 4);
    assert_eq!(ctrl.stats().injected, 2 + 3);
}

#[test]
fn dropped_completion_times_out_and_is_aborted() {
    let (dev, ctrl) = device(EmuConfig::default(), DriverConfig::default(), 8);
    let mut q = dev.open_nvme_queue().unwrap();
    ctrl.set_faults(|f| {
        f.drop_io = 1;
        f.stuck_abortable = true;
    });
    let tag = q.submit(&read(0, &[FrameId(0)])).unwrap();
    let other = q.submit(&Command::Flush).unwrap();
    let done = poll_all(&mut q, 0);
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].tag, other);
    assert_eq!(ctrl.stuck(), 1);
    // Before the deadline nothing happens.
    assert!(poll_all(&mut q, 4 * SEC).is_empty());
    assert_eq!(ctrl.stats().aborts, 0);
    // Past it the command is aborted and completes with Timeout.
    let mut done = poll_all(&mut q, 6 * SEC);
    done.extend(poll_all(&mut q, 6 * SEC));
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].tag, tag);
    assert_eq!(done[0].result, Err(DevError::Timeout));
    assert_eq!(ctrl.stats().aborts, 1);
    assert_eq!(q.stats().timeouts, 1);
    assert_eq!(dev.controller().resets(), 0);
    assert_eq!(run(&mut q, read(0, &[FrameId(0)])), Ok(()));
}

#[test]
fn unabortable_command_leads_to_reset_and_resubmission() {
    let (dev, ctrl) = device(EmuConfig::default(), DriverConfig::default(), 8);
    let mut q = dev.open_nvme_queue().unwrap();
    let mut other = dev.open_nvme_queue().unwrap();
    ctrl.set_faults(|f| f.drop_io = 1);
    let stuck = q.submit(&read(0, &[FrameId(0)])).unwrap();
    assert!(poll_all(&mut q, 0).is_empty());
    // A second command held by latency is in flight across the reset.
    ctrl.set_faults(|f| f.latency = 100 * SEC);
    let held = q.submit(&Command::Flush).unwrap();
    assert!(
        poll_all(&mut q, 6 * SEC).is_empty(),
        "abort sent, not effective"
    );
    assert_eq!(ctrl.stats().aborts, 1);
    ctrl.set_faults(|f| f.latency = 0);
    let done = poll_all(&mut q, 8 * SEC);
    assert_eq!(dev.controller().resets(), 1);
    assert_eq!(ctrl.stats().resets, 1);
    let mut results: Vec<_> = done.iter().map(|c| (c.tag, c.result)).collect();
    results.sort_by_key(|r| r.0);
    assert_eq!(
        results,
        vec![(stuck, Err(DevError::Timeout)), (held, Ok(()))]
    );
    assert_eq!(q.stats().resyncs, 1);
    // The other queue notices the reset and re-creates itself.
    assert_eq!(run(&mut other, Command::Flush), Ok(()));
    assert_eq!(other.stats().resyncs, 1);
    assert_eq!(run(&mut q, read(0, &[FrameId(0)])), Ok(()));
}

#[test]
fn fatal_status_triggers_reset_and_commands_are_retried() {
    let (dev, ctrl) = device(EmuConfig::default(), DriverConfig::default(), 8);
    let mut q = dev.open_nvme_queue().unwrap();
    ctrl.set_faults(|f| f.latency = 10 * SEC);
    let tag = q.submit(&read(0, &[FrameId(0)])).unwrap();
    assert!(poll_all(&mut q, 0).is_empty());
    ctrl.set_fatal();
    ctrl.set_faults(|f| f.latency = 0);
    // The health check runs every 100 ms of caller time.
    let done = poll_all(&mut q, SEC / 5);
    assert_eq!(dev.controller().resets(), 1);
    let done = if done.is_empty() {
        poll_all(&mut q, SEC / 5)
    } else {
        done
    };
    assert_eq!(done.len(), 1);
    assert_eq!((done[0].tag, done[0].result), (tag, Ok(())));
    assert_eq!(q.stats().retries, 1);
}

/// Drives a queue on a hostile controller until every request has come
/// back; they must all come back (errors allowed), and nothing panics.
fn survive(hostile: Hostile) -> (Vec<Result<(), DevError>>, u32) {
    let (dev, ctrl) = device(EmuConfig::default(), DriverConfig::default(), 8);
    let mut q = dev.open_queue().unwrap();
    run(&mut q, Command::Flush).unwrap();
    ctrl.set_faults(|f| f.hostile = Some(hostile));
    let mut results = Vec::new();
    let mut now = 0;
    for _ in 0..4 {
        let tag = match q.submit(&read(8, &[FrameId(1)])) {
            Ok(t) => t,
            Err(e) => {
                results.push(Err(e));
                continue;
            }
        };
        let mut got = None;
        for _ in 0..1000 {
            now += SEC / 2;
            q.poll(Nanos(now), usize::MAX, &mut |c| {
                if c.tag == tag {
                    got = Some(c.result);
                }
            });
            if got.is_some() {
                break;
            }
        }
        results.push(got.expect("request never came back"));
    }
    (results, dev.controller().resets())
}

#[test]
fn hostile_unknown_command_ids_are_errors_not_panics() {
    let (results, resets) = survive(Hostile::BadCid);
    assert!(results.iter().all(|r| r.is_err()));
    assert!(resets >= 1);
    assert!(results.contains(&Err(DevError::ControllerFailed)));
}

#[test]
fn hostile_sq_head_is_an_error_not_a_panic() {
    let (results, resets) = survive(Hostile::BadSqHead);
    assert!(results.iter().all(|r| r.is_err()));
    assert!(resets >= 1);
}

#[test]
fn hostile_sq_id_is_an_error_not_a_panic() {
    let (results, _) = survive(Hostile::WrongSqId);
    assert!(results.iter().all(|r| r.is_err()));
}

#[test]
fn hostile_phase_tags_end_in_timeouts() {
    let (results, resets) = survive(Hostile::WrongPhase);
    assert!(results.iter().all(|r| r.is_err()));
    assert!(results[0] == Err(DevError::Timeout));
    assert!(resets >= 1);
}

#[test]
fn hostile_duplicate_completions_are_caught() {
    let (results, resets) = survive(Hostile::Duplicate);
    // The first copy is genuine, so data commands succeed; the duplicate
    // is a protocol violation that costs a reset each time.
    assert!(results.iter().all(|r| r.is_ok()));
    assert!(resets >= 1);
}

fn bring_up(set: impl FnOnce(&EmuController)) -> Result<(), DriverError> {
    let mem = EmuMemory::new();
    let ctrl = EmuController::new(EmuConfig::default(), mem.clone());
    set(&ctrl);
    let r = NvmeDevice::new(
        PcieTransport::new(ctrl.clone(), mem),
        ticking_clock(),
        DriverConfig::default(),
        4,
    );
    if r.is_err() {
        assert_eq!(
            ctrl.read32(0x14) & 1,
            0,
            "a failed bring-up leaves CC.EN clear"
        );
    }
    r.map(|_| ())
}

#[test]
fn garbage_identify_data_is_rejected() {
    let r = bring_up(|c| c.set_faults(|f| f.hostile = Some(Hostile::GarbageIdentify)));
    // Every identify page is garbage: the controller's is refused by its
    // checks, or (when random bytes happen to pass them) the namespace
    // list names no namespace the driver can use.
    assert!(
        matches!(
            r,
            Err(DriverError::Identify(_) | DriverError::Unsupported("namespace not active"))
        ),
        "{r:?}"
    );
}

#[test]
fn controller_that_never_becomes_ready_times_out() {
    let r = bring_up(|c| c.set_faults(|f| f.never_ready = true));
    assert_eq!(
        r,
        Err(DriverError::Timeout(pollfs_driver::error::Stage::Enable))
    );
}

#[test]
fn dead_controller_fails_everything_cleanly() {
    let config = DriverConfig {
        max_resets: 1,
        ..DriverConfig::default()
    };
    let (dev, ctrl) = device(EmuConfig::default(), config, 8);
    let mut q = dev.open_queue().unwrap();
    ctrl.set_faults(|f| f.hostile = Some(Hostile::BadCid));
    let mut now = 0;
    let mut results = Vec::new();
    for _ in 0..3 {
        if let Ok(tag) = q.submit(&Command::Flush) {
            now += SEC;
            if let Some(r) = wait_at(&mut q, tag, Nanos(now)) {
                results.push(r);
            }
        }
    }
    assert!(dev.controller().is_dead());
    assert!(results.iter().all(|r| r.is_err()));
    assert_eq!(
        q.submit(&Command::Flush).err(),
        Some(DevError::ControllerFailed)
    );
    assert_eq!(dev.open_queue().err(), Some(DevError::ControllerFailed));
    assert_eq!(q.in_flight(), 0);
}

#[test]
fn hostile_admin_completions_fail_bring_up_cleanly() {
    let r = bring_up(|c| c.set_faults(|f| f.hostile = Some(Hostile::AdminBadCid)));
    assert!(
        matches!(
            r,
            Err(DriverError::Protocol(
                pollfs_driver::qpair::ProtocolError::UnknownCid(_)
            ))
        ),
        "{r:?}"
    );
}

#[test]
fn dropping_the_device_shuts_the_controller_down() {
    let (dev, ctrl) = device(EmuConfig::default(), DriverConfig::default(), 8);
    let q = dev.open_queue().unwrap();
    drop(dev);
    // A queue keeps the controller alive.
    assert_eq!(ctrl.stats().shutdowns, 0);
    drop(q);
    assert_eq!(ctrl.stats().shutdowns, 1);
    assert_eq!(ctrl.read32(0x14) & 1, 0, "CC.EN clear after shutdown");
}

#[test]
fn hostile_admin_completion_at_run_time_resets_the_controller() {
    let (dev, ctrl) = device(EmuConfig::default(), DriverConfig::default(), 8);
    let mut q = dev.open_queue().unwrap();
    ctrl.set_faults(|f| f.hostile = Some(Hostile::AdminBadCid));
    let r = dev.controller().smart_log();
    assert!(matches!(r, Err(DriverError::Protocol(_))), "{r:?}");
    assert_eq!(dev.controller().resets(), 1);
    ctrl.set_faults(|f| f.hostile = None);
    assert_eq!(run(&mut q, Command::Flush), Ok(()));
    assert!(dev.controller().smart_log().is_ok());
}

#[test]
fn reset_deletes_live_queues_first_and_in_flight_commands_are_resubmitted() {
    let (dev, ctrl) = device(EmuConfig::default(), DriverConfig::default(), 8);
    let mut q = dev.open_nvme_queue().unwrap();
    let mut other = dev.open_nvme_queue().unwrap();
    ctrl.set_faults(|f| f.latency = 1000);
    let tags: Vec<_> = (0..4u32)
        .map(|i| q.submit(&read(u64::from(i) * 8, &[FrameId(i)])).unwrap())
        .collect();
    assert!(poll_all(&mut q, 0).is_empty());
    let admin_before = ctrl.stats().admin;
    let c = dev.controller();
    c.reset(c.generation()).unwrap();
    // Delete SQ + Delete CQ for each of the two live queues, then Set
    // Features (queue count) after the enable.
    assert_eq!(ctrl.stats().admin - admin_before, 2 * 2 + 1);
    // The device dropped the held commands with their SQ; the queue
    // re-creates itself and resubmits them.
    ctrl.set_faults(|f| f.latency = 0);
    let mut done = poll_all(&mut q, 10_000);
    done.sort_by_key(|c| c.tag);
    assert_eq!(done.len(), 4);
    for (c, t) in done.iter().zip(&tags) {
        assert_eq!((c.tag, c.result), (*t, Ok(())));
    }
    assert_eq!(q.stats().resyncs, 1);
    assert_eq!(run(&mut other, Command::Flush), Ok(()));
}
