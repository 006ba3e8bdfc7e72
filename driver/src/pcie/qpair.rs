//! The PCIe queue pair: a ring pair with doorbells, plus the DMA scratch
//! that describes each command's data (PRP lists, a DSM range, an
//! identify buffer).
//!
//! Each command id owns a fixed slice of scratch, so describing a command
//! never allocates and a resubmission finds its PRP list still in place.

use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;

use pollfs_core::units::{FrameId, Nanos};

use super::frames::FrameMap;
use super::hal::{DmaAllocator, DmaRegion, Iova, Registers};
use super::prp;
use super::ring::Ring;
use crate::controller::MPS;
use crate::pcie::hal::DmaError;
use crate::qpair::ProtocolError;
use crate::spec::command::SubmissionEntry;
use crate::spec::completion::CompletionEntry;
use crate::transport::{Payload, Qpair, QpairError, SMALL_PAYLOAD};

/// A slot no command has been sent from: its command id (all ones) is
/// never handed out, as a queue has at most 4095 ids.
const UNSENT: SubmissionEntry = SubmissionEntry {
    dw: [0xffff_0000, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
};

/// One PCIe queue pair (admin or I/O).
pub struct PcieQpair<R: Registers, A: DmaAllocator> {
    regs: Arc<R>,
    ring: Ring<A::Region>,
    /// `list_pages` pages per command id.
    scratch: A::Region,
    list_pages: usize,
    frames: FrameMap,
    /// The last command sent with each id, its PRPs filled in; a slot
    /// never sent holds [`UNSENT`].
    sent: Vec<SubmissionEntry>,
    /// Reused buffers for building PRP lists (no allocation per command).
    pages: Vec<u64>,
    lists: Vec<u64>,
}

impl<R: Registers, A: DmaAllocator> core::fmt::Debug for PcieQpair<R, A> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PcieQpair")
            .field("qid", &self.ring.qid())
            .field("entries", &self.ring.entries())
            .field("frames", &self.frames)
            .finish_non_exhaustive()
    }
}

impl<R: Registers, A: DmaAllocator> PcieQpair<R, A> {
    /// A queue pair over fresh rings, with scratch for commands of up to
    /// `max_frames` frames each.
    pub(super) fn new(
        regs: Arc<R>,
        dma: &A,
        qid: u16,
        entries: u16,
        dstrd: u32,
        max_frames: usize,
        frames: FrameMap,
    ) -> Result<Self, crate::error::DriverError<DmaError>> {
        use crate::spec::command::SQE_SIZE;
        use crate::spec::completion::CQE_SIZE;
        let n = usize::from(entries);
        let ids = n.saturating_sub(1).max(1);
        // Enough list pages for the largest command, and at least one page
        // for a small payload.
        let list_pages = prp::list_pages_needed(max_frames, MPS).max(1);
        let ring = Ring::new(
            qid,
            entries,
            dma.alloc(n * SQE_SIZE)?,
            dma.alloc(n * CQE_SIZE)?,
            dstrd,
        )?;
        let scratch = dma.alloc(ids * list_pages * MPS)?;
        Ok(PcieQpair {
            regs,
            ring,
            scratch,
            list_pages,
            frames,
            sent: vec![UNSENT; ids],
            pages: Vec::with_capacity(max_frames),
            lists: Vec::with_capacity(list_pages),
        })
    }
    /// Bus address of the SQ ring (for Create I/O SQ and ASQ).
    pub fn sq_iova(&self) -> Iova {
        self.ring.sq_iova()
    }
    /// Bus address of the CQ ring (for Create I/O CQ and ACQ).
    pub fn cq_iova(&self) -> Iova {
        self.ring.cq_iova()
    }

    /// Describes a payload that needs scratch memory, then submits.
    fn submit_described(&mut self, cid: u16, payload: Payload<'_>) -> Result<(), QpairError> {
        let off = self.scratch_off(cid)?;
        let mut sqe = *self.sent.get(usize::from(cid)).ok_or(QpairError::BadCid)?;
        let described = self.describe(&mut sqe, payload, off);
        let slot = self
            .sent
            .get_mut(usize::from(cid))
            .ok_or(QpairError::BadCid)?;
        if let Err(e) = described {
            // Not sent after all: `resubmit` must not find it.
            *slot = UNSENT;
            return Err(e);
        }
        *slot = sqe;
        self.ring.submit(&*self.regs, slot)
    }

    fn scratch_off(&self, cid: u16) -> Result<usize, QpairError> {
        if usize::from(cid) >= self.sent.len() {
            return Err(QpairError::BadCid);
        }
        Ok(usize::from(cid) * self.list_pages * MPS)
    }

