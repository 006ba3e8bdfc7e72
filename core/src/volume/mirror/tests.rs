//! The mirror over RAM legs that fail on command (the layer below
//! stubbed): routing, failures, rejoin and resync, headers and assembly.

use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;

use super::*;
use crate::dev::fault::{FaultPlan, FaultyDevice};
use crate::dev::ram::{RamDevice, RamFrames};
use crate::dev::{CommandKind, DeviceQueue, Tag};

type Leg = FaultyDevice<RamDevice>;

const LEG_BYTES: u64 = 1 << 20;
const FRAMES: u32 = 128;

fn clock() -> Nanos {
    Nanos(0)
}
fn idle() {}

/// Two legs over one arena, each with its fault plan.
fn legs(block_size: u32) -> (Vec<Leg>, Vec<FaultPlan>, Vec<RamDevice>) {
    legs_of(LEG_BYTES, block_size)
}

/// Two legs of `bytes` each.
fn legs_of(bytes: u64, block_size: u32) -> (Vec<Leg>, Vec<FaultPlan>, Vec<RamDevice>) {
    let arena = Arc::new(RamFrames::new(FRAMES));
    let rams: Vec<RamDevice> = (0..2)
        .map(|_| RamDevice::with_arena(bytes, block_size, arena.clone()).unwrap())
        .collect();
    let plans = vec![FaultPlan::new(), FaultPlan::new()];
    let legs = rams
        .iter()
        .zip(&plans)
        .map(|(r, p)| FaultyDevice::new(r.clone(), p.clone()))
        .collect();
    (legs, plans, rams)
}

fn legs_again(rams: &[RamDevice], plans: &[FaultPlan]) -> Vec<Leg> {
    rams.iter()
        .zip(plans)
        .map(|(r, p)| FaultyDevice::new(r.clone(), p.clone()))
        .collect()
}

/// Submits `cmd` and polls until it completes.
fn run<Q: DeviceQueue>(q: &mut Q, cmd: Command<'_>) -> Result<(), DevError> {
    let tag: Tag = q.submit(&cmd)?;
    for _ in 0..1000 {
        let mut out = None;
        q.poll(Nanos(0), 64, &mut |c| {
            if c.tag == tag {
                out = Some(c.result);
            }
        });
        if let Some(r) = out {
            return r;
        }
    }
    panic!("command never completed");
}

/// Writes page `page` of the mirror full of `byte`.
fn write(q: &mut MirrorQueue<Leg>, m: &Mirror<Leg>, page: u64, byte: u8) -> Result<(), DevError> {
    m.frames().fill(FrameId(0), 0, PAGE_SIZE, byte).unwrap();
    let lba = Lba(page * m.geometry().blocks_per_page());
    run(
        q,
        Command::Write {
            lba,
            frames: &[FrameId(0)],
            fua: false,
        },
    )
}

/// Reads page `page` of the mirror, which holds one byte repeated.
fn read(q: &mut MirrorQueue<Leg>, m: &Mirror<Leg>, page: u64) -> Result<u8, DevError> {
    m.frames().fill(FrameId(1), 0, PAGE_SIZE, 0xEE).unwrap();
    let lba = Lba(page * m.geometry().blocks_per_page());
    run(
        q,
        Command::Read {
            lba,
            frames: &[FrameId(1)],
        },
    )?;
    let mut b = [0u8; PAGE_SIZE];
    m.frames().read(FrameId(1), 0, &mut b).unwrap();
    assert!(b.iter().all(|&x| x == b[0]), "a page is one byte repeated");
    Ok(b[0])
}

/// The data area of a leg's medium.
fn data(ram: &RamDevice, m: &Mirror<Leg>) -> Vec<u8> {
    let g = m.geometry();
    let mut v = vec![0u8; (g.capacity * u64::from(g.block_size)) as usize];
    ram.read_raw(0, &mut v);
    v
}

