//! One PCIe submission/completion ring pair (NVMe 1.4, 4.1 "Submission
//! Queue & Completion Queue Definition"): phase tags and doorbells.
//!
//! The ring only moves entries: it writes SQEs at the tail and rings the
//! doorbell, and pops CQEs whose phase tag says they are new. Every popped
//! entry is checked against what this queue can legitimately see (its SQ
//! id, an SQ head inside the in-flight window) before anyone acts on it;
//! command ids are checked above the transport (an I/O queue's one table
//! of ids and requests, the admin queue's [`CidPool`](crate::qpair::CidPool)).

use core::sync::atomic::{fence, Ordering};

use crate::pcie::hal::{DmaError, DmaRegion, Iova, Registers};
use crate::qpair::ProtocolError;
use crate::spec::command::{SubmissionEntry, SQE_SIZE};
use crate::spec::completion::{CompletionEntry, CQE_DW2, CQE_SIZE};
use crate::spec::regs::{cq_head_doorbell, sq_tail_doorbell};
use crate::transport::QpairError;

/// Where the SQ id (DW2 bits 31:16) sits in an entry's second 8-byte word
/// (DW2, then DW3).
const SQ_ID_SHIFT: u32 = 16;
/// The phase tag (DW3 bit 16) in an entry's second word.
const PHASE: u64 = 1 << 48;
/// The SQ id and the phase tag in an entry's second word.
const ID_AND_PHASE: u64 = (0xffff << SQ_ID_SHIFT) | PHASE;

/// An SQ/CQ ring pair with its doorbells. `entries` is the same for both
/// rings, and at most `entries - 1` commands are ever in flight (the
/// command-id pool is that size), so neither ring can overflow.
#[derive(Debug)]
pub struct Ring<D: DmaRegion> {
    qid: u16,
    entries: u16,
    sq: D,
    cq: D,
    sq_tail: u16,
    /// Last SQ head the controller reported.
    sq_head: u16,
    /// Entries from `sq_head` up to the tail: submitted, and not yet
    /// reported consumed. A reported head may move forward at most this
    /// far.
    unconsumed: u16,
    cq_head: u16,
    /// The SQ id and phase tag a new entry carries, where they sit in the
    /// entry's second word ([`ID_AND_PHASE`]): the phase flips each pass.
    expect: u64,
    sq_doorbell: usize,
    cq_doorbell: usize,
}

