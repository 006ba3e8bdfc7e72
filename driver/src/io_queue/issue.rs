//! Issuing NVMe commands for engine requests and accounting their
//! completions: PRPs and DSM ranges, piecewise trim/zero, retry on status.

use pollfs_core::dev::{Completion, DevError, Tag};
use pollfs_core::units::FrameId;

use super::{NvmeQueue, Payload, Request, Rest, Slot, MAX_ZERO_BLOCKS};
use crate::controller::MPS;
use crate::hal::{DmaAllocator, DmaRegion, Registers};
use crate::prp;
use crate::queue::ProtocolError;
use crate::spec::command::{DsmRange, SubmissionEntry};
use crate::spec::completion::CompletionEntry;

impl<R: Registers + 'static, A: DmaAllocator + 'static> NvmeQueue<R, A> {
    pub(super) fn ensure_live(&mut self) -> Result<(), DevError> {
        if self.ctrl.is_dead() {
            self.fail_all(DevError::ControllerFailed);
            return Err(DevError::ControllerFailed);
        }
        // Another queue may reset the controller while this one re-creates
        // itself; try a few times before giving up on this submission.
        for _ in 0..3 {
            if self.generation == self.ctrl.generation() {
                return Ok(());
            }
            self.resync();
        }
        if self.generation == self.ctrl.generation() {
            Ok(())
        } else {
            Err(DevError::ControllerFailed)
        }
    }

    /// Allocates an id, fills in PRPs or the DSM range, and submits.
    pub(super) fn issue(
        &mut self,
        tag: u32,
        mut sqe: SubmissionEntry,
        payload: Payload<'_>,
    ) -> Result<(), DevError> {
        let cid = self.cids.alloc().ok_or(DevError::QueueFull)?;
        sqe.set_cid(cid);
        let scratch_off = usize::from(cid) * self.list_pages * MPS;
        let prepared = match payload {
            Payload::None => Ok(()),
            Payload::Range(range) => self
                .scratch
                .write(scratch_off, &range.to_bytes())
                .map(|()| {
                    sqe.set_prps(self.scratch.iova().0 + scratch_off as u64, 0);
                })
                .map_err(|_| DevError::InvalidRequest),
            Payload::Frames(frames) => self.build_prps(&mut sqe, frames, scratch_off),
        };
        if let Err(e) = prepared {
            self.cids.release(cid);
            return Err(e);
        }
        if let Some(slot) = self.slots.get_mut(usize::from(cid)) {
            *slot = Slot {
                sqe,
                tag,
                ..Slot::default()
            };
        }
        if self.qp.submit(self.ctrl.regs(), &sqe).is_err() {
            self.cids.release(cid);
            return Err(DevError::QueueFull);
        }
        self.unarmed.push(cid);
        self.stats.commands += 1;
        if let Some(r) = self.requests.get_mut(&tag) {
            r.outstanding += 1;
        }
        Ok(())
    }

