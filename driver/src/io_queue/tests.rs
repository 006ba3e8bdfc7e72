//! The I/O queue against the fake transport: splitting, retry, timeouts,
//! abort and reconnection, driven by the caller's time alone.

use alloc::boxed::Box;
use alloc::vec::Vec;

use pollfs_core::dev::{Command, Completion, DevError, DeviceQueue, Geometry, Tag};
use pollfs_core::units::{FrameId, Lba, Nanos};

use super::NvmeQueue;
use crate::controller::{Controller, DriverConfig};
use crate::spec::command::{admin_opcode, io_opcode};
use crate::transport::fake::{
    permanent, ticking_clock, transient, Action, Event, FakeFrames, FakeTransport,
};
use crate::transport::Property;

const CONFIG: DriverConfig = DriverConfig {
    nsid: 1,
    admin_entries: 8,
    io_entries: 4,
    max_io_queues: 4,
    max_transfer: Some(64 << 10),
    command_timeout: 1_000,
    abort_timeout: 500,
    admin_timeout: 5_000_000_000,
    health_interval: 100,
    max_retries: 2,
    max_resets: 3,
};

fn queue(fake: &FakeTransport) -> NvmeQueue<FakeTransport> {
    let ctrl = Controller::new(fake.clone(), Box::new(ticking_clock()), CONFIG).unwrap();
    let blocks = ctrl.info().namespace.nsze;
    let geometry = Geometry {
        block_size: 512,
        capacity: blocks,
        max_transfer: 64 << 10,
        queue_depth: 3,
        fua: true,
    };
    let q = NvmeQueue::open(
        alloc::sync::Arc::new(ctrl),
        alloc::sync::Arc::new(FakeFrames(64)),
        geometry,
    );
    fake.state.lock().log.clear();
    q.unwrap()
}

/// Polls once at `now`; returns what completed.
fn poll(q: &mut NvmeQueue<FakeTransport>, now: u64) -> Vec<Completion> {
    let mut out = Vec::new();
    q.poll(Nanos(now), usize::MAX, &mut |c| out.push(c));
    out
}

fn read(q: &mut NvmeQueue<FakeTransport>, lba: u64, frames: &[FrameId]) -> Result<Tag, DevError> {
    q.submit(&Command::Read {
        lba: Lba(lba),
        frames,
    })
}

const FRAMES: [FrameId; 5] = [FrameId(0), FrameId(1), FrameId(2), FrameId(3), FrameId(4)];

#[test]
fn a_read_beyond_mdts_is_split_and_completes_once() {
    let fake = FakeTransport::new();
    let mut q = queue(&fake);
    assert_eq!(q.frames_per_command(), 2, "MDTS is 8 KiB");
    let tag = read(&mut q, 80, &FRAMES).unwrap();
    let done = poll(&mut q, 0);
    assert_eq!(done.len(), 1);
    assert_eq!((done[0].tag, done[0].result), (tag, Ok(())));
    let sent: Vec<(u64, u32)> = fake
        .state
        .lock()
        .log
        .iter()
        .filter_map(|e| match *e {
            Event::Sent {
                qid: 1, slba, nlb, ..
            } => Some((slba, nlb)),
            _ => None,
        })
        .collect();
    // 4 KiB frames of 512-byte blocks.
    assert_eq!(sent, [(80, 16), (96, 16), (112, 8)]);
    assert_eq!(q.in_flight(), 0);
}

#[test]
fn more_pieces_than_free_ids_is_queue_full_and_a_bad_frame_is_refused() {
    let fake = FakeTransport::new();
    let mut q = queue(&fake);
    fake.state.lock().io_plan.push_back(Action::Drop);
    read(&mut q, 0, &FRAMES[..1]).unwrap();
    assert_eq!(read(&mut q, 0, &FRAMES), Err(DevError::QueueFull));
    assert_eq!(
        read(&mut q, 0, &[FrameId(64)]),
        Err(DevError::InvalidRequest),
        "frame outside the arena"
    );
    assert_eq!(fake.state.lock().sent(io_opcode::READ), 1);
}

#[test]
fn a_transient_error_is_retried_and_a_permanent_one_is_not() {
    let fake = FakeTransport::new();
    let mut q = queue(&fake);
    fake.state
        .lock()
        .io_plan
        .extend([Action::Complete(transient()), Action::Complete(permanent())]);
    let tag = read(&mut q, 0, &FRAMES[..1]).unwrap();
    assert!(poll(&mut q, 0).is_empty(), "resubmitted, not failed");
    let done = poll(&mut q, 0);
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].tag, tag);
    assert!(matches!(done[0].result, Err(DevError::Status(_))));
    assert_eq!(q.stats().retries, 1);
    assert_eq!(fake.state.lock().sent(io_opcode::READ), 2);
}

#[test]
fn a_completion_waits_for_its_time() {
    let fake = FakeTransport::new();
    let mut q = queue(&fake);
    fake.state
        .lock()
        .io_plan
        .push_back(Action::At(Nanos(500), crate::spec::status::Status::SUCCESS));
    let tag = read(&mut q, 0, &FRAMES[..1]).unwrap();
    assert!(poll(&mut q, 100).is_empty());
    let done = poll(&mut q, 600);
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].tag, tag);
    assert_eq!(q.stats().timeouts, 0);
}