/// The legs' data areas are byte-equal (reported by first difference).
fn assert_legs_equal(rams: &[RamDevice], m: &Mirror<Leg>) {
    let (a, b) = (data(&rams[0], m), data(&rams[1], m));
    if let Some(i) = a.iter().zip(&b).position(|(x, y)| x != y) {
        panic!("the legs differ first at byte {i} (page {})", i / PAGE_SIZE);
    }
}

fn states(m: &Mirror<Leg>) -> Vec<LegState> {
    m.status().legs.iter().map(|(s, _)| *s).collect()
}

#[test]
fn writes_reach_both_legs_and_reads_alternate() {
    let (legs, _, rams) = legs(512);
    let m = Mirror::create(legs, 7, OpenOptions::default(), clock, idle).unwrap();
    assert_eq!(m.frames().frame_count(), FRAMES - 2 - WINDOW_FRAMES);
    assert_eq!(m.geometry().capacity, (256 - HEADER_PAGES) * 8);
    let mut q = m.open_queue().unwrap();
    for p in 0..10 {
        write(&mut q, &m, p, p as u8 + 1).unwrap();
    }
    run(&mut q, Command::Flush).unwrap();
    for p in 0..10 {
        assert_eq!(read(&mut q, &m, p), Ok(p as u8 + 1));
    }
    assert_legs_equal(&rams, &m);
    assert_eq!(states(&m), [LegState::InSync, LegState::InSync]);
    // A frame the mirror keeps is not the caller's.
    assert_eq!(
        m.frames().fill(FrameId(FRAMES - 1), 0, 1, 0),
        Err(DevError::FrameRange)
    );
}

#[test]
fn a_leg_that_fails_a_write_is_dropped_and_nothing_is_lost() {
    let (legs, plans, rams) = legs(512);
    let m = Mirror::create(legs, 7, OpenOptions::default(), clock, idle).unwrap();
    let mut q = m.open_queue().unwrap();
    write(&mut q, &m, 1, 0x11).unwrap();
    plans[1].fail(CommandKind::Write, 1, DevError::Media);
    let before = m.status().generation;
    write(&mut q, &m, 2, 0x22).unwrap();
    let st = m.status();
    assert_eq!(states(&m), [LegState::InSync, LegState::Failed]);
    assert!(st.generation > before);
    assert_eq!(
        st.durable_generation, st.generation,
        "the drop was recorded before the write completed"
    );
    assert_eq!(st.legs[1].1.writes, 1);
    let ev = m.take_events();
    assert!(
        ev.contains(&MirrorEvent::LegFailed {
            leg: 1,
            error: DevError::Media
        }),
        "{ev:?}"
    );
    // Leg 0 carries on alone; leg 1 gets nothing more.
    write(&mut q, &m, 3, 0x33).unwrap();
    run(&mut q, Command::Flush).unwrap();
    assert_eq!(read(&mut q, &m, 2), Ok(0x22));
    assert_eq!(read(&mut q, &m, 3), Ok(0x33));
    let mut page = [0u8; 1];
    rams[1].read_raw(3 * 4096, &mut page);
    assert_eq!(page[0], 0, "a failed leg takes no writes");
    // On leg 0's header, leg 1 is failed: a reopen never reads it.
    drop(q);
    let m2 = Mirror::open(
        legs_again(&rams, &plans),
        OpenOptions::default(),
        clock,
        idle,
    )
    .unwrap();
    assert_eq!(states(&m2), [LegState::InSync, LegState::Failed]);
}

#[test]
fn a_write_both_legs_fail_fails_and_drops_no_leg() {
    let (legs, plans, _) = legs(512);
    let m = Mirror::create(legs, 7, OpenOptions::default(), clock, idle).unwrap();
    let mut q = m.open_queue().unwrap();
    // Marked in the bitmap first: the next write to the region is the
    // only write sent.
    write(&mut q, &m, 3, 0x33).unwrap();
    plans[0].fail(CommandKind::Write, 1, DevError::Media);
    plans[1].fail(CommandKind::Write, 1, DevError::Media);
    assert_eq!(write(&mut q, &m, 4, 0x44), Err(DevError::Media));
    assert_eq!(states(&m), [LegState::InSync, LegState::InSync]);
    // A flush one leg fails drops that leg.
    plans[0].fail(CommandKind::Flush, 1, DevError::Media);
    assert_eq!(run(&mut q, Command::Flush), Ok(()));
    assert_eq!(states(&m), [LegState::Failed, LegState::InSync]);
}

