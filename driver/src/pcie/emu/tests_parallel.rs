//! Queues served in parallel: a command's data moves outside the
//! controller's state lock, so a small command on one queue completes
//! while a large transfer on another is in progress; and what that opens
//! up (two writers of one doorbell, a reset mid-transfer) cannot post a
//! completion twice or into the wrong queue.
//!
//! The tests stop a transfer after its checks and before it moves data
//! with the controller's test hook ([`EmuController::park_transfers`]),
//! and wait for it by count, so nothing depends on timing.

use std::sync::Arc;
use std::thread;

use crate::pcie::hal::{DmaAllocator, DmaRegion, Registers};
use crate::spec::command::SubmissionEntry;
use crate::spec::completion::{CompletionEntry, CQE_SIZE};
use crate::spec::regs::{cq_head_doorbell, offset, sq_tail_doorbell, Aqa, Cc};

use super::{EmuConfig, EmuController, EmuMemory, EmuRegion};

const ENTRIES: u16 = 16;
/// The default MDTS (2^5 pages): the largest write the controller takes.
const LARGE: usize = 128 << 10;

/// A controller with the admin queue and two I/O queue pairs (1 and 2),
/// driven through its registers.
struct Rig {
    mem: EmuMemory,
    emu: Arc<EmuController>,
    asq: EmuRegion,
    acq: EmuRegion,
    admin_tail: u32,
    sqs: Vec<EmuRegion>,
    cqs: Vec<EmuRegion>,
}

impl Rig {
    fn new() -> Rig {
        let mem = EmuMemory::new();
        // A small namespace: these tests also run under Miri.
        let config = EmuConfig {
            bytes: 1 << 20,
            ..EmuConfig::default()
        };
        let emu = EmuController::new(config, mem.clone());
        let mut rig = Rig {
            asq: mem.alloc(4096).unwrap(),
            acq: mem.alloc(4096).unwrap(),
            sqs: (0..2).map(|_| mem.alloc(4096).unwrap()).collect(),
            cqs: (0..2).map(|_| mem.alloc(4096).unwrap()).collect(),
            mem,
            emu,
            admin_tail: 0,
        };
        rig.enable();
        rig
    }

    /// Enables the controller and creates I/O queues 1 and 2.
    fn enable(&mut self) {
        let emu = &self.emu;
        emu.write32(offset::AQA, Aqa::new(ENTRIES, ENTRIES).0);
        emu.write64(offset::ASQ, self.asq.iova().0);
        emu.write64(offset::ACQ, self.acq.iova().0);
        emu.write32(offset::CC, Cc::for_driver(12, true).0);
        assert_eq!(emu.read32(offset::CSTS) & 1, 1);
        self.admin_tail = 0;
        self.acq.fill(0, 4096, 0).unwrap();
        self.admin(SubmissionEntry::set_num_queues(2, 2));
        for q in 1..=2u16 {
            let (sq, cq) = (&self.sqs[usize::from(q) - 1], &self.cqs[usize::from(q) - 1]);
            cq.fill(0, 4096, 0).unwrap();
            let (sq, cq) = (sq.iova().0, cq.iova().0);
            self.admin(SubmissionEntry::create_io_cq(q, ENTRIES, cq));
            self.admin(SubmissionEntry::create_io_sq(q, ENTRIES, sq, q));
        }
    }

    /// Runs one admin command (synchronous in the doorbell write) and
    /// checks it succeeded.
    fn admin(&mut self, sqe: SubmissionEntry) {
        let slot = self.admin_tail;
        self.asq.write(slot as usize * 64, &sqe.to_bytes()).unwrap();
        self.admin_tail = (slot + 1) % u32::from(ENTRIES);
        self.emu.write32(sq_tail_doorbell(0, 0), self.admin_tail);
        let e = entry(&self.acq, slot);
        assert!(e.phase() && e.plain_success(), "admin {sqe:?}: {e:?}");
        self.emu.write32(cq_head_doorbell(0, 0), self.admin_tail);
    }

    /// Puts `sqe` in slot `slot` of I/O queue `q` (not yet rung).
    fn put(&self, q: u16, slot: u32, sqe: &SubmissionEntry) {
        let sq = &self.sqs[usize::from(q) - 1];
        sq.write(slot as usize * 64, &sqe.to_bytes()).unwrap();
    }

    /// Rings I/O queue `q`'s SQ tail doorbell.
    fn ring(&self, q: u16, tail: u32) {
        self.emu.write32(sq_tail_doorbell(q, 0), tail);
    }

    /// The completions posted in I/O queue `q`'s CQ on its first pass.
    fn completions(&self, q: u16) -> Vec<CompletionEntry> {
        let cq = &self.cqs[usize::from(q) - 1];
        (0..u32::from(ENTRIES))
            .map(|slot| entry(cq, slot))
            .take_while(|e| e.phase())
            .collect()
    }