    pub(super) fn build_prps(
        &mut self,
        sqe: &mut SubmissionEntry,
        frames: &[FrameId],
        scratch_off: usize,
    ) -> Result<(), DevError> {
        // One or two pages need no list (4.3): PRP1 is the first page and
        // PRP2, if any, the second. Most I/O is one page, so this is the
        // hot path.
        let iova = |f: &FrameId| self.frames.iova(*f).ok_or(DevError::InvalidRequest);
        match frames {
            [a] => {
                sqe.set_prps(iova(a)?, 0);
                return Ok(());
            }
            [a, b] => {
                sqe.set_prps(iova(a)?, iova(b)?);
                return Ok(());
            }
            _ => {}
        }
        self.pages.clear();
        for &f in frames {
            self.pages
                .push(self.frames.iova(f).ok_or(DevError::InvalidRequest)?);
        }
        let base = self.scratch.iova().0 + scratch_off as u64;
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
                let off = scratch_off + page * MPS + slot * 8;
                failed |= scratch.write_u64(off, value).is_err();
            },
        )
        .map_err(|_| DevError::InvalidRequest)?;
        if failed {
            return Err(DevError::InvalidRequest);
        }
        sqe.set_prps(prps.prp1, prps.prp2);
        Ok(())
    }

    pub(super) fn new_request(&mut self, rest: Option<Rest>) -> u32 {
        let tag = self.requests.insert(Request {
            outstanding: 0,
            error: None,
            rest,
        });
        if rest.is_some() {
            self.with_rest.push_back(tag);
        }
        tag
    }

    /// Hands a request back if nothing of it is outstanding or unissued.
    pub(super) fn maybe_complete(&mut self, tag: u32) {
        let finished = match self.requests.get(&tag) {
            Some(r) => r.outstanding == 0 && r.rest.is_none(),
            None => false,
        };
        if finished {
            if let Some(r) = self.requests.remove(&tag) {
                self.done.push_back(Completion {
                    tag: Tag(tag),
                    result: r.error.map_or(Ok(()), Err),
                });
            }
        }
    }

    /// Records an issue failure against a request; a request nothing of
    /// which reached the device is withdrawn so `submit` can report it.
    pub(super) fn abandon(&mut self, tag: u32, e: DevError) -> Option<DevError> {
        let r = self.requests.get_mut(&tag)?;
        r.rest = None;
        if r.outstanding == 0 {
            self.requests.remove(&tag);
            // Never handed to the engine: the tag is free at once.
            self.requests.release(tag);
            return Some(e);
        }
        r.error.get_or_insert(e);
        None
    }

    /// Issues further pieces of trim/zero requests while ids are free.
    pub(super) fn pump(&mut self) {
        while self.cids.available() > 0 {
            let Some(&tag) = self.with_rest.front() else {
                return;
            };
            let rest = self.requests.get(&tag).and_then(|r| r.rest);
            let Some(mut rest) = rest else {
                self.with_rest.pop_front();
                self.maybe_complete(tag);
                continue;
            };
            let nsid = self.ctrl.config().nsid;
            let (sqe, payload, n) = if rest.zeroes {
                let n = rest.blocks.min(MAX_ZERO_BLOCKS);
                (
                    SubmissionEntry::write_zeroes(nsid, rest.lba, n as u32),
                    Payload::None,
                    n,
                )
            } else {
                let n = rest.blocks.min(u64::from(u32::MAX));
                let range = DsmRange {
                    attributes: 0,
                    blocks: n as u32,
                    slba: rest.lba,
                };
                (
                    SubmissionEntry::deallocate(nsid, 1, 0),
                    Payload::Range(range),
                    n,
                )
            };
            match self.issue(tag, sqe, payload) {
                Ok(()) => {
                    rest.lba += n;
                    rest.blocks -= n;
                    if let Some(r) = self.requests.get_mut(&tag) {
                        r.rest = (rest.blocks > 0).then_some(rest);
                    }
                }
                Err(DevError::QueueFull) => return,
                Err(e) => {
                    if let Some(r) = self.requests.get_mut(&tag) {
                        r.rest = None;
                        r.error.get_or_insert(e);
                    }
                }
            }
        }
    }

    /// One NVMe command finished: release its id and account it to its
    /// request.
    pub(super) fn finish(&mut self, cid: u16, result: Result<(), DevError>) {
        if !self.cids.release(cid) {
            return;
        }
        let tag = self.slots.get(usize::from(cid)).map_or(u32::MAX, |s| s.tag);
        if result.is_ok() {
            self.ctrl.note_success();
        }
        if let Some(r) = self.requests.get_mut(&tag) {
            r.outstanding = r.outstanding.saturating_sub(1);
            if let Err(e) = result {
                r.error.get_or_insert(e);
                r.rest = None;
            }
        }
        self.maybe_complete(tag);
    }

    pub(super) fn resubmit(&mut self, cid: u16) -> bool {
        let Some(slot) = self.slots.get_mut(usize::from(cid)) else {
            return false;
        };
        slot.retries += 1;
        slot.deadline = None;
        slot.abort_by = None;
        let sqe = slot.sqe;
        if self.qp.submit(self.ctrl.regs(), &sqe).is_err() {
            return false;
        }
        self.unarmed.push(cid);
        self.stats.commands += 1;
        self.stats.retries += 1;
        true
    }

    pub(super) fn on_completion(&mut self, e: CompletionEntry) -> Result<(), ProtocolError> {
        let cid = e.cid();
        if !self.cids.is_busy(cid) {
            return Err(ProtocolError::UnknownCid(cid));
        }
        let status = e.status();
        let slot = self
            .slots
            .get(usize::from(cid))
            .copied()
            .unwrap_or_default();
        let max = self.ctrl.config().max_retries;
        if status.may_retry() && slot.retries < max && !slot.timed_out && self.resubmit(cid) {
            return Ok(());
        }
        self.finish(cid, status.to_result());
        Ok(())
    }

    pub(super) fn reap(&mut self) -> Result<(), ProtocolError> {
        let mut n = 0u32;
        let limit = u32::from(self.qp.entries());
        let result = loop {
            if n >= limit {
                break Ok(());
            }
            match self.qp.pop() {
                Ok(Some(e)) => {
                    n += 1;
                    if let Err(err) = self.on_completion(e) {
                        break Err(err);
                    }
                }
                Ok(None) => break Ok(()),
                Err(err) => break Err(err),
            }
        };
        if n > 0 {
            self.qp.ring_cq(self.ctrl.regs());
        }
        result
    }
}