#[test]
fn a_failed_read_is_retried_on_the_other_leg() {
    let (legs, plans, _) = legs(512);
    let m = Mirror::create(legs, 7, OpenOptions::default(), clock, idle).unwrap();
    let mut q = m.open_queue().unwrap();
    write(&mut q, &m, 5, 0x55).unwrap();
    plans[0].fail(CommandKind::Read, u64::MAX, DevError::Media);
    for _ in 0..4 {
        assert_eq!(read(&mut q, &m, 5), Ok(0x55));
    }
    let st = m.status();
    assert!(st.legs[0].1.reads >= 2, "{:?}", st.legs[0]);
    assert_eq!(
        states(&m),
        [LegState::InSync, LegState::InSync],
        "reads drop no leg"
    );
    plans[1].fail(CommandKind::Read, 1, DevError::Media);
    assert_eq!(
        read(&mut q, &m, 5),
        Err(DevError::Media),
        "no leg left to try"
    );
}

#[test]
fn a_rejoined_leg_is_resynced_while_writes_go_on_and_then_serves_reads() {
    let (legs, plans, rams) = legs(512);
    let m = Mirror::create(legs, 7, OpenOptions::default(), clock, idle).unwrap();
    let mut q = m.open_queue().unwrap();
    plans[1].fail_after(0);
    for p in 0..60 {
        write(&mut q, &m, p * 3, p as u8).unwrap();
    }
    assert_eq!(states(&m), [LegState::InSync, LegState::Failed]);
    plans[1].heal();
    m.rejoin(1).unwrap();
    assert_eq!(
        m.rejoin(0),
        Err(VolumeError::LegState {
            leg: 0,
            state: LegState::InSync
        })
    );
    // Writes interleaved with single control steps, spread over the
    // device so some land behind the cursor, some ahead, some on the
    // window.
    let mut byte = 100u8;
    for round in 0..2000 {
        if !m.poll_control(Nanos(0)) {
            break;
        }
        let page = (round * 37) % 250;
        write(&mut q, &m, page, byte).unwrap();
        byte = byte.wrapping_add(1);
        // A read that reaches leg 1 fails there (and is retried on leg
        // 0): while leg 1 is not in sync, none may reach it.
        let copying = states(&m)[1] != LegState::InSync;
        let reached = plans[1].injected();
        plans[1].fail(CommandKind::Read, u64::MAX, DevError::Media);
        assert_eq!(read(&mut q, &m, page), Ok(byte.wrapping_sub(1)));
        plans[1].heal();
        if copying {
            assert_eq!(
                plans[1].injected(),
                reached,
                "round {round}: leg 1 read while stale"
            );
        }
    }
    m.settle(clock, idle).unwrap();
    assert_eq!(states(&m), [LegState::InSync, LegState::InSync]);
    assert_legs_equal(&rams, &m);
    let ev = m.take_events();
    assert!(
        ev.contains(&MirrorEvent::ResyncStarted { leg: 1, source: 0 }),
        "{ev:?}"
    );
    assert!(
        ev.contains(&MirrorEvent::ResyncFinished { leg: 1 }),
        "{ev:?}"
    );
}