    fn scratch_iova(&self, off: usize) -> Result<Iova, QpairError> {
        self.scratch
            .iova()
            .checked_add(off as u64)
            .ok_or(QpairError::BadPayload)
    }

    fn frame(&self, f: FrameId) -> Result<u64, QpairError> {
        self.frames
            .iova(f)
            .map(|a| a.0)
            .ok_or(QpairError::BadPayload)
    }

    /// Fills in the data pointer for `payload`.
    fn describe(
        &mut self,
        sqe: &mut SubmissionEntry,
        payload: Payload<'_>,
        off: usize,
    ) -> Result<(), QpairError> {
        match payload {
            Payload::None => Ok(()),
            // One or two pages need no list (4.3): PRP1 is the first page
            // and PRP2, if any, the second. Most I/O is one page, so this
            // is the hot path.
            Payload::Frames([a]) => {
                sqe.set_prps(self.frame(*a)?, 0);
                Ok(())
            }
            Payload::Frames([a, b]) => {
                sqe.set_prps(self.frame(*a)?, self.frame(*b)?);
                Ok(())
            }
            Payload::Frames(frames) => self.build_list(sqe, frames, off),
            Payload::Out(bytes) => {
                if bytes.len() > SMALL_PAYLOAD {
                    return Err(QpairError::BadPayload);
                }
                self.scratch
                    .write(off, bytes)
                    .map_err(|_| QpairError::Broken)?;
                sqe.set_prps(self.scratch_iova(off)?.0, 0);
                Ok(())
            }
            Payload::In(len) => {
                if len > SMALL_PAYLOAD {
                    return Err(QpairError::BadPayload);
                }
                // What the device does not write reads back as zeros.
                self.scratch
                    .fill(off, SMALL_PAYLOAD, 0)
                    .map_err(|_| QpairError::Broken)?;
                sqe.set_prps(self.scratch_iova(off)?.0, 0);
                Ok(())
            }
        }
    }

    fn build_list(
        &mut self,
        sqe: &mut SubmissionEntry,
        frames: &[FrameId],
        off: usize,
    ) -> Result<(), QpairError> {
        if frames.len() > self.pages.capacity() {
            return Err(QpairError::BadPayload);
        }
        self.pages.clear();
        for &f in frames {
            let page = self.frame(f)?;
            self.pages.push(page);
        }
        let base = self.scratch_iova(off)?.0;
        self.lists.clear();
        self.lists
            .extend((0..self.list_pages as u64).map(|i| base + i * MPS as u64));
        let scratch = &self.scratch;
        let mut failed = false;
        let prps = prp::build(
            0,
            frames.len() * MPS,
            &self.pages,
            MPS,
            &self.lists,
            &mut |page, slot, value| {
                let at = off + page * MPS + slot * 8;
                failed |= scratch.write_u64(at, value).is_err();
            },
        )
        .map_err(|_| QpairError::BadPayload)?;
        if failed {
            return Err(QpairError::Broken);
        }
        sqe.set_prps(prps.prp1, prps.prp2);
        Ok(())
    }
}