#[test]
fn a_lost_command_is_aborted_then_the_controller_is_reset() {
    let fake = FakeTransport::new();
    let mut q = queue(&fake);
    fake.state.lock().io_plan.push_back(Action::Drop);
    let lost = read(&mut q, 0, &FRAMES[..1]).unwrap();
    // Armed at the first scan (this first poll: nothing was in flight
    // before), so the deadline is 1_000 after it.
    assert!(poll(&mut q, 10).is_empty());
    assert!(poll(&mut q, 900).is_empty());
    assert!(poll(&mut q, 1_100).is_empty(), "aborted, waiting");
    assert_eq!(q.stats().timeouts, 1);
    assert_eq!(fake.state.lock().admin_sent(admin_opcode::ABORT), 1);
    // The fake ignores the abort; past abort_timeout the controller resets.
    let done = poll(&mut q, 1_700);
    assert_eq!(done.len(), 1);
    assert_eq!(
        (done[0].tag, done[0].result),
        (lost, Err(DevError::Timeout))
    );
    let s = fake.state.lock();
    assert!(s.count(Event::Set(Property::Cc, 0)) >= 1, "reset");
    assert_eq!(s.count(Event::Connect(q.qid())), 1, "reconnected");
    drop(s);
    assert_eq!(q.stats().resyncs, 1);
    // The controller's figures, which the queue's owner does not hold.
    let h = q.ctrl.health();
    assert_eq!(
        (h.resets, h.timeouts, h.queue_recoveries, h.reconnects),
        (1, 1, 1, 0),
        "{h:?}"
    );
    let tag = read(&mut q, 0, &FRAMES[..1]).unwrap();
    assert_eq!(poll(&mut q, 1_800)[0].tag, tag, "the queue works again");
}

#[test]
fn a_deadline_is_armed_at_the_first_scan_after_submission() {
    let fake = FakeTransport::new();
    let mut q = queue(&fake);
    fake.state
        .lock()
        .io_plan
        .extend([Action::Drop, Action::Drop]);
    read(&mut q, 0, &FRAMES[..1]).unwrap();
    assert!(poll(&mut q, 10).is_empty(), "a scan: armed for 1_010");
    read(&mut q, 8, &FRAMES[1..2]).unwrap();
    assert!(poll(&mut q, 60).is_empty(), "no scan before 110");
    assert!(poll(&mut q, 110).is_empty(), "a scan: armed for 1_110");
    assert!(poll(&mut q, 1_050).is_empty());
    assert_eq!(q.stats().timeouts, 1, "only the first is late");
    assert!(poll(&mut q, 1_150).is_empty());
    assert_eq!(q.stats().timeouts, 2);
    assert_eq!(fake.state.lock().admin_sent(admin_opcode::ABORT), 2);
}

#[test]
fn a_reset_elsewhere_reconnects_and_resubmits_what_was_in_flight() {
    let fake = FakeTransport::new();
    let mut q = queue(&fake);
    fake.state.lock().io_plan.push_back(Action::Drop);
    let tag = read(&mut q, 0, &FRAMES[..1]).unwrap();
    assert!(poll(&mut q, 0).is_empty());
    q.ctrl.reset(q.ctrl.generation()).unwrap();
    let done = poll(&mut q, 10);
    assert_eq!(done.len(), 1);
    assert_eq!((done[0].tag, done[0].result), (tag, Ok(())));
    assert_eq!(q.stats().resyncs, 1);
    assert_eq!(q.stats().retries, 1);
    let h = q.ctrl.health();
    assert_eq!(
        (h.resets, h.queue_recoveries, h.retries),
        (1, 1, 1),
        "{h:?}"
    );
    let s = fake.state.lock();
    assert_eq!(s.count(Event::Disconnect(q.qid())), 1);
    assert_eq!(s.count(Event::Connect(q.qid())), 1);
}

#[test]
fn a_completion_for_an_id_not_in_flight_resets() {
    let fake = FakeTransport::new();
    let mut q = queue(&fake);
    fake.state.lock().io_plan.push_back(Action::Bogus);
    let tag = read(&mut q, 0, &FRAMES[..1]).unwrap();
    assert!(poll(&mut q, 0).is_empty());
    assert_eq!(q.stats().protocol_errors, 1);
    assert_eq!(q.ctrl.resets(), 1);
    // Resubmitted after the reset, and this time it completes.
    let done = poll(&mut q, 1);
    assert_eq!(done.len(), 1);
    assert_eq!((done[0].tag, done[0].result), (tag, Ok(())));
}

#[test]
fn a_large_zero_range_is_issued_piecewise_as_ids_free_up() {
    let fake = FakeTransport::new();
    let mut q = queue(&fake);
    let blocks = 7 * 65536 + 5;
    let tag = q
        .submit(&Command::WriteZeroes {
            lba: Lba(0),
            blocks,
        })
        .unwrap();
    assert_eq!(
        fake.state.lock().sent(io_opcode::WRITE_ZEROES),
        3,
        "three ids"
    );
    let mut done = Vec::new();
    for t in 0..10 {
        done.extend(poll(&mut q, t));
    }
    assert_eq!(done.len(), 1);
    assert_eq!((done[0].tag, done[0].result), (tag, Ok(())));
    assert_eq!(fake.state.lock().sent(io_opcode::WRITE_ZEROES), 8);
}

#[test]
fn a_dead_controller_fails_everything() {
    let fake = FakeTransport::new();
    let mut q = queue(&fake);
    fake.state.lock().io_plan.push_back(Action::Drop);
    let tag = read(&mut q, 0, &FRAMES[..1]).unwrap();
    let gen = q.ctrl.generation();
    for g in gen..gen + 4 {
        let _ = q.ctrl.reset(g);
    }
    assert!(q.ctrl.is_dead());
    let done = poll(&mut q, 0);
    assert_eq!(done.len(), 1);
    assert_eq!(
        (done[0].tag, done[0].result),
        (tag, Err(DevError::ControllerFailed))
    );
    assert_eq!(
        read(&mut q, 0, &FRAMES[..1]),
        Err(DevError::ControllerFailed)
    );
}