#[test]
fn a_clean_close_needs_no_resync_and_a_crash_resyncs_from_one_leg() {
    let (legs, plans, rams) = legs(4096);
    let m = Mirror::create(legs, 9, OpenOptions::default(), clock, idle).unwrap();
    let mut q = m.open_queue().unwrap();
    write(&mut q, &m, 0, 1).unwrap();
    drop(q);
    m.close(clock, idle).unwrap();
    let m = Mirror::open(
        legs_again(&rams, &plans),
        OpenOptions::default(),
        clock,
        idle,
    )
    .unwrap();
    assert_eq!(states(&m), [LegState::InSync, LegState::InSync]);
    assert!(!m.poll_control(Nanos(0)), "nothing to copy");
    // Open and never closed: a crash. The legs differ in a write that was
    // under way (leg 1 has it, leg 0 not); its region was marked first.
    let mut q = m.open_queue().unwrap();
    write(&mut q, &m, 1, 3).unwrap();
    drop(q);
    drop(m);
    rams[1].write_raw(4096, &[7u8; 4096]);
    for (prefer, want) in [(None, 3u8), (Some(1), 7u8)] {
        let options = OpenOptions {
            prefer,
            ..OpenOptions::default()
        };
        let m = Mirror::open(legs_again(&rams, &plans), options, clock, idle).unwrap();
        let stale = if prefer == Some(1) { 0 } else { 1 };
        assert_eq!(states(&m)[stale], LegState::Stale);
        let mut q = m.open_queue().unwrap();
        // Reads come from the source only until the copy is done.
        assert_eq!(read(&mut q, &m, 1), Ok(want));
        assert_eq!(read(&mut q, &m, 1), Ok(want));
        m.settle(clock, idle).unwrap();
        assert_legs_equal(&rams, &m);
        assert_eq!(read(&mut q, &m, 1), Ok(want));
        drop(q);
        rams[1].write_raw(4096, &[7u8; 4096]);
    }
}

#[test]
fn a_leg_whose_header_is_behind_is_stale_and_read_only_opens_write_nothing() {
    let (legs, plans, rams) = legs(512);
    let m = Mirror::create(legs, 3, OpenOptions::default(), clock, idle).unwrap();
    m.fail_leg(1).unwrap();
    assert_eq!(m.fail_leg(0), Err(VolumeError::NoLegInSync));
    let mut q = m.open_queue().unwrap();
    write(&mut q, &m, 0, 5).unwrap();
    drop(q);
    m.close(clock, idle).unwrap();
    let before: Vec<Vec<u8>> = rams
        .iter()
        .map(|r| {
            let mut v = vec![0u8; LEG_BYTES as usize];
            r.read_raw(0, &mut v);
            v
        })
        .collect();
    let ro = OpenOptions {
        writable: false,
        ..OpenOptions::default()
    };
    let m = Mirror::open(legs_again(&rams, &plans), ro, clock, idle).unwrap();
    assert_eq!(states(&m), [LegState::InSync, LegState::Failed]);
    assert_eq!(m.rejoin(1), Err(VolumeError::ReadOnly));
    let mut q = m.open_queue().unwrap();
    assert_eq!(read(&mut q, &m, 0), Ok(5));
    assert_eq!(write(&mut q, &m, 0, 6), Err(DevError::InvalidRequest));
    for (r, b) in rams.iter().zip(&before) {
        let mut v = vec![0u8; LEG_BYTES as usize];
        r.read_raw(0, &mut v);
        assert!(v == *b, "a read-only open wrote nothing");
    }
    let headers = Mirror::inspect(&legs_again(&rams, &plans), clock, idle).unwrap();
    let (h0, h1) = (headers[0].unwrap(), headers[1].unwrap());
    assert!(h0.generation > h1.generation, "leg 1 missed the drop");
    assert!(!h0.dirty);
}