impl<D: DmaRegion> Ring<D> {
    /// A queue pair over `sq` (`entries * 64` bytes) and `cq`
    /// (`entries * 16` bytes) with doorbell stride `dstrd`.
    pub fn new(qid: u16, entries: u16, sq: D, cq: D, dstrd: u32) -> Result<Self, DmaError> {
        let n = usize::from(entries);
        if entries < 2 || sq.len() < n * SQE_SIZE || cq.len() < n * CQE_SIZE {
            return Err(DmaError::OutOfBounds);
        }
        let mut qp = Ring {
            qid,
            entries,
            sq,
            cq,
            sq_tail: 0,
            sq_head: 0,
            unconsumed: 0,
            cq_head: 0,
            expect: 0,
            sq_doorbell: sq_tail_doorbell(qid, dstrd),
            cq_doorbell: cq_head_doorbell(qid, dstrd),
        };
        qp.reset()?;
        Ok(qp)
    }
    /// Back to the just-created state: empty rings, phase 1. Used when the
    /// controller forgets the queue (creation and reset).
    pub fn reset(&mut self) -> Result<(), DmaError> {
        self.cq.fill(0, usize::from(self.entries) * CQE_SIZE, 0)?;
        self.sq_tail = 0;
        self.sq_head = 0;
        self.unconsumed = 0;
        self.cq_head = 0;
        self.expect = (u64::from(self.qid) << SQ_ID_SHIFT) | PHASE;
        Ok(())
    }
    /// Queue id.
    pub fn qid(&self) -> u16 {
        self.qid
    }
    /// Ring size in entries.
    pub fn entries(&self) -> u16 {
        self.entries
    }
    /// Bus address of the SQ ring.
    pub fn sq_iova(&self) -> Iova {
        self.sq.iova()
    }
    /// Bus address of the CQ ring.
    pub fn cq_iova(&self) -> Iova {
        self.cq.iova()
    }
    #[inline]
    fn next(&self, i: u16) -> u16 {
        if i + 1 >= self.entries {
            0
        } else {
            i + 1
        }
    }
    /// True when the SQ has no free entry (by the last reported head).
    #[inline]
    pub fn sq_full(&self) -> bool {
        self.unconsumed + 1 >= self.entries
    }
    /// Copies `sqe` into the tail slot and rings the tail doorbell. The
    /// Release fence orders the entry's bytes before the doorbell write, so
    /// the controller never fetches a half-written entry.
    #[inline(always)]
    pub fn submit<R: Registers + ?Sized>(
        &mut self,
        regs: &R,
        sqe: &SubmissionEntry,
    ) -> Result<(), QpairError> {
        if self.sq_full() {
            return Err(QpairError::Full);
        }
        let off = usize::from(self.sq_tail) * SQE_SIZE;
        self.sq
            .write_u32s(off, &sqe.dw)
            .map_err(|_| QpairError::Broken)?;
        self.sq_tail = self.next(self.sq_tail);
        self.unconsumed += 1;
        fence(Ordering::Release);
        regs.write32(self.sq_doorbell, u32::from(self.sq_tail));
        Ok(())
    }
    /// Takes a reported SQ head if it lies in the window the controller
    /// may report (from the last reported head up to the tail,
    /// inclusive); `false`, and nothing changes, if it does not.
    #[inline]
    fn take_head(&mut self, head: u16) -> bool {
        if head >= self.entries {
            return false;
        }
        // How far the head moved forward around the ring, without a
        // division: both ends are below `entries`.
        let moved = if head >= self.sq_head {
            head - self.sq_head
        } else {
            head + (self.entries - self.sq_head)
        };
        if moved > self.unconsumed {
            return false;
        }
        self.unconsumed -= moved;
        self.sq_head = head;
        true
    }
    /// Pops the next new completion, if any, whole (see
    /// [`pop_high`](Self::pop_high)).
    #[inline]
    pub fn pop(&mut self) -> Result<Option<CompletionEntry>, ProtocolError<DmaError>> {
        let Some((mut e, off)) = self.pop_high()? else {
            return Ok(None);
        };
        self.read_low(off, &mut e)?;
        Ok(Some(e))
    }
    /// Pops the next new completion, if any, reading only its second
    /// 8-byte word (DW2 and DW3: SQ head, SQ id, command id, phase,
    /// status) in one aligned load, so the phase is read first and with
    /// the fields the checks need; DW0 and DW1 are left zero, and
    /// [`read_low`](Self::read_low) with the returned offset reads them
    /// (a plain success of an I/O command carries nothing there that the
    /// queue uses). The entry's SQ id and SQ head are validated (the
    /// phase and the SQ id in one masked compare, the slow path telling
    /// which failed); the caller validates the command id.
    // Inlined into the transport's poll loop: at queue depth 1 every poll
    // reads one entry that is new and one that is not yet, and a call
    // boundary with this return type costs more than either read.
    #[inline]
    pub fn pop_high(
        &mut self,
    ) -> Result<Option<(CompletionEntry, usize)>, ProtocolError<DmaError>> {
        let off = usize::from(self.cq_head) * CQE_SIZE;
        let w = self.read_word(off + CQE_DW2)?;
        // The usual case, a new entry from this queue's SQ, is one compare.
        let ours = w & ID_AND_PHASE == self.expect;
        if !ours && (w ^ self.expect) & PHASE != 0 {
            return Ok(None);
        }
        let e = CompletionEntry::from_high_word(w);
        self.cq_head = self.next(self.cq_head);
        if self.cq_head == 0 {
            self.expect ^= PHASE;
        }
        if !ours {
            return Err(ProtocolError::WrongSqId(e.sq_id()));
        }
        if !self.take_head(e.sq_head()) {
            return Err(ProtocolError::BadSqHead(e.sq_head()));
        }
        Ok(Some((e, off)))
    }
    /// Reads DW0 and DW1 of the entry [`pop_high`](Self::pop_high) popped
    /// at `off`. Its phase was read before (with Acquire ordering in the
    /// DMA implementations), so the rest of the entry is complete.
    #[inline]
    pub fn read_low(
        &self,
        off: usize,
        e: &mut CompletionEntry,
    ) -> Result<(), ProtocolError<DmaError>> {
        fence(Ordering::Acquire);
        e.set_low_word(self.read_word(off)?);
        Ok(())
    }
    /// The little-endian 8-byte word at `off` in the CQ, in one aligned
    /// access (through the region's inlined `read`, which VFIO and the
    /// emulated memory make one load or one page-locked copy).
    #[inline(always)]
    fn read_word(&self, off: usize) -> Result<u64, ProtocolError<DmaError>> {
        let mut b = [0u8; 8];
        self.cq
            .read(off, &mut b)
            .map_err(|_| ProtocolError::Unreadable)?;
        Ok(u64::from_le_bytes(b))
    }
    /// Tells the controller the CQ entries up to the head are consumed.
    #[inline]
    pub fn ring_cq<R: Registers + ?Sized>(&self, regs: &R) {
        regs.write32(self.cq_doorbell, u32::from(self.cq_head));
    }
    /// The CQ ring's memory, for tests that play the device.
    #[cfg(test)]
    pub(crate) fn cq(&self) -> &D {
        &self.cq
    }
    /// Current CQ phase the host expects (for tests).
    pub fn phase(&self) -> bool {
        self.expect & PHASE != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pcie::hal::fake::{RecordingRegs, VecRegion};
    use crate::qpair::CidPool;
    use crate::spec::status::Status;

    fn pair(entries: u16) -> Ring<VecRegion> {
        let n = usize::from(entries);
        let sq = VecRegion::new(n * SQE_SIZE, 0x10000);
        let cq = VecRegion::new(n * CQE_SIZE, 0x20000);
        Ring::new(1, entries, sq, cq, 0).unwrap()
    }

    /// Plays the device: posts a completion at CQ slot `slot`.
    fn post(qp: &Ring<VecRegion>, slot: u16, cid: u16, sq_head: u16, phase: bool) {
        let e = CompletionEntry::new(0, sq_head, 1, cid, phase, Status::SUCCESS);
        qp.cq
            .write(usize::from(slot) * CQE_SIZE, &e.to_bytes())
            .unwrap();
    }

    #[test]
    fn submit_writes_the_entry_before_ringing_the_tail_doorbell() {
        let regs = RecordingRegs::default();
        let mut qp = pair(4);
        for i in 0..3u16 {
            let mut e = SubmissionEntry::flush(1);
            e.set_cid(i);
            qp.submit(&regs, &e).unwrap();
            let mut b = [0u8; SQE_SIZE];
            qp.sq.read(usize::from(i) * SQE_SIZE, &mut b).unwrap();
            assert_eq!(SubmissionEntry::from_bytes(&b), e);
        }
        assert!(qp.sq_full());
        assert!(qp.submit(&regs, &SubmissionEntry::flush(1)).is_err());
        let w = regs.writes.lock().clone();
        assert_eq!(w, [(0x1008, 1), (0x1008, 2), (0x1008, 3)]);
    }

    #[test]
    fn phase_tag_wraps_and_stale_entries_are_ignored() {
        let regs = RecordingRegs::default();
        let mut qp = pair(4);
        let mut cid = 0;
        for round in 0..5u32 {
            let phase = round % 2 == 0;
            for slot in 0..4u16 {
                // Keep the SQ window honest: submit, then complete.
                qp.submit(&regs, &SubmissionEntry::flush(1)).unwrap();
                let head = qp.sq_tail;
                assert_eq!(qp.pop().unwrap(), None, "nothing new yet");
                post(&qp, slot, cid, head, phase);
                let e = qp.pop().unwrap().unwrap();
                assert_eq!(e.cid(), cid);
                cid += 1;
            }
            assert_eq!(qp.phase(), !phase, "phase flips after each pass");
        }
        qp.ring_cq(&regs);
        assert_eq!(regs.writes.lock().last(), Some(&(0x100c, 0)));
    }

    #[test]
    fn completions_are_checked_against_the_queue() {
        let regs = RecordingRegs::default();
        let mut qp = pair(8);
        qp.submit(&regs, &SubmissionEntry::flush(1)).unwrap();
        post(&qp, 0, 0, 9, true);
        assert_eq!(qp.pop(), Err(ProtocolError::BadSqHead(9)));
        let mut qp = pair(8);
        qp.submit(&regs, &SubmissionEntry::flush(1)).unwrap();
        // Head beyond the tail: the device claims to have fetched more
        // than was submitted.
        post(&qp, 0, 0, 3, true);
        assert_eq!(qp.pop(), Err(ProtocolError::BadSqHead(3)));
        let mut qp = pair(8);
        let e = CompletionEntry::new(0, 0, 2, 0, true, Status::SUCCESS);
        qp.cq.write(0, &e.to_bytes()).unwrap();
        assert_eq!(qp.pop(), Err(ProtocolError::WrongSqId(2)));
    }

    #[test]
    fn random_completion_rings_never_panic() {
        let regs = RecordingRegs::default();
        let mut rng = pollfs_core::rng::SplitMix64::new(0x1234_5678_9abc_def1);
        for _ in 0..200 {
            let mut qp = pair(8);
            for _ in 0..5 {
                qp.submit(&regs, &SubmissionEntry::flush(1)).unwrap();
            }
            let mut junk = [0u8; 8 * CQE_SIZE];
            for b in junk.iter_mut() {
                *b = rng.next_u64() as u8;
            }
            qp.cq.write(0, &junk).unwrap();
            let mut pool = CidPool::new(7);
            for _ in 0..20 {
                if let Ok(Some(e)) = qp.pop() {
                    let _ = pool.release(e.cid());
                }
            }
        }
    }
}