impl<R: Registers + 'static, A: DmaAllocator + 'static> Qpair for PcieQpair<R, A> {
    type Error = DmaError;
    fn qid(&self) -> u16 {
        self.ring.qid()
    }
    fn entries(&self) -> u16 {
        self.ring.entries()
    }
    // Inlined into the caller's issue path: this is the hot path, and a
    // call boundary here costs more than the work it does.
    #[inline]
    fn submit(&mut self, sqe: &SubmissionEntry, payload: Payload<'_>) -> Result<(), QpairError> {
        self.submit_with(sqe.cid(), || *sqe, payload)
    }
    // The entry is built in its resend slot, and the SQ entry copied from
    // there.
    #[inline]
    fn submit_with(
        &mut self,
        cid: u16,
        build: impl FnOnce() -> SubmissionEntry,
        payload: Payload<'_>,
    ) -> Result<(), QpairError> {
        let slot = self
            .sent
            .get_mut(usize::from(cid))
            .ok_or(QpairError::BadCid)?;
        *slot = build();
        slot.set_cid(cid);
        // The command is described in place in its slot, so the common
        // cases (no data, one frame) copy the entry once.
        match payload {
            Payload::None => {}
            Payload::Frames([a]) => match self.frames.iova(*a) {
                Some(page) => slot.set_prps(page.0, 0),
                None => {
                    *slot = UNSENT;
                    return Err(QpairError::BadPayload);
                }
            },
            _ => return self.submit_described(cid, payload),
        }
        self.ring.submit(&*self.regs, slot)
    }
    fn resubmit(&mut self, cid: u16) -> Result<(), QpairError> {
        let sqe = self.sent.get(usize::from(cid)).ok_or(QpairError::BadCid)?;
        if sqe.cid() != cid {
            // Still the never-sent marker.
            return Err(QpairError::BadCid);
        }
        self.ring.submit(&*self.regs, sqe)
    }
    #[inline]
    fn poll(
        &mut self,
        _now: Nanos,
        max: usize,
        out: &mut Vec<CompletionEntry>,
    ) -> Result<usize, ProtocolError<DmaError>> {
        let mut n = 0;
        let result = loop {
            if n >= max {
                break Ok(n);
            }
            match self.ring.pop() {
                Ok(Some(e)) => {
                    out.push(e);
                    n += 1;
                }
                Ok(None) => break Ok(n),
                Err(e) => break Err(e),
            }
        };
        if n > 0 {
            self.ring.ring_cq(&*self.regs);
        }
        result
    }
    #[inline]
    fn poll_each(
        &mut self,
        _now: Nanos,
        max: usize,
        out: &mut Vec<CompletionEntry>,
        take: &mut impl FnMut(CompletionEntry) -> Result<bool, ProtocolError<DmaError>>,
    ) -> Result<usize, ProtocolError<DmaError>> {
        let mut n = 0;
        let mut offering = true;
        let result = loop {
            if n >= max {
                break Ok(n);
            }
            match self.ring.pop_high() {
                Ok(Some((mut e, off))) => {
                    n += 1;
                    // A plain success is offered without DW0 and DW1 (see
                    // `Qpair::poll_each`); an entry kept in `out` is read
                    // whole.
                    let partial = offering && e.plain_success();
                    if !partial {
                        if let Err(err) = self.ring.read_low(off, &mut e) {
                            break Err(err);
                        }
                    }
                    if offering {
                        match take(e) {
                            Ok(true) => continue,
                            Ok(false) => offering = false,
                            Err(err) => break Err(err),
                        }
                    }
                    if partial {
                        if let Err(err) = self.ring.read_low(off, &mut e) {
                            break Err(err);
                        }
                    }
                    out.push(e);
                }
                Ok(None) => break Ok(n),
                Err(e) => break Err(e),
            }
        };
        if n > 0 {
            self.ring.ring_cq(&*self.regs);
        }
        result
    }
    fn read_inbound(&self, cid: u16, dst: &mut [u8]) -> Result<(), QpairError> {
        if dst.len() > SMALL_PAYLOAD {
            return Err(QpairError::BadPayload);
        }
        let off = self.scratch_off(cid)?;
        self.scratch.read(off, dst).map_err(|_| QpairError::Broken)
    }
    fn reset(&mut self) -> Result<(), QpairError> {
        self.ring.reset().map_err(|_| QpairError::Broken)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pcie::hal::fake::{RecordingRegs, VecRegion};
    use crate::pcie::hal::DmaError;
    use core::sync::atomic::{AtomicU64, Ordering};

    /// Regions at distinct bus addresses, so PRPs can be told apart.
    #[derive(Default)]
    struct VecDma(AtomicU64);
    impl DmaAllocator for VecDma {
        type Region = VecRegion;
        fn alloc(&self, len: usize) -> Result<VecRegion, DmaError> {
            let at = self.0.fetch_add(1, Ordering::Relaxed);
            Ok(VecRegion::new(len.max(1), 0x1_0000_0000 + at * 0x100_0000))
        }
    }

    fn qpair(max_frames: usize) -> PcieQpair<RecordingRegs, VecDma> {
        let frames = FrameMap {
            base: Iova(0x8000_0000),
            count: 1024,
        };
        let regs = Arc::new(RecordingRegs::default());
        PcieQpair::new(regs, &VecDma::default(), 1, 8, 0, max_frames, frames).unwrap()
    }

    fn read_cmd(cid: u16) -> SubmissionEntry {
        let mut e = SubmissionEntry::read(1, 0, 8);
        e.set_cid(cid);
        e
    }

    #[test]
    fn one_and_two_frames_point_straight_at_the_frames() {
        let mut qp = qpair(4);
        qp.submit(&read_cmd(0), Payload::Frames(&[FrameId(3)]))
            .unwrap();
        assert_eq!(qp.sent[0].prp1(), 0x8000_3000);
        assert_eq!(qp.sent[0].prp2(), 0);
        qp.submit(&read_cmd(1), Payload::Frames(&[FrameId(1), FrameId(9)]))
            .unwrap();
        assert_eq!(
            (qp.sent[1].prp1(), qp.sent[1].prp2()),
            (0x8000_1000, 0x8000_9000)
        );
        assert_eq!(
            qp.regs.writes.lock().as_slice(),
            [(0x1008, 1), (0x1008, 2)],
            "one SQ tail doorbell per command"
        );
    }

    #[test]
    fn longer_transfers_get_a_list_in_the_command_ids_scratch() {
        let mut qp = qpair(4);
        let frames = [FrameId(5), FrameId(6), FrameId(7), FrameId(8)];
        qp.submit(&read_cmd(2), Payload::Frames(&frames)).unwrap();
        let sqe = qp.sent[2];
        assert_eq!(sqe.prp1(), 0x8000_5000);
        let list = qp.scratch_iova(qp.scratch_off(2).unwrap()).unwrap();
        assert_eq!(sqe.prp2(), list.0);
        let off = qp.scratch_off(2).unwrap();
        let entries: Vec<u64> = (0..3)
            .map(|i| qp.scratch.read_u64(off + i * 8).unwrap())
            .collect();
        assert_eq!(entries, [0x8000_6000, 0x8000_7000, 0x8000_8000]);
    }

    #[test]
    fn bad_payloads_and_ids_are_refused_before_the_doorbell() {
        let mut qp = qpair(2);
        let five = [FrameId(0); 5];
        assert_eq!(
            qp.submit(&read_cmd(0), Payload::Frames(&five)),
            Err(QpairError::BadPayload),
            "more frames than the queue was set up for"
        );
        assert_eq!(
            qp.submit(&read_cmd(0), Payload::Frames(&[FrameId(1024)])),
            Err(QpairError::BadPayload)
        );
        assert_eq!(
            qp.submit(&read_cmd(7), Payload::None),
            Err(QpairError::BadCid)
        );
        assert_eq!(qp.resubmit(3), Err(QpairError::BadCid), "never sent");
        assert!(qp.regs.writes.lock().is_empty());
    }

    #[test]
    fn poll_each_takes_entries_until_one_is_declined_then_keeps_them_in_order() {
        use crate::spec::completion::CQE_SIZE;
        use crate::spec::status::{generic, Status, StatusType};
        let mut qp = qpair(1);
        for cid in 0..4 {
            qp.submit(&read_cmd(cid), Payload::None).unwrap();
        }
        let error = Status::new(StatusType::Generic, generic::LBA_OUT_OF_RANGE, true);
        for (slot, status) in [Status::SUCCESS, error, Status::SUCCESS, Status::SUCCESS]
            .into_iter()
            .enumerate()
        {
            let dw0 = 100 + slot as u32;
            let e = CompletionEntry::new(dw0, slot as u16 + 1, 1, slot as u16, true, status);
            qp.ring.cq().write(slot * CQE_SIZE, &e.to_bytes()).unwrap();
        }
        let (mut taken, mut out) = (Vec::new(), Vec::new());
        let n = qp
            .poll_each(Nanos(0), 3, &mut out, &mut |e: CompletionEntry| {
                if !e.plain_success() {
                    return Ok(false);
                }
                taken.push(e.cid());
                Ok(true)
            })
            .unwrap();
        assert_eq!(n, 3, "at most `max` entries are read");
        assert_eq!(taken, [0]);
        assert_eq!(out.iter().map(|e| e.cid()).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(
            out.iter().map(|e| e.dw0).collect::<Vec<_>>(),
            [101, 102],
            "entries kept are read whole, a plain success after the declined one too"
        );
        let err = qp.poll_each(Nanos(0), 8, &mut out, &mut |e: CompletionEntry| {
            Err(ProtocolError::UnknownCid(e.cid()))
        });
        assert_eq!(err, Err(ProtocolError::UnknownCid(3)));
        assert_eq!(
            qp.regs.writes.lock().last(),
            Some(&(0x100c, 4)),
            "every entry read is consumed"
        );
    }

    #[test]
    fn small_payloads_travel_through_scratch_and_resubmit_resends() {
        let mut qp = qpair(1);
        let mut e = SubmissionEntry::deallocate(1, 1, 0);
        e.set_cid(4);
        qp.submit(&e, Payload::Out(&[7u8; 16])).unwrap();
        let off = qp.scratch_off(4).unwrap();
        assert_eq!(qp.sent[4].prp1(), qp.scratch_iova(off).unwrap().0);
        let mut b = [0u8; 16];
        qp.scratch.read(off, &mut b).unwrap();
        assert_eq!(b, [7u8; 16]);
        qp.read_inbound(4, &mut b).unwrap();
        assert_eq!(b, [7u8; 16]);
        qp.resubmit(4).unwrap();
        assert_eq!(qp.regs.writes.lock().len(), 2);
    }
}