    /// A region of `len` bytes filled with `byte`, and the PRPs of a
    /// transfer of all of it (a PRP list for more than two pages).
    fn data(&self, len: usize, byte: u8) -> (EmuRegion, Option<EmuRegion>, u64, u64) {
        let data = self.mem.alloc(len).unwrap();
        data.fill(0, len, byte).unwrap();
        let base = data.iova().0;
        let pages = len.div_ceil(4096) as u64;
        if pages <= 2 {
            let prp2 = if pages == 2 { base + 4096 } else { 0 };
            return (data, None, base, prp2);
        }
        let list = self.mem.alloc(4096).unwrap();
        for i in 1..pages {
            list.write_u64((i as usize - 1) * 8, base + i * 4096)
                .unwrap();
        }
        let prp2 = list.iova().0;
        (data, Some(list), base, prp2)
    }

    /// Parks queue `q`'s transfers until the returned guard is dropped
    /// (also when an assertion fails, so a failing test cannot leave a
    /// thread parked and hang).
    fn park(&self, q: u16) -> Unpark {
        self.emu.park_transfers(q);
        Unpark(self.emu.clone())
    }

    /// Waits (by count, yielding) until `n` transfers are parked.
    fn wait_parked(&self, n: usize) {
        while self.emu.parked_transfers() < n {
            thread::yield_now();
        }
    }
}

/// Releases parked transfers when dropped.
struct Unpark(Arc<EmuController>);

impl Drop for Unpark {
    fn drop(&mut self) {
        self.0.park_transfers(0);
    }
}

fn entry(cq: &EmuRegion, slot: u32) -> CompletionEntry {
    let mut b = [0u8; CQE_SIZE];
    cq.read(slot as usize * CQE_SIZE, &mut b).unwrap();
    CompletionEntry::from_bytes(&b)
}

/// A write of `len` bytes (512-byte blocks) at block `slba` with id `cid`.
fn write(slba: u64, len: usize, cid: u16, prps: (u64, u64)) -> SubmissionEntry {
    let mut sqe = SubmissionEntry::write(1, slba, (len / 512) as u32, false);
    sqe.set_cid(cid);
    sqe.set_prps(prps.0, prps.1);
    sqe
}

fn medium(emu: &EmuController, at: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    emu.read_medium(at, &mut b);
    b
}

#[test]
fn a_small_command_completes_while_another_queue_moves_a_large_transfer() {
    let rig = Rig::new();
    let (_big, _list, p1, p2) = rig.data(LARGE, 0xaa);
    rig.put(1, 0, &write(0, LARGE, 7, (p1, p2)));
    let (_small, _, s1, _) = rig.data(4096, 0x55);
    rig.put(2, 0, &write(512, 4096, 9, (s1, 0)));
    let mut read = SubmissionEntry::read(1, 512, 8);
    read.set_cid(10);
    let (back, _, b1, _) = rig.data(4096, 0);
    read.set_prps(b1, 0);
    rig.put(2, 1, &read);
    thread::scope(|s| {
        let unpark = rig.park(1);
        let large = s.spawn(|| rig.ring(1, 1));
        rig.wait_parked(1);
        // Queue 1's write is fetched, checked and counted, and holds no
        // lock (a controller that moved data under its state lock would
        // fail here, or block queue 2's doorbell below): queue 2's
        // commands run to completion meanwhile.
        assert!(!rig.emu.state_locked());
        rig.ring(2, 2);
        let done = rig.completions(2);
        assert_eq!(done.len(), 2, "{done:?}");
        assert!(
            done.iter().all(|e| e.plain_success() && e.sq_id() == 2),
            "{done:?}"
        );
        assert_eq!(done.iter().map(|e| e.cid()).collect::<Vec<_>>(), [9, 10]);
        let mut b = [0u8; 4096];
        back.read(0, &mut b).unwrap();
        assert!(b.iter().all(|&x| x == 0x55), "the read saw the write");
        assert!(rig.completions(1).is_empty(), "the large write is parked");
        assert!(medium(&rig.emu, 0, LARGE).iter().all(|&x| x == 0));
        assert_eq!(rig.emu.stats().writes, 2);
        drop(unpark);
        large.join().unwrap();
    });
    let done = rig.completions(1);
    assert_eq!(done.len(), 1);
    assert!(done[0].plain_success() && done[0].cid() == 7 && done[0].sq_head() == 1);
    assert!(medium(&rig.emu, 0, LARGE).iter().all(|&x| x == 0xaa));
}