#[test]
fn legs_a_mirror_cannot_use_are_refused() {
    let apart = vec![
        FaultyDevice::new(
            RamDevice::new(LEG_BYTES, 512, FRAMES).unwrap(),
            FaultPlan::new(),
        ),
        FaultyDevice::new(
            RamDevice::new(LEG_BYTES, 512, FRAMES).unwrap(),
            FaultPlan::new(),
        ),
    ];
    let e = Mirror::create(apart, 1, OpenOptions::default(), clock, idle).err();
    assert_eq!(e, Some(VolumeError::ArenasDiffer));
    let arena = Arc::new(RamFrames::new(WINDOW_FRAMES + 2));
    let few: Vec<Leg> = (0..2)
        .map(|_| {
            FaultyDevice::new(
                RamDevice::with_arena(LEG_BYTES, 512, arena.clone()).unwrap(),
                FaultPlan::new(),
            )
        })
        .collect();
    let e = Mirror::create(few, 1, OpenOptions::default(), clock, idle).err();
    assert_eq!(e, Some(VolumeError::TooFewFrames));
    let (blank, _, _) = legs(512);
    let e = Mirror::open(blank, OpenOptions::default(), clock, idle).err();
    assert_eq!(e, Some(VolumeError::NotAMirror { leg: 0 }));
}

/// Polls the control section `n` times (clearing passes take a few).
fn poll_n(m: &Mirror<Leg>, n: usize) {
    for _ in 0..n {
        m.poll_control(Nanos(0));
    }
}

#[test]
fn a_leg_back_from_a_short_absence_is_copied_only_where_it_was_written() {
    // 8 MiB legs: 8 regions of 1 MiB (256 pages).
    let (legs, plans, rams) = legs_of(8 << 20, 4096);
    let m = Mirror::create(legs, 11, OpenOptions::default(), clock, idle).unwrap();
    let st = m.status();
    assert_eq!((st.regions, st.region_bytes), (8, 1 << 20));
    let mut q = m.open_queue().unwrap();
    write(&mut q, &m, 0, 1).unwrap();
    write(&mut q, &m, 3 * 256, 2).unwrap();
    assert_eq!(m.status().dirty_regions, 2, "marked before the writes");
    let h = Mirror::inspect(&legs_again(&rams, &plans), clock, idle).unwrap();
    for h in h.iter().flatten() {
        assert_eq!(h.bitmap.map(|b| b.bits[0]), Some(0b1001), "on both legs");
    }
    // Idle for a clearing period, flushed, written off. (The clock here
    // stands still: with the default period no pass would come.)
    m.set_clear_delay(Nanos(0));
    run(&mut q, Command::Flush).unwrap();
    poll_n(&m, 10);
    assert_eq!(m.status().dirty_regions, 0);
    let h = Mirror::inspect(&legs_again(&rams, &plans), clock, idle).unwrap();
    assert!(h.iter().flatten().all(|h| h.bitmap.unwrap().count() == 0));
    // Leg 1 leaves; what is written meanwhile stays marked.
    m.fail_leg(1).unwrap();
    write(&mut q, &m, 5 * 256 + 7, 3).unwrap();
    write(&mut q, &m, 6 * 256, 4).unwrap();
    run(&mut q, Command::Flush).unwrap();
    poll_n(&m, 10);
    assert_eq!(
        m.status().dirty_regions,
        2,
        "not cleared while a leg is out"
    );
    m.rejoin(1).unwrap();
    m.settle(clock, idle).unwrap();
    assert_eq!(states(&m), [LegState::InSync, LegState::InSync]);
    assert_eq!(
        m.status().resync_copied,
        2 * 256,
        "two regions of 256 blocks"
    );
    assert_legs_equal(&rams, &m);
    poll_n(&m, 10);
    assert_eq!(m.status().dirty_regions, 0, "cleared once the leg is back");
    // A new device in leg 1's position is copied whole.
    m.fail_leg(1).unwrap();
    write(&mut q, &m, 2, 5).unwrap();
    m.rejoin_whole(1).unwrap();
    m.settle(clock, idle).unwrap();
    let whole = m.geometry().capacity;
    assert_eq!(m.status().resync_copied, 2 * 256 + whole);
    assert_legs_equal(&rams, &m);
}

#[test]
fn a_leg_out_at_a_restart_is_still_copied_only_where_it_was_written() {
    let (legs, plans, rams) = legs_of(8 << 20, 512);
    let m = Mirror::create(legs, 12, OpenOptions::default(), clock, idle).unwrap();
    let mut q = m.open_queue().unwrap();
    plans[1].fail_after(0);
    write(&mut q, &m, 4 * 256, 9).unwrap();
    assert_eq!(states(&m), [LegState::InSync, LegState::Failed]);
    drop(q);
    // A crash: the mirror is not closed.
    drop(m);
    plans[1].heal();
    let m = Mirror::open(
        legs_again(&rams, &plans),
        OpenOptions::default(),
        clock,
        idle,
    )
    .unwrap();
    assert_eq!(m.status().dirty_regions, 1);
    m.rejoin(1).unwrap();
    m.settle(clock, idle).unwrap();
    assert_eq!(m.status().resync_copied, 256 * 8, "one region of 256 pages");
    assert_legs_equal(&rams, &m);
}

#[test]
fn a_header_of_a_newer_format_is_refused_by_name() {
    let (legs, plans, rams) = legs(4096);
    let m = Mirror::create(legs, 13, OpenOptions::default(), clock, idle).unwrap();
    m.close(clock, idle).unwrap();
    // Both of leg 1's copies rewritten as format 3.
    let pages = LEG_BYTES / PAGE_SIZE as u64;
    for page in pages - HEADER_PAGES..pages {
        let mut b = [0u8; PAGE_SIZE];
        rams[1].read_raw(page * PAGE_SIZE as u64, &mut b);
        b[8..12].copy_from_slice(&3u32.to_le_bytes());
        let crc = crate::persist::format::crc32c(&[&b[..56], &b[60..]]);
        b[56..60].copy_from_slice(&crc.to_le_bytes());
        rams[1].write_raw(page * PAGE_SIZE as u64, &b);
    }
    let e = Mirror::open(
        legs_again(&rams, &plans),
        OpenOptions::default(),
        clock,
        idle,
    )
    .err();
    assert_eq!(e, Some(VolumeError::NewerFormat { leg: 1, version: 3 }));
}

#[test]
fn each_leg_counts_its_own_commands_and_errors_and_a_closed_queue_stays_counted() {
    let (legs, plans, _) = legs(512);
    let m = Mirror::create(legs, 7, OpenOptions::default(), clock, idle).unwrap();
    let start = m.leg_counts();
    assert_eq!(start.len(), 2);
    assert!(
        start.iter().all(|c| c.writes > 0 && c.errors == 0),
        "create wrote a header on each leg: {start:?}"
    );
    let mut q = m.open_queue().unwrap();
    write(&mut q, &m, 1, 0x11).unwrap();
    let both = m.leg_counts();
    // The data write, and the bitmap's mark in the headers first.
    for (c, s) in both.iter().zip(&start) {
        assert!(c.writes > s.writes, "{both:?}");
        assert!(c.write_bytes >= s.write_bytes + 4096, "{both:?}");
    }
    plans[1].fail(CommandKind::Write, 1, DevError::Media);
    write(&mut q, &m, 2, 0x22).unwrap();
    let failed = m.leg_counts();
    assert_eq!(failed[1].errors, 1, "{failed:?}");
    assert_eq!(failed[0].errors, 0);
    // Leg 0 goes on taking writes and reads; leg 1 gets none.
    for p in 3..6 {
        write(&mut q, &m, p, p as u8).unwrap();
        assert_eq!(read(&mut q, &m, p), Ok(p as u8));
    }
    drop(q);
    let after = m.leg_counts();
    assert!(after[0].writes >= failed[0].writes + 3, "{after:?}");
    assert!(after[0].reads >= failed[0].reads + 3, "{after:?}");
    assert_eq!(
        (after[1].writes, after[1].reads, after[1].errors),
        (failed[1].writes, failed[1].reads, 1),
        "a failed leg is sent nothing more"
    );
    assert_eq!(after[0].health, crate::stats::DeviceHealth::default());
}