#[test]
fn two_writers_of_one_doorbell_complete_each_command_once() {
    let rig = Rig::new();
    let (_a, _, a1, _) = rig.data(4096, 1);
    let (_b, _, b1, _) = rig.data(4096, 2);
    rig.put(1, 0, &write(0, 4096, 1, (a1, 0)));
    rig.put(1, 1, &write(8, 4096, 2, (b1, 0)));
    thread::scope(|s| {
        let unpark = rig.park(1);
        let first = s.spawn(|| rig.ring(1, 1));
        rig.wait_parked(1);
        // The same tail again finds nothing left to fetch.
        rig.ring(1, 1);
        assert_eq!(rig.emu.parked_transfers(), 1);
        // A later tail: the second writer takes the next command.
        let second = s.spawn(|| rig.ring(1, 2));
        rig.wait_parked(2);
        drop(unpark);
        first.join().unwrap();
        second.join().unwrap();
    });
    let mut cids: Vec<u16> = rig.completions(1).iter().map(|e| e.cid()).collect();
    cids.sort_unstable();
    assert_eq!(cids, [1, 2], "each command completed exactly once");
    assert_eq!(rig.emu.stats().writes, 2);
    assert!(medium(&rig.emu, 0, 4096).iter().all(|&x| x == 1));
    assert!(medium(&rig.emu, 4096, 4096).iter().all(|&x| x == 2));
}

#[test]
fn a_reset_during_a_transfer_keeps_its_completion_out_of_the_new_queues() {
    let mut rig = Rig::new();
    let (_a, _, a1, _) = rig.data(4096, 3);
    rig.put(1, 0, &write(0, 4096, 5, (a1, 0)));
    let unpark = rig.park(1);
    let emu = rig.emu.clone();
    let parked = thread::spawn(move || emu.write32(sq_tail_doorbell(1, 0), 1));
    rig.wait_parked(1);
    // Reset and bring the same queues up again, at the same addresses,
    // while the write is outside the lock.
    rig.emu.write32(offset::CC, 0);
    assert_eq!(rig.emu.io_queues(), 0);
    rig.enable();
    assert_eq!(rig.emu.io_queues(), 2);
    drop(unpark);
    parked.join().unwrap();
    assert!(
        medium(&rig.emu, 0, 4096).iter().all(|&x| x == 3),
        "its data moved"
    );
    assert!(
        rig.completions(1).is_empty(),
        "no completion posted into the re-created queue"
    );
    // The new queue works, from slot 0 of its ring.
    let (_b, _, b1, _) = rig.data(4096, 4);
    rig.put(1, 0, &write(8, 4096, 6, (b1, 0)));
    rig.ring(1, 1);
    let done = rig.completions(1);
    assert_eq!(done.len(), 1);
    assert!(done[0].plain_success() && done[0].cid() == 6);
}

#[test]
fn write_zeroes_and_deallocate_move_outside_the_lock_too() {
    let rig = Rig::new();
    rig.emu.write_medium(0, &[9u8; 3 * 4096]);
    let mut zeroes = SubmissionEntry::write_zeroes(1, 0, 8);
    zeroes.set_cid(1);
    rig.put(1, 0, &zeroes);
    let ranges = rig.mem.alloc(4096).unwrap();
    let range = crate::spec::command::DsmRange {
        attributes: 0,
        blocks: 8,
        slba: 16,
    };
    ranges.write(0, &range.to_bytes()).unwrap();
    let mut dealloc = SubmissionEntry::deallocate(1, 1, ranges.iova().0);
    dealloc.set_cid(2);
    rig.put(1, 1, &dealloc);
    thread::scope(|s| {
        let unpark = rig.park(1);
        let parked = s.spawn(|| rig.ring(1, 2));
        rig.wait_parked(1);
        assert!(medium(&rig.emu, 0, 4096).iter().all(|&x| x == 9));
        drop(unpark);
        parked.join().unwrap();
    });
    let done = rig.completions(1);
    assert_eq!(done.len(), 2);
    assert!(done.iter().all(|e| e.plain_success()));
    let image = medium(&rig.emu, 0, 3 * 4096);
    assert!(image[..4096].iter().all(|&x| x == 0));
    assert!(image[4096..8192].iter().all(|&x| x == 9));
    assert!(image[8192..].iter().all(|&x| x == 0));
}

#[test]
fn latency_counts_from_the_last_tick_though_idle_ticks_take_no_lock() {
    use pollfs_core::units::Nanos;
    let rig = Rig::new();
    // Nothing is held: these ticks leave the state lock alone, but the
    // time they carry is what the next command's latency counts from.
    rig.emu.tick(Nanos(500));
    rig.emu.tick(Nanos(1000));
    rig.emu.set_faults(|f| f.latency = 500);
    let (_a, _, a1, _) = rig.data(4096, 1);
    rig.put(1, 0, &write(0, 4096, 1, (a1, 0)));
    rig.ring(1, 1);
    rig.emu.tick(Nanos(1499));
    assert!(rig.completions(1).is_empty(), "held until 1,500");
    rig.emu.tick(Nanos(1500));
    let done = rig.completions(1);
    assert_eq!(done.len(), 1);
    assert!(done[0].plain_success() && done[0].cid() == 1);
}
